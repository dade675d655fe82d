//! The matrix-free adjoint solves on a backend's tensors (`implicit::device`): against the
//! host solvers on the same random matrices (every dtype, m = 50 and 300, short restarts,
//! CG on both definite tags, the ridge), the errors (iteration limit, singular and NaN maps,
//! dense methods, options, shapes), the pullback with a closure-defined `B`, and — through a
//! backend that counts what it is asked — that no vector crosses to or from the host and
//! that the inner products and map applications are those the documentation states.

use std::cell::Cell;
use std::sync::Arc;

use crate::support::implicit::*;
use adrules_core::implicit::device::{AdjointMaps, pullback, solve_adjoint};
use adrules_core::implicit::{
    DenseMaps, ImplicitFunction, ImplicitScalar, LinearMaps, LinearSolver, Method, Point,
    SolveStats, SolverOptions, Structure, System,
};
use adrules_core::{
    Backend, Complex32, Complex64, Conj, ContractSpec, DType, DynScalar, Error, Permutation, Result,
};
use adrules_strided::{Strided, Tensor};
use adrules_testing::Rng;
use adrules_testing::forwarding::{Counter, Forwarding, Primitive};
use faer::Mat;

mod errors;

// ---------------------------------------------------------------------------------------
// A backend that delegates to strided and counts host transfers and inner products.

/// The strided backend, counting the calls of each primitive.
type Counting = Forwarding<Strided, Counter>;

/// `(to_host, from_host)` calls of `be` since its last reset.
fn transfers(be: &Counting) -> (usize, usize) {
    be.hook.transfers()
}

/// Inner products `be` computed since its last reset.
fn inner_calls(be: &Counting) -> usize {
    be.hook.count(Primitive::Inner)
}

fn bump(c: &Cell<usize>) {
    c.set(c.get() + 1);
}

// ---------------------------------------------------------------------------------------
// Maps on the backend: a dense A applied by `contract`, B by a closure.

type BAdjoint = Box<dyn Fn(&Counting, &Tensor) -> Result<Vec<Tensor>>>;

struct DeviceMaps {
    be: Counting,
    /// `A`, row-major `[m, m]`
    a: Tensor,
    m: usize,
    structure: Structure,
    b_adjoint: BAdjoint,
    applications: Cell<usize>,
}

/// `out = op(M)·u` on the backend, with `spec` naming M's axes (`i` the contracted one).
fn contract_conj(
    be: &Counting,
    mat: &Tensor,
    u: &Tensor,
    spec: &str,
    out_dims: &[usize],
) -> Result<Tensor> {
    let dtype = be.dtype(u);
    let (a, c) = spec.split_once(',').expect("spec a,c");
    let mut out = be.zeros(out_dims, dtype)?;
    be.contract(
        &mut out,
        mat,
        u,
        &ContractSpec::from_labels(a, "i", c)?,
        Conj::Yes,
        Conj::No,
        DynScalar::one(dtype),
        DynScalar::zero(dtype),
    )?;
    Ok(out)
}

impl AdjointMaps<Counting> for DeviceMaps {
    fn num_unknowns(&self) -> usize {
        self.m
    }
    fn structure(&self) -> Structure {
        self.structure
    }
    fn apply_a_adjoint(&self, u: &Tensor) -> Result<Tensor> {
        bump(&self.applications);
        // (Aᴴ·u)_j = Σ_i conj(A_ij)·u_i
        contract_conj(&self.be, &self.a, u, "ij,j", &[self.m])
    }
    fn apply_b_adjoint(&self, u: &Tensor) -> Result<Vec<Tensor>> {
        (self.b_adjoint)(&self.be, u)
    }
}

/// `B = −I`: `Bᴴ·u = −u`.
fn minus_identity() -> BAdjoint {
    Box::new(|be: &Counting, u: &Tensor| {
        let dtype = be.dtype(u);
        let mut out = be.zeros(&be.dims(u), dtype)?;
        be.add(
            &mut out,
            u,
            &Permutation::identity(1),
            Conj::No,
            DynScalar::from_c64(Complex64::new(-1.0, 0.0), dtype),
            DynScalar::zero(dtype),
        )?;
        Ok(vec![out])
    })
}

fn upload<T: ImplicitScalar>(be: &Counting, dims: &[usize], v: Vec<T>) -> Tensor {
    be.from_host(tensor(dims, v)).unwrap()
}

