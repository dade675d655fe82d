//! The trainable layers of `adrules_candle_nn`: the einsum layer against candle's own matmul
//! (values and gradients from candle's autograd) and against central differences; the
//! deep-equilibrium layer against central differences of its solve (with and without input
//! map and bias) and against candle's autograd through the unrolled iteration (dense and
//! matrix-free backward); candle-nn's SGD on a model built from both layers; parameters a
//! `VarBuilder` holds used as they are; typed errors for bad configurations and inputs, and
//! for an iteration that does not converge.

use std::collections::HashMap;

use adrules_candle::adrules_error;
use adrules_candle::candle_core::{DType, Device, Tensor, Var};
use adrules_candle_nn::candle_nn::{Module, Optimizer, SGD, VarBuilder, VarMap};
use adrules_candle_nn::{Deq, DeqConfig, Einsum, EinsumConfig};
use adrules_core::Error;
use adrules_core::implicit::{Method, SolverOptions};
use adrules_testing::Rng;

fn normal(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.normal()).collect()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_vec1::<f64>().unwrap()
}

fn tensor(v: &[f64], dims: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims, &Device::Cpu).unwrap()
}

fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

/// Central differences of `loss` at `p` along every coordinate.
fn central(p: &[f64], h: f64, loss: &dyn Fn(&[f64]) -> f64) -> Vec<f64> {
    (0..p.len())
        .map(|i| {
            let (mut a, mut b) = (p.to_vec(), p.to_vec());
            a[i] += h;
            b[i] -= h;
            (loss(&a) - loss(&b)) / (2.0 * h)
        })
        .collect()
}

/// A builder holding these named tensors (used as they are by the layers).
fn holding(named: &[(&str, Tensor)]) -> VarBuilder<'static> {
    let map: HashMap<String, Tensor> = named
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    VarBuilder::from_tensors(map, DType::F64, &Device::Cpu)
}

fn dot(t: &Tensor, target: &[f64]) -> f64 {
    values(t).iter().zip(target).map(|(a, b)| a * b).sum()
}

#[test]
fn einsum_layer_matches_candle_matmul_in_value_and_gradient() {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F64, &Device::Cpu);
    let config = EinsumConfig::new("bi,ij->bj", vec![vec![3, 4]]).with_seed(3);
    let layer = Einsum::new(&config, vb).unwrap();
    let mut rng = Rng::seed(1);
    let (x0, t0) = (normal(&mut rng, 15), normal(&mut rng, 20));
    let x = Var::from_tensor(&tensor(&x0, &[5, 3])).unwrap();
    let t = tensor(&t0, &[5, 4]);
    let y = layer.forward(x.as_tensor()).unwrap();
    let grads = (&y * &t).unwrap().sum_all().unwrap().backward().unwrap();
    let w = &layer.weights()[0];

    // candle's own matmul and autograd on copies of the same values
    let w_ref = Var::from_tensor(&w.copy().unwrap()).unwrap();
    let x_ref = Var::from_tensor(&tensor(&x0, &[5, 3])).unwrap();
    let y_ref = x_ref.matmul(w_ref.as_tensor()).unwrap();
    let grads_ref = (&y_ref * &t)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_close(&values(&y), &values(&y_ref), 1e-14, "y");
    let g = |gs: &adrules_candle::candle_core::backprop::GradStore, v: &Tensor| {
        values(gs.get(v).unwrap())
    };
    assert_close(
        &g(&grads, w),
        &g(&grads_ref, w_ref.as_tensor()),
        1e-14,
        "dL/dW",
    );
    assert_close(
        &g(&grads, x.as_tensor()),
        &g(&grads_ref, x_ref.as_tensor()),
        1e-14,
        "dL/dx",
    );
    // the variable is the VarMap's, initialised within ±1/√3 (fan-in 3), not all equal
    assert_eq!(varmap.all_vars().len(), 1);
    let w0 = values(w);
    assert!(w0.iter().all(|v| v.abs() < 1.0 / 3f64.sqrt()), "{w0:?}");
    assert!(w0.iter().any(|v| (v - w0[0]).abs() > 1e-3), "{w0:?}");
}

