//! One shared rule as one node of burn's autodiff graph.
//!
//! A [`Rule`] says how to compute a primal from `N` input tensors and how to pull a
//! cotangent back through the core's pullbacks; [`record`] runs the primal and registers a
//! [`Backward`] step on `Autodiff<B, C>` for any inner backend `B` and checkpointing strategy
//! `C`, with all `N` inputs as parents of one node (burn's arity is the const generic `N`).
//!
//! # Checkpointing
//! Inputs the pullback reads are saved through burn's checkpointer (`prep.checkpoint`) and
//! retrieved in backward, never held by the node itself, so burn decides whether they are
//! kept or recomputed. A rule whose primal is cheap next to its output
//! ([`Rule::memory_bound`]: permuted add, trace) is registered as memory bound with a
//! [`RetroForward`] that recomputes the primal from its parents; under
//! `BalancedCheckpointing` its output is then recomputed in backward when a child needs it
//! instead of being kept (under `NoCheckpointing` burn treats every op as compute bound).
//! Contractions and networks are compute bound, like burn's own `float_matmul`: recomputing
//! them costs the GEMMs the checkpoint saves.
//!
//! # Failures inside backward
//! burn's backward step cannot return an error. Every check (ranks, shapes, dtypes, devices)
//! happens in [`record`] before the node exists, so the pullback fails only if the engine
//! itself fails. Should that happen, each input that needed a cotangent receives a NaN-filled
//! one (so no gradient is silently wrong or missing), and the error is kept for
//! [`take_backward_errors`]. A recomputation ([`RetroForward`]) that fails likewise yields a
//! NaN-filled output.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Mutex;

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

/// A primitive of the shared rules with `N` tensor inputs, in a fixed order.
pub(crate) trait Rule: Clone + Debug + Send + Sync + 'static {
    /// The rank input `i` has (a scalar input may come as burn's shape-`[1]` tensor).
    fn input_rank(&self, i: usize) -> usize;

    /// Checks the inputs (ranks, shapes, dtypes and devices, through the [`BurnBackend`]
    /// primitives) and computes the primal.
    fn primal<B: Backend>(&self, be: &BurnBackend<B>, x: &[BurnTensor<B>])
    -> Result<BurnTensor<B>>;

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
        active: &[bool],
        c_bar: &BurnTensor<B>,
    ) -> Result<Vec<Option<BurnTensor<B>>>>;
}

/// The inputs of `rule` as tensors of the ranks it expects.
fn inputs<B: Backend, R: Rule>(
    rule: &R,
    x: impl Iterator<Item = FloatTensor<B>>,
) -> Vec<BurnTensor<B>> {
    x.enumerate()
        .map(|(i, t)| BurnTensor::with_rank(t, rule.input_rank(i)))
        .collect()
}

static BACKWARD_ERRORS: Mutex<Vec<Error>> = Mutex::new(Vec::new());

fn report(e: Error) {
    // A poisoned lock only means another thread panicked while pushing: keep the log.
    BACKWARD_ERRORS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(e);
}

/// Errors raised inside burn's backward pass (or a checkpoint recomputation) by adrules
/// nodes since the last call, oldest first; the log is emptied.
///
/// burn's backward cannot fail, so such an error is reported here and the affected
/// cotangents (or recomputed outputs) are NaN-filled. All argument checks happen before a
/// node is recorded, so this log stays empty unless the engine itself fails.
pub fn take_backward_errors() -> Vec<Error> {
    std::mem::take(&mut *BACKWARD_ERRORS.lock().unwrap_or_else(|p| p.into_inner()))
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
/// every input's shapes and dtype, and the output's logical rank.
#[derive(Clone, Debug)]
pub(crate) struct NodeState<const N: usize> {
    kept: [Option<NodeId>; N],
    meta: Vec<Meta>,
    output_rank: usize,
}

/// The backward step of a [`Rule`].
#[derive(Debug)]
struct RuleBackward<R>(R);

impl<B: Backend, R: Rule, const N: usize> Backward<B, N> for RuleBackward<R> {
    type State = NodeState<N>;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let c_bar = grads.consume::<B>(&ops.node);
        let be = BurnBackend::<B>::new(c_bar.device());
        let c_bar = BurnTensor::with_rank(c_bar, ops.state.output_rank);
        let active: Vec<bool> = ops.parents.iter().map(Option::is_some).collect();
        let x: Vec<BurnTensor<B>> = ops
            .state
            .kept
            .iter()
            .zip(&ops.state.meta)
            .map(|(id, meta)| match id {
                Some(id) => BurnTensor::with_rank(
                    checkpointer.retrieve_node_output::<FloatTensor<B>>(*id),
                    meta.dims.len(),
                ),
                None => be.broadcast_zeros(&meta.dims, meta.dtype),
            })
            .collect();
        let cotangents = self.0.pullback(&be, &x, &active, &c_bar);
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
        let out = match self.rule.primal(&be, &x) {
            Ok(out) => out.into_primitive_shaped(&self.output.shape),
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
    let out = rule.primal(&be, &primals)?;
    let output = Meta::of(&out);
    let out = out.into_primitive();
    let meta: Vec<Meta> = primals.iter().map(Meta::of).collect();
    let active: Vec<bool> = x.iter().map(|t| t.is_tracked()).collect();
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
            let output_rank = output.dims.len();
            prep.finish(
                NodeState {
                    kept,
                    meta,
                    output_rank,
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
