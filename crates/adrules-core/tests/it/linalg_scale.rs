//! The decompositions and their first-order rules at every scale of the input: a matrix
//! multiplied by a power of two `c`, from subnormal to near overflow, has the same factors
//! (U, V, Q: degree 0; s, R, λ: degree 1) and rules that scale by known degrees (the
//! cotangent of `S̄`, `R̄`, `λ̄` and the tangents `ṡ`, `Ṙ`, `λ̇`: degree 0; the parts through
//! `Ū`, `V̄`, `Q̄` and the tangents `U̇`, `V̇`, `Q̇`: degree −1). Where the true result is beyond
//! the dtype's range the rule returns `Error::NonFinite`, never an `inf` or a `NaN`. Then the
//! default degeneracy tolerance on a large f32 matrix, and the truncated SVD's all-zero
//! discarded cotangent without the discarded term.

use crate::support::linalg::*;
use adrules_core::linalg::{
    QrMode, RuleOptions, SvdCotangents, SvdMode, eigh_frule, eigh_rrule, qr_frule, qr_rrule,
    svd_frule, svd_rrule,
};
use adrules_core::{DType, Error, HostTensor, Result};

/// `x·2ᵏ` entrywise.
fn times_pow2(x: &HostTensor, k: i32) -> HostTensor {
    let f = 2f64.powi(k / 2) * 2f64.powi(k - k / 2);
    map1(x, x.dtype(), |z| z * f)
}

/// `‖x·2ᵏ − y‖/‖y‖`, with `2ᵏ` applied in two exact steps.
fn rel_scaled(x: &HostTensor, k: i32, y: &HostTensor) -> f64 {
    let x = map1(x, DType::C64, |z| {
        z * 2f64.powi(k / 2) * 2f64.powi(k - k / 2)
    });
    let y = map1(y, DType::C64, |z| z);
    let d = axpy(&x, -1.0, &y);
    norm(&d) / norm(&y).max(f64::MIN_POSITIVE)
}

/// `(exponent, tolerance)` pairs for `dtype`: subnormal, tiny, huge (the rules need the
/// result in range; the tolerance covers the subnormal inputs' lost digits).
fn scales(dtype: DType) -> Vec<(i32, f64)> {
    if dtype.is_double() {
        vec![(-1030, 1e-9), (-997, 1e-11), (-500, 1e-11), (900, 1e-11)]
    } else {
        vec![(-130, 2e-3), (-120, 1e-4), (100, 1e-4)]
    }
}

fn non_finite<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(Error::NonFinite { .. }))
}

/// Whether a result of degree −1 at scale `2ᵏ` may truly leave `dtype`'s range (its entries
/// of order 1 at scale 1 become `2⁻ᵏ`).
fn may_overflow(k: i32, dtype: DType) -> bool {
    k < -1000 || (k < -120 && !dtype.is_double())
}

/// A rule's result at scale `2ᵏ` times `2^back` against the unscaled result `want`
/// (`back = k` for degree −1, `0` for degree 0); a `NonFinite` error only where
/// `may_overflow` allows it.
fn check_at_scale(
    got: Result<HostTensor>,
    back: i32,
    want: &HostTensor,
    tol: f64,
    may_overflow: bool,
    what: &str,
) {
    match got {
        Ok(h) => {
            let r = rel_scaled(&h, back, want);
            assert!(r < tol, "{what} off by {r:e}");
        }
        Err(e) => assert!(
            matches!(e, Error::NonFinite { .. }) && may_overflow,
            "{what}: {e}"
        ),
    }
}

const ALL: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];

