//! The Cholesky factor of the Hermitian part of `A`, with its pullback and pushforward.

use faer::{Mat, MatRef, Side};

use super::{
    Cotangents, Outputs, WithTangents, adjoint, dense_rule, hermitian_part, input_mats,
    mats_or_zeros, square_dims, tri_solve, triangle,
};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::linalg::batch::{by_dtype, split};
use crate::linalg::common::{cj, mm, re, real};
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Primal, Rule, SyncBackend};
use crate::scalar::ImplicitScalar;

/// The lower Cholesky factor `L` of `A: [batch…, n, n]` (`S = L·Lᴴ` with
/// `S = (A + Aᴴ)/2`, `L` lower triangular with a real, positive diagonal), by the backend's
/// [`Backend::cholesky`] (faer on the host unless the backend has its own).
///
/// The factor is that of the **Hermitian part** `S` of `A`, as JAX's `cholesky`
/// (`symmetrize_input=True`) computes it: for a Hermitian `A` this is its Cholesky factor,
/// and the function is defined (and differentiable) in every direction, so that finite
/// differences and tangents of non-Hermitian directions agree with the rules.
///
/// # Errors
/// [`Error::RankMismatch`] below rank 2, [`Error::ShapeMismatch`] for a non-square matrix,
/// [`Error::InvalidArgument`] for a non-finite entry, [`Error::NotPositiveDefinite`] when
/// `S` is not (numerically) positive definite, naming the pivot and the matrix.
pub fn cholesky<B: Backend>(be: &B, a: &B::Tensor) -> Result<B::Tensor> {
    square_dims(&be.dims(a), "a")?;
    be.cholesky(a)
}

/// [`cholesky`] on host data, by faer's LLᴴ, one matrix at a time: the default of
/// [`Backend::cholesky`].
///
/// # Errors
/// As [`cholesky`].
pub fn host_cholesky(a: &HostTensor) -> Result<HostTensor> {
    by_dtype!(a.dtype(), host_cholesky_t(a))
}

fn host_cholesky_t<T: ImplicitScalar>(a: &HostTensor) -> Result<HostTensor> {
    let (batch, n) = square_dims(a.dims(), "a")?;
    let mats = split::<T>(a, "a", true)?;
    per_matrix::<T, Mat<T>>(&batch, ("l", n, n), |b| factor(mats[b].as_ref(), b))
}

/// `L` of one matrix's Hermitian part.
fn factor<T: ImplicitScalar>(a: MatRef<'_, T>, b: usize) -> Result<Mat<T>> {
    let n = a.nrows();
    match hermitian_part(a).llt(Side::Lower) {
        Ok(llt) => Ok(triangle(llt.L(), false, false)),
        Err(faer::linalg::solvers::LltError::NonPositivePivot { index }) => {
            Err(Error::NotPositiveDefinite {
                arg: "a".into(),
                reason: format!(
                    "the Hermitian part (A + Aᴴ)/2 of matrix {b} of the batch (row-major \
                     order) has a non-positive pivot at {index} of {n}"
                ),
            })
        }
    }
}

/// The Cholesky factorization as a rule: one input `A: [batch…, n, n]`, one output, the
/// lower factor `L` of [`cholesky`] or, with `upper`, `U = Lᴴ` (`S = Uᴴ·U`, PyTorch's
/// `upper=True`).
///
/// **Pullback** (Murray, "Differentiation of the Cholesky decomposition", arXiv:1602.07527
/// (2016); PyTorch's `cholesky_backward`): with `Y = Lᴴ·L̄` and
/// `Φ*(Y) = tril(Y, −1) + ½·Re diag(Y)`, `Ā = L⁻ᴴ·herm(Φ*(Y))·L⁻¹` with
/// `herm(X) = (X + Xᴴ)/2`, computed by two triangular solves; `Ā` is Hermitian (the function
/// reads the Hermitian part of `A`). With `upper`, `L̄ = Ūᴴ`.
///
/// **Pushforward**: `Ṡ = herm(Ȧ)`, `X = L⁻¹·Ṡ·L⁻ᴴ`, `L̇ = L·Φ(X)` with
/// `Φ(X) = tril(X, −1) + ½·diag(X)` (PyTorch's `cholesky_jvp`); `U̇ = L̇ᴴ`. Derivation in
/// [`crate::math`], "Dense linear algebra". **Second order**: its pullback has
/// [`pullback_tangent`](crate::rule::Pullback::pullback_tangent).
///
/// # Errors
/// As [`cholesky`]; shapes and dtypes of the cotangent and the tangent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CholeskyRule {
    /// return `U = Lᴴ` instead of `L`
    pub upper: bool,
}

