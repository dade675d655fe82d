//! The storage-level forward of one primitive call, `α·op(operands)` into a fresh tensor:
//! the strided kernels on CPU ([`crate::cpu`]), the device-generic kernels on CUDA and Metal
//! ([`crate::kernel`]). Both users of it build on this module and not on each other: the
//! [`CandleBackend`](crate::CandleBackend) primitives run it without recording a graph node
//! ([`Forward::apply`]), and the crate's one bridge ([`crate::rule`]) writes a primitive's
//! output with it when it records the primitive's rule.

use adrules_core::rules::Primitive;
use adrules_core::{DType, Result};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType as CDType, Layout, Shape, Tensor};

use crate::convert::{candle_dtype, from_candle};
use crate::cpu;
use crate::kernel::{self, Storage, count_error};

/// Implements `cpu_fwd`, `cuda_fwd` and `metal_fwd` of a custom op (one storage/layout pair
/// per operand) by `self.forward()`, a [`Forward`].
macro_rules! forwards {
    ($($s:ident : $l:ident),+) => {
        fn cpu_fwd(&self, $($s: &candle_core::CpuStorage, $l: &candle_core::Layout),+)
            -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
            self.forward().cpu(&[$(($s, $l)),+])
        }
        fn cuda_fwd(&self, $($s: &candle_core::CudaStorage, $l: &candle_core::Layout),+)
            -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
            self.forward().generic(&[$(($s, $l)),+])
        }
        fn metal_fwd(&self, $($s: &candle_core::MetalStorage, $l: &candle_core::Layout),+)
            -> candle_core::Result<(candle_core::MetalStorage, candle_core::Shape)> {
            self.forward().generic(&[$(($s, $l)),+])
        }
    };
}

/// The forward of one primitive call: `prim` with its α (already cast to the output dtype,
/// read as a real number) computed in `dtype`; β is ignored (the output is fresh).
#[derive(Clone, Debug)]
pub(crate) struct Forward {
    prim: Primitive,
    dtype: CDType,
}

impl Forward {
    /// The forward of `prim` in `dtype`.
    ///
    /// # Errors
    /// [`Error::Unsupported`](adrules_core::Error::Unsupported) for a complex `dtype`.
    pub(crate) fn new(prim: Primitive, dtype: DType) -> Result<Self> {
        Ok(Forward {
            prim,
            dtype: candle_dtype(dtype)?,
        })
    }

    /// Itself (what [`forwards`] calls).
    fn forward(&self) -> &Forward {
        self
    }

    /// candle's name of the op.
    pub(crate) fn name(&self) -> &'static str {
        match self.prim {
            Primitive::Add(_) => "adrules-add",
            Primitive::Trace(_) => "adrules-trace",
            Primitive::Contract(_) => "adrules-contract",
        }
    }

    /// The forward on CPU storage.
    pub(crate) fn cpu(
        &self,
        x: &[(&CpuStorage, &Layout)],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        cpu::forward(&self.prim, x, self.dtype)
    }

    /// The forward on any device's storage.
    pub(crate) fn generic<S: Storage>(
        &self,
        x: &[(&S, &Layout)],
    ) -> candle_core::Result<(S, Shape)> {
        kernel::forward(&self.prim, x, self.dtype)
    }

    /// The forward on the operands `x` (in input order), without a graph node.
    ///
    /// # Errors
    /// [`Error::CountMismatch`](adrules_core::Error::CountMismatch) for a wrong number of
    /// operands; candle's failures as [`from_candle`] maps them.
    pub(crate) fn apply(&self, x: &[&Tensor]) -> Result<Tensor> {
        match x {
            [a] => a.apply_op1_no_bwd(self),
            [a, b] => a.apply_op2_no_bwd(b, self),
            _ => return Err(count_error(&self.prim, x.len())),
        }
        .map_err(from_candle)
    }
}

impl CustomOp1 for Forward {
    fn name(&self) -> &'static str {
        Forward::name(self)
    }

    forwards!(a: la);
}

impl CustomOp2 for Forward {
    fn name(&self) -> &'static str {
        Forward::name(self)
    }

    forwards!(a: la, b: lb);
}
