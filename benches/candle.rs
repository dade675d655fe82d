//! Forward + backward of `abcd,cdef->abef` (every dimension 32) on candle tensors (CPU):
//! adrules' contraction custom op against candle's own autograd of the same contraction
//! written with reshape/matmul (candle's best case: no permutation is needed), in f32 and f64.
//!
//! Time by criterion (`candle_fwd_bwd/<dtype>/{adrules,candle}`); memory by a counting
//! global allocator: the peak of live heap bytes above the inputs during one forward and
//! backward, printed once per dtype before the timings. Run:
//! `cargo bench --features candle --bench candle`.

#[path = "common/counting.rs"]
mod counting;

use counting::{Counting, peak_bytes};

use adrules::ContractSpec;
use adrules::candle::candle_core::{DType, Device, Tensor, Var, backprop::GradStore};
use adrules::candle::contract;
use adrules::rules::ContractOp;
use criterion::{Criterion, criterion_group, criterion_main};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const D: usize = 32;

/// Forward and backward through adrules' op (C̄ = ones, candle's seed for a non-scalar root).
fn ours(a: &Var, b: &Var, op: &ContractOp) -> GradStore {
    let c = contract(op, a.as_tensor(), b.as_tensor()).expect("contract");
    c.backward().expect("backward")
}

/// The same through candle's autograd of reshape/matmul.
fn theirs(a: &Var, b: &Var) -> GradStore {
    let n = D * D;
    let c = a
        .as_tensor()
        .reshape((n, n))
        .and_then(|x| x.matmul(&b.as_tensor().reshape((n, n))?))
        .and_then(|x| x.reshape((D, D, D, D)))
        .expect("candle contraction");
    c.backward().expect("backward")
}

fn bench(c: &mut Criterion) {
    let op = ContractOp::new(ContractSpec::from_labels("abcd", "cdef", "abef").expect("spec"));
    for dtype in [DType::F32, DType::F64] {
        let var = || {
            Tensor::randn(0f32, 1.0, (D, D, D, D), &Device::Cpu)
                .and_then(|t| t.to_dtype(dtype))
                .and_then(|t| Var::from_tensor(&t))
                .expect("input")
        };
        let (a, b) = (var(), var());
        // Both compute the same gradients.
        let (g1, g2) = (ours(&a, &b, &op), theirs(&a, &b));
        for x in [&a, &b] {
            let d = (g1.get(x.as_tensor()).expect("grad") - g2.get(x.as_tensor()).expect("grad"))
                .and_then(|d| d.abs()?.max_all()?.to_dtype(DType::F64)?.to_scalar::<f64>())
                .expect("difference");
            assert!(d < 1e-2, "gradients differ by {d}");
        }
        drop((g1, g2));
        let (m1, m2) = (
            peak_bytes(|| ours(&a, &b, &op)),
            peak_bytes(|| theirs(&a, &b)),
        );
        let mib = |x: usize| x as f64 / (1024.0 * 1024.0);
        eprintln!(
            "candle_fwd_bwd/{dtype:?}: peak heap above inputs: adrules {:.1} MiB, candle {:.1} MiB (ratio {:.2})",
            mib(m1),
            mib(m2),
            m1 as f64 / m2 as f64
        );
        let mut g = c.benchmark_group(format!("candle_fwd_bwd/{dtype:?}"));
        g.sample_size(20);
        g.bench_function("adrules", |bch| bch.iter(|| ours(&a, &b, &op)));
        g.bench_function("candle", |bch| bch.iter(|| theirs(&a, &b)));
        g.finish();
    }
}

/// The same primitive call through `contract` (the bridge's primitive path: the output
/// written straight into candle's storage, the pullback built in backward by
/// `rule::pullback_at`) and through the generic path of the same bridge (`apply_rule` with
/// the core's `PrimitiveCall`, which computes the output and copies it into candle's
/// storage). A memory-bound Hadamard product `ij,ij->ij` (1000 × 1000 f64), the GEMM-bound
/// `abcd,cdef->abef` (d = 32 f64) and a small call `ij,jk->ik` (8 × 8 f64, per-call
/// overhead), each forward + backward.
fn bridge(c: &mut Criterion) {
    use adrules::candle::apply_rule;
    use adrules::rule::PrimitiveCall;
    let cases = [
        (
            "hadamard_1000",
            ContractSpec::from_labels("ij", "ij", "ij"),
            vec![1000, 1000],
        ),
        (
            "abcd_cdef_32",
            ContractSpec::from_labels("abcd", "cdef", "abef"),
            vec![D; 4],
        ),
        (
            "matmul_8",
            ContractSpec::from_labels("ij", "jk", "ik"),
            vec![8, 8],
        ),
    ];
    for (name, spec, dims) in cases {
        let op = ContractOp::new(spec.expect("spec"));
        let call = PrimitiveCall::new(op.clone().into(), 2).expect("two operands");
        let var = || {
            Tensor::randn(0f32, 1.0, dims.as_slice(), &Device::Cpu)
                .and_then(|t| t.to_dtype(DType::F64))
                .and_then(|t| Var::from_tensor(&t))
                .expect("input")
        };
        let (a, b) = (var(), var());
        let bridged = |a: &Var, b: &Var| -> GradStore {
            let c = apply_rule(&call, &[a.as_tensor(), b.as_tensor()]).expect("apply_rule");
            c[0].backward().expect("backward")
        };
        let (g1, g2) = (ours(&a, &b, &op), bridged(&a, &b));
        for x in [&a, &b] {
            let d = (g1.get(x.as_tensor()).expect("grad") - g2.get(x.as_tensor()).expect("grad"))
                .and_then(|d| d.abs()?.max_all()?.to_scalar::<f64>())
                .expect("difference");
            assert!(d == 0.0, "gradients differ by {d}");
        }
        let mut g = c.benchmark_group(format!("candle_bridge/{name}"));
        g.sample_size(20);
        g.bench_function("contract", |bch| bch.iter(|| ours(&a, &b, &op)));
        g.bench_function("apply_rule", |bch| bch.iter(|| bridged(&a, &b)));
        g.finish();
    }
}

criterion_group!(benches, bench, bridge);
criterion_main!(benches);
