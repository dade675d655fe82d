//! Rules of the permuted add `C ← β·C + α·P_p(op(A))`.

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;
use crate::spec::{Axes, Conj, ContractSpec, Permutation};

use super::{
    Activity, Cotangents, Meta, Tangents, check_coeff_tangent, check_like, coeff_kind, cot_scale,
    deposit, deposit_beta, deposit_c, deposit_coeff, tangent_start,
};

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

    /// The primal `C ← β·C + α·P_p(op(A))`.
    ///
    /// # Errors
    /// Those of [`Backend::add`].
    pub fn apply<B: Backend>(&self, be: &B, c: &mut B::Tensor, a: &B::Tensor) -> Result<()> {
        be.add(c, a, &self.perm, self.conj, self.alpha, self.beta)
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
        let pb = self.pullback_at(be, c, a, active)?;
        self.apply(be, c, a)?;
        Ok(pb)
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
        self.perm.check_add(&be.dims(a), &be.dims(c))?;
        Ok(AddPullback {
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
        self.perm.check_add(&be.dims(a), &be.dims(c))?;
        let (c_meta, a_meta) = (Meta::of(be, c), Meta::of(be, a));
        let one = crate::scalar::DynScalar::one(c_meta.dtype);
        let mut dc = tangent_start(be, c, &c_meta, self.beta, t.c, t.beta)?;
        if let Some(da) = t.a {
            check_like(be, "tangent of a", da, &a_meta)?;
            be.add(&mut dc, da, &self.perm, self.conj, self.alpha, one)?;
        }
        if let Some(dal) = t.alpha {
            check_coeff_tangent("tangent of alpha", Some(dal), self.alpha)?;
            be.add(&mut dc, a, &self.perm, self.conj, dal, one)?;
        }
        t.check_output(be, "c_dot", &dc, &[c, a])?;
        self.apply(be, c, a)?;
        Ok(dc)
    }
}

/// Pullback of an [`AddOp`]; owns what it reads and can be applied many times.
#[derive(Clone, Debug)]
pub struct AddPullback<B: Backend> {
    backend: B,
    op: AddOp,
    a: Option<B::Tensor>,
    c_old: Option<B::Tensor>,
    a_meta: Meta,
    c_meta: Meta,
    active: Activity,
}

impl<B: Backend> AddPullback<B> {
    /// Fresh cotangents of the active inputs for the output cotangent `c_bar`.
    ///
    /// # Errors
    /// [`crate::Error::ShapeMismatch`] / [`crate::Error::DTypeMismatch`] naming `"c_bar"`
    /// when `c_bar` does not match C; backend errors.
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

    /// Adds the cotangents of the active inputs into `into` (a `None` slot receives a fresh
    /// buffer; an existing buffer is updated with β = 1, in place where the backend allows).
    ///
    /// # Errors
    /// As [`pullback`](Self::pullback), plus shape/dtype errors of existing buffers.
    pub fn accumulate(&self, c_bar: &B::Tensor, into: &mut Cotangents<B>) -> Result<()> {
        let be = &self.backend;
        let op = &self.op;
        check_like(be, "c_bar", c_bar, &self.c_meta)?;
        let cbar_dtype = be.dtype(c_bar);
        if self.active.c {
            deposit_c(be, &mut into.c, c_bar, &self.c_meta, op.beta)?;
        }
        if self.active.a {
            let ip = op.perm.inverse();
            let scale = cot_scale(op.conj, op.alpha);
            deposit(
                be,
                &mut into.a,
                &self.a_meta,
                cbar_dtype.join(coeff_kind(scale)),
                |t, keep| be.add(t, c_bar, &ip, op.conj, scale, keep),
            )?;
        }
        if let (true, Some(a)) = (self.active.alpha, &self.a) {
            let v = permuted_inner(be, a, op.conj, &op.perm, c_bar)?;
            deposit_coeff(&mut into.alpha, v, op.alpha);
        }
        if let (true, Some(c_old)) = (self.active.beta, &self.c_old) {
            deposit_beta(be, &mut into.beta, c_old, c_bar, op.beta)?;
        }
        Ok(())
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
