//! The primitives as differentiable dfdx ops: [`add`], [`trace`], [`contract`], each one call
//! of the core's [`Primitive`], recorded by the crate's one bridge (the core's
//! [`PrimitiveCall`] rule through [`apply_rule`](crate::apply_rule)).

use adrules_core::Result;
use adrules_core::rule::PrimitiveCall;
use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use dfdx::prelude::{Shape, Tape, Tensor};
use dfdx::tensor::Cpu;

use crate::bridge::shape_for;
use crate::element::DfdxElement;
use crate::operands::Operands;
use crate::rule::run;
use crate::tape::JoinTape;

/// Permuted add `C = α·P_p(A)` (see [`AddOp`]; β must be 0), as a dfdx op: `C[I] =
/// α·A[J]` with `J[p[m]] = I[m]`, i.e. output axis `m` is A's axis `p[m]`.
///
/// `Out` is the output's shape type, named by the caller (for example
/// `let c: Tensor<(usize, Const<3>), f64, Cpu, _> = add(&op, a)?;`); it is checked at run time
/// against the dims the op produces. The result carries `a`'s tape; the backward pass adds
/// `Ā += α·P_p⁻¹(C̄)` (the shared [`AddOp`] pullback) into `a`'s gradient.
///
/// # Errors
/// Checked before anything is computed: [`Error::InvalidArgument`] (`"beta"`) for β ≠ 0;
/// [`Error::DTypeMismatch`] (`"alpha"`) for a complex α; [`Error::RankMismatch`] (`"a"`)
/// when the permutation does not fit A's rank; [`Error::RankMismatch`] /
/// [`Error::InvalidArgument`] (`"output"`) when `Out` does not fit the output dims. On error
/// the operand (and the tape it carries) is dropped, as with dfdx's own `try_*` ops.
///
/// [`Error::InvalidArgument`]: adrules_core::Error::InvalidArgument
/// [`Error::DTypeMismatch`]: adrules_core::Error::DTypeMismatch
/// [`Error::RankMismatch`]: adrules_core::Error::RankMismatch
pub fn add<Out, E, S, T>(op: &AddOp, a: Tensor<S, E, Cpu, T>) -> Result<Tensor<Out, E, Cpu, T>>
where
    Out: Shape,
    E: DfdxElement,
    S: Shape,
    T: Tape<E, Cpu>,
{
    primitive(&op.clone().into(), (a,))
}

/// Generalized partial trace `C = α·Σ_summed diag_kept(A)` (see
/// [`TraceSpec`](adrules_core::TraceSpec) and [`TraceOp`]; β must be 0), as a dfdx op: kept
/// groups of A's axes are read on their diagonal and become C's axes in order, summed groups
/// are summed over their diagonal — diagonals (`TraceSpec::from_labels("bii", "bi")`),
/// partial traces (`"iij"` → `"j"`), hypertraces (`"iii"` → `""`) and sums (`"ij"` → `"i"`).
/// `Out` has rank [`rank_c`](adrules_core::TraceSpec::rank_c) (`()`/`Rank0` when everything is
/// summed). The result carries `a`'s tape; the backward pass adds `α·C̄`, broadcast over the
/// summed groups, onto A's diagonal (the shared [`TraceOp`] pullback).
///
/// # Errors
/// As [`add`], with [`Error::RankMismatch`] / [`Error::ShapeMismatch`] (`"a"`) when the spec
/// does not fit A (see [`TraceSpec::output_dims`](adrules_core::TraceSpec::output_dims)).
///
/// [`Error::RankMismatch`]: adrules_core::Error::RankMismatch
/// [`Error::ShapeMismatch`]: adrules_core::Error::ShapeMismatch
pub fn trace<Out, E, S, T>(op: &TraceOp, a: Tensor<S, E, Cpu, T>) -> Result<Tensor<Out, E, Cpu, T>>
where
    Out: Shape,
    E: DfdxElement,
    S: Shape,
    T: Tape<E, Cpu>,
{
    primitive(&op.clone().into(), (a,))
}

/// Pairwise (batched) contraction `C = α·P_pAB(A·B)` (see
/// [`ContractSpec`](adrules_core::ContractSpec) and [`ContractOp`]; β must be 0), as a dfdx
/// op: A's axes split into `(batch_a, open_a, contr_a)`, B's into `(batch_b, contr_b,
/// open_b)`, the product summed over the contracted pairs and taken once per batch index
/// (`ContractSpec::from_labels("bij", "bjk", "bik")`), the output permuted by `pAB` acting
/// on `(batch…, open_a…, open_b…)`. `Out` has rank
/// [`rank_c`](adrules_core::ContractSpec::rank_c) (at most 6, as every dfdx shape).
///
/// Either operand may carry the tape, or both ([`JoinTape`]); the result carries the joined
/// tape. The backward pass adds `Ā += α·C̄·Bᵀ` and `B̄ += α·Aᵀ·C̄` (each one contraction, the
/// shared [`ContractOp`] pullback) into the gradients of **both** operands, tape or not, as
/// dfdx's own binary ops do (a `NoneTape` parameter receives its gradient). An operand
/// passed twice (`contract(&op, x.leaky_trace(), x.clone())`) receives both contributions.
///
/// # Errors
/// As [`add`], with the shape errors of
/// [`ContractSpec::output_dims`](adrules_core::ContractSpec::output_dims) (`"a"`, `"b"`).
/// On error both operands (and their tapes) are dropped.
pub fn contract<Out, E, SA, SB, TA, TB>(
    op: &ContractOp,
    a: Tensor<SA, E, Cpu, TA>,
    b: Tensor<SB, E, Cpu, TB>,
) -> Result<Tensor<Out, E, Cpu, TA::Joined>>
where
    Out: Shape,
    E: DfdxElement,
    SA: Shape,
    SB: Shape,
    TA: JoinTape<E, TB>,
    TB: Tape<E, Cpu>,
{
    primitive(&op.clone().into(), (a, b))
}

/// One call of `op` on `operands` (in input order) as a dfdx op: the checks (coefficients of
/// a fresh output, output dims, the shape type `Out`) before anything runs, then the crate's
/// one bridge ([`apply_rule`](crate::apply_rule)) on the core's [`PrimitiveCall`]: one copy
/// of each operand in, the primal into a fresh tensor moved out, and with a tape the shared
/// pullback ([`Primitive::pullback_at`]'s arithmetic) run once in the backward pass, each
/// operand's cotangent added into its gradient (an operand passed twice receives both).
fn primitive<Out, E, X>(op: &Primitive, operands: X) -> Result<Tensor<Out, E, Cpu, X::Tape>>
where
    Out: Shape,
    E: DfdxElement,
    X: Operands<E>,
{
    op.fresh_alpha(E::DTYPE)?;
    let out_dims = op.output_dims(&operands.dims())?;
    shape_for::<Out>(&out_dims, "output")?;
    let call = PrimitiveCall::new(op.clone(), op.arity())?;
    run(&call, operands.collect()?)
}
