//! Generalized partial trace and its adjoint, written on the diagonal as strided views.
//!
//! The diagonal of A over a group of axes (a traced pair `(q1, q2)`, a diagonal `ii`, a
//! single summed axis) is itself a strided view: the group's axis has the sum of its axes'
//! strides. The trace sums that view over its summed axes; its adjoint adds C, broadcast over
//! the summed axes with stride 0, onto it.

use smallvec::SmallVec;

use adrules_core::scalar::Promote;
use adrules_core::{Conj, Dims, DynScalar, Result, TraceSpec};

use super::add::{axpby, scale};
use super::engine;
use super::reduce::fold;
use super::update::{Axpby, Beta, Projecting};
use crate::element::{Element, convert};
use crate::layout::{Strides, for_each_offset};
use crate::view::{StridedView, StridedViewMut};

/// Kept and summed parts of the diagonal of a tensor with `strides` under `spec`:
/// `(kept strides in output order, summed dims, summed strides)`. The diagonal of a group of
/// axes is one axis whose stride is the sum of theirs.
fn diagonal(
    dims: &[usize],
    strides: &[isize],
    spec: &TraceSpec,
) -> (Strides, SmallVec<[usize; 8]>, Strides) {
    let stride = |g: &[usize]| g.iter().map(|&i| strides[i]).sum::<isize>();
    let kept = spec.kept().iter().map(|g| stride(g)).collect();
    let qd = spec.summed().iter().map(|g| dims[g[0]]).collect();
    let qs = spec.summed().iter().map(|g| stride(g)).collect();
    (kept, qd, qs)
}

/// Generalized partial trace `C[i] ← β·C[i] + α·Σ_t op(A[J(i, t)])` with `J[a] = i_m` for
/// the axes `a` of kept group `m` and `J[a] = t_k` for those of summed group `k` (see
/// [`TraceSpec`]): partial traces, diagonals and sums. No kept group is a full reduction to a
/// rank-0 C.
///
/// When C has at least as many elements as there are traced terms, this is one strided add
/// per traced index (β on the first, 1 after); otherwise one strided sum per element of C.
/// `β = 0` is a strong zero.
///
/// # Errors
/// [`Error::RankMismatch`](adrules_core::Error::RankMismatch) /
/// [`Error::ShapeMismatch`](adrules_core::Error::ShapeMismatch) naming `"a"` (also for a
/// group of unequal dimensions) or `"c"`.
pub fn trace<TA: Element + Promote<TC>, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    spec: &TraceSpec,
    conj: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()> {
    trace_impl(c, a, spec, conj, alpha, beta)
}

/// [`trace`] without the promotion bound (the backend checks dtypes at run time).
pub(crate) fn trace_impl<TA: Element, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    spec: &TraceSpec,
    conj: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()> {
    spec.check(a.dims(), c.dims())?;
    let (kept, qd, qs) = diagonal(a.dims(), a.strides(), spec);
    let terms: usize = qd.iter().product();
    let (dims, sc) = (Dims::from_slice(c.dims()), Strides::from_slice(c.strides()));
    if terms == 0 {
        scale(c, beta);
        return Ok(());
    }
    let pc = c.as_mut_ptr();
    if c.len() >= terms {
        let mut b = beta;
        for_each_offset(&qd, [&qs], |[off]| {
            // SAFETY: `off` is a traced position of A's diagonal; C is exclusively borrowed.
            unsafe {
                axpby(
                    &dims,
                    pc,
                    &sc,
                    a.as_ptr().offset(off),
                    &kept,
                    conj,
                    alpha,
                    b,
                )
            };
            b = TC::one();
        });
        return Ok(());
    }
    let conj = conj.is_conj();
    let strong_zero = beta == TC::zero();
    for_each_offset(&dims, [&sc, &kept], |[oc, oa]| {
        // SAFETY: `oa` is a kept position of A and the sum runs over its traced diagonal;
        // `oc` addresses an element of the exclusively borrowed C.
        unsafe {
            let base = a.as_ptr().offset(oa);
            let s: TC = fold(&qd, base, &qs, base, &qs, |x: TA, _: TA| {
                convert(if conj { x.conj() } else { x })
            });
            let y = pc.offset(oc);
            *y = if strong_zero {
                alpha * s
            } else {
                beta * *y + alpha * s
            };
        }
    });
    Ok(())
}

/// Adjoint of the trace: adds `proj(α·op(C))` onto the diagonal of A,
/// `A[J(i, t)] ← A[J(i, t)] + proj(α·op(C[i]))` for every output index `i` and summed index
/// `t` (see [`trace`]); entries off the diagonal of any group are unchanged. `proj` keeps the real part for a real A
/// and rounds to A's precision (as in [`add_projected`](super::add_projected)).
///
/// This is the trace pullback written straight onto the diagonal: one strided add of C
/// (broadcast over the summed axes with stride 0) into the diagonal view of A.
///
/// # Errors
/// As [`trace`] with the roles of A and C.
pub fn add_to_diagonal<TA: Element, TC: Element>(
    a: &mut StridedViewMut<'_, TA>,
    c: &StridedView<'_, TC>,
    spec: &TraceSpec,
    conj: Conj,
    alpha: DynScalar,
) -> Result<()> {
    spec.check(a.dims(), c.dims())?;
    let (kept, qd, qs) = diagonal(a.dims(), a.strides(), spec);
    let dims: SmallVec<[usize; 8]> = c.dims().iter().chain(&qd).copied().collect();
    let sa: Strides = kept.iter().chain(&qs).copied().collect();
    let sc: Strides = c
        .strides()
        .iter()
        .copied()
        .chain(qd.iter().map(|_| 0))
        .collect();
    let op = Axpby {
        alpha: TA::one(),
        beta: Beta::One,
        map: Projecting {
            alpha: alpha.to_c64(),
            conj: conj.is_conj(),
        },
    };
    // SAFETY: distinct (kept, traced) indices address distinct elements of A's diagonal; C is
    // only read (stride 0 along the traced axes) and disjoint from the exclusively borrowed A.
    unsafe { engine::for_each(&op, &dims, a.as_mut_ptr(), &sa, c.as_ptr(), &sc) };
    Ok(())
}
