//! [`Tensor`]: the owned, dtype-dynamic, copy-on-write tensor handle of the backend.

use std::sync::Arc;

use ndarray::{Array, ArrayD, Dimension, IxDyn};

use adrules_core::{
    Conj, DType, Dims, DynScalar, Error, HostData, HostTensor, Permutation, Result,
};

use crate::dispatch::with_type;
use crate::element::Element;
use crate::hook;
use crate::kernels;
use crate::layout::{self, Strides};
use crate::storage::{self, Storage};
use crate::view::{self, StridedView, StridedViewMut};

/// An owned tensor: a shared buffer ([`Storage`]) and a strided layout.
///
/// - **Layout**: element `(i_0, …, i_{r-1})` is at position `offset + Σ_k i_k·strides[k]` of
///   the buffer. Strides are in elements and may be negative (reversed axes) or zero
///   (broadcast, read-only); new tensors are row-major. Any rank (0 included) and
///   zero-size dimensions are allowed.
/// - **Cheap clones**: `clone` shares the buffer (an `Arc`), as do [`permuted`] and
///   [`strided`].
/// - **Copy-on-write**: writing through [`view_mut`] (and every backend update of C) first
///   makes the buffer unique: when another handle shares it, or the layout addresses an
///   element twice, the elements are copied into a fresh dense buffer that keeps the axis
///   order of the strides. Other handles never see a change.
///
/// [`permuted`]: Tensor::permuted
/// [`strided`]: Tensor::strided
/// [`view_mut`]: Tensor::view_mut
#[derive(Clone)]
pub struct Tensor {
    storage: Storage,
    dims: Dims,
    strides: Strides,
    offset: usize,
}

/// A dropped tensor whose buffer nobody else shares gives it back for reuse: to the
/// [`BufferPool`](crate::BufferPool) whose scope encloses the drop on this thread, else (a
/// large buffer) to the process-wide [`cache`](crate::cache). A shared buffer stays with its
/// other handles.
impl Drop for Tensor {
    fn drop(&mut self) {
        if self.storage.is_unique() && !self.storage.is_empty() {
            let s = std::mem::replace(&mut self.storage, Storage::placeholder());
            crate::hook::give_dropped(s);
        }
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("dtype", &self.dtype())
            .field("dims", &self.dims.as_slice())
            .field("strides", &self.strides.as_slice())
            .field("offset", &self.offset)
            .field("shared", &!self.storage.is_unique())
            .finish()
    }
}

fn dtype_error(arg: &str, expected: DType, actual: DType) -> Error {
    Error::DTypeMismatch {
        arg: arg.into(),
        expected: expected.to_string(),
        actual,
    }
}

