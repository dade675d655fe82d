//! The per-matrix driver of the decompositions and their rules: the batch over the leading
//! axes run one matrix at a time ([`per_matrix`]), each matrix's outputs gathered into host
//! tensors `[batch…, …]` (a [`RowMajor`] output, written in place, is moved, not copied);
//! the host copies of a rule's batched arguments ([`host_mats`], [`host_reals`]; or
//! [`host_matrices`], read in place through [`Views`](super::batch::Views)); and the
//! transfers of a fixed number of tensors ([`try_map`]). Each decomposition keeps only its
//! per-matrix maths.

use faer::Mat;

use super::batch::{RowMajor, join, join_real, join_rows, split, split_real};
use super::host_arg;
use crate::backend::Backend;
use crate::error::Result;
use crate::host::HostTensor;
use crate::scalar::ImplicitScalar;

/// One matrix's entry of an output of a per-matrix routine, and how the batch's entries are
/// gathered into a host tensor.
pub(crate) trait Entry<T>: Sized {
    /// The output's name (for errors) and the shape of one entry.
    type Spec: Copy;

    /// The entries, in row-major batch order, as one host tensor `[batch…, shape…]`.
    ///
    /// # Errors
    /// [`Error::NonFinite`](crate::Error::NonFinite) naming the output for a non-finite entry.
    fn gather(spec: Self::Spec, batch: &[usize], entries: Vec<Self>) -> Result<HostTensor>;
}

/// A `rows × cols` matrix of the element type: spec `(name, rows, cols)`, gathered by
/// [`join`] into `[batch…, rows, cols]`.
impl<T: ImplicitScalar> Entry<T> for Mat<T> {
    type Spec = (&'static str, usize, usize);

    fn gather(
        (name, rows, cols): Self::Spec,
        batch: &[usize],
        entries: Vec<Self>,
    ) -> Result<HostTensor> {
        join(name, batch, rows, cols, &entries)
    }
}

/// A `rows × cols` matrix written in row-major order: spec `(name, rows, cols)`, gathered by
/// [`join_rows`] into `[batch…, rows, cols]` (a single matrix's buffer moved, not copied).
impl<T: ImplicitScalar> Entry<T> for RowMajor<T> {
    type Spec = (&'static str, usize, usize);

    fn gather(
        (name, rows, cols): Self::Spec,
        batch: &[usize],
        entries: Vec<Self>,
    ) -> Result<HostTensor> {
        join_rows(name, batch, rows, cols, entries)
    }
}

/// A real vector (singular values, eigenvalues, their tangents): spec `(name, len)`,
/// gathered by [`join_real`] into `[batch…, len]` in the real dtype of `T`.
impl<T: ImplicitScalar> Entry<T> for Vec<f64> {
    type Spec = (&'static str, usize);

    fn gather((name, len): Self::Spec, batch: &[usize], entries: Vec<Self>) -> Result<HostTensor> {
        join_real(name, batch, len, &entries, T::DTYPE.real())
    }
}

/// The outputs of one matrix: one [`Entry`] (a matrix), or a tuple of them.
pub(crate) trait Outputs<T>: Sized {
    /// The specs of the entries, in the same order.
    type Specs;
    /// The gathered host tensors: one, or an array in the order of the entries.
    type Hosts;

    /// Gathers every matrix's outputs, output by output in order.
    ///
    /// # Errors
    /// The first of [`Entry::gather`]'s.
    fn gather(specs: Self::Specs, batch: &[usize], all: Vec<Self>) -> Result<Self::Hosts>;
}

impl<T: ImplicitScalar> Outputs<T> for Mat<T> {
    type Specs = <Mat<T> as Entry<T>>::Spec;
    type Hosts = HostTensor;

    fn gather(specs: Self::Specs, batch: &[usize], all: Vec<Self>) -> Result<HostTensor> {
        <Mat<T> as Entry<T>>::gather(specs, batch, all)
    }
}

impl<T: ImplicitScalar> Outputs<T> for RowMajor<T> {
    type Specs = <RowMajor<T> as Entry<T>>::Spec;
    type Hosts = HostTensor;

