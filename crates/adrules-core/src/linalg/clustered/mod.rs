//! The clustered Hermitian eigendecomposition: the eigenvalues grouped into clusters of
//! (near-)degenerate values, truncated at a cluster boundary, with one canonical basis of
//! the kept subspace fixed by a covariant secondary operator, and the rules of that basis
//! and of the compressed matrix.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use faer::{Mat, Side};

use super::RuleOptions;
use super::batch::{by_dtype, matrix_dims, split};
use super::common::{abs, cj, max_abs, mm};
use super::driver::{per_matrix, try_map};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::implicit::ImplicitScalar;
use crate::scalar::DType;
use crate::scalar::eps;

mod rules;
mod second;

/// Options of [`eigh_clustered`]: which eigenvalues are kept, where clusters split, and the
/// phase convention of the basis.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterOptions {
    /// χ, the largest number of kept eigenvalues (≥ 1): whole clusters are kept, largest
    /// `|λ|` first, while their total stays ≤ `keep` (a cluster that would cross it is
    /// discarded with everything after it).
    pub keep: usize,
    /// Relative cutoff in `[0, 1)`: eigenvalues with `|λ| ≤ cutoff·max|λ|` are discarded
    /// even below `keep` (default 0).
    pub cutoff: f64,
    /// Cluster threshold `δ` in `[0, 1)`: with the eigenvalues sorted by `|λ|` descending, a
    /// new cluster starts at a sign change of `λ` or where `|λ|` drops by more than
    /// `δ·|λ_prev|` from the previous eigenvalue `λ_prev`. Take `δ` above the rounding
    /// level of the eigenvalues (`δ = 0` splits at any drop, so a degenerate pair that
    /// rounding separates becomes two clusters whose basis is arbitrary within the pair; the
    /// pullback then refuses it with [`Error::GaugeIllDefined`]).
    pub delta: f64,
    /// The phase reference `r: [n]` (any dtype that converts to `A`'s: a real `r` for any
    /// `A`, a complex one for complex `A`): each column `w` of the basis is multiplied by the
    /// phase (sign, for real data) that makes `rᴴw` real and positive. `None`: per column,
    /// `r = e_i` for the first index `i` of largest `|wᵢ|` (not covariant under gauges that
    /// mix indices: give an `r` invariant under the gauge group for a covariant basis).
    pub reference: Option<HostTensor>,
    /// What a column `w` whose overlap with the given [`reference`](Self::reference)
    /// vanishes (`|rᴴw| ≤ n·ε·‖r‖`: the reference cannot fix its phase) gets: `false`
    /// (default) refuses it with [`Error::GaugeIllDefined`]; `true` fixes that column's phase
    /// by the default reference instead (`e_i` at its largest `|wᵢ|`, an overlap of at least
    /// `1/√n`), whose rules are those of a per-column reference. Columns whose overlap does
    /// not vanish are unchanged; the fallback columns are covariant only under gauges that
    /// do not mix indices.
    pub fallback: bool,
}

impl ClusterOptions {
    /// Keep at most `keep` eigenvalues, clusters split at a relative drop `delta`; no
    /// cutoff, the default phase reference.
    pub fn new(keep: usize, delta: f64) -> Self {
        ClusterOptions {
            keep,
            cutoff: 0.0,
            delta,
            reference: None,
            fallback: false,
        }
    }

    /// The same with a relative cutoff.
    pub fn with_cutoff(mut self, cutoff: f64) -> Self {
        self.cutoff = cutoff;
        self
    }

    /// The same with a phase reference vector `r: [n]`.
    pub fn with_reference(mut self, reference: HostTensor) -> Self {
        self.reference = Some(reference);
        self
    }

    /// The same, with columns orthogonal to the reference falling back to the default
    /// reference instead of an error (see [`fallback`](Self::fallback)).
    pub fn with_fallback(mut self) -> Self {
        self.fallback = true;
        self
    }

    fn validate(&self) -> Result<()> {
        if self.keep == 0 {
            return Err(Error::invalid("keep", "must be at least 1"));
        }
        for (name, x) in [("cutoff", self.cutoff), ("delta", self.delta)] {
            if !(x.is_finite() && (0.0..1.0).contains(&x)) {
                return Err(Error::invalid(
                    name,
                    format!("must be in [0, 1), got {x:?}"),
                ));
            }
        }
        Ok(())
    }
}

