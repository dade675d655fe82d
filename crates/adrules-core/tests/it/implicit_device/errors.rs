//! Failures of the device solvers: the iteration limit, singular and non-finite systems, dense methods and invalid options, shapes and dtypes; each the host solver's typed error.

use super::*;

/// The device solve and the host solve fail alike (same variant and argument).
pub(super) fn same_error(device: &Error, host: &Error) {
    match (device, host) {
        (
            Error::NotConverged {
                arg: a,
                iterations: i,
                tolerance: t,
                ..
            },
            Error::NotConverged {
                arg: b,
                iterations: j,
                tolerance: u,
                ..
            },
        ) => assert_eq!((a, i, t), (b, j, u)),
        (Error::Singular { arg: a, .. }, Error::Singular { arg: b, .. })
        | (Error::InvalidArgument { arg: a, .. }, Error::InvalidArgument { arg: b, .. }) => {
            assert_eq!(a, b, "{device} / {host}")
        }
        _ => panic!("device: {device}\nhost: {host}"),
    }
}

/// The error of the device solve (no host transfers on the way).
pub(super) fn device_fails<T: ImplicitScalar>(
    mat: &Mat<T>,
    structure: Structure,
    rhs: &[T],
    options: &SolverOptions,
) -> Error {
    let be = Counting::default();
    let m = mat.nrows();
    let maps = device_maps(&be, mat, structure, minus_identity());
    let rhs_t = upload(&be, &[m], rhs.to_vec());
    be.hook.reset();
    let device = solve_adjoint(&be, &maps, &rhs_t, options).unwrap_err();
    assert_eq!(transfers(&be), (0, 0));
    device
}

/// The error of the device solve, checked to be the host solver's.
pub(super) fn both_fail<T: ImplicitScalar>(
    mat: &Mat<T>,
    structure: Structure,
    rhs: Vec<T>,
    options: &SolverOptions,
) -> Error {
    let device = device_fails(mat, structure, &rhs, options);
    let host = host_solve(mat, structure, options, &rhs).unwrap_err();
    same_error(&device, &host);
    device
}

#[test]
fn the_iteration_limit_is_not_converged() {
    let m = 50;
    let rhs = random_vector::<f64>(m, 43);
    let options = SolverOptions {
        max_iterations: Some(2),
        ..gmres(30)
    };
    let mat = random_matrix::<f64>(m, Structure::General, 47);
    let e = both_fail(&mat, Structure::General, rhs.clone(), &options);
    let Error::NotConverged {
        arg,
        iterations,
        residual,
        tolerance,
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!((arg.as_str(), *iterations, *tolerance), ("GMRES", 2, 1e-10));
    // the same two iterations as the host, hence the same residual
    let Err(Error::NotConverged { residual: host, .. }) =
        host_solve(&mat, Structure::General, &options, &rhs)
    else {
        panic!()
    };
    assert!(
        (residual - host).abs() <= 1e-12 * host,
        "{residual} vs {host}"
    );
    assert!(*residual > 1e-10);

    let options = SolverOptions {
        max_iterations: Some(2),
        ..cg()
    };
    let pd = random_matrix::<Complex64>(m, Structure::PositiveDefinite, 47);
    let rhs = random_vector::<Complex64>(m, 43);
    let e = both_fail(&pd, Structure::PositiveDefinite, rhs, &options);
    assert!(
        matches!(&e, Error::NotConverged { arg, iterations: 2, residual, .. }
            if arg == "CG" && *residual > 1e-10),
        "{e}"
    );
}

#[test]
fn a_zero_matrix_is_singular() {
    let m = 20;
    let zero = Mat::<f64>::zeros(m, m);
    let rhs = random_vector::<f64>(m, 53);
    let e = both_fail(&zero, Structure::General, rhs.clone(), &gmres(30));
    assert!(
        matches!(&e, Error::Singular { arg, .. } if arg == "GMRES"),
        "{e}"
    );
    // The host CG (faer's) divides by the zero curvature and reports the NaN that reaches
    // the map; the device CG checks the curvature, as documented for CG breakdowns.
    let e = device_fails(&zero, Structure::PositiveDefinite, &rhs, &cg());
    assert!(
        matches!(&e, Error::Singular { arg, .. } if arg == "CG"),
        "{e}"
    );
    assert!(host_solve(&zero, Structure::PositiveDefinite, &cg(), &rhs).is_err());
    // A negative-definite tag on a positive-definite matrix: CG's curvature has the wrong sign.
    let pd = random_matrix::<f64>(m, Structure::PositiveDefinite, 59);
    let e = both_fail(&pd, Structure::NegativeDefinite, rhs, &cg());
    assert!(
        matches!(&e, Error::Singular { arg, .. } if arg == "CG"),
        "{e}"
    );
}

#[test]
fn non_finite_products_and_right_hand_sides_are_invalid() {
    let m = 20;
    let mut mat = random_matrix::<Complex64>(m, Structure::PositiveDefinite, 61);
    let rhs = random_vector::<Complex64>(m, 67);
    mat[(3, 5)] = Complex64::new(f64::NAN, 0.0);
    for (structure, options) in [
        (Structure::General, gmres(30)),
        (Structure::PositiveDefinite, cg()),
    ] {
        let e = both_fail(&mat, structure, rhs.clone(), &options);
        assert!(
            matches!(&e, Error::InvalidArgument { arg, .. } if arg == "A = ∂c/∂y"),
            "{e}"
        );
    }
    let mat = random_matrix::<f32>(m, Structure::PositiveDefinite, 61);
    let mut rhs = random_vector::<f32>(m, 67);
    rhs[7] = f32::INFINITY;
    let e = both_fail(&mat, Structure::General, rhs.clone(), &gmres(30));
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "right-hand side"),
        "{e}"
    );
    // The host CG does not check its right-hand side (the map sees the infinity first); the
    // device CG checks it as GMRES does.
    let e = device_fails(&mat, Structure::PositiveDefinite, &rhs, &cg());
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "right-hand side"),
        "{e}"
    );
}

