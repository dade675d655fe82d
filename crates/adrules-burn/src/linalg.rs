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
//! [`adrules_core::linalg::ClusteredEighPullback::pullback`]). Beside them, the dense
//! operations [`cholesky`], [`solve_triangular`], [`solve`], [`inv`], [`det`],
//! [`slogdet`] (determinants and norms with shape `[batch…, 1, 1]`), [`matrix_exp`], [`pinv`],
//! [`lstsq`], [`lu_factor`] and [`matrix_norm`], each the core's rule of that
//! name (formulas and sources on [`adrules_core::linalg::CholeskyRule`] and its siblings)
//! through the same bridge.
//!
//! # How
//! Each decomposition is the core's rule ([`SvdRule`], [`TruncatedSvdRule`], [`QrRule`],
//! [`EighRule`], [`ClusteredEighRule`]) run through the crate's one bridge,
//! [`apply_rule`](crate::apply_rule): `A` is routed to the burn backend it lives on as every
//! op of this crate is (see [`apply`](crate::apply): Flex, NdArray, cubecl), and the
//! factorisation runs once, with the core's `*_rrule` over
//! [`BurnBackend`](crate::BurnBackend) on the inner (non-autodiff) backend (faer on the host:
//! the matrix is copied there and the factors back), together with the core's pullback. A
//! burn op has one output, so the factors are attached by the core's multi-output scheme
//! ([`adrules_core::rule::split`]): one node over `A` whose output is a vector of zeros, one
//! per factor, and whose state is the core's node (holding the pullback); and per factor
//! one node over that vector whose output is the factor. burn's backward hands each
//! factor's node its cotangent (summed when the factor is used several times), which it
//! deposits with the core's node, and then the node over `A` the tickets of the deposits,
//! from which it runs the pullback once (no cotangent for a factor the loss does not use).
//! Nothing is recomputed in backward, and `A` is not kept (the pullback keeps the factors on
//! the host). A vector factor gets its unit axis (below) by burn's reshape. A constant `A`
//! (no `require_grad`) records no node: its factors are plain tensors.
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

use adrules_core::linalg::{ClusterInfo, ClusterOptions, QrMode, RuleOptions, SvdMode, Truncation};
use adrules_core::rule::{ClusteredEighRule, EighRule, QrRule, Rule, SvdRule, TruncatedSvdRule};
use adrules_core::{Error, HostData, HostTensor, Result};
use burn_tensor::{Tensor, TensorData};

use crate::convert::{check_dtype, engine_error, unsupported};

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

/// Runs the decomposition `rule` (one input `A`) through the crate's bridge
/// ([`apply_rule`](crate::apply_rule): the core's multi-output scheme, one node and a selector
/// per factor) and returns its factors as rank-`D` tensors (a vector factor gets its unit
/// axis by burn's differentiable reshape).
fn decompose<R: Rule + Clone + 'static, const D: usize, const N: usize>(
    rule: &R,
    a: &Tensor<D>,
) -> Result<[Tensor<D>; N]> {
    let factors = crate::rule::apply(rule, [a.into()])?;
    let n = factors.len();
    let factors: Vec<Tensor<D>> = factors
        .into_iter()
        .map(|f| {
            let dims = f.dims();
            let user = user_dims::<D>(&dims)?;
            if dims.len() == D {
                f.into_tensor()
            } else {
                f.reshaped(user)
            }
        })
        .collect::<Result<_>>()?;
    factors
        .try_into()
        .map_err(|_| engine_error(format!("{n} factors for {N}")))
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
    let [u, s, vh] = decompose(
        &SvdRule {
            mode,
            options: opts,
        },
        a,
    )?;
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
    let rule = TruncatedSvdRule {
        truncation,
        options: opts,
    };
    let [u, s, vh, discarded] = decompose(&rule, a)?;
    let rank = s.dims()[D - 1];
    Ok(TruncatedSvd {
        svd: Svd { u, s, vh },
        discarded,
        rank,
    })
}

