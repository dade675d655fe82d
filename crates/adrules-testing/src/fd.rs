//! Central finite differences of functions of [`Value`]s, and the adjoint (dot-product) test.

use adrules_core::{Complex64, Error, Result};

use crate::value::Value;

/// Finite-difference stencil.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stencil {
    /// `(f(x+h) − f(x−h)) / 2h`: error O(h²), exact for polynomials of degree ≤ 2.
    Central2,
    /// `(−f(x+2h) + 8f(x+h) − 8f(x−h) + f(x−2h)) / 12h`: error O(h⁴), exact for
    /// polynomials of degree ≤ 4 (every primitive here is a polynomial of degree ≤ 3 in its
    /// inputs jointly).
    Central4,
}

/// A finite-difference scheme: stencil and step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FiniteDifference {
    /// the stencil
    pub stencil: Stencil,
    /// the step `h` (in units of the direction)
    pub step: f64,
}

impl Default for FiniteDifference {
    /// Fourth-order central differences with `h = 1e-3`.
    fn default() -> Self {
        FiniteDifference {
            stencil: Stencil::Central4,
            step: 1e-3,
        }
    }
}

impl FiniteDifference {
    /// The directional derivative `J·dx` of `f` at `x` along `dx` (one direction per input;
    /// complex directions are directions in the underlying real space).
    ///
    /// The inputs are widened to `f64` / `Complex64` before being perturbed ([`Value::widen`]),
    /// so `f` is evaluated in double precision whatever the dtypes of `x`: `f` must accept
    /// the widened dtypes.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] when `dx` and `x` differ in length; [`Error::InvalidArgument`]
    /// for a non-positive or non-finite step; shape mismatches; errors of `f`.
    pub fn jvp(
        &self,
        mut f: impl FnMut(&[Value]) -> Result<Value>,
        x: &[Value],
        dx: &[Value],
    ) -> Result<Value> {
        if dx.len() != x.len() {
            return Err(Error::CountMismatch {
                arg: "dx".into(),
                expected: x.len(),
                actual: dx.len(),
            });
        }
        if !(self.step.is_finite() && self.step > 0.0) {
            return Err(Error::invalid(
                "step",
                format!("must be positive, got {}", self.step),
            ));
        }
        let h = self.step;
        let wide: Vec<Value> = x.iter().map(Value::widen).collect();
        let weights: &[(f64, f64)] = match self.stencil {
            Stencil::Central2 => &[(1.0, 0.5), (-1.0, -0.5)],
            Stencil::Central4 => &[
                (2.0, -1.0 / 12.0),
                (1.0, 8.0 / 12.0),
                (-1.0, -8.0 / 12.0),
                (-2.0, 1.0 / 12.0),
            ],
        };
        let mut acc: Option<(Value, Vec<Complex64>)> = None;
        for &(t, w) in weights {
            let p: Vec<Value> = wide
                .iter()
                .zip(dx)
                .map(|(x, d)| x.axpy(t * h, d))
                .collect::<Result<_>>()?;
            let y = f(&p)?;
            let yv = y.to_c64_vec();
            let (_, sum) = acc.get_or_insert_with(|| (y, vec![Complex64::new(0.0, 0.0); yv.len()]));
            if sum.len() != yv.len() {
                return Err(Error::invalid(
                    "f",
                    "output size changed between evaluations",
                ));
            }
            for (a, y) in sum.iter_mut().zip(yv) {
                *a += y * (w / h);
            }
        }
        let (template, sum) = acc.ok_or_else(|| Error::invalid("stencil", "no points"))?;
        template.with_values(&sum)
    }
}

/// The adjoint (dot-product) test between a pushforward and a pullback:
/// `Re⟨ȳ, J·ẋ⟩ = Σᵢ Re⟨x̄ᵢ, ẋᵢ⟩`, where `jdx = J·ẋ` and `xbar[i] = Jᴴ·ȳ` restricted to
/// input `i` (`None` for an input without a cotangent, which must then have a zero
/// direction). Returns the mismatch relative to the scale
/// `‖ȳ‖·‖J·ẋ‖ + Σᵢ ‖x̄ᵢ‖·‖ẋᵢ‖` (so cancellation cannot make it look large).
///
/// # Errors
/// Count and shape mismatches.
pub fn adjoint_mismatch(
    ybar: &Value,
    jdx: &Value,
    xbar: &[Option<Value>],
    dx: &[Value],
) -> Result<f64> {
    if xbar.len() != dx.len() {
        return Err(Error::CountMismatch {
            arg: "xbar".into(),
            expected: dx.len(),
            actual: xbar.len(),
        });
    }
    let lhs = ybar.inner(jdx)?.re;
    let mut scale = ybar.norm() * jdx.norm();
    let mut rhs = 0.0;
    for (xb, d) in xbar.iter().zip(dx) {
        if let Some(xb) = xb {
            rhs += xb.inner(d)?.re;
            scale += xb.norm() * d.norm();
        }
    }
    Ok((lhs - rhs).abs() / scale.max(f64::MIN_POSITIVE))
}
