//! Acceptance tests of the infinite-lattice example ([`adrules_examples::ctmrg`] and its model
//! [`adrules_examples::ctm`]): the CTMRG free energy, internal energy, specific heat and
//! magnetization against Onsager's and Yang's exact solutions; the implicit derivatives
//! against finite differences of independent CTM solves and against reverse mode through
//! the unrolled iteration; the step's pushforward and pullback against each other and
//! against finite differences of the step; and the command line (arguments checked before a
//! file is touched, outputs replaced only by a successful run, failures typed).

use std::ffi::OsString;
use std::path::Path;

use crate::support::outputs::listing;
use adrules::Error;
use adrules::strided::Strided;
use adrules_examples::ctm::{Ctm, CtmOptions, initial_environment};
use adrules_examples::ctmrg::Args;
use adrules_examples::onsager;
use clap::{CommandFactory, Parser};

fn ctm(chi: usize) -> Ctm<Strided> {
    Ctm::new(
        Strided,
        CtmOptions {
            chi,
            ..CtmOptions::default()
        },
    )
    .unwrap()
}

/// At T = 2.5 with χ = 8 (CI's size): the truncation error measured there is 3.3e-10 in f,
/// 2.0e-8 in u and 5.2e-7 in c; the bounds leave a factor ≥ 3.
#[test]
fn small_chi_at_t_2_5_is_close_to_onsager() {
    let p = ctm(8).point(2.5).unwrap();
    let beta = 0.4;
    assert!((p.f - onsager::free_energy(beta)).abs() < 1e-9, "{p:?}");
    assert!((p.u - onsager::internal_energy(beta)).abs() < 1e-7, "{p:?}");
    assert!((p.c - onsager::specific_heat(beta)).abs() < 2e-6, "{p:?}");
    assert!(p.m.abs() < 1e-12, "no magnetization above T_c: {p:?}");
    assert!(p.conditions_norm < 1e-10, "{p:?}");
}

/// The tolerances at the default χ = 32 at the three reference temperatures (the measured
/// errors are at most 3.6e-15, 2.3e-14, 2.0e-10, 1.2e-14).
#[test]
fn default_chi_meets_the_tolerances_at_the_reference_temperatures() {
    let ctm = ctm(32);
    for t in adrules_examples::ctmrg::CHECKS {
        let p = ctm.point(t).unwrap();
        let e = adrules_examples::ctmrg::errors(&p);
        for (k, (e, tol)) in e
            .iter()
            .zip(adrules_examples::ctmrg::TOLERANCES)
            .enumerate()
        {
            assert!(
                e.abs() <= tol,
                "T = {t}: error {e:e} of {} above {tol:e}",
                ["f", "u", "c", "M"][k]
            );
        }
    }
}

/// The low-temperature end of the default sweep (`--t-min 1.5`, 21 points: T = 1.5, 1.6,
/// 1.7) at the default χ = 32 and options. There some columns of the enlarged corner's
/// basis have no weight on the rows `(0, ·)` that the phase reference reads (`rᴴw` of order
/// ε); before they fell back to the largest entry's sign, the clustered eigh refused them
/// (`GaugeIllDefined`) and the sweep failed at T = 1.5 and 1.6. Every point converges, with
/// the errors within the tolerances of the reference temperatures.
#[test]
fn the_low_temperature_end_of_the_default_sweep_converges() {
    // the binary's defaults, as its sweep turns them into options and temperatures
    let args = Args::parse_from(["ctmrg"]);
    let options = CtmOptions {
        chi: args.chi,
        tol: args.tol,
        max_iter: args.max_iter,
        cluster: args.cluster,
        solve_tol: args.solve_tol,
        cutoff: args.cutoff,
    };
    let grid = adrules_examples::cli::temperature_grid(args.t_min, args.t_max, args.points);
    assert_eq!(grid.len(), 21);
    let ctm = Ctm::new(Strided, options).unwrap();
    for &t in &grid[..3] {
        let p = ctm.point(t).unwrap_or_else(|e| panic!("T = {t}: {e}"));
        let e = adrules_examples::ctmrg::errors(&p);
        for (k, (e, tol)) in e
            .iter()
            .zip(adrules_examples::ctmrg::TOLERANCES)
            .enumerate()
        {
            assert!(
                e.abs() <= tol,
                "T = {t}: error {e:e} of {} above {tol:e}",
                ["f", "u", "c", "M"][k]
            );
        }
    }
}

