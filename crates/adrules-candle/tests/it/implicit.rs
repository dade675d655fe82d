//! Implicit functions with conditions written in candle: the maps against the
//! finite-difference source of adrules-testing, gradients of the candle op against candle's
//! autograd of the unrolled solver and against finite differences, a training loop, many
//! inputs, errors, and the cost of a matrix-free reverse solve (backward passes counted).
//!
//! The function: the fixed point `y = tanh(W·y + b + s·v)` (`W` small, so the map is a
//! contraction), inputs `x = [W, b, v, s]` (four inputs: more than one candle op can take).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use adrules_candle::candle_core::{
    CpuStorage, CustomOp1, DType as CDType, Device, Layout, Shape, Tensor, Var,
};
use adrules_candle::{CandleBackend, CandleConditions, adrules_error, implicit};
use adrules_core::implicit::{AUTO_DENSE_LIMIT, FixedPoint, ImplicitFunction, Point, Structure};
use adrules_core::{Backend, DType, Error, HostTensor, Result};
use adrules_testing::FiniteDifferenceConditions;
use adrules_testing::{FiniteDifference, Rng, Tolerance, Value};

const M: usize = 6;

/// `T(x, y) = tanh(W·y + b + s·v)` with candle ops.
fn map(x: &[Tensor], y: &Tensor) -> candle_core::Result<Tensor> {
    let wy = x[0].matmul(&y.unsqueeze(1)?)?.squeeze(1)?;
    (wy + &x[1] + x[2].broadcast_mul(&x[3])?)?.tanh()
}

/// The same on the host, in f64 (the solver and the finite-difference reference).
fn map_host(x: &[HostTensor], y: &[f64]) -> Vec<f64> {
    let f = |i: usize| {
        x[i].data()
            .to_c64_vec()
            .iter()
            .map(|z| z.re)
            .collect::<Vec<f64>>()
    };
    let (w, b, v, s) = (f(0), f(1), f(2), f(3)[0]);
    (0..M)
        .map(|i| {
            let wy: f64 = (0..M).map(|j| w[i * M + j] * y[j]).sum();
            (wy + b[i] + s * v[i]).tanh()
        })
        .collect()
}

/// Fixed-point iteration to machine precision; the byproduct is the iteration count.
fn solve(x: &[HostTensor], _: &()) -> Result<(HostTensor, usize)> {
    let mut y = vec![0.0; M];
    for it in 1..=500 {
        let next = map_host(x, &y);
        let diff = next
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        y = next;
        if diff < 1e-15 {
            return Ok((HostTensor::from_vec(&[M], y)?, it));
        }
    }
    Err(Error::NotConverged {
        arg: "fixed-point iteration".into(),
        iterations: 500,
        residual: f64::NAN,
        tolerance: 1e-15,
    })
}

/// A map `T(x, y)` written with candle ops.
trait CandleMap: Fn(&[Tensor], &Tensor, &usize, &()) -> candle_core::Result<Tensor> {}
impl<F: Fn(&[Tensor], &Tensor, &usize, &()) -> candle_core::Result<Tensor>> CandleMap for F {}

fn conditions() -> FixedPoint<CandleConditions<impl CandleMap>> {
    FixedPoint::new(CandleConditions::new(
        Device::Cpu,
        |x: &[Tensor], y: &Tensor, _: &usize, _: &()| map(x, y),
    ))
}

fn inputs(rng: &mut Rng) -> Vec<HostTensor> {
    let w = rng.tensor(&[M, M], DType::F64);
    let w: Vec<f64> = w
        .as_slice::<f64>()
        .unwrap()
        .iter()
        .map(|v| v * 0.3 / (M as f64).sqrt())
        .collect();
    vec![
        HostTensor::from_vec(&[M, M], w).unwrap(),
        rng.tensor(&[M], DType::F64),
        rng.tensor(&[M], DType::F64),
        rng.tensor(&[], DType::F64),
    ]
}

fn up(h: &HostTensor) -> Tensor {
    CandleBackend::cpu().from_host(h.clone()).unwrap()
}

fn down(t: &Tensor) -> HostTensor {
    CandleBackend::cpu().to_host(t).unwrap()
}

