//! Closed-form implicit-function test vectors (T1, T1c, T1d, T2, T3, T4, T5, T7,
//! T8, T10, T11, T13), each in forward and reverse mode, with three sources of the linear
//! maps (dense Jacobians, matrix-free closures, finite differences of the conditions) and
//! every applicable linear solver (LU and GMRES always; Cholesky and CG where `A` is
//! definite; and `Auto`). Every run goes through a solver that refuses to be called twice.
//!
//! The expected values are closed-form formulas evaluated here (the numbers of the note
//! are checked against the formulas where the note prints them).
//! Also per scenario: the adjoint test `⟨ȳ, J·ẋ⟩ = ⟨Jᴴ·ȳ, ẋ⟩` and the pushforward against
//! fourth-order finite differences of the whole solver.

use std::sync::Arc;

use crate::support::implicit::*;
use adrules_core::implicit::{
    Argmin, Conditions, FixedPoint, FnMaps, ImplicitFunction, LinearMaps, Method, Point,
    SolverOptions, Structure,
};
use adrules_core::{DType, HostTensor, Result};
use adrules_testing::FiniteDifferenceConditions;
use adrules_testing::{FiniteDifference, Rng, Value, adjoint_mismatch};
use faer::Mat;

mod scenarios;
use scenarios::{t7, t8, t10, t11, t13};

type P<'a> = Point<'a, f64, [HostTensor]>;
/// `(∂c/∂y, ∂c/∂x)`
type Jacobians = (Mat<f64>, Mat<f64>);
type Solve = fn(&[HostTensor], &[HostTensor]) -> Result<(HostTensor, f64)>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    /// `c` is given
    Root,
    /// `c = T − y`; the scenario gives `T` and its maps
    FixedPoint,
    /// `c = ∇_y f`; the scenario gives `∇_y f` and its maps
    Argmin,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Source {
    Dense,
    MatrixFree,
    FiniteDifferenceConditions,
}

struct Scenario {
    name: &'static str,
    x: Vec<HostTensor>,
    args: Vec<HostTensor>,
    solve: Solve,
    form: Form,
    /// the conditions, or `T` of a fixed point, or `∇_y f` of a minimizer
    c: fn(&P) -> Result<Vec<f64>>,
    /// dense `(∂c/∂y, ∂c/∂x)` of `c` above
    dense: fn(&P) -> Result<Jacobians>,
    /// matrix-free maps of `c` above
    maps: fn(&P) -> Result<FnMaps<f64>>,
    /// structure of the final `A`
    structure: Structure,
    /// expected byproduct
    z: f64,
    y: Vec<f64>,
    /// expected `∂y/∂x`, `m×n` row-major
    j: Vec<f64>,
}

fn ys(p: &P) -> Result<Arc<[f64]>> {
    Ok(p.y_data::<f64>()?.into())
}

fn xs(p: &P, i: usize) -> Result<Arc<[f64]>> {
    Ok(p.x_data::<f64>(i)?.into())
}

fn diag(d: &[f64]) -> Mat<f64> {
    Mat::from_fn(d.len(), d.len(), |i, j| if i == j { d[i] } else { 0.0 })
}

fn row_major(r: usize, c: usize, v: &[f64]) -> Mat<f64> {
    Mat::from_fn(r, c, |i, j| v[i * c + j])
}

fn map_into(o: &mut [f64], f: impl Fn(usize) -> f64) {
    o.iter_mut().enumerate().for_each(|(i, o)| *o = f(i));
}

fn diag_j(d: &[f64]) -> Vec<f64> {
    let n = d.len();
    (0..n * n)
        .map(|k| if k / n == k % n { d[k / n] } else { 0.0 })
        .collect()
}

// ---------------------------------------------------------------- T1, T2: y⊙y − x