/// The diagnostics of one matrix of [`eigh_clustered`].
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterInfo {
    /// the sizes of the kept clusters, in order (their sum is `k`)
    pub sizes: Vec<usize>,
    /// `(|λ_last| − |λ_next|)/max|λ|`: the relative gap between the last kept and the first
    /// discarded eigenvalue (1 when nothing is discarded)
    pub gap: f64,
    /// `|λ_next|/max|λ|`: the relative weight of the first discarded eigenvalue (0 when
    /// nothing is discarded)
    pub weight: f64,
    /// the smallest relative splitting `(μ_{p+1} − μ_p)/max|μ|` of the secondary operator
    /// inside a kept multiplet (∞ when every kept cluster is a singleton)
    pub kept_gap: f64,
}

/// The output of [`eigh_clustered`] (`k` kept eigenvalues).
#[derive(Clone, Debug)]
pub struct ClusteredEigh<B: Backend> {
    /// the canonical orthonormal basis `W: [batch…, n, k]` of the kept subspace, columns
    /// grouped by cluster (clusters in order of decreasing `|λ|`), inside a cluster in
    /// order of ascending `μ` (the eigenvalues of `Wᴴ G W`, diagonal)
    pub basis: B::Tensor,
    /// the compressed matrix `C' = Wᴴ·A·W: [batch…, k, k]` (block-diagonal over the
    /// clusters, each block's eigenvalues those of its cluster)
    pub corner: B::Tensor,
    /// the kept eigenvalues `[batch…, k]`, real dtype of `A`'s precision, sorted by `|λ|`
    /// descending (inside a multiplet they do not follow `W`'s columns); not
    /// differentiated: `corner` carries them
    pub values: B::Tensor,
    /// one per matrix, in row-major batch order
    pub info: Vec<ClusterInfo>,
}

/// The tangents of [`ClusteredEigh`]'s differentiated outputs, from
/// [`eigh_clustered_frule`] and [`ClusteredEighPullback::tangent`].
#[derive(Clone, Debug)]
pub struct ClusteredEighTangent<B: Backend> {
    /// `Ẇ: [batch…, n, k]`
    pub basis: B::Tensor,
    /// `Ċ': [batch…, k, k]`
    pub corner: B::Tensor,
}

/// The pullback of [`eigh_clustered_rrule`] (and the pushforward at the same point,
/// [`ClusteredEighPullback::tangent`]); it owns host copies of the factors.
#[derive(Clone, Debug)]
pub struct ClusteredEighPullback<B: Backend> {
    pub(super) be: B,
    opts: RuleOptions,
    dims: Vec<usize>,
    pub(super) dtype: DType,
    k: usize,
    info: Vec<ClusterInfo>,
    /// `Vec<Factors<T>>` for the dtype's element type `T`
    factors: Arc<dyn Any + Send + Sync>,
}

/// One matrix's factors, everything the rules need.
struct Factors<T: ImplicitScalar> {
    /// all eigenvalues, non-decreasing (eigh's order), and the eigenvectors `U: n×n`
    lam: Vec<f64>,
    u: Mat<T>,
    /// the eigen index of each kept column's member (`V = U[:, kept]`, `W_c = V_c·Q_c`)
    kept: Vec<usize>,
    /// the cluster of each eigen index (`None`: not kept)
    cluster_of: Vec<Option<usize>>,
    /// the column range of each kept cluster
    ranges: Vec<Range<usize>>,
    /// per cluster, the unitary `Q_c` (eigenvectors of `V_cᴴ G V_c` times the phases)
    q: Vec<Mat<T>>,
    /// `μ` per kept column
    mu: Vec<f64>,
    /// `W`, `H·W`, `G·W` (`n×k`, `H` the Hermitian part of `A`) and the phase references
    /// (`n×k`, column `q` the `r` of column `q`)
    w: Mat<T>,
    hw: Mat<T>,
    gw: Mat<T>,
    refs: Mat<T>,
    /// the secondary operator `G` (its Hermitian part; the second order needs `G·Ẇ`)
    g: Mat<T>,
}

