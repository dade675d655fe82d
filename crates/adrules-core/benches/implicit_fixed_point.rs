//! Reverse-mode gradient of a fixed point `y = tanh(W·y + x)` (n = 1000 unknowns, `W`
//! contractive) through the implicit rule versus through the unrolled iterations, at 50, 200
//! and 1000 iterations: time (criterion) and peak heap memory (a counting global allocator,
//! printed before the timings).
//!
//! Every method computes `y` by the same `K` iterations from `y₀ = 0` and the gradient of
//! `L = ⟨g, y⟩` with respect to `x`:
//! - unrolled (faer): keeps the `K` iterates (the tape) and runs the reverse sweep
//!   `s = ȳ⊙(1 − y_k²)`, `x̄ += s`, `ȳ ← Wᵀ·s`, with the same faer matrix-vector product as
//!   the implicit method (same kernel on both sides);
//! - unrolled (rules): our own contraction rule step by step on the strided backend — each
//!   step is `ContractOp::rrule` of `z = W·y + x` (`"ij,j->i"`, β = 1, `y` and `x` active)
//!   followed by `tanh` on the host; the reverse sweep applies the recorded pullbacks;
//! - implicit: runs the iterations without a tape, then the implicit pullback of the
//!   [`FixedPoint`] form with matrix-free maps (`∂T/∂y·v = D·W·v`, `∂T/∂x·v = D·v`,
//!   `D = diag(1 − y²)`), solved by GMRES (the automatic choice for m = 1000).
//!
//! Run: `cargo bench -p adrules-core --bench implicit_fixed_point`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adrules_core::implicit::{FixedPoint, FnMaps, ImplicitFunction, Point};
use adrules_core::rules::{Activity, ContractOp};
use adrules_core::{ContractSpec, DType, HostTensor};
use adrules_strided::{Strided, Tensor};
use adrules_testing::Rng;
use criterion::Criterion;
use faer::{Accum, Mat, MatMut, MatRef};

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const N: usize = 1000;
const ITERATIONS: [usize; 3] = [50, 200, 1000];

struct Problem {
    w: Arc<Mat<f64>>,
    x: Vec<f64>,
    g: Vec<f64>,
}

impl Problem {
    /// `W = 0.9·S/‖S‖₂` with `S = G + Gᵀ` for a standard normal `G` (symmetric, so its
    /// spectral radius is its norm, 0.9), and `x = 0.1·N(0, 1)`: `y` stays small, `tanh′ ≈ 1`,
    /// and the iteration contracts by about 0.9 per step — far from converged after 50
    /// iterations, converged after 1000.
    fn new() -> Problem {
        let mut rng = Rng::seed(2024);
        let g = Mat::from_fn(N, N, |_, _| rng.normal());
        let s = Mat::from_fn(N, N, |i, j| g[(i, j)] + g[(j, i)]);
        let norm = s.singular_values().expect("svd")[0];
        let w = Mat::from_fn(N, N, |i, j| 0.9 * s[(i, j)] / norm);
        let x = (0..N).map(|_| 0.1 * rng.normal()).collect();
        let g = (0..N).map(|_| rng.normal()).collect();
        Problem {
            w: Arc::new(w),
            x,
            g,
        }
    }
}

/// `out = W·v` or `out = Wᵀ·v`: the one kernel of both methods.
fn matvec(w: &Mat<f64>, transpose: bool, v: &[f64], out: &mut [f64]) {
    let w = if transpose { w.transpose() } else { w.as_ref() };
    faer::linalg::matmul::matmul(
        MatMut::from_column_major_slice_mut(out, N, 1),
        Accum::Replace,
        w,
        MatRef::from_column_major_slice(v, N, 1),
        1.0,
        faer::get_global_parallelism(),
    );
}

/// One iteration `y ← tanh(W·y + x)`.
fn step(w: &Mat<f64>, x: &[f64], y: &[f64], out: &mut [f64]) {
    matvec(w, false, y, out);
    out.iter_mut()
        .zip(x)
        .for_each(|(o, x)| *o = (*o + x).tanh());
}

