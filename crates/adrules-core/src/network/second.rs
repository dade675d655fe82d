//! Second order of a network: Hessian-vector products by forward-over-reverse, chained from
//! the primitive rule [`Primitive::pullback_tangent`](crate::rules::Primitive::pullback_tangent)
//! over the steps of a [`NetworkPlan`].
//!
//! For a network `C = N(T_0, …, T_{n−1})` and an output cotangent `C̄`, the real function
//! `φ(T) = Re⟨C̄, N(T)⟩` has the gradient `T̄_k = ∂φ/∂re T_k + i·∂φ/∂im T_k` (the network
//! pullback of `C̄`). Its Hessian-vector product along a direction `V` (one tangent per
//! operand) is the directional derivative of that gradient, `H·V = d/dε T̄(T + ε·V)`:
//! - **forward sweep**: the primal values `v_s` and their tangents `v̇_s` (the network
//!   pushforward of `V`, [`NetworkPlan::frule`]), recording at every step the values and
//!   tangents it read;
//! - **reverse sweep**: the cotangents `v̄_s` of the intermediates (the first-order
//!   pullback) and their tangents `v̄̇_s`, step by step in reverse order:
//!   `v̄̇_i = d/dε pullback_s(v_i + ε·v̇_i, v_j + ε·v̇_j; v̄_out + ε·v̄̇_out)` with `v̄̇_last = C̄̇`
//!   (zero for the HVP of `φ`).
//!
//! Sources: Pearlmutter, "Fast exact multiplication by the Hessian", Neural Computation 6,
//! 147 (1994) (the R-operator, forward-over-reverse); Griewank and Walther, *Evaluating
//! Derivatives* (2nd ed., SIAM 2008), §5.4 (second-order adjoints); JAX's `jvp(grad(f))`.
//!
//! # Cost
//! Only what the HVP reads is computed: the tangent of the last step's output is not needed
//! (the output cotangent is given), the first-order cotangents of the operands are computed
//! only when the gradient is asked for, and a step whose incoming cotangent tangent and
//! operand tangents are all zero contributes nothing. For a chain of `s` pairwise
//! contractions with every operand active, the HVP is `8s − 5` contractions (the primal `s`,
//! the intermediates' tangents `2(s − 1)`, their cotangents `s − 1`, four per step for the
//! cotangent tangents but two at the last step) against the gradient's `3s`; `cargo xtask
//! bench` (group `hvp`) measures the time ratio.
//!
//! Each value is read by exactly one step (the plan is a tree), so neither cotangents nor
//! their tangents are summed across steps.

use smallvec::SmallVec;

use super::plan::NetworkPlan;
use crate::alloc::{Allocator, HeapAllocator, Lifetime};
use crate::backend::{Backend, check};
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::rules::{Activity, PrimitivePullback, Tangents};
use crate::scalar::{DType, DynScalar};
use num_complex::Complex64;

/// A second-order request for [`NetworkPlan::second_order`]: the point's cotangent, its
/// tangent, the direction and which operands receive the result.
#[derive(Clone, Copy, Debug)]
pub struct SecondOrder<'a, B: Backend> {
    /// `C̄`: the output cotangent, of the output's shape and a dtype that promotes to the
    /// output's (`φ = Re⟨C̄, N(T)⟩`)
    pub c_bar: &'a B::Tensor,
    /// `C̄̇`: the tangent of the output cotangent (the general form, for a `C̄` that itself
    /// depends on the operands, as in `L(N(T))` with `C̄̇ = H_L·Ċ`); `None` for a constant
    /// `C̄` (the HVP of `φ`)
    pub c_bar_dot: Option<&'a B::Tensor>,
    /// `V`: one tangent per operand (`None` a zero tangent). Operands that are not active may
    /// have tangents too (the pullback of the active ones is then differentiated along them)
    pub tangents: &'a [Option<&'a B::Tensor>],
    /// which operands receive the HVP (and the gradient)
    pub active: &'a [bool],
    /// also return the gradient `T̄` of the active operands
    pub gradient: bool,
}

