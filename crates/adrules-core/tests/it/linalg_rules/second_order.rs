//! Second order of the decompositions: the pullbacks' tangents (forward-over-reverse) symmetric and matching finite differences of the first-order pullback, and their argument checks.

use super::*;

/// `[x, y]` (`cols`) or `[x; y]`.
pub(super) fn cat(x: &Mat<C>, y: &Mat<C>, cols: bool) -> Mat<C> {
    if cols {
        Mat::from_fn(x.nrows(), x.ncols() + y.ncols(), |i, j| {
            if j < x.ncols() {
                x[(i, j)]
            } else {
                y[(i, j - x.ncols())]
            }
        })
    } else {
        Mat::from_fn(x.nrows() + y.nrows(), x.ncols(), |i, j| {
            if i < x.nrows() {
                x[(i, j)]
            } else {
                y[(i - x.nrows(), j)]
            }
        })
    }
}

/// A random Hermitian `[batch…, n, n]`.
pub(super) fn hermitian(batch: &[usize], n: usize, dtype: DType, seed: u64) -> HostTensor {
    let mut dims = batch.to_vec();
    dims.extend([n, n]);
    plus_adjoint(&random(&dims, dtype, seed))
}

/// The second-order checks on `second(a, ȧ) = (Ā, H·ȧ)`: `H·ȧ` is the central difference
/// of `Ā` along `ȧ` to `fd_rtol` relative (the gradient of a gauge-invariant loss is a
/// function of `A`), and, when `Ā` is an exact gradient (`symmetric`),
/// `⟨ȧ₂, H·ȧ₁⟩ = ⟨ȧ₁, H·ȧ₂⟩`.
pub(super) fn check_second_order(
    what: &str,
    a: &HostTensor,
    seed: u64,
    symmetric: bool,
    fd_rtol: f64,
    second: impl Fn(&HostTensor, &HostTensor) -> (HostTensor, HostTensor),
) {
    let dtype = a.dtype();
    let d1 = random(a.dims(), dtype, seed);
    let d2 = random(a.dims(), dtype, seed + 1);
    let (g, h1) = second(a, &d1);
    assert!(
        norm(&g) > 0.0 && norm(&h1) > 0.0,
        "{what}: zero gradient or HVP"
    );
    if symmetric {
        let (_, h2) = second(a, &d2);
        let (l, r) = (dot(&d2, &h1), dot(&d1, &h2));
        assert!(
            (l - r).abs() < 1e-9 * l.abs().max(1.0),
            "{what}: ⟨d2, H d1⟩ = {l} vs ⟨d1, H d2⟩ = {r}"
        );
    }
    let eps = 1e-6;
    let (gp, _) = second(&axpy(a, eps, &d1), &d1);
    let (gm, _) = second(&axpy(a, -eps, &d1), &d1);
    let fd = map1(&axpy(&gp, -1.0, &gm), dtype, |z| z / (2.0 * eps));
    let err = norm(&axpy(&fd, -1.0, &h1));
    assert!(
        err < fd_rtol * norm(&h1).max(1.0),
        "{what}: |FD − H·ȧ| = {err:e}, |H·ȧ| = {:e}",
        norm(&h1)
    );
}

