//! LU with partial pivoting (`A = P·L·U`) and what stands on it: the solve, the inverse, the
//! determinant and the sign (phase) with the log-modulus of the determinant, with their
//! pullbacks and pushforwards.

use faer::{Mat, MatRef};

use super::lu_second::{DetPullback, InvPullback, SolvePullback};
use super::{
    Outputs, WithTangents, arg_mats, check_pivots, dense_rule, gather_scalars, input_mats,
    reshaped, rhs_dims, same_dtype, square_dims, square_rule, tri_solve,
};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::linalg::batch::{by_dtype, join, matrix_dims, split};
use crate::linalg::common::{abs, cplx, im, mm, re, real};
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Rule, SyncBackend};
use crate::scalar::ImplicitScalar;

/// `[P, L, U]` with `A = P·L·U` for `A: [batch…, m, n]`, `k = min(m, n)`: `P: [batch…, m, m]`
/// a permutation matrix, `L: [batch…, m, k]` unit lower trapezoidal, `U: [batch…, k, n]` upper
/// trapezoidal (PyTorch's `linalg.lu`), on host data by faer's partial pivoting (the row of
/// largest modulus at each step): the default of [`Backend::lu`].
///
/// # Errors
/// [`Error::RankMismatch`] below rank 2, [`Error::InvalidArgument`] for a non-finite entry.
pub fn host_lu(a: &HostTensor) -> Result<[HostTensor; 3]> {
    by_dtype!(a.dtype(), host_lu_t(a))
}

fn host_lu_t<T: ImplicitScalar>(a: &HostTensor) -> Result<[HostTensor; 3]> {
    let (batch, m, n) = matrix_dims(a.dims(), "a")?;
    let k = m.min(n);
    let mats = split::<T>(a, "a", true)?;
    per_matrix::<T, (Mat<T>, Mat<T>, Mat<T>)>(
        &batch,
        (("p", m, m), ("l", m, k), ("u", k, n)),
        |b| {
            let lu = mats[b].partial_piv_lu();
            let (fwd, _) = lu.P().arrays();
            // row i of L·U is row fwd[i] of A
            let p = Mat::from_fn(m, m, |r, i| if fwd[i] == r { T::one() } else { T::zero() });
            let l = Mat::from_fn(m, k, |i, j| lu.L()[(i, j)]);
            let u = Mat::from_fn(k, n, |i, j| lu.U()[(i, j)]);
            Ok((p, l, u))
        },
    )
}

/// One square matrix's LU: row `i` of `L·U` is row `perm[i]` of `A`.
pub(crate) struct Lu<T> {
    perm: Vec<usize>,
    l: Mat<T>,
    pub(super) u: Mat<T>,
    /// the sign of the permutation, ±1
    sign: f64,
}

impl<T: ImplicitScalar> Lu<T> {
    /// From a backend's `P`, `L`, `U` of matrix `b` of the batch.
    fn new(p: MatRef<'_, T>, l: Mat<T>, u: Mat<T>, b: usize) -> Result<Self> {
        let perm = permutation(p, b)?;
        let n = perm.len();
        // parity by cycle decomposition
        let mut sign = 1.0;
        let mut visited = vec![false; n];
        for s in 0..n {
            let mut len = 0;
            let mut i = s;
            while !visited[i] {
                visited[i] = true;
                i = perm[i];
                len += 1;
            }
            if len > 0 && len % 2 == 0 {
                sign = -sign;
            }
        }
        Ok(Lu { perm, l, u, sign })
    }

    fn n(&self) -> usize {
        self.perm.len()
    }

    /// `A⁻¹·R`.
    pub(super) fn solve(&self, r: MatRef<'_, T>) -> Mat<T> {
        let mut y = Mat::from_fn(self.n(), r.ncols(), |i, j| r[(self.perm[i], j)]);
        tri_solve(self.l.as_ref(), false, true, false, &mut y);
        tri_solve(self.u.as_ref(), true, false, false, &mut y);
        y
    }

