//! Oracle replay of `solve.jsonl` (in `adrules-testing`'s `oracles/`): `y = solve(a, b)`
//! (batched `a·y = b`, `b` a vector or a matrix) as an implicit function of `x = (a, b)` with conditions
//! `c = a·y − b`. Tangents and cotangents with respect to both `a` and `b`, all four dtypes,
//! every batch shape including zero-size batches, with a matrix-free and a dense source of
//! the maps and with LU and GMRES. The solver refuses to run twice.
//!
//! Each result is checked twice: against the case's own tolerance, and against a tight
//! tolerance of our own. The file's tolerances for `float32` (atol 1, rtol 10) and
//! `complex64` (atol 10, rtol 10) are so loose that they cannot catch a bug (a zero
//! gradient passes them); the tight check is normwise,
//! `‖got − ref‖ ≤ rtol·κ·‖ref‖` with `κ` the largest condition number of the batch's
//! matrices (the references are PyTorch's, computed in the case's precision, so both sides
//! carry an error of order `κ·ε`) and `rtol = 1e-5` for 32-bit and `1e-11` for 64-bit data.
//! Measured worst `error/κ`: 4.2e-7 (f32, c32), 1.2e-14 (f64), 1.6e-15 (c64).

use std::sync::Arc;

use crate::support::implicit::*;
use adrules_core::implicit::{
    DenseMaps, FnMaps, ImplicitFunction, ImplicitScalar, LinearMaps, Method, Point, SolverOptions,
};
use adrules_core::{Complex32, Complex64, DType, HostTensor, Result};
use adrules_testing::Value;
use adrules_testing::oracle::{OracleCase, load, oracle_dir};
use faer::Mat;

/// Matrix-free maps of `c = a·y − b`: `A·V = a·V`, `Aᴴ·U = aᴴ·U`, `B·(da, db) = da·y − db`,
/// `Bᴴ·U = (U·yᴴ, −U)`, batch by batch.
fn matrix_free<T: ImplicitScalar>(p: &Point<(), ()>) -> Result<FnMaps<T>> {
    let l = Layout::of(&p.x[0], &p.x[1]);
    let (sa, sy) = l.sizes();
    let a: Arc<[T]> = p.x_data::<T>(0)?.into();
    let y: Arc<[T]> = p.y_data::<T>()?.into();
    let (a2, y2) = (Arc::clone(&a), Arc::clone(&y));
    let (m, na) = (l.nb * sy, l.nb * sa);
    let (n, k) = (l.n, l.k);
    Ok(FnMaps::<T>::new(
        m,
        na + m,
        move |v, o| {
            for bt in 0..l.nb {
                for i in 0..n {
                    for c in 0..k {
                        o[bt * sy + i * k + c] = (0..n)
                            .map(|q| a[bt * sa + i * n + q] * v[bt * sy + q * k + c])
                            .sum();
                    }
                }
            }
        },
        move |u, o| {
            for bt in 0..l.nb {
                for q in 0..n {
                    for c in 0..k {
                        o[bt * sy + q * k + c] = (0..n)
                            .map(|i| a2[bt * sa + i * n + q].conj() * u[bt * sy + i * k + c])
                            .sum();
                    }
                }
            }
        },
        move |v, o| {
            let (da, db) = v.split_at(na);
            for bt in 0..l.nb {
                for i in 0..n {
                    for c in 0..k {
                        let r = bt * sy + i * k + c;
                        o[r] = (0..n)
                            .map(|q| da[bt * sa + i * n + q] * y[bt * sy + q * k + c])
                            .sum::<T>()
                            - db[r];
                    }
                }
            }
        },
        move |u, o| {
            let (abar, bbar) = o.split_at_mut(na);
            for bt in 0..l.nb {
                for i in 0..n {
                    for q in 0..n {
                        abar[bt * sa + i * n + q] = (0..k)
                            .map(|c| u[bt * sy + i * k + c] * y2[bt * sy + q * k + c].conj())
                            .sum();
                    }
                }
            }
            bbar.iter_mut().zip(u).for_each(|(o, &u)| *o = -u);
        },
    ))
}

