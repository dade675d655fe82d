//! A rule of `M` outputs as `1 + M` rules of one output each ([`split`]), for engines whose
//! ops have one output: the [`OutputsNode`] scheme written once, as rules, so that an
//! engine's bridge for one-output rules serves every rule.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use super::node::OutputsNode;
use super::run::{self, RulePullback};
use super::{Keeps, Primal, Pullback, Rule, SyncBackend};
use crate::backend::Backend;
use crate::error::{Error, Result};

type Outputs<B> = (Vec<<B as Backend>::Tensor>, Box<dyn Pullback<B>>);

/// The core's node of a rule on backend `B`.
type Node<B> = Arc<OutputsNode<B, RulePullback<B>>>;

/// What [`Joint`] leaves for its [`Selector`]s, type-erased (a rule is generic over the
/// backend): `(Vec<B::Tensor>, Option<Node<B>>)`, the outputs and, when an input is active,
/// the node.
#[derive(Clone, Default)]
struct Slot(Arc<Mutex<Option<Box<dyn Any + Send>>>>);

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        f.debug_struct("Slot").field("full", &full).finish()
    }
}

/// Splits `rule` (of `M` outputs) into the node rule [`Joint`] and the `M` [`Selector`]s of
/// the [`OutputsNode`] scheme, each of one output:
/// - [`Joint`] takes the rule's inputs and returns a real vector `[M]` of zeros (no data of
///   the rule; the ticket vector, in the real dtype of the rule's first input); its rrule
///   runs the rule once, through the checked driver, and leaves the outputs and the
///   [`OutputsNode`] for the selectors; its pullback is [`OutputsNode::pullback`];
/// - [`Selector`] `j` takes the node's vector and returns output `j`; its pullback deposits
///   the output's cotangent with the node ([`OutputsNode::deposit`]) and returns the ticket
///   vector as the cotangent of the node's vector.
///
/// An engine records the joint rule and then the selectors, in order, on the same backend,
/// as ops of one output each (its bridge for one-output rules); then it calls
/// [`Joint::release`] (the outputs belong to the selectors' ops). The engine's backward
/// runs every selector a loss reaches before the joint node and sums the tickets, and the
/// node runs the rule's pullback once, with `None` for an output the loss does not use.
/// Nothing is recomputed: neither rule is [memory bound](Rule::memory_bound).
///
/// Gradients are those of the rule's own pullback ([`run::rrule`]'s checks included), to
/// the bit.
///
/// # Errors
/// The parts' errors come from their calls: the joint rule's are the rule's own (counts,
/// [`Rule::check`], the primal); a selector run before its joint rule, on another backend,
/// or after [`Joint::release`] is [`Error::InvalidArgument`] (`"selector"`).
pub fn split<R: Rule>(rule: R) -> (Joint<R>, Vec<Selector>) {
    let slot = Slot::default();
    let selectors = (0..rule.num_outputs())
        .map(|index| Selector {
            index,
            slot: slot.clone(),
        })
        .collect();
    let joint = Joint {
        rule: Arc::new(rule),
        slot,
    };
    (joint, selectors)
}

/// The node rule of a [`split`] rule: the rule's inputs in, the ticket vector `[M]` out.
#[derive(Debug)]
pub struct Joint<R> {
    rule: Arc<R>,
    slot: Slot,
}

impl<R> Clone for Joint<R> {
    fn clone(&self) -> Self {
        Joint {
            rule: self.rule.clone(),
            slot: self.slot.clone(),
        }
    }
}

impl<R> Joint<R> {
    /// The split rule.
    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// Drops the outputs and the node left for the selectors (after they ran).
    pub fn release(&self) {
        *self.slot.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

impl<R: Rule> Joint<R> {
    /// The ticket vector `[M]` of zeros in the real dtype of the first input.
    fn tickets<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<B::Tensor> {
        let dtype = x.first().map_or(crate::DType::F64, |t| be.dtype(t)).real();
        be.zeros(&[self.rule.num_outputs()], dtype)
    }

    fn leave<B: SyncBackend>(&self, outputs: Vec<B::Tensor>, node: Option<Node<B>>) {
        let s: Box<dyn Any + Send> = Box::new((outputs, node));
        *self.slot.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(s);
    }
}

impl<R: Rule> Rule for Joint<R> {
    fn name(&self) -> &str {
        self.rule.name()
    }

    fn num_inputs(&self) -> usize {
        self.rule.num_inputs()
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn input_rank(&self, i: usize) -> Option<usize> {
        self.rule.input_rank(i)
    }

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        self.rule.check(be, x)
    }

    /// Nothing: the node holds the rule's pullback with what it keeps.
    fn keeps(&self, active: &[bool]) -> Keeps {
        Keeps::none(active.len(), 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        active: &[bool],
    ) -> Result<Outputs<B>> {
        let (y, pullback) = run::rrule(&*self.rule, be, x, active)?;
        let node = Arc::new(OutputsNode::new(pullback));
        let tickets = self.tickets(be, x)?;
        self.leave(y, Some(node.clone()));
        let pullback = move |_: &B, _: &Primal<B>, c: &[Option<B::Tensor>]| {
            let Some(tickets) = &c[0] else {
                return Ok(vec![None; node.joint_pullback().num_inputs()]);
            };
            node.pullback(tickets)
        };
        Ok((vec![tickets], Box::new(pullback)))
    }

    fn primal<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        let y = run::primal(&*self.rule, be, x)?;
        let tickets = self.tickets(be, x)?;
        self.leave::<B>(y, None);
        Ok(vec![tickets])
    }
}

/// Output `index` of a [`split`] rule, over the joint rule's ticket vector.
#[derive(Clone, Debug)]
pub struct Selector {
    index: usize,
    slot: Slot,
}

impl Selector {
    /// The output it selects.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Output `index` and the node, from the joint rule's call on `B`.
    fn take<B: SyncBackend>(&self) -> Result<(B::Tensor, Option<Node<B>>)> {
        let slot = self.slot.0.lock().unwrap_or_else(PoisonError::into_inner);
        let why = "runs after its joint rule, on the same backend, before `Joint::release`";
        let (outputs, node) = slot
            .as_ref()
            .and_then(|s| s.downcast_ref::<(Vec<B::Tensor>, Option<Node<B>>)>())
            .ok_or_else(|| Error::invalid("selector", why))?;
        let y = outputs.get(self.index).cloned().ok_or_else(|| {
            let why = format!("output {} of {}", self.index, outputs.len());
            Error::invalid("selector", why)
        })?;
        Ok((y, node.clone()))
    }
}

impl Rule for Selector {
    fn name(&self) -> &str {
        "selector"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn input_rank(&self, _: usize) -> Option<usize> {
        Some(1)
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::none(1, 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        _: &B,
        _: &[&B::Tensor],
        active: &[bool],
    ) -> Result<Outputs<B>> {
        let (y, node) = self.take::<B>()?;
        let node = match (node, active[0]) {
            (Some(node), _) => Some(node),
            (None, false) => None,
            (None, true) => {
                let why = "is active, but its joint rule ran without an active input";
                return Err(Error::invalid("selector", why));
            }
        };
        let index = self.index;
        let pullback = move |_: &B, _: &Primal<B>, c: &[Option<B::Tensor>]| {
            let (Some(node), Some(c)) = (&node, &c[0]) else {
                return Ok(vec![None]);
            };
            Ok(vec![Some(node.deposit(index, c.clone())?)])
        };
        Ok((vec![y], Box::new(pullback)))
    }

    fn primal<B: SyncBackend>(&self, _: &B, _: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        Ok(vec![self.take::<B>()?.0])
    }
}
