//! One shared rule as one node of burn's autodiff graph.
//!
//! A [`Rule`] says how to compute a primal from `N` input tensors and how to pull a
//! cotangent back through the core's pullbacks; [`record`] runs the primal and registers a
//! [`Backward`] step on `Autodiff<B, C>` for any inner backend `B` and checkpointing strategy
//! `C`, with all `N` inputs as parents of one node (burn's arity is the const generic `N`).
//!
//! # Checkpointing
//! Inputs the pullback of a primitive reads are saved through burn's checkpointer
//! (`prep.checkpoint`) and retrieved in backward, never held by the node itself, so burn
//! decides whether they are kept or recomputed. A network is the exception: its node holds
//! the plan's pullback ([`Rule::Saved`]), which keeps the operands and the intermediates of
//! the contraction tree it reads, outside burn's checkpointer, until the graph is dropped
//! (burn can neither recompute nor free them early). A rule whose primal is cheap next to its output
//! ([`Rule::memory_bound`]: permuted add, trace) is registered as memory bound with a
//! [`RetroForward`] that recomputes the primal from its parents; under
//! `BalancedCheckpointing` its output is then recomputed in backward when a child needs it
//! instead of being kept (under `NoCheckpointing` burn treats every op as compute bound).
//! Contractions and networks are compute bound, like burn's own `float_matmul`: recomputing
//! them costs the GEMMs the checkpoint saves.
//!
//! # Failures inside backward
//! burn's backward step cannot return an error. Every check (ranks, shapes, dtypes, devices)
//! happens in [`record`] before the node exists, so the pullback of a primitive fails only if
//! the engine itself fails (an implicit function's pullback also runs user conditions and a
//! linear solver, which can fail). Should that happen, each input that needed a cotangent
//! receives a NaN-filled one (so no gradient is silently wrong or missing), and the error goes
//! to the [`BackwardReporter`] taken when the node was recorded: it is kept for the thread
//! that built the graph, which reads it with [`take_backward_errors`] (or gets it from
//! [`try_backward`]) even when burn ran the backward pass on another thread. A recomputation
//! ([`RetroForward`]) that fails likewise yields a NaN-filled output and reports its error.

use std::fmt::Debug;
use std::marker::PhantomData;

use adrules_core::error::backward::BackwardReporter;
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
use crate::convert::{dtype_of, float_dtype};
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

/// An operation of the shared rules with `N` tensor inputs, in a fixed order.
pub(crate) trait Rule: Clone + Debug + Send + Sync + 'static {
    /// What the forward pass hands to the pullback besides the checkpointed inputs (the
    /// intermediates of a network, the solution of an implicit function).
    type Saved<B: Backend>: Clone + Debug + Send + 'static;

    /// `true` when input `i` is a scalar (rank 0), which burn passes as a shape-`[1]`
    /// tensor (default: no input is).
    fn scalar_input(&self, _i: usize) -> bool {
        false
    }

    /// Checks the inputs (ranks, shapes; dtypes and devices are checked already) and
    /// computes the primal, with what the pullback of the inputs marked active needs
    /// (nothing when none is).
    fn primal<B: Backend>(&self, at: &At<'_, B>) -> Result<(BurnTensor<B>, Self::Saved<B>)>;

    /// `true` when recomputing the primal is cheaper than keeping its output (default: no).
    fn memory_bound(&self) -> bool {
        false
    }

    /// Which inputs the pullback reads, given which inputs need cotangents (default: none).
    fn keeps(&self, active: &[bool]) -> Vec<bool> {
        vec![false; active.len()]
    }

    /// The cotangents of the active inputs for the output cotangent `c_bar`, in input order
    /// (`None` for inactive ones). `at.x[i]` holds input `i` when [`keeps`](Rule::keeps)
    /// asked for it, and otherwise zeros of its shape and dtype (a broadcast, allocating
    /// nothing) that stand for its shape only.
    fn pullback<B: Backend>(
        &self,
        at: &At<'_, B>,
        saved: &Self::Saved<B>,
        c_bar: &BurnTensor<B>,
    ) -> Cotangents<B>;
}

/// What [`Rule::pullback`] returns: the cotangents of the inputs in input order.
pub(crate) type Cotangents<B> = Result<Vec<Option<BurnTensor<B>>>>;

/// Where a [`Rule`] runs: the backend, the inputs and which of them need cotangents.
pub(crate) struct At<'a, B: Backend> {
    pub be: &'a BurnBackend<B>,
    pub x: &'a [BurnTensor<B>],
    pub active: &'a [bool],
}

impl<'a, B: Backend> At<'a, B> {
    pub fn new(be: &'a BurnBackend<B>, x: &'a [BurnTensor<B>], active: &'a [bool]) -> Self {
        At { be, x, active }
    }
}

