//! Contractions without open axes: `C[l] ← β·C[l] + α·Σ_k op(A[l, k])·op(B[l, k])` over
//! batch indices `l` and contracted indices `k` (both multi-indices, either may be empty).
//! They cover the Hadamard product (`ij,ij->ij`, no `k`), row-wise dots (`bi,bi->b`), the full
//! inner product (`ij,ij->`, no `l`) and every mix, which as a GEMM would be `1 × 1 × k`
//! products, one call per batch index.
//!
//! The axes are normalised first (extent-1 axes dropped, sorted by C's stride for `l` and by
//! A's for `k`, adjacent axes fused where all operands allow), then the work runs as lines:
//! - no `k`: element-wise lines along `l`'s innermost axis;
//! - `k` inner in the inputs (its stride in A and B not larger than `l`'s): one dot per output
//!   element, with four (real) or two (complex) independent partial sums on unit strides so
//!   that the compiler vectorizes without reassociating a single sum;
//! - `l` inner: lines of `C ← C + α·A·B` along `l`, one per `k` (the first with `β`).
//!
//! Large problems are split over the rayon pool along the outermost axis of `l` (or of the
//! line itself when `l` has one axis).

use smallvec::SmallVec;

use adrules_core::Conj;

use super::Ptr;
use crate::element::{Element, convert};
use crate::layout::for_each_offset;

/// Elements (`|l|·|k|`) from which the work is split over the rayon pool.
const PARALLEL_ELEMENTS: usize = 1 << 17;

/// One axis: extent and strides in A, B and (for batch axes) C.
#[derive(Clone, Copy, Debug)]
struct Axis {
    n: usize,
    s: [isize; 3],
}

type Axes = SmallVec<[Axis; 6]>;

/// Drops extent-1 axes, sorts outermost first by `|s[key]|` (then the other strides) and fuses
/// an axis into its outer neighbour where every operand steps over the inner one exactly.
fn normalise(mut axes: Axes, key: usize, used: usize) -> Axes {
    axes.retain(|a| a.n != 1);
    axes.sort_by(|x, y| {
        let k = |a: &Axis| {
            let mut v = [a.s[key].unsigned_abs(), 0, 0];
            for (slot, s) in v[1..].iter_mut().zip((0..used).filter(|&i| i != key)) {
                *slot = a.s[s].unsigned_abs();
            }
            v
        };
        k(y).cmp(&k(x))
    });
    let mut out: Axes = SmallVec::new();
    for a in axes {
        if let Some(last) = out.last_mut()
            && (0..used).all(|i| last.s[i] == a.s[i].wrapping_mul(a.n as isize))
        {
            last.n *= a.n;
            last.s = a.s;
            continue;
        }
        out.push(a);
    }
    out
}

/// The element-wise operation of one term: `op(a)·op(b)` in C's type.
#[derive(Clone, Copy)]
struct Term {
    conj_a: bool,
    conj_b: bool,
}

impl Term {
    #[inline(always)]
    fn mul<TA: Element, TB: Element, TC: Element>(self, x: TA, y: TB) -> TC {
        let x: TC = convert(if self.conj_a { x.conj() } else { x });
        let y: TC = convert(if self.conj_b { y.conj() } else { y });
        x * y
    }
}

/// `c[i·sc] ← β·c[i·sc] + α·op(a[i·sa])·op(b[i·sb])` for `i < n` (strong zero for `β = 0`).
///
/// # Safety
/// The `n` strided elements of each pointer are valid; C's are exclusively borrowed and
/// disjoint from A's and B's.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn line<TA: Element, TB: Element, TC: Element>(
    n: usize,
    (c, sc): (*mut TC, isize),
    (a, sa): (*const TA, isize),
    (b, sb): (*const TB, isize),
    t: Term,
    alpha: TC,
    beta: TC,
) {
    let strong_zero = beta == TC::zero();
    // SAFETY (all blocks): in bounds and disjoint by the caller's contract.
    if sa == 1 && sb == 1 && sc == 1 {
        let (c, a, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(c, n),
                std::slice::from_raw_parts(a, n),
                std::slice::from_raw_parts(b, n),
            )
        };
        if strong_zero {
            for ((c, &x), &y) in c.iter_mut().zip(a).zip(b) {
                *c = alpha * t.mul::<TA, TB, TC>(x, y);
            }
        } else {
            for ((c, &x), &y) in c.iter_mut().zip(a).zip(b) {
                *c = beta * *c + alpha * t.mul::<TA, TB, TC>(x, y);
            }
        }
        return;
    }
    for i in 0..n as isize {
        unsafe {
            let z = c.offset(i * sc);
            let p = alpha * t.mul::<TA, TB, TC>(*a.offset(i * sa), *b.offset(i * sb));
            *z = if strong_zero { p } else { beta * *z + p };
        }
    }
}

