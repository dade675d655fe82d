//! The network's pullback and pushforward, chained from the pairwise rules of
//! [`crate::rules`] over the steps of a [`NetworkPlan`].
//!
//! A network `C = N(T_0, …, T_{n−1})` is a sequence of primitive calls `v_{n+s} =
//! step_s(v_i, v_j)` (see [`Step`](super::Step)). Its rules are the chain rule over that sequence, with no
//! formula of their own:
//! - **pullback** (reverse mode): the forward pass records the pairwise pullback of every step
//!   ([`Primitive::rrule`](crate::rules::Primitive::rrule)); each keeps
//!   (reference-counted handles of) the values it reads, so the intermediates the forward pass
//!   computed are reused, not recomputed. The backward pass applies them in reverse order:
//!   `v̄_i, v̄_j = pullback_s(v̄_{n+s})`, starting from `v̄_last = C̄`. Each value is read by
//!   exactly one step (the plan is a tree), so cotangents are never summed across steps.
//! - **pushforward** (forward mode): `v̇_{n+s} = pushforward_s(v_i, v_j; v̇_i, v̇_j)` in step
//!   order ([`Primitive::frule`](crate::rules::Primitive::frule)), starting from the operand tangents.
//!
//! Activity propagates through the tree: a step's input gets a cotangent only when an active
//! operand lies below it, and a step whose inputs are all inactive runs only its primal, so
//! inactive operands cost nothing. The same holds for zero tangents in forward mode.
//!
//! These rules are what the Julia packages lack: TensorOperations.jl and OMEinsum.jl define
//! rules for the pairwise primitives and let the AD system trace through the network, which is
//! where their temporaries meet the allocator problem described in [`crate::alloc`]. Here a
//! temporary is given back to the allocator as soon as its forward consumer has run, while
//! the step pullback that needs it holds its own handle, so no allocator can recycle it before
//! the backward pass is done.

use smallvec::SmallVec;

use super::plan::NetworkPlan;
use crate::alloc::{Allocator, HeapAllocator, Lifetime};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::rules::{Activity, PrimitivePullback, Tangents};

/// The pullback of a whole network, returned by [`NetworkPlan::rrule`]: the pairwise
/// pullbacks of its steps (each owning the intermediates it reads), applied in reverse.
/// It can be applied any number of times; dropping it releases the intermediates.
#[derive(Clone, Debug)]
pub struct NetworkPullback<B: Backend> {
    operands: usize,
    /// per step: its record (`None` when no input is active)
    steps: Vec<Option<Recorded<B>>>,
}

/// A step's pullback and the values it reads.
#[derive(Clone, Debug)]
struct Recorded<B: Backend> {
    inputs: SmallVec<[usize; 2]>,
    pullback: PrimitivePullback<B>,
}

impl<B: Backend> NetworkPullback<B> {
    /// The cotangent of every operand for the output cotangent `c_bar`: `Some` for the active
    /// operands, `None` for the others. A cotangent has its operand's shape and dtype
    /// (projected: a real operand of a complex network receives the real part).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming `"c_bar"` when `c_bar` does
    /// not have the output's shape or a dtype that promotes to the output's; backend errors;
    /// [`Error::NonFinite`] naming the cotangent (`"the cotangent of operand k"`) that
    /// overflows although `c_bar` and the forward values are finite ([`crate::finite`]).
    pub fn pullback(&self, c_bar: &B::Tensor) -> Result<Vec<Option<B::Tensor>>> {
        let n = self.operands;
        let mut cot: Vec<Option<B::Tensor>> = vec![None; n + self.steps.len()];
        if let Some(last) = cot.last_mut() {
            *last = Some(c_bar.clone());
        }
        for (s, step) in self.steps.iter().enumerate().rev() {
            let (Some(rec), Some(bar)) = (step, cot[n + s].take()) else {
                continue;
            };
            let g = rec.pullback.pullback(&bar).map_err(|e| {
                super::renamed(e, |arg| {
                    let v = rec.inputs[usize::from(arg == "b_bar")];
                    format!("the cotangent of {}", super::value_name(v, n))
                })
            })?;
            for (&v, g) in rec.inputs.iter().zip([g.a, g.b]) {
                cot[v] = g;
            }
        }
        cot.truncate(n);
        Ok(cot)
    }
}

impl NetworkPlan {
    /// The network (as [`execute`](NetworkPlan::execute)) and its pullback, for the operands
    /// with `active[k]` set (the others get no cotangent and cost nothing).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"active"`) when `active` does not have one flag per
    /// operand; the errors of [`execute`](NetworkPlan::execute).
    pub fn rrule<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(B::Tensor, NetworkPullback<B>)> {
        self.rrule_with(be, &HeapAllocator, operands, active)
    }

