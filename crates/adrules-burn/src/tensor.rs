//! The ops on burn's user-facing tensors ([`burn_tensor::Tensor`]), routed to the backend
//! they live on.

use std::any::Any;
use std::sync::Arc;

use adrules_core::network::{Network, NetworkPlan, Order, PlanCache};
use adrules_core::rule::{PrimitiveCall, Rule};
use adrules_core::rules::{AddOp, ContractOp, TraceOp};
use adrules_core::{Error, Result};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, TensorMetadata};
use burn_dispatch::{
    BackendTensor, DispatchAutodiffContext, DispatchKindConversion, DispatchTensor,
    DispatchTensorKind, GradientCheckpointingStrategy,
};
use burn_flex::Flex;
use burn_tensor::Tensor;

use crate::backend::BurnBackend;
use crate::convert::{check_dtype, engine_error, unsupported};
use crate::node::{primal_only, record};
use crate::rules::Op;

/// A float tensor of any rank, as an input of [`apply`] (ops with operands of different
/// ranks take a fixed-size array of these). Built with `.into()` from a [`Tensor`].
#[derive(Clone, Debug)]
pub struct Operand(DispatchTensor);

impl<const D: usize> From<Tensor<D>> for Operand {
    fn from(t: Tensor<D>) -> Self {
        Operand(t.into_dispatch())
    }
}

impl<const D: usize> From<&Tensor<D>> for Operand {
    fn from(t: &Tensor<D>) -> Self {
        Operand(t.clone().into_dispatch())
    }
}

impl Operand {
    /// The shape.
    pub fn dims(&self) -> Vec<usize> {
        self.0.shape().to_vec()
    }

    /// The operand as a rank-`D` tensor (the results of [`network_hvp`] come as operands).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] (`"operand"`) when the operand's rank is not `D`.
    pub fn into_tensor<const D: usize>(self) -> Result<Tensor<D>> {
        let rank = self.0.shape().len();
        if rank != D {
            return Err(Error::rank("operand", rank, D));
        }
        Ok(Tensor::from_dispatch(self.0))
    }

    /// The operand reshaped to `dims` (as many elements, row-major) by burn's differentiable
    /// reshape, whatever its rank.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`"operand"`) for another number of elements.
    pub(crate) fn reshaped<const D: usize>(self, dims: [usize; D]) -> Result<Tensor<D>> {
        let shape = self.dims();
        if shape.iter().product::<usize>() != dims.iter().product::<usize>() {
            return Err(Error::shape("operand", &dims, &shape));
        }
        // the dispatch backend's reshape (recorded by autodiff when the operand is tracked);
        // the user-facing `reshape` would read a 0 in `dims` as "keep that axis"
        let t = <burn_dispatch::Dispatch as burn_backend::ops::FloatTensorOps<_>>::float_reshape(
            self.0,
            dims.into(),
        );
        Ok(Tensor::from_dispatch(t))
    }
}

/// Second order through the core: the Hessian-vector product of
/// `φ(T) = Re⟨c_bar, N(T)⟩` for the network `plan` along `directions` (one per operand, `None`
/// a zero direction), for every operand, by the core's forward-over-reverse rule
/// ([`NetworkPlan::hvp`]) run with burn's own ops on the backend and device the tensors live
/// on (routed as [`apply`]: Flex, and NdArray / cubecl with this crate's features). Each result
/// has its operand's shape (a rank-0 slot as shape `[1]`, as everywhere in this API); turn it
/// into a tensor with [`Operand::into_tensor`].
///
/// burn has no higher-order derivatives (its backward pass is not itself differentiable), so
/// the HVP cannot come from nesting burn's autodiff: it is computed outside burn's graph, and
/// the results are plain (non-autodiff) tensors; autodiff inputs are read without their graph.
///
/// # Errors
/// As [`apply`] for the routing and dtypes (every tensor on one backend and device:
/// [`Error::DeviceMismatch`] naming `"input i"` in the order operands, `c_bar`, the present
/// directions); the errors of [`NetworkPlan::hvp`] ([`Error::ShapeMismatch`] naming
/// `"operand k"`, `"tangent k"`, `"c_bar"`).
pub fn network_hvp<const N: usize>(
    plan: &NetworkPlan,
    operands: [Operand; N],
    c_bar: Operand,
    directions: [Option<Operand>; N],
) -> Result<[Operand; N]> {
    let mut all: Vec<Operand> = operands.to_vec();
    all.push(c_bar.clone());
    all.extend(directions.iter().flatten().cloned());
    let backend = backend_of(&all)?;
    for (i, t) in all.iter().enumerate() {
        check_dtype(&format!("input {i}"), t.0.dtype())?;
    }
    match backend {
        Routed::Flex => hvp_on::<Flex, N>(plan, operands, c_bar, directions),
        #[cfg(feature = "ndarray")]
        Routed::NdArray => hvp_on::<NdArray, N>(plan, operands, c_bar, directions),
        #[cfg(cube)]
        Routed::Cube => {
            hvp_on::<burn_dispatch::backends::Cube, N>(plan, operands, c_bar, directions)
        }
    }
}

