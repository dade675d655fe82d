//! Pairwise contraction by TTGT (transpose–transpose–GEMM–transpose) on faer's GEMM.
//!
//! The axes fall into three groups: `M` (open in A, rows of C), `N` (open in B, columns of C)
//! and `K` (contracted). Each operand is a matrix when its two groups each fuse into one
//! stride, one of which is 1 (row- or column-major with any leading dimension). The order of
//! the axes within a group is free as long as all operands use the same one, so a few orders
//! are tried (sorted by the strides of either operand that holds the group) and the plan that
//! copies the fewest elements wins: an operand that is not a matrix in that order, or whose
//! dtype differs from C's, is packed into a temporary (promoting and conjugating on the way);
//! a C that is not a matrix receives the product in a temporary, which is then added into it
//! with a permuted add. When the cheapest plan still copies, and pulling one open axis out of
//! `M` or `N` as a loop makes every slice a matrix in place, the contraction runs as a batch
//! of GEMMs instead (slices of at least [`BATCH_MIN_FLOPS`]), which avoids the temporaries
//! altogether. An operand whose contracted index is not its fastest, where faer is slow with
//! that layout (A for a row-major C, B for a column-major C; the `Aᵀ·C̄` of a pullback), is
//! repacked when the product is deep enough to repay the copy (see [`repack`]); a packed
//! operand is always laid out the fast way. GEMM runs with `Par::rayon(0)` above the
//! per-dtype [`PARALLEL_FLOPS`] and on the calling thread below; batches of many small slices
//! are spread over the rayon pool instead, when all of them together are worth a fork.

use std::borrow::Cow;

use smallvec::SmallVec;

use adrules_core::scalar::Promote;
use adrules_core::{Axes, Conj, ContractSpec, Dims, Result};

use super::add::{axpby, scale};
use super::engine::Ptr;
use crate::element::private::MatrixRef;
use crate::element::{Element, convert};
use crate::hook::Scratch;
use crate::layout::{Strides, for_each_offset};
use crate::view::{StridedView, StridedViewMut};

mod batched;
mod dots;
use batched::contract_batched;

/// `m·n·k` from which GEMM runs on the rayon pool, per element type (f32, f64, Complex32,
/// Complex64): the size from which two threads measured faster than one for square products
/// on the 2-core development machine (faer 0.24, `Par::rayon(2)` against `Par::Seq`):
///
/// | dtype | 1 thread slower below | chosen threshold |
/// |---|---|---|
/// | f32 | 256³ (1.06× at 256³, 0.61× at 128³) | 2²³ ≈ 203³ |
/// | f64 | 160³ (0.96× at 128³, 1.11× at 192³) | 2²² ≈ 161³ |
/// | c32 | 110³ (0.95× at 96³, 1.33× at 128³) | 2²¹ = 128³ |
/// | c64 | 90³ (0.57× at 64³, 1.26× at 96³) | 2²⁰ ≈ 101³ |
///
/// Below them a fork–join costs more than the second core returns (f64 `n = 64`: 16 µs on
/// one thread, 51 µs on two).
const PARALLEL_FLOPS: [usize; 4] = [1 << 23, 1 << 22, 1 << 21, 1 << 20];

fn dtype_index(dtype: adrules_core::DType) -> usize {
    use adrules_core::DType;
    match dtype {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::C32 => 2,
        DType::C64 => 3,
    }
}

/// `true` when an `m × k · k × n` GEMM of `dtype` should run on the rayon pool (there are
/// several threads and the product is above [`PARALLEL_FLOPS`]).
fn parallel_gemm(m: usize, n: usize, k: usize, dtype: adrules_core::DType) -> bool {
    m.saturating_mul(n).saturating_mul(k) >= PARALLEL_FLOPS[dtype_index(dtype)]
        && rayon::current_num_threads() > 1
}

