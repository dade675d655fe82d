//! The public rule trait: an operation with `N` tensor inputs and `M` tensor outputs whose
//! derivative rules are written once, over any [`Backend`], and run on every backend (the
//! strided CPU backend as it is, candle, burn and dfdx through their adapters' bridges).
//!
//! The vocabulary is ChainRules.jl's (and so TensorOperations.jl's and
//! ImplicitDifferentiation.jl's):
//! - [`Rule::rrule`] runs the primal and returns the outputs with a **pullback** ([`Pullback`],
//!   a vector–Jacobian product): from the cotangents of the outputs (`ȳⱼ`, `None` for an
//!   output the loss does not use: a zero cotangent, ChainRules' `ZeroTangent`) it returns the
//!   cotangents of the inputs (`x̄ᵢ = Σⱼ Jⱼᵢᴴ·ȳⱼ`; `None` for an input that is not active:
//!   ChainRules' `NoTangent`);
//! - [`Rule::frule`] (optional) returns the outputs with their **tangents** (a pushforward,
//!   a Jacobian–vector product `ẏⱼ = Σᵢ Jⱼᵢ·ẋᵢ`, `None` for a zero tangent); a rule without
//!   one returns [`no_frule`]'s typed [`Error::Unsupported`];
//! - [`Rule::keeps`] declares which inputs and outputs the pullback reads, so that an engine
//!   holds only those (or recomputes them, as burn's checkpointing does): the pullback reads
//!   them from the [`Primal`] it is handed, never from a capture of its own;
//! - [`Rule::check`] checks the inputs (ranks, shapes, dtypes) before anything runs, so that
//!   bad input is a typed error naming the argument;
//! - [`Rule::name`] names the rule in errors;
//! - [`Rule::pullback_at`] (optional) builds the pullback at a primal point an engine computed
//!   itself (candle writes a primitive's output straight into its storage), for a rule whose
//!   pullback reads nothing but what it keeps.
//!
//! A rule is run through this module's drivers, which every engine bridge calls too:
//! [`rrule`], [`frule`], [`primal`] and [`pullback_at`] check the counts and the shapes on both sides of the
//! user's code and wrap the pullback in a [`RulePullback`], which checks the cotangents it is
//! handed and the ones it returns (their shapes; dtypes are projected onto the primal's,
//! ChainRules' `ProjectTo`), fills zeros for an active input the pullback leaves at `None`,
//! and skips the pullback entirely when every output cotangent is absent.
//!
//! # Multi-output rules in one-output engines
//! candle's custom ops and burn's nodes have one output. [`OutputsNode`] is where the
//! cotangents of a rule's `M` outputs meet: the engine records one node over the inputs and
//! one selector per output, each selector deposits its output's cotangent and hands the node a
//! ticket; the node's backward runs the pullback once on all of them (the scheme is on
//! [`OutputsNode`]). [`split`] writes the scheme as `1 + M` rules of one
//! output each ([`Joint`] and a [`Selector`] per output), so that an engine's one bridge, for
//! one-output rules, runs every rule. Nothing of it is in an adapter.
//!
//! # Conventions
//! - Inputs and outputs are in a fixed order: `inputs[i]`, `outputs[j]`, cotangents and
//!   tangents in the same order. Shapes follow the [`Backend`] (row-major host data, 0-based
//!   axes).
//! - A cotangent has its primal's shape; its dtype is projected onto the primal's (a real
//!   input fed into a complex output receives the real part).
//! - **Complex cotangents** follow ChainRules and PyTorch (the crate's conventions and
//!   [`crate::math`]): for a real loss `L` and `z = x + i·y`, `z̄ = ∂L/∂x + i·∂L/∂y`, so the
//!   pullback of `y = M·x` is `x̄ = Mᴴ·ȳ`, and the adjoint identity the test kit checks is
//!   `Re⟨ȳ, J·ẋ⟩ = Re⟨Jᴴ·ȳ, ẋ⟩` with `⟨X, Y⟩ = Σ conj(X)·Y`. Tangents are plain directional
//!   derivatives.
//! - Handles are values ([`Backend`]'s contract): a rule never changes what a caller's
//!   handle (an input, a cotangent it is handed) sees. The test kit checks this.
//!
//! # Errors
//! Every driver returns [`Error`]: [`Error::CountMismatch`] for a wrong number of inputs
//! (`"inputs"`), activity flags (`"active"`), tangents (`"tangents"`), cotangents
//! (`"cotangents"`); [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming `"tangent i"`
//! or `"cotangent j"`; whatever [`Rule::check`] returns; and, for a rule that breaks its own
//! declarations (a wrong number or shape of outputs, tangents or cotangents, a pullback that
//! reads an input it did not keep), [`Error::InvalidArgument`] naming the rule
//! (`"rule `name`"`) with what it did. Nothing panics on a bad rule.
//!
//! # Example
//! The elementwise product `y = a ⊙ b` of two tensors of one shape, written once with the
//! backend's primitives (a contraction whose axes are all batch axes), run on the strided
//! backend:
//! ```
//! use adrules_core::rule::{self, Keeps, Primal, Pullback, Rule, SyncBackend};
//! use adrules_core::{Backend, Conj, ContractSpec, DynScalar, Error, HostTensor, Result};
//! use adrules_strided::Strided;
//!
//! /// `y = a ⊙ b`; pullback `ā = conj(b) ⊙ ȳ`, `b̄ = conj(a) ⊙ ȳ`.
//! #[derive(Debug)]
//! struct Mul;
//!
//! /// `c ← x ⊙ y` (every axis a batch axis of the contraction); `conj` conjugates `x`.
//! fn hadamard<B: Backend>(be: &B, x: &B::Tensor, y: &B::Tensor, conj: Conj) -> Result<B::Tensor> {
//!     let labels: String = ('a'..='z').take(be.rank(x)).collect();
//!     let spec = ContractSpec::from_labels(&labels, &labels, &labels)?;
//!     let dtype = be.dtype(x).join(be.dtype(y));
//!     let mut c = be.empty(&be.dims(x), dtype)?;
//!     let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
//!     be.contract(&mut c, x, y, &spec, conj, Conj::No, one, zero)?;
//!     Ok(c)
//! }
//!
//! struct MulPullback;
//!
//! impl<B: SyncBackend> Pullback<B> for MulPullback {
//!     fn pullback(&self, be: &B, x: &Primal<B>, ybar: &[Option<B::Tensor>]) -> Result<Vec<Option<B::Tensor>>> {
//!         // `ybar[0]` is present: the driver skips the pullback when every cotangent is absent
//!         let Some(ybar) = &ybar[0] else { return Ok(vec![None, None]) };
//!         let (a, b) = (x.input(0)?, x.input(1)?);
//!         let a_bar = x.active(0).then(|| hadamard(be, b, ybar, Conj::Yes)).transpose()?;
//!         let b_bar = x.active(1).then(|| hadamard(be, a, ybar, Conj::Yes)).transpose()?;
//!         Ok(vec![a_bar, b_bar])
//!     }
//! }
//!
//! impl Rule for Mul {
//!     fn name(&self) -> &str { "mul" }
//!     fn num_inputs(&self) -> usize { 2 }
//!     fn num_outputs(&self) -> usize { 1 }
//!
//!     fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
//!         let (a, b) = (be.dims(x[0]), be.dims(x[1]));
//!         if a != b {
//!             return Err(Error::shape("b", &a, &b));
//!         }
//!         Ok(())
//!     }
//!
//!     /// the pullback reads both inputs, no output
//!     fn keeps(&self, _active: &[bool]) -> Keeps {
//!         Keeps::inputs(2, 1)
//!     }
//!
//!     fn rrule<B: SyncBackend>(
//!         &self, be: &B, x: &[&B::Tensor], _active: &[bool],
//!     ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
//!         Ok((vec![hadamard(be, x[0], x[1], Conj::No)?], Box::new(MulPullback)))
//!     }
//! }
//!
//! # fn main() -> Result<()> {
//! let be = Strided;
//! let a = be.from_host(HostTensor::from_vec(&[3], vec![1.0, 2.0, 3.0])?)?;
//! let b = be.from_host(HostTensor::from_vec(&[3], vec![4.0, 5.0, 6.0])?)?;
//! let (y, pb) = rule::rrule(&Mul, &be, &[&a, &b], &[true, false])?;
//! assert_eq!(be.to_host(&y[0])?.as_slice::<f64>()?, &[4.0, 10.0, 18.0]);
//! let ones = be.from_host(HostTensor::from_vec(&[3], vec![1.0; 3])?)?;
//! let x_bar = pb.pullback(&[Some(ones)])?;
//! assert_eq!(be.to_host(x_bar[0].as_ref().unwrap())?.as_slice::<f64>()?, &[4.0, 5.0, 6.0]);
//! assert!(x_bar[1].is_none()); // b is not active
//!
//! // bad input is a typed error, from the rule's own check
//! let c = be.from_host(HostTensor::from_vec(&[2], vec![1.0, 2.0])?)?;
//! assert!(matches!(rule::primal(&Mul, &be, &[&a, &c]), Err(Error::ShapeMismatch { .. })));
//! # Ok(())
//! # }
//! ```
//!
//! [`Error`]: crate::Error
//! [`Error::Unsupported`]: crate::Error::Unsupported
//! [`Error::CountMismatch`]: crate::Error::CountMismatch
//! [`Error::ShapeMismatch`]: crate::Error::ShapeMismatch
//! [`Error::DTypeMismatch`]: crate::Error::DTypeMismatch
//! [`Error::InvalidArgument`]: crate::Error::InvalidArgument

