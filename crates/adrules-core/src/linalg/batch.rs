//! Host-side batching shared by the decompositions: batches of row-major matrices to and
//! from faer matrices, dtype dispatch, and the finiteness check of outputs.

use faer::{Mat, MatRef};

use crate::error::{Error, Result};
use crate::host::{HostData, HostTensor};
use crate::scalar::{DType, ImplicitScalar, Scalar};

/// Calls `$f::<T>($args)` for the element type `T` of `$dtype`.
macro_rules! by_dtype {
    ($dtype:expr, $f:ident :: < $($g:ty),+ > ( $($arg:expr),* $(,)? )) => {
        match $dtype {
            $crate::scalar::DType::F32 => $f::<$($g,)+ f32>($($arg),*),
            $crate::scalar::DType::F64 => $f::<$($g,)+ f64>($($arg),*),
            $crate::scalar::DType::C32 => $f::<$($g,)+ $crate::scalar::Complex32>($($arg),*),
            $crate::scalar::DType::C64 => $f::<$($g,)+ $crate::scalar::Complex64>($($arg),*),
        }
    };
    ($dtype:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $dtype {
            $crate::scalar::DType::F32 => $f::<f32>($($arg),*),
            $crate::scalar::DType::F64 => $f::<f64>($($arg),*),
            $crate::scalar::DType::C32 => $f::<$crate::scalar::Complex32>($($arg),*),
            $crate::scalar::DType::C64 => $f::<$crate::scalar::Complex64>($($arg),*),
        }
    };
}
pub(crate) use by_dtype;

/// The `(batch, m, n)` split of a shape of rank ≥ 2.
pub(crate) fn matrix_dims(dims: &[usize], arg: &str) -> Result<(Vec<usize>, usize, usize)> {
    if dims.len() < 2 {
        return Err(Error::RankMismatch {
            arg: arg.into(),
            expected: 2,
            actual: dims.len(),
        });
    }
    let r = dims.len();
    Ok((dims[..r - 2].to_vec(), dims[r - 2], dims[r - 1]))
}

/// Splits a host tensor `[batch…, m, n]` of dtype `T` into faer matrices, in row-major
/// batch order. Non-finite entries
/// are an [`Error::InvalidArgument`] naming `arg` when `finite` is asked for.
pub(crate) fn split<T: ImplicitScalar>(
    h: &HostTensor,
    arg: &str,
    finite: bool,
) -> Result<Vec<Mat<T>>> {
    let views = Views::<T>::new(h, arg)?;
    if finite {
        views.check_finite(arg)?;
    }
    let (m, n) = (views.rows, views.cols);
    Ok((0..views.count)
        .map(|b| {
            let block = views.block(b);
            Mat::from_fn(m, n, |i, j| block[i * n + j])
        })
        .collect())
}

/// The matrices of a host tensor `[batch…, m, n]` of dtype `T`, in row-major batch order,
/// as row-major faer views of its buffer: [`split`] without the copies.
#[derive(Clone, Copy)]
pub(crate) struct Views<'a, T> {
    data: &'a [T],
    /// number of matrices
    pub(crate) count: usize,
    rows: usize,
    cols: usize,
}

impl<'a, T: ImplicitScalar> Views<'a, T> {
    /// The views of `h`, whose dtype must be `T` ([`Error::DTypeMismatch`] naming `arg`).
    pub(crate) fn new(h: &'a HostTensor, arg: &str) -> Result<Self> {
        let (batch, rows, cols) = matrix_dims(h.dims(), arg)?;
        let data = h.as_slice::<T>().map_err(|_| Error::DTypeMismatch {
            arg: arg.into(),
            expected: T::DTYPE.to_string(),
            actual: h.dtype(),
        })?;
        Ok(Views {
            data,
            count: batch.iter().product(),
            rows,
            cols,
        })
    }

    /// [`Views::new`] of an optional tensor.
    pub(crate) fn of(h: Option<&'a HostTensor>, arg: &str) -> Result<Option<Self>> {
        h.map(|h| Self::new(h, arg)).transpose()
    }

