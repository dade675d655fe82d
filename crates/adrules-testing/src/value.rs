//! [`Value`]: an input or output of a differentiable function under test, a tensor or a
//! coefficient, with the vector-space operations finite differences and adjoint tests need.

use adrules_core::{Complex64, DType, DynScalar, Error, HostData, HostTensor, Result};

/// A tensor or a scalar coefficient (α, β, a scalar result).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// a tensor
    Tensor(HostTensor),
    /// a scalar
    Scalar(DynScalar),
}

impl Value {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Value::Tensor(t) => t.dtype(),
            Value::Scalar(s) => s.dtype(),
        }
    }

    /// The elements widened to `Complex64`, row-major (one element for a scalar).
    pub fn to_c64_vec(&self) -> Vec<Complex64> {
        match self {
            Value::Tensor(t) => t.data().to_c64_vec(),
            Value::Scalar(s) => vec![s.to_c64()],
        }
    }

    fn with_c64(&self, v: &[Complex64], dtype: DType) -> Result<Value> {
        Ok(match self {
            Value::Tensor(t) => Value::Tensor(HostTensor::new(
                t.dims(),
                HostData::from_c64_projected(v, dtype),
            )?),
            Value::Scalar(_) => Value::Scalar(DynScalar::from_c64(v[0], dtype)),
        })
    }

    /// A value of the same kind, shape and dtype holding `v` (projected onto the dtype).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `v` has the wrong length.
    pub fn with_values(&self, v: &[Complex64]) -> Result<Value> {
        match self {
            Value::Scalar(_) if v.len() != 1 => Err(Error::shape("values", &[1], &[v.len()])),
            _ => self.with_c64(v, self.dtype()),
        }
    }

    fn check_same_kind(&self, other: &Value, what: &str) -> Result<()> {
        match (self, other) {
            (Value::Tensor(a), Value::Tensor(b)) if a.dims() == b.dims() => Ok(()),
            (Value::Tensor(a), Value::Tensor(b)) => Err(Error::shape(what, a.dims(), b.dims())),
            (Value::Scalar(_), Value::Scalar(_)) => Ok(()),
            _ => Err(Error::invalid(what, "a tensor paired with a scalar")),
        }
    }

    /// The same value in the widest dtype of its kind (`f64` or `Complex64`).
    pub fn widen(&self) -> Value {
        let wide = if self.dtype().is_complex() {
            DType::C64
        } else {
            DType::F64
        };
        self.with_c64(&self.to_c64_vec(), wide)
            .expect("same shape, so always valid")
    }

    /// `self + h·d`, in `Complex64` arithmetic, projected onto `self`'s dtype.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `d` does not match `self`.
    pub fn axpy(&self, h: f64, d: &Value) -> Result<Value> {
        self.check_same_kind(d, "direction")?;
        let (x, dx) = (self.to_c64_vec(), d.to_c64_vec());
        let v: Vec<Complex64> = x.iter().zip(&dx).map(|(x, d)| x + d * h).collect();
        self.with_c64(&v, self.dtype())
    }

    /// `⟨self, other⟩ = Σ conj(self)·other`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the values do not match.
    pub fn inner(&self, other: &Value) -> Result<Complex64> {
        self.check_same_kind(other, "inner product operand")?;
        Ok(self
            .to_c64_vec()
            .iter()
            .zip(other.to_c64_vec())
            .map(|(a, b)| a.conj() * b)
            .sum())
    }

    /// Euclidean norm.
    pub fn norm(&self) -> f64 {
        self.to_c64_vec()
            .iter()
            .map(|z| z.norm_sqr())
            .sum::<f64>()
            .sqrt()
    }

    /// The tensor, or an error naming `what`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a scalar.
    pub fn tensor(&self, what: &str) -> Result<&HostTensor> {
        match self {
            Value::Tensor(t) => Ok(t),
            Value::Scalar(_) => Err(Error::invalid(what, "expected a tensor, got a scalar")),
        }
    }
}

impl From<HostTensor> for Value {
    fn from(t: HostTensor) -> Self {
        Value::Tensor(t)
    }
}

impl From<DynScalar> for Value {
    fn from(s: DynScalar) -> Self {
        Value::Scalar(s)
    }
}
