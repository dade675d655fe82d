//! Normalization `x ↦ x/‖x‖` (`normalize*`): the primal against its definition, the
//! pushforward against finite differences, the pullback against the pushforward (adjoint
//! identity) in every dtype, the norm's cotangent, and the typed errors.

use crate::support::linalg::*;
use adrules_core::linalg::{normalize, normalize_frule, normalize_rrule};
use adrules_core::{Backend, DType, Error, HostData, HostTensor};
use adrules_testing::{FiniteDifference, Stencil, Value};

const ALL: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];
const DIMS: [usize; 3] = [3, 2, 4];

fn tol(dtype: DType) -> f64 {
    if dtype.is_double() { 1e-12 } else { 1e-5 }
}

/// `(x/‖x‖, ‖x‖)` flattened into one vector (the norm last) in double precision.
fn primal(x: &HostTensor) -> adrules_core::Result<Value> {
    let out = normalize(&be(), &dev(x))?;
    let mut v = host(&out.unit).data().to_c64_vec();
    v.push(C::new(out.norm, 0.0));
    let wide = if x.dtype().is_complex() {
        DType::C64
    } else {
        DType::F64
    };
    let n = v.len();
    Ok(Value::Tensor(HostTensor::new(
        &[n],
        HostData::from_c64_projected(&v, wide),
    )?))
}

#[test]
fn primal_is_x_over_its_norm() {
    for dtype in ALL {
        let x = random(&DIMS, dtype, 1);
        let out = normalize(&be(), &dev(&x)).unwrap();
        let n = norm(&x);
        assert!((out.norm - n).abs() <= tol(dtype) * n, "{dtype}: norm");
        let want = map1(&x, dtype, |v| v / n);
        let unit = host(&out.unit);
        assert_eq!(unit.dims(), &DIMS[..]);
        assert_eq!(unit.dtype(), dtype);
        let err = norm(&axpy(&unit, -1.0, &want));
        assert!(err <= tol(dtype), "{dtype}: x/‖x‖ off by {err:e}");
        assert!((norm(&unit) - 1.0).abs() <= tol(dtype), "{dtype}: ‖x̂‖ ≠ 1");
    }
}

#[test]
fn pushforward_matches_finite_differences() {
    for dtype in [DType::F64, DType::C64] {
        let (x, x_dot) = (random(&DIMS, dtype, 2), random(&DIMS, dtype, 3));
        let (_, unit_dot, norm_dot) = normalize_frule(&be(), &dev(&x), &dev(&x_dot)).unwrap();
        let mut got = host(&unit_dot).data().to_c64_vec();
        got.push(C::new(norm_dot, 0.0));
        let fd = FiniteDifference {
            stencil: Stencil::Central4,
            step: 1e-4,
        };
        let want = fd
            .jvp(
                |v| primal(v[0].tensor("x")?),
                &[Value::Tensor(x.clone())],
                &[Value::Tensor(x_dot.clone())],
            )
            .unwrap();
        let err = want
            .with_values(&got)
            .unwrap()
            .axpy(-1.0, &want)
            .unwrap()
            .norm();
        let size = want.norm();
        assert!(size > 1e-2, "{dtype}: a trivial direction");
        assert!(err < 1e-9 * size, "{dtype}: tangent vs fd {err:e}");
    }
}

/// `Re⟨x̂̄, (d/dt)x̂⟩ + n̄·ṅ = Re⟨x̄, ẋ⟩` for random `ẋ`, `x̂̄`, `n̄`.
#[test]
fn pullback_is_the_adjoint_of_the_pushforward() {
    for dtype in ALL {
        let x = random(&DIMS, dtype, 4);
        let (x_dot, unit_bar) = (random(&DIMS, dtype, 5), random(&DIMS, dtype, 6));
        let norm_bar = 0.7;
        let (_, pullback) = normalize_rrule(&be(), &dev(&x)).unwrap();
        let (unit_dot, norm_dot) = pullback.tangent(&dev(&x_dot)).unwrap();
        let x_bar = pullback.pullback(Some(&dev(&unit_bar)), norm_bar).unwrap();
        assert_eq!(be().dtype(&x_bar), dtype);
        let lhs = dot(&unit_bar, &host(&unit_dot)) + norm_bar * norm_dot;
        let rhs = dot(&host(&x_bar), &x_dot);
        assert!(
            (lhs - rhs).abs() <= tol(dtype) * (lhs.abs() + 1.0),
            "{dtype}: {lhs} vs {rhs}"
        );
        // The norm's cotangent alone: x̄ = n̄·x̂ (so ‖x̄‖ = |n̄|).
        let only_norm = host(&pullback.pullback(None, norm_bar).unwrap());
        let err = norm(&axpy(&only_norm, -norm_bar, &host(pullback.unit())));
        assert!(err <= tol(dtype), "{dtype}: n̄ alone");
        // x̂̄ along x̂ changes nothing (x̂ cannot move along itself).
        let along = pullback.pullback(Some(pullback.unit()), 0.0).unwrap();
        assert!(norm(&host(&along)) <= tol(dtype), "{dtype}: x̂̄ ∥ x̂");
    }
}

