//! The pushforward and pullback of the clustered eigendecomposition.

use faer::{Mat, MatRef};

use super::super::RuleOptions;
use super::super::batch::{by_dtype, matrix_dims};
use super::super::common::{cj, cplx, gauge_error, im, inv_gap, mm, mm_add, re, real, unscaled};
use super::super::driver::{host_mats, per_matrix, try_map};
use super::{ClusteredEighPullback, ClusteredEighTangent, Factors, herm};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::implicit::ImplicitScalar;

impl<B: Backend> ClusteredEighPullback<B> {
    /// The pushforward: the tangents `(Ẇ, Ċ')` along `Ȧ: [batch…, n, n]`.
    ///
    /// With `Ḣ = (Ȧ + Ȧᴴ)/2` and, for the kept cluster `c` (eigen indices `I`, basis
    /// `W_c = V_c·Q_c`, `V_c = U_I`):
    /// - **subspace** (Kato): the tangent of the spectral projector `Π_c = V_c V_cᴴ` applied
    ///   to the basis, `Ẇ⊥ = (1 − Π_c)·Π̇_c·W_c = Ẋ·Q_c` with
    ///   `Ẋ[:, i] = Σ_{j ∉ I} u_j·(u_jᴴ Ḣ u_i)/(λ_i − λ_j)` (T. Kato, *Perturbation Theory
    ///   for Linear Operators*, Springer 1966, ch. II: the derivative of the total
    ///   projection of an eigenvalue group; it has no denominator inside the group, so it
    ///   is finite at exact and near degeneracies inside a cluster);
    /// - **rotation** (the secondary operator's gauge fixing): `Ẇ_c = Ẇ⊥ + W_c·Ω`,
    ///   `Ω_pq = −S_pq/(μ_p − μ_q)` (`p ≠ q`), `S = Ẇ⊥ᴴ·G·W_c + W_cᴴ·G·Ẇ⊥`, from
    ///   `W_cᴴ·G·W_c` staying diagonal and `W_cᴴ·W_c = I` (`Ω` anti-Hermitian);
    /// - **phase** (complex data): `Ω_qq = −i·Im(rᴴ·ẇ'_q)/(rᴴw_q)` for the column `ẇ'_q`
    ///   of the two terms above, from `rᴴw_q` staying real (0 for real data: the sign is
    ///   locally constant);
    /// - **corner**: `Ċ' = Ẇᴴ·H·W + Wᴴ·Ḣ·W + Wᴴ·H·Ẇ`.
    ///
    /// `1/(λ_i − λ_j)` is broadened as in the eigh rules ([`RuleOptions::broadening`]).
    /// Derivation in [`crate::math`], "Clustered eigendecomposition".
    ///
    /// # Errors
    /// Shape and dtype of `a_dot`, a non-finite entry; [`Error::GaugeIllDefined`] when a
    /// kept eigenvalue and one outside its cluster are degenerate (`|λ_i − λ_j| ≤
    /// rtol·max|λ|`, possible only for `delta` below that tolerance) without broadening.
    pub fn tangent(&self, a_dot: &B::Tensor) -> Result<ClusteredEighTangent<B>> {
        let hosts = by_dtype!(self.dtype, tangent_t::<B>(self, a_dot))?;
        let [basis, corner] = try_map(hosts, |h| self.be.from_host(h))?;
        Ok(ClusteredEighTangent { basis, corner })
    }