    /// As [`rrule`](NetworkPlan::rrule), with intermediates (and the result) from `alloc`.
    /// Each intermediate is freed as soon as its forward consumer has run; the pullback keeps
    /// its own handle of what it will read, so the allocator cannot recycle it before the
    /// pullback is dropped (see [`crate::alloc`]).
    ///
    /// # Errors
    /// As [`rrule`](NetworkPlan::rrule).
    pub fn rrule_with<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(B::Tensor, NetworkPullback<B>)> {
        let dtype = self.check_operands(be, operands)?;
        if active.len() != operands.len() {
            return Err(Error::CountMismatch {
                arg: "active".into(),
                expected: operands.len(),
                actual: active.len(),
            });
        }
        let n = operands.len();
        // needs[v]: value v leads to an active operand
        let mut needs: Vec<bool> = active.to_vec();
        let mut steps = Vec::with_capacity(self.steps().len());
        let mut c = alloc.allocate(be, self.output_dims(), dtype, Lifetime::Persistent)?;
        self.walk(be, alloc, operands, &mut c, |s, out, x| {
            let inputs = self.steps()[s].inputs();
            let act = [needs[inputs[0]], inputs.get(1).is_some_and(|&v| needs[v])];
            let op = self.steps()[s].primitive();
            if act[0] || act[1] {
                let activity = Activity {
                    a: act[0],
                    b: act[1],
                    ..Activity::NONE
                };
                let pullback = op.rrule(be, out, x, activity)?;
                let inputs = SmallVec::from_slice(inputs);
                steps.push(Some(Recorded { inputs, pullback }));
            } else {
                op.apply(be, out, x)?;
                steps.push(None);
            }
            needs.push(act[0] || act[1]);
            Ok(())
        })?;
        crate::finite::check(be, || "output".into(), &c, operands)?;
        Ok((c, NetworkPullback { operands: n, steps }))
    }

    /// The network and its tangent for operand tangents `tangents` (`None` is a zero
    /// tangent and costs nothing). A tangent has its operand's shape and a dtype that
    /// promotes to the operand's; the output tangent has the output's shape and dtype.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"tangents"`) when there is not one entry per
    /// operand; [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming `"tangent k"`; the
    /// errors of [`execute`](NetworkPlan::execute).
    pub fn frule<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
    ) -> Result<(B::Tensor, B::Tensor)> {
        self.frule_with(be, &HeapAllocator, operands, tangents)
    }

    /// As [`frule`](NetworkPlan::frule), with primal intermediates (and the result) from
    /// `alloc`.
    ///
    /// # Errors
    /// As [`frule`](NetworkPlan::frule).
    pub fn frule_with<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        tangents: &[Option<&B::Tensor>],
    ) -> Result<(B::Tensor, B::Tensor)> {
        let dtype = self.check_operands(be, operands)?;
        if tangents.len() != operands.len() {
            return Err(Error::CountMismatch {
                arg: "tangents".into(),
                expected: operands.len(),
                actual: tangents.len(),
            });
        }
        for (k, (t, x)) in tangents.iter().zip(operands).enumerate() {
            let Some(t) = t else { continue };
            let (dims, want) = (be.dims(t), be.dims(x));
            if dims != want {
                return Err(Error::shape(format!("tangent {k}"), &want, &dims));
            }
            if !be.dtype(t).promotes_to(be.dtype(x)) {
                return Err(Error::DTypeMismatch {
                    arg: format!("tangent {k}"),
                    expected: format!("a dtype that promotes to {}", be.dtype(x)),
                    actual: be.dtype(t),
                });
            }
        }
        let n = operands.len();
        let mut dv: Vec<Option<B::Tensor>> = Vec::with_capacity(self.steps().len());
        let mut c = alloc.allocate(be, self.output_dims(), dtype, Lifetime::Persistent)?;
        self.walk(be, alloc, operands, &mut c, |s, out, x| {
            let inputs = self.steps()[s].inputs();
            let tangent = |v: usize| {
                if v < n {
                    tangents[v]
                } else {
                    dv[v - n].as_ref()
                }
            };
            let dx = Tangents {
                a: tangent(inputs[0]),
                b: inputs.get(1).and_then(|&v| tangent(v)),
                ..Tangents::default()
            };
            let op = self.steps()[s].primitive();
            let d = if dx.a.is_some() || dx.b.is_some() {
                let name = |_: &str| {
                    if s + 1 == self.steps().len() {
                        "the tangent of the output".to_string()
                    } else {
                        format!("the tangent of {}", super::value_name(n + s, n))
                    }
                };
                Some(
                    op.frule(be, out, x, dx)
                        .map_err(|e| super::renamed(e, name))?,
                )
            } else {
                op.apply(be, out, x)?;
                None
            };
            for v in inputs.iter().filter_map(|v| v.checked_sub(n)) {
                dv[v] = None; // consumed: release the intermediate tangent
            }
            dv.push(d);
            Ok(())
        })?;
        let dc = match dv.pop().flatten() {
            Some(dc) => dc,
            None => be.zeros(self.output_dims(), dtype)?,
        };
        crate::finite::check(be, || "output".into(), &c, operands)?;
        let mut inputs = operands.to_vec();
        inputs.extend(tangents.iter().flatten());
        crate::finite::check(be, || "the tangent of the output".into(), &dc, &inputs)?;
        Ok((c, dc))
    }
}
