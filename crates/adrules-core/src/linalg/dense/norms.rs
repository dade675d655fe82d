//! Matrix norms (Frobenius, nuclear, spectral) with their pullbacks and pushforwards.

use std::sync::Arc;

use faer::Mat;

use super::{
    Cotangents, Outputs, WithTangents, arg_scalars, dense_rule, gather_scalars, input_mats,
};
use crate::backend::Backend;
use crate::error::Result;
use crate::linalg::SvdMode;
use crate::linalg::batch::{by_dtype, matrix_dims, split, split_real};
use crate::linalg::common::{abs, cj, re, real};
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Primal, Rule, SyncBackend};
use crate::scalar::{ImplicitScalar, eps};

/// Which matrix norm [`MatrixNormRule`] computes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatrixNorm {
    /// `‖A‖_F = (Σ |aᵢⱼ|²)^½`
    #[default]
    Frobenius,
    /// `‖A‖_* = Σ sᵢ`, the sum of the singular values
    Nuclear,
    /// `‖A‖₂ = s₀`, the largest singular value
    Spectral,
}

/// A matrix norm as a rule: one input `A: [batch…, m, n]`, one output `‖A‖: [batch…]` of
/// `A`'s real dtype. The nuclear and spectral norms use the backend's thin SVD
/// ([`Backend::svd`](crate::Backend::svd)).
///
/// Derivatives, and the subgradient chosen where the norm is not differentiable (the
/// conventions of JAX and PyTorch where they have one):
/// - **Frobenius**: `ṅ = Re⟨A, Ȧ⟩/‖A‖`, `Ā = n̄·A/‖A‖`; at `A = 0`, the subgradient 0.
/// - **Nuclear**: `ṅ = Re tr(U_rᴴ·Ȧ·V_r)`, `Ā = n̄·U_r·V_rᴴ` over the `r` singular values
///   above `max(m, n)·ε·s₀` (the minimum-norm subgradient where `A` is rank deficient).
/// - **Spectral**: `ṅ = Re(u₀ᴴ·Ȧ·v₀)`, `Ā = n̄·u₀·v₀ᴴ` with the singular vectors the SVD
///   returns; where `s₀` is degenerate this is one subgradient of many, and the frule's value
///   is not the (then one-sided, nonlinear) directional derivative.
///
/// First order only.
///
/// # Errors
/// [`Error::RankMismatch`](crate::Error::RankMismatch), a non-finite entry
/// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)), a norm beyond the dtype's
/// range ([`Error::NonFinite`](crate::Error::NonFinite)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatrixNormRule {
    /// the norm
    pub norm: MatrixNorm,
}

/// `‖A‖` for every matrix of `A: [batch…, m, n]` (see [`MatrixNormRule`]).
///
/// # Errors
/// As [`MatrixNormRule`].
pub fn matrix_norm<B: SyncBackend>(be: &B, a: &B::Tensor, norm: MatrixNorm) -> Result<B::Tensor> {
    Ok(crate::rule::primal(&MatrixNormRule { norm }, be, &[a])?.remove(0))
}

impl Rule for MatrixNormRule {
    dense_rule!("matrix_norm", 1, 1);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        matrix_dims(&be.dims(x[0]), "a").map(drop)
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        by_dtype!(be.dtype(x[0]), rrule_t::<B>(self.norm, be, x[0]))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        by_dtype!(be.dtype(x[0]), frule_t::<B>(self.norm, be, x[0], dx[0]))
    }
}

