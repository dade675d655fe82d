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
//! receives a NaN-filled one (so no gradient is silently wrong or missing), and the error is
//! kept for [`take_backward_errors`]. A recomputation ([`RetroForward`]) that fails likewise
//! yields a NaN-filled output.

use std::cell::RefCell;
use std::fmt::Debug;
use std::marker::PhantomData;

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

use crate::backend::{BurnBackend, BurnTensor, dtype_of};

/// Logical shape, primitive shape and dtype of a tensor.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Meta {
    pub dims: Dims,
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl Meta {
    pub fn of<B: Backend>(t: &BurnTensor<B>) -> Self {
        Meta {
            dims: t.dims().iter().copied().collect(),
            shape: t.primitive().shape().to_vec(),
            dtype: dtype_of(t.primitive().dtype()).unwrap_or(DType::F32),
        }
    }
}

/// An operation of the shared rules with `N` tensor inputs, in a fixed order.
pub(crate) trait Rule: Clone + Debug + Send + Sync + 'static {
    /// What the forward pass hands to the pullback besides the checkpointed inputs (the
    /// intermediates of a network, the solution of an implicit function).
    type Saved<B: Backend>: Clone + Debug + Send + 'static;

    /// `true` when input `i` is a scalar (rank 0), which burn passes as a shape-`[1]`
    /// tensor.
    fn scalar_input(&self, i: usize) -> bool;

    /// Checks the inputs (ranks, shapes, dtypes and devices, through the [`BurnBackend`]
    /// primitives) and computes the primal, with what the pullback of the inputs marked
    /// `active` needs (nothing when none is).
    fn primal<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        active: &[bool],
    ) -> Result<(BurnTensor<B>, Self::Saved<B>)>;

    /// `true` when recomputing the primal is cheaper than keeping its output.
    fn memory_bound(&self) -> bool;

    /// Which inputs the pullback reads, given which inputs need cotangents.
    fn keeps(&self, active: &[bool]) -> Vec<bool>;

    /// The cotangents of the active inputs, in input order (`None` for inactive ones). `x[i]`
    /// holds input `i` when [`keeps`](Rule::keeps) asked for it, and otherwise zeros of its
    /// shape and dtype (a broadcast, allocating nothing) that stand for its shape only.
    fn pullback<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        saved: &Self::Saved<B>,
        active: &[bool],
        c_bar: &BurnTensor<B>,
    ) -> Result<Vec<Option<BurnTensor<B>>>>;
}

/// The inputs of `rule` as tensors of the logical shapes it expects.
pub(crate) fn inputs<B: Backend, R: Rule>(
    rule: &R,
    x: impl Iterator<Item = FloatTensor<B>>,
) -> Vec<BurnTensor<B>> {
    x.enumerate()
        .map(|(i, t)| BurnTensor::read(t, rule.scalar_input(i)))
        .collect()
}

thread_local! {
    static BACKWARD_ERRORS: RefCell<Vec<Error>> = const { RefCell::new(Vec::new()) };
}

fn report(e: Error) {
    BACKWARD_ERRORS.with(|log| log.borrow_mut().push(e));
}

/// Errors raised by adrules nodes inside burn backward passes (or checkpoint
/// recomputations) run on this thread since the last call, oldest first; the log is emptied.
///
/// burn's backward cannot fail, so such an error is reported here and the affected
/// cotangents (or recomputed outputs) are NaN-filled: no gradient is silently wrong. All
/// argument checks of the primitive ops happen before a node is recorded, so for them this
/// log stays empty unless the engine itself fails; an [`Implicit`](crate::Implicit) function
/// reports here what its conditions and linear solver do wrong in backward.
pub fn take_backward_errors() -> Vec<Error> {
    BACKWARD_ERRORS.with(|log| std::mem::take(&mut *log.borrow_mut()))
}

/// A NaN-filled primitive of `meta`'s primitive shape and dtype on `be`'s device, reporting
/// `e`.
fn poisoned<B: Backend>(be: &BurnBackend<B>, meta: &Meta, e: Error) -> FloatTensor<B> {
    report(e);
    let dtype = if meta.dtype.is_double() {
        burn_backend::FloatDType::F64
    } else {
        burn_backend::FloatDType::F32
    };
    B::float_full(
        meta.shape.clone().into(),
        f64::NAN.into(),
        be.device(),
        dtype,
    )
}

/// What a recorded node keeps for backward: the checkpoint ids of the inputs it reads,
/// what the forward pass saved, every input's shapes and dtype, and whether the output is a
/// scalar.
#[derive(Clone, Debug)]
pub(crate) struct NodeState<S, const N: usize> {
    kept: [Option<NodeId>; N],
    saved: S,
    meta: Vec<Meta>,
    scalar_output: bool,
}

