//! Batched contractions: one unbatched contraction per batch index on views of the slices,
//! or, for tiny slices, direct loops over precomputed offsets.

use super::*;

/// The axes of an operand of rank `rank` other than `batch`, in increasing order, and the
/// position of each old axis among them.
fn unbatched_axes(rank: usize, batch: &[usize]) -> (Axes, Axes) {
    let rest: Axes = (0..rank).filter(|i| !batch.contains(i)).collect();
    let mut pos: Axes = SmallVec::from_elem(usize::MAX, rank);
    for (n, &i) in rest.iter().enumerate() {
        pos[i] = n;
    }
    (rest, pos)
}

/// A batched contraction as one unbatched contraction per batch index, on slices of A, B and
/// C that are views into them (no copy), or, when each slice is tiny (at most
/// [`SMALL_SLICE_FLOPS`] multiply-adds: Hadamard products, row-wise dots), as direct loops: the slice plans see the same strides, so an operand
/// that is a matrix in place stays one in every slice. Slices run on the rayon pool when there
/// are several and each is too small for GEMM's own parallelism.
#[allow(clippy::too_many_arguments)]
pub(super) fn contract_batched<TA: Element, TB: Element, TC: Element>(
    c: &mut StridedViewMut<'_, TC>,
    a: &StridedView<'_, TA>,
    b: &StridedView<'_, TB>,
    spec: &ContractSpec,
    conj_a: Conj,
    conj_b: Conj,
    alpha: TC,
    beta: TC,
) -> Result<()> {
    let nl = spec.num_batch();
    let c_batch = c_batch_axes(spec);
    let (rest_a, pos_a) = unbatched_axes(a.rank(), spec.batch_a());
    let (rest_b, pos_b) = unbatched_axes(b.rank(), spec.batch_b());
    let (rest_c, _) = unbatched_axes(c.rank(), &c_batch);
    let map = |axes: &[usize], pos: &Axes| -> Axes { axes.iter().map(|&i| pos[i]).collect() };
    let perm: Axes = rest_c
        .iter()
        .map(|&m| spec.perm_ab().as_slice()[m] - nl)
        .collect();
    let sub = ContractSpec::new(
        &map(spec.open_a(), &pos_a),
        &map(spec.contr_a(), &pos_a),
        &map(spec.contr_b(), &pos_b),
        &map(spec.open_b(), &pos_b),
        &perm,
    )?;
    let (da, sa) = (pick(a.dims(), &rest_a), picks(a.strides(), &rest_a));
    let (db, sb) = (pick(b.dims(), &rest_b), picks(b.strides(), &rest_b));
    let (dc, sc) = (pick(c.dims(), &rest_c), picks(c.strides(), &rest_c));
    let batch: Dims = pick(a.dims(), spec.batch_a());
    let (la, lb, lc) = (
        picks(a.strides(), spec.batch_a()),
        picks(b.strides(), spec.batch_b()),
        picks(c.strides(), &c_batch),
    );
    let k: usize = spec.contr_a().iter().map(|&i| a.dims()[i]).product();
    let flops = dc.iter().product::<usize>().saturating_mul(k);
    if flops <= SMALL_SLICE_FLOPS {
        let sip = sub.perm_ab().inverse();
        let na = sub.open_a().len();
        let c_of = |x: usize| sc[sip.as_slice()[x]];
        let ms = offsets2(
            &pick(&da, sub.open_a()),
            &picks(&sa, sub.open_a()),
            &(0..na).map(c_of).collect::<Strides>(),
        );
        let ns = offsets2(
            &pick(&db, sub.open_b()),
            &picks(&sb, sub.open_b()),
            &(0..sub.open_b().len())
                .map(|x| c_of(na + x))
                .collect::<Strides>(),
        );
        let ks = offsets2(
            &pick(&da, sub.contr_a()),
            &picks(&sa, sub.contr_a()),
            &picks(&sb, sub.contr_b()),
        );
        // SAFETY: every offset is a multi-index of the views' own shapes under their strides;
        // C is exclusively borrowed and disjoint from A and B (checked by the backend).
        unsafe {
            run_small(
                c.as_mut_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                (&batch, [&la, &lb, &lc]),
                [&ms, &ns, &ks],
                (conj_a, conj_b),
                alpha,
                beta,
            )
        };
        return Ok(());
    }
    let count: usize = batch.iter().product();
    let offsets = move |mut flat: usize| -> [isize; 3] {
        let mut o = [0isize; 3];
        for k in (0..batch.len()).rev() {
            let i = (flat % batch[k]) as isize;
            flat /= batch[k];
            o[0] += i * la[k];
            o[1] += i * lb[k];
            o[2] += i * lc[k];
        }
        o
    };
    let (pa, pb, pc) = (
        Ptr(a.as_ptr().cast_mut()),
        Ptr(b.as_ptr().cast_mut()),
        Ptr(c.as_mut_ptr()),
    );
    let one = |s: usize| -> Result<()> {
        let (pa, pb, pc) = (pa, pb, pc);
        let [oa, ob, oc] = offsets(s);
        // SAFETY: slice `s` of each operand is a sub-view of its (valid) view; the C slices of
        // distinct batch indices are disjoint, and C is exclusively borrowed and disjoint from
        // A and B.
        let (av, bv, mut cv) = unsafe {
            (
                StridedView::from_raw(pa.0.wrapping_offset(oa).cast_const(), &da, &sa),
                StridedView::from_raw(pb.0.wrapping_offset(ob).cast_const(), &db, &sb),
                StridedViewMut::from_raw(pc.0.wrapping_offset(oc), &dc, &sc),
            )
        };
        contract_impl(&mut cv, &av, &bv, &sub, conj_a, conj_b, alpha, beta)
    };
    let threads = rayon::current_num_threads();
    let threshold = PARALLEL_FLOPS[dtype_index(TC::DTYPE)];
    // Across slices only when each is too small for GEMM's own threads and all together are
    // worth a fork (64 attention slices of 2¹⁶ flops were slower on two threads than on one).
    if threads > 1 && count >= 2 && flops < threshold && flops.saturating_mul(count) >= threshold {
        use rayon::prelude::*;
        (0..count).into_par_iter().try_for_each(one)
    } else {
        (0..count).try_for_each(one)
    }
}

