//! The einsum grammar fuzzed: random strings and shapes over torch's whole grammar (batch
//! labels, hyperedges, diagonals, sums, implicit output, ellipsis with broadcasting, size-1
//! axes broadcast against named labels, rank 0, zero-size dimensions, malformed strings). The planned einsum on the strided backend must
//! never panic, must accept exactly what the independent brute-force evaluator
//! [`naive_einsum`] accepts, and every result must agree with it.

use adrules_core::network::einsum;
use adrules_core::{Backend, DType, HostTensor};
use adrules_strided::Strided;
use adrules_testing::fuzz::einsum_case as draw;
use adrules_testing::{Rng, Tolerance, Value, naive_einsum};
use proptest::prelude::*;

fn run(seed: u64, dtype: DType) -> Result<(), TestCaseError> {
    let (s, shapes) = draw(seed);
    let mut rng = Rng::seed(seed ^ 0x5eed);
    let hosts: Vec<HostTensor> = shapes.iter().map(|d| rng.tensor(d, dtype)).collect();
    let host_refs: Vec<&HostTensor> = hosts.iter().collect();
    let be = Strided;
    let xs: Vec<_> = hosts
        .iter()
        .map(|h| be.from_host(h.clone()).unwrap())
        .collect();
    let refs: Vec<_> = xs.iter().collect();
    let ours = einsum(&be, &s, &refs);
    let truth = naive_einsum(&s, &host_refs);
    match (&ours, truth) {
        (Ok(t), Some(expected)) => {
            let got = be.to_host(t).unwrap();
            prop_assert_eq!(got.dims(), expected.dims(), "{} {:?}", s, shapes);
            Tolerance::for_dtype(dtype)
                .check(&Value::Tensor(got), &Value::Tensor(expected), &s)
                .map_err(|e| TestCaseError::fail(format!("{s} {shapes:?}: {e}")))?;
        }
        (Err(_), None) => {}
        (Ok(_), None) => prop_assert!(false, "{} {:?}: accepted, torch rejects it", s, shapes),
        (Err(e), Some(_)) => prop_assert!(
            false,
            "{} {:?}: rejected ({}), torch accepts it",
            s,
            shapes,
            e
        ),
    }
    for (x, h) in xs.iter().zip(&hosts) {
        prop_assert_eq!(&be.to_host(x).unwrap(), h, "{}: an operand changed", s);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]
    #[test]
    fn random_strings_agree_with_brute_force_f64(seed in any::<u64>()) {
        run(seed, DType::F64)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_strings_agree_with_brute_force_c32(seed in any::<u64>()) {
        run(seed, DType::C32)?;
    }
}

#[test]
fn the_fuzz_reaches_both_outcomes() {
    // guard against a generator that only ever produces errors (or only successes)
    let (mut ok, mut err) = (0, 0);
    for seed in 0..400 {
        let (s, shapes) = draw(seed);
        let hosts: Vec<HostTensor> = shapes
            .iter()
            .map(|d| HostTensor::zeros(d, DType::F64).unwrap())
            .collect();
        let refs: Vec<&HostTensor> = hosts.iter().collect();
        if naive_einsum(&s, &refs).is_some() {
            ok += 1;
        } else {
            err += 1;
        }
    }
    assert!(ok > 100 && err > 50, "ok {ok}, err {err}");
}

#[test]
fn named_size_one_axes_broadcast_with_summed_cotangents() {
    use adrules_core::network::{Network, NetworkPlan, Order};
    let be = Strided;
    let a = HostTensor::from_vec(&[1, 3], vec![1.0, 2.0, 3.0]).unwrap();
    let b = HostTensor::from_vec(&[2, 3], vec![1.0, 10.0, 100.0, 2.0, 20.0, 200.0]).unwrap();
    let w = HostTensor::from_vec(&[2, 3], vec![1.0, 1.0, 1.0, 0.5, 0.5, 0.5]).unwrap();
    let (ta, tb) = (
        be.from_host(a.clone()).unwrap(),
        be.from_host(b.clone()).unwrap(),
    );
    let net = Network::einsum("ij,ij->ij").unwrap();
    let plan = NetworkPlan::new(&net, &[[1, 3], [2, 3]], &Order::Default).unwrap();
    let (c, pb) = plan.rrule(&be, &[&ta, &tb], &[true, true]).unwrap();
    let c = be.to_host(&c).unwrap();
    assert_eq!(
        c.as_slice::<f64>().unwrap(),
        &[1.0, 20.0, 300.0, 2.0, 40.0, 600.0]
    );
    let g = pb.pullback(&be.from_host(w).unwrap()).unwrap();
    let ga = be.to_host(g[0].as_ref().unwrap()).unwrap();
    // Ā[0, j] = Σ_i W[i, j]·B[i, j]
    assert_eq!(ga.dims(), &[1, 3]);
    assert_eq!(ga.as_slice::<f64>().unwrap(), &[2.0, 20.0, 200.0]);
    let gb = be.to_host(g[1].as_ref().unwrap()).unwrap();
    assert_eq!(
        gb.as_slice::<f64>().unwrap(),
        &[1.0, 2.0, 3.0, 0.5, 1.0, 1.5]
    );
}
