//! Rules of the pairwise contraction `C ← β·C + α·P_pAB(op(A)·op(B))`.

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;
use crate::spec::{Axes, Conj, ContractSpec};

use super::skeleton::{Formulas, OpPullback, Step};
use super::{
    Activity, Meta, Tangents, check_coeff_tangent, check_like, coeff_kind, cot_scale, deposit,
    deposit_coeff, tangent_start,
};

/// One pairwise contraction `C ← β·C + α·P_pAB(op_cA(A)·op_cB(B))` (see [`ContractSpec`]).
///
/// Rules (0-based form of TensorOperations.jl v5.8.0
/// [`src/pullbacks/contract.jl`](https://github.com/Jutho/TensorOperations.jl/blob/v5.8.0/src/pullbacks/contract.jl);
/// derived in [`crate::math`]). In matrix form, with `Â = op_cA(A)` as (open_a × contr) and
/// `B̂ = op_cB(B)` as (contr × open_b): `cot(Â) = conj(α)·C̄·B̂ᴴ`, `cot(B̂) = conj(α)·Âᴴ·C̄`, then
/// the conjugation is undone. Each is one contraction of the same primitive, with C̄ read
/// through `ipAB = perm_abᐨ¹` split after `len(open_a)`:
/// - `ΔA += contract(C̄[ipAB], op = cA; B[(open_b, contr_b)], op = cA ? cB : !cB;
///   out perm = (open_a, contr_a)ᐨ¹; scale cA ? α : conj(α))`;
/// - `ΔB += contract(A[(contr_a, open_a)], op = cB ? cA : !cA; C̄[ipAB], op = cB;
///   out perm = (contr_b, open_b)ᐨ¹; scale cB ? α : conj(α))`;
/// - batch axes (a label in A, B and C) stay batch axes of both cotangent contractions
///   (the product is block-diagonal over the batch index, so is its adjoint): C̄'s batch
///   axes pair with B's in ΔA and with A's in ΔB, and the output permutations become
///   `(batch_a, open_a, contr_a)ᐨ¹` and `(batch_b, contr_b, open_b)ᐨ¹`.
/// - `ᾱ = ⟨P_pAB(op A·op B), C̄⟩` (one extra contraction, skipped when α is inactive);
///   `C̄_in = conj(β)·C̄`; `β̄ = ⟨C_old, C̄⟩`.
///
/// Pushforward: `Ċ' = β·Ċ + β̇·C_old + α̇·P(op A·op B) + α·P(op Ȧ·op B) + α·P(op A·op Ḃ)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ContractOp {
    /// index split and output permutation
    pub spec: ContractSpec,
    /// conjugation flag of A
    pub conj_a: Conj,
    /// conjugation flag of B
    pub conj_b: Conj,
    /// α
    pub alpha: DynScalar,
    /// β (zero is a strong zero: C is not read)
    pub beta: DynScalar,
}

impl ContractOp {
    /// `C ← P(A·B)`: no conjugation, α = 1, β = 0 (both `f64`, cast to C's dtype).
    pub fn new(spec: ContractSpec) -> Self {
        ContractOp {
            spec,
            conj_a: Conj::No,
            conj_b: Conj::No,
            alpha: DynScalar::F64(1.0),
            beta: DynScalar::F64(0.0),
        }
    }

    /// Sets the conjugation flags of A and B.
    pub fn conj(mut self, conj_a: Conj, conj_b: Conj) -> Self {
        self.conj_a = conj_a;
        self.conj_b = conj_b;
        self
    }

    coefficient_builders!();

    /// The primal.
    ///
    /// # Errors
    /// Those of [`Backend::contract`].
    pub fn apply<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        a: &B::Tensor,
        b: &B::Tensor,
    ) -> Result<()> {
        be.contract(
            c,
            a,
            b,
            &self.spec,
            self.conj_a,
            self.conj_b,
            self.alpha,
            self.beta,
        )
    }

    /// The primal, updating `c` in place, and its pullback. The pullback keeps A when B or α
    /// is active, B when A or α is active, and `C_old` only when β is active.
    ///
    /// # Errors
    /// Those of [`Backend::contract`]; on error `c` is unchanged.
    pub fn rrule<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        a: &B::Tensor,
        b: &B::Tensor,
        active: Activity,
    ) -> Result<ContractPullback<B>> {
        let pb = self.pullback_at(be, c, a, b, active)?;
        self.apply(be, c, a, b)?;
        Ok(pb)
    }

    /// The pullback at the primal point `(C, A, B)` without computing the primal (see
    /// [`AddOp::pullback_at`](super::AddOp::pullback_at)): `c` is C before the update, kept
    /// only when β is active. Same pullback as [`rrule`](Self::rrule).
    ///
    /// # Errors
    /// Shape or rank mismatch of `a`, `b` and `c` (see [`ContractSpec::check`]).
    pub fn pullback_at<B: Backend>(
        &self,
        be: &B,
        c: &B::Tensor,
        a: &B::Tensor,
        b: &B::Tensor,
        active: Activity,
    ) -> Result<ContractPullback<B>> {
        self.spec.check(&be.dims(a), &be.dims(b), &be.dims(c))?;
        OpPullback::at(be, self, c, &[a, b], active)
    }

    /// The primal, updating `c` in place, and the tangent of the updated C (computed before
    /// the primal overwrites C).
    ///
    /// # Errors
    /// Those of [`Backend::contract`]; mismatched tangents; on error `c` is unchanged.
    pub fn frule<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        a: &B::Tensor,
        b: &B::Tensor,
        t: Tangents<'_, B>,
    ) -> Result<B::Tensor> {
        self.spec.check(&be.dims(a), &be.dims(b), &be.dims(c))?;
        let c_meta = Meta::of(be, c);
        let one = DynScalar::one(c_meta.dtype);
        let mut dc = tangent_start(be, c, &c_meta, self.beta, t.c, t.beta)?;
        let (sp, ca, cb) = (&self.spec, self.conj_a, self.conj_b);
        if let Some(dal) = t.alpha {
            check_coeff_tangent("tangent of alpha", Some(dal), self.alpha)?;
            be.contract(&mut dc, a, b, sp, ca, cb, dal, one)?;
        }
        if let Some(da) = t.a {
            check_like(be, "tangent of a", da, &Meta::of(be, a))?;
            be.contract(&mut dc, da, b, sp, ca, cb, self.alpha, one)?;
        }
        if let Some(db) = t.b {
            check_like(be, "tangent of b", db, &Meta::of(be, b))?;
            be.contract(&mut dc, a, db, sp, ca, cb, self.alpha, one)?;
        }
        t.check_output(be, "c_dot", &dc, &[c, a, b])?;
        self.apply(be, c, a, b)?;
        Ok(dc)
    }
}

