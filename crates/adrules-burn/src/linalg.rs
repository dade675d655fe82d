//! The decompositions as differentiable burn ops: [`svd`], [`svd_truncated`], [`qr`],
//! [`eigh`] and [`eigh_clustered`] take a user-facing [`Tensor<D>`] and return its factors
//! ([`Svd`], [`TruncatedSvd`], [`Qr`], [`Eigh`], [`ClusteredEigh`]) as tensors of burn's
//! graph: a loss built from any of the factors with burn's own ops (or this crate's) reaches
//! `A` through `backward()`, by the core's rules (`adrules_core::linalg`: Townsend's SVD
//! pullback with Wan & Zhang's complex terms, Walter & Lehmann's and Liao et al.'s QR
//! pullback, Giles' eigh pullback, Kato's projector derivative for the clustered eigh;
//! formulas and sources in the docs of [`adrules_core::linalg::SvdPullback::pullback`],
//! [`adrules_core::linalg::QrPullback::pullback`],
//! [`adrules_core::linalg::EighPullback::pullback`] and
//! [`adrules_core::linalg::ClusteredEighPullback::pullback`]).
//!
//! # How
//! `A` is routed to the burn backend it lives on as every op of this crate is (see
//! [`apply`](crate::apply): Flex, NdArray, cubecl). The factorisation runs once, with the
//! core's `*_rrule` over [`BurnBackend`] on the inner (non-autodiff) backend (faer on the
//! host: the matrix is copied there and the factors back), together with the core's
//! pullback. A burn op has one output, so the factors are attached as the core's
//! [`FactorsNode`] scheme says, with the crate's node machinery: one node over `A` whose
//! output is a vector of zeros, one per factor, and whose saved state is the core's node
//! (holding the pullback, [`FactorsPullback`]); and per factor one node over that vector
//! whose output is the factor. burn's backward hands each factor's node its cotangent
//! (summed when the factor is used several times), which it deposits with the core's node,
//! and then the node over `A` the tickets of the deposits, from which it runs the pullback
//! once (no cotangent for a factor the loss does not use). Nothing is recomputed in
//! backward, and `A` is not kept (the pullback keeps the factors on the host). A constant
//! `A` (no `require_grad`) records no node: its factors are plain tensors.
//!
//! # Shapes and dtypes
//! `A: [batch…, m, n]`, rank `D ≥ 2`, f32 or f64 (burn has no complex dtype), `k = min(m, n)`.
//! Every factor is a `Tensor<D>`: the matrices have the core's shapes, and the vectors —
//! singular values, discarded singular values, eigenvalues (the clustered eigh's kept
//! eigenvalues, which have no gradient, too) — keep a unit axis before their
//! last one, `[batch…, 1, k]`, as burn's reductions keep theirs (`sum_dim`, `max_dim`).
//! Stable Rust cannot write the rank `D − 1`, and a second rank parameter checked at run
//! time would have to be spelled at every call; the unit axis instead broadcasts against the
//! columns of `U` (of `V`): `u * s` is `U·diag(S)` and `(v.clone() * λ).matmul(v.transpose())`
//! is `A` for eigh. The core's `[batch…, k]` is `s.squeeze_dim(D − 2)` (to rank `D − 1`). A
//! gradient of `A` has `A`'s shape and dtype.
//!
//! # Errors
//! As the core functions, all returned before anything is recorded: rank below 2
//! ([`Error::RankMismatch`]), a non-finite entry, invalid options (a negative broadening, a
//! NaN truncation tolerance: [`Error::InvalidArgument`]), a non-square
//! ([`Error::ShapeMismatch`]) or non-symmetric matrix for eigh, a dtype other than f32/f64
//! or a backend this build does not route ([`Error::Unsupported`]). A loss whose gradient
//! depends on the gauge of degenerate singular or eigen vectors fails inside `backward()`
//! with [`Error::GaugeIllDefined`]: burn's backward cannot return it, so `A`'s gradient is
//! NaN-filled and the error is reported as for every node of this crate
//! ([`try_backward`](crate::try_backward), [`take_backward_errors`](crate::take_backward_errors)),
//! never a silent number.

use std::sync::{Arc, OnceLock};

