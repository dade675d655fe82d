//! The one non-finite policy of implicit functions and the residual check, on every solver:
//! a non-finite cotangent `ȳ` is refused naming `y_bar` by the dense solvers (LU, Cholesky)
//! and the Krylov ones (GMRES, CG) alike, on the host and on a backend's device (before the
//! policy the dense solvers returned an all-NaN `x̄` as `Ok` and the Krylov ones named the
//! "right-hand side"); non-finite inputs and solutions are refused in the forward pass; with
//! a conditions tolerance, a solver stopped early is `NotConverged` instead of a gradient.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::implicit::*;
use adrules_core::implicit::device::{self, AdjointMaps};
use adrules_core::implicit::{
    FnMaps, ImplicitFunction, Method, Point, SolverOptions, Structure, check_conditions_norm,
};
use adrules_core::{Backend, Error, HostTensor, Result};
use adrules_strided::{Strided, Tensor};

type P<'a> = Point<'a, (), ()>;

/// `c = d ⊙ y − x` (`A = diag(d)`, positive definite; `B = −I`), so `y = x / d` and
/// `x̄ = ȳ / d`.
const D: [f64; 3] = [2.0, 4.0, 8.0];

fn solve(x: &[HostTensor], _: &()) -> Result<(HostTensor, ())> {
    let y = data::<f64>(&x[0])
        .iter()
        .zip(D)
        .map(|(x, d)| x / d)
        .collect();
    Ok((t64(&[3], y), ()))
}

fn maps(p: &P) -> Result<FnMaps<f64>> {
    let (x, y) = (data::<f64>(&p.x[0]), data::<f64>(p.y));
    let c = (0..3).map(|i| D[i] * y[i] - x[i]).collect();
    Ok(FnMaps::hermitian(
        3,
        3,
        |v: &[f64], o: &mut [f64]| (0..3).for_each(|i| o[i] = D[i] * v[i]),
        |v: &[f64], o: &mut [f64]| (0..3).for_each(|i| o[i] = -v[i]),
        |u: &[f64], o: &mut [f64]| (0..3).for_each(|i| o[i] = -u[i]),
    )
    .with_structure(Structure::PositiveDefinite)
    .with_conditions(c))
}

fn x() -> Vec<HostTensor> {
    vec![t64(&[3], vec![1.0, -2.0, 4.0])]
}

const METHODS: [Method; 5] = [
    Method::Auto,
    Method::Lu,
    Method::Cholesky,
    Method::Gmres,
    Method::Cg,
];

fn refused(r: Result<impl std::fmt::Debug>, name: &str, ctx: &str) {
    match r {
        Err(Error::InvalidArgument { arg, reason }) if arg == name => {
            assert!(reason.contains("finite"), "{ctx}: {reason}")
        }
        other => panic!("{ctx}: expected InvalidArgument naming {name:?}, got {other:?}"),
    }
}

#[test]
fn non_finite_cotangents_are_refused_naming_y_bar_by_every_host_solver() {
    for method in METHODS {
        let f = ImplicitFunction::new(solve, maps).with_linear_solver(SolverOptions::from(method));
        let (lin, ()) = f.linearize(&x(), &()).unwrap();
        // a finite ȳ: x̄ = ȳ / d
        let good = t64(&[3], vec![2.0, 4.0, -8.0]);
        let g = lin.vjp(&good).unwrap();
        assert_close(&cv(&g[0]), &c(&[1.0, 1.0, -1.0]), 1e-9, 1e-9, "x̄");
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let ctx = format!("{method:?}, ȳ with {bad}");
            let y_bar = t64(&[3], vec![1.0, bad, 0.5]);
            refused(lin.vjp(&y_bar), "y_bar", &ctx);
            refused(lin.hvp(&y_bar, &x()), "y_bar", &ctx);
            let block = lin.vjp_many(&[good.clone(), y_bar], None).map(|c| c.dx);
            refused(block, "cotangents[1]", &ctx);
        }
    }
}

/// The device maps of `c = d ⊙ y − x` on the strided backend (through the host: this is a
/// test of the policy, not of transfers).
struct Diagonal;