fn download<T: ImplicitScalar>(be: &Counting, t: &Tensor) -> Vec<T> {
    data::<T>(&be.to_host(t).unwrap())
}

fn device_maps<T: ImplicitScalar>(
    be: &Counting,
    mat: &Mat<T>,
    structure: Structure,
    b_adjoint: BAdjoint,
) -> DeviceMaps {
    let m = mat.nrows();
    let rows: Vec<T> = (0..m * m).map(|k| mat[(k / m, k % m)]).collect();
    DeviceMaps {
        be: be.clone(),
        a: upload(be, &[m, m], rows),
        m,
        structure,
        b_adjoint,
        applications: Cell::new(0),
    }
}

// ---------------------------------------------------------------------------------------
// Data, the host reference and the documented counts.

/// A random well-conditioned matrix: `G/√m + 3I` (general), `G·Gᴴ/m + I` (positive
/// definite), or its negative (as in `implicit_solvers.rs`).
fn random_matrix<T: ImplicitScalar>(m: usize, structure: Structure, seed: u64) -> Mat<T> {
    let g = Rng::seed(seed)
        .tensor(&[m, m], T::DTYPE)
        .data()
        .to_c64_vec();
    let s = m as f64;
    let gh = match structure {
        Structure::General => None,
        _ => {
            let g = Mat::<Complex64>::from_fn(m, m, |i, j| g[i * m + j]);
            Some(&g * g.adjoint())
        }
    };
    Mat::from_fn(m, m, |i, j| {
        let d = if i == j { 1.0 } else { 0.0 };
        let v = match &gh {
            None => g[i * m + j] / s.sqrt() + 3.0 * d,
            Some(h) => {
                let h = h[(i, j)] / s + d;
                if structure == Structure::NegativeDefinite {
                    -h
                } else {
                    h
                }
            }
        };
        T::from_c64_unchecked(v)
    })
}

fn random_vector<T: ImplicitScalar>(m: usize, seed: u64) -> Vec<T> {
    data::<T>(&Rng::seed(seed).tensor(&[m], T::DTYPE))
}

fn c64s<T: ImplicitScalar>(v: &[T]) -> Vec<Complex64> {
    cv(&tensor(&[v.len()], v.to_vec()))
}

/// `‖a − b‖ / ‖b‖`.
fn rel_diff<T: ImplicitScalar>(a: &[T], b: &[T]) -> f64 {
    let (a, b) = (c64s(a), c64s(b));
    let num: f64 = a.iter().zip(&b).map(|(a, b)| (a - b).norm_sqr()).sum();
    let den: f64 = b.iter().map(|b| b.norm_sqr()).sum();
    (num / den).sqrt()
}

/// `‖r − (A + λI)ᴴ·x‖ / ‖r‖` on the host, in `Complex64`.
fn host_residual<T: ImplicitScalar>(mat: &Mat<T>, ridge: f64, rhs: &[T], x: &[T]) -> f64 {
    let m = mat.nrows();
    let (r, x) = (c64s(rhs), c64s(x));
    let a = Mat::<Complex64>::from_fn(m, m, |i, j| c64s(&[mat[(i, j)]])[0]);
    let num: f64 = (0..m)
        .map(|j| {
            let ax: Complex64 =
                (0..m).map(|i| a[(i, j)].conj() * x[i]).sum::<Complex64>() + ridge * x[j];
            (r[j] - ax).norm_sqr()
        })
        .sum();
    let den: f64 = r.iter().map(|r| r.norm_sqr()).sum();
    (num / den).sqrt()
}

/// The host solver (`SolverOptions` on `DenseMaps`) on the adjoint system.
fn host_solve<T: ImplicitScalar>(
    mat: &Mat<T>,
    structure: Structure,
    options: &SolverOptions,
    rhs: &[T],
) -> Result<(Vec<T>, SolveStats)> {
    let m = mat.nrows();
    let maps: Arc<dyn LinearMaps<T>> =
        Arc::new(DenseMaps::new(mat.clone(), Mat::<T>::zeros(m, 1))?.with_structure(structure));
    let fact = options.factorize(&maps)?;
    let mut x = vec![T::zero(); m];
    let stats = fact.solve(System::Adjoint, rhs, &mut x, 1, false)?;
    Ok((x, stats))
}