mod builtin;
mod node;
mod run;
mod split;

use std::fmt::Debug;

pub use crate::linalg::{
    CholeskyRule, DetRule, EigRule, InvRule, LstsqRule, LuFactorRule, MatrixExpRule,
    MatrixNormRule, PinvRule, SlogdetRule, SolveRule, SolveTriangularRule,
};
pub use builtin::{
    ClusteredByproduct, ClusteredEighRule, EighRule, PrimitiveCall, QrRule, SvdRule,
    TruncatedSvdRule,
};
pub use node::{JointPullback, OutputsNode};
pub use run::{RulePullback, frule, primal, pullback_at, rrule};
pub use split::{Joint, Selector, split};

use crate::backend::Backend;
use crate::error::{Error, Result};

/// A [`Backend`] whose values and tensors may cross threads, as the engines' graphs require
/// (a pullback is kept by a candle op or a burn node, and may run on another thread). Every
/// backend of the workspace is one; implemented for every such backend.
pub trait SyncBackend: Backend<Tensor: Send + Sync + 'static> + Send + Sync + 'static {}

impl<B> SyncBackend for B
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync + 'static,
{
}

/// An operation with [`num_inputs`](Rule::num_inputs) tensor inputs and
/// [`num_outputs`](Rule::num_outputs) tensor outputs, with its reverse rule (and optionally
/// its forward rule), written once for every [`Backend`]. See the [module docs](self) for
/// the vocabulary, the conventions and an example.
///
/// The methods are generic over the backend, so one implementation serves the strided
/// backend, candle, burn (every routed burn backend) and dfdx; the trait is therefore not
/// object safe, and the engines' bridges are generic over the rule. What must be a trait
/// object, the pullback kept by an engine's graph, is [`Pullback`].
///
/// Call a rule through the drivers [`rrule`], [`frule`], [`primal`] (or an engine's bridge),
/// which check counts and shapes around these methods; calling the methods directly skips
/// those checks.
pub trait Rule: Debug + Send + Sync {
    /// A short name for errors (`"logsumexp"`).
    fn name(&self) -> &str;