/// The clustered eigendecomposition of Hermitian `A: [batch…, n, n]` with the secondary
/// operator `G: [n, n]`.
///
/// With `H = (A + Aᴴ)/2 = U·diag(λ)·Uᴴ` (the backend's [`Backend::eigh`]), the eigenvalues
/// are sorted by `|λ|` descending and grouped into clusters ([`ClusterOptions::delta`]);
/// whole clusters are kept ([`ClusterOptions::keep`], [`ClusterOptions::cutoff`]). Inside
/// a cluster of size `g > 1` the eigenvectors `V = U_I` are ill-conditioned (any rotation
/// of an exactly degenerate eigenspace is an eigenbasis), its subspace is not: its basis is
/// `W_c = V·R` with `R` the eigenvectors of `X = Vᴴ·G·V` (eigenvalues `μ` ascending,
/// distinct), then each column's phase fixed by the reference ([`ClusterOptions::reference`]).
/// `C' = Wᴴ·H·W`.
///
/// **Covariance.** `G` is a constant chosen by the caller (it is not differentiated). If
/// `O` is a unitary that commutes with `G` and `Oᴴ r = r`, then `O·A·Oᴴ` has the basis
/// `O·W` and the same `C'`: a `G` that commutes with the gauge group of the problem (and
/// splits its multiplets) makes the basis a covariant function of `A`'s gauge orbit, the
/// continuous gauge of the multiplets included. A `G` with repeated `μ` on a kept cluster
/// leaves that cluster's basis undefined ([`Error::GaugeIllDefined`]).
///
/// # Errors
/// [`Error::RankMismatch`], [`Error::ShapeMismatch`] for a non-square `A`, a `G` that is
/// not `[n, n]` or an `r` that is not `[n]`; [`Error::InvalidArgument`] for a non-finite
/// entry, an `A` or `G` that is not Hermitian (to `√ε·max|·|`), invalid options, no
/// eigenvalue above the cutoff (an empty `A`, `n = 0`, has none), a leading cluster larger
/// than `keep` (nothing would be kept) or batch items that keep different counts `k`;
/// [`Error::DTypeMismatch`] for a `G` of another dtype than `A` or a complex `r` with real
/// `A`;
/// [`Error::GaugeIllDefined`] for degenerate `μ` in a kept cluster
/// (`|μ_p − μ_q| ≤ 16·√n·ε·max|G|`) or a column with `|rᴴw| ≤ n·ε·‖r‖` (unless
/// [`ClusterOptions::fallback`]).
pub fn eigh_clustered<B: Backend>(
    be: &B,
    a: &B::Tensor,
    g: &B::Tensor,
    opts: &ClusterOptions,
) -> Result<ClusteredEigh<B>> {
    Ok(eigh_clustered_rrule(be, a, g, opts, RuleOptions::default())?.0)
}

/// [`eigh_clustered`] and its pullback. `rule` sets the rules' broadening (of the gaps
/// `λ_i − λ_j` between a kept eigenvalue and one outside its cluster) and degeneracy
/// tolerance.
///
/// # Errors
/// As [`eigh_clustered`]; invalid `rule`.
pub fn eigh_clustered_rrule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    g: &B::Tensor,
    opts: &ClusterOptions,
    rule: RuleOptions,
) -> Result<(ClusteredEigh<B>, ClusteredEighPullback<B>)> {
    rule.validate()?;
    opts.validate()?;
    let dims = be.dims(a).to_vec();
    let (batch, m, n) = matrix_dims(&dims, "a")?;
    if m != n {
        let mut want = batch.clone();
        want.extend([n, n]);
        return Err(Error::shape("a", &want, &dims));
    }
    let dtype = be.dtype(a);
    let gh = operand(be, g, &[n, n], dtype, "g")?;
    let r = opts
        .reference
        .as_ref()
        .map(|r| checked_host(r, &[n], dtype, "reference"))
        .transpose()?;
    let ah = be.to_host(a)?;
    let [l, v] = be.eigh(a)?;
    let [l, v] = try_map([&l, &v], |t| be.to_host(t))?;
    let parts = by_dtype!(dtype, decompose(&ah, &l, &v, &gh, r.as_ref(), opts, &batch))?;
    let pb = ClusteredEighPullback {
        be: be.clone(),
        opts: rule,
        dims,
        dtype,
        k: parts.k,
        info: parts.info.clone(),
        factors: parts.factors,
    };
    let [basis, corner, values] = try_map(parts.outputs, |h| be.from_host(h))?;
    let out = ClusteredEigh {
        basis,
        corner,
        values,
        info: parts.info,
    };
    Ok((out, pb))
}