use adrules_core::linalg::{
    ClusterInfo, ClusterOptions, FactorsNode, FactorsPullback, QrMode, RuleOptions, SvdMode,
    Truncation, eigh_clustered_rrule, eigh_rrule, qr_rrule, svd_rrule, svd_truncated_rrule,
};
use adrules_core::{Backend as _, Error, HostData, HostTensor, Result};
use burn_backend::Backend;
use burn_tensor::{Tensor, TensorData};

use crate::backend::BurnBackend;
use crate::convert::{check_dtype, engine_error, unsupported};
use crate::handle::BurnTensor;
use crate::node::{At, Cotangents, Rule};
use crate::select::{self, Select, Stash};
use crate::tensor::run;

/// `A = U·diag(S)·Vh` as tensors of burn's graph; see the module docs for the shapes.
#[derive(Clone, Debug)]
pub struct Svd<const D: usize> {
    /// left singular vectors, as columns: `[batch…, m, k]` (thin) or `[batch…, m, m]` (full)
    pub u: Tensor<D>,
    /// singular values, non-increasing, non-negative: `[batch…, 1, k]`
    pub s: Tensor<D>,
    /// right singular vectors, as rows: `[batch…, k, n]` (thin) or `[batch…, n, n]` (full)
    pub vh: Tensor<D>,
}

/// A truncated SVD `A ≈ U·diag(S)·Vh` of rank `r`, with what was discarded.
#[derive(Clone, Debug)]
pub struct TruncatedSvd<const D: usize> {
    /// `U: [batch…, m, r]`, `S: [batch…, 1, r]`, `Vh: [batch…, r, n]`
    pub svd: Svd<D>,
    /// the discarded singular values `[batch…, 1, k − r]`: `‖A − U·diag(S)·Vh‖_F` is their
    /// 2-norm
    pub discarded: Tensor<D>,
    /// the rank `r` kept
    pub rank: usize,
}

/// `A = Q·R`, `diag(R)` non-negative (see [`adrules_core::linalg::Qr`] for the gauge).
#[derive(Clone, Debug)]
pub struct Qr<const D: usize> {
    /// `[batch…, m, k]` ([`QrMode::Reduced`]) or `[batch…, m, m]` ([`QrMode::Complete`])
    pub q: Tensor<D>,
    /// `[batch…, k, n]` or `[batch…, m, n]`, upper triangular (trapezoidal when wide)
    pub r: Tensor<D>,
}

/// `A = V·diag(λ)·Vᵀ` for symmetric `A: [batch…, n, n]`.
#[derive(Clone, Debug)]
pub struct Eigh<const D: usize> {
    /// eigenvalues, non-decreasing: `[batch…, 1, n]`
    pub values: Tensor<D>,
    /// eigenvectors as columns: `[batch…, n, n]`
    pub vectors: Tensor<D>,
}

/// The clustered eigendecomposition of `A: [batch…, n, n]` as tensors of burn's graph (see
/// [`eigh_clustered`]).
#[derive(Clone, Debug)]
pub struct ClusteredEigh<const D: usize> {
    /// the canonical basis of the kept subspace, `W: [batch…, n, k]` (differentiable)
    pub basis: Tensor<D>,
    /// the compressed matrix `C' = Wᵀ·A·W: [batch…, k, k]` (differentiable)
    pub corner: Tensor<D>,
    /// the kept eigenvalues, sorted by `|λ|` descending: `[batch…, 1, k]`, without a
    /// gradient (a constant of the graph; `corner` carries them)
    pub values: Tensor<D>,
    /// the cluster diagnostics, one per matrix in row-major batch order
    pub info: Vec<ClusterInfo>,
}

/// Which decomposition a [`Decompose`] node computes, with its options.
#[derive(Clone, Debug)]
enum Which {
    Svd(SvdMode, RuleOptions),
    Truncated(Truncation, RuleOptions),
    Qr(QrMode),
    Eigh(RuleOptions),
    /// the constant `G` on the host, the cluster options, the rules' options
    Clustered(Arc<(HostTensor, ClusterOptions, RuleOptions)>),
}

/// What the primal found out besides the factors, for the caller of [`run`] (which returns
/// the node's output only): the factors' shapes, for a truncated SVD the rank kept (which
/// depends on the data), for the clustered eigh its non-differentiable outputs.
#[derive(Clone, Debug)]
struct Layout {
    shapes: Vec<Vec<usize>>,
    rank: usize,
    /// the clustered eigh's kept eigenvalues (host) and diagnostics
    clusters: Option<(HostTensor, Vec<ClusterInfo>)>,
}