/// `(Ā, H·ȧ)` of the loss by `SvdPullback::pullback_tangent`, with the cotangents' tangents
/// from the factors' tangents: `|U|`'s `W∘U/|U|` by `abs_cotangent_tangent`, `Z·V̇hᴴ`,
/// `U̇ᴴ·Z`, and `H_U·U̇⊥`, `V̇h⊥·H_V` for the complement.
pub(super) fn svd_second(
    a: &HostTensor,
    a_dot: &HostTensor,
    case: SvdCase,
    opts: RuleOptions,
    l: &SvdLoss,
) -> (HostTensor, HostTensor) {
    let be = be();
    let (aa, ad) = (dev(a), dev(a_dot));
    let dtype = a.dtype();
    let batch = batch_of(a);
    let (m, n) = (a.dims()[batch.len()], a.dims()[batch.len() + 1]);
    let (u, vh, du, dvh, kk, full, pb) = match case {
        SvdCase::Mode(mode) => {
            let (out, tan) = svd_frule(&be, &aa, &ad, mode, opts).unwrap();
            let (_, pb) = svd_rrule(&be, &aa, mode, opts).unwrap();
            let [u, vh, du, dvh] = [&out.u, &out.vh, &tan.u, &tan.vh].map(host);
            (u, vh, du, dvh, m.min(n), mode == SvdMode::Full, pb)
        }
        SvdCase::Truncated(r) => {
            let t = Truncation::rank(r);
            let (out, tan) = svd_truncated_frule(&be, &aa, &ad, t, opts).unwrap();
            let (_, pb) = svd_truncated_rrule(&be, &aa, t, opts).unwrap();
            let [u, vh, du, dvh] = [&out.svd.u, &out.svd.vh, &tan.svd.u, &tan.svd.vh].map(host);
            (u, vh, du, dvh, r, false, pb)
        }
    };
    let (uk, duk) = (narrow(&u, kk, true), narrow(&du, kk, true));
    let (vhk, dvhk) = (narrow(&vh, kk, false), narrow(&dvh, kk, false));
    let w = narrow(&l.w, kk, true);
    let abs_c = mats(&abs_cotangent(&uk, &w, dtype));
    let abs_cd = mats(&abs_cotangent_tangent(&uk, &duk, &w, dtype));
    let [us, vhs, dus, dvhs] = [&u, &vh, &du, &dvh].map(mats);
    let [ukm, vhkm, dukm, dvhkm] = [&uk, &vhk, &duk, &dvhk].map(mats);
    let [zs, hus, hvs] = [&l.z, &l.hu, &l.hv].map(mats);
    let (mut ub, mut ubd, mut vb, mut vbd) = (vec![], vec![], vec![], vec![]);
    for b in 0..us.len() {
        let mut x = &abs_c[b] + &zs[b] * vhkm[b].adjoint();
        let mut xd = &abs_cd[b] + &zs[b] * dvhkm[b].adjoint();
        let mut y = ukm[b].adjoint() * &zs[b];
        let mut yd = dukm[b].adjoint() * &zs[b];
        if full {
            let perp = |x: &Mat<C>| x.subcols(kk, m - kk).to_owned();
            let perp_h = |x: &Mat<C>| x.subrows(kk, n - kk).to_owned();
            x = cat(&x, &(&hus[b] * perp(&us[b])), true);
            xd = cat(&xd, &(&hus[b] * perp(&dus[b])), true);
            y = cat(&y, &(perp_h(&vhs[b]) * &hvs[b]), false);
            yd = cat(&yd, &(perp_h(&dvhs[b]) * &hvs[b]), false);
        }
        ub.push(x);
        ubd.push(xd);
        vb.push(y);
        vbd.push(yd);
    }
    let (ku, kv) = if full { (m, n) } else { (kk, kk) };
    let [ub, ubd] = [ub, ubd].map(|x| dev(&unmats(&batch, m, ku, &x, dtype)));
    let [vb, vbd] = [vb, vbd].map(|x| dev(&unmats(&batch, kv, n, &x, dtype)));
    let sbar = dev(&narrow(&l.sbar, kk, true));
    let dbar = dev(&l.dbar);
    let truncated_term = matches!(case, SvdCase::Truncated(_)) && opts.discarded_term;
    let cot = SvdCotangents {
        u: Some(&ub),
        s: Some(&sbar),
        vh: Some(&vb),
        discarded: truncated_term.then_some(&dbar),
    };
    let cot_dot = SvdCotangents {
        u: Some(&ubd),
        vh: Some(&vbd),
        ..Default::default()
    };
    let (g, h) = pb.pullback_tangent(cot, &ad, cot_dot).unwrap();
    (host(&g), host(&h))
}

