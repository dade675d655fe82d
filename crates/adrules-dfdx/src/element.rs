//! [`DfdxElement`]: the element types the adapter serves (`f32`, `f64`).

use adrules_core::HostData;
use dfdx::dtypes::Dtype;

/// An element type of dfdx tensors that the shared rules run on: `f32` or `f64`.
///
/// dfdx has no complex dtype, and its `f16` / `AMP<f16>` types have no kernel in the strided
/// backend, so the set is closed (sealed).
pub trait DfdxElement: Dtype + adrules_strided::Element + private::Sealed {}

impl DfdxElement for f32 {}
impl DfdxElement for f64 {}

pub(crate) mod private {
    use super::HostData;
    use crate::backend::{DfdxTensor, Ranked};

    /// The hidden part of [`DfdxElement`](super::DfdxElement).
    pub trait Sealed: Sized + dfdx::dtypes::Unit {
        /// The elements of `h` when it holds this type (moved out, no copy).
        fn vec_from_host(h: HostData) -> Option<Vec<Self>>;
        /// The [`DfdxTensor`] variant of this type.
        fn into_tensor(r: Ranked<Self>) -> DfdxTensor;
        /// The tensor inside `t` when `t` holds this type.
        fn ranked(t: &DfdxTensor) -> Option<&Ranked<Self>>;
    }

    impl Sealed for f32 {
        fn vec_from_host(h: HostData) -> Option<Vec<f32>> {
            match h {
                HostData::F32(v) => Some(v),
                _ => None,
            }
        }
        fn into_tensor(r: Ranked<f32>) -> DfdxTensor {
            DfdxTensor::F32(r)
        }
        fn ranked(t: &DfdxTensor) -> Option<&Ranked<f32>> {
            match t {
                DfdxTensor::F32(r) => Some(r),
                _ => None,
            }
        }
    }

    impl Sealed for f64 {
        fn vec_from_host(h: HostData) -> Option<Vec<f64>> {
            match h {
                HostData::F64(v) => Some(v),
                _ => None,
            }
        }
        fn into_tensor(r: Ranked<f64>) -> DfdxTensor {
            DfdxTensor::F64(r)
        }
        fn ranked(t: &DfdxTensor) -> Option<&Ranked<f64>> {
            match t {
                DfdxTensor::F64(r) => Some(r),
                _ => None,
            }
        }
    }
}