/// [`network_hvp`] for the Einstein string `subscripts` (planned as [`einsum`] does).
///
/// # Errors
/// The string's and the planning errors (as [`einsum`]); otherwise as [`network_hvp`].
pub fn einsum_hvp<const N: usize>(
    subscripts: &str,
    operands: [Operand; N],
    c_bar: Operand,
    directions: [Option<Operand>; N],
) -> Result<[Operand; N]> {
    let dims = einsum_dims(subscripts, &operands)?;
    let plan = PlanCache::global().einsum(subscripts, &dims)?;
    network_hvp(&plan, operands, c_bar, directions)
}

fn hvp_on<B: Backend, const N: usize>(
    plan: &NetworkPlan,
    operands: [Operand; N],
    c_bar: Operand,
    directions: [Option<Operand>; N],
) -> Result<[Operand; N]>
where
    DispatchTensor: DispatchKindConversion<B>,
{
    // plain primitives of B, a rank-0 slot read from burn's shape [1]
    let plain = |o: Operand, scalar: bool| -> Result<crate::BurnTensor<B>> {
        let d = Tensor::<1>::from_dispatch(o.0)
            .without_autodiff()
            .into_dispatch();
        Ok(crate::BurnTensor::read(float::<B>(d)?, scalar))
    };
    let rank0 = |k: usize| plan.operand_dims(k).is_some_and(<[usize]>::is_empty);
    let x: Vec<crate::BurnTensor<B>> = operands
        .into_iter()
        .enumerate()
        .map(|(k, o)| plain(o, rank0(k)))
        .collect::<Result<_>>()?;
    let v: Vec<Option<crate::BurnTensor<B>>> = directions
        .into_iter()
        .enumerate()
        .map(|(k, o)| o.map(|o| plain(o, rank0(k))).transpose())
        .collect::<Result<_>>()?;
    let cb = plain(c_bar, plan.output_dims().is_empty())?;
    let device = x
        .first()
        .map(|t| t.primitive().device())
        .ok_or_else(|| Error::CountMismatch {
            arg: "operands".into(),
            expected: plan.num_operands(),
            actual: 0,
        })?;
    let be = crate::BurnBackend::<B>::new(device);
    let refs: Vec<&crate::BurnTensor<B>> = x.iter().collect();
    let tangents: Vec<Option<&crate::BurnTensor<B>>> = v.iter().map(Option::as_ref).collect();
    let r = plan.hvp(&be, &refs, &cb, &tangents, &[true; N])?;
    let out: Vec<Operand> = r
        .hvp
        .into_iter()
        .map(|h| {
            let h = h.ok_or_else(|| Error::invalid("operands", "no HVP for an active operand"))?;
            let shape: Vec<usize> = if h.dims().is_empty() {
                vec![1]
            } else {
                h.dims().to_vec()
            };
            let p = h.into_primitive_shaped(&shape);
            let t = <DispatchTensor as DispatchKindConversion<B>>::from_backend(
                BackendTensor::Float(p),
            );
            Ok(Operand(t))
        })
        .collect::<Result<_>>()?;
    out.try_into()
        .map_err(|_| Error::invalid("operands", "one HVP per operand"))
}

