//! The SVD pullback's tangent (second order, forward over reverse): the product rule on every
//! factor of the first-order formula (see [`SvdPullback::pullback_tangent`]).

use super::rules::*;
use super::*;

pub(super) fn pullback_tangent_t<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &SvdCotangents<'_, B::Tensor>,
    a_dot: &B::Tensor,
    cot_dot: &SvdCotangents<'_, B::Tensor>,
) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let c0 = parse_cots::<B, T>(pb, cot, "")?;
    // the first order, with its checks (which the tangent below relies on)
    let bar = pullback_t::<B, T>(pb, &c0)?;
    let c1 = parse_cots::<B, T>(pb, cot_dot, "_dot")?;
    let ads = host_mats::<B, T>(&pb.be, a_dot, &batch, [m, n], "a_dot")?;
    let [u_h, s_h, vh_h] = &*pb.factors;
    let us = split::<T>(u_h, "u", false)?;
    let vhs = split::<T>(vh_h, "vh", false)?;
    let svals = split_real(s_h, k);
    let (ku, kv, keep) = match pb.kind {
        Kind::Thin => (k, k, k),
        Kind::Full => (m, n, k),
        Kind::Truncated { rank } => (rank, rank, rank),
    };
    let ((u0, vh0), (u1, vh1)) = (c0.views()?, c1.views()?);
    // a cotangent (or its tangent) of matrix `b`, zero when absent; V̄ = V̄hᴴ
    let mat_u = |x: Option<Views<'_, T>>, b: usize| {
        x.map_or_else(|| Mat::zeros(m, ku), |x| x.get(b).to_owned())
    };
    let mat_v = |x: Option<Views<'_, T>>, b: usize| {
        x.map_or_else(|| Mat::zeros(n, kv), |x| x.get(b).adjoint().to_owned())
    };
    let vec_s = |c: &Cots<T>, b: usize| {
        c.s.as_ref()
            .map_or_else(|| vec![0.0; keep], |x| x[b].clone())
    };
    let dot = per_matrix::<T, _>(&batch, ("a_bar_dot", m, n), |b| {
        let u_all = us[b].as_ref();
        let v_all = vhs[b].adjoint().to_owned();
        let s = svals[b].as_slice();
        let (u, v) = (u_all.subcols(0, k), v_all.as_ref().subcols(0, k));
        let (du, ds, dv) = svd_pushforward(u, s, v, ads[b].as_ref(), &pb.opts);
        let (ub, ubd) = (mat_u(u0, b), mat_u(u1, b));
        let (vb, vbd) = (mat_v(vh0, b), mat_v(vh1, b));
        let (sb, sbd) = (vec_s(&c0, b), vec_s(&c1, b));
        let x = Thin { u, s, v };
        let dx = Thin {
            u: du.as_ref(),
            s: &ds,
            v: dv.as_ref(),
        };
        let bar = Thin {
            u: ub.as_ref(),
            s: &sb,
            v: vb.as_ref(),
        };
        let bar_dot = Thin {
            u: ubd.as_ref(),
            s: &sbd,
            v: vbd.as_ref(),
        };
        Ok(match pb.kind {
            Kind::Thin => svd_pullback_tangent(x, dx, bar, bar_dot, &pb.opts),
            Kind::Full => {
                let (up, vp) = (u_all.subcols(k, m - k), v_all.as_ref().subcols(k, n - k));
                let dup = complement_tangent(u, du.as_ref(), up);
                let dvp = complement_tangent(v, dv.as_ref(), vp);
                let fold = |q: MatRef<'_, T>, p: MatRef<'_, T>, bar: &Mat<T>, what| {
                    let kq = q.ncols();
                    let (head, tail) = (
                        cols(bar.as_ref(), 0, kq),
                        bar.as_ref().subcols(kq, p.ncols()),
                    );
                    fold_complement(q, p, head, tail, "svd", what)
                };
                let fold_dot = |q: MatRef<'_, T>,
                                dq: MatRef<'_, T>,
                                p: MatRef<'_, T>,
                                dp: MatRef<'_, T>,
                                bar: &Mat<T>,
                                bar_dot: &Mat<T>|
                 -> Mat<T> {
                    let kq = q.ncols();
                    let (bp, bpd) = (
                        bar.as_ref().subcols(kq, p.ncols()),
                        bar_dot.as_ref().subcols(kq, p.ncols()),
                    );
                    fold_complement_tangent(q, dq, p, dp, bp, bpd, cols(bar_dot.as_ref(), 0, kq))
                };
                let (ue, ved) = (fold(u, up, &ub, "U")?, fold(v, vp, &vb, "V")?);
                let ued = fold_dot(u, du.as_ref(), up, dup.as_ref(), &ub, &ubd);
                let vedd = fold_dot(v, dv.as_ref(), vp, dvp.as_ref(), &vb, &vbd);
                svd_pullback_tangent(
                    x,
                    dx,
                    Thin {
                        u: ue.as_ref(),
                        s: &sb,
                        v: ved.as_ref(),
                    },
                    Thin {
                        u: ued.as_ref(),
                        s: &sbd,
                        v: vedd.as_ref(),
                    },
                    &pb.opts,
                )
            }
            Kind::Truncated { .. } if pb.opts.discarded_term => {
                let (t0, t1) = (
                    c0.discarded.as_ref().map(|d| d[b].as_slice()),
                    c1.discarded.as_ref().map(|d| d[b].as_slice()),
                );
                let (sf, sfd) = (pad_vec(&sb, t0, k), pad_vec(&sbd, t1, k));
                let (ubp, ubdp) = (pad_cols(ub.as_ref(), k), pad_cols(ubd.as_ref(), k));
                let (vbp, vbdp) = (pad_cols(vb.as_ref(), k), pad_cols(vbd.as_ref(), k));
                svd_pullback_tangent(
                    x,
                    dx,
                    Thin {
                        u: ubp.as_ref(),
                        s: &sf,
                        v: vbp.as_ref(),
                    },
                    Thin {
                        u: ubdp.as_ref(),
                        s: &sfd,
                        v: vbdp.as_ref(),
                    },
                    &pb.opts,
                )
            }
            Kind::Truncated { rank } => svd_pullback_tangent(
                Thin {
                    u: u.subcols(0, rank),
                    s: &s[..rank],
                    v: v.subcols(0, rank),
                },
                Thin {
                    u: du.as_ref().subcols(0, rank),
                    s: &ds[..rank],
                    v: dv.as_ref().subcols(0, rank),
                },
                bar,
                bar_dot,
                &pb.opts,
            ),
        })
    })?;
    Ok([bar, dot])
}

