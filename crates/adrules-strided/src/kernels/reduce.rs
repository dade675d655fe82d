//! Strided reductions `Σ_i f(X[i], Y[i])`: the inner product, and the sums of a trace.
//!
//! The loop order comes from the engine's normalisation (driven by X's strides). Large
//! reductions are cut along the outermost axis into a fixed number of pieces whose partial
//! sums are added in order, so the result does not depend on thread scheduling.

use rayon::prelude::*;
use smallvec::SmallVec;

use adrules_core::Scalar;

use super::engine::{self, Axis, GRAIN_BYTES, Ptr};

/// Elements summed by one leaf of [`line`]'s pairwise recursion (8 lanes of 128).
const LEAF: usize = 1024;

/// `Σ_{i<n} f(x[i·sx], y[i·sy])` by pairwise summation over leaves of [`LEAF`] elements,
/// each summed in 8 independent lanes, on every stride pattern (contiguous, strided, zero
/// stride). The rounding error grows as `O(ε·log n)` instead of `O(ε·n)`: numpy's
/// `test_einsum_chunking_precision` (10⁶ copies of `1 + 8196ε`) is met on views too.
#[inline(always)]
unsafe fn line<TX: Copy, TY: Copy, TW: Scalar>(
    n: usize,
    x: *const TX,
    sx: isize,
    y: *const TY,
    sy: isize,
    f: &impl Fn(TX, TY) -> TW,
) -> TW {
    if n <= LEAF {
        // SAFETY: forwarded.
        return unsafe { leaf(n, x, sx, y, sy, f) };
    }
    // The first half a whole number of leaves, so that the leaves stay aligned.
    let h = n.div_ceil(2 * LEAF) * LEAF;
    // SAFETY: both halves lie inside the caller's n elements.
    unsafe {
        line(h, x, sx, y, sy, f)
            + line(
                n - h,
                x.offset(h as isize * sx),
                sx,
                y.offset(h as isize * sy),
                sy,
                f,
            )
    }
}

/// One leaf of [`line`]: at most [`LEAF`] elements in 8 independent partial sums.
#[inline(always)]
unsafe fn leaf<TX: Copy, TY: Copy, TW: Scalar>(
    n: usize,
    x: *const TX,
    sx: isize,
    y: *const TY,
    sy: isize,
    f: &impl Fn(TX, TY) -> TW,
) -> TW {
    const L: usize = 8;
    let mut acc = [TW::zero(); L];
    // SAFETY: the caller vouches for n elements on both sides.
    unsafe {
        if sx == 1 && sy == 1 {
            let (xs, ys) = (
                std::slice::from_raw_parts(x, n),
                std::slice::from_raw_parts(y, n),
            );
            let (xc, yc) = (xs.chunks_exact(L), ys.chunks_exact(L));
            let (xr, yr) = (xc.remainder(), yc.remainder());
            for (a, b) in xc.zip(yc) {
                for l in 0..L {
                    acc[l] += f(a[l], b[l]);
                }
            }
            let mut s = acc.into_iter().fold(TW::zero(), |s, v| s + v);
            for (&a, &b) in xr.iter().zip(yr) {
                s += f(a, b);
            }
            s
        } else {
            let full = n - n % L;
            for c in (0..full).step_by(L) {
                for (l, a) in acc.iter_mut().enumerate() {
                    let i = (c + l) as isize;
                    *a += f(*x.offset(i * sx), *y.offset(i * sy));
                }
            }
            let mut s = acc.into_iter().fold(TW::zero(), |s, v| s + v);
            for i in full..n {
                let i = i as isize;
                s += f(*x.offset(i * sx), *y.offset(i * sy));
            }
            s
        }
    }
}

/// Sequential sum over normalised axes (odometer over all but the last).
unsafe fn sequential<TX: Copy, TY: Copy, TW: Scalar>(
    axes: &[Axis],
    x: *const TX,
    y: *const TY,
    f: &impl Fn(TX, TY) -> TW,
) -> TW {
    let (outer, inner) = axes.split_at(axes.len() - 1);
    let u = inner[0];
    let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, outer.len());
    let (mut px, mut py) = (x, y);
    let mut total = TW::zero();
    loop {
        // SAFETY: (px, py) is the current outer position, inside both layouts.
        total += unsafe { line(u.n, px, u.sc, py, u.sa, f) };
        let mut k = outer.len();
        loop {
            if k == 0 {
                return total;
            }
            k -= 1;
            idx[k] += 1;
            // SAFETY: stepping within (or back to the start of) axis k.
            unsafe {
                if idx[k] < outer[k].n {
                    px = px.offset(outer[k].sc);
                    py = py.offset(outer[k].sa);
                    break;
                }
                let back = (outer[k].n - 1) as isize;
                px = px.offset(-back * outer[k].sc);
                py = py.offset(-back * outer[k].sa);
            }
            idx[k] = 0;
        }
    }
}

