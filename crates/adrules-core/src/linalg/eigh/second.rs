//! The eigendecomposition pullback's tangent (second order, forward over reverse): the
//! product rule on `Ā = V·P·Vᴴ` (see [`EighPullback::pullback_tangent`]).

use super::rules::*;
use super::*;

pub(super) fn eigh_pullback_tangent_t<B: Backend, T: ImplicitScalar>(
    pb: &EighPullback<B>,
    [l_bar, v_bar]: [Option<&B::Tensor>; 2],
    a_dot: &B::Tensor,
    [l_dot, v_dot]: [Option<&B::Tensor>; 2],
) -> Result<HostTensor> {
    let (batch, _, n) = matrix_dims(&pb.dims, "a")?;
    let (lb, vb) = eigh_cotangents::<B, T>(pb, [l_bar, v_bar], "")?;
    let (ld, vd) = eigh_cotangents::<B, T>(pb, [l_dot, v_dot], "_dot")?;
    let vb = Views::<T>::of(vb.as_ref(), "vectors_bar")?;
    let vd = Views::<T>::of(vd.as_ref(), "vectors_bar_dot")?;
    let ads = host_mats::<B, T>(&pb.be, a_dot, &batch, [n, n], "a_dot")?;
    let lams = split_real(&pb.factors[0], n);
    let vs = split::<T>(&pb.factors[1], "vectors", false)?;
    let opts = &pb.opts;
    per_matrix::<T, _>(&batch, ("a_bar_dot", n, n), |b| {
        // In units of c (a power of two near max|λ|): for A = c·A', φ(A) = ψ(A') with the
        // cotangents V̄, c·λ̄ and their tangents V̄̇, c·λ̄̇ along Ȧ/c, and H_φ·Ȧ = (H_ψ·Ȧ/c)/c,
        // so that no 1/Δ or 1/Δ² leaves the range for tiny or huge matrices.
        let (lam_u, c, eb) = in_units(&lams[b], opts.broadening);
        let (lam, v) = (&lam_u, vs[b].as_ref());
        let x = unscaled(ads[b].as_ref(), c);
        let h = Mat::from_fn(n, n, |i, j| (x[(i, j)] + cj(x[(j, i)])) * real::<T>(0.5));
        let hv = mm(h.as_ref(), v);
        let dp = mm(v.adjoint(), hv.as_ref());
        let scale = lam.iter().fold(0.0f64, |a, &b| a.max(b.abs()));
        let tol = opts.rtol::<T>(n) * scale;
        let f = |i: usize, k: usize| {
            if i == k {
                0.0
            } else {
                inv_gap(lam[k] - lam[i], tol, eb).unwrap_or(0.0)
            }
        };
        let dl: Vec<f64> = (0..n).map(|i| re(dp[(i, i)])).collect();
        let om = Mat::from_fn(n, n, |i, k| dp[(i, k)] * real::<T>(f(i, k)));
        let j = vb
            .as_ref()
            .map_or_else(|| Mat::zeros(n, n), |x| mm(v.adjoint(), x.get(b)));
        let jd_own = vd
            .as_ref()
            .map_or_else(|| Mat::zeros(n, n), |x| mm(v.adjoint(), x.get(b)));
        let ohj = mm(om.adjoint(), j.as_ref());
        let jd = Mat::from_fn(n, n, |i, k| ohj[(i, k)] + jd_own[(i, k)]);
        let half = real::<T>(0.5);
        let p = Mat::from_fn(n, n, |i, k| {
            if i == k {
                real::<T>(lb.as_ref().map_or(0.0, |x| x[b][i] * c))
            } else {
                (j[(i, k)] - cj(j[(k, i)])) * half * real::<T>(f(i, k))
            }
        });
        let pd = Mat::from_fn(n, n, |i, k| {
            if i == k {
                return real::<T>(ld.as_ref().map_or(0.0, |x| x[b][i] * c));
            }
            let slope = if i == k {
                0.0
            } else {
                inv_gap_slope(lam[k] - lam[i], tol, eb) * (dl[k] - dl[i])
            };
            (j[(i, k)] - cj(j[(k, i)])) * half * real::<T>(slope)
                + (jd[(i, k)] - cj(jd[(k, i)])) * half * real::<T>(f(i, k))
        });
        let op = mm(om.as_ref(), p.as_ref());
        let poh = mm(p.as_ref(), om.adjoint());
        let inner = Mat::from_fn(n, n, |i, k| op[(i, k)] + pd[(i, k)] + poh[(i, k)]);
        let iv = mm(inner.as_ref(), v.adjoint());
        Ok(unscaled(mm(v, iv.as_ref()).as_ref(), c))
    })
}
