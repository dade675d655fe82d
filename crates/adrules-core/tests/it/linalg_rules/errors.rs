//! Degenerate spectra, batched gauge errors, bad input, extreme magnitudes and zero singular values: typed errors or finite, correct values.

use super::*;

/// A doubly degenerate singular value: a loss of `S` and of the projector onto the
/// degenerate pair is gauge-invariant and gets the exact, finite gradient with no broadening;
/// a loss of one vector of the pair is refused; with broadening it is finite.
#[test]
fn degenerate_spectra() {
    let s = [3.0, 2.0, 2.0, 1.0];
    let a = with_spectrum(&[], 5, 4, &s, DType::F64, 51);
    let (out, pb) = svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).unwrap();
    let u = host(&out.u);
    // L = Σ w·s + ½⟨G + Gᵀ, U₃·U₃ᵀ⟩ with U₃ the first three columns (the degenerate pair 1, 2
    // and the vector 0): invariant under rotations of the pair, and coupling both to the
    // vectors 0 and 3, so that the F terms of the pairs (0, 1), (1, 3), … are exercised.
    // Ū = (G + Gᵀ)·U₃, zero on column 3.
    let g = random(&[5, 5], DType::F64, 52);
    let ubar = matmap(&u, &u, 5, 4, |u, _| {
        let gm = &mats(&g)[0];
        let x = (gm + gm.transpose()) * u;
        Mat::from_fn(
            5,
            4,
            |i, j| if j < 3 { x[(i, j)] } else { C::new(0.0, 0.0) },
        )
    });
    // symmetric in the degenerate pair: Σ w·s is differentiable only then
    let sbar = HostTensor::from_vec(&[4], vec![0.3, -0.7, -0.7, 1.1]).unwrap();
    let cot = SvdCotangents {
        u: Some(&dev(&ubar)),
        s: Some(&dev(&sbar)),
        ..Default::default()
    };
    let a_bar = host(&pb.pullback(cot).unwrap());
    let dir = random(&[5, 4], DType::F64, 54);
    let f = |x: &[Value]| -> adrules_core::Result<Value> {
        let o = svd(&be(), &dev(x[0].tensor("a")?), SvdMode::Thin)?;
        let u = narrow(&host(&o.u), 3, true);
        let p = matmap(&u, &u, 5, 5, |u, _| u * u.adjoint());
        let gs = matmap(&g, &g, 5, 5, |g, _| g + g.transpose());
        let l = dot(&sbar, &host(&o.s)) + 0.5 * dot(&gs, &p);
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
    let got = dot(&a_bar, &dir);
    assert!(
        (got - want).abs() < 1e-7 * want.abs().max(1.0),
        "degenerate, invariant loss: {got} vs fd {want}"
    );

    // the loss of the first vector of the pair depends on the basis of the pair
    let w = random(&[5, 4], DType::F64, 55);
    let ubar = abs_cotangent(&u, &w, DType::F64);
    let cot = SvdCotangents {
        u: Some(&dev(&ubar)),
        ..Default::default()
    };
    assert!(matches!(
        pb.pullback(cot),
        Err(Error::GaugeIllDefined { .. })
    ));
    // broadened: finite
    let (_, pb) = svd_rrule(
        &be(),
        &dev(&a),
        SvdMode::Thin,
        RuleOptions::broadened(1e-12),
    )
    .unwrap();
    let a_bar = host(&pb.pullback(cot).unwrap());
    assert!(a_bar.data().to_c64_vec().iter().all(|z| z.re.is_finite()));

    // eigh: a doubly degenerate eigenvalue, invariant loss λ̄ only: exact; a vector loss: refused
    let lam = [-1.0, 2.0, 2.0, 4.0];
    let v = mats(&host(
        &qr(
            &be(),
            &dev(&random(&[4, 4], DType::F64, 56)),
            QrMode::Reduced,
        )
        .unwrap()
        .q,
    ))
    .remove(0);
    let d = Mat::from_fn(4, 4, |i, j| C::new(if i == j { lam[i] } else { 0.0 }, 0.0));
    let h = unmats(&[], 4, 4, &[&v * &d * v.adjoint()], DType::F64);
    let (out, pb) = eigh_rrule(&be(), &dev(&h), RuleOptions::default()).unwrap();
    let lbar = HostTensor::from_vec(&[4], vec![0.5, -1.0, -1.0, 2.0]).unwrap();
    let a_bar = host(&pb.pullback(Some(&dev(&lbar)), None).unwrap());
    let dir = plus_adjoint(&random(&[4, 4], DType::F64, 59));
    let f = |x: &[Value]| -> adrules_core::Result<Value> {
        let o = eigh(&be(), &dev(x[0].tensor("a")?))?;
        let l = dot(&lbar, &host(&o.values));
        Ok(Value::Tensor(HostTensor::from_vec(&[], vec![l])?))
    };
    let want = fd
        .jvp(
            f,
            &[Value::Tensor(h.clone())],
            &[Value::Tensor(dir.clone())],
        )
        .unwrap()
        .to_c64_vec()[0]
        .re;
    let got = dot(&a_bar, &dir);
    assert!(
        (got - want).abs() < 1e-7 * want.abs().max(1.0),
        "degenerate eigh, invariant loss: {got} vs fd {want}"
    );
    // unequal weights on the pair: not differentiable
    let uneven = dev(&HostTensor::from_vec(&[4], vec![0.5, -1.0, 1.0, 2.0]).unwrap());
    assert!(matches!(
        pb.pullback(Some(&uneven), None),
        Err(Error::GaugeIllDefined { .. })
    ));
    let vb = abs_cotangent(
        &host(&out.vectors),
        &random(&[4, 4], DType::F64, 58),
        DType::F64,
    );
    assert!(matches!(
        pb.pullback(None, Some(&dev(&vb))),
        Err(Error::GaugeIllDefined { .. })
    ));
}

