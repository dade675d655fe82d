//! QR decomposition, reduced and complete, for tall, square and wide matrices, with pullback
//! and pushforward.

use std::sync::Arc;

use faer::{Mat, MatRef};

use super::batch::{by_dtype, matrix_dims, split};
use super::common::{
    abs, cj, cols, complement_tangent, fold_complement, fold_complement_tangent, hcat, max_abs, mm,
    mm_add, pow2_scale, re, real, unscaled,
};
use super::driver::{host_mats, per_matrix, try_map};
use super::host::QrMode;
use super::host_arg;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::scalar::{DType, ImplicitScalar, eps};

mod rules;
mod second;

use rules::{qr_pullback, qr_pushforward};
use second::qr_pullback_tangent_t;

/// The factors `A = Q·R`, `Q` with orthonormal columns and `R` upper triangular (upper
/// trapezoidal when wide) with a **real, non-negative diagonal**. That fixes the gauge
/// (`Q → Q·D`, `R → Dᴴ·R` for a diagonal unitary `D`): for `A` whose leading `k` columns
/// are independent this QR is unique and smooth in `A`, so the factors and their
/// derivatives are functions of `A`. LAPACK's `geqrf` (PyTorch, NumPy) gives `Rᵢᵢ` the sign
/// opposite to its Householder pivot's real part instead: its factors differ from these by
/// the sign of some columns of `Q` (rows of `R`), and jump where a pivot's real part
/// changes sign. Or the tangents, from [`qr_frule`].
#[derive(Clone, Debug)]
pub struct Qr<B: Backend> {
    /// `Q`
    pub q: B::Tensor,
    /// `R`
    pub r: B::Tensor,
}

/// The pullback of [`qr_rrule`].
#[derive(Clone, Debug)]
pub struct QrPullback<B: Backend> {
    pub(super) be: B,
    mode: QrMode,
    dims: Vec<usize>,
    pub(super) dtype: DType,
    factors: Arc<[HostTensor; 2]>,
}

/// `A = Q·R` by the backend's [`Backend::qr`] (faer on the host unless the backend has its
/// own).
///
/// # Errors
/// [`Error::RankMismatch`] for a rank below 2, [`Error::InvalidArgument`] for a non-finite
/// entry.
pub fn qr<B: Backend>(be: &B, a: &B::Tensor, mode: QrMode) -> Result<Qr<B>> {
    let [q, r] = be.qr(a, mode)?;
    Ok(Qr { q, r })
}

/// The QR decomposition and its pullback.
///
/// # Errors
/// As [`qr`].
pub fn qr_rrule<B: Backend>(be: &B, a: &B::Tensor, mode: QrMode) -> Result<(Qr<B>, QrPullback<B>)> {
    let out = qr(be, a, mode)?;
    let factors = try_map([&out.q, &out.r], |t| be.to_host(t))?;
    let pb = QrPullback {
        be: be.clone(),
        mode,
        dims: be.dims(a).to_vec(),
        dtype: be.dtype(a),
        factors: Arc::new(factors),
    };
    Ok((out, pb))
}

impl<B: Backend> QrPullback<B> {
    /// `Ā` from `Q̄` and `R̄` (an absent one is zero).
    ///
    /// For `m ≥ n` (`R` square, `k = n`): with `M = R̄·Rᴴ − Qᴴ·Q̄` and
    /// `M̃ = triu(M, 1) + triu(M, 1)ᴴ + Re diag(M)`,
    /// `Ā = (Q̄ + Q·M̃)·R⁻ᴴ` (Walter & Lehmann, "Algorithmic differentiation of linear
    /// algebra functions with application in optimum experimental design" (2018); Liao et
    /// al., PRX 9, 031041 (2019); PyTorch's `linalg_qr_backward`; the real diagonal is the
    /// gauge of [`Qr`]). For `m < n`, `A = [X, Y]` with `X = Q·R₁` square and `R₂ = Qᴴ·Y`:
    /// `Ȳ = Q·R̄₂` and `X̄` is the square formula for `Q̄ − Q·R̄₂·R₂ᴴ` and `R̄₁`. Derivation in
    /// [`crate::math`].
    ///
    /// In complete mode with `m > n`, the complement columns `Q⊥` may carry a cotangent only
    /// when `Q⊥ᴴ·Q̄⊥` is Hermitian; it contributes `Q̄ ← Q̄ − Q⊥·Q̄⊥ᴴ·Q`. The zero rows of `R`
    /// are constants: their cotangent is ignored.
    ///
    /// # Errors
    /// Shapes and dtypes of the cotangents; [`Error::Singular`] when `R₁` has a zero pivot
    /// (a rank-deficient `A`, whose `Q` is not differentiable); [`Error::GaugeIllDefined`]
    /// for a complement cotangent as above.
    pub fn pullback(
        &self,
        q_bar: Option<&B::Tensor>,
        r_bar: Option<&B::Tensor>,
    ) -> Result<B::Tensor> {
        let h = by_dtype!(self.dtype, qr_pullback_host::<B>(self, q_bar, r_bar))?;
        self.be.from_host(h)
    }

