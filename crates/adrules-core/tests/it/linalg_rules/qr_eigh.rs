//! The QR and eigh rules: adjoint identities, finite differences, eigh's second order.

use super::*;

#[test]
fn qr_rules_are_adjoint() {
    let shapes: [(&[usize], usize, usize); 5] = [
        (&[], 4, 4),
        (&[], 6, 3),
        (&[], 3, 6),
        (&[2], 5, 2),
        (&[2, 1], 2, 5),
    ];
    for dtype in ALL {
        for (i, &(batch, m, n)) in shapes.iter().enumerate() {
            for mode in [QrMode::Reduced, QrMode::Complete] {
                let seed = 200 + 10 * i as u64;
                let mut dims = batch.to_vec();
                dims.extend([m, n]);
                let a = random(&dims, dtype, seed);
                let a_dot = random(&dims, dtype, seed + 1);
                let (out, tan) = qr_frule(&be(), &dev(&a), &dev(&a_dot), mode).unwrap();
                let (_, pb) = qr_rrule(&be(), &dev(&a), mode).unwrap();
                let k = m.min(n);
                let q = host(&out.q);
                // complete mode: the complement columns get a cotangent through the projector
                // Q⊥·Q⊥ᴴ only (Q̄⊥ = G·Q⊥ with G Hermitian): Q̄ = [random, sym·Q⊥]
                let qbar = if mode == QrMode::Complete && m > k {
                    let g = random(&[m, m], dtype, seed + 2);
                    let qb = random(q.dims(), dtype, seed + 3);
                    matmap(&qb, &q, m, m, |qb, q| {
                        let perp = q.subcols(k, m - k);
                        let gm = &mats(&g)[0];
                        let herm = gm + gm.adjoint();
                        let tail = &herm * perp;
                        Mat::from_fn(
                            m,
                            m,
                            |r, c| if c < k { qb[(r, c)] } else { tail[(r, c - k)] },
                        )
                    })
                } else {
                    random(q.dims(), dtype, seed + 3)
                };
                let mut rbar = random(host(&out.r).dims(), dtype, seed + 4);
                if mode == QrMode::Complete {
                    rbar = pad(&narrow(&rbar, k, false), m, n);
                }
                let a_bar = host(&pb.pullback(Some(&dev(&qbar)), Some(&dev(&rbar))).unwrap());
                let gap = adjoint_gap(
                    &[(&qbar, &host(&tan.q)), (&rbar, &host(&tan.r))],
                    &a_bar,
                    &a_dot,
                );
                assert!(
                    gap < tol(dtype),
                    "{dtype} {dims:?} {mode:?}: adjoint gap {gap:e}"
                );
            }
        }
    }
}

#[test]
fn eigh_rules_are_adjoint() {
    for dtype in ALL {
        for (i, dims) in [vec![5, 5], vec![3, 4, 4], vec![1, 1]]
            .into_iter()
            .enumerate()
        {
            let seed = 300 + 10 * i as u64;
            let a = plus_adjoint(&random(&dims, dtype, seed));
            let a_dot = random(&dims, dtype, seed + 1);
            let (out, tan) =
                eigh_frule(&be(), &dev(&a), &dev(&a_dot), RuleOptions::default()).unwrap();
            let (_, pb) = eigh_rrule(&be(), &dev(&a), RuleOptions::default()).unwrap();
            let v = host(&out.vectors);
            // a phase-invariant cotangent: that of Re⟨W, |V|⟩
            let w = random(v.dims(), dtype.real(), seed + 2);
            let vbar = abs_cotangent(&v, &w, dtype);
            let lbar = random(host(&out.values).dims(), dtype.real(), seed + 3);
            let a_bar = host(&pb.pullback(Some(&dev(&lbar)), Some(&dev(&vbar))).unwrap());
            let gap = adjoint_gap(
                &[(&lbar, &host(&tan.values)), (&vbar, &host(&tan.vectors))],
                &a_bar,
                &a_dot,
            );
            assert!(gap < tol(dtype), "{dtype} {dims:?}: adjoint gap {gap:e}");
            // Ā is Hermitian: the rule is that of the Hermitian part
            let asym = axpy(&a_bar, -1.0, &plus_adjoint(&a_bar));
            assert!(
                norm(&axpy(&asym, 1.0, &a_bar)) < 1e-4 * norm(&a_bar).max(1e-30),
                "{dtype}: Ā not Hermitian"
            );
        }
    }
}

