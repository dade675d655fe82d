//! [`BurnBackend`]: the core [`Backend`] trait on burn's float primitives.

use std::fmt;

use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, Error, HostData, HostTensor, Permutation,
    Result, TraceSpec,
};
use burn_backend::tensor::FloatTensor;
use burn_backend::{
    Backend as BurnBackendTrait, FloatDType, Shape, Slice, TensorData, TensorMetadata, read_sync,
};

/// Name of this backend in errors.
pub(crate) const NAME: &str = "burn";

/// The dtypes burn stores that the rules accept.
const DTYPES: [DType; 2] = [DType::F32, DType::F64];

/// A burn float primitive with its logical shape (see the module docs on scalars): the
/// [`Backend::Tensor`] of [`BurnBackend`]. Cheap to clone (burn handles are reference
/// counted).
pub struct BurnTensor<B: BurnBackendTrait> {
    primitive: FloatTensor<B>,
    dims: Dims,
}

impl<B: BurnBackendTrait> Clone for BurnTensor<B> {
    fn clone(&self) -> Self {
        BurnTensor {
            primitive: self.primitive.clone(),
            dims: self.dims.clone(),
        }
    }
}

impl<B: BurnBackendTrait> fmt::Debug for BurnTensor<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BurnTensor")
            .field("dims", &self.dims)
            .field("primitive", &self.primitive)
            .finish()
    }
}

/// The primitive shape of logical dims: the dims, or `[1]` for a scalar.
pub(crate) fn physical(dims: &[usize]) -> Shape {
    if dims.is_empty() {
        Shape::new([1])
    } else {
        shape_of(dims)
    }
}

impl<B: BurnBackendTrait> BurnTensor<B> {
    /// The primitive with its own shape as logical shape.
    pub fn new(primitive: FloatTensor<B>) -> Self {
        let dims = primitive.shape().iter().copied().collect();
        BurnTensor { primitive, dims }
    }

    /// The primitive read as a scalar when `scalar` and it has one element (burn's
    /// shape-`[1]` convention), with its own shape otherwise.
    pub fn read(primitive: FloatTensor<B>, scalar: bool) -> Self {
        let shape = primitive.shape();
        if scalar && shape.num_elements() == 1 && shape.num_dims() <= 1 {
            BurnTensor {
                primitive,
                dims: Dims::new(),
            }
        } else {
            Self::new(primitive)
        }
    }

    /// The logical shape.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The primitive.
    pub fn primitive(&self) -> &FloatTensor<B> {
        &self.primitive
    }

    /// The primitive, reshaped to `shape` when it differs (a scalar's `[1]` / `[]`).
    pub fn into_primitive_shaped(self, shape: &[usize]) -> FloatTensor<B> {
        if self.primitive.shape().as_slice() == shape {
            self.primitive
        } else {
            B::float_reshape(self.primitive, shape_of(shape))
        }
    }

    /// The primitive.
    pub fn into_primitive(self) -> FloatTensor<B> {
        self.primitive
    }

    /// Replaces the primitive (same logical shape).
    pub(crate) fn set_primitive(&mut self, primitive: FloatTensor<B>) {
        self.primitive = primitive;
    }

    /// A primitive of shape `physical(dims)` holding a tensor of logical shape `dims`.
    pub(crate) fn logical(primitive: FloatTensor<B>, dims: &[usize]) -> Self {
        BurnTensor {
            primitive,
            dims: dims.iter().copied().collect(),
        }
    }
}

