//! The trainable layers of `adrules_burn_nn`: the einsum layer against burn's own matmul
//! (values and gradients from burn's autodiff) and against central differences; the
//! deep-equilibrium layer against central differences of its solve (with and without input
//! map and bias, dense and matrix-free backward) and against burn's autodiff through the
//! unrolled iteration; burn-optim's SGD on a model built from both layers; typed errors for
//! bad configurations and inputs, and for an iteration that does not converge.

use adrules_burn::burn_tensor::{DType, Device, Tensor, TensorData};
use adrules_burn::take_backward_errors;
use adrules_burn_nn::burn_core::module::{Module, Param};
use adrules_burn_nn::{Deq, DeqConfig, Einsum, EinsumConfig, Weight};
use adrules_core::Error;
use adrules_core::implicit::{Method, SolverOptions};
use adrules_testing::Rng;

fn tensor<const D: usize>(v: &[f64], dims: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::<D>::from_data(TensorData::new(v.to_vec(), dims), (device, DType::F64))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

fn normal(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.normal()).collect()
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

#[test]
fn einsum_layer_matches_burn_matmul_in_value_and_gradient() {
    let device = Device::flex().autodiff();
    let layer = EinsumConfig::new("bi,ij->bj".into(), vec![vec![3, 4]])
        .with_dtype(Some(DType::F64))
        .with_seed(3)
        .init(&device)
        .unwrap();
    let mut rng = Rng::seed(1);
    let (x0, t0) = (normal(&mut rng, 15), normal(&mut rng, 20));
    let x = tensor(&x0, [5, 3], &device).require_grad();
    let y: Tensor<2> = layer.forward(x.clone()).unwrap();
    let grads = (y.clone() * tensor(&t0, [5, 4], &device)).sum().backward();
    let (gw, gx) = (
        layer.weights[0].grad::<2>(&grads).unwrap().unwrap(),
        x.grad(&grads).unwrap(),
    );

    // burn's own matmul and autodiff on copies of the same values
    let w_ref = layer.weights[0]
        .value::<2>()
        .unwrap()
        .detach()
        .require_grad();
    let x_ref = tensor(&x0, [5, 3], &device).require_grad();
    let y_ref = x_ref.clone().matmul(w_ref.clone());
    let grads_ref = (y_ref.clone() * tensor(&t0, [5, 4], &device))
        .sum()
        .backward();
    assert_close(&values(y), &values(y_ref), 1e-14, "y");
    let gw_ref = values(w_ref.grad(&grads_ref).unwrap());
    assert_close(&values(gw), &gw_ref, 1e-14, "dL/dW");
    assert_close(
        &values(gx),
        &values(x_ref.grad(&grads_ref).unwrap()),
        1e-14,
        "dL/dx",
    );
    // fan-in 3 (i summed): every initial weight within ±1/√3, and not all equal
    let w0 = values(layer.weights[0].value::<2>().unwrap());
    assert!(w0.iter().all(|v| v.abs() < 1.0 / 3f64.sqrt()), "{w0:?}");
    assert!(w0.iter().any(|v| (v - w0[0]).abs() > 1e-3), "{w0:?}");
}

/// `L = Σ y ⊙ t` of the three-operand layer `ijk,bjk,kl->bil` (input second) with weights
/// `w0` (2×3×4), `w1` (4×2) and input `x` (3×3×4) given as host values.
fn einsum_loss(layer: &Einsum, p: [&[f64]; 3], t: &[f64], device: &Device) -> (f64, Einsum) {
    let mut layer = layer.clone();
    layer.weights = vec![
        Weight::R3(Param::from_tensor(tensor(p[0], [2, 3, 4], device))),
        Weight::R2(Param::from_tensor(tensor(p[1], [4, 2], device))),
    ];
    let y: Tensor<3> = layer.forward(tensor(p[2], [3, 3, 4], device)).unwrap();
    let l = values(y).iter().zip(t).map(|(a, b)| a * b).sum();
    (l, layer)
}

#[test]
fn einsum_layer_gradients_match_finite_differences() {
    let device = Device::flex().autodiff();
    let config = EinsumConfig::new("ijk,bjk,kl->bil".into(), vec![vec![2, 3, 4], vec![4, 2]])
        .with_input(1)
        .with_dtype(Some(DType::F64));
    let layer = config.init(&device).unwrap();
    // summed labels: j, k for the first weight (3·4), k for the second (4)
    assert_eq!(layer.layout().fan_in(), [12, 4]);
    let mut rng = Rng::seed(2);
    let w0 = values(layer.weights[0].value::<3>().unwrap());
    let w1 = values(layer.weights[1].value::<2>().unwrap());
    let (x, t) = (normal(&mut rng, 36), normal(&mut rng, 3 * 2 * 2));
    let x_leaf = tensor(&x, [3, 3, 4], &device).require_grad();
    let y: Tensor<3> = layer.forward(x_leaf.clone()).unwrap();
    let grads = (y * tensor(&t, [3, 2, 2], &device)).sum().backward();
    let g0 = values(layer.weights[0].grad::<3>(&grads).unwrap().unwrap());
    let g1 = values(layer.weights[1].grad::<2>(&grads).unwrap().unwrap());
    let gx = values(x_leaf.grad(&grads).unwrap());

    let plain = Device::flex();
    let loss = |k: usize, v: &[f64]| {
        let mut p: [&[f64]; 3] = [&w0, &w1, &x];
        p[k] = v;
        einsum_loss(&layer, p, &t, &plain).0
    };
    // the loss is linear in each operand: central differences are exact up to rounding
    assert_close(&g0, &central(&w0, 1e-3, &|v| loss(0, v)), 1e-9, "dL/dw0");
    assert_close(&g1, &central(&w1, 1e-3, &|v| loss(1, v)), 1e-9, "dL/dw1");
    assert_close(&gx, &central(&x, 1e-3, &|v| loss(2, v)), 1e-9, "dL/dx");
}

const B: usize = 5;
const H: usize = 4;
const D: usize = 3;

/// The host values `[W, U, b, x]` of a layer and an input.
type Point = [Vec<f64>; 4];

/// The layer with the parameters of `p` (U and b when `full`), and `x`, on `device`.
fn deq_at(config: &DeqConfig, p: &Point, full: bool, device: &Device) -> (Deq, Tensor<2>) {
    let mut deq = config.init(device).unwrap();
    let d = if full { D } else { H };
    deq.w = Param::from_tensor(tensor(&p[0], [H, H], device));
    if full {
        deq.u = Some(Param::from_tensor(tensor(&p[1], [H, D], device)));
        deq.b = Some(Param::from_tensor(tensor(&p[2], [H], device)));
    }
    (deq, tensor(&p[3], [B, d], device))
}

fn deq_config(full: bool) -> DeqConfig {
    let c = DeqConfig::new(H)
        .with_tolerance(1e-14)
        .with_contraction(0.6)
        .with_seed(5)
        .with_dtype(Some(DType::F64));
    if full {
        c.with_input_features(Some(D))
    } else {
        c.with_bias(false)
    }
}

/// The layer's initial parameters and a random input, as host values.
fn deq_point(full: bool) -> Point {
    let config = deq_config(full);
    let deq = config.init(&Device::flex()).unwrap();
    let val = |p: Option<Vec<f64>>| p.unwrap_or_default();
    let mut rng = Rng::seed(4);
    let x = normal(&mut rng, B * if full { D } else { H });
    [
        values(deq.w.val()),
        val(deq.u.as_ref().map(|u| values(u.val()))),
        val(deq.b.as_ref().map(|b| values(b.val()))),
        x,
    ]
}

fn target() -> Vec<f64> {
    (0..B * H).map(|i| (0.7 * i as f64).sin()).collect()
}

/// `[dL/dW, dL/dU, dL/db, dL/dx]` of `L = Σ z ⊙ t`, through the implicit node (`unrolled:
/// None`) or burn's autodiff through that many iterations.
fn deq_gradients(full: bool, method: Method, unrolled: Option<usize>) -> Point {
    let device = Device::flex().autodiff();
    let config = deq_config(full);
    let (deq, x) = deq_at(&config, &deq_point(full), full, &device);
    let deq = deq.with_linear_solver(SolverOptions::from(method));
    let x = x.require_grad();
    let z = match unrolled {
        None => deq.forward(x.clone()).unwrap(),
        Some(n) => deq.forward_unrolled(x.clone(), n).unwrap(),
    };
    let grads = (z * tensor(&target(), [B, H], &device)).sum().backward();
    let g = |t: Option<Tensor<2>>| t.map(values).unwrap_or_default();
    [
        g(deq.w.grad(&grads)),
        g(deq.u.as_ref().and_then(|u| u.grad(&grads))),
        deq.b
            .as_ref()
            .and_then(|b| b.grad(&grads))
            .map(values)
            .unwrap_or_default(),
        g(x.grad(&grads)),
    ]
}

#[test]
fn deq_gradients_match_finite_differences_of_the_solve() {
    for full in [true, false] {
        let p = deq_point(full);
        let grads = deq_gradients(full, Method::Auto, None);
        let plain = Device::flex();
        let config = deq_config(full);
        let t = target();
        let names = ["dL/dW", "dL/dU", "dL/db", "dL/dx"];
        for k in 0..4 {
            let loss = |v: &[f64]| {
                let mut q = p.clone();
                q[k] = v.to_vec();
                let (deq, x) = deq_at(&config, &q, full, &plain);
                let z = deq.forward(x).unwrap();
                values(z).iter().zip(&t).map(|(a, b)| a * b).sum::<f64>()
            };
            let fd = central(&p[k], 1e-5, &loss);
            assert_close(
                &grads[k],
                &fd,
                1e-7,
                &format!("{} (full: {full})", names[k]),
            );
        }
    }
    assert!(take_backward_errors().is_empty());
}

#[test]
fn deq_gradient_matches_autodiff_through_the_unrolled_solver() {
    // ‖W‖_F = 0.6: 120 unrolled steps are converged far below f64 rounding
    let unrolled = deq_gradients(true, Method::Auto, Some(120));
    for method in [Method::Lu, Method::Gmres] {
        let implicit = deq_gradients(true, method, None);
        for k in 0..4 {
            assert_close(
                &implicit[k],
                &unrolled[k],
                1e-9,
                &format!("{method:?} [{k}]"),
            );
        }
    }
    // the implicit forward value is the unrolled one, and the solver stopped early
    let device = Device::flex();
    let (deq, x) = deq_at(&deq_config(true), &deq_point(true), true, &device);
    let (z, iterations) = deq.solve(x.clone()).unwrap();
    assert!((10..120).contains(&iterations), "{iterations}");
    let z_unrolled = values(deq.forward_unrolled(x, 120).unwrap());
    assert_close(&values(z), &z_unrolled, 1e-13, "z*");
    assert!(take_backward_errors().is_empty());
}

/// A DEQ classifier's body and read-out, as a user would derive it.
mod model {
    use adrules_burn::burn_tensor::Tensor;
    use adrules_burn_nn::burn_core as burn;
    use adrules_burn_nn::{Deq, Einsum};
    use burn::module::Module;

    #[derive(Module, Debug)]
    pub struct Net {
        pub deq: Deq,
        pub readout: Einsum,
    }

    impl Net {
        pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
            let z = self.deq.forward(x).unwrap();
            self.readout.forward(z).unwrap()
        }
    }
}