/// In a batch, a gauge error names the matrix it comes from (here the second, an identity
/// whose degenerate singular values meet a gauge-dependent cotangent); a single matrix's
/// error keeps its message.
#[test]
fn batched_gauge_errors_name_their_matrix() {
    // matrix 0 = diag(1, 2, 3) (separated spectrum), matrix 1 = I (fully degenerate)
    let diag = |d: [f64; 3]| (0..9).map(move |i| if i % 4 == 0 { d[i / 4] } else { 0.0 });
    let a: Vec<f64> = diag([1.0, 2.0, 3.0]).chain(diag([1.0; 3])).collect();
    let a = HostTensor::from_vec(&[2, 3, 3], a).unwrap();
    let (_, pb) = svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).unwrap();
    let ubar = random(&[2, 3, 3], DType::F64, 62);
    let cot = SvdCotangents {
        u: Some(&dev(&ubar)),
        ..Default::default()
    };
    match pb.pullback(cot) {
        Err(Error::GaugeIllDefined { reason, .. }) => {
            assert!(
                reason.starts_with("matrix 1 (row-major batch order): "),
                "{reason}"
            )
        }
        other => panic!("expected GaugeIllDefined, got {other:?}"),
    }
    let (_, eb) = eigh_rrule(&be(), &dev(&a), RuleOptions::default()).unwrap();
    match eb.pullback(None, Some(&dev(&ubar))) {
        Err(Error::GaugeIllDefined { reason, .. }) => {
            assert!(
                reason.starts_with("matrix 1 (row-major batch order): "),
                "{reason}"
            )
        }
        other => panic!("expected GaugeIllDefined, got {other:?}"),
    }
    let one = HostTensor::from_vec(&[3, 3], diag([1.0; 3]).collect()).unwrap();
    let (_, pb) = svd_rrule(&be(), &dev(&one), SvdMode::Thin, RuleOptions::default()).unwrap();
    let ubar = random(&[3, 3], DType::F64, 63);
    let cot = SvdCotangents {
        u: Some(&dev(&ubar)),
        ..Default::default()
    };
    match pb.pullback(cot) {
        Err(Error::GaugeIllDefined { reason, .. }) => {
            assert!(!reason.starts_with("matrix"), "{reason}")
        }
        other => panic!("expected GaugeIllDefined, got {other:?}"),
    }
}