    /// The number of tensor inputs `N` (at least 1).
    fn num_inputs(&self) -> usize;

    /// The number of tensor outputs `M` (at least 1).
    fn num_outputs(&self) -> usize;

    /// Checks the inputs (`N` of them: the drivers have checked the count) before anything
    /// runs: ranks, shapes, dtypes. The default accepts everything (the backend's primitives
    /// then report what they refuse).
    ///
    /// # Errors
    /// A typed error naming the argument (`Error::ShapeMismatch` naming `"b"`, …).
    fn check<B: Backend>(&self, be: &B, inputs: &[&B::Tensor]) -> Result<()> {
        let _ = (be, inputs);
        Ok(())
    }

    /// The rank input `i` must have, when the rule fixes it (`None`, the default: any rank,
    /// or a rank the rule's [`check`](Rule::check) decides). Engines without rank-0 tensors
    /// read it: burn passes a scalar as shape `[1]`, and its bridge hands the rule a rank-0
    /// tensor for an input declared here with rank 0 (otherwise the rule sees `[1]`).
    fn input_rank(&self, i: usize) -> Option<usize> {
        let _ = i;
        None
    }

    /// `true` when computing the outputs is cheap next to keeping them (a permutation, a
    /// trace, an elementwise map): an engine with gradient checkpointing (burn's
    /// `BalancedCheckpointing`) may then drop the outputs after the forward pass and
    /// recompute them from the inputs in backward, when a later op's backward needs them.
    /// The default is `false` (compute bound, as a GEMM or a factorisation: the outputs are
    /// kept).
    fn memory_bound(&self) -> bool {
        false
    }

