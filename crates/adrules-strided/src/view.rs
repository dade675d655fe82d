//! [`StridedView`] and [`StridedViewMut`]: borrowed, typed, arbitrarily strided views, and
//! their zero-copy interop with ndarray.

use std::marker::PhantomData;

use ndarray::{
    ArrayView, ArrayViewD, ArrayViewMut, ArrayViewMutD, Axis, Dimension, IxDyn, ShapeBuilder,
};
use smallvec::SmallVec;

use adrules_core::{Dims, Error, Permutation, Result};

use crate::element::Element;
use crate::kernels;
use crate::layout::{self, Strides};

/// Moves `ptr` (the address of element `(0, …, 0)`) to the lowest address the layout reaches
/// and returns it with the absolute strides; `None` for an empty layout.
fn lowest<T>(ptr: *const T, dims: &[usize], strides: &[isize]) -> Option<(*const T, Strides)> {
    if dims.contains(&0) {
        return None;
    }
    let mut p = ptr;
    for (&d, &s) in dims.iter().zip(strides) {
        if s < 0 {
            // SAFETY: the view's layout keeps every reachable element inside one allocation.
            p = unsafe { p.offset((d as isize - 1) * s) };
        }
    }
    Some((p, strides.iter().map(|s| s.abs()).collect()))
}

/// Checks the layout `(dims, strides, offset)` against a buffer of `len` elements and returns
/// the position of element `(0, …, 0)` to address the view from: `offset` itself, or 0 for a
/// layout with a zero-size dimension, which reads no element whatever its offset (numpy
/// accepts `np.zeros((0, 3))[:, 1]` the same way).
///
/// # Errors
/// As [`StridedView::new`].
pub(crate) fn checked_offset(
    dims: &[usize],
    strides: &[isize],
    offset: usize,
    len: usize,
) -> Result<usize> {
    let offset = if dims.contains(&0) { 0 } else { offset };
    layout::check_bounds(dims, strides, offset, len)?;
    Ok(offset)
}

fn ndarray_shape(dims: &[usize], abs: &[isize]) -> ndarray::StrideShape<IxDyn> {
    IxDyn(dims).strides(IxDyn(&abs.iter().map(|&s| s as usize).collect::<Vec<_>>()))
}

fn permute_check(rank: usize, p: &Permutation) -> Result<()> {
    if p.len() != rank {
        return Err(Error::rank("permutation", rank, p.len()));
    }
    Ok(())
}

/// A borrowed, read-only view of elements of type `T` with arbitrary (also negative or zero)
/// strides.
///
/// Element `(i_0, …, i_{r-1})` is at `as_ptr() + Σ_k i_k·strides[k]` (in elements). Views are
/// cheap to clone and never own data.
pub struct StridedView<'a, T> {
    ptr: *const T,
    dims: Dims,
    strides: Strides,
    _marker: PhantomData<&'a [T]>,
}

// SAFETY: a view is a shared borrow of `T`s.
unsafe impl<T: Sync> Send for StridedView<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for StridedView<'_, T> {}

impl<T> Clone for StridedView<'_, T> {
    fn clone(&self) -> Self {
        StridedView {
            ptr: self.ptr,
            dims: self.dims.clone(),
            strides: self.strides.clone(),
            _marker: PhantomData,
        }
    }
}

impl<T: Element> std::fmt::Debug for StridedView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StridedView")
            .field("dtype", &T::DTYPE)
            .field("dims", &self.dims.as_slice())
            .field("strides", &self.strides.as_slice())
            .finish()
    }
}

impl<'a, T: Element> StridedView<'a, T> {
    /// A view of `data` with shape `dims`, `strides` (in elements) and the position `offset`
    /// of element `(0, …, 0)`. A view with a zero-size dimension reaches no element and is
    /// accepted at any offset and strides (its pointer is then the start of `data`).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"strides"`) when `strides` and `dims` differ in
    /// length; [`Error::InvalidArgument`] (argument `"strides"`) when an element the layout
    /// reaches lies outside `data`, or (argument `"dims"`) when the element count overflows.
    pub fn new(data: &'a [T], dims: &[usize], strides: &[isize], offset: usize) -> Result<Self> {
        let offset = checked_offset(dims, strides, offset, data.len())?;
        // SAFETY: bounds checked just above (offset ≤ len, so the pointer stays in or one past
        // the allocation).
        Ok(unsafe { Self::from_raw(data.as_ptr().add(offset), dims, strides) })
    }

