//! The non-finite policy and the residual check of [`adrules_core::implicit`] through both
//! candle entry points, [`implicit`] (the core's `ImplicitFunction`, host solver) and
//! [`Implicit`] (candle closures on the device), on every solver: a non-finite cotangent
//! `ȳ` is refused in `backward()` naming `y_bar` (dense and Krylov alike), a non-finite input
//! is refused in the forward pass by both, and a solution that does not satisfy the
//! conditions is `NotConverged` with a conditions tolerance. An empty input gets an empty
//! gradient.
//!
//! The function: `c(x, y) = d ⊙ y − x` (`A = diag(d)`, positive definite), `y = x / d`,
//! `x̄ = ȳ / d`.

use adrules_candle::candle_core::{DType, Device, Tensor, Var};
use adrules_candle::{CandleConditions, Implicit, adrules_error, implicit};
use adrules_core::implicit::{ImplicitFunction, Method, SolverOptions, Structure};
use adrules_core::{Error, HostTensor, Result};

const D: [f64; 3] = [2.0, 4.0, 8.0];
const METHODS: [Method; 4] = [Method::Lu, Method::Cholesky, Method::Gmres, Method::Cg];

fn vec1(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), v.len(), &Device::Cpu).unwrap()
}

fn d() -> Tensor {
    vec1(&D)
}

/// `Implicit` for `c = d ⊙ y − x`; `solved: false` returns `y = x` (a solver stopped early).
fn device_op(method: Method, solved: bool) -> Implicit {
    Implicit::new(
        move |x| {
            if solved {
                x[0].div(&d())
            } else {
                Ok(x[0].clone())
            }
        },
        |x, y| y.mul(&d())? - &x[0],
    )
    .with_structure(Structure::PositiveDefinite)
    .with_linear_solver(SolverOptions::from(method))
}

fn host_solve(x: &[HostTensor], _: &()) -> Result<(HostTensor, ())> {
    let y = x[0]
        .as_slice::<f64>()?
        .iter()
        .zip(D)
        .map(|(x, d)| x / d)
        .collect();
    Ok((HostTensor::from_vec(&[3], y)?, ()))
}

type Cond = fn(&[Tensor], &Tensor, &(), &()) -> candle_core::Result<Tensor>;

fn host_conditions() -> CandleConditions<Cond> {
    let c: Cond = |x, y, _, _| y.mul(&d())? - &x[0];
    CandleConditions::new(Device::Cpu, c).with_structure(Structure::PositiveDefinite)
}

/// The typed error inside a candle error.
fn typed(e: &candle_core::Error) -> Error {
    adrules_error(e)
        .unwrap_or_else(|| panic!("not a typed adrules error: {e}"))
        .clone()
}

fn expect_invalid(e: Error, name: &str, ctx: &str) {
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == name),
        "{ctx}: expected InvalidArgument naming {name:?}, got {e}"
    );
}

/// `x̄` of `L = Σ w ⊙ y(x)`, or the typed error of candle's backward.
fn gradient(x: &Var, y: &Tensor, w: &[f64]) -> std::result::Result<Vec<f64>, Error> {
    let loss = y.mul(&vec1(w)).unwrap().sum_all().unwrap();
    match loss.backward() {
        Ok(g) => Ok(g.get(x.as_tensor()).unwrap().to_vec1().unwrap()),
        Err(e) => Err(typed(&e)),
    }
}

#[test]
fn non_finite_cotangents_are_refused_in_backward_by_every_solver() {
    for method in METHODS {
        let func = ImplicitFunction::<f64, _, _, _, _>::new(host_solve, host_conditions())
            .with_linear_solver(SolverOptions::from(method));
        for entry in ["Implicit", "implicit"] {
            let ctx = format!("{entry}, {method:?}");
            let x = Var::from_tensor(&vec1(&[1.0, -2.0, 4.0])).unwrap();
            let y = || match entry {
                "Implicit" => device_op(method, true).apply(&[x.as_tensor()]).unwrap(),
                _ => implicit(&func, &[x.as_tensor()], &()).unwrap().0,
            };
            let g = gradient(&x, &y(), &[2.0, 4.0, -8.0]).unwrap();
            let want = [1.0, 1.0, -1.0];
            assert!(
                g.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-9),
                "{ctx}: {g:?}"
            );
            for bad in [f64::NAN, f64::INFINITY] {
                let e = gradient(&x, &y(), &[1.0, bad, 0.5]).unwrap_err();
                expect_invalid(e, "y_bar", &format!("{ctx}, ȳ with {bad}"));
            }
        }
    }
}

