//! Every error path of the implicit rules: singular systems (T10's negative case), iterative
//! solvers stopped by their iteration limit, shape / count / dtype mismatches of inputs,
//! tangents, cotangents and maps, invalid options, and the opt-in NaN-fill policy.

use std::sync::Arc;

use crate::support::implicit::*;
use adrules_core::implicit::{
    DenseMaps, FnMaps, ImplicitFunction, LinearMaps, Method, OnFailure, Point, SolverOptions,
    Structure,
};
use adrules_core::{DType, Error, HostTensor, Result};
use adrules_testing::FiniteDifferenceConditions;
use adrules_testing::Rng;
use faer::Mat;

type P<'a> = Point<'a, (), ()>;

// ------------------------------------------------------------------ singular: T10 negative

/// T10's negative case: `c = [y₀ + y₁ − x, 2(y₀ + y₁ − x)]`, `A = [[1, 1], [2, 2]]` singular.
fn singular_solve(x: &[HostTensor], _: &()) -> Result<(HostTensor, ())> {
    let x = data::<f64>(&x[0])[0];
    Ok((t64(&[2], vec![x / 2.0, x / 2.0]), ()))
}

fn singular_maps(_: &P) -> Result<FnMaps<f64>> {
    Ok(FnMaps::<f64>::new(
        2,
        1,
        |v, o| {
            o[0] = v[0] + v[1];
            o[1] = 2.0 * (v[0] + v[1]);
        },
        |u, o| o.fill(u[0] + 2.0 * u[1]),
        |v, o| {
            o[0] = -v[0];
            o[1] = -2.0 * v[0];
        },
        |u, o| o[0] = -u[0] - 2.0 * u[1],
    ))
}

fn singular_dense(_: &P) -> Result<DenseMaps<f64>> {
    DenseMaps::from_host(
        &t64(&[2, 2], vec![1.0, 1.0, 2.0, 2.0]),
        &t64(&[2, 1], vec![-1.0, -2.0]),
    )
}

fn x1() -> Vec<HostTensor> {
    vec![t64(&[1], vec![0.7])]
}

#[test]
fn t10_singular_a_is_a_typed_error_with_dense_solvers() {
    for method in [Method::Auto, Method::Lu] {
        let f = ImplicitFunction::new(singular_solve, singular_dense)
            .with_linear_solver(SolverOptions::from(method));
        let e = f.linearize(&x1(), &()).unwrap_err();
        assert!(matches!(e, Error::Singular { .. }), "{method:?}: {e}");
        // the same A reached through matrix-free maps (dense A built from A·eⱼ)
        let f = ImplicitFunction::new(singular_solve, singular_maps)
            .with_linear_solver(SolverOptions::from(method));
        assert!(matches!(f.vjp(&x1(), &()), Err(Error::Singular { .. })));
        assert!(matches!(
            f.jvp(&x1(), &(), &[x1()]),
            Err(Error::Singular { .. })
        ));
    }
}

#[test]
fn t10_singular_a_with_gmres() {
    let f = ImplicitFunction::new(singular_solve, singular_maps)
        .with_linear_solver(SolverOptions::from(Method::Gmres));
    let (lin, ()) = f.linearize(&x1(), &()).unwrap();
    // Aᴴ·u = −ȳ is inconsistent for ȳ = e₀: GMRES breaks down with a singular factor.
    let e = lin.vjp(&t64(&[2], vec![1.0, 0.0])).unwrap_err();
    assert!(
        matches!(e, Error::Singular { ref arg, .. } if arg == "GMRES"),
        "{e}"
    );
    // A·dy = −B·dx is consistent (B·dx lies in the range of A): a matrix-free solver
    // solves it, as documented; the dense solvers above refuse.
    let t = lin.jvp_many(&[x1()], None).unwrap();
    assert!(t.stats.max_residual() < 1e-12);
}

