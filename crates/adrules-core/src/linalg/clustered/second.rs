//! The clustered eigendecomposition's pullback tangent (second order, forward over reverse):
//! the product rule on every step of the pullback, the subspace (Kato) term through the
//! divided differences of its weights (see [`ClusteredEighPullback::pullback_tangent`]).

use faer::{Mat, MatRef};

use super::super::RuleOptions;
use super::super::batch::by_dtype;
use super::super::common::{cj, cplx, im, inv_gap, mm, mm_add, re, real, unscaled};
use super::super::driver::{per_matrix, try_map};
use super::rules::{Units, kato_weights, pullback_one, rho, tangent_one, units};
use super::{ClusteredEighPullback, Factors, herm};
use crate::backend::Backend;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::host::HostTensor;
use crate::implicit::ImplicitScalar;

impl<B: Backend> ClusteredEighPullback<B> {
    /// Second order (forward-over-reverse): `(Ā, Ā̇)`, the cotangent of
    /// [`pullback`](ClusteredEighPullback::pullback) and its tangent
    /// `d/dε pullback(A + εȦ; W̄ + εW̄̇, C̄' + εC̄̇')` along the direction `Ȧ: [batch…, n, n]`
    /// and the tangents `W̄̇: [batch…, n, k]`, `C̄̇': [batch…, k, k]` of the cotangents (an
    /// absent one is zero). For the loss `ℓ(A) = Re⟨W̄, W⟩ + Re⟨C̄', C'⟩` with constant
    /// cotangents (`W̄̇ = C̄̇' = 0`), `Ā̇` is the Hessian-vector product `∇²ℓ·Ȧ`; for
    /// cotangents that depend on `A` through the outputs, `W̄̇` and `C̄̇'` are their tangents
    /// along the path.
    ///
    /// The product rule on each step of the pullback, with `Ḣ = (Ȧ + Ȧᴴ)/2`, the
    /// pushforward's `Ẇ` ([`tangent`](ClusteredEighPullback::tangent)),
    /// `(HW)˙ = Ḣ·W + H·Ẇ`, `μ̇_p = 2·Re(w_pᴴ·G·ẇ_p)` and `ρ̇_q = Re(rᴴ·ẇ_q)`:
    /// - corner: `Ḃ = W̄̇ + (HW)˙·(C̄' + C̄'ᴴ) + HW·(C̄̇' + C̄̇'ᴴ)`,
    ///   `H̄̇ = Ẇ·C̄'·Wᴴ + W·C̄̇'·Wᴴ + W·C̄'·Ẇᴴ`;
    /// - phase (complex): `b̃̇_q = ḃ_q + i·[Im(ḃ_qᴴw_q + b_qᴴẇ_q)/ρ_q −
    ///   Im(b_qᴴw_q)·ρ̇_q/ρ_q²]·r`;
    /// - rotation: `J̇ = Ẇ_cᴴ·B̃_c + W_cᴴ·B̃̇_c`,
    ///   `Ż_pq = J̇_pq/(μ_p − μ_q) − J_pq·(μ̇_p − μ̇_q)/(μ_p − μ_q)²`,
    ///   `B̄̇⊥ = B̃̇_c − G·Ẇ_c·(Z + Zᴴ) − G·W_c·(Ż + Żᴴ)`;
    /// - subspace: the Kato term is the double operator integral
    ///   `K_c = Σ_{j,i} φ(λ_j, λ_i)·P_j·M·P_i` of `M = B̄⊥·W_cᴴ` (`P_j = u_j·u_jᴴ`;
    ///   `φ(x, y) = f(y − x)` for `x` outside the cluster and `y` inside it, else 0;
    ///   `f(x) = 1/x`), so that, by the Daleckii–Krein rule,
    ///   `K̇_c = Σ φ(λ_j, λ_i)·P_j·Ṁ·P_i + Σ φ^{[1,0]}(λ_j, λ_k; λ_i)·P_j·Ḣ·P_k·M·P_i +
    ///   Σ φ^{[0,1]}(λ_j; λ_i, λ_k)·P_j·M·P_i·Ḣ·P_k` with `Ṁ = B̄̇⊥·W_cᴴ + B̄⊥·Ẇ_cᴴ` and the
    ///   divided differences of `φ` (`i, i' ∈ I`, `j, k ∉ I`, `δ_ij = λ_i − λ_j`,
    ///   `f[x, y] = (f(x) − f(y))/(x − y) = −1/(x·y)`):
    ///   `φ^{[1,0]}(λ_j, λ_k; λ_i) = −f[δ_ij, δ_ik]`,
    ///   `φ^{[1,0]}(λ_{i'}, λ_k; λ_i) = −f(δ_ik)·f(δ_{i'k})`,
    ///   `φ^{[1,0]}(λ_j, λ_{i'}; λ_i) = −f(δ_ij)·f(δ_{i'j})`,
    ///   `φ^{[0,1]}(λ_j; λ_i, λ_{i'}) = f[δ_ij, δ_{i'j}]`,
    ///   `φ^{[0,1]}(λ_j; λ_i, λ_k) = f(δ_ij)·f(δ_ik)`, and 0 with both first arguments
    ///   inside. Every denominator is a gap between a member of the cluster and an eigenvalue
    ///   outside it: like the first order, the second never divides by a gap inside a
    ///   cluster, and is exact at exact and near degeneracies there (J. L. Daleckii and
    ///   S. G. Krein, *Integration and differentiation of functions of Hermitian operators*,
    ///   AMS Transl. 47 (1965); N. J. Higham, *Functions of Matrices*, SIAM 2008, §3.2, for
    ///   the divided differences; T. Kato, *Perturbation Theory for Linear Operators*,
    ///   Springer 1966, ch. II, for the total projection);
    /// - `Ā̇ = (H̄̇ + H̄̇ᴴ)/2`.
    ///
    /// With a broadening `ε` ([`RuleOptions::broadening`]) every `f` is `x/(x² + ε)` and
    /// `f[x, y] = (ε − x·y)/((x² + ε)(y² + ε))`, the eigenvectors' motion across the cluster
    /// boundary broadened as in the pushforward (the convention of
    /// [`EighPullback::pullback_tangent`](crate::linalg::EighPullback::pullback_tangent)):
    /// finite at degeneracies across the boundary, biased by a relative `O(ε/δ²)`. The
    /// `μ` gaps are not broadened (the primal refuses degenerate `μ`). Derivation in
    /// [`crate::math`], "Clustered eigendecomposition", second order.
    ///
    /// # Errors
    /// Those of [`pullback`](ClusteredEighPullback::pullback) and
    /// [`tangent`](ClusteredEighPullback::tangent); shapes, dtypes and finiteness of `a_dot`
    /// and of the cotangents' tangents ([`Error::ShapeMismatch`],
    /// [`Error::DTypeMismatch`], [`Error::InvalidArgument`], naming `a_dot`,
    /// `basis_bar_dot`, `corner_bar_dot`).
    pub fn pullback_tangent(
        &self,
        basis_bar: Option<&B::Tensor>,
        corner_bar: Option<&B::Tensor>,
        a_dot: &B::Tensor,
        basis_bar_dot: Option<&B::Tensor>,
        corner_bar_dot: Option<&B::Tensor>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let hosts = by_dtype!(
            self.dtype,
            pullback_tangent_t::<B>(
                self,
                [basis_bar, corner_bar],
                a_dot,
                [basis_bar_dot, corner_bar_dot]
            )
        )?;
        let [bar, dot] = try_map(hosts, |h| self.be.from_host(h))?;
        Ok((bar, dot))
    }
}