/// Largest per-slice product (`m·n·k`) run as direct loops instead of a GEMM call: below it,
/// planning and calling GEMM for every batch index costs more than the arithmetic (a Hadamard
/// product `ij,ij->ij` is one 1×1×1 product per element, a row-wise dot `bi,bi->b` one 1×1×k).
pub(super) const SMALL_SLICE_FLOPS: usize = 512;

/// A pair of element offsets (in two operands).
pub(super) type Offsets = (isize, isize);

/// The offsets under `s1` and `s2` of every multi-index of `dims`, row-major.
pub(super) fn offsets2(dims: &[usize], s1: &[isize], s2: &[isize]) -> Vec<Offsets> {
    let mut v = Vec::with_capacity(dims.iter().product());
    for_each_offset(dims, [s1, s2], |[x, y]| v.push((x, y)));
    v
}

/// A batched contraction of small slices as direct loops over precomputed offsets:
/// `C[l, i, j] ← β·C[l, i, j] + α·Σ_k op(A[l, i, k])·op(B[l, k, j])` (strong zero for β = 0).
///
/// # Safety
/// The offsets address elements of the views `a`, `b` (read) and `c` (written, distinct per
/// `(l, i, j)`), which is exclusively borrowed and disjoint from A and B.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run_small<TA: Element, TB: Element, TC: Element>(
    c: *mut TC,
    a: *const TA,
    b: *const TB,
    batch: (&[usize], [&[isize]; 3]),
    [ms, ns, ks]: [&[Offsets]; 3],
    (conj_a, conj_b): (Conj, Conj),
    alpha: TC,
    beta: TC,
) {
    let (dims, strides) = batch;
    let strong_zero = beta == TC::zero();
    let (ca, cb) = (conj_a.is_conj(), conj_b.is_conj());
    for_each_offset(dims, strides, |[oa, ob, oc]| {
        for &(am, cm) in ms {
            for &(bn, cn) in ns {
                let mut s = TC::zero();
                for &(ak, bk) in ks {
                    // SAFETY: in bounds by the caller's contract.
                    let (x, y) = unsafe { (*a.offset(oa + am + ak), *b.offset(ob + bn + bk)) };
                    let x: TC = convert(if ca { x.conj() } else { x });
                    let y: TC = convert(if cb { y.conj() } else { y });
                    s += x * y;
                }
                // SAFETY: a distinct element of C per (l, i, j).
                unsafe {
                    let z = c.offset(oc + cm + cn);
                    *z = if strong_zero {
                        alpha * s
                    } else {
                        beta * *z + alpha * s
                    };
                }
            }
        }
    });
}