/// A map that returns NaN (e.g. conditions evaluated outside their domain): GMRES stops at
/// the first product with a typed error instead of iterating to its limit on NaN residuals.
#[test]
fn non_finite_maps_stop_gmres_at_once() {
    let nan_maps = |_: &P| {
        Ok(FnMaps::<f64>::new(
            2,
            1,
            |_, o| o.fill(f64::NAN),
            |_, o| o.fill(f64::NAN),
            |v, o| o.fill(-v[0]),
            |u, o| o[0] = -u[0] - u[1],
        ))
    };
    let f = ImplicitFunction::new(singular_solve, nan_maps)
        .with_linear_solver(SolverOptions::from(Method::Gmres));
    let (lin, ()) = f.linearize(&x1(), &()).unwrap();
    let e = lin.vjp(&t64(&[2], vec![1.0, 0.0])).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, ref reason } if arg == "A = ∂c/∂y" && reason.contains("non-finite")),
        "{e}"
    );
    // A non-finite cotangent (the right-hand side −ȳ) is refused before any product.
    let f = ImplicitFunction::new(singular_solve, singular_maps)
        .with_linear_solver(SolverOptions::from(Method::Gmres));
    let (lin, ()) = f.linearize(&x1(), &()).unwrap();
    let e = lin.vjp(&t64(&[2], vec![f64::NAN, 0.0])).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "y_bar"),
        "{e}"
    );
}

#[test]
fn nan_fill_policy_replaces_singular_failures() {
    let f = ImplicitFunction::new(singular_solve, singular_dense)
        .with_linear_solver(SolverOptions::from(Method::Lu))
        .with_failure_policy(OnFailure::NanFill);
    let (lin, ()) = f.linearize(&x1(), &()).unwrap();
    let t = lin.jvp_many(&[x1()], None).unwrap();
    assert!(matches!(t.stats.failure, Some(Error::Singular { .. })));
    assert!(data::<f64>(&t.dy[0]).iter().all(|v| v.is_nan()));
    assert!(t.stats.residuals.iter().all(|r| r.is_nan()));
    let c = lin.vjp_many(&[t64(&[2], vec![1.0, 0.0])], None).unwrap();
    assert!(matches!(c.stats.failure, Some(Error::Singular { .. })));
    assert!(data::<f64>(&c.dx[0][0]).iter().all(|v| v.is_nan()));
    assert!(c.adjoint.iter().all(|v| v.is_nan()));
    // shape errors stay errors under NaN-fill
    assert!(matches!(
        lin.vjp(&t64(&[3], vec![0.0; 3])),
        Err(Error::ShapeMismatch { .. })
    ));
    // GMRES breakdown under NaN-fill
    let f = ImplicitFunction::new(singular_solve, singular_maps)
        .with_linear_solver(SolverOptions::from(Method::Gmres))
        .with_failure_policy(OnFailure::NanFill);
    let (lin, ()) = f.linearize(&x1(), &()).unwrap();
    let xbar = lin.vjp(&t64(&[2], vec![1.0, 0.0])).unwrap();
    assert!(data::<f64>(&xbar[0])[0].is_nan());
}

// ------------------------------------------------------------------ y = M⁻¹·x, c = M·y − x

/// A well-conditioned random `m×m` matrix `G/√m + 3I` (general) or `G·Gᵀ/m + I` (SPD).
fn matrix(m: usize, spd: bool, seed: u64) -> Arc<Mat<f64>> {
    let g = data::<f64>(&Rng::seed(seed).tensor(&[m, m], DType::F64));
    let s = (m as f64).sqrt();
    Arc::new(Mat::from_fn(m, m, |i, j| {
        let d = if i == j { 1.0 } else { 0.0 };
        if spd {
            (0..m).map(|k| g[i * m + k] * g[j * m + k]).sum::<f64>() / m as f64 + d
        } else {
            g[i * m + j] / s + 3.0 * d
        }
    }))
}

type Linear = ImplicitFunction<
    f64,
    (),
    (),
    Box<dyn Fn(&[HostTensor], &()) -> Result<(HostTensor, ())>>,
    Box<dyn Fn(&P) -> Result<FnMaps<f64>>>,
>;

/// `y = M⁻¹·x` with `c = M·y − x`, matrix-free maps tagged `structure`.
fn linear(mat: Arc<Mat<f64>>, structure: Structure, options: SolverOptions) -> Linear {
    let m = mat.nrows();
    let mm = Arc::clone(&mat);
    let solve = move |x: &[HostTensor], _: &()| {
        use faer::linalg::solvers::{PartialPivLu, Solve};
        let xv = data::<f64>(&x[0]);
        let mut r = Mat::from_fn(m, 1, |i, _| xv[i]);
        PartialPivLu::new((*mm).as_ref()).solve_in_place(r.as_mut());
        Ok((t64(&[m], (0..m).map(|i| r[(i, 0)]).collect()), ()))
    };
    let conditions = move |_: &P| {
        let (a, at) = (Arc::clone(&mat), Arc::clone(&mat));
        Ok(FnMaps::<f64>::new(
            m,
            m,
            move |v, o| map_rows(o, |i| (0..m).map(|j| a[(i, j)] * v[j]).sum()),
            move |u, o| map_rows(o, |j| (0..m).map(|i| at[(i, j)] * u[i]).sum()),
            |v, o| map_rows(o, |i| -v[i]),
            |u, o| map_rows(o, |i| -u[i]),
        )
        .with_structure(structure))
    };
    ImplicitFunction::new(
        Box::new(solve) as Box<dyn Fn(&[HostTensor], &()) -> Result<(HostTensor, ())>>,
        Box::new(conditions) as Box<dyn Fn(&P) -> Result<FnMaps<f64>>>,
    )
    .with_linear_solver(options)
}