#[test]
fn einsum_layer_gradients_match_finite_differences() {
    let config =
        EinsumConfig::new("ijk,bjk,kl->bil", vec![vec![2, 3, 4], vec![4, 2]]).with_input(1);
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F64, &Device::Cpu);
    let layer = Einsum::new(&config, vb).unwrap();
    assert_eq!(layer.layout().fan_in(), [12, 4]);
    let mut rng = Rng::seed(2);
    let w0 = values(&layer.weights()[0]);
    let w1 = values(&layer.weights()[1]);
    let (x, t) = (normal(&mut rng, 36), normal(&mut rng, 12));
    let x_var = Var::from_tensor(&tensor(&x, &[3, 3, 4])).unwrap();
    let y = layer.forward(x_var.as_tensor()).unwrap();
    let grads = (&y * &tensor(&t, &[3, 2, 2]))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let g = |v: &Tensor| values(grads.get(v).unwrap());
    let loss = |k: usize, v: &[f64]| {
        let mut p: [&[f64]; 3] = [&w0, &w1, &x];
        p[k] = v;
        let vb = holding(&[
            ("w0", tensor(p[0], &[2, 3, 4])),
            ("w1", tensor(p[1], &[4, 2])),
        ]);
        let layer = Einsum::new(&config, vb).unwrap();
        dot(&layer.forward(&tensor(p[2], &[3, 3, 4])).unwrap(), &t)
    };
    // the loss is linear in each operand: central differences are exact up to rounding
    let fd = |k: usize, p: &[f64]| central(p, 1e-3, &|v| loss(k, v));
    assert_close(&g(&layer.weights()[0]), &fd(0, &w0), 1e-9, "dL/dw0");
    assert_close(&g(&layer.weights()[1]), &fd(1, &w1), 1e-9, "dL/dw1");
    assert_close(&g(x_var.as_tensor()), &fd(2, &x), 1e-9, "dL/dx");
}

const B: usize = 5;
const H: usize = 4;
const D: usize = 3;

fn deq_config(full: bool) -> DeqConfig {
    let c = DeqConfig::new(H)
        .with_tolerance(1e-14)
        .with_contraction(0.6)
        .with_seed(5);
    if full {
        c.with_input_features(D)
    } else {
        c.with_bias(false)
    }
}

/// The host values `[W, U, b, x]`: the layer's initial parameters, a random input.
fn deq_point(full: bool) -> [Vec<f64>; 4] {
    let p = deq_config(full).init().unwrap();
    let mut rng = Rng::seed(4);
    let x = normal(&mut rng, B * if full { D } else { H });
    [p.w, p.u.unwrap_or_default(), p.b.unwrap_or_default(), x]
}

/// The layer holding the parameters `p` (as variables) and `x` as a variable.
fn deq_at(full: bool, p: &[Vec<f64>; 4]) -> (Deq, Vec<Var>) {
    let var = |v: &[f64], dims: &[usize]| Var::from_tensor(&tensor(v, dims)).unwrap();
    let mut vars = vec![var(&p[0], &[H, H])];
    let mut named = vec![("w", vars[0].as_tensor().clone())];
    if full {
        vars.push(var(&p[1], &[H, D]));
        vars.push(var(&p[2], &[H]));
        named.push(("u", vars[1].as_tensor().clone()));
        named.push(("b", vars[2].as_tensor().clone()));
    }
    vars.push(var(&p[3], &[B, if full { D } else { H }]));
    let deq = Deq::new(&deq_config(full), holding(&named)).unwrap();
    (deq, vars)
}

fn target() -> Vec<f64> {
    (0..B * H).map(|i| (0.7 * i as f64).sin()).collect()
}

/// The gradients of `L = Σ z ⊙ t` in `[W, (U, b,) x]`, implicit or unrolled.
fn deq_gradients(full: bool, method: Method, unrolled: Option<usize>) -> Vec<Vec<f64>> {
    let (deq, vars) = deq_at(full, &deq_point(full));
    let deq = deq.with_linear_solver(SolverOptions::from(method));
    let x = vars.last().unwrap().as_tensor();
    let z = match unrolled {
        None => deq.forward(x).unwrap(),
        Some(n) => deq.forward_unrolled(x, n).unwrap(),
    };
    let loss = (&z * &tensor(&target(), &[B, H]))
        .unwrap()
        .sum_all()
        .unwrap();
    let grads = loss.backward().unwrap();
    vars.iter()
        .map(|v| values(grads.get(v.as_tensor()).unwrap()))
        .collect()
}

