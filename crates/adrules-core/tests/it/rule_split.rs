//! `rule::split` (`src/rule/split.rs`): a rule of several outputs as a joint rule and one
//! selector per output, as a one-output engine records them. The cotangents through the
//! joint rule and the selectors are the rule's own, bit for bit, with `None` for an unused
//! output; misuse is a typed error.

use adrules_core::linalg::{RuleOptions, SvdMode};
use adrules_core::rule::{self, Rule, SvdRule, split};
use adrules_core::{Backend, DType, Error};
use adrules_strided::{Strided, Tensor};
use adrules_testing::Rng;

fn random(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Strided.from_host(rng.tensor(dims, DType::F64)).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

#[test]
fn a_split_rule_gives_the_rules_own_outputs_and_cotangents() {
    let mut rng = Rng::seed(7);
    let a = random(&mut rng, &[5, 3]);
    let svd = SvdRule {
        mode: SvdMode::Thin,
        options: RuleOptions::default(),
    };
    let (joint, selectors) = split(svd);
    assert_eq!((Rule::num_outputs(&joint), selectors.len()), (1, 3));
    // the engine's order: the joint rule, then each selector over its output
    let (tickets, joint_pb) = rule::rrule(&joint, &Strided, &[&a], &[true]).unwrap();
    assert_eq!(Strided.dims(&tickets[0]).as_slice(), &[3]);
    let mut outs = Vec::new();
    let mut pbs = Vec::new();
    for s in &selectors {
        let (y, pb) = rule::rrule(s, &Strided, &[&tickets[0]], &[true]).unwrap();
        outs.push(y.into_iter().next().unwrap());
        pbs.push(pb);
    }
    joint.release();
    // the rule's own outputs and pullback
    let (own, own_pb) = rule::rrule(&svd, &Strided, &[&a], &[true]).unwrap();
    for (o, w) in outs.iter().zip(&own) {
        assert_eq!(values(o), values(w));
    }
    // a loss that uses U and S, not Vh: the backward deposits two cotangents
    let (u_bar, s_bar) = (random(&mut rng, &[5, 3]), random(&mut rng, &[3]));
    let t_u = pbs[0]
        .pullback(&[Some(u_bar.clone())])
        .unwrap()
        .remove(0)
        .unwrap();
    let t_s = pbs[1]
        .pullback(&[Some(s_bar.clone())])
        .unwrap()
        .remove(0)
        .unwrap();
    // the engine sums the tickets into the joint node's cotangent
    let sum: Vec<f64> = values(&t_u)
        .iter()
        .zip(values(&t_s))
        .map(|(x, y)| x + y)
        .collect();
    let sum = Strided
        .from_host(adrules_core::HostTensor::from_vec(&[3], sum).unwrap())
        .unwrap();
    let a_bar = joint_pb.pullback(&[Some(sum)]).unwrap();
    let want = own_pb.pullback(&[Some(u_bar), Some(s_bar), None]).unwrap();
    assert_eq!(
        values(a_bar[0].as_ref().unwrap()),
        values(want[0].as_ref().unwrap())
    );
    // after `release`, a selector has nothing to select: a typed error
    let e = rule::primal(&selectors[0], &Strided, &[&tickets[0]]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "selector"),
        "{e}"
    );
}

#[test]
fn a_selector_before_its_joint_rule_or_active_without_a_node_is_a_typed_error() {
    let mut rng = Rng::seed(8);
    let a = random(&mut rng, &[4, 4]);
    let (joint, selectors) = split(SvdRule::default());
    let tickets = random(&mut rng, &[3]);
    let e = rule::primal(&selectors[1], &Strided, &[&tickets]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "selector"),
        "{e}"
    );
    // the joint rule's primal leaves no node: an active selector is refused
    let t = rule::primal(&joint, &Strided, &[&a]).unwrap();
    let e = rule::rrule(&selectors[0], &Strided, &[&t[0]], &[true]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "selector"),
        "{e}"
    );
    let y = rule::primal(&selectors[0], &Strided, &[&t[0]]).unwrap();
    assert_eq!(Strided.dims(&y[0]).as_slice(), &[4, 4]);
    // the joint rule checks what the rule checks: a rank-1 A
    let v = random(&mut rng, &[4]);
    assert!(rule::primal(&joint, &Strided, &[&v]).is_err());
}