impl Tensor {
    pub(crate) fn from_storage(
        storage: Storage,
        dims: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Tensor> {
        let offset = view::checked_offset(dims, strides, offset, storage.len())?;
        Ok(Tensor {
            storage,
            dims: dims.iter().copied().collect(),
            strides: strides.iter().copied().collect(),
            offset,
        })
    }

    /// A row-major tensor that takes ownership of `data` (no copy).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (argument `"data"`) when `data.len()` is not the product of
    /// `dims`.
    pub fn from_vec<T: Element>(dims: &[usize], data: Vec<T>) -> Result<Tensor> {
        let n = layout::numel(dims)?;
        if n != data.len() {
            return Err(Error::shape("data", &[n], &[data.len()]));
        }
        Self::from_storage(
            T::into_storage(Arc::new(data)),
            dims,
            &layout::row_major_strides(dims),
            0,
        )
    }

    /// A row-major tensor whose elements are unspecified (zeros, or the values of an earlier
    /// use of a recycled buffer; never uninitialised memory): for outputs written with
    /// `β = 0`. Costs no zero-fill when the buffer comes from the [`cache`](crate::cache) or a
    /// [`BufferPool`](crate::BufferPool) scope.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `"dims"`) when the element count overflows.
    pub fn empty(dims: &[usize], dtype: DType) -> Result<Tensor> {
        let n = layout::numel(dims)?;
        let storage = with_type!(dtype, T => <T as crate::element::private::Sealed>::into_storage(
            hook::shared::<T>(n, false)?
        ));
        Self::from_storage(storage, dims, &layout::row_major_strides(dims), 0)
    }

    /// A row-major tensor of zeros.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `"dims"`) when the element count overflows.
    pub fn zeros(dims: &[usize], dtype: DType) -> Result<Tensor> {
        let n = layout::numel(dims)?;
        Self::from_storage(
            hook::zeros(dtype, n)?,
            dims,
            &layout::row_major_strides(dims),
            0,
        )
    }

    /// A tensor over a buffer (a `Vec<T>` is moved in, an `Arc<Vec<T>>` is shared) with an
    /// explicit layout: element `i` at `offset + Σ_k i_k·strides[k]`.
    ///
    /// A layout with a zero-size dimension reaches no element, so any offset and strides are
    /// accepted for it (column 1 of a `[0, 3]` tensor, say, as numpy allows); its
    /// [`offset`](Tensor::offset) is then 0.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"strides"`) when `strides.len() != dims.len()`;
    /// [`Error::InvalidArgument`] (argument `"strides"`) when an element the layout reaches
    /// lies outside the buffer, or (argument `"dims"`) when the element count overflows.
    pub fn from_parts<T: Element>(
        data: impl Into<Arc<Vec<T>>>,
        dims: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Tensor> {
        Self::from_storage(T::into_storage(data.into()), dims, strides, offset)
    }

    /// A tensor from an owned ndarray array, moving its buffer (no copy for any layout,
    /// negative strides included).
    pub fn from_ndarray<T: Element, D: Dimension>(a: Array<T, D>) -> Tensor {
        let dims: Dims = a.shape().iter().copied().collect();
        let strides: Strides = a.strides().iter().copied().collect();
        let (vec, offset) = a.into_raw_vec_and_offset();
        let offset = offset.unwrap_or(0);
        // ndarray guarantees that its layout addresses its own buffer; an empty array may
        // report no offset, which is 0 here.
        Tensor {
            storage: T::into_storage(Arc::new(vec)),
            dims,
            strides,
            offset,
        }
    }

    /// The elements as an owned ndarray array: moves the buffer when this handle is its only
    /// owner and the layout is dense row-major, else copies.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (argument `"tensor"`) when the dtype is not `T`.
    pub fn into_ndarray<T: Element>(self) -> Result<ArrayD<T>> {
        let dims = self.dims.clone();
        let data = self.into_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(&dims), data)
            .map_err(|e| Error::invalid("tensor", e.to_string()))
    }

    /// A tensor from host data (the vector is moved in, no copy).
    pub fn from_host(h: HostTensor) -> Tensor {
        let (dims, data) = h.into_parts();
        let strides = layout::row_major_strides(&dims);
        let storage = match data {
            HostData::F32(v) => Storage::F32(Arc::new(v)),
            HostData::F64(v) => Storage::F64(Arc::new(v)),
            HostData::C32(v) => Storage::C32(Arc::new(v)),
            HostData::C64(v) => Storage::C64(Arc::new(v)),
        };
        Tensor {
            storage,
            dims,
            strides,
            offset: 0,
        }
    }

    /// Row-major host data: moves the buffer when this handle is its only owner and the
    /// layout is dense row-major, else copies.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the element count does not fit in memory.
    pub fn into_host(self) -> Result<HostTensor> {
        let dims = self.dims.clone();
        let data = with_type!(self.dtype(), T => <T as adrules_core::HostElement>::wrap(self.into_vec::<T>()?));
        HostTensor::new(&dims, data)
    }

    /// Row-major host data (a copy).
    ///
    /// # Errors
    /// As [`Tensor::into_host`].
    pub fn to_host(&self) -> Result<HostTensor> {
        self.clone().into_host()
    }

    /// The elements in row-major order, moving the buffer when possible (see
    /// [`Tensor::into_host`]).
    fn into_vec<T: Element>(self) -> Result<Vec<T>> {
        let n = layout::numel(&self.dims)?;
        let buf = T::buffer(&self.storage)
            .ok_or_else(|| dtype_error("tensor", T::DTYPE, self.dtype()))?
            .clone();
        if self.offset == 0 && buf.len() == n && layout::is_row_major(&self.dims, &self.strides) {
            drop(self);
            // The buffer holds exactly the row-major elements: move it out, or copy it when
            // another handle still shares it.
            return match Arc::try_unwrap(buf) {
                Ok(v) => Ok(v),
                Err(shared) => storage::copied(&shared),
            };
        }
        drop(buf);
        self.to_vec::<T>()
    }

    /// The shape.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Position of element `(0, …, 0)` in the buffer (0 for a tensor with a zero-size
    /// dimension, which has no element).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (the product of the dimensions).
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// `true` when a dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.dims.contains(&0)
    }

    /// The shared buffer.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The shared buffer, giving up this handle.
    pub(crate) fn into_storage(mut self) -> Storage {
        std::mem::replace(&mut self.storage, Storage::placeholder())
    }

