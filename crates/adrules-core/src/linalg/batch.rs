//! Host-side plumbing shared by the decompositions: batches of row-major matrices to and
//! from faer matrices, dtype dispatch, scalar helpers and the tolerances.

use faer::linalg::matmul::matmul;
use faer::traits::Conjugate;
use faer::{Accum, Mat, MatRef};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::{HostData, HostTensor};
use crate::implicit::ImplicitScalar;
use crate::scalar::{Complex64, DType, RealScalar, Scalar};

/// Calls `$f::<T>($args)` for the element type `T` of `$dtype`.
macro_rules! by_dtype {
    ($dtype:expr, $f:ident :: < $($g:ty),+ > ( $($arg:expr),* $(,)? )) => {
        match $dtype {
            $crate::scalar::DType::F32 => $f::<$($g,)+ f32>($($arg),*),
            $crate::scalar::DType::F64 => $f::<$($g,)+ f64>($($arg),*),
            $crate::scalar::DType::C32 => $f::<$($g,)+ $crate::scalar::Complex32>($($arg),*),
            $crate::scalar::DType::C64 => $f::<$($g,)+ $crate::scalar::Complex64>($($arg),*),
        }
    };
    ($dtype:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $dtype {
            $crate::scalar::DType::F32 => $f::<f32>($($arg),*),
            $crate::scalar::DType::F64 => $f::<f64>($($arg),*),
            $crate::scalar::DType::C32 => $f::<$crate::scalar::Complex32>($($arg),*),
            $crate::scalar::DType::C64 => $f::<$crate::scalar::Complex64>($($arg),*),
        }
    };
}
pub(crate) use by_dtype;

pub(crate) use crate::implicit::eps;

pub(crate) fn re<T: ImplicitScalar>(x: T) -> f64 {
    Scalar::re(x).to_f64()
}
pub(crate) fn im<T: ImplicitScalar>(x: T) -> f64 {
    Scalar::im(x).to_f64()
}
pub(crate) fn abs<T: ImplicitScalar>(x: T) -> f64 {
    Scalar::modulus(x).to_f64()
}
pub(crate) fn cj<T: ImplicitScalar>(x: T) -> T {
    Scalar::conj(x)
}
pub(crate) fn real<T: ImplicitScalar>(x: f64) -> T {
    <T as Scalar>::from_f64(x)
}
pub(crate) fn cplx<T: ImplicitScalar>(re: f64, im: f64) -> T {
    <T as Scalar>::from_c64_unchecked(Complex64::new(re, im))
}

/// A power of two near `x` (1 for 0 or a non-finite `x`): dividing by it is exact, and brings
/// the magnitude of a matrix to about 1 before a decomposition, whose iterations (faer's)
/// fail or lose accuracy near the ends of the exponent range, and before the rules form
/// squares of singular values.
///
/// Any finite `x > 0` gets its own scale, subnormal ones included (`2⁻¹⁰⁷⁴ … 2¹⁰²³`): the
/// rules then divide by it ([`unscaled`]), never multiply by its reciprocal,
/// which overflows below `2⁻¹⁰²³`.
pub(crate) fn pow2_scale(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return 1.0;
    }
    pow2((x.log2().round() as i32).clamp(-1074, 1023))
}

/// `2ᵏ` exactly, for `k` in `-1074 ..= 1023` (subnormal below `-1022`).
fn pow2(k: i32) -> f64 {
    debug_assert!((-1074..=1023).contains(&k));
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074))
    }
}

/// The exponent `k` of a power of two `c = 2ᵏ` (normal or subnormal).
fn exponent(c: f64) -> i32 {
    let bits = c.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32;
    if e == 0 {
        63 - bits.leading_zeros() as i32 - 1074
    } else {
        e - 1023
    }
}

/// The two representable powers of two whose product is `1/c` for a power of two `c`
/// (`1/c` itself overflows for `c < 2⁻¹⁰²³`, and in single precision sooner): multiplying
/// by both is exact wherever the quotient is representable, in either precision (each
/// factor is at most `2⁵³⁷`, `2⁷⁵` for the scales of single-precision data).
fn reciprocal_factors(c: f64) -> (f64, f64) {
    let k = -exponent(c);
    let h = k / 2;
    (pow2(h), pow2(k - h))
}