    /// `A⁻ᴴ·R`: `Uᴴ·Lᴴ·(Pᵀ·X) = R`.
    pub(super) fn solve_adjoint(&self, r: MatRef<'_, T>) -> Mat<T> {
        let mut v = r.to_owned();
        tri_solve(self.u.as_ref(), true, false, true, &mut v);
        tri_solve(self.l.as_ref(), false, true, true, &mut v);
        let mut x = Mat::zeros(self.n(), r.ncols());
        for i in 0..self.n() {
            for j in 0..r.ncols() {
                x[(self.perm[i], j)] = v[(i, j)];
            }
        }
        x
    }

    pub(super) fn inverse(&self) -> Mat<T> {
        self.solve(Mat::<T>::identity(self.n(), self.n()).as_ref())
    }

    /// `det(A) = sign(P)·Π uᵢᵢ`.
    fn det(&self) -> T {
        let mut d = real::<T>(self.sign);
        for i in 0..self.n() {
            d *= self.u[(i, i)];
        }
        d
    }

    /// `tr(A⁻¹·Ȧ)`.
    pub(super) fn trace_solve(&self, a_dot: MatRef<'_, T>) -> T {
        let z = self.solve(a_dot);
        (0..self.n()).fold(T::zero(), |s, i| s + z[(i, i)])
    }
}

/// `perm[i]`, the row of `A` that row `i` of `L·U` is, from a backend's `P` (`A = P·L·U`,
/// so `P[perm[i], i] = 1`) of matrix `b` of the batch.
///
/// # Errors
/// [`Error::Backend`] when `P` is not a permutation matrix.
pub(super) fn permutation<T: ImplicitScalar>(p: MatRef<'_, T>, b: usize) -> Result<Vec<usize>> {
    let n = p.nrows();
    let mut perm = vec![usize::MAX; n];
    for i in 0..n {
        for r in 0..n {
            if p[(r, i)] != T::zero() {
                if p[(r, i)] != T::one() || perm[i] != usize::MAX {
                    return Err(not_a_permutation(b));
                }
                perm[i] = r;
            }
        }
    }
    let mut seen = vec![false; n];
    for &r in &perm {
        if r == usize::MAX || std::mem::replace(&mut seen[r], true) {
            return Err(not_a_permutation(b));
        }
    }
    Ok(perm)
}

fn not_a_permutation(b: usize) -> Error {
    Error::Backend {
        backend: "lu".into(),
        message: format!(
            "the backend's LU returned a P that is not a permutation matrix (matrix {b} of the \
             batch)"
        ),
    }
}

/// The LU of every matrix of the square `A: [batch…, n, n]` by [`Backend::lu`], on the host;
/// with `nonsingular`, a zero pivot is an [`Error::Singular`] naming `what`.
fn factor<B: Backend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    nonsingular: Option<&str>,
) -> Result<(Vec<Lu<T>>, Vec<usize>, usize)> {
    let (batch, n) = square_dims(&be.dims(a), "a")?;
    // the input's checks (finite entries, dtype) on the host copy, before the factorization
    input_mats::<B, T>(be, a, "a")?;
    let [p, l, u] = be.lu(a)?;
    let ps = split::<T>(&be.to_host(&p)?, "p", false)?;
    let ls = split::<T>(&be.to_host(&l)?, "l", false)?;
    let us = split::<T>(&be.to_host(&u)?, "u", false)?;
    let mut lus = Vec::with_capacity(ps.len());
    for (b, ((p, l), u)) in ps.iter().zip(ls).zip(us).enumerate() {
        if let Some(what) = nonsingular {
            check_pivots(u.as_ref(), what, b)?;
        }
        lus.push(Lu::new(p.as_ref(), l, u, b)?);
    }
    Ok((lus, batch, n))
}

/// `X` with `A·X = B` (see [`SolveRule`]).
///
/// # Errors
/// As [`SolveRule`].
pub fn solve<B: SyncBackend>(be: &B, a: &B::Tensor, b: &B::Tensor) -> Result<B::Tensor> {
    Ok(crate::rule::primal(&SolveRule, be, &[a, b])?.remove(0))
}

