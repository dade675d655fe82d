//! [`OutputsNode`] (`src/rule/node.rs`), the meeting point of a rule's output cotangents in
//! an engine whose ops have one output, here over the SVD rule: the pullback it runs from the
//! deposits its tickets name equals the decomposition's own pullback on the same cotangents
//! (an unused factor as no cotangent); a deposit is taken once; passes interleaved on one node, or run on two
//! threads at once, each get their own cotangents; and a cotangent that is not the sum of
//! this pass's selector vectors is a typed error, never a number.

use adrules_core::linalg::{RuleOptions, SvdCotangents, SvdMode, SvdPullback, svd_rrule};
use adrules_core::rule::{self, OutputsNode, RulePullback, SvdRule};
use adrules_core::{Backend, DType, Error, HostTensor};
use adrules_strided::{Strided, Tensor};

/// The node of the SVD rule on `A`, whose pullback returns `[Ā]`.
struct Node(OutputsNode<Strided, RulePullback<Strided>>);

impl Node {
    fn deposit(&self, output: usize, cotangent: Tensor) -> adrules_core::Result<Tensor> {
        self.0.deposit(output, cotangent)
    }

    fn pullback(&self, node_bar: &Tensor) -> adrules_core::Result<Tensor> {
        let mut a_bar = self.0.pullback(node_bar)?;
        Ok(a_bar.remove(0).expect("A is active"))
    }
}

/// A fixed `4 × 3` matrix's SVD node and the decomposition's own pullback (distinct nonzero
/// singular values).
fn node() -> (Node, SvdPullback<Strided>) {
    let a = vec![4.0, 1.0, 0.0, 1.0, 3.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 1.0];
    let a = tensor(&[4, 3], a);
    let (_, pb) = svd_rrule(&Strided, &a, SvdMode::Thin, RuleOptions::default()).unwrap();
    let (_, rule_pb) = rule::rrule(&SvdRule::default(), &Strided, &[&a], &[true]).unwrap();
    (Node(OutputsNode::new(rule_pb)), pb)
}

fn tensor(dims: &[usize], v: Vec<f64>) -> Tensor {
    Strided
        .from_host(HostTensor::from_vec(dims, v).unwrap())
        .unwrap()
}

/// A cotangent of shape `dims` with entries from `seed`.
fn cot(dims: &[usize], seed: usize) -> Tensor {
    let n: usize = dims.iter().product();
    let v = (0..n)
        .map(|k| ((k * 5 + seed * 3) % 7) as f64 - 3.0)
        .collect();
    tensor(dims, v)
}

fn host(t: &Tensor) -> Vec<f64> {
    Strided
        .to_host(t)
        .unwrap()
        .as_slice::<f64>()
        .unwrap()
        .to_vec()
}

/// `a + b` of two selector vectors (what the engine's backward sums).
fn sum(a: &Tensor, b: &Tensor) -> Tensor {
    let v = host(a).iter().zip(host(b)).map(|(x, y)| x + y).collect();
    tensor(&[3], v)
}

#[test]
fn the_node_runs_the_decomposition_pullback_on_the_deposits() {
    let (node, pb) = node();
    let (u, vh) = (cot(&[4, 3], 1), cot(&[3, 3], 2));
    let node_bar = sum(
        &node.deposit(0, u.clone()).unwrap(),
        &node.deposit(2, vh.clone()).unwrap(),
    );
    assert_eq!(host(&node_bar)[1], 0.0, "S is unused: no ticket");
    let got = host(&node.pullback(&node_bar).unwrap());
    let want = pb
        .pullback(SvdCotangents {
            u: Some(&u),
            vh: Some(&vh),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(got, host(&want));
    // the deposits are taken: the same tickets again name nothing
    match node.pullback(&node_bar) {
        Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "node_bar"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn interleaved_passes_and_threads_get_their_own_cotangents() {
    let (node, pb) = node();
    let want = |seed: usize| {
        let (u, s, vh) = (
            cot(&[4, 3], seed),
            cot(&[3], seed + 1),
            cot(&[3, 3], seed + 2),
        );
        let cots = SvdCotangents {
            u: Some(&u),
            s: Some(&s),
            vh: Some(&vh),
            ..Default::default()
        };
        host(&pb.pullback(cots).unwrap())
    };
    let deposit_all = |seed: usize| {
        let d0 = node.deposit(0, cot(&[4, 3], seed)).unwrap();
        let d1 = node.deposit(1, cot(&[3], seed + 1)).unwrap();
        let d2 = node.deposit(2, cot(&[3, 3], seed + 2)).unwrap();
        sum(&sum(&d0, &d1), &d2)
    };
    // two passes deposit before either reaches the node
    let (first, second) = (deposit_all(10), deposit_all(20));
    assert_eq!(host(&node.pullback(&second).unwrap()), want(20));
    assert_eq!(host(&node.pullback(&first).unwrap()), want(10));
    // eight threads at once, each a whole pass
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..8)
            .map(|t| {
                let (node, deposit_all) = (&node, &deposit_all);
                scope.spawn(move || {
                    let mut got = Vec::new();
                    for r in 0..25 {
                        let seed = 100 * t + 4 * r;
                        got.push((seed, host(&node.pullback(&deposit_all(seed)).unwrap())));
                    }
                    got
                })
            })
            .collect();
        for run in runs {
            for (seed, got) in run.join().unwrap() {
                assert_eq!(got, want(seed), "seed {seed}");
            }
        }
    });
}

#[test]
fn a_cotangent_that_is_not_this_pass_tickets_is_a_typed_error() {
    let (node, _) = node();
    let u = node.deposit(0, cot(&[4, 3], 0)).unwrap();
    let d = node.deposit(1, cot(&[3], 0)).unwrap();
    let (tu, t) = (host(&u)[0], host(&d)[1]);
    for (bad, why) in [
        (vec![0.0, 2.0 * t, 0.0], "a scaled ticket"),
        (vec![0.0, t + 0.5, 0.0], "not an integer"),
        (vec![0.0, -t, 0.0], "negative"),
        (vec![0.0, f64::NAN, 0.0], "NaN"),
        (vec![t, 0.0, 0.0], "the ticket of another factor"),
        (vec![tu, 2.0 * t, 0.0], "a good ticket beside a bad one"),
    ] {
        match node.pullback(&tensor(&[3], bad)) {
            Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "node_bar", "{why}"),
            other => panic!("{why}: expected InvalidArgument, got {other:?}"),
        }
    }
    match node.pullback(&tensor(&[2], vec![0.0, t])) {
        Err(Error::ShapeMismatch { arg, .. }) => assert_eq!(arg, "node_bar"),
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    let complex = Strided
        .from_host(
            HostTensor::from_vec(&[3], vec![0.0f64, t, 0.0])
                .unwrap()
                .to_dtype_projected(DType::C64),
        )
        .unwrap();
    match node.pullback(&complex) {
        Err(Error::DTypeMismatch { arg, .. }) => assert_eq!(arg, "node_bar"),
        other => panic!("expected DTypeMismatch, got {other:?}"),
    }
    match node.deposit(3, cot(&[3], 0)) {
        Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "output"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // the refused cotangents took nothing: both deposits are still there, and a wrong shape
    // deposited is the pullback's shape error
    assert!(node.pullback(&sum(&u, &d)).is_ok());
    let wrong = node.deposit(1, cot(&[4], 0)).unwrap();
    match node.pullback(&wrong) {
        Err(Error::ShapeMismatch { .. }) => {}
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}