fn map_rows(o: &mut [f64], f: impl Fn(usize) -> f64) {
    o.iter_mut().enumerate().for_each(|(i, o)| *o = f(i));
}

#[test]
fn iteration_limit_gives_not_converged() {
    let m = 30;
    let x = vec![Rng::seed(1).tensor(&[m], DType::F64)];
    for (method, spd) in [(Method::Gmres, false), (Method::Cg, true)] {
        let options = SolverOptions {
            method,
            max_iterations: Some(2),
            tolerance: Some(1e-12),
            ..Default::default()
        };
        let structure = if spd {
            Structure::PositiveDefinite
        } else {
            Structure::General
        };
        let f = linear(matrix(m, spd, 2), structure, options);
        let (lin, ()) = f.linearize(&x, &()).unwrap();
        match lin.jvp(&x) {
            Err(Error::NotConverged {
                arg,
                iterations,
                residual,
                tolerance,
            }) => {
                assert_eq!(arg, if spd { "CG" } else { "GMRES" });
                assert_eq!(iterations, 2);
                assert!(residual > tolerance && residual < 1.0, "{residual}");
                assert_eq!(tolerance, 1e-12);
            }
            other => panic!("{method:?}: expected NotConverged, got {other:?}"),
        }
        assert!(matches!(lin.vjp(&x[0]), Err(Error::NotConverged { .. })));
        // NaN-fill keeps the failure in the statistics
        let f = linear(
            matrix(m, spd, 2),
            structure,
            SolverOptions {
                method,
                max_iterations: Some(2),
                ..Default::default()
            },
        )
        .with_failure_policy(OnFailure::NanFill);
        let (lin, ()) = f.linearize(&x, &()).unwrap();
        let t = lin.jvp_many(std::slice::from_ref(&x), None).unwrap();
        assert!(matches!(t.stats.failure, Some(Error::NotConverged { .. })));
        assert!(data::<f64>(&t.dy[0]).iter().all(|v| v.is_nan()));
    }
}

#[test]
fn definite_solvers_on_indefinite_matrices_are_singular() {
    let mat = Arc::new(Mat::from_fn(2, 2, |i, j| match (i, j) {
        (0, 0) => 1.0,
        (1, 1) => -2.0,
        _ => 0.0,
    }));
    let x = vec![t64(&[2], vec![1.0, 1.0])];
    let f = linear(
        Arc::clone(&mat),
        Structure::PositiveDefinite,
        Method::Cholesky.into(),
    );
    assert!(matches!(f.linearize(&x, &()), Err(Error::Singular { .. })));
    let f = linear(
        Arc::clone(&mat),
        Structure::PositiveDefinite,
        Method::Cg.into(),
    );
    let (lin, ()) = f.linearize(&x, &()).unwrap();
    assert!(matches!(lin.jvp(&x), Err(Error::Singular { ref arg, .. }) if arg == "CG"));
    // under NaN-fill the Cholesky failure surfaces at the solves
    let f = linear(mat, Structure::PositiveDefinite, Method::Cholesky.into())
        .with_failure_policy(OnFailure::NanFill);
    let (lin, ()) = f.linearize(&x, &()).unwrap();
    assert!(data::<f64>(&lin.jvp(&x).unwrap())[0].is_nan());
}

#[test]
fn definite_methods_need_a_definite_tag_and_a_hermitian_matrix() {
    let x = vec![t64(&[3], vec![1.0, 2.0, 3.0])];
    for method in [Method::Cholesky, Method::Cg] {
        let f = linear(matrix(3, true, 4), Structure::General, method.into());
        let e = f.linearize(&x, &()).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "method"),
            "{e}"
        );
    }
    // tagged definite, but not Hermitian: dense Cholesky checks
    let f = linear(
        matrix(3, false, 4),
        Structure::PositiveDefinite,
        Method::Cholesky.into(),
    );
    let e = f.linearize(&x, &()).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "structure"),
        "{e}"
    );
}