#[test]
fn deq_gradients_match_finite_differences_of_the_solve() {
    for full in [true, false] {
        let p = deq_point(full);
        let grads = deq_gradients(full, Method::Auto, None);
        let slots: Vec<usize> = if full { vec![0, 1, 2, 3] } else { vec![0, 3] };
        let t = target();
        for (g, &k) in grads.iter().zip(&slots) {
            let loss = |v: &[f64]| {
                let mut q = p.clone();
                q[k] = v.to_vec();
                let (deq, vars) = deq_at(full, &q);
                dot(&deq.forward(vars.last().unwrap().as_tensor()).unwrap(), &t)
            };
            let fd = central(&p[k], 1e-5, &loss);
            assert_close(g, &fd, 1e-7, &format!("slot {k} (full: {full})"));
        }
    }
}

#[test]
fn deq_gradient_matches_autodiff_through_the_unrolled_solver() {
    // ‖W‖_F = 0.6: 120 unrolled steps are converged far below f64 rounding
    let unrolled = deq_gradients(true, Method::Auto, Some(120));
    for method in [Method::Lu, Method::Gmres] {
        let implicit = deq_gradients(true, method, None);
        for (k, (a, b)) in implicit.iter().zip(&unrolled).enumerate() {
            assert_close(a, b, 1e-9, &format!("{method:?} [{k}]"));
        }
    }
    let (deq, vars) = deq_at(true, &deq_point(true));
    let x = vars[3].as_tensor();
    let (z, iterations) = deq.solve(x).unwrap();
    assert!((10..120).contains(&iterations), "{iterations}");
    let z_unrolled = deq.forward_unrolled(x, 120).unwrap();
    assert_close(&values(&z), &values(&z_unrolled), 1e-13, "z*");
}

#[test]
fn candle_nn_sgd_steps_reduce_the_loss() {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F64, &Device::Cpu);
    let deq = Deq::new(&DeqConfig::new(8).with_input_features(2), vb.pp("deq")).unwrap();
    let readout = Einsum::new(
        &EinsumConfig::new("bh,ho->bo", vec![vec![8, 1]]),
        vb.pp("out"),
    )
    .unwrap();
    assert_eq!(varmap.all_vars().len(), 4);
    let xs: Vec<f64> = (0..32)
        .map(|i| ((i * 7 % 32) as f64 / 16.0) - 1.0)
        .collect();
    let x = tensor(&xs, &[16, 2]);
    let y: Vec<f64> = xs.chunks(2).map(|p| (2.0 * p[0]).sin() * p[1]).collect();
    let y = tensor(&y, &[16, 1]);
    let mut sgd = SGD::new(varmap.all_vars(), 0.5).unwrap();
    let mut losses = Vec::new();
    for _ in 0..30 {
        let out = readout.forward(&deq.forward(&x).unwrap()).unwrap();
        let loss = (out - &y).unwrap().sqr().unwrap().mean_all().unwrap();
        losses.push(loss.to_scalar::<f64>().unwrap());
        sgd.backward_step(&loss).unwrap();
    }
    assert!(losses[29] < 0.5 * losses[0], "{losses:?}");
}

#[test]
fn held_parameters_are_used_as_they_are() {
    let w = tensor(&[0.1, 0.0, 0.0, 0.2], &[2, 2]);
    let deq = Deq::new(&DeqConfig::new(2).with_bias(false), holding(&[("w", w)])).unwrap();
    assert_eq!(values(deq.w()), [0.1, 0.0, 0.0, 0.2]);
    // a diagonal W: each coordinate solves z = tanh(w·z + x) on its own
    let z = deq.forward(&tensor(&[1.0, -1.0], &[1, 2])).unwrap();
    let z = values(&z);
    assert!((z[0] - (0.1 * z[0] + 1.0).tanh()).abs() < 1e-5, "{z:?}");
    assert!((z[1] - (0.2 * z[1] - 1.0).tanh()).abs() < 1e-5, "{z:?}");
}

fn typed(e: adrules_candle::candle_core::Error) -> Error {
    adrules_error(&e)
        .cloned()
        .unwrap_or_else(|| panic!("untyped: {e}"))
}

