//! Helpers shared by the network integration tests: random networks in both notations,
//! random host tensors, and a naive contraction written straight from the definition (one
//! loop over every assignment of every label), independent of the code under test.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::sync::Arc;

use adrules_core::{Complex64, Conj, DType, HostData, HostTensor};
use adrules_testing::reference::{for_each_index, row_major_strides};
use rand::Rng;
use rand::seq::SliceRandom;

/// A network over labels `0..dims.len()`: each label is open (once in an operand, once in
/// `output`) or contracted (twice among the operands).
#[derive(Clone, Debug)]
pub struct RandomNetwork {
    pub inputs: Vec<Vec<usize>>,
    pub output: Vec<usize>,
    pub dims: Vec<usize>,
    pub conj: Vec<Conj>,
}

impl RandomNetwork {
    /// `n` operands, up to `max_labels` labels of dimension 1..=3 (0 with probability
    /// `p_zero`), random partial traces, outer products and disconnected parts.
    pub fn generate(rng: &mut impl Rng, n: usize, max_labels: usize, p_zero: f64) -> Self {
        let n_labels = rng.random_range(0..=max_labels);
        let mut inputs = vec![Vec::new(); n];
        let mut output = Vec::new();
        for l in 0..n_labels {
            if rng.random_bool(0.3) {
                inputs[rng.random_range(0..n)].push(l);
                output.push(l);
            } else {
                inputs[rng.random_range(0..n)].push(l);
                inputs[rng.random_range(0..n)].push(l);
            }
        }
        for list in &mut inputs {
            list.shuffle(rng);
        }
        output.shuffle(rng);
        let dims = (0..n_labels)
            .map(|_| {
                if rng.random_bool(p_zero) {
                    0
                } else {
                    rng.random_range(1..=3)
                }
            })
            .collect();
        let conj = (0..n)
            .map(|_| Conj::from_bool(rng.random_bool(0.5)))
            .collect();
        RandomNetwork {
            inputs,
            output,
            dims,
            conj,
        }
    }

    pub fn einsum(&self) -> String {
        let word = |l: &[usize]| {
            l.iter()
                .map(|&x| (b'a' + x as u8) as char)
                .collect::<String>()
        };
        let ins: Vec<String> = self.inputs.iter().map(|l| word(l)).collect();
        format!("{}->{}", ins.join(","), word(&self.output))
    }

    /// ncon lists: contracted label `l` becomes `l + 1`, output axis `m` becomes `−(m+1)`.
    pub fn ncon(&self) -> Vec<Vec<i64>> {
        self.inputs
            .iter()
            .map(|list| {
                list.iter()
                    .map(|l| match self.output.iter().position(|o| o == l) {
                        Some(m) => -(m as i64 + 1),
                        None => *l as i64 + 1,
                    })
                    .collect()
            })
            .collect()
    }

    pub fn operand_dims(&self) -> Vec<Vec<usize>> {
        self.inputs
            .iter()
            .map(|l| l.iter().map(|&x| self.dims[x]).collect())
            .collect()
    }

    pub fn output_dims(&self) -> Vec<usize> {
        self.output.iter().map(|&x| self.dims[x]).collect()
    }

    /// Σ over all labels of Π_k op_k(T_k[…]), in `Complex64`, row-major over the output,
    /// and the largest Σ |Π_k T_k[…]| of an output element (the scale of rounding errors).
    pub fn naive(&self, tensors: &[HostTensor]) -> (Vec<Complex64>, f64) {
        let data: Vec<Vec<Complex64>> = tensors.iter().map(|t| t.data().to_c64_vec()).collect();
        let strides: Vec<Vec<usize>> = tensors
            .iter()
            .map(|t| row_major_strides(t.dims()))
            .collect();
        let out_dims = self.output_dims();
        let out_strides = row_major_strides(&out_dims);
        let mut out = vec![Complex64::new(0.0, 0.0); out_dims.iter().product()];
        let mut mag = vec![0.0f64; out.len()];
        for_each_index(&self.dims, |assign| {
            let mut prod = Complex64::new(1.0, 0.0);
            for (k, list) in self.inputs.iter().enumerate() {
                let off: usize = list
                    .iter()
                    .zip(&strides[k])
                    .map(|(&l, s)| assign[l] * s)
                    .sum();
                let x = data[k][off];
                prod *= if self.conj[k].is_conj() { x.conj() } else { x };
            }
            let o: usize = self
                .output
                .iter()
                .zip(&out_strides)
                .map(|(&l, s)| assign[l] * s)
                .sum();
            out[o] += prod;
            mag[o] += prod.norm();
        });
        (out, mag.into_iter().fold(0.0, f64::max))
    }
}

/// Uniform entries in [-1, 1] (both parts for complex dtypes).
pub fn random_tensor(rng: &mut impl Rng, dims: &[usize], dtype: DType) -> HostTensor {
    let n: usize = dims.iter().product();
    let v: Vec<Complex64> = (0..n)
        .map(|_| Complex64::new(rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0)))
        .collect();
    HostTensor::new(dims, HostData::from_c64_projected(&v, dtype)).unwrap()
}

pub fn random_dtype(rng: &mut impl Rng) -> DType {
    DType::ALL[rng.random_range(0..4)]
}

/// Unit roundoff of the dtype's precision.
pub fn eps(dtype: DType) -> f64 {
    if dtype.is_double() {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    }
}

/// Largest `|x − y|` over the elements, after checking shapes.
pub fn max_abs_diff(actual: &HostTensor, dims: &[usize], expected: &[Complex64]) -> f64 {
    assert_eq!(actual.dims(), dims, "shape");
    actual
        .data()
        .to_c64_vec()
        .iter()
        .zip(expected)
        .map(|(x, y)| (x - y).norm())
        .fold(0.0, f64::max)
}

pub fn arcs(h: &[HostTensor]) -> Vec<Arc<HostTensor>> {
    h.iter().cloned().map(Arc::new).collect()
}
