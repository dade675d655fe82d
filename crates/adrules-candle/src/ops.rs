//! The primitives as differentiable candle ops: one graph node over the core's
//! [`Primitive`], forward by [`crate::forward`], backward by the shared pullback
//! ([`Primitive::pullback_at`]) evaluated on [`CandleBackend`].

use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{DType, DynScalar, Result};
use candle_core::{CustomOp1, CustomOp2, Tensor};

use crate::backend::CandleBackend;
use crate::convert::{check_device, from_candle, tensor_dtype, to_candle};
use crate::forward::{Forward, forwards};
use crate::kernel::count_error;

/// One primitive call as a node of candle's graph (`CustomOp1` for add and trace,
/// `CustomOp2` for a contraction). The node keeps nothing but the call: candle keeps the
/// inputs and the output, which is all the pullback reads.
#[derive(Clone, Debug)]
struct Node(Forward);

impl Node {
    /// The forward (what [`forwards`] calls).
    fn forward(&self) -> &Forward {
        &self.0
    }

    /// The cotangents of the operands `x` (in input order) for the output cotangent `c_bar`:
    /// the shared pullback at the primal point (`res` is the output) on a [`CandleBackend`]
    /// for `c_bar`'s device, with the activity candle's tracking gives (a constant operand
    /// gets `None` and costs nothing).
    fn cotangents(
        &self,
        x: &[&Tensor],
        res: &Tensor,
        c_bar: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        let prim = self.0.primitive();
        let active: Vec<bool> = x.iter().map(|t| t.track_op()).collect();
        if !active.contains(&true) {
            return Ok(vec![None; x.len()]);
        }
        let be = CandleBackend::new(c_bar.device().clone());
        let detached: Vec<Tensor> = x.iter().map(|t| t.detach()).collect();
        let detached: Vec<&Tensor> = detached.iter().collect();
        let pb = prim.pullback_at(&be, res, &detached, prim.activity(false, &active))?;
        Ok(prim
            .cotangents_in_order(pb.pullback(c_bar)?, false)
            .into_vec())
    }
}

impl CustomOp1 for Node {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    forwards!(a: la);

    fn bwd(&self, a: &Tensor, res: &Tensor, c_bar: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let g = self.cotangents(&[a], res, c_bar).map_err(to_candle)?;
        Ok(g.into_iter().next().flatten())
    }
}

impl CustomOp2 for Node {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    forwards!(a: la, b: lb);

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        res: &Tensor,
        c_bar: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let mut g = self
            .cotangents(&[a, b], res, c_bar)
            .map_err(to_candle)?
            .into_iter();
        Ok((g.next().flatten(), g.next().flatten()))
    }
}

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
    let node = Node(Forward::new(
        prim.with_coefficients(alpha, DynScalar::F64(0.0)),
        dtype,
    )?);
    match x {
        [a] => a.apply_op1(node),
        [a, b] => a.apply_op2(b, node),
        _ => return Err(count_error(node.0.primitive(), x.len())),
    }
    .map_err(from_candle)
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

#[cfg(test)]
mod tests {
    use super::*;
    use adrules_core::ContractSpec;
    use candle_core::{DType as CDType, Device, Var};

    /// A failure inside the backward pass is a candle error carrying our typed error, not a
    /// panic.
    #[test]
    fn backward_failures_are_errors() {
        let a = Var::ones((2, 3), CDType::F64, &Device::Cpu).unwrap();
        let b = Var::ones((3, 4), CDType::F64, &Device::Cpu).unwrap();
        let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        let node = Node(Forward::new(ContractOp::new(spec).into(), DType::F64).unwrap());
        let res = a
            .as_tensor()
            .apply_op2_no_bwd(b.as_tensor(), &node)
            .unwrap();
        let wrong = Tensor::ones((4, 2), CDType::F64, &Device::Cpu).unwrap();
        let e = CustomOp2::bwd(&node, a.as_tensor(), b.as_tensor(), &res, &wrong).unwrap_err();
        assert!(e.to_string().contains("c_bar"), "{e}");
        assert!(
            matches!(crate::adrules_error(&e), Some(adrules_core::Error::ShapeMismatch { arg, .. }) if arg == "c_bar"),
            "{e}"
        );
        let half = res.to_dtype(CDType::F16).unwrap();
        let e = CustomOp2::bwd(&node, a.as_tensor(), b.as_tensor(), &res, &half).unwrap_err();
        assert!(e.to_string().contains("F16"), "{e}");
        assert!(crate::adrules_error(&e).is_some(), "{e}");
    }
}
