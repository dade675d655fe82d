//! Contraction-order planning (`NetworkPlan::new`) for large networks, the scaling table of
//! the planner:
//! - `scalars n`: the einsum `",,…,->"` of `n` scalars (`Order::Default`, i.e. the greedy
//!   search above `Optimizer::AUTO_EXHAUSTIVE_MAX` operands; only outer products);
//! - `chain n`: a connected matrix chain `M₁[-1,1] M₂[1,2] … Mₙ[n−1,−2]` (3 × 3), written with
//!   integer labels (ncon lists, as einsum letters run out) and planned with
//!   `Order::Optimize(Optimizer::Auto)`, the einsum default;
//! - `shared pair n`: `"ab,ab,…,ab->"` (both labels on every operand) and `hypergraph n`:
//!   each operand holds two of four labels (hyperedges of degree about n/2), with the einsum
//!   default order: planning stays near-linear however many operands share a label;
//! - `auto NAME`: `NetworkPlan::choose_order` with `Optimizer::Auto` on the quality networks of
//!   `adrules_testing::networks::quality_set` (lattices, random 3-regular graphs, an MPS
//!   norm), whose costs the `planner-networks` binary prints beside opt_einsum's and
//!   cotengra's (`benches/peers_planner.py`).
//!
//! Planning only (validation, the order search, lowering to steps); nothing is executed.

use std::hint::black_box;
use std::time::Duration;

use adrules::network::{Network, NetworkPlan, Optimizer, Order};
use adrules_testing::networks;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn scalars(n: usize) -> (Network, Vec<Vec<usize>>) {
    let s = format!("{}->", vec![""; n].join(","));
    (Network::einsum(&s).expect("valid"), vec![vec![]; n])
}

fn chain(n: usize) -> (Network, Vec<Vec<usize>>) {
    let n = n as i64;
    let idx: Vec<Vec<i64>> = (0..n)
        .map(|k| match k {
            0 => vec![-1, 1],
            k if k == n - 1 => vec![k, -2],
            k => vec![k, k + 1],
        })
        .collect();
    (
        Network::ncon(&idx, None).expect("valid"),
        vec![vec![3, 3]; n as usize],
    )
}

/// `n` operands `ab` (both labels on every operand, summed): the batch-label case.
fn shared_pair(n: usize) -> (Network, Vec<Vec<usize>>) {
    let s = format!("{}ab->", "ab,".repeat(n - 1));
    (Network::einsum(&s).expect("valid"), vec![vec![3, 4]; n])
}

/// `n` operands, each holding two of four labels (seed 5): hyperedges of degree about n/2.
fn hypergraph(n: usize) -> (Network, Vec<Vec<usize>>) {
    let net = Network::einsum(&networks::hypergraph(n, 5)).expect("valid");
    (net, vec![vec![2, 2]; n])
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("planner");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in [1_000, 3_000, 10_000] {
        let (net, dims) = scalars(n);
        g.bench_function(BenchmarkId::new("scalars", n), |b| {
            b.iter(|| black_box(NetworkPlan::new(&net, &dims, &Order::Default).expect("plans")))
        });
        let (net, dims) = chain(n);
        let auto = Order::Optimize(Optimizer::Auto);
        g.bench_function(BenchmarkId::new("chain", n), |b| {
            b.iter(|| black_box(NetworkPlan::new(&net, &dims, &auto).expect("plans")))
        });
    }
    for n in [3_000, 10_000] {
        for (name, (net, dims)) in [
            ("shared pair", shared_pair(n)),
            ("hypergraph", hypergraph(n)),
        ] {
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| black_box(NetworkPlan::new(&net, &dims, &Order::Default).expect("plans")))
            });
        }
    }
    // the quality networks (costs: the `planner-networks` binary), default einsum order;
    // the order only (the random graphs' trees exceed memory, so they are not lowered)
    for graph in networks::quality_set() {
        let net = Network::ncon(&graph.labels, None).expect("valid");
        let dims = graph.shapes();
        let auto = Order::Optimize(Optimizer::Auto);
        g.bench_function(BenchmarkId::new("auto", &graph.name), |b| {
            b.iter(|| black_box(NetworkPlan::choose_order(&net, &dims, &auto).expect("orders")))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
