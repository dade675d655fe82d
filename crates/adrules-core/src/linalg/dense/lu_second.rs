//! The pullbacks of the rules on one LU (solve, inverse, determinant, slogdet) as values,
//! each with its second order ([`Pullback::pullback_tangent`]).
//!
//! Second order is the product rule on each pullback formula, with the primal's tangents
//! from the pushforwards (`Ẋ = A⁻¹·(Ḃ − Ȧ·X)`, `Ẏ = −Y·Ȧ·Y`, `ḋ = d·tr(A⁻¹·Ȧ)`) and
//! `(A⁻ᴴ)˙ = −A⁻ᴴ·Ȧᴴ·A⁻ᴴ`; derivation in [`crate::math`], "Dense linear algebra".

use faer::Mat;

use super::lu::Lu;
use super::{arg_mats, arg_scalars, check_pivots, mats_or_zeros, reshaped};
use crate::error::Result;
use crate::linalg::batch::join;
use crate::linalg::common::{abs, cj, cplx, im, mm, real};
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Primal, Pullback, SyncBackend};
use crate::scalar::ImplicitScalar;

type Tensors<B> = Vec<Option<<B as crate::Backend>::Tensor>>;
type Pair<B> = Option<Result<(Tensors<B>, Tensors<B>)>>;

/// The pullback of [`SolveRule`](super::SolveRule): `B̄ = A⁻ᴴ·X̄`, `Ā = −B̄·Xᴴ`.
pub(super) struct SolvePullback<T> {
    pub(super) lus: Vec<Lu<T>>,
    pub(super) xs: Vec<Mat<T>>,
    pub(super) batch: Vec<usize>,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) vector: bool,
    pub(super) b_dims: Vec<usize>,
    pub(super) a_active: bool,
}

impl<T: ImplicitScalar> SolvePullback<T> {
    fn mats<B: SyncBackend>(
        &self,
        be: &B,
        t: &Option<B::Tensor>,
        name: &str,
    ) -> Result<Option<Vec<Mat<T>>>> {
        t.as_ref()
            .map(|t| arg_mats::<B, T>(be, t, &self.batch, [self.n, self.k], self.vector, name))
            .transpose()
    }

    fn out<B: SyncBackend>(&self, be: &B, a: Vec<Mat<T>>, b: Vec<Mat<T>>) -> Result<Tensors<B>> {
        let (n, k) = (self.n, self.k);
        let a_bar = if self.a_active {
            Some(be.from_host(join("a_bar", &self.batch, n, n, &a)?)?)
        } else {
            None
        };
        let b_bar = reshaped(join("b_bar", &self.batch, n, k, &b)?, &self.b_dims)?;
        Ok(vec![a_bar, Some(be.from_host(b_bar)?)])
    }
}

impl<B: SyncBackend, T: ImplicitScalar> Pullback<B> for SolvePullback<T> {
    fn pullback(&self, be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]) -> Result<Tensors<B>> {
        let Some(bars) = self.mats(be, &y[0], "x_bar")? else {
            return Ok(vec![None, None]);
        };
        let b_bars: Vec<Mat<T>> = self
            .lus
            .iter()
            .zip(&bars)
            .map(|(lu, xb)| lu.solve_adjoint(xb.as_ref()))
            .collect();
        let a_bars = b_bars
            .iter()
            .zip(&self.xs)
            .map(|(bb, x)| -mm(bb.as_ref(), x.adjoint()))
            .collect();
        self.out(be, a_bars, b_bars)
    }

    fn pullback_tangent(
        &self,
        be: &B,
        _: &Primal<B>,
        y: &[Option<B::Tensor>],
        dx: &[Option<B::Tensor>],
        dy: &[Option<B::Tensor>],
    ) -> Pair<B> {
        let run = || -> Result<(Tensors<B>, Tensors<B>)> {
            let (n, k) = (self.n, self.k);
            let zeros = || vec![Mat::<T>::zeros(n, k); self.lus.len()];
            let bars = self.mats(be, &y[0], "x_bar")?.unwrap_or_else(zeros);
            let bar_dots = self.mats(be, &dy[0], "x_bar_dot")?.unwrap_or_else(zeros);
            let a_dots = dx[0]
                .as_ref()
                .map(|t| host_mats::<B, T>(be, t, &self.batch, [n, n], "a_dot"))
                .transpose()?;
            let b_dots = self.mats(be, &dx[1], "b_dot")?;
            let (mut ab, mut bb, mut abd, mut bbd) = (vec![], vec![], vec![], vec![]);
            for (i, lu) in self.lus.iter().enumerate() {
                let x = self.xs[i].as_ref();
                let b_bar = lu.solve_adjoint(bars[i].as_ref());
                // Ẋ = A⁻¹·(Ḃ − Ȧ·X), B̄̇ = A⁻ᴴ·(X̄̇ − Ȧᴴ·B̄)
                let mut r = b_dots
                    .as_ref()
                    .map_or_else(|| Mat::zeros(n, k), |d| d[i].clone());
                let mut s = bar_dots[i].clone();
                if let Some(d) = &a_dots {
                    r -= mm(d[i].as_ref(), x);
                    s -= mm(d[i].adjoint(), b_bar.as_ref());
                }
                let x_dot = lu.solve(r.as_ref());
                let b_bar_dot = lu.solve_adjoint(s.as_ref());
                // Ā̇ = −(B̄̇·Xᴴ + B̄·Ẋᴴ)
                abd.push(
                    -(mm(b_bar_dot.as_ref(), x.adjoint()) + mm(b_bar.as_ref(), x_dot.adjoint())),
                );
                ab.push(-mm(b_bar.as_ref(), x.adjoint()));
                bb.push(b_bar);
                bbd.push(b_bar_dot);
            }
            Ok((self.out(be, ab, bb)?, self.out(be, abd, bbd)?))
        };
        Some(run())
    }
}