    /// Which inputs and outputs the pullback reads from its [`Primal`], given which inputs are
    /// active (`active.len() == N`). An engine keeps exactly these for the backward pass (and
    /// may recompute them instead). The default keeps every input and every output; a rule
    /// that keeps less saves memory in every engine.
    fn keeps(&self, active: &[bool]) -> Keeps {
        let _ = active;
        Keeps::all(self.num_inputs(), self.num_outputs())
    }

    /// The outputs `y = f(x)` and the pullback, for the inputs `x` (in order) of which those
    /// flagged in `active` need cotangents. What the pullback needs besides the kept inputs
    /// and outputs (intermediates, factors) it owns; what it reads of the inputs and outputs
    /// it takes from the [`Primal`] it is handed.
    ///
    /// # Errors
    /// Whatever the primal's computation returns.
    #[allow(clippy::type_complexity)]
    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        inputs: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)>;

    /// The outputs and their tangents `ẏ = J·ẋ` for the input tangents `tangents` (`None`: a
    /// zero tangent), in order; an output tangent may be `None` (zero). The default is
    /// [`no_frule`]: a rule without a forward rule.
    ///
    /// # Errors
    /// [`Error::Unsupported`] from the default; otherwise whatever the computation returns.
    #[allow(clippy::type_complexity)]
    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        inputs: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let _ = (inputs, tangents);
        Err(no_frule(be.name(), self.name()))
    }

    /// The pullback alone at a primal point computed elsewhere: `inputs` and the `outputs` an
    /// engine computed itself (written straight into its own storage, or recomputed), for
    /// the inputs flagged in `active`. A rule whose pullback reads nothing but the inputs and
    /// outputs it [keeps](Rule::keeps) (plus their shapes and dtypes) can build it without
    /// running its primal; the default, `None`, says it cannot (its pullback needs what
    /// [`rrule`](Rule::rrule) computes: factors, intermediates). Call it through the driver
    /// [`pullback_at`], which checks what [`rrule`] checks.
    ///
    /// # Errors
    /// `Some(Err(…))`: whatever building the pullback returns.
    #[allow(clippy::type_complexity)]
    fn pullback_at<B: SyncBackend>(
        &self,
        be: &B,
        inputs: &[&B::Tensor],
        outputs: &[&B::Tensor],
        active: &[bool],
    ) -> Option<Result<Box<dyn Pullback<B>>>> {
        let _ = (be, inputs, outputs, active);
        None
    }

    /// The outputs alone. The default runs [`rrule`](Rule::rrule) with no input active and
    /// drops the pullback; a rule whose pullback costs something to build overrides it.
    ///
    /// # Errors
    /// As [`rrule`](Rule::rrule).
    fn primal<B: SyncBackend>(&self, be: &B, inputs: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        let active = vec![false; inputs.len()];
        Ok(self.rrule(be, inputs, &active)?.0)
    }
}

/// A borrowed rule is the rule: engines and [`split`] take rules by value.
impl<R: Rule + ?Sized> Rule for &R {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn num_inputs(&self) -> usize {
        (**self).num_inputs()
    }

    fn num_outputs(&self) -> usize {
        (**self).num_outputs()
    }

    fn input_rank(&self, i: usize) -> Option<usize> {
        (**self).input_rank(i)
    }

    fn memory_bound(&self) -> bool {
        (**self).memory_bound()
    }

    fn check<B: Backend>(&self, be: &B, inputs: &[&B::Tensor]) -> Result<()> {
        (**self).check(be, inputs)
    }

    fn keeps(&self, active: &[bool]) -> Keeps {
        (**self).keeps(active)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        inputs: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        (**self).rrule(be, inputs, active)
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        inputs: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        (**self).frule(be, inputs, tangents)
    }

    fn pullback_at<B: SyncBackend>(
        &self,
        be: &B,
        inputs: &[&B::Tensor],
        outputs: &[&B::Tensor],
        active: &[bool],
    ) -> Option<Result<Box<dyn Pullback<B>>>> {
        (**self).pullback_at(be, inputs, outputs, active)
    }

