//! Any core `Rule` as a burn op (`apply_rule`): the gradient through burn's backward equals
//! the rule's pullback on the strided backend, bit for bit, for one output (one, two and
//! three inputs, some constant; with and without gradient checkpointing, on Flex and
//! NdArray) and for two outputs (both used, one unused); bad input is a typed error before
//! anything is recorded; a failing pullback is a typed error of `try_backward`, its
//! gradient NaN.

use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_burn::{Operand, apply_rule, try_backward};
use adrules_core::rule::{self, Rule};
use adrules_core::{Backend, DType, Error, HostTensor};
use adrules_strided::Strided;
use adrules_testing::Rng;
use adrules_testing::samples::{Failing, Fma, Mul, Split};

const DIMS: [usize; 2] = [3, 4];

fn host(seed: u64) -> HostTensor {
    Rng::seed(seed).tensor(&DIMS, DType::F64)
}

fn up(h: &HostTensor, device: &Device) -> Tensor<2> {
    let data = TensorData::new(h.as_slice::<f64>().unwrap().to_vec(), h.dims().to_vec());
    Tensor::from_data(data, (device, BurnDType::F64))
}

fn values(t: Tensor<2>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// The gradients of `L = Σⱼ Σ wⱼ ⊙ yⱼ` over the outputs `used` (`wⱼ` from seed `100 + j`)
/// with respect to the tracked inputs, through burn's backward on `device`, against the
/// rule's pullback on the strided backend.
fn gradients<R: Rule + Clone + 'static, const N: usize>(
    rule: &R,
    x: [HostTensor; N],
    tracked: [bool; N],
    used: &[bool],
    device: &Device,
) {
    let t: Vec<Tensor<2>> = x
        .iter()
        .zip(tracked)
        .map(|(h, tr)| {
            let t = up(h, device);
            if tr { t.require_grad() } else { t }
        })
        .collect();
    let ops: [Operand; N] = std::array::from_fn(|i| (&t[i]).into());
    let y: Vec<Tensor<2>> = apply_rule(rule, ops)
        .unwrap()
        .into_iter()
        .map(|o| o.into_tensor().unwrap())
        .collect();
    let w: Vec<HostTensor> = (0..y.len())
        .map(|j| Rng::seed(100 + j as u64).tensor(&DIMS, DType::F64))
        .collect();
    let mut loss: Option<Tensor<1>> = None;
    for (j, yj) in y.iter().enumerate() {
        if used[j] {
            let l = (yj.clone() * up(&w[j], device)).sum();
            loss = Some(match loss {
                Some(s) => s + l,
                None => l,
            });
        }
    }
    let grads = try_backward(&loss.unwrap()).unwrap();

    let be = Strided;
    let xs: Vec<_> = x.iter().map(|h| be.from_host(h.clone()).unwrap()).collect();
    let refs: Vec<_> = xs.iter().collect();
    let (ys, pb) = rule::rrule(rule, &be, &refs, &tracked).unwrap();
    for (yj, ysj) in y.iter().zip(&ys) {
        let want = be.to_host(ysj).unwrap();
        assert_eq!(
            values(yj.clone()),
            want.as_slice::<f64>().unwrap(),
            "outputs"
        );
    }
    let ybar: Vec<_> = (0..y.len())
        .map(|j| used[j].then(|| be.from_host(w[j].clone()).unwrap()))
        .collect();
    let want = pb.pullback(&ybar).unwrap();
    for i in (0..N).filter(|&i| tracked[i]) {
        let got = t[i].grad(&grads).expect("a gradient for a tracked input");
        let want = be.to_host(want[i].as_ref().unwrap()).unwrap();
        assert_eq!(
            values(got),
            want.as_slice::<f64>().unwrap(),
            "{} input {i}",
            rule.name()
        );
    }
}

#[test]
fn one_output_gradients_equal_the_strided_pullback() {
    #[allow(deprecated)]
    let ndarray = Device::ndarray().autodiff();
    for device in [
        Device::flex().autodiff(),
        Device::flex().autodiff().gradient_checkpointing(),
        ndarray,
    ] {
        gradients(&Mul, [host(1), host(2)], [true, true], &[true], &device);
        gradients(&Mul, [host(1), host(2)], [false, true], &[true], &device);
        gradients(
            &Fma,
            [host(3), host(4), host(5)],
            [true, true, true],
            &[true],
            &device,
        );
        gradients(
            &Fma,
            [host(3), host(4), host(5)],
            [true, false, true],
            &[true],
            &device,
        );
    }
}

#[test]
fn two_output_gradients_equal_the_strided_pullback_with_an_output_unused() {
    let device = Device::flex().autodiff();
    gradients(&Split, [host(6)], [true], &[true, true], &device);
    gradients(&Split, [host(6)], [true], &[false, true], &device);
    gradients(&Split, [host(6)], [true], &[true, false], &device);
}

#[test]
fn constants_run_the_primal_only() {
    let device = Device::flex();
    let (a, b) = (up(&host(1), &device), up(&host(2), &device));
    let y: Tensor<2> = apply_rule(&Mul, [(&a).into(), (&b).into()]).unwrap()[0]
        .clone()
        .into_tensor()
        .unwrap();
    assert!(!y.is_tracked());
    assert_eq!(values(y), values(a * b));
    let s = apply_rule(&Split, [(&up(&host(3), &device)).into()]).unwrap();
    assert_eq!(s.len(), 2);
}

#[test]
fn bad_input_is_a_typed_error() {
    let device = Device::flex().autodiff();
    let a = up(&host(1), &device).require_grad();
    let short = Tensor::<1>::zeros([3], (&device, BurnDType::F64));
    let e = apply_rule(&Mul, [(&a).into(), (&short).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "input 1"),
        "{e}"
    );
    let e = apply_rule(&Mul, [(&a).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, expected: 2, actual: 1 } if arg == "inputs"),
        "{e}"
    );
    let half = a.clone().cast(BurnDType::F16);
    let e = apply_rule(&Mul, [(&a).into(), (&half).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { what, .. } if what.contains("input 1")),
        "{e}"
    );
}

#[test]
fn a_failing_pullback_is_a_typed_error_of_backward() {
    let device = Device::flex().autodiff();
    let x = up(&host(1), &device).require_grad();
    let failing = || -> Tensor<2> {
        let y = apply_rule(&Failing, [(&x).into()]).unwrap();
        y[0].clone().into_tensor().unwrap()
    };
    let Err(e) = try_backward(&failing().sum()) else {
        panic!("the failing pullback's error is reported");
    };
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "failing"),
        "{e}"
    );
    // the gradient burn hands out is NaN, never a silent number (a fresh graph: burn runs
    // one backward pass per graph)
    let grads = failing().sum().backward();
    let g = values(x.grad(&grads).unwrap());
    assert!(g.iter().all(|v| v.is_nan()), "{g:?}");
    assert_eq!(adrules_burn::take_backward_errors().len(), 1);
}
