//! Any [`Rule`] of the core (a downstream crate's own operation) as a differentiable burn op:
//! [`apply`] (re-exported as [`apply_rule`](crate::apply_rule)).
//!
//! # How
//! The inputs are routed to the burn backend they live on as every op of this crate is (see
//! [`apply`](crate::apply): Flex, NdArray, cubecl; with autodiff when an input has it), and
//! the rule runs there through the core's checked driver ([`adrules_core::rule::rrule`]) on a
//! [`BurnBackend`]:
//! - **one output**: one node of burn's graph with every input as a parent, whose backward is
//!   the rule's pullback. The inputs the rule [keeps](Rule::keeps) are saved through burn's
//!   checkpointer (burn decides whether they are kept or recomputed), the kept outputs and
//!   the pullback by the node;
//! - **`M` outputs**: the core's multi-output scheme ([`OutputsNode`]), as the decompositions
//!   of [`crate::linalg`]: one node over the inputs whose output is `[M]` zeros and whose saved
//!   state is the core's node (holding the pullback with the inputs and outputs it keeps),
//!   and per output one selector node over it; burn's backward deposits each used output's
//!   cotangent and the node runs the pullback once (`None` for an unused output).
//!
//! Every output comes back as an [`Operand`] of its own rank (turn it into a tensor with
//! [`Operand::into_tensor`]); a rank-0 output has shape `[1]`, burn's convention, and a
//! rank-0 input is passed with shape `[1]` (the rule sees shape `[1]`).
//!
//! # Errors
//! Those of the routing (as [`apply`](crate::apply): [`Error::Unsupported`] for a dtype other
//! than f32/f64 or a backend this build does not route, [`Error::DeviceMismatch`] naming
//! `"input i"`), [`Error::CountMismatch`] (`"inputs"`), and the core driver's (the rule's own
//! [`check`](Rule::check) first), all before anything is recorded. A failure of the
//! pullback inside `backward()` cannot be returned through burn: the affected gradients are
//! NaN-filled and the typed error goes to [`take_backward_errors`](crate::take_backward_errors)
//! / [`try_backward`](crate::try_backward), as for every node of this crate.

use std::sync::{Arc, OnceLock};

use adrules_core::rule::{self as core_rule, OutputsNode, Primal, Rule, RulePullback};
use adrules_core::{Error, Result};
use burn_backend::Backend;
use burn_tensor::Tensor;

use crate::backend::BurnBackend;
use crate::convert::engine_error;
use crate::handle::BurnTensor;
use crate::node::{self, At, Cotangents};
use crate::select::{self, Select, Stash};
use crate::tensor::{Operand, run};

/// What a one-output node keeps: the pullback and the outputs the rule keeps.
#[derive(Debug)]
struct Kept<B: Backend> {
    pullback: RulePullback<BurnBackend<B>>,
    outputs: Vec<Option<BurnTensor<B>>>,
}

/// A one-output rule as one node (see the module docs).
#[derive(Debug)]
struct Single<R>(Arc<R>);

impl<R> Clone for Single<R> {
    fn clone(&self) -> Self {
        Single(self.0.clone())
    }
}

impl<R: Rule + 'static> node::Rule for Single<R> {
    /// `None` when no input is active
    type Saved<B: Backend> = Option<Arc<Kept<B>>>;

    fn primal<B: Backend>(&self, at: &At<'_, B>) -> Result<(BurnTensor<B>, Self::Saved<B>)> {
        let x: Vec<&BurnTensor<B>> = at.x.iter().collect();
        if !at.active.contains(&true) {
            let mut y = core_rule::primal(&*self.0, at.be, &x)?;
            return Ok((y.remove(0), None));
        }
        let (mut y, mut pullback) = core_rule::rrule(&*self.0, at.be, &x, at.active)?;
        // the kept inputs come from burn's checkpointer in backward
        let outputs = pullback
            .take_primal()
            .map(|p| p.outputs().to_vec())
            .unwrap_or_default();
        let kept = Kept { pullback, outputs };
        Ok((y.remove(0), Some(Arc::new(kept))))
    }

    fn keeps(&self, active: &[bool]) -> Vec<bool> {
        self.0.keeps(active).inputs
    }

    fn pullback<B: Backend>(
        &self,
        at: &At<'_, B>,
        saved: &Self::Saved<B>,
        c_bar: &BurnTensor<B>,
    ) -> Cotangents<B> {
        let kept = saved
            .as_ref()
            .ok_or_else(|| engine_error("a rule's node recorded without its pullback"))?;
        let pb = &kept.pullback;
        let inputs = at.x.iter().zip(&pb.keeps().inputs);
        let inputs = inputs.map(|(t, &k)| k.then(|| t.clone())).collect();
        let primal = Primal::new(inputs, kept.outputs.clone(), pb.active().to_vec());
        pb.pullback_on(at.be, &primal, &[Some(c_bar.clone())])
    }
}

