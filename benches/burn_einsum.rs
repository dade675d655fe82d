//! Attention scores `bhqd,bhkd->bhqk` (b = h = 8, q = k = 128, d = 64, f32) on burn's Flex
//! CPU backend with autodiff, one rayon thread: `adrules::burn::einsum` (one node of burn's
//! graph, plan from the core's plan cache, backward by the core's network pullback) against
//! burn's own `Tensor::einsum` (a chain of burn ops differentiated by burn).
//!
//! - `primal_f32_t1`: the einsum alone, on inputs on the autodiff device that do not require
//!   gradients (inference on an autodiff backend);
//! - `gradient_f32_t1`: build leaves with `require_grad`, einsum, `(c * w).sum().backward()`
//!   with a fixed random weight `w` (so the cotangent is not all ones), read both gradients.
//!
//! Group `burn_attention`, functions `adrules` and `burn`; the two are measured interleaved
//! in one run (see `common::paired`) on a 1-thread rayon pool installed around the
//! measurement (burn-flex's GEMM and adrules-strided's faer both run on the current pool).
//!
//! Run: `cargo bench -p adrules-benches --features burn --bench burn_einsum`; then
//! `cargo xtask bench` prints the table "Einsum on burn" from criterion's estimates (it does
//! not build the burn feature itself, so this bench must have been run first).

use std::hint::black_box;
use std::time::Duration;

mod common;

use adrules::burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};

const EXPR: &str = "bhqd,bhkd->bhqk";
const B: usize = 8;
const H: usize = 8;
const Q: usize = 128;
const K: usize = 128;
const D: usize = 64;

/// Deterministic values in [-1, 1) as an f32 tensor on `device`.
fn input(dims: [usize; 4], seed: u64, device: &Device) -> Tensor<4> {
    let mut x = seed | 1;
    let v: Vec<f32> = (0..dims.iter().product::<usize>())
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 11) as f64 / (1u64 << 52) as f64 - 1.0) as f32
        })
        .collect();
    Tensor::<4>::from_data(TensorData::new(v, dims), (device, BurnDType::F32))
}

fn one_thread() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool")
}

fn einsum(ours: bool, a: &Tensor<4>, b: &Tensor<4>) -> Tensor<4> {
    if ours {
        adrules::burn::einsum(EXPR, [a.into(), b.into()]).expect("valid einsum")
    } else {
        Tensor::<4>::einsum(EXPR, [a.into(), b.into()])
    }
}

/// One forward + backward of `Σ w ⊙ einsum(a, b)`; returns both gradients.
fn gradient(ours: bool, a: &Tensor<4>, b: &Tensor<4>, w: &Tensor<4>) -> (Tensor<4>, Tensor<4>) {
    let (a, b) = (a.clone().require_grad(), b.clone().require_grad());
    let c = einsum(ours, &a, &b);
    let grads = (c * w.clone()).sum().backward();
    let (ga, gb) = (a.grad(&grads), b.grad(&grads));
    (ga.expect("gradient of a"), gb.expect("gradient of b"))
}

fn attention(c: &mut Criterion) {
    let pool = one_thread();
    let device = Device::flex().autodiff();
    let a = input([B, H, Q, D], 1, &device);
    let b = input([B, H, K, D], 2, &device);
    let w = input([B, H, Q, K], 3, &device);
    // Both paths once outside the measurement: the plan cache, lazily built state.
    pool.install(|| {
        for ours in [true, false] {
            black_box(einsum(ours, &a, &b));
            black_box(gradient(ours, &a, &b, &w));
        }
    });

    let flops = 2 * (B * H * Q * K * D) as u64;
    let mut group = c.benchmark_group("burn_attention");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(flops));
    let mut ours = || {
        black_box(einsum(true, &a, &b));
    };
    let mut theirs = || {
        black_box(einsum(false, &a, &b));
    };
    common::paired(
        &mut group,
        &pool,
        "primal_f32_t1",
        ("adrules", &mut ours),
        ("burn", &mut theirs),
    );
    // primal + the two cotangent products: three times the GEMM work of the primal
    group.throughput(Throughput::Elements(3 * flops));
    let mut ours = || {
        black_box(gradient(true, &a, &b, &w));
    };
    let mut theirs = || {
        black_box(gradient(false, &a, &b, &w));
    };
    common::paired(
        &mut group,
        &pool,
        "gradient_f32_t1",
        ("adrules", &mut ours),
        ("burn", &mut theirs),
    );
    group.finish();
}

/// Small calls, where the bridge's own cost shows: an 8 × 8 f64 matrix product's gradient
/// through `adrules::burn::einsum` against burn's `einsum`, and the gradient of the nuclear
/// norm through `adrules::burn::linalg::svd` (the multi-output bridge: a node and three
/// selectors; burn's own SVD does not differentiate, so it has no pair).
fn small_call(c: &mut Criterion) {
    let pool = one_thread();
    let device = Device::flex().autodiff();
    let n = 8;
    let data = |seed: usize| {
        let v: Vec<f64> = (0..n * n)
            .map(|i| ((i * 7919 + seed * 104_729) % 1009) as f64 / 1009.0 - 0.45)
            .collect();
        Tensor::<2>::from_data(TensorData::new(v, [n, n]), (&device, BurnDType::F64))
    };
    let (a, b) = (data(1), data(2));
    let matmul = move |ours: bool| {
        let (a, b) = (a.clone().require_grad(), b.clone().require_grad());
        let c: Tensor<2> = if ours {
            adrules::burn::einsum("ij,jk->ik", [(&a).into(), (&b).into()]).expect("valid einsum")
        } else {
            Tensor::<2>::einsum("ij,jk->ik", [(&a).into(), (&b).into()])
        };
        let grads = c.sum().backward();
        black_box((a.grad(&grads), b.grad(&grads)));
    };
    let m = data(3);
    let svd = move || {
        let m = m.clone().require_grad();
        let opts = adrules::linalg::RuleOptions::default();
        let f = adrules::burn::linalg::svd(&m, adrules::linalg::SvdMode::Thin, opts).expect("svd");
        let grads = f.s.sum().backward();
        black_box(m.grad(&grads));
    };
    pool.install(|| {
        matmul(true);
        matmul(false);
        svd();
    });
    let mut group = c.benchmark_group("burn_small_call");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat);
    let (mut ours, mut theirs) = (|| matmul(true), || matmul(false));
    common::paired(
        &mut group,
        &pool,
        "matmul8_gradient_f64_t1",
        ("adrules", &mut ours),
        ("burn", &mut theirs),
    );
    group.bench_function("adrules/svd8_gradient_f64_t1", |bch| {
        pool.install(|| bch.iter(&svd))
    });
    group.finish();
}

criterion_group!(benches, attention, small_call);
criterion_main!(benches);