fn sqrt_scenario(name: &'static str, dims: &[usize], x: Vec<f64>) -> Scenario {
    let y: Vec<f64> = x.iter().map(|v| v.sqrt()).collect();
    let j = diag_j(&x.iter().map(|v| 0.5 / v.sqrt()).collect::<Vec<_>>());
    Scenario {
        name,
        x: vec![t64(dims, x)],
        args: vec![],
        solve: |x, _| {
            let y = data::<f64>(&x[0]).iter().map(|v| v.sqrt()).collect();
            Ok((t64(x[0].dims(), y), 0.0))
        },
        form: Form::Root,
        c: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            Ok(y.iter().zip(x).map(|(y, x)| y * y - x).collect())
        },
        dense: |p| {
            let y = p.y_data::<f64>()?;
            let two_y: Vec<f64> = y.iter().map(|y| 2.0 * y).collect();
            Ok((diag(&two_y), diag(&vec![-1.0; y.len()])))
        },
        maps: |p| {
            let y = ys(p)?;
            let m = y.len();
            Ok(FnMaps::<f64>::hermitian(
                m,
                m,
                move |v, o| map_into(o, |i| 2.0 * y[i] * v[i]),
                |v, o| map_into(o, |i| -v[i]),
                |u, o| map_into(o, |i| -u[i]),
            ))
        },
        structure: Structure::PositiveDefinite,
        z: 0.0,
        y,
        j,
    }
}

fn t1() -> Scenario {
    let s = sqrt_scenario("T1", &[2], vec![4.0, 9.0]);
    assert_close(
        &c(&[s.j[0], s.j[3]]),
        &c(&[0.25, 0.1666667]),
        5e-8,
        0.0,
        "T1 note",
    );
    s
}

fn t2() -> Scenario {
    sqrt_scenario("T2 (matrix-shaped x)", &[2, 2], vec![1.0, 2.0, 3.0, 4.0])
}

// ---------------------------------------------------------------- T1c: Heron fixed point

fn t1c() -> Scenario {
    let x = vec![4.0, 9.0];
    let j = diag_j(&[0.25, 1.0 / 6.0]);
    Scenario {
        name: "T1c (Heron fixed point, 10 iterations)",
        x: vec![t64(&[2], x)],
        args: vec![],
        solve: |x, _| {
            let x = data::<f64>(&x[0]);
            let mut y = x.clone();
            for _ in 0..10 {
                y = y.iter().zip(&x).map(|(y, x)| 0.5 * (y + x / y)).collect();
            }
            Ok((t64(&[y.len()], y), 0.0))
        },
        form: Form::FixedPoint,
        c: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            Ok(y.iter().zip(x).map(|(y, x)| 0.5 * (y + x / y)).collect())
        },
        dense: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            let a: Vec<f64> = (0..2).map(|i| 0.5 * (1.0 - x[i] / (y[i] * y[i]))).collect();
            let b: Vec<f64> = y.iter().map(|y| 0.5 / y).collect();
            Ok((diag(&a), diag(&b)))
        },
        maps: |p| {
            let (x, y) = (xs(p, 0)?, ys(p)?);
            let y2 = Arc::clone(&y);
            let y3 = Arc::clone(&y);
            Ok(FnMaps::<f64>::hermitian(
                2,
                2,
                move |v, o| map_into(o, |i| 0.5 * (1.0 - x[i] / (y[i] * y[i])) * v[i]),
                move |v, o| map_into(o, |i| 0.5 / y2[i] * v[i]),
                move |u, o| map_into(o, |i| 0.5 / y3[i] * u[i]),
            ))
        },
        structure: Structure::NegativeDefinite,
        z: 0.0,
        y: vec![2.0, 3.0],
        j,
    }
}

// ---------------------------------------------------------------- T1d: projected argmin

/// `w = y − 0.1·4(y² − x)y`, the projected-gradient step of `f = Σ (y² − x)²`.
fn t1d_step(x: f64, y: f64) -> f64 {
    y - 0.4 * (y * y - x) * y
}

