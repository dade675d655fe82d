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

    /// `Sealed` for the element type `$t`, stored as `HostData::$v` and `DfdxTensor::$v`.
    macro_rules! sealed {
        ($t:ty, $v:ident) => {
            impl Sealed for $t {
                fn vec_from_host(h: HostData) -> Option<Vec<$t>> {
                    match h {
                        HostData::$v(v) => Some(v),
                        _ => None,
                    }
                }
                fn into_tensor(r: Ranked<$t>) -> DfdxTensor {
                    DfdxTensor::$v(r)
                }
                fn ranked(t: &DfdxTensor) -> Option<&Ranked<$t>> {
                    match t {
                        DfdxTensor::$v(r) => Some(r),
                        _ => None,
                    }
                }
            }
        };
    }
    sealed!(f32, F32);
    sealed!(f64, F64);
}
