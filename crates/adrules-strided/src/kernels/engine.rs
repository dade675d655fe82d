//! The loop engine of every elementwise kernel: `C[i] ← f(C[i], A[i])` over a shared index
//! space, with arbitrary strides on both sides.
//!
//! Planning (per call, O(rank²)):
//! 1. axes of extent 1 are dropped, axes where C's stride is negative are reversed on both
//!    sides (C is then walked forwards);
//! 2. axes are sorted by C's stride, outermost first, and neighbours that are contiguous in
//!    both operands are fused into one axis;
//! 3. if A's fastest axis `v` differs from C's fastest axis `u` (a transposition), the inner
//!    loops form a 2-D tile. When both are unit-stride, the tile grows: `u` absorbs the axes
//!    that continue C's rows contiguously and `v` those that continue A's rows, up to
//!    [`GROUP`] elements each, so that rows stay long and cache-line aligned even when every
//!    axis is short. Tiles go through the register micro-kernels of
//!    [`transpose`](super::transpose): straight into C for a plain copy (with streaming stores
//!    for large outputs), else into an L1-sized buffer followed by contiguous updates.
//!    Otherwise the inner loop is a line along `u`.
//!
//! Execution splits the work in halves with `rayon::join` (the global pool, or the pool of
//! an enclosing `install`) while a half still moves more than [`GRAIN_BYTES`], so small
//! problems stay on the calling thread.

use smallvec::SmallVec;

use super::transpose::{self, Simd};

/// Bytes (read + written) below which a problem is not split further across threads.
pub(crate) const GRAIN_BYTES: usize = 1 << 19;
/// Outputs of at least this many bytes are written with streaming stores (plain copies only):
/// larger than the L2 caches and half the L3, so they would only evict useful data.
const STREAM_BYTES: usize = 16 << 20;
/// Largest number of elements along each side of a grouped tile.
const GROUP: usize = 4096;
/// Bytes of lines read (and written) per row of a block of lines (see [`Plan::block`]).
const LINE_BLOCK_BYTES: usize = 8 << 10;

/// An elementwise update `c ← f(c, a)` of one line of elements.
pub(crate) trait Op<TA, TC>: Sync {
    /// `c[i·sc] ← f(c[i·sc], a[i·sa])` for `i < n`.
    ///
    /// # Safety
    /// The `n` elements on each side are valid, C's are distinct and not otherwise accessed.
    unsafe fn line(&self, n: usize, c: *mut TC, sc: isize, a: *const TA, sa: isize);

    /// `true` when `f(c, a) = a` bit for bit (`TA` and `TC` are then the same type): the
    /// engine may then move elements with the transposing copy kernel.
    fn is_copy(&self) -> bool {
        false
    }
}

/// One loop of a normalised problem: extent and the strides of C (first) and A (second).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Axis {
    pub(crate) n: usize,
    pub(crate) sc: isize,
    pub(crate) sa: isize,
}

/// A raw pointer that may cross threads (the engine hands disjoint parts to each).
#[derive(Clone, Copy)]
pub(crate) struct Ptr<T>(pub(crate) *mut T);
// SAFETY: the engine gives each task a disjoint part of C and read-only access to A.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

/// Normalised axes of a binary problem: extent-1 axes dropped, C walked forwards, sorted
/// outermost first and fused. Returns `None` for an empty index space, else the axes and the
/// pointer shifts (in elements) of C and A caused by reversing axes.
pub(crate) fn normalise(
    dims: &[usize],
    sc: &[isize],
    sa: &[isize],
) -> Option<(SmallVec<[Axis; 8]>, isize, isize)> {
    if dims.contains(&0) {
        return None;
    }
    let (mut shift_c, mut shift_a) = (0isize, 0isize);
    let mut axes: SmallVec<[Axis; 8]> = SmallVec::new();
    for ((&n, &c), &a) in dims.iter().zip(sc).zip(sa) {
        if n == 1 {
            continue;
        }
        let mut ax = Axis { n, sc: c, sa: a };
        if ax.sc < 0 {
            shift_c += (n as isize - 1) * ax.sc;
            shift_a += (n as isize - 1) * ax.sa;
            ax.sc = -ax.sc;
            ax.sa = -ax.sa;
        }
        axes.push(ax);
    }
    axes.sort_by(|x, y| {
        y.sc.cmp(&x.sc)
            .then(y.sa.unsigned_abs().cmp(&x.sa.unsigned_abs()))
    });
    let mut fused: SmallVec<[Axis; 8]> = SmallVec::new();
    for ax in axes {
        match fused.last_mut() {
            Some(prev) if prev.sc == ax.sc * ax.n as isize && prev.sa == ax.sa * ax.n as isize => {
                prev.n *= ax.n;
                prev.sc = ax.sc;
                prev.sa = ax.sa;
            }
            _ => fused.push(ax),
        }
    }
    Some((fused, shift_c, shift_a))
}