/// Runs `op` on `inputs` (see [`Op`] for their order) and returns its rank-`D` output; with
/// any input on an autodiff device the op is one differentiable node whose backward is the
/// shared pullback.
///
/// # Routing
/// burn 0.22 picks the backend of a [`Tensor`] at run time from its device (burn-dispatch);
/// the inputs are routed to the one concrete backend `B` they live on and the op runs as
/// [`forward`] or [`forward_autodiff`] on its primitives:
/// - with an input on an autodiff device (`device.autodiff()`, optionally
///   `.gradient_checkpointing()`), as `Autodiff<B, C>` with `C = NoCheckpointing` or
///   `BalancedCheckpointing` as the device says: one node of its graph; inputs on the plain
///   device are constants of that node (burn's own rule for mixed contexts);
/// - otherwise on `B` directly.
///
/// Routed backends: Flex (burn's default CPU backend, through the strided kernels on its own
/// buffers), and with this crate's features NdArray (`ndarray`) and burn's cubecl backend
/// `Cube` (`wgpu`, `vulkan`, `webgpu`, `metal`, `cuda`, `rocm`: one backend type whose device
/// names the runtime), both through burn's own ops on the tensor's device (nothing is copied
/// to the host). A tensor of a backend compiled into burn-dispatch without the matching
/// feature here (LibTorch, Remote, or a cubecl runtime enabled elsewhere in the build) gets
/// [`Error::Unsupported`] naming the feature to enable.
///
/// # Scalars
/// As burn's own `einsum`: an op whose output has rank 0 (a full trace or contraction)
/// returns a `Tensor<1>` of shape `[1]`, and a rank-0 input (C of such an op) is passed with
/// shape `[1]`.
///
/// [`forward`]: crate::forward
/// [`forward_autodiff`]: crate::forward_autodiff
///
/// # Errors
/// Checked before anything is recorded: [`Error::RankMismatch`] (`"output"`) when `D` is not
/// the op's output rank (1 for a scalar output); [`Error::CountMismatch`] for a wrong number of inputs;
/// [`Error::InvalidArgument`] (`"beta"`) for a nonzero β without C; [`Error::Unsupported`] for
/// a dtype other than f32/f64 or a backend that is not routed; [`Error::DeviceMismatch`]
/// (`"input i"`) when the inputs live on different backends or devices; [`Error::InvalidArgument`] (`"inputs"`) when autodiff
/// inputs use different checkpointing strategies; rank, shape and index errors of the op.
pub fn apply<const N: usize, const D: usize>(op: &Op, inputs: [Operand; N]) -> Result<Tensor<D>> {
    let rank = op.output_rank().max(1);
    if rank != D {
        return Err(Error::rank("output", rank, D));
    }
    match op {
        Op::Primitive(p) => run(Arc::new(PrimitiveCall::new(p.clone(), N)?), inputs),
        Op::Network(plan) => run(Arc::new(plan.clone()), inputs),
    }
}

/// The network `plan` (shared, not copied) on `operands`, as one node of output rank `D`.
///
/// # Errors
/// As [`network`].
fn run_plan<const N: usize, const D: usize>(
    plan: Arc<NetworkPlan>,
    operands: [Operand; N],
) -> Result<Tensor<D>> {
    let rank = plan.output_dims().len().max(1);
    if rank != D {
        return Err(Error::rank("output", rank, D));
    }
    run(plan, operands)
}

/// burn's NdArray backend (deprecated upstream in favour of Flex; routed all the same).
#[cfg(feature = "ndarray")]
#[allow(deprecated)]
type NdArray = burn_dispatch::backends::NdArray;

