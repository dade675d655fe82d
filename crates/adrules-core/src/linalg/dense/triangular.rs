//! Triangular solves `op(T)⁻¹·B` and `B·op(T)⁻¹`, with their pullback and pushforward.

use faer::{Mat, MatRef};

use super::{
    Cotangents, Outputs, WithTangents, adjoint, check_pivots, dense_rule, input_mats, same_dtype,
    square_dims, tri_solve, triangle,
};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::linalg::batch::by_dtype;
use crate::linalg::common::mm;
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Primal, Rule, SyncBackend};
use crate::scalar::ImplicitScalar;

/// The triangular solve as a rule: inputs `[A, B]`, output `X` with `T·X = B` (`left`) or
/// `X·T = B`, where `T` is the `upper` (or lower) triangle of `A: [batch…, n, n]`, with ones
/// on its diagonal when `unit_diagonal` (the other entries of `A` are not read, and get a zero
/// cotangent). `B: [batch…, n, k]` (left) or `[batch…, k, n]` (right), the same batch axes as
/// `A`, the same dtype; `X` has `B`'s shape. As PyTorch's `linalg.solve_triangular` and
/// JAX's `lax.linalg.triangular_solve`.
///
/// **Pushforward**: `Ẋ = T⁻¹·(Ḃ − Ṫ·X)` (left) or `(Ḃ − X·Ṫ)·T⁻¹` (right), `Ṫ` the same
/// triangle of `Ȧ` (without its diagonal when `unit_diagonal`). **Pullback**: `B̄ = T⁻ᴴ·X̄`
/// and `Ā = tri(−B̄·Xᴴ)` (left), or `B̄ = X̄·T⁻ᴴ` and `Ā = tri(−Xᴴ·B̄)` (right), `tri` the
/// projection onto that triangle (Giles, "An extended collection of matrix derivative results
/// for forward and reverse mode AD" (2008), §2.3.1 with the projection of the structured
/// input; PyTorch's `linalg_solve_triangular_backward`). **Second order**: its pullback has
/// [`pullback_tangent`](crate::rule::Pullback::pullback_tangent).
///
/// # Errors
/// [`Error::RankMismatch`], [`Error::ShapeMismatch`] (a non-square `A`, a `B` of another
/// rank, batch or length), [`Error::DTypeMismatch`] (`B` not of `A`'s dtype),
/// [`Error::InvalidArgument`] (a non-finite entry), [`Error::Singular`] for a zero diagonal
/// entry of `T` (not with `unit_diagonal`), [`Error::NonFinite`] for a solution beyond the
/// dtype's range.
///
/// The default is PyTorch's and SciPy's: the lower triangle, `T·X = B`, the diagonal read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SolveTriangularRule {
    /// `T` is the upper triangle of `A` (else the lower)
    pub upper: bool,
    /// solve `T·X = B` (else `X·T = B`)
    pub left: bool,
    /// `T`'s diagonal is taken as ones (not read)
    pub unit_diagonal: bool,
}

impl Default for SolveTriangularRule {
    fn default() -> Self {
        SolveTriangularRule {
            upper: false,
            left: true,
            unit_diagonal: false,
        }
    }
}

/// `X` with `T·X = B` (or `X·T = B`) for the triangle `T` of `A` that `rule` chooses (see
/// [`SolveTriangularRule`]), on the host by faer.
///
/// # Errors
/// As [`SolveTriangularRule`].
pub fn solve_triangular<B: SyncBackend>(
    be: &B,
    a: &B::Tensor,
    b: &B::Tensor,
    rule: SolveTriangularRule,
) -> Result<B::Tensor> {
    let mut out = crate::rule::primal(&rule, be, &[a, b])?;
    Ok(out.remove(0))
}

impl SolveTriangularRule {
    /// `op(T)⁻¹·R` (left) or `R·op(T)⁻¹` (right), `op` the identity or the adjoint.
    fn solve<T: ImplicitScalar>(&self, t: MatRef<'_, T>, r: MatRef<'_, T>, adj: bool) -> Mat<T> {
        if self.left {
            let mut x = r.to_owned();
            tri_solve(t, self.upper, self.unit_diagonal, adj, &mut x);
            x
        } else {
            // X·op(T) = R ⇔ op(T)ᴴ·Xᴴ = Rᴴ
            let mut x_h = adjoint(r);
            tri_solve(t, self.upper, self.unit_diagonal, !adj, &mut x_h);
            adjoint(x_h.as_ref())
        }
    }

