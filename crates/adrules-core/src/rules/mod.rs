//! Reverse (pullback, VJP) and forward (pushforward, JVP) rules for the tensor primitives,
//! written once over [`Backend`] so that every backend gets them.
//!
//! Each primitive call is described by an op value holding its index specification,
//! conjugation flags and coefficients: [`AddOp`], [`TraceOp`], [`ContractOp`] — or, seen
//! uniformly as "a primitive over a list of operands", [`Primitive`] with its
//! [`PrimitivePullback`]. Rank-0 values are read with [`tensorscalar_rrule`] /
//! [`tensorscalar_frule`]. Every op offers, in the ChainRules shape:
//! - `apply(be, &mut c, …)`: the primal `C ← β·C + α·op(…)`;
//! - `rrule(be, c, …, active) -> (C, pullback)`: the primal plus a pullback that owns
//!   (reference-counted handles of) everything it will read, and can be applied many times;
//!   `pullback.pullback(&c̄)` returns fresh [`Cotangents`]; `pullback.accumulate(&c̄, &mut grads)`
//!   adds into existing gradient buffers (for engines that accumulate);
//! - `frule(be, c, …, tangents) -> (C, Ċ)`: the primal and its tangent, the tangent computed
//!   before the primal overwrites C.
//!
//! # Formulas
//! Derived in [`crate::math`] (the crate's `MATH.md`), checked against TensorOperations.jl
//! v5.8.0 ([`src/pullbacks/`](https://github.com/Jutho/TensorOperations.jl/tree/v5.8.0/src/pullbacks),
//! files `common.jl`, `add.jl`, `trace.jl`, `contract.jl`). With `C̄` the output cotangent and
//! the inner product `⟨X, Y⟩ = Σ conj(X)·Y`:
//! - `C̄_in = conj(β)·C̄`, `β̄ = ⟨C_old, C̄⟩` (all three primitives);
//! - the op-specific cotangents are documented on each op.
//!
//! # Activity
//! [`Activity`] says which of C, A, B, α, β need cotangents. Inactive inputs cost nothing:
//! no ᾱ contraction for a constant α, no snapshot of C unless β is active (keyed on
//! activity, never on β's value: an active β equal to 0.0 still gets the right β̄, a defect of
//! the Enzyme rule in the reference), and an input is only kept by the pullback when another
//! cotangent needs it.
//!
//! # Projection
//! Cotangents are projected onto their primal's dtype (ChainRules' `ProjectTo`): a real α or β
//! receives the real part of its complex cotangent; a real tensor that fed a complex result
//! accumulates only the real part; an `f32` tensor fed by `f64` coefficients receives an `f32`
//! cotangent.

/// The `alpha` and `beta` builders of the three ops (plain structs with public fields).
macro_rules! coefficient_builders {
    () => {
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
    };
}

/// `impl skeleton::Coefficients` for ops with the fields `alpha` and `beta`.
macro_rules! coefficients {
    ($($op:ty),*) => {$(
        impl skeleton::Coefficients for $op {
            fn coefficients(&self) -> skeleton::Ab {
                (self.alpha, self.beta)
            }
        }
    )*};
}

mod add;
mod contract;
mod primitive;
mod skeleton;
mod tensorscalar;
mod trace;

pub use add::{AddOp, AddPullback};
pub use contract::{ContractOp, ContractPullback};
pub use primitive::{Primitive, PrimitivePullback};
pub use skeleton::OpPullback;

coefficients!(AddOp, TraceOp, ContractOp);
pub use tensorscalar::{TensorScalarPullback, tensorscalar_frule, tensorscalar_rrule};
pub use trace::{TraceOp, TracePullback};

use crate::backend::{Backend, check};
use crate::error::{Error, Result};
use crate::scalar::{DType, DynScalar};
use crate::spec::{Conj, Dims, Permutation};

/// Which inputs of a primitive call need cotangents.
///
/// `c` is the tensor passed in as C (scaled by β), `a` and `b` the operands (`b` is ignored by
/// add and trace), `alpha` and `beta` the coefficients. A coefficient that is a constant
/// (including an integer-like 0 or 1) is simply marked inactive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Activity {
    /// C (the β-scaled input) is active
    pub c: bool,
    /// A is active
    pub a: bool,
    /// B is active (contraction only)
    pub b: bool,
    /// α is active
    pub alpha: bool,
    /// β is active
    pub beta: bool,
}

impl Activity {
    /// Every input active.
    pub const ALL: Activity = Activity {
        c: true,
        a: true,
        b: true,
        alpha: true,
        beta: true,
    };
    /// No input active.
    pub const NONE: Activity = Activity {
        c: false,
        a: false,
        b: false,
        alpha: false,
        beta: false,
    };
    /// The tensors C, A, B active; α and β constants (the common case).
    pub const TENSORS: Activity = Activity {
        c: true,
        a: true,
        b: true,
        alpha: false,
        beta: false,
    };
    /// Only the operands A and B active (C is a fresh output, α and β constants).
    pub const OPERANDS: Activity = Activity {
        c: false,
        a: true,
        b: true,
        alpha: false,
        beta: false,
    };
}

