//! The CPU forward: adrules-strided's kernels run directly on candle's CPU buffers.
//!
//! `CpuStorage` is the `Vec` behind a tensor and the [`Layout`] says how to read it (shape,
//! strides, offset), so each input becomes a borrowed [`StridedView`] without a copy, and the
//! strided kernels (blocked transposing add, TTGT on faer's GEMM, trace on the diagonal view)
//! write the output `Vec`, which candle then owns. An input whose dtype differs from the
//! computation's is cast first (one contiguous copy). Other dtypes take the device-generic
//! path of [`crate::kernel`], which reports them.

use adrules_core::rules::Primitive;
use adrules_strided::kernels;
use adrules_strided::{Element, StridedView};
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

/// `α·op(operands)` of one primitive call (β ignored: a fresh output) in `dtype`, the
/// operands in input order: the strided kernels for f32 and f64, the device-generic path of
/// [`crate::kernel`] (which reports them) for other dtypes.
pub(crate) fn forward(
    prim: &Primitive,
    x: &[(&CpuStorage, &Layout)],
    dtype: DType,
) -> Result<(CpuStorage, Shape)> {
    match dtype {
        DType::F32 => typed::<f32>(prim, x),
        DType::F64 => typed::<f64>(prim, x),
        _ => kernel::forward(prim, x, dtype),
    }
}

/// [`forward`] in `T`: each operand cast to `T` (a copy only when its dtype differs) and read
/// in place through its layout; [`kernels::primitive_fresh`] writes the output, a fresh
/// row-major `Vec` that candle then owns.
fn typed<T: Real>(prim: &Primitive, x: &[(&CpuStorage, &Layout)]) -> Result<(CpuStorage, Shape)> {
    let held: Vec<View<'_, CpuStorage>> = x
        .iter()
        .map(|&(s, l)| cast(s, l, <T as WithDType>::DTYPE))
        .collect::<Result<_>>()?;
    let views: Vec<StridedView<'_, T>> = held.iter().map(view::<T>).collect::<Result<_>>()?;
    let (data, dims) = kernels::primitive_fresh::<T, T>(&views, prim).map_err(to_candle)?;
    Ok((T::to_cpu_storage_owned(data), Shape::from(dims.as_slice())))
}

