//! Element types: the [`Scalar`] trait over `f32`, `f64`, [`Complex32`] and [`Complex64`],
//! the runtime [`DType`] tag, and [`DynScalar`], a coefficient (α, β, a cotangent of α, a
//! value extracted from a rank-0 tensor) whose element type is known only at run time.
//!
//! # Promotion and projection
//! Promotion is lossless: `f32 → f64`, real → complex of at least the same precision
//! (`f32 → c32`, `f32 → c64`, `f64 → c64`), `c32 → c64`. The primitives accept an input whose
//! dtype promotes to the output's dtype ([`DType::promotes_to`]).
//!
//! Projection is the reverse-mode counterpart (ChainRules' `ProjectTo`): a cotangent is
//! brought back to its primal's dtype by taking the real part (for a real primal that fed a
//! complex result) and rounding to the primal's precision ([`DynScalar::project`]).

use std::fmt::{Debug, Display};
use std::ops::{Add, Mul, Neg, Sub};

pub use num_complex::{Complex32, Complex64};

use crate::error::{Error, Result};
use crate::host::HostElement;

/// Runtime element-type tag of a tensor or a [`DynScalar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// [`Complex32`] (two `f32`)
    C32,
    /// [`Complex64`] (two `f64`)
    C64,
}

impl DType {
    /// All four element types, in declaration order.
    pub const ALL: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];

    /// `true` for `C32` and `C64`.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C32 | DType::C64)
    }

    /// `true` for `F64` and `C64`.
    pub fn is_double(self) -> bool {
        matches!(self, DType::F64 | DType::C64)
    }

    /// The real type of the same precision (`C64 → F64`, `F32 → F32`).
    pub fn real(self) -> DType {
        match self {
            DType::F32 | DType::C32 => DType::F32,
            DType::F64 | DType::C64 => DType::F64,
        }
    }

    /// The complex type of the same precision (`F64 → C64`, `C32 → C32`).
    pub fn complex(self) -> DType {
        match self {
            DType::F32 | DType::C32 => DType::C32,
            DType::F64 | DType::C64 => DType::C64,
        }
    }

    /// The smallest dtype both `self` and `other` promote to losslessly.
    pub fn join(self, other: DType) -> DType {
        let double = self.is_double() || other.is_double();
        let complex = self.is_complex() || other.is_complex();
        match (complex, double) {
            (false, false) => DType::F32,
            (false, true) => DType::F64,
            (true, false) => DType::C32,
            (true, true) => DType::C64,
        }
    }

    /// `true` when a value of `self` converts to `target` without loss.
    pub fn promotes_to(self, target: DType) -> bool {
        self.join(target) == target
    }

    /// Size of one element in bytes.
    pub fn size_of(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::C32 => 8,
            DType::C64 => 16,
        }
    }
}

impl Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C32 => "c32",
            DType::C64 => "c64",
        })
    }
}

/// An element type of a tensor: `f32`, `f64`, [`Complex32`] or [`Complex64`].
///
/// Arithmetic comes from `num_traits::NumAssign`; this trait adds conjugation, real and
/// imaginary parts, and the bridge to the run-time [`DType`] / [`DynScalar`] world.
pub trait Scalar:
    Copy
    + Debug
    + Default
    + PartialEq
    + Send
    + Sync
    + 'static
    + num_traits::NumAssign
    + Neg<Output = Self>
    + std::iter::Sum
{
    /// The real type of the same precision (`f64` for `Complex64`).
    type Real: RealScalar;
    /// The run-time tag of this type.
    const DTYPE: DType;
    /// Complex conjugate (identity for real types).
    fn conj(self) -> Self;
    /// Real part.
    fn re(self) -> Self::Real;
    /// Imaginary part (zero for real types).
    fn im(self) -> Self::Real;
    /// Embeds a real number.
    fn from_real(re: Self::Real) -> Self;
    /// Builds a value from real and imaginary parts; the imaginary part is dropped for real
    /// types (callers that must not lose it check [`DType::is_complex`] first).
    fn from_parts(re: Self::Real, im: Self::Real) -> Self;
    /// Squared modulus `|x|²`.
    fn abs2(self) -> Self::Real {
        let (r, i) = (self.re(), self.im());
        r * r + i * i
    }
    /// Modulus `|x|`, without overflow or underflow of `|x|²` (`hypot`).
    fn modulus(self) -> Self::Real {
        num_traits::Float::hypot(self.re(), self.im())
    }
    /// `true` when both parts are finite.
    fn is_finite(self) -> bool {
        num_traits::Float::is_finite(self.re()) && num_traits::Float::is_finite(self.im())
    }
    /// Converts to a [`DynScalar`] of dtype [`Self::DTYPE`](Scalar::DTYPE).
    fn to_dyn(self) -> DynScalar;
    /// Converts a [`DynScalar`] into this type by lossless promotion or by rounding to this
    /// precision (`f64 → f32`, an "f32 tensor with an f64 α").
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when `v` is complex and `Self` is real: dropping an imaginary
    /// part silently would give a wrong number. Use [`DynScalar::project`] where that is the
    /// intended (reverse-mode projection) semantics.
    fn from_dyn(v: DynScalar) -> Result<Self> {
        if v.dtype().is_complex() && !Self::DTYPE.is_complex() {
            return Err(Error::DTypeMismatch {
                arg: "scalar".into(),
                expected: Self::DTYPE.to_string(),
                actual: v.dtype(),
            });
        }
        Ok(Self::from_c64_unchecked(v.to_c64()))
    }
    /// Converts a `Complex64`, rounding to this precision and dropping the imaginary part for
    /// real types (callers have checked that this is intended).
    fn from_c64_unchecked(v: Complex64) -> Self;
    /// Converts an `f64`, rounding to this precision.
    fn from_f64(v: f64) -> Self {
        Self::from_c64_unchecked(Complex64::new(v, 0.0))
    }
}