/// [`eigh_clustered`] and the tangents of `basis` and `corner` along `a_dot` (the
/// pushforward of [`ClusteredEighPullback::tangent`]).
///
/// # Errors
/// As [`eigh_clustered_rrule`] and [`ClusteredEighPullback::tangent`].
pub fn eigh_clustered_frule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    a_dot: &B::Tensor,
    g: &B::Tensor,
    opts: &ClusterOptions,
    rule: RuleOptions,
) -> Result<(ClusteredEigh<B>, ClusteredEighTangent<B>)> {
    let (out, pb) = eigh_clustered_rrule(be, a, g, opts, rule)?;
    let tan = pb.tangent(a_dot)?;
    Ok((out, tan))
}

impl<B: Backend> ClusteredEighPullback<B> {
    /// `k`, the number of kept columns.
    pub fn kept(&self) -> usize {
        self.k
    }

    /// The diagnostics of the primal, one per matrix.
    pub fn info(&self) -> &[ClusterInfo] {
        &self.info
    }
}

/// A host copy of a constant operand (`G`, `r`): shape `dims`, finite, converted to
/// `dtype` (a real operand serves any `A`, a complex one only complex `A`).
fn checked_host(h: &HostTensor, dims: &[usize], dtype: DType, arg: &str) -> Result<HostTensor> {
    super::check_host(h, dims, arg)?;
    if h.dtype().is_complex() && !dtype.is_complex() {
        return Err(Error::DTypeMismatch {
            arg: arg.into(),
            expected: dtype.real().to_string(),
            actual: h.dtype(),
        });
    }
    Ok(h.to_dtype_projected(dtype))
}

fn operand<B: Backend>(
    be: &B,
    t: &B::Tensor,
    dims: &[usize],
    dtype: DType,
    arg: &str,
) -> Result<HostTensor> {
    // the shape first: a wrong operand is refused before it is copied off the device
    let actual = be.dims(t);
    if actual[..] != *dims {
        return Err(Error::shape(arg, dims, &actual));
    }
    // an operand of another precision would be cast silently
    if be.dtype(t) != dtype {
        return Err(Error::DTypeMismatch {
            arg: arg.into(),
            expected: format!("{dtype}, the dtype of a"),
            actual: be.dtype(t),
        });
    }
    checked_host(&be.to_host(t)?, dims, dtype, arg)
}

/// The primal's host outputs and the factors of the rules.
struct Parts {
    k: usize,
    /// `W`, `C'` and the kept eigenvalues
    outputs: [HostTensor; 3],
    info: Vec<ClusterInfo>,
    factors: Arc<dyn Any + Send + Sync>,
}

/// The Hermitian part `(x + xᴴ)/2`, after checking `max|x − xᴴ| ≤ √ε·max|x|`.
fn hermitian<T: ImplicitScalar>(x: &Mat<T>, arg: &str, b: usize) -> Result<Mat<T>> {
    let n = x.nrows();
    let big = max_abs(x.as_ref());
    let mut skew = 0.0f64;
    for j in 0..n {
        for i in 0..=j {
            skew = skew.max(abs(x[(i, j)] - cj(x[(j, i)])));
        }
    }
    let tol = eps::<T>().sqrt() * big;
    if skew > tol {
        return Err(Error::invalid(
            arg,
            format!("matrix {b} is not Hermitian: max|X − Xᴴ| = {skew:e} > √ε·max|X| = {tol:e}"),
        ));
    }
    Ok(herm(x.as_ref()))
}

pub(super) fn herm<T: ImplicitScalar>(x: faer::MatRef<'_, T>) -> Mat<T> {
    let half = super::common::real::<T>(0.5);
    Mat::from_fn(x.nrows(), x.ncols(), |i, j| {
        (x[(i, j)] + cj(x[(j, i)])) * half
    })
}

