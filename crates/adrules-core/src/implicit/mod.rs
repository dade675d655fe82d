//! Implicit differentiation: forward and reverse rules for functions `y(x)` defined by
//! conditions `c(x, y, z, args) = 0` — roots, fixed points (steady states), minimizers
//! (optimization layers), tensor-network fixed points.
//!
//! # Math
//! A solver computes `(y, z) = solve(x, args)`; it is never differentiated. With
//! `A = ∂c/∂y` (`m×m`) and `B = ∂c/∂x` (`m×n`) at the solution, the implicit function theorem
//! gives `J = ∂y/∂x = −A⁻¹·B` when `A` is invertible, hence
//! - pushforward (JVP): solve `A·dy = −B·dx`;
//! - pullback (VJP): solve `Aᴴ·u = −ȳ`, then `x̄ = Bᴴ·u`.
//!
//! Sources: Blondel et al., "Efficient and Modular Implicit Differentiation", NeurIPS 2022;
//! ImplicitDifferentiation.jl; JAXopt (`custom_root`, `root_jvp`, `root_vjp`); Optimistix
//! (`ImplicitAdjoint`, structure tags). Unlike several of them, one factorization of `A`
//! serves both modes, several tangents or cotangents are one block solve, both modes exist,
//! convergence and residuals are checked and reported, and complex data is supported.
//!
//! # Pieces
//! - [`ImplicitFunction`]: the solver and the [`Conditions`]; [`ImplicitFunction::jvp`],
//!   [`ImplicitFunction::vjp`] and [`ImplicitFunction::linearize`].
//! - [`Linearization`]: the pushforward and the pullback at one solution. It owns its copy
//!   of `y`, the maps and the factorization, and can be applied any number of times.
//! - [`LinearMaps`]: the one interface to whatever knows the derivatives of the conditions
//!   (`A·v`, `Aᴴ·u`, `B·v`, `Bᴴ·u`). Sources: [`FnMaps`] (user closures), [`DenseMaps`]
//!   (dense Jacobians), [`NetworkConditions`] (conditions written as tensor networks,
//!   differentiated by the network rules), [`VjpMaps`] (conditions written in a reverse-mode
//!   engine: the adapter supplies the values and one VJP as a [`ConditionsVjp`], the core
//!   does the rest); finite differences for tests are in the `adrules-testing` crate.
//! - [`ImplicitFunction::linearize_at`]: the linearization at a solution computed elsewhere
//!   (an engine's own solver), from [`ImplicitFunction::from_conditions`].
//! - [`LinearSolver`] / [`Factorization`]: the linear solves. Built-in ([`SolverOptions`],
//!   [`Method`]): dense LU and Cholesky (faer), matrix-free restarted GMRES and CG; the
//!   [`Structure`] tag of `A` picks one under [`Method::Auto`].
//! - Forms: [`FixedPoint`] (`y = T(x, y)`, `c = T − y`) and [`Argmin`] (`c = ∇_y f`).
//! - Second order: [`Linearization::hvp`] / [`Linearization::hvp_with`] (Hessian-vector
//!   products by the second-order implicit function theorem, three solves with the one
//!   factorization) and [`Linearization::hessian`]; the conditions' second derivatives come
//!   from [`LinearMaps::adjoint_tangent`] ([`NetworkConditions`] derive them from the network
//!   rules, [`FnMaps::with_second_order`] takes them as a closure).
//! - [`device`]: the matrix-free adjoint solve and pullback on a [`Backend`](crate::Backend)'s
//!   tensors ([`device::AdjointMaps`], [`device::solve_adjoint`], [`device::pullback`]):
//!   GMRES and CG whose vectors stay on the engine's device, only scalars read back; and
//!   [`device::engine_pullback`], the host-or-device dispatch of the adapters' implicit ops.
//!
//! # Example
//! `y = √x` elementwise, defined by `c = y⊙y − x` (`A = diag(2y)`, `B = −I`):
//! ```
//! use std::sync::Arc;
//! use adrules_core::HostTensor;
//! use adrules_core::implicit::{FnMaps, ImplicitFunction, Point};
//!
//! let solve = |x: &[HostTensor], _: &()| {
//!     let y: Vec<f64> = x[0].as_slice::<f64>()?.iter().map(|v| v.sqrt()).collect();
//!     Ok((HostTensor::from_vec(x[0].dims(), y)?, ()))
//! };
//! let conditions = |p: &Point<(), ()>| {
//!     let y: Arc<[f64]> = p.y_data::<f64>()?.into();
//!     let m = y.len();
//!     Ok(FnMaps::hermitian(
//!         m,
//!         m,
//!         move |v: &[f64], out: &mut [f64]| (0..m).for_each(|i| out[i] = 2.0 * y[i] * v[i]),
//!         |v: &[f64], out: &mut [f64]| (0..v.len()).for_each(|i| out[i] = -v[i]),
//!         |u: &[f64], out: &mut [f64]| (0..u.len()).for_each(|i| out[i] = -u[i]),
//!     ))
//! };
//! let f = ImplicitFunction::new(solve, conditions);
//! let x = [HostTensor::from_vec(&[2], vec![4.0, 9.0])?];
//! let (y, (), pullback) = f.vjp(&x, &())?;
//! let x_bar = pullback.vjp(&HostTensor::from_vec(&[2], vec![1.0, 1.0])?)?;
//! let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-15);
//! assert!(close(x_bar[0].as_slice::<f64>()?, &[0.25, 1.0 / 6.0])); // x̄ = Jᵀ·ȳ
//! let dy = pullback.jvp(&[HostTensor::from_vec(&[2], vec![1.0, 0.0])?])?;
//! assert!(close(dy.as_slice::<f64>()?, &[0.25, 0.0])); // dy = J·dx
//! # Ok::<(), adrules_core::Error>(())
//! ```
//!
//! # Flattening order
//! `x` is a list of tensors of any shapes; the `n` input elements are each input flattened
//! row-major (last axis fastest, [`HostTensor`](crate::HostTensor)'s order), the inputs
//! concatenated in call order. `y` is one tensor of any shape, flattened row-major into the
//! `m` unknowns. The conditions are `m` numbers in any fixed order. So `B[(i, j)]` is the
//! derivative of condition `i` with respect to input element `j` in that order, and a block
//! of vectors is stored vector after vector (column-major).
//!
//! # Element types
//! `x`, `y`, tangents and cotangents share one element type `T`: `f32`, `f64`, `Complex32`
//! or `Complex64` ([`ImplicitScalar`]). A real input of a complex problem is passed as
//! complex, and its cotangent's real part is its cotangent. For complex data the conditions
//! must be holomorphic in `y` and `x` (`A`, `B` complex-linear); cotangents follow the crate
//! convention (`z̄ = ∂L/∂re + i·∂L/∂im`, the pullback of `y = M·x` is `Mᴴ·ȳ`), so the
//! pullback uses `Aᴴ` and `Bᴴ`, and tangents are plain directional derivatives.
//!
//! # Why the host
//! The linear algebra runs on the host, in faer: dense factorizations (LU, Cholesky) are
//! not part of the backend primitives, and `A` is `m×m` with `m` the size of one solution.
//! [`LinearMaps`] take host vectors; an engine adapter copies them to its device, applies
//! its own JVP/VJP and copies back — `O(m + n)` per product, small next to the product.
//!
//! # Math
//! The derivation (implicit function theorem, both modes, the complex case, the forms) is in
//! [`crate::math`].
//!
//! # Byproduct and arguments
//! `z` (the byproduct) and `args` are constants: the pushforward gives them no tangent (the
//! rule returns them untouched) and the pullback takes no cotangent for `z` and returns none
//! for `args` — by the signatures, not by convention.
//!
//! # Failures
//! Typed errors: [`Error::Singular`](crate::Error::Singular) (a vanishing pivot, a failed
//! Cholesky, a GMRES breakdown, a CG curvature of the wrong sign),
//! [`Error::NotConverged`](crate::Error::NotConverged) (an iterative solver at its iteration
//! limit, with the residual reached and the tolerance),
//! [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) /
//! [`Error::CountMismatch`](crate::Error::CountMismatch) /
//! [`Error::DTypeMismatch`](crate::Error::DTypeMismatch) for arguments that do not fit. With
//! [`OnFailure::NanFill`] the numerical failures become NaN-filled results, the error kept
//! in [`SolveStats::failure`]. Every solve reports the true residual of each right-hand side
//! ([`SolveStats::residuals`]), and [`Linearization::conditions_norm`] reports `‖c‖` at the
//! solution when the source evaluated it: implicit derivatives of a solver stopped early
//! are wrong, and these numbers show it.
//!
//! A matrix-free solver detects a singular `A` only when the system it solves is
//! inconsistent (GMRES breakdown, CG curvature); a consistent singular system is solved.
//! The dense solvers always detect it.
//!
//! # Non-finite values and unsolved conditions
//! One policy for every solver (dense LU and Cholesky, GMRES and CG, on the host or on a
//! backend's device) and every engine (the adapters' implicit ops follow it):
//! - **Inputs and solutions** are refused in the **forward** pass: a non-finite entry of an
//!   input `x` (before the solver runs) or of the solver's `y` is
//!   [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming `"x[i]"` or
//!   `"y (solver output)"` ([`ImplicitFunction::solve`] and the calls built on it; candle's
//!   and burn's `Implicit` check the same on the device).
//! - **Cotangents** `ȳ` with a non-finite entry are refused in the **backward** pass, before
//!   any solve, with [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
//!   `"y_bar"` (as [`crate::linalg`]'s rules name their cotangents), never an all-NaN `x̄`:
//!   [`Linearization::vjp`], [`Linearization::vjp_many`] (`"cotangents[j]"` for a block),
//!   [`device::pullback`] and [`device::engine_pullback`].
//! - A cotangent or tangent that overflows from finite values is
//!   [`Error::NonFinite`](crate::Error::NonFinite) naming it ([`crate::finite`]).
//! - **The conditions' residual**: the derivatives are those of an exact root of `c`. With
//!   [`ImplicitFunction::with_conditions_tolerance`] (and the adapters'
//!   `with_conditions_tolerance`) a solution with `‖c(x, y)‖₂` above the tolerance is refused
//!   in the forward pass with [`Error::NotConverged`](crate::Error::NotConverged) naming
//!   `"conditions c(x, y)"` ([`check_conditions_norm`]); without it,
//!   [`Linearization::conditions_norm`] reports the norm.

mod cg;
mod conditions;
mod dense;
pub mod device;
mod forms;
mod function;
mod gmres;
mod krylov;
mod maps;
mod network;
mod rule;
mod solver;
mod space;
mod vjp;

pub use conditions::{Conditions, Point};
pub use forms::{Argmin, FixedPoint};
pub use function::{
    CotangentTangent, ImplicitCotangents, ImplicitFunction, ImplicitHvp, ImplicitTangents,
    Linearization, NoSolver, OnFailure, check_conditions_norm,
};
pub use maps::{DenseMaps, FnMaps, LinearMaps, Structure};
pub use network::{NetworkConditions, NetworkMaps, TermOperand};
pub use solver::{
    AUTO_DENSE_LIMIT, Factorization, LinearSolver, Method, SolveStats, SolverOptions, System,
};
pub use vjp::{ConditionsVjp, VjpMaps};

pub use crate::scalar::ImplicitScalar;
pub(crate) use crate::scalar::eps;