#[test]
fn bad_input_gets_typed_errors() {
    let be = be();
    let v = dev(&random(&[4], DType::F64, 1));
    assert!(matches!(
        svd(&be, &v, SvdMode::Thin),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(
        qr(&be, &v, QrMode::Reduced),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(eigh(&be, &v), Err(Error::RankMismatch { .. })));
    let nan = dev(&map1(&random(&[3, 3], DType::F64, 2), DType::F64, |z| {
        if z.re > 0.0 { C::new(f64::NAN, 0.0) } else { z }
    }));
    assert!(matches!(
        svd(&be, &nan, SvdMode::Thin),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        qr(&be, &nan, QrMode::Reduced),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        eigh(&be, &nan),
        Err(Error::InvalidArgument { .. })
    ));
    let rect = dev(&random(&[3, 4], DType::F64, 3));
    assert!(matches!(eigh(&be, &rect), Err(Error::ShapeMismatch { .. })));
    let nonherm = dev(&random(&[3, 3], DType::C64, 4));
    assert!(matches!(
        eigh(&be, &nonherm),
        Err(Error::InvalidArgument { .. })
    ));
    let a = dev(&random(&[4, 3], DType::F64, 5));
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            svd_rrule(&be, &a, SvdMode::Thin, RuleOptions::broadened(bad)),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            svd_truncated(&be, &a, Truncation::tolerance(bad)),
            Err(Error::InvalidArgument { .. })
        ));
    }
    // cotangents of the wrong shape or dtype
    let (_, pb) = svd_rrule(&be, &a, SvdMode::Thin, RuleOptions::default()).unwrap();
    let wrong = dev(&random(&[4, 4], DType::F64, 6));
    let cot = SvdCotangents {
        u: Some(&wrong),
        ..Default::default()
    };
    assert!(matches!(pb.pullback(cot), Err(Error::ShapeMismatch { .. })));
    let complex = dev(&random(&[4, 3], DType::C64, 7));
    let cot = SvdCotangents {
        u: Some(&complex),
        ..Default::default()
    };
    assert!(matches!(pb.pullback(cot), Err(Error::DTypeMismatch { .. })));
    let cot = SvdCotangents {
        discarded: Some(&wrong),
        ..Default::default()
    };
    assert!(matches!(
        pb.pullback(cot),
        Err(Error::InvalidArgument { .. })
    ));
    // a full SVD's complement columns with a basis-dependent cotangent (three complement
    // columns: a single real one has only a sign for gauge, and any cotangent is fine)
    let a = dev(&random(&[5, 2], DType::F64, 11));
    let (out, pb) = svd_rrule(&be, &a, SvdMode::Full, RuleOptions::default()).unwrap();
    let ubar = random(host(&out.u).dims(), DType::F64, 8);
    let cot = SvdCotangents {
        u: Some(&dev(&ubar)),
        ..Default::default()
    };
    assert!(matches!(
        pb.pullback(cot),
        Err(Error::GaugeIllDefined { .. })
    ));
    // a rank-deficient QR
    let low = unmats(
        &[],
        3,
        3,
        &[Mat::from_fn(3, 3, |i, j| {
            C::new((i + 1) as f64 * (j + 1) as f64, 0.0)
        })],
        DType::F64,
    );
    let (_, pb) = qr_rrule(&be, &dev(&low), QrMode::Reduced).unwrap();
    let qb = dev(&random(&[3, 3], DType::F64, 9));
    assert!(matches!(
        pb.pullback(Some(&qb), None),
        Err(Error::Singular { .. })
    ));
}