/// The shared rules' [`Backend`] on burn backend `B`'s float primitives, on one device.
///
/// `Tensor = BurnTensor<B>`: a burn primitive of any logical rank (including 0), f32 or f64,
/// on [`device`](Self::device). Every primitive checks the dtype (f32/f64) and the device of
/// its tensor arguments and returns [`Error::Unsupported`] / [`Error::DeviceMismatch`] naming
/// the argument; shapes are checked with the index specifications' own checks.
///
/// # Generic path: burn ops
/// Every primitive replaces the handle, `c = β·c + α·term` (burn tensors are immutable
/// values; backends reuse a uniquely owned buffer in place), with `term` built from burn ops
/// that every burn backend implements, so the shared rules run on every burn backend (CubeCL's
/// CUDA/ROCm/Metal/Vulkan/wgpu, LibTorch, NdArray, …) and stay on its device:
///
/// | primitive | burn ops |
/// |---|---|
/// | add `P_p(A)` | `float_permute` |
/// | trace `P_p(tr_{q1,q2} A)` | permute to `(p…, q1…, q2…)`, reshape to `(P…, Q·Q)`, slice the diagonal with step `Q+1`, `float_sum_dim` |
/// | add_to_diagonal | `float_slice_assign` with step `Q+1` into zeros, reshape, inverse permute, `float_add` |
/// | contract | TTGT: permute A to `(open_a, contr_a)` and B to `(contr_b, open_b)`, reshape to matrices, `float_matmul`, reshape, permute by `perm_ab` |
/// | inner | `float_mul`, `float_sum`, one scalar read back |
///
/// Zeros are one zero broadcast to the shape (`float_expand`: no full-size buffer on backends
/// whose expand is a view).
///
/// # Flex: adrules-strided kernels
/// When `B` is burn's Flex CPU backend, add, trace and contraction run through
/// adrules-strided's kernels on Flex's own buffers instead: operands are read in place as
/// strided views (Flex layouts carry strides and an offset, so transposed, sliced or
/// broadcast operands are not copied), contractions run on faer's GEMM, and the output is a
/// fresh buffer handed to Flex without copying (or C updated in place when it is uniquely
/// owned and dense).
///
/// # Dtypes and scalars
/// Only f32 and f64 (burn has no complex dtype): complex data is [`Error::Unsupported`],
/// conjugation flags are no-ops, a complex α or β is [`Error::DTypeMismatch`] (projected to
/// its real part by the projecting primitives). burn writes a scalar as a tensor of shape
/// `[1]` (its autodiff and several backends do not take rank-0 tensors), so a [`BurnTensor`]
/// pairs a primitive with its logical shape.
pub struct BurnBackend<B: BurnBackendTrait> {
    device: B::Device,
}

impl<B: BurnBackendTrait> Clone for BurnBackend<B> {
    fn clone(&self) -> Self {
        BurnBackend {
            device: self.device.clone(),
        }
    }
}

impl<B: BurnBackendTrait> fmt::Debug for BurnBackend<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BurnBackend")
            .field("backend", &B::name(&self.device))
            .field("device", &self.device)
            .finish()
    }
}

/// Our dtype of a burn dtype, when the rules support it.
pub(crate) fn dtype_of(d: burn_backend::DType) -> Option<DType> {
    match d {
        burn_backend::DType::F32 => Some(DType::F32),
        burn_backend::DType::F64 => Some(DType::F64),
        _ => None,
    }
}

/// burn's float dtype of ours (f32 or f64; callers have rejected complex dtypes).
fn float_dtype(d: DType) -> FloatDType {
    if d.is_double() {
        FloatDType::F64
    } else {
        FloatDType::F32
    }
}

/// An engine error as ours.
pub(crate) fn engine_error(e: impl fmt::Display) -> Error {
    Error::Backend {
        backend: NAME.into(),
        message: e.to_string(),
    }
}

fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported {
        backend: NAME.into(),
        what: what.into(),
    }
}

/// Checks that a burn dtype is f32 or f64 (argument `arg`).
pub(crate) fn check_dtype(arg: &str, d: burn_backend::DType) -> Result<DType> {
    dtype_of(d).ok_or_else(|| {
        unsupported(format!(
            "dtype {} for `{arg}` (the rules run on f32 and f64)",
            d.name()
        ))
    })
}

