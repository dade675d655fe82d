//! Matrix-free implicit solves on a [`Backend`]'s tensors: the adjoint maps of the conditions
//! as an engine computes them on its device ([`AdjointMaps`]), the adjoint solve
//! `(A + λI)ᴴ·u = r` ([`solve_adjoint`]) and the implicit pullback `x̄ = Bᴴ·u` with
//! `Aᴴ·u = −ȳ` ([`pullback`]).
//!
//! # What stays where
//! Every vector of length `m` (the right-hand side, the iterate, residuals, the Krylov basis
//! of GMRES, the search direction of CG) is a rank-1 tensor of the backend, updated only by
//! [`Backend::zeros`], [`Backend::add`] (`y ← β·y + α·x`), [`Backend::inner`] and
//! [`Backend::scale`], so a GPU engine keeps them on its device: no vector goes through
//! [`Backend::to_host`] or [`Backend::from_host`]. What crosses from the device to the host
//! is one scalar per [`Backend::inner`] call (an inner product or a squared norm); what
//! crosses the other way are the coefficients α, β, `s` of `add` and `scale`, as arguments.
//! The small least-squares problem of GMRES (the `(p+1)×p` Hessenberg matrix, its Givens
//! rotations, the back substitution) is on the host, in the element type of the data
//! (complex for complex data); the scalars of CG are `f64`. GMRES and CG themselves are the
//! workspace's one implementations (`gmres.rs`, `cg.rs`), the host solver's too, run here
//! over the backend's tensors (this file's `KrylovSpace` implementation).
//!
//! # Inner products per iteration
//! - **GMRES**: `2j + 4` in Arnoldi step `j = 0, 1, …` of a cycle (`‖w‖`, two classical
//!   Gram–Schmidt passes of `j + 1` each, `‖w‖` after them), one per cycle for the norm of
//!   the true residual, and one for `‖r‖` at the start: a solve whose cycles take
//!   `u_1, …, u_c` steps makes `1 + Σ_i (u_i² + 3·u_i + 1)` calls of [`Backend::inner`] and
//!   `Σ_i (u_i + 1)` applications of [`AdjointMaps::apply_a_adjoint`].
//! - **CG**: 2 per iteration (`pᴴ·q`, `‖r‖²`), one for `‖r‖` at the start and one for the true
//!   residual at the end: `2k + 2` calls for `k` iterations, and `k + 1` applications.
//!
//! A zero right-hand side makes exactly one call (its norm) and no application.
//!
//! # Why not the host path
//! The host solvers ([`SolverOptions`] as a [`LinearSolver`](super::LinearSolver) over
//! [`LinearMaps`]) copy every vector to and from the host at every product;
//! on a GPU that is a transfer of `O(m)` data per iteration. Dense factorizations
//! ([`Method::Lu`], [`Method::Cholesky`]) are not backend primitives and stay on the host.

use std::marker::PhantomData;
use std::sync::Mutex;

use super::ImplicitScalar;
use super::cg::{CgLimits, cg};
use super::conditions::Point;
use super::function::ImplicitFunction;
use super::gmres::{GmresLimits, gmres};
use super::maps::{LinearMaps, Structure};
use super::solver::{Method, SolveStats, SolverOptions};
use super::space::KrylovSpace;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::scalar::{Complex32, Complex64, DType, DynScalar};
use crate::spec::{Conj, Permutation};

/// The adjoint linear maps of conditions linearized at a solution, on a backend's tensors:
/// every vector is a rank-1 tensor of the backend (length m = number of unknowns), in the dtype of y.
///
/// `A = ∂c/∂y` is `m×m` and `B = ∂c/∂x` maps the inputs `x_1, …, x_K` (tensors of any shapes)
/// to `m` conditions; for complex data the conditions are holomorphic and `Aᴴ`, `Bᴴ` are the
/// conjugate transposes (see the [module documentation](super) of `implicit`). An engine
/// implements the maps with its own VJP of the conditions, on its device.
///
/// The solvers call [`apply_a_adjoint`](AdjointMaps::apply_a_adjoint) with tensors of shape
/// `[m]` and the dtype of the right-hand side only, and expect a tensor of the same shape and
/// dtype; it may share storage with its input (an identity map may return `u.clone()`).
pub trait AdjointMaps<B: Backend> {
    /// `m`: the number of unknowns (elements of `y`) and of conditions.
    fn num_unknowns(&self) -> usize;

