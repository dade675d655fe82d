//! The SVD's rules on one matrix: the pullback (Townsend's formula with the complex phase
//! term and the out-of-span terms), the pushforward, and the scalar pieces they share (the
//! singular values in units of their scale, `1/s` and `1/Δ` with broadening).

use super::*;

/// Singular values in units of a power of two `c` near the largest, with the broadening in
/// the same units (`ε/c⁴` for the gaps of squares, `ε/c²` for the values).
pub(super) struct Scaled {
    pub(super) s: Vec<f64>,
    pub(super) s0: f64,
    pub(super) c: f64,
    pub(super) eb_gap: f64,
    pub(super) eb_s: f64,
}

impl Scaled {
    pub(super) fn new(s: &[f64], broadening: f64) -> Self {
        let c = pow2_scale(s.iter().fold(0.0f64, |a, &b| a.max(b)));
        let s: Vec<f64> = s.iter().map(|x| x / c).collect();
        let s0 = s.iter().fold(0.0f64, |a, &b| a.max(b));
        let per = |p: i32| {
            if broadening == 0.0 {
                0.0
            } else {
                broadening / c.powi(p)
            }
        };
        Scaled {
            s0,
            c,
            eb_gap: per(4),
            eb_s: per(2),
            s,
        }
    }
}

/// The inverse of a singular value in the rules: `1/s`, `s/(s² + ε)` with broadening, and
/// `None` for a zero one (at most `rtol·s₀`) without broadening.
pub(super) fn inv_s(s: f64, s0: f64, rtol: f64, broadening: f64) -> Option<f64> {
    if broadening > 0.0 {
        Some(s / (s * s + broadening))
    } else if s <= rtol * s0 {
        None
    } else {
        Some(1.0 / s)
    }
}

