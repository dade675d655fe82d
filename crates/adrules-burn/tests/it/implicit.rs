//! Implicit functions with burn-written conditions: the fixed point `y = tanh(W·y + b)`.
//! Gradients against burn's own autodiff through the unrolled iteration and against finite
//! differences of the solve, with a dense and a matrix-free linear solver; the cost of a
//! matrix-free reverse solve in backward passes; errors inside backward; then a few steps of
//! gradient descent in a plain burn loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_burn::{Implicit, take_backward_errors, try_backward};
use adrules_core::implicit::{AUTO_DENSE_LIMIT, Method, SolverOptions, Structure};
use adrules_core::{DType, Error, Result};
use adrules_testing::Rng;

const N: usize = 6;

/// One step of the map `T(W, b, y) = tanh(W·y + b)` on flattened tensors.
fn step(w: &Tensor<1>, b: &Tensor<1>, y: &Tensor<1>) -> Tensor<1> {
    let n = b.dims()[0];
    let wy = w.clone().reshape([n, n]).matmul(y.clone().reshape([n, 1]));
    (wy.reshape([n]) + b.clone()).tanh()
}

/// Fixed-point iteration to machine precision (never differentiated).
fn solve(x: &[Tensor<1>]) -> Result<Tensor<1>> {
    let (w, b) = (&x[0], &x[1]);
    let mut y = b.zeros_like();
    for _ in 0..500 {
        let next = step(w, b, &y);
        let change: f64 = (next.clone() - y).abs().max().into_scalar();
        y = next;
        if change < 1e-15 {
            return Ok(y);
        }
    }
    Err(Error::invalid(
        "solver",
        "fixed-point iteration did not converge",
    ))
}

fn fixed_point(options: SolverOptions) -> Implicit {
    Implicit::new(solve, |x, y| step(&x[0], &x[1], y) - y.clone()).with_linear_solver(options)
}

fn data(v: Vec<f64>, device: &Device) -> Tensor<1> {
    let n = v.len();
    Tensor::<1>::from_data(TensorData::new(v, [n]), (device, BurnDType::F64))
}

/// A contractive `W` (spectral norm below 1/2) and `b`, flattened.
fn parameters() -> (Vec<f64>, Vec<f64>) {
    let w = (0..N * N)
        .map(|i| ((i * 37 + 5) % 19) as f64 / 19.0 - 0.5)
        .map(|v| v * 0.3)
        .collect();
    let b = (0..N).map(|i| (i as f64 - 2.5) / 3.0).collect();
    (w, b)
}

