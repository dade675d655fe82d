//! Cost of the contraction pullback relative to its primal, issue 3's benchmark:
//! `abcd,cdef->abef`, all dimensions 32, on the strided backend: f64 on 1 and 2 threads,
//! complex128 on 1 thread.
//!
//! - `primal`: the contraction into a freshly allocated C (`Backend::empty`, β = 0);
//! - `rrule`: primal into a fresh C, then (ΔA, ΔB) for a cotangent C̄: what torch's
//!   `einsum` + `backward` and JAX's `(C, vjp)` compute (`benches/peers_contract.py`);
//! - `pullback`: (ΔA, ΔB) for a cotangent C̄, fresh buffers (two GEMMs of the primal's size,
//!   so 2.0× is the floor);
//! - `pullback_alpha`: the same plus ᾱ (one more contraction and an inner product);
//! - `accumulate`: (ΔA, ΔB) added into existing gradient buffers (β = 1, no allocation),
//!   beside `primal_inplace`, the primal into an existing C.
//!
//! `cargo xtask bench` prints the ratios; every pair is measured in the same run.

use std::time::Duration;

use adrules::rules::{Activity, ContractOp, Cotangents};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, ContractSpec, DType, HostTensor};
use adrules_testing::Rng;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn bench_rules(c: &mut Criterion) {
    let d = 32;
    let dims = [d, d, d, d];
    let flops = 2 * (d as u64 * d as u64).pow(3);
    let mut rng = Rng::seed(11);
    let be = Strided;
    let tensor = |h: HostTensor| be.from_host(h).expect("host data");
    let spec = ContractSpec::from_labels("abcd", "cdef", "abef").expect("labels");
    let op = ContractOp::new(spec);
    for (dtype, threads) in [(DType::F64, 1), (DType::F64, 2), (DType::C64, 1)] {
        let a: Tensor = tensor(rng.tensor(&dims, dtype));
        let b: Tensor = tensor(rng.tensor(&dims, dtype));
        let cbar: Tensor = tensor(rng.tensor(&dims, dtype));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        let id = format!("{dtype}_d{d}_t{threads}");
        let mut group = c.benchmark_group("rules");
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2))
            .throughput(Throughput::Elements(flops));
        group.bench_function(BenchmarkId::new("primal", &id), |bch| {
            bch.iter(|| {
                pool.install(|| {
                    let mut out = be.empty(&dims, dtype).expect("empty");
                    op.apply(&be, &mut out, &a, &b).expect("primal");
                    out
                })
            })
        });
        group.bench_function(BenchmarkId::new("rrule", &id), |bch| {
            bch.iter(|| {
                pool.install(|| {
                    let mut out = be.empty(&dims, dtype).expect("empty");
                    op.apply(&be, &mut out, &a, &b).expect("primal");
                    let pb = op
                        .pullback_at(&be, &out, &a, &b, Activity::OPERANDS)
                        .expect("pullback");
                    pb.pullback(&cbar).expect("pullback")
                })
            })
        });
        let mut out = be.zeros(&dims, dtype).expect("zeros");
        group.bench_function(BenchmarkId::new("primal_inplace", &id), |bch| {
            bch.iter(|| pool.install(|| op.apply(&be, &mut out, &a, &b).expect("primal")))
        });
        let pb = op
            .pullback_at(&be, &out, &a, &b, Activity::OPERANDS)
            .expect("pullback");
        group.bench_function(BenchmarkId::new("pullback", &id), |bch| {
            bch.iter(|| pool.install(|| pb.pullback(&cbar).expect("pullback")))
        });
        let mut grads: Cotangents<Strided> = pb.pullback(&cbar).expect("pullback");
        group.bench_function(BenchmarkId::new("accumulate", &id), |bch| {
            bch.iter(|| pool.install(|| pb.accumulate(&cbar, &mut grads).expect("accumulate")))
        });
        let active = Activity {
            alpha: true,
            ..Activity::OPERANDS
        };
        let pb_alpha = op.pullback_at(&be, &out, &a, &b, active).expect("pullback");
        group.bench_function(BenchmarkId::new("pullback_alpha", &id), |bch| {
            bch.iter(|| pool.install(|| pb_alpha.pullback(&cbar).expect("pullback")))
        });
        group.finish();
    }
}

criterion_group!(benches, bench_rules);
criterion_main!(benches);