    /// Second order (forward-over-reverse): `(Ā, Ā̇)`, the cotangent of
    /// [`pullback`](QrPullback::pullback) and its tangent along the direction `Ȧ` of `A` and
    /// the tangents `Q̄̇`, `R̄̇` of the cotangents (an absent one is zero): the
    /// Hessian-vector product `H_φ·Ȧ` of `φ(A) = Re⟨Q̄, Q⟩ + Re⟨R̄, R⟩`, with `Q̄̇`, `R̄̇` the
    /// cotangents' tangents along the path when they depend on `A`.
    ///
    /// With `Q̇`, `Ṙ` from [`qr_frule`] and the pullback's intermediates (`Q̄' = Q̄ − Q·R̄₂·R₂ᴴ`,
    /// `M = R̄₁·R₁ᴴ − Qᴴ·Q̄'`, `B = Q̄' + Q·M̃`, `X̄ = B·R₁⁻ᴴ`, `Ȳ = Q·R̄₂`), by the product
    /// rule: `Q̄̇' = Q̄̇ − Q̇·R̄₂·R₂ᴴ − Q·R̄̇₂·R₂ᴴ − Q·R̄₂·Ṙ₂ᴴ`,
    /// `Ṁ = R̄̇₁·R₁ᴴ + R̄₁·Ṙ₁ᴴ − Q̇ᴴ·Q̄' − Qᴴ·Q̄̇'`, `Ṁ̃` (the same symmetrisation, linear),
    /// `Ḃ = Q̄̇' + Q̇·M̃ + Q·Ṁ̃`, `X̄̇ = (Ḃ − X̄·Ṙ₁ᴴ)·R₁⁻ᴴ` (from `X̄·R₁ᴴ = B`) and
    /// `Ȳ̇ = Q̇·R̄₂ + Q·R̄̇₂` (Pearlmutter's `R{·}` operator on the pullback, as JAX's `jvp` of
    /// `vjp`). Complete mode differentiates the complement fold with `Q̇⊥ = −Q·Q̇ᴴ·Q⊥`.
    /// Derivation in [`crate::math`], "Second order of the SVD and QR".
    ///
    /// # Errors
    /// Those of [`pullback`](QrPullback::pullback); shapes and dtypes of `a_dot`,
    /// `q_bar_dot` and `r_bar_dot`.
    pub fn pullback_tangent(
        &self,
        q_bar: Option<&B::Tensor>,
        r_bar: Option<&B::Tensor>,
        a_dot: &B::Tensor,
        q_bar_dot: Option<&B::Tensor>,
        r_bar_dot: Option<&B::Tensor>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let hosts = by_dtype!(
            self.dtype,
            qr_pullback_tangent_t::<B>(self, [q_bar, r_bar], a_dot, [q_bar_dot, r_bar_dot])
        )?;
        let [bar, dot] = try_map(hosts, |h| self.be.from_host(h))?;
        Ok((bar, dot))
    }
}

/// `[Q̄, R̄]` (or their tangents: `suffix` `"_dot"` names them so in errors) on the host,
/// one matrix per entry of the batch, shapes checked (`[batch…, m, kq]`, `[batch…, kq, n]`).
fn qr_cotangents<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    [q, r]: [Option<&B::Tensor>; 2],
    suffix: &str,
) -> Result<[Option<Vec<Mat<T>>>; 2]> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let kq = if pb.mode == QrMode::Complete {
        m
    } else {
        m.min(n)
    };
    let arg = |t: Option<&B::Tensor>, d: [usize; 2], name: &str| -> Result<Option<Vec<Mat<T>>>> {
        t.map(|t| host_mats(&pb.be, t, &batch, d, &format!("{name}{suffix}")))
            .transpose()
    };
    Ok([arg(q, [m, kq], "q_bar")?, arg(r, [kq, n], "r_bar")?])
}

fn qr_pullback_host<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    q_bar: Option<&B::Tensor>,
    r_bar: Option<&B::Tensor>,
) -> Result<HostTensor> {
    qr_pullback_t::<B, T>(pb, &qr_cotangents::<B, T>(pb, [q_bar, r_bar], "")?)
}

