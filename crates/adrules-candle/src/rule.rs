//! Any [`Rule`] of the core (a downstream crate's own operation) as a differentiable candle
//! op: [`apply`].
//!
//! # How
//! The rule's [`rrule`](adrules_core::rule::rrule) runs once, through the core's checked
//! driver, on a [`CandleBackend`] for the inputs' device and on the inputs without their
//! graph; the outputs it computed are attached to candle's graph:
//! - **one output**: one custom op over the inputs (`CustomOp1`, `2` or `3`) whose output is
//!   the rule's output and whose backward runs the rule's pullback on candle's cotangent; the
//!   inputs and the output the rule [keeps](Rule::keeps) are read from candle's graph in
//!   backward (the op keeps nothing else but the pullback);
//! - **`M` outputs**: the core's multi-output scheme
//!   ([`OutputsNode`](adrules_core::rule::OutputsNode)) written as one-output rules by
//!   [`split`]: one custom op over the inputs whose output is `[M]` zeros, and per output one
//!   selector op over it whose output is that output; candle's backward deposits each used
//!   output's cotangent with the node and the node runs the pullback once, `None` for an
//!   output the loss does not use (the rule's pullback keeps the inputs and outputs it
//!   declared).
//!
//! candle's custom ops take at most 3 inputs: a rule with more is one op over every input
//! flattened and concatenated (one copy of the inputs; candle's `cat` hands each input its
//! slice of the cotangent; the inputs must then share one dtype), whose pullback keeps the
//! inputs it reads itself.
//!
//! candle owns an op's output, so each output is copied once into candle's storage. Only the
//! inputs candle tracks (variables, or tensors computed from one) are active and get a
//! cotangent; with none, the rule's primal runs and its outputs are plain tensors (no node).
//!
//! # Errors
//! As the core's driver ([`adrules_core::rule`]'s errors, the rule's own
//! [`check`](Rule::check)), plus [`Error::Unsupported`] for a dtype other than f32/f64 or,
//! with more than 3 inputs, inputs of several dtypes, and
//! [`Error::DeviceMismatch`] naming `"input i"` for inputs on different devices, all as
//! candle errors carrying the typed error ([`adrules_error`](crate::adrules_error)). A
//! failure of the pullback inside `backward()` is a candle error carrying the typed error
//! ([`try_backward`](crate::try_backward) returns it typed).

use std::sync::Arc;

use adrules_core::rule::{self, Primal, PrimitiveCall, Rule, RulePullback, split};
use adrules_core::{Error, Result};
use candle_core::backend::BackendStorage;
use candle_core::{CustomOp1, CustomOp2, CustomOp3, Shape, Storage, Tensor};

use crate::backend::CandleBackend;
use crate::convert::{check_device, from_candle, tensor_dtype, to_candle};
use crate::forward::Forward;

/// The op name candle reports for every rule's node and selectors.
const NAME: &str = "adrules-rule";

/// A one-output rule's node over its inputs (see the module docs): the op's output is
/// `value`, its backward the rule's pullback on candle's cotangent, the kept inputs and
/// output read from candle's graph.
struct Node {
    value: Value,
    back: Back,
    /// more than 3 inputs: the op's one input is every input flattened and concatenated,
    /// and the pullback keeps the inputs it reads itself
    packed: bool,
}

/// Where a node's output comes from.
enum Value {
    /// computed by the rule's `rrule` before the op is recorded (copied into the op's
    /// storage: candle owns an op's output)
    Computed(Tensor),
    /// a primitive's output written by the op's forward straight into candle's storage
    /// ([`Forward`]: the strided kernels on CPU, the device kernels elsewhere; no copy)
    Written(Box<Forward>),
}

/// Where a node's pullback comes from.
enum Back {
    /// the pullback `rrule` returned with the outputs (its primal taken out unless packed)
    Ready(Box<RulePullback<CandleBackend>>),
    /// a primitive's, built in backward from the inputs and output of candle's graph by the
    /// core's driver [`rule::pullback_at`] (the primitive did not run through `rrule`)
    AtPrimal(Box<PrimitiveCall>),
}