/// `(inner products, map applications)` of a GMRES solve that ran `iterations` iterations
/// in full cycles of `p` but the last, as documented: `1 + Σ (u² + 3u + 1)`, `Σ (u + 1)`.
fn gmres_counts(iterations: usize, p: usize) -> (usize, usize) {
    let (mut left, mut inner, mut applications) = (iterations, 1, 0);
    while left > 0 {
        let u = left.min(p);
        inner += u * u + 3 * u + 1;
        applications += u + 1;
        left -= u;
    }
    (inner, applications)
}

/// `(inner products, map applications)` of a CG solve of `k` iterations: `2k + 2`, `k + 1`.
fn cg_counts(k: usize) -> (usize, usize) {
    (2 * k + 2, k + 1)
}

/// Relative tolerance of the comparison with the host solvers.
fn comparison_tolerance<T: ImplicitScalar>() -> f64 {
    if T::DTYPE.is_double() { 1e-9 } else { 1e-4 }
}

/// Solves on the backend and on the host with the same options; checks the solution, the
/// residual, the statistics, that no vector crossed to or from the host, and the counts.
fn check_against_host<T: ImplicitScalar>(
    m: usize,
    structure: Structure,
    options: SolverOptions,
    seed: u64,
) -> SolveStats {
    let label = format!("{} m={m} {structure:?} {options:?}", T::DTYPE);
    let be = Counting::default();
    let mat = random_matrix::<T>(m, structure, seed);
    let rhs = random_vector::<T>(m, seed + 1);
    let maps = device_maps(&be, &mat, structure, minus_identity());
    let rhs_t = upload(&be, &[m], rhs.clone());

    be.hook.reset();
    let (u, stats) = solve_adjoint(&be, &maps, &rhs_t, &options).unwrap();
    assert_eq!(
        transfers(&be),
        (0, 0),
        "{label}: host transfers during the solve"
    );
    let counts = (inner_calls(&be), maps.applications.get());
    let p = options.restart.min(m);
    let expected = match stats.solver {
        "gmres" => gmres_counts(stats.iterations, p),
        "cg" => cg_counts(stats.iterations),
        other => panic!("{label}: solver {other}"),
    };
    assert_eq!(
        counts, expected,
        "{label}: (inner, applications), {stats:?}"
    );

    let u = download::<T>(&be, &u);
    let tolerance = options
        .tolerance
        .unwrap_or(if T::DTYPE.is_double() { 1e-10 } else { 1e-5 });
    assert_eq!(stats.residuals.len(), 1);
    assert!(stats.residuals[0] <= tolerance, "{label}: {stats:?}");
    assert!(stats.failure.is_none());
    assert!(stats.iterations > 0);
    // The reported residual is the true one (up to rounding in T).
    let recomputed = host_residual(&mat, options.ridge, &rhs, &u);
    let eps = if T::DTYPE.is_double() { 1e-14 } else { 1e-5 };
    assert!(
        (recomputed - stats.residuals[0]).abs() <= eps * (1.0 + m as f64).sqrt(),
        "{label}: reported {} recomputed {recomputed}",
        stats.residuals[0]
    );

    let host_method = match options.method {
        Method::Auto if structure.is_definite() => Method::Cg,
        Method::Auto => Method::Gmres,
        other => other,
    };
    let host_options = SolverOptions {
        method: host_method,
        ..options.clone()
    };
    let (x, host_stats) = host_solve(&mat, structure, &host_options, &rhs).unwrap();
    assert_eq!(stats.solver, host_stats.solver, "{label}");
    let diff = rel_diff(&u, &x);
    assert!(
        diff <= comparison_tolerance::<T>(),
        "{label}: ‖u − u_host‖/‖u_host‖ = {diff:e}"
    );
    if stats.solver == "gmres" {
        // the same algorithm: the same iterations up to rounding
        assert!(
            stats.iterations.abs_diff(host_stats.iterations) <= 1,
            "{label}: {} vs host {}",
            stats.iterations,
            host_stats.iterations
        );
    }
    stats
}

fn gmres(restart: usize) -> SolverOptions {
    SolverOptions {
        method: Method::Gmres,
        restart,
        ..Default::default()
    }
}

fn cg() -> SolverOptions {
    SolverOptions::from(Method::Cg)
}

// ---------------------------------------------------------------------------------------
// Agreement with the host solvers.