/// The inner 2-D tile of a transposition: `u` indexes C's rows (C offset `u·u_sc`, A offset
/// `a_rows[u]`), `v` indexes A's rows (A offset `v·v_sa`, C offset `c_rows[v]`).
struct Tile {
    u_sc: isize,
    v_sa: isize,
    /// A's stride along `u` (used when `!unit`, where `u` is a single axis)
    u_sa: isize,
    a_rows: Vec<isize>,
    c_rows: Vec<isize>,
    /// unit strides on the contiguous sides: the register micro-kernels apply
    unit: bool,
}

thread_local! {
    /// Offset tables of the last transposition on this thread, reused by the next one.
    static TABLES: std::cell::Cell<[Vec<isize>; 2]> = const { std::cell::Cell::new([Vec::new(), Vec::new()]) };
}

/// Offsets of every combined index of `group` (innermost axis first and fastest) under the
/// strides picked by `stride`, written into `out` (whose capacity is reused).
fn offsets(mut out: Vec<isize>, group: &[Axis], stride: impl Fn(&Axis) -> isize) -> Vec<isize> {
    out.clear();
    out.push(0);
    for ax in group {
        let (s, len) = (stride(ax), out.len());
        for i in 1..ax.n as isize {
            for j in 0..len {
                let o = out[j] + i * s;
                out.push(o);
            }
        }
    }
    out
}

struct Plan {
    /// `Some` for a transposition, else the last axis is a line
    tile: Option<Tile>,
    /// for a line plan whose next-fastest axes differ in A and C (the two axes before the
    /// line): the edge of the square blocks in which those two axes are walked
    block: Option<usize>,
    /// plain copy through the transposing kernel with streaming stores
    stream: bool,
    simd: Simd,
    /// bytes moved per index (read + write)
    bytes: usize,
}