/// A real element type: `f32` or `f64`.
pub trait RealScalar: Scalar<Real = Self> + num_traits::Float + PartialOrd + Display {
    /// Machine epsilon.
    const EPS: Self;
    /// Converts to `f64`.
    fn to_f64(self) -> f64;
}

macro_rules! impl_real {
    ($t:ty, $dt:ident) => {
        impl Scalar for $t {
            type Real = $t;
            const DTYPE: DType = DType::$dt;
            #[inline(always)]
            fn conj(self) -> Self {
                self
            }
            #[inline(always)]
            fn re(self) -> Self {
                self
            }
            #[inline(always)]
            fn im(self) -> Self {
                0.0
            }
            #[inline(always)]
            fn from_real(re: Self) -> Self {
                re
            }
            #[inline(always)]
            fn from_parts(re: Self, _im: Self) -> Self {
                re
            }
            #[inline(always)]
            fn abs2(self) -> Self {
                self * self
            }
            /// `|x|` (libm's `hypot(x, 0)` is a call, not an instruction).
            #[inline(always)]
            fn modulus(self) -> Self {
                self.abs()
            }
            fn to_dyn(self) -> DynScalar {
                DynScalar::$dt(self)
            }
            fn from_c64_unchecked(v: Complex64) -> Self {
                v.re as $t
            }
        }
        impl RealScalar for $t {
            const EPS: Self = <$t>::EPSILON;
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    };
}
impl_real!(f32, F32);
impl_real!(f64, F64);

macro_rules! impl_complex {
    ($r:ty, $dt:ident) => {
        impl Scalar for num_complex::Complex<$r> {
            type Real = $r;
            const DTYPE: DType = DType::$dt;
            #[inline(always)]
            fn conj(self) -> Self {
                num_complex::Complex::conj(&self)
            }
            #[inline(always)]
            fn re(self) -> $r {
                self.re
            }
            #[inline(always)]
            fn im(self) -> $r {
                self.im
            }
            #[inline(always)]
            fn from_real(re: $r) -> Self {
                Self::new(re, 0.0)
            }
            #[inline(always)]
            fn from_parts(re: $r, im: $r) -> Self {
                Self::new(re, im)
            }
            fn to_dyn(self) -> DynScalar {
                DynScalar::$dt(self)
            }
            fn from_c64_unchecked(v: Complex64) -> Self {
                Self::new(v.re as $r, v.im as $r)
            }
        }
    };
}
impl_complex!(f32, C32);
impl_complex!(f64, C64);

/// Machine epsilon of `T`'s precision, as `f64`.
pub(crate) fn eps<T: ImplicitScalar>() -> f64 {
    <<T as Scalar>::Real as RealScalar>::EPS.to_f64()
}

/// The element types of implicit functions: `f32`, `f64`, `Complex32`, `Complex64` — the
/// crate's [`Scalar`]s that faer's linear algebra also supports (implemented for every type
/// that is both; not meant to be implemented by hand).
pub trait ImplicitScalar:
    Scalar<Real: faer::traits::RealField>
    + HostElement
    + faer::traits::ComplexField<Real = <Self as Scalar>::Real>
{
}

impl<T> ImplicitScalar for T where
    T: Scalar<Real: faer::traits::RealField>
        + HostElement
        + faer::traits::ComplexField<Real = <T as Scalar>::Real>
{
}

/// Lossless conversion of an element type `Self` into `T` (see [`DType::promotes_to`]).
///
/// Implemented exactly for the pairs where `Self::DTYPE.promotes_to(T::DTYPE)`.
pub trait Promote<T: Scalar>: Scalar {
    /// Converts without loss.
    fn promote(self) -> T;
}

macro_rules! promote {
    ($from:ty => $to:ty, $conv:expr) => {
        impl Promote<$to> for $from {
            #[inline(always)]
            fn promote(self) -> $to {
                #[allow(clippy::redundant_closure_call)]
                ($conv)(self)
            }
        }
    };
}
promote!(f32 => f32, |x| x);
promote!(f32 => f64, |x| x as f64);
promote!(f32 => Complex32, |x| Complex32::new(x, 0.0));
promote!(f32 => Complex64, |x| Complex64::new(x as f64, 0.0));
promote!(f64 => f64, |x| x);
promote!(f64 => Complex64, |x| Complex64::new(x, 0.0));
promote!(Complex32 => Complex32, |x| x);
promote!(Complex32 => Complex64, |x: Complex32| Complex64::new(x.re as f64, x.im as f64));
promote!(Complex64 => Complex64, |x| x);

/// A scalar whose element type is known at run time: a coefficient α or β, the cotangent or
/// tangent of a coefficient, an inner product, or the value of a rank-0 tensor.
///
/// Arithmetic (`+`, `-`, `*`) promotes both sides to [`DType::join`] of their dtypes. The
/// dtype matters for projection: a real α receives a real cotangent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DynScalar {
    /// an `f32`
    F32(f32),
    /// an `f64`
    F64(f64),
    /// a `Complex32`
    C32(Complex32),
    /// a `Complex64`
    C64(Complex64),
}

