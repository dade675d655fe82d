//! The ops on burn backend primitives, generic over every burn backend.

use adrules_core::{Error, Result};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};

use crate::backend::BurnBackend;
use crate::node::{Rule, inputs, record};
use crate::op::Op;

/// Runs `op` on `inputs` (see [`Op`] for their order), primitives of any burn backend `B`,
/// without recording anything: the primal only.
///
/// # Errors
/// [`Error::CountMismatch`] for a wrong number of inputs; [`Error::InvalidArgument`]
/// (`"beta"`) for a nonzero β without C; [`Error::Unsupported`] for a dtype other than f32
/// or f64; [`Error::DeviceMismatch`] for inputs on different devices; rank, shape and index
/// errors of the op.
pub fn forward<B: Backend, const N: usize>(
    op: &Op,
    inputs: [FloatTensor<B>; N],
) -> Result<FloatTensor<B>> {
    run_plain::<B, _>(&op.call(N)?, &inputs)
}

/// The primal of `rule` on `inputs`, recording nothing.
pub(crate) fn run_plain<B: Backend, R: Rule>(
    rule: &R,
    x: &[FloatTensor<B>],
) -> Result<FloatTensor<B>> {
    let first = x.first().ok_or_else(|| Error::CountMismatch {
        arg: "inputs".into(),
        expected: 1,
        actual: 0,
    })?;
    let be = BurnBackend::<B>::new(first.device());
    let x = inputs(rule, x.iter().cloned());
    let active = vec![false; x.len()];
    Ok(rule.primal(&be, &x, &active)?.0.into_primitive())
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
/// and the error goes to [`take_backward_errors`](crate::take_backward_errors).
///
/// # Errors
/// As [`forward`], all returned before any node is recorded.
pub fn forward_autodiff<B: Backend, C: CheckpointStrategy, const N: usize>(
    op: &Op,
    inputs: [FloatTensor<Autodiff<B, C>>; N],
) -> Result<FloatTensor<Autodiff<B, C>>> {
    record::<B, C, _, N>(op.call(N)?, inputs)
}