/// Below T_c the up state is selected: M against Yang.
#[test]
fn magnetization_below_t_c_matches_yang() {
    let p = ctm(8).point(2.0).unwrap();
    let m = onsager::magnetization(0.5);
    assert!(m > 0.9, "{m}");
    assert!((p.m - m).abs() < 1e-9, "{} vs {m}", p.m);
}

/// `ln κ(β)` of a converged environment (no derivative involved).
fn ln_kappa(ctm: &Ctm<Strided>, beta: f64) -> f64 {
    -beta * ctm.point(1.0 / beta).unwrap().f
}

/// u by reverse mode through the implicit fixed point against a 6th-order central
/// difference of `βf = −ln κ` from independent CTM solves (same χ, same truncation), and c
/// by the implicit pushforward against a difference of the expectation value u_E.
#[test]
fn implicit_derivatives_match_finite_differences_of_the_ctm() {
    let ctm = ctm(8);
    let beta = 0.4;
    let h = 1e-3;
    let w = [3.0 / 4.0, -3.0 / 20.0, 1.0 / 60.0];
    let d = |f: &dyn Fn(f64) -> f64| -> f64 {
        (1..=3)
            .map(|k| w[k - 1] * (f(beta + k as f64 * h) - f(beta - k as f64 * h)))
            .sum::<f64>()
            / h
    };
    let p = ctm.point(1.0 / beta).unwrap();
    let u_fd = -d(&|b| ln_kappa(&ctm, b));
    assert!((p.u - u_fd).abs() < 1e-9, "u = {} vs FD {u_fd}", p.u);
    let du_fd = d(&|b| ctm.point(1.0 / b).unwrap().u_expectation);
    let c_fd = -beta * beta * du_fd;
    assert!((p.c - c_fd).abs() < 1e-7, "c = {} vs FD {c_fd}", p.c);
    // u_E (an expectation value) and u (the total derivative) agree at the fixed point
    assert!((p.u - p.u_expectation).abs() < 1e-12, "{p:?}");
}

/// Reverse mode through the unrolled iteration converges to the implicit gradient.
#[test]
fn unrolled_gradient_converges_to_the_implicit_one() {
    let ctm = ctm(8);
    let u = ctm.point(2.5).unwrap().u;
    let u_unrolled = ctm.unrolled_energy(2.5, 150).unwrap();
    let u_implicit = ctm.implicit_energy(2.5, 150).unwrap();
    assert!((u_unrolled - u).abs() < 1e-10, "{u_unrolled} vs {u}");
    assert!((u_implicit - u).abs() < 1e-10, "{u_implicit} vs {u}");
    // after few iterations the two differ: the test can fail
    let early = ctm.unrolled_energy(2.5, 5).unwrap();
    assert!((early - u).abs() > 1e-6, "{early} vs {u}");
}

