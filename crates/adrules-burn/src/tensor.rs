//! The ops on burn's user-facing tensors ([`burn_tensor::Tensor`]), routed to Flex.

use adrules_core::network::{Network, NetworkPlan, Order, PlanCache};
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

use crate::convert::{check_dtype, engine_error, unsupported};
use crate::node::{Rule, primal_only, record};
use crate::rules::{NetworkRule, Op, PrimitiveRule};

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
}

/// Runs `op` on `inputs` (see [`Op`] for their order) and returns its rank-`D` output; with
/// any input on an autodiff device the op is one differentiable node whose backward is the
/// shared pullback.
///
/// # Routing
/// burn 0.22 picks the backend of a [`Tensor`] at run time from its device (burn-dispatch);
/// the inputs are routed to one concrete backend and the op runs as [`forward`] or
/// [`forward_autodiff`] on its primitives:
/// - with an input on an autodiff device (`Device::flex().autodiff()`, optionally
///   `.gradient_checkpointing()`), as `Autodiff<Flex, C>` with `C = NoCheckpointing` or
///   `BalancedCheckpointing` as the device says: one node of its graph; inputs on the plain
///   device are constants of that node (burn's own rule for mixed contexts);
/// - otherwise on `Flex` directly.
///
/// Routed backend: Flex (burn's default CPU backend). A tensor of another backend compiled
/// into the dispatch enum gets [`Error::Unsupported`]; on those backends call [`forward`] /
/// [`forward_autodiff`] on the primitives, which are generic over every burn backend.
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
/// a dtype other than f32/f64 or a backend other than Flex; [`Error::DeviceMismatch`] when the
/// inputs live on different backends; [`Error::InvalidArgument`] (`"inputs"`) when autodiff
/// inputs use different checkpointing strategies; rank, shape and index errors of the op.
pub fn apply<const N: usize, const D: usize>(op: &Op, inputs: [Operand; N]) -> Result<Tensor<D>> {
    let rank = op.output_rank().max(1);
    if rank != D {
        return Err(Error::rank("output", rank, D));
    }
    match op {
        Op::Primitive(p) => run(PrimitiveRule::new(p.clone(), N)?, inputs),
        Op::Network(plan) => run(NetworkRule(plan.clone()), inputs),
    }
}

/// Routes `inputs` to Flex (with autodiff when any input has it) and runs `rule` on them.
pub(crate) fn run<R: Rule, const N: usize, const D: usize>(
    rule: R,
    inputs: [Operand; N],
) -> Result<Tensor<D>> {
    let context = context(&inputs)?;
    for (i, t) in inputs.iter().enumerate() {
        if !is_flex(&t.0.kind) {
            let why = format!(
                "input {i} on {:?}: the Tensor API routes Flex only",
                t.0.device()
            );
            return Err(unsupported(why));
        }
        check_dtype(&format!("input {i}"), t.0.dtype())?;
    }
    let x = inputs.map(|t| t.0);
    match context {
        DispatchAutodiffContext::Disabled => {
            let p = x.into_iter().map(float::<Flex>).collect::<Result<_>>()?;
            let out = primal_only::<Flex, R>(&rule, p).1?.into_primitive();
            Ok(Tensor::from_primitive::<Flex>(out))
        }
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Disabled) => {
            on_autodiff::<NoCheckpointing, R, N, D>(rule, x)
        }
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Balanced) => {
            on_autodiff::<BalancedCheckpointing, R, N, D>(rule, x)
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
    let dims = scalar_dims(&Network::einsum(subscripts)?, &operands);
    let plan = PlanCache::global().einsum(subscripts, &dims)?;
    network(&plan, operands)
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
    network(&NetworkPlan::new(&net, &dims, &Order::Default)?, operands)
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

fn is_flex(kind: &DispatchTensorKind) -> bool {
    let autodiff = matches!(kind, DispatchTensorKind::Autodiff(inner) if is_flex(inner));
    autodiff || matches!(kind, DispatchTensorKind::Flex(_))
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

fn on_autodiff<C: CheckpointStrategy, R: Rule, const N: usize, const D: usize>(
    rule: R,
    x: [DispatchTensor; N],
) -> Result<Tensor<D>>
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    let p = x.into_iter().map(|t| match t.autodiff {
        DispatchAutodiffContext::Disabled => float::<Flex>(t).map(Autodiff::<Flex, C>::from_inner),
        DispatchAutodiffContext::Enabled(_) => float::<Autodiff<Flex, C>>(t),
    });
    let p = p.collect::<Result<Vec<_>>>()?.try_into();
    let p = p.map_err(|_| engine_error("an input was lost in routing"))?;
    let out = record::<Flex, C, R, N>(rule, p)?;
    Ok(Tensor::from_primitive::<Autodiff<Flex, C>>(out))
}
