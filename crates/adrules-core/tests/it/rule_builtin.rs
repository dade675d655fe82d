//! adrules' own operations seen through the `Rule` trait (`src/rule/builtin.rs`): the same
//! values and cotangents as their own entry points (bit for bit, one code path), C first when
//! β ≠ 0, and typed errors from the trait's drivers. Finite differences, the adjoint identity
//! and non-mutation of every built-in rule are the conformance group
//! `builtin_rules_pass_check_rule`, run on every backend.

use adrules_core::linalg::{QrMode, RuleOptions, SvdCotangents, SvdMode, qr_rrule, svd_rrule};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::rule::{self, QrRule, Rule, SvdRule};
use adrules_core::rules::{ContractOp, Primitive};
use adrules_core::{Backend, ContractSpec, DType, DynScalar, Error};
use adrules_strided::{Strided, Tensor};
use adrules_testing::Rng;

fn random(rng: &mut Rng, dims: &[usize]) -> Tensor {
    Strided.from_host(rng.tensor(dims, DType::F64)).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

#[test]
fn a_contraction_with_beta_takes_c_first_and_matches_its_own_rrule() {
    let mut rng = Rng::seed(1);
    let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    let op: Primitive = ContractOp::new(spec).into();
    let op = op.with_coefficients(DynScalar::F64(2.0), DynScalar::F64(-1.0));
    assert_eq!((Rule::num_inputs(&op), Rule::num_outputs(&op)), (3, 1));
    let (c, a, b) = (
        random(&mut rng, &[2, 4]),
        random(&mut rng, &[2, 3]),
        random(&mut rng, &[3, 4]),
    );
    let c_bar = random(&mut rng, &[2, 4]);
    let (y, pb) = rule::rrule(&op, &Strided, &[&c, &a, &b], &[true, true, false]).unwrap();
    let g = pb.pullback(&[Some(c_bar.clone())]).unwrap();
    // the primitive's own rrule, on a copy of C
    let mut c2 = c.clone();
    let activity = op.activity(true, &[true, true, false]);
    let own = op.rrule(&Strided, &mut c2, &[&a, &b], activity).unwrap();
    let own = own.pullback(&c_bar).unwrap();
    assert_eq!(values(&y[0]), values(&c2));
    assert_eq!(
        values(g[0].as_ref().unwrap()),
        values(own.c.as_ref().unwrap())
    );
    assert_eq!(
        values(g[1].as_ref().unwrap()),
        values(own.a.as_ref().unwrap())
    );
    assert!(g[2].is_none(), "b is inactive");
    // C, the caller's, is unchanged: the rule updated a copy
    assert_ne!(values(&c), values(&y[0]));
    // a C of the wrong shape is named
    let bad = random(&mut rng, &[4, 2]);
    let e = rule::primal(&op, &Strided, &[&bad, &a, &b]).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "c"),
        "{e}"
    );
    // so is a missing operand
    let e = rule::primal(&op, &Strided, &[&a, &b]).unwrap_err();
    assert!(matches!(e, Error::CountMismatch { .. }), "{e}");
}

#[test]
fn a_network_plan_and_the_decompositions_match_their_own_entry_points() {
    let mut rng = Rng::seed(2);
    let net = Network::einsum("ij,jk,kl->il").unwrap();
    let shapes = [vec![2, 3], vec![3, 4], vec![4, 2]];
    let plan = NetworkPlan::new(&net, &shapes, &Order::Default).unwrap();
    let xs: Vec<Tensor> = shapes.iter().map(|d| random(&mut rng, d)).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let c_bar = random(&mut rng, &[2, 2]);
    let (y, pb) = rule::rrule(&plan, &Strided, &refs, &[true, false, true]).unwrap();
    let g = pb.pullback(&[Some(c_bar.clone())]).unwrap();
    let (y2, pb2) = plan.rrule(&Strided, &refs, &[true, false, true]).unwrap();
    let g2 = pb2.pullback(&c_bar).unwrap();
    assert_eq!(values(&y[0]), values(&y2));
    for (k, (g, g2)) in g.iter().zip(&g2).enumerate() {
        assert_eq!(
            g.as_ref().map(values),
            g2.as_ref().map(values),
            "operand {k}"
        );
    }
    assert!(g[1].is_none());

    let a = random(&mut rng, &[4, 3]);
    let (s_bar, vh_bar) = (random(&mut rng, &[3]), random(&mut rng, &[3, 3]));
    let (y, pb) = rule::rrule(&SvdRule::default(), &Strided, &[&a], &[true]).unwrap();
    let g = pb
        .pullback(&[None, Some(s_bar.clone()), Some(vh_bar.clone())])
        .unwrap();
    let (own, own_pb) = svd_rrule(&Strided, &a, SvdMode::Thin, RuleOptions::default()).unwrap();
    let own_g = own_pb
        .pullback(SvdCotangents {
            s: Some(&s_bar),
            vh: Some(&vh_bar),
            ..SvdCotangents::default()
        })
        .unwrap();
    assert_eq!(values(&y[1]), values(&own.s));
    assert_eq!(values(g[0].as_ref().unwrap()), values(&own_g));

    let (y, pb) = rule::rrule(&QrRule::default(), &Strided, &[&a], &[true]).unwrap();
    let r_bar = random(&mut rng, &[3, 3]);
    let g = pb.pullback(&[None, Some(r_bar.clone())]).unwrap();
    let (own, own_pb) = qr_rrule(&Strided, &a, QrMode::Reduced).unwrap();
    assert_eq!(values(&y[0]), values(&own.q));
    let own_g = own_pb.pullback(None, Some(&r_bar)).unwrap();
    assert_eq!(values(g[0].as_ref().unwrap()), values(&own_g));
    // an output cotangent of the wrong shape is the driver's typed error, naming it
    let e = pb
        .pullback(&[None, Some(random(&mut rng, &[2, 2]))])
        .unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "cotangent 1"),
        "{e}"
    );
}
