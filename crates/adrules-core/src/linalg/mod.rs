//! Matrix decompositions with their rules: [`svd`] (thin, full and [truncated](svd_truncated)),
//! [`qr`] (reduced and complete, tall, square and wide) and Hermitian [`eigh`], for `f32`,
//! `f64`, `Complex32` and `Complex64`, batched over leading axes (`A: [batch…, m, n]`, the
//! last two axes the matrix, row index first). Beside them: the clustered Hermitian
//! eigendecomposition [`eigh_clustered`] (whole clusters of near-degenerate eigenvalues kept,
//! each cluster's basis fixed by a secondary operator) and the
//! normalization [`normalize`] (`x/‖x‖` over all elements of a tensor of any shape).
//!
//! Each comes as the primal (`svd`), the primal with a pullback (`svd_rrule`, the pullback
//! reusable and owning host copies of the factors) and the primal with its tangent
//! (`svd_frule`), in the shape of the tensor rules of [`crate::rules`]. Each pullback also has
//! a second-order `pullback_tangent` ([`SvdPullback::pullback_tangent`],
//! [`QrPullback::pullback_tangent`], [`EighPullback::pullback_tangent`],
//! [`ClusteredEighPullback::pullback_tangent`]): the tangent of the
//! cotangent along `Ȧ` and the cotangents' tangents, i.e. Hessian-vector products of losses
//! of the factors (forward-over-reverse).
//!
//! # Where it runs
//! The decompositions are [`Backend`] operations ([`Backend::svd`], [`Backend::qr`],
//! [`Backend::eigh`]) whose default, used by every backend of this workspace (none of candle,
//! burn and dfdx has a decomposition of its own), copies the matrix to the host and calls
//! faer ([`host_svd`], [`host_qr`], [`host_eigh`]). The rules run on the host as well: a
//! decomposition's rule costs `O(m·n·k)`, like the decomposition, and the transfers
//! `O(m·n)`. A backend with a device decomposition overrides the three methods; the rules
//! then copy only the factors.
//!
//! # Gauges
//! Singular and eigen vectors are defined up to a gauge: a phase per vector (a sign for real
//! types), a unitary rotation inside a degenerate subspace, any basis of the complement in
//! the full modes. A loss that depends on the gauge has no gradient; the pullbacks detect
//! it from the cotangents and return [`Error::GaugeIllDefined`] instead of a number. The
//! pushforwards fix the gauge (documented on each) so that the tangent of any
//! gauge-invariant function of the factors is exact. QR fixes its gauge in the primal (a
//! real, non-negative diagonal of `R`) and is a function of `A`.
//!
//! The formulas, with their sources, are on each pullback; the derivations are in
//! [`crate::math`].
//!
//! # In an engine's graph
//! Each decomposition is a [`Rule`](crate::rule::Rule) of several outputs
//! ([`SvdRule`](crate::rule::SvdRule), [`TruncatedSvdRule`](crate::rule::TruncatedSvdRule),
//! [`QrRule`](crate::rule::QrRule), [`EighRule`](crate::rule::EighRule),
//! [`ClusteredEighRule`](crate::rule::ClusteredEighRule)); an engine adapter runs it through
//! its one bridge as one node over `A` and one selector node per factor
//! ([`rule::split`](crate::rule::split), [`OutputsNode`](crate::rule::OutputsNode)): the
//! selectors hand the factors' cotangents to the node, whose backward is one pullback over
//! the cotangents of all of them; the factors are computed once, and backward reruns
//! nothing.
//!
//! # Example: the gradient of the nuclear norm `Σ sᵢ`
//! ```
//! use adrules_core::linalg::{RuleOptions, SvdCotangents, SvdMode, svd_rrule};
//! use adrules_core::{Backend, HostTensor};
//! use adrules_strided::Strided;
//!
//! # fn main() -> adrules_core::Result<()> {
//! let be = Strided;
//! let a = be.from_host(HostTensor::from_vec(&[2, 3], vec![3.0, 0.0, 1.0, 0.0, 2.0, 0.0])?)?;
//! let (out, pullback) = svd_rrule(&be, &a, SvdMode::Thin, RuleOptions::default())?;
//! let ones = be.from_host(HostTensor::from_vec(&[2], vec![1.0f64; 2])?)?;
//! let a_bar = pullback.pullback(SvdCotangents { s: Some(&ones), ..Default::default() })?;
//! // ∂(Σ s)/∂A = U·Vh
//! let (u, vh) = (be.to_host(&out.u)?, be.to_host(&out.vh)?);
//! let (u, vh, g) = (u.as_slice::<f64>()?, vh.as_slice::<f64>()?, be.to_host(&a_bar)?);
//! let g = g.as_slice::<f64>()?;
//! for i in 0..2 {
//!     for j in 0..3 {
//!         let uvh: f64 = (0..2).map(|r| u[i * 2 + r] * vh[r * 3 + j]).sum();
//!         assert!((g[i * 3 + j] - uvh).abs() < 1e-12);
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`Error::GaugeIllDefined`]: crate::Error::GaugeIllDefined

pub(crate) mod batch;
mod clustered;
mod common;
mod dense;
mod driver;
mod eigh;
mod host;
mod normalize;
mod qr;
mod svd;