fn shape_of(dims: &[usize]) -> Shape {
    Shape::from(dims.to_vec())
}

/// The real coefficient of a strict primitive, cast to the output dtype.
fn coefficient(x: DynScalar, dtype: DType, arg: &str) -> Result<f64> {
    Ok(x.cast(dtype, arg)?.re())
}

impl<B: BurnBackendTrait> BurnBackend<B> {
    /// The backend on `device`.
    pub fn new(device: B::Device) -> Self {
        BurnBackend { device }
    }

    /// The device every tensor of this backend lives on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// Checks dtype (f32/f64) and device of a primitive argument `arg`.
    pub(crate) fn check_primitive(&self, arg: &str, t: &FloatTensor<B>) -> Result<DType> {
        let dtype = check_dtype(arg, t.dtype())?;
        let device = t.device();
        if device != self.device {
            return Err(Error::DeviceMismatch {
                arg: arg.into(),
                expected: format!("{:?}", self.device),
                actual: format!("{device:?}"),
            });
        }
        Ok(dtype)
    }

    /// Checks dtype (f32/f64) and device of a tensor argument `arg`.
    pub(crate) fn check(&self, arg: &str, t: &BurnTensor<B>) -> Result<DType> {
        self.check_primitive(arg, &t.primitive)
    }

    /// Checks that `input` (of argument `arg`) promotes losslessly to `output`.
    fn check_promotes(arg: &str, input: DType, output: DType) -> Result<()> {
        if input.promotes_to(output) {
            Ok(())
        } else {
            Err(Error::DTypeMismatch {
                arg: arg.into(),
                expected: format!("a dtype that promotes to {output}"),
                actual: input,
            })
        }
    }

    /// The primitive of `t` in dtype `to` (no-op when it already is).
    fn cast(t: &BurnTensor<B>, to: DType) -> FloatTensor<B> {
        let p = t.primitive.clone();
        if dtype_of(p.dtype()) == Some(to) {
            p
        } else {
            B::float_cast(p, float_dtype(to))
        }
    }

    /// `t` in dtype `to` (the same handle when it already is).
    fn in_dtype(t: &BurnTensor<B>, to: DType) -> BurnTensor<B> {
        BurnTensor::logical(Self::cast(t, to), &t.dims)
    }

    /// `t` permuted by `axes` (no-op for the identity, including on scalars).
    fn permute(t: FloatTensor<B>, axes: &[usize]) -> FloatTensor<B> {
        if axes.iter().enumerate().all(|(m, &p)| m == p) {
            t
        } else {
            B::float_permute(t, axes)
        }
    }

    /// `t` reshaped to the primitive shape of logical `dims`.
    fn reshape(t: FloatTensor<B>, dims: &[usize]) -> FloatTensor<B> {
        let shape = physical(dims);
        if t.shape() == shape {
            t
        } else {
            B::float_reshape(t, shape)
        }
    }

    fn scaled(t: FloatTensor<B>, s: f64) -> FloatTensor<B> {
        if s == 1.0 {
            t
        } else {
            B::float_mul_scalar(t, s.into())
        }
    }

    /// Zeros of logical shape `dims`: one zero broadcast to the shape (burn's `expand`), so
    /// no buffer of the full size is allocated on backends whose expand is a view (Flex);
    /// burn's ops read it like any tensor and never write into a broadcast in place.
    pub(crate) fn broadcast_zeros(&self, dims: &[usize], dtype: DType) -> BurnTensor<B> {
        let shape = physical(dims);
        let one = B::float_zeros(
            Shape::from(vec![1; shape.num_dims()]),
            &self.device,
            float_dtype(dtype),
        );
        BurnTensor::logical(B::float_expand(one, shape), dims)
    }

