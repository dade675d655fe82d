//! [`Element`]: the four element types a [`Tensor`](crate::Tensor) stores, and the link from
//! each of them to its storage variant and to faer's GEMM.

use std::sync::Arc;

use adrules_core::scalar::Promote;
use adrules_core::{Complex32, Complex64, HostElement, Scalar};

use crate::storage::Storage;

/// An element type of the strided backend: `f32`, `f64`, [`Complex32`] or [`Complex64`].
///
/// Sealed: the set of types is fixed by [`adrules_core::DType`].
pub trait Element: Scalar + HostElement + Promote<Self> + private::Sealed {}

impl Element for f32 {}
impl Element for f64 {}
impl Element for Complex32 {}
impl Element for Complex64 {}

/// Lossless widening to `Complex64` (exact for every element type).
#[inline(always)]
pub(crate) fn to_c64<T: Scalar>(x: T) -> Complex64 {
    use adrules_core::RealScalar;
    Complex64::new(x.re().to_f64(), x.im().to_f64())
}

/// Converts between any two element types: lossless promotion where
/// `TA::DTYPE.promotes_to(TC::DTYPE)`, else projection (real part, rounding). The detour
/// through `Complex64` folds away (`f32 → f64 → f32` is the identity for the optimiser), so
/// this is as fast as a direct conversion.
#[inline(always)]
pub(crate) fn convert<TA: Scalar, TC: Scalar>(x: TA) -> TC {
    TC::from_c64_unchecked(to_c64(x))
}

pub(crate) mod private {
    use super::*;

    /// A matrix operand of a GEMM: pointer to element (0, 0), shape and strides in elements.
    #[derive(Clone, Copy)]
    pub struct MatrixRef<T> {
        pub ptr: *const T,
        pub rows: usize,
        pub cols: usize,
        pub row_stride: isize,
        pub col_stride: isize,
        pub conj: bool,
    }

    /// The hidden part of [`Element`](super::Element).
    pub trait Sealed: Sized {
        /// Wraps a shared buffer.
        fn into_storage(buffer: Arc<Vec<Self>>) -> Storage;
        /// The buffer, when `storage` holds this type.
        fn buffer(storage: &Storage) -> Option<&Arc<Vec<Self>>>;
        /// The buffer, mutably, when `storage` holds this type.
        fn buffer_mut(storage: &mut Storage) -> Option<&mut Arc<Vec<Self>>>;
        /// `dst ← α·op(lhs)·op(rhs) (+ dst when accumulate)` with faer's GEMM.
        ///
        /// # Safety
        /// The three matrices are valid for their shapes and strides, `dst` does not overlap
        /// itself nor the inputs, and the inner dimensions agree.
        #[allow(clippy::too_many_arguments)]
        unsafe fn gemm(
            dst: *mut Self,
            dst_row_stride: isize,
            dst_col_stride: isize,
            accumulate: bool,
            lhs: MatrixRef<Self>,
            rhs: MatrixRef<Self>,
            alpha: Self,
            parallel: bool,
        );
    }

    macro_rules! sealed {
        ($t:ty, $v:ident) => {
            impl Sealed for $t {
                fn into_storage(buffer: Arc<Vec<Self>>) -> Storage {
                    Storage::$v(buffer)
                }
                fn buffer(storage: &Storage) -> Option<&Arc<Vec<Self>>> {
                    match storage {
                        Storage::$v(b) => Some(b),
                        _ => None,
                    }
                }
                fn buffer_mut(storage: &mut Storage) -> Option<&mut Arc<Vec<Self>>> {
                    match storage {
                        Storage::$v(b) => Some(b),
                        _ => None,
                    }
                }
                unsafe fn gemm(
                    dst: *mut Self,
                    dst_row_stride: isize,
                    dst_col_stride: isize,
                    accumulate: bool,
                    lhs: MatrixRef<Self>,
                    rhs: MatrixRef<Self>,
                    alpha: Self,
                    parallel: bool,
                ) {
                    use faer::{Accum, Conj, MatMut, MatRef, Par};
                    let conj = |c: bool| if c { Conj::Yes } else { Conj::No };
                    // SAFETY: the caller guarantees valid, non-overlapping matrices.
                    unsafe {
                        let d = MatMut::from_raw_parts_mut(
                            dst,
                            lhs.rows,
                            rhs.cols,
                            dst_row_stride,
                            dst_col_stride,
                        );
                        let l = MatRef::from_raw_parts(
                            lhs.ptr,
                            lhs.rows,
                            lhs.cols,
                            lhs.row_stride,
                            lhs.col_stride,
                        );
                        let r = MatRef::from_raw_parts(
                            rhs.ptr,
                            rhs.rows,
                            rhs.cols,
                            rhs.row_stride,
                            rhs.col_stride,
                        );
                        faer::linalg::matmul::matmul_with_conj(
                            d,
                            if accumulate {
                                Accum::Add
                            } else {
                                Accum::Replace
                            },
                            l,
                            conj(lhs.conj),
                            r,
                            conj(rhs.conj),
                            alpha,
                            if parallel { Par::rayon(0) } else { Par::Seq },
                        );
                    }
                }
            }
        };
    }
    sealed!(f32, F32);
    sealed!(f64, F64);
    sealed!(Complex32, C32);
    sealed!(Complex64, C64);
}