/// The core's node of a decomposition on the burn backend `B`.
type Node<B> = Arc<FactorsNode<BurnBackend<B>>>;

/// One decomposition of `A` as the node [`Rule`] of the core's [`FactorsNode`] scheme, with
/// one input (see the module docs).
#[derive(Clone, Debug)]
struct Decompose {
    which: Which,
    /// set by [`Rule::primal`], which runs once per call (the node is compute bound: burn
    /// never recomputes it)
    layout: Arc<OnceLock<Layout>>,
    stash: Stash,
}

impl Rule for Decompose {
    type Saved<B: Backend> = Node<B>;

    fn primal<B: Backend>(&self, at: &At<'_, B>) -> Result<(BurnTensor<B>, Node<B>)> {
        let (be, a) = (at.be, &at.x[0]);
        let mut clusters = None;
        let (factors, rank, pullback) = match &self.which {
            &Which::Svd(mode, opts) => {
                let (f, pb) = svd_rrule(be, a, mode, opts)?;
                (vec![f.u, f.s, f.vh], 0, FactorsPullback::svd(pb))
            }
            &Which::Truncated(truncation, opts) => {
                let (f, pb) = svd_truncated_rrule(be, a, truncation, opts)?;
                let factors = vec![f.svd.u, f.svd.s, f.svd.vh, f.discarded];
                let pb = FactorsPullback::svd_truncated(pb);
                (factors, f.rank, pb)
            }
            &Which::Qr(mode) => {
                let (f, pb) = qr_rrule(be, a, mode)?;
                (vec![f.q, f.r], 0, FactorsPullback::qr(pb))
            }
            &Which::Eigh(opts) => {
                let (f, pb) = eigh_rrule(be, a, opts)?;
                (vec![f.values, f.vectors], 0, FactorsPullback::eigh(pb))
            }
            Which::Clustered(c) => {
                let (g, opts, rule) = &**c;
                let g = be.from_host(g.clone())?;
                let (f, pb) = eigh_clustered_rrule(be, a, &g, opts, *rule)?;
                clusters = Some((be.to_host(&f.values)?, f.info));
                let pb = FactorsPullback::eigh_clustered(pb);
                (vec![f.basis, f.corner], 0, pb)
            }
        };
        let layout = Layout {
            shapes: factors.iter().map(|t| t.dims().to_vec()).collect(),
            rank,
            clusters,
        };
        // a second primal (none happens) would compute the same layout
        let _ = self.layout.set(layout);
        let node = Arc::new(FactorsNode::new(pullback));
        let zeros = be.zeros(&[factors.len()], be.dtype(a))?;
        select::stash::<B>(&self.stash, factors, node.clone());
        Ok((zeros, node))
    }

    fn pullback<B: Backend>(
        &self,
        at: &At<'_, B>,
        node: &Node<B>,
        node_bar: &BurnTensor<B>,
    ) -> Cotangents<B> {
        let a_bar = node.pullback(node_bar)?;
        Ok(vec![at.active[0].then_some(a_bar)])
    }
}

/// Runs `which` on `a` (the core's [`FactorsNode`] scheme: one node, `N` selectors) and
/// returns its `N` factors as rank-`D` tensors and what else the primal found out (the rank
/// kept by a truncated SVD, the clustered eigh's values and diagnostics).
fn decompose<const D: usize, const N: usize>(
    a: &Tensor<D>,
    which: Which,
) -> Result<([Tensor<D>; N], Layout)> {
    let stash = Stash::default();
    let rule = Decompose {
        which,
        layout: Arc::new(OnceLock::new()),
        stash: stash.clone(),
    };
    let node: Tensor<1> = run(rule.clone(), [a.into()])?;
    let layout = rule
        .layout
        .get()
        .ok_or_else(|| engine_error("the decomposition's layout was not recorded"))?;
    let select = |(index, factor): (usize, &Vec<usize>)| {
        let dims = user_dims::<D>(factor)?;
        let stash = stash.clone();
        let factor = factor.clone();
        let rule = Select {
            index,
            dims: dims.to_vec(),
            output: factor,
            stash,
        };
        run::<_, 1, D>(rule, [(&node).into()])
    };
    let factors: Result<Vec<Tensor<D>>> = layout.shapes.iter().enumerate().map(select).collect();
    // the factors and the node are the selectors' now
    select::clear(&stash);
    let factors = factors?;
    let n = factors.len();
    let factors = factors
        .try_into()
        .map_err(|_| engine_error(format!("{n} factors for {N}")))?;
    Ok((factors, layout.clone()))
}

