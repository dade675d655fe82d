//! Recording one adrules op on dfdx's tape: the backward closure that lends dfdx's gradient
//! buffers to the shared rules.
//!
//! dfdx keys gradients by tensor id and exposes them only through
//! `Gradients::get_or_alloc_mut(&tensor_or_ghost)`. The ghost types are not nameable outside
//! dfdx, so each key is captured in a closure ([`Buffer`]) that finds its buffer.

use adrules_core::error::backward::BackwardReporter;
use adrules_core::{Backend, Conj, Dims, DynScalar, Permutation, Result};
use adrules_strided::{Strided as StridedBackend, Tensor as Strided};
use dfdx::prelude::{Gradients, HasShape, PutTape, Shape, Tape, Tensor};
use dfdx::tensor::{Cpu, CpuError};

use crate::bridge::{dims_of, give_back, lend};
use crate::element::DfdxElement;
use crate::error::{BackwardError, report};

/// Finds (allocating zeros on first use) the gradient buffer of one tensor.
pub(crate) type Buffer<E> =
    dyn for<'g> Fn(&'g mut Gradients<E, Cpu>) -> Result<&'g mut Vec<E>, CpuError>;

/// Boxes a buffer finder; the bound makes the compiler give the closure its higher-ranked
/// signature. Call it as `buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&ghost)?))`.
pub(crate) fn buffer<E, F>(f: F) -> Box<Buffer<E>>
where
    E: DfdxElement,
    F: for<'g> Fn(&'g mut Gradients<E, Cpu>) -> Result<&'g mut Vec<E>, CpuError> + 'static,
{
    Box::new(f)
}

/// What the backward closure of one op needs besides the rule: where the output's and each
/// operand's gradients live, and their dims (row-major, since every operand was made
/// contiguous before it was recorded).
struct Keys<E: DfdxElement> {
    out: Box<Buffer<E>>,
    out_dims: Dims,
    operands: Vec<(Box<Buffer<E>>, Dims)>,
}

impl<E: DfdxElement> Keys<E> {
    /// One backward step: lends the output cotangent `C̄` (moved out of `grads`, no copy),
    /// then for each operand `k` in turn lends its gradient buffer as `slot` and calls
    /// `accumulate(C̄, k, slot)`, which must add operand `k`'s cotangent into it; then moves
    /// every buffer back. Operands are served one at a time, so an operand passed twice (the
    /// same tensor id) receives both contributions.
    fn backward(
        &self,
        grads: &mut Gradients<E, Cpu>,
        mut accumulate: impl FnMut(&Strided, usize, &mut Option<Strided>) -> Result<()>,
    ) -> Result<(), BackwardError> {
        let c_bar = lend((self.out)(grads)?, &self.out_dims, "output cotangent")?;
        let mut result = Ok(());
        for (k, (find, dims)) in self.operands.iter().enumerate() {
            result = operand(grads, &c_bar, k, find, dims, &mut accumulate);
            if result.is_err() {
                break;
            }
        }
        // C̄ goes back too: a caller may read the output's gradient after the pass.
        give_back((self.out)(grads)?, c_bar)?;
        result
    }
}

/// Lends operand `k`'s gradient buffer to `accumulate` and moves it back.
fn operand<E: DfdxElement>(
    grads: &mut Gradients<E, Cpu>,
    c_bar: &Strided,
    k: usize,
    find: &Buffer<E>,
    dims: &Dims,
    accumulate: &mut impl FnMut(&Strided, usize, &mut Option<Strided>) -> Result<()>,
) -> Result<(), BackwardError> {
    let mut slot = Some(lend(find(grads)?, dims, "operand gradient")?);
    let r = accumulate(c_bar, k, &mut slot);
    if let Some(t) = slot {
        give_back(find(grads)?, t)?;
    }
    Ok(r?)
}

/// Records the backward step of one op whose untraced result is `out` on `tape`, and puts
/// the tape on the result. `operands` are the keys and dims of the op's operands, in order;
/// the backward closure lends their gradient buffers, one at a time, to `accumulate` (see
/// [`Keys::backward`]). A failure inside the closure goes to the [`BackwardReporter`] of the
/// thread recording the op (here) and stops dfdx's pass with `CpuError::WrongNumElements`.
pub(crate) fn record<Out, E, T>(
    out: Tensor<Out, E, Cpu>,
    mut tape: T,
    operands: Vec<(Box<Buffer<E>>, Dims)>,
    mut accumulate: impl FnMut(&Strided, usize, &mut Option<Strided>) -> Result<()> + 'static,
) -> Tensor<Out, E, Cpu, T>
where
    Out: Shape,
    E: DfdxElement,
    T: Tape<E, Cpu>,
{
    let reporter = BackwardReporter::current();
    let ghost = out.ghost();
    let keys = Keys {
        out: buffer(move |g| Ok(&mut **g.get_or_alloc_mut(&ghost)?)),
        out_dims: dims_of(out.shape()),
        operands,
    };
    tape.add_backward_op(move |grads| report(reporter, keys.backward(grads, &mut accumulate)));
    out.put_tape(tape)
}

/// Adds a freshly computed cotangent `cot` into a lent gradient buffer `slot` (in place).
pub(crate) fn add_fresh(slot: &mut Option<Strided>, cot: &Strided) -> Result<()> {
    if let Some(buf) = slot {
        let one = DynScalar::one(buf.dtype());
        let id = Permutation::identity(buf.rank());
        StridedBackend.add(buf, cot, &id, Conj::No, one, one)?;
    }
    Ok(())
}
