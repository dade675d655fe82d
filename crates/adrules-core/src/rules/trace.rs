//! Rules of the generalized partial trace `C ← β·C + α·Σ_summed diag_kept(op(A))`
//! (partial traces, diagonals, sums).

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;
use crate::spec::{Conj, TraceSpec};

use super::{
    Activity, Cotangents, Meta, Tangents, check_coeff_tangent, check_like, cot_scale, deposit_beta,
    deposit_c, deposit_coeff, tangent_start,
};

/// One generalized partial trace `C[i] ← β·C[i] + α·Σ_t op(A[J(i, t)])` (see [`TraceSpec`]):
/// partial and full traces (`iij->j`, `ii->`), diagonals (`ii->i`, `bii->bi`, `iii->i`) and
/// sums over axes (`ij->i`, `ijk->`) are all this one primitive.
///
/// Rules (0-based form of TensorOperations.jl v5.8.0
/// [`src/pullbacks/trace.jl`](https://github.com/Jutho/TensorOperations.jl/blob/v5.8.0/src/pullbacks/trace.jl);
/// derived in [`crate::math`]):
/// - pullback: `Ā[I] += op(conj(α)·C̄[i])·Π_groups δ(all indices of the group agree)`, with
///   `i` the kept groups' indices of `I` (summed groups contribute only the δ: C̄ is
///   broadcast over them, the adjoint of a sum; a kept group of several axes puts C̄ on the
///   diagonal, the adjoint of diagonal extraction), written directly onto the diagonal with
///   [`Backend::add_to_diagonal`] (the reference contracts with a dense identity tensor of
///   size `Π d_k²` instead; for a plain sum this is torch's `expand` of the cotangent); `ᾱ = ⟨P_p(tr op(A)), C̄⟩` (the trace computed
///   once, then an inner product); `C̄_in = conj(β)·C̄`; `β̄ = ⟨C_old, C̄⟩`;
/// - pushforward: `Ċ' = β·Ċ + β̇·C_old + α·P_p(tr op(Ȧ)) + α̇·P_p(tr op(A))`. (The reference's
///   Enzyme forward rule for trace was registered with the wrong mode and never ran; ours is
///   tested against finite differences.)
#[derive(Clone, Debug, PartialEq)]
pub struct TraceOp {
    /// kept and summed groups of A's axes
    pub spec: TraceSpec,
    /// conjugation flag of A
    pub conj: Conj,
    /// α
    pub alpha: DynScalar,
    /// β (zero is a strong zero: C is not read)
    pub beta: DynScalar,
}

impl TraceOp {
    /// `C ← P_p(tr A)`: no conjugation, α = 1, β = 0 (both `f64`, cast to C's dtype).
    pub fn new(spec: TraceSpec) -> Self {
        TraceOp {
            spec,
            conj: Conj::No,
            alpha: DynScalar::F64(1.0),
            beta: DynScalar::F64(0.0),
        }
    }

    /// Sets the conjugation flag.
    pub fn conj(mut self, conj: Conj) -> Self {
        self.conj = conj;
        self
    }

    /// Sets α.
    pub fn alpha(mut self, alpha: impl Into<DynScalar>) -> Self {
        self.alpha = alpha.into();
        self
    }

    /// Sets β.
    pub fn beta(mut self, beta: impl Into<DynScalar>) -> Self {
        self.beta = beta.into();
        self
    }

    /// The primal.
    ///
    /// # Errors
    /// Those of [`Backend::trace`].
    pub fn apply<B: Backend>(&self, be: &B, c: &mut B::Tensor, a: &B::Tensor) -> Result<()> {
        be.trace(c, a, &self.spec, self.conj, self.alpha, self.beta)
    }