    /// A row-major view of all of `data`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (argument `"data"`) when `data.len()` is not the product of
    /// `dims`.
    pub fn row_major(data: &'a [T], dims: &[usize]) -> Result<Self> {
        let n = layout::numel(dims)?;
        if n != data.len() {
            return Err(Error::shape("data", &[n], &[data.len()]));
        }
        Self::new(data, dims, &layout::row_major_strides(dims), 0)
    }

    /// A view from its raw parts.
    ///
    /// # Safety
    /// Every element reachable from `ptr` through `dims` and `strides` is initialised, lies in
    /// one allocation, and is not written to for `'a`.
    pub unsafe fn from_raw(ptr: *const T, dims: &[usize], strides: &[isize]) -> Self {
        StridedView {
            ptr,
            dims: dims.iter().copied().collect(),
            strides: strides.iter().copied().collect(),
            _marker: PhantomData,
        }
    }

    /// The shape.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// `true` when a dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.dims.contains(&0)
    }

    /// Address of element `(0, …, 0)` (dangling or one past the end for an empty view).
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The element at `index`, or `None` when the index has the wrong length or is out of
    /// range.
    pub fn get(&self, index: &[usize]) -> Option<T> {
        if index.len() != self.rank() || index.iter().zip(&self.dims).any(|(i, d)| i >= d) {
            return None;
        }
        let off: isize = index
            .iter()
            .zip(&self.strides)
            .map(|(&i, &s)| i as isize * s)
            .sum();
        // SAFETY: the index is in range, so the element is inside the view.
        Some(unsafe { *self.ptr.offset(off) })
    }

    /// The same elements with permuted axes (zero-copy): axis `m` of the result is axis
    /// `p[m]` of `self`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] (argument `"permutation"`) when `p` has the wrong length.
    pub fn permuted(&self, p: &Permutation) -> Result<StridedView<'a, T>> {
        permute_check(self.rank(), p)?;
        // SAFETY: the same elements, reordered axes.
        Ok(unsafe { Self::from_raw(self.ptr, &p.apply(&self.dims), &p.apply(&self.strides)) })
    }

    /// The elements in row-major order (a copy).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the element count does not fit in memory (a huge
    /// broadcast view).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        kernels::copy_to_vec(self)
    }

    /// The same elements as an ndarray view (zero-copy; negative strides are kept as
    /// inverted axes).
    pub fn to_ndarray(&self) -> ArrayViewD<'a, T> {
        match lowest(self.ptr, &self.dims, &self.strides) {
            None => {
                // SAFETY: an empty view addresses no element; the pointer is non-null and
                // aligned (it comes from a slice or an ndarray).
                unsafe { ArrayView::from_shape_ptr(IxDyn(&self.dims), self.ptr) }
            }
            Some((p, abs)) => {
                // SAFETY: the same elements as `self`, addressed from the lowest address
                // with non-negative strides; then the negative axes are inverted back.
                let mut v =
                    unsafe { ArrayView::from_shape_ptr(ndarray_shape(&self.dims, &abs), p) };
                for (k, &s) in self.strides.iter().enumerate() {
                    if s < 0 {
                        v.invert_axis(Axis(k));
                    }
                }
                v
            }
        }
    }
}

impl<'a, T: Element, D: Dimension> From<ArrayView<'a, T, D>> for StridedView<'a, T> {
    /// Zero-copy: the view keeps ndarray's pointer, shape and (possibly negative) strides.
    fn from(v: ArrayView<'a, T, D>) -> Self {
        // SAFETY: ndarray guarantees the layout is valid for 'a.
        unsafe { StridedView::from_raw(v.as_ptr(), v.shape(), v.strides()) }
    }
}

/// A borrowed, writable view of elements of type `T` with arbitrary (also negative) strides.
///
/// Distinct indices always address distinct elements (constructors reject overlapping
/// strides), so kernels may write every element from any thread.
pub struct StridedViewMut<'a, T> {
    ptr: *mut T,
    dims: Dims,
    strides: Strides,
    _marker: PhantomData<&'a mut [T]>,
}

// SAFETY: a mutable view is an exclusive borrow of `T`s.
unsafe impl<T: Send> Send for StridedViewMut<'_, T> {}
// SAFETY: shared access to a mutable view only reads.
unsafe impl<T: Sync> Sync for StridedViewMut<'_, T> {}

impl<T: Element> std::fmt::Debug for StridedViewMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StridedViewMut")
            .field("dtype", &T::DTYPE)
            .field("dims", &self.dims.as_slice())
            .field("strides", &self.strides.as_slice())
            .finish()
    }
}

