//! Tensor networks (Einstein strings, ncon lists) as differentiable candle computations.
//!
//! # Design: one candle op per step of the core's plan
//! Candle differentiates at most three inputs per custom op, and a network has any number of
//! operands. The network is therefore run as the core's [`NetworkPlan`] through
//! [`NetworkPlan::evaluate`] (same contraction order, same lowering to primitives: nothing is
//! re-planned here), each step one of this crate's custom ops ([`add`], [`trace`], [`contract`]); candle's graph chains them and its
//! backward pass runs the shared pairwise pullbacks along the contraction tree in reverse.
//! Every operand gets its gradient, gradients of an operand used twice are summed by candle,
//! and a subtree of constants costs no backward work (each step's activity comes from
//! candle's tracking).
//!
//! This is the same arithmetic as the core's [`NetworkPullback`](adrules_core::network::NetworkPullback)
//! (itself the chained pairwise pullbacks) with the same memory: each step keeps its two
//! inputs, i.e. the operands and the intermediates, which that pullback keeps too. The
//! alternative, one op over all operands packed into a single tensor, would copy every operand
//! forward and every cotangent backward, and would hide the steps' activity from candle.

use adrules_core::network::{Network, NetworkPlan, Order, Step};
use adrules_core::rules::{AddOp, ContractOp, TraceOp};
use adrules_core::{Conj, Dims, Error, Result};
use candle_core::Tensor;

use crate::convert::check_device;
use crate::ops::{add, contract, trace};

/// Contracts `operands` as `plan` (lowered once for these shapes with
/// [`NetworkPlan::new`]) with the differentiable ops of this crate; the result has the joined
/// dtype of the operands.
///
/// # Errors
/// [`Error::CountMismatch`] (argument `"operands"`) for a wrong number of operands;
/// [`Error::ShapeMismatch`] (argument `"operand k"`) for a shape other than the planned one;
/// [`Error::DeviceMismatch`] when the operands live on different devices; the errors of
/// [`add`], [`trace`] and [`contract`] (unsupported dtypes).
pub fn network(plan: &NetworkPlan, operands: &[&Tensor]) -> Result<Tensor> {
    // The operand count is checked by `evaluate`.
    for (k, t) in operands.iter().enumerate() {
        if let Some(want) = plan.operand_dims(k)
            && t.dims() != want
        {
            return Err(Error::shape(format!("operand {k}"), want, t.dims()));
        }
        check_device(t, operands[0].device(), &format!("operand {k}"))?;
    }
    plan.evaluate(operands, |step, x| match step {
        Step::Add { perm, conj, .. } => add(x[0], &AddOp::new(perm.clone()).conj(*conj)),
        Step::Trace { spec, conj, .. } => trace(x[0], &TraceOp::new(spec.clone()).conj(*conj)),
        Step::Contract {
            spec,
            conj_a,
            conj_b,
            ..
        } => contract(
            x[0],
            x[1],
            &ContractOp::new(spec.clone()).conj(*conj_a, *conj_b),
        ),
    })
}

/// The plan of `network` for the shapes of `operands`, in the default order.
fn plan_for(network: &Network, operands: &[&Tensor]) -> Result<NetworkPlan> {
    if operands.len() != network.num_operands() {
        return Err(Error::CountMismatch {
            arg: "operands".into(),
            expected: network.num_operands(),
            actual: operands.len(),
        });
    }
    let dims: Vec<Dims> = operands
        .iter()
        .map(|t| t.dims().iter().copied().collect())
        .collect();
    NetworkPlan::new(network, &dims, &Order::Default)
}

/// Contracts `operands` as the Einstein string `subscripts` (e.g. `"abc,bd,cd->a"`; see
/// [`Network::einsum`]) in the core's default order, differentiably. Plans once per call:
/// build a [`NetworkPlan`] and call [`network`] to reuse it.
///
/// # Errors
/// The errors of [`Network::einsum`] (parse and label errors), of [`NetworkPlan::new`]
/// (shapes of repeated labels) and of [`network`].
pub fn einsum(subscripts: &str, operands: &[&Tensor]) -> Result<Tensor> {
    let net = Network::einsum(subscripts)?;
    network(&plan_for(&net, operands)?, operands)
}

/// Contracts `operands` as the ncon network `indices` (positive labels contracted, negative
/// labels open, output ordered −1, −2, …; see [`Network::ncon`]) in the ncon order,
/// differentiably. `conj` has one flag per operand (no-ops on real data).
///
/// # Errors
/// The errors of [`Network::ncon`] and `with_conj` (label errors, counts), of
/// [`NetworkPlan::new`] and of [`network`].
pub fn ncon<I: AsRef<[i64]>>(operands: &[&Tensor], indices: &[I], conj: &[Conj]) -> Result<Tensor> {
    let net = Network::ncon(indices, None)?.with_conj(conj)?;
    network(&plan_for(&net, operands)?, operands)
}