/// The norms, and per matrix the gradient direction `G` with `ṅ = Re⟨G, Ȧ⟩` and
/// `Ā = n̄·G` (`A/‖A‖`, `U_r·V_rᴴ`, `u₀·v₀ᴴ`).
#[allow(clippy::type_complexity)]
fn forward<B: Backend, T: ImplicitScalar>(
    norm: MatrixNorm,
    be: &B,
    a: &B::Tensor,
) -> Result<(B::Tensor, Arc<Vec<Mat<T>>>, Vec<usize>, [usize; 2])> {
    let (batch, m, n) = matrix_dims(&be.dims(a), "a")?;
    let k = m.min(n);
    let mats = input_mats::<B, T>(be, a, "a")?;
    let (values, dirs): (Vec<f64>, Vec<Mat<T>>) = if norm == MatrixNorm::Frobenius {
        mats.iter()
            .map(|x| {
                let f = (0..m)
                    .flat_map(|i| (0..n).map(move |j| (i, j)))
                    .map(|(i, j)| abs(x[(i, j)]).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let inv = if f > 0.0 { 1.0 / f } else { 0.0 };
                (f, Mat::from_fn(m, n, |i, j| x[(i, j)] * real::<T>(inv)))
            })
            .unzip()
    } else {
        let [u, s, vh] = be.svd(a, SvdMode::Thin)?;
        let us = split::<T>(&be.to_host(&u)?, "u", false)?;
        let vhs = split::<T>(&be.to_host(&vh)?, "vh", false)?;
        let ss = split_real(&be.to_host(&s)?, k);
        (0..mats.len())
            .map(|b| {
                let s0 = ss[b].first().copied().unwrap_or(0.0);
                let r = match norm {
                    MatrixNorm::Spectral => usize::from(s0 > 0.0),
                    _ => ss[b]
                        .iter()
                        .filter(|&&x| x > m.max(n) as f64 * eps::<T>() * s0)
                        .count(),
                };
                let value = match norm {
                    MatrixNorm::Spectral => s0,
                    _ => ss[b].iter().sum(),
                };
                let g = Mat::from_fn(m, n, |i, j| {
                    (0..r).fold(T::zero(), |acc, c| acc + us[b][(i, c)] * vhs[b][(c, j)])
                });
                (value, g)
            })
            .unzip()
    };
    let vals: Vec<T> = values.iter().map(|&v| real::<T>(v)).collect();
    let out = gather_scalars("norm", &batch, &vals, T::DTYPE.real())?;
    Ok((be.from_host(out)?, Arc::new(dirs), batch, [m, n]))
}

fn rrule_t<B: SyncBackend, T: ImplicitScalar>(
    norm: MatrixNorm,
    be: &B,
    a: &B::Tensor,
) -> Result<Outputs<B>> {
    let (out, dirs, batch, [m, n]) = forward::<B, T>(norm, be, a)?;
    let pullback = move |be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
        let Some(y) = &y[0] else {
            return Ok(vec![None]);
        };
        let bars = arg_scalars::<B, T>(be, y, &batch, T::DTYPE.real(), "norm_bar")?;
        let h = per_matrix::<T, Mat<T>>(&batch, ("a_bar", m, n), |b| {
            let nb = real::<T>(re(bars[b]));
            Ok(Mat::from_fn(m, n, |i, j| dirs[b][(i, j)] * nb))
        })?;
        Ok(vec![Some(be.from_host(h)?)])
    };
    Ok((vec![out], Box::new(pullback)))
}

fn frule_t<B: SyncBackend, T: ImplicitScalar>(
    norm: MatrixNorm,
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
) -> Result<WithTangents<B>> {
    let (out, dirs, batch, [m, n]) = forward::<B, T>(norm, be, a)?;
    let Some(a_dot) = a_dot else {
        return Ok((vec![out], vec![None]));
    };
    let dots = host_mats::<B, T>(be, a_dot, &batch, [m, n], "a_dot")?;
    let t: Vec<T> = (0..dirs.len())
        .map(|b| {
            let s: f64 = (0..m)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .map(|(i, j)| re(cj(dirs[b][(i, j)]) * dots[b][(i, j)]))
                .sum();
            real::<T>(s)
        })
        .collect();
    let h = gather_scalars("norm_dot", &batch, &t, T::DTYPE.real())?;
    Ok((vec![out], vec![Some(be.from_host(h)?)]))
}
