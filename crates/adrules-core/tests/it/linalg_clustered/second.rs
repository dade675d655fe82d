//! The clustered eigendecomposition's second order (`ClusteredEighPullback::pullback_tangent`):
//! central differences of the pullback with moving cotangents (near-, exactly degenerate and
//! broadened), the symmetry of the Hessian, batches and single precision, typed errors.

use super::*;

/// `x·s`, in `x`'s dtype.
fn scale(x: &HostTensor, s: f64) -> HostTensor {
    map1(x, x.dtype(), |z| z * s)
}

/// `spectrum(scale)` with the two discarded eigenvalues made degenerate (`0.3, 0.3`): a
/// degeneracy outside the kept clusters (the confluent divided differences).
fn spectrum_degenerate_outside(scale: f64) -> Vec<f64> {
    let mut l = spectrum(scale);
    l[6] = 0.3;
    l
}

/// `(Ā, Ā̇)` of `pullback_tangent` at `a` (single matrix or batch), all arguments given.
fn second(
    a: &HostTensor,
    dtype: DType,
    rule: RuleOptions,
    a_dot: &HostTensor,
    [wbar, cbar]: [&HostTensor; 2],
    [wbar_dot, cbar_dot]: [Option<&HostTensor>; 2],
) -> (HostTensor, HostTensor) {
    let g = dev(&tensor(&secondary(dtype), dtype));
    let (_, pb) = eigh_clustered_rrule(&be(), &dev(a), &g, &options(dtype), rule).unwrap();
    let (wd, cd) = (wbar_dot.map(dev), cbar_dot.map(dev));
    let (bar, hvp) = pb
        .pullback_tangent(
            Some(&dev(wbar)),
            Some(&dev(cbar)),
            &dev(a_dot),
            wd.as_ref(),
            cd.as_ref(),
        )
        .unwrap();
    (host(&bar), host(&hvp))
}

/// `pullback(A; W̄, C̄')` at `a`.
fn gradient(
    a: &HostTensor,
    dtype: DType,
    rule: RuleOptions,
    [w, c]: [&HostTensor; 2],
) -> HostTensor {
    let g = dev(&tensor(&secondary(dtype), dtype));
    let (_, pb) = eigh_clustered_rrule(&be(), &dev(a), &g, &options(dtype), rule).unwrap();
    host(&pb.pullback(Some(&dev(w)), Some(&dev(c))).unwrap())
}

/// The second order against fourth-order central differences of the pullback along
/// `t ↦ (A + tȦ; W̄ + tW̄̇, C̄' + tC̄̇')` (the pullback is smooth in `A` wherever the clusters
/// and the `μ` are separated, however close the eigenvalues inside a cluster), f64 and c64:
/// kept clusters split by `10⁻⁹` (relative) and exactly degenerate, a degeneracy among the
/// discarded eigenvalues, and broadened (to the bias `O(ε/δ²)`). `Ā` is the first order's.
#[test]
fn second_order_matches_finite_differences_of_the_pullback() {
    let cases: [(&str, Vec<f64>, RuleOptions, f64); 4] = [
        (
            "near-degenerate 1e-9",
            spectrum(1e-9),
            RuleOptions::default(),
            1e-7,
        ),
        (
            "exactly degenerate",
            spectrum(0.0),
            RuleOptions::default(),
            1e-7,
        ),
        (
            "degenerate outside",
            spectrum_degenerate_outside(1e-9),
            RuleOptions::default(),
            1e-7,
        ),
        (
            "broadened",
            spectrum(1e-9),
            RuleOptions::broadened(1e-8),
            1e-6,
        ),
    ];
    for dtype in [DType::F64, DType::C64] {
        for (case, (name, lam, rule, rtol)) in cases.iter().enumerate() {
            let seed = 1100 + 10 * case as u64;
            let a = tensor(&spectral(lam, dtype, seed), dtype);
            // a Hermitian direction of unit norm (the stencil stays on Hermitian matrices)
            let d = plus_adjoint(&random(&[N, N], dtype, seed + 1));
            let a_dot = scale(&d, 1.0 / norm(&d));
            let wbar = random(&[N, 6], dtype, seed + 2);
            let cbar = random(&[6, 6], dtype, seed + 3);
            let wbar_dot = random(&[N, 6], dtype, seed + 4);
            let cbar_dot = random(&[6, 6], dtype, seed + 5);
            let (bar, hvp) = second(
                &a,
                dtype,
                *rule,
                &a_dot,
                [&wbar, &cbar],
                [Some(&wbar_dot), Some(&cbar_dot)],
            );
            let first = gradient(&a, dtype, *rule, [&wbar, &cbar]);
            assert!(norm(&axpy(&bar, -1.0, &first)) <= 1e-14 * norm(&first));
            let at = |t: f64| {
                gradient(
                    &axpy(&a, t, &a_dot),
                    dtype,
                    *rule,
                    [&axpy(&wbar, t, &wbar_dot), &axpy(&cbar, t, &cbar_dot)],
                )
            };
            let h = 5e-4;
            // (−g(2h) + 8g(h) − 8g(−h) + g(−2h))/(12h)
            let fd = axpy(
                &scale(&axpy(&at(h), -1.0, &at(-h)), 8.0),
                -1.0,
                &axpy(&at(2.0 * h), -1.0, &at(-2.0 * h)),
            );
            let fd = scale(&fd, 1.0 / (12.0 * h));
            let err = norm(&axpy(&hvp, -1.0, &fd));
            assert!(norm(&fd) > 1e-2, "{dtype} {name}: a trivial direction");
            assert!(
                err <= rtol * norm(&fd),
                "{dtype} {name}: |Ā̇ − fd| = {err:e}, |fd| = {:e}",
                norm(&fd)
            );
            // Ā̇ is Hermitian
            let skew = axpy(&plus_adjoint(&hvp), -2.0, &hvp);
            assert!(
                norm(&skew) <= 1e-12 * norm(&hvp),
                "{dtype} {name}: Ā̇ not Hermitian"
            );
        }
    }
}

