//! Rules of the generalized partial trace `C ← β·C + α·Σ_summed diag_kept(op(A))`
//! (partial traces, diagonals, sums).

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;
use crate::spec::TraceSpec;

use super::cot_scale;
use super::skeleton::{Point, Unary, unary_op};

unary_op! {
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
    pub struct TraceOp(kernel: Backend::trace, check: TraceSpec::check) -> TracePullback {
        /// kept and summed groups of A's axes
        spec: TraceSpec,
    }
}

impl Unary for TraceOp {
    /// `Ā += op(conj(α)·C̄)` on the diagonals of A ([`Backend::add_to_diagonal`]).
    fn a_cotangent<B: Backend>(&self, p: Point<'_, B>, slot: &mut Option<B::Tensor>) -> Result<()> {
        let scale = cot_scale(self.conj, self.alpha);
        match slot {
            Some(t) => {
                p.be.add_to_diagonal(t, p.c_bar, &self.spec, self.conj, scale)
            }
            None => {
                let a_meta = &p.at.metas[0];
                let mut t = p.be.zeros(&a_meta.dims, a_meta.dtype)?;
                p.be.add_to_diagonal(&mut t, p.c_bar, &self.spec, self.conj, scale)?;
                *slot = Some(t);
                Ok(())
            }
        }
    }

    /// `⟨P_p(tr op(A)), C̄⟩`: the trace computed once, then an inner product.
    fn alpha_cotangent<B: Backend>(&self, p: Point<'_, B>, a: &B::Tensor) -> Result<DynScalar> {
        let Point { be, at, c_bar } = p;
        let dtype = be.dtype(a).join(at.c_meta.dtype);
        let mut tr = be.empty(&at.c_meta.dims, dtype)?;
        let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
        be.trace(&mut tr, a, &self.spec, self.conj, one, zero)?;
        be.inner(&tr, c_bar)
    }
}
