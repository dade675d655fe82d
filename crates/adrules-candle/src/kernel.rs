//! The primal of each primitive, `α·op(…)` into a fresh tensor, written once on candle's
//! storage layer ([`BackendStorage`]): the forward of every custom op on CUDA and Metal (the
//! CPU uses the strided kernels of [`crate::cpu`]; this code is tested against them on CPU
//! storage).
//!
//! Inputs are read through their [`Layout`] (any strides, any offset, broadcast strides
//! included) without a copy wherever candle's kernels allow it:
//! - permuted add: one strided pass (`copy_strided_src`, or `affine` when `α ≠ 1`);
//! - trace (generalized: diagonals, traces, hypertraces, sums; see [`TraceSpec`]): the
//!   diagonal of every group of A's axes is itself one axis of a strided view (its stride is
//!   the sum of the group's strides: `stride[i] + stride[j]` for a pair), kept groups in
//!   output order, then the summed groups; one `reduce_op` sums the latter (a strided copy
//!   when nothing is summed);
//! - contraction (batched; see [`ContractSpec`]): TTGT (transpose–transpose–GEMM–transpose)
//!   as one batched GEMM of `L = Π dims(batch)` products of `m × k` and `k × n` matrices. An
//!   operand is passed to the GEMM as it is when its batch axes flatten to one stride and its
//!   axes, in `(open, contracted)` or `(contracted, open)` order, are row-major contiguous
//!   within a batch (a batch of plain or transposed matrices); otherwise it is copied once
//!   into `(batch, rows, cols)` order. The GEMM's `(L, m, n)` result is the intermediate
//!   `(batch…, open_a…, open_b…)`; when the output order is `(batch…, open_b…, open_a…)` the
//!   GEMM computes `Cᵀ = Bᵀ·Aᵀ` per batch index directly; otherwise the output is permuted
//!   by `perm_ab` (with `α` fused into that pass) unless `perm_ab` is the identity.
//!
//! Mixed dtypes are cast to the computation dtype first (a contiguous copy).

use adrules_core::rules::Primitive;
use adrules_core::{ContractSpec, Error, TraceSpec};
use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::ReduceOp;
use candle_core::{DType, Layout, Result, Shape};

use crate::convert::to_candle;

/// Device storage whose device allocates storage of the same type (every candle backend).
pub(crate) trait Storage: BackendStorage<Device: BackendDevice<Storage = Self>> {}
impl<S: BackendStorage<Device: BackendDevice<Storage = S>>> Storage for S {}

/// Storage that is either the caller's (borrowed) or a temporary we made (a cast or a copy).
enum Held<'a, S> {
    Borrowed(&'a S),
    Owned(S),
}

/// Storage plus the layout to read it through.
pub(crate) struct View<'a, S> {
    storage: Held<'a, S>,
    /// how to read the storage
    pub(crate) layout: Layout,
}

impl<S> View<'_, S> {
    /// The storage.
    pub(crate) fn storage(&self) -> &S {
        match &self.storage {
            Held::Borrowed(s) => s,
            Held::Owned(s) => s,
        }
    }
}

/// `s` read through `l`, cast to `dtype` when it differs (a contiguous copy).
pub(crate) fn cast<'a, S: Storage>(s: &'a S, l: &Layout, dtype: DType) -> Result<View<'a, S>> {
    if s.dtype() == dtype {
        Ok(View {
            storage: Held::Borrowed(s),
            layout: l.clone(),
        })
    } else {
        Ok(View {
            storage: Held::Owned(s.to_dtype(l, dtype)?),
            layout: Layout::contiguous(l.shape().clone()),
        })
    }
}

/// `α·s` read through `l` (any strides), written to fresh contiguous storage in one pass.
fn scaled_copy<S: Storage>(s: &S, l: &Layout, alpha: f64) -> Result<S> {
    if alpha == 1.0 {
        // SAFETY: `copy_strided_src` writes every element of the fresh buffer, whose shape is
        // the shape of `l`, before anything reads it.
        let mut dst = unsafe { s.device().alloc_uninit(l.shape(), s.dtype())? };
        s.copy_strided_src(&mut dst, 0, l)?;
        Ok(dst)
    } else {
        s.affine(l, alpha, 0.0)
    }
}

/// Fresh zeros of `dims` on the device of `s`.
fn zeros<S: Storage>(s: &S, dims: Vec<usize>, dtype: DType) -> Result<(S, Shape)> {
    let shape = Shape::from(dims);
    Ok((s.device().zeros_impl(&shape, dtype)?, shape))
}