impl<'a, B: Backend> SecondOrder<'a, B> {
    /// The request of a Hessian-vector product of `φ = Re⟨c_bar, N(T)⟩` along `tangents` for
    /// the `active` operands: a constant `C̄` (no `c_bar_dot`), no gradient.
    pub fn hvp(
        c_bar: &'a B::Tensor,
        tangents: &'a [Option<&'a B::Tensor>],
        active: &'a [bool],
    ) -> Self {
        SecondOrder {
            c_bar,
            c_bar_dot: None,
            tangents,
            active,
            gradient: false,
        }
    }
}

/// The result of a network's second-order rule ([`NetworkPlan::hvp`],
/// [`NetworkPlan::second_order`]).
#[derive(Clone, Debug)]
pub struct NetworkHvp<B: Backend> {
    /// the network's value `C = N(T)`
    pub value: B::Tensor,
    /// per operand: the gradient `T̄_k` (the pullback of `C̄`) when it was asked for and the
    /// operand is active, else `None`
    pub gradient: Vec<Option<B::Tensor>>,
    /// per operand: `(H·V)_k = d/dε T̄_k(T + ε·V)` for the active operands (zeros where no
    /// tangent reaches it), `None` for the others; the operand's shape and dtype (projected
    /// as first-order cotangents are)
    pub hvp: Vec<Option<B::Tensor>>,
}

/// What the forward sweep keeps of one step for the reverse sweep.
struct StepRecord<B: Backend> {
    inputs: SmallVec<[usize; 2]>,
    /// inputs that need a cotangent tangent
    active: [bool; 2],
    /// the first-order pullback, for the inputs whose cotangent is needed (intermediates,
    /// and the operands when the gradient is asked for)
    first: Option<PrimitivePullback<B>>,
    /// the values the step read, its output (a tensor of C's shape and dtype) and the
    /// tangents of its inputs
    x: SmallVec<[B::Tensor; 2]>,
    dx: SmallVec<[Option<B::Tensor>; 2]>,
    out: B::Tensor,
}

