//! Tolerances and closeness checks.

use adrules_core::{DType, Error, Result};

use crate::value::Value;

/// An `allclose` tolerance: `|x − y| ≤ atol + rtol·|y|` elementwise (complex modulus).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// absolute tolerance
    pub atol: f64,
    /// relative tolerance
    pub rtol: f64,
}

impl Tolerance {
    /// Default tolerance for comparing a rule's result in `dtype` against a reference
    /// computed in double precision on O(1) data: `1e-3` relative for 32-bit types, `1e-9`
    /// for 64-bit types (room for accumulation over a few hundred terms).
    pub fn for_dtype(dtype: DType) -> Tolerance {
        if dtype.is_double() {
            Tolerance {
                atol: 1e-9,
                rtol: 1e-9,
            }
        } else {
            Tolerance {
                atol: 1e-3,
                rtol: 1e-3,
            }
        }
    }

    /// The tighter of two tolerances, component by component.
    pub fn min(self, other: Tolerance) -> Tolerance {
        Tolerance {
            atol: self.atol.min(other.atol),
            rtol: self.rtol.min(other.rtol),
        }
    }

    /// The looser of two tolerances, component by component.
    pub fn max(self, other: Tolerance) -> Tolerance {
        Tolerance {
            atol: self.atol.max(other.atol),
            rtol: self.rtol.max(other.rtol),
        }
    }

    /// Worst violation ratio `max |x − y| / (atol + rtol·|y|)` of `actual` against
    /// `expected` (at most 1 when they agree).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] naming `what` when the values do not match.
    pub fn ratio(self, actual: &Value, expected: &Value, what: &str) -> Result<f64> {
        match (actual, expected) {
            (Value::Tensor(a), Value::Tensor(e)) if a.dims() != e.dims() => {
                return Err(Error::shape(what, e.dims(), a.dims()));
            }
            (Value::Tensor(_), Value::Scalar(_)) | (Value::Scalar(_), Value::Tensor(_)) => {
                return Err(Error::invalid(what, "a tensor compared with a scalar"));
            }
            _ => {}
        }
        Ok(actual
            .to_c64_vec()
            .iter()
            .zip(expected.to_c64_vec())
            .map(|(x, y)| (x - y).norm() / (self.atol + self.rtol * y.norm()))
            .fold(0.0, f64::max))
    }

    /// `Ok` when `actual` agrees with `expected`; otherwise a message naming `what` with the
    /// worst element.
    ///
    /// # Errors
    /// A description of the disagreement (for `assert!`-style use in tests).
    pub fn check(
        self,
        actual: &Value,
        expected: &Value,
        what: &str,
    ) -> std::result::Result<(), String> {
        let r = self
            .ratio(actual, expected, what)
            .map_err(|e| e.to_string())?;
        if r <= 1.0 {
            return Ok(());
        }
        let (a, e) = (actual.to_c64_vec(), expected.to_c64_vec());
        let (i, _) = a
            .iter()
            .zip(&e)
            .map(|(x, y)| (x - y).norm() / (self.atol + self.rtol * y.norm()))
            .enumerate()
            .fold(
                (0, 0.0),
                |best, (i, r)| if r > best.1 { (i, r) } else { best },
            );
        Err(format!(
            "{what}: element {i} is {} but expected {} (violation ratio {r:.3e}, atol {:e}, rtol {:e})",
            a[i], e[i], self.atol, self.rtol
        ))
    }
}
