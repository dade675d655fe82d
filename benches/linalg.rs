//! Forward + backward through the SVD and through eigh at n = 256, f32 and f64: the
//! core's rules on the embedded strided backend (`strided`: `svd_rrule`/`eigh_rrule` then
//! the pullback) and the same through the engines' own `backward()` with the
//! decompositions as engine ops (`candle`, `burn`: features of the same names).
//!
//! The loss is linear in the factors, `L = Σ Ū ⊙ U + Σ S̄ ⊙ S + Σ V̄h ⊙ Vh` (thin SVD of a
//! general `A`) and `L = Σ λ̄ ⊙ λ + Σ V̄ ⊙ V` (eigh of a symmetric `A`), with fixed random
//! cotangents `Ū, S̄, V̄h, λ̄, V̄`: the engines' backward hands exactly those to the pullback,
//! so every path does the same work, one decomposition and one pullback (real data: the
//! sign gauge of the vectors is the implementation's, the same for every path here). The
//! peer script `benches/peers_linalg.py` times JAX's `value_and_grad` of the same losses.
//!
//! `A` and the cotangents standard normal from fixed seeds. Time by criterion
//! (`linalg_<svd|eigh>/<strided|candle|burn>/<dtype>`, and `strided_forward`: the
//! decomposition alone, faer's share); pin one thread with
//! `RAYON_NUM_THREADS=1` to compare with the peer script. Every path's gradient is checked
//! against the strided one before timing. Run:
//! `cargo bench -p adrules-benches --features candle,burn --bench linalg` (strided alone:
//! `cargo xtask bench linalg`).

use adrules::linalg::{RuleOptions, SvdCotangents, SvdMode, eigh, eigh_rrule, svd, svd_rrule};
use adrules::strided::{Strided, Tensor as St};
use adrules::{Backend, DType, HostTensor};
use adrules_testing::Rng;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const N: usize = 256;

/// The fixed cotangents, on the host: `[Ū, S̄, V̄h]` or `[λ̄, V̄]`.
struct Cots(Vec<HostTensor>);

impl Cots {
    fn new(dims: &[&[usize]], dtype: DType, seed: u64) -> Self {
        let mut rng = Rng::seed(seed);
        Cots(dims.iter().map(|d| rng.tensor(d, dtype)).collect())
    }
}

/// One forward + backward through the SVD on the strided backend: `Ā`.
fn svd_strided(a: &St, c: &[St]) -> St {
    let (_, pb) = svd_rrule(&Strided, a, SvdMode::Thin, RuleOptions::default()).expect("svd");
    let cot = SvdCotangents {
        u: Some(&c[0]),
        s: Some(&c[1]),
        vh: Some(&c[2]),
        ..Default::default()
    };
    pb.pullback(cot).expect("pullback")
}

/// One forward + backward through eigh on the strided backend: `Ā`.
fn eigh_strided(a: &St, c: &[St]) -> St {
    let (_, pb) = eigh_rrule(&Strided, a, RuleOptions::default()).expect("eigh");
    pb.pullback(Some(&c[0]), Some(&c[1])).expect("pullback")
}

/// `A` (general, for the SVD) and a symmetric `(X + Xᵀ)/2` (for eigh), `n × n`.
fn inputs(dtype: DType) -> (HostTensor, HostTensor) {
    let mut rng = Rng::seed(256);
    let a = rng.tensor(&[N, N], dtype);
    let x = rng.tensor(&[N, N], DType::F64);
    let xs = x.as_slice::<f64>().expect("f64");
    let sym: Vec<f64> = (0..N * N)
        .map(|k| (xs[k] + xs[(k % N) * N + k / N]) / 2.0)
        .collect();
    let sym = HostTensor::from_vec(&[N, N], sym)
        .expect("sym")
        .to_dtype_projected(dtype);
    (a, sym)
}

#[cfg(feature = "candle")]
mod candle_side {
    use super::*;
    use adrules::candle::candle_core::{Tensor, Var};
    use adrules::candle::{CandleBackend, linalg};

    pub fn up(h: &HostTensor) -> Tensor {
        CandleBackend::cpu().from_host(h.clone()).expect("up")
    }

    pub fn var(h: &HostTensor) -> Var {
        Var::from_tensor(&up(h)).expect("var")
    }

