//! Network contraction benchmarks on the strided backend (f64), with 1 and 2 threads.
//!
//! - `abc,bde,cdf->aef`, all dimensions 64, optimized order: the primal with the pooling
//!   allocator (`adrules`) and with plain heap allocation (`adrules-heap`); the gradient for
//!   every operand (`adrules-grad`: forward pass recording the pullback, then the pullback;
//!   `adrules-pullback`: the pullback alone, applied to a recorded forward pass);
//!   the two bare faer GEMMs of the same plan, 4096×64·64×4096 and 4096×4096·4096×64
//!   (`faer`, the floor of any TTGT evaluation).
//! - `ij,jk,kl->il`, n = 1024: the primal with the pool, and two bare 1024³ faer GEMMs.
//!
//! Each adrules case is paired with its faer floor in the same run (the machine is shared and
//! noisy: compare ratios). External references measured on this kind of machine
//! (docs/PERFORMANCE.md, "Reference figures of the machine"): opt_einsum 86.5 ms (1 thread) and 57.1 ms (2 threads), JAX jit
//! 173 ms for the first network; numpy einsum 45.7 ms (1 thread) and 25.0 ms (2 threads),
//! JAX jit 72.7 ms for the second.

use std::hint::black_box;
use std::time::Duration;

use adrules::network::{Network, NetworkPlan, Order};
use adrules::strided::{BufferPool, Strided, Tensor};
use adrules::{Allocator, Backend, HostData, HostTensor};
use criterion::{Criterion, criterion_group, criterion_main};
use faer::{Accum, Mat, Par};

fn random(dims: &[usize], seed: u64) -> Tensor {
    let n: usize = dims.iter().product();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data: Vec<f64> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    let h = HostTensor::new(dims, HostData::F64(data)).expect("valid shape");
    Strided.from_host(h).expect("f64 is supported")
}

/// `(m, k, n)` GEMMs in sequence, on the current rayon pool.
fn gemms(shapes: &[(usize, usize, usize)]) -> impl FnMut() + use<> {
    let mats: Vec<(Mat<f64>, Mat<f64>, Mat<f64>)> = shapes
        .iter()
        .map(|&(m, k, n)| {
            (
                Mat::from_fn(m, k, |i, j| ((i + 2 * j) % 7) as f64 - 3.0),
                Mat::from_fn(k, n, |i, j| ((3 * i + j) % 5) as f64 - 2.0),
                Mat::zeros(m, n),
            )
        })
        .collect();
    let mut mats = mats;
    move || {
        let par = if rayon::current_num_threads() > 1 {
            Par::rayon(0)
        } else {
            Par::Seq
        };
        for (a, b, c) in &mut mats {
            faer::linalg::matmul::matmul(
                c.as_mut(),
                Accum::Replace,
                a.as_ref(),
                b.as_ref(),
                1.0,
                par,
            );
        }
        black_box(&mats);
    }
}

fn bench(c: &mut Criterion) {
    let be = Strided;
    let mut g = c.benchmark_group("network");
    g.sample_size(10).measurement_time(Duration::from_secs(6));

    let dims = [[64usize; 3]; 3];
    let net = Network::einsum("abc,bde,cdf->aef").expect("valid network");
    let plan = NetworkPlan::new(&net, &dims, &Order::Default).expect("valid plan");
    let xs: Vec<Tensor> = dims.iter().zip(1..).map(|(d, s)| random(d, s)).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let cbar = random(plan.output_dims(), 9);

    let chain_dims = [[1024usize; 2]; 3];
    let chain = Network::einsum("ij,jk,kl->il").expect("valid network");
    let chain_plan = NetworkPlan::new(&chain, &chain_dims, &Order::Default).expect("valid plan");
    let ys: Vec<Tensor> = chain_dims
        .iter()
        .zip(11..)
        .map(|(d, s)| random(d, s))
        .collect();
    let yrefs: Vec<&Tensor> = ys.iter().collect();

    let pool = BufferPool::new();
    let three = "abc,bde,cdf->aef d=64";
    let chain_case = "ij,jk,kl->il n=1024";
    for threads in [1, 2] {
        let tp = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool for the benchmark");
        g.bench_function(format!("adrules/{three} {threads}t"), |b| {
            tp.install(|| {
                b.iter(|| {
                    let c = plan.execute_with(&be, &pool, &refs).expect("runs");
                    pool.free(black_box(c));
                })
            })
        });
        g.bench_function(format!("adrules-heap/{three} {threads}t"), |b| {
            tp.install(|| b.iter(|| black_box(plan.execute(&be, &refs).expect("runs"))))
        });
        g.bench_function(format!("adrules-grad/{three} {threads}t"), |b| {
            tp.install(|| {
                b.iter(|| {
                    let (c, pb) = plan
                        .rrule_with(&be, &pool, &refs, &[true; 3])
                        .expect("runs");
                    pool.free(black_box(c));
                    let grads = pool.scope(|| pb.pullback(&cbar)).expect("runs");
                    for g in grads.into_iter().flatten() {
                        pool.free(black_box(g));
                    }
                })
            })
        });
        let (c0, pb) = plan
            .rrule_with(&be, &pool, &refs, &[true; 3])
            .expect("runs");
        g.bench_function(format!("adrules-pullback/{three} {threads}t"), |b| {
            tp.install(|| {
                b.iter(|| {
                    let grads = pool.scope(|| pb.pullback(&cbar)).expect("runs");
                    for g in grads.into_iter().flatten() {
                        pool.free(black_box(g));
                    }
                })
            })
        });
        drop(pb);
        pool.free(c0);
        let mut floor = gemms(&[(4096, 64, 4096), (4096, 4096, 64)]);
        g.bench_function(format!("faer/{three} {threads}t"), |b| {
            tp.install(|| b.iter(&mut floor))
        });
        g.bench_function(format!("adrules/{chain_case} {threads}t"), |b| {
            tp.install(|| {
                b.iter(|| {
                    let c = chain_plan.execute_with(&be, &pool, &yrefs).expect("runs");
                    pool.free(black_box(c));
                })
            })
        });
        let mut floor = gemms(&[(1024, 1024, 1024), (1024, 1024, 1024)]);
        g.bench_function(format!("faer/{chain_case} {threads}t"), |b| {
            tp.install(|| b.iter(&mut floor))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