/// The user-facing rank-`D` shape of a factor of the core's shape `dims`: a vector factor
/// (rank `D − 1`) gets a unit axis before its last one.
///
/// # Errors
/// [`Error::RankMismatch`] for a factor of another rank (none: the core's shapes).
fn user_dims<const D: usize>(dims: &[usize]) -> Result<[usize; D]> {
    let mut shape = dims.to_vec();
    if shape.len() + 1 == D {
        shape.insert(shape.len() - 1, 1);
    }
    shape
        .try_into()
        .map_err(|s: Vec<usize>| Error::rank("factor", D, s.len()))
}

/// `A = U·diag(S)·Vh` for `A: [batch…, m, n]` as tensors of burn's graph (see the module
/// docs): `U: [batch…, m, k]`, `S: [batch…, 1, k]`, `Vh: [batch…, k, n]` for
/// [`SvdMode::Thin`] (`[batch…, m, m]` and `[batch…, n, n]` for [`SvdMode::Full`], whose
/// complement columns take a cotangent only when it does not depend on their basis). The
/// pullback is [`SvdPullback::pullback`](adrules_core::linalg::SvdPullback::pullback) with
/// `opts` (broadening, degeneracy tolerance).
///
/// # Errors
/// As [`adrules_core::linalg::svd_rrule`], and the routing's (see the module docs).
///
/// # Example
/// ```
/// use adrules_burn::burn_tensor::{DType, Device, Tensor, TensorData};
/// use adrules_burn::linalg::svd;
/// use adrules_core::linalg::{RuleOptions, SvdMode};
///
/// # fn main() -> adrules_core::Result<()> {
/// let device = Device::flex().autodiff();
/// let data = TensorData::new(vec![3.0f64, 1.0, 0.0, 2.0, 1.0, 1.0], [3, 2]);
/// let a = Tensor::<2>::from_data(data, (&device, DType::F64)).require_grad();
/// let f = svd(&a, SvdMode::Thin, RuleOptions::default())?;
/// // the nuclear norm Σ sᵢ, whose gradient is U·Vh
/// let grads = f.s.sum().backward();
/// let want = f.u.matmul(f.vh);
/// let diff: f64 = (a.grad(&grads).unwrap() - want.inner()).abs().max().into_scalar();
/// assert!(diff < 1e-12);
/// # Ok(())
/// # }
/// ```
pub fn svd<const D: usize>(a: &Tensor<D>, mode: SvdMode, opts: RuleOptions) -> Result<Svd<D>> {
    let ([u, s, vh], _) = decompose(a, Which::Svd(mode, opts))?;
    Ok(Svd { u, s, vh })
}

/// The truncated SVD of `A: [batch…, m, n]` (see [`Truncation`]: the rank `r` and the
/// discarded singular values `[batch…, 1, k − r]`) as tensors of burn's graph; the pullback
/// includes the discarded subspace's term unless [`RuleOptions::discarded_term`] is
/// `false`, and takes a cotangent of the discarded singular values too (with the term off,
/// only a zero one: a loss that uses them is then a backward error).
///
/// # Errors
/// As [`adrules_core::linalg::svd_truncated_rrule`], and the routing's.
pub fn svd_truncated<const D: usize>(
    a: &Tensor<D>,
    truncation: Truncation,
    opts: RuleOptions,
) -> Result<TruncatedSvd<D>> {
    let ([u, s, vh, discarded], layout) = decompose(a, Which::Truncated(truncation, opts))?;
    Ok(TruncatedSvd {
        svd: Svd { u, s, vh },
        discarded,
        rank: layout.rank,
    })
}

/// `A = Q·R` for `A: [batch…, m, n]` as tensors of burn's graph (`diag(R)` non-negative;
/// shapes by [`QrMode`]). The pullback is
/// [`QrPullback::pullback`](adrules_core::linalg::QrPullback::pullback).
///
/// # Errors
/// As [`adrules_core::linalg::qr_rrule`], and the routing's.
pub fn qr<const D: usize>(a: &Tensor<D>, mode: QrMode) -> Result<Qr<D>> {
    let ([q, r], _) = decompose(a, Which::Qr(mode))?;
    Ok(Qr { q, r })
}

