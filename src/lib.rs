//! # adrules
//!
//! Automatic-differentiation rules for tensor contraction, permuted addition, partial trace,
//! whole tensor networks and implicit functions, written once over a backend trait and
//! plugged into the engines Rust users already have.
//!
//! This facade re-exports the modules of [`adrules_core`] ([`rule`], the trait a downstream
//! crate implements for its own operation, [`rules`], [`network`],
//! [`implicit`], [`backend`], [`spec`], [`scalar`], [`host`], [`alloc`], [`error`], and
//! [`math`], the derivations of every rule), the vocabulary types at the top level, a
//! [`prelude`], and, behind features, the backends: the embedded strided CPU backend as
//! `strided` (default feature `strided`) and the engine adapters as `candle`, `burn` and
//! `dfdx` (features of the same names).
//!
//! # Example: a contraction and its pullback on the strided backend
//! ```
//! # #[cfg(feature = "strided")] {
//! use adrules::rules::{Activity, ContractOp};
//! use adrules::strided::{Strided, Tensor};
//! use adrules::{Backend, ContractSpec, DType};
//!
//! let be = Strided;
//! // C[i,k] = Σ_j A[i,j]·B[j,k]
//! let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik")?);
//! let a = Tensor::from_vec(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = Tensor::from_vec(&[3, 2], vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let mut c = be.zeros(&[2, 2], DType::F64)?;
//! let pullback = op.rrule(&be, &mut c, &a, &b, Activity::OPERANDS)?;
//! assert_eq!(c.to_vec::<f64>()?, [4.0, 5.0, 10.0, 11.0]);
//!
//! // Cotangents for C̄ = ones: Ā = C̄·Bᵀ (row sums of B), B̄ = Aᵀ·C̄ (column sums of A).
//! let grads = pullback.pullback(&Tensor::from_vec(&[2, 2], vec![1.0; 4])?)?;
//! let a_bar = grads.a.expect("A is active").to_vec::<f64>()?;
//! let b_bar = grads.b.expect("B is active").to_vec::<f64>()?;
//! assert_eq!(a_bar, [1.0, 1.0, 2.0, 1.0, 1.0, 2.0]);
//! assert_eq!(b_bar, [5.0, 5.0, 7.0, 7.0, 9.0, 9.0]);
//! # }
//! # Ok::<(), adrules::Error>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use adrules_core::{
    alloc, backend, error, finite, host, implicit, layers, linalg, math, network, rule, rules,
    scalar, spec,
};

pub use adrules_core::{
    Allocator, Axes, Backend, Complex32, Complex64, Conj, ContractSpec, DType, Dims, DynScalar,
    Error, HeapAllocator, HostData, HostElement, HostTensor, Permutation, RealScalar, Result,
    Scalar, TraceSpec, take_backward_errors,
};

/// The names most programs use: `use adrules::prelude::*;`.
///
/// The backend trait and the vocabulary (dtypes, conjugation flags, index specifications,
/// errors), the primitive ops and their activity, networks and their plans, implicit
/// functions, and, with the default feature `strided`, the embedded backend [`Strided`]
/// (its tensor type is left out so that it never shadows an engine's `Tensor`).
///
/// [`Strided`]: crate::strided::Strided
pub mod prelude {
    pub use adrules_core::implicit::{ImplicitFunction, Linearization, SolverOptions};
    pub use adrules_core::network::{Network, NetworkPlan, Order, PlanCache, einsum};
    pub use adrules_core::rules::{Activity, AddOp, ContractOp, Primitive, Tangents, TraceOp};
    pub use adrules_core::{
        Backend, Conj, ContractSpec, DType, DynScalar, Error, HostTensor, Permutation, Result,
        TraceSpec,
    };

    #[cfg(feature = "strided")]
    pub use adrules_strided::Strided;
}

/// The embedded strided CPU backend (feature `strided`, on by default).
#[cfg(feature = "strided")]
pub use adrules_strided as strided;

/// The burn adapter: the rules as burn autodiff ops (feature `burn`).
#[cfg(feature = "burn")]
pub use adrules_burn as burn;
/// The candle adapter: the rules as candle custom ops (feature `candle`).
#[cfg(feature = "candle")]
pub use adrules_candle as candle;
/// The dfdx adapter (feature `dfdx`): the rules as dfdx tape ops, and the core backend on
/// dfdx tensors.
#[cfg(feature = "dfdx")]
pub use adrules_dfdx as dfdx;
/// Sliced networks across MPI ranks (feature `mpi`): [`mpi::Distributed`] runs a
/// [`SlicedPlan`](adrules_core::network::SlicedPlan)'s value, pullback and pushforward over a
/// communicator's ranks, with typed errors for failing or killed ranks.
#[cfg(feature = "mpi")]
pub use adrules_mpi as mpi;

/// The code blocks of `README.md`, compiled and run as doc tests (they use the strided backend,
/// burn and candle, so only a build with those features runs them: the union feature set of
/// `cargo xtask test-all`).
#[cfg(all(doctest, feature = "strided", feature = "burn", feature = "candle"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
