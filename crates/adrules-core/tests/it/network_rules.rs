//! The network pullback and pushforward against finite differences, the adjoint
//! (dot-product) test, and the multi_dot oracle replayed through ncon and Einstein strings.

use std::sync::Arc;

use crate::support::network::RandomNetwork;
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Backend, Conj, DType, Error, HostTensor};
use adrules_testing::oracle::{load, oracle_dir};
use adrules_testing::{
    FiniteDifference, ReferenceBackend, Rng, Tolerance, Value, adjoint_mismatch,
};
use rand::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;

type T = Arc<HostTensor>;

fn value(t: &T) -> Value {
    Value::Tensor((**t).clone())
}

/// Runs every check on one network: rrule/frule primal = execute; JVP = finite differences;
/// adjoint test between the JVP and the VJP; cotangents shaped and typed like their operands.
fn check_rules(plan: &NetworkPlan, x: &[HostTensor], active: &[bool], rng: &mut Rng, what: &str) {
    let be = ReferenceBackend;
    let xs: Vec<T> = x.iter().cloned().map(Arc::new).collect();
    let refs: Vec<&T> = xs.iter().collect();
    let dx: Vec<HostTensor> = x
        .iter()
        .zip(active)
        .map(|(t, &on)| {
            let d = rng.tensor(t.dims(), t.dtype());
            if on {
                d
            } else {
                HostTensor::zeros(t.dims(), t.dtype()).unwrap()
            }
        })
        .collect();
    let dxs: Vec<T> = dx.iter().cloned().map(Arc::new).collect();
    let tangents: Vec<Option<&T>> = dxs
        .iter()
        .zip(active)
        .map(|(d, &on)| on.then_some(d))
        .collect();

    let c = plan.execute(&be, &refs).unwrap();
    let (c1, pb) = plan.rrule(&be, &refs, active).unwrap();
    let (c2, jdx) = plan.frule(&be, &refs, &tangents).unwrap();
    assert_eq!(c1, c, "{what}: rrule primal");
    assert_eq!(c2, c, "{what}: frule primal");
    assert_eq!(be.dims(&jdx).as_slice(), c.dims());
    assert_eq!(be.dtype(&jdx), c.dtype());

    let ybar = rng.tensor(c.dims(), c.dtype());
    let cots = pb.pullback(&Arc::new(ybar.clone())).unwrap();
    assert_eq!(cots.len(), x.len());
    for ((g, t), &on) in cots.iter().zip(x).zip(active) {
        match g {
            Some(g) => {
                assert!(on, "{what}: cotangent of an inactive operand");
                assert_eq!((g.dims(), g.dtype()), (t.dims(), t.dtype()), "{what}");
            }
            None => assert!(!on, "{what}: missing cotangent"),
        }
    }
    // a pullback can be applied again with the same result
    assert_eq!(
        pb.pullback(&Arc::new(ybar.clone())).unwrap(),
        cots,
        "{what}"
    );

    let single = x.iter().any(|t| !t.dtype().is_double());
    let unit = if single {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    };

    // JVP against fourth-order central differences (in double precision)
    let f = |v: &[Value]| -> adrules_core::Result<Value> {
        let ts: Vec<T> = v
            .iter()
            .map(|v| Arc::new(v.tensor("x").unwrap().clone()))
            .collect();
        let r: Vec<&T> = ts.iter().collect();
        Ok(value(&plan.execute(&be, &r)?))
    };
    let xv: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
    let dxv: Vec<Value> = dx.iter().cloned().map(Value::Tensor).collect();
    let fd = FiniteDifference::default().jvp(f, &xv, &dxv).unwrap();
    // the stencil's truncation error grows with the degree of the network (one per operand)
    let scale = fd.norm().max(1.0);
    let base = Tolerance::for_dtype(if single { DType::F32 } else { DType::F64 });
    let tol = Tolerance {
        atol: base.atol * scale,
        rtol: base.rtol,
    };
    tol.check(&value(&jdx), &fd, what).unwrap();

    // adjoint test: Re⟨ȳ, J·ẋ⟩ = Σ Re⟨x̄_k, ẋ_k⟩
    let xbar: Vec<Option<Value>> = cots.iter().map(|g| g.as_ref().map(value)).collect();
    let mismatch = adjoint_mismatch(&Value::Tensor(ybar), &value(&jdx), &xbar, &dxv).unwrap();
    assert!(
        mismatch <= 1e3 * unit,
        "{what}: adjoint mismatch {mismatch:e}"
    );
}