/// `A⁻¹` (see [`InvRule`]).
///
/// # Errors
/// As [`InvRule`].
pub fn inv<B: SyncBackend>(be: &B, a: &B::Tensor) -> Result<B::Tensor> {
    Ok(crate::rule::primal(&InvRule, be, &[a])?.remove(0))
}

/// `det(A)` (see [`DetRule`]).
///
/// # Errors
/// As [`DetRule`].
pub fn det<B: SyncBackend>(be: &B, a: &B::Tensor) -> Result<B::Tensor> {
    Ok(crate::rule::primal(&DetRule, be, &[a])?.remove(0))
}

/// `[sign, log|det(A)|]` (see [`SlogdetRule`]).
///
/// # Errors
/// As [`SlogdetRule`].
pub fn slogdet<B: SyncBackend>(be: &B, a: &B::Tensor) -> Result<[B::Tensor; 2]> {
    let mut out = crate::rule::primal(&SlogdetRule, be, &[a])?;
    let logabs = out.remove(1);
    Ok([out.remove(0), logabs])
}

/// The linear solve as a rule: inputs `[A, B]`, `A: [batch…, n, n]` and `B` a batch of
/// vectors `[batch…, n]` (when its rank is `A`'s less one) or of matrices `[batch…, n, k]`
/// (the same batch axes, the same dtype); output `X = A⁻¹·B` of `B`'s shape, by
/// [`Backend::lu`] and two triangular solves.
///
/// **Pushforward**: `Ẋ = A⁻¹·(Ḃ − Ȧ·X)`. **Pullback**: `B̄ = A⁻ᴴ·X̄`, `Ā = −B̄·Xᴴ` (Giles
/// 2008, §2.3.1; PyTorch's `linalg_solve_backward`); both reuse the LU.
///
/// **Second order**: its pullback has
/// [`pullback_tangent`](crate::rule::Pullback::pullback_tangent) (forward-over-reverse, the
/// product rule on the pullback; [`crate::rule::RulePullback::pullback_tangent`]).
///
/// # Errors
/// [`Error::RankMismatch`], [`Error::ShapeMismatch`] (a non-square `A`, a `B` of another
/// batch or length), [`Error::DTypeMismatch`], [`Error::InvalidArgument`] (a non-finite
/// entry), [`Error::Singular`] for a zero pivot of `U` (naming it and the matrix),
/// [`Error::NonFinite`] for a solution beyond the dtype's range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SolveRule;

impl SolveRule {
    /// `(batch, n, k, vector)` of `A` and `B`, checked.
    fn dims(a: &[usize], b: &[usize]) -> Result<(Vec<usize>, usize, usize, bool)> {
        let (batch, n) = square_dims(a, "a")?;
        let (k, vector) = rhs_dims(&batch, n, a.len(), b)?;
        Ok((batch, n, k, vector))
    }
}

impl Rule for SolveRule {
    dense_rule!("solve", 2, 1);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        Self::dims(&be.dims(x[0]), &be.dims(x[1]))?;
        same_dtype(be.dtype(x[0]), be.dtype(x[1]), "b")
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], act: &[bool]) -> Result<Outputs<B>> {
        by_dtype!(be.dtype(x[0]), solve_rrule_t::<B>(be, x, act))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        by_dtype!(be.dtype(x[0]), solve_frule_t::<B>(be, x, dx))
    }
}

