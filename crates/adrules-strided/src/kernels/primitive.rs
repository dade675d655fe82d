//! One entry for every [`Primitive`]: the dispatch of a primitive call onto its kernel
//! ([`add`](super::add), [`trace`](super::trace), [`contract`](super::contract)), written once
//! for every engine that runs the strided kernels on its own buffers.

use smallvec::SmallVec;

use adrules_core::rules::Primitive;
use adrules_core::scalar::Promote;
use adrules_core::{Dims, DynScalar, Error, Result};

use super::{add_impl, contract_impl, trace_impl};
use crate::element::Element;
use crate::layout;
use crate::view::{StridedView, StridedViewMut};

/// One primitive call on views, `C ← β·C + α·op(operands)`: [`add`](super::add) for
/// [`Primitive::Add`], [`trace`](super::trace) for [`Primitive::Trace`],
/// [`contract`](super::contract) for [`Primitive::Contract`], with the index specification,
/// conjugation flags, α and β of `prim`.
///
/// The operands are in input order (`[A]` for add and trace, `[A, B]` for a contraction) and
/// promote to C's type ([`Promote`]); α and β are cast to C's type (rounding the precision).
/// `β = 0` is a strong zero: C is not read.
///
/// # Errors
/// [`Error::CountMismatch`] (argument `"operands"`) when `operands.len()` is not
/// [`Primitive::arity`]; [`Error::DTypeMismatch`] (argument `"alpha"` or `"beta"`) for a
/// complex coefficient and a real C; the shape errors of the kernel called.
pub fn primitive<TA: Element + Promote<TC>, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    operands: &[StridedView<'_, TA>],
    prim: &Primitive,
) -> Result<()> {
    let beta = coefficient(prim.beta(), "beta")?;
    run(c, operands, prim, beta)
}

/// One primitive call into a fresh output, `α·op(operands)`: [`primitive`] with `β = 0` on a
/// new row-major buffer of the output shape ([`Primitive::output_dims`]); `prim`'s β is not
/// read. Returns the buffer and that shape.
///
/// # Errors
/// Those of [`Primitive::output_dims`] (a wrong operand count, mismatched shapes);
/// [`Error::InvalidArgument`] (argument `"dims"`) when the output's element count overflows;
/// those of [`primitive`].
pub fn primitive_fresh<TA: Element + Promote<TC>, TC: Element>(
    operands: &[StridedView<'_, TA>],
    prim: &Primitive,
) -> Result<(Vec<TC>, Dims)> {
    let shapes: SmallVec<[&[usize]; 2]> = operands.iter().map(StridedView::dims).collect();
    let dims = prim.output_dims(&shapes)?;
    let mut data = vec![TC::zero(); layout::numel(&dims)?];
    let mut c = StridedViewMut::row_major(&mut data, &dims)?;
    run(&mut c, operands, prim, TC::zero())?;
    Ok((data, dims))
}

/// The coefficient `s` (named `arg`) in `T`.
fn coefficient<T: Element>(s: DynScalar, arg: &str) -> Result<T> {
    s.cast(T::DTYPE, arg)?.to()
}

/// [`primitive`] with β given in C's type.
fn run<TA: Element, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    operands: &[StridedView<'_, TA>],
    prim: &Primitive,
    beta: TC,
) -> Result<()> {
    let alpha = coefficient(prim.alpha(), "alpha")?;
    match (prim, operands) {
        (Primitive::Add(o), [a]) => add_impl(c, a, &o.perm, o.conj, alpha, beta),
        (Primitive::Trace(o), [a]) => trace_impl(c, a, &o.spec, o.conj, alpha, beta),
        (Primitive::Contract(o), [a, b]) => {
            contract_impl(c, a, b, &o.spec, o.conj_a, o.conj_b, alpha, beta)
        }
        _ => Err(Error::CountMismatch {
            arg: "operands".into(),
            expected: prim.arity(),
            actual: operands.len(),
        }),
    }
}
