//! The example rules of `own_rule` (`LogSumExp`, `MaxArg`), written on the public API only:
//! `check_rule` passes on the strided backend (finite differences, the frule's adjoint
//! identity, non-mutation); against closed forms; through candle and burn (features) the
//! gradient equals the strided pullback; the engines' own optimizers (burn-optim's SGD on a
//! `#[derive(Module)]`, candle-nn's SGD) lower a loss built on `LogSumExp`.

use adrules::rule;
use adrules::strided::Strided;
use adrules::{Backend, DType, Error, HostTensor};
use adrules_examples::own_rule::{LogSumExp, MaxArg};
use adrules_testing::{Rng, RuleCheck, check_rule};

fn x(dims: &[usize], seed: u64) -> HostTensor {
    Rng::seed(seed).tensor(dims, DType::F64)
}

fn values(h: &HostTensor) -> Vec<f64> {
    h.as_slice::<f64>().unwrap().to_vec()
}

#[test]
fn the_rules_pass_check_rule_and_match_closed_forms() {
    let be = Strided;
    let t = be.from_host(x(&[2, 3, 4], 1)).unwrap();
    for axes in [vec![2], vec![0, 2], vec![1]] {
        let r = check_rule(&LogSumExp { axes }, &be, &[&t], &RuleCheck::default()).unwrap();
        assert!(r.frule.is_some());
    }
    check_rule(&MaxArg, &be, &[&t], &RuleCheck::default()).unwrap();
    // log(e¹ + e²) and a stable value far beyond exp's range
    let v = be
        .from_host(HostTensor::from_vec(&[2, 2], vec![1.0, 2.0, 1000.0, 1000.0]).unwrap())
        .unwrap();
    let y = rule::primal(&LogSumExp { axes: vec![1] }, &be, &[&v]).unwrap();
    let y = values(&be.to_host(&y[0]).unwrap());
    assert!((y[0] - (1f64.exp() + 2f64.exp()).ln()).abs() < 1e-14);
    assert!((y[1] - (1000.0 + 2f64.ln())).abs() < 1e-12);
    let y = rule::primal(&MaxArg, &be, &[&v]).unwrap();
    assert_eq!(values(&be.to_host(&y[1]).unwrap()), [1.0, 0.0]);
    // bad axes are a typed error
    let e = rule::primal(&LogSumExp { axes: vec![3] }, &be, &[&t]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidIndices { arg, .. } if arg == "axes"),
        "{e}"
    );
}

/// The strided pullback of `rule` at `h` for the output cotangents `w` (`None`: unused).
#[cfg(any(feature = "candle", feature = "burn"))]
fn strided_pullback<R: rule::Rule>(rule: &R, h: &HostTensor, w: &[Option<HostTensor>]) -> Vec<f64> {
    let be = Strided;
    let t = be.from_host(h.clone()).unwrap();
    let (_, pb) = rule::rrule(rule, &be, &[&t], &[true]).unwrap();
    let w: Vec<_> = w
        .iter()
        .map(|w| w.clone().map(|w| be.from_host(w).unwrap()))
        .collect();
    let g = pb.pullback(&w).unwrap();
    values(&be.to_host(g[0].as_ref().unwrap()).unwrap())
}

#[cfg(feature = "candle")]
#[test]
fn candle_gradients_equal_the_strided_pullback_and_training_lowers_the_loss() {
    use adrules::candle::apply_rule;
    use adrules::candle::candle_core::{Device, Tensor, Var};
    let h = x(&[3, 4], 2);
    let up = |h: &HostTensor| Tensor::from_vec(values(h), h.dims(), &Device::Cpu).unwrap();
    let v = Var::from_tensor(&up(&h)).unwrap();
    let w = x(&[3], 3);
    // MaxArg: only the maximum is used
    let y = apply_rule(&MaxArg, &[v.as_tensor()]).unwrap();
    let g = (&y[0] * up(&w))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let got = g
        .get(v.as_tensor())
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    assert_eq!(got, strided_pullback(&MaxArg, &h, &[Some(w.clone()), None]));
    // fit θ so that logsumexp(θ) = 0 with candle-nn's SGD
    let start = values(&x(&[5], 4));
    let (first, last) = adrules_examples::own_rule::on_candle::train(&start, 50, 0.2).unwrap();
    assert!(last < 1e-3 * first, "{first} → {last}");
}

#[cfg(feature = "burn")]
#[test]
fn burn_gradients_equal_the_strided_pullback_and_training_lowers_the_loss() {
    use adrules::burn::apply_rule;
    use adrules::burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
    let device = Device::flex().autodiff();
    let up = |h: &HostTensor| -> Tensor<2> {
        let data = TensorData::new(values(h), h.dims().to_vec());
        Tensor::from_data(data, (&device, BurnDType::F64))
    };
    let h = x(&[3, 4], 2);
    let t = up(&h).require_grad();
    let w = x(&[3], 3);
    let wt: Tensor<1> =
        Tensor::from_data(TensorData::new(values(&w), [3]), (&device, BurnDType::F64));
    let y = apply_rule(&MaxArg, [(&t).into()]).unwrap();
    let y0: Tensor<1> = y[0].clone().into_tensor().unwrap();
    let g = (y0 * wt).sum().backward();
    let got: Vec<f64> = t.grad(&g).unwrap().into_data().iter::<f64>().collect();
    assert_eq!(got, strided_pullback(&MaxArg, &h, &[Some(w), None]));
    // fit θ so that logsumexp(θ) = 0 in a `#[derive(Module)]` with burn-optim's SGD
    let start = values(&x(&[1, 5], 4));
    let (first, last) = adrules_examples::own_rule::on_burn::train(&start, 50, 0.2).unwrap();
    assert!(last < 1e-3 * first, "{first} → {last}");
}
