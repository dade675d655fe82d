//! The ops on burn's user-facing tensors ([`burn_tensor::Tensor`]), routed to Flex.

use adrules_core::network::Network;
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

use crate::node::{Rule, record};
use crate::op::Op;
use crate::primitive::run_plain;

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
    check_rank::<D>(op.output_rank())?;
    run(op.call(N)?, inputs)
}

/// Checks that burn's rank `D` holds an output of logical rank `rank` (1 for a scalar).
pub(crate) fn check_rank<const D: usize>(rank: usize) -> Result<()> {
    let rank = rank.max(1);
    if rank == D {
        Ok(())
    } else {
        Err(Error::rank("output", rank, D))
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
            return Err(Error::Unsupported {
                backend: crate::backend::NAME.into(),
                what: format!(
                    "input {i} on device {:?}: the Tensor API routes Flex; \
                     call adrules_burn::forward / forward_autodiff on the primitives",
                    t.0.device()
                ),
            });
        }
    }
    for (i, t) in inputs.iter().enumerate() {
        crate::backend::check_dtype(&format!("input {i}"), t.0.dtype())?;
    }
    let x = inputs.map(|t| t.0);
    let out = match context {
        DispatchAutodiffContext::Disabled => {
            let p = collect::<_, N>(x.into_iter().map(float::<Flex>))?;
            let out = run_plain::<Flex, R>(&rule, &p)?;
            <DispatchTensor as DispatchKindConversion<Flex>>::from_backend(BackendTensor::Float(
                out,
            ))
        }
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Disabled) => {
            on_autodiff::<NoCheckpointing, R, N>(rule, x)?
        }
        DispatchAutodiffContext::Enabled(GradientCheckpointingStrategy::Balanced) => {
            on_autodiff::<BalancedCheckpointing, R, N>(rule, x)?
        }
    };
    Ok(Tensor::from_dispatch(out))
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

/// The tensor network of the Einstein string `subscripts` (explicit output, every label
/// twice in total: see [`Network::einsum`]) on `operands`, as one node, in an order searched
/// for the operand shapes.
///
/// # Errors
/// The string's errors ([`Error::Parse`], [`Error::InvalidLabel`]); otherwise as [`apply`].
pub fn einsum<const N: usize, const D: usize>(
    subscripts: &str,
    operands: [Operand; N],
) -> Result<Tensor<D>> {
    apply(&Network::einsum(subscripts)?.into(), operands)
}

/// The tensor network of the ncon index lists `indices` (positive labels contracted,
/// negative labels open, output ordered `−1, −2, …`: see [`Network::ncon`]) on `operands`,
/// as one node, in the ncon order.
///
/// # Errors
/// The lists' errors ([`Error::InvalidLabel`]); otherwise as [`apply`].
pub fn ncon<const N: usize, const D: usize, I: AsRef<[i64]>>(
    indices: &[I],
    operands: [Operand; N],
) -> Result<Tensor<D>> {
    apply(&Network::ncon(indices, None)?.into(), operands)
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
    #[allow(unreachable_patterns)] // other variants exist when other backends are compiled in
    match kind {
        DispatchTensorKind::Flex(_) => true,
        DispatchTensorKind::Autodiff(inner) => is_flex(inner),
        _ => false,
    }
}

/// The merged autodiff context of the inputs (plain inputs are constants of an autodiff op).
fn context(inputs: &[Operand]) -> Result<DispatchAutodiffContext> {
    let mut ctx = DispatchAutodiffContext::Disabled;
    for (i, t) in inputs.iter().enumerate() {
        match (ctx, t.0.autodiff) {
            (_, DispatchAutodiffContext::Disabled) => {}
            (DispatchAutodiffContext::Disabled, enabled) => ctx = enabled,
            (a, b) if a == b => {}
            (a, b) => {
                return Err(Error::invalid(
                    "inputs",
                    format!(
                        "input {i} uses autodiff context {b:?} but an earlier input {a:?}: \
                         the inputs of one op must share a checkpointing strategy"
                    ),
                ));
            }
        }
    }
    Ok(ctx)
}

/// The float primitive of `B` inside a dispatch tensor.
fn float<B: Backend>(t: DispatchTensor) -> Result<FloatTensor<B>>
where
    DispatchTensor: DispatchKindConversion<B>,
{
    match <DispatchTensor as DispatchKindConversion<B>>::try_into_backend(t) {
        Ok(BackendTensor::Float(t)) => Ok(t),
        Ok(other) => Err(crate::backend::engine_error(format!(
            "expected a float tensor, got a {} tensor",
            other.name()
        ))),
        Err(e) => Err(crate::backend::engine_error(e)),
    }
}

/// An array from an iterator of exactly `N` results.
fn collect<T, const N: usize>(it: impl Iterator<Item = Result<T>>) -> Result<[T; N]> {
    let v = it.collect::<Result<Vec<T>>>()?;
    let n = v.len();
    <[T; N]>::try_from(v).map_err(|_| Error::CountMismatch {
        arg: "inputs".into(),
        expected: N,
        actual: n,
    })
}

fn on_autodiff<C: CheckpointStrategy, R: Rule, const N: usize>(
    rule: R,
    x: [DispatchTensor; N],
) -> Result<DispatchTensor>
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    let p = collect::<_, N>(x.into_iter().map(|t| match t.autodiff {
        DispatchAutodiffContext::Disabled => float::<Flex>(t).map(Autodiff::<Flex, C>::from_inner),
        DispatchAutodiffContext::Enabled(_) => float::<Autodiff<Flex, C>>(t),
    }))?;
    let out = record::<Flex, C, R, N>(rule, p)?;
    Ok(<DispatchTensor as DispatchKindConversion<
        Autodiff<Flex, C>,
    >>::from_backend(BackendTensor::Float(out)))
}