fn values(t: Tensor<1>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// `L = Σ y ⊙ target` and its gradients in `W` and `b`.
fn gradients(ours: Option<&Implicit>, target: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let device = Device::flex().autodiff();
    let (w0, b0) = parameters();
    let w = data(w0, &device).require_grad();
    let b = data(b0, &device).require_grad();
    let y = match ours {
        Some(f) => f.apply([(&w).into(), (&b).into()]).unwrap(),
        None => {
            // burn's own autodiff through 200 iterations of a map contracting by 1/2.
            let mut y = b.zeros_like();
            for _ in 0..200 {
                y = step(&w, &b, &y);
            }
            y
        }
    };
    let grads = (y * data(target.to_vec(), &device)).sum().backward();
    (
        values(w.grad(&grads).unwrap()),
        values(b.grad(&grads).unwrap()),
    )
}

fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn gradient_matches_unrolled_burn_autodiff_and_finite_differences() {
    let target: Vec<f64> = (0..N).map(|i| (i as f64).sin()).collect();
    let unrolled = gradients(None, &target);
    for method in [Method::Auto, Method::Lu, Method::Gmres] {
        let f = fixed_point(SolverOptions::from(method));
        let (gw, gb) = gradients(Some(&f), &target);
        assert_close(&gw, &unrolled.0, 1e-9, &format!("{method:?} dL/dW"));
        assert_close(&gb, &unrolled.1, 1e-9, &format!("{method:?} dL/db"));
    }

    // Central differences of the solve along b.
    let f = fixed_point(SolverOptions::default());
    let plain = Device::flex();
    let (w0, b0) = parameters();
    let loss = |b: &[f64]| -> f64 {
        let y = f
            .apply([
                data(w0.clone(), &plain).into(),
                data(b.to_vec(), &plain).into(),
            ])
            .unwrap();
        values(y).iter().zip(&target).map(|(y, t)| y * t).sum()
    };
    let h = 1e-5;
    for i in 0..N {
        let (mut p, mut m) = (b0.clone(), b0.clone());
        p[i] += h;
        m[i] -= h;
        let fd = (loss(&p) - loss(&m)) / (2.0 * h);
        assert!(
            (fd - unrolled.1[i]).abs() < 1e-8,
            "dL/db[{i}]: {fd} vs {}",
            unrolled.1[i]
        );
    }
    assert!(take_backward_errors().is_empty());
}

/// `S·v` for `S` flattened `[N·N]` and `v: [N]`.
fn matvec(s: &Tensor<1>, v: &Tensor<1>) -> Tensor<1> {
    let wy = s.clone().reshape([N, N]).matmul(v.clone().reshape([N, 1]));
    wy.reshape([N])
}

/// `c(S, b, y) = S·y − b` with a symmetric positive definite `S` (an input), solved by
/// Richardson's iteration; `S = MᵀM + N·I`, flattened.
fn definite_system(structure: Structure, method: Method) -> (Implicit, Vec<f64>) {
    let m: Vec<f64> = (0..N * N)
        .map(|i| ((i * 29 + 3) % 17) as f64 / 17.0 - 0.5)
        .collect();
    let s: Vec<f64> = (0..N * N)
        .map(|ij| {
            let (i, j) = (ij / N, ij % N);
            let mtm: f64 = (0..N).map(|k| m[k * N + i] * m[k * N + j]).sum();
            mtm + if i == j { N as f64 } else { 0.0 }
        })
        .collect();
    // eigenvalues of S lie in (0, max row sum]: the step 1/max row sum contracts
    let row_max = (0..N)
        .map(|i| (0..N).map(|j| s[i * N + j].abs()).sum::<f64>())
        .fold(0.0, f64::max);
    let solve = move |x: &[Tensor<1>]| -> Result<Tensor<1>> {
        let (s, b) = (&x[0], &x[1]);
        let mut y = b.zeros_like();
        for _ in 0..400 {
            y = y.clone() + (b.clone() - matvec(s, &y)) / row_max;
        }
        Ok(y)
    };
    let f = Implicit::new(solve, |x, y| matvec(&x[0], y) - x[1].clone())
        .with_linear_solver(SolverOptions::from(method))
        .with_structure(structure);
    (f, s)
}

#[test]
fn a_positive_definite_tag_runs_cholesky_and_cg() {
    // L = ⟨t, y⟩ with y = S⁻¹·b: b̄ = S⁻¹·t and S̄ = −b̄·yᵀ, checked without a solver as
    // S·b̄ = t and S̄ + b̄·yᵀ = 0.
    let device = Device::flex().autodiff();
    let b0: Vec<f64> = (0..N).map(|i| (i as f64 - 2.0) / 2.0).collect();
    let t: Vec<f64> = (0..N).map(|i| (i as f64).cos()).collect();
    for method in [Method::Auto, Method::Cholesky, Method::Cg] {
        let (f, s0) = definite_system(Structure::PositiveDefinite, method);
        let s = data(s0.clone(), &device).require_grad();
        let b = data(b0.clone(), &device).require_grad();
        let y = f.apply([(&s).into(), (&b).into()]).unwrap();
        let grads = try_backward(&(y.clone() * data(t.clone(), &device)).sum()).unwrap();
        let (s_bar, b_bar) = (s.grad(&grads).unwrap(), b.grad(&grads).unwrap());
        let plain = Device::flex();
        let sb = values(matvec(&data(s0.clone(), &plain), &b_bar.clone()));
        assert_close(&sb, &t, 1e-10, &format!("{method:?}: S·b̄"));
        let (y, b_bar, s_bar) = (values(y), values(b_bar), values(s_bar));
        let outer: Vec<f64> = (0..N * N).map(|ij| -b_bar[ij / N] * y[ij % N]).collect();
        assert_close(&s_bar, &outer, 1e-10, &format!("{method:?}: S̄"));
    }
    // CG needs the tag: without it the backward pass reports the solver's refusal
    let (f, s0) = definite_system(Structure::General, Method::Cg);
    let s = data(s0, &device).require_grad();
    let y = f
        .apply([(&s).into(), data(b0, &device).require_grad().into()])
        .unwrap();
    let Err(e) = try_backward(&y.sum()) else {
        panic!("CG without a definite tag returned gradients")
    };
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "method"),
        "{e}"
    );
}

#[test]
fn solver_errors_are_returned_before_recording() {
    let f = Implicit::new(
        |_| Err(Error::invalid("solver", "no solution")),
        |_, y| y.clone(),
    );
    let device = Device::flex().autodiff();
    let b = data(vec![1.0; 3], &device).require_grad();
    let e = f.apply([(&b).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "solver"),
        "{e}"
    );

    let f32_solution = Implicit::new(|x| Ok(x[0].clone().cast(BurnDType::F32)), |_, y| y.clone());
    let e = f32_solution.apply([(&b).into()]).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");

    let e = f32_solution.apply([]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "x"),
        "{e}"
    );
}

