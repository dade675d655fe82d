//! The primitives as differentiable candle ops: forward by the strided kernels on CPU
//! ([`crate::cpu`]) and the device-generic storage kernels on CUDA and Metal
//! ([`crate::kernel`]), backward by the shared pullbacks of `adrules_core::rules` evaluated on
//! [`CandleBackend`].

use adrules_core::rules::{Activity, AddOp, ContractOp, TraceOp};
use adrules_core::{DType, DynScalar, Error, Result};
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, CustomOp2, DType as CDType, Layout, MetalStorage, Shape,
    Tensor,
};

use crate::backend::CandleBackend;
use crate::convert::{candle_dtype, check_device, from_candle, tensor_dtype, to_candle};
use crate::cpu;
use crate::kernel::{self, Storage};

/// Implements `cuda_fwd` and `metal_fwd` of a custom op by its device-generic `fwd`.
macro_rules! forward_on_gpus {
    ($($s:ident : $l:ident),+) => {
        fn cuda_fwd(&self, $($s: &CudaStorage, $l: &Layout),+)
            -> candle_core::Result<(CudaStorage, Shape)> {
            self.fwd($(($s, $l)),+)
        }
        fn metal_fwd(&self, $($s: &MetalStorage, $l: &Layout),+)
            -> candle_core::Result<(MetalStorage, Shape)> {
            self.fwd($(($s, $l)),+)
        }
    };
}

/// Whether candle's backward pass wants a gradient for `t` (a variable, or computed from
/// one): the activity of that input.
fn active(t: &Tensor) -> bool {
    t.track_op()
}

/// The backward pass of a one-operand node (add, trace): `None` when A is not tracked, else
/// `cotangent(backend on C̄'s device, detached A, activity of A alone)`, the shared rule's Ā.
fn operand_cotangent(
    a: &Tensor,
    c_bar: &Tensor,
    cotangent: impl FnOnce(&CandleBackend, &Tensor, Activity) -> Result<Option<Tensor>>,
) -> candle_core::Result<Option<Tensor>> {
    if !active(a) {
        return Ok(None);
    }
    let be = CandleBackend::new(c_bar.device().clone());
    let act = Activity {
        a: true,
        ..Activity::NONE
    };
    cotangent(&be, &a.detach(), act).map_err(to_candle)
}

/// α as a real number for a fresh output of `dtype`; β must be zero (the op has no C input).
fn fresh_alpha(alpha: DynScalar, beta: DynScalar, dtype: DType) -> Result<DynScalar> {
    if !beta.is_zero() {
        return Err(Error::invalid(
            "beta",
            format!(
                "a candle op returns a fresh tensor, so β must be 0 (got {beta}); \
                 add β·C with candle's `affine` and `add`"
            ),
        ));
    }
    alpha.cast(dtype, "alpha")
}

/// The permuted add `α·P_p(A)` as a candle op (see [`add`]).
#[derive(Clone, Debug)]
pub(crate) struct AddNode {
    op: AddOp,
    dtype: CDType,
}

impl AddNode {
    /// The node computing `op` (its β is ignored) in `dtype`.
    pub(crate) fn new(op: AddOp, dtype: DType) -> Result<Self> {
        Ok(AddNode {
            op,
            dtype: candle_dtype(dtype)?,
        })
    }

    fn fwd<S: Storage>(&self, (a, la): (&S, &Layout)) -> candle_core::Result<(S, Shape)> {
        kernel::add(
            a,
            la,
            self.op.perm.as_slice(),
            self.op.alpha.re(),
            self.dtype,
        )
    }
}

impl CustomOp1 for AddNode {
    fn name(&self) -> &'static str {
        "adrules-add"
    }

    fn cpu_fwd(&self, a: &CpuStorage, la: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        cpu::add(a, la, &self.op.perm, self.op.alpha.re(), self.dtype)
    }

    forward_on_gpus!(a: la);

    fn bwd(&self, a: &Tensor, res: &Tensor, c_bar: &Tensor) -> candle_core::Result<Option<Tensor>> {
        operand_cotangent(a, c_bar, |be, a, act| {
            Ok(self.op.pullback_at(be, res, a, act)?.pullback(c_bar)?.a)
        })
    }
}

