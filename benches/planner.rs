//! Contraction-order planning (`NetworkPlan::new`) for large networks, the scaling table of
//! the planner:
//! - `scalars n`: the einsum `",,…,->"` of `n` scalars (`Order::Default`, i.e. the greedy
//!   search above `Optimizer::AUTO_EXHAUSTIVE_MAX` operands; only outer products);
//! - `chain n`: a connected matrix chain `M₁[-1,1] M₂[1,2] … Mₙ[n−1,−2]` (3 × 3), written with
//!   integer labels (ncon lists, as einsum letters run out) and planned with
//!   `Order::Optimize(Optimizer::Auto)`, the einsum default;
//! - `mps norm 800`: ⟨ψ|ψ⟩ of a 400-site MPS (400 ket tensors (χ, d, χ) and 400 bra tensors,
//!   χ = 16, d = 2, open boundaries) with `Optimizer::Greedy`.
//!
//! Planning only (validation, the order search, lowering to steps); nothing is executed.

use std::hint::black_box;
use std::time::Duration;

use adrules::network::{Network, NetworkPlan, Optimizer, Order};
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

/// ⟨ψ|ψ⟩ for an MPS of `sites` sites: ket tensors, then bra tensors (conjugate labels).
fn mps_norm(sites: usize, chi: usize, d: usize) -> (Network, Vec<Vec<usize>>) {
    let bond = |s: usize, layer: i64| 3 * s as i64 + layer;
    let phys = |s: usize| 3 * s as i64 + 3;
    let (mut idx, mut dims) = (Vec::new(), Vec::new());
    for layer in [1, 2] {
        for s in 0..sites {
            let (mut ax, mut dm) = (Vec::new(), Vec::new());
            if s > 0 {
                ax.push(bond(s - 1, layer));
                dm.push(chi);
            }
            ax.push(phys(s));
            dm.push(d);
            if s + 1 < sites {
                ax.push(bond(s, layer));
                dm.push(chi);
            }
            idx.push(ax);
            dims.push(dm);
        }
    }
    (Network::ncon(&idx, None).expect("valid"), dims)
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
    let (net, dims) = mps_norm(400, 16, 2);
    let greedy = Order::Optimize(Optimizer::Greedy);
    g.bench_function(BenchmarkId::new("mps norm", 800), |b| {
        b.iter(|| black_box(NetworkPlan::new(&net, &dims, &greedy).expect("plans")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