/// The backward step of a [`Rule`].
#[derive(Debug)]
struct RuleBackward<R>(R);

impl<B: Backend, R: Rule, const N: usize> Backward<B, N> for RuleBackward<R> {
    type State = NodeState<R::Saved<B>, N>;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let c_bar = grads.consume::<B>(&ops.node);
        let be = BurnBackend::<B>::new(c_bar.device());
        let c_bar = BurnTensor::read(c_bar, ops.state.scalar_output);
        let active: Vec<bool> = ops.parents.iter().map(Option::is_some).collect();
        let x: Vec<BurnTensor<B>> = ops
            .state
            .kept
            .iter()
            .zip(&ops.state.meta)
            .map(|(id, meta)| match id {
                Some(id) => BurnTensor::read(
                    checkpointer.retrieve_node_output::<FloatTensor<B>>(*id),
                    meta.dims.is_empty(),
                ),
                None => be.broadcast_zeros(&meta.dims, meta.dtype),
            })
            .collect();
        let cotangents = self.0.pullback(&be, &x, &ops.state.saved, &active, &c_bar);
        for (i, parent) in ops.parents.iter().enumerate() {
            let Some(parent) = parent else { continue };
            let meta = &ops.state.meta[i];
            let g = match &cotangents {
                Ok(c) => c
                    .get(i)
                    .cloned()
                    .flatten()
                    .map(|g| g.into_primitive_shaped(&meta.shape)),
                Err(e) => Some(poisoned(&be, meta, e.clone())),
            };
            match g {
                Some(g) => grads.register::<B>(parent.id, g),
                None => {
                    let e = Error::invalid(
                        "pullback",
                        format!("no cotangent for active input {i} of {:?}", self.0),
                    );
                    grads.register::<B>(parent.id, poisoned(&be, meta, e));
                }
            }
        }
    }
}

/// Recomputation of a memory-bound [`Rule`]'s output from its parents.
#[derive(Debug)]
struct RetroRule<B, R, const N: usize> {
    rule: R,
    inputs: [NodeId; N],
    output: Meta,
    _backend: PhantomData<B>,
}

/// Number of recomputations run, for the tests of the checkpointing behaviour.
#[cfg(test)]
static RECOMPUTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl<B: Backend, R: Rule, const N: usize> RetroForward for RetroRule<B, R, N> {
    fn forward(&self, states: &mut BackwardStates, out_node: NodeId) {
        #[cfg(test)]
        RECOMPUTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let x: Vec<FloatTensor<B>> = self
            .inputs
            .iter()
            .map(|id| states.get_state::<FloatTensor<B>>(id))
            .collect();
        let device = match x.first() {
            Some(t) => t.device(),
            None => Default::default(),
        };
        let be = BurnBackend::<B>::new(device);
        let x = inputs(&self.rule, x.into_iter());
        let active = vec![false; x.len()];
        let out = match self.rule.primal(&be, &x, &active) {
            Ok((out, _)) => out.into_primitive_shaped(&self.output.shape),
            Err(e) => poisoned(&be, &self.output, e),
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
    let device = match x.first() {
        Some(t) => t.primitive().device(),
        None => Default::default(),
    };
    let be = BurnBackend::<B>::new(device);
    let primals = inputs(&rule, x.iter().map(|t| t.primitive().clone()));
    let active: Vec<bool> = x.iter().map(|t| t.is_tracked()).collect();
    let (out, saved) = rule.primal(&be, &primals, &active)?;
    let output = Meta::of(&out);
    let out = out.into_primitive();
    let meta: Vec<Meta> = primals.iter().map(Meta::of).collect();
    let keeps = rule.keeps(&active);
    let prep = RuleBackward(rule.clone()).prepare::<C>(x.each_ref().map(|t| t.node()));
    let prep = if rule.memory_bound() {
        let retro = RetroRule::<B, R, N> {
            rule,
            inputs: x.each_ref().map(|t| t.id()),
            output: output.clone(),
            _backend: PhantomData,
        };
        prep.memory_bound().retro_forward(retro).parents(&x)
    } else {
        prep.compute_bound()
    };
    Ok(match prep.stateful() {
        OpsKind::Tracked(mut prep) => {
            let mut kept = [None; N];
            for (i, t) in x.iter().enumerate() {
                if keeps.get(i).copied().unwrap_or(false) {
                    kept[i] = Some(prep.checkpoint(t));
                }
            }
            let scalar_output = output.dims.is_empty();
            prep.finish(
                NodeState {
                    kept,
                    saved,
                    meta,
                    scalar_output,
                },
                out,
            )
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