#[test]
fn random_networks_pullback_and_pushforward() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let mut data = Rng::seed(22);
    for case in 0..120 {
        let n = rng.random_range(2..=6);
        let net = RandomNetwork::generate(&mut rng, n, 8, 0.05);
        let network = if case % 2 == 0 {
            Network::einsum(&net.einsum()).unwrap()
        } else {
            Network::ncon(&net.ncon(), None).unwrap()
        }
        .with_conj(&net.conj)
        .unwrap();
        let plan = NetworkPlan::new(&network, &net.operand_dims(), &Order::Default).unwrap();
        let dtypes: Vec<DType> = (0..n).map(|_| DType::ALL[rng.random_range(0..4)]).collect();
        let x: Vec<HostTensor> = net
            .operand_dims()
            .iter()
            .zip(&dtypes)
            .map(|(d, &t)| data.tensor(d, t))
            .collect();
        let active: Vec<bool> = (0..n).map(|_| rng.random_bool(0.7)).collect();
        let what = format!(
            "case {case}: {} conj {:?} dtypes {dtypes:?} active {active:?}",
            net.einsum(),
            net.conj
        );
        check_rules(&plan, &x, &active, &mut data, &what);
    }
}

#[test]
fn six_tensor_complex_ring_with_every_operand_conjugated() {
    // a periodic MPS-like ring with physical legs contracted against a second copy
    let network = Network::ncon(
        &[
            vec![1, -1, 2],
            vec![2, -2, 3],
            vec![3, -3, 4],
            vec![4, 5, 6],
            vec![6, 5, 7],
            vec![7, -4, 1],
        ],
        None,
    )
    .unwrap()
    .with_conj(&[Conj::Yes; 6])
    .unwrap();
    let dims = [
        [3, 2, 4],
        [4, 2, 3],
        [3, 2, 2],
        [2, 3, 2],
        [2, 3, 4],
        [4, 2, 3],
    ];
    let plan = NetworkPlan::new(&network, &dims, &Order::Default).unwrap();
    let mut data = Rng::seed(6);
    for dtype in [DType::C64, DType::C32] {
        let x: Vec<HostTensor> = dims.iter().map(|d| data.tensor(d, dtype)).collect();
        check_rules(&plan, &x, &[true; 6], &mut data, &format!("ring {dtype}"));
        check_rules(
            &plan,
            &x,
            &[false, true, false, false, true, false],
            &mut data,
            "ring partial",
        );
    }
}

#[test]
fn rules_reject_malformed_activity_tangents_and_cotangents() {
    let be = ReferenceBackend;
    let plan = NetworkPlan::new(
        &Network::einsum("ij,jk->ik").unwrap(),
        &[[2, 3], [3, 4]],
        &Order::Default,
    )
    .unwrap();
    let a = Arc::new(HostTensor::zeros(&[2, 3], DType::F64).unwrap());
    let b = Arc::new(HostTensor::zeros(&[3, 4], DType::F64).unwrap());
    let bad = Arc::new(HostTensor::zeros(&[3, 3], DType::F64).unwrap());
    let c64 = Arc::new(HostTensor::zeros(&[2, 3], DType::C64).unwrap());
    assert!(matches!(
        plan.rrule(&be, &[&a, &b], &[true]),
        Err(Error::CountMismatch { .. })
    ));
    assert!(matches!(
        plan.frule(&be, &[&a, &b], &[None]),
        Err(Error::CountMismatch { .. })
    ));
    assert!(matches!(
        plan.frule(&be, &[&a, &b], &[Some(&bad), None]),
        Err(Error::ShapeMismatch { ref arg, .. }) if arg == "tangent 0"
    ));
    assert!(matches!(
        plan.frule(&be, &[&a, &b], &[Some(&c64), None]),
        Err(Error::DTypeMismatch { ref arg, .. }) if arg == "tangent 0"
    ));
    let (_, pb) = plan.rrule(&be, &[&a, &b], &[true, true]).unwrap();
    assert!(matches!(
        pb.pullback(&bad),
        Err(Error::ShapeMismatch { .. })
    ));
    // nothing active: no cotangents, and the pullback holds no step pullbacks
    let (_, pb) = plan.rrule(&be, &[&a, &b], &[false, false]).unwrap();
    let zero = Arc::new(HostTensor::zeros(&[2, 4], DType::F64).unwrap());
    assert_eq!(pb.pullback(&zero).unwrap(), vec![None, None]);
}

