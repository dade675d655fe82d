//! Permuted add, projected add and scaling on views.

use adrules_core::scalar::Promote;
use adrules_core::{Conj, Dims, DynScalar, Permutation, Result};

use super::engine;
use super::update::{Axpby, Beta, Converting, CopyOp, Projecting, ScaleOp};
use crate::element::Element;
use crate::layout::Strides;
use crate::storage;
use crate::view::{StridedView, StridedViewMut};

/// `C ← β·C + α·op(A)` elementwise over `dims` (A already permuted to C's axis order).
///
/// Elements convert as [`convert`](crate::element::convert) does (callers check that A
/// promotes to C). A plain copy (`α = 1`, `β = 0`, same dtype, no conjugation) takes the
/// transposing copy kernel; conjugation of real data is dropped.
///
/// # Safety
/// As [`engine::for_each`]: valid layouts, C's elements distinct, A and C disjoint.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn axpby<TA: Element, TC: Element>(
    dims: &[usize],
    c: *mut TC,
    sc: &[isize],
    a: *const TA,
    sa: &[isize],
    conj: Conj,
    alpha: TC,
    beta: TC,
) {
    let conj = conj.is_conj() && TA::DTYPE.is_complex();
    let beta = Beta::new(beta);
    // SAFETY: forwarded; the copy branch has TA == TC.
    unsafe {
        if TA::DTYPE == TC::DTYPE && !conj && alpha == TC::one() && matches!(beta, Beta::Zero) {
            engine::for_each(&CopyOp, dims, c, sc, a.cast::<TC>(), sa);
        } else if conj {
            let op = Axpby {
                alpha,
                beta,
                map: Converting::<true>,
            };
            engine::for_each(&op, dims, c, sc, a, sa);
        } else {
            let op = Axpby {
                alpha,
                beta,
                map: Converting::<false>,
            };
            engine::for_each(&op, dims, c, sc, a, sa);
        }
    }
}

/// Permuted add `C ← β·C + α·P_p(op(A))`: `C[i_0, …] ← β·C[i_0, …] + α·op(A[j])` with
/// `j[p[m]] = i_m`, so `dims(C)[m] = dims(A)[p[m]]`.
///
/// A's elements are promoted to C's type ([`Promote`]); `op` conjugates when `conj` is
/// [`Conj::Yes`] (a no-op for real A). `β = 0` is a strong zero: C is not read. Any strides
/// work on both sides; hard permutations go through cache-blocked, in-register transposes.
///
/// # Errors
/// [`Error::RankMismatch`](adrules_core::Error::RankMismatch) naming `"a"` or `"c"` when a
/// rank differs from `p.len()`; [`Error::ShapeMismatch`](adrules_core::Error::ShapeMismatch)
/// naming `"c"` when `dims(C) ≠ P_p(dims(A))`.
pub fn add<TA: Element + Promote<TC>, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    p: &Permutation,
    conj: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()> {
    add_impl(c, a, p, conj, alpha, beta)
}

/// [`add`] without the promotion bound (the backend checks dtypes at run time).
pub(crate) fn add_impl<TA: Element, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    p: &Permutation,
    conj: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()> {
    p.check_add(a.dims(), c.dims())?;
    let ap = a.permuted(p)?;
    let (dims, sc) = (Dims::from_slice(c.dims()), Strides::from_slice(c.strides()));
    // SAFETY: both views are valid; C is exclusively borrowed, so it is disjoint from A.
    unsafe {
        axpby(
            &dims,
            c.as_mut_ptr(),
            &sc,
            ap.as_ptr(),
            ap.strides(),
            conj,
            alpha,
            beta,
        )
    };
    Ok(())
}

/// Projected permuted add `C ← β·C + proj(α·P_p(op(A)))`: `α·op(A)` is formed in
/// `Complex64`, then `proj` keeps the real part when C is real and rounds to C's precision
/// (ChainRules' `ProjectTo`). Any A dtype and any α are accepted; use [`add`] when A promotes
/// to C and α is representable, it is faster.
///
/// # Errors
/// As [`add`].
pub fn add_projected<TA: Element, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    p: &Permutation,
    conj: Conj,
    alpha: DynScalar,
    beta: TC,
) -> Result<()> {
    p.check_add(a.dims(), c.dims())?;
    let ap = a.permuted(p)?;
    let (dims, sc) = (Dims::from_slice(c.dims()), Strides::from_slice(c.strides()));
    let op = Axpby {
        alpha: TC::one(),
        beta: Beta::new(beta),
        map: Projecting {
            alpha: alpha.to_c64(),
            conj: conj.is_conj(),
        },
    };
    // SAFETY: as in `add`.
    unsafe { engine::for_each(&op, &dims, c.as_mut_ptr(), &sc, ap.as_ptr(), ap.strides()) };
    Ok(())
}

/// In-place scaling `T ← s·T`; `s = 0` is a strong zero (T is overwritten with zeros, NaN
/// does not survive).
pub fn scale<T: Element>(t: &mut StridedViewMut<'_, T>, s: T) {
    if s == T::one() {
        return;
    }
    let op = ScaleOp((s != T::zero()).then_some(s));
    let (dims, st) = (Dims::from_slice(t.dims()), Strides::from_slice(t.strides()));
    let p = t.as_mut_ptr();
    // SAFETY: the op only touches C (the view itself), whose elements are distinct.
    unsafe { engine::for_each(&op, &dims, p, &st, p.cast_const(), &st) };
}

/// The elements of `v` in row-major order.
///
/// # Errors
/// [`Error::InvalidArgument`](adrules_core::Error::InvalidArgument) when the element count
/// does not fit in memory (a huge broadcast view).
pub(crate) fn copy_to_vec<T: Element>(v: &StridedView<'_, T>) -> Result<Vec<T>> {
    let mut out = storage::zeroed::<T>(crate::layout::numel(v.dims())?)?;
    let rm = crate::layout::row_major_strides(v.dims());
    // SAFETY: `out` is a fresh row-major buffer of the view's shape.
    unsafe {
        engine::for_each(
            &CopyOp,
            v.dims(),
            out.as_mut_ptr(),
            &rm,
            v.as_ptr(),
            v.strides(),
        )
    };
    Ok(out)
}
