//! Conditions: what turns a solution point into the [`LinearMaps`] there. Closures returning
//! any [`LinearMaps`] are conditions; [`FiniteDifferences`] is a test-only source.

use faer::Mat;

use super::ImplicitScalar;
use super::maps::{DenseMaps, LinearMaps, Structure};
use crate::error::{Error, Result};
use crate::host::{HostElement, HostTensor};
use crate::scalar::RealScalar;

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
/// [`DenseMaps`], [`FnMaps`](super::FnMaps) or any other [`LinearMaps`] (a tensor-network
/// source, an engine adapter). [`FiniteDifferences`] implements it from `c` itself.
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

/// **For tests only.** Dense Jacobians of the conditions by central finite differences:
/// `A[:, j] = (c(y + h_j e_j) − c(y − h_j e_j)) / 2h_j` and the same for every input element,
/// with `h_j = step · max(1, |v_j|)` and `step = ε^{1/3}` of the dtype by default.
///
/// Costs `2(m + n) + 1` evaluations of `c` and `m·(m + n)` elements of memory, and is
/// accurate to about `ε^{2/3}` relative (≈ 1e-10 for 64-bit, 5e-5 for 32-bit data) on
/// smooth conditions: a reference to test other sources against, never a production
/// source. For complex data the steps are real, which gives the complex derivative when
/// `c` is holomorphic. `c` returns the `m` conditions flattened in any fixed order.
/// The maps report `c` at the point ([`LinearMaps::conditions`]).
pub struct FiniteDifferences<F> {
    c: F,
    step: Option<f64>,
    structure: Structure,
}

impl<F> FiniteDifferences<F> {
    /// Finite differences of the conditions `c`.
    pub fn new(c: F) -> Self {
        FiniteDifferences {
            c,
            step: None,
            structure: Structure::General,
        }
    }

    /// Relative step (default `ε^{1/3}` of the dtype).
    pub fn with_step(mut self, step: f64) -> Self {
        self.step = Some(step);
        self
    }

    /// Structure tag of the resulting `A`.
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }
}

impl<T, Z, A, F> Conditions<T, Z, A> for FiniteDifferences<F>
where
    T: ImplicitScalar,
    A: ?Sized,
    F: Fn(&Point<'_, Z, A>) -> Result<Vec<T>>,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        let step = self.step.unwrap_or_else(|| super::eps::<T>().cbrt());
        if !(step > 0.0 && step.is_finite()) {
            return Err(Error::invalid(
                "step",
                format!("{step} is not a positive finite number"),
            ));
        }
        let m = at.y.len();
        let c0 = (self.c)(at)?;
        if c0.len() != m {
            return Err(Error::shape("conditions c(x, y)", &[m], &[c0.len()]));
        }
        let eval = |x: &[HostTensor], y: &HostTensor| -> Result<Vec<T>> {
            let c = (self.c)(&Point { x, y, ..*at })?;
            if c.len() != m {
                return Err(Error::shape("conditions c(x, y)", &[m], &[c.len()]));
            }
            Ok(c)
        };
        let mut y = [at.y.clone()];
        let mut a = Mat::<T>::zeros(m, m);
        for j in 0..m {
            let col = central_difference(&mut y, 0, j, step, &|y| eval(at.x, &y[0]))?;
            a.col_mut(j).iter_mut().zip(col).for_each(|(d, s)| *d = s);
        }
        let n: usize = at.x.iter().map(HostTensor::len).sum();
        let mut b = Mat::<T>::zeros(m, n);
        let mut x = at.x.to_vec();
        let mut offset = 0;
        for i in 0..x.len() {
            for j in 0..x[i].len() {
                let col = central_difference(&mut x, i, j, step, &|x| eval(x, at.y))?;
                b.col_mut(offset + j)
                    .iter_mut()
                    .zip(col)
                    .for_each(|(d, s)| *d = s);
            }
            offset += x[i].len();
        }
        Ok(Box::new(
            DenseMaps::new(a, b)?
                .with_structure(self.structure)
                .with_conditions(c0),
        ))
    }
}

/// `(f(t + h e) − f(t − h e)) / 2h` for the element `j` of `tensors[i]`, restored afterwards.
fn central_difference<T: ImplicitScalar>(
    tensors: &mut [HostTensor],
    i: usize,
    j: usize,
    step: f64,
    f: &dyn Fn(&[HostTensor]) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let set = |tensors: &mut [HostTensor], value: T| -> Result<T> {
        let t = &mut tensors[i];
        let dtype = t.dtype();
        let data = T::slice_mut(t.data_mut()).ok_or_else(|| Error::DTypeMismatch {
            arg: "point".into(),
            expected: T::DTYPE.to_string(),
            actual: dtype,
        })?;
        Ok(std::mem::replace(&mut data[j], value))
    };
    let v = set(tensors, T::zero())?;
    let h = step * v.modulus().to_f64().max(1.0);
    set(tensors, v + T::from_f64(h))?;
    let plus = f(tensors);
    set(tensors, v - T::from_f64(h))?;
    let minus = f(tensors);
    set(tensors, v)?;
    let (plus, minus) = (plus?, minus?);
    let inv = T::from_f64(0.5 / h);
    Ok(plus
        .iter()
        .zip(&minus)
        .map(|(&p, &q)| (p - q) * inv)
        .collect())
}