/// Runs `op` over the index space `dims`: `C[i] ← f(C[i], A[i])` with C at `c` with strides
/// `sc` and A at `a` with strides `sa` (pointers to element `(0, …, 0)`).
///
/// # Safety
/// Both layouts are valid for `dims`; C's indices address distinct elements; A is readable;
/// A and C are disjoint, or `a == c` with equal strides and an `op` that never reads `a`.
pub(crate) unsafe fn for_each<TA: Copy + Sync, TC: Copy + Send, O: Op<TA, TC>>(
    op: &O,
    dims: &[usize],
    c: *mut TC,
    sc: &[isize],
    a: *const TA,
    sa: &[isize],
) {
    let Some((mut axes, shift_c, shift_a)) = normalise(dims, sc, sa) else {
        return;
    };
    // SAFETY: the shifts move to the first element of the reversed axes, inside the layouts.
    let (mut c, mut a) = unsafe { (c.offset(shift_c), a.offset(shift_a)) };
    if axes.is_empty() {
        axes.push(Axis { n: 1, sc: 1, sa: 1 });
    }
    let numel: usize = axes.iter().map(|x| x.n).product();
    let last = axes.len() - 1;
    // A's fastest axis among the others, when it is faster than A's stride along C's fastest.
    let v = (0..last)
        .filter(|&k| axes[k].sa != 0)
        .min_by_key(|&k| axes[k].sa.unsigned_abs())
        .filter(|&k| {
            axes[last].sa != 0 && axes[k].sa.unsigned_abs() < axes[last].sa.unsigned_abs()
        });
    let simd = Simd::detect();
    let mut tile = None;
    if let Some(k) = v {
        let mut vx = axes.remove(k);
        let ux = axes.pop().unwrap_or(vx);
        if vx.sa < 0 {
            // walk A forwards along v (C's rows are then visited in reverse)
            // SAFETY: moves to the last element along v, inside both layouts.
            unsafe {
                c = c.offset((vx.n as isize - 1) * vx.sc);
                a = a.offset((vx.n as isize - 1) * vx.sa);
            }
            vx.sc = -vx.sc;
            vx.sa = -vx.sa;
        }
        let unit = ux.sc == 1 && vx.sa == 1;
        let (mut ug, mut vg): (SmallVec<[Axis; 8]>, SmallVec<[Axis; 8]>) =
            (SmallVec::from_elem(ux, 1), SmallVec::from_elem(vx, 1));
        let len = |g: &[Axis]| g.iter().map(|x| x.n).product::<usize>();
        if unit {
            loop {
                let (ul, vl) = (ug[ug.len() - 1], vg[vg.len() - 1]);
                let next_u = axes
                    .iter()
                    .rposition(|x| x.sc == ul.sc * ul.n as isize && len(&ug) * x.n <= GROUP);
                if let Some(i) = next_u {
                    ug.push(axes.remove(i));
                }
                let next_v = axes
                    .iter()
                    .rposition(|x| x.sa == vl.sa * vl.n as isize && len(&vg) * x.n <= GROUP);
                if let Some(i) = next_v {
                    vg.push(axes.remove(i));
                }
                if next_u.is_none() && next_v.is_none() {
                    break;
                }
            }
        }
        let [a_rows, c_rows] = TABLES.with(|t| t.take());
        tile = Some(Tile {
            u_sc: ux.sc,
            v_sa: vx.sa,
            u_sa: ux.sa,
            a_rows: offsets(a_rows, &ug, |x| x.sa),
            c_rows: offsets(c_rows, &vg, |x| x.sc),
            unit,
        });
    }
    let stream = op.is_copy()
        && numel * size_of::<TC>() >= STREAM_BYTES
        && simd != Simd::Portable
        && tile.as_ref().is_some_and(|t| {
            t.unit
                && t.c_rows
                    .iter()
                    .all(|&r| (r * size_of::<TC>() as isize) % 64 == 0)
        });
    // A line plan moves whole lines; when the next axes of A and C differ it is a
    // transposition of lines, walked in blocks so that both sides stay sequential.
    let mut block = None;
    if tile.is_none() && axes.len() >= 3 {
        let (last, w) = (axes.len() - 1, axes.len() - 2);
        let v = (0..w)
            .filter(|&k| axes[k].sa != 0)
            .min_by_key(|&k| axes[k].sa.unsigned_abs())
            .filter(|&k| axes[k].sa.unsigned_abs() < axes[w].sa.unsigned_abs());
        if let Some(k) = v {
            let ax = axes.remove(k);
            axes.insert(w - 1, ax);
            let line_bytes = axes[last].n * size_of::<TA>();
            block = Some((LINE_BLOCK_BYTES / line_bytes).clamp(4, 64));
        }
    }
    let plan = Plan {
        tile,
        block,
        stream,
        simd,
        bytes: size_of::<TA>() + size_of::<TC>(),
    };
    // Up to 16 pieces per thread: work stealing then evens out threads that finish early or
    // that the operating system deschedules on a shared machine.
    let pieces = if numel * plan.bytes >= 2 * GRAIN_BYTES {
        16 * rayon::current_num_threads()
    } else {
        1
    };
    let (nv, nu) = plan
        .tile
        .as_ref()
        .map_or((1, 1), |t| (t.c_rows.len(), t.a_rows.len()));
    let part = Part {
        outer: axes,
        v: (0, nv),
        u: (0, nu),
    };
    // SAFETY: forwarded.
    unsafe { split(op, &plan, part, Ptr(c), Ptr(a.cast_mut()), pieces) };
    if let Some(t) = plan.tile {
        TABLES.with(|c| c.set([t.a_rows, t.c_rows]));
    }
}

/// A part of the work: outer axes (for a line plan the last one is the line) and, for a
/// tile plan, the ranges of tile rows `v` and columns `u`.
#[derive(Clone)]
struct Part {
    outer: SmallVec<[Axis; 8]>,
    v: (usize, usize),
    u: (usize, usize),
}