/// `A = Q·R` for `A: [batch…, m, n]` as tensors of burn's graph (`diag(R)` non-negative;
/// shapes by [`QrMode`]). The pullback is
/// [`QrPullback::pullback`](adrules_core::linalg::QrPullback::pullback).
///
/// # Errors
/// As [`adrules_core::linalg::qr_rrule`], and the routing's.
pub fn qr<const D: usize>(a: &Tensor<D>, mode: QrMode) -> Result<Qr<D>> {
    let [q, r] = decompose(&QrRule { mode }, a)?;
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
    let [values, vectors] = decompose(&EighRule { options: opts }, a)?;
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
    let rule = ClusteredEighRule::new(gh, opts.clone(), rule);
    let [basis, corner] = decompose(&rule, a)?;
    let (values, info) = rule
        .byproduct()
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

/// The one output of a one-output `rule` on `inputs`, through the crate's one bridge, as a
/// rank-`E` tensor.
fn single<R: Rule + Clone + 'static, const N: usize, const E: usize>(
    rule: &R,
    inputs: [crate::Operand; N],
) -> Result<Tensor<E>> {
    let mut out = crate::rule::apply(rule, inputs)?;
    match out.len() {
        1 => out.remove(0).into_tensor(),
        n => Err(engine_error(format!("{}: {n} outputs for 1", rule.name()))),
    }
}

/// `[batch…, 1, 1]` for a per-matrix scalar output `[batch…]` (`[1]` for no batch axes) of
/// `A: [batch…, n, n]`, burn's kept reduction axes.
fn per_matrix<const D: usize>(out: crate::Operand, a: &Tensor<D>) -> Result<Tensor<D>> {
    let mut dims = a.dims();
    dims[D - 2] = 1;
    dims[D - 1] = 1;
    out.reshaped(dims)
}

/// The lower Cholesky factor `L` (or, with `upper`, `U = Lᵀ`) of the symmetric part
/// `(A + Aᵀ)/2` of `A: [batch…, n, n]` as a tensor of burn's graph: the core's
/// [`CholeskyRule`](adrules_core::linalg::CholeskyRule) (Murray's pullback; `Ā` symmetric).
///
/// # Errors
/// As the rule (`NotPositiveDefinite`, a non-square or non-finite input), and the routing's.
pub fn cholesky<const D: usize>(a: &Tensor<D>, upper: bool) -> Result<Tensor<D>> {
    single(&adrules_core::linalg::CholeskyRule { upper }, [a.into()])
}

/// `X` with `T·X = B` (or `X·T = B`) for the triangle `T` of `A: [batch…, n, n]` that `rule`
/// chooses, `B` of the same batch and rank: the core's
/// [`SolveTriangularRule`](adrules_core::linalg::SolveTriangularRule), differentiable in both.
///
/// # Errors
/// As the rule (`Singular` for a zero pivot, mismatched shapes), and the routing's.
pub fn solve_triangular<const D: usize>(
    a: &Tensor<D>,
    b: &Tensor<D>,
    rule: adrules_core::linalg::SolveTriangularRule,
) -> Result<Tensor<D>> {
    single(&rule, [a.into(), b.into()])
}

/// `X = A⁻¹·B` for `A: [batch…, n, n]` and `B: [batch…, n]` (`E = D − 1`) or
/// `[batch…, n, k]` (`E = D`): the core's [`SolveRule`](adrules_core::linalg::SolveRule),
/// differentiable in both; `X` has `B`'s shape.
///
/// # Errors
/// As the rule (`Singular` for a zero pivot, mismatched shapes), and the routing's.
pub fn solve<const D: usize, const E: usize>(a: &Tensor<D>, b: &Tensor<E>) -> Result<Tensor<E>> {
    single(&adrules_core::linalg::SolveRule, [a.into(), b.into()])
}

/// `A⁻¹` for `A: [batch…, n, n]`: the core's [`InvRule`](adrules_core::linalg::InvRule).
///
/// # Errors
/// As the rule (`Singular` for a zero pivot), and the routing's.
pub fn inv<const D: usize>(a: &Tensor<D>) -> Result<Tensor<D>> {
    single(&adrules_core::linalg::InvRule, [a.into()])
}