/// Cotangents of a primitive's inputs; `None` for an inactive input (or one that has not
/// received a contribution yet, when used as an accumulator).
#[derive(Clone, Debug)]
pub struct Cotangents<B: Backend> {
    /// cotangent of C (the β-scaled input): `conj(β)·C̄`
    pub c: Option<B::Tensor>,
    /// cotangent of A
    pub a: Option<B::Tensor>,
    /// cotangent of B
    pub b: Option<B::Tensor>,
    /// cotangent of α, projected onto α's dtype
    pub alpha: Option<DynScalar>,
    /// cotangent of β, projected onto β's dtype
    pub beta: Option<DynScalar>,
}

impl<B: Backend> Default for Cotangents<B> {
    fn default() -> Self {
        Cotangents {
            c: None,
            a: None,
            b: None,
            alpha: None,
            beta: None,
        }
    }
}

impl<B: Backend> Cotangents<B> {
    /// The finite-output policy ([`crate::finite`]) on fresh cotangents: each one that is not
    /// finite while every tensor in `inputs` (the output cotangent and what the pullback
    /// read) is gives [`crate::Error::NonFinite`] naming it (`"a_bar"`, `"b_bar"`,
    /// `"c_in_bar"` for the β-scaled input C, `"alpha_bar"`, `"beta_bar"`).
    pub(crate) fn checked(self, be: &B, inputs: &[Option<&B::Tensor>]) -> Result<Self> {
        let inputs: Vec<&B::Tensor> = inputs.iter().flatten().copied().collect();
        for (arg, t) in [
            ("a_bar", &self.a),
            ("b_bar", &self.b),
            ("c_in_bar", &self.c),
        ] {
            if let Some(t) = t {
                crate::finite::check(be, || arg.to_string(), t, &inputs)?;
            }
        }
        for (arg, s) in [("alpha_bar", self.alpha), ("beta_bar", self.beta)] {
            if s.is_some_and(|s| !s.to_c64().is_finite()) {
                let mut all = true;
                for x in &inputs {
                    all &= be.all_finite(x)?;
                }
                if all {
                    return Err(crate::finite::overflow(arg, be.dtype(inputs[0])));
                }
            }
        }
        Ok(self)
    }
}

/// Tangents of a primitive's inputs; `None` is a zero tangent (and costs nothing).
#[derive(Debug)]
pub struct Tangents<'t, B: Backend> {
    /// tangent of C (the β-scaled input)
    pub c: Option<&'t B::Tensor>,
    /// tangent of A
    pub a: Option<&'t B::Tensor>,
    /// tangent of B (contraction only)
    pub b: Option<&'t B::Tensor>,
    /// tangent of α
    pub alpha: Option<DynScalar>,
    /// tangent of β
    pub beta: Option<DynScalar>,
}

impl<'t, B: Backend> Tangents<'t, B> {
    /// The finite-output policy ([`crate::finite`]) on the fresh tangent `out` (named `arg`)
    /// computed from `primals` and these tangents: [`crate::Error::NonFinite`] when it is not
    /// finite although every input is.
    pub(crate) fn check_output(
        &self,
        be: &B,
        arg: &str,
        out: &B::Tensor,
        primals: &[&B::Tensor],
    ) -> Result<()> {
        if [self.alpha, self.beta]
            .into_iter()
            .flatten()
            .any(|s| !s.to_c64().is_finite())
        {
            return Ok(());
        }
        let mut inputs: Vec<&B::Tensor> = primals.to_vec();
        inputs.extend([self.c, self.a, self.b].into_iter().flatten());
        crate::finite::check(be, || arg.to_string(), out, &inputs)
    }
}

impl<B: Backend> Clone for Tangents<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Tangents<'_, B> {}

impl<B: Backend> Default for Tangents<'_, B> {
    fn default() -> Self {
        Tangents {
            c: None,
            a: None,
            b: None,
            alpha: None,
            beta: None,
        }
    }
}

/// Shape and dtype of a primal, kept by a pullback instead of the tensor itself when only
/// its metadata is needed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Meta {
    pub dims: Dims,
    pub dtype: DType,
}

impl Meta {
    pub fn of<B: Backend>(be: &B, t: &B::Tensor) -> Self {
        Meta {
            dims: be.dims(t),
            dtype: be.dtype(t),
        }
    }
}

/// Checks that `t` (a tangent or cotangent named `arg`) has the shape of `like` and a dtype
/// that promotes to `like`'s.
pub(crate) fn check_like<B: Backend>(be: &B, arg: &str, t: &B::Tensor, like: &Meta) -> Result<()> {
    check::like(be, arg, t, &like.dims, like.dtype)
}

/// Checks that a coefficient tangent does not carry an imaginary part into a real coefficient.
pub(crate) fn check_coeff_tangent(
    arg: &str,
    t: Option<DynScalar>,
    primal: DynScalar,
) -> Result<()> {
    match t {
        Some(t) if t.dtype().is_complex() && !primal.dtype().is_complex() => {
            Err(Error::DTypeMismatch {
                arg: arg.into(),
                expected: format!("a real dtype (the primal is {})", primal.dtype()),
                actual: t.dtype(),
            })
        }
        _ => Ok(()),
    }
}

