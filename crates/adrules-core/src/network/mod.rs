//! Network contraction: ncon and Einstein-string front-ends, contraction order, plans built
//! once and executed many times, and the network's pullback and pushforward.
//!
//! # Pipeline
//! 1. **Structure** ([`Network`]): [`Network::ncon`] (integer index lists: positive labels
//!    contracted, negative labels open, output ordered `−1, −2, …` unless given) or
//!    [`Network::einsum`] (torch's grammar: `"bij,bjk->bik"`, `"ii->i"`, `"ij,jk"`,
//!    `"...ij,...jk->...ik"`), then one conjugation flag per operand with
//!    [`Network::with_conj`]. ncon lists keep the strict convention (every label exactly twice
//!    in total); Einstein strings allow batch labels, diagonals, sums and hyperedges (see
//!    [`Network`]).
//! 2. **Order** ([`Order`]): the ncon convention (positive labels in increasing order, the
//!    default for ncon), an explicit label order, an explicit [`ContractionTree`], or a search
//!    by an [`Optimizer`] within a [`Search`] budget (the default for Einstein strings:
//!    exhaustive up to 10 operands, then opt_einsum's greedy heuristic, near-linear in the
//!    number of operands; omeco's exhaustive search and TreeSA on request).
//! 3. **Plan** ([`NetworkPlan::new`]): for fixed operand shapes, the network is validated
//!    against the shapes (ellipses expanded and broadcast) and lowered to a sequence of
//!    primitive calls ([`Step`]): each operand's own diagonals, traces and sums first (one
//!    generalized [`Backend::trace`]), then one pairwise [`Backend::contract`] per merge of
//!    the tree, whose shared labels are batch labels when still needed later (in the output
//!    or another operand: hyperedges) and contracted otherwise.
//! 4. **Execution**: [`NetworkPlan::execute`] (or `execute_with` an [`Allocator`], or
//!    `execute_into` an existing tensor, BLAS-style), any number of times.
//! 5. **Rules**: [`NetworkPlan::rrule`] returns the result and a [`NetworkPullback`] that
//!    chains the pairwise pullbacks in reverse over the intermediates kept from the forward
//!    pass; [`NetworkPlan::frule`] chains the pairwise pushforwards.
//! 6. **Second order**: [`NetworkPlan::hvp`] (Hessian-vector products of
//!    `φ = Re⟨C̄, N(T)⟩`, forward-over-reverse), [`NetworkPlan::second_order`] (the general
//!    form: a cotangent tangent, the gradient too, an allocator) and
//!    [`NetworkPlan::hessian`] (dense, from HVPs, for small problems).
//!
//! [`ncon`] and [`einsum`] do all of it in one call ([`einsum`] reuses plans through the
//! bounded, thread-safe [`PlanCache`]).
//!
//! # Example
//! ```
//! use adrules_core::network::{Network, NetworkPlan, Order};
//! use adrules_core::Conj;
//! // ⟨ψ|O|ψ⟩ for a two-site state: conj(ψ)[a, b] O[a, b, c, d] ψ[c, d]
//! let net = Network::ncon(&[vec![1, 2], vec![1, 2, 3, 4], vec![3, 4]], None)
//!     .unwrap()
//!     .with_conj(&[Conj::Yes, Conj::No, Conj::No])
//!     .unwrap();
//! let plan = NetworkPlan::new(&net, &[vec![2, 3], vec![2, 3, 2, 3], vec![2, 3]], &Order::Default)
//!     .unwrap();
//! assert!(plan.output_dims().is_empty()); // a scalar
//! let net = Network::einsum("abc,bde,cdf->aef").unwrap();
//! let plan = NetworkPlan::new(&net, &[[2, 3, 4], [3, 5, 6], [4, 5, 7]], &Order::Default).unwrap();
//! assert_eq!(plan.output_dims(), &[2, 6, 7]);
//! assert_eq!(plan.steps().len(), 2);
//! ```
//!
//! [`Allocator`]: crate::Allocator

mod anneal;
mod cache;
mod einsum;
pub(crate) mod greedy;
mod ncon;
mod partition;
mod plan;
mod rules;
mod second;
mod slice;
mod structure;
mod tree;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::spec::{Conj, Dims};