    /// Matrix `b` (`b < count`), as a row-major view.
    pub(crate) fn get(&self, b: usize) -> MatRef<'a, T> {
        let len = self.rows * self.cols;
        MatRef::from_row_major_slice(&self.data[b * len..(b + 1) * len], self.rows, self.cols)
    }

    /// Matrix `b`'s entries in row-major order.
    pub(crate) fn block(&self, b: usize) -> &'a [T] {
        let len = self.rows * self.cols;
        &self.data[b * len..(b + 1) * len]
    }

    /// [`Error::InvalidArgument`] naming `arg` for the first non-finite entry, matrix by
    /// matrix.
    pub(crate) fn check_finite(&self, arg: &str) -> Result<()> {
        let n = self.cols;
        for b in 0..self.count {
            let block = self.block(b);
            if let Some(p) = block.iter().position(|x| !Scalar::is_finite(*x)) {
                return Err(Error::invalid(
                    arg,
                    format!(
                        "entry ({}, {}) of matrix {b} is not finite ({:?})",
                        p / n,
                        p % n,
                        block[p]
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A `rows × cols` matrix of a per-matrix routine's output, already in row-major order (the
/// layout of host tensors): written in place, by a product into [`RowMajor::as_mut`] or
/// entry by entry ([`RowMajor::from_fn`]), instead of formed as a faer matrix and copied out
/// by [`join`].
pub(crate) struct RowMajor<T> {
    data: Vec<T>,
    rows: usize,
    cols: usize,
}

impl<T: ImplicitScalar> RowMajor<T> {
    /// Zeros.
    pub(crate) fn zeros(rows: usize, cols: usize) -> Self {
        RowMajor {
            data: vec![T::zero(); rows * cols],
            rows,
            cols,
        }
    }

    /// Entry `(i, j)` is `f(i, j)`, filled row by row.
    pub(crate) fn from_fn(rows: usize, cols: usize, mut f: impl FnMut(usize, usize) -> T) -> Self {
        let mut data = Vec::with_capacity(rows * cols);
        for i in 0..rows {
            for j in 0..cols {
                data.push(f(i, j));
            }
        }
        RowMajor { data, rows, cols }
    }

    /// A copy of `x`.
    pub(crate) fn copy_of(x: MatRef<'_, T>) -> Self {
        Self::from_fn(x.nrows(), x.ncols(), |i, j| x[(i, j)])
    }

    /// The matrix, as a row-major faer view, to write into.
    pub(crate) fn as_mut(&mut self) -> faer::MatMut<'_, T> {
        faer::MatMut::from_row_major_slice_mut(&mut self.data, self.rows, self.cols)
    }
}

/// Concatenates `rows × cols` row-major matrices into a host tensor `[batch…, rows, cols]`,
/// the output `arg` (moving the buffer of a single matrix): [`join`] for [`RowMajor`].
///
/// # Errors
/// [`Error::NonFinite`] naming `arg` for a non-finite entry.
pub(crate) fn join_rows<T: ImplicitScalar>(
    arg: &str,
    batch: &[usize],
    rows: usize,
    cols: usize,
    mats: Vec<RowMajor<T>>,
) -> Result<HostTensor> {
    for (b, a) in mats.iter().enumerate() {
        debug_assert_eq!((a.rows, a.cols), (rows, cols));
        if let Some(p) = a.data.iter().position(|x| !Scalar::is_finite(*x)) {
            let at = format!("entry ({}, {}) of matrix {b}", p / cols, p % cols);
            return Err(non_finite(arg, at, format!("{:?}", a.data[p]), T::DTYPE));
        }
    }
    let data = if mats.len() == 1 {
        mats.into_iter().next().map(|a| a.data).unwrap_or_default()
    } else {
        let mut data = Vec::with_capacity(mats.len() * rows * cols);
        for a in &mats {
            data.extend_from_slice(&a.data);
        }
        data
    };
    let mut dims = batch.to_vec();
    dims.extend([rows, cols]);
    HostTensor::from_vec(&dims, data)
}

/// The output `arg` is not finite: the rules check their inputs for finite entries, so
/// this is an overflow of the true result beyond the range of `dtype`.
fn non_finite(arg: &str, at: String, value: String, dtype: DType) -> Error {
    Error::NonFinite {
        arg: arg.to_string(),
        reason: format!(
            "{at} is {value} although every input is finite: the result is beyond the range of \
             {dtype}"
        ),
    }
}

/// Gathers `rows × cols` matrices into a host tensor `[batch…, rows, cols]`, the output
/// `arg` of a decomposition or rule.
///
/// # Errors
/// [`Error::NonFinite`] naming `arg` for a non-finite entry.
pub(crate) fn join<T: ImplicitScalar>(
    arg: &str,
    batch: &[usize],
    rows: usize,
    cols: usize,
    mats: &[Mat<T>],
) -> Result<HostTensor> {
    let mut data = Vec::with_capacity(mats.len() * rows * cols);
    for (b, a) in mats.iter().enumerate() {
        debug_assert_eq!(a.shape(), (rows, cols));
        for i in 0..rows {
            for j in 0..cols {
                let x = a[(i, j)];
                if !Scalar::is_finite(x) {
                    let at = format!("entry ({i}, {j}) of matrix {b}");
                    return Err(non_finite(arg, at, format!("{x:?}"), T::DTYPE));
                }
                data.push(x);
            }
        }
    }
    let mut dims = batch.to_vec();
    dims.extend([rows, cols]);
    HostTensor::from_vec(&dims, data)
}

/// Gathers real vectors of length `len` into a host tensor `[batch…, len]` of dtype
/// `dtype` (a real dtype), the output `arg`.
///
/// # Errors
/// [`Error::NonFinite`] naming `arg` for an entry that is not finite in `dtype`.
pub(crate) fn join_real(
    arg: &str,
    batch: &[usize],
    len: usize,
    vecs: &[Vec<f64>],
    dtype: DType,
) -> Result<HostTensor> {
    let data: Vec<f64> = vecs.iter().flat_map(|v| v.iter().copied()).collect();
    let max = if dtype == DType::F32 {
        f32::MAX as f64
    } else {
        f64::MAX
    };
    if let Some(p) = data.iter().position(|x| !x.is_finite() || x.abs() > max) {
        let at = format!("entry {p} (row-major)");
        return Err(non_finite(arg, at, format!("{:e}", data[p]), dtype));
    }
    let mut dims = batch.to_vec();
    dims.push(len);
    Ok(HostTensor::new(&dims, HostData::F64(data))?.to_dtype_projected(dtype))
}

/// Splits a real host tensor `[batch…, len]` into vectors.
pub(crate) fn split_real(h: &HostTensor, len: usize) -> Vec<Vec<f64>> {
    let v = h.data().to_c64_vec();
    if len == 0 {
        let count: usize = h.dims()[..h.dims().len() - 1].iter().product();
        return vec![Vec::new(); count];
    }
    v.chunks(len)
        .map(|c| c.iter().map(|z| z.re).collect())
        .collect()
}
