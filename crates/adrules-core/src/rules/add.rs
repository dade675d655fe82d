//! Rules of the permuted add `C ← β·C + α·P_p(op(A))`.

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;
use crate::spec::{Axes, Conj, ContractSpec, Permutation};

use super::skeleton::{self, Ab, OpPullback, Step, Unary};
use super::{Activity, Tangents, coeff_kind, cot_scale, deposit, deposit_coeff};

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
#[derive(Clone, Debug, PartialEq)]
pub struct AddOp {
    /// output axis `m` is A's axis `perm[m]`
    pub perm: Permutation,
    /// conjugation flag of A
    pub conj: Conj,
    /// α
    pub alpha: DynScalar,
    /// β (zero is a strong zero: C is not read)
    pub beta: DynScalar,
}

impl AddOp {
    /// `C ← P_perm(A)`: no conjugation, α = 1, β = 0 (both `f64`, cast to C's dtype).
    pub fn new(perm: Permutation) -> Self {
        AddOp {
            perm,
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

    /// The primal `C ← β·C + α·P_p(op(A))`.
    ///
    /// # Errors
    /// Those of [`Backend::add`].
    pub fn apply<B: Backend>(&self, be: &B, c: &mut B::Tensor, a: &B::Tensor) -> Result<()> {
        self.kernel(be, c, a, (self.alpha, self.beta))
    }

    /// The primal, updating `c` in place, and its pullback. The pullback keeps A only when
    /// α is active and `C_old` only when β is active.
    ///
    /// # Errors
    /// Those of [`Backend::add`]; on error `c` is unchanged.
    pub fn rrule<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        a: &B::Tensor,
        active: Activity,
    ) -> Result<AddPullback<B>> {
        skeleton::rrule(self, be, c, a, active)
    }

    /// The pullback at the primal point `(C, A)` without computing the primal, for engines
    /// that run the primal themselves (a custom op whose forward is a fused kernel). `c` is C
    /// as it was *before* the update: only its shape and dtype are read, unless β is active
    /// (then it is kept for `β̄`). Same pullback as [`rrule`](Self::rrule).
    ///
    /// # Errors
    /// Shape or rank mismatch of `a` and `c` (see [`Permutation::check_add`]).
    pub fn pullback_at<B: Backend>(
        &self,
        be: &B,
        c: &B::Tensor,
        a: &B::Tensor,
        active: Activity,
    ) -> Result<AddPullback<B>> {
        skeleton::pullback_at(self, be, c, a, active)
    }

    /// The primal, updating `c` in place, and the tangent of the updated C.
    ///
    /// # Errors
    /// Those of [`Backend::add`]; a tangent whose shape or dtype does not match its primal
    /// ([`crate::Error::ShapeMismatch`] / [`crate::Error::DTypeMismatch`] naming
    /// `"tangent of a"` etc.). On error `c` is unchanged.
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

/// Pullback of an [`AddOp`] (the shared [`OpPullback`]): `pullback(&c̄)` for fresh
/// cotangents, `accumulate(&c̄, &mut grads)` into existing buffers.
pub type AddPullback<B> = OpPullback<B, AddOp>;

impl Unary for AddOp {
    /// `Ā += op(conj(α)·P_ip(C̄))`, `ᾱ = ⟨P_p(op(A)), C̄⟩`.
    fn cotangents<B: Backend>(&self, step: Step<'_, B>) -> Result<()> {
        let (be, at, c_bar, into) = step.parts();
        if at.active.a {
            let ip = self.perm.inverse();
            let scale = cot_scale(self.conj, self.alpha);
            let input = be.dtype(c_bar).join(coeff_kind(scale));
            deposit(be, &mut into.a, &at.metas[0], input, |t, keep| {
                be.add(t, c_bar, &ip, self.conj, scale, keep)
            })?;
        }
        if let (true, Some(a)) = (at.active.alpha, &at.operands[0]) {
            let v = permuted_inner(be, a, self.conj, &self.perm, c_bar)?;
            deposit_coeff(&mut into.alpha, v, self.alpha);
        }
        Ok(())
    }

    fn check_shapes(&self, a: &[usize], c: &[usize]) -> Result<()> {
        self.perm.check_add(a, c)
    }

    fn kernel<B: Backend>(&self, be: &B, c: &mut B::Tensor, a: &B::Tensor, ab: Ab) -> Result<()> {
        be.add(c, a, &self.perm, self.conj, ab.0, ab.1)
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
