//! The Moore–Penrose pseudo-inverse by the SVD, with its pullback and pushforward.

use std::sync::Arc;

use faer::{Mat, MatRef};

use super::{Cotangents, Outputs, WithTangents, dense_rule};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::linalg::SvdMode;
use crate::linalg::batch::{by_dtype, matrix_dims, split, split_real};
use crate::linalg::common::{cj, mm, real};
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Primal, Rule, SyncBackend};
use crate::scalar::{ImplicitScalar, eps};

/// The pseudo-inverse as a rule: one input `A: [batch…, m, n]`, one output
/// `A⁺: [batch…, n, m]`, `A⁺ = V·diag(s⁺)·Uᴴ` from the backend's thin SVD
/// ([`Backend::svd`]) with `s⁺ᵢ = 1/sᵢ` for `sᵢ > rtol·s₀` and 0 otherwise (`s₀` the largest
/// singular value; NumPy's and PyTorch's cutoff).
///
/// **Pushforward** (Golub & Pereyra, "The differentiation of pseudo-inverses and nonlinear
/// least squares problems whose variables separate", SIAM J. Numer. Anal. 10 (1973), eq.
/// (4.12)): `Ẏ = −A⁺·Ȧ·A⁺ + A⁺·A⁺ᴴ·Ȧᴴ·(I − A·A⁺) + (I − A⁺·A)·Ȧᴴ·A⁺ᴴ·A⁺`. **Pullback** (its
/// adjoint term by term): `Ā = −A⁺ᴴ·Ȳ·A⁺ᴴ + (I − A·A⁺)·Ȳᴴ·A⁺·A⁺ᴴ + A⁺ᴴ·A⁺·Ȳᴴ·(I − A⁺·A)`.
/// These are the derivatives where the rank (the number of kept singular values) is
/// locally constant: at a singular value crossing the cutoff the pseudo-inverse jumps and
/// has none; the rules then give that of the branch the primal chose. First order only.
///
/// # Errors
/// [`Error::RankMismatch`](crate::Error::RankMismatch), a non-finite entry
/// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)), an `rtol` that is negative
/// or not finite ([`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
/// `"rtol"`), a result beyond the dtype's range ([`Error::NonFinite`](crate::Error::NonFinite)).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PinvRule {
    /// the relative cutoff; `None`: `max(m, n)·ε` of the dtype
    pub rtol: Option<f64>,
}

/// `A⁺` (see [`PinvRule`]).
///
/// # Errors
/// As [`PinvRule`].
pub fn pinv<B: SyncBackend>(be: &B, a: &B::Tensor, rtol: Option<f64>) -> Result<B::Tensor> {
    Ok(crate::rule::primal(&PinvRule { rtol }, be, &[a])?.remove(0))
}

impl PinvRule {
    fn validate(&self) -> Result<()> {
        match self.rtol {
            Some(r) if !(r.is_finite() && r >= 0.0) => Err(Error::invalid(
                "rtol",
                format!("must be finite and ≥ 0, got {r:?}"),
            )),
            _ => Ok(()),
        }
    }
}

impl Rule for PinvRule {
    dense_rule!("pinv", 1, 1);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        self.validate()?;
        matrix_dims(&be.dims(x[0]), "a").map(drop)
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        by_dtype!(be.dtype(x[0]), rrule_t::<B>(*self, be, x[0]))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        by_dtype!(be.dtype(x[0]), frule_t::<B>(*self, be, x[0], dx[0]))
    }
}