/// Routes `inputs` to the backend they live on (with autodiff when any input has it) and runs
/// `rule` there.
pub(crate) fn run<R: Rule + 'static, const N: usize, const D: usize>(
    rule: Arc<R>,
    inputs: [Operand; N],
) -> Result<Tensor<D>> {
    let context = context(&inputs)?;
    let backend = backend_of(&inputs)?;
    for (i, t) in inputs.iter().enumerate() {
        check_dtype(&format!("input {i}"), t.0.dtype())?;
    }
    let x = inputs.map(|t| t.0);
    match backend {
        Routed::Flex => run_on::<Flex, R, N, D>(rule, x, context),
        #[cfg(feature = "ndarray")]
        Routed::NdArray => run_on::<NdArray, R, N, D>(rule, x, context),
        #[cfg(cube)]
        Routed::Cube => run_on::<burn_dispatch::backends::Cube, R, N, D>(rule, x, context),
    }
}

/// The burn backends the Tensor API routes to: Flex always, the others when their adrules
/// feature is on (`ndarray`; `wgpu`, `vulkan`, `webgpu`, `metal`, `cuda`, `rocm`, which all
/// are burn's one cubecl backend `Cube`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Routed {
    Flex,
    #[cfg(feature = "ndarray")]
    NdArray,
    #[cfg(cube)]
    Cube,
}

/// The backend of a dispatch tensor kind (autodiff looked through), or why it has none.
pub(crate) fn routed(kind: &DispatchTensorKind) -> Result<Routed> {
    #[allow(unreachable_patterns)]
    match kind {
        DispatchTensorKind::Autodiff(inner) => routed(inner),
        DispatchTensorKind::Flex(_) => Ok(Routed::Flex),
        #[cfg(feature = "ndarray")]
        DispatchTensorKind::NdArray(_) => Ok(Routed::NdArray),
        #[cfg(cube)]
        DispatchTensorKind::Cube(_) => Ok(Routed::Cube),
        _ => Err(unsupported(format!(
            "a tensor of a burn backend this build does not route (it routes {}; enable \
             adrules' feature for the backend: burn-ndarray, burn-wgpu, burn-vulkan, \
             burn-metal, burn-cuda, burn-rocm)",
            routed_names(),
        ))),
    }
}

/// The backends routed to, for error messages.
fn routed_names() -> String {
    let mut names = vec!["Flex"];
    if cfg!(feature = "ndarray") {
        names.push("NdArray");
    }
    if cfg!(cube) {
        names.push("Cube (wgpu, CUDA, …)");
    }
    names.join(", ")
}

/// The one backend and device all `inputs` live on.
///
/// # Errors
/// [`Error::DeviceMismatch`] naming the first input on another backend or device than input
/// 0; [`Error::Unsupported`] for a backend that is not routed (see [`routed`]);
/// [`Error::CountMismatch`] for no inputs.
fn backend_of(inputs: &[Operand]) -> Result<Routed> {
    let first = inputs.first().ok_or_else(|| Error::CountMismatch {
        arg: "inputs".into(),
        expected: 1,
        actual: 0,
    })?;
    let (backend, device) = (routed(&first.0.kind)?, first.0.device().inner());
    for (i, t) in inputs.iter().enumerate().skip(1) {
        let this = t.0.device().inner();
        if routed(&t.0.kind)? != backend || this != device {
            return Err(Error::DeviceMismatch {
                arg: format!("input {i}"),
                expected: format!("{device:?} (the device of input 0)"),
                actual: format!("{this:?}"),
            });
        }
    }
    Ok(backend)
}

/// Runs `rule` on the primitives of `B` (with autodiff `Autodiff<B, C>` when the context
/// says so).
fn run_on<B: Backend, R: Rule + 'static, const N: usize, const D: usize>(
    rule: Arc<R>,
    x: [DispatchTensor; N],
    context: DispatchAutodiffContext,
) -> Result<Tensor<D>>
where
    DispatchTensor: DispatchKindConversion<B>
        + DispatchKindConversion<Autodiff<B, NoCheckpointing>>
        + DispatchKindConversion<Autodiff<B, BalancedCheckpointing>>,
{
    match context {
        DispatchAutodiffContext::Disabled => {
            let p = x.into_iter().map(float::<B>).collect::<Result<_>>()?;
            let out = primal_only::<B, R>(&rule, p).1?.into_primitive();
            Ok(Tensor::from_primitive::<B>(out))
        }
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Disabled) => {
            on_autodiff::<B, NoCheckpointing, R, N, D>(rule, x)
        }
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Balanced) => {
            on_autodiff::<B, BalancedCheckpointing, R, N, D>(rule, x)
        }
    }
}