/// `Σ_{i<n} op(a[i·sa])·op(b[i·sb])`.
///
/// # Safety
/// The `n` strided elements of `a` and `b` are valid.
#[inline(always)]
unsafe fn dot<TA: Element, TB: Element, TC: Element>(
    n: usize,
    (a, sa): (*const TA, isize),
    (b, sb): (*const TB, isize),
    t: Term,
) -> TC {
    const L: usize = 4;
    // SAFETY (all blocks): in bounds by the caller's contract.
    if sa == 1 && sb == 1 {
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts(a, n),
                std::slice::from_raw_parts(b, n),
            )
        };
        let mut acc = [TC::zero(); L];
        let (ac, bc) = (a.chunks_exact(L), b.chunks_exact(L));
        let (ar, br) = (ac.remainder(), bc.remainder());
        for (x, y) in ac.zip(bc) {
            for l in 0..L {
                acc[l] += t.mul::<TA, TB, TC>(x[l], y[l]);
            }
        }
        let mut s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
        for (&x, &y) in ar.iter().zip(br) {
            s += t.mul::<TA, TB, TC>(x, y);
        }
        return s;
    }
    let mut acc = [TC::zero(); 2];
    let mut i = 0isize;
    while i + 1 < n as isize {
        unsafe {
            acc[0] += t.mul::<TA, TB, TC>(*a.offset(i * sa), *b.offset(i * sb));
            acc[1] += t.mul::<TA, TB, TC>(*a.offset((i + 1) * sa), *b.offset((i + 1) * sb));
        }
        i += 2;
    }
    if i < n as isize {
        unsafe { acc[0] += t.mul::<TA, TB, TC>(*a.offset(i * sa), *b.offset(i * sb)) };
    }
    acc[0] + acc[1]
}

/// The normalised problem: batch axes `l` (strides in A, B, C; the last is the line) and
/// contracted axes `k` (strides in A, B).
struct Problem<TA, TB, TC> {
    l: Axes,
    k: Axes,
    a: Ptr<TA>,
    b: Ptr<TB>,
    c: Ptr<TC>,
    t: Term,
}

impl<TA: Element, TB: Element, TC: Element> Problem<TA, TB, TC> {
    /// Runs the problem on the calling thread.
    ///
    /// # Safety
    /// As [`dots`].
    unsafe fn run(&self, alpha: TC, beta: TC) {
        let (a, b, c, t) = (
            self.a.0.cast_const(),
            self.b.0.cast_const(),
            self.c.0,
            self.t,
        );
        let (outer_l, inner_l) = match self.l.split_last() {
            Some((last, rest)) => (rest, *last),
            None => (&[][..], Axis { n: 1, s: [0; 3] }),
        };
        let dims: SmallVec<[usize; 6]> = outer_l.iter().map(|x| x.n).collect();
        let st = |i: usize| -> SmallVec<[isize; 6]> { outer_l.iter().map(|x| x.s[i]).collect() };
        let (la, lb, lc) = (st(0), st(1), st(2));
        let [sa, sb, sc] = inner_l.s;
        let nl = inner_l.n;
        // SAFETY (all blocks): every offset is a multi-index of the operands' shapes under
        // their strides, C's distinct per batch index (the caller's contract of `dots`).
        match self.k.as_slice() {
            [] => for_each_offset(&dims, [&la, &lb, &lc], |[oa, ob, oc]| unsafe {
                line(
                    nl,
                    (c.offset(oc), sc),
                    (a.offset(oa), sa),
                    (b.offset(ob), sb),
                    t,
                    alpha,
                    beta,
                )
            }),
            [k] if k.s[0].unsigned_abs() + k.s[1].unsigned_abs()
                <= sa.unsigned_abs() + sb.unsigned_abs()
                || nl == 1 =>
            {
                let (nk, [ka, kb, _]) = (k.n, k.s);
                let strong_zero = beta == TC::zero();
                for_each_offset(&dims, [&la, &lb, &lc], |[oa, ob, oc]| {
                    for i in 0..nl as isize {
                        unsafe {
                            let s: TC = dot(
                                nk,
                                (a.offset(oa + i * sa), ka),
                                (b.offset(ob + i * sb), kb),
                                t,
                            );
                            let z = c.offset(oc + i * sc);
                            *z = if strong_zero {
                                alpha * s
                            } else {
                                beta * *z + alpha * s
                            };
                        }
                    }
                })
            }
            ks => {
                // `l` inner (or several contracted axes): one line of `C ← C + α·A·B` per `k`
                let kd: SmallVec<[usize; 6]> = ks.iter().map(|x| x.n).collect();
                let (ka, kb): (SmallVec<[isize; 6]>, SmallVec<[isize; 6]>) =
                    ks.iter().map(|x| (x.s[0], x.s[1])).unzip();
                for_each_offset(&dims, [&la, &lb, &lc], |[oa, ob, oc]| {
                    let mut first = true;
                    for_each_offset(&kd, [&ka, &kb], |[pa, pb]| unsafe {
                        line(
                            nl,
                            (c.offset(oc), sc),
                            (a.offset(oa + pa), sa),
                            (b.offset(ob + pb), sb),
                            t,
                            alpha,
                            if first { beta } else { TC::one() },
                        );
                        first = false;
                    })
                })
            }
        }
    }
}