/// `a·b·c·…` for `k` matrices as ncon lists and as an Einstein string.
fn chain(k: usize) -> (Vec<Vec<i64>>, String) {
    let lists = (0..k)
        .map(|i| {
            let left = if i == 0 { -1 } else { i as i64 };
            let right = if i + 1 == k { -2 } else { i as i64 + 1 };
            vec![left, right]
        })
        .collect();
    let letters: Vec<char> = ('a'..='z').take(k + 1).collect();
    let words: Vec<String> = (0..k)
        .map(|i| format!("{}{}", letters[i], letters[i + 1]))
        .collect();
    (
        lists,
        format!("{}->{}{}", words.join(","), letters[0], letters[k]),
    )
}

#[test]
fn multi_dot_oracle_through_ncon_and_einsum() {
    let be = ReferenceBackend;
    let cases = load(&oracle_dir().join("multi_dot.jsonl")).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut zero_size = 0;
    for case in &cases {
        assert_eq!(case.op, "multi_dot");
        let inputs: Vec<&HostTensor> = case.inputs_in_order();
        let names: Vec<&String> = case.inputs.keys().collect();
        let (lists, s) = chain(inputs.len());
        let dims: Vec<Vec<usize>> = inputs.iter().map(|t| t.dims().to_vec()).collect();
        zero_size += dims.iter().flatten().any(|&d| d == 0) as usize;
        seen.insert(case.dtype);
        // the case's tolerance, tightened to what this dtype allows (the f32 cases allow
        // atol 1e3, which would accept anything)
        let tol = case
            .tolerance
            .min(Tolerance::for_dtype(case.dtype).max(Tolerance {
                atol: 1e-6,
                rtol: 1e-6,
            }));
        let xs: Vec<T> = inputs.iter().map(|&t| Arc::new(t.clone())).collect();
        let refs: Vec<&T> = xs.iter().collect();
        for network in [
            Network::ncon(&lists, None).unwrap(),
            Network::einsum(&s).unwrap(),
        ] {
            let plan = NetworkPlan::new(&network, &dims, &Order::Default).unwrap();
            for probe in &case.probes {
                let what = format!("{} {:?} probe {}", case.id, network.notation(), probe.id);
                let dirs: Vec<T> = names
                    .iter()
                    .map(|n| Arc::new(probe.direction[*n].clone()))
                    .collect();
                let tangents: Vec<Option<&T>> = dirs.iter().map(Some).collect();
                let (_, jvp) = plan.frule(&be, &refs, &tangents).unwrap();
                tol.check(
                    &value(&jvp),
                    &Value::Tensor(probe.jvp.clone()),
                    &format!("{what} jvp"),
                )
                .unwrap();
                let (_, pb) = plan.rrule(&be, &refs, &vec![true; inputs.len()]).unwrap();
                let cots = pb.pullback(&Arc::new(probe.cotangent.clone())).unwrap();
                for (name, g) in names.iter().zip(&cots) {
                    let g = g.as_ref().unwrap();
                    tol.check(
                        &value(g),
                        &Value::Tensor(probe.vjp[*name].clone()),
                        &format!("{what} vjp {name}"),
                    )
                    .unwrap();
                }
            }
        }
    }
    assert_eq!(seen.len(), 4, "all four dtypes");
    assert!(zero_size > 0, "zero-size cases");
}
