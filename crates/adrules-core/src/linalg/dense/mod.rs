//! Dense linear algebra with its rules: the Cholesky factor ([`cholesky`]), triangular solves
//! ([`solve_triangular`]), and, on an LU factorization with partial pivoting, the solve
//! ([`solve`]), the inverse ([`inv`]), the determinant ([`det`]) and the sign (phase) and
//! logarithm of its modulus ([`slogdet`]); the matrix exponential ([`matrix_exp`], scaling
//! and squaring with Padé), the pseudo-inverse ([`pinv`], by the SVD) and least squares
//! ([`lstsq`]), the packed LU factors ([`lu_factor`]), the matrix norms ([`matrix_norm`]:
//! Frobenius, nuclear, spectral) and the eigendecomposition of a general square matrix
//! ([`EigRule`]: complex eigenvalues and unit eigenvectors). Each is batched over leading axes
//! (`A: [batch…, n, n]`, the last two axes the matrix, row index first), in `f32`, `f64`,
//! `Complex32` and `Complex64` (the pseudo-inverse, least squares, LU and norms of any
//! `[batch…, m, n]`), and each is a [`Rule`](crate::rule::Rule) value
//! ([`CholeskyRule`], [`SolveTriangularRule`], [`SolveRule`], [`InvRule`], [`DetRule`],
//! [`SlogdetRule`], [`MatrixExpRule`], [`PinvRule`], [`LstsqRule`], [`LuFactorRule`],
//! [`MatrixNormRule`], [`EigRule`]) with its pullback (`rrule`) and pushforward (`frule`): call them through
//! the rule drivers ([`rule::rrule`](crate::rule::rrule), [`rule::frule`](crate::rule::frule))
//! or an engine's `apply_rule`.
//!
//! Cholesky, the triangular solve and the rules on one LU (solve, inverse, determinant,
//! slogdet) have a second order: their
//! pullbacks implement [`Pullback::pullback_tangent`](crate::rule::Pullback::pullback_tangent)
//! (Hessian-vector products through [`RulePullback::pullback_tangent`](crate::rule::RulePullback::pullback_tangent)).
//! The others are first order.
//!
//! # Where it runs
//! The factorizations are [`Backend`](crate::Backend) methods ([`Backend::cholesky`],
//! [`Backend::lu`]) whose defaults copy the matrix to the host and call faer
//! ([`host_cholesky`], [`host_lu`]); a backend with its own factorizations overrides them.
//! The rules, and the triangular solves after a factorization, run on the host with faer,
//! as the decompositions' rules do: each costs `O(n³)` like the factorization, the transfers
//! `O(n²)`.
//!
//! # Errors
//! A rank below 2 ([`Error::RankMismatch`]), a non-square matrix or mismatched right-hand
//! side ([`Error::ShapeMismatch`]), different dtypes ([`Error::DTypeMismatch`]), a
//! non-finite entry ([`Error::InvalidArgument`]); a zero pivot ([`Error::Singular`], with
//! the pivot's index and matrix); a matrix that is not positive definite
//! ([`Error::NotPositiveDefinite`]); a result beyond the dtype's range
//! ([`Error::NonFinite`]). Never a NaN or an infinity returned as `Ok`.
//!
//! [`Backend::cholesky`]: crate::Backend::cholesky
//! [`Backend::lu`]: crate::Backend::lu
//! [`Error::RankMismatch`]: crate::Error::RankMismatch
//! [`Error::ShapeMismatch`]: crate::Error::ShapeMismatch
//! [`Error::DTypeMismatch`]: crate::Error::DTypeMismatch
//! [`Error::InvalidArgument`]: crate::Error::InvalidArgument
//! [`Error::Singular`]: crate::Error::Singular
//! [`Error::NotPositiveDefinite`]: crate::Error::NotPositiveDefinite
//! [`Error::NonFinite`]: crate::Error::NonFinite

mod cholesky;
mod eig;
mod expm;
mod lu;
mod lu_factor;
mod lu_second;
mod norms;
mod pinv;
mod triangular;