fn t1d() -> Scenario {
    let j00 = 0.3f64.sqrt() / (3.0 * 0.3 - 0.3);
    assert_close(&c(&[j00]), &c(&[0.9128709]), 5e-8, 0.0, "T1d note");
    Scenario {
        name: "T1d (projected argmin on [0,1]ⁿ, fixed-point form)",
        x: vec![t64(&[2], vec![0.3, 1.4])],
        args: vec![],
        solve: |x, _| {
            let y = data::<f64>(&x[0])
                .iter()
                .map(|v| v.sqrt().clamp(0.0, 1.0))
                .collect::<Vec<_>>();
            Ok((t64(&[y.len()], y), 0.0))
        },
        form: Form::FixedPoint,
        c: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            Ok((0..2)
                .map(|i| t1d_step(x[i], y[i]).clamp(0.0, 1.0))
                .collect())
        },
        dense: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            let inside = |i: usize| (0.0..1.0).contains(&t1d_step(x[i], y[i]));
            let a: Vec<f64> = (0..2)
                .map(|i| {
                    if inside(i) {
                        1.0 - 0.4 * (3.0 * y[i] * y[i] - x[i])
                    } else {
                        0.0
                    }
                })
                .collect();
            let b: Vec<f64> = (0..2)
                .map(|i| if inside(i) { 0.4 * y[i] } else { 0.0 })
                .collect();
            Ok((diag(&a), diag(&b)))
        },
        maps: |p| {
            let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
            let inside: Vec<bool> = (0..2)
                .map(|i| (0.0..1.0).contains(&t1d_step(x[i], y[i])))
                .collect();
            let da: Arc<[f64]> = (0..2)
                .map(|i| {
                    if inside[i] {
                        1.0 - 0.4 * (3.0 * y[i] * y[i] - x[i])
                    } else {
                        0.0
                    }
                })
                .collect();
            let db: Arc<[f64]> = (0..2)
                .map(|i| if inside[i] { 0.4 * y[i] } else { 0.0 })
                .collect();
            let db2 = Arc::clone(&db);
            Ok(FnMaps::<f64>::hermitian(
                2,
                2,
                move |v, o| map_into(o, |i| da[i] * v[i]),
                move |v, o| map_into(o, |i| db[i] * v[i]),
                move |u, o| map_into(o, |i| db2[i] * u[i]),
            ))
        },
        structure: Structure::NegativeDefinite,
        z: 0.0,
        y: vec![0.3f64.sqrt(), 1.0],
        j: diag_j(&[j00, 0.0]),
    }
}

// ---------------------------------------------------------------- T3: A ≠ Aᵀ, B non-square

// The note's printed (rounded) values are compared on purpose.
#[allow(clippy::approx_constant)]
fn t3() -> Scenario {
    let (r2, r3, r5) = (2f64.sqrt(), 3f64.sqrt(), 5f64.sqrt());
    let y = vec![-r3, -r2, -1.0, r5, 2.0, r3];
    assert_close(
        &c(&y),
        &c(&[-1.7320508, -1.4142136, -1.0, 2.2360680, 2.0, 1.7320508]),
        5e-8,
        0.0,
        "T3 note y",
    );
    let mut j = vec![0.0; 18];
    for (i, col, v) in [
        (0, 2, -0.5 / r3),
        (1, 1, -0.5 / r2),
        (2, 0, -0.5),
        (3, 2, 0.5 / r5),
        (4, 1, 0.25),
        (5, 0, 0.5 / r3),
    ] {
        j[i * 3 + col] = v;
    }
    assert_close(
        &c(&[j[2], j[4], j[6], j[11], j[13], j[15]]),
        &c(&[-0.2886751, -0.3535534, -0.5, 0.2236068, 0.25, 0.2886751]),
        5e-8,
        0.0,
        "T3 note J",
    );
    Scenario {
        name: "T3 (reverse, byproduct z)",
        x: vec![t64(&[3], vec![1.0, 2.0, 3.0])],
        args: vec![],
        solve: |x, _| {
            let x = data::<f64>(&x[0]);
            let mut y: Vec<f64> = x.iter().map(|v| (v + 2.0).sqrt()).collect();
            y.extend(x.iter().map(|v| -v.sqrt()));
            y.reverse();
            Ok((t64(&[y.len()], y), 2.0))
        },
        form: Form::Root,
        c: |p| {
            let (x, y, z) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?, *p.byproduct);
            let n = x.len();
            Ok((0..2 * n)
                .map(|i| {
                    let yy = y[2 * n - 1 - i] * y[2 * n - 1 - i];
                    if i < n { yy - x[i] - z } else { yy - x[i - n] }
                })
                .collect())
        },
        dense: |p| {
            let y = p.y_data::<f64>()?;
            let m = y.len();
            let n = m / 2;
            let a = Mat::from_fn(m, m, |i, j| if j == m - 1 - i { 2.0 * y[j] } else { 0.0 });
            let b = Mat::from_fn(m, n, |i, j| if i % n == j { -1.0 } else { 0.0 });
            Ok((a, b))
        },
        maps: |p| {
            let y = ys(p)?;
            let y2 = Arc::clone(&y);
            let m = y.len();
            let n = m / 2;
            Ok(FnMaps::<f64>::new(
                m,
                n,
                move |v, o| map_into(o, |i| 2.0 * y[m - 1 - i] * v[m - 1 - i]),
                move |u, o| map_into(o, |j| 2.0 * y2[j] * u[m - 1 - j]),
                move |v, o| map_into(o, |i| -v[i % n]),
                move |u, o| map_into(o, |j| -(u[j] + u[j + n])),
            ))
        },
        structure: Structure::General,
        z: 2.0,
        y,
        j,
    }
}

