//! [`HostTensor`]: a dense row-major tensor in host memory, the exchange format between
//! backends, the test utilities, oracle files and the implicit-function solvers.

use crate::error::{Error, Result};
use crate::scalar::{Complex32, Complex64, DType, DynScalar, Scalar};
use crate::spec::Dims;

/// Row-major element storage of one dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// `f32` elements
    F32(Vec<f32>),
    /// `f64` elements
    F64(Vec<f64>),
    /// `Complex32` elements
    C32(Vec<Complex32>),
    /// `Complex64` elements
    C64(Vec<Complex64>),
}

/// Typed access to [`HostData`]; implemented for the four [`Scalar`] types.
pub trait HostElement: Scalar {
    /// Wraps a vector.
    fn wrap(v: Vec<Self>) -> HostData;
    /// The elements, when `h` holds this type.
    fn slice(h: &HostData) -> Option<&[Self]>;
    /// The elements, mutably, when `h` holds this type.
    fn slice_mut(h: &mut HostData) -> Option<&mut [Self]>;
}

macro_rules! host_element {
    ($t:ty, $v:ident) => {
        impl HostElement for $t {
            fn wrap(v: Vec<Self>) -> HostData {
                HostData::$v(v)
            }
            fn slice(h: &HostData) -> Option<&[Self]> {
                match h {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(h: &mut HostData) -> Option<&mut [Self]> {
                match h {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
host_element!(f32, F32);
host_element!(f64, F64);
host_element!(Complex32, C32);
host_element!(Complex64, C64);

impl HostData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
            HostData::C32(_) => DType::C32,
            HostData::C64(_) => DType::C64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
            HostData::C32(v) => v.len(),
            HostData::C64(v) => v.len(),
        }
    }

    /// `true` when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` zeros of `dtype`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `"dims"`) when the memory cannot be allocated.
    pub fn zeros(dtype: DType, len: usize) -> Result<Self> {
        fn filled<T: Clone>(len: usize, zero: T) -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(len).map_err(|e| {
                Error::invalid("dims", format!("cannot allocate {len} elements: {e}"))
            })?;
            v.resize(len, zero);
            Ok(v)
        }
        Ok(match dtype {
            DType::F32 => HostData::F32(filled(len, 0.0)?),
            DType::F64 => HostData::F64(filled(len, 0.0)?),
            DType::C32 => HostData::C32(filled(len, Complex32::new(0.0, 0.0))?),
            DType::C64 => HostData::C64(filled(len, Complex64::new(0.0, 0.0))?),
        })
    }

    /// Element `i` as a [`DynScalar`], or `None` when out of range.
    pub fn get(&self, i: usize) -> Option<DynScalar> {
        match self {
            HostData::F32(v) => v.get(i).map(|&x| x.to_dyn()),
            HostData::F64(v) => v.get(i).map(|&x| x.to_dyn()),
            HostData::C32(v) => v.get(i).map(|&x| x.to_dyn()),
            HostData::C64(v) => v.get(i).map(|&x| x.to_dyn()),
        }
    }

    /// Sets element `i`, projecting `x` onto this dtype (real part, rounding).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `i` is out of range.
    pub fn set_projected(&mut self, i: usize, x: DynScalar) -> Result<()> {
        let n = self.len();
        let z = x.to_c64();
        let ok = match self {
            HostData::F32(v) => v.get_mut(i).map(|e| *e = f32::from_c64_unchecked(z)),
            HostData::F64(v) => v.get_mut(i).map(|e| *e = f64::from_c64_unchecked(z)),
            HostData::C32(v) => v.get_mut(i).map(|e| *e = Complex32::from_c64_unchecked(z)),
            HostData::C64(v) => v.get_mut(i).map(|e| *e = z),
        };
        ok.ok_or_else(|| Error::invalid("index", format!("{i} is out of range 0..{n}")))
    }

    /// Every element widened to `Complex64` (exact).
    pub fn to_c64_vec(&self) -> Vec<Complex64> {
        match self {
            HostData::F32(v) => v.iter().map(|&x| Complex64::new(x as f64, 0.0)).collect(),
            HostData::F64(v) => v.iter().map(|&x| Complex64::new(x, 0.0)).collect(),
            HostData::C32(v) => v
                .iter()
                .map(|x| Complex64::new(x.re as f64, x.im as f64))
                .collect(),
            HostData::C64(v) => v.clone(),
        }
    }

    /// Builds data of `dtype` from `Complex64` values, projecting (real part, rounding).
    pub fn from_c64_projected(v: &[Complex64], dtype: DType) -> Self {
        match dtype {
            DType::F32 => HostData::F32(v.iter().map(|z| z.re as f32).collect()),
            DType::F64 => HostData::F64(v.iter().map(|z| z.re).collect()),
            DType::C32 => HostData::C32(
                v.iter()
                    .map(|z| Complex32::new(z.re as f32, z.im as f32))
                    .collect(),
            ),
            DType::C64 => HostData::C64(v.to_vec()),
        }
    }
}

/// The element count of `dims`; every dimension (a zero-size one counted as 1) must keep the
/// product within `isize::MAX`, so that row-major strides never overflow.
fn element_count(dims: &[usize]) -> Result<usize> {
    let overflow = || {
        Error::invalid(
            "dims",
            format!("the element count of shape {dims:?} overflows isize::MAX"),
        )
    };
    let (mut n, mut extent) = (1usize, 1usize);
    for &d in dims {
        n = n.checked_mul(d).ok_or_else(overflow)?;
        extent = extent.checked_mul(d.max(1)).ok_or_else(overflow)?;
    }
    if extent > isize::MAX as usize {
        return Err(overflow());
    }
    Ok(n)
}

/// A dense tensor in host memory, row-major (the last axis varies fastest), of any rank
/// including 0 (one element) and with zero-size dimensions allowed.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    dims: Dims,
    data: HostData,
}

impl HostTensor {
    /// Wraps row-major `data` of shape `dims`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `"dims"`) when the element count overflows
    /// `isize::MAX`; [`Error::ShapeMismatch`] (argument `"data"`) when `data.len()` differs
    /// from the product of `dims`.
    pub fn new(dims: &[usize], data: HostData) -> Result<Self> {
        let n = element_count(dims)?;
        if data.len() != n {
            return Err(Error::shape("data", &[n], &[data.len()]));
        }
        Ok(HostTensor {
            dims: dims.iter().copied().collect(),
            data,
        })
    }

    /// Typed constructor; see [`HostTensor::new`].
    ///
    /// # Errors
    /// As [`HostTensor::new`].
    pub fn from_vec<T: HostElement>(dims: &[usize], data: Vec<T>) -> Result<Self> {
        Self::new(dims, T::wrap(data))
    }

    /// Zeros of the given shape and dtype.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `"dims"`) when the element count overflows
    /// `isize::MAX` or the memory cannot be allocated.
    pub fn zeros(dims: &[usize], dtype: DType) -> Result<Self> {
        Ok(HostTensor {
            dims: dims.iter().copied().collect(),
            data: HostData::zeros(dtype, element_count(dims)?)?,
        })
    }

    /// The shape.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }
    /// `true` when a dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// The elements.
    pub fn data(&self) -> &HostData {
        &self.data
    }
    /// The elements, mutably (the shape cannot change).
    pub fn data_mut(&mut self) -> &mut HostData {
        &mut self.data
    }
    /// Splits into shape and elements.
    pub fn into_parts(self) -> (Dims, HostData) {
        (self.dims, self.data)
    }

    /// Typed view of the elements.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (argument `"tensor"`) when the dtype is not `T`.
    pub fn as_slice<T: HostElement>(&self) -> Result<&[T]> {
        T::slice(&self.data).ok_or_else(|| Error::DTypeMismatch {
            arg: "tensor".into(),
            expected: T::DTYPE.to_string(),
            actual: self.dtype(),
        })
    }

    /// The same values in another dtype: lossless promotion, or projection (real part,
    /// rounding) when `dtype` is narrower.
    pub fn to_dtype_projected(&self, dtype: DType) -> HostTensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        HostTensor {
            dims: self.dims.clone(),
            data: HostData::from_c64_projected(&self.data.to_c64_vec(), dtype),
        }
    }
}
