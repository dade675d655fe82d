//! Forward + backward through the dense linear-algebra rules at n = 256, f32 and f64, on the
//! embedded strided backend: `cholesky` (of a symmetric positive-definite `A`), `solve`
//! (`B: n × n`), `det` (of `A/(4·√n)`, whose determinant is in range), `slogdet` and `inv`
//! (of a well-conditioned general `A = X + 4·√n·I`), `eig` of that `A` (the loss
//! `Re Σ conj(λ̄)·λ`: a random cotangent of `V` is gauge dependent) and `matrix_exp` of
//! `A/(4·√n)`, each
//! `rule::rrule` then the pullback of a fixed random cotangent (the loss `Σ Ȳ ⊙ Y`, linear
//! in the outputs; for `slogdet`, of `log|det|`), and the forward alone (`rule::primal`:
//! the factorization and the solves, faer's share).
//!
//! Time by criterion (`linalg_more_<op>/<rule|forward>/<dtype>`); pin one thread with
//! `RAYON_NUM_THREADS=1` to compare with the peer script `benches/peers_linalg.py` (JAX and
//! PyTorch, the same losses). Run: `cargo bench -p adrules-benches --bench linalg_more`
//! (or `cargo xtask bench linalg_more`).

use adrules::linalg::{
    CholeskyRule, DetRule, EigRule, InvRule, MatrixExpRule, SlogdetRule, SolveRule,
};
use adrules::rule::{self, Rule};
use adrules::strided::{Strided, Tensor as St};
use adrules::{Backend, DType, HostData, HostTensor};
use adrules_testing::Rng;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const N: usize = 256;

/// `X + 4·√n·I` (`X` standard normal; over `4·√n` for `unit`, whose determinant stays in
/// range), or (`spd`) `X·Xᵀ/n + I`.
fn matrix(rng: &mut Rng, dtype: DType, spd: bool, unit: bool) -> HostTensor {
    let x = rng.tensor(&[N, N], DType::F64);
    let x = x.as_slice::<f64>().expect("f64");
    let v: Vec<f64> = (0..N * N)
        .map(|p| {
            let (i, j) = (p / N, p % N);
            let eye = if i == j { 1.0 } else { 0.0 };
            if spd {
                (0..N).map(|k| x[i * N + k] * x[j * N + k]).sum::<f64>() / N as f64 + eye
            } else {
                let s = 4.0 * (N as f64).sqrt();
                (x[p] + s * eye) / if unit { s } else { 1.0 }
            }
        })
        .collect();
    HostTensor::new(&[N, N], HostData::F64(v))
        .expect("a matrix")
        .to_dtype_projected(dtype)
}

/// One forward + backward of `rule` on `x` with the cotangents `c` (`None`: unused output).
fn rule_fb<R: Rule>(rule: &R, x: &[&St], c: &[Option<St>]) -> usize {
    let (_, pb) = rule::rrule(rule, &Strided, x, &vec![true; x.len()]).expect("rrule");
    pb.pullback(c).expect("pullback").len()
}

fn bench(c: &mut Criterion) {
    for dtype in [DType::F32, DType::F64] {
        let mut rng = Rng::seed(49);
        let up = |h: HostTensor| Strided.from_host(h).expect("up");
        let a = up(matrix(&mut rng, dtype, false, false));
        let spd = up(matrix(&mut rng, dtype, true, false));
        let a_unit = up(matrix(&mut rng, dtype, false, true));
        let b = up(rng.tensor(&[N, N], dtype));
        let y_bar = up(rng.tensor(&[N, N], dtype));
        let s_bar = up(rng.tensor(&[], dtype));
        // eig: a cotangent of the eigenvalues only (a random one of V depends on the gauge)
        let l_bar = up(rng.tensor(&[N], dtype.complex()));
        // exp: a matrix of norm about 2 (one squaring at most)
        let a_exp = up(matrix(&mut rng, dtype, false, true));
        let v = dtype.to_string();
        type Case<'a> = (
            &'a str,
            Box<dyn Fn() -> usize + 'a>,
            Box<dyn Fn() -> usize + 'a>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "cholesky",
                Box::new(|| rule_fb(&CholeskyRule::default(), &[&spd], &[Some(y_bar.clone())])),
                Box::new(|| {
                    rule::primal(&CholeskyRule::default(), &Strided, &[&spd])
                        .expect("f")
                        .len()
                }),
            ),
            (
                "solve",
                Box::new(|| rule_fb(&SolveRule, &[&a, &b], &[Some(y_bar.clone())])),
                Box::new(|| {
                    rule::primal(&SolveRule, &Strided, &[&a, &b])
                        .expect("f")
                        .len()
                }),
            ),
            (
                "det",
                Box::new(|| rule_fb(&DetRule, &[&a_unit], &[Some(s_bar.clone())])),
                Box::new(|| {
                    rule::primal(&DetRule, &Strided, &[&a_unit])
                        .expect("f")
                        .len()
                }),
            ),
            (
                "slogdet",
                Box::new(|| rule_fb(&SlogdetRule, &[&a], &[None, Some(s_bar.clone())])),
                Box::new(|| {
                    rule::primal(&SlogdetRule, &Strided, &[&a])
                        .expect("f")
                        .len()
                }),
            ),
            (
                "eig",
                Box::new(|| rule_fb(&EigRule, &[&a], &[Some(l_bar.clone()), None])),
                Box::new(|| rule::primal(&EigRule, &Strided, &[&a]).expect("f").len()),
            ),
            (
                "matrix_exp",
                Box::new(|| rule_fb(&MatrixExpRule, &[&a_exp], &[Some(y_bar.clone())])),
                Box::new(|| {
                    rule::primal(&MatrixExpRule, &Strided, &[&a_exp])
                        .expect("f")
                        .len()
                }),
            ),
            (
                "inv",
                Box::new(|| rule_fb(&InvRule, &[&a], &[Some(y_bar.clone())])),
                Box::new(|| rule::primal(&InvRule, &Strided, &[&a]).expect("f").len()),
            ),
        ];
        for (name, fb, fwd) in &cases {
            let mut g = c.benchmark_group(format!("linalg_more_{name}"));
            g.sample_size(10);
            g.bench_with_input(BenchmarkId::new("rule", &v), &(), |bch, _| bch.iter(fb));
            g.bench_with_input(BenchmarkId::new("forward", &v), &(), |bch, _| bch.iter(fwd));
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