    /// The structure of `A` (default [`Structure::General`]); a definite tag selects CG
    /// under [`Method::Auto`].
    fn structure(&self) -> Structure {
        Structure::General
    }

    /// `Aᴴ·u` with A = ∂c/∂y (m×m)
    ///
    /// `u` and the result are rank-1 tensors of shape `[m]`, in the dtype of `y`.
    ///
    /// # Errors
    /// Whatever the source reports (an engine failure, for example).
    fn apply_a_adjoint(&self, u: &B::Tensor) -> Result<B::Tensor>;

    /// `Bᴴ·u` with B = ∂c/∂x: one cotangent per input x_k, each of x_k's shape (documented by the implementor)
    ///
    /// `u` is a rank-1 tensor of shape `[m]`; [`pullback`] calls this once, on the solution
    /// of the adjoint system.
    ///
    /// # Errors
    /// Whatever the source reports.
    fn apply_b_adjoint(&self, u: &B::Tensor) -> Result<Vec<B::Tensor>>;
}

/// Solves (A + λI)ᴴ·u = rhs matrix-free on the backend (GMRES, or CG for a definite tag; see SolverOptions / Method).
///
/// `rhs` is a rank-1 tensor of shape `[m]` (`m =` [`AdjointMaps::num_unknowns`]) of any of
/// the four dtypes (`f32`, `f64`, `Complex32`, `Complex64`); `u` has its shape and dtype. λ
/// is [`SolverOptions::ridge`] (real, so `(A + λI)ᴴ·u = Aᴴ·u + λ·u`).
///
/// # Method
/// From [`SolverOptions::method`]:
/// - [`Method::Gmres`]: restarted GMRES(`p`) (Saad & Schultz, "GMRES: A generalized minimal
///   residual algorithm for solving nonsymmetric linear systems", SIAM J. Sci. Stat. Comput.
///   7(3), 1986), `p = min(restart, m)`, with classical Gram–Schmidt applied twice and complex
///   Givens rotations: the same implementation as the host GMRES. Each cycle ends on the true residual
///   `‖rhs − (A + λI)ᴴ·u‖`, from one more application of the map.
/// - [`Method::Cg`]: conjugate gradients (Hestenes & Stiefel, "Methods of conjugate gradients
///   for solving linear systems", J. Res. Nat. Bur. Standards 49(6), 1952) on
///   `(A + λI)ᴴ` for a [`Structure::PositiveDefinite`] tag, on `−(A + λI)ᴴ` (right-hand side
///   `−rhs`) for a [`Structure::NegativeDefinite`] one, stopping on the recursive residual;
///   the true residual is recomputed at the end: the same implementation as the host CG.
/// - [`Method::Auto`]: CG for a definite tag, else GMRES (there is no dense `A` here, whatever
///   `m`).
///
/// The iterations stop at the relative residual [`SolverOptions::tolerance`] (default `1e-10`
/// for 64-bit data, `1e-5` for 32-bit data) or fail after [`SolverOptions::max_iterations`]
/// (default `10·m + 100`, restarts included). A zero `rhs` gives `u = 0` after 0 iterations,
/// without applying the map.
///
/// # Host transfers
/// No vector is copied to or from the host; the scalars that cross are counted in the
/// [module documentation](self): `2j + 4` inner products in GMRES step `j` of a cycle plus one
/// per cycle, 2 per CG iteration, plus 1 at the start (and 1 at the end for CG).
///
/// # Returns
/// `u` and [`SolveStats`] with `solver` `"gmres"` or `"cg"`, `iterations` (restarts
/// included), `residuals = [‖rhs − (A + λI)ᴴ·u‖ / ‖rhs‖]` (the true relative residual; 0
/// for a zero `rhs`) and `failure: None`.
///
/// # Errors
/// - [`Error::InvalidArgument`]: invalid options (`"ridge"` not finite, `"tolerance"` not
///   positive and finite, `"restart"` 0, as [`SolverOptions`]' `factorize`); `"method"`
///   [`Method::Lu`] or [`Method::Cholesky`] (dense factorizations run on the host: use the
///   host [`ImplicitFunction`] path), or CG without a definite tag;
///   `"right-hand side"` with a non-finite entry; `"A = ∂c/∂y"` when a product of the map has
///   a non-finite entry. Non-finite entries are detected through the inner products (a NaN
///   or infinite entry makes them non-finite; so does a squared norm that overflows).
/// - [`Error::ShapeMismatch`] (`"rhs"`, or `"Aᴴ·u"` for a product of the map) when a vector is
///   not of shape `[m]`; [`Error::DTypeMismatch`] (`"Aᴴ·u"`) when a product is not in the
///   dtype of `rhs`.
/// - [`Error::NotConverged`] (`"GMRES"` or `"CG"`) at the iteration limit, with the true
///   relative residual reached.
/// - [`Error::Singular`] on a GMRES breakdown that leaves the residual (the system is
///   inconsistent, `A` singular) or a CG curvature `pᴴ·(A + λI)ᴴ·p` of the wrong sign (`A`
///   not definite as tagged).
/// - The errors of the maps and of the backend.
pub fn solve_adjoint<B: Backend>(
    be: &B,
    maps: &dyn AdjointMaps<B>,
    rhs: &B::Tensor,
    options: &SolverOptions,
) -> Result<(B::Tensor, SolveStats)> {
    match be.dtype(rhs) {
        DType::F32 => solve_typed::<B, f32>(be, maps, rhs, options),
        DType::F64 => solve_typed::<B, f64>(be, maps, rhs, options),
        DType::C32 => solve_typed::<B, Complex32>(be, maps, rhs, options),
        DType::C64 => solve_typed::<B, Complex64>(be, maps, rhs, options),
    }
}

