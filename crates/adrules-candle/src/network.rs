//! Tensor networks (Einstein strings, ncon lists) as differentiable candle computations.
//!
//! # Design: one candle op per step of the core's plan
//! Candle differentiates at most three inputs per custom op, and a network has any number of
//! operands. The network is therefore run as the core's [`NetworkPlan`] through
//! [`NetworkPlan::evaluate`] (same contraction order, same lowering to primitives: nothing is
//! re-planned here), each step one node of this crate's custom op over the step's
//! [`Primitive`](adrules_core::rules::Primitive) (as [`add`](crate::add),
//! [`trace`](crate::trace), [`contract`](crate::contract)); candle's graph chains them and its
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

use adrules_core::network::{Network, NetworkPlan, Order, PlanCache};
use adrules_core::{Dims, Error, Result};
use candle_core::Tensor;

use crate::convert::{check_device, to_candle};
use crate::ops::apply;

/// Contracts `operands` as `plan` (lowered once for these shapes with
/// [`NetworkPlan::new`]) with the differentiable ops of this crate, one per step of the plan
/// ([`Step::primitive`](adrules_core::network::Step::primitive)); the result has the joined
/// dtype of the operands.
///
/// # Errors
/// A typed [`Error`] wrapped in candle's error (recover it with
/// [`adrules_error`](crate::adrules_error)): [`Error::CountMismatch`] (argument
/// `"operands"`) for a wrong number of operands; [`Error::ShapeMismatch`] (argument
/// `"operand k"`) for a shape other than the planned one; [`Error::DeviceMismatch`] when the
/// operands live on different devices; the errors of [`add`](crate::add),
/// [`trace`](crate::trace) and [`contract`](crate::contract) (unsupported dtypes).
pub fn network(plan: &NetworkPlan, operands: &[&Tensor]) -> candle_core::Result<Tensor> {
    run(plan, operands).map_err(to_candle)
}

/// [`network`] with the adrules error.
fn run(plan: &NetworkPlan, operands: &[&Tensor]) -> Result<Tensor> {
    // The operand count is checked by `evaluate`.
    for (k, t) in operands.iter().enumerate() {
        if let Some(want) = plan.operand_dims(k)
            && t.dims() != want
        {
            return Err(Error::shape(format!("operand {k}"), want, t.dims()));
        }
        check_device(t, operands[0].device(), &format!("operand {k}"))?;
    }
    plan.evaluate(operands, |step, x| apply(step.primitive().clone(), x))
}

/// `network` planned for the shapes of `operands` in the default order, then run.
fn plan_and_run(network: Result<Network>, operands: &[&Tensor]) -> candle_core::Result<Tensor> {
    let plan = || {
        let network = network?;
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
        NetworkPlan::new(&network, &dims, &Order::Default)
    };
    plan().and_then(|p| run(&p, operands)).map_err(to_candle)
}

/// Contracts `operands` as the Einstein string `subscripts` in torch's grammar (batch
/// labels `"bij,bjk->bik"`, diagonals `"ii->i"`, sums `"ij->i"`, hyperedges, implicit output
/// `"ij,jk"`, ellipsis with broadcasting `"...ij,...jk->...ik"`; see [`Network::einsum`]) in
/// the core's default order, differentiably. The plan comes from the core's
/// [`PlanCache::global`]: repeated calls with the same string and shapes plan once.
///
/// # Errors
/// As [`network`], wrapped the same way: the errors of [`Network::einsum`] (parse and label
/// errors), [`Error::CountMismatch`] (argument `"operands"`), the errors of
/// [`NetworkPlan::new`] (ranks, shapes of shared labels, ellipsis dimensions that do not
/// broadcast) and of [`network`].
pub fn einsum(subscripts: &str, operands: &[&Tensor]) -> candle_core::Result<Tensor> {
    let dims: Vec<&[usize]> = operands.iter().map(|t| t.dims()).collect();
    PlanCache::global()
        .einsum(subscripts, &dims)
        .and_then(|p| run(&p, operands))
        .map_err(to_candle)
}

