//! Singular value decomposition: thin, full and truncated, with pullback and pushforward.

use std::sync::Arc;

use faer::{Mat, MatRef};

use super::batch::{
    by_dtype, cj, cols, cplx, eps, hcat, host_arg, im, join, join_real, matrix_dims, max_abs, mm,
    mm_add, pow2_scale, re, real, split, split_real, unscaled,
};
use super::{RuleOptions, fold_complement, gauge_error};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::implicit::ImplicitScalar;
use crate::scalar::DType;

/// Which singular vectors [`svd`] returns, for `A` of shape `[batch…, m, n]` and
/// `k = min(m, n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SvdMode {
    /// `U: [batch…, m, k]`, `S: [batch…, k]`, `Vh: [batch…, k, n]`.
    #[default]
    Thin,
    /// `U: [batch…, m, m]`, `S: [batch…, k]`, `Vh: [batch…, n, n]`: the thin factors
    /// completed to unitary matrices. The complement columns are not functions of `A` (any
    /// orthonormal basis of the complement will do), so the rules accept a cotangent on them
    /// only when it does not depend on that basis (see [`SvdPullback::pullback`]).
    Full,
}

/// The factors `A = U·diag(S)·Vh` (`S` real, non-negative, non-increasing), or their
/// tangents when returned by a pushforward.
#[derive(Clone, Debug)]
pub struct Svd<B: Backend> {
    /// left singular vectors, as columns: `[batch…, m, k]` (thin) or `[batch…, m, m]` (full)
    pub u: B::Tensor,
    /// singular values `[batch…, k]`, in the real dtype of `A`'s precision
    pub s: B::Tensor,
    /// right singular vectors, conjugated, as rows: `[batch…, k, n]` or `[batch…, n, n]`
    pub vh: B::Tensor,
}

/// How [`svd_truncated`] chooses the rank `r`: the singular values `sᵢ > rtol·s₀` are kept
/// (`s₀` the largest; every one when `rtol = 0`, none when `rtol ≥ 1`), at most `max_rank` of
/// them. In a batch every matrix keeps the same rank, the largest any of them needs (an empty
/// batch keeps `min(k, max_rank)`), so the output's shape depends on the data only through
/// `rtol`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Truncation {
    /// at most this many singular values (`None`: no limit)
    pub max_rank: Option<usize>,
    /// singular values at most `rtol·s₀` are discarded (0: none is)
    pub rtol: f64,
}

impl Truncation {
    /// Keep the `min(r, k)` largest singular values, whatever their values.
    pub fn rank(r: usize) -> Self {
        Truncation {
            max_rank: Some(r),
            rtol: 0.0,
        }
    }

    /// Keep the singular values above `rtol·s₀`.
    pub fn tolerance(rtol: f64) -> Self {
        Truncation {
            max_rank: None,
            rtol,
        }
    }

    fn validate(&self) -> Result<()> {
        if !(self.rtol.is_finite() && self.rtol >= 0.0) {
            return Err(Error::invalid(
                "truncation.rtol",
                format!("must be finite and ≥ 0, got {}", self.rtol),
            ));
        }
        Ok(())
    }

    /// The rank kept for singular values `s` (non-increasing).
    fn rank_of(&self, s: &[f64]) -> usize {
        let s0 = s.first().copied().unwrap_or(0.0);
        let r = if self.rtol == 0.0 {
            s.len()
        } else {
            s.iter().take_while(|&&x| x > self.rtol * s0).count()
        };
        self.max_rank.map_or(r, |m| r.min(m))
    }
}

/// A truncated SVD `A ≈ U·diag(S)·Vh` of rank `r`, with what was discarded; or its tangent
/// when returned by [`svd_truncated_frule`].
#[derive(Clone, Debug)]
pub struct TruncatedSvd<B: Backend> {
    /// `U: [batch…, m, r]`, `S: [batch…, r]`, `Vh: [batch…, r, n]`
    pub svd: Svd<B>,
    /// the discarded singular values `[batch…, k − r]`: `‖A − U·diag(S)·Vh‖_F` is their
    /// 2-norm
    pub discarded: B::Tensor,
    /// the rank `r` kept
    pub rank: usize,
}

/// Cotangents for [`SvdPullback::pullback`]; `None` for an output the loss does not use.
#[derive(Debug)]
pub struct SvdCotangents<'a, T> {
    /// `Ū`, shaped as `U`
    pub u: Option<&'a T>,
    /// `S̄`, shaped as `S` (real)
    pub s: Option<&'a T>,
    /// `V̄h`, shaped as `Vh` (the cotangent of `Vh`, not of `V`)
    pub vh: Option<&'a T>,
    /// cotangent of the discarded singular values of a truncated SVD
    pub discarded: Option<&'a T>,
}

impl<T> Clone for SvdCotangents<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SvdCotangents<'_, T> {}

impl<T> Default for SvdCotangents<'_, T> {
    fn default() -> Self {
        SvdCotangents {
            u: None,
            s: None,
            vh: None,
            discarded: None,
        }
    }
}

/// What the output was: the shapes the cotangents must have.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Thin,
    Full,
    Truncated { rank: usize },
}

/// The pullback of [`svd_rrule`] or [`svd_truncated_rrule`]: it keeps the thin factors of the
/// whole spectrum on the host and can be applied many times.
#[derive(Clone, Debug)]
pub struct SvdPullback<B: Backend> {
    be: B,
    kind: Kind,
    opts: RuleOptions,
    /// `[batch…, m, n]` and dtype of `A`
    dims: Vec<usize>,
    dtype: DType,
    /// host factors as the backend returned them (thin, or full for [`SvdMode::Full`])
    factors: Arc<[HostTensor; 3]>,
}

/// `A = U·diag(S)·Vh` for `A: [batch…, m, n]` by the backend's [`Backend::svd`] (faer on the
/// host unless the backend has its own).
///
/// # Errors
/// [`Error::RankMismatch`] for a rank below 2, [`Error::InvalidArgument`] for a non-finite
/// entry, [`Error::Backend`] when the iteration does not converge.
pub fn svd<B: Backend>(be: &B, a: &B::Tensor, mode: SvdMode) -> Result<Svd<B>> {
    let [u, s, vh] = be.svd(a, mode)?;
    Ok(Svd { u, s, vh })
}

/// The SVD on host data, by faer, one matrix of the batch at a time: the default of
/// [`Backend::svd`].
///
/// # Errors
/// As [`svd`].
pub fn host_svd(a: &HostTensor, mode: SvdMode) -> Result<[HostTensor; 3]> {
    by_dtype!(a.dtype(), host_svd_t(a, mode))
}

fn host_svd_t<T: ImplicitScalar>(a: &HostTensor, mode: SvdMode) -> Result<[HostTensor; 3]> {
    let (batch, m, n) = matrix_dims(a.dims(), "a")?;
    let k = m.min(n);
    let mats = split::<T>(a, "a", true)?;
    let full = mode == SvdMode::Full;
    let (mut us, mut ss, mut vhs) = (Vec::new(), Vec::new(), Vec::new());
    for x in &mats {
        let (u, s, v) = svd_matrix(x.as_ref(), full)?;
        us.push(u);
        ss.push(s);
        vhs.push(v.adjoint().to_owned());
    }
    let (ku, kv) = if full { (m, n) } else { (k, k) };
    Ok([
        join("u", &batch, m, ku, &us)?,
        join_real("s", &batch, k, &ss, T::DTYPE.real())?,
        join("vh", &batch, kv, n, &vhs)?,
    ])
}