#[test]
fn burn_optim_sgd_steps_reduce_the_loss() {
    use burn_optim::{GradientsParams, SgdConfig};
    let device = Device::flex().autodiff();
    let deq = DeqConfig::new(8)
        .with_input_features(Some(2))
        .with_dtype(Some(DType::F64))
        .init(&device)
        .unwrap();
    let readout = EinsumConfig::new("bh,ho->bo".into(), vec![vec![8, 1]])
        .with_dtype(Some(DType::F64))
        .init(&device)
        .unwrap();
    let mut net = model::Net { deq, readout };
    assert_eq!(net.num_params(), 8 * 8 + 8 * 2 + 8 + 8);
    let xs: Vec<f64> = (0..32)
        .map(|i| ((i * 7 % 32) as f64 / 16.0) - 1.0)
        .collect();
    let x = tensor(&xs, [16, 2], &device);
    let y: Vec<f64> = xs.chunks(2).map(|p| (2.0 * p[0]).sin() * p[1]).collect();
    let y = tensor(&y, [16, 1], &device);
    let mut optim = SgdConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..30 {
        let loss = (net.forward(x.clone()) - y.clone()).powi_scalar(2).mean();
        losses.push(loss.clone().into_scalar::<f64>());
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        net = optim.step(0.5, net, grads);
    }
    let (first, last) = (losses[0], losses[29]);
    assert!(last < 0.5 * first, "{losses:?}");
    assert!(take_backward_errors().is_empty());
}