/// The solution of [`SolveRule`] on the host, and as the output tensor.
#[allow(clippy::type_complexity)]
fn solve_forward<B: Backend, T: ImplicitScalar>(
    be: &B,
    x: &[&B::Tensor],
) -> Result<(B::Tensor, Vec<Lu<T>>, Vec<Mat<T>>, Vec<usize>, usize, bool)> {
    SolveRule.check(be, x)?;
    let b_dims = be.dims(x[1]);
    let (batch, n, k, vector) = SolveRule::dims(&be.dims(x[0]), &b_dims)?;
    let (lus, ..) = factor::<B, T>(be, x[0], Some("solve: A"))?;
    let bs = arg_mats::<B, T>(be, x[1], &batch, [n, k], vector, "b")?;
    let xs: Vec<Mat<T>> = lus
        .iter()
        .zip(&bs)
        .map(|(lu, b)| lu.solve(b.as_ref()))
        .collect();
    let out = reshaped(join("x", &batch, n, k, &xs)?, &b_dims)?;
    Ok((be.from_host(out)?, lus, xs, batch, k, vector))
}

fn solve_rrule_t<B: SyncBackend, T: ImplicitScalar>(
    be: &B,
    x: &[&B::Tensor],
    active: &[bool],
) -> Result<Outputs<B>> {
    let (out, lus, xs, batch, k, vector) = solve_forward::<B, T>(be, x)?;
    let (a_dims, b_dims) = (be.dims(x[0]), be.dims(x[1]));
    let n = a_dims[a_dims.len() - 1];
    let pullback = SolvePullback {
        lus,
        xs,
        batch,
        n,
        k,
        vector,
        b_dims: b_dims.to_vec(),
        a_active: active.first().copied().unwrap_or(true),
    };
    Ok((vec![out], Box::new(pullback)))
}

fn solve_frule_t<B: SyncBackend, T: ImplicitScalar>(
    be: &B,
    x: &[&B::Tensor],
    dx: &[Option<&B::Tensor>],
) -> Result<WithTangents<B>> {
    let (out, lus, xs, batch, k, vector) = solve_forward::<B, T>(be, x)?;
    if dx.iter().all(Option::is_none) {
        return Ok((vec![out], vec![None]));
    }
    let n = lus
        .first()
        .map_or_else(|| be.dims(x[0])[be.rank(x[0]) - 1], Lu::n);
    let a_dots = dx[0]
        .map(|t| host_mats::<B, T>(be, t, &batch, [n, n], "a_dot"))
        .transpose()?;
    let b_dots = dx[1]
        .map(|t| arg_mats::<B, T>(be, t, &batch, [n, k], vector, "b_dot"))
        .transpose()?;
    let dots = per_matrix::<T, Mat<T>>(&batch, ("x_dot", n, k), |i| {
        let mut r = match &b_dots {
            Some(d) => d[i].clone(),
            None => Mat::zeros(n, k),
        };
        if let Some(d) = &a_dots {
            r -= mm(d[i].as_ref(), xs[i].as_ref());
        }
        Ok(lus[i].solve(r.as_ref()))
    })?;
    let dot = reshaped(dots, &be.dims(x[1]))?;
    Ok((vec![out], vec![Some(be.from_host(dot)?)]))
}

/// The inverse as a rule: one input `A: [batch…, n, n]`, one output `Y = A⁻¹` of `A`'s shape,
/// by [`Backend::lu`].
///
/// **Pushforward**: `Ẏ = −Y·Ȧ·Y`. **Pullback**: `Ā = −Yᴴ·Ȳ·Yᴴ` (Giles 2008, §2.2.3;
/// PyTorch's `linalg_inv` derivative).
///
/// **Second order**: its pullback has
/// [`pullback_tangent`](crate::rule::Pullback::pullback_tangent) (forward-over-reverse, the
/// product rule on the pullback; [`crate::rule::RulePullback::pullback_tangent`]).
///
/// # Errors
/// [`Error::RankMismatch`], [`Error::ShapeMismatch`] (non-square), [`Error::InvalidArgument`]
/// (a non-finite entry), [`Error::Singular`] for a zero pivot, [`Error::NonFinite`] for an
/// inverse beyond the dtype's range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InvRule;

impl Rule for InvRule {
    square_rule!("inv", 1, inv_rrule_t, inv_frule_t);
}