/// One matrix: `(U, s, V)` with `U: m×k` or `m×m`, `V: n×k` or `n×n`.
fn svd_matrix<T: ImplicitScalar>(
    a: MatRef<'_, T>,
    full: bool,
) -> Result<(Mat<T>, Vec<f64>, Mat<T>)> {
    let (m, n) = a.shape();
    if m.min(n) == 0 {
        let (ku, kv) = if full { (m, n) } else { (0, 0) };
        return Ok((Mat::identity(m, ku), Vec::new(), Mat::identity(n, kv)));
    }
    let c = pow2_scale(max_abs(a));
    let a = unscaled(a, c);
    let dec = if full {
        faer::linalg::solvers::Svd::new(a.as_ref())
    } else {
        faer::linalg::solvers::Svd::new_thin(a.as_ref())
    }
    .map_err(|e| Error::Backend {
        backend: "faer".into(),
        message: format!("svd of a {m}×{n} matrix: {e:?}"),
    })?;
    let s = dec.S().column_vector().iter().map(|&x| re(x) * c).collect();
    Ok((dec.U().to_owned(), s, dec.V().to_owned()))
}

/// The SVD and its pullback.
///
/// # Errors
/// As [`svd`]; [`Error::InvalidArgument`] for invalid `opts`.
pub fn svd_rrule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    mode: SvdMode,
    opts: RuleOptions,
) -> Result<(Svd<B>, SvdPullback<B>)> {
    opts.validate()?;
    let out = svd(be, a, mode)?;
    let factors = [
        be.to_host(&out.u)?,
        be.to_host(&out.s)?,
        be.to_host(&out.vh)?,
    ];
    let kind = match mode {
        SvdMode::Thin => Kind::Thin,
        SvdMode::Full => Kind::Full,
    };
    let pb = SvdPullback {
        be: be.clone(),
        kind,
        opts,
        dims: be.dims(a).to_vec(),
        dtype: be.dtype(a),
        factors: Arc::new(factors),
    };
    Ok((out, pb))
}

/// The truncated SVD (see [`Truncation`]), computed from the thin SVD of the whole matrix.
///
/// # Errors
/// As [`svd`]; [`Error::InvalidArgument`] for an invalid `truncation`.
pub fn svd_truncated<B: Backend>(
    be: &B,
    a: &B::Tensor,
    truncation: Truncation,
) -> Result<TruncatedSvd<B>> {
    Ok(svd_truncated_rrule(be, a, truncation, RuleOptions::default())?.0)
}

/// The truncated SVD and its pullback, which by default includes the discarded subspace's
/// term ([`RuleOptions::discarded_term`]).
///
/// # Errors
/// As [`svd_truncated`].
pub fn svd_truncated_rrule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    truncation: Truncation,
    opts: RuleOptions,
) -> Result<(TruncatedSvd<B>, SvdPullback<B>)> {
    truncation.validate()?;
    opts.validate()?;
    let thin = svd(be, a, SvdMode::Thin)?;
    let factors = [
        be.to_host(&thin.u)?,
        be.to_host(&thin.s)?,
        be.to_host(&thin.vh)?,
    ];
    let k = be.dims(&thin.s).last().copied().unwrap_or(0);
    let rank = batch_rank(&factors[1], k, truncation);
    let head = by_dtype!(be.dtype(a), truncate_t(&factors, rank))?;
    let [u, s, vh, discarded] = head.map(|h| be.from_host(h));
    let out = TruncatedSvd {
        svd: Svd {
            u: u?,
            s: s?,
            vh: vh?,
        },
        discarded: discarded?,
        rank,
    };
    let pb = SvdPullback {
        be: be.clone(),
        kind: Kind::Truncated { rank },
        opts,
        dims: be.dims(a).to_vec(),
        dtype: be.dtype(a),
        factors: Arc::new(factors),
    };
    Ok((out, pb))
}

/// The leading `r` columns of thin factors, and the discarded singular values.
fn truncate_t<T: ImplicitScalar>(
    factors: &[HostTensor; 3],
    rank: usize,
) -> Result<[HostTensor; 4]> {
    let [u, s, vh] = factors;
    let (batch, m, k) = matrix_dims(u.dims(), "u")?;
    let n = vh.dims()[vh.dims().len() - 1];
    let svals = split_real(s, k);
    let us = split::<T>(u, "u", false)?;
    let vhs = split::<T>(vh, "vh", false)?;
    let u_r: Vec<_> = us.iter().map(|x| cols(x.as_ref(), 0, rank)).collect();
    let vh_r: Vec<_> = vhs
        .iter()
        .map(|x| x.as_ref().subrows(0, rank).to_owned())
        .collect();
    let (kept, dropped): (Vec<_>, Vec<_>) = svals
        .iter()
        .map(|s| (s[..rank].to_vec(), s[rank..].to_vec()))
        .unzip();
    let real = T::DTYPE.real();
    Ok([
        join("u", &batch, m, rank, &u_r)?,
        join_real("s", &batch, rank, &kept, real)?,
        join("vh", &batch, rank, n, &vh_r)?,
        join_real("discarded", &batch, k - rank, &dropped, real)?,
    ])
}

/// The common rank a batch keeps: the largest any of its matrices needs.
fn batch_rank(s: &HostTensor, k: usize, truncation: Truncation) -> usize {
    let svals = split_real(s, k);
    if svals.is_empty() {
        truncation.max_rank.map_or(k, |r| r.min(k))
    } else {
        svals
            .iter()
            .map(|s| truncation.rank_of(s))
            .max()
            .unwrap_or(0)
    }
}