impl DynScalar {
    /// The element type.
    pub fn dtype(self) -> DType {
        match self {
            DynScalar::F32(_) => DType::F32,
            DynScalar::F64(_) => DType::F64,
            DynScalar::C32(_) => DType::C32,
            DynScalar::C64(_) => DType::C64,
        }
    }

    /// Zero of the given dtype.
    pub fn zero(dtype: DType) -> Self {
        Self::from_c64(Complex64::new(0.0, 0.0), dtype)
    }

    /// One of the given dtype.
    pub fn one(dtype: DType) -> Self {
        Self::from_c64(Complex64::new(1.0, 0.0), dtype)
    }

    /// The value widened to `Complex64` (exact for every dtype).
    pub fn to_c64(self) -> Complex64 {
        match self {
            DynScalar::F32(x) => Complex64::new(x as f64, 0.0),
            DynScalar::F64(x) => Complex64::new(x, 0.0),
            DynScalar::C32(x) => Complex64::new(x.re as f64, x.im as f64),
            DynScalar::C64(x) => x,
        }
    }

    /// Real part, as `f64`.
    pub fn re(self) -> f64 {
        self.to_c64().re
    }

    /// Imaginary part, as `f64` (zero for real dtypes).
    pub fn im(self) -> f64 {
        self.to_c64().im
    }

    /// `true` when the value is exactly zero (both parts).
    pub fn is_zero(self) -> bool {
        let z = self.to_c64();
        z.re == 0.0 && z.im == 0.0
    }

    /// `true` when the value is exactly one.
    pub fn is_one(self) -> bool {
        let z = self.to_c64();
        z.re == 1.0 && z.im == 0.0
    }

    /// Builds a value of `dtype` from a `Complex64`, rounding to `dtype`'s precision and
    /// dropping the imaginary part when `dtype` is real (projection semantics).
    pub fn from_c64(v: Complex64, dtype: DType) -> Self {
        match dtype {
            DType::F32 => DynScalar::F32(v.re as f32),
            DType::F64 => DynScalar::F64(v.re),
            DType::C32 => DynScalar::C32(Complex32::new(v.re as f32, v.im as f32)),
            DType::C64 => DynScalar::C64(v),
        }
    }