impl NetworkPlan {
    /// The Hessian-vector product of `φ(T) = Re⟨c_bar, N(T)⟩` along `tangents` (one per
    /// operand, `None` a zero tangent), for the operands with `active[k]` set, and the
    /// network's value. See [`second_order`](Self::second_order) for the general form (a
    /// cotangent tangent, the gradient, an allocator) and the module documentation of
    /// [`crate::network`] for the formulas.
    ///
    /// # Errors
    /// As [`second_order`](Self::second_order).
    pub fn hvp<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        tangents: &[Option<&B::Tensor>],
        active: &[bool],
    ) -> Result<NetworkHvp<B>> {
        let request = SecondOrder::hvp(c_bar, tangents, active);
        self.second_order(be, &HeapAllocator, operands, &request)
    }

    /// Second order of the network (forward-over-reverse): the value, optionally the
    /// gradient, and the tangent of the gradient `d/dε T̄(T + ε·V; C̄ + ε·C̄̇)` for the
    /// operands `request.active` selects, with primal intermediates (and the value) from
    /// `alloc`. Tangents of intermediates, cotangents and their tangents are temporaries
    /// the rule owns; nothing the caller passed is modified.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"operands"`, `"tangents"`, `"active"`) for a wrong number of
    /// entries; [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming `"operand k"`,
    /// `"tangent k"`, `"c_bar"` or `"c_bar_dot"`; backend errors; [`Error::NonFinite`] naming
    /// the output (`"output"`, `"the gradient of operand k"`, `"the HVP of operand k"`) that
    /// overflows although every input is finite ([`crate::finite`]).
    pub fn second_order<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        request: &SecondOrder<'_, B>,
    ) -> Result<NetworkHvp<B>> {
        let dtype = self.check_operands(be, operands)?;
        let n = operands.len();
        for (arg, len) in [
            ("tangents", request.tangents.len()),
            ("active", request.active.len()),
        ] {
            if len != n {
                return Err(Error::CountMismatch {
                    arg: arg.into(),
                    expected: n,
                    actual: len,
                });
            }
        }
        for (k, (t, x)) in request.tangents.iter().zip(operands).enumerate() {
            if let Some(t) = t {
                check::like(be, &format!("tangent {k}"), t, &be.dims(x), be.dtype(x))?;
            }
        }
        let out_dims = self.output_dims();
        check::like(be, "c_bar", request.c_bar, out_dims, dtype)?;
        if let Some(d) = request.c_bar_dot {
            check::like(be, "c_bar_dot", d, out_dims, dtype)?;
        }
        let steps = self.steps().len();
        let last = steps - 1;
        // needs[v]: value v leads to an active operand (gets a cotangent tangent)
        let mut needs: Vec<bool> = request.active.to_vec();
        // tangents of the intermediates, while the forward sweep needs them
        let mut dv: Vec<Option<B::Tensor>> = Vec::with_capacity(steps);
        let mut records: Vec<Option<StepRecord<B>>> = Vec::with_capacity(steps);
        let mut value = alloc.allocate(be, out_dims, dtype, Lifetime::Persistent)?;
        self.walk(be, alloc, operands, &mut value, |s, out, x| {
            let inputs = self.steps()[s].inputs();
            let op = self.steps()[s].primitive();
            let tangent = |v: usize| -> Option<B::Tensor> {
                if v < n {
                    request.tangents[v].cloned()
                } else {
                    dv[v - n].clone()
                }
            };
            let dx: SmallVec<[Option<B::Tensor>; 2]> = inputs.iter().map(|&v| tangent(v)).collect();
            let act = [needs[inputs[0]], inputs.get(1).is_some_and(|&v| needs[v])];
            let any_act = act[0] || act[1];
            // first-order cotangents: the intermediates' always, the operands' on request
            let first = [
                act[0] && (inputs[0] >= n || request.gradient),
                act[1] && (inputs.get(1).is_some_and(|&v| v >= n || request.gradient)),
            ];
            let first_pb = if first[0] || first[1] {
                let activity = Activity {
                    a: first[0],
                    b: first[1],
                    ..Activity::NONE
                };
                Some(op.pullback_at(be, out, x, activity)?)
            } else {
                None
            };
            // the output's tangent, when a later step reads it
            let want_tangent = s != last && dx.iter().any(Option::is_some);
            let d = if want_tangent {
                let t = Tangents {
                    a: dx[0].as_ref(),
                    b: dx.get(1).and_then(Option::as_ref),
                    ..Tangents::default()
                };
                Some(op.frule(be, out, x, t)?)
            } else {
                op.apply(be, out, x)?;
                None
            };
            for v in inputs.iter().filter_map(|v| v.checked_sub(n)) {
                dv[v] = None; // consumed by the forward sweep (the record keeps its own)
            }
            dv.push(d);
            records.push(any_act.then(|| StepRecord {
                inputs: SmallVec::from_slice(inputs),
                active: act,
                first: first_pb,
                x: x.iter().map(|t| (*t).clone()).collect(),
                dx,
                out: out.clone(),
            }));
            needs.push(any_act);
            Ok(())
        })?;
        drop(dv);
        // reverse sweep
        let mut cot: Vec<Option<B::Tensor>> = vec![None; n + steps];
        let mut cot_dot: Vec<Option<B::Tensor>> = vec![None; n + steps];
        cot[n + last] = Some(request.c_bar.clone());
        cot_dot[n + last] = request.c_bar_dot.cloned();
        for (s, rec) in records.iter().enumerate().rev() {
            let Some(rec) = rec else { continue };
            let (Some(bar), bar_dot) = (cot[n + s].take(), cot_dot[n + s].take()) else {
                continue;
            };
            if let Some(pb) = &rec.first {
                let g = pb.pullback(&bar)?;
                for (&v, g) in rec.inputs.iter().zip([g.a, g.b]) {
                    if g.is_some() {
                        cot[v] = g;
                    }
                }
            }
            if bar_dot.is_none() && rec.dx.iter().all(Option::is_none) {
                continue; // every term of the tangent is zero
            }
            let x: SmallVec<[&B::Tensor; 2]> = rec.x.iter().collect();
            let dx: SmallVec<[Option<&B::Tensor>; 2]> = rec.dx.iter().map(Option::as_ref).collect();
            let activity = Activity {
                a: rec.active[0],
                b: rec.active[1],
                ..Activity::NONE
            };
            let op = self.steps()[s].primitive();
            let gd =
                op.pullback_tangent(be, &rec.out, &x, &dx, &bar, bar_dot.as_ref(), activity)?;
            for (&v, gd) in rec.inputs.iter().zip([gd.a, gd.b]) {
                if gd.is_some() {
                    cot_dot[v] = gd;
                }
            }
        }
        let zeros_like = |k: usize| be.zeros(&be.dims(operands[k]), be.dtype(operands[k]));
        let mut hvp = Vec::with_capacity(n);
        let mut gradient = Vec::with_capacity(n);
        for k in 0..n {
            if !request.active[k] {
                hvp.push(None);
                gradient.push(None);
                continue;
            }
            hvp.push(Some(match cot_dot[k].take() {
                Some(t) => t,
                None => zeros_like(k)?,
            }));
            gradient.push(if request.gradient {
                Some(match cot[k].take() {
                    Some(t) => t,
                    None => zeros_like(k)?,
                })
            } else {
                None
            });
        }
        crate::finite::check(be, || "output".into(), &value, operands)?;
        let mut inputs = operands.to_vec();
        inputs.push(request.c_bar);
        for (k, g) in gradient.iter().enumerate() {
            if let Some(g) = g {
                crate::finite::check(be, || format!("the gradient of operand {k}"), g, &inputs)?;
            }
        }
        inputs.extend(request.tangents.iter().flatten());
        inputs.extend(request.c_bar_dot);
        for (k, h) in hvp.iter().enumerate() {
            if let Some(h) = h {
                crate::finite::check(be, || format!("the HVP of operand {k}"), h, &inputs)?;
            }
        }
        Ok(NetworkHvp {
            value,
            gradient,
            hvp,
        })
    }

    /// The dense Hessian of `φ(T) = Re⟨c_bar, N(T)⟩` with respect to the active operands, one
    /// HVP per real coordinate (for small problems and tests). Coordinates: the active
    /// operands in order, each flattened row-major; a complex element contributes two real
    /// coordinates, its real part then its imaginary part. Entry `(i, j)` is
    /// `∂²φ/∂ξ_i∂ξ_j`; the matrix is symmetric. Returned as a row-major `D×D` host tensor of
    /// the network's real dtype (`f32` for `f32`/`Complex32` networks, else `f64`).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"active"`); those of [`hvp`](Self::hvp).
    pub fn hessian<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
        c_bar: &B::Tensor,
        active: &[bool],
    ) -> Result<HostTensor> {
        let dtype = self.check_operands(be, operands)?;
        if active.len() != operands.len() {
            return Err(Error::CountMismatch {
                arg: "active".into(),
                expected: operands.len(),
                actual: active.len(),
            });
        }
        // (operand, element, imaginary?) of every coordinate
        let mut coords: Vec<(usize, usize, bool)> = Vec::new();
        for (k, x) in operands.iter().enumerate().filter(|(k, _)| active[*k]) {
            let len: usize = be.dims(x).iter().product();
            let parts: &[bool] = if be.dtype(x).is_complex() {
                &[false, true]
            } else {
                &[false]
            };
            for e in 0..len {
                for &im in parts {
                    coords.push((k, e, im));
                }
            }
        }
        let d = coords.len();
        let real = if dtype.is_double() {
            DType::F64
        } else {
            DType::F32
        };
        let mut h = HostTensor::zeros(&[d, d], real)?;
        for (j, &(k, e, im)) in coords.iter().enumerate() {
            let x = operands[k];
            let mut unit = HostTensor::zeros(&be.dims(x), be.dtype(x))?;
            let one = if im {
                Complex64::new(0.0, 1.0)
            } else {
                Complex64::new(1.0, 0.0)
            };
            unit.data_mut().set_projected(e, DynScalar::C64(one))?;
            let unit = be.from_host(unit)?;
            let mut tangents: Vec<Option<&B::Tensor>> = vec![None; operands.len()];
            tangents[k] = Some(&unit);
            let r = self.hvp(be, operands, c_bar, &tangents, active)?;
            let columns: Vec<Vec<Complex64>> = r
                .hvp
                .iter()
                .map(|t| match t {
                    Some(t) => be.to_host(t).map(|h| h.data().to_c64_vec()),
                    None => Ok(Vec::new()),
                })
                .collect::<Result<_>>()?;
            for (i, &(k2, e2, im2)) in coords.iter().enumerate() {
                let z = columns[k2][e2];
                let v = if im2 { z.im } else { z.re };
                h.data_mut().set_projected(i * d + j, DynScalar::F64(v))?;
            }
        }
        Ok(h)
    }
}
