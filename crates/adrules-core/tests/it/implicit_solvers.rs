//! The linear solvers behind the rules: GMRES and CG against faer's dense LU on random
//! systems (every dtype, several right-hand sides, short restarts), warm starts, the ridge
//! shift, the statistics, the automatic choice, one factorization shared by both modes, and
//! a user-defined solver plugged in through the trait.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::implicit::*;
use adrules_core::implicit::{
    AUTO_DENSE_LIMIT, Factorization, ImplicitFunction, ImplicitScalar, LinearMaps, LinearSolver,
    Method, Point, SolveStats, SolverOptions, Structure, System,
};
use adrules_core::{Complex32, Complex64, DType, HostTensor, Result};
use adrules_testing::Rng;
use faer::Mat;
use faer::linalg::solvers::{PartialPivLu, Solve};

/// `c = M·y − x` (so `A = M`, `B = −I`), with counters of the products.
struct Linear<T: ImplicitScalar> {
    mat: Mat<T>,
    structure: Structure,
    dense: bool,
    calls_a: AtomicUsize,
    calls_b: AtomicUsize,
}

impl<T: ImplicitScalar> Linear<T> {
    fn product(&self, adjoint: bool, v: &[T], o: &mut [T], k: usize) {
        let m = self.mat.nrows();
        for c in 0..k {
            for i in 0..m {
                o[c * m + i] = (0..m)
                    .map(|j| {
                        let a = if adjoint {
                            self.mat[(j, i)].conj()
                        } else {
                            self.mat[(i, j)]
                        };
                        a * v[c * m + j]
                    })
                    .sum();
            }
        }
    }
}

impl<T: ImplicitScalar> LinearMaps<T> for Linear<T> {
    fn num_unknowns(&self) -> usize {
        self.mat.nrows()
    }
    fn num_inputs(&self) -> usize {
        self.mat.nrows()
    }
    fn structure(&self) -> Structure {
        self.structure
    }
    fn apply_a(&self, v: &[T], o: &mut [T], k: usize) -> Result<()> {
        self.calls_a.fetch_add(1, Ordering::Relaxed);
        self.product(false, v, o, k);
        Ok(())
    }
    fn apply_a_adjoint(&self, u: &[T], o: &mut [T], k: usize) -> Result<()> {
        self.calls_a.fetch_add(1, Ordering::Relaxed);
        self.product(true, u, o, k);
        Ok(())
    }
    fn apply_b(&self, v: &[T], o: &mut [T], _: usize) -> Result<()> {
        self.calls_b.fetch_add(1, Ordering::Relaxed);
        o.iter_mut().zip(v).for_each(|(o, &v)| *o = -v);
        Ok(())
    }
    fn apply_b_adjoint(&self, u: &[T], o: &mut [T], _: usize) -> Result<()> {
        self.calls_b.fetch_add(1, Ordering::Relaxed);
        o.iter_mut().zip(u).for_each(|(o, &u)| *o = -u);
        Ok(())
    }
    fn dense_a(&self) -> Option<Mat<T>> {
        self.dense.then(|| self.mat.clone())
    }
}

/// A random well-conditioned matrix: `G/√m + 3I` (general), `G·Gᴴ/m + I` (positive
/// definite), or its negative.
fn random_matrix<T: ImplicitScalar>(m: usize, structure: Structure, seed: u64) -> Mat<T> {
    let g = Rng::seed(seed)
        .tensor(&[m, m], T::DTYPE)
        .data()
        .to_c64_vec();
    let s = m as f64;
    let mat = Mat::<Complex64>::from_fn(m, m, |i, j| {
        let d = if i == j { 1.0 } else { 0.0 };
        match structure {
            Structure::General => g[i * m + j] / s.sqrt() + 3.0 * d,
            _ => {
                let h = (0..m)
                    .map(|k| g[i * m + k] * g[j * m + k].conj())
                    .sum::<Complex64>()
                    / s
                    + d;
                if structure == Structure::NegativeDefinite {
                    -h
                } else {
                    h
                }
            }
        }
    });
    Mat::from_fn(m, m, |i, j| T::from_c64_unchecked(mat[(i, j)]))
}

fn maps<T: ImplicitScalar>(mat: Mat<T>, structure: Structure, dense: bool) -> Arc<Linear<T>> {
    Arc::new(Linear {
        mat,
        structure,
        dense,
        calls_a: AtomicUsize::new(0),
        calls_b: AtomicUsize::new(0),
    })
}

