//! [`DfdxBackend`]: the core [`Backend`] trait on dfdx CPU tensors of rank ≤ 6, for running
//! any rule of `adrules_core` (pairwise, network, implicit) on data held by dfdx, outside
//! dfdx's tape.
//!
//! dfdx tensors have a static rank, while [`Backend::Tensor`] is one type for every rank, so
//! [`DfdxTensor`] holds a dfdx tensor with run-time dims (`(usize, …)`) of each rank 0…6 and
//! of each dtype in an enum. Every primitive copies its operands into the strided backend,
//! runs the strided kernel and moves the result back into a dfdx tensor (with the same
//! copy-in and copy-out functions the tape ops use): one copy of each operand read (and of C
//! when β ≠ 0), none of the result.

use adrules_core::backend::check;
use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, Error, HostTensor, Permutation, Result,
    TraceSpec,
};
use adrules_strided::{Strided, Tensor as StridedTensor};
use dfdx::dtypes::Unit;
use dfdx::prelude::{HasShape, ReshapeTo, Shape, Tensor, TensorFromVec};
use dfdx::tensor::Cpu;

use crate::bridge::{copy_in, copy_out, dims_of, host_vec, shape_for};
use crate::element::DfdxElement;
use crate::error::{NAME, from_dfdx};

/// The largest rank of a dfdx tensor.
pub const MAX_RANK: usize = 6;

/// A dfdx CPU tensor (without tape) of rank 0…6 with run-time dims, of one element type.
#[derive(Clone)]
pub enum Ranked<E: Unit> {
    /// rank 0
    R0(Tensor<(), E, Cpu>),
    /// rank 1
    R1(Tensor<(usize,), E, Cpu>),
    /// rank 2
    R2(Tensor<(usize, usize), E, Cpu>),
    /// rank 3
    R3(Tensor<(usize, usize, usize), E, Cpu>),
    /// rank 4
    R4(Tensor<(usize, usize, usize, usize), E, Cpu>),
    /// rank 5
    R5(Tensor<(usize, usize, usize, usize, usize), E, Cpu>),
    /// rank 6
    R6(Tensor<(usize, usize, usize, usize, usize, usize), E, Cpu>),
}

/// Runs `$body` with `$t` bound to the tensor inside a [`Ranked`](crate::Ranked), whatever
/// its rank: `$body` is expanded once per rank 0…6, so it may call generic code with the
/// tensor's own shape type.
///
/// ```
/// use adrules_dfdx::{Ranked, with_ranked};
/// use adrules_dfdx::dfdx::prelude::{Cpu, HasShape, Shape};
///
/// let x = Ranked::<f64>::from_vec(&Cpu::default(), &[2, 3], vec![0.0; 6]).unwrap();
/// let rank = with_ranked!(&x, t => t.shape().concrete().len());
/// assert_eq!(rank, 2);
/// ```
#[macro_export]
macro_rules! with_ranked {
    ($r:expr, $t:ident => $body:expr) => {
        match $r {
            $crate::Ranked::R0($t) => $body,
            $crate::Ranked::R1($t) => $body,
            $crate::Ranked::R2($t) => $body,
            $crate::Ranked::R3($t) => $body,
            $crate::Ranked::R4($t) => $body,
            $crate::Ranked::R5($t) => $body,
            $crate::Ranked::R6($t) => $body,
        }
    };
}