impl Rule for CholeskyRule {
    dense_rule!("cholesky", 1, 1);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        square_dims(&be.dims(x[0]), "a").map(drop)
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        by_dtype!(be.dtype(x[0]), rrule_t::<B>(self.upper, be, x[0]))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        by_dtype!(be.dtype(x[0]), frule_t::<B>(self.upper, be, x[0], dx[0]))
    }
}

/// The output (`L`, or `U = Lᴴ`) and the host copies of `L`, one per matrix.
#[allow(clippy::type_complexity)]
fn factors<B: Backend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    upper: bool,
) -> Result<(B::Tensor, Vec<Mat<T>>, Vec<usize>, usize)> {
    let (batch, n) = square_dims(&be.dims(a), "a")?;
    // the input's checks (finite entries, dtype) on the host copy, before the factorization
    input_mats::<B, T>(be, a, "a")?;
    let l = be.cholesky(a)?;
    let ls = split::<T>(&be.to_host(&l)?, "l", false)?;
    let out = if upper {
        let u = per_matrix::<T, Mat<T>>(&batch, ("u", n, n), |b| Ok(adjoint(ls[b].as_ref())))?;
        be.from_host(u)?
    } else {
        l
    };
    Ok((out, ls, batch, n))
}

fn rrule_t<B: SyncBackend, T: ImplicitScalar>(
    upper: bool,
    be: &B,
    a: &B::Tensor,
) -> Result<Outputs<B>> {
    let (out, ls, batch, n) = factors::<B, T>(be, a, upper)?;
    let pullback = CholeskyPullback {
        upper,
        ls,
        batch,
        n,
    };
    Ok((vec![out], Box::new(pullback)))
}

fn frule_t<B: SyncBackend, T: ImplicitScalar>(
    upper: bool,
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
) -> Result<WithTangents<B>> {
    let (out, ls, batch, n) = factors::<B, T>(be, a, upper)?;
    let Some(a_dot) = a_dot else {
        return Ok((vec![out], vec![None]));
    };
    let dots = host_mats::<B, T>(be, a_dot, &batch, [n, n], "a_dot")?;
    let name = if upper { "u_dot" } else { "l_dot" };
    let h = per_matrix::<T, Mat<T>>(&batch, (name, n, n), |b| {
        let l_dot = pushforward(ls[b].as_ref(), dots[b].as_ref());
        Ok(if upper {
            adjoint(l_dot.as_ref())
        } else {
            l_dot
        })
    })?;
    Ok((vec![out], vec![Some(be.from_host(h)?)]))
}

/// The pullback of [`CholeskyRule`], with its second order: the product rule on
/// `Ā = L⁻ᴴ·H·L⁻¹`, `H = herm(Φ*(Lᴴ·L̄))`: `Ḣ = herm(Φ*(L̇ᴴ·L̄ + Lᴴ·L̄̇))` and
/// `Ā̇ = herm(L⁻ᴴ·Ḣ·L⁻¹ − 2·herm(L⁻ᴴ·L̇ᴴ·Ā))`, `L̇` from the pushforward.
struct CholeskyPullback<T> {
    upper: bool,
    ls: Vec<Mat<T>>,
    batch: Vec<usize>,
    n: usize,
}

impl<T: ImplicitScalar> CholeskyPullback<T> {
    /// `L̄` (or its tangent) per matrix from the output's cotangent `t` (`Ūᴴ` for `upper`).
    fn l_bars<B: SyncBackend>(
        &self,
        be: &B,
        t: &Option<B::Tensor>,
        name: &str,
    ) -> Result<Vec<Mat<T>>> {
        let n = self.n;
        let bars = mats_or_zeros::<B, T>(be, t, &self.batch, [n, n], name)?;
        Ok(if self.upper {
            bars.iter().map(|b| adjoint(b.as_ref())).collect()
        } else {
            bars
        })
    }
}