    /// `(batch, n, [rows, cols] of B)`, checked.
    fn dims(&self, a: &[usize], b: &[usize]) -> Result<(Vec<usize>, usize, [usize; 2])> {
        let (batch, n) = square_dims(a, "a")?;
        if b.len() != a.len() {
            return Err(Error::RankMismatch {
                arg: "b".into(),
                expected: a.len(),
                actual: b.len(),
            });
        }
        let r = b.len();
        let (rows, cols) = (b[r - 2], b[r - 1]);
        let want_rows = if self.left { n } else { rows };
        let want_cols = if self.left { cols } else { n };
        if b[..r - 2] != batch[..] || rows != want_rows || cols != want_cols {
            let mut want = batch.clone();
            want.extend([want_rows, want_cols]);
            return Err(Error::shape("b", &want, b));
        }
        Ok((batch, n, [rows, cols]))
    }
}

impl Rule for SolveTriangularRule {
    dense_rule!("solve_triangular", 2, 1);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        self.dims(&be.dims(x[0]), &be.dims(x[1]))?;
        same_dtype(be.dtype(x[0]), be.dtype(x[1]), "b")
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], act: &[bool]) -> Result<Outputs<B>> {
        by_dtype!(be.dtype(x[0]), rrule_t::<B>(*self, be, x, act))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        by_dtype!(be.dtype(x[0]), frule_t::<B>(*self, be, x, dx))
    }
}

/// The solution on the host (one matrix per entry of the batch), with `T`'s host copies.
#[allow(clippy::type_complexity)]
fn forward<B: Backend, T: ImplicitScalar>(
    rule: SolveTriangularRule,
    be: &B,
    x: &[&B::Tensor],
) -> Result<(Vec<Mat<T>>, Vec<Mat<T>>, Vec<usize>, [usize; 2])> {
    rule.check(be, x)?;
    let (batch, _, rc) = rule.dims(&be.dims(x[0]), &be.dims(x[1]))?;
    let ts = input_mats::<B, T>(be, x[0], "a")?;
    let bs = input_mats::<B, T>(be, x[1], "b")?;
    let mut xs = Vec::with_capacity(ts.len());
    for (i, (t, b)) in ts.iter().zip(&bs).enumerate() {
        if !rule.unit_diagonal {
            check_pivots(t.as_ref(), "solve_triangular: A", i)?;
        }
        xs.push(rule.solve(t.as_ref(), b.as_ref(), false));
    }
    Ok((ts, xs, batch, rc))
}

fn rrule_t<B: SyncBackend, T: ImplicitScalar>(
    rule: SolveTriangularRule,
    be: &B,
    x: &[&B::Tensor],
    active: &[bool],
) -> Result<Outputs<B>> {
    let (ts, xs, batch, [rows, cols]) = forward::<B, T>(rule, be, x)?;
    let out = be.from_host(super::super::batch::join("x", &batch, rows, cols, &xs)?)?;
    let n = ts.first().map_or(0, |t| t.nrows());
    let pullback = TriPullback {
        rule,
        ts,
        xs,
        batch,
        n,
        dims: [rows, cols],
        a_active: active.first().copied().unwrap_or(true),
    };
    Ok((vec![out], Box::new(pullback)))
}

/// The pullback of [`SolveTriangularRule`], with its second order: the product rule on
/// `B̄ = op(T⁻ᴴ)·X̄`, `Ā = tri(−B̄·Xᴴ)` (left) or `tri(−Xᴴ·B̄)` (right), with `Ẋ` from the
/// pushforward and `B̄̇ = T⁻ᴴ·(X̄̇ − Ṫᴴ·B̄)` (left) or `(X̄̇ − B̄·Ṫᴴ)·T⁻ᴴ` (right).
struct TriPullback<T> {
    rule: SolveTriangularRule,
    ts: Vec<Mat<T>>,
    xs: Vec<Mat<T>>,
    batch: Vec<usize>,
    n: usize,
    dims: [usize; 2],
    a_active: bool,
}

impl<T: ImplicitScalar> TriPullback<T> {
    /// `tri(−B̄·Xᴴ)` (left) or `tri(−Xᴴ·B̄)` (right).
    fn a_bar(&self, b_bar: MatRef<'_, T>, x: MatRef<'_, T>) -> Mat<T> {
        let g = if self.rule.left {
            mm(b_bar, x.adjoint())
        } else {
            mm(x.adjoint(), b_bar)
        };
        -triangle(g.as_ref(), self.rule.upper, self.rule.unit_diagonal)
    }

    fn out<B: SyncBackend>(
        &self,
        be: &B,
        a: &[Mat<T>],
        b: &[Mat<T>],
    ) -> Result<Vec<Option<B::Tensor>>> {
        let [rows, cols] = self.dims;
        let join = super::super::batch::join;
        let a_bar = if self.a_active {
            Some(be.from_host(join("a_bar", &self.batch, self.n, self.n, a)?)?)
        } else {
            None
        };
        Ok(vec![
            a_bar,
            Some(be.from_host(join("b_bar", &self.batch, rows, cols, b)?)?),
        ])
    }

    fn mats<B: SyncBackend>(
        &self,
        be: &B,
        t: &Option<B::Tensor>,
        dims: [usize; 2],
        name: &str,
    ) -> Result<Vec<Mat<T>>> {
        super::mats_or_zeros::<B, T>(be, t, &self.batch, dims, name)
    }
}