#[test]
fn dense_methods_and_invalid_options_are_rejected() {
    let be = Counting::default();
    let m = 10;
    let mat = random_matrix::<f64>(m, Structure::PositiveDefinite, 71);
    let maps = device_maps(&be, &mat, Structure::PositiveDefinite, minus_identity());
    let rhs = upload(&be, &[m], random_vector::<f64>(m, 73));
    let arg_of = |options: SolverOptions| match solve_adjoint(&be, &maps, &rhs, &options) {
        Err(Error::InvalidArgument { arg, reason }) => (arg, reason),
        other => panic!("{options:?}: {other:?}"),
    };
    for method in [Method::Lu, Method::Cholesky] {
        let (arg, reason) = arg_of(SolverOptions::from(method));
        assert_eq!(arg, "method");
        assert!(reason.contains("host"), "{reason}");
    }
    let invalid = [
        (
            "ridge",
            SolverOptions {
                ridge: f64::NAN,
                ..gmres(30)
            },
        ),
        (
            "tolerance",
            SolverOptions {
                tolerance: Some(0.0),
                ..gmres(30)
            },
        ),
        (
            "tolerance",
            SolverOptions {
                tolerance: Some(f64::INFINITY),
                ..cg()
            },
        ),
        ("restart", gmres(0)),
    ];
    for (want, options) in invalid {
        assert_eq!(arg_of(options.clone()).0, want, "{options:?}");
        // as the host solvers
        let host: Arc<dyn LinearMaps<f64>> =
            Arc::new(DenseMaps::new(mat.clone(), Mat::zeros(m, 1)).unwrap());
        let Err(Error::InvalidArgument { arg, .. }) = options.factorize(&host) else {
            panic!("host accepted {options:?}")
        };
        assert_eq!(arg, want);
    }
    // CG needs a definite tag, as on the host.
    let general = device_maps(&be, &mat, Structure::General, minus_identity());
    let Err(Error::InvalidArgument { arg, .. }) = solve_adjoint(&be, &general, &rhs, &cg()) else {
        panic!("CG on a General tag")
    };
    assert_eq!(arg, "method");
}

#[test]
fn shapes_and_dtypes_are_checked() {
    let be = Counting::default();
    let mat = random_matrix::<f64>(10, Structure::General, 79);
    let maps = device_maps(&be, &mat, Structure::General, minus_identity());
    let short = upload(&be, &[9], random_vector::<f64>(9, 83));
    let e = solve_adjoint(&be, &maps, &short, &gmres(30)).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "rhs"),
        "{e}"
    );
    let e = pullback(&be, &maps, &short, &gmres(30)).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "y_bar"),
        "{e}"
    );
    // a map whose product is not in the dtype of the right-hand side
    struct WrongDtype;
    impl AdjointMaps<Counting> for WrongDtype {
        fn num_unknowns(&self) -> usize {
            3
        }
        fn apply_a_adjoint(&self, _: &Tensor) -> Result<Tensor> {
            Strided.zeros(&[3], DType::F32)
        }
        fn apply_b_adjoint(&self, _: &Tensor) -> Result<Vec<Tensor>> {
            Ok(vec![])
        }
    }
    let rhs = upload(&be, &[3], vec![1.0f64, 2.0, 3.0]);
    let e = solve_adjoint(&be, &WrongDtype, &rhs, &gmres(30)).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "Aᴴ·u"),
        "{e}"
    );
}