fn gmres_in<T: ImplicitScalar>() {
    for m in [50, 300] {
        let stats = check_against_host::<T>(m, Structure::General, gmres(30), 3);
        assert_eq!(stats.solver, "gmres");
    }
}

#[test]
fn gmres_matches_the_host_solver_in_every_dtype() {
    gmres_in::<f64>();
    gmres_in::<Complex64>();
    gmres_in::<f32>();
    gmres_in::<Complex32>();
}

#[test]
fn gmres_converges_through_restarts() {
    for m in [50, 300] {
        for restart in [10, 4] {
            let s = check_against_host::<f64>(m, Structure::General, gmres(restart), 5);
            assert!(s.iterations > restart, "m={m} restart={restart}: {s:?}");
            let s = check_against_host::<Complex64>(m, Structure::General, gmres(restart), 7);
            assert!(s.iterations > restart, "m={m} restart={restart}: {s:?}");
        }
        // 32-bit data reaches its tolerance (1e-5) in about 10 iterations
        for restart in [5, 3] {
            let s = check_against_host::<f32>(m, Structure::General, gmres(restart), 9);
            assert!(s.iterations > restart, "m={m} restart={restart}: {s:?}");
        }
    }
}

/// A restart longer than m is capped at m (here m = 8 < 30).
#[test]
fn gmres_restart_is_capped_at_m() {
    let s = check_against_host::<f64>(8, Structure::General, gmres(30), 11);
    assert!(s.iterations <= 8, "{s:?}");
}

fn cg_in<T: ImplicitScalar>() {
    for structure in [Structure::PositiveDefinite, Structure::NegativeDefinite] {
        for m in [50, 300] {
            let s = check_against_host::<T>(m, structure, cg(), 13);
            assert_eq!(s.solver, "cg");
        }
    }
}

#[test]
fn cg_on_both_definite_tags_matches_the_host_solver() {
    cg_in::<f64>();
    cg_in::<Complex64>();
    cg_in::<f32>();
    cg_in::<Complex32>();
}

/// `Auto` is CG for a definite tag and GMRES otherwise — whatever m (the host would pick a
/// dense factorization for m ≤ 200).
#[test]
fn auto_picks_cg_or_gmres_from_the_tag() {
    let auto = SolverOptions::default();
    for (structure, name) in [
        (Structure::General, "gmres"),
        (Structure::Hermitian, "gmres"),
        (Structure::PositiveDefinite, "cg"),
        (Structure::NegativeDefinite, "cg"),
    ] {
        let s = check_against_host::<f64>(50, structure, auto.clone(), 17);
        assert_eq!(s.solver, name, "{structure:?}");
    }
}

#[test]
fn the_ridge_shifts_the_system() {
    let with = |options: SolverOptions, ridge| SolverOptions { ridge, ..options };
    for m in [50, 300] {
        check_against_host::<f64>(m, Structure::General, with(gmres(10), 0.7), 19);
        check_against_host::<Complex64>(m, Structure::General, with(gmres(30), -0.4), 19);
        check_against_host::<f64>(m, Structure::PositiveDefinite, with(cg(), 0.5), 19);
        check_against_host::<Complex64>(m, Structure::NegativeDefinite, with(cg(), -0.5), 19);
        check_against_host::<f32>(m, Structure::NegativeDefinite, with(cg(), -0.5), 19);
    }
    // The ridge changes the solution: (A + λI)ᴴ·u = r is not Aᴴ·u = r.
    let be = Counting::default();
    let mat = random_matrix::<f64>(50, Structure::General, 23);
    let maps = device_maps(&be, &mat, Structure::General, minus_identity());
    let rhs = upload(&be, &[50], random_vector::<f64>(50, 29));
    let (u0, _) = solve_adjoint(&be, &maps, &rhs, &gmres(30)).unwrap();
    let (u1, _) = solve_adjoint(&be, &maps, &rhs, &with(gmres(30), 1.0)).unwrap();
    let (u0, u1) = (download::<f64>(&be, &u0), download::<f64>(&be, &u1));
    assert!(rel_diff(&u1, &u0) > 1e-3);
}

