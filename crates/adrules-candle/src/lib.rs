//! # adrules-candle
//!
//! The shared adrules rules on [candle](https://github.com/huggingface/candle) tensors
//! (`candle-core =0.11.1`).
//!
//! - [`CandleBackend`]: the core [`Backend`](adrules_core::Backend) trait on
//!   `candle_core::Tensor`, so every rule of `adrules_core` (pullbacks, pushforwards, network
//!   and implicit-function rules) runs on candle tensors of any device.
//! - [`add`], [`trace`], [`contract`]: the primitives as differentiable candle ops, spec
//!   first (`contract(&op, a, b)`). Use them like any candle op; `loss.backward()` reaches
//!   them and calls the shared pullback.
//! - [`einsum`], [`ncon`], [`fn@network`] ([`mod@network`]): tensor networks of any number of
//!   operands, run as the core's contraction plan with one custom op per step (candle
//!   differentiates at most three inputs per op; the module explains the design).
//! - [`linalg`]: SVD (thin, full, truncated), QR, eigh and the clustered eigh as
//!   differentiable candle ops
//!   returning the core's factor types; `backward()` through any factor runs the core's
//!   decomposition pullbacks.
//! - [`apply_rule`] ([`mod@rule`]): any [`Rule`](adrules_core::rule::Rule) of the core, a
//!   downstream crate's own operation with any number of inputs and outputs, as a
//!   differentiable candle op whose backward is the rule's pullback (more than 3 inputs are
//!   packed into one op). It is the crate's one bridge: every op here is a core rule
//!   recorded by it (the primitives as `PrimitiveCall`, whose output the bridge writes
//!   straight into candle's storage; each step of a network; the decompositions of
//!   [`linalg`]; [`Implicit`]; [`fn@implicit`]'s linearization at its solution).
//! - [`fn@implicit`] and [`CandleConditions`] ([`mod@implicit`]): implicit functions whose
//!   conditions are written with candle tensors; candle's backward gives `Aᴴ·u` and `Bᴴ·u`,
//!   the core's implicit rule does the rest, and the op registers the implicit pullback (the
//!   solver is never differentiated).
//!
//! ## How an op is wired into candle's autograd
//! Every primitive call is one node of the bridge's custom op over the core's
//! [`PrimitiveCall`](adrules_core::rule::PrimitiveCall) (`CustomOp1` for add and trace,
//! `CustomOp2` for contract):
//! - **forward**, zero-copy on candle's storage: on CPU, the kernels of `adrules-strided`
//!   (blocked transposing add, TTGT contraction on faer's GEMM, trace on the diagonal view)
//!   read candle's buffers in place through their layouts (strides, offsets and stride-0
//!   broadcasts included) and write the output buffer candle then owns. On CUDA and Metal
//!   (features `cuda` and `metal` of this crate turn on candle's), one kernel per primitive
//!   written once over candle's `BackendStorage` trait: TTGT on the device's batched GEMM
//!   (batch axes as its batch), copying an operand only when its memory order cannot be
//!   handed to the GEMM as a batch of plain or transposed matrices; the generalized trace as
//!   one reduction over a strided diagonal view. That device-generic code is type-checked in every build (against
//!   candle's placeholder GPU backends when the features are off) and tested on CPU storage
//!   against the strided kernels. [`CandleBackend`]'s primitives run the same forward
//!   without recording a node.
//! - **backward**: `CustomOp::bwd` builds the rule's pullback at the primal point from
//!   candle's graph (the core's driver
//!   [`rule::pullback_at`](adrules_core::rule::pullback_at): the arithmetic of
//!   [`Primitive::pullback_at`](adrules_core::rules::Primitive::pullback_at), no
//!   recomputation of the primal) on a [`CandleBackend`] for the cotangent's device, and
//!   evaluates it: the cotangents are contractions, permuted adds or diagonal updates done
//!   with the same kernels. Only inputs that candle tracks (variables, or tensors computed
//!   from one) get a cotangent; a constant operand costs nothing. The graph node keeps the
//!   op's inputs (which candle keeps anyway) and nothing else.
//! - Gradients of a tensor used several times are summed by candle, as for its own ops.
//!
//! ## Coefficients, flags, dtypes
//! `f32` and `f64` (candle has no complex dtype: [`Error::Unsupported`]). Operands of a
//! contraction may mix them: the result has the joined dtype and each gradient its operand's
//! (the pullbacks project). α is a real constant; β must be 0, since an op returns a fresh
//! tensor (write `β·C + …` with candle's `affine` and `+`). Conjugation flags are accepted and
//! are no-ops on real data.
//!
//! ## Errors
//! Every function checks its arguments first and reports a typed [`Error`]: unsupported
//! dtypes, ranks and shapes that do not fit the spec, operands on different devices.
//! - The differentiable ops ([`add`], [`trace`], [`contract`], [`einsum`], [`ncon`],
//!   [`fn@network`], [`fn@implicit`]) return `candle_core::Result`, as candle's own ops do, so
//!   `?` works in candle code; the typed error travels inside candle's error ([`to_candle`])
//!   and [`adrules_error`] gets it back.
//! - A failure inside candle's backward pass (a pullback given a cotangent of the wrong
//!   shape, say) is a candle error carrying the typed error, which `backward()` passes on;
//!   [`try_backward`] runs the backward pass and returns that typed error directly. Nothing
//!   panics inside the backward pass.
//! - [`CandleBackend`] implements the core's `Backend` and returns `adrules_core::Result`;
//!   candle's own failures become [`Error::Backend`] ([`from_candle`]).
//!
//! ## Example
//! ```
//! use adrules_candle::{candle_core::{Device, Var}, contract};
//! use adrules_core::{ContractSpec, rules::ContractOp};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let a = Var::randn(0f64, 1.0, (2, 3, 4), &Device::Cpu)?;
//! let b = Var::randn(0f64, 1.0, (4, 3, 5), &Device::Cpu)?;
//! // c[k, i] = Σ_{j, l} a[i, j, l]·b[l, j, k]
//! let op = ContractOp::new(ContractSpec::from_labels("ijl", "ljk", "ki")?);
//! let c = contract(&op, a.as_tensor(), b.as_tensor())?;
//! assert_eq!(c.dims(), &[5, 2]);
//! let grads = c.sqr()?.sum_all()?.backward()?;
//! assert_eq!(grads.get(a.as_tensor()).unwrap().dims(), &[2, 3, 4]);
//!
//! // A wrong shape is a typed error inside candle's.
//! let e = contract(&op, b.as_tensor(), a.as_tensor()).unwrap_err();
//! assert!(matches!(
//!     adrules_candle::adrules_error(&e),
//!     Some(adrules_core::Error::ShapeMismatch { .. })
//! ));
//! # Ok(())
//! # }
//! ```
//!
//! [`Error`]: adrules_core::Error
//! [`Error::Unsupported`]: adrules_core::Error::Unsupported
//! [`Error::Backend`]: adrules_core::Error::Backend

#![warn(missing_docs)]

mod backend;
mod convert;
mod cpu;
mod forward;
pub mod implicit;
mod kernel;
pub mod linalg;
pub mod network;
mod ops;
pub mod rule;

pub use backend::CandleBackend;
/// The candle version this crate is built against (`=0.11.1`), for callers that need the
/// exact same types.
pub use candle_core;
pub use convert::{
    adrules_dtype, adrules_error, candle_dtype, from_candle, to_candle, try_backward,
};
pub use implicit::{CandleConditions, CandleScalar, Implicit, implicit};
pub use network::{einsum, einsum_hvp, ncon, network, network_hvp};
pub use ops::{add, contract, trace};
pub use rule::apply as apply_rule;

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
