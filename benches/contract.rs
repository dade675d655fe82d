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

/// `ij,jk->ik` with n = 16…256 (f64, f32, c64): the sizes where a fork–join costs more than
/// a second core returns, on 1 and 2 threads, beside faer on the same thread count; and the
/// rrule (primal into a fresh C, pullback of both operands) of the same product.
fn small<T: BenchElement>(c: &mut Criterion, n: usize, threads: usize) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool");
    let real_flops = if T::DTYPE.is_complex() { 8 } else { 2 } * (n as u64).pow(3);
    let id = format!("{}_n{n}_t{threads}", T::DTYPE);
    let mut group = c.benchmark_group("small");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(800))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(real_flops));
    let be = Strided;
    let (a, b) = (T::tensor(&[n, n], 1), T::tensor(&[n, n], 2));
    let cbar = T::tensor(&[n, n], 3);
    let mut out = Tensor::zeros(&[n, n], T::DTYPE).expect("zeros");
    let spec = ContractSpec::from_labels("ij", "jk", "ik").expect("labels");
    let (one, zero) = (DynScalar::one(T::DTYPE), DynScalar::zero(T::DTYPE));
    let mut ours = || {
        be.contract(&mut out, &a, &b, &spec, Conj::No, Conj::No, one, zero)
            .expect("contract")
    };
    let op = adrules::rules::ContractOp::new(spec.clone());
    let mut rrule = || {
        let mut c = be.empty(&[n, n], T::DTYPE).expect("empty");
        op.apply(&be, &mut c, &a, &b).expect("primal");
        let pb = op
            .pullback_at(&be, &c, &a, &b, adrules::rules::Activity::OPERANDS)
            .expect("pullback");
        std::hint::black_box(pb.pullback(&cbar).expect("pullback"));
    };
    common::paired(
        &mut group,
        &pool,
        &id,
        ("adrules", &mut ours),
        ("rrule", &mut rrule),
    );
    group.finish();
}

fn contract(c: &mut Criterion) {
    for threads in [1, 2] {
        for n in [16, 64, 128, 256] {
            small::<f64>(c, n, threads);
            small::<f32>(c, n, threads);
            small::<Complex64>(c, n, threads);
        }
    }
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
