//! The selector node of the core's multi-output scheme ([`OutputsNode`], and the
//! decompositions' [`FactorsNode`] over it) on burn: one node per output over the node's
//! output, whose primal is the output's values and whose backward deposits the output's
//! cotangent with the core's node. Shared by [`crate::linalg`] and [`crate::rule`].

use std::any::Any;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use adrules_core::Result;
use adrules_core::linalg::FactorsNode;
use adrules_core::rule::{JointPullback, OutputsNode};
use burn_backend::Backend;

use crate::backend::BurnBackend;
use crate::convert::engine_error;
use crate::handle::BurnTensor;
use crate::node::{At, Cotangents, Rule};

/// A core node that keeps the cotangents of its outputs (the deposit of the scheme).
pub(crate) trait Depot<B: Backend>: Send + Sync + Debug {
    /// Deposits the cotangent of output `index` and returns the selector's cotangent of the
    /// node's output (the ticket vector).
    fn deposit(&self, index: usize, cotangent: BurnTensor<B>) -> Result<BurnTensor<B>>;
}

impl<B: Backend> Depot<B> for FactorsNode<BurnBackend<B>> {
    fn deposit(&self, index: usize, cotangent: BurnTensor<B>) -> Result<BurnTensor<B>> {
        FactorsNode::deposit(self, index, cotangent)
    }
}

impl<B: Backend, P> Depot<B> for OutputsNode<BurnBackend<B>, P>
where
    P: JointPullback<BurnBackend<B>> + Send + Sync + Debug,
{
    fn deposit(&self, index: usize, cotangent: BurnTensor<B>) -> Result<BurnTensor<B>> {
        OutputsNode::deposit(self, index, cotangent)
    }
}

/// The core's node on the burn backend `B`, as the selectors see it.
pub(crate) type DepotOf<B> = Arc<dyn Depot<B>>;

/// What a node's primal leaves for the selectors' primals, which run right after it on the
/// same backend `B`: `(Vec<BurnTensor<B>>, DepotOf<B>)`, the outputs and the core's node
/// (type-erased: a [`Rule`]'s primal is generic over the backend).
pub(crate) type Stash = Arc<Mutex<Option<Box<dyn Any + Send>>>>;

/// Leaves the outputs and the core's node in `stash` for the selectors.
pub(crate) fn stash<B: Backend>(stash: &Stash, outputs: Vec<BurnTensor<B>>, node: DepotOf<B>) {
    let s: Box<dyn Any + Send> = Box::new((outputs, node));
    *stash.lock().unwrap_or_else(PoisonError::into_inner) = Some(s);
}

/// Empties `stash` (the outputs and the node are the selectors' once they ran).
pub(crate) fn clear(stash: &Stash) {
    *stash.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// The selector [`Rule`] of output `index` in the core's multi-output scheme, over the
/// node's output: its output is output `index`, with the shape `dims` of the user-facing
/// tensor (`output` in the core's shape).
#[derive(Clone, Debug)]
pub(crate) struct Select {
    pub index: usize,
    pub dims: Vec<usize>,
    pub output: Vec<usize>,
    pub stash: Stash,
}

impl Rule for Select {
    type Saved<B: Backend> = DepotOf<B>;

    fn primal<B: Backend>(&self, _: &At<'_, B>) -> Result<(BurnTensor<B>, DepotOf<B>)> {
        let stash = self.stash.lock().unwrap_or_else(PoisonError::into_inner);
        let (outputs, node) = stash
            .as_ref()
            .and_then(|s| s.downcast_ref::<(Vec<BurnTensor<B>>, DepotOf<B>)>())
            .ok_or_else(|| engine_error("the node's outputs were not recorded"))?;
        let output = outputs
            .get(self.index)
            .ok_or_else(|| engine_error(format!("no output {}", self.index)))?;
        let out = output.clone().into_primitive_shaped(&self.dims);
        Ok((BurnTensor::logical(out, &self.dims), node.clone()))
    }

    fn pullback<B: Backend>(
        &self,
        at: &At<'_, B>,
        node: &DepotOf<B>,
        c_bar: &BurnTensor<B>,
    ) -> Cotangents<B> {
        let c_bar = c_bar.clone().into_primitive_shaped(&self.output);
        let node_bar = node.deposit(self.index, BurnTensor::logical(c_bar, &self.output))?;
        Ok(vec![at.active[0].then_some(node_bar)])
    }
}