/// `M⁻¹·R` (or `M⁻ᴴ·R`) by faer's dense LU, the reference.
fn reference<T: ImplicitScalar>(mat: &Mat<T>, rhs: &[T], k: usize, system: System) -> Vec<T> {
    let m = mat.nrows();
    let mut r = Mat::from_fn(m, k, |i, c| rhs[c * m + i]);
    let lu = PartialPivLu::new(mat.as_ref());
    match system {
        System::Direct => lu.solve_in_place(r.as_mut()),
        System::Adjoint => lu.solve_adjoint_in_place(r.as_mut()),
    }
    (0..k)
        .flat_map(|c| (0..m).map(move |i| (i, c)))
        .map(|(i, c)| r[(i, c)])
        .collect()
}

fn random_block<T: ImplicitScalar>(m: usize, k: usize, seed: u64) -> Vec<T> {
    data::<T>(&Rng::seed(seed).tensor(&[m * k], T::DTYPE))
}

fn to_c64<T: ImplicitScalar>(v: &[T]) -> Vec<Complex64> {
    cv(&tensor(&[v.len()], v.to_vec()))
}

/// Solves with `method` and checks against the dense reference and the reported residuals.
fn check_solver<T: ImplicitScalar>(
    method: Method,
    structure: Structure,
    m: usize,
    restart: usize,
    tol: f64,
) {
    let k = 3;
    let mat = random_matrix::<T>(m, structure, 17);
    let source: Arc<dyn LinearMaps<T>> = maps(mat.clone(), structure, false);
    let options = SolverOptions {
        method,
        restart,
        tolerance: Some(tol),
        ..Default::default()
    };
    let fact = options.factorize(&source).unwrap();
    for system in [System::Direct, System::Adjoint] {
        let rhs = random_block::<T>(m, k, 23);
        let mut x = vec![T::zero(); m * k];
        let stats = fact.solve(system, &rhs, &mut x, k, false).unwrap();
        let label = format!(
            "{} {method:?} {structure:?} {system:?} m={m} restart={restart}",
            T::DTYPE
        );
        assert_eq!(stats.solver, method.name(), "{label}");
        assert_eq!(stats.residuals.len(), k);
        assert!(
            stats.max_residual() <= tol,
            "{label}: {:?}",
            stats.residuals
        );
        if matches!(method, Method::Gmres | Method::Cg) {
            assert!(stats.iterations > 0, "{label}");
        }
        // residuals recomputed here
        let mut ax = vec![T::zero(); m * k];
        match system {
            System::Direct => source.apply_a(&x, &mut ax, k).unwrap(),
            System::Adjoint => source.apply_a_adjoint(&x, &mut ax, k).unwrap(),
        }
        for c in 0..k {
            let r: Vec<Complex64> = to_c64(&rhs[c * m..(c + 1) * m]);
            let a: Vec<Complex64> = to_c64(&ax[c * m..(c + 1) * m]);
            let num = r
                .iter()
                .zip(&a)
                .map(|(r, a)| (r - a).norm_sqr())
                .sum::<f64>()
                .sqrt();
            let den = r.iter().map(|r| r.norm_sqr()).sum::<f64>().sqrt();
            let rel = num / den;
            // equal up to the rounding of the products (a few ε of T)
            let slack = if T::DTYPE.is_double() { 1e-14 } else { 1e-6 };
            assert!(
                (rel - stats.residuals[c]).abs() <= 1e-3 * rel + slack,
                "{label}: {rel} vs {}",
                stats.residuals[c]
            );
        }
        // against faer's dense LU (condition numbers here are below ~10)
        let want = reference(&mat, &rhs, k, system);
        assert_close(&to_c64(&x), &to_c64(&want), 20.0 * tol, 20.0 * tol, &label);
    }
}

#[test]
fn gmres_matches_dense_lu_every_dtype() {
    for restart in [30, 5] {
        check_solver::<f64>(Method::Gmres, Structure::General, 40, restart, 1e-11);
        check_solver::<Complex64>(Method::Gmres, Structure::General, 40, restart, 1e-11);
        check_solver::<f32>(Method::Gmres, Structure::General, 40, restart, 1e-5);
        check_solver::<Complex32>(Method::Gmres, Structure::General, 40, restart, 1e-5);
    }
}

#[test]
fn cg_matches_dense_lu_every_dtype() {
    for structure in [Structure::PositiveDefinite, Structure::NegativeDefinite] {
        check_solver::<f64>(Method::Cg, structure, 40, 30, 1e-11);
        check_solver::<Complex64>(Method::Cg, structure, 40, 30, 1e-11);
        check_solver::<f32>(Method::Cg, structure, 40, 30, 1e-5);
        check_solver::<Complex32>(Method::Cg, structure, 40, 30, 1e-5);
    }
}

