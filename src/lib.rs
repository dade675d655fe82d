//! # adrules
//!
//! Automatic-differentiation rules for tensor contraction, tensor networks (einsum, ncon),
//! matrix decompositions and implicit functions, written once over a backend trait
//! ([`Backend`]) and plugged into the engines Rust users already have: **burn**, **candle**
//! and **dfdx**, plus an embedded strided CPU backend.
//!
//! # Where to start
//! - With **burn** (feature `burn`): `burn::einsum`, `burn::linalg`,
//!   `burn::Implicit`, `burn::nn`: one node of burn's autodiff graph each.
//! - With **candle** (feature `candle`): `candle::einsum`, `candle::linalg`,
//!   `candle::Implicit`, `candle::nn`: candle custom ops.
//! - With **dfdx** (feature `dfdx`): `dfdx::einsum`, `dfdx::contract`, `dfdx::implicit`.
//! - Without an engine, or on your own tensors: the rules themselves ([`network`],
//!   [`rules`], [`linalg`], [`implicit`]) over any [`Backend`], e.g. the embedded `strided`
//!   backend (default feature `strided`); implement [`Backend`] and check it with the crate
//!   `adrules-testing`'s `conformance_suite!`.
//! - Your own operation: implement [`rule::Rule`] once (its `rrule`, optionally its
//!   `frule`) and it runs on every backend and, through `burn::apply_rule`,
//!   `candle::apply_rule` and `dfdx::apply_rule`, in every engine; check it with
//!   `adrules-testing`'s `check_rule`.
//!
//! # Example: an einsum and its gradient in burn
//! ```
//! # #[cfg(feature = "burn")] {
//! use adrules::burn::burn_tensor::{DType, Device, Tensor, TensorData};
//!
//! let device = Device::flex().autodiff();
//! let matrix = |v: Vec<f64>, shape: [usize; 2]| {
//!     Tensor::<2>::from_data(TensorData::new(v, shape), (&device, DType::F64)).require_grad()
//! };
//! let a = matrix(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
//! let b = matrix(vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0], [3, 2]);
//! let c: Tensor<2> = adrules::burn::einsum("ij,jk->ik", [(&a).into(), (&b).into()])?;
//! let grads = c.sum().backward(); // burn's backward runs the shared network pullback
//! let a_bar: Vec<f64> = a.grad(&grads).unwrap().into_data().iter::<f64>().collect();
//! assert_eq!(a_bar, [1.0, 1.0, 2.0, 1.0, 1.0, 2.0]); // C̄·Bᵀ: the row sums of B
//! # }
//! # Ok::<(), adrules::Error>(())
//! ```
//!
//! # Example: the same rule on the strided backend, pullback by hand
//! ```
//! # #[cfg(feature = "strided")] {
//! use adrules::network::{Network, NetworkPlan, Order};
//! use adrules::strided::{Strided, Tensor};
//!
//! let a = Tensor::from_vec(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = Tensor::from_vec(&[3, 2], vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let net = Network::einsum("ij,jk->ik")?;
//! let plan = NetworkPlan::new(&net, &[a.dims(), b.dims()], &Order::Default)?;
//! let (c, pullback) = plan.rrule(&Strided, &[&a, &b], &[true, true])?;
//! assert_eq!(c.to_vec::<f64>()?, [4.0, 5.0, 10.0, 11.0]);
//! let grads = pullback.pullback(&Tensor::from_vec(&[2, 2], vec![1.0; 4])?)?;
//! let b_bar = grads[1].as_ref().expect("b is active").to_vec::<f64>()?;
//! assert_eq!(b_bar, [5.0, 5.0, 7.0, 7.0, 9.0, 9.0]); // Aᵀ·C̄: the column sums of A
//! # }
//! # Ok::<(), adrules::Error>(())
//! ```
//!
//! # Modules
//! Re-exported from the crate `adrules-core`: [`rule`] (the `Rule` trait a downstream
//! crate implements for its own operation), [`rules`] (the primitives: permuted add,
//! trace, contraction, and their pullbacks and pushforwards), [`network`] (einsum/ncon
//! networks, contraction order, plans, slicing, HVPs), [`linalg`] (SVD, QR, eigh, the
//! clustered eigh, normalize), [`implicit`] (implicit functions, linear solvers),
//! [`layers`] (the engine-independent half of the trainable layers), [`finite`] (the
//! non-finite output policy), [`backend`], [`spec`], [`scalar`], [`host`], [`alloc`],
//! [`error`], and [`math`] (the derivations of every rule, with their sources); the
//! vocabulary types at the top level and a [`prelude`].
//!
//! # Features
//! | feature | module | what |
//! |---|---|---|
//! | `strided` (default) | `strided` | the embedded CPU backend (f32, f64, Complex32, Complex64) |
//! | `burn` | `burn` | the rules as burn autodiff ops (burn `=0.22.1`), on Flex |
//! | `burn-ndarray`, `burn-wgpu`, `burn-vulkan`, `burn-metal`, `burn-cuda`, `burn-rocm` | `burn` | also route burn's NdArray / cubecl backends |
//! | `candle` | `candle` | the rules as candle custom ops (candle-core `=0.11.1`) |
//! | `candle-cuda`, `candle-metal` | `candle` | candle's CUDA / Metal devices |
//! | `dfdx` | `dfdx` | the rules as dfdx tape ops (dfdx `=0.13.0`, CPU) |
//! | `mpi` | `mpi` | sliced networks across MPI ranks (Open MPI, libclang) |

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
/// functions, the decompositions, and, with the default feature `strided`, the embedded
/// backend [`Strided`] (its tensor type is left out so that it never shadows an engine's
/// `Tensor`).
///
/// [`Strided`]: crate::strided::Strided
pub mod prelude {
    pub use adrules_core::implicit::{ImplicitFunction, Linearization, SolverOptions};
    pub use adrules_core::linalg::{RuleOptions, eigh, eigh_rrule, qr, qr_rrule, svd, svd_rrule};
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
#[doc(inline)]
pub use adrules_strided as strided;

/// The burn adapter (`adrules-burn`, feature `burn`): the rules as burn autodiff ops; with
/// feature `burn-nn`, its trainable layers as [`burn::nn`] (`adrules-burn-nn`).
#[cfg(feature = "burn")]
pub mod burn {
    #[doc(inline)]
    pub use adrules_burn::*;
    /// Trainable layers as burn modules (`adrules-burn-nn`, feature `burn-nn`): `Einsum`
    /// and the deep-equilibrium layer `Deq`.
    #[cfg(feature = "burn-nn")]
    #[doc(inline)]
    pub use adrules_burn_nn as nn;
}
/// The candle adapter (`adrules-candle`, feature `candle`): the rules as candle custom ops;
/// with feature `candle-nn`, its trainable layers as [`candle::nn`] (`adrules-candle-nn`).
#[cfg(feature = "candle")]
pub mod candle {
    #[doc(inline)]
    pub use adrules_candle::*;
    /// Trainable layers as candle modules (`adrules-candle-nn`, feature `candle-nn`):
    /// `Einsum` and the deep-equilibrium layer `Deq`.
    #[cfg(feature = "candle-nn")]
    #[doc(inline)]
    pub use adrules_candle_nn as nn;
}
/// The dfdx adapter (feature `dfdx`): the rules as dfdx tape ops, and the core backend on
/// dfdx tensors.
#[cfg(feature = "dfdx")]
#[doc(inline)]
pub use adrules_dfdx as dfdx;
/// Sliced networks across MPI ranks (feature `mpi`): [`mpi::Distributed`] runs a
/// [`SlicedPlan`](adrules_core::network::SlicedPlan)'s value, pullback and pushforward over a
/// communicator's ranks, with typed errors for failing or killed ranks.
#[cfg(feature = "mpi")]
#[doc(inline)]
pub use adrules_mpi as mpi;

/// The code blocks of `README.md`, compiled and run as doc tests (they use the strided backend,
/// burn and candle, so only a build with those features runs them: the union feature set of
/// `cargo xtask test-all`).
#[cfg(all(doctest, feature = "strided", feature = "burn", feature = "candle"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
