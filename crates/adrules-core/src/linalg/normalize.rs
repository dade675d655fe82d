//! Normalization `x ↦ x̂ = x/‖x‖` (Frobenius norm over all elements) with its pushforward and
//! pullback: the step that keeps a power method, a CTMRG environment or a fixed-point
//! iterate at unit norm.
//!
//! # Rule
//! With `n = ‖x‖ = √⟨x, x⟩` and `x̂ = x/n`, the derivative of `x̂` is the projector onto the
//! complement of `x̂` (real directions only: the norm sees `Re⟨x̂, ẋ⟩`), divided by `n`:
//! ```text
//!   ṅ = Re⟨x̂, ẋ⟩,        (d/dt) x̂ = (ẋ − x̂·Re⟨x̂, ẋ⟩)/n.
//! ```
//! The map `ẋ ↦ (ẋ − x̂·Re⟨x̂, ẋ⟩)/n` is self-adjoint for the real inner product
//! `Re⟨·, ·⟩`, so the pullback (cotangent convention of [`crate::math`]) has the same form,
//! plus the norm's own cotangent `n̄` along `x̂`:
//! ```text
//!   x̄ = (x̂̄ − x̂·Re⟨x̂, x̂̄⟩)/n + n̄·x̂.
//! ```
//! Derivation in `MATH.md` ("Normalization"); the same rule as ChainRules.jl's `normalize`
//! (`rrule(::typeof(normalize), x)`, `src/rulesets/LinearAlgebra/norm.jl`).

use crate::Conj;
use crate::backend::{Backend, check};
use crate::error::{Error, Result};
use crate::scalar::{DType, DynScalar};
use crate::spec::Permutation;

use num_complex::Complex64;

/// `x̂ = x/‖x‖` and `‖x‖`: the output of [`normalize`].
#[derive(Clone, Debug)]
pub struct Normalized<B: Backend> {
    /// `x̂ = x/‖x‖`, x's shape and dtype
    pub unit: B::Tensor,
    /// `‖x‖ = √(Σ |x_I|²)` over all elements (Frobenius norm), in `f64`
    pub norm: f64,
}

/// `x̂ = x/‖x‖` for a tensor of any shape and any dtype of the backend, the norm the
/// Frobenius norm over all elements.
///
/// The norm is computed as `√⟨x, x⟩`; when `⟨x, x⟩` overflows x's precision (entries
/// above about `√max`, as in `[1e200, 1e200]` in f64) or falls below `min_positive/ε`
/// (where subnormal squares would lose digits, as in `[1e-200]`), x is first scaled by a
/// power of two (exact) and `‖x‖` is taken from the scaled copy, as LAPACK's `nrm2` avoids
/// the same overflow. x̂ is then computed from the scaled copy.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `"x"` when `‖x‖` is zero (x̂ is undefined: a zero
/// tensor, or an empty one), when x holds NaN or ±∞, or when `‖x‖` itself exceeds f64's
/// range; backend errors.
pub fn normalize<B: Backend>(be: &B, x: &B::Tensor) -> Result<Normalized<B>> {
    let dtype = be.dtype(x);
    let squared = be.inner(x, x)?.re();
    // Below `min_positive/ε` subnormal squares could carry a relative weight above ε.
    let (tiny, huge) = if dtype.is_double() {
        (f64::MIN_POSITIVE / f64::EPSILON, f64::MAX)
    } else {
        (
            f32::MIN_POSITIVE as f64 / f32::EPSILON as f64,
            f32::MAX as f64,
        )
    };
    if squared.is_finite() && squared >= tiny && squared <= huge {
        let norm = squared.sqrt();
        let mut unit = be.zeros(&be.dims(x), dtype)?;
        axpy(be, &mut unit, x, 1.0 / norm, false)?;
        return Ok(Normalized { unit, norm });
    }
    if squared.is_nan() {
        return Err(refused("x holds NaN or ±∞".into()));
    }
    // Out of range (or zero): rescale by 2^±e so that the squares of the largest entries
    // land well inside the normal range (f64: ⟨x, x⟩ < 2^-969 raises all entries by 2^600,
    // an overflow lowers all by 2^-600; f32: below 2^-102, 2^±100). Each square is then
    // below ⟨x, x⟩ < 2^-969 (2^-102) before scaling, so the scaled sum cannot overflow.
    let e: i32 = if dtype.is_double() { 600 } else { 100 };
    let e = if squared > huge || squared.is_infinite() {
        -e
    } else {
        e
    };
    let scale = 2f64.powi(e);
    let mut scaled = be.zeros(&be.dims(x), dtype)?;
    axpy(be, &mut scaled, x, scale, false)?;
    let squared_s = be.inner(&scaled, &scaled)?.re();
    if !squared_s.is_finite() {
        return Err(refused("x holds NaN or ±∞".into()));
    }
    if squared_s == 0.0 {
        return Err(refused("‖x‖ = 0 (a zero or empty tensor)".into()));
    }
    let norm_s = squared_s.sqrt();
    let norm = norm_s / scale;
    if !(norm.is_finite() && norm > 0.0) {
        return Err(refused(format!("‖x‖ = {norm:e} is outside f64's range")));
    }
    let mut unit = be.zeros(&be.dims(x), dtype)?;
    axpy(be, &mut unit, &scaled, 1.0 / norm_s, false)?;
    Ok(Normalized { unit, norm })
}