/// Gradient through the unrolled iterations (tape of the `K` iterates).
fn unrolled(p: &Problem, iterations: usize) -> Vec<f64> {
    let mut tape: Vec<Vec<f64>> = Vec::with_capacity(iterations + 1);
    tape.push(vec![0.0; N]);
    for k in 0..iterations {
        let mut next = vec![0.0; N];
        step(&p.w, &p.x, &tape[k], &mut next);
        tape.push(next);
    }
    let mut y_bar = p.g.clone();
    let mut x_bar = vec![0.0; N];
    let mut s = vec![0.0; N];
    for y in tape[1..].iter().rev() {
        for i in 0..N {
            s[i] = y_bar[i] * (1.0 - y[i] * y[i]);
            x_bar[i] += s[i];
        }
        matvec(&p.w, true, &s, &mut y_bar);
    }
    x_bar
}

/// Gradient through the unrolled iterations with the contraction rule on the strided backend.
fn unrolled_rules(p: &Problem, w: &Tensor, iterations: usize) -> Vec<f64> {
    let be = Strided;
    let op = ContractOp::new(ContractSpec::from_labels("ij", "j", "i").expect("spec")).beta(1.0);
    let active = Activity {
        c: true,
        b: true,
        ..Activity::NONE
    };
    let x = Tensor::from_vec(&[N], p.x.clone()).expect("x");
    let mut y = Tensor::zeros(&[N], DType::F64).expect("y");
    let mut tape = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let mut z = x.clone();
        let pullback = op.rrule(&be, &mut z, w, &y, active).expect("rrule");
        let next: Vec<f64> = z
            .to_vec::<f64>()
            .expect("f64")
            .iter()
            .map(|v| v.tanh())
            .collect();
        y = Tensor::from_vec(&[N], next.clone()).expect("y");
        tape.push((pullback, next));
    }
    let mut y_bar = p.g.clone();
    let mut x_bar = vec![0.0; N];
    for (pullback, y) in tape.iter().rev() {
        let s: Vec<f64> = (0..N).map(|i| y_bar[i] * (1.0 - y[i] * y[i])).collect();
        let c = pullback
            .pullback(&Tensor::from_vec(&[N], s).expect("s"))
            .expect("pullback");
        let dx = c.c.expect("x̄").to_vec::<f64>().expect("f64");
        x_bar.iter_mut().zip(dx).for_each(|(a, d)| *a += d);
        y_bar = c.b.expect("ȳ").to_vec::<f64>().expect("f64");
    }
    x_bar
}

/// Gradient through the implicit rule (`K` iterations without a tape, then the pullback).
fn implicit(p: &Problem, iterations: usize) -> (Vec<f64>, f64, usize) {
    let w = Arc::clone(&p.w);
    let solve = move |x: &[HostTensor], _: &()| {
        let x = x[0].as_slice::<f64>()?;
        let (mut y, mut next) = (vec![0.0; N], vec![0.0; N]);
        for _ in 0..iterations {
            step(&w, x, &y, &mut next);
            std::mem::swap(&mut y, &mut next);
        }
        let mut t = vec![0.0; N];
        step(&w, x, &y, &mut t);
        Ok((HostTensor::from_vec(&[N], y)?, t))
    };
    let w = Arc::clone(&p.w);
    // maps of T(x, y) = tanh(W·y + x) at the point, with T's value for the residual report
    let map = move |pt: &Point<Vec<f64>, ()>| {
        let y = pt.y_data::<f64>()?;
        let d: Arc<[f64]> = y.iter().map(|y| 1.0 - y * y).collect();
        let (wa, wt) = (Arc::clone(&w), Arc::clone(&w));
        let (d1, d2, d3, d4) = (Arc::clone(&d), Arc::clone(&d), Arc::clone(&d), d);
        Ok(FnMaps::new(
            N,
            N,
            move |v: &[f64], o: &mut [f64]| {
                matvec(&wa, false, v, o);
                o.iter_mut().zip(d1.iter()).for_each(|(o, d)| *o *= d);
            },
            move |u: &[f64], o: &mut [f64]| {
                let du: Vec<f64> = u.iter().zip(d2.iter()).map(|(u, d)| u * d).collect();
                matvec(&wt, true, &du, o);
            },
            move |v: &[f64], o: &mut [f64]| {
                o.iter_mut()
                    .zip(v)
                    .zip(d3.iter())
                    .for_each(|((o, v), d)| *o = d * v)
            },
            move |u: &[f64], o: &mut [f64]| {
                o.iter_mut()
                    .zip(u)
                    .zip(d4.iter())
                    .for_each(|((o, u), d)| *o = d * u)
            },
        )
        .with_conditions(pt.byproduct.clone()))
    };
    let f = ImplicitFunction::new(solve, FixedPoint::new(map));
    let x = [HostTensor::from_vec(&[N], p.x.clone()).expect("shape")];
    let (_, _, pullback) = f.vjp(&x, &()).expect("implicit vjp");
    let residual = pullback.conditions_norm().expect("reported");
    let g = HostTensor::from_vec(&[N], p.g.clone()).expect("shape");
    let c = pullback.vjp_many(&[g], None).expect("pullback");
    let x_bar = c.dx[0][0].as_slice::<f64>().expect("f64").to_vec();
    (x_bar, residual, c.stats.iterations)
}