/// The pullback of [`InvRule`](super::InvRule): `Ā = −Yᴴ·Ȳ·Yᴴ`.
pub(super) struct InvPullback<T> {
    pub(super) ys: Vec<Mat<T>>,
    pub(super) batch: Vec<usize>,
    pub(super) n: usize,
}

impl<B: SyncBackend, T: ImplicitScalar> Pullback<B> for InvPullback<T> {
    fn pullback(&self, be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]) -> Result<Tensors<B>> {
        let Some(y) = &y[0] else {
            return Ok(vec![None]);
        };
        let n = self.n;
        let bars = host_mats::<B, T>(be, y, &self.batch, [n, n], "y_bar")?;
        let h = per_matrix::<T, Mat<T>>(&self.batch, ("a_bar", n, n), |i| {
            let yh = self.ys[i].adjoint();
            Ok(-mm(mm(yh, bars[i].as_ref()).as_ref(), yh))
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
    ) -> Pair<B> {
        let run = || -> Result<(Tensors<B>, Tensors<B>)> {
            let n = self.n;
            let mats = |t: &Option<B::Tensor>, name: &str| {
                mats_or_zeros::<B, T>(be, t, &self.batch, [n, n], name)
            };
            let (bars, bar_dots, a_dots) = (
                mats(&y[0], "y_bar")?,
                mats(&dy[0], "y_bar_dot")?,
                mats(&dx[0], "a_dot")?,
            );
            let (mut g, mut gd) = (vec![], vec![]);
            for i in 0..self.ys.len() {
                let y = self.ys[i].as_ref();
                let yh = y.adjoint();
                // Ẏ = −Y·Ȧ·Y; Ā̇ = −(Ẏᴴ·Ȳ·Yᴴ + Yᴴ·Ȳ̇·Yᴴ + Yᴴ·Ȳ·Ẏᴴ)
                let y_dot = -mm(mm(y, a_dots[i].as_ref()).as_ref(), y);
                let yb = bars[i].as_ref();
                let t1 = mm(mm(y_dot.adjoint(), yb).as_ref(), yh);
                let t2 = mm(mm(yh, bar_dots[i].as_ref()).as_ref(), yh);
                let t3 = mm(mm(yh, yb).as_ref(), y_dot.adjoint());
                gd.push(-(t1 + t2 + t3));
                g.push(-mm(mm(yh, yb).as_ref(), yh));
            }
            let b = &self.batch;
            Ok((
                vec![Some(be.from_host(join("a_bar", b, n, n, &g)?)?)],
                vec![Some(be.from_host(join("a_bar_dot", b, n, n, &gd)?)?)],
            ))
        };
        Some(run())
    }
}

/// The pullback of [`DetRule`](super::DetRule) (`log = false`) and
/// [`SlogdetRule`](super::SlogdetRule): `Ā = conj(c)·A⁻ᴴ`, `c = conj(d̄)·d` for `det`,
/// `c = l̄ + i·Im(conj(s̄)·s)` for `slogdet`.
pub(super) struct DetPullback<T> {
    pub(super) lus: Vec<Lu<T>>,
    pub(super) ds: Vec<T>,
    pub(super) batch: Vec<usize>,
    pub(super) n: usize,
    pub(super) log: bool,
}

impl<T: ImplicitScalar> DetPullback<T> {
    fn what(&self) -> &'static str {
        if self.log { "slogdet: A" } else { "det: A" }
    }

    /// `c` per matrix for the cotangents `y` (and, with `ts` the traces `tr(A⁻¹·Ȧ)`, the
    /// primal's tangents enter as `ḋ = d·t`, `ṡ = i·Im(t)·s`).
    fn coefficients<B: SyncBackend>(
        &self,
        be: &B,
        y: &[Option<B::Tensor>],
        ts: Option<&[T]>,
        names: [&str; 2],
    ) -> Result<Vec<T>> {
        let count = self.lus.len();
        let mut cs = vec![T::zero(); count];
        let phase = |d: T| d * real::<T>(1.0 / abs(d));
        if self.log {
            if let (Some(lb), None) = (&y[1], ts) {
                let lb = arg_scalars::<B, T>(be, lb, &self.batch, T::DTYPE.real(), names[1])?;
                cs.iter_mut().zip(lb).for_each(|(c, l)| *c += l);
            }
            if let (Some(sb), true) = (&y[0], T::DTYPE.is_complex()) {
                let sb = arg_scalars::<B, T>(be, sb, &self.batch, T::DTYPE, names[0])?;
                for (i, (c, sb)) in cs.iter_mut().zip(sb).enumerate() {
                    let s = phase(self.ds[i]);
                    // the factor of s: 1, or along the path i·Im(t) (ṡ = i·Im(t)·s)
                    let ds = ts.map_or(s, |t| cplx::<T>(0.0, im(t[i])) * s);
                    *c += cplx::<T>(0.0, im(cj(sb) * ds));
                }
            }
        } else if let Some(db) = &y[0] {
            let db = arg_scalars::<B, T>(be, db, &self.batch, T::DTYPE, names[0])?;
            for (i, (c, db)) in cs.iter_mut().zip(db).enumerate() {
                let d = self.ds[i];
                *c = cj(db) * ts.map_or(d, |t| d * t[i]);
            }
        }
        Ok(cs)
    }
}