/// A deterministic pseudo-random vector in (−1, 1).
fn noise(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The step's pushforward and pullback (network, cluster and normalization rules
/// composed): the adjoint identity ⟨w, J·v⟩ = ⟨Jᵀ·w, v⟩ for `(dC, dT, dβ)`, and the
/// pushforward against a central difference of the step, at converged environments with
/// simple spectra (χ = 6) and with multiplets (χ = 16: clusters of two).
#[test]
fn step_rules_are_adjoint_and_match_finite_differences() {
    step_rules_at(6, false);
    step_rules_at(16, true);
}

fn step_rules_at(chi: usize, multiplets: bool) {
    let ctm = ctm(chi);
    let beta = 0.4;
    let (c, t, _) = ctm.fixed_point(beta).unwrap();
    let step = ctm.linearize_step(beta, &c, &t).unwrap();
    let sizes = step.cluster_sizes();
    assert_eq!(
        sizes.iter().any(|&g| g > 1),
        multiplets,
        "cluster sizes {sizes:?}"
    );
    let m = step.m();
    let (v, w) = (noise(m, 1), noise(m, 2));
    let dbeta = 0.7;
    let jv = step.jvp(Some(&v), dbeta).unwrap();
    let (jtw, beta_bar) = step.vjp(&w).unwrap();
    let lhs = dot(&w, &jv);
    let rhs = dot(&jtw, &v) + beta_bar * dbeta;
    assert!(
        (lhs - rhs).abs() < 1e-10 * lhs.abs().max(1.0),
        "{lhs} vs {rhs}"
    );
    // finite differences of the step itself (same truncation and gauge on both sides),
    // along a direction that keeps C and T symmetric (the step's domain)
    let mut v = v;
    for i in 0..chi {
        for j in 0..chi {
            let k = chi * chi;
            let (a, b) = (i * chi + j, j * chi + i);
            let m = 0.5 * (v[a] + v[b]);
            (v[a], v[b]) = (m, m);
            for s in 0..2 {
                let (a, b) = (k + (i * 2 + s) * chi + j, k + (j * 2 + s) * chi + i);
                let m = 0.5 * (v[a] + v[b]);
                (v[a], v[b]) = (m, m);
            }
        }
    }
    let jv = step.jvp(Some(&v), dbeta).unwrap();
    // Central differences converge as O(ε²); inside a multiplet the step's curvature is
    // large (measured: errors 3.8, 3.7e-2, 3.7e-4 at ε = 1e-6, 1e-7, 1e-8 for χ = 16, the
    // quadratic convergence of a correct JVP), so that case takes the smaller step.
    let eps = if multiplets { 1e-8 } else { 1e-6 };
    let moved = |s: f64| {
        let y: Vec<f64> = c.iter().chain(&t).zip(&v).map(|(y, v)| y + s * v).collect();
        let (cs, ts) = y.split_at(chi * chi);
        let st = ctm.linearize_step(beta + s * dbeta, cs, ts).unwrap();
        st.values()
    };
    let (plus, minus) = (moved(eps), moved(-eps));
    let fd: Vec<f64> = plus
        .iter()
        .zip(&minus)
        .map(|(p, q)| (p - q) / (2.0 * eps))
        .collect();
    let err = fd
        .iter()
        .zip(&jv)
        .fold(0.0f64, |e, (a, b)| e.max((a - b).abs()));
    let scale = jv.iter().fold(0.0f64, |e, a| e.max(a.abs()));
    assert!(
        err < 2e-6 * scale.max(1.0),
        "χ = {chi}: max |FD − JVP| = {err:e} (scale {scale:e})"
    );
}

/// The gauge fixing makes the step a function of the gauge orbit: flipping the sign of
/// an environment index of the input leaves the output unchanged.
#[test]
fn the_step_is_invariant_under_sign_gauge_changes_of_its_input() {
    let ctm = ctm(6);
    let beta = 0.5;
    let (c, t, _) = ctm.fixed_point(beta).unwrap();
    let chi = 6;
    let s: Vec<f64> = (0..chi)
        .map(|i| if i % 2 == 1 { -1.0 } else { 1.0 })
        .collect();
    let c2: Vec<f64> = (0..chi * chi)
        .map(|k| c[k] * s[k / chi] * s[k % chi])
        .collect();
    let t2: Vec<f64> = (0..chi * 2 * chi)
        .map(|k| t[k] * s[k / (2 * chi)] * s[k % chi])
        .collect();
    assert!(
        c2.iter()
            .zip(&c)
            .chain(t2.iter().zip(&t))
            .any(|(a, b)| (a - b).abs() > 1e-3)
    );
    let a = ctm.linearize_step(beta, &c, &t).unwrap().values();
    let b = ctm.linearize_step(beta, &c2, &t2).unwrap().values();
    let diff = a
        .iter()
        .zip(&b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 1e-12, "{diff:e}");
}

/// The multiplet-aware gauge fixing makes the step a function of the gauge orbit under
/// every orthogonal change of the environment index that keeps index 0 (the leading one)
/// in place, rotations inside multiplets included: at χ = 16 (clusters of two), a random
/// orthogonal `O` on indices 1..χ applied to both legs of `C` and `T` leaves the output
/// unchanged, though it changes most input elements.
#[test]
fn the_step_is_invariant_under_orthogonal_gauge_changes_of_its_input() {
    let chi = 16;
    let ctm = ctm(chi);
    let beta = 0.4;
    let (c, t, _) = ctm.fixed_point(beta).unwrap();
    let step = ctm.linearize_step(beta, &c, &t).unwrap();
    assert!(step.cluster_sizes().iter().any(|&g| g > 1));
    // O = diag(1, Q), Q from Gram–Schmidt of a pseudo-random matrix
    let k = chi - 1;
    let raw = noise(k * k, 7);
    let mut q: Vec<Vec<f64>> = Vec::new();
    for i in 0..k {
        let mut v: Vec<f64> = raw[i * k..(i + 1) * k].to_vec();
        for b in &q {
            let p = dot(&v, b);
            v.iter_mut().zip(b).for_each(|(x, y)| *x -= p * y);
        }
        let n = dot(&v, &v).sqrt();
        q.push(v.into_iter().map(|x| x / n).collect());
    }
    let o = |a: usize, b: usize| -> f64 {
        match (a, b) {
            (0, 0) => 1.0,
            (0, _) | (_, 0) => 0.0,
            _ => q[a - 1][b - 1],
        }
    };
    // C' = Oᵀ C O, T'[x, s, y] = Σ O[a, x] T[a, s, b] O[b, y]
    let mut c2 = vec![0.0; chi * chi];
    let mut t2 = vec![0.0; chi * 2 * chi];
    for x in 0..chi {
        for y in 0..chi {
            for a in 0..chi {
                for b in 0..chi {
                    let w = o(a, x) * o(b, y);
                    c2[x * chi + y] += w * c[a * chi + b];
                    for s in 0..2 {
                        t2[(x * 2 + s) * chi + y] += w * t[(a * 2 + s) * chi + b];
                    }
                }
            }
        }
    }
    let moved = c2
        .iter()
        .zip(&c)
        .chain(t2.iter().zip(&t))
        .filter(|(a, b)| (*a - *b).abs() > 1e-6)
        .count();
    assert!(
        moved > c.len(),
        "the gauge change moved only {moved} elements"
    );
    let a = step.values();
    let b = ctm.linearize_step(beta, &c2, &t2).unwrap().values();
    let diff = a
        .iter()
        .zip(&b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff < 1e-9, "{diff:e}");
}

/// The site tensor's β-derivatives against central differences, and its symmetry.
#[test]
fn site_tensor_derivatives_match_finite_differences() {
    use adrules_examples::ctm::site_tensor;
    let (beta, h) = (0.43, 1e-5);
    for magnetic in [false, true] {
        let a0 = site_tensor(beta, 0, magnetic);
        let a1 = site_tensor(beta, 1, magnetic);
        let a2 = site_tensor(beta, 2, magnetic);
        let (p, m) = (
            site_tensor(beta + h, 0, magnetic),
            site_tensor(beta - h, 0, magnetic),
        );
        for k in 0..16 {
            let d1 = (p[k] - m[k]) / (2.0 * h);
            let d2 = (p[k] - 2.0 * a0[k] + m[k]) / (h * h);
            assert!((d1 - a1[k]).abs() < 1e-8, "{k}: {d1} vs {}", a1[k]);
            assert!((d2 - a2[k]).abs() < 1e-4, "{k}: {d2} vs {}", a2[k]);
        }
        // invariant under every permutation of the legs: check a transposition and a cycle
        let top = a0.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        for k in 0..16usize {
            let (i, j, l, n) = (k >> 3 & 1, k >> 2 & 1, k >> 1 & 1, k & 1);
            let swapped = ((j * 2 + i) * 2 + l) * 2 + n;
            let cycled = ((j * 2 + l) * 2 + n) * 2 + i;
            assert!((a0[k] - a0[swapped]).abs() <= 1e-14 * top);
            assert!((a0[k] - a0[cycled]).abs() <= 1e-14 * top);
        }
    }
    // one site with free legs: Σ a = Σ_s (Σ_i W[s,i])⁴ = 2·(2 cosh β)², as Σ_i W[s,i] =
    // √(2 cosh β) for both spins
    let a = site_tensor(beta, 0, false);
    assert!((a.iter().sum::<f64>() - 8.0 * beta.cosh().powi(2)).abs() < 1e-12);
    // the bond weight: W² = Q = [[e^β, e^−β], [e^−β, e^β]], read off the χ = 2 start with
    // all spins up: C[i, j] = W[0,i]·W[0,j]
    let (c, t) = initial_environment(beta, true);
    assert_eq!((c.len(), t.len()), (4, 8));
    let w0 = [c[0].sqrt(), c[1] / c[0].sqrt()];
    assert!((w0[0] * w0[0] + w0[1] * w0[1] - beta.exp()).abs() < 1e-12);
}

#[test]
fn typed_errors_for_bad_options_and_temperatures() {
    for (opts, arg) in [
        (
            CtmOptions {
                chi: 1,
                ..CtmOptions::default()
            },
            "chi",
        ),
        (
            CtmOptions {
                tol: 0.0,
                ..CtmOptions::default()
            },
            "tol",
        ),
        (
            CtmOptions {
                max_iter: 0,
                ..CtmOptions::default()
            },
            "max_iter",
        ),
        (
            CtmOptions {
                cluster: f64::NAN,
                ..CtmOptions::default()
            },
            "cluster",
        ),
        (
            CtmOptions {
                cutoff: 1.0,
                ..CtmOptions::default()
            },
            "cutoff",
        ),
    ] {
        match Ctm::new(Strided, opts) {
            Err(Error::InvalidArgument { arg: a, .. }) => assert_eq!(a, arg),
            Err(e) => panic!("{arg}: {e}"),
            Ok(_) => panic!("{arg} accepted"),
        }
    }
    let ctm = ctm(4);
    for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            ctm.point(t),
            Err(Error::InvalidArgument { ref arg, .. }) if arg == "temperature"
        ));
    }
    assert!(ctm.unrolled_energy(2.5, 0).is_err());
    // one step from χ = 2 reaches χ = 4 < 8: an implicit gradient there has no full-size
    // fixed point, and says so
    match adrules_examples::ctm::Ctm::new(
        Strided,
        CtmOptions {
            chi: 8,
            ..CtmOptions::default()
        },
    )
    .unwrap()
    .implicit_energy(2.5, 1)
    {
        Err(Error::InvalidArgument { arg, reason }) => {
            assert_eq!(arg, "iterations");
            assert!(reason.contains("still growing"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // too few iterations allowed: a typed refusal, not a number
    let tight = Ctm::new(
        Strided,
        CtmOptions {
            chi: 8,
            max_iter: 3,
            ..CtmOptions::default()
        },
    )
    .unwrap();
    assert!(matches!(tight.point(2.5), Err(Error::NotConverged { .. })));
}

// ---------------------------------------------------------------- the command line

fn scratch(name: &str) -> crate::support::outputs::Scratch {
    crate::support::outputs::scratch("ctmrg", name)
}

fn earlier_outputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    crate::support::outputs::earlier_outputs(dir, "ctmrg")
}

/// The example's arguments, as a user types them, writing into `dir` unless `extra` names an
/// output.
fn args_in(dir: &Path, extra: &[&str]) -> Args {
    let mut argv: Vec<OsString> = vec!["ctmrg".into()];
    for (option, file) in [("--csv", "ctmrg.csv"), ("--png", "ctmrg.png")] {
        if !extra.contains(&option) {
            argv.extend([option.into(), dir.join(file).into()]);
        }
    }
    argv.extend(extra.iter().map(OsString::from));
    Args::try_parse_from(argv).unwrap()
}

#[test]
fn bad_arguments_are_refused_before_any_file_is_touched() {
    let guard = scratch("bad-arguments");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    let cases: &[(&[&str], &[&str])] = &[
        (&["--chi", "1"], &["--chi", "2..=256"]),
        (&["--chi", "1000"], &["--chi"]),
        (&["--tol", "0"], &["--tol"]),
        (&["--tol", "0.5"], &["--tol"]),
        (&["--max-iter", "0"], &["--max-iter"]),
        (&["--cluster=-1"], &["--cluster"]),
        (&["--cutoff", "1"], &["--cutoff"]),
        (&["--t-min", "0"], &["--t-min 0", "0 < t-min ≤ t-max"]),
        (
            &["--t-min", "0.01", "--t-max", "1"],
            &["--t-min 0.01", "overflow"],
        ),
        (&["--t-min", "3", "--t-max", "2"], &["--t-max 2"]),
        (&["--t-max", "inf"], &["--t-max inf"]),
        (&["--points", "0"], &["--points 0"]),
        (&["--points", "1"], &["--points 1", "t-min = t-max"]),
        (&["--points", "5000"], &["--points 5000", "1000"]),
        (&["--memory", "0"], &["--memory"]),
        (&["--memory-t", "nan"], &["--memory-t"]),
        (&["--png", "chart.jpg"], &["--png chart.jpg", ".png"]),
        (&["--csv", "table.png"], &["--csv table.png", ".csv"]),
        (
            &["--chi", "256"],
            &["--chi 256 --points 21", "h", "--force"],
        ),
        (
            &["--memory", "100000"],
            &["--memory [100000]", "GB", "--force"],
        ),
        (
            &["--csv", "/nonexistent-dir/t.csv"],
            &["--csv", "does not exist"],
        ),
    ];
    crate::support::outputs::assert_refused(
        |extra| adrules_examples::ctmrg::run(&args_in(&dir, extra)),
        &dir,
        &before,
        cases,
    );
    let mut args = args_in(&dir, &[]);
    // the chart's own path as the table's: refused by its extension, the chart untouched
    args.csv = dir.join("./ctmrg.png");
    let msg = adrules_examples::ctmrg::run(&args).unwrap_err();
    assert!(
        msg.contains("--csv") && msg.contains("use a .csv path"),
        "{msg}"
    );
    assert_eq!(listing(&dir), before);
}

#[test]
fn a_successful_run_replaces_both_outputs() {
    let guard = scratch("success");
    let dir = guard.0.clone();
    earlier_outputs(&dir);
    // χ = 8 with 150 iterations allowed: T = 2.65 and 3.0 converge (≈ 110 iterations)
    let args = args_in(
        &dir,
        &[
            "--chi",
            "8",
            "--t-min",
            "2.65",
            "--t-max",
            "3",
            "--points",
            "2",
            "--max-iter",
            "150",
            "--memory",
            "10,40",
        ],
    );
    adrules_examples::ctmrg::run(&args).unwrap();
    let files = listing(&dir);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["ctmrg.csv", "ctmrg.png"],
        "temporary files were left"
    );
    let csv = String::from_utf8(files[0].1.clone()).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("T,f,u,u_expectation,c,M,"), "{csv}");
    // T = 3.0: f within 1e-9 of Onsager, read back from the file
    let row: Vec<f64> = lines[2].split(',').map(|x| x.parse().unwrap()).collect();
    assert_eq!(row[0], 3.0);
    assert!(
        (row[1] - onsager::free_energy(1.0 / 3.0)).abs() < 1e-9,
        "{}",
        lines[2]
    );
    crate::support::outputs::assert_chart(&files[1].1);
}