#[test]
fn conditions_of_the_wrong_length_poison_the_gradient_and_are_reported() {
    let f = Implicit::new(|x| Ok(x[0].clone()), |_, y| y.clone().narrow(0, 0, 2));
    let device = Device::flex().autodiff();
    let b = data(vec![1.0; 3], &device).require_grad();
    let y = f.apply([(&b).into()]).unwrap();
    let grads = y.sum().backward();
    let g = values(b.grad(&grads).unwrap());
    assert!(g.iter().all(|v| v.is_nan()), "{g:?}");
    let errors = take_backward_errors();
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, Error::ShapeMismatch { arg, .. } if arg == "conditions c(x, y)")),
        "{errors:?}"
    );
}

/// The fixed point of size `m` with a random `W` of Frobenius norm 1/2 (so `‖W‖₂ ≤ 1/2`),
/// its conditions counting their evaluations; returns `(dL/dW, dL/db)` of `L = Σ y ⊙ t`
/// from the implicit node under `method` (or, for `None`, burn's autodiff through 80
/// unrolled iterations) and the number of evaluations of the conditions.
fn large_fixed_point(m: usize, method: Option<Method>) -> (Vec<f64>, Vec<f64>, usize) {
    let mut rng = Rng::seed(21);
    let r: Vec<f64> = rng
        .tensor(&[m * m], DType::F64)
        .as_slice::<f64>()
        .unwrap()
        .to_vec();
    let norm = r.iter().map(|v| v * v).sum::<f64>().sqrt();
    let w0: Vec<f64> = r.iter().map(|v| 0.5 * v / norm).collect();
    let b0: Vec<f64> = (0..m).map(|i| ((i % 7) as f64 - 3.0) / 4.0).collect();
    let target: Vec<f64> = (0..m).map(|i| (i as f64 * 0.37).sin()).collect();
    let device = Device::flex().autodiff();
    let w = data(w0, &device).require_grad();
    let b = data(b0, &device).require_grad();
    let evaluations = Arc::new(AtomicUsize::new(0));
    let y = match method {
        Some(method) => {
            let count = Arc::clone(&evaluations);
            let conditions = move |x: &[Tensor<1>], y: &Tensor<1>| {
                count.fetch_add(1, Ordering::SeqCst);
                step(&x[0], &x[1], y) - y.clone()
            };
            let f =
                Implicit::new(solve, conditions).with_linear_solver(SolverOptions::from(method));
            f.apply([(&w).into(), (&b).into()]).unwrap()
        }
        None => {
            let mut y = b.zeros_like();
            for _ in 0..80 {
                y = step(&w, &b, &y);
            }
            y
        }
    };
    let grads = try_backward(&(y * data(target, &device)).sum()).unwrap();
    let (gw, gb) = (w.grad(&grads).unwrap(), b.grad(&grads).unwrap());
    (values(gw), values(gb), evaluations.load(Ordering::SeqCst))
}

#[test]
fn a_matrix_free_reverse_solve_never_assembles_a_jacobian() {
    let m = 300;
    assert!(
        m > AUTO_DENSE_LIMIT,
        "Method::Auto must pick a matrix-free solver"
    );
    let (uw, ub, _) = large_fixed_point(m, None);
    for method in [Method::Auto, Method::Gmres] {
        let (gw, gb, evaluations) = large_fixed_point(m, Some(method));
        assert_close(&gw, &uw, 1e-9, &format!("{method:?} dL/dW"));
        assert_close(&gb, &ub, 1e-9, &format!("{method:?} dL/db"));
        // One evaluation for c at the solution, one backward pass per Krylov iteration and
        // for the true residual, one for Bᵀu. A = I − diag(tanh′)·W with ‖diag(tanh′)·W‖ ≤ 1/2,
        // so GMRES reaches the relative tolerance 1e-10 in at most 34 iterations (its
        // residual after k steps is at most 2⁻ᵏ of the first); an assembly of the Jacobians
        // would cost m = 300 more.
        assert!(
            (2..=40).contains(&evaluations),
            "{method:?}: {evaluations} evaluations of the conditions for m = {m}"
        );
    }
    // The counter does see an assembly: LU needs the dense A, from m backward passes.
    let (_, gb, evaluations) = large_fixed_point(m, Some(Method::Lu));
    assert_close(&gb, &ub, 1e-9, "Lu dL/db");
    assert!(evaluations > m, "LU: {evaluations} evaluations for m = {m}");
    assert!(take_backward_errors().is_empty());
}