#[test]
fn invalid_options_are_rejected() {
    let x = vec![t64(&[3], vec![1.0, 2.0, 3.0])];
    for options in [
        SolverOptions {
            tolerance: Some(-1.0),
            ..Default::default()
        },
        SolverOptions {
            tolerance: Some(f64::NAN),
            ..Default::default()
        },
        SolverOptions {
            restart: 0,
            ..Default::default()
        },
        SolverOptions {
            ridge: f64::INFINITY,
            ..Default::default()
        },
    ] {
        let f = linear(matrix(3, false, 4), Structure::General, options.clone())
            .with_failure_policy(OnFailure::NanFill);
        assert!(
            matches!(f.linearize(&x, &()), Err(Error::InvalidArgument { .. })),
            "{options:?}"
        );
    }
}

#[test]
fn non_finite_jacobian_is_rejected() {
    let conditions =
        |_: &P| DenseMaps::<f64>::new(Mat::from_fn(1, 1, |_, _| f64::NAN), Mat::zeros(1, 1));
    let solve = |x: &[HostTensor], _: &()| Ok((x[0].clone(), ()));
    let f = ImplicitFunction::new(solve, conditions);
    let e = f.linearize(&[t64(&[1], vec![1.0])], &()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let f = f.with_failure_policy(OnFailure::NanFill);
    let (lin, ()) = f.linearize(&[t64(&[1], vec![1.0])], &()).unwrap();
    assert!(data::<f64>(&lin.jvp(&[t64(&[1], vec![1.0])]).unwrap())[0].is_nan());
}

// ------------------------------------------------------------------ shapes, counts, dtypes

#[test]
fn tangent_and_cotangent_mismatches() {
    let f = linear(
        matrix(3, false, 4),
        Structure::General,
        SolverOptions::default(),
    );
    let x = vec![t64(&[3], vec![1.0, 2.0, 3.0])];
    let (lin, ()) = f.linearize(&x, &()).unwrap();
    // wrong shape
    let e = lin.jvp(&[t64(&[2], vec![1.0, 2.0])]).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "tangents[0][0]"),
        "{e}"
    );
    let e = lin.jvp(&[t64(&[3, 1], vec![1.0, 2.0, 3.0])]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // wrong number of tensors in a direction
    let e = lin.jvp(&[x[0].clone(), x[0].clone()]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::CountMismatch {
                expected: 1,
                actual: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = lin
        .jvp_many::<Vec<HostTensor>>(&[x.clone(), vec![]], None)
        .unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { ref arg, .. } if arg == "tangents[1]"),
        "{e}"
    );
    // wrong dtype
    let e = lin.jvp(&[tensor::<f32>(&[3], vec![1.0; 3])]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                actual: DType::F32,
                ..
            }
        ),
        "{e}"
    );
    // cotangents
    let e = lin.vjp(&t64(&[4], vec![0.0; 4])).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "cotangents[0]"),
        "{e}"
    );
    let e = lin
        .vjp(&tensor::<adrules_core::Complex64>(
            &[3],
            vec![Default::default(); 3],
        ))
        .unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    // guesses of the wrong length
    let e = lin
        .jvp_many(std::slice::from_ref(&x), Some(&[0.0; 2]))
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "guess"),
        "{e}"
    );
    let e = lin.vjp_many(&[x[0].clone()], Some(&[0.0; 4])).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "guess"),
        "{e}"
    );
    // an empty block is fine
    let t = lin.jvp_many::<Vec<HostTensor>>(&[], None).unwrap();
    assert!(t.dy.is_empty() && t.stats.residuals.is_empty());
}

#[test]
fn input_and_solver_output_dtypes_are_checked() {
    let f = linear(
        matrix(3, false, 4),
        Structure::General,
        SolverOptions::default(),
    );
    let e = f
        .linearize(&[tensor::<f32>(&[3], vec![1.0; 3])], &())
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { ref arg, .. } if arg == "x[0]"),
        "{e}"
    );
    let solve = |_: &[HostTensor], _: &()| Ok((tensor::<f32>(&[1], vec![1.0]), ()));
    let f = ImplicitFunction::new(solve, |_: &P| {
        DenseMaps::<f64>::new(
            Mat::from_fn(1, 1, |_, _| 1.0),
            Mat::from_fn(1, 1, |_, _| 1.0),
        )
    });
    let e = f.linearize(&[t64(&[1], vec![1.0])], &()).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { ref arg, .. } if arg == "y (solver output)"),
        "{e}"
    );
}