/// Entries whose squares overflow or underflow x's precision (f64: 2^±600, f32: 2^±70)
/// still give the norm and x̂ of the unscaled tensor: the norm is `2^k·‖x‖`, x̂ unchanged.
#[test]
fn extreme_scales_keep_norm_and_direction() {
    for dtype in ALL {
        let x = random(&DIMS, dtype, 3);
        let (n, unit) = {
            let out = normalize(&be(), &dev(&x)).unwrap();
            (out.norm, host(&out.unit))
        };
        let k = if dtype.is_double() { 600 } else { 70 };
        for k in [k, -k] {
            let s = 2f64.powi(k);
            let out = normalize(&be(), &dev(&map1(&x, dtype, |v| v * s))).unwrap();
            let rel = (out.norm / s - n).abs() / n;
            assert!(rel <= tol(dtype), "{dtype}, 2^{k}: norm off by {rel:e}");
            let err = norm(&axpy(&host(&out.unit), -1.0, &unit));
            assert!(err <= tol(dtype), "{dtype}, 2^{k}: x̂ off by {err:e}");
        }
    }
    // The smallest subnormal is a vector of norm 5e-324 and direction 1.
    let tiny = HostTensor::from_vec(&[2], vec![0.0, f64::from_bits(1)]).unwrap();
    let out = normalize(&be(), &dev(&tiny)).unwrap();
    assert_eq!(out.norm, f64::from_bits(1));
    assert_eq!(host(&out.unit).data().to_c64_vec()[1], C::new(1.0, 0.0));
}

/// Subnormal squares that sum to a normal `⟨x, x⟩` still give the norm to rounding (the
/// rescue path scales x first): f32 `[1.23e-21; 10⁴]`, f64 `[4.81e-157; 10⁵]`.
#[test]
fn subnormal_squares_keep_full_precision() {
    let x32 = HostTensor::from_vec(&[10_000], vec![1.23e-21f32; 10_000]).unwrap();
    let want = (1.23e-21f32 as f64) * 100.0;
    let got = normalize(&be(), &dev(&x32)).unwrap().norm;
    assert!(
        (got - want).abs() <= 2e-5 * want,
        "f32: {got:e} vs {want:e}"
    );
    let x64 = HostTensor::from_vec(&[100_000], vec![4.81e-157f64; 100_000]).unwrap();
    let want = 4.81e-157 * 100_000f64.sqrt();
    let got = normalize(&be(), &dev(&x64)).unwrap().norm;
    assert!(
        (got - want).abs() <= 1e-13 * want,
        "f64: {got:e} vs {want:e}"
    );
}

