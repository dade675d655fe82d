//! The primitives as differentiable dfdx ops: [`add`], [`trace`], [`contract`].

use adrules_core::rules::{
    Activity, AddOp, AddPullback, ContractOp, Cotangents, TraceOp, TracePullback,
};
use adrules_core::{DynScalar, Error, Result};
use adrules_strided::{Strided, Tensor as StridedTensor};
use dfdx::prelude::{HasShape, PutTape, Shape, SplitTape, Tape, Tensor};
use dfdx::tensor::Cpu;

use crate::bridge::{contiguous, copy_in, copy_out, dims_of, shape_for};
use crate::element::DfdxElement;
use crate::error::report;
use crate::record::{Keys, buffer};
use crate::tape::JoinTape;

/// Checks the coefficients of an op that returns a fresh real tensor: β = 0, α real.
pub(crate) fn check_coefficients(alpha: DynScalar, beta: DynScalar) -> Result<()> {
    if !beta.is_zero() {
        return Err(Error::invalid(
            "beta",
            format!(
                "is {beta}, but the op returns a fresh tensor: β must be 0 \
                 (write β·C + … with dfdx's own ops, which differentiate through C)"
            ),
        ));
    }
    if alpha.dtype().is_complex() {
        return Err(Error::DTypeMismatch {
            arg: "alpha".into(),
            expected: "a real dtype (dfdx tensors are real)".into(),
            actual: alpha.dtype(),
        });
    }
    Ok(())
}

/// Permuted add `C = α·P_p(A)` (see [`AddOp`]; β must be 0), as a dfdx op: `C[I] =
/// α·A[J]` with `J[p[m]] = I[m]`, i.e. output axis `m` is A's axis `p[m]`.
///
/// `Out` is the output's shape type, named by the caller (for example
/// `let c: Tensor<(usize, Const<3>), f64, Cpu, _> = add(a, &op)?;`); it is checked at run time
/// against the dims the op produces. The result carries `a`'s tape; the backward pass adds
/// `Ā += α·P_p⁻¹(C̄)` (the shared [`AddOp`] pullback) into `a`'s gradient.
///
/// # Errors
/// Checked before anything is computed: [`Error::RankMismatch`] (`"a"`) when the permutation
/// does not fit A's rank; [`Error::RankMismatch`] / [`Error::InvalidArgument`] when `Out`
/// does not fit the output dims; [`Error::InvalidArgument`] (`"beta"`) for β ≠ 0;
/// [`Error::DTypeMismatch`] (`"alpha"`) for a complex α. On error the operand (and the tape
/// it carries) is dropped, as with dfdx's own `try_*` ops.
pub fn add<Out, E, S, T>(a: Tensor<S, E, Cpu, T>, op: &AddOp) -> Result<Tensor<Out, E, Cpu, T>>
where
    Out: Shape,
    E: DfdxElement,
    S: Shape,
    T: Tape<E, Cpu>,
{
    check_coefficients(op.alpha, op.beta)?;
    let a_dims = dims_of(a.shape());
    if op.perm.len() != a_dims.len() {
        return Err(Error::rank("a", op.perm.len(), a_dims.len()));
    }
    let out_shape: Out = shape_for(&op.perm.apply(&a_dims), "output")?;
    unary(a, out_shape, op)
}

/// Partial trace `C = α·P_p(tr_{q1,q2} A)` (see [`TraceSpec`](adrules_core::TraceSpec) and
/// [`TraceOp`]; β must be 0), as a dfdx op. `p` empty is a full trace (use a `()`/`Rank0`
/// output shape). The result carries `a`'s tape; the backward pass adds `α·C̄` onto A's
/// diagonal (the shared [`TraceOp`] pullback).
///
/// # Errors
/// As [`add`], with [`Error::RankMismatch`] / [`Error::ShapeMismatch`] (`"a"`) when the spec
/// does not fit A (see [`TraceSpec::output_dims`](adrules_core::TraceSpec::output_dims)).
pub fn trace<Out, E, S, T>(a: Tensor<S, E, Cpu, T>, op: &TraceOp) -> Result<Tensor<Out, E, Cpu, T>>
where
    Out: Shape,
    E: DfdxElement,
    S: Shape,
    T: Tape<E, Cpu>,
{
    check_coefficients(op.alpha, op.beta)?;
    let out_dims = op.spec.output_dims(&dims_of(a.shape()))?;
    let out_shape: Out = shape_for(&out_dims, "output")?;
    unary(a, out_shape, op)
}

