//! Singular value decomposition: thin, full and truncated, with pullback and pushforward.

use std::sync::Arc;

use faer::{Accum, Mat, MatRef};

use super::batch::{RowMajor, Views, by_dtype, matrix_dims, split, split_real};
use super::common::{
    cj, cols, complement_tangent, cplx, fold_complement, fold_complement_tangent, gauge_error,
    hcat, im, inv_gap, inv_gap_slope, max_abs, mm, mm_add, mm_to, pow2_scale, re, real,
    reciprocal_factors, unscale, unscaled,
};
use super::driver::{host_matrices, host_mats, host_reals, per_matrix, try_map};
use super::host::SvdMode;
use super::{RuleOptions, host_arg};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::scalar::{DType, ImplicitScalar, eps};

mod rules;
mod second;

use rules::{svd_pullback, svd_pushforward};
use second::pullback_tangent_t;

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
                format!("must be finite and ≥ 0, got {:?}", self.rtol),
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
    pub(super) be: B,
    kind: Kind,
    opts: RuleOptions,
    /// `[batch…, m, n]` and dtype of `A`
    dims: Vec<usize>,
    pub(super) dtype: DType,
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
    let factors = try_map([&out.u, &out.s, &out.vh], |t| be.to_host(t))?;
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
    let factors = try_map([&thin.u, &thin.s, &thin.vh], |t| be.to_host(t))?;
    let k = be.dims(&thin.s).last().copied().unwrap_or(0);
    let rank = batch_rank(&factors[1], k, truncation);
    let head = by_dtype!(be.dtype(a), truncate_t(&factors, rank))?;
    let [u, s, vh, discarded] = try_map(head, |h| be.from_host(h))?;
    let out = TruncatedSvd {
        svd: Svd { u, s, vh },
        discarded,
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
    let specs = (
        ("u", m, rank),
        ("s", rank),
        ("vh", rank, n),
        ("discarded", k - rank),
    );
    per_matrix::<T, _>(&batch, specs, |b| {
        Ok((
            cols(us[b].as_ref(), 0, rank),
            svals[b][..rank].to_vec(),
            vhs[b].as_ref().subrows(0, rank).to_owned(),
            svals[b][rank..].to_vec(),
        ))
    })
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
    /// [`Error::InvalidArgument`] for a nonzero discarded cotangent without the discarded
    /// term (an all-zero one, what an engine delivers when the loss does not use the discarded
    /// values, counts as absent).
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
        let hosts = by_dtype!(
            self.dtype,
            pullback_tangent_t::<B>(self, &cot, a_dot, &cot_dot)
        )?;
        let [bar, dot] = try_map(hosts, |h| self.be.from_host(h))?;
        Ok((bar, dot))
    }
}

/// The cotangents of one call (or their tangents: `suffix` `"_dot"` names them so in errors),
/// on the host: `Ū` and `V̄h` as the checked host tensors `[batch…, rows, cols]` (read
/// through [`Views`], not copied), the vectors one entry per matrix of the batch.
struct Cots<T> {
    u: Option<HostTensor>,
    vh: Option<HostTensor>,
    s: Option<Vec<Vec<f64>>>,
    discarded: Option<Vec<Vec<f64>>>,
    _t: std::marker::PhantomData<T>,
}

/// `Ū` and `V̄h` of [`Cots`], matrix by matrix, as views of the host tensors.
type CotViews<'a, T> = (Option<Views<'a, T>>, Option<Views<'a, T>>);

impl<T: ImplicitScalar> Cots<T> {
    /// `Ū` and `V̄h`, matrix by matrix, as views of the host tensors.
    fn views(&self) -> Result<CotViews<'_, T>> {
        Ok((
            Views::of(self.u.as_ref(), "u_bar")?,
            Views::of(self.vh.as_ref(), "vh_bar")?,
        ))
    }
}

fn parse_cots<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &SvdCotangents<'_, B::Tensor>,
    suffix: &str,
) -> Result<Cots<T>> {
    let be = &pb.be;
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let (ku, kv, keep) = match pb.kind {
        Kind::Thin => (k, k, k),
        Kind::Full => (m, n, k),
        Kind::Truncated { rank } => (rank, rank, rank),
    };
    let mat = |t: Option<&B::Tensor>, d: [usize; 2], name: &str| -> Result<Option<HostTensor>> {
        t.map(|t| host_matrices::<B, T>(be, t, &batch, d, &format!("{name}{suffix}")))
            .transpose()
    };
    let vec = |t: &B::Tensor, len: usize, name: &str| -> Result<Vec<Vec<f64>>> {
        host_reals::<B, T>(be, t, &batch, len, &format!("{name}{suffix}"))
    };
    let u = mat(cot.u, [m, ku], "u_bar")?;
    let vh = mat(cot.vh, [kv, n], "vh_bar")?;
    let s = cot.s.map(|t| vec(t, keep, "s_bar")).transpose()?;
    let discarded = match (cot.discarded, pb.kind) {
        (None, _) => None,
        (Some(t), Kind::Truncated { rank }) => {
            let d = vec(t, k - rank, "discarded_bar")?;
            if pb.opts.discarded_term {
                Some(d)
            } else if d.iter().flatten().all(|&x| x == 0.0) {
                // what an engine delivers for discarded values the loss does not use
                None
            } else {
                return Err(Error::invalid(
                    format!("discarded_bar{suffix}"),
                    "a nonzero cotangent of the discarded singular values needs the discarded \
                     term (RuleOptions::discarded_term)",
                ));
            }
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
        _t: std::marker::PhantomData,
    })
}

