//! The primal of each primitive, `α·op(…)` into a fresh tensor, written once on candle's
//! storage layer ([`BackendStorage`]): the forward of every custom op on CUDA and Metal (the
//! CPU uses the strided kernels of [`crate::cpu`]; this code is tested against them on CPU
//! storage).
//!
//! Inputs are read through their [`Layout`] (any strides, any offset, broadcast strides
//! included) without a copy wherever candle's kernels allow it:
//! - permuted add: one strided pass (`copy_strided_src`, or `affine` when `α ≠ 1`);
//! - trace: the diagonal of the traced pairs is itself a strided view (axis `k` of the
//!   diagonal has stride `stride[q1[k]] + stride[q2[k]]`), summed by one `reduce_op`;
//! - contraction: TTGT (transpose–transpose–GEMM–transpose). An operand is passed to the GEMM
//!   as it is when its axes, in `(open, contracted)` or `(contracted, open)` order, are already
//!   row-major contiguous (a plain or a transposed matrix); otherwise it is copied once. When
//!   the output order is `(open_b…, open_a…)` the GEMM computes `Cᵀ = Bᵀ·Aᵀ` directly;
//!   otherwise the output is permuted (with `α` fused into that pass) unless `perm_ab` is the
//!   identity.
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

/// Partial trace `α·P_p(tr_{q1,q2} A)` in `dtype`.
fn trace<S: Storage>(
    a: &S,
    la: &Layout,
    spec: &TraceSpec,
    alpha: f64,
    dtype: DType,
) -> Result<(S, Shape)> {
    if spec.q1().is_empty() {
        return add(a, la, spec.p(), alpha, dtype);
    }
    let a = cast(a, la, dtype)?;
    let (dims, strides) = (a.layout.dims(), a.layout.stride());
    let out: Vec<usize> = spec.p().iter().map(|&i| dims[i]).collect();
    if dims.contains(&0) {
        return zeros(a.storage(), out, dtype);
    }
    let diag_dims: Vec<usize> = out
        .iter()
        .copied()
        .chain(spec.q1().iter().map(|&i| dims[i]))
        .collect();
    let diag_strides: Vec<usize> = spec
        .p()
        .iter()
        .map(|&i| strides[i])
        .chain(
            spec.q1()
                .iter()
                .zip(spec.q2())
                .map(|(&i, &j)| strides[i] + strides[j]),
        )
        .collect();
    let diag = Layout::new(
        Shape::from(diag_dims),
        diag_strides,
        a.layout.start_offset(),
    );
    let summed: Vec<usize> = (out.len()..out.len() + spec.q1().len()).collect();
    let s = a.storage().reduce_op(ReduceOp::Sum, &diag, &summed)?;
    let shape = Shape::from(out);
    let s = if alpha == 1.0 {
        s
    } else {
        s.affine(&Layout::contiguous(shape.clone()), alpha, 0.0)?
    };
    Ok((s, shape))
}

/// `v`'s axes `rows` then `cols` as an `r × c` matrix the GEMM can read: a row-major or a
/// transposed view when the memory order allows it, a contiguous copy otherwise.
fn matrix<'a, S: Storage>(
    v: View<'a, S>,
    rows: &[usize],
    cols: &[usize],
    r: usize,
    c: usize,
) -> Result<View<'a, S>> {
    let order: Vec<usize> = rows.iter().chain(cols).copied().collect();
    let lp = v.layout.permute(&order)?;
    let offset = lp.start_offset();
    if lp.is_contiguous() {
        return Ok(View {
            storage: v.storage,
            layout: Layout::new(Shape::from((r, c)), vec![c, 1], offset),
        });
    }
    let order_t: Vec<usize> = cols.iter().chain(rows).copied().collect();
    if v.layout.permute(&order_t)?.is_contiguous() {
        return Ok(View {
            storage: v.storage,
            layout: Layout::new(Shape::from((r, c)), vec![1, r], offset),
        });
    }
    Ok(View {
        storage: Held::Owned(scaled_copy(v.storage(), &lp, 1.0)?),
        layout: Layout::contiguous((r, c)),
    })
}

/// Pairwise contraction `α·P_pAB(A·B)` in `dtype` (TTGT).
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
    let (m, k, n) = (
        size(da, spec.open_a()),
        size(da, spec.contr_a()),
        size(db, spec.open_b()),
    );
    let inter: Vec<usize> = spec
        .open_a()
        .iter()
        .map(|&i| da[i])
        .chain(spec.open_b().iter().map(|&j| db[j]))
        .collect();
    let perm = spec.perm_ab();
    if m == 0 || n == 0 || k == 0 {
        return zeros(a.storage(), perm.apply(&inter).to_vec(), dtype);
    }
    let lo = Layout::contiguous(inter).permute(perm.as_slice())?;
    let shape = lo.shape().clone();
    let (na, nb) = (spec.open_a().len(), spec.open_b().len());
    // Output order (open_b…, open_a…): compute Cᵀ = Bᵀ·Aᵀ, which is already in that order.
    let swapped = na > 0 && nb > 0 && {
        let p = perm.as_slice();
        (0..nb).all(|i| p[i] == na + i) && (0..na).all(|i| p[nb + i] == i)
    };
    let out = if swapped {
        let bt = matrix(b, spec.open_b(), spec.contr_b(), n, k)?;
        let at = matrix(a, spec.contr_a(), spec.open_a(), k, m)?;
        let ba = bt
            .storage()
            .matmul(at.storage(), (1, n, m, k), &bt.layout, &at.layout)?;
        if alpha == 1.0 {
            ba
        } else {
            ba.affine(&Layout::contiguous(shape.clone()), alpha, 0.0)?
        }
    } else {
        let a = matrix(a, spec.open_a(), spec.contr_a(), m, k)?;
        let b = matrix(b, spec.contr_b(), spec.open_b(), k, n)?;
        let ab = a
            .storage()
            .matmul(b.storage(), (1, m, n, k), &a.layout, &b.layout)?;
        if perm.is_identity() && alpha == 1.0 {
            ab
        } else {
            scaled_copy(&ab, &lo, alpha)?
        }
    };
    Ok((out, shape))
}