/// `Σ_i f(X[i], Y[i])` over the index space `dims` (pointers to element `(0, …, 0)`).
///
/// # Safety
/// Both layouts are valid for reads over `dims`.
pub(crate) unsafe fn fold<TX: Copy + Sync, TY: Copy + Sync, TW: Scalar>(
    dims: &[usize],
    x: *const TX,
    sx: &[isize],
    y: *const TY,
    sy: &[isize],
    f: impl Fn(TX, TY) -> TW + Sync,
) -> TW {
    let Some((mut axes, shift_x, shift_y)) = engine::normalise(dims, sx, sy) else {
        return TW::zero();
    };
    if axes.is_empty() {
        axes.push(Axis { n: 1, sc: 1, sa: 1 });
    }
    // SAFETY: the shifts stay inside the layouts (reversed axes start at their far end).
    let (x, y) = unsafe { (x.offset(shift_x), y.offset(shift_y)) };
    let numel: usize = axes.iter().map(|a| a.n).product();
    let bytes = numel * (size_of::<TX>() + size_of::<TY>());
    let threads = rayon::current_num_threads();
    if threads == 1 || bytes < 2 * GRAIN_BYTES || axes[0].n < 2 {
        // SAFETY: forwarded.
        return unsafe { sequential(&axes, x, y, &f) };
    }
    let pieces = axes[0].n.min(4 * threads);
    let (px, py) = (Ptr(x.cast_mut()), Ptr(y.cast_mut()));
    let partial: Vec<TW> = (0..pieces)
        .into_par_iter()
        .map(|p| {
            let (lo, hi) = (p * axes[0].n / pieces, (p + 1) * axes[0].n / pieces);
            let mut part = axes.clone();
            part[0].n = hi - lo;
            let (px, py) = (px, py);
            // SAFETY: rows lo..hi of the outermost axis, inside both layouts.
            unsafe {
                sequential(
                    &part,
                    px.0.offset(lo as isize * axes[0].sc).cast_const(),
                    py.0.offset(lo as isize * axes[0].sa).cast_const(),
                    &f,
                )
            }
        })
        .collect();
    partial.into_iter().fold(TW::zero(), |s, v| s + v)
}

/// Inner product `⟨X, Y⟩ = Σ_i conj(X[i])·Y[i]` (conjugate-linear in X), accumulated in `TW`
/// (both inputs promote to it).
///
/// # Errors
/// [`Error::ShapeMismatch`](adrules_core::Error::ShapeMismatch) naming `"y"` when the shapes
/// differ.
pub fn inner<TX, TY, TW>(
    x: &crate::StridedView<'_, TX>,
    y: &crate::StridedView<'_, TY>,
) -> adrules_core::Result<TW>
where
    TX: crate::Element + adrules_core::scalar::Promote<TW>,
    TY: crate::Element + adrules_core::scalar::Promote<TW>,
    TW: crate::Element,
{
    inner_impl(x, y)
}

/// [`inner`] without the promotion bounds (the backend picks `TW` as the join of the inputs).
pub(crate) fn inner_impl<TX: crate::Element, TY: crate::Element, TW: crate::Element>(
    x: &crate::StridedView<'_, TX>,
    y: &crate::StridedView<'_, TY>,
) -> adrules_core::Result<TW> {
    if x.dims() != y.dims() {
        return Err(adrules_core::Error::shape("y", x.dims(), y.dims()));
    }
    // SAFETY: both views are valid for reads.
    Ok(unsafe {
        fold(
            x.dims(),
            x.as_ptr(),
            x.strides(),
            y.as_ptr(),
            y.strides(),
            |a: TX, b: TY| {
                crate::element::convert::<TX, TW>(a.conj()) * crate::element::convert::<TY, TW>(b)
            },
        )
    })
}

/// `true` when every element of `x` is finite: `Σ_i (x_i − x_i)` is 0 exactly when no element
/// is NaN or ±∞ (a finite difference is an exact zero, so nothing can overflow), and NaN
/// otherwise. One vectorized pass ([`fold`]).
pub(crate) fn all_finite_impl<T: crate::Element>(x: &crate::StridedView<'_, T>) -> bool {
    let n: usize = x.dims().iter().product();
    if n <= 4096 && x.strides() == crate::layout::row_major_strides(x.dims()).as_slice() {
        // small and dense: one plain loop, without the engine's normalisation
        // SAFETY: a dense row-major view holds `n` consecutive elements from its pointer.
        let v = unsafe { std::slice::from_raw_parts(x.as_ptr(), n) };
        return v.iter().all(|&a| adrules_core::Scalar::is_finite(a));
    }
    // SAFETY: the view is valid for reads (read twice, as both sides of the fold, so the
    // closure's `a − b` is `x_i − x_i`).
    let s: T = unsafe {
        fold(
            x.dims(),
            x.as_ptr(),
            x.strides(),
            x.as_ptr(),
            x.strides(),
            |a: T, b: T| a - b,
        )
    };
    s == T::zero()
}