/// [`Error::CountMismatch`] for `n` operands given to `prim` (the forwards are only built
/// internally, so this is a guard, not a user error).
pub(crate) fn count_error(prim: &Primitive, n: usize) -> Error {
    Error::CountMismatch {
        arg: "operands".into(),
        expected: prim.arity(),
        actual: n,
    }
}

/// `α·op(operands)` of one primitive call (β ignored: a fresh output) in `dtype`, the
/// operands in input order.
pub(crate) fn forward<S: Storage>(
    prim: &Primitive,
    x: &[(&S, &Layout)],
    dtype: DType,
) -> Result<(S, Shape)> {
    let alpha = prim.alpha().re();
    match (prim, x) {
        (Primitive::Add(o), &[(a, la)]) => add(a, la, o.perm.as_slice(), alpha, dtype),
        (Primitive::Trace(o), &[(a, la)]) => trace(a, la, &o.spec, alpha, dtype),
        (Primitive::Contract(o), &[a, b]) => contract(a, b, &o.spec, alpha, dtype),
        _ => Err(to_candle(count_error(prim, x.len()))),
    }
}

/// Permuted add `α·P_p(A)` in `dtype`.
fn add<S: Storage>(
    a: &S,
    la: &Layout,
    perm: &[usize],
    alpha: f64,
    dtype: DType,
) -> Result<(S, Shape)> {
    let a = cast(a, la, dtype)?;
    let lp = a.layout.permute(perm)?;
    Ok((scaled_copy(a.storage(), &lp, alpha)?, lp.shape().clone()))
}

/// Generalized trace `α·Σ_summed diag_kept(A)` in `dtype`: the diagonal of every group of
/// axes is one axis of a strided view of A (its stride the sum of the group's strides), kept
/// groups first in output order, then the summed groups, which one `reduce_op` sums.
fn trace<S: Storage>(
    a: &S,
    la: &Layout,
    spec: &TraceSpec,
    alpha: f64,
    dtype: DType,
) -> Result<(S, Shape)> {
    if let Some(p) = spec.as_permutation() {
        return add(a, la, p.as_slice(), alpha, dtype);
    }
    let a = cast(a, la, dtype)?;
    let (dims, strides) = (a.layout.dims(), a.layout.stride());
    let out: Vec<usize> = spec.kept().iter().map(|g| dims[g[0]]).collect();
    if dims.contains(&0) {
        return zeros(a.storage(), out, dtype);
    }
    let (diag_dims, diag_strides): (Vec<usize>, Vec<usize>) = spec
        .kept()
        .iter()
        .chain(spec.summed())
        .map(|g| (dims[g[0]], g.iter().map(|&i| strides[i]).sum::<usize>()))
        .unzip();
    let diag = Layout::new(
        Shape::from(diag_dims),
        diag_strides,
        a.layout.start_offset(),
    );
    let shape = Shape::from(out);
    if spec.summed().is_empty() {
        // A diagonal without a sum: one strided pass.
        return Ok((scaled_copy(a.storage(), &diag, alpha)?, shape));
    }
    let summed: Vec<usize> = (spec.rank_c()..diag.dims().len()).collect();
    let s = a.storage().reduce_op(ReduceOp::Sum, &diag, &summed)?;
    let s = if alpha == 1.0 {
        s
    } else {
        s.affine(&Layout::contiguous(shape.clone()), alpha, 0.0)?
    };
    Ok((s, shape))
}

/// The single stride of a flattened batch of `dims` (axes of dimension 1 ignored) when the
/// axes nest like row-major ones, `None` otherwise; a batch of one element has stride
/// `fallback`. A zero stride is refused (candle's CPU GEMM folds a stride-0 right operand
/// into rows, which misreads a transposed left one).
fn batch_stride(dims: &[usize], strides: &[usize], fallback: usize) -> Option<usize> {
    let mut axes = dims.iter().zip(strides).rev().filter(|(d, _)| **d > 1);
    let Some((&d0, &s0)) = axes.next() else {
        return Some(fallback);
    };
    let mut next = s0 * d0;
    for (&d, &s) in axes {
        if s != next {
            return None;
        }
        next *= d;
    }
    (s0 > 0).then_some(s0)
}

