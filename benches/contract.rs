//! `abcd,cdef->abef` through the strided backend beside a bare faer GEMM of the same
//! `m = n = k = d²`, in the same run, for f64, f32 and c64, all dimensions 32 and 48, on one
//! and two threads. `cargo xtask bench` turns the estimates into a table with GFLOP/s and the
//! ratio to faer.
//!
//! Thread counts are set with a rayon pool installed around the measured closure; the
//! backend and faer (`Par::rayon(0)`) both run on it. The two are measured interleaved (each
//! timed call of one follows an untimed call of the other), so that both see the same load on
//! a shared machine and their ratio stays meaningful.

use std::time::Duration;

mod common;

use adrules::strided::{Strided, Tensor};
use adrules::{Backend, Complex64, Conj, ContractSpec, DType, DynScalar};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> impl Iterator<Item = f64> {
    let mut x = seed | 1;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    })
}

trait BenchElement: faer::traits::ComplexField + Copy + Send + Sync + 'static {
    const DTYPE: DType;
    fn tensor(dims: &[usize], seed: u64) -> Tensor;
    fn vec(n: usize, seed: u64) -> Vec<Self>;
    fn one() -> Self;
}

macro_rules! element {
    ($t:ty, $dt:ident, $conv:expr) => {
        impl BenchElement for $t {
            const DTYPE: DType = DType::$dt;
            fn tensor(dims: &[usize], seed: u64) -> Tensor {
                Tensor::from_vec(dims, Self::vec(dims.iter().product(), seed)).expect("valid shape")
            }
            fn vec(n: usize, seed: u64) -> Vec<Self> {
                values(2 * n, seed)
                    .collect::<Vec<_>>()
                    .chunks(2)
                    .map($conv)
                    .collect()
            }
            fn one() -> Self {
                ($conv)(&[1.0, 0.0][..])
            }
        }
    };
}
element!(f64, F64, |p: &[f64]| p[0]);
element!(f32, F32, |p: &[f64]| p[0] as f32);
element!(Complex64, C64, |p: &[f64]| Complex64::new(p[0], p[1]));

fn bench<T: BenchElement>(c: &mut Criterion, d: usize, threads: usize) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let dims = [d, d, d, d];
    let mnk = d * d;
    let real_flops = if T::DTYPE.is_complex() { 8 } else { 2 } * (mnk as u64).pow(3);
    let id = format!("{}_d{d}_t{threads}", T::DTYPE);
    let mut group = c.benchmark_group("contract");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(real_flops));

    let be = Strided;
    let (a, b) = (T::tensor(&dims, 1), T::tensor(&dims, 2));
    let mut out = Tensor::zeros(&dims, T::DTYPE).expect("zeros");
    let spec = ContractSpec::from_labels("abcd", "cdef", "abef").expect("labels");
    let (one, zero) = (DynScalar::one(T::DTYPE), DynScalar::zero(T::DTYPE));
    let mut ours = || {
        be.contract(&mut out, &a, &b, &spec, Conj::No, Conj::No, one, zero)
            .expect("contract")
    };

    // The same GEMM on row-major m × k and k × n matrices, straight into faer.
    let (la, lb) = (T::vec(mnk * mnk, 1), T::vec(mnk * mnk, 2));
    let mut lc = T::vec(mnk * mnk, 3);
    let par = if threads > 1 { Par::rayon(0) } else { Par::Seq };
    let mut faer_gemm = || {
        let lhs = MatRef::from_row_major_slice(&la, mnk, mnk);
        let rhs = MatRef::from_row_major_slice(&lb, mnk, mnk);
        let dst = MatMut::from_row_major_slice_mut(&mut lc, mnk, mnk);
        matmul(dst, Accum::Replace, lhs, rhs, T::one(), par);
    };
    common::paired(
        &mut group,
        &pool,
        &id,
        ("adrules", &mut ours),
        ("faer", &mut faer_gemm),
    );
    group.finish();
}

fn contract(c: &mut Criterion) {
    for threads in [1, 2] {
        for d in [32, 48] {
            bench::<f64>(c, d, threads);
            bench::<f32>(c, d, threads);
            bench::<Complex64>(c, d, threads);
        }
    }
}

criterion_group!(benches, contract);
criterion_main!(benches);