/// `x / c` for every entry, `c` a power of two (see [`reciprocal_factors`]).
pub(crate) fn unscaled<T: ImplicitScalar>(x: MatRef<'_, T>, c: f64) -> Mat<T> {
    let (a, b) = reciprocal_factors(c);
    let (a, b) = (real::<T>(a), real::<T>(b));
    Mat::from_fn(x.nrows(), x.ncols(), |i, j| x[(i, j)] * a * b)
}

/// `x ← x / c` in place, `c` a power of two (see [`reciprocal_factors`]).
pub(crate) fn unscale<T: ImplicitScalar>(x: &mut Mat<T>, c: f64) {
    let (a, b) = reciprocal_factors(c);
    let (a, b) = (real::<T>(a), real::<T>(b));
    for col in x.col_iter_mut() {
        for v in col.iter_mut() {
            *v = *v * a * b;
        }
    }
}

/// `x·c` for every entry.
pub(crate) fn scaled<T: ImplicitScalar>(x: MatRef<'_, T>, c: f64) -> Mat<T> {
    let c = real::<T>(c);
    Mat::from_fn(x.nrows(), x.ncols(), |i, j| x[(i, j)] * c)
}

/// `a·b` (either operand may be an adjoint view).
pub(crate) fn mm<T, L, R>(a: MatRef<'_, L>, b: MatRef<'_, R>) -> Mat<T>
where
    T: ImplicitScalar,
    L: Conjugate<Canonical = T>,
    R: Conjugate<Canonical = T>,
{
    let mut c = Mat::zeros(a.nrows(), b.ncols());
    matmul(
        c.as_mut(),
        Accum::Replace,
        a,
        b,
        T::one(),
        faer::get_global_parallelism(),
    );
    c
}

/// `c ← c + α·a·b`.
pub(crate) fn mm_add<T, L, R>(c: &mut Mat<T>, alpha: T, a: MatRef<'_, L>, b: MatRef<'_, R>)
where
    T: ImplicitScalar,
    L: Conjugate<Canonical = T>,
    R: Conjugate<Canonical = T>,
{
    matmul(
        c.as_mut(),
        Accum::Add,
        a,
        b,
        alpha,
        faer::get_global_parallelism(),
    );
}

/// Largest modulus of the entries (0 for an empty matrix).
pub(crate) fn max_abs<T: ImplicitScalar>(a: MatRef<'_, T>) -> f64 {
    let mut m = 0.0f64;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            m = m.max(abs(a[(i, j)]));
        }
    }
    m
}

/// The `(batch, m, n)` split of a shape of rank ≥ 2.
pub(crate) fn matrix_dims(dims: &[usize], arg: &str) -> Result<(Vec<usize>, usize, usize)> {
    if dims.len() < 2 {
        return Err(Error::RankMismatch {
            arg: arg.into(),
            expected: 2,
            actual: dims.len(),
        });
    }
    let r = dims.len();
    Ok((dims[..r - 2].to_vec(), dims[r - 2], dims[r - 1]))
}

/// Splits a host tensor `[batch…, m, n]` of dtype `T` into faer matrices, in row-major
/// batch order. Non-finite entries
/// are an [`Error::InvalidArgument`] naming `arg` when `finite` is asked for.
pub(crate) fn split<T: ImplicitScalar>(
    h: &HostTensor,
    arg: &str,
    finite: bool,
) -> Result<Vec<Mat<T>>> {
    let (batch, m, n) = matrix_dims(h.dims(), arg)?;
    let data = h.as_slice::<T>().map_err(|_| Error::DTypeMismatch {
        arg: arg.into(),
        expected: T::DTYPE.to_string(),
        actual: h.dtype(),
    })?;
    let count: usize = batch.iter().product();
    let mut mats = Vec::with_capacity(count);
    for b in 0..count {
        let block = &data[b * m * n..(b + 1) * m * n];
        if finite && let Some(p) = block.iter().position(|x| !Scalar::is_finite(*x)) {
            return Err(Error::invalid(
                arg,
                format!(
                    "entry ({}, {}) of matrix {b} is not finite ({:?})",
                    p / n,
                    p % n,
                    block[p]
                ),
            ));
        }
        mats.push(Mat::from_fn(m, n, |i, j| block[i * n + j]));
    }
    Ok(mats)
}

/// The output `arg` is not finite: the rules check their inputs for finite entries, so
/// this is an overflow of the true result beyond the range of `dtype`.
fn non_finite(arg: &str, at: String, value: String, dtype: DType) -> Error {
    Error::NonFinite {
        arg: arg.to_string(),
        reason: format!(
            "{at} is {value} although every input is finite: the result is beyond the range of \
             {dtype}"
        ),
    }
}