/// The implicit pullback on the backend: solves Aᴴ·u = −ȳ, returns x̄ = Bᴴ·u (one per input) and the solve's stats.
///
/// `y_bar` is a rank-1 tensor of shape `[m]` (the cotangent of the flattened `y`); `x̄` is
/// what [`AdjointMaps::apply_b_adjoint`] returns for `u`, one cotangent per input `x_k` in
/// its shape. The solve is [`solve_adjoint`] with right-hand side `−ȳ` (one [`Backend::add`]
/// makes it, on the device), so the options, the scalars that cross to the host and the
/// statistics are those of [`solve_adjoint`] (`residuals` is the true relative residual of
/// `Aᴴ·u = −ȳ`, ridge included).
///
/// # Errors
/// [`Error::ShapeMismatch`] (`"y_bar"`) when `y_bar` is not of shape `[m]`;
/// [`Error::InvalidArgument`] (`"y_bar"`) for a non-finite `y_bar` (the policy of the
/// [module](super)); the errors of
/// [`solve_adjoint`]; the errors of the maps and of the backend; [`Error::NonFinite`]
/// (`"x_bar[k]"`) for a cotangent that overflows although `y_bar` is finite
/// ([`crate::finite`]).
pub fn pullback<B: Backend>(
    be: &B,
    maps: &dyn AdjointMaps<B>,
    y_bar: &B::Tensor,
    options: &SolverOptions,
) -> Result<(Vec<B::Tensor>, SolveStats)> {
    let m = maps.num_unknowns();
    check_vector(be, y_bar, m, "y_bar")?;
    let dtype = be.dtype(y_bar);
    let mut rhs = be.zeros(&[m], dtype)?;
    be.add(
        &mut rhs,
        y_bar,
        &Permutation::identity(1),
        Conj::No,
        DynScalar::from_c64(Complex64::new(-1.0, 0.0), dtype),
        DynScalar::zero(dtype),
    )?;
    // rhs = −ȳ: a non-finite right-hand side is a non-finite cotangent (the norm the solve
    // computes anyway tells, so the check costs no extra reduction)
    let (u, stats) = solve_adjoint(be, maps, &rhs, options).map_err(|e| match e {
        Error::InvalidArgument { arg, reason } if arg == "right-hand side" => Error::invalid(
            "y_bar",
            format!(
                "{reason}: implicit functions refuse non-finite cotangents (or one whose norm \
                 is beyond the dtype's range)"
            ),
        ),
        e => e,
    })?;
    let x_bar = maps.apply_b_adjoint(&u)?;
    for (k, t) in x_bar.iter().enumerate() {
        crate::finite::check(be, || format!("x_bar[{k}]"), t, &[y_bar])?;
    }
    Ok((x_bar, stats))
}