    /// The pullback: `Ā: [batch…, n, n]` (Hermitian) from `W̄: [batch…, n, k]` and
    /// `C̄': [batch…, k, k]` (an absent one is zero), the adjoint of
    /// [`tangent`](ClusteredEighPullback::tangent) (`Re⟨W̄, Ẇ⟩ + Re⟨C̄', Ċ'⟩ = Re⟨Ā, Ȧ⟩`):
    /// - corner: `B = W̄ + H·W·(C̄' + C̄'ᴴ)`, `H̄ = W·C̄'·Wᴴ`;
    /// - phase (complex): `b̃_q = b_q + i·Im(b_qᴴw_q)/(rᴴw_q)·r`;
    /// - rotation: `Z_pq = (W_cᴴ·B̃_c)_pq/(μ_p − μ_q)` (`p ≠ q`, else 0),
    ///   `B̄⊥ = B̃_c − G·W_c·(Z + Zᴴ)`;
    /// - subspace: `X̄_c = B̄⊥·Q_cᴴ`, `H̄ += Σ_c Σ_{i ∈ I} Σ_{j ∉ I} u_j·(u_jᴴ x̄_i)/(λ_i − λ_j)·u_iᴴ`;
    /// - `Ā = (H̄ + H̄ᴴ)/2`.
    ///
    /// The basis is a function of `A` (its gauge is fixed by `G` and `r`), so every
    /// cotangent is admissible.
    ///
    /// # Errors
    /// Shapes and dtypes of the cotangents, non-finite entries; [`Error::GaugeIllDefined`]
    /// as [`tangent`](ClusteredEighPullback::tangent).
    pub fn pullback(
        &self,
        basis_bar: Option<&B::Tensor>,
        corner_bar: Option<&B::Tensor>,
    ) -> Result<B::Tensor> {
        let h = by_dtype!(self.dtype, pullback_t::<B>(self, basis_bar, corner_bar))?;
        self.be.from_host(h)
    }

    pub(super) fn factors<T: ImplicitScalar>(&self) -> Result<&[Factors<T>]> {
        self.factors
            .downcast_ref::<Vec<Factors<T>>>()
            .map(Vec::as_slice)
            .ok_or_else(|| Error::invalid("pullback", "factors of another dtype"))
    }

    pub(super) fn batch_n(&self) -> Result<(Vec<usize>, usize)> {
        let (batch, _, n) = matrix_dims(&self.dims, "a")?;
        Ok((batch, n))
    }

    /// A cotangent or tangent `[batch…, rows, cols]` on the host, split per matrix.
    pub(super) fn arg<T: ImplicitScalar>(
        &self,
        t: &B::Tensor,
        rows: usize,
        cols: usize,
        arg: &str,
    ) -> Result<Vec<Mat<T>>> {
        let (batch, _) = self.batch_n()?;
        host_mats(&self.be, t, &batch, [rows, cols], arg)
    }
}

/// The eigenvalues in units of a power of two `c` near `max|λ|` (`λ/c`), the broadening in
/// the same units (`ε/c²`) and the degeneracy tolerance of their gaps (`rtol·max|λ/c|`).
pub(super) struct Units {
    pub(super) lam: Vec<f64>,
    pub(super) c: f64,
    pub(super) eb: f64,
    pub(super) tol: f64,
}

pub(super) fn units<T: ImplicitScalar>(f: &Factors<T>, opts: &RuleOptions) -> Units {
    let c = super::super::common::pow2_scale(f.lam.iter().fold(0.0f64, |a, &b| a.max(b.abs())));
    let eb = if opts.broadening == 0.0 {
        0.0
    } else {
        opts.broadening / c / c
    };
    let lam: Vec<f64> = f.lam.iter().map(|x| x / c).collect();
    let scale = lam.iter().fold(0.0f64, |a, &b| a.max(b.abs()));
    let tol = opts.rtol::<T>(f.lam.len()) * scale;
    Units { lam, c, eb, tol }
}

/// `F[j, col] = 1/(λ_i − λ_j)` in units of `c` (`i = kept[col]`, `j` outside `i`'s
/// cluster; 0 inside it), with `c` the power of two near `max|λ|`: the Kato term is
/// `unscaled(F∘Y, c)`.
pub(super) fn kato_weights<T: ImplicitScalar>(
    f: &Factors<T>,
    opts: &RuleOptions,
) -> Result<(Mat<f64>, f64)> {
    let n = f.lam.len();
    let k = f.kept.len();
    let Units { lam, c, eb, tol } = units(f, opts);
    let mut out = Mat::<f64>::zeros(n, k);
    for col in 0..k {
        let i = f.kept[col];
        for j in 0..n {
            if f.cluster_of[j].is_some() && f.cluster_of[j] == f.cluster_of[i] {
                continue;
            }
            out[(j, col)] = inv_gap(lam[i] - lam[j], tol, eb).ok_or_else(|| {
                gauge_error(
                    "eigh_clustered",
                    format!(
                        "the kept eigenvalue {:e} and {:e} outside its cluster are degenerate: \
                         the kept subspace is not differentiable (raise delta, or broaden)",
                        f.lam[i], f.lam[j]
                    ),
                )
            })?;
        }
    }
    Ok((out, c))
}

