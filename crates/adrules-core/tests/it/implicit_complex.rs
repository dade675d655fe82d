//! Complex data: conditions holomorphic in `y` and `x`, tangents as plain directional
//! derivatives, cotangents with the crate convention (`x̄ = Jᴴ·ȳ`).

use std::sync::Arc;

use crate::support::implicit::*;
use adrules_core::implicit::{
    DenseMaps, FixedPoint, FnMaps, ImplicitFunction, ImplicitScalar, LinearMaps, Method, Point,
    SolverOptions, Structure,
};
use adrules_core::{Complex32, Complex64, DType, HostTensor, Result, Scalar};
use adrules_testing::{FiniteDifference, Rng, Value, adjoint_mismatch};
use faer::Mat;
use faer::linalg::solvers::{PartialPivLu, Solve};

type P<'a> = Point<'a, (), ()>;

/// The principal square root (the solver).
fn sqrt_solve<T: ImplicitScalar>(x: &[HostTensor], _: &()) -> Result<(HostTensor, ())> {
    let y: Vec<T> = x[0]
        .data()
        .to_c64_vec()
        .iter()
        .map(|z| T::from_c64_unchecked(z.sqrt()))
        .collect();
    Ok((tensor(x[0].dims(), y), ()))
}

/// `c = y⊙y − x`, matrix-free: `A = diag(2y)` is complex and not Hermitian (`Aᴴ = diag(2ȳ)`),
/// `B = −I`.
fn sqrt_maps<T: ImplicitScalar>(p: &P) -> Result<Box<dyn LinearMaps<T>>> {
    let y: Arc<[T]> = p.y_data::<T>()?.into();
    let y2 = Arc::clone(&y);
    let m = y.len();
    let two = T::from_f64(2.0);
    Ok(Box::new(FnMaps::<T>::new(
        m,
        m,
        move |v, o| {
            o.iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = two * y[i] * v[i])
        },
        move |u, o| {
            o.iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = two * y2[i].conj() * u[i])
        },
        |v, o| o.iter_mut().zip(v).for_each(|(o, &v)| *o = -v),
        |u, o| o.iter_mut().zip(u).for_each(|(o, &u)| *o = -u),
    )))
}

/// The same conditions as dense Jacobians.
fn sqrt_dense<T: ImplicitScalar>(p: &P) -> Result<Box<dyn LinearMaps<T>>> {
    let y = p.y_data::<T>()?;
    let m = y.len();
    let two = T::from_f64(2.0);
    Ok(Box::new(DenseMaps::new(
        Mat::from_fn(m, m, |i, j| if i == j { two * y[i] } else { T::zero() }),
        Mat::from_fn(m, m, |i, j| if i == j { -T::one() } else { T::zero() }),
    )?))
}

fn sqrt_case<T: ImplicitScalar>(tol: f64) {
    let x: Vec<Complex64> = vec![
        Complex64::new(4.0, 1.0),
        Complex64::new(-2.0, 0.5),
        Complex64::new(0.3, -3.0),
    ];
    let typed =
        |v: &[Complex64]| tensor(&[3], v.iter().map(|&z| T::from_c64_unchecked(z)).collect());
    let j: Vec<Complex64> = x.iter().map(|z| 0.5 / z.sqrt()).collect();
    let dx = [
        Complex64::new(0.5, -1.0),
        Complex64::new(1.0, 2.0),
        Complex64::new(-0.25, 0.75),
    ];
    let ybar = [
        Complex64::new(1.0, 1.0),
        Complex64::new(0.0, -2.0),
        Complex64::new(3.0, 0.5),
    ];
    for method in [Method::Lu, Method::Gmres] {
        for (name, source) in [
            (
                "matrix-free",
                sqrt_maps::<T> as fn(&P) -> Result<Box<dyn LinearMaps<T>>>,
            ),
            ("dense", sqrt_dense::<T>),
        ] {
            let label = format!("{} / {name} / {method:?}", T::DTYPE);
            let (solve, calls) = refusing(sqrt_solve::<T>);
            let f = ImplicitFunction::new(solve, source)
                .with_linear_solver(SolverOptions::from(method));
            let (lin, ()) = f.linearize(&[typed(&x)], &()).unwrap();
            // JVP along a complex direction: dy = J·dx (plain directional derivative).
            let dy = lin.jvp(&[typed(&dx)]).unwrap();
            let want: Vec<Complex64> = j.iter().zip(&dx).map(|(j, d)| j * d).collect();
            assert_close(&cv(&dy), &want, tol, tol, &format!("{label}: JVP"));
            // VJP: x̄ = Jᴴ·ȳ = conj(J)⊙ȳ — the conjugate, not J⊙ȳ.
            let xbar = lin.vjp(&typed(&ybar)).unwrap();
            let want: Vec<Complex64> = j.iter().zip(&ybar).map(|(j, y)| j.conj() * y).collect();
            assert_close(&cv(&xbar[0]), &want, tol, tol, &format!("{label}: VJP"));
            assert_eq!(calls.get(), 1);
        }
    }
}

