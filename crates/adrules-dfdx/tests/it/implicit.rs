//! Implicit functions as dfdx ops: `y = √(s·x)` defined by `c = y⊙y − s·x`, solved by a
//! solver that is never differentiated, gradients through the implicit rule against the
//! closed form and finite differences of the solver.

use std::sync::Arc;

use adrules_core::implicit::{FnMaps, ImplicitFunction, Method, Point, SolverOptions};
use adrules_core::{Error, HostTensor, Result, Scalar};
use adrules_dfdx::dfdx::prelude::*;
use adrules_dfdx::{DfdxElement, implicit, try_backward};

/// `y = √(s·x)` for x (any shape) and a scalar s, by Newton iterations from 1.
fn solver<E: DfdxElement>(x: &[HostTensor], _: &()) -> Result<(HostTensor, usize)> {
    let (xv, s) = (x[0].as_slice::<E>()?, x[1].as_slice::<E>()?[0]);
    let mut iterations = 0;
    let y: Vec<E> = xv
        .iter()
        .map(|&xi| {
            let target = (s * xi).to_dyn().re();
            let mut y = 1.0f64;
            for _ in 0..60 {
                y = 0.5 * (y + target / y);
                iterations += 1;
            }
            e::<E>(y)
        })
        .collect();
    Ok((HostTensor::from_vec(x[0].dims(), y)?, iterations))
}

/// The conditions' maps at the solution: `A = diag(2y)`, `B = [−s·I | −x]` (x's elements,
/// then s).
fn conditions<E: DfdxElement + adrules_core::implicit::ImplicitScalar>(
    p: &Point<usize, ()>,
) -> Result<FnMaps<E>> {
    let y: Arc<[E]> = p.y_data::<E>()?.into();
    let x: Arc<[E]> = p.x_data::<E>(0)?.into();
    let s = p.x_data::<E>(1)?[0];
    let m = y.len();
    let two = e::<E>(2.0);
    let xb = x.clone();
    Ok(FnMaps::hermitian(
        m,
        m + 1,
        move |v: &[E], out: &mut [E]| (0..m).for_each(|i| out[i] = two * y[i] * v[i]),
        move |v: &[E], out: &mut [E]| (0..m).for_each(|i| out[i] = -(s * v[i]) - x[i] * v[m]),
        move |u: &[E], out: &mut [E]| {
            (0..m).for_each(|i| out[i] = -(s * u[i]));
            out[m] = -(0..m)
                .map(|i| xb[i] * u[i])
                .fold(E::default(), |a, b| a + b);
        },
    ))
}

type Traced<S> = Tensor<S, f64, Cpu, OwnedTape<f64, Cpu>>;