/// The conjugation flag and scale that turn `conj(α)·X` into the cotangent of an operand
/// with flag `c`: `op_c(conj(α)·X) = op_c(X)·(c ? α : conj(α))`.
pub(crate) fn cot_scale(c: Conj, alpha: DynScalar) -> DynScalar {
    if c.is_conj() { alpha } else { alpha.conj() }
}

/// Deposits a cotangent contribution into `slot`.
///
/// `compute(target, beta)` must perform `target ← beta·target + contribution` with a strict
/// primitive whose inputs (and α) have the joined dtype `input`. When `input` promotes to the
/// primal's dtype the contribution is computed straight into the slot (β = 1 into an existing
/// buffer, or into fresh zeros with β = 0); otherwise it goes through a temporary of the
/// joined dtype and [`Backend::add_projected`] (real part / rounding).
pub(crate) fn deposit<B: Backend>(
    be: &B,
    slot: &mut Option<B::Tensor>,
    primal: &Meta,
    input: DType,
    compute: impl FnOnce(&mut B::Tensor, DynScalar) -> Result<()>,
) -> Result<()> {
    if input.promotes_to(primal.dtype) {
        match slot {
            Some(t) => compute(t, DynScalar::one(primal.dtype)),
            None => {
                let mut t = be.empty(&primal.dims, primal.dtype)?;
                compute(&mut t, DynScalar::zero(primal.dtype))?;
                *slot = Some(t);
                Ok(())
            }
        }
    } else {
        let wide = input.join(primal.dtype);
        let mut tmp = be.empty(&primal.dims, wide)?;
        compute(&mut tmp, DynScalar::zero(wide))?;
        let id = Permutation::identity(primal.dims.len());
        let one = DynScalar::one(primal.dtype);
        match slot {
            Some(t) => be.add_projected(t, &tmp, &id, Conj::No, one, one),
            None => {
                let mut t = be.empty(&primal.dims, primal.dtype)?;
                be.add_projected(
                    &mut t,
                    &tmp,
                    &id,
                    Conj::No,
                    one,
                    DynScalar::zero(primal.dtype),
                )?;
                *slot = Some(t);
                Ok(())
            }
        }
    }
}

/// The narrowest dtype that carries a coefficient's complexity (`F32` or `C32`): coefficients
/// are rounded to the target's precision by the strict primitives, so only their complexity
/// constrains where a contribution can be computed.
pub(crate) fn coeff_kind(x: DynScalar) -> DType {
    if x.dtype().is_complex() {
        DType::C32
    } else {
        DType::F32
    }
}

/// Adds a coefficient cotangent (projected onto the coefficient's dtype) into `slot`.
pub(crate) fn deposit_coeff(slot: &mut Option<DynScalar>, value: DynScalar, primal: DynScalar) {
    let v = value.project(primal.dtype());
    *slot = Some(match *slot {
        Some(prev) => (prev + v).project(primal.dtype()),
        None => v,
    });
}

/// `C̄_in = conj(β)·C̄` into `slot` (the cotangent of the β-scaled input C).
pub(crate) fn deposit_c<B: Backend>(
    be: &B,
    slot: &mut Option<B::Tensor>,
    c_bar: &B::Tensor,
    c_meta: &Meta,
    beta: DynScalar,
) -> Result<()> {
    let id = Permutation::identity(c_meta.dims.len());
    deposit(
        be,
        slot,
        c_meta,
        be.dtype(c_bar).join(coeff_kind(beta)),
        |t, keep| be.add(t, c_bar, &id, Conj::No, beta.conj(), keep),
    )
}

/// `β̄ = ⟨C_old, C̄⟩` into `slot`.
pub(crate) fn deposit_beta<B: Backend>(
    be: &B,
    slot: &mut Option<DynScalar>,
    c_old: &B::Tensor,
    c_bar: &B::Tensor,
    beta: DynScalar,
) -> Result<()> {
    let v = be.inner(c_old, c_bar)?;
    deposit_coeff(slot, v, beta);
    Ok(())
}

/// Starts a tangent of C: `β·Ċ + β̇·C_old` (zeros when both are absent).
pub(crate) fn tangent_start<B: Backend>(
    be: &B,
    c_old: &B::Tensor,
    c_meta: &Meta,
    beta: DynScalar,
    dc: Option<&B::Tensor>,
    dbeta: Option<DynScalar>,
) -> Result<B::Tensor> {
    let id = Permutation::identity(c_meta.dims.len());
    let one = DynScalar::one(c_meta.dtype);
    let mut t = be.zeros(&c_meta.dims, c_meta.dtype)?;
    if let Some(dc) = dc {
        check_like(be, "tangent of c", dc, c_meta)?;
        be.add(&mut t, dc, &id, Conj::No, beta, one)?;
    }
    if let Some(db) = dbeta {
        check_coeff_tangent("tangent of beta", Some(db), beta)?;
        be.add(&mut t, c_old, &id, Conj::No, db, one)?;
    }
    Ok(t)
}