impl<B: SyncBackend, T: ImplicitScalar> crate::rule::Pullback<B> for TriPullback<T> {
    fn pullback(&self, be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]) -> Cotangents<B> {
        if y[0].is_none() {
            return Ok(vec![None, None]);
        }
        let bars = self.mats(be, &y[0], self.dims, "x_bar")?;
        let b_bars: Vec<Mat<T>> = (0..self.ts.len())
            .map(|i| self.rule.solve(self.ts[i].as_ref(), bars[i].as_ref(), true))
            .collect();
        let a_bars: Vec<Mat<T>> = (0..self.ts.len())
            .map(|i| self.a_bar(b_bars[i].as_ref(), self.xs[i].as_ref()))
            .collect();
        self.out(be, &a_bars, &b_bars)
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
            let (n, rule) = (self.n, self.rule);
            let bars = self.mats(be, &y[0], self.dims, "x_bar")?;
            let bar_dots = self.mats(be, &dy[0], self.dims, "x_bar_dot")?;
            let a_dots = self.mats(be, &dx[0], [n, n], "a_dot")?;
            let b_dots = self.mats(be, &dx[1], self.dims, "b_dot")?;
            let (mut ab, mut bb, mut abd, mut bbd) = (vec![], vec![], vec![], vec![]);
            for i in 0..self.ts.len() {
                let (t, x) = (self.ts[i].as_ref(), self.xs[i].as_ref());
                let t_dot = triangle(a_dots[i].as_ref(), rule.upper, rule.unit_diagonal);
                let b_bar = rule.solve(t, bars[i].as_ref(), true);
                let (mut r, mut s) = (b_dots[i].clone(), bar_dots[i].clone());
                if rule.left {
                    r -= mm(t_dot.as_ref(), x);
                    s -= mm(t_dot.adjoint(), b_bar.as_ref());
                } else {
                    r -= mm(x, t_dot.as_ref());
                    s -= mm(b_bar.as_ref(), t_dot.adjoint());
                }
                let x_dot = rule.solve(t, r.as_ref(), false);
                let b_bar_dot = rule.solve(t, s.as_ref(), true);
                // Ā̇ = tri(−(B̄̇·Xᴴ + B̄·Ẋᴴ)) (left) or tri(−(Ẋᴴ·B̄ + Xᴴ·B̄̇)) (right)
                let d1 = self.a_bar(b_bar_dot.as_ref(), x);
                let d2 = if rule.left {
                    -triangle(
                        mm(b_bar.as_ref(), x_dot.adjoint()).as_ref(),
                        rule.upper,
                        rule.unit_diagonal,
                    )
                } else {
                    -triangle(
                        mm(x_dot.adjoint(), b_bar.as_ref()).as_ref(),
                        rule.upper,
                        rule.unit_diagonal,
                    )
                };
                abd.push(d1 + d2);
                ab.push(self.a_bar(b_bar.as_ref(), x));
                bb.push(b_bar);
                bbd.push(b_bar_dot);
            }
            Ok((self.out(be, &ab, &bb)?, self.out(be, &abd, &bbd)?))
        };
        Some(run())
    }
}

fn frule_t<B: SyncBackend, T: ImplicitScalar>(
    rule: SolveTriangularRule,
    be: &B,
    x: &[&B::Tensor],
    dx: &[Option<&B::Tensor>],
) -> Result<WithTangents<B>> {
    let (ts, xs, batch, [rows, cols]) = forward::<B, T>(rule, be, x)?;
    let out = be.from_host(super::super::batch::join("x", &batch, rows, cols, &xs)?)?;
    if dx.iter().all(Option::is_none) {
        return Ok((vec![out], vec![None]));
    }
    let n = ts.first().map_or(0, |t| t.nrows());
    let a_dots = dx[0]
        .map(|t| host_mats::<B, T>(be, t, &batch, [n, n], "a_dot"))
        .transpose()?;
    let b_dots = dx[1]
        .map(|t| host_mats::<B, T>(be, t, &batch, [rows, cols], "b_dot"))
        .transpose()?;
    let h = per_matrix::<T, Mat<T>>(&batch, ("x_dot", rows, cols), |i| {
        let mut r = match &b_dots {
            Some(d) => d[i].clone(),
            None => Mat::zeros(rows, cols),
        };
        if let Some(d) = &a_dots {
            let t_dot = triangle(d[i].as_ref(), rule.upper, rule.unit_diagonal);
            let xx = xs[i].as_ref();
            r -= if rule.left {
                mm(t_dot.as_ref(), xx)
            } else {
                mm(xx, t_dot.as_ref())
            };
        }
        Ok(rule.solve(ts[i].as_ref(), r.as_ref(), false))
    })?;
    Ok((vec![out], vec![Some(be.from_host(h)?)]))
}