/// Contracts `operands` as the ncon network `indices` (positive labels contracted, negative
/// labels open, output ordered −1, −2, …; see [`Network::ncon`]) in the ncon order,
/// differentiably. There is no conjugation argument: candle tensors are real, so
/// conjugation is a no-op.
///
/// # Errors
/// As [`network`], wrapped the same way: the errors of [`Network::ncon`] (label errors), of
/// [`NetworkPlan::new`] and of [`network`].
pub fn ncon<I: AsRef<[i64]>>(indices: &[I], operands: &[&Tensor]) -> candle_core::Result<Tensor> {
    plan_and_run(Network::ncon(indices, None), operands)
}

/// Second order through the core: the Hessian-vector product of
/// `φ(T) = Re⟨c_bar, N(T)⟩` for the network `plan` along `directions` (one per operand,
/// `None` a zero direction), for every operand, by the core's forward-over-reverse rule
/// ([`NetworkPlan::hvp`]) run on candle tensors ([`CandleBackend`](crate::CandleBackend), on
/// the operands' device). Each result has its operand's shape and dtype.
///
/// candle has no higher-order derivatives (its backward pass is not itself differentiable),
/// so the HVP cannot come from nesting candle's autograd: it is computed here outside
/// candle's graph, and the results are constants (detached tensors) for candle.
///
/// # Errors
/// A typed [`Error`] wrapped in candle's error: [`Error::CountMismatch`] (`"operands"`,
/// `"tangents"`); [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming `"operand k"`,
/// `"tangent k"` or `"c_bar"`; [`Error::DeviceMismatch`] when the tensors live on different
/// devices; unsupported dtypes.
pub fn network_hvp(
    plan: &NetworkPlan,
    operands: &[&Tensor],
    c_bar: &Tensor,
    directions: &[Option<&Tensor>],
) -> candle_core::Result<Vec<Tensor>> {
    hvp(plan, operands, c_bar, directions).map_err(to_candle)
}

/// [`network_hvp`] for the Einstein string `subscripts` (planned as [`einsum`] does, through
/// the core's [`PlanCache::global`]).
///
/// # Errors
/// The string's and the planning errors (as [`einsum`]); otherwise as [`network_hvp`].
pub fn einsum_hvp(
    subscripts: &str,
    operands: &[&Tensor],
    c_bar: &Tensor,
    directions: &[Option<&Tensor>],
) -> candle_core::Result<Vec<Tensor>> {
    let dims: Vec<&[usize]> = operands.iter().map(|t| t.dims()).collect();
    PlanCache::global()
        .einsum(subscripts, &dims)
        .and_then(|p| hvp(&p, operands, c_bar, directions))
        .map_err(to_candle)
}

fn hvp(
    plan: &NetworkPlan,
    operands: &[&Tensor],
    c_bar: &Tensor,
    directions: &[Option<&Tensor>],
) -> Result<Vec<Tensor>> {
    let first = operands.first().ok_or_else(|| Error::CountMismatch {
        arg: "operands".into(),
        expected: plan.num_operands(),
        actual: 0,
    })?;
    let device = first.device();
    for (k, t) in operands.iter().enumerate() {
        check_device(t, device, &format!("operand {k}"))?;
    }
    for (k, t) in directions.iter().enumerate() {
        if let Some(t) = t {
            check_device(t, device, &format!("tangent {k}"))?;
        }
    }
    check_device(c_bar, device, "c_bar")?;
    let be = crate::CandleBackend::new(device.clone());
    let x: Vec<Tensor> = operands.iter().map(|t| t.detach()).collect();
    let v: Vec<Option<Tensor>> = directions.iter().map(|t| t.map(Tensor::detach)).collect();
    let refs: Vec<&Tensor> = x.iter().collect();
    let tangents: Vec<Option<&Tensor>> = v.iter().map(Option::as_ref).collect();
    let r = plan.hvp(
        &be,
        &refs,
        &c_bar.detach(),
        &tangents,
        &vec![true; operands.len()],
    )?;
    r.hvp
        .into_iter()
        .map(|h| h.ok_or_else(|| Error::invalid("operands", "no HVP for an active operand")))
        .collect()
}
