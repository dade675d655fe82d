//! Typed errors for every malformed network, and no panic on random input (proptest).

use std::sync::Arc;

use crate::support::network::random_tensor;
use adrules_core::network::{
    ContractionTree, Network, NetworkPlan, Optimizer, Order, einsum, ncon,
};
use adrules_core::{Conj, DType, Error, HostTensor};
use adrules_testing::ReferenceBackend;
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn t(dims: &[usize]) -> Arc<HostTensor> {
    Arc::new(HostTensor::zeros(dims, DType::F64).unwrap())
}

#[test]
fn every_documented_mistake_is_a_typed_error() {
    let be = ReferenceBackend;
    let (a, b, c) = (t(&[2, 3]), t(&[3, 4]), t(&[4, 2]));
    let no = Conj::No;
    // a label used three times: a hyperedge for Einstein strings (its dimensions must
    // agree: j is 3, 3 and 4 here), an error for ncon lists
    assert!(matches!(
        einsum(&be, "ij,jk,jl->il", &[&a, &b, &c]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ncon(
            &be,
            &[&a, &b, &c],
            &[vec![-1, 1], vec![1, 2], vec![1, 2]],
            &[no; 3]
        ),
        Err(Error::InvalidLabel { .. })
    ));
    // an open label used twice
    assert!(matches!(
        ncon(&be, &[&a, &b], &[[-1, 1], [1, -1]], &[no; 2]),
        Err(Error::InvalidLabel { .. })
    ));
    assert!(matches!(
        einsum(&be, "ij,jk->ii", &[&a, &b]),
        Err(Error::InvalidLabel { .. })
    ));
    // a contracted pair with different dimensions
    match einsum(&be, "ij,kj->ik", &[&a, &b]) {
        Err(Error::ShapeMismatch {
            arg,
            expected,
            actual,
        }) => {
            assert!(arg.contains("operand 1") && arg.contains("'j'"), "{arg}");
            assert_eq!((expected, actual), (vec![3], vec![4]));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        einsum(&be, "ii->", &[&a]),
        Err(Error::ShapeMismatch { .. })
    ));
    // operand count against index lists, and against conjugation flags
    assert!(matches!(
        einsum(&be, "ij,jk->ik", &[&a]),
        Err(Error::CountMismatch { ref arg, expected: 2, actual: 1 }) if arg == "tensors"
    ));
    assert!(matches!(
        ncon(&be, &[&a, &b, &c], &[[-1, 1], [1, -2]], &[no; 2]),
        Err(Error::CountMismatch { ref arg, expected: 2, actual: 3 }) if arg == "tensors"
    ));
    assert!(matches!(
        ncon(&be, &[&a, &b], &[[-1, 1], [1, -2]], &[no; 3]),
        Err(Error::CountMismatch { ref arg, .. }) if arg == "conj"
    ));
    let net = Network::einsum("ij,jk->ik").unwrap();
    assert!(matches!(
        NetworkPlan::new(&net, &[[2, 3]], &Order::Default),
        Err(Error::CountMismatch { ref arg, .. }) if arg == "dims"
    ));
    let plan = NetworkPlan::new(&net, &[[2, 3], [3, 4]], &Order::Default).unwrap();
    assert!(matches!(
        plan.execute(&be, &[&a]),
        Err(Error::CountMismatch { .. })
    ));
    // rank against the index list, at planning and at execution
    assert!(matches!(
        einsum(&be, "ijk,jk->i", &[&a, &b]),
        Err(Error::RankMismatch { ref arg, expected: 3, actual: 2 }) if arg == "operand 0"
    ));
    assert!(matches!(
        plan.execute(&be, &[&a, &c]),
        Err(Error::ShapeMismatch { .. })
    ));
    // unknown label in the output
    assert!(matches!(
        einsum(&be, "ij,jk->iz", &[&a, &b]),
        Err(Error::InvalidLabel { .. })
    ));
    // ncon: label 0, negative labels not −1..−k
    assert!(matches!(
        ncon(&be, &[&a, &b], &[[-1, 0], [0, -2]], &[no; 2]),
        Err(Error::InvalidLabel { ref label, .. }) if label == "0"
    ));
    assert!(matches!(
        ncon(&be, &[&a, &b], &[[-1, 1], [1, -3]], &[no; 2]),
        Err(Error::InvalidLabel { ref label, .. }) if label == "-3"
    ));
    // explicit order not a permutation of the positive labels
    let net = Network::ncon(&[vec![-1, 1, 2], vec![2, 1, 3], vec![3, -2]], None).unwrap();
    let dims: [&[usize]; 3] = [&[2, 3, 4], &[4, 3, 5], &[5, 2]];
    for bad in [&[1, 2][..], &[1, 2, 2, 3], &[1, 2, 4], &[3, 2, -1]] {
        assert!(matches!(
            NetworkPlan::new(&net, &dims, &Order::ncon(bad)),
            Err(Error::InvalidLabel { ref arg, .. }) if arg == "order"
        ));
    }
    assert!(NetworkPlan::new(&net, &dims, &Order::ncon(&[3, 1, 2])).is_ok());
    // an explicit tree for another number of operands
    let tree = ContractionTree::new(2, vec![[0, 1]]).unwrap();
    assert!(matches!(
        NetworkPlan::new(&net, &dims, &Order::Tree(tree)),
        Err(Error::CountMismatch { .. })
    ));
    // an empty string is one rank-0 term (torch's grammar): two operands are too many
    assert!(
        matches!(einsum(&be, "", &[&a, &b]), Err(Error::CountMismatch { ref arg, .. }) if arg == "tensors"),
        "{:?}",
        einsum(&be, "", &[&a, &b])
    );
    // malformed Einstein strings
    for bad in [
        "ij,jk->ik->",
        "i.j->ij",
        "i...j...->ij",
        "i j,j k -> i 2",
        "->->",
    ] {
        assert!(
            matches!(einsum(&be, bad, &[&a, &b]), Err(Error::Parse { .. })),
            "{bad:?}"
        );
    }
}

/// Noise over the string alphabet, or well-formed strings whose labels may be invalid.
fn einsum_strategy() -> impl Strategy<Value = String> {
    let alphabet: Vec<char> = "abcdAB,,->-> .1é".chars().collect();
    prop_oneof![
        prop::collection::vec(prop::sample::select(alphabet), 0..14)
            .prop_map(|v| v.into_iter().collect()),
        "[abcd]{0,4}(,[abcd]{0,4}){0,4}->[abcd]{0,4}",
    ]
}

/// Plans with every kind of order and, when that succeeds, executes on random data.
fn plan_and_run(network: &Network, dims: &[Vec<usize>], order_labels: Order, seed: u64) {
    let be = ReferenceBackend;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let orders = [
        Order::Default,
        Order::Optimize(Optimizer::Greedy),
        Order::Optimize(Optimizer::Exhaustive),
        order_labels,
    ];
    for order in orders {
        if let Ok(plan) = NetworkPlan::new(network, dims, &order) {
            let tensors: Vec<Arc<HostTensor>> = dims
                .iter()
                .map(|d| Arc::new(random_tensor(&mut rng, d, DType::C64)))
                .collect();
            let refs: Vec<_> = tensors.iter().collect();
            let c = plan.execute(&be, &refs).expect("a valid plan executes");
            assert_eq!(c.dims(), plan.output_dims());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 600,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_einsum_strings_never_panic(
        s in einsum_strategy(),
        dims in prop::collection::vec(prop::collection::vec(0usize..4, 0..5), 0..5),
        order in prop::collection::vec(prop::sample::select(vec!['a', 'b', 'c', 'd', 'A']), 0..5),
        seed in any::<u64>(),
    ) {
        if let Ok(network) = Network::einsum(&s) {
            let order = Order::Labels(order.into_iter().map(adrules_core::network::Label::Char).collect());
            plan_and_run(&network, &dims, order, seed);
        }
    }

    #[test]
    fn random_ncon_lists_never_panic(
        lists in prop::collection::vec(prop::collection::vec(-4i64..=4, 0..5), 0..5),
        output in prop::option::of(prop::collection::vec(-4i64..=1, 0..4)),
        n_conj in 0usize..6,
        order in prop::collection::vec(-1i64..=4, 0..5),
        dims in prop::collection::vec(prop::collection::vec(0usize..4, 0..5), 0..5),
        seed in any::<u64>(),
    ) {
        let built = Network::ncon(&lists, output.as_deref())
            .and_then(|n| n.with_conj(&vec![Conj::Yes; n_conj]));
        if let Ok(network) = built {
            plan_and_run(&network, &dims, Order::ncon(&order), seed);
        }
    }

    #[test]
    fn valid_random_networks_plan_and_run(
        n in 1usize..6,
        seed in any::<u64>(),
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let net = crate::support::network::RandomNetwork::generate(&mut rng, n, 7, 0.1);
        let network = Network::ncon(&net.ncon(), None).unwrap();
        plan_and_run(&network, &net.operand_dims(), Order::Default, seed);
        let network = Network::einsum(&net.einsum()).unwrap();
        plan_and_run(&network, &net.operand_dims(), Order::Optimize(Optimizer::TreeSa), seed);
    }
}
