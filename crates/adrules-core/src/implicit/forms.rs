//! Convenience forms of the conditions: fixed points `y = T(x, y)` and minimizers
//! `y = argmin_y f(x, y)`.

use faer::Mat;

use super::ImplicitScalar;
use super::conditions::{Conditions, Point, typed};
use super::maps::{LinearMaps, Structure};
use crate::error::{Error, Result};

/// A fixed point `y = T(x, y)`, as the conditions `c = T(x, y) − y`:
/// `A = ∂T/∂y − I`, `B = ∂T/∂x` (Blondel et al. 2022, §2.1; JAXopt `fixed_point_iteration`
/// with `implicit_diff`).
///
/// The wrapped conditions give the linear maps of `T` (its Jacobians in `y` and `x`); when
/// they report values ([`LinearMaps::conditions`], the values of `T(x, y)`), the form
/// reports the fixed-point residual `T(x, y) − y`.
/// The tag of `A` follows from the tag of `∂T/∂y`: Hermitian stays Hermitian, negative
/// definite stays negative definite, anything else is [`Structure::General`]; override it
/// with [`FixedPoint::with_structure`] (for example [`Structure::NegativeDefinite`] when
/// `∂T/∂y` is Hermitian with eigenvalues below 1, as for a contraction with a symmetric
/// Jacobian).
pub struct FixedPoint<C> {
    map: C,
    structure: Option<Structure>,
}

impl<C> FixedPoint<C> {
    /// The fixed point of the map whose linearization `map` gives.
    pub fn new(map: C) -> Self {
        FixedPoint {
            map,
            structure: None,
        }
    }

    /// Declares the structure of `A = ∂T/∂y − I` (replacing the derived tag).
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = Some(structure);
        self
    }
}

impl<T, Z, A, C> Conditions<T, Z, A> for FixedPoint<C>
where
    T: ImplicitScalar,
    A: ?Sized,
    C: Conditions<T, Z, A>,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        let inner = self.map.linearize(at)?;
        let structure = self.structure.unwrap_or(match inner.structure() {
            Structure::NegativeDefinite => Structure::NegativeDefinite,
            Structure::General => Structure::General,
            _ => Structure::Hermitian,
        });
        let residual = match inner.conditions() {
            Some(t) => {
                let y = typed::<T>(at.y, "y")?;
                if t.len() != y.len() {
                    return Err(Error::shape("T(x, y)", &[y.len()], &[t.len()]));
                }
                Some(t.iter().zip(y).map(|(&t, &y)| t - y).collect())
            }
            None => None,
        };
        Ok(Box::new(FixedPointMaps {
            inner,
            structure,
            residual,
        }))
    }
}

struct FixedPointMaps<T: ImplicitScalar> {
    inner: Box<dyn LinearMaps<T>>,
    structure: Structure,
    /// `T(x, y) − y`, when the inner source evaluated `T`
    residual: Option<Vec<T>>,
}

fn subtract<T: ImplicitScalar>(out: &mut [T], v: &[T]) {
    out.iter_mut().zip(v).for_each(|(o, &v)| *o -= v);
}

impl<T: ImplicitScalar> LinearMaps<T> for FixedPointMaps<T> {
    fn num_unknowns(&self) -> usize {
        self.inner.num_unknowns()
    }
    fn num_inputs(&self) -> usize {
        self.inner.num_inputs()
    }
    fn structure(&self) -> Structure {
        self.structure
    }
    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.inner.apply_a(v, out, k)?;
        subtract(out, v);
        Ok(())
    }
    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.inner.apply_a_adjoint(u, out, k)?;
        subtract(out, u);
        Ok(())
    }
    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.inner.apply_b(v, out, k)
    }
    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.inner.apply_b_adjoint(u, out, k)
    }
    fn dense_a(&self) -> Option<Mat<T>> {
        let mut a = self.inner.dense_a()?;
        for i in 0..a.nrows() {
            a[(i, i)] -= T::one();
        }
        Some(a)
    }
    fn conditions(&self) -> Option<&[T]> {
        self.residual.as_deref()
    }
}

/// A minimizer `y = argmin_y f(x, y)`, as the conditions `c = ∇_y f(x, y)`:
/// `A = ∇²_yy f` (the Hessian), `B = ∇²_yx f` (Blondel et al. 2022, §2.1; JAXopt's
/// `custom_root` of the gradient).
///
/// The wrapped conditions give those maps; the form tags `A`
/// [`Structure::PositiveDefinite`]: the implicit function theorem needs an invertible
/// Hessian, and the Hessian at a minimum is positive semidefinite, so where the rule applies
/// it is positive definite (Cholesky or CG). For real data; complex unknowns of a real
/// objective are not holomorphic and do not fit the conditions interface.
pub struct Argmin<C>(pub C);

impl<T, Z, A, C> Conditions<T, Z, A> for Argmin<C>
where
    T: ImplicitScalar,
    A: ?Sized,
    C: Conditions<T, Z, A>,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        Ok(Box::new(Hessian(self.0.linearize(at)?)))
    }
}

struct Hessian<T: ImplicitScalar>(Box<dyn LinearMaps<T>>);

impl<T: ImplicitScalar> LinearMaps<T> for Hessian<T> {
    fn num_unknowns(&self) -> usize {
        self.0.num_unknowns()
    }
    fn num_inputs(&self) -> usize {
        self.0.num_inputs()
    }
    fn structure(&self) -> Structure {
        Structure::PositiveDefinite
    }
    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.0.apply_a(v, out, k)
    }
    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.0.apply_a_adjoint(u, out, k)
    }
    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.0.apply_b(v, out, k)
    }
    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.0.apply_b_adjoint(u, out, k)
    }
    fn dense_a(&self) -> Option<Mat<T>> {
        self.0.dense_a()
    }
    fn conditions(&self) -> Option<&[T]> {
        self.0.conditions()
    }
}
