//! The Flex fast path: adrules-strided's kernels on Flex's own storage.
//!
//! When the inner backend is burn's Flex CPU backend, [`BurnBackend`](crate::BurnBackend)
//! runs its permuted add, trace and contraction through `adrules_strided::kernels` instead of
//! burn ops: operands are read in place as strided views of the Flex buffers (Flex layouts
//! carry strides, possibly negative or zero, and an offset, which the views take as they
//! are: no copy for transposed, sliced or broadcast operands), and the contraction runs on
//! faer's GEMM. The output is a fresh row-major buffer handed to Flex without copying
//! (`β = 0`), or C's own buffer updated in place when C is uniquely owned and dense (copied
//! first otherwise, so no other handle sees the update).
//!
//! Detection is by type (`B::FloatTensorPrimitive` is `FlexTensor`), so every other backend
//! takes the generic path of burn ops.

use std::any::Any;

use adrules_core::{Conj, ContractSpec, DType, Permutation, Result, TraceSpec};
use adrules_strided::{Element, StridedView, StridedViewMut, kernels};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape, TensorData};
use burn_flex::FlexTensor;

use crate::backend::{BurnTensor, engine_error, physical};

/// The element types Flex stores that the strided kernels take.
trait FlexElement: Element + Copy {
    fn storage(t: &FlexTensor) -> &[Self];
    fn storage_mut(t: &mut FlexTensor) -> &mut [Self];
    fn of_f64(x: f64) -> Self;
    fn data(v: Vec<Self>, shape: Shape) -> TensorData;
}

macro_rules! flex_element {
    ($t:ty) => {
        impl FlexElement for $t {
            fn storage(t: &FlexTensor) -> &[Self] {
                t.storage::<$t>()
            }
            fn storage_mut(t: &mut FlexTensor) -> &mut [Self] {
                t.storage_mut::<$t>()
            }
            fn of_f64(x: f64) -> Self {
                x as $t
            }
            fn data(v: Vec<Self>, shape: Shape) -> TensorData {
                TensorData::new(v, shape)
            }
        }
    };
}
flex_element!(f32);
flex_element!(f64);

/// The primitive of `t` as a Flex tensor, when `B` is Flex.
fn as_flex<B: Backend>(t: &BurnTensor<B>) -> Option<&FlexTensor> {
    (t.primitive() as &dyn Any).downcast_ref::<FlexTensor>()
}

/// A Flex tensor as `B`'s primitive (`B` is Flex whenever this is called).
fn into_primitive<B: Backend>(t: FlexTensor) -> Result<FloatTensor<B>> {
    (Box::new(t) as Box<dyn Any>)
        .downcast::<FloatTensor<B>>()
        .map(|b| *b)
        .map_err(|_| engine_error("a Flex tensor handed to a non-Flex backend"))
}

/// A read-only strided view of a Flex tensor of logical shape `dims` (a logical scalar may be
/// stored with shape `[1]`).
fn view<'a, T: FlexElement>(t: &'a FlexTensor, dims: &[usize]) -> Result<StridedView<'a, T>> {
    let layout = t.layout();
    let strides: &[isize] = if dims.is_empty() {
        &[]
    } else {
        layout.strides()
    };
    StridedView::new(T::storage(t), dims, strides, layout.start_offset())
}

/// Runs `kernel` to update C: into a fresh zeroed buffer when `fresh` (β is zero: C is not
/// read), otherwise in place in C's buffer (made dense and unique first).
fn update<T: FlexElement, B: Backend>(
    c: &mut BurnTensor<B>,
    fresh: bool,
    kernel: impl FnOnce(&mut StridedViewMut<'_, T>) -> Result<()>,
) -> Result<()> {
    let dims = c.dims().to_vec();
    let shape = physical(&dims);
    let out = if fresh {
        let mut buf = vec![T::of_f64(0.0); shape.num_elements()];
        kernel(&mut StridedViewMut::row_major(&mut buf, &dims)?)?;
        FlexTensor::from_data(T::data(buf, shape))
    } else {
        let Some(current) = as_flex(c) else {
            return Err(engine_error("expected a Flex tensor"));
        };
        let mut dense = if current.layout().is_dense_unique_storage() {
            current.clone()
        } else {
            current.to_contiguous()
        };
        let layout = dense.layout().clone();
        let strides: Vec<isize> = if dims.is_empty() {
            Vec::new()
        } else {
            layout.strides().to_vec()
        };
        // Copy-on-write: copies the buffer when another handle still shares it.
        let buf = T::storage_mut(&mut dense);
        kernel(&mut StridedViewMut::new(
            buf,
            &dims,
            &strides,
            layout.start_offset(),
        )?)?;
        dense
    };
    c.set_primitive(into_primitive::<B>(out)?);
    Ok(())
}

/// Flex primitives of `c`, `a` (and `b`) when `B` is Flex and all have dtype `dc`.
fn operands<'a, B: Backend>(
    c: &BurnTensor<B>,
    x: &[&'a BurnTensor<B>],
) -> Option<Vec<&'a FlexTensor>> {
    as_flex(c)?;
    x.iter().map(|t| as_flex(t)).collect()
}

