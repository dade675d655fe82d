//! Rules of `tensorscalar`, scalar extraction: the single value of a rank-0 tensor.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::{HostData, HostTensor};
use crate::scalar::{DType, DynScalar};

/// The value of the rank-0 tensor `t` and its pullback.
///
/// Rule (TensorOperations.jl v5.8.0, the `rrule` of `tensorscalar` in
/// [`ext/TensorOperationsChainRulesCoreExt.jl`](https://github.com/Jutho/TensorOperations.jl/blob/v5.8.0/ext/TensorOperationsChainRulesCoreExt.jl)):
/// the cotangent of `t` is a rank-0 tensor holding `c̄`, projected onto `t`'s dtype (the real
/// part for a real `t`). Pushforward: the tangent is the value of the tangent tensor.
///
/// # Errors
/// [`Error::RankMismatch`] naming `"tensor"` when `t` is not rank 0.
pub fn tensorscalar_rrule<B: Backend>(
    be: &B,
    t: &B::Tensor,
) -> Result<(DynScalar, TensorScalarPullback<B>)> {
    let v = be.scalar(t)?;
    Ok((
        v,
        TensorScalarPullback {
            backend: be.clone(),
            dtype: be.dtype(t),
        },
    ))
}

/// The value of the rank-0 tensor `t` and its tangent, the value of `dt`.
///
/// # Errors
/// [`Error::RankMismatch`] when `t` or `dt` is not rank 0; [`Error::DTypeMismatch`] when
/// `dt`'s dtype does not promote to `t`'s.
pub fn tensorscalar_frule<B: Backend>(
    be: &B,
    t: &B::Tensor,
    dt: &B::Tensor,
) -> Result<(DynScalar, DynScalar)> {
    let v = be.scalar(t)?;
    let dtype = be.dtype(dt);
    if !dtype.promotes_to(be.dtype(t)) {
        return Err(Error::DTypeMismatch {
            arg: "tangent of tensor".into(),
            expected: format!("a dtype that promotes to {}", be.dtype(t)),
            actual: dtype,
        });
    }
    let dv = be.scalar(dt).map_err(|e| match e {
        Error::RankMismatch {
            expected, actual, ..
        } => Error::RankMismatch {
            arg: "tangent of tensor".into(),
            expected,
            actual,
        },
        e => e,
    })?;
    Ok((v, dv))
}

/// Pullback of scalar extraction.
#[derive(Clone, Debug)]
pub struct TensorScalarPullback<B: Backend> {
    backend: B,
    dtype: DType,
}

impl<B: Backend> TensorScalarPullback<B> {
    /// The cotangent of the rank-0 tensor: a rank-0 tensor holding `c_bar` projected onto the
    /// tensor's dtype.
    ///
    /// # Errors
    /// Backend errors only.
    pub fn pullback(&self, c_bar: DynScalar) -> Result<B::Tensor> {
        let v = c_bar.project(self.dtype).to_c64();
        let h = HostTensor::new(&[], HostData::from_c64_projected(&[v], self.dtype))?;
        self.backend.from_host(h)
    }
}
