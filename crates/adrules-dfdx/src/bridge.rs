//! The copies between dfdx tensors and the strided backend, and the loan of dfdx gradient
//! buffers to it. Every op of this crate moves data only through these functions, so their
//! costs (module docs of the crate) are the adapter's whole overhead.

use std::any::type_name;

use adrules_core::{Dims, Error, Result};
use adrules_strided::Tensor as Strided;
use dfdx::prelude::{HasShape, ReshapeTo, Shape, Tape, Tensor, TensorFromVec};
use dfdx::tensor::Cpu;

use crate::element::DfdxElement;
use crate::error::from_dfdx;

/// Makes `t` contiguous (a differentiable no-op when it already is), so that its data and
/// its gradient buffer are row-major.
pub(crate) fn contiguous<S: Shape, E: DfdxElement, T: Tape<E, Cpu>>(
    t: Tensor<S, E, Cpu, T>,
) -> Result<Tensor<S, E, Cpu, T>> {
    t.try_contiguous().map_err(from_dfdx)
}

/// The dims of a dfdx shape.
pub(crate) fn dims_of<S: Shape>(shape: &S) -> Dims {
    shape.concrete().as_ref().iter().copied().collect()
}

/// The value of the shape type `S` with dims `dims`: checks the rank and every
/// compile-time (`Const`) dimension of `S`.
///
/// # Errors
/// [`Error::RankMismatch`] when `S` has another rank; [`Error::InvalidArgument`] when a
/// `Const` dimension of `S` differs from `dims` (`arg` names what `dims` belong to).
pub(crate) fn shape_for<S: Shape>(dims: &[usize], arg: &str) -> Result<S> {
    if S::NUM_DIMS != dims.len() {
        return Err(Error::rank(
            format!("{arg} (shape type `{}`)", type_name::<S>()),
            dims.len(),
            S::NUM_DIMS,
        ));
    }
    let mut concrete = S::Concrete::default();
    for (k, &d) in dims.iter().enumerate() {
        concrete[k] = d;
    }
    S::from_concrete(&concrete).ok_or_else(|| {
        Error::invalid(
            arg,
            format!(
                "has dims {dims:?}, which the shape type `{}` does not accept \
                 (a `Const<N>` axis accepts only N, a `usize` axis any size)",
                type_name::<S>()
            ),
        )
    })
}

/// Copy in: the elements of `t` in row-major order as a new strided tensor (one copy of `t`,
/// whatever its strides).
pub(crate) fn copy_in<S: Shape, E: DfdxElement, T>(t: &Tensor<S, E, Cpu, T>) -> Result<Strided> {
    Strided::from_vec(&dims_of(t.shape()), host_vec(t))
}

/// The elements of `t` in row-major order (a copy). dfdx's `as_vec` reads one element of a
/// tensor with a zero-size dimension (and panics); such a tensor has no elements to copy.
pub(crate) fn host_vec<S: Shape, E: DfdxElement, T>(t: &Tensor<S, E, Cpu, T>) -> Vec<E> {
    if t.shape().num_elements() == 0 {
        Vec::new()
    } else {
        t.as_vec()
    }
}

/// Copy out: a dfdx tensor of shape `shape` holding `t`'s elements. The buffer is moved,
/// not copied, when `t` is dense row-major and the only handle of its buffer (every result
/// the rules produce into a fresh tensor is); otherwise it is copied once.
///
/// # Errors
/// [`Error::ShapeMismatch`] (`"result"`) when `t` does not have `shape`'s dims;
/// [`Error::DTypeMismatch`] when `t` is not of type `E`; dfdx's allocation errors.
pub(crate) fn copy_out<S: Shape, E: DfdxElement>(
    dev: &Cpu,
    t: Strided,
    shape: S,
) -> Result<Tensor<S, E, Cpu>> {
    let dims = dims_of(&shape);
    if t.dims() != dims.as_slice() {
        return Err(Error::shape("result", &dims, t.dims()));
    }
    let data = into_vec::<E>(t)?;
    dev.try_tensor_from_vec(data, shape).map_err(from_dfdx)
}

/// The row-major elements of `t`, moving its buffer when possible.
fn into_vec<E: DfdxElement>(t: Strided) -> Result<Vec<E>> {
    let dtype = t.dtype();
    let (_, data) = t.into_host()?.into_parts();
    E::vec_from_host(data).ok_or_else(|| Error::DTypeMismatch {
        arg: "result".into(),
        expected: E::DTYPE.to_string(),
        actual: dtype,
    })
}

/// Lends the dfdx gradient buffer `buf` (row-major, of a tensor with dims `dims`) to the
/// strided backend without copying: the vector is moved out of dfdx's gradient map (which
/// keeps an empty vector in its place) into a strided tensor. Give it back with
/// [`give_back`].
///
/// # Errors
/// [`Error::ShapeMismatch`] (argument `arg`) when the buffer does not hold `dims`' element
/// count; `buf` is then left untouched.
pub(crate) fn lend<E: DfdxElement>(buf: &mut Vec<E>, dims: &[usize], arg: &str) -> Result<Strided> {
    let n: usize = dims.iter().product();
    if buf.len() != n {
        return Err(Error::shape(arg, &[n], &[buf.len()]));
    }
    Strided::from_vec(dims, std::mem::take(buf))
}

/// Returns a lent buffer (possibly updated in place, or replaced by the rules) to dfdx's
/// gradient map: moved back when `t` is dense row-major and unshared, else copied once.
///
/// # Errors
/// [`Error::DTypeMismatch`] when `t` is not of type `E`.
pub(crate) fn give_back<E: DfdxElement>(buf: &mut Vec<E>, t: Strided) -> Result<()> {
    *buf = into_vec(t)?;
    Ok(())
}