/// The contraction specs of ΔA (operands C̄, B) and ΔB (operands A, C̄). Batch axes stay
/// batch axes: with C̄ read through `ipAB` split into (batch, open_a, open_b) positions,
/// `ΔA = C̄[batch, open_a, open_b]·B[batch_b, contr_b, open_b]` summed over open_b and
/// `ΔB = A[batch_a, open_a, contr_a]·C̄[batch, open_a, open_b]` summed over open_a.
fn cotangent_specs(s: &ContractSpec) -> Result<(ContractSpec, ContractSpec)> {
    let (nl, na) = (s.num_batch(), s.open_a().len());
    let ip = s.perm_ab().inverse();
    let (c_batch, rest) = ip.as_slice().split_at(nl);
    let (c_rows, c_cols) = rest.split_at(na);
    let pa: Axes = s
        .batch_a()
        .iter()
        .chain(s.open_a())
        .chain(s.contr_a())
        .copied()
        .collect();
    let pb: Axes = s
        .batch_b()
        .iter()
        .chain(s.contr_b())
        .chain(s.open_b())
        .copied()
        .collect();
    let ipa = crate::spec::Permutation::named("(batch_a, open_a, contr_a)", &pa)?.inverse();
    let ipb = crate::spec::Permutation::named("(batch_b, contr_b, open_b)", &pb)?.inverse();
    let spec_a = ContractSpec::batched(
        c_batch,
        s.batch_b(),
        c_rows,
        c_cols,
        s.open_b(),
        s.contr_b(),
        ipa.as_slice(),
    )?;
    let spec_b = ContractSpec::batched(
        s.batch_a(),
        c_batch,
        s.contr_a(),
        s.open_a(),
        c_rows,
        c_cols,
        ipb.as_slice(),
    )?;
    Ok((spec_a, spec_b))
}

/// Pullback of a [`ContractOp`] (the shared [`OpPullback`]): `pullback(&c̄)` for fresh
/// cotangents, `accumulate(&c̄, &mut grads)` into existing buffers (in place with β = 1
/// when the dtypes allow).
pub type ContractPullback<B> = OpPullback<B, ContractOp>;

impl Formulas for ContractOp {
    /// the contraction specs of ΔA and ΔB ([`cotangent_specs`])
    type Plan = (ContractSpec, ContractSpec);

    fn keeps(&self, active: Activity) -> [bool; 2] {
        [active.b || active.alpha, active.a || active.alpha]
    }

    fn plan(&self) -> Result<Self::Plan> {
        cotangent_specs(&self.spec)
    }

    /// `ΔA`, `ΔB` and `ᾱ = ⟨P_pAB(op A·op B), C̄⟩` (see [`ContractOp`]).
    fn operand_cotangents<B: Backend>(&self, plan: &Self::Plan, step: Step<'_, B>) -> Result<()> {
        let (be, at, c_bar, into) = step.parts();
        let (spec_a, spec_b) = plan;
        let cbar_dtype = be.dtype(c_bar);
        let (a_meta, b_meta) = (&at.metas[0], &at.metas[1]);
        if let (true, Some(b)) = (at.active.a, &at.operands[1]) {
            let scale = cot_scale(self.conj_a, self.alpha);
            let flag_b = if self.conj_a.is_conj() {
                self.conj_b
            } else {
                self.conj_b.flip()
            };
            let input = cbar_dtype.join(b_meta.dtype).join(coeff_kind(scale));
            deposit(be, &mut into.a, a_meta, input, |t, keep| {
                be.contract(t, c_bar, b, spec_a, self.conj_a, flag_b, scale, keep)
            })?;
        }
        if let (true, Some(a)) = (at.active.b, &at.operands[0]) {
            let scale = cot_scale(self.conj_b, self.alpha);
            let flag_a = if self.conj_b.is_conj() {
                self.conj_a
            } else {
                self.conj_a.flip()
            };
            let input = cbar_dtype.join(a_meta.dtype).join(coeff_kind(scale));
            deposit(be, &mut into.b, b_meta, input, |t, keep| {
                be.contract(t, a, c_bar, spec_b, flag_a, self.conj_b, scale, keep)
            })?;
        }
        if let (true, Some(a), Some(b)) = (at.active.alpha, &at.operands[0], &at.operands[1]) {
            let dtype = a_meta.dtype.join(b_meta.dtype);
            let mut ab = be.empty(&at.c_meta.dims, dtype)?;
            let (ca, cb) = (self.conj_a, self.conj_b);
            let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
            be.contract(&mut ab, a, b, &self.spec, ca, cb, one, zero)?;
            deposit_coeff(&mut into.alpha, be.inner(&ab, c_bar)?, self.alpha);
        }
        Ok(())
    }
}