impl<B: Backend> SvdPullback<B> {
    /// `Ā` from the cotangents of the outputs (an absent one is zero).
    ///
    /// With `J = Uᴴ·Ū`, `K = Vᴴ·V̄` (`V̄ = V̄hᴴ`), `Fᵢⱼ = 1/(sⱼ² − sᵢ²)` (`i ≠ j`, `Fᵢᵢ = 0`)
    /// and `∘` the elementwise product:
    ///
    /// `Ā = U·[F∘((J − Jᴴ)·S + S·(K − Kᴴ)) + diag(S̄) + i·diag(Im(J − K))·S⁻¹/2]·Vᴴ
    ///      + (I − U·Uᴴ)·Ū·S⁻¹·Vᴴ + U·S⁻¹·V̄ᴴ·(I − V·Vᴴ)`
    ///
    /// (Townsend, "Differentiating the singular value decomposition" (2016); Wan & Zhang,
    /// arXiv:1909.02659 for the complex term; PyTorch's `svd_backward`). Derivation in
    /// [`crate::math`].
    /// - **Gauge**: for complex `A` the loss must not depend on the phases of the singular
    ///   vectors: `Im(Jᵢᵢ + Kᵢᵢ) = 0`, else [`Error::GaugeIllDefined`].
    /// - **Degenerate pairs** (`|sᵢ − sⱼ| ≤ rtol·s₀`, [`RuleOptions::degeneracy_rtol`]):
    ///   with no broadening, `Fᵢⱼ = 0`, which is exact for a loss that does not depend on the
    ///   basis of the degenerate subspace; if it does (the numerator of `Fᵢⱼ` is not zero),
    ///   [`Error::GaugeIllDefined`]; so is an `S̄` that differs within the pair (the loss is
    ///   then not differentiable). With a Lorentzian broadening `ε`,
    ///   `Fᵢⱼ = Δ/(Δ² + ε)` (`Δ = sⱼ² − sᵢ²`) everywhere and `S⁻¹ → s/(s² + ε)` (Liao et al.,
    ///   PRX 9, 031041 (2019)): finite, biased by `O(ε/Δ²)` relative.
    /// - **Full mode**: the complement columns `U⊥` may carry a cotangent only if
    ///   `U⊥ᴴ·Ū⊥` is Hermitian (the loss depends on `U⊥` through `U⊥·U⊥ᴴ` alone); it then
    ///   contributes `Ū ← Ū − U⊥·Ū⊥ᴴ·U`. Else [`Error::GaugeIllDefined`]. Same for `V⊥`.
    /// - **Truncated SVD**: the formula is applied to the whole thin spectrum with zero
    ///   cotangents on the discarded columns (the discarded values' cotangent goes into
    ///   `S̄`). This is the exact derivative of the truncated factors, including the term of
    ///   the discarded subspace that Francuz, Schuch & Vanhecke (PRR 7, 013237 (2025)) add to
    ///   the rank-`r` formula; they obtain it from `A` and the kept factors by a Sylvester
    ///   solve, for algorithms that never compute the discarded part, which this dense
    ///   decomposition has anyway. With [`RuleOptions::discarded_term`] off, the rank-`r`
    ///   formula alone (the factors as if `A` had rank `r`), which is what most codes used
    ///   before; its error is of first order in `s_{r+1}/s_r`.
    ///
    /// # Errors
    /// Shapes and dtypes of the cotangents ([`Error::ShapeMismatch`],
    /// [`Error::DTypeMismatch`]); [`Error::GaugeIllDefined`] as above;
    /// [`Error::InvalidArgument`] for a discarded cotangent without the discarded term.
    pub fn pullback(&self, cot: SvdCotangents<'_, B::Tensor>) -> Result<B::Tensor> {
        let h = by_dtype!(self.dtype, pullback_host::<B>(self, &cot))?;
        self.be.from_host(h)
    }

    /// Second order (forward-over-reverse): `(Ā, Ā̇)`, the cotangent of
    /// [`pullback`](SvdPullback::pullback) and its tangent along the direction `Ȧ` of `A` and
    /// the tangents `cot_dot` of the cotangents (`Ū̇`, `S̄̇`, `V̄ḣ`, the discarded values'; an
    /// absent one is zero). For `φ(A) = Re⟨Ū, U⟩ + ⟨S̄, S⟩ + Re⟨V̄h, Vh⟩` whose cotangents
    /// depend on `A` through the factors (`|U|`, `U·Vh`, …), `Ā̇` with `cot_dot` the
    /// cotangents' tangent along the path is the Hessian-vector product `H_φ·Ȧ`. The
    /// cotangents' tangents must be those of the gauge [`svd_frule`] moves the factors in
    /// (take them from its tangents), and the loss gauge-invariant, as for the first order.
    ///
    /// With the thin factors' tangents `U̇`, `Ṡ`, `V̇` of [`svd_frule`], `J̇ = U̇ᴴ·Ū + Uᴴ·Ū̇`,
    /// `K̇ = V̇ᴴ·V̄ + Vᴴ·V̄̇`, `Ḟᵢⱼ = f'(Δᵢⱼ)·2(sⱼṡⱼ − sᵢṡᵢ)` (`f(Δ) = 1/Δ`, or `Δ/(Δ² + ε)`
    /// with broadening; 0 for degenerate pairs, as `F`), `g(s) = 1/s` (or `s/(s² + ε)`),
    /// `ġ = g'(s)·ṡ`, and `P` the bracket of [`pullback`](SvdPullback::pullback)
    /// (`Ā = U·P·Vᴴ + (Ū − U·J)·G·Vᴴ + U·G·(V̄ − V·K)ᴴ`, `G = diag(g)`): every factor of
    /// every term differentiated by the product rule, e.g. `Ṗᵢⱼ = [(J̇ − J̇ᴴ)ᵢⱼsⱼ +
    /// (J − Jᴴ)ᵢⱼṡⱼ + ṡᵢ(K − Kᴴ)ᵢⱼ + sᵢ(K̇ − K̇ᴴ)ᵢⱼ]·Fᵢⱼ + [(J − Jᴴ)ᵢⱼsⱼ + sᵢ(K − Kᴴ)ᵢⱼ]·Ḟᵢⱼ`
    /// (Pearlmutter's `R{·}` operator on Townsend's pullback, as JAX's `jvp` of `vjp`).
    /// Full mode differentiates the complement fold `Ū − U⊥·Ū⊥ᴴ·U` with
    /// `U̇⊥ = −U·U̇ᴴ·U⊥`; the truncated SVD differentiates the formula it applies (the whole
    /// spectrum's with the discarded term, the rank-`r` one without: then `Ā̇` is the exact
    /// tangent of that approximate pullback). With a broadening `ε` the factors' tangents are
    /// broadened as in [`svd_frule`] (so should the cotangents' be): finite at degeneracies,
    /// and biased by a relative `O(ε/δ²)` (`δ²` the smallest gap `sⱼ² − sᵢ²` or `sᵢ²`), like
    /// the first order. Derivation in [`crate::math`], "Second order of the SVD and QR".
    ///
    /// # Errors
    /// Those of [`pullback`](SvdPullback::pullback); shapes and dtypes of `a_dot` and of the
    /// cotangents' tangents (named `u_bar_dot`, …).
    pub fn pullback_tangent(
        &self,
        cot: SvdCotangents<'_, B::Tensor>,
        a_dot: &B::Tensor,
        cot_dot: SvdCotangents<'_, B::Tensor>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let [bar, dot] = by_dtype!(
            self.dtype,
            pullback_tangent_t::<B>(self, &cot, a_dot, &cot_dot)
        )?;
        Ok((self.be.from_host(bar)?, self.be.from_host(dot)?))
    }
}

/// The cotangents of one call (or their tangents: `suffix` `"_dot"` names them so in errors),
/// on the host, one entry per matrix of the batch.
struct Cots<T> {
    u: Option<Vec<Mat<T>>>,
    vh: Option<Vec<Mat<T>>>,
    s: Option<Vec<Vec<f64>>>,
    discarded: Option<Vec<Vec<f64>>>,
}

fn parse_cots<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &SvdCotangents<'_, B::Tensor>,
    suffix: &str,
) -> Result<Cots<T>> {
    let be = &pb.be;
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let dt = T::DTYPE;
    let (ku, kv, keep) = match pb.kind {
        Kind::Thin => (k, k, k),
        Kind::Full => (m, n, k),
        Kind::Truncated { rank } => (rank, rank, rank),
    };
    let with =
        |d: &[usize]| -> Vec<usize> { batch.iter().copied().chain(d.iter().copied()).collect() };
    let mat = |t: Option<&B::Tensor>, d: [usize; 2], name: &str| -> Result<Option<Vec<Mat<T>>>> {
        let name = format!("{name}{suffix}");
        t.map(|t| host_arg(be, t, &with(&d), dt, &name).and_then(|h| split::<T>(&h, &name, false)))
            .transpose()
    };
    let vec = |t: &B::Tensor, len: usize, name: &str| -> Result<Vec<Vec<f64>>> {
        let h = host_arg(be, t, &with(&[len]), dt.real(), &format!("{name}{suffix}"))?;
        Ok(split_real(&h, len))
    };
    let u = mat(cot.u, [m, ku], "u_bar")?;
    let vh = mat(cot.vh, [kv, n], "vh_bar")?;
    let s = cot.s.map(|t| vec(t, keep, "s_bar")).transpose()?;
    let discarded = match (cot.discarded, pb.kind) {
        (None, _) => None,
        (Some(t), Kind::Truncated { rank }) => {
            if !pb.opts.discarded_term {
                return Err(Error::invalid(
                    format!("discarded_bar{suffix}"),
                    "a cotangent of the discarded singular values needs the discarded term \
                     (RuleOptions::discarded_term)",
                ));
            }
            Some(vec(t, k - rank, "discarded_bar")?)
        }
        (Some(_), _) => {
            return Err(Error::invalid(
                format!("discarded_bar{suffix}"),
                "only a truncated SVD has discarded singular values",
            ));
        }
    };
    Ok(Cots {
        u,
        vh,
        s,
        discarded,
    })
}

