//! [`Op`] and its [`Rule`]: primal through the core op's `apply` on [`BurnBackend`],
//! pullback through the core op's `pullback_at`.

use adrules_core::rules::{Activity, AddOp, ContractOp, Cotangents, TraceOp};
use adrules_core::{Backend as _, DType, Dims, DynScalar, Error, Result};
use burn_backend::Backend;

use crate::backend::{BurnBackend, BurnTensor};
use crate::node::Rule;

/// An operation of the shared rules on burn tensors.
///
/// # Inputs
/// An op takes its operands in order — `[A]` (add, trace), `[A, B]` (contraction) — or, to
/// update an input C as `C ← β·C + α·…`, C first: `[C, A]`, `[C, A, B]`. Without C, β must
/// be zero. α and β are constants (burn differentiates tensors only), so the pullback never
/// reads C, and reads A (B) only when B (A) needs a cotangent.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// permuted add `C ← β·C + α·P(A)`
    Add(AddOp),
    /// partial trace `C ← β·C + α·P(tr A)`
    Trace(TraceOp),
    /// pairwise contraction `C ← β·C + α·P(A·B)`
    Contract(ContractOp),
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
        }
    }

    /// Rank of the output.
    pub fn output_rank(&self) -> usize {
        match self {
            Op::Add(o) => o.perm.len(),
            Op::Trace(o) => o.spec.rank_c(),
            Op::Contract(o) => o.spec.rank_c(),
        }
    }

    fn beta(&self) -> DynScalar {
        match self {
            Op::Add(o) => o.beta,
            Op::Trace(o) => o.beta,
            Op::Contract(o) => o.beta,
        }
    }

    /// The rule of this op called with `n` inputs.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] when `n` is neither the operand count nor one more (with C);
    /// [`Error::InvalidArgument`] naming `beta` for a nonzero β without C.
    pub(crate) fn call(&self, n: usize) -> Result<Call> {
        let operands = self.operands();
        let with_c = n == operands + 1;
        if n != operands && !with_c {
            return Err(Error::CountMismatch {
                arg: "inputs".into(),
                expected: operands,
                actual: n,
            });
        }
        if !with_c && !self.beta().is_zero() {
            return Err(Error::invalid(
                "beta",
                format!(
                    "is {}, but no input C was given to scale: pass C first",
                    self.beta()
                ),
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
    type Saved<B: Backend> = ();

    fn scalar_input(&self, i: usize) -> bool {
        let rank = match (i.checked_sub(self.k()), &self.op) {
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
        _active: &[bool],
    ) -> Result<(BurnTensor<B>, ())> {
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
                Ok((c, ()))
            }
            Op::Trace(o) => {
                let mut c = self.output(be, x, || o.spec.output_dims(&be.dims(a)))?;
                o.apply(be, &mut c, a)?;
                Ok((c, ()))
            }
            Op::Contract(o) => {
                let b = &x[k + 1];
                let mut c = self.output(be, x, || o.spec.output_dims(&be.dims(a), &be.dims(b)))?;
                o.apply(be, &mut c, a, b)?;
                Ok((c, ()))
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
        _saved: &(),
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
        };
        Ok(self.in_order(g))
    }
}