pub use clustered::{
    ClusterInfo, ClusterOptions, ClusteredEigh, ClusteredEighPullback, ClusteredEighTangent,
    eigh_clustered, eigh_clustered_frule, eigh_clustered_rrule,
};
pub use dense::{
    CholeskyRule, DetRule, EigRule, InvRule, LstsqRule, LuFactorRule, MatrixExpRule, MatrixNorm,
    MatrixNormRule, PinvRule, SlogdetRule, SolveRule, SolveTriangularRule, cholesky, det,
    host_cholesky, host_lu, inv, lstsq, lu_factor, matrix_exp, matrix_norm, pinv, slogdet, solve,
    solve_triangular,
};
pub use eigh::{Eigh, EighPullback, eigh, eigh_frule, eigh_rrule};
pub use host::{QrMode, SvdMode, host_eigh, host_qr, host_svd};
pub use normalize::{NormalizePullback, Normalized, normalize, normalize_frule, normalize_rrule};
pub use qr::{Qr, QrPullback, qr, qr_frule, qr_rrule};
pub use svd::{
    Svd, SvdCotangents, SvdPullback, TruncatedSvd, Truncation, svd, svd_frule, svd_rrule,
    svd_truncated, svd_truncated_frule, svd_truncated_rrule,
};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::scalar::{DType, ImplicitScalar, eps};

/// Options of the decomposition rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RuleOptions {
    /// Lorentzian broadening `ε ≥ 0` (Liao et al., PRX 9, 031041 (2019)): every reciprocal
    /// `1/x` of a spectral gap or singular value becomes `x/(x² + ε)`. `ε` has the units of
    /// `x²`: of `s⁴` for the SVD's gaps `sⱼ² − sᵢ²` and of `s²` for its `1/s`, of `λ²` for
    /// eigh. 0 (the default) is the exact rule; Liao et al. use `10⁻¹²` for normalised
    /// tensors. It biases the gradient by `O(ε/x²)` relative for each term.
    pub broadening: f64,
    /// Two singular values (eigenvalues) are degenerate when `|sᵢ − sⱼ| ≤ rtol·s₀`
    /// (`|λᵢ − λⱼ| ≤ rtol·max|λ|`), a singular value zero when `s ≤ rtol·s₀`. `None`:
    /// `16·√k·ε` of the dtype (`k = min(m, n)`), rounding level: a backward-stable
    /// decomposition is exact for `A + E` with `‖E‖_F ≲ c·ε·‖A‖_F ≤ c·ε·√k·s₀`, and by Weyl's
    /// inequality each computed value moves by at most `‖E‖₂ ≤ ‖E‖_F`.
    pub degeneracy_rtol: Option<f64>,
    /// Truncated SVD's pullback only: include the discarded subspace's term (exact
    /// derivative, the default). `false` gives the rank-`r` formula alone, for comparison;
    /// [`svd_truncated_frule`] always returns the exact tangent.
    pub discarded_term: bool,
}

impl Default for RuleOptions {
    fn default() -> Self {
        RuleOptions {
            broadening: 0.0,
            degeneracy_rtol: None,
            discarded_term: true,
        }
    }
}

impl RuleOptions {
    /// The exact rules with a Lorentzian broadening `ε`.
    pub fn broadened(broadening: f64) -> Self {
        RuleOptions {
            broadening,
            ..RuleOptions::default()
        }
    }

    fn validate(&self) -> Result<()> {
        if !(self.broadening.is_finite() && self.broadening >= 0.0) {
            return Err(Error::invalid(
                "broadening",
                format!("must be finite and ≥ 0, got {:?}", self.broadening),
            ));
        }
        if let Some(r) = self.degeneracy_rtol
            && !(r.is_finite() && r >= 0.0)
        {
            return Err(Error::invalid(
                "degeneracy_rtol",
                format!("must be finite and ≥ 0, got {r:?}"),
            ));
        }
        Ok(())
    }

    fn rtol<T: ImplicitScalar>(&self, k: usize) -> f64 {
        self.degeneracy_rtol
            .unwrap_or_else(|| 16.0 * (k.max(1) as f64).sqrt() * eps::<T>())
    }
}

/// Brings a cotangent or tangent to the host, checked against the shape it must have, for
/// finite entries ([`Error::InvalidArgument`]) and converted to `dtype` (it must promote to
/// it losslessly: an `f32` cotangent serves an `f64` factor, not the reverse).
pub(crate) fn host_arg<B: Backend>(
    be: &B,
    t: &B::Tensor,
    dims: &[usize],
    dtype: DType,
    arg: &str,
) -> Result<HostTensor> {
    let got = be.dims(t);
    if got.as_slice() != dims {
        return Err(Error::shape(arg, dims, &got));
    }
    let h = be.to_host(t)?;
    check_host(&h, dims, arg)?;
    if h.dtype() == dtype {
        Ok(h)
    } else if h.dtype().promotes_to(dtype) {
        Ok(h.to_dtype_projected(dtype))
    } else {
        Err(Error::DTypeMismatch {
            arg: arg.into(),
            expected: dtype.to_string(),
            actual: h.dtype(),
        })
    }
}

/// The checks every host copy of a rule's argument passes: shape `dims`
/// ([`Error::ShapeMismatch`]) and finite entries ([`Error::InvalidArgument`]).
pub(crate) fn check_host(h: &HostTensor, dims: &[usize], arg: &str) -> Result<()> {
    if h.dims() != dims {
        return Err(Error::shape(arg, dims, h.dims()));
    }
    if let Some(p) = crate::finite::host_first_non_finite(h) {
        return Err(Error::invalid(
            arg,
            format!("entry {p} (row-major) is not finite"),
        ));
    }
    Ok(())
}