impl AdjointMaps<Strided> for Diagonal {
    fn num_unknowns(&self) -> usize {
        3
    }
    fn structure(&self) -> Structure {
        Structure::PositiveDefinite
    }
    fn apply_a_adjoint(&self, u: &Tensor) -> Result<Tensor> {
        let u = data::<f64>(&Strided.to_host(u)?);
        Strided.from_host(t64(&[3], (0..3).map(|i| D[i] * u[i]).collect()))
    }
    fn apply_b_adjoint(&self, u: &Tensor) -> Result<Vec<Tensor>> {
        let u = data::<f64>(&Strided.to_host(u)?);
        Ok(vec![
            Strided.from_host(t64(&[3], u.iter().map(|v| -v).collect()))?,
        ])
    }
}

#[test]
fn non_finite_cotangents_are_refused_naming_y_bar_on_the_device() {
    let be = Strided;
    let up = |v: Vec<f64>| be.from_host(t64(&[3], v)).unwrap();
    let x = up(vec![1.0, -2.0, 4.0]);
    let y = up(vec![0.5, -0.5, 0.5]);
    let good = up(vec![2.0, 4.0, -8.0]);
    for method in METHODS {
        let options = SolverOptions::from(method);
        let run = |y_bar: &Tensor| {
            device::engine_pullback::<_, f64, _, _>(
                &be,
                &[&x],
                &y,
                y_bar,
                &options,
                || {
                    maps(&Point::<(), ()> {
                        x: &[be.to_host(&x)?],
                        y: &be.to_host(&y)?,
                        byproduct: &(),
                        args: &(),
                    })
                },
                || Ok(Diagonal),
            )
        };
        let g = run(&good).unwrap();
        let got = cv(&be.to_host(&g[0]).unwrap());
        assert_close(&got, &c(&[1.0, 1.0, -1.0]), 1e-9, 1e-9, "x̄");
        for bad in [f64::NAN, f64::INFINITY] {
            let ctx = format!("engine_pullback, {method:?}, ȳ with {bad}");
            refused(run(&up(vec![1.0, bad, 0.5])), "y_bar", &ctx);
        }
    }
    // the matrix-free pullback itself
    for method in [Method::Gmres, Method::Cg] {
        let bad = up(vec![f64::NAN, 0.0, 0.0]);
        let r = device::pullback(&be, &Diagonal, &bad, &SolverOptions::from(method));
        refused(
            r.map(|(g, _)| g.len()),
            "y_bar",
            &format!("pullback, {method:?}"),
        );
    }
}

#[test]
fn non_finite_inputs_and_solutions_are_refused_in_the_forward_pass() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = {
        let calls = Arc::clone(&calls);
        move |x: &[HostTensor], a: &()| {
            calls.fetch_add(1, Ordering::Relaxed);
            solve(x, a)
        }
    };
    let f = ImplicitFunction::new(counted, maps);
    for bad in [f64::NAN, f64::INFINITY] {
        let x = vec![t64(&[3], vec![1.0, bad, 4.0])];
        refused(f.solve(&x, &()), "x[0]", "solve");
        refused(f.vjp(&x, &()).map(|r| r.0), "x[0]", "vjp");
        refused(
            f.jvp(&x, &(), std::slice::from_ref(&x)).map(|r| r.0),
            "x[0]",
            "jvp",
        );
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        0,
        "the solver ran on a NaN input"
    );
    let nan_solver = |_: &[HostTensor], _: &()| Ok((t64(&[3], vec![0.0, f64::NAN, 0.0]), ()));
    let f = ImplicitFunction::new(nan_solver, maps);
    refused(f.vjp(&x(), &()).map(|r| r.0), "y (solver output)", "NaN y");
}

/// `y = √x` by `steps` Newton steps from `y₀ = x`, with conditions `c = y ⊙ y − x`.
fn newton(x: &[HostTensor], steps: &usize) -> Result<(HostTensor, ())> {
    let y = data::<f64>(&x[0])
        .iter()
        .map(|&x| (0..*steps).fold(x, |y, _| 0.5 * (y + x / y)))
        .collect();
    Ok((t64(x[0].dims(), y), ()))
}

fn sqrt_maps(p: &Point<(), usize>) -> Result<FnMaps<f64>> {
    let (x, y) = (data::<f64>(&p.x[0]), data::<f64>(p.y));
    let m = y.len();
    let c = (0..m).map(|i| y[i] * y[i] - x[i]).collect();
    let y: Arc<[f64]> = y.into();
    Ok(FnMaps::hermitian(
        m,
        m,
        move |v: &[f64], o: &mut [f64]| (0..m).for_each(|i| o[i] = 2.0 * y[i] * v[i]),
        |v: &[f64], o: &mut [f64]| o.iter_mut().zip(v).for_each(|(o, v)| *o = -v),
        |u: &[f64], o: &mut [f64]| o.iter_mut().zip(u).for_each(|(o, u)| *o = -u),
    )
    .with_conditions(c))
}

