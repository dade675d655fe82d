//! The ops on burn's user-facing tensors: typed errors before anything is recorded, gradient
//! accumulation, constants, the C-updating form, scalar outputs, checkpointing strategies.

use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_burn::{Op, Operand, apply, contract};
use adrules_core::rules::{AddOp, ContractOp, TraceOp};
use adrules_core::{ContractSpec, Error, Permutation, TraceSpec};

fn ramp<const D: usize>(dims: [usize; D], shift: f64, device: &Device) -> Tensor<D> {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i * 37 + 11) % 17) as f64 / 8.0 - 1.0 + shift)
        .collect();
    Tensor::<D>::from_data(TensorData::new(v, dims), (device, BurnDType::F64))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

fn assert_close(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: element {i}: {x} vs {y}"
        );
    }
}

fn op(a: &str, b: &str, c: &str) -> ContractOp {
    ContractOp::new(ContractSpec::from_labels(a, b, c).unwrap())
}

#[test]
fn errors_are_typed_and_leave_the_graph_usable() {
    let device = Device::flex().autodiff();
    let a = ramp([2, 3], 0.0, &device).require_grad();
    let b = ramp([3, 4], 0.5, &device).require_grad();
    let mm = op("ij", "jk", "ik");

    let e = contract::<3>(&mm, &a, &b).unwrap_err();
    assert!(
        matches!(&e, Error::RankMismatch { arg, expected: 2, actual: 3 } if arg == "output"),
        "{e}"
    );

    let e = contract::<2>(&mm, &a, &a).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");

    let e = contract::<3>(&op("ijk", "kl", "ijl"), &a, &b).unwrap_err();
    assert!(
        matches!(&e, Error::RankMismatch { arg, .. } if arg == "a"),
        "{e}"
    );

    let e = contract::<2>(&mm.clone().beta(1.0), &a, &b).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "beta"),
        "{e}"
    );

    let add = Op::from(AddOp::new(Permutation::new(&[1, 0]).unwrap()));
    let e = apply::<3, 2>(&add, [(&a).into(), (&a).into(), (&a).into()]).unwrap_err();
    assert!(matches!(e, Error::CountMismatch { .. }), "{e}");

    let half = Tensor::<2>::from_data(
        TensorData::new(vec![1.0f32; 12], [3, 4]),
        (&device, BurnDType::F16),
    );
    let e = contract::<2>(&mm, &a, &half).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");

    let balanced = ramp(
        [3, 4],
        0.0,
        &Device::flex().autodiff().gradient_checkpointing(),
    );
    let e = contract::<2>(&mm, &a, &balanced).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "inputs"),
        "{e}"
    );

    // Nothing was recorded: the inputs still differentiate as before.
    let grads = (a.clone() * 2.0).sum().backward();
    assert_eq!(values(a.grad(&grads).unwrap()), vec![2.0; 6]);
    assert!(b.grad(&grads).is_none());
    assert!(adrules_burn::take_backward_errors().is_empty());
}

#[test]
fn gradients_accumulate_over_repeated_uses() {
    let device = Device::flex().autodiff();
    let run = |ours: bool| {
        let x = ramp([3, 3], 0.25, &device).require_grad();
        let y = ramp([3, 3], -0.5, &device).require_grad();
        let xx: Tensor<2> = if ours {
            contract(&op("ij", "jk", "ik"), &x, &x).unwrap()
        } else {
            Tensor::<2>::einsum("ij,jk->ik", [(&x).into(), (&x).into()])
        };
        let xy: Tensor<2> = if ours {
            contract(&op("ij", "kj", "ik"), &x, &y).unwrap()
        } else {
            Tensor::<2>::einsum("ij,kj->ik", [(&x).into(), (&y).into()])
        };
        // a network with x as two of its three operands
        let xxy: Tensor<2> = if ours {
            adrules_burn::einsum("ij,jk,kl->il", [(&x).into(), (&x).into(), (&y).into()]).unwrap()
        } else {
            Tensor::<2>::einsum("ij,jk,kl->il", [(&x).into(), (&x).into(), (&y).into()])
        };
        let loss = (xx * xy.clone()).sum() + xy.sum() + x.clone().sum() + (xxy.clone() * xxy).sum();
        let grads = loss.backward();
        (
            values(x.grad(&grads).unwrap()),
            values(y.grad(&grads).unwrap()),
        )
    };
    let (ours, theirs) = (run(true), run(false));
    assert_close(&ours.0, &theirs.0, "x used three times");
    assert_close(&ours.1, &theirs.1, "y");
}

#[test]
fn plain_inputs_are_constants_of_an_autodiff_op() {
    let ad = Device::flex().autodiff();
    let a = ramp([2, 3], 0.0, &ad).require_grad();
    let b = ramp([3, 4], 0.5, &Device::flex());
    let c: Tensor<2> = contract(&op("ij", "jk", "ik"), &a, &b).unwrap();
    let grads = c.sum().backward();
    // d/dA Σ A·B = 1·Bᵀ: row sums of B, repeated for each row of A.
    let bv = values(b);
    let row_sums: Vec<f64> = (0..3).map(|j| bv[j * 4..j * 4 + 4].iter().sum()).collect();
    let want: Vec<f64> = (0..2).flat_map(|_| row_sums.clone()).collect();
    assert_close(&values(a.grad(&grads).unwrap()), &want, "gradient of A");
}