/// [`Error::ShapeMismatch`] naming `arg` unless `t` has shape `[m]`.
fn check_vector<B: Backend>(be: &B, t: &B::Tensor, m: usize, arg: &str) -> Result<()> {
    let dims = be.dims(t);
    if dims.as_slice() != [m] {
        return Err(Error::shape(arg, &[m], &dims));
    }
    Ok(())
}

/// The error of a product with a non-finite entry, seen through `what = value`.
fn non_finite_product(what: &str, value: impl std::fmt::Display) -> Error {
    Error::invalid(
        "A = ∂c/∂y",
        format!("the linear map returned a non-finite entry ({what} = {value})"),
    )
}

fn solve_typed<B: Backend, T: ImplicitScalar>(
    be: &B,
    maps: &dyn AdjointMaps<B>,
    rhs: &B::Tensor,
    options: &SolverOptions,
) -> Result<(B::Tensor, SolveStats)> {
    let tolerance = options.checked_tolerance::<T>()?;
    let structure = maps.structure();
    let method = match options.method {
        Method::Lu | Method::Cholesky => {
            return Err(Error::invalid(
                "method",
                format!(
                    "{} is a dense factorization, which runs on the host: use the host \
                     ImplicitFunction / LinearMaps path, or Gmres, Cg or Auto on the backend",
                    options.method.name()
                ),
            ));
        }
        // No dense A and no size limit here: Auto is CG or GMRES.
        _ => options.resolve(structure, false, usize::MAX)?,
    };
    let m = maps.num_unknowns();
    check_vector(be, rhs, m, "rhs")?;
    let solver = DeviceKrylov::<B, T> {
        be,
        maps,
        m,
        dtype: T::DTYPE,
        ridge: options.ridge,
        negate: structure == Structure::NegativeDefinite,
        tolerance,
        max_iterations: options.max_iterations.unwrap_or(10 * m + 100),
        restart: options.restart.min(m.max(1)),
        identity: Permutation::identity(1),
        marker: PhantomData,
    };
    let cg = method == Method::Cg;
    let name = if cg { "cg" } else { "gmres" };
    let b_norm = solver.norm_of(rhs)?;
    if !b_norm.is_finite() {
        return Err(Error::invalid(
            "right-hand side",
            format!("has a non-finite entry (norm {b_norm})"),
        ));
    }
    let stats = |iterations, residual| SolveStats {
        solver: name,
        iterations,
        residuals: vec![residual],
        failure: None,
    };
    if b_norm == 0.0 {
        return Ok((solver.zeros()?, stats(0, 0.0)));
    }
    let (u, iterations, residual) = if cg {
        solver.cg(rhs, b_norm)?
    } else {
        solver.gmres(rhs, b_norm)?
    };
    Ok((u, stats(iterations, residual)))
}

/// The matrix-free solvers of one adjoint solve, for data of element type `T`.
struct DeviceKrylov<'a, B: Backend, T> {
    be: &'a B,
    maps: &'a dyn AdjointMaps<B>,
    m: usize,
    dtype: DType,
    ridge: f64,
    /// CG on `−A` (negative-definite tag)
    negate: bool,
    tolerance: f64,
    max_iterations: usize,
    restart: usize,
    identity: Permutation,
    marker: PhantomData<T>,
}

