//! Conditions: what turns a solution point into the [`LinearMaps`] there. Closures returning
//! any [`LinearMaps`] are conditions (a test-only finite-difference source lives in the
//! `adrules-testing` crate).

use super::ImplicitScalar;
use super::maps::LinearMaps;
use crate::error::{Error, Result};
use crate::host::{HostElement, HostTensor};

/// A solution point: the inputs `x`, the solver's `y` and byproduct `z`, and the constant
/// arguments, as the conditions see them.
#[derive(Debug)]
pub struct Point<'a, Z, A: ?Sized> {
    /// the differentiable inputs, in call order
    pub x: &'a [HostTensor],
    /// the solution
    pub y: &'a HostTensor,
    /// the solver's byproduct (a constant: zero tangent, no cotangent)
    pub byproduct: &'a Z,
    /// the constant arguments (zero tangent, no cotangent)
    pub args: &'a A,
}

// Manual impls: `derive` would require `Z: Clone` and `A: Clone`.
impl<Z, A: ?Sized> Clone for Point<'_, Z, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Z, A: ?Sized> Copy for Point<'_, Z, A> {}

impl<'a, Z, A: ?Sized> Point<'a, Z, A> {
    /// The elements of input `i`, row-major.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] when there is no input `i`; [`Error::DTypeMismatch`] when
    /// its dtype is not `T`.
    pub fn x_data<T: HostElement>(&self, i: usize) -> Result<&'a [T]> {
        let t = self.x.get(i).ok_or_else(|| Error::CountMismatch {
            arg: "x".into(),
            expected: i + 1,
            actual: self.x.len(),
        })?;
        typed(t, &format!("x[{i}]"))
    }

    /// The elements of `y`, row-major.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when the dtype of `y` is not `T`.
    pub fn y_data<T: HostElement>(&self) -> Result<&'a [T]> {
        typed(self.y, "y")
    }
}

pub(crate) fn typed<'a, T: HostElement>(t: &'a HostTensor, arg: &str) -> Result<&'a [T]> {
    t.as_slice::<T>().map_err(|_| Error::DTypeMismatch {
        arg: arg.into(),
        expected: T::DTYPE.to_string(),
        actual: t.dtype(),
    })
}

/// The conditions `c(x, y, z, args) = 0` that define `y(x)`, seen through their
/// linearization: given a solution point, the [`LinearMaps`] there.
///
/// Every closure `Fn(&Point<Z, A>) -> Result<M>` with `M: LinearMaps<T>` is conditions, so
/// the sources are written as closures that evaluate derivatives at the point and return
/// [`DenseMaps`](super::DenseMaps), [`FnMaps`](super::FnMaps) or any other [`LinearMaps`]
/// (a tensor-network source, an engine adapter's [`VjpMaps`](super::VjpMaps)).
pub trait Conditions<T: ImplicitScalar, Z, A: ?Sized> {
    /// The linear maps at `at`. They must own what they read (the pullback keeps them).
    ///
    /// # Errors
    /// Whatever the source reports; the rule checks the dimensions of the result.
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>>;
}

impl<T, Z, A, F, M> Conditions<T, Z, A> for F
where
    T: ImplicitScalar,
    A: ?Sized,
    F: Fn(&Point<'_, Z, A>) -> Result<M>,
    M: LinearMaps<T> + 'static,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        Ok(Box::new(self(at)?))
    }
}