/// `C ← β·C + α·P_p(A)` on Flex; `Ok(false)` when `B` is not Flex. A has C's dtype `dc`.
pub(crate) fn add<B: Backend>(
    c: &mut BurnTensor<B>,
    a: &BurnTensor<B>,
    p: &Permutation,
    alpha: f64,
    beta: f64,
    dc: DType,
) -> Result<bool> {
    let Some(x) = operands(c, &[a]) else {
        return Ok(false);
    };
    let a_dims = a.dims().to_vec();
    fn go<T: FlexElement, B: Backend>(
        c: &mut BurnTensor<B>,
        a: &FlexTensor,
        a_dims: &[usize],
        p: &Permutation,
        alpha: f64,
        beta: f64,
    ) -> Result<()> {
        let av = view::<T>(a, a_dims)?;
        let fresh = beta == 0.0;
        let (alpha, beta) = (T::of_f64(alpha), T::of_f64(beta));
        update::<T, B>(c, fresh, |cv| {
            kernels::add(cv, &av, p, Conj::No, alpha, beta)
        })
    }
    if dc.is_double() {
        go::<f64, B>(c, x[0], &a_dims, p, alpha, beta)?;
    } else {
        go::<f32, B>(c, x[0], &a_dims, p, alpha, beta)?;
    }
    Ok(true)
}

/// `C ← β·C + α·P_p(tr A)` on Flex; `Ok(false)` when `B` is not Flex. A has C's dtype.
pub(crate) fn trace<B: Backend>(
    c: &mut BurnTensor<B>,
    a: &BurnTensor<B>,
    spec: &TraceSpec,
    alpha: f64,
    beta: f64,
    dc: DType,
) -> Result<bool> {
    let Some(x) = operands(c, &[a]) else {
        return Ok(false);
    };
    let a_dims = a.dims().to_vec();
    fn go<T: FlexElement, B: Backend>(
        c: &mut BurnTensor<B>,
        a: &FlexTensor,
        a_dims: &[usize],
        spec: &TraceSpec,
        alpha: f64,
        beta: f64,
    ) -> Result<()> {
        let av = view::<T>(a, a_dims)?;
        let fresh = beta == 0.0;
        let (alpha, beta) = (T::of_f64(alpha), T::of_f64(beta));
        update::<T, B>(c, fresh, |cv| {
            kernels::trace(cv, &av, spec, Conj::No, alpha, beta)
        })
    }
    if dc.is_double() {
        go::<f64, B>(c, x[0], &a_dims, spec, alpha, beta)?;
    } else {
        go::<f32, B>(c, x[0], &a_dims, spec, alpha, beta)?;
    }
    Ok(true)
}