/// Far from 1 in magnitude (1e±200 in f64, 1e±30 in f32): the decompositions work on `A/c`
/// for a power of two `c` and the rules on singular values in units of `c`, so nothing
/// overflows (faer alone fails to converge at 1e154 and is inaccurate below 1e-160, and
/// squares of singular values leave the exponent range there).
#[test]
fn extreme_magnitudes() {
    for (dtype, scales) in [
        (DType::F64, [1e-200, 1e200]),
        (DType::C64, [1e-200, 1e200]),
        (DType::F32, [1e-30, 1e30]),
    ] {
        let eps = if dtype.is_double() { 1e-12 } else { 1e-4 };
        for scale in scales {
            let base = separated(&[], 4, 3, dtype, 91);
            let a = map1(&base, dtype, |z| z * scale);
            let o = svd(&be(), &dev(&a), SvdMode::Thin).unwrap();
            let s = host(&o.s).data().to_c64_vec();
            for (i, x) in s.iter().enumerate() {
                let want = (3 - i) as f64 * scale;
                assert!(
                    (x.re - want).abs() <= eps * want,
                    "{dtype} ×{scale:e}: s{i} = {} ≠ {want:e}",
                    x.re
                );
            }
            // ∂(Σ sᵢ²)/∂A = 2A
            let (out, pb) =
                svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).unwrap();
            let s2 = map1(&host(&out.s), dtype.real(), |z| z * 2.0);
            let g = host(
                &pb.pullback(SvdCotangents {
                    s: Some(&dev(&s2)),
                    ..Default::default()
                })
                .unwrap(),
            );
            // (compared in units of the scale: ‖·‖² of 1e-200 entries underflows)
            let unit = |x: &HostTensor| map1(x, DType::C64, |z| z / scale);
            let err = norm(&axpy(&unit(&g), -2.0, &unit(&a))) / norm(&unit(&a));
            assert!(
                err < eps * 10.0,
                "{dtype} ×{scale:e}: ∂Σs²/∂A off by {err:e}"
            );
            // a loss of U (invariant): finite, and scale-covariant (∝ 1/scale)
            let ubar = abs_cotangent(&host(&out.u), &random(&[4, 3], dtype.real(), 92), dtype);
            let g = host(
                &pb.pullback(SvdCotangents {
                    u: Some(&dev(&ubar)),
                    ..Default::default()
                })
                .unwrap(),
            );
            let (_, pb1) =
                svd_rrule(&be(), &dev(&base), SvdMode::Thin, RuleOptions::default()).unwrap();
            let g1 = host(
                &pb1.pullback(SvdCotangents {
                    u: Some(&dev(&ubar)),
                    ..Default::default()
                })
                .unwrap(),
            );
            let err = norm(&axpy(&map1(&g, dtype, |z| z * scale), -1.0, &g1)) / norm(&g1);
            assert!(
                err < eps * 100.0,
                "{dtype} ×{scale:e}: ∂L(U)/∂A not ∝ 1/scale ({err:e})"
            );
            let (_, tan) = svd_frule(
                &be(),
                &dev(&a),
                &dev(&a),
                SvdMode::Thin,
                RuleOptions::default(),
            )
            .unwrap();
            // along Ȧ = A the factors U, V do not move
            assert!(
                norm(&host(&tan.u)) < eps * 10.0,
                "{dtype} ×{scale:e}: U̇ along A"
            );
            // QR and eigh
            let q = qr(&be(), &dev(&a), QrMode::Reduced).unwrap();
            let (qh, rh) = (host(&q.q), host(&q.r));
            let rec = matmap(&qh, &rh, 4, 3, |q, r| q * r);
            assert!(
                norm(&axpy(&unit(&rec), -1.0, &unit(&a))) <= eps * norm(&unit(&a)),
                "{dtype} ×{scale:e}: QR"
            );
            for rm in mats(&rh) {
                for i in 0..3 {
                    assert!(
                        rm[(i, i)].re > 0.0 && rm[(i, i)].im == 0.0,
                        "{dtype} ×{scale:e}: R diagonal"
                    );
                }
            }
            let h = plus_adjoint(&map1(&random(&[3, 3], dtype, 93), dtype, |z| z * scale));
            let e = eigh(&be(), &dev(&h)).unwrap();
            let l = host(&e.values).data().to_c64_vec();
            let tr: f64 = mats(&h)[0]
                .diagonal()
                .column_vector()
                .iter()
                .map(|z| z.re)
                .sum();
            let sum: f64 = l.iter().map(|z| z.re).sum();
            assert!(
                (sum - tr).abs() <= eps * 10.0 * scale,
                "{dtype} ×{scale:e}: Σλ ≠ tr A"
            );
            let skew = unmats(
                &[],
                2,
                2,
                &[Mat::from_fn(2, 2, |i, j| {
                    C::new(
                        if j > i {
                            2.0 * scale
                        } else if i == j {
                            scale
                        } else {
                            0.0
                        },
                        0.0,
                    )
                })],
                dtype,
            );
            assert!(
                matches!(eigh(&be(), &dev(&skew)), Err(Error::InvalidArgument { .. })),
                "{dtype} ×{scale:e}: non-Hermitian accepted"
            );
        }
    }
}

#[test]
fn zero_singular_values_and_non_finite_cotangents() {
    // two exact zero singular values of a square matrix: their vectors are any basis of the
    // null spaces, so a loss of them is refused
    let a = unmats(
        &[],
        3,
        3,
        &[Mat::from_fn(3, 3, |i, j| {
            C::new(if i == 0 && j == 0 { 1.0 } else { 0.0 }, 0.0)
        })],
        DType::F64,
    );
    let (_, pb) = svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).unwrap();
    let ubar = dev(&random(&[3, 3], DType::F64, 95));
    let got = pb.pullback(SvdCotangents {
        u: Some(&ubar),
        ..Default::default()
    });
    assert!(matches!(got, Err(Error::GaugeIllDefined { .. })), "{got:?}");
    // Σ s on it: the subgradient U·Vh, no error
    let ones = dev(&HostTensor::from_vec(&[3], vec![1.0; 3]).unwrap());
    assert!(
        pb.pullback(SvdCotangents {
            s: Some(&ones),
            ..Default::default()
        })
        .is_ok()
    );
    // a NaN cotangent is an error, not a NaN gradient
    let nan = dev(&HostTensor::from_vec(&[3], vec![1.0, f64::NAN, 0.0]).unwrap());
    let got = pb.pullback(SvdCotangents {
        s: Some(&nan),
        ..Default::default()
    });
    assert!(matches!(got, Err(Error::InvalidArgument { .. })), "{got:?}");
    // Truncation::rank keeps exactly min(r, k), zeros included
    let t = svd_truncated(&be(), &dev(&a), Truncation::rank(2)).unwrap();
    assert_eq!(t.rank, 2);
    assert_eq!(
        svd_truncated(&be(), &dev(&a), Truncation::tolerance(1.0))
            .unwrap()
            .rank,
        0
    );
}