    pub fn down(t: &Tensor) -> HostTensor {
        CandleBackend::cpu().to_host(t).expect("down")
    }

    /// `Σ x ⊙ c`
    fn dot(x: &Tensor, c: &Tensor) -> Tensor {
        (x * c).and_then(|p| p.sum_all()).expect("dot")
    }

    pub fn svd(a: &Var, c: &[Tensor]) -> Tensor {
        let f = linalg::svd(a.as_tensor(), SvdMode::Thin, RuleOptions::default()).expect("svd");
        let loss = (dot(&f.u, &c[0]) + dot(&f.s, &c[1]))
            .and_then(|l| l + dot(&f.vh, &c[2]))
            .expect("loss");
        let g = loss.backward().expect("backward");
        g.get(a.as_tensor()).expect("grad").clone()
    }

    pub fn eigh(a: &Var, c: &[Tensor]) -> Tensor {
        let f = linalg::eigh(a.as_tensor(), RuleOptions::default()).expect("eigh");
        let loss = (dot(&f.values, &c[0]) + dot(&f.vectors, &c[1])).expect("loss");
        let g = loss.backward().expect("backward");
        g.get(a.as_tensor()).expect("grad").clone()
    }
}

#[cfg(feature = "burn")]
mod burn_side {
    use super::*;
    use adrules::burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
    use adrules::burn::{linalg, try_backward};

    /// A burn tensor (Flex with autodiff) of `h` shaped `dims`.
    pub fn up<const D: usize>(h: &HostTensor, dims: [usize; D]) -> Tensor<D> {
        let device = Device::flex().autodiff();
        let data = match h.dtype() {
            DType::F64 => TensorData::new(h.as_slice::<f64>().expect("f64").to_vec(), dims),
            _ => TensorData::new(h.as_slice::<f32>().expect("f32").to_vec(), dims),
        };
        let dtype = if h.dtype() == DType::F64 {
            BurnDType::F64
        } else {
            BurnDType::F32
        };
        Tensor::<D>::from_data(data, (&device, dtype))
    }

    pub fn down(t: Tensor<2>) -> HostTensor {
        let dims = t.dims().to_vec();
        let data = t.into_data();
        match data.dtype() {
            BurnDType::F64 => HostTensor::from_vec(&dims, data.iter::<f64>().collect()),
            _ => HostTensor::from_vec(&dims, data.iter::<f32>().collect()),
        }
        .expect("host")
    }

    /// `Σ x ⊙ c`
    fn dot(x: Tensor<2>, c: &Tensor<2>) -> Tensor<1> {
        (x * c.clone()).sum()
    }

    /// The cotangents as burn constants: vectors as `[1, k]`, the layout of the factors.
    pub fn constants(c: &[HostTensor]) -> Vec<Tensor<2>> {
        c.iter()
            .map(|h| match *h.dims() {
                [k] => up(h, [1, k]),
                [m, n] => up(h, [m, n]),
                _ => unreachable!("vectors and matrices only"),
            })
            .map(|t| Tensor::<2>::from_inner(t.inner()))
            .collect()
    }

    pub fn svd(a: &Tensor<2>, c: &[Tensor<2>]) -> Tensor<2> {
        let f = linalg::svd(a, SvdMode::Thin, RuleOptions::default()).expect("svd");
        let loss = dot(f.u, &c[0]) + dot(f.s, &c[1]) + dot(f.vh, &c[2]);
        let g = try_backward(&loss).expect("backward");
        a.grad(&g).map(Tensor::from_inner).expect("grad")
    }

    pub fn eigh(a: &Tensor<2>, c: &[Tensor<2>]) -> Tensor<2> {
        let f = linalg::eigh(a, RuleOptions::default()).expect("eigh");
        let loss = dot(f.values, &c[0]) + dot(f.vectors, &c[1]);
        let g = try_backward(&loss).expect("backward");
        a.grad(&g).map(Tensor::from_inner).expect("grad")
    }
}