/// `V = U[:, kept]`.
pub(super) fn kept_vectors<T: ImplicitScalar>(f: &Factors<T>) -> Mat<T> {
    Mat::from_fn(f.u.nrows(), f.kept.len(), |i, col| f.u[(i, f.kept[col])])
}

/// `rᴴw` of column `col` (real and positive by the primal's phase fixing).
pub(super) fn rho<T: ImplicitScalar>(f: &Factors<T>, col: usize) -> f64 {
    let n = f.w.nrows();
    re((0..n).fold(T::zero(), |s, i| s + cj(f.refs[(i, col)]) * f.w[(i, col)]))
}

/// One matrix's tangents `(Ẇ, Ċ')` along the Hermitian `ḣ`, with the intermediate Kato
/// term `Ẋ = U·(F∘(Uᴴ·Ḣ·V))` (per member, before the rotation `Q_c`).
pub(super) fn tangent_one<T: ImplicitScalar>(
    f: &Factors<T>,
    hd: MatRef<'_, T>,
    opts: &RuleOptions,
) -> Result<(Mat<T>, Mat<T>)> {
    let (n, k) = f.w.shape();
    let (fw, c) = kato_weights(f, opts)?;
    let v = kept_vectors(f);
    let hv = mm(hd, v.as_ref());
    let y = mm(f.u.adjoint(), hv.as_ref());
    let z = Mat::from_fn(n, k, |j, col| y[(j, col)] * real::<T>(fw[(j, col)]));
    let pv = mm(f.u.as_ref(), unscaled(z.as_ref(), c).as_ref());
    let mut dw = Mat::<T>::zeros(n, k);
    for (ci, range) in f.ranges.iter().enumerate() {
        let (s, g) = (range.start, range.len());
        let perp = mm(pv.subcols(s, g), f.q[ci].as_ref());
        let (wc, gwc) = (f.w.subcols(s, g), f.gw.subcols(s, g));
        let s1 = mm(perp.adjoint(), gwc);
        let om = Mat::from_fn(g, g, |p, q| {
            if p == q {
                T::zero()
            } else {
                -(s1[(p, q)] + cj(s1[(q, p)])) * real::<T>(1.0 / (f.mu[s + p] - f.mu[s + q]))
            }
        });
        let mut d = perp;
        mm_add(&mut d, T::one(), wc, om.as_ref());
        if T::DTYPE.is_complex() {
            for q in 0..g {
                let t = (0..n).fold(T::zero(), |a, i| a + cj(f.refs[(i, s + q)]) * d[(i, q)]);
                let phi = cplx::<T>(0.0, im(t) / rho(f, s + q));
                for i in 0..n {
                    d[(i, q)] -= phi * wc[(i, q)];
                }
            }
        }
        for q in 0..g {
            for i in 0..n {
                dw[(i, s + q)] = d[(i, q)];
            }
        }
    }
    let mut dc = mm(dw.adjoint(), f.hw.as_ref());
    let hdw = mm(hd, f.w.as_ref());
    mm_add(&mut dc, T::one(), f.w.adjoint(), hdw.as_ref());
    mm_add(&mut dc, T::one(), f.hw.adjoint(), dw.as_ref());
    Ok((dw, dc))
}

