//! Errors across the dfdx boundary.
//!
//! Forward: dfdx's `CpuError` becomes [`Error::Backend`] ([`from_dfdx`]).
//!
//! Backward: dfdx's backward closures return `Result<(), CpuError>`, and `CpuError` is a
//! `Copy` enum with two message-less variants (`OutOfMemory`, `WrongNumElements`), so it
//! cannot carry our message. Each op takes the core's
//! [`BackwardReporter`](adrules_core::error::backward::BackwardReporter) of the thread that
//! records it; an adrules failure inside its backward closure then
//! - returns `CpuError::WrongNumElements` to dfdx, which stops the backward pass and hands it
//!   to the caller of dfdx's `try_backward` (dfdx's `backward()` unwraps it, i.e. panics
//!   *outside* our closure, as for any dfdx failure);
//! - reports the typed [`Error`] to that reporter, to be read with [`take_backward_errors`]
//!   (the core's, re-exported) on the thread that built the graph. [`try_backward`] does
//!   both steps: it returns our typed error, message kept.
//!
//! A `CpuError` raised by dfdx itself inside our closure (an allocation failure) is passed
//! through unchanged.
//!
//! [`take_backward_errors`]: adrules_core::take_backward_errors

use adrules_core::error::backward::BackwardReporter;
use adrules_core::{Error, take_backward_errors};
use dfdx::prelude::{Backward, Gradients, OwnedTape, Rank0, Tensor};
use dfdx::tensor::{Cpu, CpuError};

/// The backend name used in errors.
pub(crate) const NAME: &str = "dfdx";

/// A dfdx error as [`Error::Backend`] (backend `"dfdx"`, dfdx's message).
pub fn from_dfdx(e: CpuError) -> Error {
    Error::Backend {
        backend: NAME.into(),
        message: e.to_string(),
    }
}

/// Runs dfdx's backward pass from a scalar loss and returns the gradients, with an adrules
/// failure inside the pass as its typed [`Error`] (message kept) and dfdx's own failures as
/// [`Error::Backend`].
///
/// Errors left unread on this thread by earlier passes (see
/// [`take_backward_errors`](adrules_core::take_backward_errors)) are discarded first, so they
/// are never reported for this one.
///
/// # Errors
/// The typed error of the first backward closure that failed (dfdx stops the pass there).
pub fn try_backward<E>(
    loss: Tensor<Rank0, E, Cpu, OwnedTape<E, Cpu>>,
) -> Result<Gradients<E, Cpu>, Error>
where
    E: dfdx::dtypes::Unit,
{
    take_backward_errors();
    loss.try_backward().map_err(|e| {
        take_backward_errors()
            .into_iter()
            .next()
            .unwrap_or_else(|| from_dfdx(e))
    })
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
/// docs): our error goes to `reporter` and dfdx gets `CpuError::WrongNumElements`.
pub(crate) fn report(
    reporter: BackwardReporter,
    r: Result<(), BackwardError>,
) -> Result<(), CpuError> {
    match r {
        Ok(()) => Ok(()),
        Err(BackwardError::Dfdx(e)) => Err(e),
        Err(BackwardError::Ours(e)) => {
            reporter.report(e);
            Err(CpuError::WrongNumElements)
        }
    }
}
