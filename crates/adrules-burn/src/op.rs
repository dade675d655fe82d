//! [`Op`] and its [`Rule`]: primal through the core op's `apply` on [`BurnBackend`],
//! pullback through the core op's `pullback_at`.

use adrules_core::network::{Network, NetworkPlan, NetworkPullback, Order};
use adrules_core::rules::{Activity, AddOp, ContractOp, Cotangents, TraceOp};
use adrules_core::{Backend as _, DType, Dims, DynScalar, Error, Result};
use burn_backend::Backend;

use crate::backend::{BurnBackend, BurnTensor};
use crate::node::Rule;

/// An operation of the shared rules on burn tensors.
///
/// # Inputs
/// A primitive takes its operands in order — `[A]` (add, trace), `[A, B]` (contraction) —
/// or, to update an input C as `C ← β·C + α·…`, C first: `[C, A]`, `[C, A, B]`. Without C,
/// β must be zero. α and β are constants (burn differentiates tensors only), so the pullback
/// never reads C, and reads A (B) only when B (A) needs a cotangent. A network takes its
/// operands in the order of its index lists.
///
/// # Networks
/// A whole network is one node of burn's graph, whatever the number of operands (burn's
/// arity is a const generic): the forward pass runs the core's plan
/// ([`NetworkPlan::rrule`]: partial traces, then one pairwise contraction per merge of the
/// contraction tree) and the node keeps that plan's pullback, with the intermediates it
/// reads, until backward, where the pairwise pullbacks run in reverse. The plan is built for
/// the operand shapes at each call (its contraction order is searched then for Einstein
/// strings, see [`Order`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// permuted add `C ← β·C + α·P(A)`
    Add(AddOp),
    /// partial trace `C ← β·C + α·P(tr A)`
    Trace(TraceOp),
    /// pairwise contraction `C ← β·C + α·P(A·B)`
    Contract(ContractOp),
    /// a tensor network (ncon lists or an Einstein string) contracted in `order`
    Network {
        /// the network's structure
        network: Network,
        /// the contraction order (planned for the operand shapes at each call)
        order: Order,
    },
}

impl From<Network> for Op {
    /// The network in its notation's default order.
    fn from(network: Network) -> Self {
        Op::Network {
            network,
            order: Order::Default,
        }
    }
}

impl From<AddOp> for Op {
    fn from(op: AddOp) -> Self {
        Op::Add(op)
    }
}

impl From<TraceOp> for Op {
    fn from(op: TraceOp) -> Self {
        Op::Trace(op)
    }
}

impl From<ContractOp> for Op {
    fn from(op: ContractOp) -> Self {
        Op::Contract(op)
    }
}

impl Op {
    /// Number of operands, not counting C.
    pub fn operands(&self) -> usize {
        match self {
            Op::Add(_) | Op::Trace(_) => 1,
            Op::Contract(_) => 2,
            Op::Network { network, .. } => network.num_operands(),
        }
    }

    /// Rank of the output.
    pub fn output_rank(&self) -> usize {
        match self {
            Op::Add(o) => o.perm.len(),
            Op::Trace(o) => o.spec.rank_c(),
            Op::Contract(o) => o.spec.rank_c(),
            Op::Network { network, .. } => network.output_labels().len(),
        }
    }

    /// β, or `None` for an op without an input C (a network).
    fn beta(&self) -> Option<DynScalar> {
        match self {
            Op::Add(o) => Some(o.beta),
            Op::Trace(o) => Some(o.beta),
            Op::Contract(o) => Some(o.beta),
            Op::Network { .. } => None,
        }
    }

    /// The rule of this op called with `n` inputs.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] when `n` is neither the operand count nor, for a primitive,
    /// one more (with C); [`Error::InvalidArgument`] naming `beta` for a nonzero β without C.
    pub(crate) fn call(&self, n: usize) -> Result<Call> {
        let operands = self.operands();
        let with_c = self.beta().is_some() && n == operands + 1;
        if n != operands && !with_c {
            return Err(Error::CountMismatch {
                arg: "inputs".into(),
                expected: operands,
                actual: n,
            });
        }
        if let Some(beta) = self.beta()
            && !with_c
            && !beta.is_zero()
        {
            return Err(Error::invalid(
                "beta",
                format!("is {beta}, but no input C was given to scale: pass C first"),
            ));
        }
        Ok(Call {
            op: self.clone(),
            with_c,
        })
    }
}

/// An [`Op`] with the knowledge of whether its first input is C.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    op: Op,
    with_c: bool,
}

impl Call {
    /// Index of A among the inputs.
    fn k(&self) -> usize {
        usize::from(self.with_c)
    }

    /// Activity of `(C, A, B)` from the activity of the inputs in order.
    fn activity(&self, active: &[bool]) -> Activity {
        let at = |i: usize| active.get(i).copied().unwrap_or(false);
        let k = self.k();
        Activity {
            c: self.with_c && at(0),
            a: at(k),
            b: at(k + 1),
            alpha: false,
            beta: false,
        }
    }

