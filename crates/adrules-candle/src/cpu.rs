//! The CPU forward: adrules-strided's kernels run directly on candle's CPU buffers.
//!
//! `CpuStorage` is the `Vec` behind a tensor and the [`Layout`] says how to read it (shape,
//! strides, offset), so each input becomes a borrowed [`StridedView`] without a copy, and the
//! strided kernels (blocked transposing add, TTGT on faer's GEMM, trace on the diagonal view)
//! write the output `Vec`, which candle then owns. An input whose dtype differs from the
//! computation's is cast first (one contiguous copy). Other dtypes take the device-generic
//! path of [`crate::kernel`], which reports them.

use adrules_core::{Conj, ContractSpec, Permutation, TraceSpec};
use adrules_strided::kernels;
use adrules_strided::{Element, StridedView, StridedViewMut};
use candle_core::{CpuStorage, DType, Layout, Result, Shape, WithDType};

use crate::convert::to_candle;
use crate::kernel::{self, View, cast};

/// An element type served by the CPU fast path: `f32` or `f64`.
trait Real: Element + WithDType {}
impl Real for f32 {}
impl Real for f64 {}

/// `v` (already of dtype `T`) as a borrowed strided view.
fn view<'a, T: Real>(v: &'a View<'_, CpuStorage>) -> Result<StridedView<'a, T>> {
    let l = &v.layout;
    let strides: Vec<isize> = l.stride().iter().map(|&s| s as isize).collect();
    let data = v.storage().as_slice::<T>()?;
    StridedView::new(data, l.dims(), &strides, l.start_offset()).map_err(to_candle)
}