#[test]
fn a_run_with_failed_temperatures_keeps_the_outputs_and_writes_the_rest_beside_them() {
    let guard = scratch("some-failed");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    // near T_c (2.3) χ = 8 needs more than 150 iterations: that temperature fails
    let args = args_in(
        &dir,
        &[
            "--chi",
            "8",
            "--t-min",
            "2.3",
            "--t-max",
            "3",
            "--points",
            "3",
            "--max-iter",
            "150",
        ],
    );
    let msg = adrules_examples::ctmrg::run(&args).unwrap_err();
    assert!(
        msg.contains("1 of 3 temperatures failed (T = 2.3")
            && msg.contains("ctmrg.partial.csv")
            && msg.contains("unchanged"),
        "{msg}"
    );
    let files = listing(&dir);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "ctmrg.csv",
            "ctmrg.partial.csv",
            "ctmrg.partial.png",
            "ctmrg.png"
        ]
    );
    // the user's files are as they were
    assert_eq!(files[0], before[0]);
    assert_eq!(files[3], before[1]);
    let csv = String::from_utf8(files[1].1.clone()).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    let cols = lines[0].split(',').count();
    for l in &lines[1..] {
        assert_eq!(l.split(',').count(), cols, "{l}");
    }
    // the failed row: no measured numbers, the exact ones present
    let failed: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(failed[0], "2.3");
    assert!(failed[1..6].iter().all(|x| x.is_empty()), "{}", lines[1]);
    let f_exact: f64 = failed[6].parse().unwrap();
    assert_eq!(f_exact, onsager::free_energy(1.0 / 2.3));
    assert!(failed[10..].iter().all(|x| x.is_empty()), "{}", lines[1]);
    crate::support::outputs::assert_chart(&files[2].1);
}

