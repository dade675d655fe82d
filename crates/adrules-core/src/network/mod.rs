//! Network contraction: ncon and Einstein-string front-ends, contraction order, plans built
//! once and executed many times, and the network's pullback and pushforward.
//!
//! # Pipeline
//! 1. **Structure** ([`Network`]): [`Network::ncon`] (integer index lists: positive labels
//!    contracted, negative labels open, output ordered `−1, −2, …` unless given) or
//!    [`Network::einsum`] (`"abc,bde,cdf->aef"`, explicit output required), then one
//!    conjugation flag per operand with [`Network::with_conj`]. Every label appears exactly
//!    twice in total (see [`Network`] for what is rejected).
//! 2. **Order** ([`Order`]): the ncon convention (positive labels in increasing order, the
//!    default for ncon), an explicit label order, an explicit [`ContractionTree`], or a search
//!    by an [`Optimizer`] of the omeco crate (the default for Einstein strings).
//! 3. **Plan** ([`NetworkPlan::new`]): for fixed operand shapes, the network is validated
//!    against the shapes and lowered to a sequence of primitive calls ([`Step`]): partial
//!    traces first ([`Backend::trace`]), then one pairwise
//!    [`Backend::contract`] per merge of the tree.
//! 4. **Execution**: [`NetworkPlan::execute`] (or `execute_with` an [`Allocator`], or
//!    `execute_into` an existing tensor, BLAS-style), any number of times.
//! 5. **Rules**: [`NetworkPlan::rrule`] returns the result and a [`NetworkPullback`] that
//!    chains the pairwise pullbacks in reverse over the intermediates kept from the forward
//!    pass; [`NetworkPlan::frule`] chains the pairwise pushforwards.
//!
//! [`ncon`] and [`einsum`] do all of it in one call (planning every time).
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

mod einsum;
mod ncon;
mod plan;
mod rules;
mod structure;
mod tree;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::spec::{Conj, Dims};

pub use plan::{NetworkPlan, Step};
pub use rules::NetworkPullback;
pub use structure::{Label, Network, Notation};
pub use tree::{ContractionTree, Optimizer, Order};

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

/// Contracts `tensors` as the Einstein string `subscripts` (see [`Network::einsum`]) in an
/// optimized order ([`Optimizer::Auto`]), without conjugation. Plans once per call: build a
/// [`NetworkPlan`] to reuse it, or to conjugate operands.
///
/// # Errors
/// [`Error::CountMismatch`] (argument `"tensors"`) when the string has a different number
/// of operands; the errors of [`Network::einsum`] and [`NetworkPlan::new`]; the backend's
/// dtype errors.
pub fn einsum<B: Backend>(be: &B, subscripts: &str, tensors: &[&B::Tensor]) -> Result<B::Tensor> {
    let network = Network::einsum(subscripts)?;
    plan_for(be, &network, tensors)?.execute(be, tensors)
}
