//! Slicing's time overhead (`SlicedPlan`) against the unsliced plan, f64, on a random
//! 3-regular graph of 48 vertices with bond 2 (seed 11, the ncon label order: its largest
//! intermediate is 2²³ elements, 64 MiB) for targets of a sixteenth and a 256th of that
//! intermediate, and on an 8×8 lattice with bond 4 (`Optimizer::Auto`, largest intermediate
//! 2²⁰ elements) for a sixteenth (`MemoryTarget::Elements`):
//! - `value`: `execute` (one thread: the unsliced GEMMs would otherwise use both cores);
//! - `gradient`: value and cotangents of every operand for `C̄ = 1` (unsliced: `rrule`
//!   then its pullback; sliced: `value_and_gradient`, one pass over the slices);
//! - `value par` / `gradient par`: the sliced runs on a 2-thread pool (`execute_par`,
//!   `value_and_gradient_par`), against the unsliced ones on the same pool.
//!
//! The peak memory of the sliced gradient is measured by the strided crate's test
//! `network_sliced_memory` (a counting global allocator in a child process).

use std::hint::black_box;
use std::time::Duration;

use adrules::network::{MemoryTarget, Network, NetworkPlan, Optimizer, Order, SlicedPlan};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, DType};
use adrules_testing::Rng;
use adrules_testing::networks::{Graph, lattice, random_regular};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("slicing");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let graphs: [(&str, Graph, Order, &[usize]); 2] = [
        (
            "random48",
            random_regular(48, 2, 11),
            Order::Default,
            &[16, 256],
        ),
        (
            "lattice8",
            lattice(8, 4),
            Order::Optimize(Optimizer::Auto),
            &[16],
        ),
    ];
    for (name, graph, order, divisors) in graphs {
        let net = Network::ncon(&graph.labels, None).expect("valid");
        let dims = graph.shapes();
        let plan = NetworkPlan::new(&net, &dims, &order).expect("plans");
        let whole = SlicedPlan::new(&net, &dims, &order, MemoryTarget::Elements(usize::MAX))
            .expect("plans");
        let largest = whole.unsliced_elements().largest as usize;
        let mut rng = Rng::seed(1);
        let xs: Vec<Tensor> = dims
            .iter()
            .map(|d| {
                Strided
                    .from_host(rng.tensor(d, DType::F64))
                    .expect("tensor")
            })
            .collect();
        let refs: Vec<&Tensor> = xs.iter().collect();
        let c_bar = Strided
            .from_host(rng.tensor(&[], DType::F64))
            .expect("tensor");
        let active = vec![true; refs.len()];
        let unsliced_value = || black_box(plan.execute(&Strided, &refs).expect("runs"));
        let unsliced_gradient = || {
            let (c, pb) = plan.rrule(&Strided, &refs, &active).expect("runs");
            black_box((c, pb.pullback(&c_bar).expect("runs")))
        };
        for (pool, threads) in [(&one, "t1"), (&two, "t2")] {
            let id = |what: &str| {
                BenchmarkId::new(format!("unsliced {what}"), format!("{name}_{threads}"))
            };
            g.bench_function(id("value"), |b| b.iter(|| pool.install(unsliced_value)));
            g.bench_function(id("gradient"), |b| {
                b.iter(|| pool.install(unsliced_gradient))
            });
        }
        for &div in divisors {
            let target = MemoryTarget::Elements(largest / div);
            let sliced = SlicedPlan::new(&net, &dims, &order, target).expect("slices");
            let v = format!("{name}_1/{div}");
            println!(
                "slicing {v}: {} slices, cost {:.3e} vs unsliced {:.3e}",
                sliced.num_slices(),
                sliced.cost(),
                whole.unsliced_cost()
            );
            g.bench_function(BenchmarkId::new("value t1", &v), |b| {
                b.iter(|| one.install(|| black_box(sliced.execute(&Strided, &refs).expect("runs"))))
            });
            g.bench_function(BenchmarkId::new("gradient t1", &v), |b| {
                b.iter(|| {
                    one.install(|| {
                        black_box(
                            sliced
                                .value_and_gradient(&Strided, &refs, &c_bar, &active)
                                .expect("runs"),
                        )
                    })
                })
            });
            g.bench_function(BenchmarkId::new("value t2", &v), |b| {
                b.iter(|| {
                    two.install(|| {
                        black_box(sliced.execute_par(&Strided, &refs, &target).expect("runs"))
                    })
                })
            });
            g.bench_function(BenchmarkId::new("gradient t2", &v), |b| {
                b.iter(|| {
                    two.install(|| {
                        black_box(
                            sliced
                                .value_and_gradient_par(&Strided, &refs, &c_bar, &active, &target)
                                .expect("runs"),
                        )
                    })
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