fn close(got: &HostTensor, want: &HostTensor, tol: f64, what: &str) {
    Tolerance {
        atol: tol,
        rtol: tol,
    }
    .check(
        &Value::Tensor(got.clone()),
        &Value::Tensor(want.clone()),
        what,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// The four maps of the candle source against the core's finite-difference source.
#[test]
fn maps_match_finite_differences() {
    let mut rng = Rng::seed(21);
    let x = inputs(&mut rng);
    let (y, z) = solve(&x, &()).unwrap();
    let at = Point {
        x: &x,
        y: &y,
        byproduct: &z,
        args: &(),
    };
    let ours = adrules_core::implicit::Conditions::<f64, usize, ()>::linearize(&conditions(), &at)
        .unwrap();
    let fd = FixedPoint::new(FiniteDifferenceConditions::new(
        |p: &Point<'_, usize, ()>| Ok(map_host(p.x, p.y.as_slice::<f64>()?)),
    ));
    let theirs = adrules_core::implicit::Conditions::<f64, usize, ()>::linearize(&fd, &at).unwrap();
    let n = ours.num_inputs();
    assert_eq!((ours.num_unknowns(), n), (M, M * M + 2 * M + 1));
    let k = 2;
    let vec =
        |len: usize, rng: &mut Rng| -> Vec<f64> { (0..len * k).map(|_| rng.normal()).collect() };
    let (vm, vn) = (vec(M, &mut rng), vec(n, &mut rng));
    type Apply<'a> =
        &'a dyn Fn(&dyn adrules_core::implicit::LinearMaps<f64>, &mut [f64]) -> Result<()>;
    let cases: [(&str, usize, Apply); 4] = [
        ("A·v", M, &|m, o| m.apply_a(&vm, o, k)),
        ("Aᴴ·u", M, &|m, o| m.apply_a_adjoint(&vm, o, k)),
        ("B·v", M, &|m, o| m.apply_b(&vn, o, k)),
        ("Bᴴ·u", n, &|m, o| m.apply_b_adjoint(&vm, o, k)),
    ];
    for (name, len, apply) in cases {
        let (mut a, mut b) = (vec![0.0; len * k], vec![0.0; len * k]);
        apply(ours.as_ref(), &mut a).unwrap();
        apply(theirs.as_ref(), &mut b).unwrap();
        let err = a
            .iter()
            .zip(&b)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-8, "{name}: max difference {err}");
    }
    // The fixed-point residual is reported and tiny at the solver's solution.
    assert!(ours.conditions().unwrap().iter().all(|r| r.abs() < 1e-12));
}

/// `L = ⟨w, y(x)⟩` through the implicit op, and through candle's autograd of the unrolled
/// fixed-point iteration (200 steps of a contraction: converged far below f64 precision).
#[test]
fn gradients_match_unrolled_autograd_and_finite_differences() {
    let mut rng = Rng::seed(22);
    let xh = inputs(&mut rng);
    let w = up(&rng.tensor(&[M], DType::F64));
    let func = ImplicitFunction::<f64, _, _, _, _>::new(solve, conditions());
    let vars: Vec<Var> = xh
        .iter()
        .map(|h| Var::from_tensor(&up(h)).unwrap())
        .collect();
    let xs: Vec<&Tensor> = vars.iter().map(|v| v.as_tensor()).collect();
    let (y, iterations) = implicit(&func, &xs, &()).unwrap();
    assert!(iterations > 1);
    let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();

    let mut yu = Tensor::zeros(M, CDType::F64, &Device::Cpu).unwrap();
    let xt: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    for _ in 0..200 {
        yu = map(&xt, &yu).unwrap();
    }
    close(&down(&y), &down(&yu), 1e-12, "y vs unrolled");
    let unrolled = (&yu * &w).unwrap().sum_all().unwrap().backward().unwrap();
    for (i, v) in vars.iter().enumerate() {
        let g = down(
            grads
                .get(v.as_tensor())
                .expect("every input gets a gradient"),
        );
        let gu = down(unrolled.get(v.as_tensor()).unwrap());
        close(
            &g,
            &gu,
            1e-10,
            &format!("gradient of x[{i}] vs unrolled autograd"),
        );
    }

    // Finite differences of the solver itself, one input at a time.
    let wv = Value::Tensor(down(&w));
    let xv: Vec<Value> = xh.iter().cloned().map(Value::Tensor).collect();
    let f = |v: &[Value]| {
        let x: Vec<HostTensor> = v
            .iter()
            .map(|v| v.tensor("x").cloned())
            .collect::<Result<_>>()?;
        Ok(Value::Tensor(solve(&x, &())?.0))
    };
    for (i, var) in vars.iter().enumerate() {
        let dx: Vec<Value> = xh
            .iter()
            .enumerate()
            .map(|(j, h)| {
                let d = Value::Tensor(rng.tensor(h.dims(), DType::F64));
                if i == j { d } else { d.axpy(-1.0, &d).unwrap() }
            })
            .collect();
        let jvp = FiniteDifference::default().jvp(f, &xv, &dx).unwrap();
        let lhs = wv.inner(&jvp).unwrap().re;
        let g = Value::Tensor(down(grads.get(var.as_tensor()).unwrap()));
        let rhs = g.inner(&dx[i]).unwrap().re;
        assert!(
            (lhs - rhs).abs() < 1e-7 * (1.0 + lhs.abs()),
            "x[{i}]: FD {lhs} vs {rhs}"
        );
    }
}

/// The pushforward of the same function (forward maps from the materialised Jacobians)
/// against finite differences.
#[test]
fn pushforward_through_candle_conditions() {
    let mut rng = Rng::seed(23);
    let xh = inputs(&mut rng);
    let func = ImplicitFunction::<f64, _, _, _, _>::new(solve, conditions());
    let dx: Vec<HostTensor> = xh
        .iter()
        .map(|h| rng.tensor(h.dims(), DType::F64))
        .collect();
    let (_, _, t) = func.jvp(&xh, &(), std::slice::from_ref(&dx)).unwrap();
    let xv: Vec<Value> = xh.iter().cloned().map(Value::Tensor).collect();
    let dv: Vec<Value> = dx.into_iter().map(Value::Tensor).collect();
    let f = |v: &[Value]| {
        let x: Vec<HostTensor> = v
            .iter()
            .map(|v| v.tensor("x").cloned())
            .collect::<Result<_>>()?;
        Ok(Value::Tensor(solve(&x, &())?.0))
    };
    let fd = FiniteDifference::default().jvp(f, &xv, &dv).unwrap();
    close(
        &t.dy[0],
        fd.tensor("fd").unwrap(),
        1e-8,
        "JVP vs finite differences",
    );
}

/// A plain candle training loop on `b` and `W`: fit the fixed point to a target. The loss is
/// recomputed independently (host solver, host arithmetic) before and after.
#[test]
fn training_loop_decreases_the_loss() {
    let mut rng = Rng::seed(24);
    let xh = inputs(&mut rng);
    let target = rng
        .tensor(&[M], DType::F64)
        .as_slice::<f64>()
        .unwrap()
        .iter()
        .map(|v| 0.5 * v.tanh())
        .collect::<Vec<_>>();
    let target_t = Tensor::from_slice(&target, M, &Device::Cpu).unwrap();
    let func = ImplicitFunction::<f64, _, _, _, _>::new(solve, conditions());
    let vars: Vec<Var> = xh
        .iter()
        .map(|h| Var::from_tensor(&up(h)).unwrap())
        .collect();
    let loss_host = |vars: &[Var]| -> f64 {
        let x: Vec<HostTensor> = vars.iter().map(|v| down(v.as_tensor())).collect();
        let y = solve(&x, &()).unwrap().0;
        y.as_slice::<f64>()
            .unwrap()
            .iter()
            .zip(&target)
            .map(|(a, b)| (a - b).powi(2))
            .sum()
    };
    let mut history = vec![loss_host(&vars)];
    for step in 1..=60 {
        let xs: Vec<&Tensor> = vars.iter().map(|v| v.as_tensor()).collect();
        let (y, _) = implicit(&func, &xs, &()).unwrap();
        let loss = (&y - &target_t).unwrap().sqr().unwrap().sum_all().unwrap();
        let grads = loss.backward().unwrap();
        for v in &vars[..2] {
            let g = grads.get(v.as_tensor()).unwrap();
            v.set(&(v.as_tensor() - (g * 0.25).unwrap()).unwrap())
                .unwrap();
        }
        if step % 10 == 0 {
            history.push(loss_host(&vars));
        }
    }
    assert!(
        history.windows(2).all(|w| w[1] < w[0]),
        "losses {history:?}"
    );
    assert!(history[6] < 0.2 * history[0], "losses {history:?}");
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut rng = Rng::seed(25);
    let xh = inputs(&mut rng);
    let func = ImplicitFunction::<f64, _, _, _, _>::new(solve, conditions());
    let mut xs: Vec<Tensor> = xh.iter().map(up).collect();
    xs[1] = xs[1].to_dtype(CDType::F32).unwrap();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let e = implicit(&func, &refs, &()).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::DTypeMismatch { .. })),
        "{e}"
    );
    // Conditions with the wrong number of elements.
    let bad = ImplicitFunction::<f64, _, _, _, _>::new(
        solve,
        CandleConditions::new(
            Device::Cpu,
            |x: &[Tensor], _: &Tensor, _: &usize, _: &()| Ok(x[0].clone()),
        ),
    );
    let refs: Vec<Tensor> = xh.iter().map(up).collect();
    let refs: Vec<&Tensor> = refs.iter().collect();
    let e = implicit(&bad, &refs, &()).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::ShapeMismatch { .. })),
        "{e}"
    );
}