impl Node {
    /// candle's name of the op.
    fn op_name(&self) -> &'static str {
        match &self.value {
            Value::Computed(_) => NAME,
            Value::Written(f) => f.name(),
        }
    }

    /// The cotangents of the inputs `x` for the op's output `res` and its cotangent `grad`.
    fn cotangents(
        &self,
        x: &[&Tensor],
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        let be = CandleBackend::new(grad.device().clone());
        let pullback = match &self.back {
            Back::Ready(pb) if self.packed => {
                return packed_cotangent(pb, grad).map(|g| vec![Some(g)]);
            }
            Back::Ready(pb) => pb,
            Back::AtPrimal(call) => {
                let active: Vec<bool> = x.iter().map(|t| t.track_op()).collect();
                if !active.contains(&true) {
                    return Ok(vec![None; x.len()]);
                }
                let detached: Vec<Tensor> = x.iter().map(|t| t.detach()).collect();
                let refs: Vec<&Tensor> = detached.iter().collect();
                let pb = rule::pullback_at(&**call, &be, &refs, &[&res.detach()], &active)?
                    .ok_or_else(|| Error::invalid("rule", "a primitive builds its pullback"))?;
                return pb.pullback(&[Some(grad.clone())]);
            }
        };
        let keeps = pullback.keeps();
        let inputs = x
            .iter()
            .zip(&keeps.inputs)
            .map(|(t, &k)| k.then(|| t.detach()))
            .collect();
        let output = keeps.outputs[0].then(|| res.detach());
        let primal = Primal::new(inputs, vec![output], pullback.active().to_vec());
        pullback.pullback_on(&be, &primal, &[Some(grad.clone())])
    }
}

/// The cotangent of the packed input: each input's cotangent (zeros for an inactive one)
/// flattened and concatenated, as the packing (candle's `cat` hands each input its slice).
fn packed_cotangent(pb: &RulePullback<CandleBackend>, grad: &Tensor) -> Result<Tensor> {
    let g = pb.pullback(&[Some(grad.clone())])?;
    let flat = |(i, g): (usize, &Option<Tensor>)| -> Result<Tensor> {
        match g {
            Some(t) => t.flatten_all().map_err(from_candle),
            None => {
                let n: usize = pb.input_dims(i).unwrap_or_default().iter().product();
                let dtype = pb.input_dtype(i).unwrap_or(adrules_core::DType::F32);
                let dtype = crate::convert::candle_dtype(dtype)?;
                Tensor::zeros(n, dtype, grad.device()).map_err(from_candle)
            }
        }
    };
    let flat = g.iter().enumerate().map(flat).collect::<Result<Vec<_>>>()?;
    Tensor::cat(&flat, 0).map_err(from_candle)
}

/// The forwards of the node for one arity: `$($s: $l),*` name the storages and layouts.
macro_rules! node_forwards {
    ($($s:ident : $l:ident),*) => {
        fn cpu_fwd(
            &self,
            $($s: &candle_core::CpuStorage, $l: &candle_core::Layout),*
        ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
            match &self.value {
                Value::Written(f) => f.cpu(&[$(($s, $l)),*]),
                Value::Computed(v) => copy(NAME, v, |s| match s {
                    Storage::Cpu(c) => Some(c),
                    _ => None,
                }),
            }
        }

        fn cuda_fwd(
            &self,
            $($s: &candle_core::CudaStorage, $l: &candle_core::Layout),*
        ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
            match &self.value {
                Value::Written(f) => f.generic(&[$(($s, $l)),*]),
                Value::Computed(v) => copy(NAME, v, |s| match s {
                    Storage::Cuda(c) => Some(c),
                    _ => None,
                }),
            }
        }

        fn metal_fwd(
            &self,
            $($s: &candle_core::MetalStorage, $l: &candle_core::Layout),*
        ) -> candle_core::Result<(candle_core::MetalStorage, candle_core::Shape)> {
            match &self.value {
                Value::Written(f) => f.generic(&[$(($s, $l)),*]),
                Value::Computed(v) => copy(NAME, v, |s| match s {
                    Storage::Metal(c) => Some(c),
                    _ => None,
                }),
            }
        }
    };
}

impl CustomOp1 for Node {
    fn name(&self) -> &'static str {
        self.op_name()
    }

    node_forwards!(s1: l1);

    fn bwd(&self, a: &Tensor, res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let mut g = self.cotangents(&[a], res, grad).map_err(to_candle)?;
        Ok(g.pop().flatten())
    }
}

impl CustomOp2 for Node {
    fn name(&self) -> &'static str {
        self.op_name()
    }

    node_forwards!(s1: l1, s2: l2);

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let g = self.cotangents(&[a, b], res, grad).map_err(to_candle)?;
        let mut g = g.into_iter();
        Ok((g.next().flatten(), g.next().flatten()))
    }
}

impl CustomOp3 for Node {
    fn name(&self) -> &'static str {
        self.op_name()
    }

    node_forwards!(s1: l1, s2: l2, s3: l3);

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = self.cotangents(&[a, b, c], res, grad).map_err(to_candle)?;
        let mut g = g.into_iter();
        Ok((g.next().flatten(), g.next().flatten(), g.next().flatten()))
    }
}

