//! Hermitian eigendecomposition with pullback and pushforward.

use std::sync::Arc;

use faer::{Accum, Mat, MatRef};

use super::batch::{RowMajor, Views, by_dtype, matrix_dims, split, split_real};
use super::common::{
    abs, cj, gauge_error, im, inv_gap, inv_gap_slope, max_abs, mm, mm_to, pow2_scale, re, real,
    reciprocal_factors, unscaled,
};
use super::driver::{host_matrices, host_mats, host_reals, per_matrix, try_map};
use super::{RuleOptions, host_arg};
use crate::backend::Backend;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::host::HostTensor;
use crate::scalar::{DType, ImplicitScalar, eps};

mod rules;
mod second;

use rules::{eigh_pullback, in_units};
use second::eigh_pullback_tangent_t;

/// `A = V·diag(λ)·Vᴴ` for Hermitian `A: [batch…, n, n]`, eigenvalues non-decreasing; or
/// the tangents, from [`eigh_frule`].
#[derive(Clone, Debug)]
pub struct Eigh<B: Backend> {
    /// eigenvalues `[batch…, n]`, real dtype of `A`'s precision, non-decreasing
    pub values: B::Tensor,
    /// eigenvectors as columns, `[batch…, n, n]`
    pub vectors: B::Tensor,
}

/// The pullback of [`eigh_rrule`].
#[derive(Clone, Debug)]
pub struct EighPullback<B: Backend> {
    pub(super) be: B,
    opts: RuleOptions,
    dims: Vec<usize>,
    pub(super) dtype: DType,
    factors: Arc<[HostTensor; 2]>,
}

/// The eigendecomposition of Hermitian matrices by the backend's [`Backend::eigh`] (faer on
/// the host unless the backend has its own). The matrix decomposed is the Hermitian part
/// `(A + Aᴴ)/2`, so `A` and its tangents may differ from Hermitian by rounding; the rules
/// are those of that function (cotangents `Ā` are Hermitian).
///
/// # Errors
/// [`Error::RankMismatch`], [`Error::ShapeMismatch`] for a non-square matrix,
/// [`Error::InvalidArgument`] for a non-finite entry or a matrix that is not Hermitian up to
/// `√ε·max|A|`, [`Error::Backend`] when the iteration does not converge.
pub fn eigh<B: Backend>(be: &B, a: &B::Tensor) -> Result<Eigh<B>> {
    let [values, vectors] = be.eigh(a)?;
    Ok(Eigh { values, vectors })
}

/// The eigendecomposition and its pullback.
///
/// # Errors
/// As [`eigh`]; invalid `opts`.
pub fn eigh_rrule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    opts: RuleOptions,
) -> Result<(Eigh<B>, EighPullback<B>)> {
    opts.validate()?;
    let out = eigh(be, a)?;
    let factors = try_map([&out.values, &out.vectors], |t| be.to_host(t))?;
    let pb = EighPullback {
        be: be.clone(),
        opts,
        dims: be.dims(a).to_vec(),
        dtype: be.dtype(a),
        factors: Arc::new(factors),
    };
    Ok((out, pb))
}

impl<B: Backend> EighPullback<B> {
    /// `Ā` from `λ̄` and `V̄` (an absent one is zero): with `J = Vᴴ·V̄` and
    /// `Fᵢⱼ = 1/(λⱼ − λᵢ)` (`i ≠ j`, `Fᵢᵢ = 0`),
    /// `Ā = V·[F∘(J − Jᴴ)/2 + diag(λ̄)]·Vᴴ`, Hermitian (Giles, "An extended collection of
    /// matrix derivative results for forward and reverse mode AD" (2008), symmetrised for
    /// the Hermitian part; PyTorch's `linalg_eig_backward` for Hermitian input). Derivation in
    /// [`crate::math`].
    /// - **Gauge**: for complex `A`, `Im diag(J) = 0` is required (the loss must not depend on
    ///   the eigenvectors' phases), else [`Error::GaugeIllDefined`].
    /// - **Degenerate pairs** (`|λᵢ − λⱼ| ≤ rtol·max|λ|`): as for the SVD, `Fᵢⱼ = 0` when the
    ///   loss does not depend on the basis of the eigenspace, else
    ///   [`Error::GaugeIllDefined`] (also for a `λ̄` that differs within the pair: the loss
    ///   is then not differentiable); a Lorentzian broadening `ε` makes
    ///   `Fᵢⱼ = Δ/(Δ² + ε)` everywhere.
    ///
    /// # Errors
    /// Shapes and dtypes of the cotangents; [`Error::GaugeIllDefined`] as above.
    pub fn pullback(
        &self,
        values_bar: Option<&B::Tensor>,
        vectors_bar: Option<&B::Tensor>,
    ) -> Result<B::Tensor> {
        let h = by_dtype!(
            self.dtype,
            eigh_pullback_t::<B>(self, values_bar, vectors_bar)
        )?;
        self.be.from_host(h)
    }
}