/// `v`'s axes `batch`, `rows`, `cols` as an `l × r × c` batch of matrices the GEMM can read:
/// one batch stride over row-major or transposed matrices when the memory order allows it,
/// a contiguous copy otherwise.
fn matrices<'a, S: Storage>(
    v: View<'a, S>,
    [batch, rows, cols]: [&[usize]; 3],
    (l, r, c): (usize, usize, usize),
) -> Result<View<'a, S>> {
    let order: Vec<usize> = batch.iter().chain(rows).chain(cols).copied().collect();
    let lp = v.layout.permute(&order)?;
    let (nl, nr) = (batch.len(), batch.len() + rows.len());
    let (dims, strides) = (lp.dims(), lp.stride());
    let dense = |parts: [std::ops::Range<usize>; 2]| {
        let d: Vec<usize> = parts
            .iter()
            .flat_map(|p| dims[p.clone()].to_vec())
            .collect();
        let s: Vec<usize> = parts
            .iter()
            .flat_map(|p| strides[p.clone()].to_vec())
            .collect();
        Shape::from(d).is_contiguous(&s)
    };
    let n = dims.len();
    if let Some(sl) = batch_stride(&dims[..nl], &strides[..nl], r * c) {
        let matrix = if dense([nl..nr, nr..n]) {
            Some(vec![sl, c, 1])
        } else if dense([nr..n, nl..nr]) {
            Some(vec![sl, 1, r])
        } else {
            None
        };
        if let Some(s) = matrix {
            let layout = Layout::new(Shape::from((l, r, c)), s, lp.start_offset());
            return Ok(View {
                storage: v.storage,
                layout,
            });
        }
    }
    Ok(View {
        storage: Held::Owned(scaled_copy(v.storage(), &lp, 1.0)?),
        layout: Layout::contiguous((l, r, c)),
    })
}

/// Pairwise (batched) contraction `α·P_pAB(A·B)` in `dtype` (TTGT): one batched GEMM of
/// `L = Π batch dims` products.
fn contract<S: Storage>(
    (a, la): (&S, &Layout),
    (b, lb): (&S, &Layout),
    spec: &ContractSpec,
    alpha: f64,
    dtype: DType,
) -> Result<(S, Shape)> {
    let (a, b) = (cast(a, la, dtype)?, cast(b, lb, dtype)?);
    let (da, db) = (a.layout.dims(), b.layout.dims());
    let size = |d: &[usize], axes: &[usize]| axes.iter().map(|&i| d[i]).product::<usize>();
    let (l, m, k, n) = (
        size(da, spec.batch_a()),
        size(da, spec.open_a()),
        size(da, spec.contr_a()),
        size(db, spec.open_b()),
    );
    let inter: Vec<usize> = spec
        .batch_a()
        .iter()
        .chain(spec.open_a())
        .map(|&i| da[i])
        .chain(spec.open_b().iter().map(|&j| db[j]))
        .collect();
    let perm = spec.perm_ab();
    if l == 0 || m == 0 || n == 0 || k == 0 {
        return zeros(a.storage(), perm.apply(&inter).to_vec(), dtype);
    }
    let lo = Layout::contiguous(inter).permute(perm.as_slice())?;
    let shape = lo.shape().clone();
    let (nl, na, nb) = (spec.num_batch(), spec.open_a().len(), spec.open_b().len());
    // Output order (batch…, open_b…, open_a…): compute Cᵀ = Bᵀ·Aᵀ per batch index, which is
    // already in that order.
    let swapped = na > 0 && nb > 0 && {
        let p = perm.as_slice();
        (0..nl).all(|i| p[i] == i)
            && (0..nb).all(|i| p[nl + i] == nl + na + i)
            && (0..na).all(|i| p[nl + nb + i] == nl + i)
    };
    let (ba, bb) = (spec.batch_a(), spec.batch_b());
    let out = if swapped {
        let bt = matrices(b, [bb, spec.open_b(), spec.contr_b()], (l, n, k))?;
        let at = matrices(a, [ba, spec.contr_a(), spec.open_a()], (l, k, m))?;
        let prod = bt
            .storage()
            .matmul(at.storage(), (l, n, m, k), &bt.layout, &at.layout)?;
        if alpha == 1.0 {
            prod
        } else {
            prod.affine(&Layout::contiguous(shape.clone()), alpha, 0.0)?
        }
    } else {
        let a = matrices(a, [ba, spec.open_a(), spec.contr_a()], (l, m, k))?;
        let b = matrices(b, [bb, spec.contr_b(), spec.open_b()], (l, k, n))?;
        let prod = a
            .storage()
            .matmul(b.storage(), (l, m, n, k), &a.layout, &b.layout)?;
        if perm.is_identity() && alpha == 1.0 {
            prod
        } else {
            scaled_copy(&prod, &lo, alpha)?
        }
    };
    Ok((out, shape))
}
