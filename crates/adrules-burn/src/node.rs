//! The burn bridge: any one-output core [`Rule`] as one node of burn's autodiff graph.
//!
//! [`record`] runs the rule through the core's checked driver ([`rule::rrule`]) on a
//! [`BurnBackend`] and registers a [`Backward`] step on `Autodiff<B, C>` for any inner
//! backend `B` and checkpointing strategy `C`, with all `N` inputs as parents of one node
//! (burn's arity is the const generic `N`); its backward is the rule's checked pullback. Every
//! op of this crate is a rule recorded here: the primitives ([`PrimitiveCall`]), networks
//! ([`NetworkPlan`]), the decompositions and a user's rules of several outputs (split by
//! [`rule::split`] into one-output rules), the implicit functions. A rank-0 input (a rule's
//! [`input_rank`](Rule::input_rank) of 0) is passed as burn's shape `[1]`.
//!
//! # Checkpointing
//! The inputs a rule [keeps](Rule::keeps) are saved through burn's checkpointer
//! (`prep.checkpoint`) and retrieved in backward, never held by the node itself, so burn
//! decides whether they are kept or recomputed (a primitive keeps the operands a cotangent
//! reads). What the pullback owns besides (a network's intermediates, a decomposition's
//! factors) the node holds until the graph is dropped. A rule whose primal is cheap next to
//! its output ([`Rule::memory_bound`]: permuted add, trace) is registered as memory bound
//! with a [`RetroForward`] that recomputes the primal from its parents; under
//! `BalancedCheckpointing` its output is then recomputed in backward when a child needs it
//! instead of being kept (under `NoCheckpointing` burn treats every op as compute bound).
//! Contractions, networks and decompositions are compute bound, like burn's own
//! `float_matmul`: recomputing them costs the GEMMs the checkpoint saves.
//!
//! [`PrimitiveCall`]: adrules_core::rule::PrimitiveCall
//! [`NetworkPlan`]: adrules_core::network::NetworkPlan
//!
//! # Failures inside backward
//! burn's backward step cannot return an error. Every check (ranks, shapes, dtypes, devices)
//! happens in [`record`] before the node exists, so the pullback of a primitive fails only if
//! the engine itself fails (a decomposition's pullback can meet an ill-defined gauge, an
//! implicit function's runs user conditions and a linear solver, a user's rule its own code). Should that happen, each input that needed a cotangent
//! receives a NaN-filled one (so no gradient is silently wrong or missing), and the error goes
//! to the [`BackwardReporter`] taken when the node was recorded: it is kept for the thread
//! that built the graph, which reads it with [`take_backward_errors`] (or gets it from
//! [`try_backward`]) even when burn ran the backward pass on another thread. A recomputation
//! ([`RetroForward`]) that fails likewise yields a NaN-filled output and reports its error.

use std::marker::PhantomData;
use std::sync::Arc;

use adrules_core::error::backward::BackwardReporter;
use adrules_core::rule::{self, Primal, Rule, RulePullback};
pub use adrules_core::take_backward_errors;
use adrules_core::{DType, Dims, Error, Result};
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::retro_forward::RetroForward;
use burn_autodiff::checkpoint::state::BackwardStates;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_autodiff::{Autodiff, NodeId};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, TensorMetadata};

use burn_tensor::{Gradients as TensorGradients, Tensor};

use crate::backend::BurnBackend;
use crate::convert::{dtype_of, engine_error, float_dtype};
use crate::handle::BurnTensor;

/// Logical shape, primitive shape and dtype of a tensor.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Meta {
    pub dims: Dims,
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl Meta {
    pub fn of<B: Backend>(t: &BurnTensor<B>) -> Self {
        let (dims, shape) = (t.dims().into(), t.primitive().shape().to_vec());
        let dtype = dtype_of(t.primitive().dtype()).unwrap_or(DType::F32);
        Meta { dims, shape, dtype }
    }
}

