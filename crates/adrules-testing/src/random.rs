//! Seeded random tensors and scalars (reproducible across platforms: ChaCha8).

use adrules_core::{Complex64, DType, DynScalar, HostData, HostTensor};
use rand::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A seeded generator of test data.
#[derive(Clone, Debug)]
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// A generator from a seed.
    pub fn seed(seed: u64) -> Self {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A standard normal sample (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1: f64 = self.0.random::<f64>().max(f64::MIN_POSITIVE);
        let u2: f64 = self.0.random::<f64>();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n)
    }

    /// A value of `dtype` with standard normal real (and imaginary) part.
    pub fn scalar(&mut self, dtype: DType) -> DynScalar {
        let re = self.normal();
        let im = if dtype.is_complex() {
            self.normal()
        } else {
            0.0
        };
        DynScalar::from_c64(Complex64::new(re, im), dtype)
    }

    /// A tensor of shape `dims` and dtype `dtype` with standard normal entries (real and
    /// imaginary parts independent).
    pub fn tensor(&mut self, dims: &[usize], dtype: DType) -> HostTensor {
        let n: usize = dims.iter().product();
        let v: Vec<Complex64> = (0..n)
            .map(|_| {
                let re = self.normal();
                let im = if dtype.is_complex() {
                    self.normal()
                } else {
                    0.0
                };
                Complex64::new(re, im)
            })
            .collect();
        HostTensor::new(dims, HostData::from_c64_projected(&v, dtype))
            .expect("length is the product of dims")
    }

    /// A uniformly random permutation of `0..n`.
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            p.swap(i, self.below(i + 1));
        }
        p
    }
}