/// Runs `$body` with the type `$S` set to the run-time-dims shape type of rank `$rank`
/// (`()`, `(usize,)`, … `(usize, usize, usize, usize, usize, usize)`) and, in the form
/// `with_rank!(rank, S, wrap => …)`, `wrap` bound to the matching [`Ranked`](crate::Ranked)
/// variant; `$else` for a rank above 6. `$body` is expanded once per rank: the dispatch from
/// a run-time rank onto dfdx's shape types.
///
/// ```
/// use adrules_dfdx::with_rank;
/// use adrules_dfdx::dfdx::prelude::Shape;
///
/// let dims = |rank: usize| with_rank!(rank, S => Some(S::NUM_DIMS), else None);
/// assert_eq!(dims(3), Some(3));
/// assert_eq!(dims(7), None);
/// ```
#[macro_export]
macro_rules! with_rank {
    ($rank:expr, $S:ident => $body:expr, else $other:expr) => {
        $crate::with_rank!(@ $rank, $S, wrap, f32 => { let _ = wrap; $body }, else $other)
    };
    ($rank:expr, $S:ident, $wrap:ident => $body:expr, else $other:expr) => {
        $crate::with_rank!(@ $rank, $S, $wrap, _ => $body, else $other)
    };
    (@ $rank:expr, $S:ident, $wrap:ident, $E:ty => $body:expr, else $other:expr) => {
        match $rank {
            0 => {
                type $S = ();
                let $wrap = $crate::Ranked::<$E>::R0;
                $body
            }
            1 => {
                type $S = (usize,);
                let $wrap = $crate::Ranked::<$E>::R1;
                $body
            }
            2 => {
                type $S = (usize, usize);
                let $wrap = $crate::Ranked::<$E>::R2;
                $body
            }
            3 => {
                type $S = (usize, usize, usize);
                let $wrap = $crate::Ranked::<$E>::R3;
                $body
            }
            4 => {
                type $S = (usize, usize, usize, usize);
                let $wrap = $crate::Ranked::<$E>::R4;
                $body
            }
            5 => {
                type $S = (usize, usize, usize, usize, usize);
                let $wrap = $crate::Ranked::<$E>::R5;
                $body
            }
            6 => {
                type $S = (usize, usize, usize, usize, usize, usize);
                let $wrap = $crate::Ranked::<$E>::R6;
                $body
            }
            _ => $other,
        }
    };
}

fn rank_error(rank: usize) -> Error {
    Error::Unsupported {
        backend: NAME.into(),
        what: format!("rank {rank} (dfdx tensors have rank at most {MAX_RANK})"),
    }
}

fn dtype_error(dtype: DType) -> Error {
    Error::Unsupported {
        backend: NAME.into(),
        what: format!("dtype {dtype} (dfdx has no complex tensors; f32 and f64 are served)"),
    }
}

impl<E: DfdxElement> Ranked<E> {
    /// A tensor of dims `dims` holding `data` (row-major, moved in).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a rank above 6; [`Error::ShapeMismatch`] (`"data"`) when
    /// `data` does not have `dims`' element count.
    pub fn from_vec(dev: &Cpu, dims: &[usize], data: Vec<E>) -> Result<Self> {
        let n: usize = dims.iter().product();
        if data.len() != n {
            return Err(Error::shape("data", &[n], &[data.len()]));
        }
        with_rank!(dims.len(), S, wrap => {
            let t = dev.try_tensor_from_vec(data, shape_for::<S>(dims, "dims")?);
            Ok(wrap(t.map_err(from_dfdx)?))
        }, else Err(rank_error(dims.len())))
    }

    /// A tensor holding host data (moved in, no copy).
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (`"host"`) when `h` does not hold `E`; as
    /// [`Ranked::from_vec`].
    pub fn from_host(dev: &Cpu, h: HostTensor) -> Result<Self> {
        let dtype = h.dtype();
        let (dims, data) = h.into_parts();
        let v = E::vec_from_host(data).ok_or_else(|| Error::DTypeMismatch {
            arg: "host".into(),
            expected: E::DTYPE.to_string(),
            actual: dtype,
        })?;
        Self::from_vec(dev, &dims, v)
    }

    /// A typed dfdx tensor of any shape type, as a [`Ranked`] (no copy when `t` is
    /// contiguous: the data is shared and the tensor keeps its id).
    ///
    /// # Errors
    /// dfdx's allocation errors (when a non-contiguous `t` is made contiguous).
    pub fn from_tensor<S: Shape>(t: Tensor<S, E, Cpu>) -> Result<Self> {
        let dims = dims_of(t.shape());
        with_rank!(dims.len(), R, wrap => {
            let t = t.try_reshape_like(&shape_for::<R>(&dims, "tensor")?);
            Ok(wrap(t.map_err(from_dfdx)?))
        }, else Err(rank_error(dims.len())))
    }

    /// The tensor with the shape type `S` (no copy: the data is shared).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] / [`Error::InvalidArgument`] when `S` does not fit the dims.
    pub fn to_tensor<S: Shape>(&self) -> Result<Tensor<S, E, Cpu>> {
        let shape: S = shape_for(&self.dims(), "tensor")?;
        with_ranked!(self, t => t.clone().try_reshape_like(&shape).map_err(from_dfdx))
    }

