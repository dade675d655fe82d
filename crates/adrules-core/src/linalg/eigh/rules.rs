//! The eigendecomposition's pullback on one matrix (Giles' formula with the gauge and
//! degeneracy checks), and the eigenvalues in units of their scale that every rule uses.

use super::*;

/// One matrix: `Ā` (row-major) from `λ`, `V` and the cotangents `λ̄`, `V̄` (the formula of
/// [`EighPullback::pullback`]); `V` and `V̄` may be views of any layout (the host buffers).
pub(super) fn eigh_pullback<T: ImplicitScalar>(
    lam: &[f64],
    v: MatRef<'_, T>,
    l_bar: Option<&[f64]>,
    v_bar: Option<MatRef<'_, T>>,
    opts: &RuleOptions,
) -> Result<RowMajor<T>> {
    let n = lam.len();
    let j = v_bar.map_or_else(|| Mat::zeros(n, n), |x| mm(v.adjoint(), x));
    let gtol = eps::<T>().sqrt() * v_bar.map_or(0.0, |x| max_abs(x));
    if T::DTYPE.is_complex() {
        for i in 0..n {
            let g = im(j[(i, i)]);
            if g.abs() > gtol {
                return Err(gauge_error(
                    "eigh",
                    format!(
                        "Im diag(Vᴴ·V̄) is {g:e} at eigenvalue {i} ({:e}): the loss depends on the \
                         phases of the eigenvectors",
                        lam[i]
                    ),
                ));
            }
        }
    }
    // In units of c (a power of two near max|λ|): Ā = V·diag(λ̄)·Vᴴ + Ā₁/c, the first term
    // homogeneous of degree 0 in the scale of A, the second (through 1/Δ) of degree −1,
    // its k×k factor formed in those units and divided by c (1/Δ itself can overflow).
    let (lam_u, c, eb) = in_units(lam, opts.broadening);
    let scale = lam_u.iter().fold(0.0f64, |a, &b| a.max(b.abs()));
    let tol = opts.rtol::<T>(n) * scale;
    let ltol =
        eps::<T>().sqrt() * l_bar.map_or(0.0, |x| x.iter().fold(0.0f64, |a, b| a.max(b.abs())));
    // P/c: every entry times the two factors of 1/c (what `unscale` does), as it is formed
    let (ca, cb) = reciprocal_factors(c);
    let (ca, cb) = (real::<T>(ca), real::<T>(cb));
    let mut p = Mat::<T>::zeros(n, n);
    for i in 0..n {
        for k in 0..n {
            if i == k {
                continue;
            }
            let num = (j[(i, k)] - cj(j[(k, i)])) * real::<T>(0.5);
            match inv_gap(lam_u[k] - lam_u[i], tol, eb) {
                Some(f) => p[(i, k)] = num * real::<T>(f) * ca * cb,
                None if l_bar.is_some_and(|x| (x[i] - x[k]).abs() > ltol) => {
                    return Err(gauge_error(
                        "eigh",
                        format!(
                            "eigenvalues {i} and {k} are degenerate ({:e}) and the loss weighs \
                             them differently: it is not differentiable there",
                            lam[i]
                        ),
                    ));
                }
                None if abs(num) > gtol => {
                    return Err(gauge_error(
                        "eigh",
                        format!(
                            "eigenvalues {i} and {k} are degenerate ({:e}, {:e}) and the loss \
                             depends on the basis of their eigenspace; a Lorentzian broadening \
                             (RuleOptions::broadening) gives a finite, biased gradient",
                            lam[i], lam[k]
                        ),
                    ));
                }
                None => {}
            }
        }
    }
    // Ā = V·(P/c + diag(λ̄))·Vᴴ (c a power of two: the division is exact), two GEMMs, the
    // second into the output's row-major buffer
    if let Some(lb) = l_bar {
        for (i, &x) in lb.iter().enumerate() {
            p[(i, i)] += real::<T>(x);
        }
    }
    let pv = mm(p.as_ref(), v.adjoint());
    let mut out = RowMajor::zeros(n, n);
    mm_to(out.as_mut(), Accum::Replace, T::one(), v, pv.as_ref());
    Ok(out)
}

/// Eigenvalues in units of a power of two `c` near the largest magnitude, with the
/// broadening of their gaps in the same units (`ε/c²`): `(λ/c, c, ε/c²)`.
pub(super) fn in_units(lam: &[f64], broadening: f64) -> (Vec<f64>, f64, f64) {
    let c = pow2_scale(lam.iter().fold(0.0f64, |a, &b| a.max(b.abs())));
    let eb = if broadening == 0.0 {
        0.0
    } else {
        broadening / c / c
    };
    (lam.iter().map(|x| x / c).collect(), c, eb)
}