// ---------------------------------------------------------------- T4: m ≠ n

fn t4() -> Scenario {
    let e = 0.5 / 10f64.sqrt();
    assert_close(&c(&[e]), &c(&[0.158113883]), 5e-10, 0.0, "T4 note");
    Scenario {
        name: "T4 (m = 3, n = 4)",
        x: vec![t64(&[4], vec![1.0, 2.0, 3.0, 4.0])],
        args: vec![],
        solve: |x, _| {
            let s: f64 = data::<f64>(&x[0]).iter().sum();
            Ok((t64(&[3], vec![s.sqrt(); 3]), 0.0))
        },
        form: Form::Root,
        c: |p| {
            let s: f64 = p.x_data::<f64>(0)?.iter().sum();
            Ok(p.y_data::<f64>()?.iter().map(|y| y * y - s).collect())
        },
        dense: |p| {
            let y = p.y_data::<f64>()?;
            let two_y: Vec<f64> = y.iter().map(|y| 2.0 * y).collect();
            Ok((diag(&two_y), Mat::from_fn(3, 4, |_, _| -1.0)))
        },
        maps: |p| {
            let y = ys(p)?;
            Ok(FnMaps::<f64>::hermitian(
                3,
                4,
                move |v, o| map_into(o, |i| 2.0 * y[i] * v[i]),
                |v, o| o.fill(-v.iter().sum::<f64>()),
                |u, o| o.fill(-u.iter().sum::<f64>()),
            ))
        },
        structure: Structure::PositiveDefinite,
        z: 0.0,
        y: vec![10f64.sqrt(); 3],
        j: vec![e; 12],
    }
}

// ---------------------------------------------------------------- T5: y = θ·cos y

fn t5() -> Scenario {
    Scenario {
        name: "T5 (fixed point y = θ·cos y)",
        x: vec![t64(&[1], vec![1.0])],
        args: vec![],
        solve: |x, _| {
            let th = data::<f64>(&x[0])[0];
            let mut y = 0.0f64;
            for _ in 0..50 {
                y -= (th * y.cos() - y) / (-th * y.sin() - 1.0);
            }
            Ok((t64(&[1], vec![y]), 0.0))
        },
        form: Form::FixedPoint,
        c: |p| Ok(vec![p.x_data::<f64>(0)?[0] * p.y_data::<f64>()?[0].cos()]),
        dense: |p| {
            let (th, y) = (p.x_data::<f64>(0)?[0], p.y_data::<f64>()?[0]);
            Ok((diag(&[-th * y.sin()]), diag(&[y.cos()])))
        },
        maps: |p| {
            let (th, y) = (p.x_data::<f64>(0)?[0], p.y_data::<f64>()?[0]);
            Ok(FnMaps::<f64>::hermitian(
                1,
                1,
                move |v, o| o[0] = -th * y.sin() * v[0],
                move |v, o| o[0] = y.cos() * v[0],
                move |u, o| o[0] = y.cos() * u[0],
            ))
        },
        structure: Structure::NegativeDefinite,
        z: 0.0,
        y: vec![0.7390851332151607],
        j: vec![0.4416107917053284],
    }
}

// ---------------------------------------------------------------- T7: Newton on 2×2

// ---------------------------------------------------------------- T8: ridge regression

const T8_X: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 7.0];
const T8_T: [f64; 3] = [1.0, 0.0, 2.0];

// ---------------------------------------------------------------- T10: softmax on the simplex

// ---------------------------------------------------------------- T11: simplex projection

const T11_ETA: f64 = 0.5;

// ---------------------------------------------------------------- T13: Solow steady state

// ---------------------------------------------------------------- the driver

fn num_inputs(s: &Scenario) -> usize {
    s.x.iter().map(HostTensor::len).sum()
}