/// For the fixed linear loss `ℓ = Re⟨W̄, W⟩ + Re⟨C̄', C'⟩` (constant cotangents, so no
/// cotangent tangents) the Hessian is symmetric, `⟨Ȧ₂, H·Ȧ₁⟩ = ⟨Ȧ₁, H·Ȧ₂⟩`, near-degenerate
/// (`10⁻⁹`) and exactly degenerate, for non-Hermitian directions too, real and complex.
#[test]
fn second_order_hessian_is_symmetric() {
    for dtype in [DType::F64, DType::C64] {
        for (case, lam) in [
            spectrum(1e-9),
            spectrum(0.0),
            spectrum_degenerate_outside(0.0),
        ]
        .iter()
        .enumerate()
        {
            let seed = 1200 + 10 * case as u64;
            let a = tensor(&spectral(lam, dtype, seed), dtype);
            let wbar = random(&[N, 6], dtype, seed + 1);
            let cbar = random(&[6, 6], dtype, seed + 2);
            let d1 = random(&[N, N], dtype, seed + 3);
            let d2 = random(&[N, N], dtype, seed + 4);
            let rule = RuleOptions::default();
            let (_, h1) = second(&a, dtype, rule, &d1, [&wbar, &cbar], [None, None]);
            let (_, h2) = second(&a, dtype, rule, &d2, [&wbar, &cbar], [None, None]);
            let (l, r) = (dot(&d2, &h1), dot(&d1, &h2));
            let size = norm(&d2) * norm(&h1) + norm(&d1) * norm(&h2);
            assert!(
                (l - r).abs() <= 1e-13 * size,
                "{dtype} case {case}: ⟨d2, H d1⟩ = {l} vs ⟨d1, H d2⟩ = {r}"
            );
            assert!(norm(&h1) > 1e-2, "{dtype} case {case}: a trivial Hessian");
        }
    }
}

/// A batch of two equals two single calls; f32 and c32 agree with f64 and c64 (at the same,
/// rounded, data) to single precision, near-degenerate (`10⁻⁵`).
#[test]
fn second_order_batches_and_single_precision() {
    let rule = RuleOptions::default();
    for dtype in [DType::C64, DType::F64] {
        let a0 = spectral(&spectrum(1e-9), dtype, 1300);
        let a1 = spectral(&spectrum(0.0), dtype, 1301);
        let both = unmats(&[2], N, N, &[a0.clone(), a1.clone()], dtype);
        let dots = random(&[2, N, N], dtype, 1302);
        let wbar = random(&[2, N, 6], dtype, 1303);
        let cbar = random(&[2, 6, 6], dtype, 1304);
        let wbd = random(&[2, N, 6], dtype, 1305);
        let cbd = random(&[2, 6, 6], dtype, 1306);
        let (bar, hvp) = second(
            &both,
            dtype,
            rule,
            &dots,
            [&wbar, &cbar],
            [Some(&wbd), Some(&cbd)],
        );
        let one = |x: &HostTensor, b: usize| tensor(&mats(x)[b], dtype);
        for (b, x) in [a0, a1].iter().enumerate() {
            let (bar1, hvp1) = second(
                &tensor(x, dtype),
                dtype,
                rule,
                &one(&dots, b),
                [&one(&wbar, b), &one(&cbar, b)],
                [Some(&one(&wbd, b)), Some(&one(&cbd, b))],
            );
            let (gb, gh) = (mats(&bar).remove(b), mats(&hvp).remove(b));
            assert!((&mats(&bar1)[0] - &gb).norm_l2() <= 1e-12 * gb.norm_l2());
            assert!(
                (&mats(&hvp1)[0] - &gh).norm_l2() <= 1e-12 * gh.norm_l2(),
                "{dtype}: batch item {b} differs from its single call"
            );
        }
    }
    for (narrow, wide_t) in [(DType::F32, DType::F64), (DType::C32, DType::C64)] {
        let a = tensor(&spectral(&spectrum(1e-5), narrow, 1310), narrow);
        let a_dot = random(&[N, N], narrow, 1311);
        let wbar = random(&[N, 6], narrow, 1312);
        let cbar = random(&[6, 6], narrow, 1313);
        let cbd = random(&[6, 6], narrow, 1314);
        let (_, h32) = second(&a, narrow, rule, &a_dot, [&wbar, &cbar], [None, Some(&cbd)]);
        let w = |x: &HostTensor| x.to_dtype_projected(wide_t);
        let (_, h64) = second(
            &w(&a),
            wide_t,
            rule,
            &w(&a_dot),
            [&w(&wbar), &w(&cbar)],
            [None, Some(&w(&cbd))],
        );
        assert_eq!(h32.dtype(), narrow);
        let err = norm(&axpy(&w(&h32), -1.0, &h64));
        assert!(
            err <= 1e-4 * norm(&h64),
            "{narrow}: |Ā̇₃₂ − Ā̇₆₄| = {err:e}, |Ā̇₆₄| = {:e}",
            norm(&h64)
        );
    }
}

