//! Second-order benchmarks (group `hvp`, f64, strided backend, 1 thread): the Hessian-vector
//! product against the gradient of the same function, in one run.
//!
//! - `abc,bde,cdf->aef`, all dimensions 64, optimized order, heap temporaries:
//!   `gradient` = forward pass recording the pullback, then the pullback of every operand;
//!   `hvp` = [`NetworkPlan::hvp`] along a random direction of every operand (value and HVP);
//!   `hvp+gradient` = [`NetworkPlan::second_order`] returning the gradient too.
//! - The implicit fixed point `y = X·y + b`, `n = 1000` (`X` an input, `‖X‖ < 1`), conditions
//!   `c = X·y + b − y` as networks, dense LU: `gradient` = linearization (factorization) and
//!   the pullback; `hvp` = linearization and [`Linearization::hvp`] (three solves with the one
//!   factorization, and the conditions' second derivatives from the network rules). The
//!   solver (the primal) is run once, outside the timings.
//!
//! `cargo xtask bench` prints the ratios (goal: HVP ≤ 2.5× the gradient).

use std::hint::black_box;
use std::time::Duration;

use adrules::implicit::{
    ImplicitFunction, Linearization, Method, NetworkConditions, SolverOptions, TermOperand,
};
use adrules::network::{Network, NetworkPlan, Order, SecondOrder};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, HeapAllocator, HostData, HostTensor};
use criterion::{Criterion, criterion_group, criterion_main};
use faer::Mat;
use faer::linalg::solvers::Solve;

fn random_host(dims: &[usize], seed: u64, scale: f64) -> HostTensor {
    let n: usize = dims.iter().product();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data: Vec<f64> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            scale * ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5)
        })
        .collect();
    HostTensor::new(dims, HostData::F64(data)).expect("valid shape")
}

fn random(dims: &[usize], seed: u64) -> Tensor {
    Strided
        .from_host(random_host(dims, seed, 1.0))
        .expect("f64 is supported")
}

fn plan(subscripts: &str, dims: &[Vec<usize>]) -> NetworkPlan {
    NetworkPlan::new(
        &Network::einsum(subscripts).expect("valid network"),
        dims,
        &Order::Default,
    )
    .expect("valid plan")
}

fn network(c: &mut Criterion) {
    let be = Strided;
    let mut g = c.benchmark_group("hvp");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    let tp = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a thread pool for the benchmark");

    let dims = vec![vec![64usize; 3]; 3];
    let pl = plan("abc,bde,cdf->aef", &dims);
    let xs: Vec<Tensor> = dims.iter().zip(1..).map(|(d, s)| random(d, s)).collect();
    let vs: Vec<Tensor> = dims.iter().zip(11..).map(|(d, s)| random(d, s)).collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let tangents: Vec<Option<&Tensor>> = vs.iter().map(Some).collect();
    let cbar = random(pl.output_dims(), 9);
    let case = "abc,bde,cdf->aef d=64 1t";
    g.bench_function(format!("gradient/{case}"), |b| {
        tp.install(|| {
            b.iter(|| {
                let (c, pb) = pl.rrule(&be, &refs, &[true; 3]).expect("runs");
                black_box(c);
                black_box(pb.pullback(&cbar).expect("runs"));
            })
        })
    });
    g.bench_function(format!("hvp/{case}"), |b| {
        tp.install(|| {
            b.iter(|| {
                black_box(
                    pl.hvp(&be, &refs, &cbar, &tangents, &[true; 3])
                        .expect("runs"),
                )
            })
        })
    });
    g.bench_function(format!("hvp+gradient/{case}"), |b| {
        tp.install(|| {
            b.iter(|| {
                let request = SecondOrder {
                    c_bar: &cbar,
                    c_bar_dot: None,
                    tangents: &tangents,
                    active: &[true; 3],
                    gradient: true,
                };
                black_box(
                    pl.second_order(&be, &HeapAllocator, &refs, &request)
                        .expect("runs"),
                )
            })
        })
    });

    // The implicit fixed point y = X·y + b.
    let n = 1000;
    let x = random_host(&[n, n], 21, 1.0 / n as f64);
    let b = random_host(&[n], 22, 1.0);
    let y_bar = random_host(&[n], 23, 1.0);
    let v = random_host(&[n, n], 24, 1.0);
    let mut conditions = NetworkConditions::new(Strided);
    let kb = conditions.constant(Strided.from_host(b.clone()).expect("f64"));
    let conditions = conditions
        .term(
            1.0,
            plan("ij,j->i", &[vec![n, n], vec![n]]),
            &[TermOperand::Input(0), TermOperand::Unknown],
        )
        .and_then(|c| c.term(1.0, plan("i->i", &[vec![n]]), &[TermOperand::Constant(kb)]))
        .and_then(|c| c.term(-1.0, plan("i->i", &[vec![n]]), &[TermOperand::Unknown]))
        .expect("valid terms");
    let bv = b.as_slice::<f64>().expect("f64").to_vec();
    let solve = move |xs: &[HostTensor], _: &()| {
        let a = xs[0].as_slice::<f64>()?;
        let m = Mat::from_fn(n, n, |i, j| f64::from(u8::from(i == j)) - a[i * n + j]);
        let y = m.partial_piv_lu().solve(Mat::from_fn(n, 1, |i, _| bv[i]));
        Ok((
            HostTensor::new(&[n], HostData::F64((0..n).map(|i| y[(i, 0)]).collect()))?,
            (),
        ))
    };
    let f = ImplicitFunction::new(solve, conditions)
        .with_linear_solver(SolverOptions::from(Method::Lu));
    let xin = [x];
    let (y, ()) = f.solve(&xin, &()).expect("solves");
    let point = || f.linearize_at(&xin, y.clone(), &(), &());
    let case = "fixed point y = X·y + b n=1000 1t";
    g.bench_function(format!("gradient/{case}"), |bch| {
        tp.install(|| {
            bch.iter(|| {
                let lin: Linearization<f64> = point().expect("linearizes");
                black_box(lin.vjp(&y_bar).expect("runs"))
            })
        })
    });
    g.bench_function(format!("hvp/{case}"), |bch| {
        tp.install(|| {
            bch.iter(|| {
                let lin: Linearization<f64> = point().expect("linearizes");
                black_box(lin.hvp(&y_bar, std::slice::from_ref(&v)).expect("runs"))
            })
        })
    });
    g.finish();
}

criterion_group!(benches, network);
criterion_main!(benches);
