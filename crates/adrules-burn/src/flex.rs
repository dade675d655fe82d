//! The Flex fast path: adrules-strided's kernels on Flex's own storage.
//!
//! When the inner backend is burn's Flex CPU backend, [`BurnBackend`](crate::BurnBackend)
//! runs its permuted add, generalized trace (diagonals, traces, sums) and (batched)
//! contraction through `adrules_strided::kernels::primitive` (one entry for every primitive
//! call), and the trace's adjoint through `kernels::add_to_diagonal` (in place in A), instead
//! of burn ops: operands are read in place as strided
//! views of the Flex buffers (Flex layouts carry strides, possibly negative or zero, and an
//! offset, which the views take as they are: no copy for transposed, sliced or broadcast
//! operands), and the contraction runs on faer's GEMM. The output is a fresh row-major buffer
//! handed to Flex without copying (`β = 0`), or C's own buffer updated in place when C is
//! uniquely owned and dense (copied first otherwise, so no other handle sees the update).
//!
//! Detection is by type (`B::FloatTensorPrimitive` is `FlexTensor`), so every other backend
//! takes the generic path of burn ops.

use std::any::Any;

use adrules_core::rules::Primitive;
use adrules_core::{Conj, DType, DynScalar, Result, TraceSpec};
use adrules_strided::{Element, StridedView, StridedViewMut, kernels};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorData};
use burn_flex::FlexTensor;

use crate::convert::{engine_error, physical, unless};
use crate::handle::BurnTensor;

/// The element types Flex stores that the strided kernels take (f32, f64).
trait FlexElement: Element + burn_backend::Element + bytemuck::Pod {}
impl<T: Element + burn_backend::Element + bytemuck::Pod> FlexElement for T {}

/// The primitive of `t` as a Flex tensor, when `B` is Flex.
pub(crate) fn as_flex<B: Backend>(t: &BurnTensor<B>) -> Option<&FlexTensor> {
    (t.primitive() as &dyn Any).downcast_ref::<FlexTensor>()
}

/// A Flex tensor as `B`'s primitive (`B` is Flex whenever this is called).
pub(crate) fn into_primitive<B: Backend>(t: FlexTensor) -> Result<FloatTensor<B>> {
    (Box::new(t) as Box<dyn Any>)
        .downcast::<FloatTensor<B>>()
        .map(|b| *b)
        .map_err(|_| engine_error("a Flex tensor handed to a non-Flex backend"))
}

/// A read-only strided view of a Flex tensor of logical shape `dims` (a logical scalar may be
/// stored with shape `[1]`).
fn view<'a, T: FlexElement, B: Backend>(x: &'a BurnTensor<B>) -> Result<StridedView<'a, T>> {
    let (t, dims) = (
        as_flex(x).ok_or_else(|| engine_error("not a Flex tensor"))?,
        x.dims(),
    );
    let layout = t.layout();
    // A scalar stored with shape `[1]` has no strides.
    let strides = layout.strides().get(..dims.len()).unwrap_or(&[]);
    StridedView::new(t.storage::<T>(), dims, strides, layout.start_offset())
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
        let mut buf = vec![T::from_elem(0.0); shape.num_elements()];
        kernel(&mut StridedViewMut::row_major(&mut buf, &dims)?)?;
        FlexTensor::from_data(TensorData::new(buf, shape))
    } else {
        let current = as_flex(c).ok_or_else(|| engine_error("expected a Flex tensor"))?;
        let dense = current.layout().is_dense_unique_storage();
        let mut dense = unless(dense, current.clone(), |c| c.to_contiguous());
        let layout = dense.layout().clone();
        let strides = layout.strides().get(..dims.len()).unwrap_or(&[]);
        let offset = layout.start_offset();
        // Copy-on-write: copies the buffer when another handle still shares it.
        let buf = dense.storage_mut::<T>();
        kernel(&mut StridedViewMut::new(buf, &dims, strides, offset)?)?;
        dense
    };
    c.primitive = into_primitive::<B>(out)?;
    Ok(())
}

/// What runs on the Flex views.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kernel<'a> {
    /// `C ← β·C + α·op(operands)`, any primitive call ([`kernels::primitive`])
    Primitive(&'a Primitive),
    /// `A ← A + α·C` on the diagonal of A (the trace's adjoint; the operand is C, the updated
    /// tensor A, and β is 1)
    AddToDiagonal(&'a TraceSpec, f64),
}

/// Runs `kernel` on Flex with the operands `x` in the kernel's order, all of C's dtype `dc`
/// (shapes already checked; a primitive's α and β real); `Ok(false)` when `B` is not Flex.
pub(crate) fn run<B: Backend>(
    c: &mut BurnTensor<B>,
    x: &[&BurnTensor<B>],
    kernel: Kernel<'_>,
    dc: DType,
) -> Result<bool> {
    if as_flex(c).is_none() || x.iter().any(|t| as_flex(t).is_none()) {
        return Ok(false);
    }
    if dc.is_double() {
        typed::<f64, B>(c, x, kernel)?;
    } else {
        typed::<f32, B>(c, x, kernel)?;
    }
    Ok(true)
}

/// [`run`] in element type `T`.
fn typed<T: FlexElement, B: Backend>(
    c: &mut BurnTensor<B>,
    x: &[&BurnTensor<B>],
    kernel: Kernel<'_>,
) -> Result<()> {
    let views = x.iter().map(|t| view::<T, B>(t));
    let views = views.collect::<Result<Vec<_>>>()?;
    let fresh = matches!(kernel, Kernel::Primitive(p) if p.beta().is_zero());
    update::<T, B>(c, fresh, |cv| match (kernel, views.as_slice()) {
        (Kernel::Primitive(p), _) => kernels::primitive(cv, &views, p),
        (Kernel::AddToDiagonal(spec, alpha), [c]) => {
            kernels::add_to_diagonal(cv, c, spec, Conj::No, DynScalar::from(alpha))
        }
        _ => Err(engine_error(
            "add_to_diagonal called with the wrong operand count",
        )),
    })
}