    /// `true` when `self` and `other` share one buffer.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        self.storage.ptr_eq(&other.storage)
    }

    /// A typed read-only view.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (argument `"tensor"`) when the dtype is not `T`.
    pub fn view<T: Element>(&self) -> Result<StridedView<'_, T>> {
        let buf = T::buffer(&self.storage)
            .ok_or_else(|| dtype_error("tensor", T::DTYPE, self.dtype()))?;
        // SAFETY: the layout was checked against this buffer when the tensor was built, and
        // the buffer is immutable while borrowed through `&self`.
        Ok(unsafe {
            StridedView::from_raw(buf.as_ptr().add(self.offset), &self.dims, &self.strides)
        })
    }

    /// A typed writable view, after making the buffer unique (copy-on-write, see the type's
    /// docs): other handles that shared the buffer keep their values.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (argument `"tensor"`) when the dtype is not `T`.
    pub fn view_mut<T: Element>(&mut self) -> Result<StridedViewMut<'_, T>> {
        self.writable::<T>(true)
    }

    /// As [`Tensor::view_mut`]; with `preserve = false` the values may be lost (a shared
    /// buffer is replaced by zeros instead of copied), for outputs that are overwritten.
    pub(crate) fn writable<T: Element>(&mut self, preserve: bool) -> Result<StridedViewMut<'_, T>> {
        if T::DTYPE != self.dtype() {
            return Err(dtype_error("tensor", T::DTYPE, self.dtype()));
        }
        if !self.storage.is_unique() || !layout::is_non_overlapping(&self.dims, &self.strides) {
            let strides = layout::dense_like(&self.dims, &self.strides);
            let mut buf = hook::shared::<T>(layout::numel(&self.dims)?, !preserve)?;
            if preserve {
                let data = Arc::get_mut(&mut buf)
                    .ok_or_else(|| Error::invalid("tensor", "a fresh buffer is shared"))?;
                let src = self.view::<T>()?;
                // SAFETY: `data` is a fresh dense buffer for the shape under `strides`.
                let mut dst =
                    unsafe { StridedViewMut::from_raw(data.as_mut_ptr(), &self.dims, &strides) };
                kernels::add(
                    &mut dst,
                    &src,
                    &Permutation::identity(src.rank()),
                    Conj::No,
                    T::one(),
                    T::zero(),
                )?;
            }
            self.storage = T::into_storage(buf);
            self.strides = strides;
            self.offset = 0;
        }
        let buf = T::buffer_mut(&mut self.storage)
            .and_then(Arc::get_mut)
            .ok_or_else(|| Error::invalid("tensor", "copy-on-write left a shared buffer"))?;
        // SAFETY: the buffer is unique and exclusively borrowed, the layout is in bounds and
        // addresses distinct elements.
        Ok(unsafe {
            StridedViewMut::from_raw(buf.as_mut_ptr().add(self.offset), &self.dims, &self.strides)
        })
    }

    /// The same elements with permuted axes, sharing the buffer: axis `m` of the result is
    /// axis `p[m]` of `self`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] (argument `"permutation"`) when `p` has the wrong length.
    pub fn permuted(&self, p: &Permutation) -> Result<Tensor> {
        if p.len() != self.rank() {
            return Err(Error::rank("permutation", self.rank(), p.len()));
        }
        Ok(Tensor {
            storage: self.storage.clone(),
            dims: p.apply(&self.dims),
            strides: p.apply(&self.strides),
            offset: self.offset,
        })
    }

    /// Another strided view of the same buffer (shared, no copy): element `i` at
    /// `offset + Σ_k i_k·strides[k]` of the buffer (positions relative to the buffer, not to
    /// this tensor's layout). Views with a zero-size dimension are accepted at any offset
    /// (see [`Tensor::from_parts`]).
    ///
    /// # Errors
    /// As [`Tensor::from_parts`].
    pub fn strided(&self, dims: &[usize], strides: &[isize], offset: usize) -> Result<Tensor> {
        Self::from_storage(self.storage.clone(), dims, strides, offset)
    }

    /// The elements in row-major order (a copy).
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (argument `"tensor"`) when the dtype is not `T`;
    /// [`Error::InvalidArgument`] when the element count does not fit in memory.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.view::<T>()?.to_vec()
    }

    /// The single value of a rank-0 tensor.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] (argument `"tensor"`) when the rank is not 0.
    pub fn scalar(&self) -> Result<DynScalar> {
        if self.rank() != 0 {
            return Err(Error::rank("tensor", 0, self.rank()));
        }
        Ok(with_type!(self.dtype(), T => {
            let v = self.view::<T>()?;
            // SAFETY: a rank-0 view addresses exactly one element.
            adrules_core::Scalar::to_dyn(unsafe { *v.as_ptr() })
        }))
    }
}

impl From<HostTensor> for Tensor {
    fn from(h: HostTensor) -> Tensor {
        Tensor::from_host(h)
    }
}

impl<T: Element, D: Dimension> From<Array<T, D>> for Tensor {
    fn from(a: Array<T, D>) -> Tensor {
        Tensor::from_ndarray(a)
    }
}