/// Extra heap bytes at the peak of `f`, above what was live before.
fn peak_bytes<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let r = f();
    (PEAK.load(Ordering::Relaxed) - before, r)
}

fn memory_table(p: &Problem, w: &Tensor) {
    println!("\nfixed point y = tanh(W·y + x), n = {N}: peak extra heap per gradient");
    println!(
        "| iterations K | unrolled (faer) | unrolled (rules) | implicit | ‖T(y_K) − y_K‖ | GMRES iterations | ‖x̄_implicit − x̄_unrolled‖/‖x̄_unrolled‖ | ‖x̄_rules − x̄_unrolled‖/‖x̄_unrolled‖ |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for k in ITERATIONS {
        let (mem_u, xu) = peak_bytes(|| unrolled(p, k));
        let (mem_r, xr) = peak_bytes(|| unrolled_rules(p, w, k));
        let (mem_i, (xi, residual, gmres)) = peak_bytes(|| implicit(p, k));
        let rel = |v: &[f64]| {
            let diff = xu
                .iter()
                .zip(v)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
                .sqrt();
            diff / xu.iter().map(|a| a * a).sum::<f64>().sqrt()
        };
        let kib = |b: usize| b as f64 / 1024.0;
        println!(
            "| {k} | {:.1} KiB | {:.1} KiB | {:.1} KiB | {residual:.1e} | {gmres} | {:.1e} | {:.1e} |",
            kib(mem_u),
            kib(mem_r),
            kib(mem_i),
            rel(&xi),
            rel(&xr)
        );
    }
    println!();
}

fn main() {
    let p = Problem::new();
    let w = Tensor::from_vec(
        &[N, N],
        (0..N * N)
            .map(|k| p.w[(k / N, k % N)])
            .collect::<Vec<f64>>(),
    )
    .expect("W");
    memory_table(&p, &w);
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    let mut group = c.benchmark_group("fixed_point_gradient_n1000");
    for k in ITERATIONS {
        group.bench_function(format!("forward_only/{k}"), |b| {
            b.iter(|| {
                let (mut y, mut next) = (vec![0.0; N], vec![0.0; N]);
                for _ in 0..k {
                    step(&p.w, &p.x, &y, &mut next);
                    std::mem::swap(&mut y, &mut next);
                }
                black_box(y)
            })
        });
        group.bench_function(format!("unrolled/{k}"), |b| {
            b.iter(|| black_box(unrolled(&p, k)))
        });
        group.bench_function(format!("unrolled_rules_strided/{k}"), |b| {
            b.iter(|| black_box(unrolled_rules(&p, &w, k)))
        });
        group.bench_function(format!("implicit/{k}"), |b| {
            b.iter(|| black_box(implicit(&p, k)))
        });
    }
    group.finish();
    c.final_summary();
}