/// The partial trace `α·P_p(tr_{q1,q2} A)` as a candle op (see [`trace`]).
#[derive(Clone, Debug)]
pub(crate) struct TraceNode {
    op: TraceOp,
    dtype: CDType,
}

impl TraceNode {
    /// The node computing `op` (its β is ignored) in `dtype`.
    pub(crate) fn new(op: TraceOp, dtype: DType) -> Result<Self> {
        Ok(TraceNode {
            op,
            dtype: candle_dtype(dtype)?,
        })
    }

    fn fwd<S: Storage>(&self, (a, la): (&S, &Layout)) -> candle_core::Result<(S, Shape)> {
        kernel::trace(a, la, &self.op.spec, self.op.alpha.re(), self.dtype)
    }
}

impl CustomOp1 for TraceNode {
    fn name(&self) -> &'static str {
        "adrules-trace"
    }

    fn cpu_fwd(&self, a: &CpuStorage, la: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        cpu::trace(a, la, &self.op.spec, self.op.alpha.re(), self.dtype)
    }

    forward_on_gpus!(a: la);

    fn bwd(&self, a: &Tensor, res: &Tensor, c_bar: &Tensor) -> candle_core::Result<Option<Tensor>> {
        operand_cotangent(a, c_bar, |be, a, act| {
            Ok(self.op.pullback_at(be, res, a, act)?.pullback(c_bar)?.a)
        })
    }
}

/// The pairwise contraction `α·P_pAB(A·B)` as a candle op (see [`contract`]).
#[derive(Clone, Debug)]
pub(crate) struct ContractNode {
    op: ContractOp,
    dtype: CDType,
}

impl ContractNode {
    /// The node computing `op` (its β is ignored) in `dtype`.
    pub(crate) fn new(op: ContractOp, dtype: DType) -> Result<Self> {
        Ok(ContractNode {
            op,
            dtype: candle_dtype(dtype)?,
        })
    }

    fn fwd<S: Storage>(
        &self,
        a: (&S, &Layout),
        b: (&S, &Layout),
    ) -> candle_core::Result<(S, Shape)> {
        kernel::contract(a, b, &self.op.spec, self.op.alpha.re(), self.dtype)
    }
}

impl CustomOp2 for ContractNode {
    fn name(&self) -> &'static str {
        "adrules-contract"
    }

    fn cpu_fwd(
        &self,
        a: &CpuStorage,
        la: &Layout,
        b: &CpuStorage,
        lb: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        cpu::contract(
            (a, la),
            (b, lb),
            &self.op.spec,
            self.op.alpha.re(),
            self.dtype,
        )
    }

    forward_on_gpus!(a: la, b: lb);

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        res: &Tensor,
        c_bar: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let act = Activity {
            a: active(a),
            b: active(b),
            ..Activity::NONE
        };
        if !act.a && !act.b {
            return Ok((None, None));
        }
        let be = CandleBackend::new(c_bar.device().clone());
        let pb = self
            .op
            .pullback_at(&be, res, &a.detach(), &b.detach(), act)
            .map_err(to_candle)?;
        let cot = pb.pullback(c_bar).map_err(to_candle)?;
        Ok((cot.a, cot.b))
    }
}

/// Permuted add `α·P_p(A)` (`dims(out)[m] = dims(A)[p[m]]`) as a differentiable candle op.
///
/// `op.perm` is the permutation, `op.alpha` a real constant; `op.conj` is a no-op on real
/// data; `op.beta` must be zero (the op returns a fresh tensor: add `β·C` with candle's own
/// ops). Forward: one strided pass over A on its device (no copy of A). Backward: the shared
/// pullback [`AddOp::rrule`], `Ā = conj(α)·P_p⁻¹(C̄)` (TensorOperations.jl
/// `src/pullbacks/add.jl`).
///
/// # Errors
/// [`Error::Unsupported`] for a dtype other than f32/f64; [`Error::RankMismatch`] naming `"a"`;
/// [`Error::DTypeMismatch`] for a complex α; [`Error::InvalidArgument`] for a nonzero β;
/// [`Error::Backend`] for candle's own failures.
pub fn add(a: &Tensor, op: &AddOp) -> Result<Tensor> {
    let dtype = tensor_dtype(a, "a")?;
    if a.rank() != op.perm.len() {
        return Err(Error::rank("a", op.perm.len(), a.rank()));
    }
    let alpha = fresh_alpha(op.alpha, op.beta, dtype)?;
    let node = AddNode::new(op.clone().alpha(alpha).beta(0.0), dtype)?;
    a.apply_op1(node).map_err(from_candle)
}