#[cfg(test)]
mod tests {
    //! The device-generic kernels of [`crate::kernel`] (the CUDA and Metal forward) against
    //! the strided CPU kernels, both run on CPU storage, on views with offsets, permuted and
    //! broadcast strides, and mixed dtypes.
    use super::*;
    use adrules_core::rules::{AddOp, ContractOp, TraceOp};
    use adrules_core::{ContractSpec, Permutation, TraceSpec};
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
            base.narrow(0, 1, 4)
                .unwrap()
                .narrow(1, 1, 4)
                .unwrap()
                .permute((2, 1, 0))
                .unwrap(), // (4, 4, 4), offset, reversed strides
        ]
    }

    #[test]
    fn generic_kernels_agree_with_strided_kernels() {
        let both = |prim: &Primitive, x: &[(&CpuStorage, &Layout)], dtype: DType| {
            let fast = to_tensor(forward(prim, x, dtype).unwrap());
            let generic = to_tensor(kernel::forward(prim, x, dtype).unwrap());
            max_diff(&fast, &generic)
        };
        let xs = inputs();
        for x in &xs {
            let (s, l) = cpu_of(x);
            for dtype in [DType::F32, DType::F64] {
                let tol = if dtype == DType::F32 { 1e-4 } else { 1e-12 };
                let p = Permutation::new(&[2, 0, 1]).unwrap();
                let add = AddOp::new(p).alpha(0.5).into();
                assert!(both(&add, &[(&s, &l)], dtype) <= tol, "add");
                let spec = TraceSpec::new(&[0], &[1], &[2]).unwrap();
                let trace = TraceOp::new(spec).alpha(-2.0).into();
                assert!(both(&trace, &[(&s, &l)], dtype) <= tol, "trace");
                // Generalized traces: diagonals, sums, a full reduction, a hypertrace.
                let cubic = x.dims().iter().all(|&d| d == 4);
                for (ta, tc) in [
                    ("abb", "ab"),
                    ("abb", "ba"),
                    ("abc", "c"),
                    ("abc", ""),
                    ("abb", ""),
                    ("aaa", "a"),
                    ("aaa", ""),
                ] {
                    if ta == "aaa" && !cubic {
                        continue;
                    }
                    let spec = TraceSpec::from_labels(ta, tc).unwrap();
                    let trace = TraceOp::new(spec).alpha(0.75).into();
                    assert!(both(&trace, &[(&s, &l)], dtype) <= tol, "{ta}->{tc}");
                }
                for y in &xs {
                    let (t, m) = cpu_of(y);
                    for labels in [
                        ("abc", "dbc", "ad"),
                        ("abc", "dcb", "da"),
                        ("abc", "dce", "bead"),
                        // batched: (batch, open_a, open_b), swapped (batch, open_b, open_a),
                        // no contracted axis
                        ("abc", "dcb", "cad"),
                        ("abc", "dbc", "bda"),
                        ("abc", "dbc", "abdc"),
                    ] {
                        let spec = ContractSpec::from_labels(labels.0, labels.1, labels.2).unwrap();
                        let contract = ContractOp::new(spec).alpha(1.5).into();
                        let d = both(&contract, &[(&s, &l), (&t, &m)], dtype);
                        assert!(d <= tol * 10.0, "contract {labels:?}");
                    }
                }
                // A wrong number of operands is an error, on both paths.
                assert!(forward(&add, &[(&s, &l), (&s, &l)], dtype).is_err());
                assert!(kernel::forward::<CpuStorage>(&add, &[], dtype).is_err());
            }
        }
    }
    /// A random tensor of `dims`, contiguous or with reversed strides.
    fn random(dims: &[usize], dtype: DType, reversed: bool) -> Tensor {
        let t = Tensor::randn(0f64, 1.0, dims, &Device::Cpu)
            .and_then(|t| t.to_dtype(dtype))
            .unwrap();
        if !reversed {
            return t;
        }
        let rev: Vec<usize> = (0..dims.len()).rev().collect();
        let t = t.permute(rev.clone()).unwrap().contiguous().unwrap();
        t.permute(rev).unwrap()
    }

    /// The generalized traces and batched contractions of the kernel path (CUDA, Metal)
    /// against the strided kernels on CPU storage, contiguous and strided.
    #[test]
    fn generic_kernels_agree_on_general_specs() {
        let both = |prim: &Primitive, x: &[Tensor], dtype: DType| {
            let held: Vec<(CpuStorage, Layout)> = x.iter().map(cpu_of).collect();
            let refs: Vec<(&CpuStorage, &Layout)> = held.iter().map(|(s, l)| (s, l)).collect();
            let fast = to_tensor(forward(prim, &refs, dtype).unwrap());
            let generic = to_tensor(kernel::forward(prim, &refs, dtype).unwrap());
            max_diff(&fast, &generic)
        };
        let traces: &[(&str, &str, &[usize])] = &[
            ("ii", "i", &[4, 4]),
            ("bii", "bi", &[3, 4, 4]),
            ("iii", "i", &[3, 3, 3]),
            ("ij", "i", &[3, 5]),
            ("ijk", "", &[2, 3, 4]),
            ("iii", "", &[3, 3, 3]),
            ("ii", "", &[5, 5]),
            ("iijk", "kj", &[3, 3, 2, 4]),
            ("ijij", "ji", &[2, 3, 2, 3]),
            ("ii", "i", &[0, 0]),
            ("ij", "i", &[3, 0]),
        ];
        type Labels = (&'static str, &'static str, &'static str);
        let contractions: &[(Labels, &[usize], &[usize])] = &[
            (("bij", "bjk", "bik"), &[3, 2, 4], &[3, 4, 5]),
            (("bhqd", "bhkd", "bhqk"), &[2, 3, 4, 5], &[2, 3, 6, 5]),
            (("bhqk", "bhkd", "bhqd"), &[2, 3, 4, 6], &[2, 3, 6, 5]),
            (("ibj", "bjk", "kbi"), &[4, 3, 2], &[3, 2, 5]),
            (("bij", "bjk", "bki"), &[3, 2, 4], &[3, 4, 5]),
            (("ij", "ij", "ij"), &[3, 4], &[3, 4]),
            (("ij", "ji", "j"), &[3, 4], &[4, 3]),
            (("bij", "bjk", "bik"), &[0, 2, 4], &[0, 4, 5]),
            (("bij", "bjk", "bik"), &[3, 2, 0], &[3, 0, 5]),
        ];
        for dtype in [DType::F32, DType::F64] {
            let tol = if dtype == DType::F32 { 1e-4 } else { 1e-12 };
            for reversed in [false, true] {
                for &(a, c, dims) in traces {
                    let spec = TraceSpec::from_labels(a, c).unwrap();
                    let prim = TraceOp::new(spec).alpha(-1.5).into();
                    let x = [random(dims, dtype, reversed)];
                    assert!(both(&prim, &x, dtype) <= tol, "{a}->{c}");
                }
                for &((a, b, c), da, db) in contractions {
                    let spec = ContractSpec::from_labels(a, b, c).unwrap();
                    let prim = ContractOp::new(spec).alpha(0.5).into();
                    let x = [random(da, dtype, reversed), random(db, dtype, !reversed)];
                    assert!(both(&prim, &x, dtype) <= tol * 10.0, "{a},{b}->{c}");
                }
            }
        }
    }
}