/// `W̄` and `C̄'` (or their tangents: `suffix` `"_dot"` names them so in errors) on the host,
/// one entry per matrix of the batch, shapes checked (the pullback's reading of its
/// cotangents, too).
pub(super) type Cotangents<T> = [Option<Vec<Mat<T>>>; 2];

pub(super) fn cotangents<B: Backend, T: ImplicitScalar>(
    pb: &ClusteredEighPullback<B>,
    [w, c]: [Option<&B::Tensor>; 2],
    suffix: &str,
) -> Result<Cotangents<T>> {
    let (_, n) = pb.batch_n()?;
    let k = pb.k;
    let w = w
        .map(|t| pb.arg::<T>(t, n, k, &format!("basis_bar{suffix}")))
        .transpose()?;
    let c = c
        .map(|t| pb.arg::<T>(t, k, k, &format!("corner_bar{suffix}")))
        .transpose()?;
    Ok([w, c])
}

fn pullback_tangent_t<B: Backend, T: ImplicitScalar>(
    pb: &ClusteredEighPullback<B>,
    bars: [Option<&B::Tensor>; 2],
    a_dot: &B::Tensor,
    dots: [Option<&B::Tensor>; 2],
) -> Result<[HostTensor; 2]> {
    let (batch, n) = pb.batch_n()?;
    let fs = pb.factors::<T>()?;
    let [wb, cb] = cotangents::<B, T>(pb, bars, "")?;
    let ads = pb.arg::<T>(a_dot, n, n, "a_dot")?;
    let [wbd, cbd] = cotangents::<B, T>(pb, dots, "_dot")?;
    per_matrix::<T, _>(&batch, (("a_bar", n, n), ("a_bar_dot", n, n)), |b| {
        fn pick<T: ImplicitScalar>(x: &Option<Vec<Mat<T>>>, b: usize) -> Option<MatRef<'_, T>> {
            x.as_ref().map(|x| x[b].as_ref())
        }
        let bar = pullback_one(&fs[b], pick(&wb, b), pick(&cb, b), &pb.opts)?;
        let dot = pullback_tangent_one(
            &fs[b],
            herm(ads[b].as_ref()).as_ref(),
            [pick(&wb, b), pick(&cb, b)],
            [pick(&wbd, b), pick(&cbd, b)],
            &pb.opts,
        )?;
        Ok((herm(bar.as_ref()), herm(dot.as_ref())))
    })
}