/// The backend on the device of the first of the primitives `x` (the default device for
/// none), and `x` as the inputs of `rule`: tensors of the logical shapes it expects (an input
/// the rule declares rank 0 is read from burn's shape `[1]` as a scalar), checked to be f32
/// or f64 and on that device.
///
/// # Errors
/// [`Error::Unsupported`] or [`Error::DeviceMismatch`] naming `"input i"`.
fn inputs<B: Backend>(
    rule: &impl Rule,
    x: Vec<FloatTensor<B>>,
) -> (BurnBackend<B>, Result<Vec<BurnTensor<B>>>) {
    let be = BurnBackend::new(x.first().map(|t| t.device()).unwrap_or_default());
    let read = |(i, t)| {
        let t = BurnTensor::read(t, rule.input_rank(i) == Some(0));
        be.check(&format!("input {i}"), &t).map(|_| t)
    };
    let x = x.into_iter().enumerate().map(read).collect();
    (be, x)
}

/// The output of a one-output rule's result.
fn single<T>(mut y: Vec<T>) -> Result<T> {
    if y.len() != 1 {
        return Err(engine_error(format!("a node of {} outputs", y.len())));
    }
    Ok(y.remove(0))
}

/// The primal of the one-output `rule` on the primitives `x`, none of them active, and the
/// backend it ran on.
pub(crate) fn primal_only<B: Backend, R: Rule>(
    rule: &R,
    x: Vec<FloatTensor<B>>,
) -> (BurnBackend<B>, Result<BurnTensor<B>>) {
    let (be, x) = inputs(rule, x);
    let out = x.and_then(|x| {
        let x: Vec<&BurnTensor<B>> = x.iter().collect();
        single(rule::primal(rule, &be, &x)?)
    });
    (be, out)
}

/// Runs burn's backward pass from `loss` and returns its gradients, or the first error an
/// adrules node reported inside it (see [`take_backward_errors`]).
///
/// Errors reported earlier for graphs built on this thread and not yet taken are discarded
/// first, so the error returned belongs to this pass. Only nodes recorded on this thread
/// report here: a node recorded on another thread reports to that thread.
///
/// # Errors
/// [`Error::InvalidArgument`] (`"loss"`) when `loss` is not tracked by autodiff (burn's
/// `backward` would panic), or when its graph was already consumed by an earlier backward
/// pass (burn keeps no graph after a backward pass and panics; that panic is caught before
/// burn has changed anything, and the graph is left as it was); [`Error::Backend`] for any
/// other panic inside burn's backward pass; otherwise the first error reported during the
/// pass (the gradients it affected are NaN-filled).
pub fn try_backward<const D: usize>(loss: &Tensor<D>) -> Result<TensorGradients> {
    if !loss.is_tracked() {
        let why = "is not tracked by autodiff (no input requires gradients)";
        return Err(Error::invalid("loss", why));
    }
    drop(take_backward_errors());
    // burn-autodiff 0.22 panics when the tape was consumed ("Burn does not support
    // retain_graph"), after validating the graph and before touching it, and releases its
    // graph lock (parking_lot / spin: no poisoning) while unwinding; there is no public way
    // to ask first
    let grads = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loss.backward()));
    let grads = grads.map_err(|payload| {
        drop(take_backward_errors());
        backward_panic(payload.as_ref())
    })?;
    take_backward_errors()
        .into_iter()
        .next()
        .map_or(Ok(grads), Err)
}

/// The typed error of a panic inside burn's backward pass.
fn backward_panic(payload: &(dyn std::any::Any + Send)) -> Error {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message");
    if message.contains("retain_graph") || message.contains("already been consumed") {
        Error::invalid(
            "loss",
            format!(
                "its graph was already consumed by an earlier backward pass (burn keeps no \
                 graph after backward: combine the losses before one backward pass, or \
                 recompute the forward pass); burn: {message}"
            ),
        )
    } else {
        Error::Backend {
            backend: "burn".into(),
            message: format!("panicked in the backward pass: {message}"),
        }
    }
}

