//! Forward + backward of `abcd,cdef->abef` (every dimension 32) on burn's Flex CPU backend
//! with autodiff: the adrules contraction node against burn's native `einsum`, in f32 and f64.
//!
//! Time: criterion, one iteration = build leaves, contract, `sum`, `backward`, read both
//! gradients. Peak memory: a counting global allocator in this binary measures the peak of
//! live heap bytes above the starting level during one such iteration; printed as a markdown
//! table before the timings.
//!
//! Run: `cargo bench --features burn --bench burn_contract` (threads: `RAYON_NUM_THREADS`).

#[path = "common/counting.rs"]
mod counting;

use counting::{Counting, peak_bytes};
use std::hint::black_box;

use adrules::ContractSpec;
use adrules::burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules::rules::ContractOp;
use criterion::{Criterion, criterion_group, criterion_main};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const DIM: usize = 32;
const EXPR: &str = "abcd,cdef->abef";

fn input(dtype: BurnDType, shift: usize, device: &Device) -> Tensor<4> {
    let n = DIM.pow(4);
    let v: Vec<f64> = (0..n)
        .map(|i| ((i * 7919 + shift) % 1009) as f64 / 504.5 - 1.0)
        .collect();
    Tensor::<4>::from_data(TensorData::new(v, [DIM; 4]), (device, dtype))
}

/// One forward + backward; returns the two gradients (so nothing is optimised away).
fn step(ours: bool, a: &Tensor<4>, b: &Tensor<4>, op: &ContractOp) -> (Tensor<4>, Tensor<4>) {
    let (a, b) = (a.clone().require_grad(), b.clone().require_grad());
    let c: Tensor<4> = if ours {
        adrules::burn::contract(op, &a, &b).expect("valid contraction")
    } else {
        Tensor::<4>::einsum(EXPR, [(&a).into(), (&b).into()])
    };
    let grads = c.sum().backward();
    let (ga, gb) = (a.grad(&grads), b.grad(&grads));
    (ga.expect("gradient of a"), gb.expect("gradient of b"))
}

/// Peak heap bytes above the level at entry during one step (gradients read back to host).
fn peak(ours: bool, a: &Tensor<4>, b: &Tensor<4>, op: &ContractOp) -> usize {
    peak_bytes(|| {
        let (ga, gb) = step(ours, a, b, op);
        (ga.into_data(), gb.into_data())
    })
}

fn bench(c: &mut Criterion) {
    let device = Device::flex().autodiff();
    let op = ContractOp::new(ContractSpec::from_labels("abcd", "cdef", "abef").expect("labels"));
    let mut group = c.benchmark_group(format!("burn {EXPR} dims {DIM}"));
    group.sample_size(10);
    println!("| dtype | adrules peak (MiB) | burn einsum peak (MiB) | ratio |");
    println!("|---|---|---|---|");
    for (name, dtype) in [("f64", BurnDType::F64), ("f32", BurnDType::F32)] {
        let a = input(dtype, 1, &device);
        let b = input(dtype, 2, &device);
        // Warm up both paths once so lazily initialised state is not counted.
        step(true, &a, &b, &op);
        step(false, &a, &b, &op);
        let (ours, theirs) = (peak(true, &a, &b, &op), peak(false, &a, &b, &op));
        let mib = |x: usize| x as f64 / (1024.0 * 1024.0);
        println!(
            "| {name} | {:.1} | {:.1} | {:.2} |",
            mib(ours),
            mib(theirs),
            ours as f64 / theirs as f64
        );
        group.bench_function(format!("adrules {name}"), |bench| {
            bench.iter(|| black_box(step(true, &a, &b, &op)))
        });
        group.bench_function(format!("burn einsum {name}"), |bench| {
            bench.iter(|| black_box(step(false, &a, &b, &op)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