/// Runs `rule` on `inputs` (in the rule's order) as a differentiable candle op and returns
/// its outputs, in order (see the module docs): `loss.backward()` through any of them runs
/// the rule's pullback. Works on every candle device the rule's primitives run on (CPU,
/// CUDA, Metal); f32 and f64.
///
/// # Errors
/// See the module docs; every error comes before anything is recorded.
///
/// # Example
/// ```
/// use adrules_candle::candle_core::{Device, Var};
/// use adrules_core::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};
/// use adrules_core::{Backend, Conj, DynScalar, Permutation, Result};
///
/// /// `y = 2·x`, `x̄ = 2·ȳ`
/// #[derive(Debug)]
/// struct Double;
///
/// fn double<B: Backend>(be: &B, x: &B::Tensor) -> Result<B::Tensor> {
///     let mut y = be.empty(&be.dims(x), be.dtype(x))?;
///     let id = Permutation::identity(be.rank(x));
///     be.add(&mut y, x, &id, Conj::No, DynScalar::F64(2.0), DynScalar::F64(0.0))?;
///     Ok(y)
/// }
///
/// impl Rule for Double {
///     fn name(&self) -> &str { "double" }
///     fn num_inputs(&self) -> usize { 1 }
///     fn num_outputs(&self) -> usize { 1 }
///     fn keeps(&self, _: &[bool]) -> Keeps { Keeps::none(1, 1) }
///     fn rrule<B: SyncBackend>(
///         &self, be: &B, x: &[&B::Tensor], _: &[bool],
///     ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
///         let pb = |be: &B, _: &Primal<B>, c: &[Option<B::Tensor>]| -> Result<Vec<Option<B::Tensor>>> {
///             Ok(vec![c[0].as_ref().map(|c| double(be, c)).transpose()?])
///         };
///         Ok((vec![double(be, x[0])?], Box::new(pb)))
///     }
/// }
///
/// # fn main() -> candle_core::Result<()> {
/// let x = Var::new(&[1.0f64, 2.0, 3.0], &Device::Cpu)?;
/// let y = adrules_candle::apply_rule(&Double, &[x.as_tensor()])?;
/// let grads = y[0].sum_all()?.backward()?;
/// assert_eq!(grads.get(x.as_tensor()).unwrap().to_vec1::<f64>()?, vec![2.0; 3]);
/// # Ok(())
/// # }
/// ```
pub fn apply<R: Rule>(rule: &R, inputs: &[&Tensor]) -> candle_core::Result<Vec<Tensor>> {
    run(rule, inputs).map_err(to_candle)
}

/// [`apply`] with the adrules error.
pub(crate) fn run<R: Rule>(rule: &R, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let first = inputs.first().ok_or_else(|| Error::CountMismatch {
        arg: "inputs".into(),
        expected: rule.num_inputs(),
        actual: 0,
    })?;
    if inputs.len() != rule.num_inputs() {
        return Err(Error::CountMismatch {
            arg: "inputs".into(),
            expected: rule.num_inputs(),
            actual: inputs.len(),
        });
    }
    for (i, t) in inputs.iter().enumerate() {
        let arg = format!("input {i}");
        tensor_dtype(t, &arg)?;
        check_device(t, first.device(), &arg)?;
    }
    let be = CandleBackend::new(first.device().clone());
    let detached: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
    let refs: Vec<&Tensor> = detached.iter().collect();
    let active: Vec<bool> = inputs.iter().map(|t| t.track_op()).collect();
    if !active.contains(&true) {
        return rule::primal(rule, &be, &refs);
    }
    if rule.num_outputs() == 1 {
        return Ok(vec![one(rule, &be, inputs, &refs, &active)?]);
    }
    // several outputs: the core's scheme as one-output rules, a node and a selector each
    let (joint, selectors) = split(rule);
    let outputs = one(&joint, &be, inputs, &refs, &active).and_then(|node| {
        let select = |s| one(&s, &be, &[&node], &[&node.detach()], &[true]);
        selectors.into_iter().map(select).collect()
    });
    joint.release();
    outputs
}

/// The one-output `rule` on `inputs` (their values `refs`, their activity `active`) as one
/// custom op of candle's graph.
fn one<R: Rule>(
    rule: &R,
    be: &CandleBackend,
    inputs: &[&Tensor],
    refs: &[&Tensor],
    active: &[bool],
) -> Result<Tensor> {
    // more than 3 inputs: packed (checked before the rule runs)
    let packed = (inputs.len() > 3)
        .then(|| pack(rule.name(), inputs))
        .transpose()?;
    let (mut outputs, mut pullback) = rule::rrule(rule, be, refs, active)?;
    if packed.is_none() {
        // the kept inputs and output come from candle's graph in backward
        pullback.take_primal();
    }
    let node = Node {
        value: Value::Computed(outputs.remove(0)),
        back: Back::Ready(Box::new(pullback)),
        packed: packed.is_some(),
    };
    record(node, inputs, packed)
}