    /// `c ← β·c + α·term` with `β = 0` a strong zero (C not read); `term` has C's primitive
    /// shape and dtype, α and β are already real numbers.
    fn update(c: &mut BurnTensor<B>, term: FloatTensor<B>, alpha: f64, beta: f64) {
        let term = Self::scaled(term, alpha);
        c.primitive = if beta == 0.0 {
            term
        } else {
            B::float_add(Self::scaled(c.primitive.clone(), beta), term)
        };
    }

    /// Checks C, A and the coefficients of a strict primitive; returns C's dtype and the real
    /// α and β.
    fn strict(
        &self,
        c: &BurnTensor<B>,
        a: &BurnTensor<B>,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<(DType, f64, f64)> {
        let dc = self.check("c", c)?;
        let da = self.check("a", a)?;
        Self::check_promotes("a", da, dc)?;
        Ok((
            dc,
            coefficient(alpha, dc, "alpha")?,
            coefficient(beta, dc, "beta")?,
        ))
    }

    /// Axes `(p…, q1…, q2…)` of a trace, the kept dimensions and the product `Q` of the
    /// traced ones.
    fn trace_layout(spec: &TraceSpec, dims: &[usize]) -> (Vec<usize>, Vec<usize>, usize) {
        let order: Vec<usize> = spec
            .p()
            .iter()
            .chain(spec.q1())
            .chain(spec.q2())
            .copied()
            .collect();
        let kept = spec.p().iter().map(|&i| dims[i]).collect();
        let q = spec.q1().iter().map(|&i| dims[i]).product();
        (order, kept, q)
    }

    /// Slices selecting, on the last axis of a `(…, Q·Q)` tensor, the `Q` diagonal entries
    /// (step `Q + 1`).
    fn diagonal_slices(leading: usize, q: usize) -> Vec<Slice> {
        let mut s = vec![Slice::full(); leading];
        s.push(Slice::new(0, Some((q * q) as isize), (q + 1) as isize));
        s
    }

    /// `tr_{q1,q2}(A)` permuted by `p`, in dtype `to` (shapes already checked).
    fn trace_term(&self, a: &BurnTensor<B>, spec: &TraceSpec, to: DType) -> FloatTensor<B> {
        let (order, kept, q) = Self::trace_layout(spec, &a.dims);
        if q == 0 || kept.contains(&0) {
            return self.broadcast_zeros(&kept, to).primitive;
        }
        let mut flat = kept.clone();
        flat.push(q * q);
        let t = B::float_reshape(Self::permute(Self::cast(a, to), &order), shape_of(&flat));
        let t = B::float_slice(t, &Self::diagonal_slices(kept.len(), q));
        Self::reshape(B::float_sum_dim(t, kept.len()), &kept)
    }

    /// `P_{pAB}(A·B)` in dtype `to` (shapes already checked), by TTGT.
    fn contract_term(
        &self,
        a: &BurnTensor<B>,
        b: &BurnTensor<B>,
        spec: &ContractSpec,
        to: DType,
    ) -> FloatTensor<B> {
        let (da, db) = (&a.dims, &b.dims);
        let open_a: Vec<usize> = spec.open_a().iter().map(|&i| da[i]).collect();
        let open_b: Vec<usize> = spec.open_b().iter().map(|&i| db[i]).collect();
        let m: usize = open_a.iter().product();
        let n: usize = open_b.iter().product();
        let k: usize = spec.contr_a().iter().map(|&i| da[i]).product();
        if m == 0 || n == 0 || k == 0 {
            // An empty result or an empty sum (some backends' matmul rejects empty matrices).
            let inter: Vec<usize> = open_a.iter().chain(&open_b).copied().collect();
            let dims = spec.perm_ab().apply(&inter);
            return self.broadcast_zeros(&dims, to).primitive;
        }
        let pa: Vec<usize> = spec
            .open_a()
            .iter()
            .chain(spec.contr_a())
            .copied()
            .collect();
        let pb: Vec<usize> = spec
            .contr_b()
            .iter()
            .chain(spec.open_b())
            .copied()
            .collect();
        let am = B::float_reshape(Self::permute(Self::cast(a, to), &pa), Shape::new([m, k]));
        let bm = B::float_reshape(Self::permute(Self::cast(b, to), &pb), Shape::new([k, n]));
        let inter: Vec<usize> = open_a.iter().chain(&open_b).copied().collect();
        let cm = Self::reshape(B::float_matmul(am, bm), &inter);
        Self::permute(cm, spec.perm_ab().as_slice())
    }

    fn read(&self, t: FloatTensor<B>) -> Result<TensorData> {
        read_sync(B::float_into_data(t)).map_err(engine_error)
    }

    /// The one value of a one-element primitive, in `dtype`.
    fn read_value(&self, t: FloatTensor<B>, dtype: DType) -> Result<DynScalar> {
        let data = self.read(t)?;
        let value = data
            .iter::<f64>()
            .next()
            .ok_or_else(|| engine_error("a one-element tensor read back without an element"))?;
        Ok(DynScalar::from_c64(value.into(), dtype))
    }
}

impl<B: BurnBackendTrait> Backend for BurnBackend<B> {
    type Tensor = BurnTensor<B>;

