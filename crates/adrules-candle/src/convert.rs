//! Conversions between adrules' vocabulary and candle's: dtypes, errors, devices.

use adrules_core::{DType, Error};
use candle_core::backprop::GradStore;
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

/// An adrules error as the `std::error::Error` candle can carry and hand back: its message
/// (also as `Debug`, which candle prints) and the typed error for [`adrules_error`].
struct Typed(Error);

impl std::fmt::Display for Typed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for Typed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Typed {}

/// An adrules error as a candle error, the message kept and the typed error recoverable with
/// [`adrules_error`]. Every differentiable op of this crate returns its errors this way, so
/// code returning `candle_core::Result` writes `?` on them; use this function for the
/// `adrules_core::Result`s of [`CandleBackend`](crate::CandleBackend) and the core.
///
/// Candle's error type is foreign, so `From<adrules_core::Error>` cannot be implemented
/// here; and candle's [`Error::wrap`](candle_core::Error::wrap) keeps only a `Display`, from
/// which the typed error cannot be recovered. This function uses candle's
/// `WrappedContext` variant instead (message, then the context line
/// `"adrules error (typed: adrules_candle::adrules_error)"`), with a backtrace when
/// `RUST_BACKTRACE` asks for one, as candle's own errors.
pub fn to_candle(e: Error) -> candle_core::Error {
    candle_core::Error::WrappedContext {
        wrapped: Box::new(Typed(e)),
        context: "adrules error (typed: adrules_candle::adrules_error)".into(),
    }
    .bt()
}

/// The typed adrules error inside a candle error, if it carries one: an error of this crate
/// ([`to_candle`]), possibly behind candle's `Context`, `WithPath` and `WithBacktrace`
/// wrappers, or an `adrules_core::Error` the caller attached with candle's
/// [`Context`](candle_core::Context) trait. `None` for candle's own errors and for an error
/// wrapped by [`candle_core::Error::wrap`] (which keeps only the message).
pub fn adrules_error(e: &candle_core::Error) -> Option<&Error> {
    use candle_core::Error as E;
    match e {
        E::WrappedContext { wrapped, .. } | E::Cuda(wrapped) => typed_in(wrapped.as_ref()),
        E::Context { inner, .. } | E::WithPath { inner, .. } | E::WithBacktrace { inner, .. } => {
            adrules_error(inner)
        }
        _ => None,
    }
}

/// The first typed adrules error in the source chain of `e`.
fn typed_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Error> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<Typed>() {
            return Some(&t.0);
        }
        if let Some(t) = e.downcast_ref::<Error>() {
            return Some(t);
        }
        if let Some(t) = e
            .downcast_ref::<candle_core::Error>()
            .and_then(adrules_error)
        {
            return Some(t);
        }
        next = e.source();
    }
    None
}

/// A candle error as an adrules error: the typed error it carries ([`adrules_error`]), else
/// [`Error::Backend`] with candle's message.
pub fn from_candle(e: candle_core::Error) -> Error {
    adrules_error(&e)
        .cloned()
        .unwrap_or_else(|| Error::Backend {
            backend: NAME.into(),
            message: e.to_string(),
        })
}

/// Runs candle's backward pass from `loss` (as [`Tensor::backward`]) and returns its
/// failure as the typed adrules error: a failure inside one of this crate's pullbacks (for
/// example a cotangent of the wrong shape or dtype) is the [`Error`] the pullback raised,
/// candle's own failures are [`Error::Backend`]. Candle carries errors out of its backward
/// pass, so nothing is lost when `loss.backward()?` is used instead; this is the same pass
/// with the error typed.
///
/// # Errors
/// As above.
pub fn try_backward(loss: &Tensor) -> Result<GradStore, Error> {
    loss.backward().map_err(from_candle)
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
