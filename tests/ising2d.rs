//! Acceptance tests of the main example (`examples/ising2d.rs`): the free energy, internal
//! energy and specific heat computed through the network and implicit rules against an
//! independent dense reference — the explicit 2^W × 2^W transfer matrix, its largest
//! eigenvalue from faer's self-adjoint eigensolver, derivatives by 8th-order finite
//! differences — and against Onsager's exact solution where the strip is wide enough.
#![cfg(feature = "strided")]

#[path = "../examples/common/ising.rs"]
mod ising;
#[path = "../examples/common/onsager.rs"]
mod onsager;

use adrules::Error;
use adrules::strided::Strided;
use faer::Mat;
use ising::{Strip, Timings};

/// `ln λ_max` of the explicit transfer matrix
/// `T[s, s'] = exp(K_v Σᵢ σᵢσ'ᵢ + (K_h/2) Σᵢ (σᵢσᵢ₊₁ + σ'ᵢσ'ᵢ₊₁))` (periodic), K_h = K_v = β.
fn ln_lambda(width: usize, beta: f64) -> f64 {
    let n = 1usize << width;
    let sigma = |s: usize, i: usize| if (s >> i) & 1 == 0 { 1.0 } else { -1.0 };
    let horizontal = |s: usize| -> f64 {
        (0..width)
            .map(|i| sigma(s, i) * sigma(s, (i + 1) % width))
            .sum()
    };
    let t = Mat::from_fn(n, n, |s, sp| {
        let vertical: f64 = (0..width).map(|i| sigma(s, i) * sigma(sp, i)).sum();
        (beta * vertical + 0.5 * beta * (horizontal(s) + horizontal(sp))).exp()
    });
    let eig = t
        .self_adjoint_eigen(faer::Side::Lower)
        .expect("symmetric eigendecomposition");
    let lmax = (0..n).map(|i| eig.S()[i]).fold(f64::NEG_INFINITY, f64::max);
    lmax.ln()
}

/// `(f, u, c)` of the dense reference: `f = −ln λ/(βW)`, `u = −(1/W) d ln λ/dβ`,
/// `c = (β²/W) d² ln λ/dβ²`, derivatives by 8th-order central differences.
fn dense_reference(width: usize, temperature: f64) -> (f64, f64, f64) {
    let beta = 1.0 / temperature;
    let w = width as f64;
    let h = 1e-3;
    let l = |k: i32| ln_lambda(width, beta + k as f64 * h);
    let d1 = [4.0 / 5.0, -1.0 / 5.0, 4.0 / 105.0, -1.0 / 280.0];
    let d2 = [8.0 / 5.0, -1.0 / 5.0, 8.0 / 315.0, -1.0 / 560.0];
    let l0 = l(0);
    let (mut first, mut second) = (0.0, -205.0 / 72.0 * l0);
    for k in 1..=4 {
        let (p, m) = (l(k), l(-k));
        first += d1[k as usize - 1] * (p - m);
        second += d2[k as usize - 1] * (p + m);
    }
    let (first, second) = (first / h, second / (h * h));
    (-l0 / (beta * w), -first / w, beta * beta * second / w)
}

#[test]
fn free_energy_energy_and_specific_heat_match_the_dense_reference() {
    let width = 6;
    let strip = Strip::new::<f64>(Strided, width).unwrap();
    let mut start = strip.start::<f64>().unwrap();
    let mut timings = Timings::default();
    // From high to low temperature as in the example; 2.269 is (almost) T_c.
    for &t in &[4.0, 3.0, 2.5, 2.269, 2.0, 1.5, 1.0] {
        let (p, v) = strip.point::<f64>(t, &start, 1e-13, &mut timings).unwrap();
        start = v;
        let (f_ref, u_ref, c_ref) = dense_reference(width, t);
        assert!(
            (p.f - f_ref).abs() <= 1e-10,
            "T = {t}: f = {} vs {f_ref}",
            p.f
        );
        assert!(
            (p.u - u_ref).abs() <= 1e-8,
            "T = {t}: u = {} vs {u_ref}",
            p.u
        );
        assert!(
            (p.c - c_ref).abs() <= 1e-5 * c_ref.abs().max(1.0),
            "T = {t}: c = {} vs {c_ref}",
            p.c
        );
        assert!(
            (p.g_h + p.e_h).abs() <= 1e-8,
            "T = {t}: g_h = {} but e_h = {}",
            p.g_h,
            p.e_h
        );
        assert!(
            (p.e_v_expectation - p.e_v).abs() <= 1e-8,
            "T = {t}: e_v by expectation {} vs reverse mode {}",
            p.e_v_expectation,
            p.e_v
        );
        assert!(
            p.vjp_residual <= 1e-10 && p.jvp_residual <= 1e-10,
            "T = {t}: solves left residuals {} and {}",
            p.vjp_residual,
            p.jvp_residual
        );
    }
}

