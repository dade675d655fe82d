//! Linear solvers for `A·X = R` and `Aᴴ·X = R`: the [`LinearSolver`] / [`Factorization`]
//! traits and the built-in solvers configured by [`SolverOptions`].

use std::sync::Arc;

use faer::Mat;

use super::ImplicitScalar;
use super::dense::Dense;
use super::krylov::Krylov;
use super::maps::{LinearMaps, Structure};
use crate::error::{Error, Result};
use crate::scalar::RealScalar;

/// Which system a solve is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum System {
    /// `(A + λI)·X = R` (pushforward: `A·dy = −B·dx`)
    Direct,
    /// `(A + λI)ᴴ·X = R` (pullback: `Aᴴ·u = −ȳ`)
    Adjoint,
}

/// Statistics of one (block) solve.
#[derive(Clone, Debug, PartialEq)]
pub struct SolveStats {
    /// the solver that ran: `"lu"`, `"cholesky"`, `"gmres"`, `"cg"` for the built-in ones,
    /// a user-defined name otherwise, `"failed"` for NaN-filled results
    pub solver: &'static str,
    /// Krylov iterations (restarts included) of the right-hand side that needed the most;
    /// 0 for direct solvers
    pub iterations: usize,
    /// for each right-hand side `r`, the true relative residual `‖r − op(A + λI)·x‖₂ / ‖r‖₂`
    /// of the returned `x`, from a product with `A` after the solve, not a recursive estimate
    /// (the absolute residual when `r = 0`; NaN for NaN-filled results). Implicit
    /// derivatives are only as accurate as these.
    pub residuals: Vec<f64>,
    /// the failure that was replaced by NaN-filled results under
    /// [`OnFailure::NanFill`](super::OnFailure::NanFill); `None` on success
    pub failure: Option<Error>,
}

impl SolveStats {
    /// The largest residual (0 when there are no right-hand sides).
    pub fn max_residual(&self) -> f64 {
        self.residuals.iter().copied().fold(0.0, f64::max)
    }
}

/// A linear solver: prepares (factorizes) once for the `A` of a set of [`LinearMaps`], then
/// serves any number of direct and adjoint solves, each with a block of right-hand sides.
/// The built-in solvers are configured by [`SolverOptions`]; implement this trait to plug in
/// another one (a preconditioned or a sparse solver).
pub trait LinearSolver<T: ImplicitScalar>: Send + Sync {
    /// Prepares the solves with `A` (plus the ridge, if the solver has one).
    ///
    /// # Errors
    /// [`Error::Singular`] when a factorization finds `A` singular, [`Error::InvalidArgument`]
    /// for invalid options, and whatever the maps report.
    fn factorize(&self, maps: &Arc<dyn LinearMaps<T>>) -> Result<Box<dyn Factorization<T>>>;
}

/// A prepared solver: the result of [`LinearSolver::factorize`]. One factorization serves
/// both the pushforward (direct) and the pullback (adjoint) solves.
pub trait Factorization<T: ImplicitScalar>: Send + Sync {
    /// Solves `op(A + λI)·X = R` for a block of `k` right-hand sides (`rhs` and `x` are
    /// `m×k`, vector after vector). On entry `x` holds an initial guess when `warm_start`
    /// is set (iterative solvers use it, direct solvers ignore it); on return it holds the
    /// solution.
    ///
    /// # Errors
    /// [`Error::NotConverged`] when an iterative solver hits its iteration limit,
    /// [`Error::Singular`] on a breakdown that shows `A` singular, and whatever the maps
    /// report.
    fn solve(
        &self,
        system: System,
        rhs: &[T],
        x: &mut [T],
        k: usize,
        warm_start: bool,
    ) -> Result<SolveStats>;
}