/// `C = α·P(op(A)·op(B))` (see [`ContractOp`]; β must be zero).
///
/// # Errors
/// As [`apply`].
pub fn contract<const D: usize>(
    op: &ContractOp,
    a: impl Into<Operand>,
    b: impl Into<Operand>,
) -> Result<Tensor<D>> {
    apply(&op.clone().into(), [a.into(), b.into()])
}

/// The tensor network `plan` on `operands` (of the shapes it was planned for; a rank-0
/// operand is passed with shape `[1]`), as one node.
///
/// # Errors
/// [`Error::ShapeMismatch`] (`"operand k"`) for an operand of another shape than planned;
/// otherwise as [`apply`].
pub fn network<const N: usize, const D: usize>(
    plan: &NetworkPlan,
    operands: [Operand; N],
) -> Result<Tensor<D>> {
    apply(&Op::Network(plan.clone()), operands)
}

/// The tensor network of the Einstein string `subscripts` in torch's grammar (batch labels
/// `"bij,bjk->bik"`, attention `"bhqd,bhkd->bhqk"`, diagonals `"ii->i"`, sums `"ij->i"`,
/// hyperedges, implicit output `"ij,jk"`, ellipsis with broadcasting; see
/// [`Network::einsum`]) on `operands`, as one node, in an order searched for the operand
/// shapes. The plan comes from the core's [`PlanCache::global`]: repeated calls with the same
/// string and shapes plan once.
///
/// # Errors
/// The string's errors ([`Error::Parse`], [`Error::InvalidLabel`]) and the planning errors of
/// [`NetworkPlan::new`] (operand count, ranks, dimensions, ellipsis dimensions that do not
/// broadcast); otherwise as [`apply`].
pub fn einsum<const N: usize, const D: usize>(
    subscripts: &str,
    operands: [Operand; N],
) -> Result<Tensor<D>> {
    let dims = einsum_dims(subscripts, &operands)?;
    let plan = PlanCache::global().einsum(subscripts, &dims)?;
    run_plan(plan, operands)
}

/// The tensor network of the ncon index lists `indices` (positive labels contracted,
/// negative labels open, output ordered `−1, −2, …`: see [`Network::ncon`]) on `operands`,
/// as one node, in the ncon order.
///
/// # Errors
/// The lists' errors ([`Error::InvalidLabel`]) and the planning errors of
/// [`NetworkPlan::new`]; otherwise as [`apply`].
pub fn ncon<const N: usize, const D: usize, I: AsRef<[i64]>>(
    indices: &[I],
    operands: [Operand; N],
) -> Result<Tensor<D>> {
    let net = Network::ncon(indices, None)?;
    let dims = scalar_dims(&net, &operands);
    run_plan(
        Arc::new(NetworkPlan::new(&net, &dims, &Order::Default)?),
        operands,
    )
}

/// The shapes of `operands` for the Einstein string `subscripts`, as [`scalar_dims`]; the
/// string is parsed here only when an operand has shape `[1]` (the only case where its slots
/// matter: otherwise the plan cache parses it, on a miss only).
///
/// # Errors
/// The string's errors, when it is parsed here.
fn einsum_dims(subscripts: &str, operands: &[Operand]) -> Result<Vec<Vec<usize>>> {
    if operands.iter().all(|o| o.dims() != [1]) {
        return Ok(operands.iter().map(Operand::dims).collect());
    }
    Ok(scalar_dims(&Network::einsum(subscripts)?, operands))
}

/// The shapes of `operands`, a shape-`[1]` operand of a rank-0 slot read as a scalar.
fn scalar_dims(net: &Network, operands: &[Operand]) -> Vec<Vec<usize>> {
    let rank0 = |k| net.operand_labels(k) == Some(vec![]) && net.operand_ellipsis(k).is_none();
    let dims = |(k, o): (usize, &Operand)| (!rank0(k) || o.dims() != [1]).then(|| o.dims());
    let all = operands.iter().enumerate().map(dims);
    all.map(Option::unwrap_or_default).collect()
}

