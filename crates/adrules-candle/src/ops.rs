//! The primitives as differentiable candle ops: one call of the core's [`Primitive`] as its
//! rule [`PrimitiveCall`], recorded by the crate's one bridge ([`crate::rule`]) with the
//! output written by [`crate::forward`] into candle's storage and the shared pullback
//! ([`Primitive::pullback_at`]'s arithmetic) built in backward from candle's graph.

use adrules_core::rule::PrimitiveCall;
use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{DType, DynScalar, Result};
use candle_core::Tensor;

use crate::convert::{check_device, tensor_dtype, to_candle};
use crate::forward::Forward;
use crate::kernel::count_error;

/// `prim` on the operands `x` (in input order) as a node of candle's graph, with a fresh
/// output of the operands' joined dtype. Checks, in order: the operands' dtypes (`"a"`,
/// `"b"`), B's device, the shapes, then the coefficients (β must be 0, α must cast).
pub(crate) fn apply(prim: Primitive, x: &[&Tensor]) -> Result<Tensor> {
    let mut dtype = DType::F32;
    for (t, arg) in x.iter().zip(["a", "b"]) {
        dtype = dtype.join(tensor_dtype(t, arg)?);
    }
    if let [a, b] = x {
        check_device(b, a.device(), "b")?;
    }
    let dims: Vec<&[usize]> = x.iter().map(|t| t.dims()).collect();
    prim.output_dims(&dims)?;
    let alpha = prim.fresh_alpha(dtype)?;
    if x.len() != prim.arity() {
        return Err(count_error(&prim, x.len()));
    }
    let prim = prim.with_coefficients(alpha, DynScalar::F64(0.0));
    let forward = Forward::new(prim.clone(), dtype)?;
    crate::rule::primitive(PrimitiveCall::new(prim, x.len())?, forward, x)
}

/// Permuted add `α·P_p(A)` (`dims(out)[m] = dims(A)[p[m]]`) as a differentiable candle op.
///
/// `op.perm` is the permutation, `op.alpha` a real constant; `op.conj` is a no-op on real
/// data; `op.beta` must be zero (the op returns a fresh tensor: add `β·C` with candle's own
/// ops). Forward: one strided pass over A on its device (no copy of A). Backward: the shared
/// pullback [`AddOp::rrule`], `Ā = conj(α)·P_p⁻¹(C̄)` (TensorOperations.jl
/// [`src/pullbacks/add.jl`](https://github.com/Jutho/TensorOperations.jl/blob/v5.8.0/src/pullbacks/add.jl)).
///
/// # Errors
/// A typed [`adrules_core::Error`] wrapped in candle's error ([`to_candle`]; recover it with
/// [`adrules_error`](crate::adrules_error)): [`Unsupported`] for a dtype other than f32/f64;
/// [`RankMismatch`] naming `"a"`; [`DTypeMismatch`] for a complex α; [`InvalidArgument`] for
/// a nonzero β; candle's own failures as [`Backend`].
///
/// [`Unsupported`]: adrules_core::Error::Unsupported
/// [`RankMismatch`]: adrules_core::Error::RankMismatch
/// [`DTypeMismatch`]: adrules_core::Error::DTypeMismatch
/// [`InvalidArgument`]: adrules_core::Error::InvalidArgument
/// [`Backend`]: adrules_core::Error::Backend
pub fn add(op: &AddOp, a: &Tensor) -> candle_core::Result<Tensor> {
    apply(op.clone().into(), &[a]).map_err(to_candle)
}

/// Generalized partial trace `α·Σ_summed diag_kept(A)` (diagonals `ii->i`, `bii->bi`,
/// traces `iij->j`, hypertraces `iii->`, sums `ij->i`; see [`adrules_core::TraceSpec`]) as a
/// differentiable candle op.
///
/// Coefficients and flags as in [`add`]. Forward: the diagonal of every group of axes is read
/// as a strided view of A and the summed groups are summed (no copy of A). Backward: the
/// shared pullback [`TraceOp::rrule`], which adds `conj(α)·C̄`, broadcast over the summed
/// groups, onto the diagonal of a zero Ā.
///
/// # Errors
/// As [`add`], plus [`ShapeMismatch`](adrules_core::Error::ShapeMismatch) for axes of one
/// group of unequal dimension.
pub fn trace(op: &TraceOp, a: &Tensor) -> candle_core::Result<Tensor> {
    apply(op.clone().into(), &[a]).map_err(to_candle)
}

/// Pairwise (batched) contraction `α·P_pAB(A·B)` (see [`adrules_core::ContractSpec`]; batch
/// labels such as `b` in `bij,bjk->bik` give one product per batch index) as a
/// differentiable candle op.
///
/// A and B may have different dtypes (f32 and f64): the result has the joined dtype and each
/// gradient its operand's dtype. Coefficients and flags as in [`add`]. Forward: TTGT on the
/// tensors' device as one batched GEMM, reading A and B in place when their memory order
/// allows a batch of plain or transposed matrix views. Backward: the shared pullback
/// [`ContractOp::rrule`], `Ā = conj(α)·C̄·B̂ᴴ`, `B̄ = conj(α)·Âᴴ·C̄` as two (batched)
/// contractions (TensorOperations.jl
/// [`src/pullbacks/contract.jl`](https://github.com/Jutho/TensorOperations.jl/blob/v5.8.0/src/pullbacks/contract.jl));
/// only the inputs candle tracks get one, and A and B are kept by the graph node, nothing
/// else (no intermediate of the forward is saved).
///
/// # Errors
/// As [`add`], plus [`DeviceMismatch`](adrules_core::Error::DeviceMismatch) naming `"b"`,
/// [`RankMismatch`](adrules_core::Error::RankMismatch) and
/// [`ShapeMismatch`](adrules_core::Error::ShapeMismatch) for operands that do not fit
/// `op.spec`.
pub fn contract(op: &ContractOp, a: &Tensor, b: &Tensor) -> candle_core::Result<Tensor> {
    apply(op.clone().into(), &[a, b]).map_err(to_candle)
}