fn pullback_host<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &SvdCotangents<'_, B::Tensor>,
) -> Result<HostTensor> {
    pullback_t::<B, T>(pb, &parse_cots::<B, T>(pb, cot, "")?)
}

/// `Ā` for parsed cotangents (the checks of [`SvdPullback::pullback`] included).
fn pullback_t<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &Cots<T>,
) -> Result<HostTensor> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let [u_h, s_h, vh_h] = &*pb.factors;
    let Cots {
        u: ubar,
        vh: vhbar,
        s: sbar,
        discarded: dbar,
    } = cot;
    let us = split::<T>(u_h, "u", false)?;
    let vhs = split::<T>(vh_h, "vh", false)?;
    let svals = split_real(s_h, k);
    let mut out = Vec::with_capacity(us.len());
    for b in 0..us.len() {
        let u_all = us[b].as_ref();
        let v_all = vhs[b].adjoint().to_owned();
        let s = &svals[b];
        let ub = ubar.as_ref().map(|x| x[b].as_ref());
        let vb = vhbar.as_ref().map(|x| x[b].adjoint().to_owned());
        let sb = sbar.as_ref().map(|x| x[b].as_slice());
        let a_bar = match pb.kind {
            Kind::Thin => svd_pullback(
                u_all,
                s,
                v_all.as_ref(),
                ub.map(|x| x.to_owned()),
                sb,
                vb,
                &pb.opts,
            )?,
            Kind::Full => {
                let u = cols(u_all, 0, k);
                let v = cols(v_all.as_ref(), 0, k);
                let ub = ub
                    .map(|x| {
                        fold_complement(
                            u.as_ref(),
                            u_all.subcols(k, m - k),
                            cols(x, 0, k),
                            x.subcols(k, m - k),
                            "svd",
                            "U",
                        )
                    })
                    .transpose()?;
                let vb = vb
                    .map(|x| {
                        fold_complement(
                            v.as_ref(),
                            v_all.as_ref().subcols(k, n - k),
                            cols(x.as_ref(), 0, k),
                            x.as_ref().subcols(k, n - k),
                            "svd",
                            "V",
                        )
                    })
                    .transpose()?;
                svd_pullback(u.as_ref(), s, v.as_ref(), ub, sb, vb, &pb.opts)?
            }
            Kind::Truncated { rank } if pb.opts.discarded_term => {
                let pad = |x: MatRef<'_, T>| hcat(x, Mat::<T>::zeros(x.nrows(), k - rank).as_ref());
                let mut s_full = vec![0.0; k];
                if let Some(sb) = sb {
                    s_full[..rank].copy_from_slice(sb);
                }
                if let Some(d) = &dbar {
                    s_full[rank..].copy_from_slice(&d[b]);
                }
                let any_s = sb.is_some() || dbar.is_some();
                svd_pullback(
                    u_all,
                    s,
                    v_all.as_ref(),
                    ub.map(pad),
                    any_s.then_some(s_full.as_slice()),
                    vb.map(|x| pad(x.as_ref())),
                    &pb.opts,
                )?
            }
            Kind::Truncated { rank } => svd_pullback(
                u_all.subcols(0, rank),
                &s[..rank],
                v_all.as_ref().subcols(0, rank),
                ub.map(|x| x.to_owned()),
                sb,
                vb,
                &pb.opts,
            )?,
        };
        out.push(a_bar);
    }
    join("a_bar", &batch, m, n, &out)
}

/// Thin factors `U: m×k`, `s`, `V: n×k`, or their tangents, cotangents or the cotangents'
/// tangents (the same shapes).
#[derive(Clone, Copy)]
struct Thin<'a, T> {
    u: MatRef<'a, T>,
    s: &'a [f64],
    v: MatRef<'a, T>,
}

/// `x` with zero columns appended up to `k`.
fn pad_cols<T: ImplicitScalar>(x: MatRef<'_, T>, k: usize) -> Mat<T> {
    hcat(x, Mat::<T>::zeros(x.nrows(), k - x.ncols()).as_ref())
}

/// `x[..r]`, zeros after, up to `k` entries.
fn pad_vec(x: &[f64], tail: Option<&[f64]>, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; k];
    out[..x.len()].copy_from_slice(x);
    if let Some(t) = tail {
        out[x.len()..x.len() + t.len()].copy_from_slice(t);
    }
    out
}