/// The identity as a candle op whose backward counts its calls: placed once in the
/// conditions' graph, it counts the backward passes through them.
struct Count(Arc<AtomicUsize>);

impl CustomOp1 for Count {
    fn name(&self) -> &'static str {
        "count"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        if !l.is_contiguous() || l.start_offset() != 0 {
            candle_core::bail!("count: a contiguous input is expected");
        }
        Ok((s.clone(), l.shape().clone()))
    }

    fn bwd(&self, _: &Tensor, _: &Tensor, g: &Tensor) -> candle_core::Result<Option<Tensor>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Some(g.clone()))
    }
}

/// `(D + p·qᵀ)⁻¹·r` for a diagonal `D`, by the Sherman–Morrison formula (host arithmetic).
fn sherman_morrison(d: &[f64], p: &[f64], q: &[f64], r: &[f64]) -> Vec<f64> {
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let dr: Vec<f64> = r.iter().zip(d).map(|(r, d)| r / d).collect();
    let dp: Vec<f64> = p.iter().zip(d).map(|(p, d)| p / d).collect();
    let s = dot(q, &dr) / (1.0 + dot(q, &dp));
    dr.iter().zip(&dp).map(|(r, p)| r - s * p).collect()
}

/// A reverse solve with `m = 300 > AUTO_DENSE_LIMIT` unknowns: `Method::Auto` picks GMRES
/// (general `A`) or CG (positive-definite tag), which run one backward pass of the
/// conditions per Krylov iteration and never assemble a Jacobian (that would be 300 passes,
/// 300 more per factorization in the old adapter). The conditions are linear,
/// `c(x, y) = (D + u·vᵀ)·y − x`, so the gradient of `⟨w, y⟩` has the closed form
/// `x̄ = (D + u·vᵀ)⁻ᵀ·w = (D + v·uᵀ)⁻¹·w` (Sherman–Morrison), computed independently here.
#[test]
fn matrix_free_reverse_solve_assembles_no_jacobian() {
    const N: usize = 300;
    const { assert!(N > AUTO_DENSE_LIMIT) };
    for structure in [Structure::General, Structure::PositiveDefinite] {
        let mut rng = Rng::seed(26);
        let d: Vec<f64> = (0..N).map(|i| 1.0 + i as f64 / N as f64).collect();
        let mut small = || -> Vec<f64> {
            (0..N)
                .map(|_| 0.5 * rng.normal() / (N as f64).sqrt())
                .collect()
        };
        let u = small();
        let v = if structure == Structure::General {
            small()
        } else {
            u.clone()
        };
        let a: Vec<f64> = (0..N * N)
            .map(|k| {
                let (i, j) = (k / N, k % N);
                u[i] * v[j] + if i == j { d[i] } else { 0.0 }
            })
            .collect();
        let a = Tensor::from_vec(a, (N, N), &Device::Cpu).unwrap();
        let passes = Arc::new(AtomicUsize::new(0));
        let counter = passes.clone();
        let conditions = CandleConditions::new(
            Device::Cpu,
            move |x: &[Tensor], y: &Tensor, _: &(), _: &()| {
                let y = y.apply_op1(Count(counter.clone()))?;
                a.matmul(&y.unsqueeze(1)?)?.squeeze(1)? - &x[0]
            },
        )
        .with_structure(structure);
        let (du, dv) = (d.clone(), (u.clone(), v.clone()));
        let solve = move |x: &[HostTensor], _: &()| -> Result<(HostTensor, ())> {
            let y = sherman_morrison(&du, &dv.0, &dv.1, x[0].as_slice::<f64>()?);
            Ok((HostTensor::from_vec(&[N], y)?, ()))
        };
        let func = ImplicitFunction::<f64, _, _, _, _>::new(solve, conditions);
        let (xh, w) = (rng.tensor(&[N], DType::F64), rng.tensor(&[N], DType::F64));
        let x = Var::from_tensor(&up(&xh)).unwrap();
        let (y, ()) = implicit(&func, &[x.as_tensor()], &()).unwrap();
        assert_eq!(
            passes.load(Ordering::Relaxed),
            0,
            "{structure:?}: the forward (linearization and factorization) ran backward passes"
        );
        let grads = (&y * &up(&w))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let n = passes.load(Ordering::Relaxed);
        assert!(
            (2..100).contains(&n),
            "{structure:?}: {n} backward passes (an assembly alone costs {N})"
        );
        let want = sherman_morrison(&d, &v, &u, w.as_slice::<f64>().unwrap());
        close(
            &down(grads.get(x.as_tensor()).expect("x gets a gradient")),
            &HostTensor::from_vec(&[N], want).unwrap(),
            1e-8,
            &format!("{structure:?}: gradient vs closed form"),
        );
    }
}