/// The host copies of `A` and `A⁺`, one per matrix, and `A⁺` as the output tensor.
#[allow(clippy::type_complexity)]
fn forward<B: Backend, T: ImplicitScalar>(
    rule: PinvRule,
    be: &B,
    a: &B::Tensor,
) -> Result<(
    B::Tensor,
    Arc<(Vec<Mat<T>>, Vec<Mat<T>>)>,
    Vec<usize>,
    [usize; 2],
)> {
    rule.validate()?;
    let (batch, m, n) = matrix_dims(&be.dims(a), "a")?;
    let k = m.min(n);
    let mats = super::input_mats::<B, T>(be, a, "a")?;
    let [u, s, vh] = be.svd(a, SvdMode::Thin)?;
    let us = split::<T>(&be.to_host(&u)?, "u", false)?;
    let vhs = split::<T>(&be.to_host(&vh)?, "vh", false)?;
    let ss = split_real(&be.to_host(&s)?, k);
    let rtol = rule.rtol.unwrap_or(m.max(n) as f64 * eps::<T>());
    let h = per_matrix::<T, Mat<T>>(&batch, ("pinv", n, m), |b| {
        let s0 = ss[b].first().copied().unwrap_or(0.0);
        let inv: Vec<f64> = ss[b]
            .iter()
            .map(|&x| if x > rtol * s0 { 1.0 / x } else { 0.0 })
            .collect();
        // A⁺ = V·diag(s⁺)·Uᴴ, V = Vhᴴ
        let vs = Mat::from_fn(n, k, |i, j| cj(vhs[b][(j, i)]) * real::<T>(inv[j]));
        Ok(mm(vs.as_ref(), us[b].adjoint()))
    })?;
    let pinvs = split::<T>(&h, "pinv", false)?;
    Ok((be.from_host(h)?, Arc::new((mats, pinvs)), batch, [m, n]))
}

/// `I − X` for a square `x`.
fn complement<T: ImplicitScalar>(x: MatRef<'_, T>) -> Mat<T> {
    Mat::from_fn(x.nrows(), x.ncols(), |i, j| {
        (if i == j { T::one() } else { T::zero() }) - x[(i, j)]
    })
}

/// One matrix: `Ā` for `Ȳ` (the formula of [`PinvRule`]).
fn pinv_pullback<T: ImplicitScalar>(
    a: MatRef<'_, T>,
    p: MatRef<'_, T>,
    yb: MatRef<'_, T>,
) -> Mat<T> {
    let ph = p.adjoint();
    // −A⁺ᴴ·Ȳ·A⁺ᴴ
    let mut g = -mm(mm(ph, yb).as_ref(), ph);
    // (I − A·A⁺)·Ȳᴴ·A⁺·A⁺ᴴ
    let left = complement(mm(a, p).as_ref());
    let ppt = mm(p, ph);
    g += mm(left.as_ref(), mm(yb.adjoint(), ppt.as_ref()).as_ref());
    // A⁺ᴴ·A⁺·Ȳᴴ·(I − A⁺·A)
    let right = complement(mm(p, a).as_ref());
    let php = mm(ph, p);
    g += mm(mm(php.as_ref(), yb.adjoint()).as_ref(), right.as_ref());
    g
}

/// One matrix: `Ẏ` for `Ȧ` (the formula of [`PinvRule`]).
fn pinv_pushforward<T: ImplicitScalar>(
    a: MatRef<'_, T>,
    p: MatRef<'_, T>,
    d: MatRef<'_, T>,
) -> Mat<T> {
    let ph = p.adjoint();
    // −A⁺·Ȧ·A⁺
    let mut t = -mm(mm(p, d).as_ref(), p);
    // A⁺·A⁺ᴴ·Ȧᴴ·(I − A·A⁺)
    let left = complement(mm(a, p).as_ref());
    t += mm(mm(mm(p, ph).as_ref(), d.adjoint()).as_ref(), left.as_ref());
    // (I − A⁺·A)·Ȧᴴ·A⁺ᴴ·A⁺
    let right = complement(mm(p, a).as_ref());
    t += mm(right.as_ref(), mm(d.adjoint(), mm(ph, p).as_ref()).as_ref());
    t
}

fn rrule_t<B: SyncBackend, T: ImplicitScalar>(
    rule: PinvRule,
    be: &B,
    a: &B::Tensor,
) -> Result<Outputs<B>> {
    let (out, kept, batch, [m, n]) = forward::<B, T>(rule, be, a)?;
    let pullback = move |be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
        let Some(y) = &y[0] else {
            return Ok(vec![None]);
        };
        let (mats, pinvs) = &*kept;
        let bars = host_mats::<B, T>(be, y, &batch, [n, m], "pinv_bar")?;
        let h = per_matrix::<T, Mat<T>>(&batch, ("a_bar", m, n), |b| {
            Ok(pinv_pullback(
                mats[b].as_ref(),
                pinvs[b].as_ref(),
                bars[b].as_ref(),
            ))
        })?;
        Ok(vec![Some(be.from_host(h)?)])
    };
    Ok((vec![out], Box::new(pullback)))
}