/// Largest entry-wise difference relative to the largest entry of `want`.
#[cfg(any(feature = "candle", feature = "burn"))]
fn rel_diff(got: &HostTensor, want: &HostTensor) -> f64 {
    let (g, w) = (
        got.to_dtype_projected(DType::F64),
        want.to_dtype_projected(DType::F64),
    );
    let (g, w) = (
        g.as_slice::<f64>().expect("g"),
        w.as_slice::<f64>().expect("w"),
    );
    let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    g.iter()
        .zip(w)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

fn bench(c: &mut Criterion) {
    for dtype in [DType::F32, DType::F64] {
        let (a, sym) = inputs(dtype);
        let svd_cots = Cots::new(&[&[N, N], &[N], &[N, N]], dtype, 1);
        let eigh_cots = Cots::new(&[&[N], &[N, N]], dtype, 2);
        let up = |h: &HostTensor| Strided.from_host(h.clone()).expect("up");
        let (sa, ss) = (up(&a), up(&sym));
        let sc: Vec<St> = svd_cots.0.iter().map(up).collect();
        let ec: Vec<St> = eigh_cots.0.iter().map(up).collect();
        let name = if dtype == DType::F32 { "f32" } else { "f64" };
        // the engines compute the same factors and pullback: agreement to rounding
        #[cfg(any(feature = "candle", feature = "burn"))]
        let tol = if dtype == DType::F32 { 1e-3 } else { 1e-10 };
        #[cfg(any(feature = "candle", feature = "burn"))]
        let (svd_ref, eigh_ref) = (
            svd_strided(&sa, &sc).to_host().expect("host"),
            eigh_strided(&ss, &ec).to_host().expect("host"),
        );

        let mut g = c.benchmark_group("linalg_svd");
        g.sample_size(20);
        g.bench_function(BenchmarkId::new("strided", name), |b| {
            b.iter(|| svd_strided(&sa, &sc))
        });
        g.bench_function(BenchmarkId::new("strided_forward", name), |b| {
            b.iter(|| svd(&Strided, &sa, SvdMode::Thin).expect("svd"))
        });
        #[cfg(feature = "candle")]
        {
            let (ca, cc) = (candle_side::var(&a), svd_cots.0.iter().map(candle_side::up));
            let cc: Vec<_> = cc.collect();
            let d = rel_diff(&candle_side::down(&candle_side::svd(&ca, &cc)), &svd_ref);
            assert!(
                d < tol,
                "candle's SVD gradient differs from the strided one by {d}"
            );
            g.bench_function(BenchmarkId::new("candle", name), |b| {
                b.iter(|| candle_side::svd(&ca, &cc))
            });
        }
        #[cfg(feature = "burn")]
        {
            let ba = burn_side::up(&a, [N, N]).require_grad();
            let bc = burn_side::constants(&svd_cots.0);
            let d = rel_diff(&burn_side::down(burn_side::svd(&ba, &bc)), &svd_ref);
            assert!(
                d < tol,
                "burn's SVD gradient differs from the strided one by {d}"
            );
            g.bench_function(BenchmarkId::new("burn", name), |b| {
                b.iter(|| burn_side::svd(&ba, &bc))
            });
        }
        g.finish();

        let mut g = c.benchmark_group("linalg_eigh");
        g.sample_size(20);
        g.bench_function(BenchmarkId::new("strided", name), |b| {
            b.iter(|| eigh_strided(&ss, &ec))
        });
        g.bench_function(BenchmarkId::new("strided_forward", name), |b| {
            b.iter(|| eigh(&Strided, &ss).expect("eigh"))
        });
        #[cfg(feature = "candle")]
        {
            let (ca, cc) = (
                candle_side::var(&sym),
                eigh_cots.0.iter().map(candle_side::up),
            );
            let cc: Vec<_> = cc.collect();
            let d = rel_diff(&candle_side::down(&candle_side::eigh(&ca, &cc)), &eigh_ref);
            assert!(
                d < tol,
                "candle's eigh gradient differs from the strided one by {d}"
            );
            g.bench_function(BenchmarkId::new("candle", name), |b| {
                b.iter(|| candle_side::eigh(&ca, &cc))
            });
        }
        #[cfg(feature = "burn")]
        {
            let ba = burn_side::up(&sym, [N, N]).require_grad();
            let bc = burn_side::constants(&eigh_cots.0);
            let d = rel_diff(&burn_side::down(burn_side::eigh(&ba, &bc)), &eigh_ref);
            assert!(
                d < tol,
                "burn's eigh gradient differs from the strided one by {d}"
            );
            g.bench_function(BenchmarkId::new("burn", name), |b| {
                b.iter(|| burn_side::eigh(&ba, &bc))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
