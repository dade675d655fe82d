//! Any one-output core `Rule` as a dfdx op (`apply_rule`): the gradients through dfdx's
//! backward equal the rule's pullback on the strided backend, bit for bit (two and three
//! operands, the tape on one of them); a multi-output rule is a typed `Unsupported`; bad
//! input is the rule's typed error; a failing pullback is a typed error of `try_backward`.

use adrules_core::rule;
use adrules_core::{Backend, DType, Error, HostTensor};
use adrules_dfdx::dfdx::prelude::*;
use adrules_dfdx::{DfdxBackend, DfdxTensor, apply_rule, try_backward};
use adrules_strided::Strided;
use adrules_testing::Rng;
use adrules_testing::samples::{Failing, Fma, Mul, Split};

type M = Rank2<3, 4>;

fn tensor(h: &HostTensor) -> Tensor<M, f64, Cpu> {
    DfdxBackend::default()
        .from_host(h.clone())
        .unwrap()
        .to_tensor::<M, f64>()
        .unwrap()
}

fn host<T>(t: &Tensor<M, f64, Cpu, T>) -> HostTensor {
    DfdxBackend::default()
        .to_host(&DfdxTensor::new(t.retaped::<NoneTape>()).unwrap())
        .unwrap()
}

fn x(seed: u64) -> HostTensor {
    Rng::seed(seed).tensor(&[3, 4], DType::F64)
}

/// The rule's pullback on the strided backend for the output cotangent `w`.
fn want<R: rule::Rule>(r: &R, x: &[&HostTensor], w: &HostTensor) -> Vec<HostTensor> {
    let be = Strided;
    let xs: Vec<_> = x
        .iter()
        .map(|h| be.from_host((*h).clone()).unwrap())
        .collect();
    let refs: Vec<_> = xs.iter().collect();
    let (_, pb) = rule::rrule(r, &be, &refs, &vec![true; refs.len()]).unwrap();
    let w = be.from_host(w.clone()).unwrap();
    let g = pb.pullback(&[Some(w)]).unwrap();
    g.iter()
        .map(|t| be.to_host(t.as_ref().unwrap()).unwrap())
        .collect()
}

#[test]
fn gradients_equal_the_strided_pullback() {
    let (ha, hb, hc, hw) = (x(1), x(2), x(3), x(4));
    let (a, b, c) = (tensor(&ha), tensor(&hb), tensor(&hc));
    let y: Tensor<M, f64, Cpu, _> = apply_rule(&Mul, (a.leaky_trace(), b.clone())).unwrap();
    let g = try_backward((y * tensor(&hw)).sum()).unwrap();
    let w = want(&Mul, &[&ha, &hb], &hw);
    assert_eq!(host(&g.get(&a)), w[0]);
    assert_eq!(host(&g.get(&b)), w[1]);
    let y: Tensor<M, f64, Cpu, _> =
        apply_rule(&Fma, (a.clone(), b.leaky_trace(), c.clone())).unwrap();
    let g = try_backward((y * tensor(&hw)).sum()).unwrap();
    let w = want(&Fma, &[&ha, &hb, &hc], &hw);
    for (t, w) in [&a, &b, &c].iter().zip(&w) {
        assert_eq!(&host(&g.get(*t)), w);
    }
    // without a tape: the primal only
    let y: Tensor<M, f64, Cpu> = apply_rule(&Mul, (a.clone(), b.clone())).unwrap();
    assert_eq!(host(&y), host(&(a * b)));
}

#[test]
fn errors_are_typed() {
    let (a, b) = (tensor(&x(1)), tensor(&x(2)));
    let e = apply_rule::<M, _, _, _>(&Split, (a.leaky_trace(),)).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { backend, .. } if backend == "dfdx"),
        "{e}"
    );
    let e = apply_rule::<M, _, _, _>(&Mul, (a.clone(),)).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, .. } if arg == "operands"),
        "{e}"
    );
    let short: Tensor<Rank1<3>, f64, Cpu> = Cpu::default().zeros();
    let e = apply_rule::<M, _, _, _>(&Mul, (a.clone(), short)).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "input 1"),
        "{e}"
    );
    let e = apply_rule::<Rank2<4, 3>, _, _, _>(&Mul, (a.clone(), b)).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::ShapeMismatch { .. } | Error::InvalidArgument { .. }
        ),
        "{e}"
    );
    let y: Tensor<M, f64, Cpu, _> = apply_rule(&Failing, (a.leaky_trace(),)).unwrap();
    let e = try_backward(y.sum()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "failing"),
        "{e}"
    );
}