/// A NaN-filled primitive of `meta`'s primitive shape and dtype on `be`'s device.
fn nan<B: Backend>(be: &BurnBackend<B>, meta: &Meta) -> FloatTensor<B> {
    let shape = meta.shape.clone().into();
    B::float_full(shape, f64::NAN.into(), be.device(), float_dtype(meta.dtype))
}

/// What a recorded node keeps for backward: the checkpoint ids of the inputs the rule
/// keeps, the rule's checked pullback (its primal taken out: the kept inputs come from
/// burn's checkpointer), the outputs it keeps, and every input's shapes and dtype.
#[derive(Clone, Debug)]
pub(crate) struct NodeState<B: Backend, const N: usize> {
    kept: [Option<NodeId>; N],
    pullback: Arc<RulePullback<BurnBackend<B>>>,
    outputs: Vec<Option<BurnTensor<B>>>,
    meta: Vec<Meta>,
}

/// A recorded one-output [`Rule`]: its backward step and, for a memory-bound rule, the
/// recomputation of its output from its parents. Failures go to `reporter`, the thread
/// that recorded it.
#[derive(Debug)]
struct RuleNode<B, R, const N: usize> {
    rule: Arc<R>,
    inputs: [NodeId; N],
    output: Meta,
    reporter: BackwardReporter,
    _backend: PhantomData<B>,
}

impl<B, R, const N: usize> Clone for RuleNode<B, R, N> {
    fn clone(&self) -> Self {
        RuleNode {
            rule: self.rule.clone(),
            inputs: self.inputs,
            output: self.output.clone(),
            reporter: self.reporter,
            _backend: PhantomData,
        }
    }
}

impl<B: Backend, R: Rule + 'static, const N: usize> Backward<B, N> for RuleNode<B, R, N> {
    type State = NodeState<B, N>;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let c_bar = grads.consume::<B>(&ops.node);
        let be = BurnBackend::<B>::new(c_bar.device());
        let c_bar = BurnTensor::read(c_bar, self.output.dims.is_empty());
        let state = &ops.state;
        let read = |(id, meta): (&Option<NodeId>, &Meta)| {
            let t = id.map(|id| checkpointer.retrieve_node_output(id));
            t.map(|t| BurnTensor::read(t, meta.dims.is_empty()))
        };
        let x = state.kept.iter().zip(&state.meta).map(read).collect();
        let pb = &state.pullback;
        let primal = Primal::new(x, state.outputs.clone(), pb.active().to_vec());
        let cotangents = pb.pullback_on(&be, &primal, &[Some(c_bar)]);
        let cotangents = cotangents.inspect_err(|e| self.reporter.report(e.clone()));
        let failed = cotangents.is_err();
        let cotangents = cotangents.unwrap_or_default();
        for (i, parent) in ops.parents.iter().enumerate() {
            let Some(parent) = parent else { continue };
            let meta = &state.meta[i];
            let g = match cotangents.get(i).cloned().flatten() {
                Some(g) => g.into_primitive_shaped(&meta.shape),
                None => {
                    if !failed {
                        let why = format!("no cotangent for active input {i} of {:?}", self.rule);
                        self.reporter.report(Error::invalid("pullback", why));
                    }
                    nan(&be, meta)
                }
            };
            grads.register::<B>(parent.id, g);
        }
    }
}

/// Number of recomputations run, for the tests of the checkpointing behaviour.
#[cfg(test)]
static RECOMPUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl<B: Backend, R: Rule + 'static, const N: usize> RetroForward for RuleNode<B, R, N> {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        #[cfg(test)]
        RECOMPUTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let x = self
            .inputs
            .map(|id| states.get_state::<FloatTensor<B>>(&id));
        let (be, out) = primal_only::<B, R>(&self.rule, x.into());
        let out = match out {
            Ok(out) => out.into_primitive_shaped(&self.output.shape),
            Err(e) => {
                self.reporter.report(e);
                nan(&be, &self.output)
            }
        };
        states.save(out_node, out);
    }
}

