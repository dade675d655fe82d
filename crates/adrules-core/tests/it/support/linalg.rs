//! Shared helpers of the decomposition tests: batches of host matrices in `Complex64`, the
//! strided backend, and the gauge-invariant observables of the oracle files.
#![allow(dead_code)]

use adrules_core::{Backend, Complex64, DType, HostData, HostTensor};
use adrules_strided::{Strided, Tensor};
use faer::Mat;

pub type C = Complex64;

pub fn be() -> Strided {
    Strided
}

pub fn dev(h: &HostTensor) -> Tensor {
    Strided.from_host(h.clone()).unwrap()
}

pub fn host(t: &Tensor) -> HostTensor {
    Strided.to_host(t).unwrap()
}

/// The matrices of `[batch…, m, n]`, in `Complex64`.
pub fn mats(h: &HostTensor) -> Vec<Mat<C>> {
    let d = h.dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    let v = h.data().to_c64_vec();
    let count: usize = d[..d.len() - 2].iter().product();
    (0..count)
        .map(|b| Mat::from_fn(m, n, |i, j| v[b * m * n + i * n + j]))
        .collect()
}

/// `[batch…, m, n]` from matrices, projected onto `dtype`.
pub fn unmats(batch: &[usize], m: usize, n: usize, xs: &[Mat<C>], dtype: DType) -> HostTensor {
    let mut v = Vec::new();
    for x in xs {
        for i in 0..m {
            for j in 0..n {
                v.push(x[(i, j)]);
            }
        }
    }
    let mut dims = batch.to_vec();
    dims.extend([m, n]);
    HostTensor::new(&dims, HostData::from_c64_projected(&v, dtype)).unwrap()
}

pub fn batch_of(h: &HostTensor) -> Vec<usize> {
    h.dims()[..h.dims().len() - 2].to_vec()
}

/// Elementwise map in `Complex64`, the result projected onto `dtype`.
pub fn map2(a: &HostTensor, b: &HostTensor, dtype: DType, f: impl Fn(C, C) -> C) -> HostTensor {
    assert_eq!(a.dims(), b.dims());
    let (x, y) = (a.data().to_c64_vec(), b.data().to_c64_vec());
    let v: Vec<C> = x.iter().zip(&y).map(|(&p, &q)| f(p, q)).collect();
    HostTensor::new(a.dims(), HostData::from_c64_projected(&v, dtype)).unwrap()
}

pub fn map1(a: &HostTensor, dtype: DType, f: impl Fn(C) -> C) -> HostTensor {
    map2(a, a, dtype, |p, _| f(p))
}

/// `d|u|` for the tangent `du` of `u`: `Re(conj(u)·du)/|u|`.
pub fn abs_tangent(u: &HostTensor, du: &HostTensor, dtype: DType) -> HostTensor {
    map2(u, du, dtype, |u, d| {
        C::new((u.conj() * d).re / u.norm(), 0.0)
    })
}

/// The cotangent of `u` for a real cotangent `c` of `|u|`: `c·u/|u|`.
pub fn abs_cotangent(u: &HostTensor, c: &HostTensor, dtype: DType) -> HostTensor {
    map2(u, c, dtype, |u, c| u * (c.re / u.norm()))
}

/// The tangent of [`abs_cotangent`] along the tangent `du` of `u` (`c` fixed):
/// `c·(du/|u| − u·Re(conj(u)·du)/|u|³)`.
pub fn abs_cotangent_tangent(
    u: &HostTensor,
    du: &HostTensor,
    c: &HostTensor,
    dtype: DType,
) -> HostTensor {
    let (us, ds, cs) = (
        u.to_dtype_projected(DType::C64),
        du.to_dtype_projected(DType::C64),
        c.to_dtype_projected(DType::C64),
    );
    let (us, ds, cs) = (
        us.as_slice::<C>().unwrap(),
        ds.as_slice::<C>().unwrap(),
        cs.as_slice::<C>().unwrap(),
    );
    let data: Vec<C> = us
        .iter()
        .zip(ds)
        .zip(cs)
        .map(|((&u, &d), &c)| {
            let r = u.norm();
            (d / r - u * ((u.conj() * d).re / (r * r * r))) * c.re
        })
        .collect();
    HostTensor::from_vec(u.dims(), data)
        .unwrap()
        .to_dtype_projected(dtype)
}

/// The first `k` columns (`cols = true`) or rows of each matrix.
pub fn narrow(h: &HostTensor, k: usize, cols: bool) -> HostTensor {
    let xs = mats(h);
    let d = h.dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    let ys: Vec<Mat<C>> = xs
        .iter()
        .map(|x| {
            if cols {
                x.subcols(0, k).to_owned()
            } else {
                x.subrows(0, k).to_owned()
            }
        })
        .collect();
    let (r, c) = if cols { (m, k) } else { (k, n) };
    unmats(&batch_of(h), r, c, &ys, h.dtype())
}

/// Zero-pads each matrix to `rows × cols` (the leading block is the input).
pub fn pad(h: &HostTensor, rows: usize, cols: usize) -> HostTensor {
    let d = h.dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    let ys: Vec<Mat<C>> = mats(h)
        .iter()
        .map(|x| {
            Mat::from_fn(rows, cols, |i, j| {
                if i < m && j < n {
                    x[(i, j)]
                } else {
                    C::new(0.0, 0.0)
                }
            })
        })
        .collect();
    unmats(&batch_of(h), rows, cols, &ys, h.dtype())
}

/// `f(x, y)` matrix by matrix, each result `rows × cols`.
pub fn matmap(
    a: &HostTensor,
    b: &HostTensor,
    rows: usize,
    cols: usize,
    f: impl Fn(&Mat<C>, &Mat<C>) -> Mat<C>,
) -> HostTensor {
    let zs: Vec<Mat<C>> = mats(a).iter().zip(&mats(b)).map(|(x, y)| f(x, y)).collect();
    unmats(&batch_of(a), rows, cols, &zs, a.dtype())
}

/// `Re⟨x, y⟩ = Re Σ conj(x)·y` in double precision.
pub fn dot(x: &HostTensor, y: &HostTensor) -> f64 {
    assert_eq!(x.dims(), y.dims(), "dot: shapes");
    let (a, b) = (x.data().to_c64_vec(), y.data().to_c64_vec());
    a.iter().zip(&b).map(|(p, q)| (p.conj() * q).re).sum()
}

pub fn norm(x: &HostTensor) -> f64 {
    dot(x, x).sqrt()
}

/// `x + s·y`, in `x`'s dtype.
pub fn axpy(x: &HostTensor, s: f64, y: &HostTensor) -> HostTensor {
    map2(x, y, x.dtype(), |p, q| p + q * s)
}

/// `x + xᴴ` matrix by matrix.
pub fn plus_adjoint(x: &HostTensor) -> HostTensor {
    let d = x.dims();
    let n = d[d.len() - 1];
    let ys: Vec<Mat<C>> = mats(x).iter().map(|m| m + m.adjoint()).collect();
    unmats(&batch_of(x), n, n, &ys, x.dtype())
}

/// Normal random data, real or complex.
pub fn random(dims: &[usize], dtype: DType, seed: u64) -> HostTensor {
    adrules_testing::Rng::seed(seed).tensor(dims, dtype)
}
