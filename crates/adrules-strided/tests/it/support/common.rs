//! Helpers shared by the integration tests: random strided layouts, tensors built with an
//! independent placement loop, and comparison against the reference backend.
#![allow(dead_code)]

use std::sync::Arc;

use adrules_core::{Complex32, Complex64, DType, DynScalar, HostData, HostTensor};
use adrules_strided::{Storage, Tensor};
use adrules_testing::reference::{for_each_index, row_major_strides};
use proptest::prelude::*;

/// Value written into buffer positions outside a layout; it must survive every update.
pub const GAP: f64 = 4242.0;

/// A strided layout for a shape: axis order (fastest first), padding per axis, reversed
/// axes and a leading offset.
#[derive(Clone, Debug)]
pub struct LayoutSpec {
    pub order: Vec<usize>,
    pub pad: Vec<usize>,
    pub flip: Vec<bool>,
    pub offset: usize,
}

/// Row-major, permuted, padded and reversed layouts, all equally likely to mix.
pub fn layout(rank: usize) -> impl Strategy<Value = LayoutSpec> {
    (
        Just((0..rank).collect::<Vec<_>>()).prop_shuffle(),
        proptest::collection::vec(prop_oneof![3 => Just(0usize), 1 => 1..3usize], rank),
        proptest::collection::vec(prop_oneof![3 => Just(false), 1 => Just(true)], rank),
        prop_oneof![2 => Just(0usize), 1 => 1..4usize],
        any::<bool>(),
    )
        .prop_map(move |(order, pad, flip, offset, plain)| {
            if plain {
                LayoutSpec {
                    order: (0..rank).rev().collect(),
                    pad: vec![0; rank],
                    flip: vec![false; rank],
                    offset: 0,
                }
            } else {
                LayoutSpec {
                    order,
                    pad,
                    flip,
                    offset,
                }
            }
        })
}

/// `(strides, offset, buffer length)` of `spec` for `dims`, computed independently of the
/// crate under test.
pub fn realise(dims: &[usize], spec: &LayoutSpec) -> (Vec<isize>, usize, usize) {
    let mut strides = vec![0isize; dims.len()];
    let mut acc = 1usize;
    for &k in &spec.order {
        strides[k] = acc as isize;
        acc *= dims[k].max(1) + spec.pad[k];
    }
    let mut offset = spec.offset;
    for k in 0..dims.len() {
        if spec.flip[k] {
            offset += (dims[k].max(1) - 1) * strides[k] as usize;
            strides[k] = -strides[k];
        }
    }
    (strides, offset, acc + spec.offset + 2)
}

/// Deterministic pseudo-random values in `[-1, 1]²` (xorshift), from a seed.
pub fn values(seed: u64, n: usize) -> Vec<Complex64> {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    (0..n).map(|_| Complex64::new(next(), next())).collect()
}

fn project(v: Complex64, dtype: DType) -> Complex64 {
    DynScalar::from_c64(v, dtype).to_c64()
}

/// Buffer positions (in row-major index order) of `dims` under `strides` from `offset`.
pub fn positions(dims: &[usize], strides: &[isize], offset: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for_each_index(dims, |i| {
        let p = offset as isize
            + i.iter()
                .zip(strides)
                .map(|(&a, &s)| a as isize * s)
                .sum::<isize>();
        out.push(p as usize);
    });
    out
}

fn buffer(dtype: DType, data: &[Complex64]) -> Storage {
    match dtype {
        DType::F32 => Storage::F32(Arc::new(data.iter().map(|z| z.re as f32).collect())),
        DType::F64 => Storage::F64(Arc::new(data.iter().map(|z| z.re).collect())),
        DType::C32 => Storage::C32(Arc::new(
            data.iter()
                .map(|z| Complex32::new(z.re as f32, z.im as f32))
                .collect(),
        )),
        DType::C64 => Storage::C64(Arc::new(data.to_vec())),
    }
}

/// The buffer of a tensor, widened to `Complex64`.
pub fn buffer_c64(t: &Tensor) -> Vec<Complex64> {
    match t.storage() {
        Storage::F32(b) => b.iter().map(|&x| Complex64::new(x as f64, 0.0)).collect(),
        Storage::F64(b) => b.iter().map(|&x| Complex64::new(x, 0.0)).collect(),
        Storage::C32(b) => b
            .iter()
            .map(|x| Complex64::new(x.re as f64, x.im as f64))
            .collect(),
        Storage::C64(b) => b.to_vec(),
    }
}