#[test]
fn bad_configurations_and_inputs_are_typed_errors() {
    let device = Device::flex();
    let einsum = |eq: &str, shapes: Vec<Vec<usize>>| {
        EinsumConfig::new(eq.into(), shapes)
            .with_dtype(Some(DType::F64))
            .init(&device)
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
    let e = einsum("b,abcdefg->b", vec![vec![1; 7]]).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = einsum("a,a,a,a,a,a,a,a,a->a", vec![vec![2]; 8]).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = EinsumConfig::new("bi,ij->bj".into(), vec![vec![3, 4]])
        .with_dtype(Some(DType::I32))
        .init(&device)
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");

    let layer = einsum("bi,ij->bj", vec![vec![3, 4]]).unwrap();
    let x = tensor(&[0.0; 8], [2, 4], &device);
    let e = layer.forward::<2, 2>(x).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "input"),
        "{e}"
    );
    let x = tensor(&[0.0; 6], [2, 3], &device);
    let e = layer.forward::<2, 3>(x).unwrap_err();
    assert!(
        matches!(e, Error::RankMismatch { ref arg, .. } if arg == "output"),
        "{e}"
    );

    let deq = |c: DeqConfig| c.with_dtype(Some(DType::F64)).init(&device);
    let e = deq(DeqConfig::new(3).with_contraction(1.5)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "contraction"),
        "{e}"
    );
    let e = deq(DeqConfig::new(3).with_max_iterations(0)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "max_iterations"),
        "{e}"
    );
    let layer = deq(DeqConfig::new(3).with_input_features(Some(2))).unwrap();
    let e = layer
        .forward(tensor(&[0.0; 6], [2, 3], &device))
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "x"),
        "{e}"
    );
    let e = layer.forward(tensor(&[], [0, 2], &device)).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "x"),
        "{e}"
    );

    // three iterations cannot reach 1e-14 at rate 0.5: a typed error, before any recording
    let autodiff = Device::flex().autodiff();
    let layer = DeqConfig::new(3)
        .with_tolerance(1e-14)
        .with_max_iterations(3)
        .with_dtype(Some(DType::F64))
        .init(&autodiff)
        .unwrap();
    let x = tensor(&[1.0, -2.0, 0.5], [1, 3], &autodiff).require_grad();
    for e in [
        layer.forward(x.clone()).unwrap_err(),
        layer.solve(x).unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::NotConverged { iterations: 3, residual, .. } if residual > 1e-14),
            "{e}"
        );
    }
}

