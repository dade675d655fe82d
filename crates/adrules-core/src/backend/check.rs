//! The argument checks of the [`Backend`] contract, written once: every backend (strided,
//! the reference backend, the burn, candle and dfdx adapters) and every rule calls these, so
//! one mistake gets one error, named the same way, on every engine.
//!
//! Each check takes the backend and its tensors and reads only their shapes and dtypes
//! ([`Backend::dims`], [`Backend::dtype`]); a backend that stores dtypes the rules do not
//! serve (burn's and candle's f16, integers) rejects those first, with its own
//! [`Error::Unsupported`]. The order of the checks is fixed: shapes, then dtypes, then the
//! coefficients, so the first thing wrong is the one reported.
//!
//! The dtype rule of the strict primitives: every input dtype must *promote* losslessly to
//! C's ([`DType::promotes_to`]: `f32 → f64`, `f32 → c32`, anything → `c64`, never narrowing),
//! and α, β are *cast* to C's dtype (rounding precision is allowed, as in BLAS; a complex
//! coefficient on a real C is [`Error::DTypeMismatch`]).

use super::Backend;
use crate::error::{Error, Result};
use crate::scalar::{DType, DynScalar};
use crate::spec::{ContractSpec, Dims, Permutation, TraceSpec};

/// α and β of a primitive call, cast to C's dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coefficients {
    /// α in C's dtype
    pub alpha: DynScalar,
    /// β in C's dtype (zero: a strong zero, C is not read)
    pub beta: DynScalar,
}

/// Checks that `input` (the dtype of argument `arg`) promotes losslessly to `output`.
///
/// # Errors
/// [`Error::DTypeMismatch`] naming `arg`.
pub fn promotes(arg: &str, input: DType, output: DType) -> Result<()> {
    if input.promotes_to(output) {
        Ok(())
    } else {
        Err(Error::DTypeMismatch {
            arg: arg.into(),
            expected: format!("a dtype that promotes to {output}"),
            actual: input,
        })
    }
}

/// α and β cast to `dtype` (C's dtype).
///
/// # Errors
/// [`Error::DTypeMismatch`] naming `"alpha"` or `"beta"` for a complex coefficient and a real
/// `dtype`.
pub fn coefficients(alpha: DynScalar, beta: DynScalar, dtype: DType) -> Result<Coefficients> {
    Ok(Coefficients {
        alpha: alpha.cast(dtype, "alpha")?,
        beta: beta.cast(dtype, "beta")?,
    })
}

/// The coefficient check of an operation that returns a *fresh* output of `dtype` (the
/// engines' ops, which have no input C to scale): β must be zero and α must cast to `dtype`.
/// Returns α in `dtype`.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `"beta"` for a nonzero β (write `β·C + …` with the
/// engine's own differentiable ops, or pass C to an op that takes it);
/// [`Error::DTypeMismatch`] naming `"alpha"` for a complex α and a real `dtype`.
pub fn fresh_output(alpha: DynScalar, beta: DynScalar, dtype: DType) -> Result<DynScalar> {
    if !beta.is_zero() {
        return Err(Error::invalid(
            "beta",
            format!(
                "is {beta}, but the operation returns a fresh tensor, so β must be 0 \
                 (write β·C + … with the engine's own ops, or pass C as an input)"
            ),
        ));
    }
    alpha.cast(dtype, "alpha")
}

/// Checks that `t` (argument `arg`, a tangent or a cotangent) has shape `dims` and a dtype
/// that promotes to `dtype`.
///
/// # Errors
/// [`Error::ShapeMismatch`] or [`Error::DTypeMismatch`] naming `arg`.
pub fn like<B: Backend>(
    be: &B,
    arg: &str,
    t: &B::Tensor,
    dims: &[usize],
    dtype: DType,
) -> Result<()> {
    let got = be.dims(t);
    if got.as_slice() != dims {
        return Err(Error::shape(arg, dims, &got));
    }
    promotes(arg, be.dtype(t), dtype)
}

/// The checks of [`Backend::add`]: shapes (`"a"`, `"c"`), A's dtype promoting to C's, α and
/// β cast to C's dtype.
///
/// # Errors
/// Those of [`Permutation::check_add`], [`promotes`] (`"a"`) and [`coefficients`].
pub fn add<B: Backend>(
    be: &B,
    c: &B::Tensor,
    a: &B::Tensor,
    p: &Permutation,
    alpha: DynScalar,
    beta: DynScalar,
) -> Result<Coefficients> {
    p.check_add(&be.dims(a), &be.dims(c))?;
    let dc = be.dtype(c);
    promotes("a", be.dtype(a), dc)?;
    coefficients(alpha, beta, dc)
}