/// Splits the work in halves while it is large and `pieces > 1`, then runs each part.
unsafe fn split<TA: Copy + Sync, TC: Copy + Send, O: Op<TA, TC>>(
    op: &O,
    plan: &Plan,
    part: Part,
    c: Ptr<TC>,
    a: Ptr<TA>,
    pieces: usize,
) {
    let numel = part.outer.iter().map(|x| x.n).product::<usize>()
        * (part.v.1 - part.v.0)
        * (part.u.1 - part.u.0);
    let run_here = || {
        // SAFETY: forwarded.
        unsafe { run(op, plan, &part, c.0, a.0) };
        if plan.stream {
            transpose::fence();
        }
    };
    if pieces <= 1 || numel * plan.bytes < 2 * GRAIN_BYTES {
        return run_here();
    }
    // Prefer the longest outer axis (for a line plan not the line itself, unless alone),
    // then the tile rows, then the tile columns.
    let lines = if plan.tile.is_some() {
        part.outer.len()
    } else {
        part.outer.len().saturating_sub(1)
    };
    let k = (0..lines)
        .max_by_key(|&k| part.outer[k].n)
        .filter(|&k| part.outer[k].n >= 2);
    let (mut left, mut right) = (part.clone(), part.clone());
    let (c2, a2);
    if let Some(k) = k {
        let mid = part.outer[k].n / 2;
        left.outer[k].n = mid;
        right.outer[k].n -= mid;
        // SAFETY: the right half starts `mid` steps along axis k, inside both layouts.
        unsafe {
            c2 = Ptr(c.0.offset(mid as isize * part.outer[k].sc));
            a2 = Ptr(a.0.offset(mid as isize * part.outer[k].sa));
        }
    } else if plan.tile.is_some() && part.v.1 - part.v.0 >= 32 {
        let mid = part.v.0 + ((part.v.1 - part.v.0) / 2).next_multiple_of(16);
        left.v.1 = mid;
        right.v.0 = mid;
        (c2, a2) = (c, a);
    } else if plan.tile.is_some() && part.u.1 - part.u.0 >= 128 {
        let mid = part.u.0 + ((part.u.1 - part.u.0) / 2).next_multiple_of(64);
        left.u.1 = mid;
        right.u.0 = mid;
        (c2, a2) = (c, a);
    } else if plan.tile.is_none() && part.outer.last().is_some_and(|x| x.n >= 128) {
        let last = part.outer.len() - 1;
        let mid = (part.outer[last].n / 2).next_multiple_of(64);
        left.outer[last].n = mid;
        right.outer[last].n -= mid;
        // SAFETY: as above, along the line.
        unsafe {
            c2 = Ptr(c.0.offset(mid as isize * part.outer[last].sc));
            a2 = Ptr(a.0.offset(mid as isize * part.outer[last].sa));
        }
    } else {
        return run_here();
    }
    rayon::join(
        // SAFETY: the halves address disjoint parts of C.
        || unsafe { split(op, plan, left, c, a, pieces / 2) },
        || unsafe { split(op, plan, right, c2, a2, pieces - pieces / 2) },
    );
}

