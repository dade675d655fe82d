//! The decompositions as differentiable candle ops: [`svd`], [`svd_truncated`], [`qr`],
//! [`eigh`] and [`eigh_clustered`] return the core's factor types ([`Svd`], [`TruncatedSvd`],
//! [`Qr`], [`Eigh`], [`ClusteredEigh`]) over [`CandleBackend`], whose tensors are nodes of
//! candle's graph: a loss built from any of the factors with candle's own ops (or this
//! crate's) reaches `A` through `backward()`, by the core's rules (`adrules_core::linalg`:
//! Townsend's SVD pullback with Wan & Zhang's complex terms, Walter & Lehmann's and Liao et
//! al.'s QR pullback, Giles' eigh pullback, Kato's projector derivative for the clustered
//! eigh; formulas and sources in the docs of
//! [`adrules_core::linalg::SvdPullback::pullback`],
//! [`adrules_core::linalg::QrPullback::pullback`],
//! [`adrules_core::linalg::EighPullback::pullback`] and
//! [`adrules_core::linalg::ClusteredEighPullback::pullback`]).
//!
//! # How
//! The factorisation runs once, through [`CandleBackend`] (faer on the host; on a GPU the
//! matrix is copied to the host and the factors back), together with the core's pullback.
//! candle's custom ops have one output, so the factors are attached as the core's
//! [`FactorsNode`] scheme says: one custom op over `A` whose output is a vector of zeros,
//! one per factor, and per factor one custom op over that vector whose output is the factor
//! (a copy of the computed values: candle owns an op's output). candle's backward hands
//! each factor's op its cotangent, which it deposits with the node, and then the node's op
//! the tickets of the deposits, from which it runs the pullback once ([`FactorsPullback`],
//! shared with the burn adapter; no cotangent for a factor the loss does not use). Backward
//! reruns nothing and copies no cotangent.
//!
//! # Shapes and dtypes
//! `A: [batch…, m, n]`, rank ≥ 2, f32 or f64 (candle has no complex dtype); the factors'
//! shapes are those of the core functions (`k = min(m, n)`). A gradient of `A` has `A`'s
//! shape and dtype.
//!
//! # Errors
//! As the core functions, as candle errors carrying the typed error
//! ([`adrules_error`](crate::adrules_error)): rank below 2, a non-finite entry, a non-square
//! or non-Hermitian matrix for eigh, invalid options, a complex or half-precision dtype
//! ([`Error::Unsupported`]). A loss whose gradient depends on the gauge of degenerate
//! singular or eigen vectors fails in `backward()` with [`Error::GaugeIllDefined`] (use
//! [`try_backward`](crate::try_backward) to get it typed), never with a number.
//!
//! [`Error::Unsupported`]: adrules_core::Error::Unsupported
//! [`Error::GaugeIllDefined`]: adrules_core::Error::GaugeIllDefined

use std::sync::Arc;

use adrules_core::linalg::{
    ClusterOptions, ClusteredEigh, Eigh, FactorsNode, FactorsPullback, Qr, QrMode, RuleOptions,
    Svd, SvdMode, TruncatedSvd, Truncation, eigh_clustered_rrule, eigh_rrule, qr_rrule, svd_rrule,
    svd_truncated_rrule,
};
use candle_core::{CpuStorage, CudaStorage, CustomOp1, Layout, MetalStorage, Shape, Tensor};

use crate::backend::CandleBackend;
use crate::convert::to_candle;
use crate::select::{Depot, Selector, zeros};

/// The node of a decomposition over `A` (see the module docs): its output is `[F]` zeros,
/// its backward reads the tickets of its cotangent and runs the pullback.
struct Node {
    name: &'static str,
    node: Arc<FactorsNode<CandleBackend>>,
}

impl CustomOp1 for Node {
    fn name(&self) -> &'static str {
        self.name
    }

    fn cpu_fwd(&self, s: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        zeros(s, self.node.num_factors())
    }

    fn cuda_fwd(&self, s: &CudaStorage, _: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        zeros(s, self.node.num_factors())
    }

    fn metal_fwd(
        &self,
        s: &MetalStorage,
        _: &Layout,
    ) -> candle_core::Result<(MetalStorage, Shape)> {
        zeros(s, self.node.num_factors())
    }

    fn bwd(
        &self,
        _a: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        self.node.pullback(grad).map(Some).map_err(to_candle)
    }
}