/// The clusters of one spectrum: `(kept clusters as eigen indices, gap, weight)`.
fn clusters(lam: &[f64], opts: &ClusterOptions, b: usize) -> Result<(Vec<Vec<usize>>, f64, f64)> {
    let n = lam.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| lam[j].abs().total_cmp(&lam[i].abs()));
    let top = order.first().map_or(0.0, |&i| lam[i].abs());
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &k in &order {
        if lam[k].abs() <= opts.cutoff * top {
            break;
        }
        match groups.last_mut() {
            Some(g) => {
                let prev = lam[g[g.len() - 1]];
                if prev.signum() == lam[k].signum()
                    && prev.abs() - lam[k].abs() <= opts.delta * prev.abs()
                {
                    g.push(k);
                } else {
                    groups.push(vec![k]);
                }
            }
            None => groups.push(vec![k]),
        }
    }
    if groups.is_empty() {
        return Err(Error::invalid(
            "a",
            format!(
                "matrix {b}: no eigenvalue above cutoff·max|λ| = {:e}",
                opts.cutoff * top
            ),
        ));
    }
    let mut kept_groups = Vec::new();
    let mut kept = 0;
    for g in groups {
        if kept + g.len() > opts.keep {
            break;
        }
        kept += g.len();
        kept_groups.push(g);
    }
    if kept == 0 {
        return Err(Error::invalid(
            "keep",
            format!(
                "matrix {b}: the leading cluster has more than keep = {} eigenvalues, so \
                 nothing can be kept whole",
                opts.keep
            ),
        ));
    }
    let last =
        lam[kept_groups[kept_groups.len() - 1][kept_groups[kept_groups.len() - 1].len() - 1]].abs();
    let (gap, weight) = match order.get(kept).map(|&k| lam[k].abs()) {
        Some(d) => ((last - d) / top, d / top),
        None => (1.0, 0.0),
    };
    Ok((kept_groups, gap, weight))
}