    /// The output C: the input C when given, otherwise zeros (never read: β is zero, a strong
    /// zero) of the output shape in the joined dtype of the operands.
    fn output<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        dims: impl FnOnce() -> Result<Dims>,
    ) -> Result<BurnTensor<B>> {
        if self.with_c {
            return Ok(x[0].clone());
        }
        let mut dtype = DType::F32;
        for (i, t) in x.iter().enumerate() {
            dtype = dtype.join(be.check(&format!("input {i}"), t)?);
        }
        be.zeros(&dims()?, dtype)
    }

    /// The core's cotangents in input order.
    fn in_order<B: adrules_core::Backend>(&self, g: Cotangents<B>) -> Vec<Option<B::Tensor>> {
        let mut v = Vec::with_capacity(3);
        if self.with_c {
            v.push(g.c);
        }
        v.push(g.a);
        if self.op.operands() == 2 {
            v.push(g.b);
        }
        v
    }
}

impl Rule for Call {
    /// a network's pullback, with the intermediates it reads
    type Saved<B: Backend> = Option<NetworkPullback<BurnBackend<B>>>;

    fn scalar_input(&self, i: usize) -> bool {
        let rank = match (i.checked_sub(self.k()), &self.op) {
            (_, Op::Network { network, .. }) => {
                network.operand_labels(i).map_or(1, |labels| labels.len())
            }
            (None, _) => self.op.output_rank(),
            (Some(_), Op::Add(o)) => o.perm.len(),
            (Some(_), Op::Trace(o)) => o.spec.rank_a(),
            (Some(0), Op::Contract(o)) => o.spec.rank_a(),
            (Some(_), Op::Contract(o)) => o.spec.rank_b(),
        };
        rank == 0
    }

    fn primal<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        active: &[bool],
    ) -> Result<(BurnTensor<B>, Self::Saved<B>)> {
        let k = self.k();
        let expected = self.op.operands() + k;
        if x.len() != expected {
            return Err(Error::CountMismatch {
                arg: "inputs".into(),
                expected,
                actual: x.len(),
            });
        }
        let a = &x[k];
        match &self.op {
            Op::Add(o) => {
                let mut c = self.output(be, x, || {
                    let dims = be.dims(a);
                    if dims.len() != o.perm.len() {
                        return Err(Error::rank("a", o.perm.len(), dims.len()));
                    }
                    Ok(o.perm.apply(&dims))
                })?;
                o.apply(be, &mut c, a)?;
                Ok((c, None))
            }
            Op::Trace(o) => {
                let mut c = self.output(be, x, || o.spec.output_dims(&be.dims(a)))?;
                o.apply(be, &mut c, a)?;
                Ok((c, None))
            }
            Op::Contract(o) => {
                let b = &x[k + 1];
                let mut c = self.output(be, x, || o.spec.output_dims(&be.dims(a), &be.dims(b)))?;
                o.apply(be, &mut c, a, b)?;
                Ok((c, None))
            }
            Op::Network { network, order } => {
                for (i, t) in x.iter().enumerate() {
                    be.check(&format!("operand {i}"), t)?;
                }
                let dims: Vec<Dims> = x.iter().map(|t| be.dims(t)).collect();
                let plan = NetworkPlan::new(network, &dims, order)?;
                let operands: Vec<&BurnTensor<B>> = x.iter().collect();
                if active.iter().any(|&a| a) {
                    let (c, pullback) = plan.rrule(be, &operands, active)?;
                    Ok((c, Some(pullback)))
                } else {
                    Ok((plan.execute(be, &operands)?, None))
                }
            }
        }
    }

    fn memory_bound(&self) -> bool {
        matches!(self.op, Op::Add(_) | Op::Trace(_))
    }

    fn keeps(&self, active: &[bool]) -> Vec<bool> {
        let mut v = vec![false; active.len()];
        if let Op::Contract(_) = self.op {
            let act = self.activity(active);
            let k = self.k();
            if let Some(slot) = v.get_mut(k) {
                *slot = act.b;
            }
            if let Some(slot) = v.get_mut(k + 1) {
                *slot = act.a;
            }
        }
        v
    }

    fn pullback<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        saved: &Self::Saved<B>,
        active: &[bool],
        c_bar: &BurnTensor<B>,
    ) -> Result<Vec<Option<BurnTensor<B>>>> {
        let k = self.k();
        let act = self.activity(active);
        let g = match &self.op {
            Op::Add(o) => o.pullback_at(be, c_bar, &x[k], act)?.pullback(c_bar)?,
            Op::Trace(o) => o.pullback_at(be, c_bar, &x[k], act)?.pullback(c_bar)?,
            Op::Contract(o) => o
                .pullback_at(be, c_bar, &x[k], &x[k + 1], act)?
                .pullback(c_bar)?,
            Op::Network { .. } => {
                let pullback = saved.as_ref().ok_or_else(|| {
                    Error::invalid("pullback", "a network node recorded without its pullback")
                })?;
                return pullback.pullback(c_bar);
            }
        };
        Ok(self.in_order(g))
    }
}