fn frule_t<B: SyncBackend, T: ImplicitScalar>(
    rule: PinvRule,
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
) -> Result<WithTangents<B>> {
    let (out, kept, batch, [m, n]) = forward::<B, T>(rule, be, a)?;
    let Some(a_dot) = a_dot else {
        return Ok((vec![out], vec![None]));
    };
    let (mats, pinvs) = &*kept;
    let dots = host_mats::<B, T>(be, a_dot, &batch, [m, n], "a_dot")?;
    let h = per_matrix::<T, Mat<T>>(&batch, ("pinv_dot", n, m), |b| {
        Ok(pinv_pushforward(
            mats[b].as_ref(),
            pinvs[b].as_ref(),
            dots[b].as_ref(),
        ))
    })?;
    Ok((vec![out], vec![Some(be.from_host(h)?)]))
}

/// Least squares as a rule: inputs `[A, B]`, `A: [batch…, m, n]`, `B: [batch…, m]` (vectors:
/// rank one less than `A`'s) or `[batch…, m, k]`, the same batch and dtype; output the
/// minimum-norm least-squares solution `X = A⁺·B` (`[batch…, n]` or `[batch…, n, k]`), which
/// for a full-column-rank `A` is the unique minimiser of `‖A·X − B‖_F` (NumPy's and
/// PyTorch's `lstsq` solution), with `A⁺` as [`PinvRule`] (`rtol` the cutoff of small
/// singular values).
///
/// **Pushforward**: `Ẋ = Ȧ⁺·B + A⁺·Ḃ`, `Ȧ⁺` the pseudo-inverse's pushforward. **Pullback**:
/// `B̄ = A⁺ᴴ·X̄`, and `Ā` the pseudo-inverse's pullback of `X̄·Bᴴ` (Golub & Pereyra 1973).
/// Where the rank is locally constant, as [`PinvRule`].
///
/// # Errors
/// As [`PinvRule`]; [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) for a `B` of
/// another batch or row count, [`Error::DTypeMismatch`](crate::Error::DTypeMismatch).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LstsqRule {
    /// the relative cutoff of the pseudo-inverse; `None`: `max(m, n)·ε` of the dtype
    pub rtol: Option<f64>,
}

/// `X = A⁺·B` (see [`LstsqRule`]).
///
/// # Errors
/// As [`LstsqRule`].
pub fn lstsq<B: SyncBackend>(
    be: &B,
    a: &B::Tensor,
    b: &B::Tensor,
    rtol: Option<f64>,
) -> Result<B::Tensor> {
    Ok(crate::rule::primal(&LstsqRule { rtol }, be, &[a, b])?.remove(0))
}

impl LstsqRule {
    /// `(batch, [m, n], k, vector)`, checked.
    fn dims(a: &[usize], b: &[usize]) -> Result<(Vec<usize>, [usize; 2], usize, bool)> {
        let (batch, m, n) = matrix_dims(a, "a")?;
        let (k, vector) = super::rhs_dims(&batch, m, a.len(), b)?;
        Ok((batch, [m, n], k, vector))
    }
}

impl Rule for LstsqRule {
    dense_rule!("lstsq", 2, 1);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        PinvRule { rtol: self.rtol }.validate()?;
        Self::dims(&be.dims(x[0]), &be.dims(x[1]))?;
        super::same_dtype(be.dtype(x[0]), be.dtype(x[1]), "b")
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], act: &[bool]) -> Result<Outputs<B>> {
        by_dtype!(be.dtype(x[0]), lstsq_rrule_t::<B>(*self, be, x, act))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        by_dtype!(be.dtype(x[0]), lstsq_frule_t::<B>(*self, be, x, dx))
    }
}