/// One matrix: `Ā` (row-major) from thin factors `U: m×k`, `s`, `Vh: k×n` (any
/// `k ≤ min(m, n)`) and the cotangents `Ū: m×k`, `S̄`, `V̄h: k×n` (the formula of
/// [`SvdPullback::pullback`], with `V = Vhᴴ`, `V̄ = V̄hᴴ`). The matrices may be views of any
/// layout (the host buffers, row-major): nothing is copied but the `m×k` and `n×k` terms of a
/// rectangular `A`.
pub(super) fn svd_pullback<T: ImplicitScalar>(
    u: MatRef<'_, T>,
    s: &[f64],
    vh: MatRef<'_, T>,
    ubar: Option<MatRef<'_, T>>,
    sbar: Option<&[f64]>,
    vhbar: Option<MatRef<'_, T>>,
    opts: &RuleOptions,
) -> Result<RowMajor<T>> {
    let (m, k) = u.shape();
    let n = vh.ncols();
    if k == 0 {
        return Ok(RowMajor::zeros(m, n));
    }
    // singular values in units of c (a power of two near s₀), so that their squares neither
    // overflow nor underflow. Ā = U·diag(S̄)·Vᴴ + Ā₁/c: the first term is homogeneous of
    // degree 0 in the scale of A, every other one (through 1/s and s/Δ) of degree −1, and
    // is formed in those units (Ā₁'s small factors) and divided by c (a power of two:
    // exact, by two factors since 1/c may overflow) before the m×n products.
    let sc = Scaled::new(s, opts.broadening);
    let (s, s0, c) = (sc.s.as_slice(), sc.s0, sc.c);
    let rtol = opts.rtol::<T>(m.min(n));
    let j = ubar.map_or_else(|| Mat::zeros(k, k), |x| mm(u.adjoint(), x));
    // K = Vᴴ·V̄ = Vh·V̄hᴴ
    let kk = vhbar.map_or_else(|| Mat::zeros(k, k), |x| mm(vh, x.adjoint()));
    // the gauge checks' scale: the cotangents' size (J and K alone can be rounding-small
    // when Ū lies mostly outside span U)
    let gtol =
        eps::<T>().sqrt() * (ubar.map_or(0.0, |x| max_abs(x)) + vhbar.map_or(0.0, |x| max_abs(x)));
    let complex = T::DTYPE.is_complex();
    if complex {
        for i in 0..k {
            let g = im(j[(i, i)]) + im(kk[(i, i)]);
            if g.abs() > gtol {
                return Err(gauge_error(
                    "svd",
                    format!(
                        "Im(diag(Uᴴ·Ū) + diag(Vᴴ·V̄)) is {g:e} at singular value {i} ({:e}): the \
                         loss depends on the phases of the singular vectors",
                        s[i] * c
                    ),
                ));
            }
        }
    }
    let stol =
        eps::<T>().sqrt() * sbar.map_or(0.0, |x| x.iter().fold(0.0f64, |a, b| a.max(b.abs())));
    // P/c: every entry times the two factors of 1/c (what `unscale` does), as it is formed
    let (ca, cb) = reciprocal_factors(c);
    let (ca, cb) = (real::<T>(ca), real::<T>(cb));
    let mut p = Mat::<T>::zeros(k, k);
    for i in 0..k {
        for jj in 0..k {
            if i == jj {
                continue;
            }
            let num = (j[(i, jj)] - cj(j[(jj, i)])) * real::<T>(s[jj])
                + real::<T>(s[i]) * (kk[(i, jj)] - cj(kk[(jj, i)]));
            let delta = s[jj] * s[jj] - s[i] * s[i];
            match inv_gap(delta, rtol * s0 * (s[i] + s[jj]), sc.eb_gap) {
                // num·(1/Δ) in units of c (true value: this divided by c)
                Some(f) => p[(i, jj)] = num * real::<T>(f) * ca * cb,
                None => {
                    let (si, sj) = sbar.map_or((0.0, 0.0), |x| (x[i], x[jj]));
                    if (si - sj).abs() > stol {
                        return Err(gauge_error(
                            "svd",
                            format!(
                                "singular values {i} and {jj} are degenerate ({:e}, {:e}) and \
                                 the loss weighs them differently (S̄ = {si:e}, {sj:e}): it is \
                                 not differentiable there (a truncation through a multiplet \
                                 is one such loss)",
                                s[i] * c,
                                s[jj] * c
                            ),
                        ));
                    }
                    // a pair of zero singular values: U and V rotate independently
                    let zero_pair = s[i].max(s[jj]) <= rtol * s0;
                    let (ju, kv) = (
                        crate::linalg::common::abs(j[(i, jj)] - cj(j[(jj, i)])),
                        crate::linalg::common::abs(kk[(i, jj)] - cj(kk[(jj, i)])),
                    );
                    if crate::linalg::common::abs(num) > gtol * s[i].max(s[jj])
                        || (zero_pair && (ju > gtol || kv > gtol))
                    {
                        return Err(gauge_error(
                            "svd",
                            format!(
                                "singular values {i} and {jj} are degenerate ({:e}, {:e}) and the \
                                 loss depends on the basis of their subspace; a Lorentzian \
                                 broadening (RuleOptions::broadening) gives a finite, biased \
                                 gradient",
                                s[i] * c,
                                s[jj] * c
                            ),
                        ));
                    }
                }
            }
        }
    }
    let inv: Vec<Option<f64>> = s.iter().map(|&x| inv_s(x, s0, rtol, sc.eb_s)).collect();
    for i in 0..k {
        let mut d = T::zero();
        if complex {
            let phase = (im(j[(i, i)]) - im(kk[(i, i)])) / 2.0;
            match inv[i] {
                Some(w) => d += cplx::<T>(0.0, phase * w),
                None if phase.abs() > gtol => {
                    return Err(zero_value_error(i));
                }
                None => {}
            }
        }
        p[(i, i)] = d * ca * cb;
    }
    // Ā = U·(P/c + diag(S̄))·Vᴴ + [(Ū − U·J)·G·Vᴴ + U·G·(V̄ − V·K)ᴴ]/c: two GEMMs for a
    // square A, the second into the output's row-major buffer
    if let Some(sb) = sbar {
        for (i, &x) in sb.iter().enumerate() {
            p[(i, i)] += real::<T>(x);
        }
    }
    let pv = mm(p.as_ref(), vh);
    let mut out = RowMajor::zeros(m, n);
    mm_to(out.as_mut(), Accum::Replace, T::one(), u, pv.as_ref());
    if let Some(ub) = ubar
        && m > k
    {
        let mut w = ub.to_owned();
        mm_add(&mut w, -T::one(), u, j.as_ref());
        scale_cols(&mut w, &inv, gtol)?;
        unscale(&mut w, c);
        mm_to(out.as_mut(), Accum::Add, T::one(), w.as_ref(), vh);
    }
    if let Some(vhb) = vhbar
        && n > k
    {
        let mut w = vhb.adjoint().to_owned();
        mm_add(&mut w, -T::one(), vh.adjoint(), kk.as_ref());
        scale_cols(&mut w, &inv, gtol)?;
        unscale(&mut w, c);
        mm_to(out.as_mut(), Accum::Add, T::one(), u, w.adjoint());
    }
    Ok(out)
}

