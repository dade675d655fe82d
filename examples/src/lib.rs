//! The examples of adrules, as a library that their thin binaries (`src/bin/`) and their tests
//! (`tests/it/`) call:
//!
//! - [`ising2d`] (binary `ising2d`, the main example): the 2D Ising model on an infinite strip
//!   of periodic width W, the free energy from a tensor network's leading eigenvalue, the
//!   energy by reverse mode through the network and an implicit eigenvector, the specific heat
//!   by the implicit pushforward and by second order, against Onsager's exact solution. The
//!   model is [`ising`].
//! - [`ctmrg`] (binary `ctmrg`): the same model on the infinite square lattice by the corner
//!   transfer matrix renormalization group, differentiated through its fixed point by the
//!   implicit function theorem, against Onsager's and Yang's exact solutions. The model,
//!   the gauge fixing and the rules of the step are [`ctm`].
//! - [`deq`] (binary `deq`, features `burn` and/or `candle`): a deep-equilibrium classifier
//!   trained through the implicit gradient of its fixed point on burn and candle, their loss
//!   curves compared, and the implicit against the unrolled gradient's peak heap.
//! - [`own_rule`]: writing your own rule as a downstream crate would: a numerically stable
//!   `logsumexp` over chosen axes and a two-output `(max, argmax)`, checked by `check_rule`,
//!   run as candle and burn ops (tests `own_rule`).
//! - [`cli`]: what both share (backend choice, output files written only on success, charts);
//!   [`onsager`]: the exact solutions.
//!
//! The binaries `quickstart` (strided backend), `candle` (feature `candle`) and
//! `burn_quickstart` (feature `burn`) are self-contained programs. Run any of them with
//! `cargo run --release -p adrules-examples --bin NAME -- --help`.
//!
//! The library installs [`HEAP`] (peak_alloc's counting allocator) as the global allocator of
//! every program and test that links it, so that `ctmrg --memory` can report peak heap.

pub mod cli;
pub mod ctm;
pub mod ctmrg;
pub mod deq;
pub mod ising;
pub mod ising2d;
pub mod onsager;
pub mod own_rule;

/// Counts the heap in use and its peak (`ctmrg --memory`, and the memory test).
#[global_allocator]
pub static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;