/// The backend on the device of the first of the primitives `x` (the default device for
/// none), and `x` as the inputs of `rule`: tensors of the logical shapes it expects, checked
/// to be f32 or f64 and on that device.
///
/// # Errors
/// [`Error::Unsupported`] or [`Error::DeviceMismatch`] naming `"input i"`.
fn inputs<B: Backend>(
    rule: &impl Rule,
    x: Vec<FloatTensor<B>>,
) -> (BurnBackend<B>, Result<Vec<BurnTensor<B>>>) {
    let be = BurnBackend::new(x.first().map(|t| t.device()).unwrap_or_default());
    let read = |(i, t)| {
        let t = BurnTensor::read(t, rule.scalar_input(i));
        be.check(&format!("input {i}"), &t).map(|_| t)
    };
    let x = x.into_iter().enumerate().map(read).collect();
    (be, x)
}

/// The primal of `rule` on the primitives `x`, none of them active, and the backend it ran
/// on.
pub(crate) fn primal_only<B: Backend, R: Rule>(
    rule: &R,
    x: Vec<FloatTensor<B>>,
) -> (BurnBackend<B>, Result<BurnTensor<B>>) {
    let active = vec![false; x.len()];
    let (be, x) = inputs(rule, x);
    let out = x.and_then(|x| rule.primal(&At::new(&be, &x, &active)));
    (be, out.map(|(out, _)| out))
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

/// What a recorded node keeps for backward besides its [`RuleNode`]: the checkpoint ids of
/// the inputs it reads, what the forward pass saved, and every input's shapes and dtype.
#[derive(Clone, Debug)]
pub(crate) struct NodeState<S, const N: usize> {
    kept: [Option<NodeId>; N],
    saved: S,
    meta: Vec<Meta>,
}

/// A recorded [`Rule`]: its backward step and, for a memory-bound rule, the recomputation of
/// its output from its parents. Failures go to `reporter`, the thread that recorded it.
#[derive(Clone, Debug)]
struct RuleNode<B, R, const N: usize> {
    rule: R,
    inputs: [NodeId; N],
    output: Meta,
    reporter: BackwardReporter,
    _backend: PhantomData<B>,
}

impl<B: Backend, R: Rule, const N: usize> Backward<B, N> for RuleNode<B, R, N> {
    type State = NodeState<R::Saved<B>, N>;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let c_bar = grads.consume::<B>(&ops.node);
        let be = BurnBackend::<B>::new(c_bar.device());
        let c_bar = BurnTensor::read(c_bar, self.output.dims.is_empty());
        let active: Vec<bool> = ops.parents.iter().map(Option::is_some).collect();
        let mut x = Vec::with_capacity(N);
        for (id, meta) in ops.state.kept.iter().zip(&ops.state.meta) {
            let scalar = meta.dims.is_empty();
            x.push(match id {
                Some(id) => BurnTensor::read(checkpointer.retrieve_node_output(*id), scalar),
                None => be.broadcast_zeros(&meta.dims, meta.dtype),
            });
        }
        let at = At::new(&be, &x, &active);
        let cotangents = self.rule.pullback(&at, &ops.state.saved, &c_bar);
        let cotangents = cotangents.inspect_err(|e| self.reporter.report(e.clone()));
        let failed = cotangents.is_err();
        let cotangents = cotangents.unwrap_or_default();
        for (i, parent) in ops.parents.iter().enumerate() {
            let Some(parent) = parent else { continue };
            let meta = &ops.state.meta[i];
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

impl<B: Backend, R: Rule, const N: usize> RetroForward for RuleNode<B, R, N> {
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

/// Runs `rule` on the primitives of `x` and records it as one node of the autodiff graph
/// (see the module docs). Nothing is recorded when the primal fails.
///
/// # Errors
/// Those of the rule's primal (ranks, shapes, dtypes, devices).
pub(crate) fn record<B: Backend, C: CheckpointStrategy, R: Rule, const N: usize>(
    rule: R,
    x: [FloatTensor<Autodiff<B, C>>; N],
) -> Result<FloatTensor<Autodiff<B, C>>> {
    let primals: Vec<FloatTensor<B>> = x.iter().map(|t| t.primitive().clone()).collect();
    let (be, primals) = inputs(&rule, primals);
    let primals = primals?;
    let active: Vec<bool> = x.iter().map(|t| t.is_tracked()).collect();
    let (out, saved) = rule.primal(&At::new(&be, &primals, &active))?;
    let meta: Vec<Meta> = primals.iter().map(Meta::of).collect();
    let keeps = rule.keeps(&active);
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
            let keep = |i: usize| keeps.get(i) == Some(&true);
            let kept = std::array::from_fn(|i| keep(i).then(|| prep.checkpoint(&x[i])));
            prep.finish(NodeState { kept, saved, meta }, out)
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