pub use cache::PlanCache;
pub use plan::{ChosenOrder, NetworkPlan, Step};
pub use rules::NetworkPullback;
pub use second::{NetworkHvp, SecondOrder};
pub use slice::{Between, MemoryTarget, SliceMemory, SlicedPlan, SlicedPullback, ValueAndGradient};
pub use structure::{Label, Network, Notation};
pub use tree::{ContractionTree, Optimizer, Order, Search};

fn plan_for<B: Backend>(be: &B, network: &Network, tensors: &[&B::Tensor]) -> Result<NetworkPlan> {
    if tensors.len() != network.num_operands() {
        return Err(Error::CountMismatch {
            arg: "tensors".into(),
            expected: network.num_operands(),
            actual: tensors.len(),
        });
    }
    let dims: Vec<Dims> = tensors.iter().map(|t| be.dims(t)).collect();
    NetworkPlan::new(network, &dims, &Order::Default)
}

/// Contracts `tensors` as the ncon network `indices` (see [`Network::ncon`]), operand `k`
/// conjugated when `conj[k]` is [`Conj::Yes`], in the ncon order (positive labels
/// increasing). Plans once per call: build a [`NetworkPlan`] to reuse it.
///
/// # Errors
/// [`Error::CountMismatch`] (argument `"tensors"` or `"conj"`) when the counts of tensors,
/// index lists and flags differ; the errors of [`Network::ncon`] and [`NetworkPlan::new`];
/// the backend's dtype errors.
pub fn ncon<B: Backend, I: AsRef<[i64]>>(
    be: &B,
    tensors: &[&B::Tensor],
    indices: &[I],
    conj: &[Conj],
) -> Result<B::Tensor> {
    let network = Network::ncon(indices, None)?.with_conj(conj)?;
    plan_for(be, &network, tensors)?.execute(be, tensors)
}

/// Contracts `tensors` as the Einstein string `subscripts` (torch's grammar, see
/// [`Network::einsum`]: batch labels, diagonals, sums, hyperedges, implicit output, ellipsis
/// with broadcasting) in an optimized order ([`Optimizer::Auto`]), without conjugation. The
/// plan comes from [`PlanCache::global`]: repeated calls with the same string and shapes plan
/// once. Build a [`NetworkPlan`] to conjugate operands or choose the order.
///
/// # Errors
/// [`Error::CountMismatch`] (argument `"tensors"`) when the string has a different number
/// of operands; the errors of [`Network::einsum`] and [`NetworkPlan::new`] (ranks, dimensions
/// of shared labels, ellipsis dimensions that do not broadcast, unequal dimensions of a
/// diagonal); the backend's dtype errors. The operands are never modified.
pub fn einsum<B: Backend>(be: &B, subscripts: &str, tensors: &[&B::Tensor]) -> Result<B::Tensor> {
    let dims: Vec<Dims> = tensors.iter().map(|t| be.dims(t)).collect();
    let plan = PlanCache::global()
        .einsum(subscripts, &dims)
        .map_err(|e| match e {
            Error::CountMismatch {
                expected, actual, ..
            } => Error::CountMismatch {
                arg: "tensors".into(),
                expected,
                actual,
            },
            e => e,
        });
    plan?.execute(be, tensors)
}

/// Gives a [`Error::NonFinite`] raised by a step the name of the network's value it concerns.
/// `name` receives the step's own name of the output (`"a_bar"`, `"c_dot"`, …).
pub(crate) fn renamed(e: crate::Error, name: impl FnOnce(&str) -> String) -> crate::Error {
    match e {
        crate::Error::NonFinite { arg, reason } => crate::Error::NonFinite {
            arg: name(&arg),
            reason,
        },
        e => e,
    }
}

/// The name of value `v` of a network with `n` operands (an operand or a step's output).
pub(crate) fn value_name(v: usize, n: usize) -> String {
    match v.checked_sub(n) {
        None => format!("operand {v}"),
        Some(s) => format!("the output of step {s}"),
    }
}
