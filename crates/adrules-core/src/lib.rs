//! # adrules-core
//!
//! Backend-agnostic automatic-differentiation rules for tensor operations, written once and
//! shared by every engine adrules plugs into (the embedded strided CPU backend, candle, burn,
//! dfdx). Most users depend on the facade crate `adrules`, which re-exports this crate and
//! adds the engines; depend on this one to implement [`Backend`] for your own tensors.
//!
//! ```
//! use adrules_core::linalg::{RuleOptions, eigh_rrule};
//! use adrules_core::network::{Network, NetworkPlan, Order};
//! use adrules_strided::{Strided, Tensor}; // any `Backend` works the same
//!
//! # fn main() -> adrules_core::Result<()> {
//! // A network's value and its pullback: C = A·B, then Ā = C̄·Bᵀ and B̄ = Aᵀ·C̄.
//! let a = Tensor::from_vec(&[2, 2], vec![2.0, 1.0, 1.0, 2.0])?;
//! let b = Tensor::from_vec(&[2, 2], vec![1.0, 0.0, 0.0, 1.0])?;
//! let net = Network::einsum("ij,jk->ik")?;
//! let plan = NetworkPlan::new(&net, &[a.dims(), b.dims()], &Order::Default)?;
//! let (c, pullback) = plan.rrule(&Strided, &[&a, &b], &[true, false])?;
//! assert_eq!(c.to_vec::<f64>()?, [2.0, 1.0, 1.0, 2.0]);
//! let grads = pullback.pullback(&Tensor::from_vec(&[2, 2], vec![1.0; 4])?)?;
//! assert_eq!(grads[0].as_ref().unwrap().to_vec::<f64>()?, [1.0; 4]);
//! assert!(grads[1].is_none()); // B was not active
//!
//! // A decomposition's rule: the gradient of the largest eigenvalue of A is v·vᵀ.
//! let (eig, pullback) = eigh_rrule(&Strided, &a, RuleOptions::default())?;
//! assert_eq!(eig.values.to_vec::<f64>()?, [1.0, 3.0]);
//! let a_bar = pullback.pullback(Some(&Tensor::from_vec(&[2], vec![0.0, 1.0])?), None)?;
//! assert!(a_bar.to_vec::<f64>()?.iter().all(|g| (g - 0.5).abs() < 1e-12));
//! # Ok(())
//! # }
//! ```
//!
//! ## Modules
//!
//! - [`scalar`]: the element types (`f32`, `f64`, `Complex32`, `Complex64`), the run-time
//!   [`DType`] and [`DynScalar`] for coefficients.
//! - [`spec`]: validated index specifications of the primitives and the conjugation flag.
//! - [`backend`]: the [`Backend`] trait, the primitives every rule is written in.
//! - [`host`]: [`HostTensor`], dense row-major host data for exchange and tests.
//! - [`rule`]: the public [`Rule`](rule::Rule) trait: an operation with `N` inputs and `M`
//!   outputs whose `rrule` (and optional `frule`) is written once over [`Backend`] and runs
//!   on every backend and engine; its checked drivers and the multi-output node.
//! - [`rules`]: pullbacks and pushforwards of add, trace, contract and scalar extraction.
//! - [`error`]: the one [`Error`] type.
//! - [`network`]: ncon / Einstein-string networks, contraction order, plans and their rules.
//! - [`alloc`]: allocators for temporaries and the AD-safety rule they keep.
//! - [`linalg`]: SVD (thin, full, truncated), QR and Hermitian eigendecomposition with
//!   their pullbacks and pushforwards, gauge checks and Lorentzian broadening; the
//!   clustered eigendecomposition ([`linalg::eigh_clustered`]: whole clusters of
//!   near-degenerate eigenvalues, a canonical basis fixed by a covariant secondary operator).
//! - [`implicit`]: implicit differentiation of functions defined by conditions (roots,
//!   fixed points, minimizers), with dense and matrix-free linear solvers.
//! - [`layers`]: the engine-independent half of the adapters' trainable layers (einsum and
//!   deep-equilibrium): checked configurations, deterministic initialisation, the fixed-point
//!   driver.
//! - [`math`]: the derivations of every rule, with their sources.
//!
//! ## Conventions
//! - Axes are 0-based. Permuting by `p`: output axis `m` is input axis `p[m]`.
//! - Contractions split A's axes into `(open_a, contr_a)` and B's into `(contr_b, open_b)`;
//!   the output permutation acts on `(open_a…, open_b…)` (see [`spec`]).
//! - `β = 0` is a strong zero: C is not read.
//! - Complex cotangents follow ChainRules and PyTorch: for a real loss `L` and `z = x + i·y`,
//!   `z̄ = ∂L/∂x + i·∂L/∂y`; the pullback of `y = M·x` is `x̄ = Mᴴ·ȳ`. Tangents are plain
//!   directional derivatives.
//! - Memory order of host data is row-major (the last axis varies fastest).

#![warn(missing_docs)]

pub mod alloc;
pub mod backend;
pub mod error;
pub mod finite;
pub mod host;
pub mod implicit;
pub mod layers;
pub mod linalg;
pub mod network;
pub mod rule;
pub mod rules;
pub mod scalar;
pub mod spec;

/// The derivations of every rule (primitives, networks, implicit functions), with their
/// sources: the crate's `MATH.md`.
#[doc = include_str!("../MATH.md")]
pub mod math {}

pub use alloc::{Allocator, HeapAllocator};
pub use backend::Backend;
pub use error::backward::take_backward_errors;
pub use error::{Error, Result};
pub use host::{HostData, HostElement, HostTensor};
pub use scalar::{Complex32, Complex64, DType, DynScalar, RealScalar, Scalar};
pub use spec::{Axes, Conj, ContractSpec, Dims, Permutation, TraceSpec};

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