/// Pairwise contraction `C = α·P_pAB(A·B)` (see [`ContractSpec`](adrules_core::ContractSpec)
/// and [`ContractOp`]; β must be 0), as a dfdx op: A's axes split into `(open_a, contr_a)`,
/// B's into `(contr_b, open_b)`, the product summed over the contracted pairs, the output
/// permuted by `pAB` acting on `(open_a…, open_b…)`.
///
/// Either operand may carry the tape, or both ([`JoinTape`]); the result carries the joined
/// tape. The backward pass adds `Ā += α·C̄·Bᵀ` and `B̄ += α·Aᵀ·C̄` (each one contraction, the
/// shared [`ContractOp`] pullback) into the gradients of **both** operands, tape or not, as
/// dfdx's own binary ops do (a `NoneTape` parameter receives its gradient). An operand
/// passed twice (`contract(x.leaky_trace(), x.clone(), …)`) receives both contributions.
///
/// # Errors
/// As [`add`], with the shape errors of
/// [`ContractSpec::output_dims`](adrules_core::ContractSpec::output_dims) (`"a"`, `"b"`).
/// On error both operands (and their tapes) are dropped.
pub fn contract<Out, E, SA, SB, TA, TB>(
    a: Tensor<SA, E, Cpu, TA>,
    b: Tensor<SB, E, Cpu, TB>,
    op: &ContractOp,
) -> Result<Tensor<Out, E, Cpu, TA::Joined>>
where
    Out: Shape,
    E: DfdxElement,
    SA: Shape,
    SB: Shape,
    TA: JoinTape<E, TB>,
    TB: Tape<E, Cpu>,
{
    check_coefficients(op.alpha, op.beta)?;
    let out_dims = op
        .spec
        .output_dims(&dims_of(a.shape()), &dims_of(b.shape()))?;
    let out_shape: Out = shape_for(&out_dims, "output")?;
    let (a, ta) = contiguous(a)?.split_tape();
    let (b, tb) = contiguous(b)?.split_tape();
    let mut tape = ta.join(tb);
    let traced = <TA::Joined as Tape<E, Cpu>>::OWNS_TAPE;
    let (sa, sb) = (copy_in(&a)?, copy_in(&b)?);
    let mut c = StridedTensor::zeros(&out_dims, E::DTYPE)?;
    // One pullback per operand, so that each gradient buffer is lent on its own (an operand
    // passed twice then accumulates both contributions).
    let pullbacks = if traced {
        Some((
            op.pullback_at(&Strided, &c, &sa, &sb, ONLY_A)?,
            op.pullback_at(&Strided, &c, &sa, &sb, ONLY_B)?,
        ))
    } else {
        None
    };
    op.apply(&Strided, &mut c, &sa, &sb)?;
    drop((sa, sb)); // the pullbacks keep their own handles of what they read
    let out: Tensor<Out, E, Cpu> = copy_out(a.device(), c, out_shape)?;
    if let Some((pull_a, pull_b)) = pullbacks {
        let (ga, gb, gc) = (a.ghost(), b.ghost(), out.ghost());
        let keys = Keys {
            out: buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&gc)?)),
            out_dims,
            operands: vec![
                (
                    buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&ga)?)),
                    dims_of(a.shape()),
                ),
                (
                    buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&gb)?)),
                    dims_of(b.shape()),
                ),
            ],
        };
        tape.add_backward_op(move |grads| {
            report(keys.backward(grads, |c_bar, k, slot| {
                let mut cot = Cotangents::<Strided>::default();
                if k == 0 {
                    cot.a = slot.take();
                    let r = pull_a.accumulate(c_bar, &mut cot);
                    *slot = cot.a;
                    r
                } else {
                    cot.b = slot.take();
                    let r = pull_b.accumulate(c_bar, &mut cot);
                    *slot = cot.b;
                    r
                }
            }))
        });
    }
    Ok(out.put_tape(tape))
}