fn e<E: DfdxElement>(v: f64) -> E {
    <E as Scalar>::from_f64(v)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

/// Gradients of `L = Σ w⊙y` with the tape on s only (x is an untraced parameter): the
/// closed form `x̄ = w·s/(2y)`, `s̄ = Σ w·x/(2y)`, and central differences of the solver.
fn gradients<E: DfdxElement + adrules_core::implicit::ImplicitScalar>(tol: f64)
where
    Cpu: Device<E>,
{
    let dev: Cpu = Default::default();
    let xv = [0.5, 2.0, 3.0, 1.5, 4.0, 0.7];
    let x: Tensor<Rank2<2, 3>, E, Cpu> =
        dev.tensor_from_vec(xv.iter().map(|&v| e::<E>(v)).collect(), (Const, Const));
    let s: Tensor<Rank0, E, Cpu> = dev.tensor_from_vec(vec![e::<E>(1.7)], ());
    let wh = [0.3, -1.2, 0.8, 2.0, -0.4, 1.1];
    let w: Tensor<Rank2<2, 3>, E, Cpu> =
        dev.tensor_from_vec(wh.iter().map(|&v| e::<E>(v)).collect(), (Const, Const));
    let f = ImplicitFunction::new(solver::<E>, conditions::<E>);

    let (y, iterations): (Tensor<Rank2<2, 3>, E, Cpu, OwnedTape<E, Cpu>>, usize) =
        implicit(&f, (x.clone(), s.leaky_trace()), &()).unwrap();
    assert_eq!(iterations, 6 * 60, "the solver's byproduct comes back");
    let yv = y.retaped::<NoneTape>().as_vec();
    let g = try_backward((y * w.clone()).sum()).unwrap();
    let (gx, gs) = (g.get(&x).as_vec(), g.get(&s).as_vec()[0]);
    let wv = w.as_vec();
    let sv: f64 = 1.7;
    let mut want_s = 0.0;
    for i in 0..6 {
        let (yi, wi) = (yv[i].to_dyn().re(), wv[i].to_dyn().re());
        assert!(close(yi, (sv * xv[i]).sqrt(), tol), "y[{i}]");
        let want_x = wi * sv / (2.0 * yi);
        assert!(close(gx[i].to_dyn().re(), want_x, tol), "x̄[{i}]: {gx:?}");
        want_s += wi * xv[i] / (2.0 * yi);
    }
    assert!(close(gs.to_dyn().re(), want_s, tol), "s̄ {gs:?} vs {want_s}");

    // Central differences of the solver itself along s, in double precision.
    let loss = |s: f64| -> f64 {
        (0..6)
            .map(|i| wv[i].to_dyn().re() * (s * xv[i]).sqrt())
            .sum()
    };
    let h = 1e-5;
    let fd = (loss(sv + h) - loss(sv - h)) / (2.0 * h);
    assert!(
        close(gs.to_dyn().re(), fd, tol.max(1e-8)),
        "s̄ {gs:?} vs FD {fd}"
    );
}

#[test]
fn gradients_match_closed_form_and_finite_differences() {
    gradients::<f64>(1e-10);
    gradients::<f32>(1e-4);
}

/// The tape on x only, operands given as a `Vec` (one shape type), and without any tape.
#[test]
fn operand_forms_and_tape_placements() {
    let dev: Cpu = Default::default();
    let f = ImplicitFunction::new(solver::<f64>, conditions::<f64>);
    let x: Tensor<(usize,), f64, Cpu> = dev.tensor_from_vec(vec![1.0, 4.0], (2,));
    let s: Tensor<(usize,), f64, Cpu> = dev.tensor_from_vec(vec![2.0], (1,));
    let (y, _): (Traced<(usize,)>, _) =
        implicit(&f, vec![x.leaky_trace(), s.leaky_trace()], &()).unwrap();
    let g = try_backward(y.sum()).unwrap();
    let (gx, gs) = (g.get(&x).as_vec(), g.get(&s).as_vec());
    let y = [2.0f64.sqrt(), 8.0f64.sqrt()];
    assert!(close(gx[0], 2.0 / (2.0 * y[0]), 1e-12) && close(gx[1], 2.0 / (2.0 * y[1]), 1e-12));
    assert!(close(gs[0], 1.0 / (2.0 * y[0]) + 4.0 / (2.0 * y[1]), 1e-12));

    let (y, _): (Tensor<(usize,), f64, Cpu>, _) =
        implicit(&f, (x.clone(), s.clone()), &()).unwrap();
    assert!(close(y.as_vec()[1], 8.0f64.sqrt(), 1e-14));
}

#[test]
fn errors_are_typed() {
    let dev: Cpu = Default::default();
    let x: Tensor<Rank1<2>, f64, Cpu> = dev.tensor_from_vec(vec![1.0, 4.0], (Const,));
    let s: Tensor<Rank0, f64, Cpu> = dev.tensor_from_vec(vec![2.0], ());
    let f = ImplicitFunction::new(solver::<f64>, conditions::<f64>);
    // An output shape type that does not fit the solver's y.
    let e =
        implicit::<Rank1<3>, _, _, _, _, _, _>(&f, (x.clone(), s.leaky_trace()), &()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "y (solver output)"),
        "{e}"
    );
    // A singular A found by the matrix-free solver in the backward pass: a typed error from
    // `try_backward`, no panic.
    let zero_a = |p: &Point<usize, ()>| -> Result<FnMaps<f64>> {
        let m = p.y.len();
        Ok(FnMaps::hermitian(
            m,
            m + 1,
            |_: &[f64], out: &mut [f64]| out.fill(0.0),
            |v: &[f64], out: &mut [f64]| out.copy_from_slice(&v[..out.len()]),
            |u: &[f64], out: &mut [f64]| {
                out.fill(0.0);
                out[..u.len()].copy_from_slice(u);
            },
        ))
    };
    let f = ImplicitFunction::new(solver::<f64>, zero_a).with_linear_solver(SolverOptions {
        method: Method::Gmres,
        ..SolverOptions::default()
    });
    let (y, _): (Traced<Rank1<2>>, _) = implicit(&f, (x, s.leaky_trace()), &()).unwrap();
    let e = try_backward(y.sum()).unwrap_err();
    assert!(
        matches!(e, Error::Singular { .. } | Error::NotConverged { .. }),
        "{e}"
    );
}