/// The factors `x` as nodes of candle's graph over `a` (see the module docs), or as they are
/// when `a` is not tracked (a constant: no node, nothing kept).
fn attach<const N: usize>(
    name: &'static str,
    a: &Tensor,
    x: [Tensor; N],
    pullback: FactorsPullback<CandleBackend>,
) -> candle_core::Result<[Tensor; N]> {
    if !a.track_op() {
        return Ok(x);
    }
    let node = Arc::new(FactorsNode::new(pullback));
    let op = Node {
        name,
        node: node.clone(),
    };
    let out = a.apply_op1_arc(Arc::new(Box::new(op)))?;
    let select = |(index, value)| {
        let node: Arc<dyn Depot> = node.clone();
        let op = Selector {
            name,
            index,
            value,
            node,
        };
        out.apply_op1_arc(Arc::new(Box::new(op)))
    };
    let factors = x
        .into_iter()
        .enumerate()
        .map(select)
        .collect::<candle_core::Result<Vec<_>>>()?;
    factors.try_into().map_err(|v: Vec<Tensor>| {
        candle_core::Error::Msg(format!("{name}: {} factors for {N}", v.len()))
    })
}

/// The backend on `a`'s device and `a` without its graph (the core computes on values).
fn prepare(a: &Tensor) -> (CandleBackend, Tensor) {
    (CandleBackend::new(a.device().clone()), a.detach())
}

/// `A = U·diag(S)·Vh` for `A: [batch…, m, n]` as differentiable candle tensors (see the
/// module docs): `U: [batch…, m, k]`, `S: [batch…, k]`, `Vh: [batch…, k, n]` for
/// [`SvdMode::Thin`] (`[batch…, m, m]` and `[batch…, n, n]` for [`SvdMode::Full`], whose
/// complement columns take a cotangent only when it does not depend on their basis). The
/// pullback is [`SvdPullback::pullback`](adrules_core::linalg::SvdPullback::pullback) with
/// `opts` (broadening, degeneracy tolerance).
///
/// # Errors
/// As [`adrules_core::linalg::svd_rrule`], inside candle's error.
///
/// # Example
/// ```
/// use adrules_candle::candle_core::{Device, Tensor, Var};
/// use adrules_candle::linalg::svd;
/// use adrules_core::linalg::{RuleOptions, SvdMode};
/// # fn main() -> candle_core::Result<()> {
/// let a = Var::randn(0f64, 1.0, (4, 3), &Device::Cpu)?;
/// let f = svd(a.as_tensor(), SvdMode::Thin, RuleOptions::default())?;
/// // the nuclear norm Σ sᵢ, whose gradient is U·Vh
/// let grads = f.s.sum_all()?.backward()?;
/// let want = f.u.matmul(&f.vh)?;
/// let diff = (grads.get(a.as_tensor()).unwrap() - want)?.abs()?.max_all()?;
/// assert!(diff.to_scalar::<f64>()? < 1e-12);
/// # Ok(())
/// # }
/// ```
pub fn svd(
    a: &Tensor,
    mode: SvdMode,
    opts: RuleOptions,
) -> candle_core::Result<Svd<CandleBackend>> {
    let (be, ad) = prepare(a);
    let (f, pb) = svd_rrule(&be, &ad, mode, opts).map_err(to_candle)?;
    let [u, s, vh] = attach("adrules-svd", a, [f.u, f.s, f.vh], FactorsPullback::svd(pb))?;
    Ok(Svd { u, s, vh })
}

/// The truncated SVD of `A: [batch…, m, n]` (see [`Truncation`]: the rank `r` and the
/// discarded singular values `[batch…, k − r]`) as differentiable candle tensors; the
/// pullback includes the discarded subspace's term unless
/// [`RuleOptions::discarded_term`] is `false`, and takes a cotangent of the discarded
/// singular values too.
///
/// # Errors
/// As [`adrules_core::linalg::svd_truncated_rrule`], inside candle's error.
pub fn svd_truncated(
    a: &Tensor,
    truncation: Truncation,
    opts: RuleOptions,
) -> candle_core::Result<TruncatedSvd<CandleBackend>> {
    let (be, ad) = prepare(a);
    let (f, pb) = svd_truncated_rrule(&be, &ad, truncation, opts).map_err(to_candle)?;
    let x = [f.svd.u, f.svd.s, f.svd.vh, f.discarded];
    let pb = FactorsPullback::svd_truncated(pb);
    let [u, s, vh, discarded] = attach("adrules-svd-truncated", a, x, pb)?;
    Ok(TruncatedSvd {
        svd: Svd { u, s, vh },
        discarded,
        rank: f.rank,
    })
}