#[test]
fn svd_rules_scale_from_subnormal_to_huge() {
    for dtype in ALL {
        let a0 = random(&[4, 3], dtype, 7);
        let dot = random(&[4, 3], dtype, 8);
        let (out0, pb0) =
            svd_rrule(&be(), &dev(&a0), SvdMode::Thin, RuleOptions::default()).unwrap();
        let ones = HostTensor::from_vec(&[3], vec![1.0; 3])
            .unwrap()
            .to_dtype_projected(dtype.real());
        // a gauge-invariant cotangent through U·Vh: Re⟨W, U·Vh⟩ gives Ū = W·V, V̄h = Uᴴ·W
        let w = random(&[4, 3], dtype, 9);
        let (u0, vh0) = (host(&out0.u), host(&out0.vh));
        let ubar = matmap(&w, &vh0, 4, 3, |w, vh| w * vh.adjoint());
        let vhbar = matmap(&u0, &w, 3, 3, |u, w| u.adjoint() * w);
        let s_only = |pb: &adrules_core::linalg::SvdPullback<_>| {
            pb.pullback(SvdCotangents {
                s: Some(&dev(&ones)),
                ..Default::default()
            })
        };
        let through_u = |pb: &adrules_core::linalg::SvdPullback<_>| {
            pb.pullback(SvdCotangents {
                u: Some(&dev(&ubar)),
                vh: Some(&dev(&vhbar)),
                ..Default::default()
            })
        };
        let g0 = host(&s_only(&pb0).unwrap());
        let h0 = host(&through_u(&pb0).unwrap());
        let (_, t0) = svd_frule(
            &be(),
            &dev(&a0),
            &dev(&dot),
            SvdMode::Thin,
            RuleOptions::default(),
        )
        .unwrap();
        for (k, tol) in scales(dtype) {
            let a = times_pow2(&a0, k);
            let (out, pb) = svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default())
                .unwrap_or_else(|e| panic!("{dtype} 2^{k}: {e}"));
            assert!(
                rel_scaled(&host(&out.s), -k, &host(&out0.s)) < tol,
                "{dtype} 2^{k}: s"
            );
            // d Σs / dA = U·Vh at every scale
            let g = host(&s_only(&pb).unwrap_or_else(|e| panic!("{dtype} 2^{k}: {e}")));
            let r = rel_scaled(&g, 0, &g0);
            assert!(r < tol, "{dtype} 2^{k}: Σs cotangent off by {r:e}");
            // through U and Vh: degree −1, so beyond the range below 2^-1000 or so
            let over = may_overflow(k, dtype);
            let at = format!("{dtype} 2^{k}");
            let h = through_u(&pb).map(|h| host(&h));
            check_at_scale(h, k, &h0, tol, over, &format!("{at}: U·Vh cotangent"));
            let t = svd_frule(
                &be(),
                &dev(&a),
                &dev(&dot),
                SvdMode::Thin,
                RuleOptions::default(),
            );
            let t = t.map(|(_, t)| (host(&t.s), host(&t.u)));
            let (s_dot, u_dot) = (t.clone().map(|t| t.0), t.map(|t| t.1));
            check_at_scale(s_dot, 0, &host(&t0.s), tol, over, &format!("{at}: ṡ"));
            check_at_scale(u_dot, k, &host(&t0.u), tol, over, &format!("{at}: U̇"));
        }
    }
}

#[test]
fn qr_rules_scale_from_subnormal_to_huge() {
    for dtype in ALL {
        let a0 = random(&[4, 3], dtype, 17);
        let dot = random(&[4, 3], dtype, 18);
        let qbar = random(&[4, 3], dtype, 19);
        let rbar = random(&[3, 3], dtype, 20);
        let (_, pb0) = qr_rrule(&be(), &dev(&a0), QrMode::Reduced).unwrap();
        let g0 = host(&pb0.pullback(None, Some(&dev(&rbar))).unwrap());
        let h0 = host(&pb0.pullback(Some(&dev(&qbar)), None).unwrap());
        let (_, t0) = qr_frule(&be(), &dev(&a0), &dev(&dot), QrMode::Reduced).unwrap();
        for (k, tol) in scales(dtype) {
            let a = times_pow2(&a0, k);
            let (_, pb) = qr_rrule(&be(), &dev(&a), QrMode::Reduced)
                .unwrap_or_else(|e| panic!("{dtype} 2^{k}: {e}"));
            let g = host(
                &pb.pullback(None, Some(&dev(&rbar)))
                    .unwrap_or_else(|e| panic!("{dtype} 2^{k}: {e}")),
            );
            let r = rel_scaled(&g, 0, &g0);
            assert!(r < tol, "{dtype} 2^{k}: R̄ cotangent off by {r:e}");
            let over = may_overflow(k, dtype);
            let at = format!("{dtype} 2^{k}");
            let h = pb.pullback(Some(&dev(&qbar)), None).map(|h| host(&h));
            check_at_scale(h, k, &h0, tol, over, &format!("{at}: Q̄ cotangent"));
            let t = qr_frule(&be(), &dev(&a), &dev(&dot), QrMode::Reduced);
            let t = t.map(|(_, t)| (host(&t.r), host(&t.q)));
            let (r_dot, q_dot) = (t.clone().map(|t| t.0), t.map(|t| t.1));
            check_at_scale(r_dot, 0, &host(&t0.r), tol, over, &format!("{at}: Ṙ"));
            check_at_scale(q_dot, k, &host(&t0.q), tol, over, &format!("{at}: Q̇"));
        }
    }
}