#[test]
fn dense_solvers_match_and_report_residuals() {
    check_solver::<f64>(Method::Lu, Structure::General, 40, 30, 1e-12);
    check_solver::<Complex32>(Method::Lu, Structure::General, 40, 30, 1e-5);
    for structure in [Structure::PositiveDefinite, Structure::NegativeDefinite] {
        check_solver::<f64>(Method::Cholesky, structure, 40, 30, 1e-12);
        check_solver::<Complex64>(Method::Cholesky, structure, 40, 30, 1e-12);
    }
}

#[test]
fn warm_start_from_the_solution_needs_no_iteration() {
    let m = 50;
    for (method, structure) in [
        (Method::Gmres, Structure::General),
        (Method::Cg, Structure::PositiveDefinite),
    ] {
        let mat = random_matrix::<f64>(m, structure, 3);
        let source: Arc<dyn LinearMaps<f64>> = maps(mat.clone(), structure, false);
        let fact = SolverOptions::from(method).factorize(&source).unwrap();
        let rhs = random_block::<f64>(m, 2, 4);
        let mut cold = vec![0.0; 2 * m];
        let s_cold = fact
            .solve(System::Direct, &rhs, &mut cold, 2, false)
            .unwrap();
        let mut warm = reference(&mat, &rhs, 2, System::Direct);
        let s_warm = fact
            .solve(System::Direct, &rhs, &mut warm, 2, true)
            .unwrap();
        assert_eq!(s_warm.iterations, 0, "{method:?}");
        assert!(s_cold.iterations > 0);
        // a nearby guess needs fewer iterations than a cold start
        let mut near: Vec<f64> = reference(&mat, &rhs, 2, System::Direct)
            .iter()
            .map(|v| v * (1.0 + 1e-6))
            .collect();
        let s_near = fact
            .solve(System::Direct, &rhs, &mut near, 2, true)
            .unwrap();
        assert!(
            s_near.iterations < s_cold.iterations,
            "{method:?}: {} vs {}",
            s_near.iterations,
            s_cold.iterations
        );
        assert_close(&c(&near), &c(&cold), 1e-9, 1e-9, "warm vs cold");
    }
}

#[test]
fn warm_start_through_the_pullback() {
    let m = 60;
    let mat = random_matrix::<f64>(m, Structure::General, 8);
    let f = linear_function(mat, Structure::General, SolverOptions::from(Method::Gmres));
    let x = vec![Rng::seed(1).tensor(&[m], DType::F64)];
    let (lin, ()) = f.linearize(&x, &()).unwrap();
    let ybar = Rng::seed(2).tensor(&[m], DType::F64);
    let first = lin.vjp_many(std::slice::from_ref(&ybar), None).unwrap();
    let again = lin
        .vjp_many(std::slice::from_ref(&ybar), Some(&first.adjoint))
        .unwrap();
    assert_eq!(again.stats.iterations, 0);
    assert_close(
        &cat(&again.dx[0]),
        &cat(&first.dx[0]),
        1e-12,
        1e-12,
        "warm pullback",
    );
    let dy = lin.jvp_many(std::slice::from_ref(&x), None).unwrap();
    let guess = data::<f64>(&dy.dy[0]);
    assert_eq!(
        lin.jvp_many(std::slice::from_ref(&x), Some(&guess))
            .unwrap()
            .stats
            .iterations,
        0
    );
}

type Function<T> = ImplicitFunction<
    T,
    (),
    (),
    Box<dyn Fn(&[HostTensor], &()) -> Result<(HostTensor, ())>>,
    Box<dyn Fn(&Point<(), ()>) -> Result<Arc<Linear<T>>>>,
>;

/// `y = M⁻¹·x` as an implicit function whose maps are `source` (shared, to read its
/// counters).
fn linear_function_with<T: ImplicitScalar>(
    source: Arc<Linear<T>>,
    options: SolverOptions,
) -> Function<T> {
    let mat = source.mat.clone();
    let solve = move |x: &[HostTensor], _: &()| {
        let xv = data::<T>(&x[0]);
        let y = reference(&mat, &xv, 1, System::Direct);
        Ok((tensor(x[0].dims(), y), ()))
    };
    let conditions = move |_: &Point<(), ()>| Ok(Arc::clone(&source));
    ImplicitFunction::new(
        Box::new(solve) as Box<dyn Fn(&[HostTensor], &()) -> Result<(HostTensor, ())>>,
        Box::new(conditions) as Box<dyn Fn(&Point<(), ()>) -> Result<Arc<Linear<T>>>>,
    )
    .with_linear_solver(options)
}

