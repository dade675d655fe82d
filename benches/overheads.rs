//! The fixed costs around the kernels (issue 29's targets), on the strided backend, one thread,
//! each case paired with its reference in the same run (see `common::paired`):
//!
//! - `pool_vs_heap`: the gradient of `abc,bde,cdf->aef` (all dimensions 64, f64, optimized
//!   order: forward pass recording the pullback, then the pullback of every operand) with the
//!   pooling allocator ([`BufferPool`], `pool`) and with the default heap allocator (`heap`).
//!   Target: pool ≤ 1.0× heap.
//! - `elementwise`: the one-call `einsum` of `ij,ij->ij` (a Hadamard product, 1000 × 1000 f64)
//!   and `bi,bi->b` (row-wise dots, 1000 × 1000 f64) against a plain Rust loop over the
//!   contiguous buffers into an existing output (`loop`: the memory-bandwidth floor). Target:
//!   `ij,ij->ij` ≤ 1.5 ms; numpy's figure comes from `benches/numpy_elementwise.py`.
//! - `small_call`: `ij,jk->ik` with n = 8 (f64): the primal `Backend::contract` into an
//!   existing C (`primal`) against the reverse rule of the same product (`rrule`: `ContractOp`
//!   primal into a fresh C, pullback recorded, then applied to C̄ for both operands), and the
//!   one-call `einsum` (`einsum`) against the same network's `rrule` + pullback with its plan
//!   from the same cache (`einsum_rrule`). Target: rrule + pullback ≤ 5 µs.

use std::hint::black_box;
use std::time::Duration;

mod common;

use adrules::network::{Network, NetworkPlan, Order, PlanCache, einsum};
use adrules::rules::{Activity, ContractOp};
use adrules::strided::{BufferPool, Strided, Tensor};
use adrules::{Allocator, Backend, Conj, ContractSpec, DynScalar};
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect()
}

fn tensor(dims: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(dims, values(dims.iter().product(), seed)).expect("valid shape")
}

fn one_thread() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool")
}

fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
    samples: usize,
    seconds: u64,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(samples)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(seconds))
        .sampling_mode(SamplingMode::Flat);
    group
}

fn pool_vs_heap(c: &mut Criterion) {
    let tp = one_thread();
    let be = Strided;
    let dims = [[64usize; 3]; 3];
    let net = Network::einsum("abc,bde,cdf->aef").expect("valid network");
    let plan = NetworkPlan::new(&net, &dims, &Order::Default).expect("valid plan");
    let xs: Vec<Tensor> = dims.iter().zip(1..).map(|(d, s)| tensor(d, s)).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let cbar = tensor(plan.output_dims(), 9);
    let pool = BufferPool::new();
    let mut pooled = || {
        let (c, pb) = plan
            .rrule_with(&be, &pool, &refs, &[true; 3])
            .expect("runs");
        pool.free(black_box(c));
        let grads = pool.scope(|| pb.pullback(&cbar)).expect("runs");
        for g in grads.into_iter().flatten() {
            pool.free(black_box(g));
        }
    };
    let mut heap = || {
        let (c, pb) = plan.rrule(&be, &refs, &[true; 3]).expect("runs");
        black_box(c);
        black_box(pb.pullback(&cbar).expect("runs"));
    };
    let mut g = group(c, "pool_vs_heap", 10, 8);
    common::paired(
        &mut g,
        &tp,
        "abc,bde,cdf->aef_d64_grad_t1",
        ("pool", &mut pooled),
        ("heap", &mut heap),
    );
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    let tp = one_thread();
    let be = Strided;
    let n = 1000;
    let (a, b) = (tensor(&[n, n], 1), tensor(&[n, n], 2));
    let (av, bv) = (values(n * n, 1), values(n * n, 2));
    let mut g = group(c, "elementwise", 20, 3);

    let mut ours = || {
        black_box(einsum(&be, "ij,ij->ij", &[&a, &b]).expect("einsum"));
    };
    let mut out = vec![0.0f64; n * n];
    let mut floor = || {
        for ((o, x), y) in out.iter_mut().zip(&av).zip(&bv) {
            *o = x * y;
        }
        black_box(&out);
    };
    common::paired(
        &mut g,
        &tp,
        "ij,ij->ij_n1000_f64_t1",
        ("adrules", &mut ours),
        ("loop", &mut floor),
    );

    let mut ours = || {
        black_box(einsum(&be, "bi,bi->b", &[&a, &b]).expect("einsum"));
    };
    let mut out = vec![0.0f64; n];
    let mut floor = || {
        for ((o, x), y) in out.iter_mut().zip(av.chunks(n)).zip(bv.chunks(n)) {
            // four partial sums: the loop a compiler vectorizes without reassociating
            let mut s = [0.0f64; 4];
            for (xs, ys) in x.chunks_exact(4).zip(y.chunks_exact(4)) {
                for l in 0..4 {
                    s[l] += xs[l] * ys[l];
                }
            }
            *o = s.iter().sum();
        }
        black_box(&out);
    };
    common::paired(
        &mut g,
        &tp,
        "bi,bi->b_n1000_f64_t1",
        ("adrules", &mut ours),
        ("loop", &mut floor),
    );
    g.finish();
}

fn small_call(c: &mut Criterion) {
    let tp = one_thread();
    let be = Strided;
    let n = 8;
    let (a, b, cbar) = (tensor(&[n, n], 1), tensor(&[n, n], 2), tensor(&[n, n], 3));
    let spec = ContractSpec::from_labels("ij", "jk", "ik").expect("labels");
    let op = ContractOp::new(spec.clone());
    let mut out = tensor(&[n, n], 4);
    let (one, zero) = (DynScalar::from(1.0f64), DynScalar::from(0.0f64));
    let mut g = group(c, "small_call", 20, 2);
    let mut primal = || {
        be.contract(&mut out, &a, &b, &spec, Conj::No, Conj::No, one, zero)
            .expect("contract");
        black_box(&out);
    };
    let mut rrule = || {
        let mut c = be.empty(&[n, n], adrules::DType::F64).expect("empty");
        op.apply(&be, &mut c, &a, &b).expect("primal");
        let pb = op
            .pullback_at(&be, &c, &a, &b, Activity::OPERANDS)
            .expect("pullback");
        black_box(pb.pullback(&cbar).expect("pullback"));
    };
    common::paired(
        &mut g,
        &tp,
        "ij,jk->ik_n8_f64_t1",
        ("primal", &mut primal),
        ("rrule", &mut rrule),
    );
    let mut call = || {
        black_box(einsum(&be, "ij,jk->ik", &[&a, &b]).expect("einsum"));
    };
    let mut network_rrule = || {
        let plan = PlanCache::global()
            .einsum("ij,jk->ik", &[[n, n], [n, n]])
            .expect("plan");
        let (c, pb) = plan.rrule(&be, &[&a, &b], &[true, true]).expect("rrule");
        black_box(c);
        black_box(pb.pullback(&cbar).expect("pullback"));
    };
    common::paired(
        &mut g,
        &tp,
        "ij,jk->ik_n8_f64_t1_network",
        ("einsum", &mut call),
        ("einsum_rrule", &mut network_rrule),
    );
    g.finish();
}

criterion_group!(benches, pool_vs_heap, elementwise, small_call);
criterion_main!(benches);
