//! Acceptance tests of the main example ([`adrules_examples::ising2d`] and its model
//! [`adrules_examples::ising`]): the free energy, internal energy and specific heat computed
//! through the network and implicit rules against an independent dense reference — the
//! explicit 2^W × 2^W transfer matrix, its largest eigenvalue from faer's self-adjoint
//! eigensolver, derivatives by 8th-order finite differences — and against Onsager's exact
//! solution where the strip is wide enough; and the command line: every argument checked
//! before a file is touched, outputs replaced only by a successful run, the help text.

use std::ffi::OsString;
use std::path::Path;

use crate::support::outputs::listing;
use adrules::Error;
use adrules::strided::Strided;
use adrules_examples::ising2d::Args;
use adrules_examples::{ising, onsager};
use clap::{CommandFactory, Parser};
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
        // the second way (network and implicit HVPs) against the dense reference and the
        // pushforward value
        assert!(
            (p.c_hvp - c_ref).abs() <= 1e-5 * c_ref.abs().max(1.0),
            "T = {t}: c by HVP = {} vs {c_ref}",
            p.c_hvp
        );
        if (t - 2.269f64).abs() > 0.1 {
            assert!(
                (p.c_hvp - p.c).abs() <= 1e-8 * p.c.abs(),
                "T = {t}: c by HVP {} vs by pushforward {}",
                p.c_hvp,
                p.c
            );
        }
        assert!(
            p.hvp_residual <= 1e-10,
            "T = {t}: second-order residual {}",
            p.hvp_residual
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
    // iterations on NaN; more range is a remedy.
    let strip = Strip::new::<f32>(Strided, 4).unwrap();
    let start = strip.start::<f32>().unwrap();
    let e = strip
        .point::<f32>(0.05, &start, 1e-6, &mut Timings::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "temperature"),
        "{e}"
    );
    assert!(e.to_string().contains("use f64"), "{e}");
    // In f64, ‖T v‖² ≥ λ² ≥ exp(4W/T) = e^710 overflows at W = 3, T = 0.0169: f64 is in use
    // already, so the only remedy offered is a higher temperature.
    let strip = Strip::new::<f64>(Strided, 3).unwrap();
    let start = strip.start::<f64>().unwrap();
    let e = strip
        .point::<f64>(0.0169, &start, 1e-13, &mut Timings::default())
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("overflow f64") && msg.contains("raise the temperature"),
        "{msg}"
    );
    assert!(!msg.contains("use f64"), "{msg}");
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
            ("c_hvp", p.c_hvp, q.c_hvp),
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

// ---------------------------------------------------------------- the command line

/// The example's arguments, as a user types them, writing into `dir` unless `extra` names an
/// output.
fn args_in(dir: &Path, extra: &[&str]) -> Args {
    let mut argv: Vec<OsString> = vec!["ising2d".into()];
    for (option, file) in [("--csv", "ising2d.csv"), ("--png", "ising2d.png")] {
        if !extra.contains(&option) {
            argv.extend([option.into(), dir.join(file).into()]);
        }
    }
    argv.extend(extra.iter().map(OsString::from));
    Args::try_parse_from(argv).unwrap()
}

/// A fresh scratch directory of this file's tests.
fn scratch(name: &str) -> crate::support::outputs::Scratch {
    crate::support::outputs::scratch("ising2d", name)
}

/// Puts a user's earlier `ising2d.csv` and `ising2d.png` into `dir`.
fn earlier_outputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    crate::support::outputs::earlier_outputs(dir, "ising2d")
}

