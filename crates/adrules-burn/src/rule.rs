//! Any [`Rule`] of the core (a downstream crate's own operation) as a differentiable burn op:
//! [`apply`] (re-exported as [`apply_rule`](crate::apply_rule)).
//!
//! # How
//! The inputs are routed to the burn backend they live on as every op of this crate is (see
//! [`apply`](crate::apply): Flex, NdArray, cubecl; with autodiff when an input has it), and
//! the rule runs there through the core's checked driver ([`adrules_core::rule::rrule`]) on a
//! [`BurnBackend`](crate::BurnBackend), as one node of the crate's one bridge (every op of
//! this crate is a rule recorded by it):
//! - **one output**: one node of burn's graph with every input as a parent, whose backward is
//!   the rule's pullback. The inputs the rule [keeps](Rule::keeps) are saved through burn's
//!   checkpointer (burn decides whether they are kept or recomputed), the kept outputs and
//!   the pullback by the node;
//! - **`M` outputs**: the core's multi-output scheme ([`OutputsNode`](adrules_core::rule::OutputsNode)), as the decompositions
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

use std::sync::Arc;

use adrules_core::rule::{Rule, split};
use adrules_core::{Error, Result};
use burn_tensor::Tensor;

use crate::tensor::{Operand, run};

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
    if rule.num_outputs() == 1 {
        // the output's rank is the primitive's: `Tensor<1>` only carries it to an operand
        let out: Tensor<1> = run(Arc::new(rule.clone()), inputs)?;
        return Ok(vec![out.into()]);
    }
    let (joint, selectors) = split(rule.clone());
    let node: Result<Tensor<1>> = run(Arc::new(joint.clone()), inputs);
    let outputs = node.and_then(|node| {
        let select = |s| run::<_, 1, 1>(Arc::new(s), [(&node).into()]).map(Operand::from);
        selectors.into_iter().map(select).collect()
    });
    // the outputs and the core's node are the selectors' ops' now
    joint.release();
    outputs
}