#[test]
fn complex_square_root_c64_and_c32() {
    sqrt_case::<Complex64>(1e-12);
    sqrt_case::<Complex32>(1e-5);
}

#[test]
fn complex_square_root_against_finite_differences_and_adjoint() {
    for method in [Method::Lu, Method::Gmres] {
        let f = ImplicitFunction::new(sqrt_solve::<Complex64>, sqrt_maps::<Complex64>)
            .with_linear_solver(SolverOptions::from(method));
        let mut rng = Rng::seed(3);
        let x = rng.tensor(&[2, 3], DType::C64);
        let (lin, ()) = f.linearize(std::slice::from_ref(&x), &()).unwrap();
        let dx = rng.tensor(&[2, 3], DType::C64);
        let ybar = rng.tensor(&[2, 3], DType::C64);
        let jdx = lin.jvp(std::slice::from_ref(&dx)).unwrap();
        let fd = FiniteDifference::default()
            .jvp(
                |x| Ok(Value::Tensor(f.solve(&[x[0].tensor("x")?.clone()], &())?.0)),
                &[Value::Tensor(x.clone())],
                &[Value::Tensor(dx.clone())],
            )
            .unwrap();
        assert_close(
            &cv(&jdx),
            &cv(fd.tensor("fd").unwrap()),
            1e-8,
            1e-8,
            "JVP vs FD",
        );
        let xbar = lin.vjp(&ybar).unwrap();
        let mismatch = adjoint_mismatch(
            &Value::Tensor(ybar),
            &Value::Tensor(jdx),
            &[Some(Value::Tensor(xbar[0].clone()))],
            &[Value::Tensor(dx)],
        )
        .unwrap();
        assert!(
            mismatch < 1e-12,
            "{method:?}: adjoint mismatch {mismatch:e}"
        );
    }
}

#[test]
fn complex_cosine_fixed_point() {
    // y = θ·cos y with complex θ: dy/dθ = cos y / (1 + θ sin y).
    let theta = Complex64::new(0.8, 0.3);
    let solve = |x: &[HostTensor], _: &()| {
        let th = data::<Complex64>(&x[0])[0];
        let mut y = Complex64::new(0.0, 0.0);
        for _ in 0..60 {
            y -= (th * y.cos() - y) / (-th * y.sin() - 1.0);
        }
        Ok((tensor(&[1], vec![y]), ()))
    };
    let t_maps = |p: &P| {
        let (th, y) = (p.x_data::<Complex64>(0)?[0], p.y_data::<Complex64>()?[0]);
        Ok(FnMaps::<Complex64>::new(
            1,
            1,
            move |v, o| o[0] = -th * y.sin() * v[0],
            move |u, o| o[0] = (-th * y.sin()).conj() * u[0],
            move |v, o| o[0] = y.cos() * v[0],
            move |u, o| o[0] = y.cos().conj() * u[0],
        )
        .with_conditions(vec![th * y.cos()]))
    };
    let x = [tensor(&[1], vec![theta])];
    let (y0, ()) = solve(&x, &()).unwrap();
    let y = data::<Complex64>(&y0)[0];
    let j = y.cos() / (1.0 + theta * y.sin());
    for method in [Method::Lu, Method::Gmres] {
        let (refusing_solve, calls) = refusing(solve);
        let f = ImplicitFunction::new(refusing_solve, FixedPoint::new(t_maps))
            .with_linear_solver(SolverOptions::from(method));
        let (lin, ()) = f.linearize(&x, &()).unwrap();
        assert!(
            lin.conditions_norm().unwrap() < 1e-14,
            "fixed-point residual"
        );
        let d = Complex64::new(0.3, -0.7);
        let dy = lin.jvp(&[tensor(&[1], vec![d])]).unwrap();
        assert_close(&cv(&dy), &[j * d], 1e-12, 1e-12, "JVP");
        let yb = Complex64::new(-1.2, 0.4);
        let xbar = lin.vjp(&tensor(&[1], vec![yb])).unwrap();
        assert_close(&cv(&xbar[0]), &[j.conj() * yb], 1e-12, 1e-12, "VJP");
        assert_eq!(calls.get(), 1);
    }
}