/// The one-operand rules ([`AddOp`], [`TraceOp`]) seen uniformly.
trait UnaryRule {
    /// The rule's pullback type.
    type Pullback: 'static;
    /// The pullback at `(C, A)` for A's cotangent only.
    fn pullback_at(&self, c: &StridedTensor, a: &StridedTensor) -> Result<Self::Pullback>;
    /// The primal into `c`.
    fn apply(&self, c: &mut StridedTensor, a: &StridedTensor) -> Result<()>;
    /// Adds A's cotangent for `c_bar` into `into.a`.
    fn accumulate(
        pb: &Self::Pullback,
        c_bar: &StridedTensor,
        into: &mut Cotangents<Strided>,
    ) -> Result<()>;
}

const ONLY_A: Activity = Activity {
    a: true,
    ..Activity::NONE
};
const ONLY_B: Activity = Activity {
    b: true,
    ..Activity::NONE
};

impl UnaryRule for AddOp {
    type Pullback = AddPullback<Strided>;
    fn pullback_at(&self, c: &StridedTensor, a: &StridedTensor) -> Result<Self::Pullback> {
        AddOp::pullback_at(self, &Strided, c, a, ONLY_A)
    }
    fn apply(&self, c: &mut StridedTensor, a: &StridedTensor) -> Result<()> {
        AddOp::apply(self, &Strided, c, a)
    }
    fn accumulate(
        pb: &Self::Pullback,
        c_bar: &StridedTensor,
        into: &mut Cotangents<Strided>,
    ) -> Result<()> {
        pb.accumulate(c_bar, into)
    }
}

impl UnaryRule for TraceOp {
    type Pullback = TracePullback<Strided>;
    fn pullback_at(&self, c: &StridedTensor, a: &StridedTensor) -> Result<Self::Pullback> {
        TraceOp::pullback_at(self, &Strided, c, a, ONLY_A)
    }
    fn apply(&self, c: &mut StridedTensor, a: &StridedTensor) -> Result<()> {
        TraceOp::apply(self, &Strided, c, a)
    }
    fn accumulate(
        pb: &Self::Pullback,
        c_bar: &StridedTensor,
        into: &mut Cotangents<Strided>,
    ) -> Result<()> {
        pb.accumulate(c_bar, into)
    }
}

/// The common part of the one-operand ops: contiguity, copy in, the rule (its pullback for
/// A only when traced), copy out, recording.
fn unary<Out, E, S, T, R>(
    a: Tensor<S, E, Cpu, T>,
    out_shape: Out,
    op: &R,
) -> Result<Tensor<Out, E, Cpu, T>>
where
    Out: Shape,
    E: DfdxElement,
    S: Shape,
    T: Tape<E, Cpu>,
    R: UnaryRule,
{
    let (a, mut tape) = contiguous(a)?.split_tape();
    let out_dims = dims_of(&out_shape);
    let sa = copy_in(&a)?;
    let mut c = StridedTensor::zeros(&out_dims, E::DTYPE)?;
    let pullback = T::OWNS_TAPE.then(|| op.pullback_at(&c, &sa)).transpose()?;
    op.apply(&mut c, &sa)?;
    drop(sa);
    let out: Tensor<Out, E, Cpu> = copy_out(a.device(), c, out_shape)?;
    if let Some(pullback) = pullback {
        let (ga, gc) = (a.ghost(), out.ghost());
        let keys = Keys {
            out: buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&gc)?)),
            out_dims,
            operands: vec![(
                buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&ga)?)),
                dims_of(a.shape()),
            )],
        };
        tape.add_backward_op(move |grads| {
            report(keys.backward(grads, |c_bar, _, slot| {
                let mut cot = Cotangents::<Strided> {
                    a: slot.take(),
                    ..Default::default()
                };
                let r = R::accumulate(&pullback, c_bar, &mut cot);
                *slot = cot.a;
                r
            }))
        });
    }
    Ok(out.put_tape(tape))
}