/// `C = α·P(op(A))` (see [`AddOp`]; β must be zero).
///
/// # Errors
/// As [`apply`].
pub fn add<const D: usize>(op: &AddOp, a: impl Into<Operand>) -> Result<Tensor<D>> {
    apply(&op.clone().into(), [a.into()])
}

/// `C = α·P(tr op(A))` (see [`TraceOp`]; β must be zero).
///
/// # Errors
/// As [`apply`].
pub fn trace<const D: usize>(op: &TraceOp, a: impl Into<Operand>) -> Result<Tensor<D>> {
    apply(&op.clone().into(), [a.into()])
}

/// The merged autodiff context of the inputs (plain inputs are constants of an autodiff op).
fn context(inputs: &[Operand]) -> Result<DispatchAutodiffContext> {
    let mut ctx = DispatchAutodiffContext::Disabled;
    for (i, t) in inputs.iter().enumerate() {
        let this = t.0.autodiff;
        if this == ctx || this == DispatchAutodiffContext::Disabled {
            continue;
        }
        if ctx != DispatchAutodiffContext::Disabled {
            let why = format!(
                "input {i} uses autodiff context {this:?} but an earlier input {ctx:?}: \
                 the inputs of one op must share a checkpointing strategy"
            );
            return Err(Error::invalid("inputs", why));
        }
        ctx = this;
    }
    Ok(ctx)
}

/// The float primitive of `B` inside a dispatch tensor.
fn float<B: Backend>(t: DispatchTensor) -> Result<FloatTensor<B>>
where
    DispatchTensor: DispatchKindConversion<B>,
{
    let t = <DispatchTensor as DispatchKindConversion<B>>::try_into_backend(t);
    match t.map_err(engine_error)? {
        BackendTensor::Float(t) => Ok(t),
        other => Err(engine_error(format!(
            "not a float tensor: {}",
            other.name()
        ))),
    }
}

fn on_autodiff<
    B: Backend,
    C: CheckpointStrategy,
    R: Rule + 'static,
    const N: usize,
    const D: usize,
>(
    rule: Arc<R>,
    x: [DispatchTensor; N],
) -> Result<Tensor<D>>
where
    DispatchTensor: DispatchKindConversion<B> + DispatchKindConversion<Autodiff<B, C>>,
{
    let p = x.into_iter().map(|t| match t.autodiff {
        DispatchAutodiffContext::Disabled => float::<B>(t).map(Autodiff::<B, C>::from_inner),
        DispatchAutodiffContext::Enabled(_) => float::<Autodiff<B, C>>(t),
    });
    let p = p.collect::<Result<Vec<_>>>()?.try_into();
    let p = p.map_err(|_| engine_error("an input was lost in routing"))?;
    let out = record::<B, C, R, N>(rule, p)?;
    Ok(Tensor::from_primitive::<Autodiff<B, C>>(out))
}

/// A float primitive of a routed backend `B` as a plain (autodiff-free) user-facing tensor
/// on its device: a new handle on the same buffer, nothing is copied. (Rules know their
/// backend only generically; the routed backends are tried by type.)
///
/// # Errors
/// [`Error::Unsupported`] when `B` is not a routed backend (a rule that needs burn's tensor
/// API, an implicit function, called through [`forward`](crate::forward) on another backend).
pub(crate) fn to_tensor<B: Backend, const D: usize>(p: FloatTensor<B>) -> Result<Tensor<D>> {
    let backend = B::name(&p.device());
    let p: Box<dyn Any> = Box::new(p);
    let p = match p.downcast::<FloatTensor<Flex>>() {
        Ok(t) => return Ok(Tensor::from_primitive::<Flex>(*t)),
        Err(p) => p,
    };
    #[cfg(feature = "ndarray")]
    let p = match p.downcast::<FloatTensor<NdArray>>() {
        Ok(t) => return Ok(Tensor::from_primitive::<NdArray>(*t)),
        Err(p) => p,
    };
    #[cfg(cube)]
    let p = match p.downcast::<FloatTensor<burn_dispatch::backends::Cube>>() {
        Ok(t) => return Ok(Tensor::from_primitive::<burn_dispatch::backends::Cube>(*t)),
        Err(p) => p,
    };
    drop(p);
    let why = format!(
        "burn's tensor API on {backend}: this build routes {}",
        routed_names()
    );
    Err(unsupported(why))
}