/// The SVD's second order (`SvdPullback::pullback_tangent`) on every path of the rule: thin
/// and full (with complement cotangents) for tall, square and wide matrices, the truncated
/// SVD with and without the discarded term, and with a broadening; f64 and c64, batched.
/// FD of the gradient everywhere; Hessian symmetry where the pullback is an exact gradient
/// (not with broadening, not the rank-`r` formula without the discarded term).
#[test]
fn svd_second_order_is_symmetric_and_matches_finite_differences() {
    let mut checked = 0;
    for dtype in [DType::F64, DType::C64] {
        for &(m, n) in &[(5, 3), (4, 4), (3, 5)] {
            let k: usize = m.min(n);
            let a = separated(&[2], m, n, dtype, 1000 + m as u64);
            let real = |dims: &[usize], seed| random(dims, DType::F64, seed);
            let loss = SvdLoss {
                sbar: real(&[2, k], 1010),
                dbar: real(&[2, k - 2], 1011),
                w: real(&[2, m, k], 1012).to_dtype_projected(dtype.real()),
                z: random(&[2, m, n], dtype, 1013),
                hu: hermitian(&[2], m, dtype, 1014),
                hv: hermitian(&[2], n, dtype, 1015),
            };
            let exact = RuleOptions::default();
            // with a broadening the factors' tangents are broadened too (as in svd_frule):
            // the HVP is that of the broadened rule, off the derivative of the broadened
            // gradient by O(ε/δ²) relative, δ² the smallest of the gaps sⱼ² − sᵢ² and of the
            // sᵢ² (here 1; measured 1.2e-5 to 8.0e-5 at ε = 1e-4, the exact rules 1e-10 to
            // 1.4e-9, finite-difference noise)
            let eps_b = 1e-4;
            let broadened = RuleOptions {
                broadening: eps_b,
                ..exact
            };
            let without = RuleOptions {
                discarded_term: false,
                ..exact
            };
            let cases = [
                (SvdCase::Mode(SvdMode::Thin), exact, true),
                (SvdCase::Mode(SvdMode::Full), exact, true),
                (SvdCase::Truncated(2), exact, true),
                (SvdCase::Truncated(2), without, false),
                (SvdCase::Mode(SvdMode::Thin), broadened, false),
            ];
            for (case, opts, symmetric) in cases {
                let what = format!("{dtype} {m}×{n} {case:?} {opts:?}");
                let fd_rtol = 1e-7 + 2.0 * opts.broadening;
                check_second_order(&what, &a, 1020, symmetric, fd_rtol, |a, d| {
                    svd_second(a, d, case, opts, &loss)
                });
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 30);
}

/// QR's second order (`QrPullback::pullback_tangent`) for
/// `φ(A) = Re⟨W_Q, Q⟩ + ⟨Y, |Q|⟩ + Re⟨W_R, R⟩ + ½‖R‖² (+ ½Re⟨H, Q⊥·Q⊥ᴴ⟩ complete)`, whose
/// cotangents `Q̄ = W_Q + Y∘Q/|Q|`, `R̄ = W_R + R` (and `H·Q⊥`) move along the path: FD of the
/// gradient and Hessian symmetry, reduced and complete, tall, square and wide, f64 and c64,
/// batched.
#[test]
fn qr_second_order_is_symmetric_and_matches_finite_differences() {
    for dtype in [DType::F64, DType::C64] {
        for &(m, n) in &[(5, 3), (4, 4), (3, 5)] {
            for mode in [QrMode::Reduced, QrMode::Complete] {
                let k = m.min(n);
                let (kq, kr) = if mode == QrMode::Complete {
                    (m, m)
                } else {
                    (k, k)
                };
                let a = random(&[2, m, n], dtype, 1100 + m as u64);
                // on the leading columns only: a cotangent of Q⊥ must not depend on its basis
                let wq = pad(&random(&[2, m, k], dtype, 1101), m, kq);
                let y = random(&[2, m, k], DType::F64, 1102).to_dtype_projected(dtype.real());
                let wr = random(&[2, kr, n], dtype, 1103);
                let hq = hermitian(&[2], m, dtype, 1104);
                let second = |a: &HostTensor, a_dot: &HostTensor| {
                    let (out, tan) = qr_frule(&be(), &dev(a), &dev(a_dot), mode).unwrap();
                    let (_, pb) = qr_rrule(&be(), &dev(a), mode).unwrap();
                    let [q, r, dq, dr] = [&out.q, &out.r, &tan.q, &tan.r].map(host);
                    let (qk, dqk) = (narrow(&q, k, true), narrow(&dq, k, true));
                    let abs_c = mats(&abs_cotangent(&qk, &y, dtype));
                    let abs_cd = mats(&abs_cotangent_tangent(&qk, &dqk, &y, dtype));
                    let [qs, dqs, wqs, hqs] = [&q, &dq, &wq, &hq].map(mats);
                    let (mut qb, mut qbd) = (vec![], vec![]);
                    for b in 0..qs.len() {
                        let perp = |x: &Mat<C>| x.subcols(k, kq - k).to_owned();
                        let zero = Mat::<C>::zeros(m, kq - k);
                        qb.push(&wqs[b] + cat(&abs_c[b], &(&hqs[b] * perp(&qs[b])), true));
                        qbd.push(
                            &cat(&abs_cd[b], &zero, true)
                                + &hqs[b] * cat(&Mat::zeros(m, k), &perp(&dqs[b]), true),
                        );
                    }
                    let [qb, qbd] = [qb, qbd].map(|x| dev(&unmats(&[2], m, kq, &x, dtype)));
                    let rb = dev(&axpy(&wr, 1.0, &r));
                    let (g, h) = pb
                        .pullback_tangent(
                            Some(&qb),
                            Some(&rb),
                            &dev(a_dot),
                            Some(&qbd),
                            Some(&dev(&dr)),
                        )
                        .unwrap();
                    (host(&g), host(&h))
                };
                check_second_order(
                    &format!("{dtype} {m}×{n} {mode:?}"),
                    &a,
                    1110,
                    true,
                    1e-7,
                    second,
                );
            }
        }
    }
}

/// The second-order rules check the shapes of what they are given, by name, and pass the
/// first order's typed errors on.
#[test]
fn second_order_arguments_are_checked() {
    let a = separated(&[], 4, 3, DType::F64, 1200);
    let (_, pb) = svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).unwrap();
    let sbar = dev(&random(&[3], DType::F64, 1201));
    let cot = SvdCotangents {
        s: Some(&sbar),
        ..Default::default()
    };
    let bad = dev(&random(&[3, 4], DType::F64, 1202));
    match pb.pullback_tangent(cot, &bad, SvdCotangents::default()) {
        Err(Error::ShapeMismatch { arg, .. }) => assert_eq!(arg, "a_dot"),
        other => panic!("expected a_dot's ShapeMismatch, got {other:?}"),
    }
    let a_dot = dev(&random(&[4, 3], DType::F64, 1203));
    let bad_s = dev(&random(&[4], DType::F64, 1204));
    let cot_dot = SvdCotangents {
        s: Some(&bad_s),
        ..Default::default()
    };
    match pb.pullback_tangent(cot, &a_dot, cot_dot) {
        Err(Error::ShapeMismatch { arg, .. }) => assert_eq!(arg, "s_bar_dot"),
        other => panic!("expected s_bar_dot's ShapeMismatch, got {other:?}"),
    }
    let c = dev(&random(&[4, 3], DType::C64, 1205));
    let cot_dot = SvdCotangents {
        u: Some(&c),
        ..Default::default()
    };
    match pb.pullback_tangent(cot, &a_dot, cot_dot) {
        Err(Error::DTypeMismatch { arg, .. }) => assert_eq!(arg, "u_bar_dot"),
        other => panic!("expected u_bar_dot's DTypeMismatch, got {other:?}"),
    }
    // a rank-deficient QR has no derivative, of either order
    let mut data = random(&[4, 3], DType::F64, 1206).data().to_c64_vec();
    for i in 0..4 {
        data[i * 3 + 2] = data[i * 3] * 2.0;
    }
    let defic = HostTensor::from_vec(&[4, 3], data)
        .unwrap()
        .to_dtype_projected(DType::F64);
    let (_, pb) = qr_rrule(&be(), &dev(&defic), QrMode::Reduced).unwrap();
    let qbar = dev(&random(&[4, 3], DType::F64, 1207));
    assert!(matches!(
        pb.pullback_tangent(Some(&qbar), None, &a_dot, None, None),
        Err(Error::Singular { .. })
    ));
    // eigh's: a wrong shape of the eigenvalues' tangent
    let h = hermitian(&[], 3, DType::F64, 1208);
    let (_, pb) = eigh_rrule(&be(), &dev(&h), RuleOptions::default()).unwrap();
    let lbar = dev(&random(&[3], DType::F64, 1209));
    let bad_l = dev(&random(&[2], DType::F64, 1210));
    match pb.pullback_tangent(Some(&lbar), None, &dev(&h), Some(&bad_l), None) {
        Err(Error::ShapeMismatch { arg, .. }) => assert_eq!(arg, "values_bar_dot"),
        other => panic!("expected values_bar_dot's ShapeMismatch, got {other:?}"),
    }
}