fn refused(why: String) -> Error {
    Error::invalid("x", format!("x/‖x‖ needs a finite, non-zero norm: {why}"))
}

/// [`normalize`] with its pullback.
///
/// # Errors
/// As [`normalize`].
pub fn normalize_rrule<B: Backend>(
    be: &B,
    x: &B::Tensor,
) -> Result<(Normalized<B>, NormalizePullback<B>)> {
    let out = normalize(be, x)?;
    let pullback = NormalizePullback {
        be: be.clone(),
        unit: out.unit.clone(),
        norm: out.norm,
        dims: be.dims(x).to_vec(),
        dtype: be.dtype(x),
    };
    Ok((out, pullback))
}

/// [`normalize`] with its tangent along `ẋ`: `(x̂, ‖x‖)`, `(d/dt) x̂` and `ṅ` (see the
/// [`NormalizePullback::tangent`] for the formula).
///
/// # Errors
/// As [`normalize`]; [`Error::ShapeMismatch`] or [`Error::DTypeMismatch`] naming `"x_dot"`
/// when ẋ's shape differs from x's or its dtype does not promote to x's.
pub fn normalize_frule<B: Backend>(
    be: &B,
    x: &B::Tensor,
    x_dot: &B::Tensor,
) -> Result<(Normalized<B>, B::Tensor, f64)> {
    let (out, pullback) = normalize_rrule(be, x)?;
    let (unit_dot, norm_dot) = pullback.tangent(x_dot)?;
    Ok((out, unit_dot, norm_dot))
}

/// The pullback (and pushforward) of [`normalize`] at one point: owns `x̂` and `‖x‖`.
#[derive(Clone, Debug)]
pub struct NormalizePullback<B: Backend> {
    be: B,
    unit: B::Tensor,
    norm: f64,
    dims: Vec<usize>,
    dtype: DType,
}

impl<B: Backend> NormalizePullback<B> {
    /// `x̂`.
    pub fn unit(&self) -> &B::Tensor {
        &self.unit
    }

    /// `‖x‖`.
    pub fn norm(&self) -> f64 {
        self.norm
    }

    /// The cotangent of x for the cotangent `x̂̄` of `x̂` (None: zero) and `n̄` of `‖x‖`:
    /// `x̄ = (x̂̄ − x̂·Re⟨x̂, x̂̄⟩)/n + n̄·x̂`, in x's dtype.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] or [`Error::DTypeMismatch`] naming `"unit_bar"` when `x̂̄`'s
    /// shape differs from x's or its dtype does not promote to x's;
    /// [`Error::InvalidArgument`] naming `"norm_bar"` when `n̄` is not finite, naming
    /// `"unit_bar"` when `x̂̄` has a NaN or ∞ entry (refused, as by the decompositions: the
    /// [`crate::finite`] policy of [`crate::linalg`]); [`Error::NonFinite`] naming `"x_bar"`
    /// when `x̄` is beyond the dtype's range (a tiny `‖x‖`: `x̄` grows as `1/‖x‖`).
    pub fn pullback(&self, unit_bar: Option<&B::Tensor>, norm_bar: f64) -> Result<B::Tensor> {
        if !norm_bar.is_finite() {
            return Err(Error::invalid(
                "norm_bar",
                format!("must be finite, got {norm_bar:?}"),
            ));
        }
        if let Some(w) = unit_bar {
            check::like(&self.be, "unit_bar", w, &self.dims, self.dtype)?;
            self.finite_arg("unit_bar", w)?;
        }
        let x_bar = if self.reciprocal_in_range() {
            let mut x_bar = self.be.zeros(&self.dims, self.dtype)?;
            let along = match unit_bar {
                Some(w) => {
                    axpy(&self.be, &mut x_bar, w, 1.0 / self.norm, false)?;
                    norm_bar - self.be.inner(&self.unit, w)?.re() / self.norm
                }
                None => norm_bar,
            };
            axpy(&self.be, &mut x_bar, &self.unit, along, true)?;
            x_bar
        } else {
            // ‖x‖ so small that 1/‖x‖ leaves the dtype: project at unit scale, then divide.
            let mut x_bar = match unit_bar {
                Some(w) => {
                    let along = self.be.inner(&self.unit, w)?.re();
                    self.over_norm(w, along)?
                }
                None => self.be.zeros(&self.dims, self.dtype)?,
            };
            axpy(&self.be, &mut x_bar, &self.unit, norm_bar, true)?;
            x_bar
        };
        let inputs: Vec<&B::Tensor> = unit_bar.into_iter().collect();
        crate::finite::check(&self.be, || "x_bar".into(), &x_bar, &inputs)?;
        Ok(x_bar)
    }

