//! Tensor storage and the one place where the backend allocates element buffers.
//!
//! Every buffer the backend creates (a new tensor, the copy made by copy-on-write, the
//! temporaries of a contraction) comes from [`zeroed`], through the allocation hook
//! ([`hook::shared`](crate::hook::shared) for tensor storage,
//! [`hook::Scratch`](crate::hook::Scratch) for kernel scratch space), which takes the buffer
//! from the [`BufferPool`](crate::BufferPool) installed on the thread, if any. This module
//! knows nothing of pools or hooks.

use std::sync::Arc;

use adrules_core::{Complex32, Complex64, DType, Error, Result};

use crate::element::Element;

/// The shared buffer of a [`Tensor`](crate::Tensor): one reference-counted `Vec` of one of
/// the four element types. Cloning shares the buffer.
#[derive(Clone)]
pub enum Storage {
    /// `f32` elements
    F32(Arc<Vec<f32>>),
    /// `f64` elements
    F64(Arc<Vec<f64>>),
    /// `Complex32` elements
    C32(Arc<Vec<Complex32>>),
    /// `Complex64` elements
    C64(Arc<Vec<Complex64>>),
}

macro_rules! each {
    ($s:expr, $b:ident => $e:expr) => {
        match $s {
            Storage::F32($b) => $e,
            Storage::F64($b) => $e,
            Storage::C32($b) => $e,
            Storage::C64($b) => $e,
        }
    };
}

impl Storage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::F32(_) => DType::F32,
            Storage::F64(_) => DType::F64,
            Storage::C32(_) => DType::C32,
            Storage::C64(_) => DType::C64,
        }
    }

    /// Number of elements in the buffer (not necessarily all reachable by the layout).
    pub fn len(&self) -> usize {
        each!(self, b => b.len())
    }

    /// `true` for an empty buffer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `true` when both handles share one buffer.
    pub fn ptr_eq(&self, other: &Storage) -> bool {
        match (self, other) {
            (Storage::F32(a), Storage::F32(b)) => Arc::ptr_eq(a, b),
            (Storage::F64(a), Storage::F64(b)) => Arc::ptr_eq(a, b),
            (Storage::C32(a), Storage::C32(b)) => Arc::ptr_eq(a, b),
            (Storage::C64(a), Storage::C64(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// An empty `f32` buffer, left behind where a buffer is moved out of a handle: one
    /// shared empty buffer, so that leaving it allocates nothing.
    pub(crate) fn placeholder() -> Storage {
        static EMPTY: std::sync::OnceLock<Arc<Vec<f32>>> = std::sync::OnceLock::new();
        Storage::F32(EMPTY.get_or_init(|| Arc::new(Vec::new())).clone())
    }

    /// `true` when no other handle shares the buffer.
    pub fn is_unique(&self) -> bool {
        each!(self, b => Arc::strong_count(b) == 1 && Arc::weak_count(b) == 0)
    }
}

/// A copy of `x` in a new vector, without the zero-fill of [`zeroed`] (every element is
/// written by the copy).
///
/// # Errors
/// [`Error::InvalidArgument`] (argument `"dims"`) when the allocation fails.
pub(crate) fn copied<T: Element>(x: &[T]) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(x.len()).map_err(|_| {
        Error::invalid(
            "dims",
            format!("cannot allocate {} elements of {}", x.len(), T::DTYPE),
        )
    })?;
    v.extend_from_slice(x);
    Ok(v)
}

/// Allocates `len` elements set to zero: the single allocation point of the backend (tensor
/// storage, copy-on-write copies, temporaries) but for [`copied`], the host copies of shared
/// buffers.
///
/// Zero-filled memory comes from `alloc_zeroed` (calloc), so large buffers cost no extra pass:
/// the operating system hands out zeroed pages.
///
/// # Errors
/// [`Error::InvalidArgument`] (argument `"dims"`) when `len` elements overflow `isize::MAX`
/// bytes or the allocator cannot provide them.
pub(crate) fn zeroed<T: Element>(len: usize) -> Result<Vec<T>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| {
        Error::invalid(
            "dims",
            format!("{len} elements of {} do not fit in memory", T::DTYPE),
        )
    })?;
    // SAFETY: `layout` has a non-zero size. All-zero bits are the value 0 of f32, f64 and of
    // num_complex's `#[repr(C)]` complex types, so the elements are initialised.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<T>();
        if ptr.is_null() {
            return Err(Error::invalid(
                "dims",
                format!(
                    "cannot allocate {len} elements of {} ({} bytes)",
                    T::DTYPE,
                    layout.size()
                ),
            ));
        }
        Ok(Vec::from_raw_parts(ptr, len, len))
    }
}
