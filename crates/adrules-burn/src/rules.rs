//! [`Op`], what it runs (the core's rules [`PrimitiveCall`] and [`NetworkPlan`], through the
//! crate's one bridge) and the entry points on burn's backend primitives, generic over every
//! burn backend.

use std::sync::Arc;

use adrules_core::Result;
use adrules_core::network::NetworkPlan;
use adrules_core::rule::PrimitiveCall;
use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

use crate::handle::BurnTensor;
use crate::node::{primal_only, record};

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
        Op::Primitive(p) => primal_only(&PrimitiveCall::new(p.clone(), N)?, inputs.into()),
        Op::Network(plan) => primal_only(plan, inputs.into()),
    }
    .1
    .map(BurnTensor::<B>::into_primitive)
}

/// Runs `op` on `inputs` (see [`Op`] for their order), primitives of `Autodiff<B, C>` for
/// any burn backend `B` and checkpointing strategy `C`, and records it as one node of the
/// autodiff graph with every input as a parent; its backward is the shared pullback on
/// [`BurnBackend<B>`](crate::BurnBackend).
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
        Op::Primitive(p) => {
            record::<B, C, _, N>(Arc::new(PrimitiveCall::new(p.clone(), N)?), inputs)
        }
        Op::Network(plan) => record::<B, C, _, N>(Arc::new(plan.clone()), inputs),
    }
}
