//! Implicit functions as dfdx ops: [`implicit`].

use adrules_core::implicit::{Conditions, ImplicitFunction, ImplicitScalar};
use adrules_core::{HostTensor, Result};
use dfdx::prelude::{PutTape, Shape, Tape, Tensor, TensorFromVec};
use dfdx::tensor::Cpu;

use crate::bridge::shape_for;
use crate::element::DfdxElement;
use crate::error::from_dfdx;
use crate::operands::Operands;

/// An implicit function `y(x)` as one dfdx op: the forward pass runs the caller's solver
/// (never differentiated) on the operands `x`, the backward pass applies the implicit
/// function theorem through the shared rule of
/// [`adrules_core::implicit`]: solve `Aᴴ·u = −ȳ`, then `x̄ = Bᴴ·u`, with `A = ∂c/∂y` and
/// `B = ∂c/∂x` at the solution.
///
/// - `f`: the solver and the conditions (see [`ImplicitFunction`]). The conditions' linear
///   maps `A·v`, `Aᴴ·u`, `B·v`, `Bᴴ·u` come from the caller, through the [`Conditions`] trait
///   ([`FnMaps`](adrules_core::implicit::FnMaps) closures,
///   [`DenseMaps`](adrules_core::implicit::DenseMaps) Jacobians, or any
///   [`LinearMaps`](adrules_core::implicit::LinearMaps)). dfdx cannot supply them: it has no
///   forward mode (so no `A·v`, `B·v`), and its reverse mode seeds only scalar losses on a
///   tape built by one forward evaluation, so each `Aᴴ·u` would cost a fresh evaluation of
///   the conditions with dfdx ops and a backward pass per product, inside every iteration
///   of the linear solver. That machinery is not provided.
/// - `x`: the differentiable inputs, any [`Operands`] (a tuple of tensors of any shapes and
///   tapes, or a `Vec`), flattened row-major in call order as the rule documents; each is
///   copied to the host once.
/// - `args`: constant arguments passed to the solver and the conditions.
///
/// Returns `y` with the shape type `Out` (checked at run time against the solver's output)
/// carrying the operands' joined tape, and the solver's byproduct `z` (a constant). The
/// linearization (the maps and, for dense methods, one factorization of `A`) is built in
/// the forward pass when a tape is present and kept by the backward closure; without a tape
/// only the solver runs. Every operand receives a gradient, tape or not, as with dfdx's own
/// ops.
///
/// # Errors
/// Those of [`ImplicitFunction::solve`] and [`ImplicitFunction::vjp`] (the solver's errors,
/// dtypes, dimensions of the maps, [`Error::Singular`](adrules_core::Error::Singular) and
/// [`Error::NotConverged`](adrules_core::Error::NotConverged) from the linear solver);
/// [`Error::RankMismatch`](adrules_core::Error::RankMismatch) /
/// [`Error::InvalidArgument`](adrules_core::Error::InvalidArgument) when `Out` does not fit
/// the solver's `y`. The operands (and their tapes) are consumed, also on error. A failure
/// of the backward pass (the adjoint solve, the maps, a non-finite cotangent refused as
/// [`Error::InvalidArgument`](adrules_core::Error::InvalidArgument) naming `"y_bar"`: the
/// policy of [`adrules_core::implicit`]) is reported as described in
/// [`try_backward`](crate::try_backward).
#[allow(clippy::type_complexity)] // a dfdx tensor and the byproduct, spelled out
pub fn implicit<Out, E, X, Z, A, S, C>(
    f: &ImplicitFunction<E, Z, A, S, C>,
    x: X,
    args: &A,
) -> Result<(Tensor<Out, E, Cpu, X::Tape>, Z)>
where
    Out: Shape,
    E: DfdxElement + ImplicitScalar,
    X: Operands<E>,
    A: ?Sized,
    S: Fn(&[HostTensor], &A) -> Result<(HostTensor, Z)>,
    C: Conditions<E, Z, A>,
{
    let xs = x.collect()?;
    if !<X::Tape as Tape<E, Cpu>>::OWNS_TAPE {
        let (y, z) = f.solve(&xs.data, args)?;
        return Ok((to_dfdx::<Out, E>(&xs.device, y)?.put_tape(xs.tape), z));
    }
    let (_, z, linearization) = f.vjp(&xs.data, args)?;
    if xs.data.is_empty() {
        let y = linearization.y().clone();
        return Ok((to_dfdx::<Out, E>(&xs.device, y)?.put_tape(xs.tape), z));
    }
    shape_for::<Out>(linearization.y().dims(), "y (solver output)")?;
    // the linearization is the implicit function's rule at this solution: the crate's one
    // bridge records it
    Ok((crate::rule::run(&linearization, xs)?, z))
}

/// `y` (host data from the solver) as a dfdx tensor of shape type `Out` (moved, no copy).
fn to_dfdx<Out: Shape, E: DfdxElement>(dev: &Cpu, y: HostTensor) -> Result<Tensor<Out, E, Cpu>> {
    let shape: Out = shape_for(y.dims(), "y (solver output)")?;
    let dtype = y.dtype();
    let (_, data) = y.into_parts();
    let data = E::vec_from_host(data).ok_or_else(|| adrules_core::Error::DTypeMismatch {
        arg: "y (solver output)".into(),
        expected: E::DTYPE.to_string(),
        actual: dtype,
    })?;
    dev.try_tensor_from_vec(data, shape).map_err(from_dfdx)
}
