//! Networks (ncon lists, Einstein strings, prepared plans) as one dfdx op: [`network`],
//! [`ncon`], [`einsum`].

use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Error, Result};
use dfdx::prelude::{Shape, Tensor};
use dfdx::tensor::Cpu;

use crate::bridge::shape_for;
use crate::element::DfdxElement;
use crate::operands::Operands;

/// Contracts the operands as the prepared network `plan`, as **one** op on dfdx's tape.
///
/// The plan is a core [`Rule`](adrules_core::rule::Rule) run through the crate's one bridge,
/// [`apply_rule`](crate::apply_rule): the forward pass runs the plan (partial traces, then one
/// pairwise contraction per merge of its tree) on host copies of the operands; with a tape it
/// runs [`NetworkPlan::rrule`], whose pullback keeps the intermediates it reads. The backward pass
/// applies that pullback once ([`NetworkPullback::pullback`](adrules_core::network::NetworkPullback::pullback):
/// the pairwise pullbacks in reverse order) and adds every operand's cotangent into its
/// gradient. As with dfdx's own ops, every operand receives a gradient when the result is
/// traced (an operand passed twice receives both contributions).
///
/// `operands`: any [`Operands`] (a tuple of dfdx tensors of any shapes and tapes, or a
/// `Vec`); the result, of shape type `Out`, carries their joined tape. Conjugation flags of
/// the network are no-ops on real data.
///
/// Costs: one copy of each operand in; the result moved out; the pullback's intermediates
/// (one tensor per step whose cotangent is needed) held until the backward pass; the
/// backward pass allocates each operand's cotangent and adds it into dfdx's gradient buffer
/// in place (no copy of the buffers).
///
/// # Errors
/// Checked before any copy or computation: [`Error::CountMismatch`] (`"operands"`) for a
/// wrong number of operands, [`Error::ShapeMismatch`] (`"operand k"`) for a shape other than
/// the planned one, [`Error::RankMismatch`] / [`Error::InvalidArgument`] when `Out` does not
/// fit the plan's output. On error the operands (moved in) and their tapes are dropped, as
/// with dfdx's own `try_*` ops.
pub fn network<Out, E, X>(plan: &NetworkPlan, operands: X) -> Result<Tensor<Out, E, Cpu, X::Tape>>
where
    Out: Shape,
    E: DfdxElement,
    X: Operands<E>,
{
    let dims = operands.dims();
    if dims.len() != plan.num_operands() {
        return Err(Error::CountMismatch {
            arg: "operands".into(),
            expected: plan.num_operands(),
            actual: dims.len(),
        });
    }
    for (k, d) in dims.iter().enumerate() {
        let planned = plan.operand_dims(k).unwrap_or_default();
        if planned != d.as_slice() {
            return Err(Error::shape(format!("operand {k}"), planned, d));
        }
    }
    // the output's shape type before anything runs
    shape_for::<Out>(plan.output_dims(), "output")?;
    crate::rule::apply_rule(plan, operands)
}

/// Contracts the operands as the ncon network `indices` (see
/// [`Network::ncon`](adrules_core::network::Network::ncon): positive labels contracted,
/// negative labels open, the output ordered `−1, −2, …`), in the ncon order, as one dfdx op
/// (see [`network`]). Plans on every call: build a [`NetworkPlan`] and call [`network`] to
/// plan once.
///
/// # Errors
/// The errors of [`Network::ncon`](adrules_core::network::Network::ncon) and
/// [`NetworkPlan::new`] (labels, operand count, ranks, mismatched dimensions), and those of
/// [`network`].
pub fn ncon<Out, E, X, I>(indices: &[I], operands: X) -> Result<Tensor<Out, E, Cpu, X::Tape>>
where
    Out: Shape,
    E: DfdxElement,
    X: Operands<E>,
    I: AsRef<[i64]>,
{
    let plan = NetworkPlan::new(
        &Network::ncon(indices, None)?,
        &operands.dims(),
        &Order::Default,
    )?;
    network(&plan, operands)
}

/// Contracts the operands as the Einstein string `subscripts` in torch's grammar (see
/// [`Network::einsum`](adrules_core::network::Network::einsum): batch labels, diagonals,
/// sums, hyperedges, implicit output, ellipsis with broadcasting, e.g. `"bij,bjk->bik"`) in
/// an optimized order, as one dfdx op (see [`network`]). The plan comes from the core's
/// [`PlanCache::global`](adrules_core::network::PlanCache::global). Every operand, every
/// intermediate and the output must have rank at most 6 (dfdx's limit; the output rank is
/// `Out`'s, intermediates run on the strided backend).
///
/// # Errors
/// The errors of [`Network::einsum`](adrules_core::network::Network::einsum) and
/// [`NetworkPlan::new`], and those of [`network`].
pub fn einsum<Out, E, X>(subscripts: &str, operands: X) -> Result<Tensor<Out, E, Cpu, X::Tape>>
where
    Out: Shape,
    E: DfdxElement,
    X: Operands<E>,
{
    let plan = adrules_core::network::PlanCache::global().einsum(subscripts, &operands.dims())?;
    network(&plan, operands)
}