#[test]
fn onsager_energy_at_low_temperature_on_a_wide_strip() {
    let strip = Strip::new::<f64>(Strided, 10).unwrap();
    let start = strip.start::<f64>().unwrap();
    let (p, _) = strip
        .point::<f64>(1.0, &start, 1e-13, &mut Timings::default())
        .unwrap();
    let exact = onsager::internal_energy(1.0);
    assert!(
        (p.u - exact).abs() <= 1e-7,
        "u = {} vs Onsager {exact}",
        p.u
    );
}

#[test]
fn onsager_specific_heat_is_the_derivative_of_the_energy() {
    // The closed-form c against −β² du/dβ of the closed-form u (central differences).
    for t in [1.0, 1.8, 2.2, 2.4, 3.5] {
        let b = 1.0 / t;
        let h = 1e-5;
        let du = (onsager::internal_energy(b + h) - onsager::internal_energy(b - h)) / (2.0 * h);
        let c = onsager::specific_heat(b);
        assert!(
            (c + b * b * du).abs() < 1e-6 * c.abs().max(1.0),
            "T = {t}: {c} vs {}",
            -b * b * du
        );
    }
    // u(T_c) = −√2 (approached from either side: (2 tanh² 2β − 1)·K(κ) → 0 at κ = 1).
    for side in [1.0 - 1e-6, 1.0, 1.0 + 1e-6] {
        let u = onsager::internal_energy(1.0 / (onsager::critical_temperature() * side));
        assert!((u + 2f64.sqrt()).abs() < 1e-4, "u(T_c·{side}) = {u}");
    }
}

#[test]
fn bad_parameters_are_typed_errors() {
    assert!(matches!(
        Strip::new::<f64>(Strided, 2),
        Err(Error::InvalidArgument { .. })
    ));
    let strip = Strip::new::<f64>(Strided, 4).unwrap();
    let start = strip.start::<f64>().unwrap();
    for t in [0.0, -1.0, f64::NAN] {
        assert!(matches!(
            strip.point::<f64>(t, &start, 1e-12, &mut Timings::default()),
            Err(Error::InvalidArgument { .. })
        ));
    }
    for tol in [0.0, -1.0, f64::NAN, 1e300] {
        assert!(matches!(
            strip.point::<f64>(2.0, &start, tol, &mut Timings::default()),
            Err(Error::InvalidArgument { ref arg, .. }) if arg == "tol"
        ));
    }
    // exp(8β) overflows f32 at T = 0.05: a typed error at the first iteration, not 200000
    // iterations on NaN.
    let strip = Strip::new::<f32>(Strided, 4).unwrap();
    let start = strip.start::<f32>().unwrap();
    assert!(matches!(
        strip.point::<f32>(0.05, &start, 1e-6, &mut Timings::default()),
        Err(Error::InvalidArgument { ref arg, .. }) if arg == "temperature"
    ));
}

#[test]
fn single_precision_runs_and_agrees_loosely() {
    let strip = Strip::new::<f32>(Strided, 6).unwrap();
    let start = strip.start::<f32>().unwrap();
    let (p, _) = strip
        .point::<f32>(3.0, &start, 1e-6, &mut Timings::default())
        .unwrap();
    let (f_ref, u_ref, _) = dense_reference(6, 3.0);
    assert!((p.f - f_ref).abs() < 1e-5, "f = {} vs {f_ref}", p.f);
    assert!((p.u - u_ref).abs() < 1e-3, "u = {} vs {u_ref}", p.u);
}

/// The same sweep on `be` and on the strided backend: every engine runs the same shared rules,
/// so f, u, g_h and c agree to rounding (width 4: dfdx tensors have rank ≤ 6).
#[cfg(any(feature = "candle", feature = "burn", feature = "dfdx"))]
fn agrees_with_strided<B>(be: B)
where
    B: adrules::Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    let width = 4;
    let (ours, strided) = (
        Strip::new::<f64>(be, width).unwrap(),
        Strip::new::<f64>(Strided, width).unwrap(),
    );
    let (start, start_s) = (
        ours.start::<f64>().unwrap(),
        strided.start::<f64>().unwrap(),
    );
    for t in [1.5, 2.269, 3.0] {
        let (p, _) = ours
            .point::<f64>(t, &start, 1e-13, &mut Timings::default())
            .unwrap();
        let (q, _) = strided
            .point::<f64>(t, &start_s, 1e-13, &mut Timings::default())
            .unwrap();
        for (name, a, b) in [
            ("f", p.f, q.f),
            ("u", p.u, q.u),
            ("g_h", p.g_h, q.g_h),
            ("c", p.c, q.c),
        ] {
            assert!(
                (a - b).abs() <= 1e-10 * b.abs().max(1.0),
                "T = {t}: {name} = {a} vs strided {b}"
            );
        }
    }
}

#[cfg(feature = "candle")]
#[test]
fn candle_agrees_with_strided() {
    agrees_with_strided(adrules::candle::CandleBackend::cpu());
}

#[cfg(feature = "burn")]
#[test]
fn burn_agrees_with_strided() {
    agrees_with_strided(
        adrules::burn::BurnBackend::<adrules::burn::burn_flex::Flex>::new(Default::default()),
    );
}

#[cfg(feature = "dfdx")]
#[test]
fn dfdx_agrees_with_strided() {
    agrees_with_strided(adrules::dfdx::DfdxBackend::default());
}