/// `e^A` for `A: [batch…, n, n]`: the core's
/// [`MatrixExpRule`](adrules_core::linalg::MatrixExpRule) (Padé with scaling and squaring;
/// the pullback is the adjoint Fréchet derivative).
///
/// # Errors
/// As the rule, and the routing's.
pub fn matrix_exp<const D: usize>(a: &Tensor<D>) -> Result<Tensor<D>> {
    single(&adrules_core::linalg::MatrixExpRule, [a.into()])
}

/// `A⁺: [batch…, n, m]` for `A: [batch…, m, n]`, singular values at most `rtol·s₀` dropped
/// (`None`: `max(m, n)·ε`): the core's [`PinvRule`](adrules_core::linalg::PinvRule) (Golub &
/// Pereyra's derivative, where the rank is locally constant).
///
/// # Errors
/// As the rule, and the routing's.
pub fn pinv<const D: usize>(a: &Tensor<D>, rtol: Option<f64>) -> Result<Tensor<D>> {
    single(&adrules_core::linalg::PinvRule { rtol }, [a.into()])
}

/// `X = A⁺·B` for `A: [batch…, m, n]` and `B: [batch…, m]` (`E = D − 1`) or
/// `[batch…, m, k]` (`E = D`), the minimum-norm least-squares solution: the core's
/// [`LstsqRule`](adrules_core::linalg::LstsqRule), differentiable in both.
///
/// # Errors
/// As the rule, and the routing's.
pub fn lstsq<const D: usize, const E: usize>(
    a: &Tensor<D>,
    b: &Tensor<E>,
    rtol: Option<f64>,
) -> Result<Tensor<E>> {
    single(
        &adrules_core::linalg::LstsqRule { rtol },
        [a.into(), b.into()],
    )
}

/// The packed LU factors `[batch…, m, n]` and the permutation matrix `P: [batch…, m, m]`
/// (`A = P·L·U`, partial pivoting) of `A: [batch…, m, n]`: the core's
/// [`LuFactorRule`](adrules_core::linalg::LuFactorRule); `P` carries no gradient.
///
/// # Errors
/// As the rule, and the routing's.
pub fn lu_factor<const D: usize>(a: &Tensor<D>) -> Result<(Tensor<D>, Tensor<D>)> {
    let [lu, p] = decompose(&adrules_core::linalg::LuFactorRule, a)?;
    Ok((lu, p))
}

/// `‖A‖` for `A: [batch…, m, n]` (Frobenius, nuclear or spectral), of shape
/// `[batch…, 1, 1]`: the core's [`MatrixNormRule`](adrules_core::linalg::MatrixNormRule),
/// with its subgradient conventions.
///
/// # Errors
/// As the rule, and the routing's.
pub fn matrix_norm<const D: usize>(
    a: &Tensor<D>,
    norm: adrules_core::linalg::MatrixNorm,
) -> Result<Tensor<D>> {
    let mut out = crate::rule::apply(&adrules_core::linalg::MatrixNormRule { norm }, [a.into()])?;
    per_matrix(out.remove(0), a)
}

/// `det(A)` for `A: [batch…, n, n]`, of shape `[batch…, 1, 1]`: the core's
/// [`DetRule`](adrules_core::linalg::DetRule) (its derivatives at a singular `A` fail in
/// `backward()` with `Singular`).
///
/// # Errors
/// As the rule, and the routing's.
pub fn det<const D: usize>(a: &Tensor<D>) -> Result<Tensor<D>> {
    let mut out = crate::rule::apply(&adrules_core::linalg::DetRule, [a.into()])?;
    per_matrix(out.remove(0), a)
}

/// `(sign, log|det(A)|)` for `A: [batch…, n, n]`, each of shape `[batch…, 1, 1]`: the core's
/// [`SlogdetRule`](adrules_core::linalg::SlogdetRule); the sign carries no gradient (it is
/// locally constant).
///
/// # Errors
/// As the rule (`Singular` for a singular `A`), and the routing's.
pub fn slogdet<const D: usize>(a: &Tensor<D>) -> Result<(Tensor<D>, Tensor<D>)> {
    let mut out = crate::rule::apply(&adrules_core::linalg::SlogdetRule, [a.into()])?;
    let logabs = per_matrix(out.remove(1), a)?;
    Ok((per_matrix(out.remove(0), a)?, logabs))
}
