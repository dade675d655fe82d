//! Hard permutations through the strided backend's permuted add (`α = 1`, `β = 0`, f64),
//! beside `copy_from_slice` of the same bytes, in the same run, on one and two threads.
//! `cargo xtask bench` reports GB/s counting bytes read plus bytes written (2 × the tensor),
//! for both, and the ratio. The two are measured interleaved, as in the `contract` bench.

use std::time::Duration;

mod common;

use adrules::strided::{Strided, Tensor};
use adrules::{Backend, Conj, DType, Permutation};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};

/// What the permuted add into an existing C is paired with.
#[derive(Clone, Copy)]
enum Against {
    /// `copy_from_slice` of the same bytes (group `permute`)
    Memcpy,
    /// the same permutation into a fresh output, `Backend::empty` dropped after each call:
    /// the buffer cache's case (group `permute_fresh`)
    Fresh,
}

fn bench(
    c: &mut Criterion,
    name: &str,
    dims: &[usize],
    perm: &[usize],
    threads: usize,
    against: Against,
) {
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
    let mut group = c.benchmark_group(match against {
        Against::Memcpy => "permute",
        Against::Fresh => "permute_fresh",
    });
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Bytes(2 * 8 * n as u64));
    let be = Strided;
    let mut existing = || {
        be.add(&mut out, &a, &p, Conj::No, 1.0.into(), 0.0.into())
            .expect("add")
    };
    match against {
        Against::Memcpy => {
            let src: Vec<f64> = (0..n).map(|i| i as f64).collect();
            let mut dst = vec![0.0f64; n];
            let mut memcpy = || dst.copy_from_slice(std::hint::black_box(&src));
            let (ours, reference) = (
                ("adrules", &mut existing as _),
                ("memcpy", &mut memcpy as _),
            );
            common::paired(&mut group, &pool, &id, ours, reference);
        }
        Against::Fresh => {
            let mut fresh = || {
                let mut c = be.empty(&out_dims, DType::F64).expect("empty");
                be.add(&mut c, &a, &p, Conj::No, 1.0.into(), 0.0.into())
                    .expect("add");
                std::hint::black_box(c);
            };
            let (ours, reference) = (("fresh", &mut fresh as _), ("existing", &mut existing as _));
            common::paired(&mut group, &pool, &id, ours, reference);
        }
    }
    group.finish();
}

fn permute(c: &mut Criterion) {
    for threads in [1, 2] {
        bench(
            c,
            "64^4_3102",
            &[64; 4],
            &[3, 1, 0, 2],
            threads,
            Against::Fresh,
        );
        bench(
            c,
            "32^4_3102",
            &[32; 4],
            &[3, 1, 0, 2],
            threads,
            Against::Memcpy,
        );
        bench(c, "64^2_10", &[64, 64], &[1, 0], threads, Against::Memcpy);
        bench(
            c,
            "64^4_3102",
            &[64; 4],
            &[3, 1, 0, 2],
            threads,
            Against::Memcpy,
        );
        bench(
            c,
            "16^6_520413",
            &[16; 6],
            &[5, 2, 0, 4, 1, 3],
            threads,
            Against::Memcpy,
        );
        bench(
            c,
            "4096^2_10",
            &[4096, 4096],
            &[1, 0],
            threads,
            Against::Memcpy,
        );
    }
}

criterion_group!(benches, permute);
criterion_main!(benches);
