//! The finite-output policy: **a rule given finite inputs returns finite outputs or a typed
//! error.**
//!
//! IEEE arithmetic turns an overflow into `±∞` and then, at the next `∞ − ∞` or `0·∞`, into
//! NaN, silently. Every entry point of this crate that returns fresh tensors checks them:
//!
//! | where | outputs checked | inputs that make a non-finite output legitimate |
//! |---|---|---|
//! | decompositions and their rules ([`crate::linalg`]) | factors, cotangents, tangents, second order | none: non-finite inputs are refused up front |
//! | pairwise pullbacks and pushforwards ([`crate::rules`]) | every fresh cotangent (`a_bar`, `b_bar`, `c_bar`, `alpha_bar`…) and tangent (`c_dot`) | a non-finite `c_bar`, operand or tangent |
//! | networks ([`crate::network`]) | the value of `execute`, `execute_with`, `rrule`, `frule`, the cotangents of a [`NetworkPullback`](crate::network::NetworkPullback), the tangent of `frule`, the outputs of `hvp` | a non-finite operand, tangent or cotangent |
//! | implicit functions ([`crate::implicit`]) | the tangents `dy`, the cotangents `x̄`, the HVP outputs | a non-finite `dx` or `ȳ`, or a failed solve under [`OnFailure::NanFill`](crate::implicit::OnFailure) |
//!
//! When an output is not finite and every input it was computed from is, the result is
//! beyond the range of the dtype (an overflow), and the call returns
//! [`Error::NonFinite`] naming the output instead of the `∞` or NaN. A NaN or `∞` *given* to a
//! contraction propagates by IEEE arithmetic, as in BLAS and numpy, and is not an error.
//!
//! The in-place primitives (`Backend::contract`, `ContractOp::apply`, the primal of an
//! `rrule` or `frule` written into the caller's C, `NetworkPlan::execute_into`) are the BLAS
//! layer: they write the caller's buffer with IEEE arithmetic and are not checked, since a
//! check after the write could not give the buffer back. Call
//! [`Backend::all_finite`] on the result where it matters.
//!
//! The check is one pass over each output ([`Backend::all_finite`]);
//! the inputs are scanned only when an output fails it.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;

/// The error for output `arg`, not finite although its inputs are.
pub(crate) fn overflow(arg: &str, dtype: impl std::fmt::Display) -> Error {
    Error::NonFinite {
        arg: arg.to_string(),
        reason: format!(
            "an entry is NaN or infinite although every input is finite: the result is beyond \
             the range of {dtype}"
        ),
    }
}

/// Checks the fresh output `t` (named by `arg`) computed from `inputs`: `Ok` when it is finite
/// or when some input is not (IEEE propagation), else [`Error::NonFinite`].
///
/// # Errors
/// [`Error::NonFinite`]; the backend's errors.
pub(crate) fn check<B: Backend>(
    be: &B,
    arg: impl FnOnce() -> String,
    t: &B::Tensor,
    inputs: &[&B::Tensor],
) -> Result<()> {
    if be.all_finite(t)? {
        return Ok(());
    }
    for x in inputs {
        if !be.all_finite(x)? {
            return Ok(());
        }
    }
    Err(overflow(&arg(), be.dtype(t)))
}

/// `true` when every element of a host tensor is finite.
pub(crate) fn host_all_finite(h: &HostTensor) -> bool {
    host_first_non_finite(h).is_none()
}

/// The row-major index of the first entry of `h` that is not finite.
pub(crate) fn host_first_non_finite(h: &HostTensor) -> Option<usize> {
    use crate::host::HostData;
    match h.data() {
        HostData::F32(v) => v.iter().position(|x| !x.is_finite()),
        HostData::F64(v) => v.iter().position(|x| !x.is_finite()),
        HostData::C32(v) => v.iter().position(|x| !x.is_finite()),
        HostData::C64(v) => v.iter().position(|x| !x.is_finite()),
    }
}

/// [`check`] for host tensors: `inputs_finite` is asked only when `h` is not finite.
///
/// # Errors
/// [`Error::NonFinite`] naming `arg`.
pub(crate) fn check_host(
    arg: impl FnOnce() -> String,
    h: &HostTensor,
    inputs_finite: impl FnOnce() -> bool,
) -> Result<()> {
    if host_all_finite(h) || !inputs_finite() {
        return Ok(());
    }
    Err(overflow(&arg(), h.dtype()))
}