/// The same maps as dense Jacobians (independent formulas: entries of `∂c/∂y`, `∂c/∂x`).
fn dense<T: ImplicitScalar>(p: &Point<(), ()>) -> Result<DenseMaps<T>> {
    let l = Layout::of(&p.x[0], &p.x[1]);
    let (sa, sy) = l.sizes();
    let (a, y) = (p.x_data::<T>(0)?, p.y_data::<T>()?);
    let (m, na, n, k) = (l.nb * sy, l.nb * sa, l.n, l.k);
    // row of condition (bt, i, c) ↔ bt·sy + i·k + c
    let mut am = Mat::<T>::zeros(m, m);
    let mut bm = Mat::<T>::zeros(m, na + m);
    for bt in 0..l.nb {
        for i in 0..n {
            for c in 0..k {
                let row = bt * sy + i * k + c;
                for q in 0..n {
                    am[(row, bt * sy + q * k + c)] = a[bt * sa + i * n + q];
                    bm[(row, bt * sa + i * n + q)] = y[bt * sy + q * k + c];
                }
                bm[(row, na + row)] = -T::one();
            }
        }
    }
    DenseMaps::new(am, bm)
}

/// Largest 2-norm condition number of the batch's matrices (1 for an empty batch).
fn condition(case: &OracleCase) -> f64 {
    let a = &case.inputs["a"];
    let l = Layout::of(a, &case.inputs["b"]);
    let v = a.data().to_c64_vec();
    (0..l.nb)
        .map(|bt| {
            let m = Mat::<Complex64>::from_fn(l.n, l.n, |i, q| v[bt * l.n * l.n + i * l.n + q]);
            let s = m.singular_values().expect("svd");
            if s.is_empty() {
                1.0
            } else {
                s[0] / s[s.len() - 1]
            }
        })
        .fold(1.0, f64::max)
}

fn norm(v: &[Complex64]) -> f64 {
    v.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt()
}

/// Normwise relative error, and the tight check.
fn tight(got: &HostTensor, want: &HostTensor, bound: f64, what: &str) -> f64 {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    let (g, w) = (cv(got), cv(want));
    let diff: Vec<Complex64> = g.iter().zip(&w).map(|(g, w)| g - w).collect();
    let err = norm(&diff) / norm(&w).max(f64::MIN_POSITIVE);
    assert!(
        norm(&diff) <= bound * norm(&w),
        "{what}: normwise error {err:e} > tight bound {bound:e}"
    );
    if norm(&w) > 0.0 { err } else { 0.0 }
}