impl<B: SyncBackend, T: ImplicitScalar> crate::rule::Pullback<B> for CholeskyPullback<T> {
    fn pullback(&self, be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]) -> Cotangents<B> {
        if y[0].is_none() {
            return Ok(vec![None]);
        }
        let name = if self.upper { "u_bar" } else { "l_bar" };
        let bars = self.l_bars(be, &y[0], name)?;
        let h = per_matrix::<T, Mat<T>>(&self.batch, ("a_bar", self.n, self.n), |b| {
            Ok(pullback(self.ls[b].as_ref(), bars[b].as_ref()))
        })?;
        Ok(vec![Some(be.from_host(h)?)])
    }

    fn pullback_tangent(
        &self,
        be: &B,
        _: &Primal<B>,
        y: &[Option<B::Tensor>],
        dx: &[Option<B::Tensor>],
        dy: &[Option<B::Tensor>],
    ) -> Option<Result<(Vec<Option<B::Tensor>>, Vec<Option<B::Tensor>>)>> {
        let run = || {
            let n = self.n;
            let (name, dot_name) = if self.upper {
                ("u_bar", "u_bar_dot")
            } else {
                ("l_bar", "l_bar_dot")
            };
            let bars = self.l_bars(be, &y[0], name)?;
            let bar_dots = self.l_bars(be, &dy[0], dot_name)?;
            let a_dots = mats_or_zeros::<B, T>(be, &dx[0], &self.batch, [n, n], "a_dot")?;
            let (mut g, mut gd) = (vec![], vec![]);
            for b in 0..self.ls.len() {
                let l = self.ls[b].as_ref();
                let a_bar = pullback(l, bars[b].as_ref());
                let l_dot = pushforward(l, a_dots[b].as_ref());
                // Ḣ = herm(Φ*(L̇ᴴ·L̄ + Lᴴ·L̄̇))
                let y_dot =
                    mm(l_dot.adjoint(), bars[b].as_ref()) + mm(l.adjoint(), bar_dots[b].as_ref());
                let mut w = project(y_dot.as_ref());
                tri_solve(l, false, false, true, &mut w);
                let mut sand = adjoint(w.as_ref());
                tri_solve(l, false, false, true, &mut sand);
                // −L⁻ᴴ·L̇ᴴ·Ā − Ā·L̇·L⁻¹ = −2·herm(L⁻ᴴ·L̇ᴴ·Ā) (Ā Hermitian)
                let mut q = mm(l_dot.adjoint(), a_bar.as_ref());
                tri_solve(l, false, false, true, &mut q);
                let two = real::<T>(2.0);
                let h = hermitian_part(q.as_ref());
                let dot = Mat::from_fn(n, n, |i, j| cj(sand[(j, i)]) - two * h[(i, j)]);
                gd.push(hermitian_part(dot.as_ref()));
                g.push(a_bar);
            }
            let join = crate::linalg::batch::join;
            Ok((
                vec![Some(be.from_host(join("a_bar", &self.batch, n, n, &g)?)?)],
                vec![Some(be.from_host(join(
                    "a_bar_dot",
                    &self.batch,
                    n,
                    n,
                    &gd,
                )?)?)],
            ))
        };
        Some(run())
    }
}

/// `herm(Φ*(Y))`: `½·Yᵢⱼ` below the diagonal, `½·conj(Yⱼᵢ)` above it, `½·Re Yᵢᵢ` on it.
fn project<T: ImplicitScalar>(y: MatRef<'_, T>) -> Mat<T> {
    let n = y.nrows();
    let half = real::<T>(0.5);
    Mat::from_fn(n, n, |i, j| {
        if i > j {
            y[(i, j)] * half
        } else if i < j {
            crate::linalg::common::cj(y[(j, i)]) * half
        } else {
            real::<T>(0.5 * re(y[(i, i)]))
        }
    })
}

/// One matrix: `Ā = L⁻ᴴ·herm(Φ*(Lᴴ·L̄))·L⁻¹`.
fn pullback<T: ImplicitScalar>(l: MatRef<'_, T>, l_bar: MatRef<'_, T>) -> Mat<T> {
    let n = l.nrows();
    let y = mm(l.adjoint(), l_bar);
    let half = real::<T>(0.5);
    let z = Mat::from_fn(n, n, |i, j| {
        if i > j {
            y[(i, j)] * half
        } else if i < j {
            crate::linalg::common::cj(y[(j, i)]) * half
        } else {
            real::<T>(0.5 * re(y[(i, i)]))
        }
    });
    // W = L⁻ᴴ·Z, then Ā = W·L⁻¹ ⇔ Āᴴ = L⁻ᴴ·Wᴴ
    let mut w = z;
    tri_solve(l, false, false, true, &mut w);
    let mut a_bar_h = adjoint(w.as_ref());
    tri_solve(l, false, false, true, &mut a_bar_h);
    hermitian_part(a_bar_h.as_ref())
}

/// One matrix: `L̇ = L·Φ(L⁻¹·herm(Ȧ)·L⁻ᴴ)`.
fn pushforward<T: ImplicitScalar>(l: MatRef<'_, T>, a_dot: MatRef<'_, T>) -> Mat<T> {
    let n = l.nrows();
    // Y = L⁻¹·Ṡ, then X = Y·L⁻ᴴ ⇔ Xᴴ = L⁻¹·Yᴴ
    let mut y = hermitian_part(a_dot);
    tri_solve(l, false, false, false, &mut y);
    let mut x_h = adjoint(y.as_ref());
    tri_solve(l, false, false, false, &mut x_h);
    // Xᵢⱼ = conj((Xᴴ)ⱼᵢ); Φ keeps the strict lower triangle and half the (real) diagonal
    let phi = Mat::from_fn(n, n, |i, j| {
        if i > j {
            crate::linalg::common::cj(x_h[(j, i)])
        } else if i == j {
            real::<T>(0.5 * re(x_h[(i, i)]))
        } else {
            T::zero()
        }
    });
    mm(l, phi.as_ref())
}