/// The divided difference `f[x, y] = (f(x) − f(y))/(x − y)` of `f(x) = 1/x`, or of
/// `x/(x² + ε)` with broadening, for two gaps across a cluster boundary (`fx`, `fy` their
/// `f`): `−f(x)·f(y)`, or `(ε − x·y)/((x² + ε)(y² + ε))`, with no cancellation as `x → y`.
fn divided(x: f64, y: f64, fx: f64, fy: f64, eb: f64) -> f64 {
    if eb > 0.0 {
        (eb - x * y) / ((x * x + eb) * (y * y + eb))
    } else {
        -fx * fy
    }
}

/// One matrix's `H̄̇` (not yet Hermitian) along the Hermitian `hd`, for the cotangents
/// `[W̄, C̄']` and their tangents.
fn pullback_tangent_one<T: ImplicitScalar>(
    f: &Factors<T>,
    hd: MatRef<'_, T>,
    [w_bar, c_bar]: [Option<MatRef<'_, T>>; 2],
    [w_bar_dot, c_bar_dot]: [Option<MatRef<'_, T>>; 2],
    opts: &RuleOptions,
) -> Result<Mat<T>> {
    let (n, k) = f.w.shape();
    let one = T::one();
    // the pushforward (it also checks the gaps across the cluster boundaries)
    let (dw, _) = tangent_one(f, hd, opts)?;
    let (fw, _) = kato_weights(f, opts)?;
    let Units { lam, c, eb, tol } = units(f, opts);
    // (HW)˙ = Ḣ·W + H·Ẇ (H·Ẇ = U·Λ·Uᴴ·Ẇ) and G·Ẇ
    let udw = mm(f.u.adjoint(), dw.as_ref());
    let ludw = Mat::from_fn(n, k, |i, j| udw[(i, j)] * real::<T>(f.lam[i]));
    let mut hw_dot = mm(f.u.as_ref(), ludw.as_ref());
    mm_add(&mut hw_dot, one, hd, f.w.as_ref());
    let gdw = mm(f.g.as_ref(), dw.as_ref());

    // corner: B = W̄ + HW·(C̄' + C̄'ᴴ), H̄ = W·C̄'·Wᴴ, and their tangents
    let sym = |x: MatRef<'_, T>| Mat::from_fn(k, k, |i, j| x[(i, j)] + cj(x[(j, i)]));
    let mut b = w_bar.map_or_else(|| Mat::zeros(n, k), |x| x.to_owned());
    let mut bd = w_bar_dot.map_or_else(|| Mat::zeros(n, k), |x| x.to_owned());
    let mut hbar_dot = Mat::<T>::zeros(n, n);
    if let Some(cb) = c_bar {
        let cs = sym(cb);
        mm_add(&mut b, one, f.hw.as_ref(), cs.as_ref());
        mm_add(&mut bd, one, hw_dot.as_ref(), cs.as_ref());
        let t = mm(cb, f.w.adjoint());
        mm_add(&mut hbar_dot, one, dw.as_ref(), t.as_ref());
        let t = mm(cb, dw.adjoint());
        mm_add(&mut hbar_dot, one, f.w.as_ref(), t.as_ref());
    }
    if let Some(cbd) = c_bar_dot {
        let cs = sym(cbd);
        mm_add(&mut bd, one, f.hw.as_ref(), cs.as_ref());
        let t = mm(cbd, f.w.adjoint());
        mm_add(&mut hbar_dot, one, f.w.as_ref(), t.as_ref());
    }

    // the Kato terms' tangent in the eigenbasis, in units of c: H̄̇ += U·R·Uᴴ/c
    let uhd = mm(hd, f.u.as_ref());
    let hp = unscaled(mm(f.u.adjoint(), uhd.as_ref()).as_ref(), c);
    let gap = |x: usize, y: usize| inv_gap(lam[x] - lam[y], tol, eb).unwrap_or(0.0);
    let mut r = Mat::<T>::zeros(n, n);
    for (ci, range) in f.ranges.iter().enumerate() {
        let (s, g) = (range.start, range.len());
        let (wc, gwc) = (f.w.subcols(s, g), f.gw.subcols(s, g));
        let (dwc, gdwc) = (dw.subcols(s, g), gdw.subcols(s, g));
        let mut bc = b.subcols(s, g).to_owned();
        let mut bdc = bd.subcols(s, g).to_owned();
        // phase: b̃_q = b_q + i·Im(b_qᴴw_q)/ρ_q·r
        if T::DTYPE.is_complex() {
            for q in 0..g {
                let (mut beta, mut beta_d, mut rho_d) = (T::zero(), T::zero(), T::zero());
                for i in 0..n {
                    beta += cj(bc[(i, q)]) * wc[(i, q)];
                    beta_d += cj(bdc[(i, q)]) * wc[(i, q)] + cj(bc[(i, q)]) * dwc[(i, q)];
                    rho_d += cj(f.refs[(i, s + q)]) * dwc[(i, q)];
                }
                let rho = rho(f, s + q);
                let x = cplx::<T>(0.0, im(beta) / rho);
                let xd = cplx::<T>(0.0, im(beta_d) / rho - im(beta) * re(rho_d) / (rho * rho));
                for i in 0..n {
                    let ri = f.refs[(i, s + q)];
                    bc[(i, q)] += x * ri;
                    bdc[(i, q)] += xd * ri;
                }
            }
        }
        // rotation: Z_pq = (W_cᴴ·B̃_c)_pq/(μ_p − μ_q), B̄⊥ = B̃_c − G·W_c·(Z + Zᴴ)
        let j = mm(wc.adjoint(), bc.as_ref());
        let mut jd = mm(dwc.adjoint(), bc.as_ref());
        mm_add(&mut jd, one, wc.adjoint(), bdc.as_ref());
        let mu = &f.mu[s..s + g];
        let mu_d: Vec<f64> = (0..g)
            .map(|p| {
                let x = (0..n).fold(T::zero(), |a, i| a + cj(gwc[(i, p)]) * dwc[(i, p)]);
                2.0 * re(x)
            })
            .collect();
        let z = Mat::from_fn(g, g, |p, q| {
            if p == q {
                T::zero()
            } else {
                j[(p, q)] * real::<T>(1.0 / (mu[p] - mu[q]))
            }
        });
        let zd = Mat::from_fn(g, g, |p, q| {
            if p == q {
                return T::zero();
            }
            let d = mu[p] - mu[q];
            jd[(p, q)] * real::<T>(1.0 / d) - j[(p, q)] * real::<T>((mu_d[p] - mu_d[q]) / (d * d))
        });
        let zs = Mat::from_fn(g, g, |p, q| z[(p, q)] + cj(z[(q, p)]));
        let zds = Mat::from_fn(g, g, |p, q| zd[(p, q)] + cj(zd[(q, p)]));
        mm_add(&mut bc, -one, gwc, zs.as_ref());
        mm_add(&mut bdc, -one, gdwc, zs.as_ref());
        mm_add(&mut bdc, -one, gwc, zds.as_ref());
        // subspace: M = B̄⊥·W_cᴴ in the eigenbasis, columns I: Y0 = Uᴴ·B̄⊥·Q_cᴴ (= Uᴴ·X̄_c),
        // and Ṁ's: Y1 = Uᴴ·(B̄̇⊥·Q_cᴴ + B̄⊥·Ẇ_cᴴ·V_c)
        let qh = f.q[ci].adjoint();
        let vc = Mat::from_fn(n, g, |i, p| f.u[(i, f.kept[s + p])]);
        let wdv = mm(dwc.adjoint(), vc.as_ref());
        let y0 = mm(f.u.adjoint(), mm(bc.as_ref(), qh).as_ref());
        let mut mv = mm(bdc.as_ref(), qh);
        mm_add(&mut mv, one, bc.as_ref(), wdv.as_ref());
        let y1 = mm(f.u.adjoint(), mv.as_ref());
        let inside = |x: usize| f.cluster_of[x] == Some(ci);
        for p in 0..g {
            let i = f.kept[s + p];
            for jj in 0..n {
                // φ(λ_j, λ_i)·Ṁ' and φ^{[1,0]}(λ_j, λ_k; λ_i)·Ḣ'_jk·M'_ki
                let mut acc = y1[(jj, p)] * real::<T>(fw[(jj, s + p)]);
                for kk in 0..n {
                    let coef = match (inside(jj), inside(kk)) {
                        (true, true) => continue,
                        (false, false) => {
                            let (x, y) = (lam[i] - lam[jj], lam[i] - lam[kk]);
                            -divided(x, y, gap(i, jj), gap(i, kk), eb)
                        }
                        (true, false) => -gap(i, kk) * gap(jj, kk),
                        (false, true) => gap(i, jj) * gap(jj, kk),
                    };
                    acc += hp[(jj, kk)] * y0[(kk, p)] * real::<T>(coef);
                }
                r[(jj, i)] += acc;
            }
        }
        // φ^{[0,1]}(λ_j; λ_i, λ_k)·M'_ji·Ḣ'_ik (rows outside the cluster)
        for jj in (0..n).filter(|&x| !inside(x)) {
            for kk in 0..n {
                let mut acc = T::zero();
                for p in 0..g {
                    let i = f.kept[s + p];
                    let coef = if inside(kk) {
                        let (x, y) = (lam[i] - lam[jj], lam[kk] - lam[jj]);
                        divided(x, y, gap(i, jj), gap(kk, jj), eb)
                    } else {
                        gap(i, jj) * gap(i, kk)
                    };
                    acc += y0[(jj, p)] * hp[(i, kk)] * real::<T>(coef);
                }
                r[(jj, kk)] += acc;
            }
        }
    }
    let ru = mm(r.as_ref(), f.u.adjoint());
    let kato = unscaled(mm(f.u.as_ref(), ru.as_ref()).as_ref(), c);
    Ok(hbar_dot + kato)
}