/// Partial trace `α·P_p(tr_{q1,q2} A)` (see [`adrules_core::TraceSpec`]) as a differentiable
/// candle op.
///
/// Coefficients and flags as in [`add`]. Forward: the diagonal of the traced pairs is read as
/// a strided view of A and summed (no copy of A). Backward: the shared pullback
/// [`TraceOp::rrule`], which adds `conj(α)·C̄` onto the diagonal of a zero Ā.
///
/// # Errors
/// As [`add`], plus [`Error::ShapeMismatch`] for traced axes of unequal dimension.
pub fn trace(a: &Tensor, op: &TraceOp) -> Result<Tensor> {
    let dtype = tensor_dtype(a, "a")?;
    op.spec.output_dims(a.dims())?;
    let alpha = fresh_alpha(op.alpha, op.beta, dtype)?;
    let node = TraceNode::new(op.clone().alpha(alpha).beta(0.0), dtype)?;
    a.apply_op1(node).map_err(from_candle)
}

/// Pairwise contraction `α·P_pAB(A·B)` (see [`adrules_core::ContractSpec`]) as a
/// differentiable candle op.
///
/// A and B may have different dtypes (f32 and f64): the result has the joined dtype and each
/// gradient its operand's dtype. Coefficients and flags as in [`add`]. Forward: TTGT on the
/// tensors' device, reading A and B in place when their memory order allows a plain or a
/// transposed matrix view. Backward: the shared pullback [`ContractOp::rrule`],
/// `Ā = conj(α)·C̄·B̂ᴴ`, `B̄ = conj(α)·Âᴴ·C̄` as two contractions (TensorOperations.jl
/// `src/pullbacks/contract.jl`); only the inputs candle tracks get one, and A and B are kept
/// by the graph node, nothing else (no intermediate of the forward is saved).
///
/// # Errors
/// As [`add`], plus [`Error::DeviceMismatch`] naming `"b"`, [`Error::RankMismatch`] and
/// [`Error::ShapeMismatch`] for operands that do not fit `op.spec`.
pub fn contract(a: &Tensor, b: &Tensor, op: &ContractOp) -> Result<Tensor> {
    let dtype = tensor_dtype(a, "a")?.join(tensor_dtype(b, "b")?);
    check_device(b, a.device(), "b")?;
    op.spec.output_dims(a.dims(), b.dims())?;
    let alpha = fresh_alpha(op.alpha, op.beta, dtype)?;
    let node = ContractNode::new(op.clone().alpha(alpha).beta(0.0), dtype)?;
    a.apply_op2(b, node).map_err(from_candle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use adrules_core::ContractSpec;
    use candle_core::{Device, Var};

    /// A failure inside the backward pass is a candle error carrying our typed message, not a
    /// panic.
    #[test]
    fn backward_failures_are_errors() {
        let a = Var::ones((2, 3), CDType::F64, &Device::Cpu).unwrap();
        let b = Var::ones((3, 4), CDType::F64, &Device::Cpu).unwrap();
        let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        let node = ContractNode::new(ContractOp::new(spec), DType::F64).unwrap();
        let res = a
            .as_tensor()
            .apply_op2_no_bwd(b.as_tensor(), &node)
            .unwrap();
        let wrong = Tensor::ones((4, 2), CDType::F64, &Device::Cpu).unwrap();
        let e = node
            .bwd(a.as_tensor(), b.as_tensor(), &res, &wrong)
            .unwrap_err();
        assert!(e.to_string().contains("c_bar"), "{e}");
        let half = res.to_dtype(CDType::F16).unwrap();
        let e = node
            .bwd(a.as_tensor(), b.as_tensor(), &res, &half)
            .unwrap_err();
        assert!(e.to_string().contains("F16"), "{e}");
    }
}