#[test]
fn bad_arguments_are_refused_before_any_file_is_touched() {
    let guard = scratch("bad-arguments");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    // (arguments, what the message must name)
    let cases: &[(&[&str], &[&str])] = &[
        (&["--width", "2"], &["--width 2", "between 3 and 20"]),
        (
            &["--width", "21"],
            &["--width 21", "between 3 and 20", "2^W"],
        ),
        (&["--tol", "0"], &["--tol", "between 2.2e-16", "1e-3"]),
        (&["--tol", "1e300"], &["--tol 1e300"]),
        (&["--tol", "NaN"], &["--tol NaN"]),
        (
            &["--tol", "1e-9", "--precision", "f32"],
            &["--tol 1e-9", "machine epsilon of f32", "--precision f64"],
        ),
        (&["--t-min", "0"], &["--t-min 0", "0 < t-min ≤ t-max"]),
        (&["--t-min", "3", "--t-max", "2"], &["--t-max 2"]),
        (&["--t-max", "inf"], &["--t-max inf"]),
        (&["--points", "0"], &["--points 0"]),
        (&["--points", "1"], &["--points 1", "t-min = t-max"]),
        (&["--points", "20000"], &["--points 20000", "10000"]),
        (
            &["--t-min", "0.3", "--precision", "f32"],
            &["--t-min 0.3", "too cold for f32", "--precision f64"],
        ),
        (&["--png", "chart.jpg"], &["--png chart.jpg", ".png"]),
        (&["--csv", "ising2d.png"], &["--csv ising2d.png", ".csv"]),
        (
            &["--width", "20"],
            &["--width 20 --points 40", "GB", "--force"],
        ),
        (
            &["--width", "16", "--points", "40"],
            &["--width 16 --points 40", "10 min", "--force"],
        ),
        (
            &["--csv", "/nonexistent-dir/t.csv"],
            &["--csv", "does not exist"],
        ),
    ];
    crate::support::outputs::assert_refused(
        |extra| adrules_examples::ising2d::run(&args_in(&dir, extra)),
        &dir,
        &before,
        cases,
    );
    // f64 is already in use: the cold-temperature message offers only a warmer t-min
    let msg = adrules_examples::ising2d::run(&args_in(&dir, &["--t-min", "0.01"])).unwrap_err();
    assert!(
        msg.contains("too cold for f64") && msg.contains("raise --t-min"),
        "{msg}"
    );
    assert!(
        !msg.contains("f64 or") && !msg.contains("--precision"),
        "{msg}"
    );
    assert_eq!(listing(&dir), before);
}

#[test]
fn output_paths_are_checked() {
    let guard = scratch("paths");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    let mut args = args_in(&dir, &[]);
    args.csv = dir.clone();
    let msg = adrules_examples::ising2d::run(&args).unwrap_err();
    assert!(
        msg.contains("--csv") && msg.contains("is a directory"),
        "{msg}"
    );
    let mut args = args_in(&dir, &[]);
    // the chart's own path as the table's: refused by its extension, the chart untouched
    args.csv = dir.join("./ising2d.png");
    let msg = adrules_examples::ising2d::run(&args).unwrap_err();
    assert!(
        msg.contains("--csv") && msg.contains("use a .csv path"),
        "{msg}"
    );
    let mut args = args_in(&dir, &[]);
    args.png = dir.join("missing").join("ising2d.png");
    let msg = adrules_examples::ising2d::run(&args).unwrap_err();
    assert!(
        msg.contains("--png") && msg.contains("does not exist"),
        "{msg}"
    );
    assert_eq!(listing(&dir), before);
}

#[test]
fn a_failing_sweep_keeps_the_earlier_outputs_and_leaves_no_temporary_file() {
    let guard = scratch("failing-sweep");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    // Past the arguments' check (4W/T = 710.1 ≤ ln(f64::MAX) + 1), but λ² ≥ e^710 still
    // overflows the power iteration's ‖T v‖²: the sweep fails after the outputs were reserved.
    let args = args_in(
        &dir,
        &[
            "--width", "3", "--t-min", "0.0169", "--t-max", "0.0169", "--points", "1",
        ],
    );
    let msg = adrules_examples::ising2d::run(&args).unwrap_err();
    assert!(
        msg.contains("overflow f64") && msg.contains("raise the temperature"),
        "{msg}"
    );
    assert!(!msg.contains("use f64"), "{msg}");
    assert_eq!(listing(&dir), before, "a failed run changed the directory");
}

#[test]
fn a_successful_run_replaces_both_outputs() {
    let guard = scratch("success");
    let dir = guard.0.clone();
    earlier_outputs(&dir);
    let args = args_in(
        &dir,
        &[
            "--width", "3", "--t-min", "2", "--t-max", "3", "--points", "3",
        ],
    );
    adrules_examples::ising2d::run(&args).unwrap();
    let files = listing(&dir);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["ising2d.csv", "ising2d.png"],
        "temporary files were left"
    );
    let csv = String::from_utf8(files[0].1.clone()).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(
        lines[0].starts_with("T,f,u,e_h,e_v,g_h,c,c_hvp,u_exact,c_exact,"),
        "{csv}"
    );
    let temps: Vec<f64> = lines[1..]
        .iter()
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(temps, [2.0, 2.5, 3.0]);
    crate::support::outputs::assert_chart(&files[1].1);
}