fn replay<T: ImplicitScalar>(case: &OracleCase) -> f64 {
    let kappa = condition(case);
    let rtol = if T::DTYPE.is_double() { 1e-11 } else { 1e-5 };
    let bound = rtol * kappa;
    let x = vec![case.inputs["a"].clone(), case.inputs["b"].clone()];
    let mut worst = 0.0f64;
    for method in [Method::Lu, Method::Gmres] {
        // GMRES to a residual well below the check (the default is 1e-5 for 32-bit data).
        let options = SolverOptions {
            method,
            tolerance: Some(if T::DTYPE.is_double() { 1e-13 } else { 1e-6 }),
            ..Default::default()
        };
        for src in ["matrix-free", "dense"] {
            let label = format!("{} / {src} / {method:?} (κ = {kappa:.1})", case.id);
            let (solver, calls) = refusing(solve_batched::<T>);
            let conditions = move |p: &Point<(), ()>| -> Result<Box<dyn LinearMaps<T>>> {
                Ok(if src == "dense" {
                    Box::new(dense::<T>(p)?)
                } else {
                    Box::new(matrix_free::<T>(p)?)
                })
            };
            let f = ImplicitFunction::new(solver, conditions).with_linear_solver(options.clone());
            let (lin, ()) = f
                .linearize(&x, &())
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            for probe in &case.probes {
                let dx = [probe.direction["a"].clone(), probe.direction["b"].clone()];
                let t = lin
                    .jvp_many(&[&dx[..]], None)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                let dy = &t.dy[0];
                let r = case
                    .tolerance
                    .ratio(
                        &Value::Tensor(dy.clone()),
                        &Value::Tensor(probe.jvp.clone()),
                        "jvp",
                    )
                    .unwrap();
                assert!(r <= 1.0, "{label}: JVP outside the case's tolerance ({r})");
                worst = worst.max(tight(dy, &probe.jvp, bound, &format!("{label}: JVP")));
                let xbar = lin
                    .vjp(&probe.cotangent)
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                for (name, got) in ["a", "b"].iter().zip(&xbar) {
                    let want = &probe.vjp[*name];
                    let r = case
                        .tolerance
                        .ratio(
                            &Value::Tensor(got.clone()),
                            &Value::Tensor(want.clone()),
                            name,
                        )
                        .unwrap();
                    assert!(
                        r <= 1.0,
                        "{label}: VJP {name} outside the case's tolerance ({r})"
                    );
                    worst = worst.max(tight(got, want, bound, &format!("{label}: VJP {name}")));
                }
            }
            assert_eq!(calls.get(), 1, "{label}: the solver ran once");
        }
    }
    worst / kappa
}

#[test]
fn solve_oracle_all_dtypes_all_batch_shapes() {
    let dir = oracle_dir();
    let cases = load(&dir.join("solve.jsonl")).unwrap();
    assert_eq!(cases.len(), 96);
    let mut worst = [0.0f64; 4];
    let mut counts = [0usize; 4];
    for case in &cases {
        assert_eq!(case.op, "solve");
        let d = DType::ALL.iter().position(|&d| d == case.dtype).unwrap();
        counts[d] += 1;
        let w = match case.dtype {
            DType::F32 => replay::<f32>(case),
            DType::F64 => replay::<f64>(case),
            DType::C32 => replay::<Complex32>(case),
            DType::C64 => replay::<Complex64>(case),
        };
        worst[d] = worst[d].max(w);
    }
    assert_eq!(counts, [24; 4], "every dtype is replayed");
    for (d, w) in DType::ALL.iter().zip(worst) {
        println!("{d}: worst normwise error / κ = {w:.2e}");
    }
}

#[test]
fn zero_size_batches_have_empty_tangents_and_zero_cotangents() {
    // y = solve(a, b) with a: [2, 0, 0], b: [2, 0, 3]: no unknowns, no inputs.
    let x = vec![
        tensor::<f64>(&[2, 0, 0], vec![]),
        tensor::<f64>(&[2, 0, 3], vec![]),
    ];
    let f = ImplicitFunction::new(solve_batched::<f64>, matrix_free::<f64>);
    let (y, (), lin) = f.vjp(&x, &()).unwrap();
    assert_eq!(y.dims(), &[2, 0, 3]);
    let xbar = lin.vjp(&y).unwrap();
    assert_eq!(xbar[0].dims(), &[2, 0, 0]);
    assert_eq!(xbar[1].dims(), &[2, 0, 3]);
    // a: [0, 5, 5], b: [0, 5]: no unknowns, n = 0.
    let x = vec![
        tensor::<Complex64>(&[0, 5, 5], vec![]),
        tensor::<Complex64>(&[0, 5], vec![]),
    ];
    let f = ImplicitFunction::new(solve_batched::<Complex64>, dense::<Complex64>);
    let (y, (), t) = f.jvp(&x, &(), std::slice::from_ref(&x)).unwrap();
    assert_eq!(y.dims(), &[0, 5]);
    assert_eq!(t.dy[0].dims(), &[0, 5]);
    assert!(t.stats.residuals.iter().all(|&r| r == 0.0));
}