impl<'a, T: Element> StridedViewMut<'a, T> {
    /// A writable view of `data` with shape `dims`, `strides` and the position `offset` of
    /// element `(0, …, 0)`; any offset is accepted for a view with a zero-size dimension, as
    /// in [`StridedView::new`].
    ///
    /// # Errors
    /// As [`StridedView::new`], plus [`Error::InvalidArgument`] (argument `"strides"`) when
    /// two indices could address the same element.
    pub fn new(
        data: &'a mut [T],
        dims: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Self> {
        let offset = checked_offset(dims, strides, offset, data.len())?;
        if !layout::is_non_overlapping(dims, strides) {
            return Err(Error::invalid(
                "strides",
                format!(
                    "strides {strides:?} of dims {dims:?} make distinct indices overlap; a \
                     writable view needs distinct elements"
                ),
            ));
        }
        // SAFETY: bounds and non-overlap checked above.
        Ok(unsafe { Self::from_raw(data.as_mut_ptr().add(offset), dims, strides) })
    }

    /// A row-major writable view of all of `data`.
    ///
    /// # Errors
    /// As [`StridedView::row_major`].
    pub fn row_major(data: &'a mut [T], dims: &[usize]) -> Result<Self> {
        let n = layout::numel(dims)?;
        if n != data.len() {
            return Err(Error::shape("data", &[n], &[data.len()]));
        }
        Self::new(data, dims, &layout::row_major_strides(dims), 0)
    }

    /// A writable view from its raw parts.
    ///
    /// # Safety
    /// Every element reachable from `ptr` is initialised and lies in one allocation, distinct
    /// indices address distinct elements, and nothing else accesses them for `'a`.
    pub unsafe fn from_raw(ptr: *mut T, dims: &[usize], strides: &[isize]) -> Self {
        StridedViewMut {
            ptr,
            dims: dims.iter().copied().collect(),
            strides: strides.iter().copied().collect(),
            _marker: PhantomData,
        }
    }

    /// The shape.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// `true` when a dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.dims.contains(&0)
    }

    /// Address of element `(0, …, 0)`.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }

    /// A read-only view of the same elements.
    pub fn as_view(&self) -> StridedView<'_, T> {
        // SAFETY: a shared reborrow of our elements.
        unsafe { StridedView::from_raw(self.ptr, &self.dims, &self.strides) }
    }

    /// A shorter-lived writable view of the same elements.
    pub fn reborrow(&mut self) -> StridedViewMut<'_, T> {
        // SAFETY: an exclusive reborrow of our elements.
        unsafe { StridedViewMut::from_raw(self.ptr, &self.dims, &self.strides) }
    }

    /// The same elements with permuted axes (zero-copy): axis `m` of the result is axis
    /// `p[m]` of `self`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] (argument `"permutation"`) when `p` has the wrong length.
    pub fn into_permuted(self, p: &Permutation) -> Result<StridedViewMut<'a, T>> {
        permute_check(self.rank(), p)?;
        // SAFETY: the same elements, reordered axes.
        Ok(unsafe { Self::from_raw(self.ptr, &p.apply(&self.dims), &p.apply(&self.strides)) })
    }

    /// The same elements as a mutable ndarray view (zero-copy).
    pub fn into_ndarray(self) -> ArrayViewMutD<'a, T> {
        match lowest(self.ptr.cast_const(), &self.dims, &self.strides) {
            None => {
                // SAFETY: an empty view addresses no element.
                unsafe { ArrayViewMut::from_shape_ptr(IxDyn(&self.dims), self.ptr) }
            }
            Some((p, abs)) => {
                // SAFETY: as in `StridedView::to_ndarray`; the elements are distinct and
                // exclusively borrowed for 'a.
                let mut v = unsafe {
                    ArrayViewMut::from_shape_ptr(ndarray_shape(&self.dims, &abs), p.cast_mut())
                };
                for (k, &s) in self.strides.iter().enumerate() {
                    if s < 0 {
                        v.invert_axis(Axis(k));
                    }
                }
                v
            }
        }
    }
}

impl<'a, T: Element, D: Dimension> From<ArrayViewMut<'a, T, D>> for StridedViewMut<'a, T> {
    /// Zero-copy. ndarray's mutable views never address one element twice, which is the
    /// invariant of [`StridedViewMut`].
    fn from(mut v: ArrayViewMut<'a, T, D>) -> Self {
        let dims: SmallVec<[usize; 8]> = v.shape().iter().copied().collect();
        let strides: Strides = v.strides().iter().copied().collect();
        // SAFETY: ndarray guarantees a valid, non-aliased layout exclusively borrowed for 'a.
        unsafe { StridedViewMut::from_raw(v.as_mut_ptr(), &dims, &strides) }
    }
}