impl<B: SyncBackend, T: ImplicitScalar> Pullback<B> for DetPullback<T> {
    fn pullback(&self, be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]) -> Result<Tensors<B>> {
        let n = self.n;
        let cs = self.coefficients(
            be,
            y,
            None,
            ["sign_bar", "logabsdet_bar"].map(|s| if self.log { s } else { "det_bar" }),
        )?;
        let h = per_matrix::<T, Mat<T>>(&self.batch, ("a_bar", n, n), |i| {
            check_pivots(self.lus[i].u.as_ref(), self.what(), i)?;
            let inv = self.lus[i].inverse();
            let c = cj(cs[i]);
            Ok(Mat::from_fn(n, n, |r, s| c * cj(inv[(s, r)])))
        })?;
        Ok(vec![Some(be.from_host(h)?)])
    }

    fn pullback_tangent(
        &self,
        be: &B,
        primal: &Primal<B>,
        y: &[Option<B::Tensor>],
        dx: &[Option<B::Tensor>],
        dy: &[Option<B::Tensor>],
    ) -> Pair<B> {
        let run = || -> Result<(Tensors<B>, Tensors<B>)> {
            let n = self.n;
            let bar = self.pullback(be, primal, y)?;
            let (names, dot_names) = if self.log {
                (
                    ["sign_bar", "logabsdet_bar"],
                    ["sign_bar_dot", "logabsdet_bar_dot"],
                )
            } else {
                (["det_bar"; 2], ["det_bar_dot"; 2])
            };
            let a_dots = mats_or_zeros::<B, T>(be, &dx[0], &self.batch, [n, n], "a_dot")?;
            let mut ts = Vec::with_capacity(self.lus.len());
            for (i, lu) in self.lus.iter().enumerate() {
                check_pivots(lu.u.as_ref(), self.what(), i)?;
                ts.push(lu.trace_solve(a_dots[i].as_ref()));
            }
            // ċ = (c at the cotangents' tangents) + (c's change along the primal path)
            let c = self.coefficients(be, y, None, names)?;
            let c1 = self.coefficients(be, dy, None, dot_names)?;
            let c2 = self.coefficients(be, y, Some(&ts), names)?;
            let h = per_matrix::<T, Mat<T>>(&self.batch, ("a_bar_dot", n, n), |i| {
                // Ā̇ = conj(ċ)·M + conj(c)·Ṁ, M = A⁻ᴴ, Ṁ = −M·Ȧᴴ·M
                let m = self.lus[i].inverse().adjoint().to_owned();
                let m_dot = -mm(mm(m.as_ref(), a_dots[i].adjoint()).as_ref(), m.as_ref());
                let (c, c_dot) = (cj(c[i]), cj(c1[i] + c2[i]));
                Ok(Mat::from_fn(n, n, |r, s| {
                    c_dot * m[(r, s)] + c * m_dot[(r, s)]
                }))
            })?;
            Ok((bar, vec![Some(be.from_host(h)?)]))
        };
        Some(run())
    }
}