/// Whether to repack A (for a row-major destination) or B (for a column-major one) whose
/// contracted index is not its fastest: faer 0.24 computes `C = Aᵀ·B` into a row-major C
/// (and its transpose into a column-major C) 1.4–2.7× slower than `A·B` once `k` exceeds
/// a few hundred (f64, m = k = 1024: 1.25× at n = 256, 1.44× at n = 64; m = k = 4096,
/// n = 64: 2.67×), while `m = k ≤ 320` runs at full speed either way. A copy of the operand
/// (`m·k` elements for A) costs about what one GEMM column block of 64 saves, so the repack
/// is made when `k ≥ 384` and the dimension it is amortised over (`n` for A, `m` for B) is at
/// least 128. These are the cotangent contractions of a pullback: `B̄ = Aᵀ·C̄` for
/// `C = A·B` with row-major operands.
fn repack(m: usize, n: usize, k: usize) -> (bool, bool) {
    let deep = k >= 384;
    (deep && n >= 128, deep && m >= 128)
}

/// An axis of a group, with its strides in the two operands that hold the group and its
/// position in C (for `M` and `N`).
#[derive(Clone, Copy, Debug)]
struct Ax {
    n: usize,
    s: [isize; 2],
    c_axis: usize,
}

type Group = SmallVec<[Ax; 4]>;

/// The group sorted by the strides in operand `which`, outermost first.
fn sorted(g: &Group, which: usize) -> Group {
    sort_in_place(g.clone(), which)
}

/// [`sorted`], reusing the group's storage.
fn sort_in_place(mut g: Group, which: usize) -> Group {
    if g.len() > 1 {
        g.sort_by_key(|ax| std::cmp::Reverse(ax.s[which].unsigned_abs()));
    }
    g
}

/// The single stride of the group in operand `which` when its axes (outermost first) are
/// contiguous among themselves; 1 for an empty group.
fn fused(g: &Group, which: usize) -> Option<isize> {
    for w in g.windows(2) {
        if w[0].s[which] != w[1].s[which] * w[1].n as isize {
            return None;
        }
    }
    Some(g.last().map_or(1, |ax| ax.s[which]))
}

/// `(row stride, column stride)` when rows (group `r` in operand `wr`) and columns (group
/// `c` in operand `wc`) make a matrix GEMM reads directly: positive strides, one of them 1.
fn matrix(r: &Group, wr: usize, c: &Group, wc: usize) -> Option<(isize, isize)> {
    let (rs, cs) = (fused(r, wr)?, fused(c, wc)?);
    (rs > 0 && cs > 0 && (rs == 1 || cs == 1)).then_some((rs, cs))
}

fn count(g: &Group) -> usize {
    g.iter().map(|ax| ax.n).product()
}

/// Dense strides for a temporary holding `rows × cols` (groups in the given order): rows
/// fastest when `rows_inner`, else columns fastest. Returns the per-axis strides of `rows`,
/// of `cols`, and the matrix strides.
fn dense(rows: &Group, cols: &Group, rows_inner: bool) -> (Strides, Strides, (isize, isize)) {
    let (m, n) = (count(rows) as isize, count(cols) as isize);
    let strides = |g: &Group, inner: isize| {
        let mut out: Strides = SmallVec::from_elem(0, g.len());
        let mut acc = inner;
        for (k, ax) in g.iter().enumerate().rev() {
            out[k] = acc;
            acc *= ax.n as isize;
        }
        out
    };
    if rows_inner {
        (strides(rows, 1), strides(cols, m), (1, m))
    } else {
        (strides(rows, n), strides(cols, 1), (n, 1))
    }
}

/// `true` when the operand's fastest axis (smallest `|stride|`) is in group `g` (strides in
/// slot `wg`) rather than in `other` (slot `wo`).
fn fastest_in(g: &Group, wg: usize, other: &Group, wo: usize) -> bool {
    let best = |x: &Group, w: usize| x.iter().map(|ax| ax.s[w].unsigned_abs()).min();
    match (best(g, wg), best(other, wo)) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        _ => false,
    }
}