#[test]
fn a_run_in_which_every_temperature_fails_writes_nothing() {
    let guard = scratch("all-failed");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    let args = args_in(
        &dir,
        &[
            "--max-iter",
            "3",
            "--points",
            "3",
            "--t-min",
            "2.2",
            "--t-max",
            "2.4",
        ],
    );
    let msg = adrules_examples::ctmrg::run(&args).unwrap_err();
    assert!(
        msg.contains("3 of 3 temperatures failed") && msg.contains("no output written"),
        "{msg}"
    );
    assert_eq!(listing(&dir), before, "a failed run changed the directory");
}

#[test]
fn a_backend_missing_from_the_build_names_its_feature() {
    let guard = scratch("backend");
    let dir = guard.0.clone();
    let before = earlier_outputs(&dir);
    crate::support::outputs::assert_missing_backends_refused(
        |extra| adrules_examples::ctmrg::run(&args_in(&dir, extra)),
        &dir,
        &before,
        "ctmrg",
    );
}

/// Every engine built in gives the strided backend's numbers (the same rules on its
/// tensors).
#[test]
fn every_built_backend_agrees_with_strided() {
    let reference = ctm(6).point(2.5).unwrap();
    let check = |p: adrules_examples::ctm::CtmPoint, name: &str| {
        for (a, b, what) in [
            (p.f, reference.f, "f"),
            (p.u, reference.u, "u"),
            (p.c, reference.c, "c"),
        ] {
            assert!((a - b).abs() < 1e-9, "{name} {what}: {a} vs {b}");
        }
    };
    let opts = CtmOptions {
        chi: 6,
        ..CtmOptions::default()
    };
    #[cfg(feature = "candle")]
    check(
        Ctm::new(adrules::candle::CandleBackend::cpu(), opts)
            .unwrap()
            .point(2.5)
            .unwrap(),
        "candle",
    );
    #[cfg(feature = "burn")]
    check(
        Ctm::new(
            adrules::burn::BurnBackend::<adrules::burn::burn_flex::Flex>::new(Default::default()),
            opts,
        )
        .unwrap()
        .point(2.5)
        .unwrap(),
        "burn",
    );
    #[cfg(feature = "dfdx")]
    check(
        Ctm::new(adrules::dfdx::DfdxBackend::default(), opts)
            .unwrap()
            .point(2.5)
            .unwrap(),
        "dfdx",
    );
    check(
        Ctm::new(Strided, opts).unwrap().point(2.5).unwrap(),
        "strided",
    );
}