    /// The primal, updating `c` in place, and its pullback (keeps A only when α is active,
    /// `C_old` only when β is active).
    ///
    /// # Errors
    /// Those of [`Backend::trace`]; on error `c` is unchanged.
    pub fn rrule<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        a: &B::Tensor,
        active: Activity,
    ) -> Result<TracePullback<B>> {
        let pb = self.pullback_at(be, c, a, active)?;
        self.apply(be, c, a)?;
        Ok(pb)
    }

    /// The pullback at the primal point `(C, A)` without computing the primal (see
    /// [`AddOp::pullback_at`](super::AddOp::pullback_at)): `c` is C before the update, kept
    /// only when β is active. Same pullback as [`rrule`](Self::rrule).
    ///
    /// # Errors
    /// Shape or rank mismatch of `a` and `c` (see [`TraceSpec::check`](crate::TraceSpec::check)).
    pub fn pullback_at<B: Backend>(
        &self,
        be: &B,
        c: &B::Tensor,
        a: &B::Tensor,
        active: Activity,
    ) -> Result<TracePullback<B>> {
        self.spec.check(&be.dims(a), &be.dims(c))?;
        Ok(TracePullback {
            backend: be.clone(),
            op: self.clone(),
            a: active.alpha.then(|| a.clone()),
            c_old: active.beta.then(|| c.clone()),
            a_meta: Meta::of(be, a),
            c_meta: Meta::of(be, c),
            active,
        })
    }

    /// The primal, updating `c` in place, and the tangent of the updated C.
    ///
    /// # Errors
    /// Those of [`Backend::trace`]; mismatched tangents; on error `c` is unchanged.
    pub fn frule<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        a: &B::Tensor,
        t: Tangents<'_, B>,
    ) -> Result<B::Tensor> {
        self.spec.check(&be.dims(a), &be.dims(c))?;
        let (c_meta, a_meta) = (Meta::of(be, c), Meta::of(be, a));
        let one = DynScalar::one(c_meta.dtype);
        let mut dc = tangent_start(be, c, &c_meta, self.beta, t.c, t.beta)?;
        if let Some(da) = t.a {
            check_like(be, "tangent of a", da, &a_meta)?;
            be.trace(&mut dc, da, &self.spec, self.conj, self.alpha, one)?;
        }
        if let Some(dal) = t.alpha {
            check_coeff_tangent("tangent of alpha", Some(dal), self.alpha)?;
            be.trace(&mut dc, a, &self.spec, self.conj, dal, one)?;
        }
        t.check_output(be, "c_dot", &dc, &[c, a])?;
        self.apply(be, c, a)?;
        Ok(dc)
    }
}

/// Pullback of a [`TraceOp`]; owns what it reads and can be applied many times.
#[derive(Clone, Debug)]
pub struct TracePullback<B: Backend> {
    backend: B,
    op: TraceOp,
    a: Option<B::Tensor>,
    c_old: Option<B::Tensor>,
    a_meta: Meta,
    c_meta: Meta,
    active: Activity,
}

impl<B: Backend> TracePullback<B> {
    /// Fresh cotangents of the active inputs.
    ///
    /// # Errors
    /// `c_bar` not matching C (`"c_bar"`); backend errors.
    /// [`crate::Error::NonFinite`] for a cotangent that is not finite although `c_bar` and
    /// what the pullback read are ([`crate::finite`]).
    pub fn pullback(&self, c_bar: &B::Tensor) -> Result<Cotangents<B>> {
        let mut g = Cotangents::default();
        self.accumulate(c_bar, &mut g)?;
        g.checked(
            &self.backend,
            &[Some(c_bar), self.a.as_ref(), self.c_old.as_ref()],
        )
    }

    /// Adds the cotangents of the active inputs into `into`.
    ///
    /// # Errors
    /// As [`pullback`](Self::pullback), plus shape/dtype errors of existing buffers.
    pub fn accumulate(&self, c_bar: &B::Tensor, into: &mut Cotangents<B>) -> Result<()> {
        let be = &self.backend;
        let op = &self.op;
        check_like(be, "c_bar", c_bar, &self.c_meta)?;
        if self.active.c {
            deposit_c(be, &mut into.c, c_bar, &self.c_meta, op.beta)?;
        }
        if self.active.a {
            let scale = cot_scale(op.conj, op.alpha);
            match &mut into.a {
                Some(t) => be.add_to_diagonal(t, c_bar, &op.spec, op.conj, scale)?,
                None => {
                    let mut t = be.zeros(&self.a_meta.dims, self.a_meta.dtype)?;
                    be.add_to_diagonal(&mut t, c_bar, &op.spec, op.conj, scale)?;
                    into.a = Some(t);
                }
            }
        }
        if let (true, Some(a)) = (self.active.alpha, &self.a) {
            let dtype = be.dtype(a).join(self.c_meta.dtype);
            let mut tr = be.empty(&self.c_meta.dims, dtype)?;
            be.trace(
                &mut tr,
                a,
                &op.spec,
                op.conj,
                DynScalar::one(dtype),
                DynScalar::zero(dtype),
            )?;
            deposit_coeff(&mut into.alpha, be.inner(&tr, c_bar)?, op.alpha);
        }
        if let (true, Some(c_old)) = (self.active.beta, &self.c_old) {
            deposit_beta(be, &mut into.beta, c_old, c_bar, op.beta)?;
        }
        Ok(())
    }
}