fn pullback_tangent_t<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &SvdCotangents<'_, B::Tensor>,
    a_dot: &B::Tensor,
    cot_dot: &SvdCotangents<'_, B::Tensor>,
) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let c0 = parse_cots::<B, T>(pb, cot, "")?;
    // the first order, with its checks (which the tangent below relies on)
    let bar = pullback_t::<B, T>(pb, &c0)?;
    let c1 = parse_cots::<B, T>(pb, cot_dot, "_dot")?;
    let ad = host_arg(&pb.be, a_dot, &pb.dims, T::DTYPE, "a_dot")?;
    let ads = split::<T>(&ad, "a_dot", false)?;
    let [u_h, s_h, vh_h] = &*pb.factors;
    let us = split::<T>(u_h, "u", false)?;
    let vhs = split::<T>(vh_h, "vh", false)?;
    let svals = split_real(s_h, k);
    let (ku, kv, keep) = match pb.kind {
        Kind::Thin => (k, k, k),
        Kind::Full => (m, n, k),
        Kind::Truncated { rank } => (rank, rank, rank),
    };
    // a cotangent (or its tangent) of matrix `b`, zero when absent
    let mat_u = |c: &Cots<T>, b: usize| {
        c.u.as_ref()
            .map_or_else(|| Mat::zeros(m, ku), |x| x[b].clone())
    };
    let mat_v = |c: &Cots<T>, b: usize| {
        c.vh.as_ref()
            .map_or_else(|| Mat::zeros(n, kv), |x| x[b].adjoint().to_owned())
    };
    let vec_s = |c: &Cots<T>, b: usize| {
        c.s.as_ref()
            .map_or_else(|| vec![0.0; keep], |x| x[b].clone())
    };
    let mut out = Vec::with_capacity(us.len());
    for b in 0..us.len() {
        let u_all = us[b].as_ref();
        let v_all = vhs[b].adjoint().to_owned();
        let s = svals[b].as_slice();
        let (u, v) = (u_all.subcols(0, k), v_all.as_ref().subcols(0, k));
        let (du, ds, dv) = svd_pushforward(u, s, v, ads[b].as_ref(), &pb.opts);
        let (ub, ubd) = (mat_u(&c0, b), mat_u(&c1, b));
        let (vb, vbd) = (mat_v(&c0, b), mat_v(&c1, b));
        let (sb, sbd) = (vec_s(&c0, b), vec_s(&c1, b));
        let x = Thin { u, s, v };
        let dx = Thin {
            u: du.as_ref(),
            s: &ds,
            v: dv.as_ref(),
        };
        let bar = Thin {
            u: ub.as_ref(),
            s: &sb,
            v: vb.as_ref(),
        };
        let bar_dot = Thin {
            u: ubd.as_ref(),
            s: &sbd,
            v: vbd.as_ref(),
        };
        let dot = match pb.kind {
            Kind::Thin => svd_pullback_tangent(x, dx, bar, bar_dot, &pb.opts),
            Kind::Full => {
                let (up, vp) = (u_all.subcols(k, m - k), v_all.as_ref().subcols(k, n - k));
                let dup = complement_tangent(u, du.as_ref(), up);
                let dvp = complement_tangent(v, dv.as_ref(), vp);
                let fold = |q: MatRef<'_, T>, p: MatRef<'_, T>, bar: &Mat<T>, what| {
                    let kq = q.ncols();
                    let (head, tail) = (
                        cols(bar.as_ref(), 0, kq),
                        bar.as_ref().subcols(kq, p.ncols()),
                    );
                    fold_complement(q, p, head, tail, "svd", what)
                };
                let fold_dot = |q: MatRef<'_, T>,
                                dq: MatRef<'_, T>,
                                p: MatRef<'_, T>,
                                dp: MatRef<'_, T>,
                                bar: &Mat<T>,
                                bar_dot: &Mat<T>|
                 -> Mat<T> {
                    let kq = q.ncols();
                    let (bp, bpd) = (
                        bar.as_ref().subcols(kq, p.ncols()),
                        bar_dot.as_ref().subcols(kq, p.ncols()),
                    );
                    super::fold_complement_tangent(
                        q,
                        dq,
                        p,
                        dp,
                        bp,
                        bpd,
                        cols(bar_dot.as_ref(), 0, kq),
                    )
                };
                let (ue, ved) = (fold(u, up, &ub, "U")?, fold(v, vp, &vb, "V")?);
                let ued = fold_dot(u, du.as_ref(), up, dup.as_ref(), &ub, &ubd);
                let vedd = fold_dot(v, dv.as_ref(), vp, dvp.as_ref(), &vb, &vbd);
                svd_pullback_tangent(
                    x,
                    dx,
                    Thin {
                        u: ue.as_ref(),
                        s: &sb,
                        v: ved.as_ref(),
                    },
                    Thin {
                        u: ued.as_ref(),
                        s: &sbd,
                        v: vedd.as_ref(),
                    },
                    &pb.opts,
                )
            }
            Kind::Truncated { .. } if pb.opts.discarded_term => {
                let (t0, t1) = (
                    c0.discarded.as_ref().map(|d| d[b].as_slice()),
                    c1.discarded.as_ref().map(|d| d[b].as_slice()),
                );
                let (sf, sfd) = (pad_vec(&sb, t0, k), pad_vec(&sbd, t1, k));
                let (ubp, ubdp) = (pad_cols(ub.as_ref(), k), pad_cols(ubd.as_ref(), k));
                let (vbp, vbdp) = (pad_cols(vb.as_ref(), k), pad_cols(vbd.as_ref(), k));
                svd_pullback_tangent(
                    x,
                    dx,
                    Thin {
                        u: ubp.as_ref(),
                        s: &sf,
                        v: vbp.as_ref(),
                    },
                    Thin {
                        u: ubdp.as_ref(),
                        s: &sfd,
                        v: vbdp.as_ref(),
                    },
                    &pb.opts,
                )
            }
            Kind::Truncated { rank } => svd_pullback_tangent(
                Thin {
                    u: u.subcols(0, rank),
                    s: &s[..rank],
                    v: v.subcols(0, rank),
                },
                Thin {
                    u: du.as_ref().subcols(0, rank),
                    s: &ds[..rank],
                    v: dv.as_ref().subcols(0, rank),
                },
                bar,
                bar_dot,
                &pb.opts,
            ),
        };
        out.push(dot);
    }
    Ok([bar, join("a_bar_dot", &batch, m, n, &out)?])
}

/// One matrix: `Ā̇`, the tangent of [`svd_pullback`]'s `Ā` for thin factors `x` moving
/// along `dx`, cotangents `bar` moving along `bar_dot` (the formula of
/// [`SvdPullback::pullback_tangent`]). The checks are [`svd_pullback`]'s, made before.
///
/// It runs in units of `c` (a power of two near `s₀`): for `A = c·A'`, the gradient of
/// `φ(A) = ψ(A')` is `∇ψ(A')/c`, where `ψ` has the same `Ū`, `V̄` and `c·S̄`, and its tangent
/// along `Ȧ` is `ψ`'s along `Ȧ/c` divided by `c` (`U̇`, `V̇` unchanged, `ṡ' = ṡ/c`).
fn svd_pullback_tangent<T: ImplicitScalar>(
    x: Thin<'_, T>,
    dx: Thin<'_, T>,
    bar: Thin<'_, T>,
    bar_dot: Thin<'_, T>,
    opts: &RuleOptions,
) -> Mat<T> {
    let (m, k) = x.u.shape();
    let n = x.v.nrows();
    let mut out = Mat::<T>::zeros(m, n);
    if k == 0 {
        return out;
    }
    let sc = Scaled::new(x.s, opts.broadening);
    let (s, s0, c) = (sc.s.as_slice(), sc.s0, sc.c);
    let ds: Vec<f64> = dx.s.iter().map(|v| v / c).collect();
    let sb: Vec<f64> = bar.s.iter().map(|v| v * c).collect();
    let sbd: Vec<f64> = bar_dot.s.iter().map(|v| v * c).collect();
    let rtol = opts.rtol::<T>(m.min(n));
    let (u, v, du, dv) = (x.u, x.v, dx.u, dx.v);
    let one = T::one();
    let j = mm(u.adjoint(), bar.u);
    let kk = mm(v.adjoint(), bar.v);
    let mut jd = mm(du.adjoint(), bar.u);
    mm_add(&mut jd, one, u.adjoint(), bar_dot.u);
    let mut kd = mm(dv.adjoint(), bar.v);
    mm_add(&mut kd, one, v.adjoint(), bar_dot.v);
    let g: Vec<f64> = s
        .iter()
        .map(|&x| inv_s(x, s0, rtol, sc.eb_s).unwrap_or(0.0))
        .collect();
    let gd: Vec<f64> = (0..k)
        .map(|i| inv_gap_slope(s[i], rtol * s0, sc.eb_s) * ds[i])
        .collect();
    let complex = T::DTYPE.is_complex();
    let mut p = Mat::<T>::zeros(k, k);
    let mut pd = Mat::<T>::zeros(k, k);
    for i in 0..k {
        for jj in 0..k {
            if i == jj {
                p[(i, i)] = real::<T>(sb[i]);
                pd[(i, i)] = real::<T>(sbd[i]);
                if complex {
                    let ph = (im(j[(i, i)]) - im(kk[(i, i)])) / 2.0;
                    let phd = (im(jd[(i, i)]) - im(kd[(i, i)])) / 2.0;
                    p[(i, i)] += cplx::<T>(0.0, ph * g[i]);
                    pd[(i, i)] += cplx::<T>(0.0, phd * g[i] + ph * gd[i]);
                }
                continue;
            }
            let a = j[(i, jj)] - cj(j[(jj, i)]);
            let bq = kk[(i, jj)] - cj(kk[(jj, i)]);
            let ad = jd[(i, jj)] - cj(jd[(jj, i)]);
            let bd = kd[(i, jj)] - cj(kd[(jj, i)]);
            let num = a * real::<T>(s[jj]) + real::<T>(s[i]) * bq;
            let num_dot = ad * real::<T>(s[jj])
                + a * real::<T>(ds[jj])
                + real::<T>(ds[i]) * bq
                + real::<T>(s[i]) * bd;
            let delta = s[jj] * s[jj] - s[i] * s[i];
            let delta_dot = 2.0 * (s[jj] * ds[jj] - s[i] * ds[i]);
            let tol = rtol * s0 * (s[i] + s[jj]);
            let f = inv_gap(delta, tol, sc.eb_gap).unwrap_or(0.0);
            let fd = inv_gap_slope(delta, tol, sc.eb_gap) * delta_dot;
            p[(i, jj)] = num * real::<T>(f);
            pd[(i, jj)] = num_dot * real::<T>(f) + num * real::<T>(fd);
        }
    }
    // Ā = U·P·Vᴴ + …: U̇·P·Vᴴ + U·Ṗ·Vᴴ + U·P·V̇ᴴ
    let t = mm(p.as_ref(), v.adjoint());
    mm_add(&mut out, one, du, t.as_ref());
    let t = mm(pd.as_ref(), v.adjoint());
    mm_add(&mut out, one, u, t.as_ref());
    let t = mm(p.as_ref(), dv.adjoint());
    mm_add(&mut out, one, u, t.as_ref());
    // the out-of-span terms, (Ū − U·J)·G·Vᴴ and U·G·(V̄ − V·K)ᴴ, and their tangents
    if m > k {
        let (wg, wg_dot) = out_of_span([u, du], [bar.u, bar_dot.u], [&j, &jd], [&g, &gd]);
        mm_add(&mut out, one, wg_dot.as_ref(), v.adjoint());
        mm_add(&mut out, one, wg.as_ref(), dv.adjoint());
    }
    if n > k {
        let (wg, wg_dot) = out_of_span([v, dv], [bar.v, bar_dot.v], [&kk, &kd], [&g, &gd]);
        mm_add(&mut out, one, u, wg_dot.adjoint());
        mm_add(&mut out, one, du, wg.adjoint());
    }
    unscaled(out.as_ref(), c)
}

