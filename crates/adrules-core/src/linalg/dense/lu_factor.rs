//! The LU factorization with partial pivoting as a differentiable operation: the packed
//! factors (LAPACK's `getrf`, PyTorch's `linalg.lu_factor`) with their pullback and
//! pushforward, for square, tall and wide matrices.

use std::sync::Arc;

use faer::{Mat, MatRef};

use super::{
    Cotangents, Outputs, WithTangents, adjoint, check_pivots, dense_rule, input_mats, tri_solve,
};
use crate::backend::Backend;
use crate::error::Result;
use crate::linalg::batch::{by_dtype, join, matrix_dims, split};
use crate::linalg::common::mm;
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Primal, Rule, SyncBackend};
use crate::scalar::ImplicitScalar;

/// LU with partial pivoting as a rule: one input `A: [batch…, m, n]`, two outputs: the
/// packed factors `LU: [batch…, m, n]` (below the diagonal the unit lower `L: m × k`
/// without its ones, on and above it the upper `U: k × n`, `k = min(m, n)`; LAPACK's `getrf`
/// and PyTorch's `lu_factor` layout) and the permutation matrix `P: [batch…, m, m]` with
/// `A = P·L·U` (piecewise constant: its tangent is zero and its cotangent is not read). By
/// [`Backend::lu`](crate::Backend::lu).
///
/// **Pushforward** (with `Ȧ' = Pᵀ·Ȧ`, `L₁`, `U₁` the leading `k × k` blocks): `F =
/// L₁⁻¹·Ȧ'₁₁·U₁⁻¹`, `L̇₁ = L₁·tril(F, −1)`, `U̇₁ = triu(F)·U₁`; wide: `U̇₂ = L₁⁻¹·(Ȧ'₁₂ −
/// L̇₁·U₂)`; tall: `L̇₂ = (Ȧ'₂₁ − L₂·U̇₁)·U₁⁻¹` (de Hoog, Anderssen & Lukas, "Differentiation of
/// matrix functionals using triangular factorization", Math. Comp. 80 (2011); PyTorch's
/// `linalg_lu_jvp`). **Pullback** (its adjoint): wide: `Ā'₁₂ = L₁⁻ᴴ·Ū₂` and
/// `L̄₁ ← L̄₁ − Ā'₁₂·U₂ᴴ`; tall: `Ā'₂₁ = L̄₂·U₁⁻ᴴ` and `Ū₁ ← Ū₁ − L₂ᴴ·Ā'₂₁`; then
/// `Ā'₁₁ = L₁⁻ᴴ·(tril(L₁ᴴ·L̄₁, −1) + triu(Ū₁·U₁ᴴ))·U₁⁻ᴴ` and `Ā = P·Ā'` (PyTorch's
/// `linalg_lu_backward`). First order only.
///
/// # Errors
/// [`Error::RankMismatch`](crate::Error::RankMismatch), a non-finite entry
/// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)); from the rules,
/// [`Error::Singular`](crate::Error::Singular) for a zero pivot of `U₁` (the factors of a
/// rank-deficient `A` are not differentiable there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LuFactorRule;

/// `[LU, P]`, the packed factors and the permutation matrix (see [`LuFactorRule`]).
///
/// # Errors
/// As [`LuFactorRule`].
pub fn lu_factor<B: SyncBackend>(be: &B, a: &B::Tensor) -> Result<[B::Tensor; 2]> {
    let mut out = crate::rule::primal(&LuFactorRule, be, &[a])?;
    let p = out.remove(1);
    Ok([out.remove(0), p])
}

impl Rule for LuFactorRule {
    dense_rule!("lu_factor", 1, 2);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        matrix_dims(&be.dims(x[0]), "a").map(drop)
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        by_dtype!(be.dtype(x[0]), rrule_t::<B>(be, x[0]))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        by_dtype!(be.dtype(x[0]), frule_t::<B>(be, x[0], dx[0]))
    }
}

/// One matrix's factors: `perm[i]` is the row of `A` that row `i` of `L·U` is.
struct Factors<T> {
    perm: Vec<usize>,
    l: Mat<T>,
    u: Mat<T>,
}

