//! Conversions between adrules' vocabulary and candle's: dtypes, errors, devices.

use adrules_core::{DType, Error};
use candle_core::{DType as CDType, Device, Tensor};

/// The backend name used in errors.
pub(crate) const NAME: &str = "candle";

/// The candle dtype of an adrules dtype.
///
/// # Errors
/// [`Error::Unsupported`] for complex dtypes (candle has none).
pub fn candle_dtype(dtype: DType) -> Result<CDType, Error> {
    match dtype {
        DType::F32 => Ok(CDType::F32),
        DType::F64 => Ok(CDType::F64),
        d => Err(unsupported(d)),
    }
}

/// [`Error::Unsupported`] for an adrules dtype candle cannot store.
pub(crate) fn unsupported(dtype: DType) -> Error {
    Error::Unsupported {
        backend: NAME.into(),
        what: format!("dtype {dtype} (candle has no complex tensors; f32 and f64 are served)"),
    }
}

/// The adrules dtype of a candle dtype.
///
/// # Errors
/// [`Error::Unsupported`] naming `arg` for every candle dtype but `f32` and `f64`.
pub fn adrules_dtype(dtype: CDType, arg: &str) -> Result<DType, Error> {
    match dtype {
        CDType::F32 => Ok(DType::F32),
        CDType::F64 => Ok(DType::F64),
        d => Err(Error::Unsupported {
            backend: NAME.into(),
            what: format!("dtype {d:?} of `{arg}` (the rules serve f32 and f64)"),
        }),
    }
}

/// The adrules dtype of a tensor (see [`adrules_dtype`]).
pub(crate) fn tensor_dtype(t: &Tensor, arg: &str) -> Result<DType, Error> {
    adrules_dtype(t.dtype(), arg)
}

/// A candle error as [`Error::Backend`].
pub fn from_candle(e: candle_core::Error) -> Error {
    Error::Backend {
        backend: NAME.into(),
        message: e.to_string(),
    }
}

/// An adrules error as a candle error (for candle's backward pass and for callers whose
/// functions return `candle_core::Result`); the message is kept.
pub fn to_candle(e: Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// A short description of a device for error messages.
pub(crate) fn describe(d: &Device) -> String {
    format!("{:?}", d.location())
}

/// Checks that `t` lives on `device`.
///
/// # Errors
/// [`Error::DeviceMismatch`] naming `arg`.
pub(crate) fn check_device(t: &Tensor, device: &Device, arg: &str) -> Result<(), Error> {
    if t.device().same_device(device) {
        Ok(())
    } else {
        Err(Error::DeviceMismatch {
            arg: arg.into(),
            expected: describe(device),
            actual: describe(t.device()),
        })
    }
}