/// One matrix: `Ā̇`, the tangent of [`svd_pullback`]'s `Ā` for thin factors `x` moving
/// along `dx`, cotangents `bar` moving along `bar_dot` (the formula of
/// [`SvdPullback::pullback_tangent`]). The checks are [`svd_pullback`]'s, made before.
///
/// It runs in units of `c` (a power of two near `s₀`): for `A = c·A'`, the gradient of
/// `φ(A) = ψ(A')` is `∇ψ(A')/c`, where `ψ` has the same `Ū`, `V̄` and `c·S̄`, and its tangent
/// along `Ȧ` is `ψ`'s along `Ȧ/c` divided by `c` (`U̇`, `V̇` unchanged, `ṡ' = ṡ/c`).
pub(super) fn svd_pullback_tangent<T: ImplicitScalar>(
    x: Thin<'_, T>,
    dx: Thin<'_, T>,
    bar: Thin<'_, T>,
    bar_dot: Thin<'_, T>,
    opts: &RuleOptions,
) -> Mat<T> {
    let (m, k) = x.u.shape();
    let n = x.v.nrows();
    let mut out = Mat::<T>::zeros(m, n);
    if k == 0 {
        return out;
    }
    let sc = Scaled::new(x.s, opts.broadening);
    let (s, s0, c) = (sc.s.as_slice(), sc.s0, sc.c);
    let ds: Vec<f64> = dx.s.iter().map(|v| v / c).collect();
    let sb: Vec<f64> = bar.s.iter().map(|v| v * c).collect();
    let sbd: Vec<f64> = bar_dot.s.iter().map(|v| v * c).collect();
    let rtol = opts.rtol::<T>(m.min(n));
    let (u, v, du, dv) = (x.u, x.v, dx.u, dx.v);
    let one = T::one();
    let j = mm(u.adjoint(), bar.u);
    let kk = mm(v.adjoint(), bar.v);
    let mut jd = mm(du.adjoint(), bar.u);
    mm_add(&mut jd, one, u.adjoint(), bar_dot.u);
    let mut kd = mm(dv.adjoint(), bar.v);
    mm_add(&mut kd, one, v.adjoint(), bar_dot.v);
    let g: Vec<f64> = s
        .iter()
        .map(|&x| inv_s(x, s0, rtol, sc.eb_s).unwrap_or(0.0))
        .collect();
    let gd: Vec<f64> = (0..k)
        .map(|i| inv_gap_slope(s[i], rtol * s0, sc.eb_s) * ds[i])
        .collect();
    let complex = T::DTYPE.is_complex();
    let mut p = Mat::<T>::zeros(k, k);
    let mut pd = Mat::<T>::zeros(k, k);
    for i in 0..k {
        for jj in 0..k {
            if i == jj {
                p[(i, i)] = real::<T>(sb[i]);
                pd[(i, i)] = real::<T>(sbd[i]);
                if complex {
                    let ph = (im(j[(i, i)]) - im(kk[(i, i)])) / 2.0;
                    let phd = (im(jd[(i, i)]) - im(kd[(i, i)])) / 2.0;
                    p[(i, i)] += cplx::<T>(0.0, ph * g[i]);
                    pd[(i, i)] += cplx::<T>(0.0, phd * g[i] + ph * gd[i]);
                }
                continue;
            }
            let a = j[(i, jj)] - cj(j[(jj, i)]);
            let bq = kk[(i, jj)] - cj(kk[(jj, i)]);
            let ad = jd[(i, jj)] - cj(jd[(jj, i)]);
            let bd = kd[(i, jj)] - cj(kd[(jj, i)]);
            let num = a * real::<T>(s[jj]) + real::<T>(s[i]) * bq;
            let num_dot = ad * real::<T>(s[jj])
                + a * real::<T>(ds[jj])
                + real::<T>(ds[i]) * bq
                + real::<T>(s[i]) * bd;
            let delta = s[jj] * s[jj] - s[i] * s[i];
            let delta_dot = 2.0 * (s[jj] * ds[jj] - s[i] * ds[i]);
            let tol = rtol * s0 * (s[i] + s[jj]);
            let f = inv_gap(delta, tol, sc.eb_gap).unwrap_or(0.0);
            let fd = inv_gap_slope(delta, tol, sc.eb_gap) * delta_dot;
            p[(i, jj)] = num * real::<T>(f);
            pd[(i, jj)] = num_dot * real::<T>(f) + num * real::<T>(fd);
        }
    }
    // Ā = U·P·Vᴴ + …: U̇·P·Vᴴ + U·Ṗ·Vᴴ + U·P·V̇ᴴ
    let t = mm(p.as_ref(), v.adjoint());
    mm_add(&mut out, one, du, t.as_ref());
    let t = mm(pd.as_ref(), v.adjoint());
    mm_add(&mut out, one, u, t.as_ref());
    let t = mm(p.as_ref(), dv.adjoint());
    mm_add(&mut out, one, u, t.as_ref());
    // the out-of-span terms, (Ū − U·J)·G·Vᴴ and U·G·(V̄ − V·K)ᴴ, and their tangents
    if m > k {
        let (wg, wg_dot) = out_of_span([u, du], [bar.u, bar_dot.u], [&j, &jd], [&g, &gd]);
        mm_add(&mut out, one, wg_dot.as_ref(), v.adjoint());
        mm_add(&mut out, one, wg.as_ref(), dv.adjoint());
    }
    if n > k {
        let (wg, wg_dot) = out_of_span([v, dv], [bar.v, bar_dot.v], [&kk, &kd], [&g, &gd]);
        mm_add(&mut out, one, u, wg_dot.adjoint());
        mm_add(&mut out, one, du, wg.adjoint());
    }
    unscaled(out.as_ref(), c)
}