impl<B: Backend, T: ImplicitScalar> DeviceKrylov<'_, B, T> {
    fn zeros(&self) -> Result<B::Tensor> {
        self.be.zeros(&[self.m], self.dtype)
    }

    /// `⟨x, y⟩ = xᴴ·y` (one scalar from the device).
    fn inner(&self, x: &B::Tensor, y: &B::Tensor) -> Result<T> {
        self.be.inner(x, y)?.to::<T>()
    }

    /// `‖x‖₂` (one scalar from the device); NaN or infinite when `x` has a non-finite entry.
    fn norm_of(&self, x: &B::Tensor) -> Result<f64> {
        let s = self.be.inner(x, x)?;
        Ok(if s.im().is_finite() {
            s.re().sqrt()
        } else {
            f64::NAN
        })
    }

    /// `y ← y + α·x`.
    fn axpy(&self, y: &mut B::Tensor, x: &B::Tensor, alpha: T) -> Result<()> {
        self.update(y, x, alpha, T::one())
    }

    /// `(A + λI)ᴴ·v = Aᴴ·v + λ·v`, with the shape and dtype of the product checked.
    fn apply_op(&self, v: &B::Tensor) -> Result<B::Tensor> {
        let mut w = self.maps.apply_a_adjoint(v)?;
        check_vector(self.be, &w, self.m, "Aᴴ·u")?;
        let dtype = self.be.dtype(&w);
        if dtype != self.dtype {
            return Err(Error::DTypeMismatch {
                arg: "Aᴴ·u".into(),
                expected: self.dtype.to_string(),
                actual: dtype,
            });
        }
        if self.ridge != 0.0 {
            self.axpy(&mut w, v, T::from_f64(self.ridge))?;
        }
        Ok(w)
    }

    /// `r = b − (A + λI)ᴴ·x` and `‖r‖₂` (one application, one scalar).
    fn true_residual(&self, b: &B::Tensor, x: &B::Tensor) -> Result<(B::Tensor, f64)> {
        let mut r = self.apply_op(x)?;
        self.update(&mut r, b, T::one(), -T::one())?;
        let norm = self.norm_of(&r)?;
        if !norm.is_finite() {
            return Err(non_finite_product("‖rhs − Aᴴ·u‖", norm));
        }
        Ok((r, norm))
    }

    /// Restarted GMRES from `x = 0` (the workspace's one GMRES, [`gmres`], over this
    /// backend's tensors): returns the solution, the iterations and the true relative
    /// residual. `b_norm = ‖b‖ > 0`.
    fn gmres(&self, b: &B::Tensor, b_norm: f64) -> Result<(B::Tensor, usize, f64)> {
        let limits = GmresLimits {
            tolerance: self.tolerance,
            max_iterations: self.max_iterations,
            restart: self.restart,
        };
        gmres(self, limits, b, b_norm, self.zeros()?, b.clone(), b_norm)
    }

    /// Conjugate gradients from `x = 0` (the workspace's one CG, [`cg`], over this backend's
    /// tensors) on `(A + λI)ᴴ`, or on `−(A + λI)ᴴ` for a negative-definite tag: returns the
    /// solution, the iterations and the true relative residual. `b_norm = ‖b‖ > 0`.
    fn cg(&self, b: &B::Tensor, b_norm: f64) -> Result<(B::Tensor, usize, f64)> {
        let limits = CgLimits {
            tolerance: self.tolerance,
            max_iterations: self.max_iterations,
            negate: self.negate,
        };
        cg(self, limits, b, b_norm, self.zeros()?, b, b_norm)
    }
}

