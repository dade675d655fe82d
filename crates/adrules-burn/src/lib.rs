//! # adrules-burn
//!
//! The shared rules of [`adrules_core`] as [burn](https://burn.dev) autodiff operations
//! (every burn crate pinned `=0.22.1`).
//!
//! - [`BurnBackend`]: the core [`Backend`](adrules_core::Backend) trait on burn's float
//!   primitives ([`BurnTensor`]) with burn's own ops, so every shared pullback and pushforward
//!   runs on every burn backend and device. On Flex, burn's CPU backend, the primitives run
//!   instead through adrules-strided's kernels on Flex's own buffers (strided views, no copy
//!   of transposed or broadcast operands; contractions on faer's GEMM).
//! - [`forward`] / [`forward_autodiff`]: an [`Op`] — a core
//!   [`Primitive`](adrules_core::rules::Primitive) call (permuted add; generalized trace:
//!   diagonals, traces and sums; pairwise contraction with batch axes; each optionally
//!   updating an input C) or a whole [`NetworkPlan`](adrules_core::network::NetworkPlan)
//!   with any number of operands — on the primitives of any backend `B`; on
//!   `Autodiff<B, C>` it is one [`Backward`](burn_autodiff::ops::Backward) node with every
//!   input as a parent, whose backward is the core's pullback (see [`forward_autodiff`] for
//!   checkpointing and failures).
//! - [`apply`], [`contract`], [`add`], [`trace`], [`network`], [`einsum`], [`ncon`]: the
//!   same on burn's user-facing [`Tensor`](burn_tensor::Tensor), routed to the backend the
//!   tensors live on (with autodiff when an input has it): Flex, and with this crate's
//!   features (`ndarray`, `wgpu`, `vulkan`, `webgpu`, `metal`, `cuda`, `rocm`, passed through
//!   to burn) NdArray and burn's cubecl backend, on the tensors' device.
//! - [`Implicit`]: implicit functions whose solver and conditions are written with burn
//!   tensors on the inputs' device; the pullback solves with `Aᴴ` and applies `Bᴴ`, both from
//!   burn's own backward pass: matrix-free (GMRES, CG) on the device through the core's
//!   [`implicit::device`](adrules_core::implicit::device), no Jacobian assembled and no
//!   vector copied to the host; dense (LU, Cholesky, small systems) on the host through the
//!   core's [`VjpMaps`](adrules_core::implicit::VjpMaps).
//! - [`apply_rule`] ([`mod@rule`]): any [`Rule`](adrules_core::rule::Rule) of the core, a
//!   downstream crate's own operation with any number of inputs and outputs, on burn's
//!   user-facing tensors: one node (several outputs: one node and a selector per output,
//!   the core's `rule::split`) whose backward is the rule's pullback.
//! - [`linalg`]: SVD (thin, full, truncated), QR, symmetric and clustered eigendecomposition
//!   on burn tensors, each one node of burn's graph whose backward is the core's pullback.
//! - `BurnBackend::cube` (with a cubecl feature): the core backend on a cubecl device (wgpu,
//!   CUDA, …), for the core's API ([`forward`], the conformance suite, `ising2d --device`).
//! - [`try_backward`] and [`take_backward_errors`]: what went wrong inside burn's infallible
//!   backward pass, as typed errors, on the thread that built the graph.
//!
//! Every op above is a core [`Rule`](adrules_core::rule::Rule) (a primitive call, a network
//! plan, a decomposition, an implicit function) recorded by the crate's one bridge, the same
//! that [`apply_rule`] runs a downstream crate's rule through.
//!
//! ## Example
//! ```
//! use adrules_burn::burn_tensor::{DType, Device, Tensor, TensorData};
//! use adrules_core::{ContractSpec, rules::ContractOp};
//!
//! # fn main() -> adrules_core::Result<()> {
//! let device = Device::flex().autodiff();
//! let a = Tensor::<2>::from_data(TensorData::new(vec![1.0f64, 2., 3., 4.], [2, 2]), (&device, DType::F64))
//!     .require_grad();
//! let b = Tensor::<2>::from_data(TensorData::new(vec![1.0f64, 0., 1., 1.], [2, 2]), (&device, DType::F64));
//! // C[k, i] = Σ_j A[i, j]·B[j, k]: one node of burn's graph, backward by the shared rule.
//! let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ki")?);
//! let c: Tensor<2> = adrules_burn::contract(&op, &a, &b)?;
//! let grads = c.sum().backward();
//! let ga: Vec<f64> = a.grad(&grads).unwrap().into_data().iter::<f64>().collect();
//! assert_eq!(ga, vec![1.0, 2.0, 1.0, 2.0]); // row sums of B, for each row of A
//! # Ok(())
//! # }
//! ```
//!
//! ## Conventions
//! The core's: 0-based axes, permutation `p` puts input axis `p[m]` at output axis `m`,
//! trace specs partition A's axes into kept groups (output axes, diagonals when a group has
//! several axes) and summed groups, contraction specs split A as `(batch_a, open_a, contr_a)`
//! and B as `(batch_b, contr_b, open_b)` (see [`adrules_core::spec`]). burn has f32 and f64
//! float tensors and no complex dtype: complex data is
//! [`Error::Unsupported`](adrules_core::Error::Unsupported), conjugation flags are no-ops.
//! Scalars follow burn's convention of shape `[1]`. burn's backward is not itself
//! differentiable (no double backward).
//!
//! ## Dependencies
//! `burn-tensor` (features `std`, `flex`, `autodiff`, `extension`, and the backend features
//! above when enabled: the user-facing tensor,
//! Flex and autodiff in the dispatch enum, and `try_into_primitive` / `from_primitive`),
//! `burn-dispatch` (the dispatch tensor the routing inspects), `burn-backend` (the backend
//! traits), `burn-autodiff` (`Backward`, checkpointing) and `burn-flex` (the fast path). Not
//! the `burn` facade: its `#[backend_extension]` generates dispatch routing only for listed
//! backends (panicking on others) and no gradients, while the routing here is a few lines
//! that return typed errors.

#![warn(missing_docs)]

mod backend;
mod convert;
mod flex;
mod handle;
mod implicit;
pub mod linalg;
mod node;
pub mod rule;
mod rules;
mod tensor;

pub use backend::BurnBackend;
pub use handle::BurnTensor;
pub use implicit::Implicit;
pub use node::{take_backward_errors, try_backward};
pub use rule::apply as apply_rule;
pub use rules::{Op, forward, forward_autodiff};
pub use tensor::{
    Operand, add, apply, contract, einsum, einsum_hvp, ncon, network, network_hvp, trace,
};

// The burn crates this adapter is built on, at the pinned version (=0.22.1).
pub use {burn_autodiff, burn_backend, burn_dispatch, burn_flex, burn_tensor};

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