/// One call of a primitive (`call`, whose `forward` computes its fresh output in the
/// operands' joined dtype) on `inputs` as the same custom op as every rule's, with the
/// output written by the op's forward into candle's storage (no copy) and the pullback built
/// in backward from candle's graph ([`rule::pullback_at`]). Untracked inputs: the forward
/// alone, no node.
pub(crate) fn primitive(
    call: PrimitiveCall,
    forward: Forward,
    inputs: &[&Tensor],
) -> Result<Tensor> {
    if !inputs.iter().any(|t| t.track_op()) {
        return forward.apply(inputs);
    }
    let node = Node {
        value: Value::Written(Box::new(forward)),
        back: Back::AtPrimal(Box::new(call)),
        packed: false,
    };
    record(node, inputs, None)
}

/// `node` recorded over `inputs` (or over the one packed input).
fn record(node: Node, inputs: &[&Tensor], packed: Option<Tensor>) -> Result<Tensor> {
    match (inputs, packed) {
        (_, Some(p)) => p.apply_op1_arc(Arc::new(Box::new(node))),
        ([a], None) => a.apply_op1_arc(Arc::new(Box::new(node))),
        ([a, b], None) => a.apply_op2_arc(b, Arc::new(Box::new(node))),
        ([a, b, c], None) => a.apply_op3_arc(b, c, Arc::new(Box::new(node))),
        _ => return Err(Error::invalid("inputs", "at least 1 (checked above)")),
    }
    .map_err(from_candle)
}

/// Every input flattened and concatenated (one dtype: candle's `cat` takes no mix), the one
/// input of a rule's op with more than 3 inputs.
///
/// # Errors
/// [`Error::Unsupported`] for inputs of several dtypes.
fn pack(name: &str, inputs: &[&Tensor]) -> Result<Tensor> {
    if inputs.iter().any(|t| t.dtype() != inputs[0].dtype()) {
        return Err(Error::Unsupported {
            backend: "candle".into(),
            what: format!(
                "rule `{name}` with {} inputs of several dtypes as a differentiable op (more \
                 than 3 inputs are packed into one, of one dtype)",
                inputs.len()
            ),
        });
    }
    let flat = inputs.iter().map(|t| t.flatten_all());
    let flat = flat
        .collect::<candle_core::Result<Vec<_>>>()
        .map_err(from_candle)?;
    Tensor::cat(&flat, 0).map_err(from_candle)
}

/// The storage of `value` (a copy: candle owns an op's output), for the op `name`.
fn copy<S>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use adrules_core::rules::ContractOp;
    use adrules_core::{ContractSpec, DType};
    use candle_core::{DType as CDType, Device, Var};

    /// A failure inside a primitive's backward pass (a cotangent of the wrong shape or dtype
    /// handed to the node) is a candle error carrying the typed error, not a panic.
    #[test]
    fn primitive_backward_failures_are_errors() {
        let a = Var::ones((2, 3), CDType::F64, &Device::Cpu).unwrap();
        let b = Var::ones((3, 4), CDType::F64, &Device::Cpu).unwrap();
        let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        let prim: adrules_core::rules::Primitive = ContractOp::new(spec).into();
        let node = Node {
            value: Value::Written(Box::new(Forward::new(prim.clone(), DType::F64).unwrap())),
            back: Back::AtPrimal(Box::new(PrimitiveCall::new(prim, 2).unwrap())),
            packed: false,
        };
        let (a, b) = (a.as_tensor(), b.as_tensor());
        let res = a.apply_op2_no_bwd(b, &node).unwrap();
        let wrong = Tensor::ones((4, 2), CDType::F64, &Device::Cpu).unwrap();
        let e = CustomOp2::bwd(&node, a, b, &res, &wrong).unwrap_err();
        assert!(
            matches!(crate::adrules_error(&e), Some(Error::ShapeMismatch { .. })),
            "{e}"
        );
        let half = res.to_dtype(CDType::F16).unwrap();
        let e = CustomOp2::bwd(&node, a, b, &res, &half).unwrap_err();
        assert!(crate::adrules_error(&e).is_some(), "{e}");
        let right = Tensor::ones((2, 4), CDType::F64, &Device::Cpu).unwrap();
        let (ga, gb) = CustomOp2::bwd(&node, a, b, &res, &right).unwrap();
        assert_eq!(ga.unwrap().to_vec2::<f64>().unwrap(), vec![vec![4.0; 3]; 2]);
        assert_eq!(gb.unwrap().to_vec2::<f64>().unwrap(), vec![vec![2.0; 4]; 3]);
    }
}