/// Runs the one-output `rule` on the primitives of `x` through the core's checked driver
/// and records it as one node of the autodiff graph (see the module docs). Nothing is
/// recorded when the primal fails.
///
/// # Errors
/// Those of the driver (counts, the rule's [`check`](Rule::check), the primal) and of the
/// inputs (dtypes, devices).
pub(crate) fn record<B: Backend, C: CheckpointStrategy, R: Rule + 'static, const N: usize>(
    rule: Arc<R>,
    x: [FloatTensor<Autodiff<B, C>>; N],
) -> Result<FloatTensor<Autodiff<B, C>>> {
    let primals: Vec<FloatTensor<B>> = x.iter().map(|t| t.primitive().clone()).collect();
    let (be, primals) = inputs(&*rule, primals);
    let primals = primals?;
    let refs: Vec<&BurnTensor<B>> = primals.iter().collect();
    let active: Vec<bool> = x.iter().map(|t| t.is_tracked()).collect();
    let (out, pullback) = if active.contains(&true) {
        let (y, mut pb) = rule::rrule(&*rule, &be, &refs, &active)?;
        // the kept inputs come from burn's checkpointer in backward
        let outputs = pb.take_primal().map(|p| p.outputs().to_vec());
        (single(y)?, Some((pb, outputs.unwrap_or_default())))
    } else {
        (single(rule::primal(&*rule, &be, &refs)?)?, None)
    };
    let meta: Vec<Meta> = primals.iter().map(Meta::of).collect();
    let (memory_bound, output) = (rule.memory_bound(), Meta::of(&out));
    let (inputs, reporter) = (x.each_ref().map(|t| t.id()), BackwardReporter::current());
    let node = RuleNode::<B, R, N> {
        rule,
        inputs,
        output,
        reporter,
        _backend: PhantomData,
    };
    let prep = node.clone().prepare::<C>(x.each_ref().map(|t| t.node()));
    let prep = if memory_bound {
        prep.memory_bound().retro_forward(node).parents(&x)
    } else {
        prep.compute_bound()
    };
    let out = out.into_primitive();
    Ok(match prep.stateful() {
        OpsKind::Tracked(mut prep) => {
            let (pullback, outputs) =
                pullback.ok_or_else(|| engine_error("a tracked node without an active input"))?;
            let keeps = pullback.keeps().inputs.clone();
            let keep = |i: usize| keeps.get(i) == Some(&true);
            let kept = std::array::from_fn(|i| keep(i).then(|| prep.checkpoint(&x[i])));
            let state = NodeState {
                kept,
                pullback: Arc::new(pullback),
                outputs,
                meta,
            };
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(out),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use adrules_core::Permutation;
    use adrules_core::rules::AddOp;
    use burn_tensor::{DType, Device, Tensor, TensorData};

    use super::RECOMPUTED;

    /// `Σ y⊙y` with `y = 2·P(x)` from an adrules add; burn's `mul` keeps `y` for its backward.
    fn gradient(device: &Device) -> Vec<f64> {
        let data = TensorData::new((0..6).map(f64::from).collect::<Vec<_>>(), [2, 3]);
        let x = Tensor::<2>::from_data(data, (device, DType::F64)).require_grad();
        let op = AddOp::new(Permutation::new(&[1, 0]).unwrap()).alpha(2.0);
        let y: Tensor<2> = crate::add(&op, &x).unwrap();
        let grads = (y.clone() * y).sum().backward();
        x.grad(&grads).unwrap().into_data().iter::<f64>().collect()
    }

    #[test]
    fn memory_bound_outputs_are_recomputed_only_under_balanced_checkpointing() {
        let want: Vec<f64> = (0..6).map(|i| 8.0 * f64::from(i)).collect();
        let before = RECOMPUTED.load(Ordering::SeqCst);
        assert_eq!(gradient(&Device::flex().autodiff()), want);
        assert_eq!(
            RECOMPUTED.load(Ordering::SeqCst),
            before,
            "kept, not recomputed"
        );
        assert_eq!(
            gradient(&Device::flex().autodiff().gradient_checkpointing()),
            want
        );
        assert!(
            RECOMPUTED.load(Ordering::SeqCst) > before,
            "the add's output is recomputed from x in backward"
        );
    }
}