    fn primal<B: SyncBackend>(&self, be: &B, inputs: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        (**self).primal(be, inputs)
    }
}

/// The error of a rule without a forward rule ([`Rule::frule`]'s default):
/// [`Error::Unsupported`] with `backend` and `what = "frule of rule `name`"`. The test kit
/// recognises it (an error equal to this one) to skip the forward-rule checks.
pub fn no_frule(backend: &str, rule: &str) -> Error {
    Error::Unsupported {
        backend: backend.into(),
        what: format!("frule of rule `{rule}` (it has none)"),
    }
}

/// `x`, a value of a generic type `X` (a rule's backend or one of its tensors), as the
/// concrete type `Y` it is: how a rule whose code is one engine's (an implicit function whose
/// conditions are burn or candle code) reaches that engine's types inside the generic
/// [`Rule`] methods.
///
/// # Errors
/// [`Error::Unsupported`] (`backend` the name of `X`, `what` the caller's) when `X` is not
/// `Y`: the rule was run on another backend.
pub fn downcast_ref<'x, X: 'static, Y: 'static>(x: &'x X, what: &str) -> Result<&'x Y> {
    let any: &dyn std::any::Any = x;
    any.downcast_ref::<Y>()
        .ok_or_else(|| downcast_error::<X, Y>(what))
}

/// `x` as the concrete type `Y` it is, by value (an engine's tensor handed back as the
/// generic backend's); see [`downcast_ref`].
///
/// # Errors
/// As [`downcast_ref`].
pub fn downcast<X: 'static, Y: 'static>(x: X, what: &str) -> Result<Y> {
    let any: Box<dyn std::any::Any> = Box::new(x);
    any.downcast::<Y>()
        .map(|y| *y)
        .map_err(|_| downcast_error::<X, Y>(what))
}

fn downcast_error<X, Y>(what: &str) -> Error {
    Error::Unsupported {
        backend: std::any::type_name::<X>().into(),
        what: format!("{what} (it needs {})", std::any::type_name::<Y>()),
    }
}

/// The pullback of one [`Rule::rrule`] call: cotangents of the inputs from cotangents of the
/// outputs. Object safe (an engine keeps it as `Box<dyn Pullback<B>>`), `Send + Sync` (an
/// engine may run backward on another thread). Any
/// `Fn(&B, &Primal<B>, &[Option<B::Tensor>]) -> Result<Vec<Option<B::Tensor>>>` closure
/// that is `Send + Sync + 'static` is one.
pub trait Pullback<B: Backend>: Send + Sync {
    /// The cotangents of the `N` inputs (in order) for the cotangents `cotangents` of the
    /// `M` outputs (`None`: the loss does not use that output, a zero cotangent), on `be`
    /// (the backend of the `rrule` call, or one on the same device). `primal` holds the
    /// inputs and outputs the rule [keeps](Rule::keeps) and which inputs are active;
    /// return `None` for an inactive input (a value is dropped) and for an active one whose
    /// cotangent is zero (the driver fills zeros). A cotangent of the wrong shape is an
    /// error of the driver, naming the rule.
    ///
    /// # Errors
    /// Whatever the computation returns (read an input not kept: [`Primal::input`]'s error).
    fn pullback(
        &self,
        be: &B,
        primal: &Primal<B>,
        cotangents: &[Option<B::Tensor>],
    ) -> Result<Vec<Option<B::Tensor>>>;

    /// Second order (optional; forward-over-reverse): the input cotangents of
    /// [`pullback`](Pullback::pullback) with their tangents along the input tangents
    /// `tangents` (`N`, `None` a zero direction) and the tangents of the output cotangents
    /// `cotangent_tangents` (`M`, `None`: zero, the cotangents do not move): `(x̄, ẋ̄)`, so
    /// that `ẋ̄ = H_φ·ẋ` for `φ(x) = Re Σⱼ⟨ȳⱼ, yⱼ(x)⟩` when the cotangents are constants (a
    /// Hessian-vector product). `None` (the default): the rule has no second order; the
    /// driver ([`RulePullback::pullback_tangent`]) then returns
    /// [`Error::Unsupported`].
    ///
    /// # Errors
    /// Whatever the computation returns.
    #[allow(clippy::type_complexity)]
    fn pullback_tangent(
        &self,
        be: &B,
        primal: &Primal<B>,
        cotangents: &[Option<B::Tensor>],
        tangents: &[Option<B::Tensor>],
        cotangent_tangents: &[Option<B::Tensor>],
    ) -> Option<Result<(Vec<Option<B::Tensor>>, Vec<Option<B::Tensor>>)>> {
        let _ = (be, primal, cotangents, tangents, cotangent_tangents);
        None
    }
}

