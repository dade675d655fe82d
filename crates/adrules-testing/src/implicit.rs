//! Finite-difference conditions for implicit functions: a reference source of the linear
//! maps to test other sources against ([`FiniteDifferenceConditions`]). Never a production
//! source.

use adrules_core::implicit::{Conditions, DenseMaps, ImplicitScalar, LinearMaps, Point, Structure};
use adrules_core::scalar::{RealScalar, Scalar};
use adrules_core::{Error, HostTensor, Result};
use faer::Mat;

fn eps<T: ImplicitScalar>() -> f64 {
    <<T as Scalar>::Real as RealScalar>::EPS.to_f64()
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
pub struct FiniteDifferenceConditions<F> {
    c: F,
    step: Option<f64>,
    structure: Structure,
}

impl<F> FiniteDifferenceConditions<F> {
    /// Finite differences of the conditions `c`.
    pub fn new(c: F) -> Self {
        FiniteDifferenceConditions {
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

impl<T, Z, A, F> Conditions<T, Z, A> for FiniteDifferenceConditions<F>
where
    T: ImplicitScalar,
    A: ?Sized,
    F: Fn(&Point<'_, Z, A>) -> Result<Vec<T>>,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        let step = self.step.unwrap_or_else(|| eps::<T>().cbrt());
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
