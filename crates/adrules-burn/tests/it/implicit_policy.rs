//! The non-finite policy and the residual check of [`adrules_core::implicit`] through burn's
//! [`Implicit`], on every solver: a non-finite cotangent `ȳ` is a typed error naming `y_bar`
//! from [`try_backward`] (dense and Krylov alike), a non-finite input is refused in the
//! forward pass (as candle's `implicit` and `Implicit` do), and a solution that does not
//! satisfy the conditions is `NotConverged` with a conditions tolerance. An empty input gets
//! an empty gradient.
//!
//! The function: `c(x, y) = d ⊙ y − x` (`A = diag(d)`, positive definite), `y = x / d`,
//! `x̄ = ȳ / d`.

use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_burn::{Implicit, take_backward_errors, try_backward};
use adrules_core::Error;
use adrules_core::implicit::{Method, SolverOptions, Structure};

const D: [f64; 3] = [2.0, 4.0, 8.0];
const METHODS: [Method; 4] = [Method::Lu, Method::Cholesky, Method::Gmres, Method::Cg];

fn vec1(v: &[f64], device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(
        TensorData::new(v.to_vec(), [v.len()]),
        (device, BurnDType::F64),
    )
}

fn values(t: Tensor<1>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// `Implicit` for `c = d ⊙ y − x`; `solved: false` returns `y = x` (a solver stopped early).
fn op(method: Method, solved: bool) -> Implicit {
    Implicit::new(
        move |x| {
            let d = vec1(&D, &x[0].device());
            Ok(if solved {
                x[0].clone() / d
            } else {
                x[0].clone()
            })
        },
        |x, y| y.clone() * vec1(&D, &y.device()) - x[0].clone(),
    )
    .with_structure(Structure::PositiveDefinite)
    .with_linear_solver(SolverOptions::from(method))
}

fn expect_invalid(e: Error, name: &str, ctx: &str) {
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == name),
        "{ctx}: expected InvalidArgument naming {name:?}, got {e}"
    );
}

#[test]
fn non_finite_cotangents_are_refused_in_backward_by_every_solver() {
    let device = Device::flex().autodiff();
    for method in METHODS {
        let x = vec1(&[1.0, -2.0, 4.0], &device).require_grad();
        let loss = |w: &[f64]| {
            let y = op(method, true).apply([(&x).into()]).unwrap();
            (y * vec1(w, &device)).sum()
        };
        let grads = try_backward(&loss(&[2.0, 4.0, -8.0])).unwrap();
        let g = values(x.grad(&grads).unwrap());
        let want = [1.0, 1.0, -1.0];
        assert!(
            g.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-9),
            "{method:?}: {g:?}"
        );
        for bad in [f64::NAN, f64::INFINITY] {
            let Err(e) = try_backward(&loss(&[1.0, bad, 0.5])) else {
                panic!("{method:?}: a cotangent with {bad} returned gradients")
            };
            expect_invalid(e, "y_bar", &format!("{method:?}, ȳ with {bad}"));
        }
    }
    assert!(take_backward_errors().is_empty());
}

#[test]
fn non_finite_inputs_are_refused_in_the_forward_pass() {
    for device in [Device::flex().autodiff(), Device::flex()] {
        for bad in [f64::NAN, f64::NEG_INFINITY] {
            let x = vec1(&[1.0, bad, 4.0], &device);
            let e = op(Method::Lu, true).apply([(&x).into()]).unwrap_err();
            expect_invalid(e, "x[0]", &format!("{device:?}, {bad}"));
        }
    }
    let nan = Implicit::new(
        |x| Ok(x[0].clone() * f64::NAN),
        |x, y| y.clone() - x[0].clone(),
    );
    let x = vec1(&[1.0, 2.0, 3.0], &Device::flex().autodiff()).require_grad();
    let e = nan.apply([(&x).into()]).unwrap_err();
    expect_invalid(e, "y (solver output)", "NaN y");
    assert!(take_backward_errors().is_empty());
}

#[test]
fn a_conditions_tolerance_refuses_an_unsolved_y_in_the_forward_pass() {
    let device = Device::flex().autodiff();
    let x = vec1(&[1.0, -2.0, 4.0], &device).require_grad();
    // y = x leaves c = (d − 1) ⊙ x, ‖c‖ = ‖(1, −6, 28)‖
    let want = (1.0f64 + 36.0 + 784.0).sqrt();
    let e = op(Method::Gmres, false)
        .with_conditions_tolerance(1e-8)
        .apply([(&x).into()])
        .unwrap_err();
    match e {
        Error::NotConverged {
            arg,
            residual,
            tolerance,
            ..
        } => {
            assert_eq!(arg, "conditions c(x, y)");
            assert!((residual - want).abs() < 1e-12, "{residual}");
            assert_eq!(tolerance, 1e-8);
        }
        e => panic!("{e}"),
    }
    // solved: accepted, with the implicit gradient
    let y = op(Method::Gmres, true)
        .with_conditions_tolerance(1e-8)
        .apply([(&x).into()])
        .unwrap();
    let grads = try_backward(&(y * vec1(&D, &device)).sum()).unwrap();
    let g = values(x.grad(&grads).unwrap());
    assert!(g.iter().all(|g| (g - 1.0).abs() < 1e-9), "{g:?}");
    assert!(take_backward_errors().is_empty());
}

#[test]
fn an_empty_input_gets_an_empty_gradient() {
    let device = Device::flex().autodiff();
    let x = vec1(&[], &device).require_grad();
    let f = Implicit::new(|x| Ok(x[0].clone()), |x, y| y.clone() - x[0].clone());
    let y = f.apply([(&x).into()]).unwrap();
    assert_eq!(y.dims(), [0]);
    let grads = try_backward(&y.sum()).unwrap();
    assert_eq!(x.grad(&grads).unwrap().dims(), [0]);
}