#[test]
fn a_backend_missing_from_the_build_names_its_feature() {
    let guard = scratch("backend");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    crate::support::outputs::assert_missing_backends_refused(
        |extra| adrules_examples::ising2d::run(&args_in(&dir, extra)),
        &dir,
        &before,
        "ising2d",
    );
    let e = Args::try_parse_from(["ising2d", "--backend", "tensorflow"]).unwrap_err();
    assert!(e.to_string().contains("strided"), "{e}");
    if cfg!(feature = "dfdx") {
        let msg =
            adrules_examples::ising2d::run(&args_in(&dir, &["--backend", "dfdx", "--width", "5"]))
                .unwrap_err();
        assert!(msg.contains("between 3 and 4"), "{msg}");
    }
}

#[test]
fn help_describes_the_example() {
    let long = Args::command().render_long_help().to_string();
    for part in [
        "2D Ising model",
        "Onsager",
        "free energy",
        "specific heat",
        "per site",
        "T_c",
        "CSV",
        "[default: ising2d.csv]",
        "[default: ising2d.png]",
        "[default: 10]",
        "[default: 40]",
        "[default: f64]",
        "[default: strided]",
        "1e-13 in f64",
        "--features candle",
        "replaced only when the whole run succeeds",
    ] {
        assert!(long.contains(part), "--help lacks {part:?}:\n{long}");
    }
    let short = Args::command().render_help().to_string();
    assert!(short.contains("2D Ising model"), "{short}");
    for help in [&long, &short] {
        assert!(
            !help.contains(env!("CARGO_PKG_DESCRIPTION")),
            "the help is the crate's description"
        );
    }
}

/// An interrupt (SIGINT, as Ctrl-C sends) during the sweep: the program exits with status
/// 130 and leaves the directory as it was, without temporary files.
#[cfg(unix)]
#[test]
fn an_interrupted_run_leaves_the_directory_as_it_was() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let guard = scratch("interrupted");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    // 3000 temperatures take minutes: the interrupt arrives during the sweep
    let mut child = Command::new(env!("CARGO_BIN_EXE_ising2d"))
        .args(["--points", "3000"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "the run ended early");
    // the shell's builtin `kill` (a `kill` binary is not on every machine)
    let killed = Command::new("sh")
        .args(["-c", &format!("kill -INT {}", child.id())])
        .status()
        .unwrap();
    assert!(killed.success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the interrupted run did not stop within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(listing(&dir), before, "the interrupt left files behind");
}

#[test]
fn wide_strips_are_estimated_and_refused_above_the_limits_unless_forced() {
    use adrules_examples::ising2d::{MAX_BYTES, MAX_SECONDS, check, estimate};
    // time and memory grow with W·2^W: each step of 2 in W costs more than 4×
    for w in 3..=18 {
        let (a, b) = (estimate(w, 1), estimate(w + 2, 1));
        assert!(b.seconds > 4.0 * a.seconds && b.bytes > a.bytes, "W = {w}");
    }
    assert!(
        estimate(10, 40).seconds < 60.0,
        "the default run must be accepted"
    );
    assert!(estimate(20, 1).bytes > MAX_BYTES);
    assert!(estimate(16, 40).seconds > MAX_SECONDS);
    let guard = scratch("estimate");
    let one = ["--points", "1", "--t-min", "2.3", "--t-max", "2.3"];
    let mut extra = vec!["--width", "16"];
    extra.extend(one);
    assert!(
        check(&args_in(&guard.0, &extra)).is_ok(),
        "one temperature at W = 16"
    );
    let mut extra = vec!["--width", "20"];
    extra.extend(one);
    let msg = check(&args_in(&guard.0, &extra)).unwrap_err();
    assert!(msg.contains("--force") && msg.contains("GB"), "{msg}");
    extra.push("--force");
    assert!(check(&args_in(&guard.0, &extra)).is_ok(), "--force");
}