/// The eigendecomposition of the symmetric part `(A + Aᵀ)/2` of `A: [batch…, n, n]` as
/// tensors of burn's graph: eigenvalues `[batch…, 1, n]` (non-decreasing) and eigenvectors
/// as columns `[batch…, n, n]`; `A` must be symmetric up to `√ε·max|A|`. The pullback is
/// [`EighPullback::pullback`](adrules_core::linalg::EighPullback::pullback) with `opts` (its
/// cotangent `Ā` is symmetric).
///
/// # Errors
/// As [`adrules_core::linalg::eigh_rrule`], and the routing's.
pub fn eigh<const D: usize>(a: &Tensor<D>, opts: RuleOptions) -> Result<Eigh<D>> {
    let ([values, vectors], _) = decompose(a, Which::Eigh(opts))?;
    Ok(Eigh { values, vectors })
}

/// The clustered eigendecomposition of the symmetric `A: [batch…, n, n]` with the secondary
/// operator `G: [n, n]` ([`adrules_core::linalg::eigh_clustered`]: whole clusters of
/// near-degenerate eigenvalues kept, each cluster's basis fixed by `G` and the phase
/// reference of `opts`) as tensors of burn's graph: the basis `W: [batch…, n, k]` and the
/// compressed matrix `C' = Wᵀ·A·W: [batch…, k, k]` are slices of one node over `A` whose
/// backward is
/// [`ClusteredEighPullback::pullback`](adrules_core::linalg::ClusteredEighPullback::pullback)
/// with `rule` (broadening, degeneracy tolerance). `G` is a constant operand: its values are
/// read (without its graph) and no gradient flows to it. The kept eigenvalues
/// (`[batch…, 1, k]`, on `A`'s device) and the per-matrix diagnostics are plain data
/// without a gradient (`C'` carries the eigenvalues).
///
/// # Errors
/// As [`adrules_core::linalg::eigh_clustered_rrule`] (a non-symmetric `A` or `G`, a `G` that
/// is not `[n, n]`, invalid options, …); [`Error::DTypeMismatch`] (`"g"`) for a `G` of
/// another dtype than `A`; and the routing's.
pub fn eigh_clustered<const D: usize>(
    a: &Tensor<D>,
    g: &Tensor<2>,
    opts: &ClusterOptions,
    rule: RuleOptions,
) -> Result<ClusteredEigh<D>> {
    let (want, actual) = (check_dtype("a", a.dtype())?, check_dtype("g", g.dtype())?);
    if want != actual {
        return Err(Error::DTypeMismatch {
            arg: "g".into(),
            expected: format!("{want}, the dtype of a"),
            actual,
        });
    }
    let gh = g.to_data().convert::<f64>().try_into_vec::<f64>();
    // read through f64, exact for f32 and f64, then back to the one dtype of A and G
    let gh = HostTensor::from_vec(&g.dims(), gh.map_err(engine_error)?)?.to_dtype_projected(want);
    let which = Which::Clustered(Arc::new((gh, opts.clone(), rule)));
    let ([basis, corner], layout) = decompose(a, which)?;
    let (values, info) = layout
        .clusters
        .ok_or_else(|| engine_error("the clustered eigh's values were not recorded"))?;
    Ok(ClusteredEigh {
        basis,
        corner,
        values: constant(&values, a)?,
        info,
    })
}

/// The host vector factor `h: [batch…, k]` as a rank-`D` tensor `[batch…, 1, k]` (see the
/// module docs) on `like`'s device and of its dtype, outside any graph.
fn constant<const D: usize>(h: &HostTensor, like: &Tensor<D>) -> Result<Tensor<D>> {
    let mut shape = h.dims().to_vec();
    shape.insert(shape.len().saturating_sub(1), 1);
    let shape: [usize; D] = shape
        .try_into()
        .map_err(|s: Vec<usize>| Error::rank("values", D, s.len()))?;
    let data = match h.data() {
        HostData::F32(v) => TensorData::new(v.clone(), shape),
        HostData::F64(v) => TensorData::new(v.clone(), shape),
        _ => return Err(unsupported("complex eigenvalues in burn")),
    };
    Ok(Tensor::from_data(data, (&like.device(), like.dtype())))
}
