//! Rules of the generalized partial trace `C ← β·C + α·Σ_summed diag_kept(op(A))`
//! (partial traces, diagonals, sums).

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;
use crate::spec::{Conj, TraceSpec};

use super::skeleton::{self, Ab, OpPullback, Step, Unary};
use super::{Activity, Tangents, cot_scale, deposit_coeff};

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

    coefficient_builders!();

    /// The primal.
    ///
    /// # Errors
    /// Those of [`Backend::trace`].
    pub fn apply<B: Backend>(&self, be: &B, c: &mut B::Tensor, a: &B::Tensor) -> Result<()> {
        self.kernel(be, c, a, (self.alpha, self.beta))
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
        skeleton::rrule(self, be, c, a, active)
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
        skeleton::pullback_at(self, be, c, a, active)
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
        skeleton::frule(self, be, c, a, t)
    }
}

/// Pullback of a [`TraceOp`] (the shared [`OpPullback`]): `pullback(&c̄)` for fresh
/// cotangents, `accumulate(&c̄, &mut grads)` into existing buffers.
pub type TracePullback<B> = OpPullback<B, TraceOp>;

impl Unary for TraceOp {
    /// `Ā += op(conj(α)·C̄)` on the diagonals of A, `ᾱ = ⟨P_p(tr op(A)), C̄⟩`.
    fn cotangents<B: Backend>(&self, step: Step<'_, B>) -> Result<()> {
        let (be, at, c_bar, into) = step.parts();
        if at.active.a {
            let scale = cot_scale(self.conj, self.alpha);
            match &mut into.a {
                Some(t) => be.add_to_diagonal(t, c_bar, &self.spec, self.conj, scale)?,
                None => {
                    let a_meta = &at.metas[0];
                    let mut t = be.zeros(&a_meta.dims, a_meta.dtype)?;
                    be.add_to_diagonal(&mut t, c_bar, &self.spec, self.conj, scale)?;
                    into.a = Some(t);
                }
            }
        }
        if let (true, Some(a)) = (at.active.alpha, &at.operands[0]) {
            let dtype = be.dtype(a).join(at.c_meta.dtype);
            let mut tr = be.empty(&at.c_meta.dims, dtype)?;
            let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
            be.trace(&mut tr, a, &self.spec, self.conj, one, zero)?;
            deposit_coeff(&mut into.alpha, be.inner(&tr, c_bar)?, self.alpha);
        }
        Ok(())
    }

    fn check_shapes(&self, a: &[usize], c: &[usize]) -> Result<()> {
        self.spec.check(a, c)
    }

    fn kernel<B: Backend>(&self, be: &B, c: &mut B::Tensor, a: &B::Tensor, ab: Ab) -> Result<()> {
        be.trace(c, a, &self.spec, self.conj, ab.0, ab.1)
    }
}