#[test]
fn eigh_rules_scale_from_subnormal_to_huge() {
    for dtype in ALL {
        let a0 = plus_adjoint(&random(&[4, 4], dtype, 27));
        let dot = plus_adjoint(&random(&[4, 4], dtype, 28));
        let lbar = random(&[4], dtype.real(), 29);
        let (_, pb0) = eigh_rrule(&be(), &dev(&a0), RuleOptions::default()).unwrap();
        let g0 = host(&pb0.pullback(Some(&dev(&lbar)), None).unwrap());
        let (_, t0) = eigh_frule(&be(), &dev(&a0), &dev(&dot), RuleOptions::default()).unwrap();
        // second order: d(∇⟨λ̄, λ⟩)/dA along Ȧ is homogeneous of degree −1
        let (_, hvp0) = pb0
            .pullback_tangent(Some(&dev(&lbar)), None, &dev(&dot), None, None)
            .unwrap();
        let hvp0 = host(&hvp0);
        for (k, tol) in scales(dtype) {
            let a = times_pow2(&a0, k);
            let (_, pb) = eigh_rrule(&be(), &dev(&a), RuleOptions::default())
                .unwrap_or_else(|e| panic!("{dtype} 2^{k}: {e}"));
            let g = host(
                &pb.pullback(Some(&dev(&lbar)), None)
                    .unwrap_or_else(|e| panic!("{dtype} 2^{k}: {e}")),
            );
            let r = rel_scaled(&g, 0, &g0);
            assert!(r < tol, "{dtype} 2^{k}: λ̄ cotangent off by {r:e}");
            let over = may_overflow(k, dtype);
            let at = format!("{dtype} 2^{k}");
            let h = pb
                .pullback_tangent(Some(&dev(&lbar)), None, &dev(&dot), None, None)
                .map(|(_, h)| host(&h));
            check_at_scale(h, k, &hvp0, tol, over, &format!("{at}: eigh HVP"));
            let t = eigh_frule(&be(), &dev(&a), &dev(&dot), RuleOptions::default());
            let t = t.map(|(_, t)| (host(&t.values), host(&t.vectors)));
            let (l_dot, v_dot) = (t.clone().map(|t| t.0), t.map(|t| t.1));
            check_at_scale(l_dot, 0, &host(&t0.values), tol, over, &format!("{at}: λ̇"));
            check_at_scale(v_dot, k, &host(&t0.vectors), tol, over, &format!("{at}: V̇"));
        }
    }
}