/// Runs one scenario with one source of the maps (already wrapped in its form) and one
/// linear solver: forward and reverse mode over every unit direction, the adjoint test, the
/// statistics, and the refusing solver.
fn run<C: Conditions<f64, f64, [HostTensor]>>(
    s: &Scenario,
    conditions: C,
    method: Method,
    source: Source,
) {
    let label = format!("{} / {source:?} / {method:?}", s.name);
    let (solve, calls) = refusing(s.solve);
    let f =
        ImplicitFunction::new(solve, conditions).with_linear_solver(SolverOptions::from(method));
    let (lin, z) = f
        .linearize(&s.x, &s.args)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(z, s.z, "{label}: byproduct");
    // (the note prints T8's solution to 12 digits)
    assert_close(&cv(lin.y()), &c(&s.y), 1e-12, 1e-11, &format!("{label}: y"));
    let (m, n) = (s.y.len(), num_inputs(s));
    // The finite-difference source is accurate to ≈ ε^{2/3}; the others are exact.
    let tol = if source == Source::FiniteDifferenceConditions {
        1e-6
    } else {
        1e-9
    };
    if source == Source::FiniteDifferenceConditions {
        let norm = lin.conditions_norm().expect("FD reports ‖c‖");
        assert!(norm < 1e-12, "{label}: ‖c‖ = {norm:e} at the solution");
    }
    let expected_solver = match method {
        Method::Auto if s.structure.is_definite() => "cholesky",
        Method::Auto => "lu",
        other => other.name(),
    };

    // Forward: all n unit directions in one block; dy_j is column j of J.
    let directions: Vec<Vec<HostTensor>> = (0..n).map(|j| unit_tangent::<f64>(&s.x, j)).collect();
    let t = lin
        .jvp_many(&directions, None)
        .unwrap_or_else(|e| panic!("{label}: jvp: {e}"));
    assert_eq!(t.stats.solver, expected_solver, "{label}");
    assert_eq!(t.stats.residuals.len(), n, "{label}");
    assert!(
        t.stats.max_residual() <= 1e-10,
        "{label}: residuals {:?}",
        t.stats.residuals
    );
    for (j, dy) in t.dy.iter().enumerate() {
        assert_eq!(dy.dims(), lin.y().dims(), "{label}");
        let col: Vec<f64> = (0..m).map(|i| s.j[i * n + j]).collect();
        assert_close(
            &cv(dy),
            &c(&col),
            tol,
            tol,
            &format!("{label}: J[:, {j}] (JVP)"),
        );
    }

    // Reverse: all m unit cotangents in one block; x̄_i is row i of J (real data).
    let cotangents: Vec<HostTensor> = (0..m).map(|i| unit::<f64>(lin.y().dims(), i)).collect();
    let ct = lin
        .vjp_many(&cotangents, None)
        .unwrap_or_else(|e| panic!("{label}: vjp: {e}"));
    assert_eq!(ct.stats.solver, expected_solver, "{label}");
    assert!(
        ct.stats.max_residual() <= 1e-10,
        "{label}: residuals {:?}",
        ct.stats.residuals
    );
    assert_eq!(ct.adjoint.len(), m * m);
    for (i, xbar) in ct.dx.iter().enumerate() {
        for (t, x) in xbar.iter().zip(&s.x) {
            assert_eq!(t.dims(), x.dims(), "{label}: cotangent shape");
        }
        assert_close(
            &cat(xbar),
            &c(&s.j[i * n..(i + 1) * n]),
            tol,
            tol,
            &format!("{label}: J[{i}, :] (VJP)"),
        );
    }

    // Adjoint test with random directions, through the single-vector entry points.
    let mut rng = Rng::seed(7);
    let dx: Vec<HostTensor> =
        s.x.iter()
            .map(|x| rng.tensor(x.dims(), DType::F64))
            .collect();
    let ybar = rng.tensor(lin.y().dims(), DType::F64);
    let jdx = lin.jvp(&dx).unwrap();
    let xbar = lin.vjp(&ybar).unwrap();
    let mismatch = adjoint_mismatch(
        &Value::Tensor(ybar),
        &Value::Tensor(jdx),
        &xbar
            .into_iter()
            .map(|t| Some(Value::Tensor(t)))
            .collect::<Vec<_>>(),
        &dx.into_iter().map(Value::Tensor).collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(mismatch < 1e-9, "{label}: adjoint mismatch {mismatch:e}");
    assert_eq!(calls.get(), 1, "{label}: the solver ran once");
}

/// The inner source of the scenario's `c` (tagged with the final structure for root
/// forms; the forms tag their own `A`).
fn source(s: &Scenario, src: Source) -> impl Fn(&P) -> Result<Box<dyn LinearMaps<f64>>> + '_ {
    let tag = if s.form == Form::Root {
        s.structure
    } else {
        Structure::General
    };
    move |p: &P| -> Result<Box<dyn LinearMaps<f64>>> {
        Ok(match src {
            Source::Dense => {
                let (a, b) = (s.dense)(p)?;
                Box::new(adrules_core::implicit::DenseMaps::new(a, b)?.with_structure(tag))
            }
            Source::MatrixFree => Box::new((s.maps)(p)?.with_structure(tag)),
            Source::FiniteDifferenceConditions => {
                let fd = FiniteDifferenceConditions::new(s.c).with_structure(tag);
                Conditions::<f64, f64, [HostTensor]>::linearize(&fd, p)?
            }
        })
    }
}

