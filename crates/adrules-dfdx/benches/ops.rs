//! The adapter's overhead: a contraction forward and backward through dfdx's tape with
//! `adrules_dfdx::contract`, against the same rule run directly on the strided backend (no
//! dfdx, no copies), and, for a matrix product, against dfdx's own `matmul`.
//!
//! - `matmul_f32_n256`: `ij,jk->ik`, all dimensions 256, f32;
//! - `tensor_f64_d16`: `abcd,cdef->abef`, all dimensions 16, f64 (dfdx has no native
//!   tensor contraction).
//!
//! Each `*_fwd_bwd` runs the forward pass and the gradients of both operands for the output
//! cotangent W: through dfdx with the loss `Σ W ⊙ C` (`(c * w).sum()` then `backward()`),
//! on the strided backend with the two pullbacks accumulated into fresh buffers. `*_fwd` runs
//! the forward pass only (no tape); `dfdx_loss_only` is the loss and its backward alone
//! (dfdx's share of the `*_fwd_bwd` times). Run: `cargo bench -p adrules-dfdx --bench ops`.

use std::time::Duration;

use adrules_core::rules::{Activity, ContractOp, Cotangents};
use adrules_core::{Backend, ContractSpec, DType};
use adrules_dfdx::contract;
use adrules_dfdx::dfdx::prelude::*;
use adrules_strided::{Strided, Tensor as StridedTensor};
use criterion::{Criterion, criterion_group, criterion_main};

/// The strided-backend baseline: primal, then both operand cotangents for `w`.
fn strided_fwd_bwd(op: &ContractOp, a: &StridedTensor, b: &StridedTensor, w: &StridedTensor) {
    let be = Strided;
    let dims = be.dims(w);
    let mut c = be.zeros(&dims, be.dtype(w)).expect("zeros");
    let pb = op
        .pullback_at(&be, &c, a, b, Activity::OPERANDS)
        .expect("pullback");
    op.apply(&be, &mut c, a, b).expect("primal");
    let mut cot = Cotangents::default();
    pb.accumulate(w, &mut cot).expect("cotangents");
    std::hint::black_box((c, cot));
}

fn strided_of<S: Shape, E: adrules_dfdx::DfdxElement>(t: &Tensor<S, E, Cpu>) -> StridedTensor {
    let dims: Vec<usize> = t.shape().concrete().into();
    StridedTensor::from_vec(&dims, t.as_vec()).expect("tensor")
}

fn bench_ops(c: &mut Criterion) {
    let dev: Cpu = Default::default();

    let mut group = c.benchmark_group("matmul_f32_n256");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    const N: usize = 256;
    let a: Tensor<Rank2<N, N>, f32, Cpu> = dev.sample_normal();
    let b: Tensor<Rank2<N, N>, f32, Cpu> = dev.sample_normal();
    let w: Tensor<Rank2<N, N>, f32, Cpu> = dev.sample_normal();
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").expect("labels"));
    group.bench_function("dfdx_matmul_fwd_bwd", |bch| {
        bch.iter(|| {
            (a.leaky_trace().matmul(b.clone()) * w.clone())
                .sum()
                .backward()
        })
    });
    group.bench_function("adrules_dfdx_fwd_bwd", |bch| {
        bch.iter(|| {
            let y: Tensor<Rank2<N, N>, f32, Cpu, _> =
                contract(&op, a.leaky_trace(), b.clone()).expect("contract");
            (y * w.clone()).sum().backward()
        })
    });
    let (sa, sb, sw) = (strided_of(&a), strided_of(&b), strided_of(&w));
    group.bench_function("strided_rules_fwd_bwd", |bch| {
        bch.iter(|| strided_fwd_bwd(&op, &sa, &sb, &sw))
    });
    group.bench_function("dfdx_matmul_fwd", |bch| {
        bch.iter(|| a.clone().matmul(b.clone()))
    });
    group.bench_function("adrules_dfdx_fwd", |bch| {
        bch.iter(|| {
            let y: Tensor<Rank2<N, N>, f32, Cpu> =
                contract(&op, a.clone(), b.clone()).expect("contract");
            y
        })
    });
    group.bench_function("strided_rules_fwd", |bch| {
        bch.iter(|| {
            let mut c = StridedTensor::zeros(&[N, N], DType::F32).expect("zeros");
            op.apply(&Strided, &mut c, &sa, &sb).expect("primal");
            c
        })
    });
    group.finish();

    let mut group = c.benchmark_group("tensor_f64_d16");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    type R4 = Rank4<16, 16, 16, 16>;
    let a: Tensor<R4, f64, Cpu> = dev.sample_normal();
    let b: Tensor<R4, f64, Cpu> = dev.sample_normal();
    let w: Tensor<R4, f64, Cpu> = dev.sample_normal();
    let op = ContractOp::new(ContractSpec::from_labels("abcd", "cdef", "abef").expect("labels"));
    group.bench_function("adrules_dfdx_fwd_bwd", |bch| {
        bch.iter(|| {
            let y: Tensor<R4, f64, Cpu, _> =
                contract(&op, a.leaky_trace(), b.clone()).expect("contract");
            (y * w.clone()).sum().backward()
        })
    });
    let (sa, sb, sw) = (strided_of(&a), strided_of(&b), strided_of(&w));
    group.bench_function("strided_rules_fwd_bwd", |bch| {
        bch.iter(|| strided_fwd_bwd(&op, &sa, &sb, &sw))
    });
    group.bench_function("dfdx_loss_only", |bch| {
        bch.iter(|| (a.leaky_trace() * w.clone()).sum().backward())
    });
    group.bench_function("adrules_dfdx_fwd", |bch| {
        bch.iter(|| {
            let y: Tensor<R4, f64, Cpu> = contract(&op, a.clone(), b.clone()).expect("contract");
            y
        })
    });
    group.bench_function("strided_rules_fwd", |bch| {
        bch.iter(|| {
            let mut c = StridedTensor::zeros(&[16; 4], DType::F64).expect("zeros");
            op.apply(&Strided, &mut c, &sa, &sb).expect("primal");
            c
        })
    });
    group.finish();
}

criterion_group!(benches, bench_ops);
criterion_main!(benches);