/// The outputs `[LU, P]` and every matrix's factors.
#[allow(clippy::type_complexity)]
fn forward<B: Backend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
) -> Result<(Vec<B::Tensor>, Arc<Vec<Factors<T>>>, Vec<usize>, [usize; 2])> {
    let (batch, m, n) = matrix_dims(&be.dims(a), "a")?;
    input_mats::<B, T>(be, a, "a")?;
    let [p, l, u] = be.lu(a)?;
    let ph = be.to_host(&p)?;
    let ps = split::<T>(&ph, "p", false)?;
    let ls = split::<T>(&be.to_host(&l)?, "l", false)?;
    let us = split::<T>(&be.to_host(&u)?, "u", false)?;
    let mut factors = Vec::with_capacity(ps.len());
    let mut packed = Vec::with_capacity(ps.len());
    for (b, (p, (l, u))) in ps.iter().zip(ls.into_iter().zip(us)).enumerate() {
        let perm = super::lu::permutation(p.as_ref(), b)?;
        packed.push(Mat::from_fn(m, n, |i, j| {
            if i > j { l[(i, j)] } else { u[(i, j)] }
        }));
        factors.push(Factors { perm, l, u });
    }
    let lu = be.from_host(join("lu", &batch, m, n, &packed)?)?;
    Ok((
        vec![lu, be.from_host(ph)?],
        Arc::new(factors),
        batch,
        [m, n],
    ))
}

fn rrule_t<B: SyncBackend, T: ImplicitScalar>(be: &B, a: &B::Tensor) -> Result<Outputs<B>> {
    let (outs, factors, batch, [m, n]) = forward::<B, T>(be, a)?;
    let pullback = move |be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
        let Some(y) = &y[0] else {
            return Ok(vec![None]);
        };
        let bars = host_mats::<B, T>(be, y, &batch, [m, n], "lu_bar")?;
        let h = per_matrix::<T, Mat<T>>(&batch, ("a_bar", m, n), |b| {
            pullback(&factors[b], bars[b].as_ref(), b)
        })?;
        Ok(vec![Some(be.from_host(h)?)])
    };
    Ok((outs, Box::new(pullback)))
}

fn frule_t<B: SyncBackend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
) -> Result<WithTangents<B>> {
    let (outs, factors, batch, [m, n]) = forward::<B, T>(be, a)?;
    let Some(a_dot) = a_dot else {
        return Ok((outs, vec![None, None]));
    };
    let dots = host_mats::<B, T>(be, a_dot, &batch, [m, n], "a_dot")?;
    let h = per_matrix::<T, Mat<T>>(&batch, ("lu_dot", m, n), |b| {
        pushforward(&factors[b], dots[b].as_ref(), b)
    })?;
    let p_dot = be.from_host(crate::host::HostTensor::zeros(
        &be.dims(&outs[1]),
        T::DTYPE,
    )?)?;
    Ok((outs, vec![Some(be.from_host(h)?), Some(p_dot)]))
}

/// `X·U₁⁻¹` (`X: r × k`): `U₁ᴴ·Xᴴ` solved.
fn right_solve_u<T: ImplicitScalar>(u1: MatRef<'_, T>, x: MatRef<'_, T>, adj: bool) -> Mat<T> {
    let mut xh = adjoint(x);
    tri_solve(u1, true, false, !adj, &mut xh);
    adjoint(xh.as_ref())
}