    /// The dims.
    pub fn dims(&self) -> Dims {
        with_ranked!(self, t => dims_of(t.shape()))
    }

    /// Copy in (one copy of the elements).
    fn to_strided(&self) -> Result<StridedTensor> {
        with_ranked!(self, t => copy_in(t))
    }

    /// Copy out (moves `t`'s buffer when it is dense and unshared).
    fn from_strided(dev: &Cpu, t: StridedTensor) -> Result<Self> {
        let dims: Dims = t.dims().iter().copied().collect();
        with_rank!(dims.len(), S, wrap => {
            Ok(wrap(copy_out(dev, t, shape_for::<S>(&dims, "result")?)?))
        }, else Err(rank_error(dims.len())))
    }

    fn to_vec(&self) -> Vec<E> {
        with_ranked!(self, t => host_vec(t))
    }
}

/// A dfdx CPU tensor without tape, of rank 0…6 and dtype `f32` or `f64`: the tensor type of
/// [`DfdxBackend`]. Cheap to clone (dfdx shares the data).
#[derive(Clone)]
pub enum DfdxTensor {
    /// `f32` elements
    F32(Ranked<f32>),
    /// `f64` elements
    F64(Ranked<f64>),
}

impl std::fmt::Debug for DfdxTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DfdxTensor")
            .field("dtype", &self.dtype())
            .field("dims", &self.dims().as_slice())
            .finish()
    }
}

impl DfdxTensor {
    /// A typed dfdx tensor as a `DfdxTensor` (no copy when `t` is contiguous).
    ///
    /// # Errors
    /// As [`Ranked::from_tensor`].
    pub fn new<S: Shape, E: DfdxElement>(t: Tensor<S, E, Cpu>) -> Result<Self> {
        Ok(E::into_tensor(Ranked::from_tensor(t)?))
    }

    /// The tensor with shape type `S` and element type `E` (no copy).
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] (`"tensor"`) when the element type is not `E`; as
    /// [`Ranked::to_tensor`].
    pub fn to_tensor<S: Shape, E: DfdxElement>(&self) -> Result<Tensor<S, E, Cpu>> {
        E::ranked(self)
            .ok_or_else(|| Error::DTypeMismatch {
                arg: "tensor".into(),
                expected: E::DTYPE.to_string(),
                actual: self.dtype(),
            })?
            .to_tensor()
    }

    /// The dims.
    pub fn dims(&self) -> Dims {
        match self {
            DfdxTensor::F32(r) => r.dims(),
            DfdxTensor::F64(r) => r.dims(),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            DfdxTensor::F32(_) => DType::F32,
            DfdxTensor::F64(_) => DType::F64,
        }
    }

    fn to_strided(&self) -> Result<StridedTensor> {
        match self {
            DfdxTensor::F32(r) => r.to_strided(),
            DfdxTensor::F64(r) => r.to_strided(),
        }
    }
}

/// The core [`Backend`] on dfdx CPU tensors ([`DfdxTensor`]), `f32` and `f64`, rank ≤ 6.
///
/// Each primitive copies what it reads into the strided backend, runs its kernel there and
/// moves the result into a fresh dfdx tensor that replaces the output handle (so other
/// handles of the old output never see a change). Results are allocated on this backend's
/// device.
#[derive(Clone, Debug, Default)]
pub struct DfdxBackend {
    dev: Cpu,
}

impl DfdxBackend {
    /// The backend on a dfdx CPU device.
    pub fn new(dev: Cpu) -> Self {
        DfdxBackend { dev }
    }

    /// The device results are allocated on.
    pub fn device(&self) -> &Cpu {
        &self.dev
    }

    fn back(&self, t: StridedTensor) -> Result<DfdxTensor> {
        match t.dtype() {
            DType::F32 => Ok(DfdxTensor::F32(Ranked::from_strided(&self.dev, t)?)),
            DType::F64 => Ok(DfdxTensor::F64(Ranked::from_strided(&self.dev, t)?)),
            d => Err(dtype_error(d)),
        }
    }