/// A GEMM operand: read in place, or packed into a temporary.
struct Operand<T: Element> {
    ptr: *const T,
    strides: (isize, isize),
    conj: bool,
    _buffer: Option<Scratch<T>>,
}

/// Packs (or wraps) one operand as a `rows × cols` matrix; `wr`/`wc` select the operand's
/// strides in each group.
/// `rows_inner` chooses the layout of a packed operand (rows fastest when `true`); `None`
/// follows the source's fastest axis, which makes the copy cheapest.
#[allow(clippy::too_many_arguments)]
fn operand<T: Element, TC: Element>(
    x: &StridedView<'_, T>,
    rows: &Group,
    wr: usize,
    cols: &Group,
    wc: usize,
    conj: Conj,
    direct: Option<(isize, isize)>,
    rows_inner: Option<bool>,
) -> Result<Operand<TC>> {
    if let Some(strides) = direct {
        return Ok(Operand {
            ptr: x.as_ptr().cast(),
            strides,
            conj: conj.is_conj() && T::DTYPE.is_complex(),
            _buffer: None,
        });
    }
    let (r, c) = (count(rows), count(cols));
    let mut buf = Scratch::<TC>::new(r * c)?;
    let inner = rows_inner.unwrap_or_else(|| !fastest_in(cols, wc, rows, wr));
    let (sr, scol, strides) = dense(rows, cols, inner);
    let dims: SmallVec<[usize; 8]> = rows.iter().chain(cols).map(|ax| ax.n).collect();
    let sdst: SmallVec<[isize; 8]> = sr.into_iter().chain(scol).collect();
    let ssrc: SmallVec<[isize; 8]> = rows
        .iter()
        .map(|ax| ax.s[wr])
        .chain(cols.iter().map(|ax| ax.s[wc]))
        .collect();
    // SAFETY: `buf` is a fresh dense buffer for `dims`; the source is a valid view.
    unsafe {
        axpby(
            &dims,
            buf.as_mut_ptr(),
            &sdst,
            x.as_ptr(),
            &ssrc,
            conj,
            TC::one(),
            TC::zero(),
        );
    }
    Ok(Operand {
        ptr: buf.as_ptr(),
        strides,
        conj: false,
        _buffer: Some(buf),
    })
}