    fn name(&self) -> &'static str {
        NAME
    }

    fn dtypes(&self) -> &'static [DType] {
        &DTYPES
    }

    fn dims(&self, t: &Self::Tensor) -> Dims {
        t.dims.clone()
    }

    /// f32 or f64; any other burn dtype reads as f32 here and is rejected with a typed error
    /// by every primitive that receives it.
    fn dtype(&self, t: &Self::Tensor) -> DType {
        dtype_of(t.primitive.dtype()).unwrap_or(DType::F32)
    }

    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Self::Tensor> {
        if dtype.is_complex() {
            return Err(unsupported(format!("{dtype} tensors")));
        }
        Ok(self.broadcast_zeros(dims, dtype))
    }

    fn to_host(&self, t: &Self::Tensor) -> Result<HostTensor> {
        let dtype = self.check("tensor", t)?;
        let data = self.read(t.primitive.clone())?;
        let host = if dtype.is_double() {
            HostData::F64(data.try_into_vec::<f64>().map_err(engine_error)?)
        } else {
            HostData::F32(data.try_into_vec::<f32>().map_err(engine_error)?)
        };
        HostTensor::new(&t.dims, host)
    }

    fn from_host(&self, h: HostTensor) -> Result<Self::Tensor> {
        let (dims, data) = h.into_parts();
        let data = match data {
            HostData::F32(v) => TensorData::new(v, physical(&dims)),
            HostData::F64(v) => TensorData::new(v, physical(&dims)),
            other => return Err(unsupported(format!("{} tensors", other.dtype()))),
        };
        Ok(BurnTensor::logical(
            B::float_from_data(data, &self.device),
            &dims,
        ))
    }

    fn add(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        _conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let (dc, alpha, beta) = self.strict(c, a, alpha, beta)?;
        p.check_add(&a.dims, &c.dims)?;
        Self::update(
            c,
            Self::permute(Self::cast(a, dc), p.as_slice()),
            alpha,
            beta,
        );
        Ok(())
    }

    fn add_projected(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        _conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let dc = self.check("c", c)?;
        self.check("a", a)?;
        let beta = coefficient(beta, dc, "beta")?;
        p.check_add(&a.dims, &c.dims)?;
        // Real data: the real part of α·P(A) is Re(α)·P(A), rounded to C's precision.
        let alpha = alpha.re();
        if !crate::flex::add(c, &Self::in_dtype(a, dc), p, alpha, beta, dc)? {
            let term = Self::permute(Self::cast(a, dc), p.as_slice());
            Self::update(c, term, alpha, beta);
        }
        Ok(())
    }

    fn trace(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        spec: &TraceSpec,
        _conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let (dc, alpha, beta) = self.strict(c, a, alpha, beta)?;
        spec.check(&a.dims, &c.dims)?;
        if !crate::flex::trace(c, &Self::in_dtype(a, dc), spec, alpha, beta, dc)? {
            let term = self.trace_term(a, spec, dc);
            Self::update(c, term, alpha, beta);
        }
        Ok(())
    }

    fn add_to_diagonal(
        &self,
        a: &mut Self::Tensor,
        c: &Self::Tensor,
        spec: &TraceSpec,
        _conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        let da = self.check("a", a)?;
        self.check("c", c)?;
        spec.check(&a.dims, &c.dims)?;
        let (order, kept, q) = Self::trace_layout(spec, &a.dims);
        if q == 0 || kept.contains(&0) {
            return Ok(());
        }
        // Real data: proj(α·C) = Re(α)·C rounded to A's precision, written on the diagonal
        // of zeros of A's shape in the order (p…, q1…, q2…), then permuted back.
        let values = Self::scaled(Self::cast(c, da), alpha.re());
        let (mut column, mut band, mut flat) = (kept.clone(), kept.clone(), kept.clone());
        column.push(1);
        band.push(q);
        flat.push(q * q);
        let values = B::float_expand(B::float_reshape(values, shape_of(&column)), shape_of(&band));
        let zeros = B::float_zeros(shape_of(&flat), &self.device, float_dtype(da));
        let full = B::float_slice_assign(zeros, &Self::diagonal_slices(kept.len(), q), values);
        let ordered: Vec<usize> = order.iter().map(|&i| a.dims[i]).collect();
        let inverse = Permutation::named("trace spec (p, q1, q2)", &order)?.inverse();
        let full = Self::permute(
            B::float_reshape(full, shape_of(&ordered)),
            inverse.as_slice(),
        );
        a.primitive = B::float_add(a.primitive.clone(), full);
        Ok(())
    }

    fn contract(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        b: &Self::Tensor,
        spec: &ContractSpec,
        _conj_a: Conj,
        _conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let (dc, alpha, beta) = self.strict(c, a, alpha, beta)?;
        let db = self.check("b", b)?;
        Self::check_promotes("b", db, dc)?;
        spec.check(&a.dims, &b.dims, &c.dims)?;
        let (ac, bc) = (Self::in_dtype(a, dc), Self::in_dtype(b, dc));
        if !crate::flex::contract(c, &ac, &bc, spec, alpha, beta, dc)? {
            Self::update(c, self.contract_term(&ac, &bc, spec, dc), alpha, beta);
        }
        Ok(())
    }

    fn inner(&self, x: &Self::Tensor, y: &Self::Tensor) -> Result<DynScalar> {
        let dx = self.check("x", x)?;
        let dy = self.check("y", y)?;
        if x.dims != y.dims {
            return Err(Error::shape("y", &x.dims, &y.dims));
        }
        let dtype = dx.join(dy);
        if x.dims.contains(&0) {
            return Ok(DynScalar::zero(dtype));
        }
        let prod = B::float_mul(Self::cast(x, dtype), Self::cast(y, dtype));
        self.read_value(B::float_sum(prod), dtype)
    }

    fn scale(&self, t: &mut Self::Tensor, s: DynScalar) -> Result<()> {
        let dt = self.check("t", t)?;
        let s = coefficient(s, dt, "s")?;
        t.primitive = if s == 0.0 {
            self.broadcast_zeros(&t.dims, dt).primitive
        } else {
            Self::scaled(t.primitive.clone(), s)
        };
        Ok(())
    }

    fn scalar(&self, t: &Self::Tensor) -> Result<DynScalar> {
        let dtype = self.check("tensor", t)?;
        if !t.dims.is_empty() {
            return Err(Error::rank("tensor", 0, t.dims.len()));
        }
        self.read_value(t.primitive.clone(), dtype)
    }
}
