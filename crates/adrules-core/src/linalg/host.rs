//! The decompositions on host data, by faer: the defaults of [`Backend::svd`],
//! [`Backend::qr`] and [`Backend::eigh`], and the modes that give the factors' shapes. No
//! backend here: a [`HostTensor`] in, host tensors out.
//!
//! [`Backend::svd`]: crate::Backend::svd
//! [`Backend::qr`]: crate::Backend::qr
//! [`Backend::eigh`]: crate::Backend::eigh

use faer::{Mat, MatRef, Side};

use super::batch::{RowMajor, Views, by_dtype, matrix_dims, split};
use super::common::{abs, cj, max_abs, pow2_scale, re, real, reciprocal_factors, scaled, unscaled};
use super::driver::per_matrix;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::scalar::{ImplicitScalar, eps};

/// Which singular vectors [`svd`] returns, for `A` of shape `[batch…, m, n]` and
/// `k = min(m, n)`.
///
/// [`svd`]: super::svd()
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SvdMode {
    /// `U: [batch…, m, k]`, `S: [batch…, k]`, `Vh: [batch…, k, n]`.
    #[default]
    Thin,
    /// `U: [batch…, m, m]`, `S: [batch…, k]`, `Vh: [batch…, n, n]`: the thin factors
    /// completed to unitary matrices. The complement columns are not functions of `A` (any
    /// orthonormal basis of the complement will do), so the rules accept a cotangent on them
    /// only when it does not depend on that basis (see [`SvdPullback::pullback`]).
    ///
    /// [`SvdPullback::pullback`]: super::SvdPullback::pullback
    Full,
}

/// Which `Q` [`qr`] returns, for `A: [batch…, m, n]` and `k = min(m, n)`.
///
/// [`qr`]: super::qr()
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum QrMode {
    /// `Q: [batch…, m, k]`, `R: [batch…, k, n]`.
    #[default]
    Reduced,
    /// `Q: [batch…, m, m]`, `R: [batch…, m, n]` (rows below `k` zero). The columns of `Q`
    /// beyond `k` are a basis of the complement, not a function of `A`: the rules accept a
    /// cotangent on them only when it does not depend on that basis.
    Complete,
}

/// The SVD on host data, by faer, one matrix of the batch at a time: the default of
/// [`Backend::svd`].
///
/// # Errors
/// As [`svd`].
///
/// [`Backend::svd`]: crate::Backend::svd
/// [`svd`]: super::svd()
pub fn host_svd(a: &HostTensor, mode: SvdMode) -> Result<[HostTensor; 3]> {
    by_dtype!(a.dtype(), host_svd_t(a, mode))
}

fn host_svd_t<T: ImplicitScalar>(a: &HostTensor, mode: SvdMode) -> Result<[HostTensor; 3]> {
    let (batch, m, n) = matrix_dims(a.dims(), "a")?;
    let k = m.min(n);
    let mats = Views::<T>::new(a, "a")?;
    mats.check_finite("a")?;
    let full = mode == SvdMode::Full;
    let (ku, kv) = if full { (m, n) } else { (k, k) };
    per_matrix::<T, _>(&batch, (("u", m, ku), ("s", k), ("vh", kv, n)), |b| {
        svd_matrix(mats.get(b), mats.block(b), full)
    })
}

/// One matrix `a` (its row-major entries `block`): `(U, s, Vh)` with `U: m×k` or `m×m`,
/// `Vh: k×n` or `n×n`, written row-major from faer's factors (one copy each).
fn svd_matrix<T: ImplicitScalar>(
    a: MatRef<'_, T>,
    block: &[T],
    full: bool,
) -> Result<(RowMajor<T>, Vec<f64>, RowMajor<T>)> {
    let (m, n) = a.shape();
    if m.min(n) == 0 {
        let (ku, kv) = if full { (m, n) } else { (0, 0) };
        let v = Mat::<T>::identity(n, kv);
        let vh = RowMajor::from_fn(kv, n, |i, j| cj(v[(j, i)]));
        return Ok((
            RowMajor::copy_of(Mat::identity(m, ku).as_ref()),
            Vec::new(),
            vh,
        ));
    }
    let c = pow2_scale(max_abs_slice(block));
    let a = unscaled(a, c);
    let dec = if full {
        faer::linalg::solvers::Svd::new(a.as_ref())
    } else {
        faer::linalg::solvers::Svd::new_thin(a.as_ref())
    }
    .map_err(|e| Error::Backend {
        backend: "faer".into(),
        message: format!("svd of a {m}×{n} matrix: {e:?}"),
    })?;
    let s = dec.S().column_vector().iter().map(|&x| re(x) * c).collect();
    let (u, v) = (dec.U(), dec.V());
    let vh = RowMajor::from_fn(v.ncols(), n, |i, j| cj(v[(j, i)]));
    Ok((RowMajor::copy_of(u), s, vh))
}

/// [`max_abs`] of a matrix given by its entries (the same value: the maximum does not depend
/// on the order).
fn max_abs_slice<T: ImplicitScalar>(x: &[T]) -> f64 {
    x.iter().fold(0.0f64, |m, &v| m.max(abs(v)))
}