/// `Ā` for parsed cotangents `[Q̄, R̄]` (the checks of [`QrPullback::pullback`] included).
fn qr_pullback_t<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    [qb, rb]: &[Option<Vec<Mat<T>>>; 2],
) -> Result<HostTensor> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let complete = pb.mode == QrMode::Complete;
    let [q_h, r_h] = &*pb.factors;
    let qs = split::<T>(q_h, "q", false)?;
    let rs = split::<T>(r_h, "r", false)?;
    per_matrix::<T, _>(&batch, ("a_bar", m, n), |b| {
        let q_all = qs[b].as_ref();
        let q = q_all.subcols(0, k);
        let r = rs[b].as_ref().subrows(0, k);
        let qbar = qb
            .as_ref()
            .map(|x| {
                let x = x[b].as_ref();
                if complete && m > k {
                    fold_complement(
                        q,
                        q_all.subcols(k, m - k),
                        cols(x, 0, k),
                        x.subcols(k, m - k),
                        "qr",
                        "Q",
                    )
                } else {
                    Ok(x.to_owned())
                }
            })
            .transpose()?;
        let rbar = rb.as_ref().map(|x| x[b].as_ref().subrows(0, k).to_owned());
        // In units of c (a power of two near max|R|), R' = R/c: the pullback is linear in
        // the cotangents, its R̄ part homogeneous of degree 0 in the scale of A and its Q̄
        // part of degree −1, Ā = Ā(0, R̄; R') + Ā(Q̄, 0; R')/c, so that no product in the
        // triangular solves leaves the range when R is tiny or huge.
        let c = pow2_scale(max_abs(r));
        let r1 = unscaled(r, c);
        let mut a_bar = match rbar {
            Some(rbar) => qr_pullback(q, r1.as_ref(), None, Some(rbar))?,
            None => Mat::zeros(m, n),
        };
        if let Some(qbar) = qbar {
            let part = qr_pullback(q, r1.as_ref(), Some(qbar), None)?;
            a_bar += unscaled(part.as_ref(), c);
        }
        Ok(a_bar)
    })
}

/// The QR decomposition and its tangent for `Ȧ`: with `Ẋ` the first `k` columns of `Ȧ`,
/// `C = Qᴴ·Ẋ·R₁⁻¹`, `T = triu(C, 1) + tril(C, −1)ᴴ + Re diag(C)`:
/// `Ṙ₁ = T·R₁`, `Q̇ = Ẋ·R₁⁻¹ − Q·T`, and for wide `A`, `Ṙ₂ = Qᴴ·(Ẏ − Q̇·R₂)`; in complete
/// mode `Q̇⊥ = −Q·Q̇ᴴ·Q⊥` (a gauge choice). The adjoint of [`QrPullback::pullback`].
///
/// # Errors
/// As [`qr`]; shape or dtype of `a_dot`; [`Error::Singular`] for a rank-deficient `A`.
pub fn qr_frule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    a_dot: &B::Tensor,
    mode: QrMode,
) -> Result<(Qr<B>, Qr<B>)> {
    let out = qr(be, a, mode)?;
    let factors = try_map([&out.q, &out.r], |t| be.to_host(t))?;
    let dot = host_arg(be, a_dot, &be.dims(a), be.dtype(a), "a_dot")?;
    let tangents = by_dtype!(be.dtype(a), qr_frule_t(&factors, &dot, mode))?;
    let [q, r] = try_map(tangents, |h| be.from_host(h))?;
    Ok((out, Qr { q, r }))
}

fn qr_frule_t<T: ImplicitScalar>(
    factors: &[HostTensor; 2],
    a_dot: &HostTensor,
    mode: QrMode,
) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(a_dot.dims(), "a_dot")?;
    let k = m.min(n);
    let complete = mode == QrMode::Complete;
    let qs = split::<T>(&factors[0], "q", false)?;
    let rs = split::<T>(&factors[1], "r", false)?;
    let dots = split::<T>(a_dot, "a_dot", false)?;
    let (kq, kr) = if complete { (m, m) } else { (k, k) };
    per_matrix::<T, _>(&batch, (("q_dot", m, kq), ("r_dot", kr, n)), |b| {
        let q_all = qs[b].as_ref();
        let q = q_all.subcols(0, k);
        // in units of c, R' = R/c: Ṙ is homogeneous of degree 0 in the scale of A, Q̇ of −1
        let r = rs[b].as_ref().subrows(0, k);
        let c = pow2_scale(max_abs(r));
        let (dq1, mut dr) = qr_pushforward(q, unscaled(r, c).as_ref(), dots[b].as_ref())?;
        let mut dq = unscaled(dq1.as_ref(), c);
        if complete {
            let dq_p = complement_tangent(q, dq.as_ref(), q_all.subcols(k, m - k));
            dq = hcat(dq.as_ref(), dq_p.as_ref());
            dr = Mat::from_fn(m, n, |i, j| if i < k { dr[(i, j)] } else { T::zero() });
        }
        Ok((dq, dr))
    })
}