/// The checks of [`Backend::add_projected`]: shapes, and β cast to C's dtype (A's dtype and
/// α are unconstrained: the primitive projects). Returns β in C's dtype.
///
/// # Errors
/// Those of [`Permutation::check_add`]; [`Error::DTypeMismatch`] naming `"beta"`.
pub fn add_projected<B: Backend>(
    be: &B,
    c: &B::Tensor,
    a: &B::Tensor,
    p: &Permutation,
    beta: DynScalar,
) -> Result<DynScalar> {
    p.check_add(&be.dims(a), &be.dims(c))?;
    beta.cast(be.dtype(c), "beta")
}

/// The checks of [`Backend::trace`]: shapes, A's dtype, coefficients.
///
/// # Errors
/// Those of [`TraceSpec::check`], [`promotes`] (`"a"`) and [`coefficients`].
pub fn trace<B: Backend>(
    be: &B,
    c: &B::Tensor,
    a: &B::Tensor,
    spec: &TraceSpec,
    alpha: DynScalar,
    beta: DynScalar,
) -> Result<Coefficients> {
    spec.check(&be.dims(a), &be.dims(c))?;
    let dc = be.dtype(c);
    promotes("a", be.dtype(a), dc)?;
    coefficients(alpha, beta, dc)
}

/// The shape checks of [`Backend::add_to_diagonal`] (A is the output, C the input; dtypes are
/// unconstrained: the primitive projects).
///
/// # Errors
/// Those of [`TraceSpec::check`].
pub fn add_to_diagonal<B: Backend>(
    be: &B,
    a: &B::Tensor,
    c: &B::Tensor,
    spec: &TraceSpec,
) -> Result<()> {
    spec.check(&be.dims(a), &be.dims(c))
}

/// The checks of [`Backend::contract`]: shapes (`"a"`, `"b"`, `"c"`), A's and B's dtypes,
/// coefficients.
///
/// # Errors
/// Those of [`ContractSpec::check`], [`promotes`] (`"a"`, `"b"`) and [`coefficients`].
pub fn contract<B: Backend>(
    be: &B,
    c: &B::Tensor,
    a: &B::Tensor,
    b: &B::Tensor,
    spec: &ContractSpec,
    alpha: DynScalar,
    beta: DynScalar,
) -> Result<Coefficients> {
    spec.check(&be.dims(a), &be.dims(b), &be.dims(c))?;
    let dc = be.dtype(c);
    promotes("a", be.dtype(a), dc)?;
    promotes("b", be.dtype(b), dc)?;
    coefficients(alpha, beta, dc)
}

/// The checks of [`Backend::inner`]: equal shapes. Returns the joined dtype of X and Y (the
/// dtype of the result).
///
/// # Errors
/// [`Error::ShapeMismatch`] naming `"y"`.
pub fn inner<B: Backend>(be: &B, x: &B::Tensor, y: &B::Tensor) -> Result<DType> {
    let (dx, dy) = (be.dims(x), be.dims(y));
    if dx != dy {
        return Err(Error::shape("y", &dx, &dy));
    }
    Ok(be.dtype(x).join(be.dtype(y)))
}

/// The check of [`Backend::scalar`]: rank 0. Returns the tensor's dtype.
///
/// # Errors
/// [`Error::RankMismatch`] naming `"tensor"`.
pub fn scalar<B: Backend>(be: &B, t: &B::Tensor) -> Result<DType> {
    let rank = be.rank(t);
    if rank != 0 {
        return Err(Error::rank("tensor", 0, rank));
    }
    Ok(be.dtype(t))
}

/// The joined dtype of `tensors` (`f32` for none): the dtype of a fresh output computed from
/// them.
pub fn joined_dtype<B: Backend>(be: &B, tensors: &[&B::Tensor]) -> DType {
    tensors
        .iter()
        .fold(DType::F32, |acc, t| acc.join(be.dtype(t)))
}

/// The shapes of `tensors`.
pub fn dims_of<B: Backend>(be: &B, tensors: &[&B::Tensor]) -> Vec<Dims> {
    tensors.iter().map(|t| be.dims(t)).collect()
}