/// `(W·G, Ẇ·G + W·Ġ)` for `W = X̄ − X·J` (the part of a cotangent outside span `X`),
/// `Ẇ = X̄̇ − Ẋ·J − X·J̇`, `G = diag(g)`, `Ġ = diag(ġ)`: one side of the SVD pullback's
/// out-of-span terms and its tangent.
fn out_of_span<T: ImplicitScalar>(
    [x, x_dot]: [MatRef<'_, T>; 2],
    [bar, bar_dot]: [MatRef<'_, T>; 2],
    [j, j_dot]: [&Mat<T>; 2],
    [g, g_dot]: [&[f64]; 2],
) -> (Mat<T>, Mat<T>) {
    let one = T::one();
    let mut w = bar.to_owned();
    mm_add(&mut w, -one, x, j.as_ref());
    let mut wd = bar_dot.to_owned();
    mm_add(&mut wd, -one, x_dot, j.as_ref());
    mm_add(&mut wd, -one, x, j_dot.as_ref());
    let wg = Mat::from_fn(w.nrows(), w.ncols(), |r, i| w[(r, i)] * real::<T>(g[i]));
    let wg_dot = Mat::from_fn(w.nrows(), w.ncols(), |r, i| {
        wd[(r, i)] * real::<T>(g[i]) + w[(r, i)] * real::<T>(g_dot[i])
    });
    (wg, wg_dot)
}

/// Singular values in units of a power of two `c` near the largest, with the broadening in
/// the same units (`ε/c⁴` for the gaps of squares, `ε/c²` for the values).
struct Scaled {
    s: Vec<f64>,
    s0: f64,
    c: f64,
    eb_gap: f64,
    eb_s: f64,
}

impl Scaled {
    fn new(s: &[f64], broadening: f64) -> Self {
        let c = pow2_scale(s.iter().fold(0.0f64, |a, &b| a.max(b)));
        let s: Vec<f64> = s.iter().map(|x| x / c).collect();
        let s0 = s.iter().fold(0.0f64, |a, &b| a.max(b));
        let per = |p: i32| {
            if broadening == 0.0 {
                0.0
            } else {
                broadening / c.powi(p)
            }
        };
        Scaled {
            s0,
            c,
            eb_gap: per(4),
            eb_s: per(2),
            s,
        }
    }
}

/// The inverse of a singular value in the rules: `1/s`, `s/(s² + ε)` with broadening, and
/// `None` for a zero one (at most `rtol·s₀`) without broadening.
fn inv_s(s: f64, s0: f64, rtol: f64, broadening: f64) -> Option<f64> {
    if broadening > 0.0 {
        Some(s / (s * s + broadening))
    } else if s <= rtol * s0 {
        None
    } else {
        Some(1.0 / s)
    }
}

/// `1/Δ` for a gap `Δ` of the spectrum, `Δ/(Δ² + ε)` with broadening, `None` for a
/// degenerate pair (`|Δ| ≤ tol`) without broadening.
pub(crate) fn inv_gap(delta: f64, tol: f64, broadening: f64) -> Option<f64> {
    if broadening > 0.0 {
        Some(delta / (delta * delta + broadening))
    } else if delta.abs() <= tol {
        None
    } else {
        Some(1.0 / delta)
    }
}

/// The derivative of [`inv_gap`] at `delta` (0 where it is `None`).
pub(crate) fn inv_gap_slope(delta: f64, tol: f64, broadening: f64) -> f64 {
    if broadening > 0.0 {
        let d2 = delta * delta;
        (broadening - d2) / ((d2 + broadening) * (d2 + broadening))
    } else if delta.abs() <= tol {
        0.0
    } else {
        -1.0 / (delta * delta)
    }
}

/// One matrix: `Ā` from thin factors `U: m×k`, `s`, `V: n×k` (any `k ≤ min(m, n)`) and the
/// cotangents `Ū: m×k`, `S̄`, `V̄: n×k` (the formula of [`SvdPullback::pullback`]).
fn svd_pullback<T: ImplicitScalar>(
    u: MatRef<'_, T>,
    s: &[f64],
    v: MatRef<'_, T>,
    ubar: Option<Mat<T>>,
    sbar: Option<&[f64]>,
    vbar: Option<Mat<T>>,
    opts: &RuleOptions,
) -> Result<Mat<T>> {
    let (m, k) = u.shape();
    let n = v.nrows();
    let mut a_bar = Mat::<T>::zeros(m, n);
    if k == 0 {
        return Ok(a_bar);
    }
    // singular values in units of c (a power of two near s₀), so that their squares neither
    // overflow nor underflow. Ā = U·diag(S̄)·Vᴴ + Ā₁/c: the first term is homogeneous of
    // degree 0 in the scale of A, every other one (through 1/s and s/Δ) of degree −1, and
    // is formed in those units (Ā₁) and divided by c once at the end (1/c may overflow).
    let sc = Scaled::new(s, opts.broadening);
    let (s, s0, c) = (sc.s.as_slice(), sc.s0, sc.c);
    let rtol = opts.rtol::<T>(m.min(n));
    let j = ubar
        .as_ref()
        .map_or_else(|| Mat::zeros(k, k), |x| mm(u.adjoint(), x.as_ref()));
    let kk = vbar
        .as_ref()
        .map_or_else(|| Mat::zeros(k, k), |x| mm(v.adjoint(), x.as_ref()));
    // the gauge checks' scale: the cotangents' size (J and K alone can be rounding-small
    // when Ū lies mostly outside span U)
    let gtol = eps::<T>().sqrt()
        * (ubar.as_ref().map_or(0.0, |x| max_abs(x.as_ref()))
            + vbar.as_ref().map_or(0.0, |x| max_abs(x.as_ref())));
    let complex = T::DTYPE.is_complex();
    if complex {
        for i in 0..k {
            let g = im(j[(i, i)]) + im(kk[(i, i)]);
            if g.abs() > gtol {
                return Err(gauge_error(
                    "svd",
                    format!(
                        "Im(diag(Uᴴ·Ū) + diag(Vᴴ·V̄)) is {g:e} at singular value {i} ({:e}): the \
                         loss depends on the phases of the singular vectors",
                        s[i] * c
                    ),
                ));
            }
        }
    }
    let stol =
        eps::<T>().sqrt() * sbar.map_or(0.0, |x| x.iter().fold(0.0f64, |a, b| a.max(b.abs())));
    let mut p = Mat::<T>::zeros(k, k);
    for i in 0..k {
        for jj in 0..k {
            if i == jj {
                continue;
            }
            let num = (j[(i, jj)] - cj(j[(jj, i)])) * real::<T>(s[jj])
                + real::<T>(s[i]) * (kk[(i, jj)] - cj(kk[(jj, i)]));
            let delta = s[jj] * s[jj] - s[i] * s[i];
            match inv_gap(delta, rtol * s0 * (s[i] + s[jj]), sc.eb_gap) {
                // num·(1/Δ) in units of c (true value: this divided by c)
                Some(f) => p[(i, jj)] = num * real::<T>(f),
                None => {
                    let (si, sj) = sbar.map_or((0.0, 0.0), |x| (x[i], x[jj]));
                    if (si - sj).abs() > stol {
                        return Err(gauge_error(
                            "svd",
                            format!(
                                "singular values {i} and {jj} are degenerate ({:e}, {:e}) and \
                                 the loss weighs them differently (S̄ = {si:e}, {sj:e}): it is \
                                 not differentiable there (a truncation through a multiplet \
                                 is one such loss)",
                                s[i] * c,
                                s[jj] * c
                            ),
                        ));
                    }
                    // a pair of zero singular values: U and V rotate independently
                    let zero_pair = s[i].max(s[jj]) <= rtol * s0;
                    let (ju, kv) = (
                        super::batch::abs(j[(i, jj)] - cj(j[(jj, i)])),
                        super::batch::abs(kk[(i, jj)] - cj(kk[(jj, i)])),
                    );
                    if super::batch::abs(num) > gtol * s[i].max(s[jj])
                        || (zero_pair && (ju > gtol || kv > gtol))
                    {
                        return Err(gauge_error(
                            "svd",
                            format!(
                                "singular values {i} and {jj} are degenerate ({:e}, {:e}) and the \
                                 loss depends on the basis of their subspace; a Lorentzian \
                                 broadening (RuleOptions::broadening) gives a finite, biased \
                                 gradient",
                                s[i] * c,
                                s[jj] * c
                            ),
                        ));
                    }
                }
            }
        }
    }
    let inv: Vec<Option<f64>> = s.iter().map(|&x| inv_s(x, s0, rtol, sc.eb_s)).collect();
    for i in 0..k {
        let mut d = T::zero();
        if complex {
            let phase = (im(j[(i, i)]) - im(kk[(i, i)])) / 2.0;
            match inv[i] {
                Some(w) => d += cplx::<T>(0.0, phase * w),
                None if phase.abs() > gtol => {
                    return Err(zero_value_error(i));
                }
                None => {}
            }
        }
        p[(i, i)] = d;
    }
    let pv = mm(p.as_ref(), v.adjoint());
    mm_add(&mut a_bar, T::one(), u, pv.as_ref());
    if let Some(ub) = &ubar
        && m > k
    {
        let mut w = ub.clone();
        mm_add(&mut w, -T::one(), u, j.as_ref());
        scale_cols(&mut w, &inv, gtol)?;
        mm_add(&mut a_bar, T::one(), w.as_ref(), v.adjoint());
    }
    if let Some(vb) = &vbar
        && n > k
    {
        let mut w = vb.clone();
        mm_add(&mut w, -T::one(), v, kk.as_ref());
        scale_cols(&mut w, &inv, gtol)?;
        mm_add(&mut a_bar, T::one(), u, w.adjoint());
    }
    // Ā = U·diag(S̄)·Vᴴ + Ā₁/c
    let mut out = unscaled(a_bar.as_ref(), c);
    if let Some(sb) = sbar {
        let sv = Mat::from_fn(k, n, |i, j| cj(v[(j, i)]) * real::<T>(sb[i]));
        mm_add(&mut out, T::one(), u, sv.as_ref());
    }
    Ok(out)
}

fn zero_value_error(i: usize) -> Error {
    gauge_error(
        "svd",
        format!(
            "singular value {i} is zero and the loss depends on its singular vectors, which any \
             unit vector of the null space can be; a Lorentzian broadening gives a finite, biased \
             gradient"
        ),
    )
}

/// Scales column `i` of `w` by `inv[i]`; a `None` (a zero singular value) needs a zero
/// column.
fn scale_cols<T: ImplicitScalar>(w: &mut Mat<T>, inv: &[Option<f64>], tol: f64) -> Result<()> {
    for (i, f) in inv.iter().enumerate() {
        let f = match f {
            Some(f) => *f,
            None if max_abs(w.as_ref().subcols(i, 1)) > tol => return Err(zero_value_error(i)),
            None => 0.0,
        };
        for r in 0..w.nrows() {
            w[(r, i)] *= real::<T>(f);
        }
    }
    Ok(())
}

/// One matrix: the tangents `(U̇: m×k, ṡ, V̇: n×k)` of thin factors for `Ȧ` (see
/// [`svd_frule`]).
fn svd_pushforward<T: ImplicitScalar>(
    u: MatRef<'_, T>,
    s: &[f64],
    v: MatRef<'_, T>,
    a_dot: MatRef<'_, T>,
    opts: &RuleOptions,
) -> (Mat<T>, Vec<f64>, Mat<T>) {
    let (m, k) = u.shape();
    let n = v.nrows();
    if k == 0 {
        return (Mat::zeros(m, 0), Vec::new(), Mat::zeros(n, 0));
    }
    let sc = Scaled::new(s, opts.broadening);
    let (s, s0, c) = (sc.s.as_slice(), sc.s0, sc.c);
    let rtol = opts.rtol::<T>(m.min(n));
    let av = mm(a_dot, v);
    let dp = mm(u.adjoint(), av.as_ref());
    let ds: Vec<f64> = (0..k).map(|i| re(dp[(i, i)])).collect();
    // U̇ and V̇ are homogeneous of degree −1 in the scale of A (ṡ of degree 0): formed in
    // units of c, divided by c at the end
    let inv: Vec<f64> = s
        .iter()
        .map(|&x| inv_s(x, s0, rtol, sc.eb_s).unwrap_or(0.0))
        .collect();
    let mut om_u = Mat::<T>::zeros(k, k);
    let mut om_v = Mat::<T>::zeros(k, k);
    for i in 0..k {
        for j in 0..k {
            if i == j {
                let phase = im(dp[(i, i)]) * inv[i] / 2.0;
                om_u[(i, i)] = cplx::<T>(0.0, phase);
                om_v[(i, i)] = cplx::<T>(0.0, -phase);
                continue;
            }
            let delta = s[j] * s[j] - s[i] * s[i];
            if let Some(f) = inv_gap(delta, rtol * s0 * (s[i] + s[j]), sc.eb_gap) {
                let (x, y) = (dp[(i, j)], cj(dp[(j, i)]));
                om_u[(i, j)] = (x * real::<T>(s[j]) + real::<T>(s[i]) * y) * real::<T>(f);
                om_v[(i, j)] = (real::<T>(s[i]) * x + y * real::<T>(s[j])) * real::<T>(f);
            }
        }
    }
    let mut du = mm(u, om_u.as_ref());
    if m > k {
        let mut w = av;
        mm_add(&mut w, -T::one(), u, dp.as_ref());
        for i in 0..k {
            for r in 0..m {
                w[(r, i)] *= real::<T>(inv[i]);
            }
        }
        du += w;
    }
    let mut dv = mm(v, om_v.as_ref());
    if n > k {
        let mut w = mm(a_dot.adjoint(), u);
        mm_add(&mut w, -T::one(), v, dp.adjoint());
        for i in 0..k {
            for r in 0..n {
                w[(r, i)] *= real::<T>(inv[i]);
            }
        }
        dv += w;
    }
    (unscaled(du.as_ref(), c), ds, unscaled(dv.as_ref(), c))
}

/// The tangent of complement columns `Q⊥` for the tangent `Q̇` of the leading ones `Q`: the
/// rotation that keeps `[Q, Q⊥]` unitary with `Q⊥ᴴ·Q̇⊥ = 0`, `Q̇⊥ = −Q·Q̇ᴴ·Q⊥`.
pub(crate) fn complement_tangent<T: ImplicitScalar>(
    q: MatRef<'_, T>,
    q_dot: MatRef<'_, T>,
    perp: MatRef<'_, T>,
) -> Mat<T> {
    let t = mm(q_dot.adjoint(), perp);
    let mut out = mm(q, t.as_ref());
    for x in out.col_iter_mut() {
        for y in x.iter_mut() {
            *y = -*y;
        }
    }
    out
}

/// The SVD and its tangent for the tangent `Ȧ` of `A` (same shape).
///
/// With `dP = Uᴴ·Ȧ·V`: `Ṡ = Re diag(dP)`,
/// `U̇ = U·[F∘(dP·S + S·dPᴴ) + i·diag(Im dP)·S⁻¹/2] + (I − U·Uᴴ)·Ȧ·V·S⁻¹`,
/// `V̇ = V·[F∘(S·dP + dPᴴ·S) − i·diag(Im dP)·S⁻¹/2] + (I − V·Vᴴ)·Ȧᴴ·U·S⁻¹`, `V̇h = V̇ᴴ`
/// (the adjoint of [`SvdPullback::pullback`]; same `F`, broadening and sources). The phase
/// of each pair of singular vectors is split evenly between `U` and `V`; for degenerate
/// pairs (without broadening) `Fᵢⱼ = 0`, for zero singular values `S⁻¹ → 0`, and in full
/// mode `U̇⊥ = −U·U̇ᴴ·U⊥`: gauge choices, exact for the tangent of any gauge-invariant
/// function of the factors.
///
/// # Errors
/// As [`svd`]; shape or dtype of `a_dot`.
pub fn svd_frule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    a_dot: &B::Tensor,
    mode: SvdMode,
    opts: RuleOptions,
) -> Result<(Svd<B>, Svd<B>)> {
    opts.validate()?;
    let out = svd(be, a, mode)?;
    let factors = [
        be.to_host(&out.u)?,
        be.to_host(&out.s)?,
        be.to_host(&out.vh)?,
    ];
    let dims = be.dims(a).to_vec();
    let dot = host_arg(be, a_dot, &dims, be.dtype(a), "a_dot")?;
    let [u, s, vh] = by_dtype!(
        be.dtype(a),
        frule_t(&factors, &dot, mode == SvdMode::Full, &opts)
    )?;
    Ok((
        out,
        Svd {
            u: be.from_host(u)?,
            s: be.from_host(s)?,
            vh: be.from_host(vh)?,
        },
    ))
}

/// The truncated SVD and its tangent (the leading `r` columns of the whole spectrum's
/// tangent, exact; `discarded` holds the discarded values' tangent).
///
/// # Errors
/// As [`svd_truncated`]; shape or dtype of `a_dot`.
pub fn svd_truncated_frule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    a_dot: &B::Tensor,
    truncation: Truncation,
    opts: RuleOptions,
) -> Result<(TruncatedSvd<B>, TruncatedSvd<B>)> {
    let (out, pb) = svd_truncated_rrule(be, a, truncation, opts)?;
    let dot = host_arg(be, a_dot, &pb.dims, pb.dtype, "a_dot")?;
    let rank = out.rank;
    let [u, s, vh] = by_dtype!(pb.dtype, frule_t(&pb.factors, &dot, false, &opts))?;
    let head = by_dtype!(pb.dtype, truncate_t(&[u, s, vh], rank))?;
    let [u, s, vh, d] = head.map(|h| be.from_host(h));
    let tangent = TruncatedSvd {
        svd: Svd {
            u: u?,
            s: s?,
            vh: vh?,
        },
        discarded: d?,
        rank,
    };
    Ok((out, tangent))
}

