//! Hard permutations through the strided backend's permuted add (`α = 1`, `β = 0`, f64),
//! beside `copy_from_slice` of the same bytes, in the same run, on one and two threads.
//! `cargo xtask bench` reports GB/s counting bytes read plus bytes written (2 × the tensor),
//! for both, and the ratio. The two are measured interleaved, as in the `contract` bench.

use std::time::Duration;

mod common;

use adrules::strided::{Strided, Tensor};
use adrules::{Backend, Conj, DType, Permutation};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};

fn bench(c: &mut Criterion, name: &str, dims: &[usize], perm: &[usize], threads: usize) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let n: usize = dims.iter().product();
    let p = Permutation::new(perm).expect("permutation");
    let a = Tensor::from_vec(dims, (0..n).map(|i| i as f64).collect()).expect("tensor");
    let mut out = Tensor::zeros(&p.apply(dims), DType::F64).expect("zeros");
    let id = format!("{name}_t{threads}");
    let mut group = c.benchmark_group("permute");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Bytes(2 * 8 * n as u64));
    let be = Strided;
    let mut ours = || {
        be.add(&mut out, &a, &p, Conj::No, 1.0.into(), 0.0.into())
            .expect("add")
    };
    let src: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut dst = vec![0.0f64; n];
    let mut memcpy = || dst.copy_from_slice(std::hint::black_box(&src));
    common::paired(
        &mut group,
        &pool,
        &id,
        ("adrules", &mut ours),
        ("memcpy", &mut memcpy),
    );
    group.finish();
}

/// The permutation into a fresh output (`Backend::empty`, dropped after the call: the
/// buffer cache's case) beside the same permutation into an existing C.
fn fresh(c: &mut Criterion, name: &str, dims: &[usize], perm: &[usize], threads: usize) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let n: usize = dims.iter().product();
    let p = Permutation::new(perm).expect("permutation");
    let a = Tensor::from_vec(dims, (0..n).map(|i| i as f64).collect()).expect("tensor");
    let out_dims = p.apply(dims);
    let mut out = Tensor::zeros(&out_dims, DType::F64).expect("zeros");
    let id = format!("{name}_t{threads}");
    let mut group = c.benchmark_group("permute_fresh");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Bytes(2 * 8 * n as u64));
    let be = Strided;
    let mut fresh = || {
        let mut c = be.empty(&out_dims, DType::F64).expect("empty");
        be.add(&mut c, &a, &p, Conj::No, 1.0.into(), 0.0.into())
            .expect("add");
        std::hint::black_box(c);
    };
    let mut existing = || {
        be.add(&mut out, &a, &p, Conj::No, 1.0.into(), 0.0.into())
            .expect("add")
    };
    common::paired(
        &mut group,
        &pool,
        &id,
        ("fresh", &mut fresh),
        ("existing", &mut existing),
    );
    group.finish();
}

fn permute(c: &mut Criterion) {
    for threads in [1, 2] {
        fresh(c, "64^4_3102", &[64; 4], &[3, 1, 0, 2], threads);
        bench(c, "32^4_3102", &[32; 4], &[3, 1, 0, 2], threads);
        bench(c, "64^2_10", &[64, 64], &[1, 0], threads);
        bench(c, "64^4_3102", &[64; 4], &[3, 1, 0, 2], threads);
        bench(c, "16^6_520413", &[16; 6], &[5, 2, 0, 4, 1, 3], threads);
        bench(c, "4096^2_10", &[4096, 4096], &[1, 0], threads);
    }
}

criterion_group!(benches, permute);
criterion_main!(benches);