#[allow(clippy::type_complexity)]
fn inv_forward<B: Backend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
) -> Result<(B::Tensor, Vec<Mat<T>>, Vec<usize>, usize)> {
    let (lus, batch, n) = factor::<B, T>(be, a, Some("inv: A"))?;
    let ys: Vec<Mat<T>> = lus.iter().map(Lu::inverse).collect();
    let out = be.from_host(join("y", &batch, n, n, &ys)?)?;
    Ok((out, ys, batch, n))
}

fn inv_rrule_t<B: SyncBackend, T: ImplicitScalar>(be: &B, a: &B::Tensor) -> Result<Outputs<B>> {
    let (out, ys, batch, n) = inv_forward::<B, T>(be, a)?;
    let pullback = InvPullback { ys, batch, n };
    Ok((vec![out], Box::new(pullback)))
}

fn inv_frule_t<B: SyncBackend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
) -> Result<WithTangents<B>> {
    let (out, ys, batch, n) = inv_forward::<B, T>(be, a)?;
    let Some(a_dot) = a_dot else {
        return Ok((vec![out], vec![None]));
    };
    let dots = host_mats::<B, T>(be, a_dot, &batch, [n, n], "a_dot")?;
    let h = per_matrix::<T, Mat<T>>(&batch, ("y_dot", n, n), |i| {
        let y = ys[i].as_ref();
        Ok(-mm(mm(y, dots[i].as_ref()).as_ref(), y))
    })?;
    Ok((vec![out], vec![Some(be.from_host(h)?)]))
}

/// The determinant as a rule: one input `A: [batch…, n, n]`, one output `det(A): [batch…]`
/// of `A`'s dtype (`det` of a `0 × 0` matrix is 1), `sign(P)·Π uᵢᵢ` from [`Backend::lu`].
///
/// **Pushforward** (Jacobi's formula): `ḋ = d·tr(A⁻¹·Ȧ)`. **Pullback**:
/// `Ā = d̄·conj(d)·A⁻ᴴ` (Giles 2008, §2.2.4; PyTorch's `linalg_det_backward` for an
/// invertible `A`). The derivatives at a singular `A` (`d = 0`, the adjugate) are not
/// implemented: [`Error::Singular`] there.
///
/// **Second order**: its pullback has
/// [`pullback_tangent`](crate::rule::Pullback::pullback_tangent) (forward-over-reverse, the
/// product rule on the pullback; [`crate::rule::RulePullback::pullback_tangent`]).
///
/// # Errors
/// [`Error::RankMismatch`], [`Error::ShapeMismatch`] (non-square), [`Error::InvalidArgument`]
/// (a non-finite entry), [`Error::NonFinite`] for a determinant beyond the dtype's range;
/// from the rules, [`Error::Singular`] for a singular `A`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetRule;

impl Rule for DetRule {
    square_rule!("det", 1, det_rrule_t, det_frule_t, false);
}

/// The sign (phase) and the log-modulus of the determinant as a rule: one input
/// `A: [batch…, n, n]`, two outputs `[s, l]` with `det(A) = s·exp(l)`: `s: [batch…]` of `A`'s
/// dtype (`±1` for a real `A`, `|s| = 1` for a complex one), `l = log|det(A)|: [batch…]` of
/// its real dtype (PyTorch's and NumPy's `slogdet`).
///
/// **Pushforward**: with `t = tr(A⁻¹·Ȧ)`, `l̇ = Re t` and `ṡ = i·Im(t)·s` (zero for a real
/// `A`). **Pullback**: `Ā = conj(c)·A⁻ᴴ` with `c = l̄ + i·Im(conj(s̄)·s)` (`c = l̄` for a real
/// `A`, whose sign is locally constant). Derivation in [`crate::math`], "Dense linear algebra".
///
/// **Second order**: its pullback has
/// [`pullback_tangent`](crate::rule::Pullback::pullback_tangent) (forward-over-reverse, the
/// product rule on the pullback; [`crate::rule::RulePullback::pullback_tangent`]).
///
/// # Errors
/// As [`DetRule`]; [`Error::Singular`] already from the primal for a singular `A`
/// (`log|det| = −∞`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlogdetRule;