#[allow(clippy::too_many_arguments)]
fn decompose<T: ImplicitScalar>(
    a: &HostTensor,
    l: &HostTensor,
    v: &HostTensor,
    g: &HostTensor,
    r: Option<&HostTensor>,
    opts: &ClusterOptions,
    batch: &[usize],
) -> Result<Parts> {
    let n = g.dims()[0];
    let gm = hermitian(&split::<T>(g, "g", true)?[0], "g", 0)?;
    let gtol = 16.0 * (n.max(1) as f64).sqrt() * eps::<T>() * max_abs(gm.as_ref());
    let r: Option<Vec<T>> = r
        .map(|r| r.as_slice::<T>().map(<[T]>::to_vec))
        .transpose()?;
    let r_norm = r
        .as_ref()
        .map(|r| r.iter().map(|&x| abs(x).powi(2)).sum::<f64>().sqrt());
    let hs = split::<T>(a, "a", true)?;
    let lams = super::batch::split_real(l, n);
    let us = split::<T>(v, "vectors", false)?;
    let mut factors = Vec::with_capacity(hs.len());
    let mut info = Vec::with_capacity(hs.len());
    let mut k_all = None;
    for b in 0..hs.len() {
        let h = hermitian(&hs[b], "a", b)?;
        let (lam, u) = (lams[b].clone(), us[b].clone());
        let (groups, gap, weight) = clusters(&lam, opts, b)?;
        let k: usize = groups.iter().map(Vec::len).sum();
        match k_all {
            None => k_all = Some(k),
            Some(k0) if k0 != k => {
                return Err(Error::invalid(
                    "keep",
                    format!(
                        "matrix {b} keeps {k} eigenvalues and matrix 0 keeps {k0}: a batch \
                         must keep one count (decompose the matrices separately)"
                    ),
                ));
            }
            Some(_) => {}
        }
        let mut cluster_of = vec![None; n];
        let mut kept = Vec::with_capacity(k);
        let mut ranges = Vec::with_capacity(groups.len());
        let (mut qs, mut mu) = (Vec::new(), Vec::with_capacity(k));
        let mut w = Mat::<T>::zeros(n, k);
        let mut refs = Mat::<T>::zeros(n, k);
        let mut kept_gap = f64::INFINITY;
        for (c, members) in groups.iter().enumerate() {
            let (start, size) = (kept.len(), members.len());
            let vc = Mat::from_fn(n, size, |i, p| u[(i, members[p])]);
            let (mus, rot) = if size == 1 {
                (vec![0.0], Mat::<T>::identity(1, 1))
            } else {
                let gv = mm(gm.as_ref(), vc.as_ref());
                let x = herm(mm(vc.adjoint(), gv.as_ref()).as_ref());
                let dec = faer::linalg::solvers::SelfAdjointEigen::new(x.as_ref(), Side::Lower)
                    .map_err(|e| Error::Backend {
                        backend: "faer".into(),
                        message: format!("eigh of a {size}×{size} cluster operator: {e:?}"),
                    })?;
                let mus: Vec<f64> = (0..size).map(|i| super::common::re(dec.S()[i])).collect();
                let scale = mus.iter().fold(0.0f64, |a, x| a.max(x.abs()));
                for (p, pair) in mus.windows(2).enumerate() {
                    if pair[1] - pair[0] <= gtol {
                        return Err(super::common::gauge_error(
                            "g",
                            format!(
                                "matrix {b}, cluster {c} (λ ≈ {:e}): the secondary operator's \
                                 eigenvalues {p} and {} on it are degenerate ({:e}, {:e}), so \
                                 it does not fix the cluster's basis",
                                lam[members[0]],
                                p + 1,
                                pair[0],
                                pair[1]
                            ),
                        ));
                    }
                    kept_gap = kept_gap.min((pair[1] - pair[0]) / scale.max(f64::MIN_POSITIVE));
                }
                (mus, dec.U().to_owned())
            };
            let mut wc = mm(vc.as_ref(), rot.as_ref());
            let mut q = rot;
            for col in 0..size {
                // the default reference: e_i at the first largest |w_i| (|w_i| ≥ 1/√n)
                let largest = |wc: &Mat<T>| -> Vec<T> {
                    let mut best = 0;
                    for i in 0..n {
                        if abs(wc[(i, col)]) > abs(wc[(best, col)]) {
                            best = i;
                        }
                    }
                    (0..n)
                        .map(|i| if i == best { T::one() } else { T::zero() })
                        .collect()
                };
                let overlap =
                    |rc: &[T]| (0..n).fold(T::zero(), |s, i| s + cj(rc[i]) * wc[(i, col)]);
                let vanishes = |rho: T, rn: f64| abs(rho) <= n as f64 * eps::<T>() * rn;
                let (mut rc, mut rn) = match &r {
                    Some(r) => (r.clone(), r_norm.unwrap_or(1.0)),
                    None => (largest(&wc), 1.0),
                };
                let mut rho = overlap(&rc);
                if vanishes(rho, rn) && r.is_some() && opts.fallback {
                    (rc, rn) = (largest(&wc), 1.0);
                    rho = overlap(&rc);
                }
                if vanishes(rho, rn) {
                    return Err(super::common::gauge_error(
                        "reference",
                        format!(
                            "matrix {b}, column {}: rᴴw = {rho:?} vanishes, so the reference \
                             does not fix the column's phase",
                            start + col
                        ),
                    ));
                }
                // the phase conj(ρ)/|ρ| (a sign for real data: exactly ±1)
                let phase = cj(rho) * super::common::real::<T>(1.0 / abs(rho));
                let phase = if T::DTYPE.is_complex() {
                    phase
                } else {
                    super::common::real::<T>(super::common::re(phase).signum())
                };
                for i in 0..n {
                    wc[(i, col)] *= phase;
                    refs[(i, start + col)] = rc[i];
                }
                for p in 0..size {
                    q[(p, col)] *= phase;
                }
            }
            for col in 0..size {
                for i in 0..n {
                    w[(i, start + col)] = wc[(i, col)];
                }
            }
            for &m in members {
                cluster_of[m] = Some(c);
                kept.push(m);
            }
            ranges.push(start..start + size);
            qs.push(q);
            mu.extend(mus);
        }
        let hw = mm(h.as_ref(), w.as_ref());
        let gw = mm(gm.as_ref(), w.as_ref());
        info.push(ClusterInfo {
            sizes: groups.iter().map(Vec::len).collect(),
            gap,
            weight,
            kept_gap,
        });
        factors.push(Factors {
            lam,
            u,
            kept,
            cluster_of,
            ranges,
            q: qs,
            mu,
            w,
            hw,
            gw,
            refs,
            g: gm.clone(),
        });
    }
    let k = k_all.unwrap_or(0);
    let specs = (("basis", n, k), ("corner", k, k), ("values", k));
    let outputs = per_matrix::<T, _>(batch, specs, |b| {
        let f = &factors[b];
        let mut values: Vec<f64> = f.kept.iter().map(|&i| f.lam[i]).collect();
        // |λ| descending across clusters; the members of a cluster are already in order
        values.sort_by(|x, y| y.abs().total_cmp(&x.abs()));
        Ok((f.w.clone(), mm(f.w.adjoint(), f.hw.as_ref()), values))
    })?;
    Ok(Parts {
        k,
        outputs,
        info,
        factors: Arc::new(factors),
    })
}