/// The two orders of a group, outermost first by the strides of operand `first` and then of
/// the other (`(key, group)` pairs); a group of at most one axis has a single order, borrowed.
fn orders(g: &Group, first: usize) -> SmallVec<[(usize, Cow<'_, Group>); 2]> {
    let mut v = SmallVec::new();
    if g.len() <= 1 {
        v.push((first, Cow::Borrowed(g)));
    } else {
        v.push((first, Cow::Owned(sorted(g, first))));
        v.push((1 - first, Cow::Owned(sorted(g, 1 - first))));
    }
    v
}

/// The axis orders (M, N, K) that copy the fewest elements, and that number: an operand is
/// copied when it is not a matrix in those orders or its dtype differs from C's (`same_*`
/// false); C goes through a temporary when it is not a matrix. Ties keep C's own order.
/// The orders are returned as the operand slot each group is [`sorted`] by.
fn plan(
    m_axes: &Group,
    n_axes: &Group,
    k_axes: &Group,
    same_a: bool,
    same_b: bool,
) -> (usize, [usize; 3]) {
    let (m, n, k) = (count(m_axes), count(n_axes), count(k_axes));
    let (mos, nos, kos) = (orders(m_axes, 1), orders(n_axes, 1), orders(k_axes, 0));
    let mut best: Option<(usize, [usize; 3])> = None;
    for (km, ms) in &mos {
        for (kn, ns) in &nos {
            for (kk, ks) in &kos {
                let copy_a = !(same_a && matrix(ms, 0, ks, 0).is_some());
                let copy_b = !(same_b && matrix(ks, 1, ns, 0).is_some());
                let copy_c = matrix(ms, 1, ns, 1).is_none();
                let cost = usize::from(copy_a) * m * k
                    + usize::from(copy_b) * k * n
                    + usize::from(copy_c) * m * n;
                if best.is_none_or(|(c0, _)| cost < c0) {
                    best = Some((cost, [*km, *kn, *kk]));
                    if cost == 0 {
                        return (0, [*km, *kn, *kk]);
                    }
                }
            }
        }
    }
    best.unwrap_or((0, [1, 1, 0]))
}

/// Smallest GEMM (`m·n·k`) worth a call of its own in a batch.
const BATCH_MIN_FLOPS: usize = 1 << 15;

/// One open axis run as a loop of GEMMs: its extent, its stride in A (when it is an `M` axis)
/// or in B (an `N` axis), its stride in C, and the matrix plan of every slice.
struct Batch {
    n: usize,
    stride_ab: isize,
    in_a: bool,
    stride_c: isize,
    groups: [Group; 3],
}

/// A batch axis that makes every operand a matrix in place (no copy, no temporary) with
/// slices big enough for GEMM, preferring the fewest calls; `None` when there is none.
fn batched(
    m_axes: &Group,
    n_axes: &Group,
    k_axes: &Group,
    same_a: bool,
    same_b: bool,
) -> Option<Batch> {
    if !(same_a && same_b) {
        return None;
    }
    let total = count(m_axes) * count(n_axes) * count(k_axes);
    let mut best: Option<Batch> = None;
    for (in_a, group) in [(true, m_axes), (false, n_axes)] {
        for (i, ax) in group.iter().enumerate() {
            let mut rest = group.clone();
            rest.remove(i);
            let (m, n) = if in_a {
                (&rest, n_axes)
            } else {
                (m_axes, &rest)
            };
            let (cost, [km, kn, kk]) = plan(m, n, k_axes, true, true);
            if cost == 0
                && total / ax.n >= BATCH_MIN_FLOPS
                && best.as_ref().is_none_or(|b| ax.n < b.n)
            {
                best = Some(Batch {
                    n: ax.n,
                    stride_ab: ax.s[0],
                    in_a,
                    stride_c: ax.s[1],
                    groups: [sorted(m, km), sorted(n, kn), sorted(k_axes, kk)],
                });
            }
        }
    }
    best
}

/// Runs a batch plan: one GEMM per index of the batch axis, on the rayon pool across batches
/// when there are enough of them, else with GEMM's own parallelism.
///
/// # Safety
/// `a` and `b` point at element `(0, …)` of views whose strides the plan was made from (of
/// C's element type); C is exclusively borrowed and disjoint from them.
unsafe fn run_batched<T: Element>(
    c: &mut StridedViewMut<'_, T>,
    a: *const T,
    b: *const T,
    batch: &Batch,
    (conj_a, conj_b): (Conj, Conj),
    alpha: T,
    beta: T,
) {
    let [ms, ns, ks] = &batch.groups;
    let (m, n, k) = (count(ms), count(ns), count(ks));
    let accumulate = beta != T::zero();
    if accumulate && beta != T::one() {
        scale(c, beta);
    }
    let (Some(la), Some(lb), Some(lc)) = (
        matrix(ms, 0, ks, 0),
        matrix(ks, 1, ns, 0),
        matrix(ms, 1, ns, 1),
    ) else {
        return;
    };
    let complex = T::DTYPE.is_complex();
    let threads = rayon::current_num_threads();
    // the whole batch's m·n·k decides, as for one GEMM of that size
    let big = parallel_gemm(batch.n * m, n, k, T::DTYPE);
    let across = big && batch.n >= 2 * threads;
    let (pa, pb, pc) = (Ptr(a.cast_mut()), Ptr(b.cast_mut()), Ptr(c.as_mut_ptr()));
    let one = |i: usize| {
        let (pa, pb, pc) = (pa, pb, pc);
        let i = i as isize;
        let (oa, ob) = if batch.in_a {
            (i * batch.stride_ab, 0)
        } else {
            (0, i * batch.stride_ab)
        };
        let lhs = MatrixRef {
            ptr: pa.0.wrapping_offset(oa).cast_const(),
            rows: m,
            cols: k,
            row_stride: la.0,
            col_stride: la.1,
            conj: complex && conj_a.is_conj(),
        };
        let rhs = MatrixRef {
            ptr: pb.0.wrapping_offset(ob).cast_const(),
            rows: k,
            cols: n,
            row_stride: lb.0,
            col_stride: lb.1,
            conj: complex && conj_b.is_conj(),
        };
        // SAFETY: slice i of each operand lies inside its view; the C slices are disjoint.
        unsafe {
            T::gemm(
                pc.0.offset(i * batch.stride_c),
                lc.0,
                lc.1,
                accumulate,
                lhs,
                rhs,
                alpha,
                big && !across,
            )
        };
    };
    if across {
        use rayon::prelude::*;
        (0..batch.n).into_par_iter().for_each(one);
    } else {
        (0..batch.n).for_each(one);
    }
}

/// Pairwise contraction `C ← β·C + α·P_{pAB}(op(A)·op(B))` (see [`ContractSpec`]): with
/// `u = (open_a…, open_b…)` the intermediate multi-index and `C[i]` at `u = P⁻¹(i)`,
/// `C[i] ← β·C[i] + α·Σ_k op(A[open_a = u_A, contr_a = k])·op(B[contr_b = k, open_b = u_B])`.
///
/// A and B may have any dtype that promotes to C's; `op` conjugates when the flag is set.
/// `β = 0` is a strong zero. No contracted axes is an outer product.
///
/// # Errors
/// [`Error::RankMismatch`](adrules_core::Error::RankMismatch) /
/// [`Error::ShapeMismatch`](adrules_core::Error::ShapeMismatch) naming `"a"`, `"b"` (a
/// contracted axis whose dimension differs from its partner in A) or `"c"`;
/// [`Error::InvalidArgument`](adrules_core::Error::InvalidArgument) when a temporary does not
/// fit in memory.
#[allow(clippy::too_many_arguments)]
pub fn contract<TA, TB, TC>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    b: &StridedView<'_, TB>,
    spec: &ContractSpec,
    conj_a: Conj,
    conj_b: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()>
where
    TA: Element + Promote<TC>,
    TB: Element + Promote<TC>,
    TC: Element,
{
    contract_impl(c, a, b, spec, conj_a, conj_b, alpha, beta)
}

/// The entries of `x` at `axes` (the extents of a group of axes).
fn pick(x: &[usize], axes: &[usize]) -> Dims {
    axes.iter().map(|&i| x[i]).collect()
}

/// The strides of `x` at `axes`.
fn picks(x: &[isize], axes: &[usize]) -> Strides {
    axes.iter().map(|&i| x[i]).collect()
}

/// C's axes that hold the batch labels, in the spec's batch order.
fn c_batch_axes(spec: &ContractSpec) -> Axes {
    let ip = spec.perm_ab().inverse();
    ip.as_slice()[..spec.num_batch()].iter().copied().collect()
}

/// A contraction whose open axes all have extent 1 (Hadamard products, row-wise dots, inner
/// products): [`dots::dots`] on the batch and contracted axes, no GEMM.
#[allow(clippy::too_many_arguments)]
fn no_open_axes<TA: Element, TB: Element, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    b: &StridedView<'_, TB>,
    spec: &ContractSpec,
    conj_a: Conj,
    conj_b: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()> {
    let batch = pick(a.dims(), spec.batch_a());
    let (la, lb, lc) = (
        picks(a.strides(), spec.batch_a()),
        picks(b.strides(), spec.batch_b()),
        picks(c.strides(), &c_batch_axes(spec)),
    );
    let k = pick(a.dims(), spec.contr_a());
    let (ka, kb) = (
        picks(a.strides(), spec.contr_a()),
        picks(b.strides(), spec.contr_b()),
    );
    // SAFETY: every multi-index of the batch and contracted axes is one of the views' own
    // shapes under their strides (the open axes have extent 1, offset 0); C's elements are
    // distinct per batch index, C is exclusively borrowed and disjoint from A and B (checked
    // by the backend).
    unsafe {
        dots::dots(
            c.as_mut_ptr(),
            a.as_ptr(),
            b.as_ptr(),
            (&batch, [&la, &lb, &lc]),
            (&k, [&ka, &kb]),
            (conj_a, conj_b),
            alpha,
            beta,
        )
    };
    Ok(())
}

/// [`contract`] without the promotion bounds (the backend checks dtypes at run time).
#[allow(clippy::too_many_arguments)]
pub(crate) fn contract_impl<TA: Element, TB: Element, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    b: &StridedView<'_, TB>,
    spec: &ContractSpec,
    conj_a: Conj,
    conj_b: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()> {
    spec.check(a.dims(), b.dims(), c.dims())?;
    if c.is_empty() {
        return Ok(());
    }
    let open = |x: &[usize], axes: &[usize]| axes.iter().map(|&i| x[i]).product::<usize>();
    if open(a.dims(), spec.open_a()) == 1 && open(b.dims(), spec.open_b()) == 1 {
        return no_open_axes(c, a, b, spec, conj_a, conj_b, alpha, beta);
    }
    if spec.num_batch() > 0 {
        return contract_batched(c, a, b, spec, conj_a, conj_b, alpha, beta);
    }
    let (da, sa, db, sb, sc) = (
        a.dims(),
        a.strides(),
        b.dims(),
        b.strides(),
        Strides::from_slice(c.strides()),
    );
    let na = spec.open_a().len();
    let ip = spec.perm_ab().inverse();
    let keep = |ax: &Ax| ax.n != 1;
    let m_axes: Group = spec
        .open_a()
        .iter()
        .enumerate()
        .map(|(x, &i)| Ax {
            n: da[i],
            s: [sa[i], sc[ip.as_slice()[x]]],
            c_axis: ip.as_slice()[x],
        })
        .filter(keep)
        .collect();
    let n_axes: Group = spec
        .open_b()
        .iter()
        .enumerate()
        .map(|(x, &j)| {
            let ca = ip.as_slice()[na + x];
            Ax {
                n: db[j],
                s: [sb[j], sc[ca]],
                c_axis: ca,
            }
        })
        .filter(keep)
        .collect();
    let k_axes: Group = spec
        .contr_a()
        .iter()
        .zip(spec.contr_b())
        .map(|(&i, &j)| Ax {
            n: da[i],
            s: [sa[i], sb[j]],
            c_axis: 0,
        })
        .filter(keep)
        .collect();
    let k: usize = spec.contr_a().iter().map(|&i| da[i]).product();
    if k == 0 {
        scale(c, beta);
        return Ok(());
    }
    let (m, n) = (count(&m_axes), count(&n_axes));

    let same_a = TA::DTYPE == TC::DTYPE;
    let same_b = TB::DTYPE == TC::DTYPE;
    let (cost, [km, kn, kk]) = plan(&m_axes, &n_axes, &k_axes, same_a, same_b);
    let batch = (cost > 0)
        .then(|| batched(&m_axes, &n_axes, &k_axes, same_a, same_b))
        .flatten();
    if let Some(batch) = batch {
        // SAFETY: a batch plan only exists when every operand is a matrix of its own dtype
        // (TA = TB = TC) in each slice; C is exclusively borrowed.
        unsafe {
            run_batched(
                c,
                a.as_ptr().cast(),
                b.as_ptr().cast(),
                &batch,
                (conj_a, conj_b),
                alpha,
                beta,
            )
        };
        return Ok(());
    }
    let (ms, ns, ks) = (
        sort_in_place(m_axes, km),
        sort_in_place(n_axes, kn),
        sort_in_place(k_axes, kk),
    );
    // Where GEMM writes: C itself when it is a matrix, else a temporary laid out like C.
    let c_direct = matrix(&ms, 1, &ns, 1);
    let (sm, sn, tmp_strides) = dense(&ms, &ns, !fastest_in(&ns, 1, &ms, 1));
    let (drs, dcs) = c_direct.unwrap_or(tmp_strides);
    // faer runs at full speed only when the contracted index is the fastest one of A for a
    // row-major destination (of B for a column-major one); see [`repack`].
    let row_major = dcs == 1 && drs != 1;
    let (fix_a, fix_b) = repack(m, n, k);
    let mut da_direct = if same_a { matrix(&ms, 0, &ks, 0) } else { None };
    let mut db_direct = if same_b { matrix(&ks, 1, &ns, 0) } else { None };
    if row_major && fix_a && da_direct.is_some_and(|(_, cs)| cs != 1) {
        da_direct = None;
    }
    if !row_major && fix_b && db_direct.is_some_and(|(rs, _)| rs != 1) {
        db_direct = None;
    }
    // A packed operand is laid out the fast way round whatever its size.
    let a_inner = row_major.then_some(false);
    let b_inner = (!row_major).then_some(true);
    let lhs = operand::<TA, TC>(a, &ms, 0, &ks, 0, conj_a, da_direct, a_inner)?;
    let rhs = operand::<TB, TC>(b, &ks, 1, &ns, 0, conj_b, db_direct, b_inner)?;
    let lhs_ref = MatrixRef {
        ptr: lhs.ptr,
        rows: m,
        cols: k,
        row_stride: lhs.strides.0,
        col_stride: lhs.strides.1,
        conj: lhs.conj,
    };
    let rhs_ref = MatrixRef {
        ptr: rhs.ptr,
        rows: k,
        cols: n,
        row_stride: rhs.strides.0,
        col_stride: rhs.strides.1,
        conj: rhs.conj,
    };
    let parallel = parallel_gemm(m, n, k, TC::DTYPE);

    if let Some((rs, cs)) = c_direct {
        let accumulate = beta != TC::zero();
        if accumulate && beta != TC::one() {
            scale(c, beta);
        }
        // SAFETY: C is a valid, exclusively borrowed m × n matrix with these strides; the
        // operands are valid matrices disjoint from it.
        unsafe {
            TC::gemm(
                c.as_mut_ptr(),
                rs,
                cs,
                accumulate,
                lhs_ref,
                rhs_ref,
                alpha,
                parallel,
            )
        };
        return Ok(());
    }
    // C is not a matrix: GEMM into a temporary, then C ← β·C + P(temporary).
    let mut tmp = Scratch::<TC>::new(m * n)?;
    let (rs, cs) = tmp_strides;
    // SAFETY: `tmp` is a fresh m × n buffer; the operands are valid matrices.
    unsafe {
        TC::gemm(
            tmp.as_mut_ptr(),
            rs,
            cs,
            false,
            lhs_ref,
            rhs_ref,
            alpha,
            parallel,
        )
    };
    let mut st: Strides = SmallVec::from_elem(0, c.rank());
    for (ax, s) in ms.iter().zip(sm).chain(ns.iter().zip(sn)) {
        st[ax.c_axis] = s;
    }
    let dims = adrules_core::Dims::from_slice(c.dims());
    // SAFETY: `tmp` holds every element of C's index space under strides `st` (axes of
    // extent 1 have index 0); C is exclusively borrowed.
    unsafe {
        axpby(
            &dims,
            c.as_mut_ptr(),
            &sc,
            tmp.as_ptr(),
            &st,
            Conj::No,
            TC::one(),
            beta,
        )
    };
    Ok(())
}
