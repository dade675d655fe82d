//! The selector op of the core's multi-output scheme ([`OutputsNode`], and the
//! decompositions' [`FactorsNode`] over it): one candle op per output over the node's
//! output, whose forward is the output's values and whose backward deposits the output's
//! cotangent with the node. Shared by [`crate::linalg`] and [`crate::rule`].

use adrules_core::linalg::FactorsNode;
use adrules_core::rule::{JointPullback, OutputsNode};
use adrules_core::{Error, Result};
use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CustomOp1, Shape, Storage, Tensor};

use crate::backend::CandleBackend;
use crate::convert::to_candle;

/// A node that keeps the cotangents of its outputs ([`OutputsNode::deposit`]).
pub(crate) trait Depot: Send + Sync {
    /// Deposits the cotangent of output `index` and returns the selector's cotangent of the
    /// node's output (the ticket vector).
    fn deposit(&self, index: usize, cotangent: Tensor) -> Result<Tensor>;
}

impl Depot for FactorsNode<CandleBackend> {
    fn deposit(&self, index: usize, cotangent: Tensor) -> Result<Tensor> {
        FactorsNode::deposit(self, index, cotangent)
    }
}

impl<P: JointPullback<CandleBackend> + Send + Sync> Depot for OutputsNode<CandleBackend, P> {
    fn deposit(&self, index: usize, cotangent: Tensor) -> Result<Tensor> {
        OutputsNode::deposit(self, index, cotangent)
    }
}

/// `[count]` zeros of `s`'s dtype on its device (the node's output).
pub(crate) fn zeros<S>(s: &S, count: usize) -> candle_core::Result<(S, Shape)>
where
    S: BackendStorage,
    S::Device: BackendDevice<Storage = S>,
{
    let shape = Shape::from(count);
    Ok((s.device().zeros_impl(&shape, s.dtype())?, shape))
}

/// The storage of `value` (a copy: candle owns an op's output), for the op `name`.
pub(crate) fn copy<S>(
    name: &str,
    value: &Tensor,
    pick: impl Fn(&Storage) -> Option<&S>,
) -> candle_core::Result<(S, Shape)>
where
    S: BackendStorage,
{
    let (storage, layout) = value.storage_and_layout();
    let s = pick(&storage).ok_or_else(|| {
        to_candle(Error::Backend {
            backend: "candle".into(),
            message: format!(
                "{name}: the outputs live on {:?}, not on the input's device",
                value.device().location()
            ),
        })
    })?;
    Ok((s.try_clone(layout)?, value.shape().clone()))
}

/// The storage of `value` as a CPU, CUDA or Metal op's forward (see [`copy`]).
macro_rules! copy_forwards {
    ($name:ident, $value:ident) => {
        fn cpu_fwd(
            &self,
            _: &candle_core::CpuStorage,
            _: &candle_core::Layout,
        ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
            crate::select::copy(self.$name, &self.$value, |s| match s {
                candle_core::Storage::Cpu(c) => Some(c),
                _ => None,
            })
        }

        fn cuda_fwd(
            &self,
            _: &candle_core::CudaStorage,
            _: &candle_core::Layout,
        ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
            crate::select::copy(self.$name, &self.$value, |s| match s {
                candle_core::Storage::Cuda(c) => Some(c),
                _ => None,
            })
        }

        fn metal_fwd(
            &self,
            _: &candle_core::MetalStorage,
            _: &candle_core::Layout,
        ) -> candle_core::Result<(candle_core::MetalStorage, candle_core::Shape)> {
            crate::select::copy(self.$name, &self.$value, |s| match s {
                candle_core::Storage::Metal(c) => Some(c),
                _ => None,
            })
        }
    };
}

/// The selector of output `index` (see the module docs): its output is `value`, its
/// backward deposits the output's cotangent with the node.
pub(crate) struct Selector {
    pub name: &'static str,
    pub index: usize,
    pub value: Tensor,
    pub node: std::sync::Arc<dyn Depot>,
}

impl CustomOp1 for Selector {
    fn name(&self) -> &'static str {
        self.name
    }

    copy_forwards!(name, value);

    fn bwd(
        &self,
        _node: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let node_bar = self.node.deposit(self.index, grad.clone());
        node_bar.map(Some).map_err(to_candle)
    }
}
