//! [`Op`], the node [`Rule`]s it runs (a core [`Primitive`] call, a [`NetworkPlan`]) and the
//! entry points on burn's backend primitives, generic over every burn backend.

use adrules_core::network::{NetworkPlan, NetworkPullback};
use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{Error, Result};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

use crate::backend::BurnBackend;
use crate::handle::BurnTensor;
use crate::node::{At, Cotangents, Rule, primal_only, record};

/// What [`forward`](crate::forward), [`forward_autodiff`](crate::forward_autodiff) and
/// [`apply`](crate::apply) run as one node: a core primitive call or a whole tensor network.
/// Built with `.into()` from a [`Primitive`], an [`AddOp`], a [`TraceOp`], a [`ContractOp`]
/// or a [`NetworkPlan`].
///
/// # Inputs
/// A primitive takes its operands in order — `[A]` (add, trace), `[A, B]` (contraction) —
/// or, to update an input C as `C ← β·C + α·…`, C first: `[C, A]`, `[C, A, B]`
/// ([`Primitive::takes_c`]). Without C, β must be zero. α and β are constants (burn
/// differentiates tensors only), so the pullback never reads C, and reads A (B) only when B
/// (A) needs a cotangent ([`Primitive::reads_operand`]). A network takes its operands in the
/// order of its index lists, with the shapes it was planned for.
///
/// # Networks
/// A whole network is one node of burn's graph, whatever the number of operands (burn's
/// arity is a const generic): the forward pass runs the plan ([`NetworkPlan::rrule`]: partial
/// traces, then one pairwise contraction per merge of the contraction tree) and the node
/// keeps the plan's pullback, with the intermediates it reads, until backward, where the
/// pairwise pullbacks run in reverse.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
#[allow(clippy::large_enum_variant)] // built once per call and passed by reference
pub enum Op {
    /// one call of a core primitive: permuted add, generalized trace or (batched) pairwise
    /// contraction
    Primitive(Primitive),
    /// a tensor network lowered for fixed operand shapes
    Network(NetworkPlan),
}

macro_rules! op_from {
    ($variant:ident: $($t:ty),*) => {$(
        impl From<$t> for Op {
            fn from(op: $t) -> Self {
                Op::$variant(op.into())
            }
        }
    )*};
}
op_from!(Primitive: Primitive, AddOp, TraceOp, ContractOp);
op_from!(Network: NetworkPlan);

impl Op {
    /// Rank of the output.
    pub fn output_rank(&self) -> usize {
        match self {
            Op::Primitive(p) => p.output_rank(),
            Op::Network(plan) => plan.output_dims().len(),
        }
    }
}

/// Runs `op` on `inputs` (see [`Op`] for their order), primitives of any burn backend `B`,
/// without recording anything: the primal only.
///
/// # Errors
/// [`Error::CountMismatch`] for a wrong number of inputs; [`Error::InvalidArgument`]
/// (`"beta"`) for a nonzero β without C; [`Error::Unsupported`] for a dtype other than f32
/// or f64; [`Error::DeviceMismatch`] for inputs on different devices; rank, shape and index
/// errors of the op ([`Error::ShapeMismatch`] naming `"operand k"` for a network operand of
/// another shape than planned).
///
/// [`Error::CountMismatch`]: adrules_core::Error::CountMismatch
/// [`Error::InvalidArgument`]: adrules_core::Error::InvalidArgument
/// [`Error::Unsupported`]: adrules_core::Error::Unsupported
/// [`Error::DeviceMismatch`]: adrules_core::Error::DeviceMismatch
/// [`Error::ShapeMismatch`]: adrules_core::Error::ShapeMismatch
pub fn forward<B: Backend, const N: usize>(
    op: &Op,
    inputs: [FloatTensor<B>; N],
) -> Result<FloatTensor<B>> {
    match op {
        Op::Primitive(p) => primal_only(&PrimitiveRule::new(p.clone(), N)?, inputs.into()),
        Op::Network(plan) => primal_only(&NetworkRule(plan.clone()), inputs.into()),
    }
    .1
    .map(BurnTensor::<B>::into_primitive)
}

