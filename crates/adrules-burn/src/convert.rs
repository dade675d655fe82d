//! Conversions between burn's and adrules' vocabularies: dtypes, shapes, errors.

use std::fmt;

use adrules_core::{DType, Error, Result};
use burn_backend::{FloatDType, Shape};

/// Name of this backend in errors.
pub(crate) const NAME: &str = "burn";

/// Our dtype of a burn dtype, when the rules support it (f32, f64).
pub(crate) fn dtype_of(d: burn_backend::DType) -> Option<DType> {
    match d {
        burn_backend::DType::F32 => Some(DType::F32),
        burn_backend::DType::F64 => Some(DType::F64),
        _ => None,
    }
}

/// burn's float dtype of ours (f32 or f64; callers have rejected complex dtypes).
pub(crate) fn float_dtype(d: DType) -> FloatDType {
    if d.is_double() {
        FloatDType::F64
    } else {
        FloatDType::F32
    }
}

/// An engine error as ours.
pub(crate) fn engine_error(e: impl fmt::Display) -> Error {
    let (backend, message) = (NAME.into(), e.to_string());
    Error::Backend { backend, message }
}

/// [`Error::Unsupported`] of this backend.
pub(crate) fn unsupported(what: impl Into<String>) -> Error {
    let (backend, what) = (NAME.into(), what.into());
    Error::Unsupported { backend, what }
}

/// Checks that a burn dtype is f32 or f64 (argument `arg`).
///
/// # Errors
/// [`Error::Unsupported`] naming `arg` for any other dtype.
pub(crate) fn check_dtype(arg: &str, d: burn_backend::DType) -> Result<DType> {
    let why = || {
        format!(
            "dtype {} for `{arg}` (the rules run on f32 and f64)",
            d.name()
        )
    };
    dtype_of(d).ok_or_else(|| unsupported(why()))
}

/// burn's shape of `dims`.
pub(crate) fn shape_of(dims: &[usize]) -> Shape {
    Shape::from(dims.to_vec())
}

/// The primitive shape of logical dims: the dims, or `[1]` for a scalar (burn's convention).
pub(crate) fn physical(dims: &[usize]) -> Shape {
    if dims.is_empty() {
        Shape::new([1])
    } else {
        shape_of(dims)
    }
}

/// `t`, or `f(t)` unless `keep` (the shortcuts that spare the engine a no-op).
pub(crate) fn unless<T>(keep: bool, t: T, f: impl FnOnce(T) -> T) -> T {
    if keep { t } else { f(t) }
}