fn linear_function<T: ImplicitScalar>(
    mat: Mat<T>,
    structure: Structure,
    options: SolverOptions,
) -> Function<T> {
    linear_function_with(maps(mat, structure, false), options)
}

#[test]
fn one_factorization_serves_both_modes_and_block_solves() {
    let m = 20;
    let source = maps(
        random_matrix::<f64>(m, Structure::General, 9),
        Structure::General,
        false,
    );
    let f = linear_function_with(Arc::clone(&source), SolverOptions::from(Method::Lu));
    let x = vec![Rng::seed(1).tensor(&[m], DType::F64)];
    let (lin, ()) = f.linearize(&x, &()).unwrap();
    // building the dense A: one block product with the m unit vectors
    assert_eq!(source.calls_a.load(Ordering::Relaxed), 1);
    let tangents: Vec<Vec<HostTensor>> = (0..5)
        .map(|s| vec![Rng::seed(s).tensor(&[m], DType::F64)])
        .collect();
    let t = lin.jvp_many(&tangents, None).unwrap();
    assert_eq!(t.dy.len(), 5);
    let cotangents: Vec<HostTensor> = (0..4)
        .map(|s| Rng::seed(10 + s).tensor(&[m], DType::F64))
        .collect();
    for _ in 0..3 {
        lin.vjp_many(&cotangents, None).unwrap();
    }
    // no further product with A: the JVP and every VJP reused the one LU factorization
    assert_eq!(source.calls_a.load(Ordering::Relaxed), 1);
    // each block (5 tangents, then 3 × 4 cotangents) is one product with B or Bᴴ
    assert_eq!(source.calls_b.load(Ordering::Relaxed), 4);
}

#[test]
fn ridge_shifts_the_system() {
    let m = 15;
    let lambda = 0.75;
    for method in [Method::Lu, Method::Gmres, Method::Cholesky, Method::Cg] {
        let structure = if matches!(method, Method::Lu | Method::Gmres) {
            Structure::General
        } else {
            Structure::PositiveDefinite
        };
        let mat = random_matrix::<Complex64>(m, structure, 12);
        let shifted = Mat::from_fn(m, m, |i, j| {
            mat[(i, j)]
                + if i == j {
                    Complex64::new(lambda, 0.0)
                } else {
                    Complex64::new(0.0, 0.0)
                }
        });
        let source: Arc<dyn LinearMaps<Complex64>> = maps(mat, structure, false);
        let options = SolverOptions {
            method,
            ridge: lambda,
            tolerance: Some(1e-12),
            ..Default::default()
        };
        let fact = options.factorize(&source).unwrap();
        for system in [System::Direct, System::Adjoint] {
            let rhs = random_block::<Complex64>(m, 2, 5);
            let mut x = vec![Complex64::new(0.0, 0.0); 2 * m];
            let stats = fact.solve(system, &rhs, &mut x, 2, false).unwrap();
            assert!(
                stats.max_residual() <= 1e-11,
                "{method:?}: {:?}",
                stats.residuals
            );
            let want = reference(&shifted, &rhs, 2, system);
            assert_close(
                &x,
                &want,
                1e-10,
                1e-10,
                &format!("{method:?} {system:?} ridge"),
            );
        }
    }
}

#[test]
fn auto_picks_from_structure_and_source() {
    let cases = [
        (Structure::General, true, 10, "lu"),
        (Structure::PositiveDefinite, true, 10, "cholesky"),
        (Structure::NegativeDefinite, false, 10, "cholesky"),
        (Structure::Hermitian, false, 10, "lu"),
        (Structure::General, false, AUTO_DENSE_LIMIT + 50, "gmres"),
        (Structure::Hermitian, false, AUTO_DENSE_LIMIT + 50, "gmres"),
        (
            Structure::PositiveDefinite,
            false,
            AUTO_DENSE_LIMIT + 50,
            "cg",
        ),
        (
            Structure::PositiveDefinite,
            true,
            AUTO_DENSE_LIMIT + 50,
            "cholesky",
        ),
    ];
    for (structure, dense, m, want) in cases {
        let mat = random_matrix::<f64>(
            m,
            if structure == Structure::Hermitian {
                Structure::PositiveDefinite
            } else {
                structure
            },
            1,
        );
        let source: Arc<dyn LinearMaps<f64>> = maps(mat, structure, dense);
        let fact = SolverOptions::default().factorize(&source).unwrap();
        let rhs = random_block::<f64>(m, 1, 2);
        let mut x = vec![0.0; m];
        let stats = fact.solve(System::Direct, &rhs, &mut x, 1, false).unwrap();
        assert_eq!(stats.solver, want, "{structure:?} dense={dense} m={m}");
    }
}