/// A strided tensor holding `vals` (row-major logical order, projected to `dtype`) in the
/// layout `spec`, gaps filled with [`GAP`]; and the same values as reference host data.
pub struct Case {
    pub tensor: Tensor,
    pub host: Arc<HostTensor>,
    pub positions: Vec<usize>,
}

pub fn make(dtype: DType, dims: &[usize], spec: &LayoutSpec, vals: &[Complex64]) -> Case {
    let (strides, offset, len) = realise(dims, spec);
    let pos = positions(dims, &strides, offset);
    let mut data = vec![Complex64::new(GAP, GAP); len];
    for (&p, &v) in pos.iter().zip(vals) {
        data[p] = v;
    }
    let tensor = match buffer(dtype, &data) {
        Storage::F32(b) => Tensor::from_parts(b, dims, &strides, offset),
        Storage::F64(b) => Tensor::from_parts(b, dims, &strides, offset),
        Storage::C32(b) => Tensor::from_parts(b, dims, &strides, offset),
        Storage::C64(b) => Tensor::from_parts(b, dims, &strides, offset),
    }
    .expect("a valid layout");
    let projected: Vec<Complex64> = vals.iter().map(|&v| project(v, dtype)).collect();
    let host =
        HostTensor::new(dims, HostData::from_c64_projected(&projected, dtype)).expect("host data");
    Case {
        tensor,
        host: Arc::new(host),
        positions: pos,
    }
}

/// Relative tolerance for results of `dtype` summing `terms` products.
pub fn tolerance(dtype: DType, terms: usize) -> f64 {
    let eps = if dtype.is_double() { 1e-13 } else { 2e-6 };
    eps * (terms.max(1) as f64 + 4.0)
}

/// Asserts that `t` holds the values of `expected` (row-major) within the tolerance, and that
/// the buffer positions outside its layout still hold [`GAP`].
pub fn assert_matches(t: &Tensor, expected: &HostTensor, terms: usize, gaps: &[usize]) {
    assert_eq!(t.dims(), expected.dims());
    assert_eq!(t.dtype(), expected.dtype());
    let got = t.to_host().expect("to_host").data().to_c64_vec();
    let want = expected.data().to_c64_vec();
    let tol = tolerance(t.dtype(), terms);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).norm() <= tol * (1.0 + w.norm()),
            "element {i}: got {g}, expected {w} (dims {:?}, strides {:?})",
            t.dims(),
            t.strides()
        );
    }
    let buf = buffer_c64(t);
    let gap = project(Complex64::new(GAP, GAP), t.dtype());
    for (p, v) in buf.iter().enumerate() {
        if !gaps.contains(&p) {
            assert_eq!(
                *v, gap,
                "buffer position {p} outside the layout was written"
            );
        }
    }
}

/// A coefficient: 0, 1, a random real or a random complex value, in a random dtype.
pub fn coefficient() -> impl Strategy<Value = DynScalar> {
    (0..4u8, -2.0..2.0f64, -2.0..2.0f64, 0..4usize).prop_map(|(kind, re, im, dt)| {
        let v = match kind {
            0 => Complex64::new(0.0, 0.0),
            1 => Complex64::new(1.0, 0.0),
            2 => Complex64::new(re, 0.0),
            _ => Complex64::new(re, im),
        };
        let dtype = if kind == 3 {
            [DType::C32, DType::C64][dt % 2]
        } else {
            DType::ALL[dt]
        };
        DynScalar::from_c64(v, dtype)
    })
}

/// A shape of the given rank, dimensions 0..=5 (zero rarely).
pub fn dims(rank: usize) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(prop_oneof![1 => Just(0usize), 12 => 1..6usize], rank)
}

/// Any of the four dtypes.
pub fn dtype() -> impl Strategy<Value = DType> {
    (0..4usize).prop_map(|i| DType::ALL[i])
}

/// Row-major strides as `isize` (reference helper).
pub fn rm(dims: &[usize]) -> Vec<isize> {
    row_major_strides(dims)
        .into_iter()
        .map(|s| s as isize)
        .collect()
}