#[test]
fn plain_device_runs_the_primal_only() {
    let device = Device::flex();
    let a = ramp([2, 3, 4], 0.0, &device);
    let b = ramp([4, 3], 0.5, &device);
    let ours: Tensor<1> = contract(&op("ijk", "kj", "i"), &a, &b).unwrap();
    let theirs = Tensor::<1>::einsum("ijk,kj->i", [(&a).into(), (&b).into()]);
    assert!(!ours.is_require_grad());
    assert_close(&values(ours), &values(theirs), "primal");
}

#[test]
fn c_updating_form_differentiates_c_and_the_operands() {
    let device = Device::flex().autodiff();
    let (alpha, beta) = (0.5, -2.0);
    let run = |ours: bool| {
        let c = ramp([2, 4], 0.1, &device).require_grad();
        let a = ramp([3, 2], 0.2, &device).require_grad();
        let b = ramp([3, 4], 0.3, &device).require_grad();
        let out: Tensor<2> = if ours {
            let op = op("ji", "jk", "ik").alpha(alpha).beta(beta);
            apply(&op.into(), [(&c).into(), (&a).into(), (&b).into()]).unwrap()
        } else {
            c.clone().mul_scalar(beta)
                + Tensor::<2>::einsum("ji,jk->ik", [(&a).into(), (&b).into()]).mul_scalar(alpha)
        };
        let w = ramp([2, 4], -0.3, &device);
        let grads = (out.clone() * w).sum().backward();
        [
            values(out),
            values(c.grad(&grads).unwrap()),
            values(a.grad(&grads).unwrap()),
            values(b.grad(&grads).unwrap()),
        ]
    };
    let (ours, theirs) = (run(true), run(false));
    for (i, what) in ["primal", "C", "A", "B"].iter().enumerate() {
        assert_close(&ours[i], &theirs[i], what);
    }
}

#[test]
fn scalar_outputs_use_burns_shape_one_convention() {
    let device = Device::flex().autodiff();
    let run = |ours: bool| {
        let a = ramp([2, 3, 4], 0.0, &device).require_grad();
        let b = ramp([3, 4, 2], 0.5, &device).require_grad();
        let s: Tensor<1> = if ours {
            contract(&op("ijk", "jki", ""), &a, &b).unwrap()
        } else {
            Tensor::<1>::einsum("ijk,jki->", [(&a).into(), (&b).into()])
        };
        assert_eq!(s.dims(), [1]);
        let grads = (s.clone() * s.clone()).sum().backward();
        (
            values(s),
            values(a.grad(&grads).unwrap()),
            values(b.grad(&grads).unwrap()),
        )
    };
    let (ours, theirs) = (run(true), run(false));
    assert_close(&ours.0, &theirs.0, "value");
    assert_close(&ours.1, &theirs.1, "gradient of a");
    assert_close(&ours.2, &theirs.2, "gradient of b");

    let a = ramp([3, 3], 0.0, &device).require_grad();
    let tr = TraceOp::new(TraceSpec::new(&[], &[0], &[1]).unwrap());
    let t: Tensor<1> = adrules_burn::trace(&tr, &a).unwrap();
    let grads = t.sum().backward();
    let eye = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    assert_close(
        &values(a.grad(&grads).unwrap()),
        &eye,
        "gradient of the trace",
    );
}

/// The same chain of memory-bound (add, trace) and compute-bound (contract, network) adrules ops feeding
/// burn ops that keep their inputs, under both checkpointing strategies.
fn chain(device: &Device) -> Vec<Vec<f64>> {
    let x = ramp([3, 4, 3], 0.1, device).require_grad();
    let m = ramp([4, 4], -0.2, device).require_grad();
    let add = AddOp::new(Permutation::new(&[2, 1, 0]).unwrap()).alpha(1.5);
    let y: Tensor<3> = adrules_burn::add(&add, &x).unwrap();
    let tr = TraceOp::new(TraceSpec::new(&[1], &[0], &[2]).unwrap());
    let t: Tensor<1> = adrules_burn::trace(&tr, y.clone() * y.clone()).unwrap();
    let z: Tensor<3> = contract(&op("ijk", "jl", "ilk"), y.clone().exp(), &m).unwrap();
    // a network (compute bound, its pullback saved in the node) on the recomputable y
    let w: Tensor<3> =
        adrules_burn::einsum("ijk,jl,lm->imk", [(&y).into(), (&m).into(), (&m).into()]).unwrap();
    let loss = (z.clone() * z).sum() + (t.clone() * t).sum() + (w.clone() * w).sum();
    let grads = loss.backward();
    vec![
        values(x.grad(&grads).unwrap()),
        values(m.grad(&grads).unwrap()),
    ]
}

#[test]
fn balanced_checkpointing_gives_the_same_gradients() {
    let plain = chain(&Device::flex().autodiff());
    let balanced = chain(&Device::flex().autodiff().gradient_checkpointing());
    assert_close(&balanced[0], &plain[0], "gradient of x");
    assert_close(&balanced[1], &plain[1], "gradient of m");
    assert!(adrules_burn::take_backward_errors().is_empty());
}

#[test]
fn operand_reports_its_shape() {
    let o: Operand = ramp([2, 5], 0.0, &Device::flex()).into();
    assert_eq!(o.dims(), vec![2, 5]);
}