/// Every iteration count of GMRES and CG (the iteration limit cuts the solve short): no
/// transfers, and the documented numbers of inner products and applications.
#[test]
fn no_vector_crosses_to_the_host_at_any_iteration_count() {
    let be = Counting::default();
    let m = 60;
    let mat = random_matrix::<Complex64>(m, Structure::General, 31);
    let pd = random_matrix::<Complex64>(m, Structure::PositiveDefinite, 31);
    let general = device_maps(&be, &mat, Structure::General, minus_identity());
    let definite = device_maps(&be, &pd, Structure::PositiveDefinite, minus_identity());
    let rhs = upload(&be, &[m], random_vector::<Complex64>(m, 37));
    for max in 1..=25 {
        for restart in [1, 3, 7, 30] {
            let options = SolverOptions {
                max_iterations: Some(max),
                ..gmres(restart)
            };
            be.hook.reset();
            general.applications.set(0);
            let result = solve_adjoint(&be, &general, &rhs, &options);
            assert_eq!(transfers(&be), (0, 0), "gmres max={max} restart={restart}");
            let iterations = match &result {
                Ok((_, s)) => s.iterations,
                Err(Error::NotConverged { iterations, .. }) => *iterations,
                Err(e) => panic!("{e}"),
            };
            assert!(iterations <= max);
            assert_eq!(
                (inner_calls(&be), general.applications.get()),
                gmres_counts(iterations, restart),
                "gmres max={max} restart={restart}: {result:?}"
            );
        }
        let options = SolverOptions {
            max_iterations: Some(max),
            ..cg()
        };
        be.hook.reset();
        definite.applications.set(0);
        let result = solve_adjoint(&be, &definite, &rhs, &options);
        assert_eq!(transfers(&be), (0, 0), "cg max={max}");
        let iterations = match &result {
            Ok((_, s)) => s.iterations,
            Err(Error::NotConverged { iterations, .. }) => *iterations,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            (inner_calls(&be), definite.applications.get()),
            cg_counts(iterations),
            "cg max={max}: {result:?}"
        );
    }
}

#[test]
fn a_zero_right_hand_side_gives_zero_at_once() {
    for options in [gmres(30), cg()] {
        let be = Counting::default();
        let mat = random_matrix::<f64>(20, Structure::PositiveDefinite, 41);
        let maps = device_maps(&be, &mat, Structure::PositiveDefinite, minus_identity());
        let rhs = upload(&be, &[20], vec![0.0f64; 20]);
        be.hook.reset();
        let (u, stats) = solve_adjoint(&be, &maps, &rhs, &options).unwrap();
        assert_eq!(transfers(&be), (0, 0));
        assert_eq!((inner_calls(&be), maps.applications.get()), (1, 0));
        assert_eq!(stats.iterations, 0);
        assert_eq!(stats.residuals, vec![0.0]);
        assert_eq!(stats.solver, options.method.name());
        assert_eq!(download::<f64>(&be, &u), vec![0.0; 20]);
    }
}