/// An implicit node whose conditions return 2 values for 3 unknowns (an error only the
/// backward pass sees), on an autodiff input `b`; returns `(b, y)`.
fn failing_in_backward() -> (Tensor<1>, Tensor<1>) {
    let f = Implicit::new(|x| Ok(x[0].clone()), |_, y| y.clone().narrow(0, 0, 2));
    let b = data(vec![1.0; 3], &Device::flex().autodiff()).require_grad();
    let y = f.apply([(&b).into()]).unwrap();
    (b, y)
}

fn is_conditions_shape_error(e: &Error) -> bool {
    matches!(e, Error::ShapeMismatch { arg, expected, actual }
        if arg == "conditions c(x, y)" && expected[..] == [3] && actual[..] == [2])
}

#[test]
fn conditions_of_another_dtype_are_a_typed_error_on_every_path() {
    // f32 conditions for an f64 solution: refused before the engine mixes the two dtypes
    // (the matrix-free path multiplied c by an f64 vector, which burn's kernels assert on)
    for method in [Method::Lu, Method::Gmres, Method::Cg] {
        let f = Implicit::new(|x| Ok(x[0].clone()), |_, y| y.clone().cast(BurnDType::F32))
            .with_linear_solver(SolverOptions::from(method))
            .with_structure(Structure::PositiveDefinite);
        let b = data(vec![1.0; 4], &Device::flex().autodiff()).require_grad();
        let y = f.apply([(&b).into()]).unwrap();
        let Err(e) = try_backward(&y.sum()) else {
            panic!("{method:?}: conditions of another dtype returned gradients")
        };
        assert!(
            matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "conditions c(x, y)"),
            "{method:?}: {e}"
        );
    }
}

#[test]
fn try_backward_returns_the_typed_error_of_a_failing_backward_pass() {
    let (_, y) = failing_in_backward();
    let Err(e) = try_backward(&y.sum()) else {
        panic!("the failing backward pass returned gradients")
    };
    assert!(is_conditions_shape_error(&e), "{e}");
    assert!(
        take_backward_errors().is_empty(),
        "try_backward took the error"
    );

    let untracked = data(vec![1.0; 2], &Device::flex());
    let Err(e) = try_backward(&untracked) else {
        panic!("an untracked loss returned gradients")
    };
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "loss"),
        "{e}"
    );
}

#[test]
fn a_backward_pass_on_another_thread_reports_to_the_thread_that_built_the_graph() {
    let (b, y) = failing_in_backward();
    let loss = y.sum();
    let (gradient, seen_there) = std::thread::spawn(move || {
        let grads = loss.backward();
        (values(b.grad(&grads).unwrap()), take_backward_errors())
    })
    .join()
    .unwrap();
    assert!(gradient.iter().all(|v| v.is_nan()), "{gradient:?}");
    assert!(seen_there.is_empty(), "{seen_there:?}");
    let errors = take_backward_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(is_conditions_shape_error(&errors[0]), "{}", errors[0]);
}

/// `‖y(W, b) − y*‖²` computed independently: plain fixed-point iteration on the host.
fn host_loss(w: &[f64], b: &[f64], target: &[f64]) -> f64 {
    let mut y = vec![0.0; N];
    for _ in 0..500 {
        y = (0..N)
            .map(|i| ((0..N).map(|j| w[i * N + j] * y[j]).sum::<f64>() + b[i]).tanh())
            .collect();
    }
    y.iter().zip(target).map(|(y, t)| (y - t) * (y - t)).sum()
}

#[test]
fn gradient_descent_through_the_fixed_point_lowers_the_loss() {
    let device = Device::flex().autodiff();
    let f = fixed_point(SolverOptions::default());
    let target: Vec<f64> = (0..N).map(|i| 0.4 * (i as f64).cos()).collect();
    let (mut w, mut b) = parameters();
    let mut losses = vec![host_loss(&w, &b, &target)];
    for _ in 0..5 {
        let wt = data(w.clone(), &device).require_grad();
        let bt = data(b.clone(), &device).require_grad();
        let y = f.apply([(&wt).into(), (&bt).into()]).unwrap();
        let residual = y - data(target.clone(), &device);
        let grads = (residual.clone() * residual).sum().backward();
        let lr = 0.2;
        let gw = values(wt.grad(&grads).unwrap());
        let gb = values(bt.grad(&grads).unwrap());
        w.iter_mut().zip(gw).for_each(|(p, g)| *p -= lr * g);
        b.iter_mut().zip(gb).for_each(|(p, g)| *p -= lr * g);
        losses.push(host_loss(&w, &b, &target));
    }
    for pair in losses.windows(2) {
        assert!(pair[1] < pair[0], "loss did not decrease: {losses:?}");
    }
    assert!(losses[5] < 0.5 * losses[0], "{losses:?}");
}