/// The pseudo-inverses, `B`'s matrices and the solutions (and `X` as the output tensor).
#[allow(clippy::type_complexity)]
fn lstsq_forward<B: Backend, T: ImplicitScalar>(
    rule: LstsqRule,
    be: &B,
    x: &[&B::Tensor],
) -> Result<(
    B::Tensor,
    Arc<(Vec<Mat<T>>, Vec<Mat<T>>)>,
    Vec<Mat<T>>,
    Vec<Mat<T>>,
    usize,
    bool,
)> {
    rule.check(be, x)?;
    let (batch, [m, n], k, vector) = LstsqRule::dims(&be.dims(x[0]), &be.dims(x[1]))?;
    let (_, kept, ..) = forward::<B, T>(PinvRule { rtol: rule.rtol }, be, x[0])?;
    let bs = super::arg_mats::<B, T>(be, x[1], &batch, [m, k], vector, "b")?;
    let xs: Vec<Mat<T>> = kept
        .1
        .iter()
        .zip(&bs)
        .map(|(p, b)| mm(p.as_ref(), b.as_ref()))
        .collect();
    let mut dims = batch.clone();
    dims.push(n);
    if !vector {
        dims.push(k);
    }
    let out = super::reshaped(crate::linalg::batch::join("x", &batch, n, k, &xs)?, &dims)?;
    Ok((be.from_host(out)?, kept, bs, xs, k, vector))
}

fn lstsq_rrule_t<B: SyncBackend, T: ImplicitScalar>(
    rule: LstsqRule,
    be: &B,
    x: &[&B::Tensor],
    active: &[bool],
) -> Result<Outputs<B>> {
    let (out, kept, bs, _, k, vector) = lstsq_forward::<B, T>(rule, be, x)?;
    let (b_dims, a_dims) = (be.dims(x[1]), be.dims(x[0]));
    let (batch, m, n) = matrix_dims(&a_dims, "a")?;
    let a_active = active.first().copied().unwrap_or(true);
    let bs = Arc::new(bs);
    let pullback = move |be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
        let Some(y) = &y[0] else {
            return Ok(vec![None, None]);
        };
        let (mats, pinvs) = &*kept;
        let bars = super::arg_mats::<B, T>(be, y, &batch, [n, k], vector, "x_bar")?;
        let a_bar = if a_active {
            let h = per_matrix::<T, Mat<T>>(&batch, ("a_bar", m, n), |i| {
                let p_bar = mm(bars[i].as_ref(), bs[i].adjoint());
                Ok(pinv_pullback(
                    mats[i].as_ref(),
                    pinvs[i].as_ref(),
                    p_bar.as_ref(),
                ))
            })?;
            Some(be.from_host(h)?)
        } else {
            None
        };
        let b_bar = per_matrix::<T, Mat<T>>(&batch, ("b_bar", m, k), |i| {
            Ok(mm(pinvs[i].adjoint(), bars[i].as_ref()))
        })?;
        Ok(vec![
            a_bar,
            Some(be.from_host(super::reshaped(b_bar, &b_dims)?)?),
        ])
    };
    Ok((vec![out], Box::new(pullback)))
}

fn lstsq_frule_t<B: SyncBackend, T: ImplicitScalar>(
    rule: LstsqRule,
    be: &B,
    x: &[&B::Tensor],
    dx: &[Option<&B::Tensor>],
) -> Result<WithTangents<B>> {
    let (out, kept, bs, _, k, vector) = lstsq_forward::<B, T>(rule, be, x)?;
    if dx.iter().all(Option::is_none) {
        return Ok((vec![out], vec![None]));
    }
    let (batch, m, n) = matrix_dims(&be.dims(x[0]), "a")?;
    let (mats, pinvs) = &*kept;
    let a_dots = dx[0]
        .map(|t| host_mats::<B, T>(be, t, &batch, [m, n], "a_dot"))
        .transpose()?;
    let b_dots = dx[1]
        .map(|t| super::arg_mats::<B, T>(be, t, &batch, [m, k], vector, "b_dot"))
        .transpose()?;
    let dots = per_matrix::<T, Mat<T>>(&batch, ("x_dot", n, k), |i| {
        let mut t = Mat::zeros(n, k);
        if let Some(d) = &a_dots {
            let p_dot = pinv_pushforward(mats[i].as_ref(), pinvs[i].as_ref(), d[i].as_ref());
            t += mm(p_dot.as_ref(), bs[i].as_ref());
        }
        if let Some(d) = &b_dots {
            t += mm(pinvs[i].as_ref(), d[i].as_ref());
        }
        Ok(t)
    })?;
    let dot = super::reshaped(dots, &be.dims(&out))?;
    Ok((vec![out], vec![Some(be.from_host(dot)?)]))
}