/// One matrix: the packed tangent `tril(L̇, −1) + U̇`.
fn pushforward<T: ImplicitScalar>(
    f: &Factors<T>,
    a_dot: MatRef<'_, T>,
    b: usize,
) -> Result<Mat<T>> {
    let (m, n) = a_dot.shape();
    let k = m.min(n);
    let (l1, u1) = (
        f.l.as_ref().submatrix(0, 0, k, k),
        f.u.as_ref().submatrix(0, 0, k, k),
    );
    check_pivots(u1, "lu_factor: U", b)?;
    let ad = Mat::from_fn(m, n, |i, j| a_dot[(f.perm[i], j)]);
    // F = L₁⁻¹·Ȧ'₁₁·U₁⁻¹
    let mut y = ad.as_ref().submatrix(0, 0, k, k).to_owned();
    tri_solve(l1, false, true, false, &mut y);
    let fm = right_solve_u(u1, y.as_ref(), false);
    let lo = Mat::from_fn(k, k, |i, j| if i > j { fm[(i, j)] } else { T::zero() });
    let up = Mat::from_fn(k, k, |i, j| if i <= j { fm[(i, j)] } else { T::zero() });
    let l1_dot = mm(l1, lo.as_ref());
    let u1_dot = mm(up.as_ref(), u1);
    let mut out = Mat::zeros(m, n);
    for i in 0..k {
        for j in 0..k {
            out[(i, j)] = if i > j {
                l1_dot[(i, j)]
            } else {
                u1_dot[(i, j)]
            };
        }
    }
    if n > k {
        // U̇₂ = L₁⁻¹·(Ȧ'₁₂ − L̇₁·U₂)
        let u2 = f.u.as_ref().submatrix(0, k, k, n - k);
        let mut r = ad.as_ref().submatrix(0, k, k, n - k).to_owned() - mm(l1_dot.as_ref(), u2);
        tri_solve(l1, false, true, false, &mut r);
        out.as_mut().submatrix_mut(0, k, k, n - k).copy_from(&r);
    }
    if m > k {
        // L̇₂ = (Ȧ'₂₁ − L₂·U̇₁)·U₁⁻¹
        let l2 = f.l.as_ref().submatrix(k, 0, m - k, k);
        let r = ad.as_ref().submatrix(k, 0, m - k, k).to_owned() - mm(l2, u1_dot.as_ref());
        let l2_dot = right_solve_u(u1, r.as_ref(), false);
        out.as_mut()
            .submatrix_mut(k, 0, m - k, k)
            .copy_from(&l2_dot);
    }
    Ok(out)
}

/// One matrix: `Ā` from the packed cotangent `X̄`.
fn pullback<T: ImplicitScalar>(f: &Factors<T>, x_bar: MatRef<'_, T>, b: usize) -> Result<Mat<T>> {
    let (m, n) = x_bar.shape();
    let k = m.min(n);
    let (l1, u1) = (
        f.l.as_ref().submatrix(0, 0, k, k),
        f.u.as_ref().submatrix(0, 0, k, k),
    );
    check_pivots(u1, "lu_factor: U", b)?;
    let mut l_bar = Mat::from_fn(k, k, |i, j| if i > j { x_bar[(i, j)] } else { T::zero() });
    let mut u_bar = Mat::from_fn(k, k, |i, j| if i <= j { x_bar[(i, j)] } else { T::zero() });
    let mut ap = Mat::zeros(m, n);
    if n > k {
        // Ā'₁₂ = L₁⁻ᴴ·Ū₂, L̄₁ ← L̄₁ − Ā'₁₂·U₂ᴴ
        let u2 = f.u.as_ref().submatrix(0, k, k, n - k);
        let mut w = x_bar.submatrix(0, k, k, n - k).to_owned();
        tri_solve(l1, false, true, true, &mut w);
        l_bar -= mm(w.as_ref(), u2.adjoint());
        ap.as_mut().submatrix_mut(0, k, k, n - k).copy_from(&w);
    }
    if m > k {
        // Ā'₂₁ = L̄₂·U₁⁻ᴴ, Ū₁ ← Ū₁ − L₂ᴴ·Ā'₂₁
        let l2 = f.l.as_ref().submatrix(k, 0, m - k, k);
        let w = right_solve_u(u1, x_bar.submatrix(k, 0, m - k, k), true);
        u_bar -= mm(l2.adjoint(), w.as_ref());
        ap.as_mut().submatrix_mut(k, 0, m - k, k).copy_from(&w);
    }
    let lg = mm(l1.adjoint(), l_bar.as_ref());
    let ug = mm(u_bar.as_ref(), u1.adjoint());
    let g = Mat::from_fn(k, k, |i, j| if i > j { lg[(i, j)] } else { ug[(i, j)] });
    // Ā'₁₁ = L₁⁻ᴴ·G·U₁⁻ᴴ
    let mut w = g;
    tri_solve(l1, false, true, true, &mut w);
    let a11 = right_solve_u(u1, w.as_ref(), true);
    ap.as_mut().submatrix_mut(0, 0, k, k).copy_from(&a11);
    let mut a_bar = Mat::zeros(m, n);
    for i in 0..m {
        for j in 0..n {
            a_bar[(f.perm[i], j)] = ap[(i, j)];
        }
    }
    Ok(a_bar)
}
