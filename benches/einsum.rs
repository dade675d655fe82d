//! The einsum as ML users write it, on the strided backend:
//! - attention scores `bhqd,bhkd->bhqk` (b = h = 8, q = k = 128, d = 64, f32, one thread):
//!   the primal, and primal + the cotangents of both operands (`rrule` + pullback), beside a
//!   loop of bare faer GEMMs of the same 64 products (the floor any batched product pays);
//! - batched matmul `bij,bjk->bik` (b = 64, 128³, f64, one thread) beside the same 64 faer
//!   GEMMs in a loop, and beside one faer GEMM of the same flops (8192 × 128 × 128);
//! - the plan cache: the one-call `einsum("abc,bde,cdf->aef")` (dims 8; plan found in
//!   `PlanCache::global`) beside `NetworkPlan::execute` of a prebuilt plan.
//!
//! Each pair is measured interleaved in one run (see `common::paired`).

use std::time::Duration;

mod common;

use adrules::network::{Network, NetworkPlan, Order, einsum};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, DType};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

fn tensor(dims: &[usize], dtype: DType, seed: u64) -> Tensor {
    let v = values(dims.iter().product(), seed);
    match dtype {
        DType::F32 => Tensor::from_vec(dims, v.iter().map(|&x| x as f32).collect::<Vec<f32>>()),
        _ => Tensor::from_vec(dims, v),
    }
    .expect("valid shape")
}

/// A criterion group with this file's settings (flat sampling, short runs).
fn group<'a>(
    c: &'a mut Criterion,
    name: &str,
    samples: usize,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(samples)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sampling_mode(SamplingMode::Flat);
    group
}

fn one_thread() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool")
}

/// `batches` row-major GEMMs `m × k · k × n` on faer, one after the other.
fn gemm_loop<T: faer::traits::ComplexField + Copy>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    (batches, m, n, k): (usize, usize, usize, usize),
    one: T,
) {
    for l in 0..batches {
        let lhs = MatRef::from_row_major_slice(&a[l * m * k..(l + 1) * m * k], m, k);
        let rhs = MatRef::from_row_major_slice(&b[l * k * n..(l + 1) * k * n], k, n);
        let dst = MatMut::from_row_major_slice_mut(&mut c[l * m * n..(l + 1) * m * n], m, n);
        matmul(dst, Accum::Replace, lhs, rhs, one, Par::Seq);
    }
}

fn attention(c: &mut Criterion) {
    let pool = one_thread();
    let (b, h, q, k, d) = (8, 8, 128, 128, 64);
    let be = Strided;
    let x = tensor(&[b, h, q, d], DType::F32, 1);
    let y = tensor(&[b, h, k, d], DType::F32, 2);
    let subscripts = "bhqd,bhkd->bhqk";
    let net = Network::einsum(subscripts).expect("valid");
    let plan =
        NetworkPlan::new(&net, &[[b, h, q, d], [b, h, k, d]], &Order::Default).expect("plan");
    let cbar = tensor(&[b, h, q, k], DType::F32, 3);
    let mut group = group(c, "attention", 20);
    group.throughput(Throughput::Elements(2 * (b * h * q * k * d) as u64));
    let (xs, ys): (Vec<f32>, Vec<f32>) = (
        values(b * h * q * d, 1).iter().map(|&v| v as f32).collect(),
        values(b * h * k * d, 2).iter().map(|&v| v as f32).collect(),
    );
    // The 64 products Q·Kᵀ with faer: K is read transposed (column-major k × d view).
    let mut out = vec![0f32; b * h * q * k];
    let mut faer_loop = || {
        for l in 0..b * h {
            let lhs = MatRef::from_row_major_slice(&xs[l * q * d..(l + 1) * q * d], q, d);
            let rhs = MatRef::from_column_major_slice(&ys[l * k * d..(l + 1) * k * d], d, k);
            let dst = MatMut::from_row_major_slice_mut(&mut out[l * q * k..(l + 1) * q * k], q, k);
            matmul(dst, Accum::Replace, lhs, rhs, 1.0f32, Par::Seq);
        }
    };
    let mut primal = || {
        std::hint::black_box(plan.execute(&be, &[&x, &y]).expect("einsum"));
    };
    common::paired(
        &mut group,
        &pool,
        "primal_f32_t1",
        ("adrules", &mut primal),
        ("faer", &mut faer_loop),
    );
    let mut gradient = || {
        let (c, pb) = plan.rrule(&be, &[&x, &y], &[true, true]).expect("rrule");
        std::hint::black_box((c, pb.pullback(&cbar).expect("pullback")));
    };
    let mut faer_three = || {
        // primal + two cotangent products: three times the GEMM work of the primal
        for _ in 0..3 {
            faer_loop();
        }
    };
    common::paired(
        &mut group,
        &pool,
        "gradient_f32_t1",
        ("adrules", &mut gradient),
        ("faer", &mut faer_three),
    );
    group.finish();
}