/// `(W·G, Ẇ·G + W·Ġ)` for `W = X̄ − X·J` (the part of a cotangent outside span `X`),
/// `Ẇ = X̄̇ − Ẋ·J − X·J̇`, `G = diag(g)`, `Ġ = diag(ġ)`: one side of the SVD pullback's
/// out-of-span terms and its tangent.
pub(super) fn out_of_span<T: ImplicitScalar>(
    [x, x_dot]: [MatRef<'_, T>; 2],
    [bar, bar_dot]: [MatRef<'_, T>; 2],
    [j, j_dot]: [&Mat<T>; 2],
    [g, g_dot]: [&[f64]; 2],
) -> (Mat<T>, Mat<T>) {
    let one = T::one();
    let mut w = bar.to_owned();
    mm_add(&mut w, -one, x, j.as_ref());
    let mut wd = bar_dot.to_owned();
    mm_add(&mut wd, -one, x_dot, j.as_ref());
    mm_add(&mut wd, -one, x, j_dot.as_ref());
    let wg = Mat::from_fn(w.nrows(), w.ncols(), |r, i| w[(r, i)] * real::<T>(g[i]));
    let wg_dot = Mat::from_fn(w.nrows(), w.ncols(), |r, i| {
        wd[(r, i)] * real::<T>(g[i]) + w[(r, i)] * real::<T>(g_dot[i])
    });
    (wg, wg_dot)
}
