//! The QR pullback's tangent (second order, forward over reverse): the product rule on every
//! factor of the first-order formula (see [`QrPullback::pullback_tangent`]).

use faer::linalg::triangular_solve::solve_upper_triangular_in_place;

use super::rules::*;
use super::*;

pub(super) fn qr_pullback_tangent_t<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    [q_bar, r_bar]: [Option<&B::Tensor>; 2],
    a_dot: &B::Tensor,
    [q_dot, r_dot]: [Option<&B::Tensor>; 2],
) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let complete = pb.mode == QrMode::Complete;
    let kq = if complete { m } else { k };
    let cots = qr_cotangents::<B, T>(pb, [q_bar, r_bar], "")?;
    // the first order, with its checks (which the tangent below relies on)
    let bar = qr_pullback_t::<B, T>(pb, &cots)?;
    let [qb, rb] = cots;
    let [qbd, rbd] = qr_cotangents::<B, T>(pb, [q_dot, r_dot], "_dot")?;
    let ads = host_mats::<B, T>(&pb.be, a_dot, &batch, [m, n], "a_dot")?;
    let [q_h, r_h] = &*pb.factors;
    let qs = split::<T>(q_h, "q", false)?;
    let rs = split::<T>(r_h, "r", false)?;
    let get = |x: &Option<Vec<Mat<T>>>, b: usize, rows: usize, cols: usize| {
        x.as_ref()
            .map_or_else(|| Mat::zeros(rows, cols), |x| x[b].clone())
    };
    let dot = per_matrix::<T, _>(&batch, ("a_bar_dot", m, n), |b| {
        let q_all = qs[b].as_ref();
        let q = q_all.subcols(0, k);
        let r = rs[b].as_ref().subrows(0, k);
        let (dq, dr) = qr_pushforward(q, r, ads[b].as_ref())?;
        let (qbar, qbar_dot) = (get(&qb, b, m, kq), get(&qbd, b, m, kq));
        let (qbar, qbar_dot) = if complete && m > k {
            let perp = q_all.subcols(k, m - k);
            let dperp = complement_tangent(q, dq.as_ref(), perp);
            let folded = fold_complement(
                q,
                perp,
                cols(qbar.as_ref(), 0, k),
                qbar.as_ref().subcols(k, m - k),
                "qr",
                "Q",
            )?;
            let folded_dot = fold_complement_tangent(
                q,
                dq.as_ref(),
                perp,
                dperp.as_ref(),
                qbar.as_ref().subcols(k, m - k),
                qbar_dot.as_ref().subcols(k, m - k),
                cols(qbar_dot.as_ref(), 0, k),
            );
            (folded, folded_dot)
        } else {
            (qbar, qbar_dot)
        };
        let rbar = get(&rb, b, kq, n).as_ref().subrows(0, k).to_owned();
        let rbar_dot = get(&rbd, b, kq, n).as_ref().subrows(0, k).to_owned();
        Ok(qr_pullback_tangent(
            [q, r],
            [dq.as_ref(), dr.as_ref()],
            [qbar.as_ref(), rbar.as_ref()],
            [qbar_dot.as_ref(), rbar_dot.as_ref()],
        ))
    })?;
    Ok([bar, dot])
}

/// One matrix: `Ā̇`, the tangent of [`qr_pullback`]'s `Ā` for `[Q, R]` (`m×k`, `k×n`)
/// moving along `[Q̇, Ṙ]` and cotangents `[Q̄, R̄]` along `[Q̄̇, R̄̇]` (the formula of
/// [`QrPullback::pullback_tangent`]; the pivots were checked by the first order).
fn qr_pullback_tangent<T: ImplicitScalar>(
    [q, r]: [MatRef<'_, T>; 2],
    [dq, dr]: [MatRef<'_, T>; 2],
    [qbar, rbar]: [MatRef<'_, T>; 2],
    [qbar_dot, rbar_dot]: [MatRef<'_, T>; 2],
) -> Mat<T> {
    let (m, k) = q.shape();
    let n = r.ncols();
    if k == 0 {
        return Mat::zeros(m, n);
    }
    let one = T::one();
    let (r1, r2) = (r.subcols(0, k), r.subcols(k, n - k));
    let (dr1, dr2) = (dr.subcols(0, k), dr.subcols(k, n - k));
    let (rb1, rb2) = (rbar.subcols(0, k), rbar.subcols(k, n - k));
    let (rbd1, rbd2) = (rbar_dot.subcols(0, k), rbar_dot.subcols(k, n - k));
    let mut qb = qbar.to_owned();
    let mut qbd = qbar_dot.to_owned();
    if n > k {
        let t = mm(rb2, r2.adjoint());
        mm_add(&mut qb, -one, q, t.as_ref());
        mm_add(&mut qbd, -one, dq, t.as_ref());
        let t = mm(rbd2, r2.adjoint());
        mm_add(&mut qbd, -one, q, t.as_ref());
        let t = mm(rb2, dr2.adjoint());
        mm_add(&mut qbd, -one, q, t.as_ref());
    }
    let mut mmat = mm(rb1, r1.adjoint());
    mm_add(&mut mmat, -one, q.adjoint(), qb.as_ref());
    let mut mdot = mm(rbd1, r1.adjoint());
    mm_add(&mut mdot, one, rb1, dr1.adjoint());
    mm_add(&mut mdot, -one, dq.adjoint(), qb.as_ref());
    mm_add(&mut mdot, -one, q.adjoint(), qbd.as_ref());
    let sym = |x: &Mat<T>| {
        Mat::from_fn(k, k, |i, j| {
            if i < j {
                x[(i, j)]
            } else if i > j {
                cj(x[(j, i)])
            } else {
                real::<T>(re(x[(i, i)]))
            }
        })
    };
    let (mt, mtd) = (sym(&mmat), sym(&mdot));
    let mut bmat = qb;
    mm_add(&mut bmat, one, q, mt.as_ref());
    let mut bdot = qbd;
    mm_add(&mut bdot, one, dq, mt.as_ref());
    mm_add(&mut bdot, one, q, mtd.as_ref());
    // X̄ = B·R₁⁻ᴴ, X̄̇ = (Ḃ − X̄·Ṙ₁ᴴ)·R₁⁻ᴴ, each by R₁·Xᴴ = (…)ᴴ
    let par = faer::get_global_parallelism();
    let mut xh = bmat.adjoint().to_owned();
    solve_upper_triangular_in_place(r1, xh.as_mut(), par);
    let x_bar = xh.adjoint().to_owned();
    mm_add(&mut bdot, -one, x_bar.as_ref(), dr1.adjoint());
    let mut xdh = bdot.adjoint().to_owned();
    solve_upper_triangular_in_place(r1, xdh.as_mut(), par);
    let x_dot = xdh.adjoint().to_owned();
    let mut y_dot = mm(dq, rb2);
    mm_add(&mut y_dot, one, q, rbd2);
    hcat(x_dot.as_ref(), y_dot.as_ref())
}