impl<B: Backend> EighPullback<B> {
    /// Second order (forward-over-reverse): `(Ā, Ā̇)`, the cotangent of
    /// [`pullback`](EighPullback::pullback) and its tangent along the direction `Ȧ` of `A`
    /// and the tangents `λ̄̇`, `V̄̇` of the cotangents (an absent one is zero). The
    /// Hessian-vector product of `φ(A) = ⟨λ̄, λ(A)⟩ + Re⟨V̄, V(A)⟩` with cotangents that depend
    /// on `A` through the factors is `Ā̇` with `V̄̇` the tangent of `V̄` along the path.
    ///
    /// With `Ḣ = (Ȧ + Ȧᴴ)/2`, `dP = Vᴴ·Ḣ·V`, `λ̇ = Re diag(dP)`, `Ω = F∘dP` (the
    /// pushforward's `V̇ = V·Ω`), `J = Vᴴ·V̄` and `P = F∘(J − Jᴴ)/2 + diag(λ̄)` (so `Ā = V P Vᴴ`):
    /// `J̇ = Ωᴴ·J + Vᴴ·V̄̇`, `Ḟᵢⱼ = f'(λⱼ − λᵢ)·(λ̇ⱼ − λ̇ᵢ)` (`f(x) = 1/x`, or `x/(x² + ε)` with
    /// broadening; 0 for degenerate pairs, as `F`), `Ṗ = Ḟ∘(J − Jᴴ)/2 + F∘(J̇ − J̇ᴴ)/2 +
    /// diag(λ̄̇)`, and `Ā̇ = V·(Ω P + Ṗ + P Ωᴴ)·Vᴴ`: the product rule on `Ā = V P Vᴴ`
    /// (Pearlmutter's `R{·}` operator on Giles' pullback; JAX obtains the same by `jvp` of
    /// `vjp`). With a broadening `ε`, `Ω` is broadened as in [`eigh_frule`]: finite at
    /// degeneracies, biased by a relative `O(ε/δ²)` (`δ` the smallest gap). Derivation in
    /// [`crate::math`], "Decompositions".
    ///
    /// # Errors
    /// Those of [`pullback`](EighPullback::pullback); shapes and dtypes of `a_dot` and of
    /// the cotangents' tangents.
    pub fn pullback_tangent(
        &self,
        values_bar: Option<&B::Tensor>,
        vectors_bar: Option<&B::Tensor>,
        a_dot: &B::Tensor,
        values_bar_dot: Option<&B::Tensor>,
        vectors_bar_dot: Option<&B::Tensor>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let bar = self.pullback(values_bar, vectors_bar)?;
        let dot = by_dtype!(
            self.dtype,
            eigh_pullback_tangent_t::<B>(
                self,
                [values_bar, vectors_bar],
                a_dot,
                [values_bar_dot, vectors_bar_dot]
            )
        )?;
        Ok((bar, self.be.from_host(dot)?))
    }
}

/// `λ̄` and `V̄` (or their tangents: `suffix` `"_dot"` names them so in errors) on the host,
/// shapes checked: `λ̄` one entry per matrix of the batch (`[batch…, n]`), `V̄` the host
/// tensor `[batch…, n, n]` (read through [`Views`], not copied).
type Cotangents = (Option<Vec<Vec<f64>>>, Option<HostTensor>);

fn eigh_cotangents<B: Backend, T: ImplicitScalar>(
    pb: &EighPullback<B>,
    [l_bar, v_bar]: [Option<&B::Tensor>; 2],
    suffix: &str,
) -> Result<Cotangents> {
    let (batch, _, n) = matrix_dims(&pb.dims, "a")?;
    let be = &pb.be;
    let lb = l_bar
        .map(|t| host_reals::<B, T>(be, t, &batch, n, &format!("values_bar{suffix}")))
        .transpose()?;
    let vb = v_bar
        .map(|t| host_matrices::<B, T>(be, t, &batch, [n, n], &format!("vectors_bar{suffix}")))
        .transpose()?;
    Ok((lb, vb))
}