/// `A = Q·R` for `A: [batch…, m, n]` as differentiable candle tensors (`diag(R)` real and
/// non-negative; shapes by [`QrMode`]). The pullback is
/// [`QrPullback::pullback`](adrules_core::linalg::QrPullback::pullback).
///
/// # Errors
/// As [`adrules_core::linalg::qr_rrule`], inside candle's error.
pub fn qr(a: &Tensor, mode: QrMode) -> candle_core::Result<Qr<CandleBackend>> {
    let (be, ad) = prepare(a);
    let (f, pb) = qr_rrule(&be, &ad, mode).map_err(to_candle)?;
    let [q, r] = attach("adrules-qr", a, [f.q, f.r], FactorsPullback::qr(pb))?;
    Ok(Qr { q, r })
}

/// The eigendecomposition of the symmetric part `(A + Aᵀ)/2` of `A: [batch…, n, n]` as
/// differentiable candle tensors: eigenvalues `[batch…, n]` (non-decreasing) and
/// eigenvectors as columns `[batch…, n, n]`; `A` must be symmetric up to `√ε·max|A|`. The
/// pullback is [`EighPullback::pullback`](adrules_core::linalg::EighPullback::pullback) with
/// `opts` (its cotangent `Ā` is symmetric).
///
/// # Errors
/// As [`adrules_core::linalg::eigh_rrule`], inside candle's error.
pub fn eigh(a: &Tensor, opts: RuleOptions) -> candle_core::Result<Eigh<CandleBackend>> {
    let (be, ad) = prepare(a);
    let (f, pb) = eigh_rrule(&be, &ad, opts).map_err(to_candle)?;
    let x = [f.values, f.vectors];
    let [values, vectors] = attach("adrules-eigh", a, x, FactorsPullback::eigh(pb))?;
    Ok(Eigh { values, vectors })
}

/// The clustered eigendecomposition of the symmetric `A: [batch…, n, n]` with the secondary
/// operator `G: [n, n]` ([`adrules_core::linalg::eigh_clustered`]: whole clusters of
/// near-degenerate eigenvalues kept, each cluster's basis fixed by `G` and the phase
/// reference of `opts`) with differentiable outputs: the basis `W: [batch…, n, k]` and the
/// compressed matrix `C' = Wᵀ·A·W: [batch…, k, k]` are nodes of candle's graph over `A`,
/// whose backward is
/// [`ClusteredEighPullback::pullback`](adrules_core::linalg::ClusteredEighPullback::pullback)
/// with `rule` (broadening, degeneracy tolerance). `G` is a constant operand: it is read
/// without its graph and no gradient flows to it. The kept eigenvalues `values: [batch…, k]`
/// and the per-matrix [`ClusterInfo`](adrules_core::linalg::ClusterInfo) are plain data
/// without a gradient (`C'` carries the eigenvalues).
///
/// # Errors
/// As [`adrules_core::linalg::eigh_clustered_rrule`] (a non-symmetric `A` or `G`, a `G` that
/// is not `[n, n]` or not of `A`'s dtype, invalid options, …), inside candle's error.
pub fn eigh_clustered(
    a: &Tensor,
    g: &Tensor,
    opts: &ClusterOptions,
    rule: RuleOptions,
) -> candle_core::Result<ClusteredEigh<CandleBackend>> {
    let (be, ad) = prepare(a);
    let (f, pb) = eigh_clustered_rrule(&be, &ad, &g.detach(), opts, rule).map_err(to_candle)?;
    let x = [f.basis, f.corner];
    let pb = FactorsPullback::eigh_clustered(pb);
    let [basis, corner] = attach("adrules-eigh-clustered", a, x, pb)?;
    Ok(ClusteredEigh {
        basis,
        corner,
        values: f.values,
        info: f.info,
    })
}