/// `C[l] ← β·C[l] + α·Σ_k op(A[l, k])·op(B[l, k])` (strong zero for `β = 0`), `op` the
/// conjugation flags. `batch` gives the extents of `l` and their strides in A, B and C;
/// `contracted` the extents of `k` and their strides in A and B. An empty `k` is a single
/// term (the Hadamard product); an empty `l` a single output element.
///
/// # Safety
/// Every multi-index of `l × k` addresses valid elements of A and B, and every `l` a valid
/// element of C, distinct per `l`; C is exclusively borrowed and disjoint from A and B.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn dots<TA: Element, TB: Element, TC: Element>(
    c: *mut TC,
    a: *const TA,
    b: *const TB,
    batch: (&[usize], [&[isize]; 3]),
    contracted: (&[usize], [&[isize]; 2]),
    (conj_a, conj_b): (Conj, Conj),
    alpha: TC,
    beta: TC,
) {
    let (ld, [la, lb, lc]) = batch;
    let (kd, [ka, kb]) = contracted;
    if ld.contains(&0) {
        return;
    }
    let l = normalise(
        (0..ld.len())
            .map(|i| Axis {
                n: ld[i],
                s: [la[i], lb[i], lc[i]],
            })
            .collect(),
        2,
        3,
    );
    let mut k = normalise(
        (0..kd.len())
            .map(|i| Axis {
                n: kd[i],
                s: [ka[i], kb[i], 0],
            })
            .collect(),
        0,
        2,
    );
    if kd.contains(&0) {
        // an empty sum: C ← β·C
        k.clear();
        k.push(Axis { n: 0, s: [0; 3] });
    }
    let p = Problem {
        l,
        k,
        a: Ptr(a.cast_mut()),
        b: Ptr(b.cast_mut()),
        c: Ptr(c),
        t: Term {
            conj_a: conj_a.is_conj(),
            conj_b: conj_b.is_conj(),
        },
    };
    let elements =
        p.l.iter()
            .chain(&p.k)
            .fold(1usize, |acc, x| acc.saturating_mul(x.n));
    let threads = rayon::current_num_threads();
    match p.l.first() {
        Some(&outer) if threads > 1 && elements >= PARALLEL_ELEMENTS && outer.n >= 2 => {
            use rayon::prelude::*;
            let parts = threads.min(outer.n);
            let p = &p;
            (0..parts).into_par_iter().for_each(|part| {
                let (lo, hi) = (outer.n * part / parts, outer.n * (part + 1) / parts);
                let shift = |i: usize| outer.s[i] * lo as isize;
                let mut l = p.l.clone();
                l[0].n = hi - lo;
                let q = Problem {
                    l,
                    k: p.k.clone(),
                    a: Ptr(p.a.0.wrapping_offset(shift(0))),
                    b: Ptr(p.b.0.wrapping_offset(shift(1))),
                    c: Ptr(p.c.0.wrapping_offset(shift(2))),
                    t: p.t,
                };
                // SAFETY: a sub-range of the outermost batch axis: in bounds, and the C
                // elements of distinct parts are disjoint.
                unsafe { q.run(alpha, beta) }
            })
        }
        // SAFETY: the caller's contract.
        _ => unsafe { p.run(alpha, beta) },
    }
}