fn check(s: Scenario) {
    let mut methods = vec![Method::Auto, Method::Lu, Method::Gmres];
    if s.structure.is_definite() {
        methods.extend([Method::Cholesky, Method::Cg]);
    }
    for src in [
        Source::Dense,
        Source::MatrixFree,
        Source::FiniteDifferenceConditions,
    ] {
        for &method in &methods {
            match s.form {
                Form::Root => run(&s, source(&s, src), method, src),
                Form::FixedPoint => run(
                    &s,
                    FixedPoint::new(source(&s, src)).with_structure(s.structure),
                    method,
                    src,
                ),
                Form::Argmin => run(&s, Argmin(source(&s, src)), method, src),
            }
        }
    }
    check_against_solver_fd(&s);
}

/// The pushforward against finite differences of the whole solver.
fn check_against_solver_fd(s: &Scenario) {
    let src = || source(s, Source::MatrixFree);
    match s.form {
        Form::Root => {
            let f = ImplicitFunction::new(s.solve, src());
            check_solver_fd(s, |dx| f.linearize(&s.x, &s.args)?.0.jvp(dx));
        }
        Form::FixedPoint => {
            let f =
                ImplicitFunction::new(s.solve, FixedPoint::new(src()).with_structure(s.structure));
            check_solver_fd(s, |dx| f.linearize(&s.x, &s.args)?.0.jvp(dx));
        }
        Form::Argmin => {
            let f = ImplicitFunction::new(s.solve, Argmin(src()));
            check_solver_fd(s, |dx| f.linearize(&s.x, &s.args)?.0.jvp(dx));
        }
    }
}

/// `J·dx` from the rule against fourth-order central differences of the solver (step 1e-3).
fn check_solver_fd(s: &Scenario, jvp: impl Fn(&[HostTensor]) -> Result<HostTensor>) {
    let mut rng = Rng::seed(11);
    let dx: Vec<HostTensor> =
        s.x.iter()
            .map(|x| rng.tensor(x.dims(), DType::F64))
            .collect();
    let rule = jvp(&dx).unwrap();
    let values: Vec<Value> = s.x.iter().cloned().map(Value::Tensor).collect();
    let directions: Vec<Value> = dx.iter().cloned().map(Value::Tensor).collect();
    let fd = FiniteDifference::default()
        .jvp(
            |x| {
                let x: Vec<HostTensor> = x
                    .iter()
                    .map(|v| v.tensor("x").cloned())
                    .collect::<Result<_>>()?;
                Ok(Value::Tensor((s.solve)(&x, &s.args)?.0))
            },
            &values,
            &directions,
        )
        .unwrap();
    let fd = fd.tensor("fd").unwrap();
    assert_close(
        &cv(&rule),
        &cv(fd),
        1e-7,
        1e-7,
        &format!("{}: JVP vs FD of the solver", s.name),
    );
}

#[test]
fn t1_square_root() {
    check(t1());
}

#[test]
fn t1c_heron_fixed_point() {
    check(t1c());
}

#[test]
fn t1d_projected_argmin_clipped_component_has_zero_derivative() {
    check(t1d());
}

#[test]
fn t2_matrix_shaped_input_row_major_flattening() {
    check(t2());
}

#[test]
fn t3_nonsymmetric_a_nonsquare_b_and_byproduct() {
    check(t3());
}

#[test]
fn t4_more_inputs_than_unknowns() {
    check(t4());
}

#[test]
fn t5_cosine_fixed_point() {
    check(t5());
}

#[test]
fn t7_newton_2x2() {
    check(t7());
}

#[test]
fn t8_ridge_regression_argmin() {
    check(t8());
}

#[test]
fn t10_softmax_with_multiplier() {
    check(t10());
}

#[test]
fn t11_simplex_projection() {
    check(t11());
}

#[test]
fn t13_solow_steady_state() {
    check(t13());
}