pub use cholesky::{CholeskyRule, cholesky, host_cholesky};
pub use eig::EigRule;
pub use expm::{MatrixExpRule, matrix_exp};
pub use lu::{DetRule, InvRule, SlogdetRule, SolveRule, det, host_lu, inv, slogdet, solve};
pub use lu_factor::{LuFactorRule, lu_factor};
pub use norms::{MatrixNorm, MatrixNormRule, matrix_norm};
pub use pinv::{LstsqRule, PinvRule, lstsq, pinv};
pub use triangular::{SolveTriangularRule, solve_triangular};

use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_unit_lower_triangular_in_place,
    solve_unit_upper_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::{Mat, MatRef};

use super::batch::matrix_dims;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::scalar::{DType, ImplicitScalar, Scalar};

/// `(batch, n)` of a square `[batch…, n, n]`, named `arg` in errors.
pub(crate) fn square_dims(dims: &[usize], arg: &str) -> Result<(Vec<usize>, usize)> {
    let (batch, m, n) = matrix_dims(dims, arg)?;
    if m != n {
        let mut want = batch.clone();
        want.extend([m, m]);
        return Err(Error::shape(arg, &want, dims));
    }
    Ok((batch, n))
}

/// `(k, vector)` of a right-hand side `b` for a matrix `A: [batch…, rows, ·]` of rank `rank`:
/// a batch of vectors `[batch…, rows]` (`b`'s rank one less, `k = 1`) or of matrices
/// `[batch…, rows, k]` (the same rank).
///
/// # Errors
/// [`Error::RankMismatch`] for another rank, [`Error::ShapeMismatch`] (`"b"`) for another batch
/// or row count.
pub(crate) fn rhs_dims(
    batch: &[usize],
    rows: usize,
    rank: usize,
    b: &[usize],
) -> Result<(usize, bool)> {
    let vector = b.len() + 1 == rank;
    let (lead, r, k) = if vector {
        (&b[..b.len() - 1], b[b.len() - 1], 1)
    } else if b.len() == rank {
        (&b[..b.len() - 2], b[b.len() - 2], b[b.len() - 1])
    } else {
        return Err(Error::RankMismatch {
            arg: "b".into(),
            expected: rank,
            actual: b.len(),
        });
    };
    if lead != batch || r != rows {
        let mut want = batch.to_vec();
        want.push(rows);
        if !vector {
            want.push(k);
        }
        return Err(Error::shape("b", &want, b));
    }
    Ok((k, vector))
}

/// The dtypes of two inputs must be equal.
pub(crate) fn same_dtype(a: DType, b: DType, arg: &str) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::DTypeMismatch {
            arg: arg.into(),
            expected: a.to_string(),
            actual: b,
        })
    }
}

/// `h` with its entries kept and its shape changed to `dims` (same number of entries).
pub(crate) fn reshaped(h: HostTensor, dims: &[usize]) -> Result<HostTensor> {
    let (_, data) = h.into_parts();
    HostTensor::new(dims, data)
}

/// Solves `op(T)·X = R` in place (`R ← X`), `op` the identity or (with `adjoint`) the
/// conjugate transpose, reading only the `upper` (or lower) triangle of `t`, and with
/// `unit` its diagonal as ones.
pub(crate) fn tri_solve<T: ImplicitScalar>(
    t: MatRef<'_, T>,
    upper: bool,
    unit: bool,
    adjoint: bool,
    r: &mut Mat<T>,
) {
    let par = faer::get_global_parallelism();
    let rhs = r.as_mut();
    match (upper, unit, adjoint) {
        (false, false, false) => solve_lower_triangular_in_place(t, rhs, par),
        (false, true, false) => solve_unit_lower_triangular_in_place(t, rhs, par),
        (true, false, false) => solve_upper_triangular_in_place(t, rhs, par),
        (true, true, false) => solve_unit_upper_triangular_in_place(t, rhs, par),
        (false, false, true) => solve_upper_triangular_in_place(t.adjoint(), rhs, par),
        (false, true, true) => solve_unit_upper_triangular_in_place(t.adjoint(), rhs, par),
        (true, false, true) => solve_lower_triangular_in_place(t.adjoint(), rhs, par),
        (true, true, true) => solve_unit_lower_triangular_in_place(t.adjoint(), rhs, par),
    }
}