/// Sequential execution: an odometer over the outer axes around the inner line or tile.
unsafe fn run<TA: Copy, TC: Copy, O: Op<TA, TC>>(
    op: &O,
    plan: &Plan,
    part: &Part,
    c: *mut TC,
    a: *const TA,
) {
    let inner = match (&plan.tile, plan.block) {
        (Some(_), _) => 0,
        (None, None) => 1,
        (None, Some(_)) => 3,
    };
    let outer: &[Axis] = &part.outer[..part.outer.len() - inner];
    let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, outer.len());
    let (mut pc, mut pa) = (c, a);
    loop {
        // SAFETY: (pc, pa) is the current outer position, inside both layouts.
        unsafe {
            match (&plan.tile, plan.block) {
                (Some(t), _) => tile(op, plan, t, part, pc, pa),
                (None, None) => {
                    let u = part.outer[part.outer.len() - 1];
                    op.line(u.n, pc, u.sc, pa, u.sa);
                }
                (None, Some(b)) => {
                    let [v, w, u] = [0, 1, 2].map(|i| part.outer[part.outer.len() - 3 + i]);
                    for vb in (0..v.n).step_by(b) {
                        for wb in (0..w.n).step_by(b) {
                            for iv in vb..(vb + b).min(v.n) {
                                for iw in wb..(wb + b).min(w.n) {
                                    let (iv, iw) = (iv as isize, iw as isize);
                                    let qc = pc.offset(iv * v.sc + iw * w.sc);
                                    let qa = pa.offset(iv * v.sa + iw * w.sa);
                                    op.line(u.n, qc, u.sc, qa, u.sa);
                                }
                            }
                        }
                    }
                }
            }
        }
        // advance the odometer (last outer axis fastest)
        let mut k = outer.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            // SAFETY: stepping within (or, on wrap, back to the start of) axis k.
            unsafe {
                if idx[k] < outer[k].n {
                    pc = pc.offset(outer[k].sc);
                    pa = pa.offset(outer[k].sa);
                    break;
                }
                let back = (outer[k].n - 1) as isize;
                pc = pc.offset(-back * outer[k].sc);
                pa = pa.offset(-back * outer[k].sa);
            }
            idx[k] = 0;
        }
    }
}

/// Scratch of the buffered tile: 64-byte rows (one register tile row), 16 KiB in all.
#[repr(C, align(64))]
struct TileBuffer([u8; 16 << 10]);

/// The inner tile at outer position `(c, a)`, rows `part.v`, columns `part.u`.
unsafe fn tile<TA: Copy, TC: Copy, O: Op<TA, TC>>(
    op: &O,
    plan: &Plan,
    t: &Tile,
    part: &Part,
    c: *mut TC,
    a: *const TA,
) {
    let ((v0, v1), (u0, u1)) = (part.v, part.u);
    let (a_rows, c_rows) = (&t.a_rows[u0..u1], &t.c_rows[v0..v1]);
    // SAFETY (whole body): all positions are (v, u) within the tile, inside both layouts.
    unsafe {
        let src = a.offset(v0 as isize * t.v_sa);
        let dst = c.offset(u0 as isize * t.u_sc);
        if !t.unit {
            // single axes: C's rows along u with stride u_sc, A's along u with stride u_sa
            const B: usize = 16;
            for vb in (0..c_rows.len()).step_by(B) {
                for ub in (0..a_rows.len()).step_by(B) {
                    let nu = B.min(a_rows.len() - ub);
                    for (v, &cr) in c_rows.iter().enumerate().take(vb + B).skip(vb) {
                        let pc = dst.offset(cr + ub as isize * t.u_sc);
                        let pa = src.offset(a_rows[ub] + v as isize * t.v_sa);
                        op.line(nu, pc, t.u_sc, pa, t.u_sa);
                    }
                }
            }
        } else if op.is_copy() {
            // TA and TC are the same type here (`is_copy`).
            transpose::transpose(
                src.cast::<TC>(),
                a_rows,
                dst,
                c_rows,
                plan.stream,
                plan.simd,
            );
        } else {
            let rows = (64 / size_of::<TA>()).max(1);
            let cols = size_of::<TileBuffer>() / (rows * size_of::<TA>());
            let buf_rows: SmallVec<[isize; 16]> = (0..rows).map(|j| (j * cols) as isize).collect();
            let mut buf = std::mem::MaybeUninit::<TileBuffer>::uninit();
            let b = buf.as_mut_ptr().cast::<TA>();
            for vb in (0..c_rows.len()).step_by(rows) {
                let nv = rows.min(c_rows.len() - vb);
                for ub in (0..a_rows.len()).step_by(cols) {
                    let nu = cols.min(a_rows.len() - ub);
                    let s = src.add(vb);
                    transpose::transpose(
                        s,
                        &a_rows[ub..ub + nu],
                        b,
                        &buf_rows[..nv],
                        false,
                        plan.simd,
                    );
                    for j in 0..nv {
                        op.line(
                            nu,
                            dst.offset(c_rows[vb + j] + ub as isize),
                            1,
                            b.add(j * cols),
                            1,
                        );
                    }
                }
            }
        }
    }
}