fn frule_t<T: ImplicitScalar>(
    factors: &[HostTensor; 3],
    a_dot: &HostTensor,
    full: bool,
    opts: &RuleOptions,
) -> Result<[HostTensor; 3]> {
    let [u_h, s_h, vh_h] = factors;
    let (batch, m, n) = matrix_dims(a_dot.dims(), "a_dot")?;
    let k = m.min(n);
    let us = split::<T>(u_h, "u", false)?;
    let vhs = split::<T>(vh_h, "vh", false)?;
    let svals = split_real(s_h, k);
    let dots = split::<T>(a_dot, "a_dot", false)?;
    let (mut dus, mut dss, mut dvhs) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..dots.len() {
        let u_all = us[b].as_ref();
        let v_all = vhs[b].adjoint().to_owned();
        let u = u_all.subcols(0, k);
        let v = v_all.as_ref().subcols(0, k);
        let (mut du, ds, mut dv) = svd_pushforward(u, &svals[b], v, dots[b].as_ref(), opts);
        if full {
            let du_p = complement_tangent(u, du.as_ref(), u_all.subcols(k, m - k));
            let dv_p = complement_tangent(v, dv.as_ref(), v_all.as_ref().subcols(k, n - k));
            du = hcat(du.as_ref(), du_p.as_ref());
            dv = hcat(dv.as_ref(), dv_p.as_ref());
        }
        dus.push(du);
        dss.push(ds);
        dvhs.push(dv.adjoint().to_owned());
    }
    let (ku, kv) = if full { (m, n) } else { (k, k) };
    Ok([
        join("u_dot", &batch, m, ku, &dus)?,
        join_real("s_dot", &batch, k, &dss, T::DTYPE.real())?,
        join("vh_dot", &batch, kv, n, &dvhs)?,
    ])
}