    /// [`Error::InvalidArgument`] naming `arg` when `t` has a NaN or ∞ entry.
    fn finite_arg(&self, arg: &str, t: &B::Tensor) -> Result<()> {
        if self.be.all_finite(t)? {
            return Ok(());
        }
        Err(Error::invalid(arg, "has a NaN or infinite entry"))
    }

    /// `1/‖x‖` is a finite number of x's dtype, below the square root of its largest value
    /// (so that `v/‖x‖` overflows only for cotangents or tangents near that root).
    fn reciprocal_in_range(&self) -> bool {
        let limit = if self.dtype.is_double() {
            2f64.powi(512)
        } else {
            2f64.powi(64)
        };
        1.0 / self.norm <= limit
    }

    /// `(v − x̂·a)/‖x‖` for a tiny `‖x‖`: the difference at unit scale, then the division as
    /// two exact-range factors `1/(‖x‖·2^e)` and `2^e` (e = 600 for f64, 100 for f32).
    fn over_norm(&self, v: &B::Tensor, a: f64) -> Result<B::Tensor> {
        let s = 2f64.powi(if self.dtype.is_double() { 600 } else { 100 });
        let mut p = self.be.zeros(&self.dims, self.dtype)?;
        axpy(&self.be, &mut p, v, 1.0, false)?;
        axpy(&self.be, &mut p, &self.unit, -a, true)?;
        let mut q = self.be.zeros(&self.dims, self.dtype)?;
        axpy(&self.be, &mut q, &p, 1.0 / (self.norm * s), false)?;
        axpy(&self.be, &mut p, &q, s, false)?;
        Ok(p)
    }

    /// The tangent `((d/dt) x̂, ṅ)` along `ẋ`: `(ẋ − x̂·Re⟨x̂, ẋ⟩)/n` (x's dtype) and
    /// `Re⟨x̂, ẋ⟩`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] or [`Error::DTypeMismatch`] naming `"x_dot"` when ẋ's shape
    /// differs from x's or its dtype does not promote to x's; [`Error::InvalidArgument`]
    /// naming `"x_dot"` when ẋ has a NaN or ∞ entry (refused, as by the decompositions);
    /// [`Error::NonFinite`] naming `"unit_dot"` when the tangent is beyond the dtype's range.
    pub fn tangent(&self, x_dot: &B::Tensor) -> Result<(B::Tensor, f64)> {
        check::like(&self.be, "x_dot", x_dot, &self.dims, self.dtype)?;
        self.finite_arg("x_dot", x_dot)?;
        let norm_dot = self.be.inner(&self.unit, x_dot)?.re();
        let unit_dot = if self.reciprocal_in_range() {
            let mut unit_dot = self.be.zeros(&self.dims, self.dtype)?;
            axpy(&self.be, &mut unit_dot, x_dot, 1.0 / self.norm, false)?;
            axpy(
                &self.be,
                &mut unit_dot,
                &self.unit,
                -norm_dot / self.norm,
                true,
            )?;
            unit_dot
        } else {
            self.over_norm(x_dot, norm_dot)?
        };
        crate::finite::check(&self.be, || "unit_dot".into(), &unit_dot, &[x_dot])?;
        Ok((unit_dot, norm_dot))
    }
}

/// `y ← a·x + (accumulate ? y : 0)` for a real `a`, any shape (identity permutation).
fn axpy<B: Backend>(
    be: &B,
    y: &mut B::Tensor,
    x: &B::Tensor,
    a: f64,
    accumulate: bool,
) -> Result<()> {
    let dtype = be.dtype(y);
    let p = Permutation::identity(be.dims(y).len());
    let (alpha, beta) = (
        DynScalar::from_c64(Complex64::new(a, 0.0), dtype),
        DynScalar::from_c64(Complex64::new(accumulate as u8 as f64, 0.0), dtype),
    );
    be.add(y, x, &p, Conj::No, alpha, beta)
}
