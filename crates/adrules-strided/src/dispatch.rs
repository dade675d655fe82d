//! Run-time dtype dispatch to the typed kernels.

/// Binds the type alias `$T` to the element type of `$dtype` and evaluates `$body`.
macro_rules! with_type {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            adrules_core::DType::F32 => {
                type $T = f32;
                $body
            }
            adrules_core::DType::F64 => {
                type $T = f64;
                $body
            }
            adrules_core::DType::C32 => {
                type $T = adrules_core::Complex32;
                $body
            }
            adrules_core::DType::C64 => {
                type $T = adrules_core::Complex64;
                $body
            }
        }
    };
}

pub(crate) use with_type;