/// eigh's second order (`EighPullback::pullback_tangent`): for the gauge-invariant
/// `φ(A) = ⟨λ̄, λ(A)⟩ + ⟨W, |V(A)|⟩` the Hessian is symmetric, `⟨Ȧ₂, H·Ȧ₁⟩ = ⟨Ȧ₁, H·Ȧ₂⟩`,
/// and `H·Ȧ` is the central difference of the gradient `Ā(A)` along `Ȧ` (the gradient of a
/// gauge-invariant loss is itself a function of `A`), in f64 and c64, batched.
#[test]
fn eigh_second_order_is_symmetric_and_matches_finite_differences() {
    for dtype in [DType::F64, DType::C64] {
        let dims = [2, 4, 4];
        let a = plus_adjoint(&random(&dims, dtype, 900));
        let w = random(&dims, DType::F64, 901).to_dtype_projected(dtype.real());
        let lbar = random(&[2, 4], dtype.real(), 902);
        // (gradient, H·ȧ) at `a`
        let second = |a: &HostTensor, a_dot: &HostTensor| -> (HostTensor, HostTensor) {
            let (out, tan) =
                eigh_frule(&be(), &dev(a), &dev(a_dot), RuleOptions::default()).unwrap();
            let (v, v_dot) = (host(&out.vectors), host(&tan.vectors));
            let vbar = abs_cotangent(&v, &w, dtype);
            let vbar_dot = abs_cotangent_tangent(&v, &v_dot, &w, dtype);
            let (_, pb) = eigh_rrule(&be(), &dev(a), RuleOptions::default()).unwrap();
            let (g, h) = pb
                .pullback_tangent(
                    Some(&dev(&lbar)),
                    Some(&dev(&vbar)),
                    &dev(a_dot),
                    None,
                    Some(&dev(&vbar_dot)),
                )
                .unwrap();
            (host(&g), host(&h))
        };
        let d1 = plus_adjoint(&random(&dims, dtype, 903));
        let d2 = plus_adjoint(&random(&dims, dtype, 904));
        let (g, h1) = second(&a, &d1);
        let (_, h2) = second(&a, &d2);
        let (l, r) = (dot(&d2, &h1), dot(&d1, &h2));
        assert!(
            (l - r).abs() < 1e-9 * l.abs().max(1.0),
            "{dtype}: ⟨d2, H d1⟩ = {l} vs ⟨d1, H d2⟩ = {r}"
        );
        let eps = 1e-6;
        let (gp, _) = second(&axpy(&a, eps, &d1), &d1);
        let (gm, _) = second(&axpy(&a, -eps, &d1), &d1);
        let fd = map1(&axpy(&gp, -1.0, &gm), dtype, |z| z / (2.0 * eps));
        let err = norm(&axpy(&fd, -1.0, &h1));
        assert!(
            err < 1e-6 * norm(&h1).max(1.0),
            "{dtype}: |FD − H·ȧ| = {err:e}, |H·ȧ| = {:e}",
            norm(&h1)
        );
        assert!(norm(&g) > 0.0);
    }
}

/// QR's factors are functions of `A` (positive diagonal of `R`), so the pullback of a loss of
/// the raw factors matches finite differences: tall, square and wide, real and complex.
#[test]
fn qr_gradient_matches_finite_differences() {
    for dtype in [DType::F64, DType::C64] {
        for &(m, n) in &[(5, 3), (4, 4), (3, 5)] {
            let k = m.min(n);
            let a = random(&[m, n], dtype, 81);
            let dir = random(&[m, n], dtype, 82);
            let wq = random(&[m, k], dtype, 83);
            let wr = random(&[k, n], dtype, 84);
            let f = |x: &[Value]| -> adrules_core::Result<Value> {
                let o = qr(&be(), &dev(x[0].tensor("a")?), QrMode::Reduced)?;
                let l = dot(&wq, &host(&o.q).to_dtype_projected(dtype))
                    + dot(&wr, &host(&o.r).to_dtype_projected(dtype));
                Ok(Value::Tensor(HostTensor::from_vec(&[], vec![l])?))
            };
            let fd = FiniteDifference {
                stencil: Stencil::Central4,
                step: 1e-4,
            };
            let want = fd
                .jvp(
                    f,
                    &[Value::Tensor(a.clone())],
                    &[Value::Tensor(dir.clone())],
                )
                .unwrap()
                .to_c64_vec()[0]
                .re;
            let (_, pb) = qr_rrule(&be(), &dev(&a), QrMode::Reduced).unwrap();
            let got = dot(
                &host(&pb.pullback(Some(&dev(&wq)), Some(&dev(&wr))).unwrap()),
                &dir,
            );
            assert!(
                (got - want).abs() < 1e-7 * want.abs().max(1.0),
                "{dtype} {m}×{n}: {got} vs fd {want}"
            );
        }
    }
}