/// Runs `op` on `inputs` (see [`Op`] for their order), primitives of `Autodiff<B, C>` for
/// any burn backend `B` and checkpointing strategy `C`, and records it as one node of the
/// autodiff graph with every input as a parent; its backward is the shared pullback on
/// [`BurnBackend<B>`].
///
/// # Checkpointing
/// Inputs the pullback reads are saved through burn's checkpointer and retrieved in
/// backward, never held by the node itself, so burn decides whether they are kept or
/// recomputed; gradients of an input used several times accumulate in burn's `Gradients`.
/// Permuted add and trace are cheap next to their output and are registered as memory bound
/// with a recomputation (`.memory_bound().retro_forward(..)`): under `BalancedCheckpointing`
/// their output is recomputed from their inputs when a later op needs it in backward, instead
/// of being kept (under `NoCheckpointing` burn treats every op as compute bound). A
/// contraction is compute bound, like burn's own `float_matmul`: recomputing it would cost
/// the GEMM the checkpoint saves.
///
/// # Failures inside backward
/// burn's backward step cannot return an error. Every check happens here, before the node
/// exists, so the pullback fails only if the engine itself fails; should it, each input that
/// needed a cotangent receives a NaN-filled one (no gradient is silently wrong or missing)
/// and the error is reported for the thread that recorded the node: read it there with
/// [`take_backward_errors`](crate::take_backward_errors), or run backward through
/// [`try_backward`](crate::try_backward).
///
/// # Errors
/// As [`forward`], all returned before any node is recorded.
pub fn forward_autodiff<B: Backend, C: CheckpointStrategy, const N: usize>(
    op: &Op,
    inputs: [FloatTensor<Autodiff<B, C>>; N],
) -> Result<FloatTensor<Autodiff<B, C>>> {
    match op {
        Op::Primitive(p) => record::<B, C, _, N>(PrimitiveRule::new(p.clone(), N)?, inputs),
        Op::Network(plan) => record::<B, C, _, N>(NetworkRule(plan.clone()), inputs),
    }
}

/// A [`Primitive`] called with its inputs in order `[C?, operands…]`.
#[derive(Clone, Debug)]
pub(crate) struct PrimitiveRule {
    op: Primitive,
    /// whether input 0 is C
    with_c: bool,
}

impl PrimitiveRule {
    /// The rule of `op` called with `inputs` tensors.
    ///
    /// # Errors
    /// Those of [`Primitive::takes_c`].
    pub fn new(op: Primitive, inputs: usize) -> Result<Self> {
        let with_c = op.takes_c(inputs)?;
        Ok(PrimitiveRule { op, with_c })
    }

    /// The operands among the inputs (C dropped).
    fn operands<'a, B: Backend>(&self, x: &'a [BurnTensor<B>]) -> Vec<&'a BurnTensor<B>> {
        x.iter().skip(usize::from(self.with_c)).collect()
    }
}

impl Rule for PrimitiveRule {
    type Saved<B: Backend> = ();

    fn scalar_input(&self, i: usize) -> bool {
        match i.checked_sub(usize::from(self.with_c)) {
            None => self.op.output_rank() == 0,
            Some(k) => self.op.operand_rank(k) == Some(0),
        }
    }

    fn primal<B: Backend>(&self, at: &At<'_, B>) -> Result<(BurnTensor<B>, ())> {
        let operands = self.operands(at.x);
        let mut c = match (self.with_c, at.x.first()) {
            (true, Some(c)) => c.clone(),
            _ => self.op.fresh_output(at.be, &operands)?,
        };
        self.op.apply(at.be, &mut c, &operands)?;
        Ok((c, ()))
    }

    fn memory_bound(&self) -> bool {
        !matches!(self.op, Primitive::Contract(_))
    }

    fn keeps(&self, active: &[bool]) -> Vec<bool> {
        let act = self.op.activity(self.with_c, active);
        let k = usize::from(self.with_c);
        (0..active.len())
            .map(|i| i >= k && self.op.reads_operand(i - k, act))
            .collect()
    }

    fn pullback<B: Backend>(&self, at: &At<'_, B>, _: &(), c_bar: &BurnTensor<B>) -> Cotangents<B> {
        let act = self.op.activity(self.with_c, at.active);
        let pullback = self
            .op
            .pullback_at(at.be, c_bar, &self.operands(at.x), act)?;
        let g = pullback.pullback(c_bar)?;
        Ok(self.op.cotangents_in_order(g, self.with_c).into_vec())
    }
}

/// A [`NetworkPlan`] on its operands.
#[derive(Clone, Debug)]
pub(crate) struct NetworkRule(pub NetworkPlan);

impl Rule for NetworkRule {
    /// the plan's pullback, with the intermediates it reads
    type Saved<B: Backend> = Option<NetworkPullback<BurnBackend<B>>>;

    fn scalar_input(&self, i: usize) -> bool {
        self.0.operand_dims(i).is_some_and(<[usize]>::is_empty)
    }

    fn primal<B: Backend>(&self, at: &At<'_, B>) -> Result<(BurnTensor<B>, Self::Saved<B>)> {
        let operands: Vec<&BurnTensor<B>> = at.x.iter().collect();
        if at.active.iter().any(|&a| a) {
            let (c, pullback) = self.0.rrule(at.be, &operands, at.active)?;
            Ok((c, Some(pullback)))
        } else {
            Ok((self.0.execute(at.be, &operands)?, None))
        }
    }

    fn pullback<B: Backend>(
        &self,
        _: &At<'_, B>,
        saved: &Self::Saved<B>,
        c_bar: &BurnTensor<B>,
    ) -> Cotangents<B> {
        let why = "a network node recorded without its pullback";
        let pullback = saved
            .as_ref()
            .ok_or_else(|| Error::invalid("pullback", why))?;
        pullback.pullback(c_bar)
    }
}
