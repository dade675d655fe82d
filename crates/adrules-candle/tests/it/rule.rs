//! Any core `Rule` as a candle op (`apply_rule`): the gradient through candle's backward
//! equals the rule's pullback on the strided backend, bit for bit, for one output (one, two
//! and three inputs, some constant) and for two outputs (both used, one unused); the rule
//! passes `check_rule` on `CandleBackend`; bad input is a typed error before anything is
//! recorded; a failing pullback is a typed error of `try_backward`.

use adrules_candle::candle_core::{DType as CDType, Device, Tensor, Var};
use adrules_candle::{CandleBackend, adrules_error, apply_rule, try_backward};
use adrules_core::rule::{self, Rule};
use adrules_core::{Backend, DType, Error, HostTensor};
use adrules_strided::Strided;
use adrules_testing::Rng;
use adrules_testing::rule::{RuleCheck, check_rule};
use adrules_testing::samples::{Failing, Fma, Mul, Split};

const DIMS: [usize; 2] = [3, 4];

fn host(seed: u64) -> HostTensor {
    Rng::seed(seed).tensor(&DIMS, DType::F64)
}

fn candle(h: &HostTensor) -> Tensor {
    let v = h.as_slice::<f64>().unwrap().to_vec();
    Tensor::from_vec(v, h.dims(), &Device::Cpu).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_vec1::<f64>().unwrap()
}

/// The gradients of `L = Σⱼ Σ wⱼ ⊙ yⱼ` over the outputs `used` (`wⱼ` from seed `100 + j`)
/// with respect to the inputs `x` (`None` for a constant), through candle's backward, and
/// the same from the rule's pullback on the strided backend.
fn gradients<R: Rule>(rule: &R, x: &[HostTensor], tracked: &[bool], used: &[bool]) {
    let vars: Vec<Option<Var>> = x
        .iter()
        .zip(tracked)
        .map(|(h, &t)| t.then(|| Var::from_tensor(&candle(h)).unwrap()))
        .collect();
    let plain: Vec<Tensor> = x.iter().map(candle).collect();
    let inputs: Vec<&Tensor> = vars
        .iter()
        .zip(&plain)
        .map(|(v, p)| v.as_ref().map_or(p, |v| v.as_tensor()))
        .collect();
    let y = apply_rule(rule, &inputs).unwrap();
    let w: Vec<HostTensor> = (0..y.len())
        .map(|j| Rng::seed(100 + j as u64).tensor(y[j].dims(), DType::F64))
        .collect();
    let mut loss = Tensor::zeros((), CDType::F64, &Device::Cpu).unwrap();
    for (j, yj) in y.iter().enumerate() {
        if used[j] {
            loss = (loss + (yj * candle(&w[j])).unwrap().sum_all().unwrap()).unwrap();
        }
    }
    let grads = try_backward(&loss).unwrap();

    let be = Strided;
    let xs: Vec<_> = x.iter().map(|h| be.from_host(h.clone()).unwrap()).collect();
    let refs: Vec<_> = xs.iter().collect();
    let (ys, pb) = rule::rrule(rule, &be, &refs, tracked).unwrap();
    for (yj, ysj) in y.iter().zip(&ys) {
        assert_eq!(
            values(yj),
            be.to_host(ysj).unwrap().as_slice::<f64>().unwrap(),
            "outputs"
        );
    }
    let ybar: Vec<_> = (0..y.len())
        .map(|j| used[j].then(|| be.from_host(w[j].clone()).unwrap()))
        .collect();
    let want = pb.pullback(&ybar).unwrap();
    for (i, v) in vars.iter().enumerate() {
        let Some(v) = v else {
            assert!(want[i].is_none());
            continue;
        };
        let got = grads.get(v.as_tensor()).expect("a gradient for a variable");
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
    gradients(&Mul, &[host(1), host(2)], &[true, true], &[true]);
    gradients(&Mul, &[host(1), host(2)], &[false, true], &[true]);
    gradients(
        &Fma,
        &[host(3), host(4), host(5)],
        &[true, true, true],
        &[true],
    );
    gradients(
        &Fma,
        &[host(3), host(4), host(5)],
        &[true, false, true],
        &[true],
    );
}

#[test]
fn two_output_gradients_equal_the_strided_pullback_with_an_output_unused() {
    gradients(&Split, &[host(6)], &[true], &[true, true]);
    gradients(&Split, &[host(6)], &[true], &[false, true]);
    gradients(&Split, &[host(6)], &[true], &[true, false]);
}

/// More than 3 inputs (candle's custom ops take at most 3) are packed into one op: the
/// gradients are still the rule's pullback, for every tracked input; inputs of two dtypes
/// cannot be packed and are a typed error.
#[test]
fn four_inputs_are_packed_into_one_op() {
    use adrules_core::network::{Network, NetworkPlan, Order};
    let net = Network::einsum("ab,ab,ab,ab->ab").unwrap();
    let plan = NetworkPlan::new(&net, &[DIMS; 4], &Order::Default).unwrap();
    let x = [host(11), host(12), host(13), host(14)];
    gradients(&plan, &x, &[true, true, true, true], &[true]);
    gradients(&plan, &x, &[true, false, true, true], &[true]);
    let a = Var::from_tensor(&candle(&x[0])).unwrap();
    let b = candle(&x[1]).to_dtype(CDType::F32).unwrap();
    let e = apply_rule(&plan, &[a.as_tensor(), &b, a.as_tensor(), a.as_tensor()]).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::Unsupported { what, .. }) if what.contains("several dtypes")),
        "{e}"
    );
}