/// A norm so small that `1/‖x‖` leaves the dtype: the pullback and tangent are exact where
/// representable (no `0·∞` NaN) and `Error::NonFinite` beyond the range.
#[test]
fn tiny_norms_give_exact_derivatives_or_non_finite_errors() {
    let vals = |t: &adrules_strided::Tensor| -> Vec<f64> {
        host(t).data().to_c64_vec().iter().map(|z| z.re).collect()
    };
    let t64 = |v: Vec<f64>| dev(&HostTensor::from_vec(&[v.len()], v).unwrap());
    let t32 = |v: Vec<f32>| dev(&HostTensor::from_vec(&[v.len()], v).unwrap());
    // x = [5e-324]: x̂ = [1]; x̂̄ ∥ x̂ gives x̄ = 0, ẋ ∥ x̂ gives (d/dt)x̂ = 0, ṅ = 1
    let (_, pb) = normalize_rrule(&be(), &t64(vec![f64::from_bits(1)])).unwrap();
    assert_eq!(
        vals(&pb.pullback(Some(&t64(vec![1.0])), 0.0).unwrap()),
        [0.0]
    );
    let (unit_dot, norm_dot) = pb.tangent(&t64(vec![1.0])).unwrap();
    assert_eq!((vals(&unit_dot), norm_dot), (vec![0.0], 1.0));
    assert_eq!(vals(&pb.pullback(None, 2.0).unwrap()), [2.0]);
    // x = [1e-300, 0]: the orthogonal direction is scaled by 1/‖x‖ = 1e300; along x̂ the
    // exact zero comes out as rounding of x̂ (ε) times that scale, as at any scale
    let (_, pb) = normalize_rrule(&be(), &t64(vec![1e-300, 0.0])).unwrap();
    let along = vals(&pb.pullback(Some(&t64(vec![1.0, 0.0])), 0.0).unwrap());
    assert!(
        along.iter().all(|g| g.abs() <= 4.0 * f64::EPSILON * 1e300),
        "{along:?}"
    );
    let g = vals(&pb.pullback(Some(&t64(vec![0.0, 1.0])), 0.0).unwrap());
    assert!(g[0] == 0.0 && (g[1] / 1e300 - 1.0).abs() < 1e-15, "{g:?}");
    // beyond the range: 1/5e-324 and, in f32, 1/1e-40 overflow
    let (_, pb) = normalize_rrule(&be(), &t64(vec![f64::from_bits(1), 0.0])).unwrap();
    assert!(matches!(
        pb.tangent(&t64(vec![0.0, 1.0])),
        Err(Error::NonFinite { arg, .. }) if arg == "unit_dot"
    ));
    let (_, pb) = normalize_rrule(&be(), &t32(vec![1e-40, 0.0])).unwrap();
    let along = vals(&pb.pullback(Some(&t32(vec![1.0, 0.0])), 0.0).unwrap());
    let scale = 1.0 / (1e-40f32 as f64);
    let bound = 4.0 * f32::EPSILON as f64 * scale;
    assert!(along.iter().all(|g| g.abs() <= bound), "{along:?}");
    assert!(matches!(
        pb.pullback(Some(&t32(vec![0.0, 1.0])), 0.0),
        Err(Error::NonFinite { arg, .. }) if arg == "x_bar"
    ));
}

#[test]
fn bad_input_gets_typed_errors() {
    let zero = HostTensor::from_vec(&[3], vec![0.0f64; 3]).unwrap();
    let nan = HostTensor::from_vec(&[2], vec![1.0f64, f64::NAN]).unwrap();
    let inf = HostTensor::from_vec(&[2], vec![f64::INFINITY, 1.0]).unwrap();
    let empty = HostTensor::from_vec(&[0], Vec::<f64>::new()).unwrap();
    // ‖x‖ = 1.5·√2·10³⁰⁸ exceeds f64's range although every entry is finite
    let beyond = HostTensor::from_vec(&[2], vec![1.5e308f64, 1.5e308]).unwrap();
    for x in [&zero, &nan, &inf, &empty, &beyond] {
        match normalize(&be(), &dev(x)) {
            Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "x"),
            other => panic!("{x:?}: expected InvalidArgument(x), got {other:?}"),
        }
    }
    let x = dev(&random(&[4], DType::F64, 7));
    let (_, pullback) = normalize_rrule(&be(), &x).unwrap();
    let short = dev(&random(&[3], DType::F64, 8));
    assert!(matches!(
        pullback.tangent(&short),
        Err(Error::ShapeMismatch { arg, .. }) if arg == "x_dot"
    ));
    assert!(matches!(
        pullback.pullback(Some(&short), 0.0),
        Err(Error::ShapeMismatch { arg, .. }) if arg == "unit_bar"
    ));
    let complex = dev(&random(&[4], DType::C64, 9));
    assert!(matches!(
        pullback.pullback(Some(&complex), 0.0),
        Err(Error::DTypeMismatch { arg, .. }) if arg == "unit_bar"
    ));
    assert!(matches!(
        pullback.pullback(None, f64::NAN),
        Err(Error::InvalidArgument { arg, .. }) if arg == "norm_bar"
    ));
    // a NaN or ∞ cotangent or tangent is refused, as the decompositions refuse theirs
    let with_nan = HostTensor::from_vec(&[4], vec![0.5f64, -1.0, f64::NAN, 2.0]).unwrap();
    let with_inf = HostTensor::from_vec(&[4], vec![f64::NEG_INFINITY, 1.0, 0.0, 3.0]).unwrap();
    for bad in [dev(&with_nan), dev(&with_inf)] {
        assert!(matches!(
            pullback.pullback(Some(&bad), 0.0),
            Err(Error::InvalidArgument { arg, .. }) if arg == "unit_bar"
        ));
        assert!(matches!(
            pullback.tangent(&bad),
            Err(Error::InvalidArgument { arg, .. }) if arg == "x_dot"
        ));
    }
}