#[test]
fn help_describes_the_example() {
    let long = Args::command().render_long_help().to_string();
    for part in [
        "2D Ising model",
        "infinite square lattice",
        "CTMRG",
        "implicit",
        "Onsager",
        "--memory",
        "--backend",
    ] {
        assert!(long.contains(part), "help lacks {part:?}:\n{long}");
    }
}

#[test]
fn large_runs_are_estimated_and_refused_above_the_limits_unless_forced() {
    use adrules_examples::ctmrg::{MAX_BYTES, MAX_SECONDS, check, estimate};
    let guard = scratch("estimate");
    let dir = guard.0.clone();
    let default = estimate(&args_in(&dir, &[]));
    assert!(default.seconds < MAX_SECONDS && default.bytes < MAX_BYTES);
    // χ³ per step: doubling χ costs 8×
    let a = estimate(&args_in(&dir, &["--chi", "16"]));
    let b = estimate(&args_in(&dir, &["--chi", "32"]));
    assert!((b.seconds / a.seconds - 8.0).abs() < 1e-9);
    let big = args_in(
        &dir,
        &[
            "--chi", "256", "--points", "2", "--t-min", "2", "--t-max", "3",
        ],
    );
    assert!(estimate(&big).seconds > MAX_SECONDS);
    assert!(check(&big).unwrap_err().contains("--force"));
    let mut forced = big;
    forced.force = true;
    assert!(check(&forced).is_ok());
}