fn pullback_host<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &SvdCotangents<'_, B::Tensor>,
) -> Result<HostTensor> {
    pullback_t::<B, T>(pb, &parse_cots::<B, T>(pb, cot, "")?)
}

/// `Ā` for parsed cotangents (the checks of [`SvdPullback::pullback`] included). The factors
/// and cotangents are read in place from their host buffers (row-major views) and `Ā` is
/// written into its own: the thin case copies no `m×n` matrix.
fn pullback_t<B: Backend, T: ImplicitScalar>(
    pb: &SvdPullback<B>,
    cot: &Cots<T>,
) -> Result<HostTensor> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let [u_h, s_h, vh_h] = &*pb.factors;
    let (ubar, vhbar) = cot.views()?;
    let (sbar, dbar) = (&cot.s, &cot.discarded);
    let us = Views::<T>::new(u_h, "u")?;
    let vhs = Views::<T>::new(vh_h, "vh")?;
    let svals = split_real(s_h, k);
    per_matrix::<T, _>(&batch, ("a_bar", m, n), |b| {
        let (u_all, vh_all) = (us.get(b), vhs.get(b));
        let s = &svals[b];
        let ub = ubar.map(|x| x.get(b));
        let vhb = vhbar.map(|x| x.get(b));
        let sb = sbar.as_ref().map(|x| x[b].as_slice());
        match pb.kind {
            Kind::Thin => svd_pullback(u_all, s, vh_all, ub, sb, vhb, &pb.opts),
            Kind::Full => {
                let u = u_all.subcols(0, k);
                let ub = ub
                    .map(|x| {
                        fold_complement(
                            u,
                            u_all.subcols(k, m - k),
                            cols(x, 0, k),
                            x.subcols(k, m - k),
                            "svd",
                            "U",
                        )
                    })
                    .transpose()?;
                // the fold is on V's columns: V and V̄ as matrices, V̄ folded back to rows
                let vhb = vhb
                    .map(|x| {
                        let (v_all, x) = (vh_all.adjoint().to_owned(), x.adjoint().to_owned());
                        fold_complement(
                            v_all.as_ref().subcols(0, k),
                            v_all.as_ref().subcols(k, n - k),
                            cols(x.as_ref(), 0, k),
                            x.as_ref().subcols(k, n - k),
                            "svd",
                            "V",
                        )
                        .map(|vb| vb.adjoint().to_owned())
                    })
                    .transpose()?;
                svd_pullback(
                    u,
                    s,
                    vh_all.subrows(0, k),
                    ub.as_ref().map(Mat::as_ref),
                    sb,
                    vhb.as_ref().map(Mat::as_ref),
                    &pb.opts,
                )
            }
            Kind::Truncated { rank } if pb.opts.discarded_term => {
                let pad_u = |x: MatRef<'_, T>| hcat(x, Mat::<T>::zeros(m, k - rank).as_ref());
                let pad_vh = |x: MatRef<'_, T>| {
                    Mat::from_fn(k, n, |i, j| if i < rank { x[(i, j)] } else { T::zero() })
                };
                let mut s_full = vec![0.0; k];
                if let Some(sb) = sb {
                    s_full[..rank].copy_from_slice(sb);
                }
                if let Some(d) = dbar {
                    s_full[rank..].copy_from_slice(&d[b]);
                }
                let any_s = sb.is_some() || dbar.is_some();
                let (ub, vhb) = (ub.map(pad_u), vhb.map(pad_vh));
                svd_pullback(
                    u_all,
                    s,
                    vh_all,
                    ub.as_ref().map(Mat::as_ref),
                    any_s.then_some(s_full.as_slice()),
                    vhb.as_ref().map(Mat::as_ref),
                    &pb.opts,
                )
            }
            Kind::Truncated { rank } => svd_pullback(
                u_all.subcols(0, rank),
                &s[..rank],
                vh_all.subrows(0, rank),
                ub,
                sb,
                vhb,
                &pb.opts,
            ),
        }
    })
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
    let factors = try_map([&out.u, &out.s, &out.vh], |t| be.to_host(t))?;
    let dot = host_arg(be, a_dot, &be.dims(a), be.dtype(a), "a_dot")?;
    let tangents = by_dtype!(
        be.dtype(a),
        frule_t(&factors, &dot, mode == SvdMode::Full, &opts)
    )?;
    let [u, s, vh] = try_map(tangents, |h| be.from_host(h))?;
    Ok((out, Svd { u, s, vh }))
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
    let [u, s, vh, discarded] = try_map(head, |h| be.from_host(h))?;
    let tangent = TruncatedSvd {
        svd: Svd { u, s, vh },
        discarded,
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
    let (ku, kv) = if full { (m, n) } else { (k, k) };
    let specs = (("u_dot", m, ku), ("s_dot", k), ("vh_dot", kv, n));
    per_matrix::<T, _>(&batch, specs, |b| {
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
        Ok((du, ds, dv.adjoint().to_owned()))
    })
}