fn tangent_t<B: Backend, T: ImplicitScalar>(
    pb: &ClusteredEighPullback<B>,
    a_dot: &B::Tensor,
) -> Result<[HostTensor; 2]> {
    let (batch, n) = pb.batch_n()?;
    let fs = pb.factors::<T>()?;
    let ads = pb.arg::<T>(a_dot, n, n, "a_dot")?;
    let k = pb.k;
    per_matrix::<T, _>(&batch, (("basis_dot", n, k), ("corner_dot", k, k)), |b| {
        tangent_one(&fs[b], herm(ads[b].as_ref()).as_ref(), &pb.opts)
    })
}

/// One matrix's `H̄` (not yet Hermitian) from `W̄`, `C̄'`.
pub(super) fn pullback_one<T: ImplicitScalar>(
    f: &Factors<T>,
    w_bar: Option<MatRef<'_, T>>,
    c_bar: Option<MatRef<'_, T>>,
    opts: &RuleOptions,
) -> Result<Mat<T>> {
    let (n, k) = f.w.shape();
    let mut b = w_bar.map_or_else(|| Mat::zeros(n, k), |x| x.to_owned());
    let mut hbar = Mat::<T>::zeros(n, n);
    if let Some(cb) = c_bar {
        let cs = Mat::from_fn(k, k, |i, j| cb[(i, j)] + cj(cb[(j, i)]));
        mm_add(&mut b, T::one(), f.hw.as_ref(), cs.as_ref());
        let cw = mm(cb, f.w.adjoint());
        hbar = mm(f.w.as_ref(), cw.as_ref());
    }
    let mut xbar = Mat::<T>::zeros(n, k);
    for (ci, range) in f.ranges.iter().enumerate() {
        let (s, g) = (range.start, range.len());
        let (wc, gwc) = (f.w.subcols(s, g), f.gw.subcols(s, g));
        let mut bc = b.subcols(s, g).to_owned();
        if T::DTYPE.is_complex() {
            for q in 0..g {
                let bw = (0..n).fold(T::zero(), |a, i| a + cj(bc[(i, q)]) * wc[(i, q)]);
                let x = cplx::<T>(0.0, im(bw) / rho(f, s + q));
                for i in 0..n {
                    bc[(i, q)] += x * f.refs[(i, s + q)];
                }
            }
        }
        let j = mm(wc.adjoint(), bc.as_ref());
        let z = Mat::from_fn(g, g, |p, q| {
            if p == q {
                T::zero()
            } else {
                j[(p, q)] * real::<T>(1.0 / (f.mu[s + p] - f.mu[s + q]))
            }
        });
        let zs = Mat::from_fn(g, g, |p, q| z[(p, q)] + cj(z[(q, p)]));
        mm_add(&mut bc, -T::one(), gwc, zs.as_ref());
        let xc = mm(bc.as_ref(), f.q[ci].adjoint());
        for q in 0..g {
            for i in 0..n {
                xbar[(i, s + q)] = xc[(i, q)];
            }
        }
    }
    let (fw, c) = kato_weights(f, opts)?;
    let y = mm(f.u.adjoint(), xbar.as_ref());
    let z = Mat::from_fn(n, k, |j, col| y[(j, col)] * real::<T>(fw[(j, col)]));
    let uz = mm(f.u.as_ref(), unscaled(z.as_ref(), c).as_ref());
    let v = kept_vectors(f);
    mm_add(&mut hbar, T::one(), uz.as_ref(), v.adjoint());
    Ok(hbar)
}

fn pullback_t<B: Backend, T: ImplicitScalar>(
    pb: &ClusteredEighPullback<B>,
    w_bar: Option<&B::Tensor>,
    c_bar: Option<&B::Tensor>,
) -> Result<HostTensor> {
    let (batch, n) = pb.batch_n()?;
    let fs = pb.factors::<T>()?;
    let [wb, cb] = super::second::cotangents::<B, T>(pb, [w_bar, c_bar], "")?;
    per_matrix::<T, _>(&batch, ("a_bar", n, n), |b| {
        let h = pullback_one(
            &fs[b],
            wb.as_ref().map(|x| x[b].as_ref()),
            cb.as_ref().map(|x| x[b].as_ref()),
            &pb.opts,
        )?;
        Ok(herm(h.as_ref()))
    })
}
