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
}