/// A user-defined solver: Jacobi (diagonal) scaling, exact for a diagonal `A`.
struct DiagonalSolver;

struct Diagonal {
    d: Vec<f64>,
}

impl LinearSolver<f64> for DiagonalSolver {
    fn factorize(&self, maps: &Arc<dyn LinearMaps<f64>>) -> Result<Box<dyn Factorization<f64>>> {
        let m = maps.num_unknowns();
        let mut d = vec![0.0; m];
        let ones = vec![1.0; m];
        maps.apply_a(&ones, &mut d, 1)?;
        Ok(Box::new(Diagonal { d }))
    }
}

impl Factorization<f64> for Diagonal {
    fn solve(
        &self,
        _: System,
        rhs: &[f64],
        x: &mut [f64],
        k: usize,
        _: bool,
    ) -> Result<SolveStats> {
        let m = self.d.len();
        for (i, (x, r)) in x.iter_mut().zip(rhs).enumerate() {
            *x = r / self.d[i % m];
        }
        Ok(SolveStats {
            solver: "diagonal",
            iterations: 0,
            residuals: vec![0.0; k],
            failure: None,
        })
    }
}

#[test]
fn a_user_defined_solver_plugs_in() {
    // T1 (y = √x) with the user's diagonal solver
    let solve = |x: &[HostTensor], _: &()| {
        Ok((
            t64(&[3], data::<f64>(&x[0]).iter().map(|v| v.sqrt()).collect()),
            (),
        ))
    };
    let conditions = |p: &Point<(), ()>| {
        let y: Arc<[f64]> = p.y_data::<f64>()?.into();
        Ok(adrules_core::implicit::FnMaps::hermitian(
            3,
            3,
            move |v, o| {
                o.iter_mut()
                    .enumerate()
                    .for_each(|(i, o)| *o = 2.0 * y[i] * v[i])
            },
            |v: &[f64], o: &mut [f64]| o.iter_mut().zip(v).for_each(|(o, v)| *o = -v),
            |u: &[f64], o: &mut [f64]| o.iter_mut().zip(u).for_each(|(o, u)| *o = -u),
        ))
    };
    let f = ImplicitFunction::new(solve, conditions).with_linear_solver(DiagonalSolver);
    let x = [1.0, 4.0, 9.0];
    let (lin, ()) = f.linearize(&[t64(&[3], x.to_vec())], &()).unwrap();
    let t = lin
        .jvp_many(&[[t64(&[3], vec![1.0, 1.0, 1.0])]], None)
        .unwrap();
    assert_eq!(t.stats.solver, "diagonal");
    assert_close(
        &cv(&t.dy[0]),
        &c(&[0.5, 0.25, 1.0 / 6.0]),
        1e-15,
        1e-15,
        "diagonal JVP",
    );
    let xbar = lin.vjp(&t64(&[3], vec![1.0, 1.0, 1.0])).unwrap();
    assert_close(
        &cv(&xbar[0]),
        &c(&[0.5, 0.25, 1.0 / 6.0]),
        1e-15,
        1e-15,
        "diagonal VJP",
    );
}

#[test]
fn linearization_is_send_sync_and_outlives_its_function() {
    fn assert_send_sync<S: Send + Sync>(_: &S) {}
    let lin = {
        let f = linear_function(
            random_matrix::<f64>(8, Structure::General, 1),
            Structure::General,
            SolverOptions::default(),
        );
        f.linearize(&[Rng::seed(1).tensor(&[8], DType::F64)], &())
            .unwrap()
            .0
    };
    assert_send_sync(&lin);
    let ybar = Rng::seed(2).tensor(&[8], DType::F64);
    let handle = {
        let lin = lin.clone();
        let ybar = ybar.clone();
        std::thread::spawn(move || lin.vjp(&ybar).unwrap())
    };
    let there = handle.join().unwrap();
    let here = lin.vjp(&ybar).unwrap();
    assert_eq!(there, here);
    assert_eq!(
        lin.input_dims(),
        &[[8].into_iter().collect::<adrules_core::Dims>()]
    );
}