    /// Runs a strided primitive `f(C, inputs)` on copies, then replaces `c` with the result
    /// (`c` unchanged on error). Each input is copied once; C is copied when `read_c`, else
    /// the strided C is zeros (β = 0 is a strong zero: C is not read).
    fn update(
        &self,
        c: &mut DfdxTensor,
        read_c: bool,
        inputs: &[&DfdxTensor],
        f: impl FnOnce(&mut StridedTensor, &[StridedTensor]) -> Result<()>,
    ) -> Result<()> {
        let xs = inputs
            .iter()
            .map(|t| t.to_strided())
            .collect::<Result<Vec<_>>>()?;
        let mut sc = if read_c {
            c.to_strided()?
        } else {
            StridedTensor::zeros(&c.dims(), c.dtype())?
        };
        f(&mut sc, &xs)?;
        *c = self.back(sc)?;
        Ok(())
    }
}

impl Backend for DfdxBackend {
    type Tensor = DfdxTensor;

    fn name(&self) -> &'static str {
        NAME
    }

    fn dtypes(&self) -> &'static [DType] {
        &[DType::F32, DType::F64]
    }

    fn dims(&self, t: &DfdxTensor) -> Dims {
        t.dims()
    }

    fn dtype(&self, t: &DfdxTensor) -> DType {
        t.dtype()
    }

    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<DfdxTensor> {
        self.from_host(HostTensor::zeros(dims, dtype)?)
    }

    fn to_host(&self, t: &DfdxTensor) -> Result<HostTensor> {
        match t {
            DfdxTensor::F32(r) => HostTensor::from_vec(&r.dims(), r.to_vec()),
            DfdxTensor::F64(r) => HostTensor::from_vec(&r.dims(), r.to_vec()),
        }
    }

    fn from_host(&self, h: HostTensor) -> Result<DfdxTensor> {
        if h.dims().len() > MAX_RANK {
            return Err(rank_error(h.dims().len()));
        }
        match h.dtype() {
            DType::F32 => Ranked::<f32>::from_host(&self.dev, h).map(DfdxTensor::F32),
            DType::F64 => Ranked::<f64>::from_host(&self.dev, h).map(DfdxTensor::F64),
            d => Err(dtype_error(d)),
        }
    }

    fn add(
        &self,
        c: &mut DfdxTensor,
        a: &DfdxTensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        check::add(self, c, a, p, alpha, beta)?;
        self.update(c, !beta.is_zero(), &[a], |sc, x| {
            Strided.add(sc, &x[0], p, conj, alpha, beta)
        })
    }

    fn add_projected(
        &self,
        c: &mut DfdxTensor,
        a: &DfdxTensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        check::add_projected(self, c, a, p, beta)?;
        self.update(c, !beta.is_zero(), &[a], |sc, x| {
            Strided.add_projected(sc, &x[0], p, conj, alpha, beta)
        })
    }

    fn trace(
        &self,
        c: &mut DfdxTensor,
        a: &DfdxTensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        check::trace(self, c, a, spec, alpha, beta)?;
        self.update(c, !beta.is_zero(), &[a], |sc, x| {
            Strided.trace(sc, &x[0], spec, conj, alpha, beta)
        })
    }

    fn add_to_diagonal(
        &self,
        a: &mut DfdxTensor,
        c: &DfdxTensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        check::add_to_diagonal(self, a, c, spec)?;
        self.update(a, true, &[c], |sa, x| {
            Strided.add_to_diagonal(sa, &x[0], spec, conj, alpha)
        })
    }

    fn contract(
        &self,
        c: &mut DfdxTensor,
        a: &DfdxTensor,
        b: &DfdxTensor,
        spec: &ContractSpec,
        conj_a: Conj,
        conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        check::contract(self, c, a, b, spec, alpha, beta)?;
        self.update(c, !beta.is_zero(), &[a, b], |sc, x| {
            Strided.contract(sc, &x[0], &x[1], spec, conj_a, conj_b, alpha, beta)
        })
    }

    fn inner(&self, x: &DfdxTensor, y: &DfdxTensor) -> Result<DynScalar> {
        check::inner(self, x, y)?;
        Strided.inner(&x.to_strided()?, &y.to_strided()?)
    }

    fn scale(&self, t: &mut DfdxTensor, s: DynScalar) -> Result<()> {
        self.update(t, true, &[], |st, _| Strided.scale(st, s))
    }

    fn scalar(&self, t: &DfdxTensor) -> Result<DynScalar> {
        check::scalar(self, t)?;
        Strided.scalar(&t.to_strided()?)
    }
}