    fn gather(specs: Self::Specs, batch: &[usize], all: Vec<Self>) -> Result<HostTensor> {
        <RowMajor<T> as Entry<T>>::gather(specs, batch, all)
    }
}

/// `Outputs` for the tuple of `$n` entries `$e`, unzipped into the vectors `$v`.
macro_rules! tuple_outputs {
    ($n:literal; $($e:ident $x:ident $v:ident $s:ident),+) => {
        impl<T, $($e: Entry<T>),+> Outputs<T> for ($($e,)+) {
            type Specs = ($($e::Spec,)+);
            type Hosts = [HostTensor; $n];

            fn gather(
                ($($s,)+): Self::Specs,
                batch: &[usize],
                all: Vec<Self>,
            ) -> Result<[HostTensor; $n]> {
                $(let mut $v = Vec::with_capacity(all.len());)+
                for ($($x,)+) in all {
                    $($v.push($x);)+
                }
                Ok([$($e::gather($s, batch, $v)?),+])
            }
        }
    };
}

tuple_outputs!(2; E0 x0 v0 s0, E1 x1 v1 s1);
tuple_outputs!(3; E0 x0 v0 s0, E1 x1 v1 s1, E2 x2 v2 s2);
tuple_outputs!(4; E0 x0 v0 s0, E1 x1 v1 s1, E2 x2 v2 s2, E3 x3 v3 s3);

/// Runs `one(b)` for every matrix `b` of the batch `[batch…]` (row-major order), then gathers
/// the outputs into host tensors `[batch…, …]` with the shapes and names of `specs` (for a
/// tuple of outputs, a tuple of specs): the split → per-matrix → join of every
/// decomposition, its rules and their second order. `one` reads its inputs from host copies
/// split beforehand ([`split`], [`host_mats`], …) by `b`.
///
/// # Errors
/// The first error of `one`, in batch order (no output is gathered then; in a batch of more
/// than one matrix, a [`Error::GaugeIllDefined`](crate::Error::GaugeIllDefined) that does
/// not name its matrix gets the prefix `matrix b (row-major batch order): `); then those of
/// [`Entry::gather`] (a non-finite output), output by output.
pub(crate) fn per_matrix<T, O: Outputs<T>>(
    batch: &[usize],
    specs: O::Specs,
    mut one: impl FnMut(usize) -> Result<O>,
) -> Result<O::Hosts> {
    let count: usize = batch.iter().product();
    let all = (0..count)
        .map(|b| one(b).map_err(|e| in_matrix(e, b, count)))
        .collect::<Result<Vec<O>>>()?;
    O::gather(specs, batch, all)
}

/// Names matrix `b` of a batch of `count` in a gauge error that does not name it yet.
fn in_matrix(e: crate::Error, b: usize, count: usize) -> crate::Error {
    match e {
        crate::Error::GaugeIllDefined { arg, reason }
            if count > 1 && !reason.starts_with("matrix ") =>
        {
            crate::Error::GaugeIllDefined {
                arg,
                reason: format!("matrix {b} (row-major batch order): {reason}"),
            }
        }
        other => other,
    }
}

/// A rule's batched matrix argument (a cotangent or a tangent) on the host, one matrix per
/// entry of the batch: `[batch…, rows, cols]` as [`host_arg`] checks it (shape, finite
/// entries, a dtype that promotes to `T`'s), named `arg` in errors.
pub(crate) fn host_mats<B: Backend, T: ImplicitScalar>(
    be: &B,
    t: &B::Tensor,
    batch: &[usize],
    dims: [usize; 2],
    arg: &str,
) -> Result<Vec<Mat<T>>> {
    let h = host_matrices::<B, T>(be, t, batch, dims, arg)?;
    split::<T>(&h, arg, false)
}

/// [`host_mats`] without the copies into faer matrices: the checked host tensor
/// `[batch…, rows, cols]` of dtype `T`, to read through [`Views`](super::batch::Views).
pub(crate) fn host_matrices<B: Backend, T: ImplicitScalar>(
    be: &B,
    t: &B::Tensor,
    batch: &[usize],
    [rows, cols]: [usize; 2],
    arg: &str,
) -> Result<HostTensor> {
    let dims: Vec<usize> = batch.iter().copied().chain([rows, cols]).collect();
    host_arg(be, t, &dims, T::DTYPE, arg)
}

/// A rule's batched real vector argument (the cotangent of singular values or eigenvalues,
/// or its tangent) on the host, one vector per entry of the batch: `[batch…, len]` in the
/// real dtype of `T`, checked as [`host_arg`] does, named `arg` in errors.
pub(crate) fn host_reals<B: Backend, T: ImplicitScalar>(
    be: &B,
    t: &B::Tensor,
    batch: &[usize],
    len: usize,
    arg: &str,
) -> Result<Vec<Vec<f64>>> {
    let dims: Vec<usize> = batch.iter().copied().chain([len]).collect();
    let h = host_arg(be, t, &dims, T::DTYPE.real(), arg)?;
    Ok(split_real(&h, len))
}

/// `xs.map(f)` stopping at the first error, in order (the standard library's `try_map` is
/// unstable): the transfers of a decomposition's factors to and from the host.
///
/// # Errors
/// The first error of `f`.
pub(crate) fn try_map<X, Y, const N: usize>(
    xs: [X; N],
    f: impl FnMut(X) -> Result<Y>,
) -> Result<[Y; N]> {
    let ys = xs.into_iter().map(f).collect::<Result<Vec<Y>>>()?;
    Ok(ys
        .try_into()
        .unwrap_or_else(|_| unreachable!("{N} results of {N} items")))
}