pub(super) fn zero_value_error(i: usize) -> Error {
    gauge_error(
        "svd",
        format!(
            "singular value {i} is zero and the loss depends on its singular vectors, which any \
             unit vector of the null space can be; a Lorentzian broadening gives a finite, biased \
             gradient"
        ),
    )
}

/// Scales column `i` of `w` by `inv[i]`; a `None` (a zero singular value) needs a zero
/// column.
pub(super) fn scale_cols<T: ImplicitScalar>(
    w: &mut Mat<T>,
    inv: &[Option<f64>],
    tol: f64,
) -> Result<()> {
    for (i, f) in inv.iter().enumerate() {
        let f = match f {
            Some(f) => *f,
            None if max_abs(w.as_ref().subcols(i, 1)) > tol => return Err(zero_value_error(i)),
            None => 0.0,
        };
        for r in 0..w.nrows() {
            w[(r, i)] *= real::<T>(f);
        }
    }
    Ok(())
}

/// One matrix: the tangents `(U̇: m×k, ṡ, V̇: n×k)` of thin factors for `Ȧ` (see
/// [`svd_frule`]).
pub(super) fn svd_pushforward<T: ImplicitScalar>(
    u: MatRef<'_, T>,
    s: &[f64],
    v: MatRef<'_, T>,
    a_dot: MatRef<'_, T>,
    opts: &RuleOptions,
) -> (Mat<T>, Vec<f64>, Mat<T>) {
    let (m, k) = u.shape();
    let n = v.nrows();
    if k == 0 {
        return (Mat::zeros(m, 0), Vec::new(), Mat::zeros(n, 0));
    }
    let sc = Scaled::new(s, opts.broadening);
    let (s, s0, c) = (sc.s.as_slice(), sc.s0, sc.c);
    let rtol = opts.rtol::<T>(m.min(n));
    let av = mm(a_dot, v);
    let dp = mm(u.adjoint(), av.as_ref());
    let ds: Vec<f64> = (0..k).map(|i| re(dp[(i, i)])).collect();
    // U̇ and V̇ are homogeneous of degree −1 in the scale of A (ṡ of degree 0): formed in
    // units of c, divided by c at the end
    let inv: Vec<f64> = s
        .iter()
        .map(|&x| inv_s(x, s0, rtol, sc.eb_s).unwrap_or(0.0))
        .collect();
    let mut om_u = Mat::<T>::zeros(k, k);
    let mut om_v = Mat::<T>::zeros(k, k);
    for i in 0..k {
        for j in 0..k {
            if i == j {
                let phase = im(dp[(i, i)]) * inv[i] / 2.0;
                om_u[(i, i)] = cplx::<T>(0.0, phase);
                om_v[(i, i)] = cplx::<T>(0.0, -phase);
                continue;
            }
            let delta = s[j] * s[j] - s[i] * s[i];
            if let Some(f) = inv_gap(delta, rtol * s0 * (s[i] + s[j]), sc.eb_gap) {
                let (x, y) = (dp[(i, j)], cj(dp[(j, i)]));
                om_u[(i, j)] = (x * real::<T>(s[j]) + real::<T>(s[i]) * y) * real::<T>(f);
                om_v[(i, j)] = (real::<T>(s[i]) * x + y * real::<T>(s[j])) * real::<T>(f);
            }
        }
    }
    let mut du = mm(u, om_u.as_ref());
    if m > k {
        let mut w = av;
        mm_add(&mut w, -T::one(), u, dp.as_ref());
        for i in 0..k {
            for r in 0..m {
                w[(r, i)] *= real::<T>(inv[i]);
            }
        }
        du += w;
    }
    let mut dv = mm(v, om_v.as_ref());
    if n > k {
        let mut w = mm(a_dot.adjoint(), u);
        mm_add(&mut w, -T::one(), v, dp.adjoint());
        for i in 0..k {
            for r in 0..n {
                w[(r, i)] *= real::<T>(inv[i]);
            }
        }
        dv += w;
    }
    (unscaled(du.as_ref(), c), ds, unscaled(dv.as_ref(), c))
}