/// The `upper` (or lower) triangle of `a`, the other entries zero; with `strict`, without
/// the diagonal.
pub(crate) fn triangle<T: ImplicitScalar>(a: MatRef<'_, T>, upper: bool, strict: bool) -> Mat<T> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| {
        let keep = if upper { j > i } else { i > j } || (!strict && i == j);
        if keep { a[(i, j)] } else { T::zero() }
    })
}

/// The Hermitian part `(X + Xᴴ)/2` of a square `x`.
pub(crate) fn hermitian_part<T: ImplicitScalar>(x: MatRef<'_, T>) -> Mat<T> {
    let half = <T as Scalar>::from_f64(0.5);
    Mat::from_fn(x.nrows(), x.ncols(), |i, j| {
        (x[(i, j)] + Scalar::conj(x[(j, i)])) * half
    })
}

/// The conjugate transpose of `x`, owned.
pub(crate) fn adjoint<T: ImplicitScalar>(x: MatRef<'_, T>) -> Mat<T> {
    x.adjoint().to_owned()
}

/// [`Error::Singular`] naming `arg` for the first exactly zero diagonal entry of `u` (a
/// triangular factor), in matrix `b` of the batch.
pub(crate) fn check_pivots<T: ImplicitScalar>(u: MatRef<'_, T>, arg: &str, b: usize) -> Result<()> {
    let n = u.nrows().min(u.ncols());
    match (0..n).find(|&i| u[(i, i)] == T::zero()) {
        None => Ok(()),
        Some(i) => Err(Error::Singular {
            arg: arg.into(),
            reason: format!("pivot {i} of {n} is zero (matrix {b} of the batch, row-major order)"),
        }),
    }
}

/// The host copy of a rule's input `t`, checked finite and of `T`'s dtype, as matrices.
pub(crate) fn input_mats<B: Backend, T: ImplicitScalar>(
    be: &B,
    t: &B::Tensor,
    arg: &str,
) -> Result<Vec<Mat<T>>> {
    super::batch::split::<T>(&be.to_host(t)?, arg, true)
}

/// A rule's batched `rows × cols` matrix argument (a cotangent or a tangent) `t` as
/// [`host_mats`](super::driver::host_mats) checks and copies it, one matrix per entry of the
/// batch; zeros when it is absent (`None`, a zero cotangent or tangent).
pub(crate) fn mats_or_zeros<B: Backend, T: ImplicitScalar>(
    be: &B,
    t: &Option<B::Tensor>,
    batch: &[usize],
    [rows, cols]: [usize; 2],
    arg: &str,
) -> Result<Vec<Mat<T>>> {
    match t {
        Some(t) => super::driver::host_mats::<B, T>(be, t, batch, [rows, cols], arg),
        None => Ok(vec![Mat::zeros(rows, cols); batch.iter().product()]),
    }
}

/// A rule's batched cotangent or tangent `t` of a vector-or-matrix output of shape
/// `[batch…, rows]` (`vector`) or `[batch…, rows, cols]`, checked as
/// [`host_arg`](super::host_arg) does, as `rows × cols` matrices (`cols = 1` for a vector).
pub(crate) fn arg_mats<B: Backend, T: ImplicitScalar>(
    be: &B,
    t: &B::Tensor,
    batch: &[usize],
    [rows, cols]: [usize; 2],
    vector: bool,
    arg: &str,
) -> Result<Vec<Mat<T>>> {
    if !vector {
        return super::driver::host_mats::<B, T>(be, t, batch, [rows, cols], arg);
    }
    let dims: Vec<usize> = batch.iter().copied().chain([rows]).collect();
    let h = super::host_arg(be, t, &dims, T::DTYPE, arg)?;
    let mut as_matrix = dims;
    as_matrix.push(1);
    super::batch::split::<T>(&reshaped(h, &as_matrix)?, arg, false)
}

/// A rule's batched scalar argument (the cotangent or tangent of a determinant) of shape
/// `[batch…]`, checked as [`host_arg`](super::host_arg) does, converted to `T`.
pub(crate) fn arg_scalars<B: Backend, T: ImplicitScalar>(
    be: &B,
    t: &B::Tensor,
    batch: &[usize],
    dtype: DType,
    arg: &str,
) -> Result<Vec<T>> {
    let h = super::host_arg(be, t, batch, dtype, arg)?;
    Ok(h.data()
        .to_c64_vec()
        .into_iter()
        .map(|z| <T as Scalar>::from_c64_unchecked(z))
        .collect())
}