impl Rule for SlogdetRule {
    square_rule!("slogdet", 2, det_rrule_t, det_frule_t, true);
}

/// `det` (or, with `log`, `[sign, log|det|]`): the outputs, the LUs and the determinants.
#[allow(clippy::type_complexity)]
fn det_forward<B: Backend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    log: bool,
) -> Result<(Vec<B::Tensor>, Vec<Lu<T>>, Vec<T>, Vec<usize>, usize)> {
    let (lus, batch, n) = factor::<B, T>(be, a, log.then_some("slogdet: A"))?;
    let ds: Vec<T> = lus.iter().map(Lu::det).collect();
    let outs = if log {
        let mut signs = Vec::with_capacity(lus.len());
        let mut logs = Vec::with_capacity(lus.len());
        for lu in &lus {
            let (mut s, mut l) = (real::<T>(lu.sign), 0.0);
            for i in 0..n {
                let u = lu.u[(i, i)];
                s *= u * real::<T>(1.0 / abs(u));
                l += abs(u).ln();
            }
            signs.push(s);
            logs.push(real::<T>(l));
        }
        let real_dtype = T::DTYPE.real();
        vec![
            gather_scalars("sign", &batch, &signs, T::DTYPE)?,
            gather_scalars("logabsdet", &batch, &logs, real_dtype)?,
        ]
    } else {
        vec![gather_scalars("det", &batch, &ds, T::DTYPE)?]
    };
    let outs = outs
        .into_iter()
        .map(|h| be.from_host(h))
        .collect::<Result<Vec<_>>>()?;
    Ok((outs, lus, ds, batch, n))
}

fn det_rrule_t<B: SyncBackend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    log: bool,
) -> Result<Outputs<B>> {
    let (outs, lus, ds, batch, n) = det_forward::<B, T>(be, a, log)?;
    let pullback = DetPullback {
        lus,
        ds,
        batch,
        n,
        log,
    };
    Ok((outs, Box::new(pullback)))
}

fn det_frule_t<B: SyncBackend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
    log: bool,
) -> Result<WithTangents<B>> {
    let (outs, lus, ds, batch, n) = det_forward::<B, T>(be, a, log)?;
    let Some(a_dot) = a_dot else {
        let none = vec![None; outs.len()];
        return Ok((outs, none));
    };
    let what = if log { "slogdet: A" } else { "det: A" };
    let dots = host_mats::<B, T>(be, a_dot, &batch, [n, n], "a_dot")?;
    let mut ts = Vec::with_capacity(lus.len());
    for (i, lu) in lus.iter().enumerate() {
        check_pivots(lu.u.as_ref(), what, i)?;
        ts.push(lu.trace_solve(dots[i].as_ref()));
    }
    let tangents = if log {
        let s_dot: Vec<T> = ts
            .iter()
            .zip(&ds)
            .map(|(t, d)| {
                if T::DTYPE.is_complex() {
                    cplx::<T>(0.0, im(*t)) * *d * real::<T>(1.0 / abs(*d))
                } else {
                    T::zero()
                }
            })
            .collect();
        let l_dot: Vec<T> = ts.iter().map(|t| real::<T>(re(*t))).collect();
        vec![
            gather_scalars("sign_dot", &batch, &s_dot, T::DTYPE)?,
            gather_scalars("logabsdet_dot", &batch, &l_dot, T::DTYPE.real())?,
        ]
    } else {
        let d_dot: Vec<T> = ts.iter().zip(&ds).map(|(t, d)| *t * *d).collect();
        vec![gather_scalars("det_dot", &batch, &d_dot, T::DTYPE)?]
    };
    let tangents = tangents
        .into_iter()
        .map(|h| be.from_host(h).map(Some))
        .collect::<Result<Vec<_>>>()?;
    Ok((outs, tangents))
}
