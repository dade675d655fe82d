//! Errors across the dfdx boundary.
//!
//! Forward: dfdx's `CpuError` becomes [`Error::Backend`] ([`from_dfdx`]).
//!
//! Backward: dfdx's backward closures return `Result<(), CpuError>`, and `CpuError` is a
//! `Copy` enum with two message-less variants (`OutOfMemory`, `WrongNumElements`), so it
//! cannot carry our message. An adrules failure inside a backward closure therefore
//! - returns `CpuError::WrongNumElements` to dfdx, which stops the backward pass and hands it
//!   to the caller of `try_backward` (dfdx's `backward()` unwraps it, i.e. panics *outside*
//!   our closure, as for any dfdx failure);
//! - stores the typed [`Error`] in a per-thread slot (dfdx runs the tape synchronously on
//!   the calling thread), read by [`take_backward_error`]. [`try_backward`] does both steps:
//!   it returns our typed error, message kept.
//!
//! A `CpuError` raised by dfdx itself inside our closure (an allocation failure) is passed
//! through unchanged.

use std::cell::RefCell;

use adrules_core::Error;
use dfdx::prelude::{Backward, Gradients, OwnedTape, Rank0, Tensor};
use dfdx::tensor::{Cpu, CpuError};

/// The backend name used in errors.
pub(crate) const NAME: &str = "dfdx";

thread_local! {
    static BACKWARD_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// A dfdx error as [`Error::Backend`] (backend `"dfdx"`, dfdx's message).
pub fn from_dfdx(e: CpuError) -> Error {
    Error::Backend {
        backend: NAME.into(),
        message: e.to_string(),
    }
}

/// The typed error of the most recent adrules failure inside a dfdx backward pass on this
/// thread, if it has not been taken yet (see the module docs). Call it after dfdx's own
/// `try_backward` returned `CpuError::WrongNumElements`; [`try_backward`] does it for you.
pub fn take_backward_error() -> Option<Error> {
    BACKWARD_ERROR.with(|slot| slot.borrow_mut().take())
}

/// Runs dfdx's backward pass from a scalar loss and returns the gradients, with adrules
/// failures inside the pass as their typed [`Error`] (message kept) and dfdx's own failures
/// as [`Error::Backend`].
///
/// # Errors
/// The error of the first backward closure that failed.
pub fn try_backward<E>(
    loss: Tensor<Rank0, E, Cpu, OwnedTape<E, Cpu>>,
) -> Result<Gradients<E, Cpu>, Error>
where
    E: dfdx::dtypes::Unit,
{
    // A stale error left by an earlier pass whose caller never took it must not be reported
    // for this one.
    BACKWARD_ERROR.with(|slot| slot.borrow_mut().take());
    loss.try_backward()
        .map_err(|e| take_backward_error().unwrap_or_else(|| from_dfdx(e)))
}

/// The error type inside our backward closures: dfdx's own, passed through, or ours.
#[derive(Debug)]
pub(crate) enum BackwardError {
    Dfdx(CpuError),
    Ours(Error),
}

impl From<CpuError> for BackwardError {
    fn from(e: CpuError) -> Self {
        BackwardError::Dfdx(e)
    }
}

impl From<Error> for BackwardError {
    fn from(e: Error) -> Self {
        BackwardError::Ours(e)
    }
}

/// Converts the result of a backward closure body into what dfdx expects (see the module
/// docs): our error is stored for [`take_backward_error`] and reported as
/// `CpuError::WrongNumElements`.
pub(crate) fn report(r: Result<(), BackwardError>) -> Result<(), CpuError> {
    match r {
        Ok(()) => Ok(()),
        Err(BackwardError::Dfdx(e)) => Err(e),
        Err(BackwardError::Ours(e)) => {
            BACKWARD_ERROR.with(|slot| *slot.borrow_mut() = Some(e));
            Err(CpuError::WrongNumElements)
        }
    }
}