    /// Complex conjugate (same dtype).
    pub fn conj(self) -> Self {
        Self::from_c64(self.to_c64().conj(), self.dtype())
    }

    /// Converts to `dtype` by lossless promotion or by rounding precision.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (naming `arg`) when `self` is complex and `dtype` real.
    pub fn cast(self, dtype: DType, arg: &str) -> Result<Self> {
        if self.dtype().is_complex() && !dtype.is_complex() {
            return Err(Error::DTypeMismatch {
                arg: arg.into(),
                expected: dtype.to_string(),
                actual: self.dtype(),
            });
        }
        Ok(Self::from_c64(self.to_c64(), dtype))
    }

    /// Projects onto `dtype` (ChainRules' `ProjectTo`): the real part for a real `dtype`,
    /// rounded to `dtype`'s precision. Used for cotangents only.
    pub fn project(self, dtype: DType) -> Self {
        Self::from_c64(self.to_c64(), dtype)
    }

    /// Typed value; see [`Scalar::from_dyn`] for the conversion rules and errors.
    pub fn to<T: Scalar>(self) -> Result<T> {
        T::from_dyn(self)
    }

    fn binop(self, rhs: Self, f: impl Fn(Complex64, Complex64) -> Complex64) -> Self {
        let dtype = self.dtype().join(rhs.dtype());
        Self::from_c64(f(self.to_c64(), rhs.to_c64()), dtype)
    }
}

impl Display for DynScalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DynScalar::F32(x) => write!(f, "{x}f32"),
            DynScalar::F64(x) => write!(f, "{x}f64"),
            DynScalar::C32(x) => write!(f, "({x})c32"),
            DynScalar::C64(x) => write!(f, "({x})c64"),
        }
    }
}

impl Add for DynScalar {
    type Output = DynScalar;
    fn add(self, rhs: Self) -> Self {
        self.binop(rhs, |a, b| a + b)
    }
}

impl Sub for DynScalar {
    type Output = DynScalar;
    fn sub(self, rhs: Self) -> Self {
        self.binop(rhs, |a, b| a - b)
    }
}

impl Mul for DynScalar {
    type Output = DynScalar;
    fn mul(self, rhs: Self) -> Self {
        self.binop(rhs, |a, b| a * b)
    }
}

impl Neg for DynScalar {
    type Output = DynScalar;
    fn neg(self) -> Self {
        Self::from_c64(-self.to_c64(), self.dtype())
    }
}

impl From<f32> for DynScalar {
    fn from(x: f32) -> Self {
        DynScalar::F32(x)
    }
}
impl From<f64> for DynScalar {
    fn from(x: f64) -> Self {
        DynScalar::F64(x)
    }
}
impl From<Complex32> for DynScalar {
    fn from(x: Complex32) -> Self {
        DynScalar::C32(x)
    }
}
impl From<Complex64> for DynScalar {
    fn from(x: Complex64) -> Self {
        DynScalar::C64(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_is_the_promotion_lattice() {
        assert_eq!(DType::F32.join(DType::F64), DType::F64);
        assert_eq!(DType::F64.join(DType::C32), DType::C64);
        assert_eq!(DType::F32.join(DType::C32), DType::C32);
        assert!(DType::F32.promotes_to(DType::C64));
        assert!(!DType::F64.promotes_to(DType::C32));
        assert!(!DType::C32.promotes_to(DType::F64));
    }

    #[test]
    fn complex_to_real_is_an_error_but_projection_takes_the_real_part() {
        let z = DynScalar::C64(Complex64::new(1.5, 2.0));
        assert!(matches!(
            z.to::<f64>(),
            Err(Error::DTypeMismatch {
                actual: DType::C64,
                ..
            })
        ));
        assert_eq!(z.project(DType::F32), DynScalar::F32(1.5));
        assert_eq!(DynScalar::F64(0.1).to::<f32>().unwrap(), 0.1f32);
    }

    #[test]
    fn arithmetic_promotes() {
        let a = DynScalar::F32(2.0);
        let b = DynScalar::C32(Complex32::new(0.0, 1.0));
        assert_eq!(a * b, DynScalar::C32(Complex32::new(0.0, 2.0)));
        assert_eq!((DynScalar::F64(1.0) + a).dtype(), DType::F64);
        assert_eq!(b.conj(), DynScalar::C32(Complex32::new(0.0, -1.0)));
    }
}