/// A backend's rank-1 tensors as a [`KrylovSpace`]: the basis a list of tensors, every
/// operation one [`Backend`] call (the counts of the [module documentation](self)).
impl<B: Backend, T: ImplicitScalar> KrylovSpace<T> for DeviceKrylov<'_, B, T> {
    type Vector = B::Tensor;
    type Basis = Vec<B::Tensor>;

    fn basis(&self, capacity: usize) -> Vec<B::Tensor> {
        Vec::with_capacity(capacity)
    }
    fn clear(&self, basis: &mut Vec<B::Tensor>) {
        basis.clear();
    }
    fn push_scaled(&self, basis: &mut Vec<B::Tensor>, v: &B::Tensor, alpha: T) -> Result<()> {
        basis.push(self.scaled(v, alpha)?);
        Ok(())
    }
    fn push_normalized(
        &self,
        basis: &mut Vec<B::Tensor>,
        mut w: B::Tensor,
        alpha: T,
    ) -> Result<()> {
        self.be.scale(&mut w, alpha.to_dyn())?;
        basis.push(w);
        Ok(())
    }
    fn apply(&self, basis: &Vec<B::Tensor>, j: usize) -> Result<B::Tensor> {
        self.apply_op(&basis[j])
    }
    fn apply_vector(&self, v: &B::Tensor) -> Result<B::Tensor> {
        self.apply_op(v)
    }
    fn scaled(&self, x: &B::Tensor, alpha: T) -> Result<B::Tensor> {
        let mut out = self.zeros()?;
        self.be.add(
            &mut out,
            x,
            &self.identity,
            Conj::No,
            alpha.to_dyn(),
            T::zero().to_dyn(),
        )?;
        Ok(out)
    }
    /// When `y` shares storage with `x` (a map that returned its input) and the backend
    /// refuses the aliasing, `y` is first replaced by a copy.
    fn update(&self, y: &mut B::Tensor, x: &B::Tensor, alpha: T, beta: T) -> Result<()> {
        let (a, b) = (alpha.to_dyn(), beta.to_dyn());
        match self.be.add(y, x, &self.identity, Conj::No, a, b) {
            Err(Error::Aliasing { .. }) => {
                *y = self.scaled(y, T::one())?;
                self.be.add(y, x, &self.identity, Conj::No, a, b)
            }
            other => other,
        }
    }
    fn norm(&self, x: &B::Tensor) -> Result<f64> {
        self.norm_of(x)
    }
    fn real_inner(&self, x: &B::Tensor, y: &B::Tensor) -> Result<f64> {
        let s = self.be.inner(x, y)?;
        Ok(if s.im().is_finite() { s.re() } else { f64::NAN })
    }
    fn project(&self, basis: &Vec<B::Tensor>, w: &mut B::Tensor, d: &mut [T]) -> Result<()> {
        for (d, v) in d.iter_mut().zip(basis) {
            *d = self.inner(v, w)?;
        }
        for (&d, v) in d.iter().zip(basis) {
            self.axpy(w, v, -d)?;
        }
        Ok(())
    }
    fn combine(&self, x: &mut B::Tensor, basis: &Vec<B::Tensor>, y: &[T]) -> Result<()> {
        for (&y, v) in y.iter().zip(basis) {
            self.axpy(x, v, y)?;
        }
        Ok(())
    }
    fn residual(&self, b: &B::Tensor, x: &B::Tensor) -> Result<(B::Tensor, f64)> {
        self.true_residual(b, x)
    }
    fn non_finite(&self, what: &str, value: f64) -> Error {
        non_finite_product(what, value)
    }
}

/// What the [`Rule`](crate::rule::Rule) of an engine's implicit function keeps (its
/// [`Rule::keeps`](crate::rule::Rule::keeps)), given which of its inputs `x` are active:
/// every input and the solution `y` when one is active (the conditions' VJPs are taken at
/// `(x, y)`), nothing otherwise.
pub fn rule_keeps(active: &[bool]) -> crate::rule::Keeps {
    let any = active.contains(&true);
    crate::rule::Keeps {
        inputs: vec![any; active.len()],
        outputs: vec![any],
    }
}

/// The forward checks of the adapters' implicit ops on a backend's tensors (the policy of
/// the [module](super)): [`Error::InvalidArgument`] naming `arg` when `t` has a non-finite
/// entry (one [`Backend::all_finite`] reduction).
///
/// # Errors
/// As above; the backend's.
pub fn check_finite<B: Backend>(be: &B, t: &B::Tensor, arg: &str) -> Result<()> {
    if be.all_finite(t)? {
        return Ok(());
    }
    Err(Error::invalid(
        arg,
        "has a non-finite entry: implicit functions refuse non-finite inputs, solutions and \
         cotangents",
    ))
}

/// The residual check of the adapters' implicit ops: `‖c‖₂` of the conditions' values `c` (a
/// tensor of `be`, any shape; one inner product read back) against `tolerance`, as
/// [`check_conditions_norm`](super::check_conditions_norm).
///
/// # Errors
/// [`Error::NotConverged`] (`"conditions c(x, y)"`) when `‖c‖₂ > tolerance` or is not
/// finite; [`Error::InvalidArgument`] (`"conditions_tolerance"`) for a negative or NaN
/// `tolerance`; the backend's.
pub fn check_conditions<B: Backend>(be: &B, c: &B::Tensor, tolerance: f64) -> Result<()> {
    let norm = be.inner(c, c)?.to_c64().re.max(0.0).sqrt();
    super::check_conditions_norm(norm, tolerance)
}

