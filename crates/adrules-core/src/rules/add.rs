//! Rules of the permuted add `C ← β·C + α·P_p(op(A))`.

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;
use crate::spec::{Axes, Conj, ContractSpec, Permutation};

use super::skeleton::{Point, Unary, unary_op};
use super::{coeff_kind, cot_scale, deposit};

unary_op! {
    /// One permuted add `C ← β·C + α·P_p(op(A))`: output axis `m` is A's axis `perm[m]`, `op` is
    /// conjugation when `conj` is [`Conj::Yes`].
    ///
    /// Rules (0-based form of TensorOperations.jl v5.8.0
    /// [`src/pullbacks/add.jl`](https://github.com/Jutho/TensorOperations.jl/blob/v5.8.0/src/pullbacks/add.jl);
    /// derived in [`crate::math`]), with `ip` the inverse permutation:
    /// - pullback: `Ā += op(conj(α)·P_ip(C̄))` (one add with flag `conj` and scale
    ///   `conj ? α : conj(α)`), `ᾱ = ⟨P_p(op(A)), C̄⟩` (one full contraction of A with C̄, A's flag
    ///   flipped), `C̄_in = conj(β)·C̄`, `β̄ = ⟨C_old, C̄⟩`;
    /// - pushforward: `Ċ' = β·Ċ + β̇·C_old + α·P_p(op(Ȧ)) + α̇·P_p(op(A))`.
    pub struct AddOp(kernel: Backend::add, check: Permutation::check_add) -> AddPullback {
        /// output axis `m` is A's axis `perm[m]`
        perm: Permutation,
    }
}

impl Unary for AddOp {
    /// `Ā += op(conj(α)·P_ip(C̄))`: one add with flag `conj` and scale `conj ? α : conj(α)`.
    fn a_cotangent<B: Backend>(&self, p: Point<'_, B>, slot: &mut Option<B::Tensor>) -> Result<()> {
        let ip = self.perm.inverse();
        let scale = cot_scale(self.conj, self.alpha);
        let input = p.be.dtype(p.c_bar).join(coeff_kind(scale));
        deposit(p.be, slot, &p.at.metas[0], input, |t, keep| {
            p.be.add(t, p.c_bar, &ip, self.conj, scale, keep)
        })
    }

    /// `⟨P_p(op(A)), C̄⟩` ([`permuted_inner`]).
    fn alpha_cotangent<B: Backend>(&self, p: Point<'_, B>, a: &B::Tensor) -> Result<DynScalar> {
        permuted_inner(p.be, a, self.conj, &self.perm, p.c_bar)
    }
}

/// `⟨P_p(op(A)), Y⟩ = Σ conj(op(A))[p-permuted]·Y` as one full contraction of A against Y
/// (A's conjugation flag flipped), without materialising `P_p(op(A))`.
pub(crate) fn permuted_inner<B: Backend>(
    be: &B,
    a: &B::Tensor,
    conj: Conj,
    perm: &Permutation,
    y: &B::Tensor,
) -> Result<DynScalar> {
    let n = perm.len();
    let all: Axes = (0..n).collect();
    let spec = ContractSpec::new(&[], perm.as_slice(), &all, &[], &[])?;
    let dtype = be.dtype(a).join(be.dtype(y));
    let mut s = be.zeros(&[], dtype)?;
    be.contract(
        &mut s,
        a,
        y,
        &spec,
        conj.flip(),
        Conj::No,
        DynScalar::one(dtype),
        DynScalar::zero(dtype),
    )?;
    be.scalar(&s)
}