fn eigh_pullback_t<B: Backend, T: ImplicitScalar>(
    pb: &EighPullback<B>,
    l_bar: Option<&B::Tensor>,
    v_bar: Option<&B::Tensor>,
) -> Result<HostTensor> {
    let (batch, _, n) = matrix_dims(&pb.dims, "a")?;
    let (lb, vb) = eigh_cotangents::<B, T>(pb, [l_bar, v_bar], "")?;
    let vb = Views::<T>::of(vb.as_ref(), "vectors_bar")?;
    let lams = split_real(&pb.factors[0], n);
    let vs = Views::<T>::new(&pb.factors[1], "vectors")?;
    per_matrix::<T, _>(&batch, ("a_bar", n, n), |b| {
        eigh_pullback(
            &lams[b],
            vs.get(b),
            lb.as_ref().map(|x| x[b].as_slice()),
            vb.map(|x| x.get(b)),
            &pb.opts,
        )
    })
}

/// The eigendecomposition and its tangent for `Ȧ`: with `Ḣ = (Ȧ + Ȧᴴ)/2` and
/// `dP = Vᴴ·Ḣ·V`, `λ̇ = Re diag(dP)` and `V̇ = V·(F∘dP)` (zero phase change,
/// `diag(Vᴴ·V̇) = 0`; `Fᵢⱼ = 0` for degenerate pairs without broadening: gauge choices,
/// exact for gauge-invariant functions). The adjoint of [`EighPullback::pullback`].
///
/// # Errors
/// As [`eigh`]; shape or dtype of `a_dot`.
pub fn eigh_frule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    a_dot: &B::Tensor,
    opts: RuleOptions,
) -> Result<(Eigh<B>, Eigh<B>)> {
    opts.validate()?;
    let out = eigh(be, a)?;
    let factors = try_map([&out.values, &out.vectors], |t| be.to_host(t))?;
    let dot = host_arg(be, a_dot, &be.dims(a), be.dtype(a), "a_dot")?;
    let tangents = by_dtype!(be.dtype(a), eigh_frule_t(&factors, &dot, &opts))?;
    let [values, vectors] = try_map(tangents, |h| be.from_host(h))?;
    Ok((out, Eigh { values, vectors }))
}

fn eigh_frule_t<T: ImplicitScalar>(
    factors: &[HostTensor; 2],
    a_dot: &HostTensor,
    opts: &RuleOptions,
) -> Result<[HostTensor; 2]> {
    let (batch, _, n) = matrix_dims(a_dot.dims(), "a_dot")?;
    let lams = split_real(&factors[0], n);
    let vs = split::<T>(&factors[1], "vectors", false)?;
    let dots = split::<T>(a_dot, "a_dot", false)?;
    per_matrix::<T, _>(&batch, (("values_dot", n), ("vectors_dot", n, n)), |b| {
        let (lam, v, x) = (&lams[b], vs[b].as_ref(), dots[b].as_ref());
        let h = Mat::from_fn(n, n, |i, j| (x[(i, j)] + cj(x[(j, i)])) * real::<T>(0.5));
        let hv = mm(h.as_ref(), v);
        let dp = mm(v.adjoint(), hv.as_ref());
        // V̇ is homogeneous of degree −1 in the scale of A: formed in units of c, then /c
        let (lam_u, c, eb) = in_units(lam, opts.broadening);
        let scale = lam_u.iter().fold(0.0f64, |a, &b| a.max(b.abs()));
        let tol = opts.rtol::<T>(n) * scale;
        let om = Mat::from_fn(n, n, |i, k| {
            if i == k {
                return T::zero();
            }
            inv_gap(lam_u[k] - lam_u[i], tol, eb).map_or(T::zero(), |f| dp[(i, k)] * real::<T>(f))
        });
        let dl: Vec<f64> = (0..n).map(|i| re(dp[(i, i)])).collect();
        Ok((dl, unscaled(mm(v, om.as_ref()).as_ref(), c)))
    })
}