/// `C ← β·C + α·P(A·B)` on Flex; `Ok(false)` when `B` is not Flex. A and B have C's dtype.
#[allow(clippy::too_many_arguments)]
pub(crate) fn contract<B: Backend>(
    c: &mut BurnTensor<B>,
    a: &BurnTensor<B>,
    b: &BurnTensor<B>,
    spec: &ContractSpec,
    alpha: f64,
    beta: f64,
    dc: DType,
) -> Result<bool> {
    let Some(x) = operands(c, &[a, b]) else {
        return Ok(false);
    };
    let dims = [a.dims().to_vec(), b.dims().to_vec()];
    #[allow(clippy::too_many_arguments)]
    fn go<T: FlexElement, B: Backend>(
        c: &mut BurnTensor<B>,
        a: &FlexTensor,
        b: &FlexTensor,
        dims: &[Vec<usize>; 2],
        spec: &ContractSpec,
        alpha: f64,
        beta: f64,
    ) -> Result<()> {
        let (av, bv) = (view::<T>(a, &dims[0])?, view::<T>(b, &dims[1])?);
        let fresh = beta == 0.0;
        let (alpha, beta) = (T::of_f64(alpha), T::of_f64(beta));
        update::<T, B>(c, fresh, |cv| {
            kernels::contract(cv, &av, &bv, spec, Conj::No, Conj::No, alpha, beta)
        })
    }
    if dc.is_double() {
        go::<f64, B>(c, x[0], x[1], &dims, spec, alpha, beta)?;
    } else {
        go::<f32, B>(c, x[0], x[1], &dims, spec, alpha, beta)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use adrules_core::{Backend as _, ContractSpec, DType, HostTensor};
    use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};
    use burn_backend::ops::FloatTensorOps;
    use burn_flex::Flex;
    #[allow(deprecated)]
    use burn_ndarray::NdArray;

    use super::*;
    use crate::BurnBackend;

    fn flex(h: &HostTensor) -> BurnTensor<Flex> {
        BurnBackend::<Flex>::new(Default::default())
            .from_host(h.clone())
            .unwrap()
    }

    #[test]
    fn only_flex_takes_the_fast_path() {
        let mut rng = Rng::seed(1);
        let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        let (a, b) = (
            rng.tensor(&[2, 3], DType::F64),
            rng.tensor(&[3, 4], DType::F64),
        );
        let fb = BurnBackend::<Flex>::new(Default::default());
        let mut c = fb.zeros(&[2, 4], DType::F64).unwrap();
        assert!(contract(&mut c, &flex(&a), &flex(&b), &spec, 1.0, 0.0, DType::F64).unwrap());
        #[allow(deprecated)]
        let nb = BurnBackend::<NdArray>::new(Default::default());
        let mut c = nb.zeros(&[2, 4], DType::F64).unwrap();
        let (a, b) = (nb.from_host(a).unwrap(), nb.from_host(b).unwrap());
        assert!(!contract(&mut c, &a, &b, &spec, 1.0, 0.0, DType::F64).unwrap());
    }

    #[test]
    fn strided_and_broadcast_operands_are_read_in_place() {
        let mut rng = Rng::seed(2);
        let spec = ContractSpec::from_labels("ijk", "kjl", "li").unwrap();
        let ha = rng.tensor(&[4, 3, 2], DType::F64); // stored as (k, j, i), read permuted
        let a = Flex::float_permute(flex(&ha).into_primitive(), &[2, 1, 0]);
        assert!(!a.is_contiguous(), "a transposed view, not a copy");
        let b = Flex::float_expand(
            flex(&rng.tensor(&[1, 3, 5], DType::F64)).into_primitive(),
            Shape::new([4, 3, 5]),
        );
        let (a, b) = (BurnTensor::new(a), BurnTensor::new(b));
        let fb = BurnBackend::<Flex>::new(Default::default());
        let mut c = fb.zeros(&[5, 2], DType::F64).unwrap();
        assert!(contract(&mut c, &a, &b, &spec, 2.0, 0.0, DType::F64).unwrap());

        let r = ReferenceBackend;
        let (ra, rb) = (
            r.from_host(fb.to_host(&a).unwrap()).unwrap(),
            r.from_host(fb.to_host(&b).unwrap()).unwrap(),
        );
        let mut rc = r.zeros(&[5, 2], DType::F64).unwrap();
        r.contract(
            &mut rc,
            &ra,
            &rb,
            &spec,
            Conj::No,
            Conj::No,
            2.0.into(),
            0.0.into(),
        )
        .unwrap();
        Tolerance::for_dtype(DType::F64)
            .check(
                &Value::Tensor(fb.to_host(&c).unwrap()),
                &Value::Tensor((*rc).clone()),
                "contraction of a transposed and a broadcast operand",
            )
            .unwrap();
    }

    #[test]
    fn an_update_in_place_never_changes_another_handle() {
        let mut rng = Rng::seed(3);
        let (ha, hc) = (
            rng.tensor(&[3, 2], DType::F32),
            rng.tensor(&[2, 3], DType::F32),
        );
        let fb = BurnBackend::<Flex>::new(Default::default());
        let mut c = flex(&hc);
        let kept = c.clone();
        let p = Permutation::new(&[1, 0]).unwrap();
        assert!(add(&mut c, &flex(&ha), &p, 1.0, 1.0, DType::F32).unwrap());
        assert_eq!(
            fb.to_host(&kept).unwrap(),
            hc,
            "the other handle is unchanged"
        );
        let got = fb.to_host(&c).unwrap();
        let (a, c0, g) = (
            ha.as_slice::<f32>().unwrap(),
            hc.as_slice::<f32>().unwrap(),
            got.as_slice::<f32>().unwrap(),
        );
        for i in 0..2 {
            for j in 0..3 {
                assert_eq!(g[i * 3 + j], c0[i * 3 + j] + a[j * 2 + i]);
            }
        }
    }
}