/// A map that returns its input (`A = I`, `u.clone()`): the solver does not trip over the
/// shared storage (strided refuses an update of a tensor from itself).
#[test]
fn a_map_may_return_its_input() {
    struct Identity;
    impl AdjointMaps<Counting> for Identity {
        fn num_unknowns(&self) -> usize {
            5
        }
        fn structure(&self) -> Structure {
            Structure::PositiveDefinite
        }
        fn apply_a_adjoint(&self, u: &Tensor) -> Result<Tensor> {
            Ok(u.clone())
        }
        fn apply_b_adjoint(&self, u: &Tensor) -> Result<Vec<Tensor>> {
            Ok(vec![u.clone()])
        }
    }
    let be = Counting::default();
    let r = vec![1.0, -2.0, 0.5, 3.0, 0.25];
    let rhs = upload(&be, &[5], r.clone());
    for (options, ridge) in [(gmres(30), 0.0), (gmres(30), 1.0), (cg(), 0.0), (cg(), 3.0)] {
        let options = SolverOptions { ridge, ..options };
        let (u, stats) = solve_adjoint(&be, &Identity, &rhs, &options).unwrap();
        let u = download::<f64>(&be, &u);
        let want: Vec<f64> = r.iter().map(|r| r / (1.0 + ridge)).collect();
        assert!(rel_diff(&u, &want) < 1e-14, "{options:?}: {u:?}");
        assert_eq!(stats.iterations, 1, "{options:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Errors, as the host solvers report them.

// ---------------------------------------------------------------------------------------
// The pullback.

/// `c = A·y + B₀·x₀ + B₁·x₁` with `x₀` of shape `[m]` (`B₀ = diag(d)`) and `x₁` of shape
/// `[2, 3]` (`B₁` dense, `m×6`): `x̄ = Bᴴ·u` with `Aᴴ·u = −ȳ`, against the host
/// `ImplicitFunction` on `DenseMaps` of the same `A` and `B = [B₀ | B₁]`.
fn pullback_in<T: ImplicitScalar>(m: usize, structure: Structure, options: SolverOptions) {
    let be = Counting::default();
    let mat = random_matrix::<T>(m, structure, 89);
    let d = random_vector::<T>(m, 97);
    let b1 = data::<T>(&Rng::seed(101).tensor(&[m, 2, 3], T::DTYPE));
    let d_t = upload(&be, &[m], d.clone());
    let b1_t = upload(&be, &[m, 2, 3], b1.clone());
    let b_adjoint: BAdjoint = Box::new(move |be: &Counting, u: &Tensor| {
        let dtype = be.dtype(u);
        // (B₀ᴴ·u)_i = conj(d_i)·u_i
        let mut x0 = be.zeros(&[be.dims(u)[0]], dtype)?;
        be.contract(
            &mut x0,
            &d_t,
            u,
            &ContractSpec::from_labels("i", "i", "i")?,
            Conj::Yes,
            Conj::No,
            DynScalar::one(dtype),
            DynScalar::zero(dtype),
        )?;
        // (B₁ᴴ·u)_jk = Σ_i conj(B₁[i, j, k])·u_i
        let x1 = contract_conj(be, &b1_t, u, "ijk,jk", &[2, 3])?;
        Ok(vec![x0, x1])
    });
    let maps = device_maps(&be, &mat, structure, b_adjoint);
    let y_bar = random_vector::<T>(m, 103);
    let y_bar_t = upload(&be, &[m], y_bar.clone());

    be.hook.reset();
    let (x_bar, stats) = pullback(&be, &maps, &y_bar_t, &options).unwrap();
    assert_eq!(transfers(&be), (0, 0));
    assert_eq!(x_bar.len(), 2);
    assert_eq!(be.dims(&x_bar[0]).as_slice(), [m]);
    assert_eq!(be.dims(&x_bar[1]).as_slice(), [2, 3]);

    let b = Mat::<T>::from_fn(m, m + 6, |i, j| {
        if j < m {
            if i == j { d[i] } else { T::zero() }
        } else {
            b1[i * 6 + (j - m)]
        }
    });
    let host_method = match options.method {
        Method::Auto if structure.is_definite() => Method::Cg,
        Method::Auto => Method::Gmres,
        other => other,
    };
    let (a, bb) = (mat.clone(), b.clone());
    let f = ImplicitFunction::from_conditions(move |_: &Point<'_, (), ()>| {
        Ok(DenseMaps::new(a.clone(), bb.clone())?.with_structure(structure))
    })
    .with_linear_solver(SolverOptions {
        method: host_method,
        ..options.clone()
    });
    let x = [
        tensor(&[m], vec![T::zero(); m]),
        tensor(&[2, 3], vec![T::zero(); 6]),
    ];
    let lin = f
        .linearize_at(&x, tensor(&[m], vec![T::zero(); m]), &(), &())
        .unwrap();
    let want = lin.vjp(&tensor(&[m], y_bar)).unwrap();
    for (k, (got, want)) in x_bar.iter().zip(&want).enumerate() {
        let got = download::<T>(&be, got);
        let diff = rel_diff(&got, &data::<T>(want));
        assert!(
            diff <= comparison_tolerance::<T>(),
            "{} x̄[{k}]: {diff:e}",
            T::DTYPE
        );
    }
    assert!(stats.max_residual() <= 1e-5, "{stats:?}");
}

#[test]
fn the_pullback_is_b_adjoint_of_the_adjoint_solution() {
    pullback_in::<f64>(50, Structure::General, gmres(10));
    pullback_in::<Complex64>(50, Structure::General, gmres(30));
    pullback_in::<Complex64>(300, Structure::PositiveDefinite, cg());
    pullback_in::<f64>(300, Structure::NegativeDefinite, SolverOptions::default());
    pullback_in::<f32>(50, Structure::General, gmres(30));
    pullback_in::<Complex32>(50, Structure::PositiveDefinite, cg());
}