/// The core's node of a rule on the burn backend `B`.
type RuleNode<B> = Arc<OutputsNode<BurnBackend<B>, RulePullback<BurnBackend<B>>>>;

/// A rule of several outputs as the node of the core's multi-output scheme (see the module
/// docs).
#[derive(Debug)]
struct Multi<R> {
    rule: Arc<R>,
    /// the outputs' shapes, set by the primal (which runs once per call: the node is compute
    /// bound, burn never recomputes it)
    shapes: Arc<OnceLock<Vec<Vec<usize>>>>,
    stash: Stash,
}

impl<R> Clone for Multi<R> {
    fn clone(&self) -> Self {
        Multi {
            rule: self.rule.clone(),
            shapes: self.shapes.clone(),
            stash: self.stash.clone(),
        }
    }
}

impl<R: Rule + 'static> node::Rule for Multi<R> {
    type Saved<B: Backend> = RuleNode<B>;

    fn primal<B: Backend>(&self, at: &At<'_, B>) -> Result<(BurnTensor<B>, RuleNode<B>)> {
        let x: Vec<&BurnTensor<B>> = at.x.iter().collect();
        let (y, pullback) = core_rule::rrule(&*self.rule, at.be, &x, at.active)?;
        let _ = self
            .shapes
            .set(y.iter().map(|t| t.dims().to_vec()).collect());
        let dtype = pullback.input_dtype(0).unwrap_or(adrules_core::DType::F32);
        let node = Arc::new(OutputsNode::new(pullback));
        let zeros = adrules_core::Backend::zeros(at.be, &[y.len()], dtype)?;
        select::stash::<B>(&self.stash, y, node.clone());
        Ok((zeros, node))
    }

    fn pullback<B: Backend>(
        &self,
        _: &At<'_, B>,
        node: &RuleNode<B>,
        node_bar: &BurnTensor<B>,
    ) -> Cotangents<B> {
        node.pullback(node_bar)
    }
}

/// Runs `rule` on `inputs` (in the rule's order, any ranks) as a differentiable burn op and
/// returns its outputs, in order (see the module docs): a loss built from any of them
/// reaches the inputs through `backward()` by the rule's pullback.
///
/// # Errors
/// See the module docs; every error comes before anything is recorded.
///
/// # Example
/// ```
/// use adrules_burn::burn_tensor::{DType, Device, Tensor, TensorData};
/// use adrules_testing::samples::Split; // (y₀, y₁) = (3·x, x ⊙ x)
///
/// # fn main() -> adrules_core::Result<()> {
/// let device = Device::flex().autodiff();
/// let data = TensorData::new(vec![1.0f64, 2.0, 3.0], [3]);
/// let x = Tensor::<1>::from_data(data, (&device, DType::F64)).require_grad();
/// let y = adrules_burn::apply_rule(&Split, [(&x).into()])?;
/// let y1: Tensor<1> = y[1].clone().into_tensor()?;
/// // Σ x²: the gradient is 2·x (output 0 is unused)
/// let grads = y1.sum().backward();
/// let g: Vec<f64> = x.grad(&grads).unwrap().into_data().iter::<f64>().collect();
/// assert_eq!(g, vec![2.0, 4.0, 6.0]);
/// # Ok(())
/// # }
/// ```
pub fn apply<R: Rule + Clone + 'static, const N: usize>(
    rule: &R,
    inputs: [Operand; N],
) -> Result<Vec<Operand>> {
    if N != rule.num_inputs() {
        return Err(Error::CountMismatch {
            arg: "inputs".into(),
            expected: rule.num_inputs(),
            actual: N,
        });
    }
    let rule = Arc::new(rule.clone());
    if rule.num_outputs() == 1 {
        // the output's rank is the primitive's: `Tensor<1>` only carries it to an operand
        let out: Tensor<1> = run(Single(rule), inputs)?;
        return Ok(vec![out.into()]);
    }
    let stash = Stash::default();
    let shapes = Arc::new(OnceLock::new());
    let multi = Multi {
        rule,
        shapes: shapes.clone(),
        stash: stash.clone(),
    };
    let node: Tensor<1> = run(multi, inputs)?;
    let shapes = shapes
        .get()
        .ok_or_else(|| engine_error("the rule's outputs were not recorded"))?;
    let select = |(index, output): (usize, &Vec<usize>)| {
        let dims = if output.is_empty() {
            vec![1]
        } else {
            output.clone()
        };
        let rule = Select {
            index,
            dims,
            output: output.clone(),
            stash: stash.clone(),
        };
        run::<_, 1, 1>(rule, [(&node).into()]).map(Operand::from)
    };
    let outputs = shapes.iter().enumerate().map(select).collect();
    select::clear(&stash);
    outputs
}