/// The second order checks what it is given, by name: the shape, dtype and finiteness of
/// `a_dot` and of the cotangents' tangents.
#[test]
fn second_order_arguments_are_checked() {
    let dtype = DType::F64;
    let a = tensor(&spectral(&spectrum(1e-5), dtype, 1400), dtype);
    let g = dev(&tensor(&secondary(dtype), dtype));
    let rule = RuleOptions::default();
    let (_, pb) = eigh_clustered_rrule(&be(), &dev(&a), &g, &options(dtype), rule).unwrap();
    let wbar = dev(&random(&[N, 6], dtype, 1401));
    let a_dot = dev(&random(&[N, N], dtype, 1402));
    let named = |r: adrules_core::Result<_>, want: &str| match r {
        Err(Error::ShapeMismatch { arg, .. })
        | Err(Error::DTypeMismatch { arg, .. })
        | Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, want),
        Err(e) => panic!("{want}: unexpected error {e:?}"),
        Ok(_) => panic!("{want}: accepted"),
    };
    let call = |ad: &adrules_strided::Tensor,
                wd: Option<&adrules_strided::Tensor>,
                cd: Option<&adrules_strided::Tensor>| {
        pb.pullback_tangent(Some(&wbar), None, ad, wd, cd)
    };
    // shapes
    let r = call(&dev(&random(&[N, N + 1], dtype, 1403)), None, None);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })));
    named(r, "a_dot");
    let r = call(&a_dot, Some(&dev(&random(&[N, 5], dtype, 1404))), None);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })));
    named(r, "basis_bar_dot");
    let r = call(&a_dot, None, Some(&dev(&random(&[2, 6, 6], dtype, 1405))));
    named(r, "corner_bar_dot");
    // dtypes: complex for real data
    let r = call(&a_dot, None, Some(&dev(&random(&[6, 6], DType::C64, 1406))));
    assert!(matches!(r, Err(Error::DTypeMismatch { .. })));
    named(r, "corner_bar_dot");
    let r = call(&dev(&random(&[N, N], DType::C64, 1407)), None, None);
    named(r, "a_dot");
    // non-finite entries
    let nan = map1(&random(&[N, 6], dtype, 1408), dtype, |_| {
        C::new(f64::NAN, 0.0)
    });
    let r = call(&a_dot, Some(&dev(&nan)), None);
    assert!(matches!(r, Err(Error::InvalidArgument { .. })));
    named(r, "basis_bar_dot");
    let inf = map1(&random(&[N, N], dtype, 1409), dtype, |_| {
        C::new(f64::INFINITY, 0.0)
    });
    named(call(&dev(&inf), None, None), "a_dot");
    // the cotangents themselves, as the first order names them
    let r = pb.pullback_tangent(
        Some(&dev(&random(&[N, 7], dtype, 1410))),
        None,
        &a_dot,
        None,
        None,
    );
    named(r, "basis_bar");
    // a double-precision tangent for a single-precision rule
    let a32 = a.to_dtype_projected(DType::F32);
    let g32 = dev(&tensor(&secondary(DType::F32), DType::F32));
    let (_, pb32) =
        eigh_clustered_rrule(&be(), &dev(&a32), &g32, &options(DType::F32), rule).unwrap();
    let r = pb32.pullback_tangent(None, None, &a_dot, None, None);
    assert!(matches!(r, Err(Error::DTypeMismatch { .. })));
    named(r, "a_dot");
    // nothing given: zero
    let (bar, dot_) = pb.pullback_tangent(None, None, &a_dot, None, None).unwrap();
    assert_eq!(norm(&host(&bar)), 0.0);
    assert_eq!(norm(&host(&dot_)), 0.0);
}