#[test]
fn an_overflowing_result_is_a_typed_error_naming_the_output() {
    // every entry f64::MAX/2 (finite): the largest singular value is 3·MAX/2
    let a = HostTensor::from_vec(&[3, 3], vec![f64::MAX / 2.0; 9]).unwrap();
    match svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()) {
        Err(Error::NonFinite { arg, reason }) => {
            assert_eq!(arg, "s");
            assert!(reason.contains("beyond the range of f64"), "{reason}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // the same in single precision, where 3·(f32::MAX/2) overflows only in the output dtype
    let a = HostTensor::from_vec(&[3, 3], vec![f32::MAX / 2.0; 9]).unwrap();
    assert!(non_finite(
        svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).map(|_| ())
    ));
}

/// The default degeneracy tolerance `16·√k·ε` (the rounding bound of a backward-stable SVD)
/// lets a random 256×256 f32 matrix through; the former `16·k·ε` flagged one of its gaps as
/// degenerate and refused the same gauge-invariant-in-practice cotangents.
#[test]
fn default_degeneracy_tolerance_passes_a_random_f32_matrix() {
    use adrules_core::Backend;
    use adrules_strided::Strided;
    use adrules_testing::Rng;
    let n = 256;
    let be = Strided;
    let a = be
        .from_host(Rng::seed(256).tensor(&[n, n], DType::F32))
        .unwrap();
    let mut rng = Rng::seed(1);
    let cot: Vec<_> = [vec![n, n], vec![n], vec![n, n]]
        .iter()
        .map(|d| be.from_host(rng.tensor(d, DType::F32)).unwrap())
        .collect();
    let pullback = |opts: RuleOptions| -> Result<_> {
        let (_, pb) = svd_rrule(&be, &a, SvdMode::Thin, opts)?;
        pb.pullback(SvdCotangents {
            u: Some(&cot[0]),
            s: Some(&cot[1]),
            vh: Some(&cot[2]),
            discarded: None,
        })
    };
    let a_bar = pullback(RuleOptions::default()).unwrap();
    assert!(be.all_finite(&a_bar).unwrap());
    let former = RuleOptions {
        degeneracy_rtol: Some(16.0 * n as f64 * f32::EPSILON as f64),
        ..RuleOptions::default()
    };
    assert!(matches!(
        pullback(former),
        Err(Error::GaugeIllDefined { .. })
    ));
}

/// Without the discarded term, an all-zero cotangent of the discarded values is read as
/// absent (the same `Ā`) and a nonzero one is refused.
#[test]
fn zero_discarded_cotangent_without_the_term_is_absent() {
    use adrules_core::linalg::{Truncation, svd_truncated_rrule};
    use adrules_core::rule::{self, TruncatedSvdRule};
    use adrules_core::{Backend, HostTensor};
    use adrules_strided::Strided;
    let be = Strided;
    let a: Vec<f64> = (0..12).map(|k| ((k * 7 + 3) % 11) as f64 - 5.0).collect();
    let a = be
        .from_host(HostTensor::from_vec(&[4, 3], a).unwrap())
        .unwrap();
    let opts = RuleOptions {
        discarded_term: false,
        ..RuleOptions::default()
    };
    let (_, pb) = svd_truncated_rrule(&be, &a, Truncation::rank(2), opts).unwrap();
    let rule = TruncatedSvdRule {
        truncation: Truncation::rank(2),
        options: opts,
    };
    let (_, all) = rule::rrule(&rule, &be, &[&a], &[true]).unwrap();
    let host = |dims: &[usize], v: f64| {
        let n = dims.iter().product();
        be.from_host(HostTensor::from_vec(dims, vec![v; n]).unwrap())
            .unwrap()
    };
    let (u, s, vh) = (host(&[4, 2], 0.0), host(&[2], 1.0), host(&[2, 3], 0.0));
    let absent = pb
        .pullback(SvdCotangents {
            u: Some(&u),
            s: Some(&s),
            vh: Some(&vh),
            discarded: None,
        })
        .unwrap();
    let some = |t: &adrules_strided::Tensor| Some(t.clone());
    let zero = all
        .pullback(&[some(&u), some(&s), some(&vh), Some(host(&[1], 0.0))])
        .unwrap()
        .remove(0)
        .unwrap();
    let (x, y) = (be.to_host(&absent).unwrap(), be.to_host(&zero).unwrap());
    assert_eq!(x.as_slice::<f64>().unwrap(), y.as_slice::<f64>().unwrap());
    assert!(x.as_slice::<f64>().unwrap().iter().any(|v| *v != 0.0));
    match all.pullback(&[Some(u), Some(s), Some(vh), Some(host(&[1], 0.5))]) {
        Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "discarded_bar"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