/// The QR decomposition on host data, by faer's Householder QR, with the diagonal of `R`
/// made real and non-negative (see [`Qr`]): the default of [`Backend::qr`].
///
/// # Errors
/// As [`qr`].
///
/// [`Qr`]: super::Qr
/// [`Backend::qr`]: crate::Backend::qr
/// [`qr`]: super::qr()
pub fn host_qr(a: &HostTensor, mode: QrMode) -> Result<[HostTensor; 2]> {
    by_dtype!(a.dtype(), host_qr_t(a, mode))
}

fn host_qr_t<T: ImplicitScalar>(a: &HostTensor, mode: QrMode) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(a.dims(), "a")?;
    let k = m.min(n);
    let complete = mode == QrMode::Complete;
    let mats = split::<T>(a, "a", true)?;
    let (kq, kr) = if complete { (m, m) } else { (k, k) };
    per_matrix::<T, _>(&batch, (("q", m, kq), ("r", kr, n)), |b| {
        Ok(qr_matrix(mats[b].as_ref(), complete))
    })
}

fn qr_matrix<T: ImplicitScalar>(a: MatRef<'_, T>, complete: bool) -> (Mat<T>, Mat<T>) {
    let (m, n) = a.shape();
    let k = m.min(n);
    if k == 0 {
        let kq = if complete { m } else { 0 };
        return (Mat::identity(m, kq), Mat::zeros(kq, n));
    }
    // R scales with A, Q does not: decompose A/c (c a power of two near max|A|), scale R back
    let c = pow2_scale(max_abs(a));
    let a = unscaled(a, c);
    let dec = faer::linalg::solvers::Qr::new(a.as_ref());
    let mut q = if complete {
        dec.compute_Q()
    } else {
        dec.compute_thin_Q()
    };
    let thin_r = dec.thin_R();
    let rows = if complete { m } else { k };
    let mut r = Mat::from_fn(rows, n, |i, j| {
        if i < k && j >= i {
            thin_r[(i, j)]
        } else {
            T::zero()
        }
    });
    // The gauge: rotate row i of R by dᵢ = conj(rᵢᵢ)/|rᵢᵢ| and column i of Q by conj(dᵢ),
    // which makes the diagonal of R real and positive.
    for i in 0..k {
        let rii = r[(i, i)];
        let a = abs(rii);
        if a == 0.0 {
            continue;
        }
        let d = cj(rii) * real::<T>(1.0 / a);
        for j in i + 1..n {
            r[(i, j)] = d * r[(i, j)];
        }
        r[(i, i)] = real::<T>(a);
        for row in 0..m {
            q[(row, i)] *= cj(d);
        }
    }
    (q, scaled(r.as_ref(), c))
}

/// The eigendecomposition on host data, by faer's self-adjoint solver: the default of
/// [`Backend::eigh`].
///
/// # Errors
/// As [`eigh`].
///
/// [`Backend::eigh`]: crate::Backend::eigh
/// [`eigh`]: super::eigh()
pub fn host_eigh(a: &HostTensor) -> Result<[HostTensor; 2]> {
    by_dtype!(a.dtype(), host_eigh_t(a))
}

fn host_eigh_t<T: ImplicitScalar>(a: &HostTensor) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(a.dims(), "a")?;
    if m != n {
        let mut want = batch.clone();
        want.extend([n, n]);
        return Err(Error::shape("a", &want, a.dims()));
    }
    let mats = Views::<T>::new(a, "a")?;
    mats.check_finite("a")?;
    per_matrix::<T, _>(&batch, (("values", n), ("vectors", n, n)), |b| {
        let x = mats.get(b);
        let big = max_abs_slice(mats.block(b));
        let mut skew = 0.0f64;
        for j in 0..n {
            for i in 0..=j {
                skew = skew.max(abs(x[(i, j)] - cj(x[(j, i)])));
            }
        }
        if skew > eps::<T>().sqrt() * big {
            return Err(Error::invalid(
                "a",
                format!(
                    "matrix {b} is not Hermitian: max|A − Aᴴ| = {skew:e} > √ε·max|A| = {:e}",
                    eps::<T>().sqrt() * big
                ),
            ));
        }
        if n == 0 {
            return Ok((Vec::new(), RowMajor::zeros(0, 0)));
        }
        // the Hermitian part, divided by c (what `unscaled` does) in the same pass
        let c = pow2_scale(big);
        let (f, g) = reciprocal_factors(c);
        let (f, g, half) = (real::<T>(f), real::<T>(g), real::<T>(0.5));
        let h = Mat::from_fn(n, n, |i, j| (x[(i, j)] + cj(x[(j, i)])) * half * f * g);
        let dec =
            faer::linalg::solvers::SelfAdjointEigen::new(h.as_ref(), Side::Lower).map_err(|e| {
                Error::Backend {
                    backend: "faer".into(),
                    message: format!("eigh of a {n}×{n} matrix: {e:?}"),
                }
            })?;
        let values = dec.S().column_vector().iter().map(|&x| re(x) * c).collect();
        Ok((values, RowMajor::copy_of(dec.U())))
    })
}