/// A random Hermitian positive-definite matrix `G·Gᴴ + m·I`.
fn hpd(rng: &mut Rng, m: usize) -> Mat<Complex64> {
    let g = rng.tensor(&[m, m], DType::C64).data().to_c64_vec();
    Mat::from_fn(m, m, |i, j| {
        (0..m)
            .map(|k| g[i * m + k] * g[j * m + k].conj())
            .sum::<Complex64>()
            + if i == j {
                Complex64::new(m as f64, 0.0)
            } else {
                Complex64::new(0.0, 0.0)
            }
    })
}

#[test]
fn complex_hermitian_definite_systems_with_cholesky_and_cg() {
    // c = s·(H·y − x), s = ±1: y = H⁻¹·x, J = H⁻¹; A = s·H is Hermitian and definite.
    let m = 6;
    let mut rng = Rng::seed(5);
    let h = Arc::new(hpd(&mut rng, m));
    let x = rng.tensor(&[m], DType::C64);
    let dx = rng.tensor(&[m], DType::C64);
    let ybar = rng.tensor(&[m], DType::C64);
    let lu = PartialPivLu::new((*h).as_ref());
    let solve_h = |v: &HostTensor, adjoint: bool| -> Vec<Complex64> {
        let mut r = Mat::from_fn(m, 1, |i, _| v.data().to_c64_vec()[i]);
        if adjoint {
            lu.solve_adjoint_in_place(r.as_mut());
        } else {
            lu.solve_in_place(r.as_mut());
        }
        (0..m).map(|i| r[(i, 0)]).collect()
    };
    let (want_jvp, want_vjp) = (solve_h(&dx, false), solve_h(&ybar, true));
    for (sign, structure) in [
        (1.0, Structure::PositiveDefinite),
        (-1.0, Structure::NegativeDefinite),
    ] {
        for method in [Method::Cholesky, Method::Cg, Method::Lu, Method::Gmres] {
            let h1 = Arc::clone(&h);
            let solve = move |x: &[HostTensor], _: &()| {
                let mut r = Mat::from_fn(m, 1, |i, _| x[0].data().to_c64_vec()[i]);
                PartialPivLu::new((*h1).as_ref()).solve_in_place(r.as_mut());
                Ok((
                    tensor(&[m], (0..m).map(|i| r[(i, 0)]).collect::<Vec<_>>()),
                    (),
                ))
            };
            let h2 = Arc::clone(&h);
            let conditions = move |_: &P| {
                let ha = Arc::clone(&h2);
                let s = Complex64::new(sign, 0.0);
                Ok(FnMaps::<Complex64>::hermitian(
                    m,
                    m,
                    move |v, o| {
                        for (i, o) in o.iter_mut().enumerate() {
                            *o = s * (0..m).map(|j| ha[(i, j)] * v[j]).sum::<Complex64>();
                        }
                    },
                    move |v, o| o.iter_mut().zip(v).for_each(|(o, &v)| *o = -s * v),
                    move |u, o| o.iter_mut().zip(u).for_each(|(o, &u)| *o = -s.conj() * u),
                )
                .with_structure(structure))
            };
            let f = ImplicitFunction::new(solve, conditions)
                .with_linear_solver(SolverOptions::from(method));
            let (lin, ()) = f.linearize(std::slice::from_ref(&x), &()).unwrap();
            let t = lin.jvp_many(&[[dx.clone()]], None).unwrap();
            assert_eq!(t.stats.solver, method.name());
            let label = format!("{structure:?} / {method:?}");
            assert_close(
                &cv(&t.dy[0]),
                &want_jvp,
                1e-9,
                1e-9,
                &format!("{label}: JVP"),
            );
            let xbar = lin.vjp(&ybar).unwrap();
            assert_close(
                &cv(&xbar[0]),
                &want_vjp,
                1e-9,
                1e-9,
                &format!("{label}: VJP"),
            );
        }
    }
}
