//! Network contraction: ncon and Einstein-string front-ends, contraction order, plans built
//! once and executed many times, and the network's pullback and pushforward.
//!
//! ```
//! use adrules_core::network::{Network, NetworkPlan, Order};
//! let net = Network::einsum("abc,bde,cdf->aef").unwrap();
//! let plan = NetworkPlan::new(&net, &[[2, 3, 4], [3, 5, 6], [4, 5, 7]], &Order::Default).unwrap();
//! assert_eq!(plan.output_dims(), &[2, 6, 7]);
//! assert_eq!(plan.steps().len(), 2);
//! ```

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
