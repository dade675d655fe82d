//! # adrules-burn
//!
//! The shared rules of [`adrules_core`] as [burn](https://burn.dev) autodiff operations
//! (burn `=0.22.1`).
//!
//! - [`BurnBackend`]: the core [`Backend`](adrules_core::Backend) trait on burn's float
//!   primitives with burn's own ops, so every shared pullback and pushforward runs on every
//!   burn backend and device.
//! - [`forward`] / [`forward_autodiff`]: an [`Op`] (permuted add, partial trace, pairwise
//!   contraction) on the primitives of any backend `B`, recorded on `Autodiff<B, C>` as one
//!   [`Backward`](burn_autodiff::ops::Backward) node whose backward is the core's pullback.
//! - [`apply`], [`contract`], [`add`], [`trace`]: the same on burn's user-facing
//!   [`Tensor`](burn_tensor::Tensor) (routed to Flex, burn's default CPU backend).
//! - [`take_backward_errors`]: what went wrong inside burn's infallible backward pass.
//!
//! ## Conventions
//! The core's: 0-based axes, permutation `p` puts input axis `p[m]` at output axis `m`,
//! contraction specs split A as `(open_a, contr_a)` and B as `(contr_b, open_b)` (see
//! [`adrules_core::spec`]). burn has f32 and f64 float tensors and no complex dtype: complex
//! data is [`Error::Unsupported`](adrules_core::Error::Unsupported). burn's backward is not
//! differentiable itself (no double backward).

#![warn(missing_docs)]

mod backend;
mod flex;
mod implicit;
pub mod node;
mod op;
mod primitive;
mod tensor;

pub use backend::{BurnBackend, BurnTensor};
pub use implicit::Implicit;
pub use node::take_backward_errors;
pub use op::Op;
pub use primitive::{forward, forward_autodiff};
pub use tensor::{Operand, add, apply, contract, trace};

// The burn crates this adapter is built on, at the pinned version (=0.22.1).
pub use {burn_autodiff, burn_backend, burn_dispatch, burn_flex, burn_tensor};