#[test]
fn bad_configurations_and_inputs_are_typed_errors() {
    let vb = || VarBuilder::from_varmap(&VarMap::new(), DType::F64, &Device::Cpu);
    let einsum = |eq: &str, shapes: Vec<Vec<usize>>| {
        Einsum::new(&EinsumConfig::new(eq, shapes), vb()).map_err(typed)
    };
    let e = einsum("bi,ij->bj", vec![vec![3]]).unwrap_err();
    assert!(
        matches!(e, Error::RankMismatch { ref arg, .. } if arg == "shapes[0]"),
        "{e}"
    );
    let e = einsum("bi,ij-bj", vec![vec![3, 4]]).unwrap_err();
    assert!(matches!(e, Error::Parse { .. }), "{e}");
    let e = einsum("bi,ij,jk->bk", vec![vec![3, 4], vec![5, 2]]).unwrap_err();
    assert!(matches!(e, Error::InvalidLabel { .. }), "{e}");
    let vb_u8 = VarBuilder::from_varmap(&VarMap::new(), DType::U8, &Device::Cpu);
    let e =
        typed(Einsum::new(&EinsumConfig::new("bi,ij->bj", vec![vec![3, 4]]), vb_u8).unwrap_err());
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");

    let layer = einsum("bi,ij->bj", vec![vec![3, 4]]).unwrap();
    let e = typed(layer.forward(&tensor(&[0.0; 8], &[2, 4])).unwrap_err());
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "input"),
        "{e}"
    );

    let deq = |c: DeqConfig| Deq::new(&c, vb()).map_err(typed);
    let e = deq(DeqConfig::new(3).with_contraction(1.5)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "contraction"),
        "{e}"
    );
    let e = deq(DeqConfig::new(3).with_tolerance(f64::NAN)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "tolerance"),
        "{e}"
    );
    let layer = deq(DeqConfig::new(3).with_input_features(2)).unwrap();
    let e = typed(layer.forward(&tensor(&[0.0; 6], &[2, 3])).unwrap_err());
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "x"),
        "{e}"
    );
    let e = typed(layer.forward(&tensor(&[0.0; 2], &[2])).unwrap_err());
    assert!(
        matches!(e, Error::RankMismatch { ref arg, .. } if arg == "x"),
        "{e}"
    );

    // three iterations cannot reach 1e-14 at rate 0.5: a typed error, before any recording
    let layer = deq(DeqConfig::new(3)
        .with_tolerance(1e-14)
        .with_max_iterations(3))
    .unwrap();
    let x = Var::from_tensor(&tensor(&[1.0, -2.0, 0.5], &[1, 3])).unwrap();
    for e in [
        layer.forward(x.as_tensor()).unwrap_err(),
        layer.solve(x.as_tensor()).unwrap_err(),
    ] {
        let e = typed(e);
        assert!(
            matches!(e, Error::NotConverged { iterations: 3, residual, .. } if residual > 1e-14),
            "{e}"
        );
    }
}

#[test]
fn clamp_contraction_rescales_the_variable_in_place() {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F64, &Device::Cpu);
    let deq = Deq::new(&DeqConfig::new(4).with_contraction(0.5), vb).unwrap();
    let before = values(deq.w());
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm(&before) - 0.5).abs() < 1e-12);
    deq.clamp_contraction(0.6).unwrap();
    assert_eq!(values(deq.w()), before);
    deq.clamp_contraction(0.25).unwrap();
    // the layer's tensor and the VarMap's variable are one storage
    let var = varmap.data().lock().unwrap()["w"].clone();
    for v in [values(deq.w()), values(var.as_tensor())] {
        for (a, b) in v.iter().zip(&before) {
            assert!((a - 0.5 * b).abs() < 1e-15, "{a} vs {b}/2");
        }
    }
    let e = typed(deq.clamp_contraction(0.0).unwrap_err());
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "max"),
        "{e}"
    );
    // held weights that are not variables cannot be rescaled in place
    let held = holding(&[("w", tensor(&[1.0, 0.0, 0.0, 1.0], &[2, 2]))]);
    let deq = Deq::new(&DeqConfig::new(2).with_bias(false), held).unwrap();
    let e = typed(deq.clamp_contraction(0.5).unwrap_err());
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "w"),
        "{e}"
    );
}