/// A fresh row-major output of `dims`, written by `f` (which overwrites it: β = 0).
fn output<T: Real>(
    dims: &[usize],
    f: impl FnOnce(&mut StridedViewMut<'_, T>) -> adrules_core::Result<()>,
) -> Result<(CpuStorage, Shape)> {
    let mut data = vec![T::zero(); dims.iter().product()];
    let mut out = StridedViewMut::row_major(&mut data, dims).map_err(to_candle)?;
    f(&mut out).map_err(to_candle)?;
    Ok((T::to_cpu_storage_owned(data), Shape::from(dims)))
}

/// Permuted add `α·P_p(A)` in `dtype`.
pub(crate) fn add(
    a: &CpuStorage,
    la: &Layout,
    perm: &Permutation,
    alpha: f64,
    dtype: DType,
) -> Result<(CpuStorage, Shape)> {
    fn typed<T: Real>(
        a: (&CpuStorage, &Layout),
        p: &Permutation,
        alpha: f64,
    ) -> Result<(CpuStorage, Shape)> {
        let a = cast(a.0, a.1, <T as WithDType>::DTYPE)?;
        let a = view::<T>(&a)?;
        let dims = p.apply(a.dims());
        output(&dims, |c| {
            kernels::add(
                c,
                &a,
                p,
                Conj::No,
                <T as WithDType>::from_f64(alpha),
                T::zero(),
            )
        })
    }
    match dtype {
        DType::F32 => typed::<f32>((a, la), perm, alpha),
        DType::F64 => typed::<f64>((a, la), perm, alpha),
        _ => kernel::add(a, la, perm.as_slice(), alpha, dtype),
    }
}

/// Partial trace `α·P_p(tr_{q1,q2} A)` in `dtype`.
pub(crate) fn trace(
    a: &CpuStorage,
    la: &Layout,
    spec: &TraceSpec,
    alpha: f64,
    dtype: DType,
) -> Result<(CpuStorage, Shape)> {
    fn typed<T: Real>(
        a: (&CpuStorage, &Layout),
        spec: &TraceSpec,
        alpha: f64,
    ) -> Result<(CpuStorage, Shape)> {
        let a = cast(a.0, a.1, <T as WithDType>::DTYPE)?;
        let a = view::<T>(&a)?;
        let dims = spec.output_dims(a.dims()).map_err(to_candle)?;
        output(&dims, |c| {
            kernels::trace(
                c,
                &a,
                spec,
                Conj::No,
                <T as WithDType>::from_f64(alpha),
                T::zero(),
            )
        })
    }
    match dtype {
        DType::F32 => typed::<f32>((a, la), spec, alpha),
        DType::F64 => typed::<f64>((a, la), spec, alpha),
        _ => kernel::trace(a, la, spec, alpha, dtype),
    }
}

/// Pairwise contraction `α·P_pAB(A·B)` in `dtype`.
pub(crate) fn contract(
    (a, la): (&CpuStorage, &Layout),
    (b, lb): (&CpuStorage, &Layout),
    spec: &ContractSpec,
    alpha: f64,
    dtype: DType,
) -> Result<(CpuStorage, Shape)> {
    fn typed<T: Real>(
        a: (&CpuStorage, &Layout),
        b: (&CpuStorage, &Layout),
        spec: &ContractSpec,
        alpha: f64,
    ) -> Result<(CpuStorage, Shape)> {
        let (a, b) = (
            cast(a.0, a.1, <T as WithDType>::DTYPE)?,
            cast(b.0, b.1, <T as WithDType>::DTYPE)?,
        );
        let (a, b) = (view::<T>(&a)?, view::<T>(&b)?);
        let dims = spec.output_dims(a.dims(), b.dims()).map_err(to_candle)?;
        output(&dims, |c| {
            kernels::contract(
                c,
                &a,
                &b,
                spec,
                Conj::No,
                Conj::No,
                <T as WithDType>::from_f64(alpha),
                T::zero(),
            )
        })
    }
    match dtype {
        DType::F32 => typed::<f32>((a, la), (b, lb), spec, alpha),
        DType::F64 => typed::<f64>((a, la), (b, lb), spec, alpha),
        _ => kernel::contract((a, la), (b, lb), spec, alpha, dtype),
    }
}

#[cfg(test)]
mod tests {
    //! The device-generic kernels of [`crate::kernel`] (the CUDA and Metal forward) against
    //! the strided CPU kernels, both run on CPU storage, on views with offsets, permuted and
    //! broadcast strides, and mixed dtypes.
    use super::*;
    use candle_core::op::BackpropOp;
    use candle_core::{Device, Storage, Tensor};

    fn cpu_of(t: &Tensor) -> (CpuStorage, Layout) {
        let (s, l) = t.storage_and_layout();
        match &*s {
            Storage::Cpu(c) => (c.clone(), l.clone()),
            _ => unreachable!("CPU tensors only"),
        }
    }

    fn to_tensor((s, shape): (CpuStorage, Shape)) -> Tensor {
        Tensor::from_storage(Storage::Cpu(s), shape, BackpropOp::none(), false)
    }

    fn max_diff(x: &Tensor, y: &Tensor) -> f64 {
        assert_eq!(x.dims(), y.dims());
        assert_eq!(x.dtype(), y.dtype());
        (x.to_dtype(DType::F64).unwrap() - y.to_dtype(DType::F64).unwrap())
            .and_then(|d| d.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>())
            .unwrap_or(0.0)
    }

    fn inputs() -> Vec<Tensor> {
        let base = Tensor::randn(0f64, 1.0, (5, 6, 4), &Device::Cpu).unwrap();
        vec![
            base.narrow(0, 1, 4).unwrap().permute((1, 2, 0)).unwrap(), // (6, 4, 4), offset
            base.narrow(1, 2, 4).unwrap().to_dtype(DType::F32).unwrap(), // (5, 4, 4) f32
            Tensor::randn(0f64, 1.0, (1, 4, 4), &Device::Cpu)
                .unwrap()
                .broadcast_as((3, 4, 4))
                .unwrap(), // stride 0
        ]
    }

    #[test]
    fn generic_kernels_agree_with_strided_kernels() {
        let xs = inputs();
        for x in &xs {
            let (s, l) = cpu_of(x);
            for dtype in [DType::F32, DType::F64] {
                let tol = if dtype == DType::F32 { 1e-4 } else { 1e-12 };
                let p = Permutation::new(&[2, 0, 1]).unwrap();
                let fast = to_tensor(add(&s, &l, &p, 0.5, dtype).unwrap());
                let generic = to_tensor(kernel::add(&s, &l, p.as_slice(), 0.5, dtype).unwrap());
                assert!(max_diff(&fast, &generic) <= tol, "add");
                let spec = TraceSpec::new(&[0], &[1], &[2]).unwrap();
                let fast = to_tensor(trace(&s, &l, &spec, -2.0, dtype).unwrap());
                let generic = to_tensor(kernel::trace(&s, &l, &spec, -2.0, dtype).unwrap());
                assert!(max_diff(&fast, &generic) <= tol, "trace");
                for y in &xs {
                    let (t, m) = cpu_of(y);
                    for labels in [
                        ("abc", "dbc", "ad"),
                        ("abc", "dcb", "da"),
                        ("abc", "dce", "bead"),
                    ] {
                        let spec = ContractSpec::from_labels(labels.0, labels.1, labels.2).unwrap();
                        let fast =
                            to_tensor(contract((&s, &l), (&t, &m), &spec, 1.5, dtype).unwrap());
                        let generic = to_tensor(
                            kernel::contract((&s, &l), (&t, &m), &spec, 1.5, dtype).unwrap(),
                        );
                        assert!(
                            max_diff(&fast, &generic) <= tol * 10.0,
                            "contract {labels:?}"
                        );
                    }
                }
            }
        }
    }
}