/// Gathers `rows × cols` matrices into a host tensor `[batch…, rows, cols]`, the output
/// `arg` of a decomposition or rule.
///
/// # Errors
/// [`Error::NonFinite`] naming `arg` for a non-finite entry.
pub(crate) fn join<T: ImplicitScalar>(
    arg: &str,
    batch: &[usize],
    rows: usize,
    cols: usize,
    mats: &[Mat<T>],
) -> Result<HostTensor> {
    let mut data = Vec::with_capacity(mats.len() * rows * cols);
    for (b, a) in mats.iter().enumerate() {
        debug_assert_eq!(a.shape(), (rows, cols));
        for i in 0..rows {
            for j in 0..cols {
                let x = a[(i, j)];
                if !Scalar::is_finite(x) {
                    let at = format!("entry ({i}, {j}) of matrix {b}");
                    return Err(non_finite(arg, at, format!("{x:?}"), T::DTYPE));
                }
                data.push(x);
            }
        }
    }
    let mut dims = batch.to_vec();
    dims.extend([rows, cols]);
    HostTensor::from_vec(&dims, data)
}

/// Gathers real vectors of length `len` into a host tensor `[batch…, len]` of dtype
/// `dtype` (a real dtype), the output `arg`.
///
/// # Errors
/// [`Error::NonFinite`] naming `arg` for an entry that is not finite in `dtype`.
pub(crate) fn join_real(
    arg: &str,
    batch: &[usize],
    len: usize,
    vecs: &[Vec<f64>],
    dtype: DType,
) -> Result<HostTensor> {
    let data: Vec<f64> = vecs.iter().flat_map(|v| v.iter().copied()).collect();
    let max = if dtype == DType::F32 {
        f32::MAX as f64
    } else {
        f64::MAX
    };
    if let Some(p) = data.iter().position(|x| !x.is_finite() || x.abs() > max) {
        let at = format!("entry {p} (row-major)");
        return Err(non_finite(arg, at, format!("{:e}", data[p]), dtype));
    }
    let mut dims = batch.to_vec();
    dims.push(len);
    Ok(HostTensor::new(&dims, HostData::F64(data))?.to_dtype_projected(dtype))
}

/// Splits a real host tensor `[batch…, len]` into vectors.
pub(crate) fn split_real(h: &HostTensor, len: usize) -> Vec<Vec<f64>> {
    let v = h.data().to_c64_vec();
    if len == 0 {
        let count: usize = h.dims()[..h.dims().len() - 1].iter().product();
        return vec![Vec::new(); count];
    }
    v.chunks(len)
        .map(|c| c.iter().map(|z| z.re).collect())
        .collect()
}

/// Brings a cotangent or tangent to the host, checked against the shape it must have, for
/// finite entries ([`Error::InvalidArgument`]) and converted to `dtype` (it must promote to
/// it losslessly: an `f32` cotangent serves an `f64` factor, not the reverse).
pub(crate) fn host_arg<B: Backend>(
    be: &B,
    t: &B::Tensor,
    dims: &[usize],
    dtype: DType,
    arg: &str,
) -> Result<HostTensor> {
    let got = be.dims(t);
    if got.as_slice() != dims {
        return Err(Error::shape(arg, dims, &got));
    }
    let h = be.to_host(t)?;
    if let Some(p) = crate::finite::host_first_non_finite(&h) {
        return Err(Error::invalid(
            arg,
            format!("entry {p} (row-major) is not finite"),
        ));
    }
    if h.dtype() == dtype {
        Ok(h)
    } else if h.dtype().promotes_to(dtype) {
        Ok(h.to_dtype_projected(dtype))
    } else {
        Err(Error::DTypeMismatch {
            arg: arg.into(),
            expected: dtype.to_string(),
            actual: h.dtype(),
        })
    }
}

/// Columns `from..to` of `a`, owned.
pub(crate) fn cols<T: ImplicitScalar>(a: MatRef<'_, T>, from: usize, to: usize) -> Mat<T> {
    a.subcols(from, to - from).to_owned()
}

/// `[a, b]` side by side.
pub(crate) fn hcat<T: ImplicitScalar>(a: MatRef<'_, T>, b: MatRef<'_, T>) -> Mat<T> {
    let (m, ka) = a.shape();
    Mat::from_fn(m, ka + b.ncols(), |i, j| {
        if j < ka { a[(i, j)] } else { b[(i, j - ka)] }
    })
}