fn bmm(c: &mut Criterion) {
    let pool = one_thread();
    let (l, m) = (64, 128);
    let be = Strided;
    let x = tensor(&[l, m, m], DType::F64, 4);
    let y = tensor(&[l, m, m], DType::F64, 5);
    let spec = adrules::ContractSpec::from_labels("bij", "bjk", "bik").expect("labels");
    let mut out = Tensor::zeros(&[l, m, m], DType::F64).expect("zeros");
    let (one, zero) = (adrules::DynScalar::F64(1.0), adrules::DynScalar::F64(0.0));
    let mut ours = || {
        be.contract(
            &mut out,
            &x,
            &y,
            &spec,
            adrules::Conj::No,
            adrules::Conj::No,
            one,
            zero,
        )
        .expect("contract")
    };
    let (xs, ys) = (values(l * m * m, 4), values(l * m * m, 5));
    let mut zs = vec![0f64; l * m * m];
    let mut faer_loop = || gemm_loop(&xs, &ys, &mut zs, (l, m, m, m), 1.0);
    let mut group = group(c, "bmm", 20);
    group.throughput(Throughput::Elements(2 * (l * m * m * m) as u64));
    common::paired(
        &mut group,
        &pool,
        "f64_b64_n128_t1",
        ("adrules", &mut ours),
        ("faer", &mut faer_loop),
    );
    // One GEMM of the same flops: (l·m) × m times m × m.
    let ws = values(m * m, 6);
    let mut big = vec![0f64; l * m * m];
    let mut faer_one = || {
        let lhs = MatRef::from_row_major_slice(&xs, l * m, m);
        let rhs = MatRef::from_row_major_slice(&ws, m, m);
        let dst = MatMut::from_row_major_slice_mut(&mut big, l * m, m);
        matmul(dst, Accum::Replace, lhs, rhs, 1.0, Par::Seq);
    };
    common::paired(
        &mut group,
        &pool,
        "f64_b64_n128_t1_one_gemm",
        ("adrules", &mut ours),
        ("faer", &mut faer_one),
    );
    group.finish();
}

fn plan_cache(c: &mut Criterion) {
    let pool = one_thread();
    let be = Strided;
    let subscripts = "abc,bde,cdf->aef";
    let ts: Vec<Tensor> = (0..3)
        .map(|s| tensor(&[8, 8, 8], DType::F64, 7 + s))
        .collect();
    let refs: Vec<&Tensor> = ts.iter().collect();
    let net = Network::einsum(subscripts).expect("valid");
    let plan = NetworkPlan::new(&net, &[[8; 3]; 3], &Order::Default).expect("plan");
    let mut cached = || {
        std::hint::black_box(einsum(&be, subscripts, &refs).expect("einsum"));
    };
    let mut prebuilt = || {
        std::hint::black_box(plan.execute(&be, &refs).expect("execute"));
    };
    let mut group = group(c, "plan_cache", 30);
    common::paired(
        &mut group,
        &pool,
        "abc,bde,cdf->aef_d8_t1",
        ("adrules", &mut cached),
        ("prebuilt", &mut prebuilt),
    );
    group.finish();
}

criterion_group!(benches, attention, bmm, plan_cache);
criterion_main!(benches);