/// The policy of `adrules_core::implicit` on dfdx's tape, for a dense and a Krylov solver: a
/// non-finite cotangent `ȳ` is a typed error naming `y_bar` from `try_backward` (before it,
/// LU returned an all-NaN `x̄`), a non-finite input is refused in the forward pass, and a
/// conditions tolerance refuses a solver stopped early.
#[test]
fn non_finite_policy_and_conditions_tolerance() {
    let dev: Cpu = Default::default();
    let x: Tensor<Rank1<2>, f64, Cpu> = dev.tensor_from_vec(vec![1.0, 4.0], (Const,));
    let s: Tensor<Rank0, f64, Cpu> = dev.tensor_from_vec(vec![2.0], ());
    for method in [Method::Lu, Method::Gmres] {
        let f = ImplicitFunction::new(solver::<f64>, conditions::<f64>)
            .with_linear_solver(SolverOptions::from(method));
        for bad in [f64::NAN, f64::INFINITY] {
            let (y, _): (Traced<Rank1<2>>, _) =
                implicit(&f, (x.clone(), s.leaky_trace()), &()).unwrap();
            let w: Tensor<Rank1<2>, f64, Cpu> = dev.tensor_from_vec(vec![1.0, bad], (Const,));
            let e = try_backward((y * w).sum()).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument { arg, .. } if arg == "y_bar"),
                "{method:?}, ȳ with {bad}: {e}"
            );
        }
        let nan: Tensor<Rank1<2>, f64, Cpu> = dev.tensor_from_vec(vec![1.0, f64::NAN], (Const,));
        let e = implicit::<Rank1<2>, _, _, _, _, _, _>(&f, (nan, s.leaky_trace()), &())
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "x[0]"),
            "{method:?}: {e}"
        );
    }
    // two Newton steps from 1 are far from √(s·x): refused with a tolerance
    let early = |x: &[HostTensor], _: &()| -> Result<(HostTensor, usize)> {
        let (xv, s) = (x[0].as_slice::<f64>()?, x[1].as_slice::<f64>()?[0]);
        let y = xv
            .iter()
            .map(|&xi| (0..2).fold(1.0, |y, _| 0.5 * (y + s * xi / y)))
            .collect();
        Ok((HostTensor::from_vec(x[0].dims(), y)?, 2))
    };
    let with_values = |p: &Point<usize, ()>| -> Result<FnMaps<f64>> {
        let (y, x, s) = (
            p.y_data::<f64>()?,
            p.x_data::<f64>(0)?,
            p.x_data::<f64>(1)?[0],
        );
        let c = y.iter().zip(x).map(|(y, x)| y * y - s * x).collect();
        Ok(conditions::<f64>(p)?.with_conditions(c))
    };
    let f = ImplicitFunction::new(early, with_values).with_conditions_tolerance(1e-8);
    let e = implicit::<Rank1<2>, _, _, _, _, _, _>(&f, (x.clone(), s.leaky_trace()), &())
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&e, Error::NotConverged { arg, .. } if arg == "conditions c(x, y)"),
        "{e}"
    );
    let f = ImplicitFunction::new(solver::<f64>, with_values).with_conditions_tolerance(1e-8);
    let (y, _): (Traced<Rank1<2>>, _) = implicit(&f, (x, s.leaky_trace()), &()).unwrap();
    assert!(try_backward(y.sum()).is_ok());
}