/// Whether an adapter's implicit pullback with `options` and `m` unknowns runs on the host
/// (a dense factorization: [`Method::Lu`], [`Method::Cholesky`], or [`Method::Auto`] with
/// `m ≤` [`AUTO_DENSE_LIMIT`](super::AUTO_DENSE_LIMIT)) rather than matrix-free on the
/// device ([`pullback`]: [`Method::Gmres`], [`Method::Cg`], `Auto` for larger `m`). The
/// same rule as the host solvers' choice under [`Method::Auto`] for a source without a dense
/// `A`.
pub fn runs_on_host(options: &SolverOptions, m: usize) -> bool {
    match options.method {
        Method::Lu | Method::Cholesky => true,
        Method::Auto => m <= super::AUTO_DENSE_LIMIT,
        Method::Gmres | Method::Cg => false,
    }
}

/// The implicit pullback of an engine's implicit op, where [`runs_on_host`] puts it: the one
/// dispatch the adapters' implicit ops share (candle's and burn's `Implicit`).
///
/// `x` are the inputs (any shapes), `y` the solution and `y_bar` its cotangent, both of shape
/// `[m]`, every tensor of `be` in the dtype of `T`; the result is `x̄`, one cotangent per input
/// in its shape, tensors of `be`.
/// - **On the host** (a dense solver: [`Method::Lu`], [`Method::Cholesky`], [`Method::Auto`]
///   with `m ≤` [`AUTO_DENSE_LIMIT`](super::AUTO_DENSE_LIMIT)): `x`, `y` and `ȳ` are copied
///   to the host once, the conditions are the linear maps `host` returns (typically the
///   [`VjpMaps`](super::VjpMaps) of the engine's VJP, whose `m` VJPs assemble `A` for the
///   factorization), the host implicit pullback runs
///   ([`ImplicitFunction::linearize_at`], then
///   [`Linearization::vjp`](super::Linearization::vjp)), and `x̄` is copied back.
/// - **On the device** (matrix-free: GMRES, CG): [`pullback`] over the maps `device` returns.
///
/// Only the source the dispatch picks is built.
///
/// # Errors
/// Those of `host` or `device`; of the host copies; of
/// [`ImplicitFunction::linearize_at`] and [`Linearization::vjp`](super::Linearization::vjp)
/// (the dense solver's); of [`pullback`].
pub fn engine_pullback<B, T, H, D>(
    be: &B,
    x: &[&B::Tensor],
    y: &B::Tensor,
    y_bar: &B::Tensor,
    options: &SolverOptions,
    host: impl FnOnce() -> Result<H>,
    device: impl FnOnce() -> Result<D>,
) -> Result<Vec<B::Tensor>>
where
    B: Backend,
    T: ImplicitScalar,
    H: LinearMaps<T> + 'static,
    D: AdjointMaps<B>,
{
    let m = be.dims(y).iter().product();
    if !runs_on_host(options, m) {
        return Ok(pullback(be, &device()?, y_bar, options)?.0);
    }
    let xh = x
        .iter()
        .map(|t| be.to_host(t))
        .collect::<Result<Vec<_>>>()?;
    let (yh, y_bar_h) = (be.to_host(y)?, be.to_host(y_bar)?);
    // the maps are built once, here; `linearize_at` asks for them once
    let maps = Mutex::new(Some(host()?));
    let linearize = move |_: &Point<'_, (), ()>| -> Result<H> {
        let taken = maps.lock().ok().and_then(|mut m| m.take());
        taken.ok_or_else(|| Error::invalid("conditions", "linearized twice"))
    };
    let f = ImplicitFunction::<T, (), (), _, _>::from_conditions(linearize)
        .with_linear_solver(options.clone());
    let x_bar = f.linearize_at(&xh, yh, &(), &())?.vjp(&y_bar_h)?;
    x_bar.into_iter().map(|g| be.from_host(g)).collect()
}