/// A computation on whichever routed burn backend a core backend `Bk` is: a rule whose code
/// is burn's (an implicit function's closures) runs through [`on_burn`].
pub(crate) trait OnBurn<Bk: adrules_core::Backend> {
    /// What it returns.
    type Output;

    /// Runs on `be`, which is `Bk`.
    fn run<B: Backend>(self, be: &BurnBackend<B>) -> Result<Self::Output>;
}

/// Runs `f` on `be` seen as the routed burn backend it is.
///
/// # Errors
/// [`Error::Unsupported`] when `be` is not a [`BurnBackend`] of a routed backend; `f`'s.
pub(crate) fn on_burn<Bk: adrules_core::Backend + 'static, F: OnBurn<Bk>>(
    be: &Bk,
    f: F,
) -> Result<F::Output> {
    let any: &dyn Any = be;
    if let Some(be) = any.downcast_ref::<BurnBackend<Flex>>() {
        return f.run(be);
    }
    #[cfg(feature = "ndarray")]
    if let Some(be) = any.downcast_ref::<BurnBackend<NdArray>>() {
        return f.run(be);
    }
    #[cfg(cube)]
    if let Some(be) = any.downcast_ref::<BurnBackend<burn_dispatch::backends::Cube>>() {
        return f.run(be);
    }
    let why = format!(
        "burn code (an implicit function's closures) on the {} backend: it runs on burn's \
         routed backends ({})",
        be.name(),
        routed_names()
    );
    Err(unsupported(why))
}

/// What a [`cast_ref`] or [`cast`] that fails was for.
const BURN_CODE: &str =
    "burn code (an implicit function's closures) on a backend that is not burn's";

/// `x` as the burn type `Y` it is ([`adrules_core::rule::downcast_ref`]).
///
/// # Errors
/// [`Error::Unsupported`] when it is not.
pub(crate) fn cast_ref<X: 'static, Y: 'static>(x: &X) -> Result<&Y> {
    adrules_core::rule::downcast_ref(x, BURN_CODE)
}

/// `x` as the type `Y` it is, by value ([`adrules_core::rule::downcast`]).
///
/// # Errors
/// [`Error::Unsupported`] when it is not.
pub(crate) fn cast<X: 'static, Y: 'static>(x: X) -> Result<Y> {
    adrules_core::rule::downcast(x, BURN_CODE)
}

/// The float primitive of `B` inside a plain user-facing tensor (the inverse of
/// [`to_tensor`]); an autodiff tensor is taken without its graph.
///
/// # Errors
/// [`Error::DeviceMismatch`] (`arg`) when the tensor lives on another backend than `B`;
/// [`Error::Unsupported`] for a backend that is not routed.
pub(crate) fn from_tensor<B: Backend, const D: usize>(
    arg: &str,
    t: Tensor<D>,
) -> Result<FloatTensor<B>> {
    let t = t.without_autodiff().into_dispatch();
    let got = format!("{:?}", t.device());
    let mismatch = || {
        let expected = format!("a tensor of the {} backend", std::any::type_name::<B>());
        let (arg, actual) = (arg.to_string(), got.clone());
        Error::DeviceMismatch {
            arg,
            expected,
            actual,
        }
    };
    let p: Box<dyn Any> = match routed(&t.kind)? {
        Routed::Flex => Box::new(float::<Flex>(t)?),
        #[cfg(feature = "ndarray")]
        Routed::NdArray => Box::new(float::<NdArray>(t)?),
        #[cfg(cube)]
        Routed::Cube => Box::new(float::<burn_dispatch::backends::Cube>(t)?),
    };
    p.downcast::<FloatTensor<B>>()
        .map(|b| *b)
        .map_err(|_| mismatch())
}