#[test]
fn non_finite_inputs_are_refused_in_the_forward_pass_by_both_entry_points() {
    let func = ImplicitFunction::<f64, _, _, _, _>::new(host_solve, host_conditions());
    for bad in [f64::NAN, f64::NEG_INFINITY] {
        let x = Var::from_tensor(&vec1(&[1.0, bad, 4.0])).unwrap();
        let e = device_op(Method::Lu, true)
            .apply(&[x.as_tensor()])
            .unwrap_err();
        expect_invalid(typed(&e), "x[0]", "Implicit");
        let e = implicit(&func, &[x.as_tensor()], &()).unwrap_err();
        expect_invalid(typed(&e), "x[0]", "implicit");
    }
    // a solver that returns a non-finite y
    let nan = Implicit::new(|x| x[0].affine(0.0, f64::NAN), |x, y| y - &x[0]);
    let x = vec1(&[1.0, 2.0, 3.0]);
    let e = nan.apply(&[&x]).unwrap_err();
    expect_invalid(typed(&e), "y (solver output)", "NaN y");
}

#[test]
fn a_conditions_tolerance_refuses_an_unsolved_y_in_the_forward_pass() {
    let x = Var::from_tensor(&vec1(&[1.0, -2.0, 4.0])).unwrap();
    // y = x leaves c = (d − 1) ⊙ x, ‖c‖ = ‖(1, −6, 28)‖
    let want = (1.0f64 + 36.0 + 784.0).sqrt();
    let not_converged = |e: Error, ctx: &str| match e {
        Error::NotConverged {
            arg,
            residual,
            tolerance,
            ..
        } => {
            assert_eq!(arg, "conditions c(x, y)", "{ctx}");
            assert!((residual - want).abs() < 1e-12, "{ctx}: {residual}");
            assert_eq!(tolerance, 1e-8, "{ctx}");
        }
        e => panic!("{ctx}: {e}"),
    };
    let op = device_op(Method::Gmres, false).with_conditions_tolerance(1e-8);
    not_converged(typed(&op.apply(&[x.as_tensor()]).unwrap_err()), "Implicit");
    let unsolved = |x: &[HostTensor], _: &()| Ok((x[0].clone(), ()));
    let func = ImplicitFunction::<f64, _, _, _, _>::new(unsolved, host_conditions())
        .with_conditions_tolerance(1e-8);
    not_converged(
        typed(&implicit(&func, &[x.as_tensor()], &()).unwrap_err()),
        "implicit",
    );
    // solved: accepted, and the gradient is the implicit one
    let op = device_op(Method::Gmres, true).with_conditions_tolerance(1e-8);
    let y = op.apply(&[x.as_tensor()]).unwrap();
    let g = gradient(&x, &y, &[2.0, 4.0, 8.0]).unwrap();
    assert!(g.iter().all(|g| (g - 1.0).abs() < 1e-9), "{g:?}");
}

#[test]
fn an_empty_input_gets_an_empty_gradient() {
    // as burn's `Implicit` does: a [0] input, y = x, gets a [0] gradient
    let x = Var::from_tensor(&Tensor::zeros(0, DType::F64, &Device::Cpu).unwrap()).unwrap();
    let op = Implicit::new(|x| Ok(x[0].clone()), |x, y| y - &x[0]);
    let y = op.apply(&[x.as_tensor()]).unwrap();
    assert_eq!(y.dims(), &[0]);
    let grads = y.sum_all().unwrap().backward().unwrap();
    let g = grads
        .get(x.as_tensor())
        .expect("no gradient entry for the empty input");
    assert_eq!(g.dims(), &[0]);
}