#[test]
fn clamp_contraction_rescales_w_only_above_the_bound() {
    let device = Device::flex().autodiff();
    let deq = DeqConfig::new(4)
        .with_contraction(0.5)
        .with_dtype(Some(DType::F64))
        .init(&device)
        .unwrap();
    let before = values(deq.w.val());
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm(&before) - 0.5).abs() < 1e-12);
    let kept = deq.clone().clamp_contraction(0.6).unwrap();
    assert_eq!(values(kept.w.val()), before);
    let id = deq.w.id;
    let clamped = deq.clamp_contraction(0.25).unwrap();
    let after = values(clamped.w.val());
    for (a, b) in after.iter().zip(&before) {
        assert!((a - 0.5 * b).abs() < 1e-15, "{a} vs {b}/2");
    }
    // the same parameter, still trained
    assert_eq!(clamped.w.id, id);
    assert!(clamped.w.val().is_require_grad());
    let e = clamped.clamp_contraction(1.0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "max"),
        "{e}"
    );
}

#[test]
fn deq_config_defaults_are_the_cores() {
    use adrules_core::layers;
    for hidden in [1, 7] {
        assert_eq!(
            DeqConfig::new(hidden).core(),
            layers::DeqConfig::new(hidden)
        );
    }
    let e = DeqConfig::new(3)
        .init(&Device::flex().autodiff())
        .unwrap()
        .solve(tensor(&[0.0; 8], [2, 4], &Device::flex()))
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "x"),
        "{e}"
    );
}
