//! Helpers shared by the decompositions, on faer matrices: scalar conversions, exact
//! power-of-two scaling, products, the reciprocals of gaps with broadening, and the gauge
//! pieces (the complement columns' tangent and the fold of their cotangent).

use faer::linalg::matmul::matmul;
use faer::traits::Conjugate;
use faer::{Accum, Mat, MatMut, MatRef};

use crate::error::{Error, Result};
use crate::scalar::{Complex64, ImplicitScalar, RealScalar, Scalar, eps};

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
pub(crate) fn reciprocal_factors(c: f64) -> (f64, f64) {
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
    mm_to(c.as_mut(), Accum::Add, alpha, a, b);
}

/// `c ← a·b` (`Accum::Replace`, `alpha` 1) or `c ← c + α·a·b` (`Accum::Add`) into a view of
/// any layout: a row-major output written in place.
pub(crate) fn mm_to<T, L, R>(
    c: MatMut<'_, T>,
    accum: Accum,
    alpha: T,
    a: MatRef<'_, L>,
    b: MatRef<'_, R>,
) where
    T: ImplicitScalar,
    L: Conjugate<Canonical = T>,
    R: Conjugate<Canonical = T>,
{
    matmul(c, accum, a, b, alpha, faer::get_global_parallelism());
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

/// `1/Δ` for a gap `Δ` of the spectrum, `Δ/(Δ² + ε)` with broadening, `None` for a
/// degenerate pair (`|Δ| ≤ tol`) without broadening.
pub(crate) fn inv_gap(delta: f64, tol: f64, broadening: f64) -> Option<f64> {
    if broadening > 0.0 {
        Some(delta / (delta * delta + broadening))
    } else if delta.abs() <= tol {
        None
    } else {
        Some(1.0 / delta)
    }
}

/// The derivative of [`inv_gap`] at `delta` (0 where it is `None`).
pub(crate) fn inv_gap_slope(delta: f64, tol: f64, broadening: f64) -> f64 {
    if broadening > 0.0 {
        let d2 = delta * delta;
        (broadening - d2) / ((d2 + broadening) * (d2 + broadening))
    } else if delta.abs() <= tol {
        0.0
    } else {
        -1.0 / (delta * delta)
    }
}

pub(crate) fn gauge_error(arg: &str, reason: String) -> Error {
    Error::GaugeIllDefined {
        arg: arg.into(),
        reason,
    }
}

/// Folds the cotangent `Q̄⊥` of complement columns `Q⊥` into the cotangent of the leading
/// columns `Q`: `Q̄ − Q⊥·Q̄⊥ᴴ·Q`, valid when the loss depends on `Q⊥` only through
/// `Q⊥·Q⊥ᴴ = I − Q·Qᴴ`, i.e. when `Q⊥ᴴ·Q̄⊥` is Hermitian (else [`Error::GaugeIllDefined`]).
/// The adjoint of the complement tangent `Q̇⊥ = −Q·Q̇ᴴ·Q⊥`.
pub(crate) fn fold_complement<T: ImplicitScalar>(
    q: MatRef<'_, T>,
    perp: MatRef<'_, T>,
    mut bar: Mat<T>,
    bar_perp: MatRef<'_, T>,
    op: &str,
    what: &str,
) -> Result<Mat<T>> {
    if perp.ncols() == 0 {
        return Ok(bar);
    }
    let g = mm(perp.adjoint(), bar_perp);
    let skew = max_abs((&g - g.adjoint()).as_ref());
    let tol = eps::<T>().sqrt() * max_abs(bar_perp);
    if skew > tol {
        return Err(gauge_error(
            op,
            format!(
                "the cotangent of the complement columns of {what} depends on their basis \
                 (max|G − Gᴴ| = {skew:e} for G = {what}⊥ᴴ·{what}̄⊥); only the leading columns \
                 and the projector {what}⊥·{what}⊥ᴴ are functions of A"
            ),
        ));
    }
    let t = mm(bar_perp.adjoint(), q);
    mm_add(&mut bar, -T::one(), perp, t.as_ref());
    Ok(bar)
}

/// The tangent of [`fold_complement`]'s `Q̄ − Q⊥·Q̄⊥ᴴ·Q` when `Q`, `Q⊥`, `Q̄⊥` and `Q̄` move
/// along `q_dot`, `perp_dot`, `bar_perp_dot` and `bar_dot`:
/// `Q̄̇ − Q̇⊥·Q̄⊥ᴴ·Q − Q⊥·Q̄̇⊥ᴴ·Q − Q⊥·Q̄⊥ᴴ·Q̇` (the check is [`fold_complement`]'s).
pub(crate) fn fold_complement_tangent<T: ImplicitScalar>(
    q: MatRef<'_, T>,
    q_dot: MatRef<'_, T>,
    perp: MatRef<'_, T>,
    perp_dot: MatRef<'_, T>,
    bar_perp: MatRef<'_, T>,
    bar_perp_dot: MatRef<'_, T>,
    mut bar_dot: Mat<T>,
) -> Mat<T> {
    if perp.ncols() == 0 {
        return bar_dot;
    }
    let one = T::one();
    let t = mm(bar_perp.adjoint(), q);
    mm_add(&mut bar_dot, -one, perp_dot, t.as_ref());
    let t = mm(bar_perp_dot.adjoint(), q);
    mm_add(&mut bar_dot, -one, perp, t.as_ref());
    let t = mm(bar_perp.adjoint(), q_dot);
    mm_add(&mut bar_dot, -one, perp, t.as_ref());
    bar_dot
}

/// The tangent of complement columns `Q⊥` for the tangent `Q̇` of the leading ones `Q`: the
/// rotation that keeps `[Q, Q⊥]` unitary with `Q⊥ᴴ·Q̇⊥ = 0`, `Q̇⊥ = −Q·Q̇ᴴ·Q⊥`.
pub(crate) fn complement_tangent<T: ImplicitScalar>(
    q: MatRef<'_, T>,
    q_dot: MatRef<'_, T>,
    perp: MatRef<'_, T>,
) -> Mat<T> {
    let t = mm(q_dot.adjoint(), perp);
    let mut out = mm(q, t.as_ref());
    for x in out.col_iter_mut() {
        for y in x.iter_mut() {
            *y = -*y;
        }
    }
    out
}
