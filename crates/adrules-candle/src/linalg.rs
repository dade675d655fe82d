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
//! [`adrules_core::linalg::ClusteredEighPullback::pullback`]). Beside them, the dense
//! operations [`cholesky`], [`solve_triangular`], [`solve`], [`inv`], [`det`],
//! [`slogdet`], [`matrix_exp`], [`pinv`], [`lstsq`], [`lu_factor`] and [`matrix_norm`],
//! each the core's rule of that name (formulas and sources on
//! [`adrules_core::linalg::CholeskyRule`] and its siblings) through the same bridge.
//!
//! # How
//! Each decomposition is the core's rule ([`SvdRule`], [`TruncatedSvdRule`], [`QrRule`],
//! [`EighRule`], [`ClusteredEighRule`]) run through the crate's one bridge,
//! [`apply_rule`](crate::apply_rule): the factorisation runs once, through [`CandleBackend`]
//! (faer on the host; on a GPU the matrix is copied to the host and the factors back),
//! together with the core's pullback. candle's custom ops have one output, so the factors
//! are attached by the core's multi-output scheme ([`adrules_core::rule::split`]): one custom
//! op over `A` whose output is a vector of zeros, one per factor, and per factor one custom
//! op over that vector whose output is the factor (a copy of the computed values: candle
//! owns an op's output). candle's backward hands each factor's op its cotangent, which it
//! deposits with the core's node, and then the node's op the tickets of the deposits, from
//! which it runs the pullback once (shared with every engine; no cotangent for a factor the
//! loss does not use). Backward reruns nothing and copies no cotangent.
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

use adrules_core::linalg::{
    ClusterOptions, ClusteredEigh, Eigh, Qr, QrMode, RuleOptions, Svd, SvdMode, TruncatedSvd,
    Truncation,
};
use adrules_core::rule::{ClusteredEighRule, EighRule, QrRule, Rule, SvdRule, TruncatedSvdRule};
use adrules_core::{Backend as _, Error};
use candle_core::Tensor;

use crate::backend::CandleBackend;
use crate::convert::to_candle;

/// The factors of the decomposition `rule` of `a`, through the crate's one bridge
/// ([`apply_rule`](crate::apply_rule)).
fn decompose<R: Rule + 'static, const N: usize>(
    rule: &R,
    a: &Tensor,
) -> candle_core::Result<[Tensor; N]> {
    let factors = crate::rule::apply(rule, &[a])?;
    let n = factors.len();
    factors.try_into().map_err(|_| {
        to_candle(Error::Backend {
            backend: "candle".into(),
            message: format!("{}: {n} factors for {N}", rule.name()),
        })
    })
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
    let rule = TruncatedSvdRule {
        truncation,
        options: opts,
    };
    let [u, s, vh, discarded] = decompose(&rule, a)?;
    let rank = s.dims().last().copied().unwrap_or(0);
    Ok(TruncatedSvd {
        svd: Svd { u, s, vh },
        discarded,
        rank,
    })
}

/// `A = Q·R` for `A: [batch…, m, n]` as differentiable candle tensors (`diag(R)` real and
/// non-negative; shapes by [`QrMode`]). The pullback is
/// [`QrPullback::pullback`](adrules_core::linalg::QrPullback::pullback).
///
/// # Errors
/// As [`adrules_core::linalg::qr_rrule`], inside candle's error.
pub fn qr(a: &Tensor, mode: QrMode) -> candle_core::Result<Qr<CandleBackend>> {
    let [q, r] = decompose(&QrRule { mode }, a)?;
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
    let [values, vectors] = decompose(&EighRule { options: opts }, a)?;
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
    let be = CandleBackend::new(g.device().clone());
    let g = be.to_host(&g.detach()).map_err(to_candle)?;
    let rule = ClusteredEighRule::new(g, opts.clone(), rule);
    let [basis, corner] = decompose(&rule, a)?;
    let (values, info) = rule.byproduct().ok_or_else(|| {
        to_candle(Error::Backend {
            backend: "candle".into(),
            message: "the clustered eigh's values were not recorded".into(),
        })
    })?;
    let values = CandleBackend::new(a.device().clone())
        .from_host(values)
        .map_err(to_candle)?;
    Ok(ClusteredEigh {
        basis,
        corner,
        values,
        info,
    })
}

/// The one output of a one-output `rule` on `inputs`, through the crate's one bridge.
fn single<R: Rule>(rule: &R, inputs: &[&Tensor]) -> candle_core::Result<Tensor> {
    let [out] = crate::rule::apply(rule, inputs)?
        .try_into()
        .map_err(|v: Vec<Tensor>| {
            to_candle(Error::Backend {
                backend: "candle".into(),
                message: format!("{}: {} outputs for 1", rule.name(), v.len()),
            })
        })?;
    Ok(out)
}