/// Per-matrix scalars as a host tensor `[batch…]` of `dtype` (`T`'s, or its real dtype), the
/// output `arg`.
///
/// # Errors
/// [`Error::NonFinite`] naming `arg` for an entry not finite in `dtype`.
pub(crate) fn gather_scalars<T: ImplicitScalar>(
    arg: &str,
    batch: &[usize],
    vals: &[T],
    dtype: DType,
) -> Result<HostTensor> {
    let max = if dtype.is_double() {
        f64::MAX
    } else {
        f32::MAX as f64
    };
    let z: Vec<crate::scalar::Complex64> = vals
        .iter()
        .map(|&x| crate::scalar::Complex64::new(super::common::re(x), super::common::im(x)))
        .collect();
    if let Some(p) = z.iter().position(|x| {
        !(x.re.is_finite() && x.im.is_finite() && x.re.abs() <= max && x.im.abs() <= max)
    }) {
        return Err(Error::NonFinite {
            arg: arg.into(),
            reason: format!(
                "entry {p} (row-major) is {} although every input is finite: the result is \
                 beyond the range of {dtype}",
                z[p]
            ),
        });
    }
    HostTensor::new(batch, crate::host::HostData::from_c64_projected(&z, dtype))
}

/// The methods every rule of this module shares: the name, `$n` inputs, `$m` outputs, and
/// nothing kept (the pullback owns the host factors it reads).
macro_rules! dense_rule {
    ($name:literal, $n:literal, $m:literal) => {
        fn name(&self) -> &str {
            $name
        }

        fn num_inputs(&self) -> usize {
            $n
        }

        fn num_outputs(&self) -> usize {
            $m
        }

        fn keeps(&self, _: &[bool]) -> crate::rule::Keeps {
            crate::rule::Keeps::none($n, $m)
        }
    };
}
pub(crate) use dense_rule;

/// [`dense_rule!`] for a rule of one square input `A` whose `rrule` and `frule` are the
/// functions `$rrule::<B, T>(be, a $(, $extra)*)` and `$frule::<B, T>(be, a, ȧ $(, $extra)*)`
/// for the dtype `T` of `A`, and whose `check` is `A`'s squareness.
macro_rules! square_rule {
    ($name:literal, $m:literal, $rrule:ident, $frule:ident $(, $extra:expr)*) => {
        $crate::linalg::dense::dense_rule!($name, 1, $m);

        fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
            $crate::linalg::dense::square_dims(&be.dims(x[0]), "a").map(drop)
        }

        fn rrule<B: SyncBackend>(
            &self,
            be: &B,
            x: &[&B::Tensor],
            _: &[bool],
        ) -> Result<$crate::linalg::dense::Outputs<B>> {
            $crate::linalg::batch::by_dtype!(be.dtype(x[0]), $rrule::<B>(be, x[0] $(, $extra)*))
        }

        fn frule<B: SyncBackend>(
            &self,
            be: &B,
            x: &[&B::Tensor],
            dx: &[Option<&B::Tensor>],
        ) -> Result<$crate::linalg::dense::WithTangents<B>> {
            $crate::linalg::batch::by_dtype!(
                be.dtype(x[0]),
                $frule::<B>(be, x[0], dx[0] $(, $extra)*)
            )
        }
    };
}
pub(crate) use square_rule;

/// A rule's outputs with its pullback.
pub(crate) type Outputs<B> = (
    Vec<<B as Backend>::Tensor>,
    Box<dyn crate::rule::Pullback<B>>,
);
/// A rule's outputs with their tangents.
pub(crate) type WithTangents<B> = (
    Vec<<B as Backend>::Tensor>,
    Vec<Option<<B as Backend>::Tensor>>,
);
/// The cotangents a pullback returns.
pub(crate) type Cotangents<B> = Result<Vec<Option<<B as Backend>::Tensor>>>;