#[test]
fn maps_of_the_wrong_size_are_rejected() {
    let solve = |x: &[HostTensor], _: &()| Ok((x[0].clone(), ()));
    let x = vec![t64(&[2], vec![1.0, 2.0])];
    let dense = |m: usize, n: usize| {
        move |_: &P| DenseMaps::<f64>::new(Mat::identity(m, m), Mat::zeros(m, n))
    };
    let e = ImplicitFunction::new(solve, dense(3, 2))
        .linearize(&x, &())
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref expected, ref actual, .. } if expected == &[2] && actual == &[3]),
        "{e}"
    );
    let e = ImplicitFunction::new(solve, dense(2, 5))
        .linearize(&x, &())
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref expected, ref actual, .. } if expected == &[2] && actual == &[5]),
        "{e}"
    );
    // conditions values of the wrong length
    let values = |_: &P| {
        Ok(
            DenseMaps::<f64>::new(Mat::identity(2, 2), Mat::zeros(2, 2))?
                .with_conditions(vec![0.0; 3]),
        )
    };
    assert!(matches!(
        ImplicitFunction::new(solve, values).linearize(&x, &()),
        Err(Error::ShapeMismatch { .. })
    ));
    // finite differences of a c of the wrong length
    let fd = FiniteDifferenceConditions::new(|_: &P| Ok(vec![0.0f64; 3]));
    assert!(matches!(
        ImplicitFunction::new(solve, fd).linearize(&x, &()),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn dense_maps_constructors_check_shapes() {
    assert!(matches!(
        DenseMaps::<f64>::new(Mat::zeros(2, 3), Mat::zeros(2, 1)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        DenseMaps::<f64>::new(Mat::zeros(2, 2), Mat::zeros(3, 1)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        DenseMaps::<f64>::from_host(&t64(&[4], vec![0.0; 4]), &t64(&[2, 1], vec![0.0; 2])),
        Err(Error::RankMismatch { .. })
    ));
    assert!(matches!(
        DenseMaps::<f64>::from_host(&tensor::<f32>(&[1, 1], vec![0.0]), &t64(&[1, 1], vec![0.0])),
        Err(Error::DTypeMismatch { .. })
    ));
}

/// Maps whose products fail (an engine error, say).
struct Failing;

impl LinearMaps<f64> for Failing {
    fn num_unknowns(&self) -> usize {
        1
    }
    fn num_inputs(&self) -> usize {
        1
    }
    fn apply_a(&self, _: &[f64], _: &mut [f64], _: usize) -> Result<()> {
        Err(Error::Backend {
            backend: "engine".into(),
            message: "device lost".into(),
        })
    }
    fn apply_a_adjoint(&self, v: &[f64], o: &mut [f64], k: usize) -> Result<()> {
        self.apply_a(v, o, k)
    }
    fn apply_b(&self, v: &[f64], o: &mut [f64], k: usize) -> Result<()> {
        self.apply_a(v, o, k)
    }
    fn apply_b_adjoint(&self, v: &[f64], o: &mut [f64], k: usize) -> Result<()> {
        self.apply_a(v, o, k)
    }
}

#[test]
fn errors_of_the_solver_and_of_the_maps_propagate() {
    let failing_solver = |_: &[HostTensor], _: &()| -> Result<(HostTensor, ())> {
        Err(Error::invalid("solver", "diverged"))
    };
    let f = ImplicitFunction::new(failing_solver, |_: &P| Ok(Failing));
    assert_eq!(
        f.linearize(&x1(), &()).unwrap_err(),
        Error::invalid("solver", "diverged")
    );
    let solve = |x: &[HostTensor], _: &()| Ok((x[0].clone(), ()));
    for method in [Method::Lu, Method::Gmres] {
        // even under NaN-fill: a failing source is not a numerical failure
        let f = ImplicitFunction::new(solve, |_: &P| Ok(Failing))
            .with_linear_solver(SolverOptions::from(method))
            .with_failure_policy(OnFailure::NanFill);
        let r = f.linearize(&x1(), &()).and_then(|(lin, ())| lin.jvp(&x1()));
        assert!(matches!(r, Err(Error::Backend { .. })), "{method:?}: {r:?}");
    }
    let conditions_error =
        |_: &P| -> Result<Failing> { Err(Error::invalid("conditions", "bad point")) };
    assert!(matches!(
        ImplicitFunction::new(solve, conditions_error).linearize(&x1(), &()),
        Err(Error::InvalidArgument { .. })
    ));
}

// ------------------------------------------------------------------ finite-output policy

/// `c = a·y − x` with `a = 1e-300`: `y = x/a` is finite for small `x`, but a tangent or
/// cotangent of 1e10 gives `1e310`. Before the finite-output policy both came back as
/// `Ok([inf])`.
#[test]
fn overflowing_tangents_and_cotangents_are_typed_errors() {
    const A: f64 = 1e-300;
    let solve = |x: &[HostTensor], _: &()| -> Result<(HostTensor, ())> {
        Ok((t64(&[1], vec![data::<f64>(&x[0])[0] / A]), ()))
    };
    let maps = |_: &P| -> Result<DenseMaps<f64>> {
        DenseMaps::from_host(&t64(&[1, 1], vec![A]), &t64(&[1, 1], vec![-1.0]))
    };
    let f = ImplicitFunction::new(solve, maps);
    let x = vec![t64(&[1], vec![1e-10])];
    let (lin, ()) = f.linearize(&x, &()).unwrap();
    assert!((data::<f64>(lin.y())[0] - 1e290).abs() < 1e276);
    // in range: right values
    let dy = lin.jvp(&[t64(&[1], vec![1e-10])]).unwrap();
    assert!((data::<f64>(&dy)[0] - 1e290).abs() < 1e276);
    // out of range: typed errors naming the output
    let e = lin.jvp(&[t64(&[1], vec![1e10])]).unwrap_err();
    assert!(
        matches!(&e, Error::NonFinite { arg, .. } if arg == "dy[0]"),
        "{e}"
    );
    let e = lin.vjp(&t64(&[1], vec![1e10])).unwrap_err();
    assert!(
        matches!(&e, Error::NonFinite { arg, .. } if arg == "x_bar[0][0]"),
        "{e}"
    );
    // a non-finite tangent given propagates (IEEE), it is not an overflow
    let dy = lin.jvp(&[t64(&[1], vec![f64::INFINITY])]).unwrap();
    assert!(data::<f64>(&dy)[0].is_infinite());
}

/// The linearization as a core rule: inputs of another shape, count or dtype than the
/// solver saw are typed errors naming the input, before anything runs; at the right inputs its
/// output is the solution and its pullback the linearization's own `vjp`, to the bit.
#[test]
fn the_linearization_rule_refuses_other_inputs() {
    use adrules_core::Backend;
    use adrules_core::rule;
    use adrules_strided::Strided;
    let f = linear(
        matrix(3, false, 4),
        Structure::General,
        SolverOptions::default(),
    );
    let x = vec![t64(&[3], vec![1.0, 2.0, 3.0])];
    let (lin, ()) = f.linearize(&x, &()).unwrap();
    let be = Strided;
    let on = |t: HostTensor| be.from_host(t).unwrap();
    let short = on(t64(&[2], vec![1.0, 2.0]));
    let e = rule::rrule(&lin, &be, &[&short], &[true]).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "x[0]"),
        "{e}"
    );
    let single = on(HostTensor::from_vec(&[3], vec![1.0f32, 2.0, 3.0]).unwrap());
    let e = rule::rrule(&lin, &be, &[&single], &[true]).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "x[0]"),
        "{e}"
    );
    let x0 = on(x[0].clone());
    let e = rule::rrule(&lin, &be, &[&x0, &x0], &[true, true]).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, expected: 1, actual: 2 } if arg == "inputs"),
        "{e}"
    );
    let (y, pb) = rule::rrule(&lin, &be, &[&x0], &[true]).unwrap();
    assert_eq!(be.to_host(&y[0]).unwrap().data(), lin.y().data());
    let y_bar = t64(&[3], vec![0.5, -1.0, 2.0]);
    let got = pb.pullback(&[Some(on(y_bar.clone()))]).unwrap();
    let want = lin.vjp(&y_bar).unwrap();
    assert_eq!(
        be.to_host(got[0].as_ref().unwrap()).unwrap().data(),
        want[0].data()
    );
}