/// The built-in solvers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Method {
    /// Pick from the source and the [`Structure`] tag (Optimistix-style): a dense
    /// factorization when the source holds a dense `A` or `m ≤` [`AUTO_DENSE_LIMIT`]
    /// (Cholesky for a definite tag, LU otherwise), else a matrix-free method (CG for a
    /// definite tag, GMRES otherwise).
    #[default]
    Auto,
    /// Dense LU with partial pivoting (faer). `A` is taken from the source or built from `m`
    /// applications of `A·v`; one factorization serves `A·X = R` and `Aᴴ·X = R`.
    Lu,
    /// Dense Cholesky (faer) of `A` (positive-definite tag) or of `−A` (negative-definite
    /// tag); `Aᴴ = A`, so one factorization serves both systems.
    Cholesky,
    /// Matrix-free restarted GMRES(`restart`) (Saad & Schultz 1986), with classical
    /// Gram–Schmidt applied twice and complex Givens rotations; one vector at a time.
    Gmres,
    /// Matrix-free conjugate gradients (Hestenes & Stiefel 1952) on `A` or `−A`, for a
    /// definite tag, stopping on the recursive residual `‖r‖ ≤ tolerance·‖b‖`; one vector
    /// at a time (the same implementation as the backend solve,
    /// [`device::solve_adjoint`](super::device::solve_adjoint)).
    Cg,
}

/// Largest `m` for which [`Method::Auto`] builds and factorizes a dense `A` from a
/// matrix-free source.
pub const AUTO_DENSE_LIMIT: usize = 200;

impl Method {
    /// The name reported in [`SolveStats::solver`] (`"auto"` for [`Method::Auto`], which never
    /// runs as such).
    pub fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::Lu => "lu",
            Method::Cholesky => "cholesky",
            Method::Gmres => "gmres",
            Method::Cg => "cg",
        }
    }
}

/// Options of the built-in linear solvers; implements [`LinearSolver`].
#[derive(Clone, Debug, PartialEq)]
pub struct SolverOptions {
    /// which solver (default [`Method::Auto`])
    pub method: Method,
    /// relative residual `‖r − A·x‖₂ / ‖r‖₂` at which the iterative solvers stop; default
    /// `1e-10` for 64-bit data, `1e-5` for 32-bit data. Direct solvers ignore it (they
    /// report the residual they reach).
    pub tolerance: Option<f64>,
    /// iterations allowed per right-hand side (restarts included); default `10·m + 100`
    pub max_iterations: Option<usize>,
    /// GMRES restart length (Krylov basis size, capped at `m`); default 30
    pub restart: usize,
    /// Tikhonov shift λ: solve `(A + λI)·X = R` instead of `A·X = R` (`(A + λI)ᴴ = Aᴴ + λI`
    /// for the adjoint). Default 0 (off). For a positive-definite `A`, λ > 0 regularizes; for
    /// a negative-definite `A` use λ < 0. The derivatives are then those of the regularized
    /// system, no longer the exact implicit derivatives.
    pub ridge: f64,
}

impl Default for SolverOptions {
    fn default() -> Self {
        SolverOptions {
            method: Method::Auto,
            tolerance: None,
            max_iterations: None,
            restart: 30,
            ridge: 0.0,
        }
    }
}

impl From<Method> for SolverOptions {
    fn from(method: Method) -> Self {
        SolverOptions {
            method,
            ..Default::default()
        }
    }
}

/// Default relative tolerance of the iterative solvers for dtype `T`.
pub(crate) fn default_tolerance<T: ImplicitScalar>() -> f64 {
    if super::eps::<T>() < 1e-10 {
        1e-10
    } else {
        1e-5
    }
}

impl SolverOptions {
    /// Checks the options shared by every built-in solver (the ridge is finite, the
    /// tolerance, defaulted for `T`, is positive and finite, the restart is at least 1) and
    /// returns the tolerance.
    pub(crate) fn checked_tolerance<T: ImplicitScalar>(&self) -> Result<f64> {
        if !self.ridge.is_finite() {
            return Err(Error::invalid(
                "ridge",
                format!("{} is not finite", self.ridge),
            ));
        }
        let tolerance = self.tolerance.unwrap_or_else(default_tolerance::<T>);
        if !(tolerance > 0.0 && tolerance.is_finite()) {
            return Err(Error::invalid(
                "tolerance",
                format!("{tolerance} is not a positive finite number"),
            ));
        }
        if self.restart == 0 {
            return Err(Error::invalid("restart", "must be at least 1"));
        }
        Ok(tolerance)
    }

