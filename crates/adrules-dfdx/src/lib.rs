//! # adrules-dfdx
//!
//! The shared adrules rules as ops on [dfdx](https://github.com/coreylowman/dfdx)'s tape
//! (`dfdx =0.13.0`, CPU, `f32` and `f64`). dfdx has been frozen since 2023; this adapter is
//! deliberately small and isolated, for users with typed-shape dfdx models.
//!
//! - [`add`], [`trace`], [`contract`]: permuted add, generalized partial trace (diagonals,
//!   traces, sums) and pairwise contraction (with batch axes) of dfdx tensors, recorded on
//!   dfdx's tape. Each is one call of the core's
//!   [`Primitive`](adrules_core::rules::Primitive) ([`AddOp`], [`TraceOp`], [`ContractOp`]),
//!   forward and backward on the strided backend. As in every adapter, the spec comes first,
//!   then the operands: `contract(&op, a, b)`, `add(&op, a)`, `trace(&op, a)`,
//!   `network(&plan, operands)`, `ncon(indices, operands)`, `einsum(subscripts, operands)`.
//! - [`network`], [`ncon`], [`einsum`]: a whole tensor network (a prepared
//!   [`NetworkPlan`](adrules_core::network::NetworkPlan), an ncon list or an Einstein string)
//!   as **one** op; its backward pass is the network pullback of [`adrules_core::network`],
//!   which gives every operand's cotangent at once.
//! - [`apply_rule`]: any one-output [`Rule`](adrules_core::rule::Rule) of the core, a
//!   downstream crate's own operation, as one op whose backward is the rule's pullback (a
//!   rule with several outputs is `Error::Unsupported`: dfdx's tape follows one tensor).
//!   It is the crate's one bridge: the primitives (the core's
//!   [`PrimitiveCall`](adrules_core::rule::PrimitiveCall)), the networks and [`implicit`]
//!   are core rules recorded by it.
//! - [`implicit`]: an implicit function (a solver plus conditions) as one op: its
//!   [`Linearization`](adrules_core::implicit::Linearization) at the solution is a core
//!   rule whose pullback is the implicit-function pullback of [`adrules_core::implicit`].
//! - [`DfdxBackend`]: the core [`Backend`](adrules_core::Backend) on dfdx tensors of rank
//!   ≤ 6 ([`DfdxTensor`]), to run any core rule on dfdx data outside the tape.
//!
//! ## How an op is recorded
//! dfdx's own op helpers (`try_binary_op`, the kernel traits, the paired gradient accessors)
//! are crate-private, so every op uses the public tape pieces only: `split_tape` on each
//! operand, the tapes joined, the result computed, `Tape::add_backward_op` with a closure
//! that reads the output's gradient and adds into the operands' gradients through
//! `Gradients::get_or_alloc_mut`, then `put_tape` on the result. Operand keys are dfdx
//! ghosts (id and shape, no data), so the closure keeps alive only what the rule's pullback
//! reads.
//!
//! ## Shapes
//! dfdx shapes are static-rank tuples (rank ≤ 6) of `Const<N>` or `usize` dimensions. Every
//! op is generic over its output's shape type `Out`, named by the caller — by annotation,
//! `let c: Tensor<Rank2<3, 5>, f64, Cpu, _> = contract(&op, a, b)?;`, or turbofish — and
//! checked at run time against the dims the op produces: a wrong rank is
//! [`Error::RankMismatch`], a `Const` dimension that differs is [`Error::InvalidArgument`]
//! (argument `"output"`). A `usize` axis accepts any size. Every check runs before anything
//! is computed. The operands' own shape types are free.
//!
//! ## Which operand carries the tape
//! dfdx puts the tape on the left operand and has no `NoneTape: Merge<OwnedTape>`, so its
//! `matmul(untraced, traced)` does not compile. [`contract`] joins tapes with [`JoinTape`]
//! instead, implemented for every pair: the tape may be on the left operand, the right one,
//! or both, and the result carries the joined tape (see [`JoinTape`] for the table). The
//! many-operand ops take [`Operands`] (tuples with tapes joined left to right by
//! [`JoinTapes`], or a `Vec`). As in dfdx, when the result is traced **every** operand gets a
//! gradient (a `NoneTape` parameter included); without any tape no backward closure is
//! recorded and no pullback is built.
//!
//! ## Coefficients, flags, dtypes
//! α is a real constant (a complex α is [`Error::DTypeMismatch`]); β must be 0, since every op
//! returns a fresh tensor (write `β·C + …` with dfdx's ops, which differentiate through C).
//! Conjugation flags are accepted and are no-ops on real data. Both operands of a
//! contraction have dfdx's element type `E` ([`DfdxElement`]: `f32` or `f64`).
//!
//! ## Cost: copies per call
//! dfdx exposes no raw buffer or strides, so data crosses into the strided backend by copy.
//! Exactly (n = element count of the tensor named):
//! - **forward**, per operand: dfdx's `try_contiguous` (free when the operand is contiguous;
//!   otherwise dfdx's own copy, with its own backward), then **one copy** of the operand
//!   (dfdx's `as_vec`) into a buffer the strided tensor takes over. The rule writes the
//!   result into a fresh buffer, which is **moved** into the dfdx result (no copy).
//! - **forward, kept for the backward pass**: [`contract`] keeps its two operand copies until
//!   the backward pass runs (the pullback reads them), i.e. one extra copy of each operand's
//!   memory while the tape lives; [`add`] and [`trace`] keep nothing but shapes.
//! - **backward**: **no copy**. The output cotangent's buffer and each operand's gradient
//!   buffer are moved out of dfdx's gradient map into strided tensors and moved back after;
//!   the rule accumulates into them in place (`β = 1`): one contraction per operand of
//!   [`contract`], one permuted add for [`add`], one diagonal update for [`trace`]. The
//!   `gradient_buffers_are_updated_in_place` test checks the allocations are the same.
//! - [`network`]: one copy of each operand in, the result moved out; the network pullback
//!   keeps the intermediates its pairwise pullbacks read until the backward pass, which
//!   allocates each operand's cotangent and adds it into the lent gradient buffer in place.
//! - [`implicit`]: one host copy of each operand and one of `y` (the linearization keeps its
//!   own) in the forward pass; one copy of `ȳ` to the host, and one in-place add per operand
//!   of the fresh cotangent the rule returns, in the backward pass.
//! - [`DfdxBackend`] primitives: one copy of each tensor read (and of C when `β ≠ 0`), the
//!   result moved back.
//!
//! ## Errors
//! Every function returns a typed [`Error`]; dfdx's own failures become
//! [`Error::Backend`] ([`from_dfdx`]). Nothing panics inside a backward closure, but dfdx's
//! backward closures can only return its `CpuError`, which has no room for a message:
//! an adrules failure there is returned to dfdx as `CpuError::WrongNumElements` (stopping the
//! pass) and its typed error is reported to the core's
//! [`BackwardReporter`](adrules_core::error::backward::BackwardReporter) of the thread that
//! recorded the op, to be read there with [`take_backward_errors`]. [`try_backward`] runs the
//! pass and returns that typed error directly. (dfdx's `backward()` unwraps, i.e. panics on
//! any failure, ours or dfdx's: prefer `try_backward`.)
//!
//! ## Limits
//! CPU only (dfdx's CUDA device is not served: its gradient buffers are device memory);
//! `f32` and `f64` (dfdx has no complex dtype); rank ≤ 6; no second-order derivatives (dfdx
//! has none). Tensors with a zero-size dimension work in our ops, but dfdx's reductions
//! (`sum`, …) and its `as_vec` index one element of such a tensor and panic.
//!
//! ## Example
//! ```
//! use adrules_core::{ContractSpec, rules::ContractOp};
//! use adrules_dfdx::dfdx::prelude::*;
//! use adrules_dfdx::{contract, try_backward};
//!
//! # fn main() -> Result<(), adrules_core::Error> {
//! let dev: Cpu = Default::default();
//! let x: Tensor<Rank3<2, 3, 4>, f64, Cpu> = dev.sample_normal();
//! let w: Tensor<Rank3<4, 3, 5>, f64, Cpu> = dev.sample_normal();
//! // y[k, i] = Σ_{j, l} x[i, j, l]·w[l, j, k], with the tape on the right operand.
//! let op = ContractOp::new(ContractSpec::from_labels("ijl", "ljk", "ki")?);
//! let y: Tensor<Rank2<5, 2>, f64, Cpu, _> = contract(&op, x.clone(), w.leaky_trace())?;
//! let grads = try_backward(y.square().sum())?;
//! assert_eq!(grads.get(&w).shape(), &(Const::<4>, Const::<3>, Const::<5>));
//! assert_eq!(grads.get(&x).shape(), &(Const::<2>, Const::<3>, Const::<4>));
//! # Ok(())
//! # }
//! ```
//!
//! [`AddOp`]: adrules_core::rules::AddOp
//! [`TraceOp`]: adrules_core::rules::TraceOp
//! [`ContractOp`]: adrules_core::rules::ContractOp
//! [`Error`]: adrules_core::Error
//! [`Error::RankMismatch`]: adrules_core::Error::RankMismatch
//! [`Error::InvalidArgument`]: adrules_core::Error::InvalidArgument
//! [`Error::DTypeMismatch`]: adrules_core::Error::DTypeMismatch
//! [`Error::Backend`]: adrules_core::Error::Backend

#![warn(missing_docs)]

mod backend;
mod bridge;
mod element;
mod error;
mod implicit;
mod network;
mod operands;
mod ops;
mod record;
mod rule;
mod tape;

/// The typed errors of adrules failures inside dfdx backward passes of graphs built on this
/// thread (the core's, see [`adrules_core::error::backward`]); [`try_backward`] returns the
/// first one directly.
pub use adrules_core::take_backward_errors;
pub use backend::{DfdxBackend, DfdxTensor, MAX_RANK, Ranked};
/// The dfdx version this crate is built against (`=0.13.0`), for callers that need the exact
/// same types.
pub use dfdx;
pub use element::DfdxElement;
pub use error::{from_dfdx, try_backward};
pub use implicit::implicit;
pub use network::{einsum, ncon, network};
pub use operands::Operands;
pub use ops::{add, contract, trace};
pub use rule::apply_rule;
pub use tape::{JoinTape, JoinTapes};

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