#[test]
fn a_conditions_tolerance_refuses_a_solver_stopped_early() {
    let x = vec![t64(&[2], vec![4.0, 9.0])];
    let f = ImplicitFunction::new(newton, sqrt_maps).with_conditions_tolerance(1e-10);
    // two Newton steps (4 → 2.5 → 2.05, 9 → 5 → 3.4): ‖c‖ = ‖(2.05² − 4, 3.4² − 9)‖ ≈ 2.568
    for method in [Method::Lu, Method::Gmres] {
        let f = ImplicitFunction::new(newton, sqrt_maps)
            .with_linear_solver(SolverOptions::from(method))
            .with_conditions_tolerance(1e-10);
        match f.vjp(&x, &2) {
            Err(Error::NotConverged {
                arg,
                residual,
                tolerance,
                ..
            }) => {
                assert_eq!(arg, "conditions c(x, y)");
                let want = (0.2025f64.powi(2) + 2.56f64.powi(2)).sqrt();
                assert!((residual - want).abs() < 1e-12, "{residual} vs {want}");
                assert_eq!(tolerance, 1e-10);
            }
            other => panic!("{method:?}: {:?}", other.map(|r| r.0)),
        }
    }
    // without the option the early stop is only reported
    let plain = ImplicitFunction::new(newton, sqrt_maps);
    let (lin, ()) = plain.linearize(&x, &2).unwrap();
    assert!(lin.conditions_norm().unwrap() > 0.2);
    // converged: the gradient x̄ = ȳ / (2√x)
    let (_, (), lin) = f.vjp(&x, &60).unwrap();
    assert!(lin.conditions_norm().unwrap() <= 1e-10);
    let g = lin.vjp(&t64(&[2], vec![1.0, 1.0])).unwrap();
    assert_close(&cv(&g[0]), &c(&[0.25, 1.0 / 6.0]), 1e-12, 1e-12, "x̄");
}

#[test]
fn conditions_tolerance_needs_values_and_a_valid_tolerance() {
    let x = vec![t64(&[2], vec![4.0, 9.0])];
    let bare = |p: &Point<(), usize>| -> Result<FnMaps<f64>> {
        let y: Arc<[f64]> = data::<f64>(p.y).into();
        let m = y.len();
        Ok(FnMaps::hermitian(
            m,
            m,
            move |v: &[f64], o: &mut [f64]| (0..m).for_each(|i| o[i] = 2.0 * y[i] * v[i]),
            |v: &[f64], o: &mut [f64]| o.iter_mut().zip(v).for_each(|(o, v)| *o = -v),
            |u: &[f64], o: &mut [f64]| o.iter_mut().zip(u).for_each(|(o, u)| *o = -u),
        ))
    };
    let f = ImplicitFunction::new(newton, bare).with_conditions_tolerance(1e-8);
    match f.vjp(&x, &60) {
        Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "conditions_tolerance"),
        other => panic!("{:?}", other.map(|r| r.0)),
    }
    for bad in [-1.0, f64::NAN] {
        let f = ImplicitFunction::new(newton, sqrt_maps).with_conditions_tolerance(bad);
        match f.vjp(&x, &60) {
            Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "conditions_tolerance"),
            other => panic!("{bad}: {:?}", other.map(|r| r.0)),
        }
    }
    // the shared check, and its device form on the strided backend
    assert!(check_conditions_norm(1e-9, 1e-8).is_ok());
    assert!(matches!(
        check_conditions_norm(f64::NAN, 1.0),
        Err(Error::NotConverged { .. })
    ));
    let be = Strided;
    let c = be.from_host(t64(&[2], vec![3e-2, 4e-2])).unwrap();
    assert!(device::check_conditions(&be, &c, 0.06).is_ok());
    match device::check_conditions(&be, &c, 0.04) {
        Err(Error::NotConverged { residual, .. }) => assert!((residual - 0.05).abs() < 1e-15),
        other => panic!("{other:?}"),
    }
    let nan = be.from_host(t64(&[2], vec![1.0, f64::NAN])).unwrap();
    refused(
        device::check_finite(&be, &nan, "x[0]"),
        "x[0]",
        "check_finite",
    );
    assert!(device::check_finite(&be, &c, "x[0]").is_ok());
}