    /// The method that runs for a source with the `structure` tag, `m` unknowns and (or
    /// not) a dense `A`: [`Method::Auto`] resolved as documented there, and
    /// [`Error::InvalidArgument`] for Cholesky or CG without a definite tag. With
    /// `dense_available = false` and `m = usize::MAX`, `Auto` never picks a dense method.
    pub(crate) fn resolve(
        &self,
        structure: Structure,
        dense_available: bool,
        m: usize,
    ) -> Result<Method> {
        let definite = structure.is_definite();
        let method = match self.method {
            Method::Auto if dense_available || m <= AUTO_DENSE_LIMIT => {
                if definite {
                    Method::Cholesky
                } else {
                    Method::Lu
                }
            }
            Method::Auto if definite => Method::Cg,
            Method::Auto => Method::Gmres,
            other => other,
        };
        if matches!(method, Method::Cholesky | Method::Cg) && !definite {
            return Err(Error::invalid(
                "method",
                format!(
                    "{} needs A tagged PositiveDefinite or NegativeDefinite, the conditions \
                     declare {structure:?}",
                    method.name()
                ),
            ));
        }
        Ok(method)
    }
}

impl<T: ImplicitScalar> LinearSolver<T> for SolverOptions {
    fn factorize(&self, maps: &Arc<dyn LinearMaps<T>>) -> Result<Box<dyn Factorization<T>>> {
        let tolerance = self.checked_tolerance::<T>()?;
        let m = maps.num_unknowns();
        let structure = maps.structure();
        let dense = maps.dense_a();
        let method = self.resolve(structure, dense.is_some(), m)?;
        let negate = structure == Structure::NegativeDefinite;
        let ridge = T::from_f64(self.ridge);
        match method {
            Method::Lu | Method::Cholesky => {
                let mut a = match dense {
                    Some(a) => a,
                    None => dense_from_maps(maps.as_ref())?,
                };
                if a.nrows() != m || a.ncols() != m {
                    return Err(Error::shape("dense A", &[m, m], &[a.nrows(), a.ncols()]));
                }
                for i in 0..m {
                    a[(i, i)] += ridge;
                }
                Ok(Box::new(if method == Method::Lu {
                    Dense::lu(a)?
                } else {
                    Dense::cholesky(a, negate)?
                }))
            }
            _ => Ok(Box::new(Krylov {
                maps: Arc::clone(maps),
                ridge,
                cg: method == Method::Cg,
                negate,
                tolerance,
                max_iterations: self.max_iterations.unwrap_or(10 * m + 100),
                restart: self.restart.min(m.max(1)),
            })),
        }
    }
}

/// `A` from one block application of `A·v` to the `m` unit vectors.
fn dense_from_maps<T: ImplicitScalar>(maps: &dyn LinearMaps<T>) -> Result<Mat<T>> {
    let m = maps.num_unknowns();
    let mut a = Mat::<T>::zeros(m, m);
    if m > 0 {
        let mut eye = vec![T::zero(); m * m];
        (0..m).for_each(|i| eye[i * m + i] = T::one());
        let mut out = vec![T::zero(); m * m];
        maps.apply_a(&eye, &mut out, m)?;
        for j in 0..m {
            for i in 0..m {
                a[(i, j)] = out[j * m + i];
            }
        }
    }
    Ok(a)
}

/// Euclidean norm as `f64`.
pub(crate) fn norm<T: ImplicitScalar>(v: &[T]) -> f64 {
    v.iter().map(|x| x.abs2().to_f64()).sum::<f64>().sqrt()
}

/// Relative residuals `‖r_j − (A·x)_j‖ / ‖r_j‖` (absolute when `r_j = 0`) of a block, given
/// `ax = A·x`.
pub(crate) fn relative_residuals<T: ImplicitScalar>(
    rhs: &[T],
    ax: &[T],
    m: usize,
    k: usize,
) -> Vec<f64> {
    (0..k)
        .map(|j| {
            let r = &rhs[j * m..(j + 1) * m];
            let a = &ax[j * m..(j + 1) * m];
            let diff = r
                .iter()
                .zip(a)
                .map(|(&r, &a)| (r - a).abs2().to_f64())
                .sum::<f64>()
                .sqrt();
            let scale = norm(r);
            if scale > 0.0 { diff / scale } else { diff }
        })
        .collect()
}