impl<B, F> Pullback<B> for F
where
    B: Backend,
    F: Fn(&B, &Primal<B>, &[Option<B::Tensor>]) -> Result<Vec<Option<B::Tensor>>> + Send + Sync,
{
    fn pullback(
        &self,
        be: &B,
        primal: &Primal<B>,
        cotangents: &[Option<B::Tensor>],
    ) -> Result<Vec<Option<B::Tensor>>> {
        self(be, primal, cotangents)
    }
}

/// Which inputs and outputs a pullback reads ([`Rule::keeps`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Keeps {
    /// input `i` is read
    pub inputs: Vec<bool>,
    /// output `j` is read
    pub outputs: Vec<bool>,
}

impl Keeps {
    /// Every one of `n` inputs and `m` outputs.
    pub fn all(n: usize, m: usize) -> Self {
        Keeps {
            inputs: vec![true; n],
            outputs: vec![true; m],
        }
    }

    /// Nothing (the pullback owns what it needs, or needs nothing).
    pub fn none(n: usize, m: usize) -> Self {
        Keeps {
            inputs: vec![false; n],
            outputs: vec![false; m],
        }
    }

    /// Every input, no output.
    pub fn inputs(n: usize, m: usize) -> Self {
        Keeps {
            inputs: vec![true; n],
            outputs: vec![false; m],
        }
    }

    /// Every output, no input (`y = exp(x)`: `x̄ = conj(y)·ȳ`).
    pub fn outputs(n: usize, m: usize) -> Self {
        Keeps {
            inputs: vec![false; n],
            outputs: vec![true; m],
        }
    }
}

/// What a pullback reads of its call: the inputs and outputs the rule [keeps](Rule::keeps)
/// and which inputs are active. Built by the drivers and the engines, read by
/// [`Pullback::pullback`].
#[derive(Clone, Debug)]
pub struct Primal<B: Backend> {
    inputs: Vec<Option<B::Tensor>>,
    outputs: Vec<Option<B::Tensor>>,
    active: Vec<bool>,
}

impl<B: Backend> Primal<B> {
    /// The kept inputs and outputs (`None` for one not kept) and the activity of the inputs
    /// (as long as `inputs`).
    pub fn new(
        inputs: Vec<Option<B::Tensor>>,
        outputs: Vec<Option<B::Tensor>>,
        active: Vec<bool>,
    ) -> Self {
        Primal {
            inputs,
            outputs,
            active,
        }
    }

    /// Input `i`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`"primal"`) when input `i` was not kept (declare it in
    /// [`Rule::keeps`]) or does not exist.
    pub fn input(&self, i: usize) -> Result<&B::Tensor> {
        kept(&self.inputs, "input", i)
    }

    /// Output `j`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`"primal"`) when output `j` was not kept or does not
    /// exist.
    pub fn output(&self, j: usize) -> Result<&B::Tensor> {
        kept(&self.outputs, "output", j)
    }

    /// `true` when input `i` needs a cotangent.
    pub fn active(&self, i: usize) -> bool {
        self.active.get(i).copied().unwrap_or(false)
    }

    /// The activity of every input.
    pub fn activity(&self) -> &[bool] {
        &self.active
    }

    /// The kept inputs, `None` for one not kept.
    pub fn inputs(&self) -> &[Option<B::Tensor>] {
        &self.inputs
    }

    /// The kept outputs, `None` for one not kept.
    pub fn outputs(&self) -> &[Option<B::Tensor>] {
        &self.outputs
    }
}

fn kept<'a, T>(all: &'a [Option<T>], what: &str, i: usize) -> Result<&'a T> {
    match all.get(i) {
        Some(Some(t)) => Ok(t),
        Some(None) => Err(Error::invalid(
            "primal",
            format!("{what} {i} was not kept: declare it in `Rule::keeps`"),
        )),
        None => Err(Error::invalid(
            "primal",
            format!("{what} {i} does not exist ({} {what}s)", all.len()),
        )),
    }
}