/// The lower Cholesky factor `L` (or, with `upper`, `U = Lᴴ`) of the symmetric part
/// `(A + Aᵀ)/2` of `A: [batch…, n, n]` as a differentiable candle tensor: the core's
/// [`CholeskyRule`](adrules_core::linalg::CholeskyRule) (Murray's pullback; its cotangent
/// `Ā` is symmetric).
///
/// # Errors
/// As the rule, inside candle's error: `NotPositiveDefinite`, a non-square or non-finite
/// input.
pub fn cholesky(a: &Tensor, upper: bool) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::CholeskyRule { upper }, &[a])
}

/// `X` with `T·X = B` (or `X·T = B`) for the triangle `T` of `A: [batch…, n, n]` that
/// `rule` chooses, `B` of the same batch: the core's
/// [`SolveTriangularRule`](adrules_core::linalg::SolveTriangularRule), differentiable in both.
///
/// # Errors
/// As the rule, inside candle's error: `Singular` for a zero pivot, mismatched shapes.
pub fn solve_triangular(
    a: &Tensor,
    b: &Tensor,
    rule: adrules_core::linalg::SolveTriangularRule,
) -> candle_core::Result<Tensor> {
    single(&rule, &[a, b])
}

/// `X = A⁻¹·B` for `A: [batch…, n, n]` and `B: [batch…, n]` or `[batch…, n, k]`: the core's
/// [`SolveRule`](adrules_core::linalg::SolveRule), differentiable in both.
///
/// # Errors
/// As the rule, inside candle's error: `Singular` for a zero pivot, mismatched shapes.
pub fn solve(a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::SolveRule, &[a, b])
}

/// `A⁻¹` for `A: [batch…, n, n]`: the core's [`InvRule`](adrules_core::linalg::InvRule).
///
/// # Errors
/// As the rule, inside candle's error: `Singular` for a zero pivot.
pub fn inv(a: &Tensor) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::InvRule, &[a])
}

/// `det(A): [batch…]` for `A: [batch…, n, n]`: the core's
/// [`DetRule`](adrules_core::linalg::DetRule) (its derivatives at a singular `A` are a
/// `Singular` error in `backward()`).
///
/// # Errors
/// As the rule, inside candle's error.
pub fn det(a: &Tensor) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::DetRule, &[a])
}

/// `e^A` for `A: [batch…, n, n]`: the core's
/// [`MatrixExpRule`](adrules_core::linalg::MatrixExpRule) (Padé with scaling and squaring;
/// the pullback is the adjoint Fréchet derivative).
///
/// # Errors
/// As the rule, inside candle's error.
pub fn matrix_exp(a: &Tensor) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::MatrixExpRule, &[a])
}

/// `A⁺: [batch…, n, m]` for `A: [batch…, m, n]`, singular values at most `rtol·s₀` dropped
/// (`None`: `max(m, n)·ε`): the core's [`PinvRule`](adrules_core::linalg::PinvRule) (Golub &
/// Pereyra's derivative, where the rank is locally constant).
///
/// # Errors
/// As the rule, inside candle's error.
pub fn pinv(a: &Tensor, rtol: Option<f64>) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::PinvRule { rtol }, &[a])
}

/// `X = A⁺·B` for `A: [batch…, m, n]` and `B: [batch…, m]` or `[batch…, m, k]` (the
/// minimum-norm least-squares solution): the core's
/// [`LstsqRule`](adrules_core::linalg::LstsqRule), differentiable in both.
///
/// # Errors
/// As the rule, inside candle's error.
pub fn lstsq(a: &Tensor, b: &Tensor, rtol: Option<f64>) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::LstsqRule { rtol }, &[a, b])
}

/// The packed LU factors `[batch…, m, n]` and the permutation matrix `P: [batch…, m, m]`
/// (`A = P·L·U`, partial pivoting) of `A: [batch…, m, n]`: the core's
/// [`LuFactorRule`](adrules_core::linalg::LuFactorRule); `P` carries no gradient.
///
/// # Errors
/// As the rule, inside candle's error (`Singular` in `backward()` for a zero pivot).
pub fn lu_factor(a: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
    let [lu, p] = decompose(&adrules_core::linalg::LuFactorRule, a)?;
    Ok((lu, p))
}

/// `‖A‖: [batch…]` for `A: [batch…, m, n]` (Frobenius, nuclear or spectral): the core's
/// [`MatrixNormRule`](adrules_core::linalg::MatrixNormRule), with its subgradient
/// conventions.
///
/// # Errors
/// As the rule, inside candle's error.
pub fn matrix_norm(
    a: &Tensor,
    norm: adrules_core::linalg::MatrixNorm,
) -> candle_core::Result<Tensor> {
    single(&adrules_core::linalg::MatrixNormRule { norm }, &[a])
}

/// `(sign, log|det(A)|)`, each `[batch…]`, for `A: [batch…, n, n]`: the core's
/// [`SlogdetRule`](adrules_core::linalg::SlogdetRule); the sign carries no gradient (a real
/// `A`'s sign is locally constant).
///
/// # Errors
/// As the rule, inside candle's error: `Singular` for a singular `A`.
pub fn slogdet(a: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
    let [sign, logabs] = decompose(&adrules_core::linalg::SlogdetRule, a)?;
    Ok((sign, logabs))
}