#[test]
fn constants_run_the_primal_only() {
    let (a, b) = (candle(&host(1)), candle(&host(2)));
    let y = apply_rule(&Mul, &[&a, &b]).unwrap();
    assert!(!y[0].track_op());
    assert_eq!(values(&y[0]), values(&(&a * &b).unwrap()));
}

#[test]
fn the_sample_rules_pass_check_rule_on_candle() {
    let be = CandleBackend::cpu();
    let x: Vec<Tensor> = (1..4).map(|s| candle(&host(s))).collect();
    let config = RuleCheck::default();
    check_rule(&Mul, &be, &[&x[0], &x[1]], &config).unwrap();
    check_rule(&Split, &be, &[&x[0]], &config).unwrap();
    check_rule(&Fma, &be, &[&x[0], &x[1], &x[2]], &config).unwrap();
}

#[test]
fn bad_input_is_a_typed_error() {
    let a = Var::from_tensor(&candle(&host(1))).unwrap();
    let short = Tensor::zeros(3, CDType::F64, &Device::Cpu).unwrap();
    let e = apply_rule(&Mul, &[a.as_tensor(), &short]).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::ShapeMismatch { arg, .. }) if arg == "input 1"),
        "{e}"
    );
    let e = apply_rule(&Mul, &[a.as_tensor()]).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::CountMismatch { arg, .. }) if arg == "inputs"),
        "{e}"
    );
    let half = a.as_tensor().to_dtype(CDType::F16).unwrap();
    let e = apply_rule(&Mul, &[a.as_tensor(), &half]).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::Unsupported { what, .. }) if what.contains("input 1")),
        "{e}"
    );
    let four = [a.as_tensor(); 4];
    let e = apply_rule(&Fma, &four).unwrap_err();
    assert!(
        matches!(
            adrules_error(&e),
            Some(Error::CountMismatch {
                expected: 3,
                actual: 4,
                ..
            })
        ),
        "{e}"
    );
}

#[test]
fn a_failing_pullback_is_a_typed_error_of_backward() {
    let x = Var::from_tensor(&candle(&host(1))).unwrap();
    let y = apply_rule(&Failing, &[x.as_tensor()]).unwrap();
    let e = try_backward(&y[0].sum_all().unwrap()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "failing"),
        "{e}"
    );
}
