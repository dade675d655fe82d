//! [`BurnBackend`]: the core [`Backend`] trait on burn's float primitives.

use adrules_core::backend::{check, transfers};
use adrules_core::rules::{AddOp, ContractOp, TraceOp};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, Error, HostData, HostTensor, Permutation,
    Result, TraceSpec,
};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend as Engine, Shape, Slice, TensorData, TensorMetadata, read_sync};

use crate::convert::*;
use crate::flex::{self, Kernel};
use crate::handle::BurnTensor;

/// The dtypes burn stores that the rules accept.
const DTYPES: [DType; 2] = [DType::F32, DType::F64];

/// How the generic path reads the diagonal of an A of shape `dims` under `spec`: A permuted
/// by `order` so that each group's axes are adjacent (kept groups, then summed ones), then
/// reshaped to the `grouped` shape, where a group of `g` axes of dimension `n` is one axis
/// of extent `n^g` on which its `n` diagonal entries lie `1 + n + … + n^(g−1)` apart; the
/// `slices` with those steps select the diagonal, of shape `diag` (`n` per group, kept then
/// summed). `slices` is empty when every step is 1 (single axes, dimensions ≤ 1): the
/// grouped tensor is then its own diagonal. Returns `(order, grouped, diag, slices)`.
fn diagonal(spec: &TraceSpec, dims: &[usize]) -> (Vec<usize>, Vec<usize>, Vec<usize>, Vec<Slice>) {
    let groups = || spec.kept().iter().chain(spec.summed());
    let diag: Vec<usize> = groups().map(|g| dims[g[0]]).collect();
    let grouped: Vec<usize> = groups().map(|g| dims[g[0]].pow(g.len() as u32)).collect();
    let step = |n: usize, ng: usize| if n <= 1 { 1 } else { (ng - 1) / (n - 1) };
    let slice = |(&n, &ng)| Slice::new(0, Some(ng as isize), step(n, ng) as isize);
    let slices: Vec<Slice> = diag.iter().zip(&grouped).map(slice).collect();
    let slices = unless(slices.iter().any(|s| s.step > 1), slices, |_| Vec::new());
    (groups().flatten().copied().collect(), grouped, diag, slices)
}

/// The shared rules' [`Backend`] on burn backend `B`'s float primitives, on one device.
///
/// `Tensor = BurnTensor<B>`: a burn primitive of any logical rank (including 0), f32 or f64,
/// on [`device`](Self::device). Every primitive checks the dtype (f32/f64) and the device of
/// its tensor arguments first and returns [`Error::Unsupported`] / [`Error::DeviceMismatch`]
/// naming the argument; then the argument checks of the [`Backend`] contract
/// ([`adrules_core::backend::check`]: shapes, dtype promotion to C's, coefficients cast to
/// C's dtype).
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
/// | trace (diagonals, traces, sums) | permute A group by group (kept, then summed), reshape each group of `g` axes of dimension `n` to one axis of `n^g`, slice its diagonal with step `1 + n + … + n^(g−1)`, reshape the summed groups to one axis, `float_sum_dim` |
/// | add_to_diagonal | reshape C to `(kept…, 1…)`, `float_expand` over the summed groups, `float_slice_assign` with those steps into zeros of the grouped shape, reshape, inverse permute, `float_add` |
/// | contract | TTGT: permute A to `(batch_a, open_a, contr_a)` and B to `(batch_b, contr_b, open_b)`, reshape to matrices (`[L, m, k]`, `[L, k, n]` with batch axes), `float_matmul` (batched over `L`), reshape, permute by `perm_ab` |
/// | inner | `float_mul`, `float_sum`, one scalar read back |
///
/// Zeros are one zero broadcast to the shape (`float_expand`: no full-size buffer on backends
/// whose expand is a view).
///
/// # Flex: adrules-strided kernels
/// When `B` is burn's Flex CPU backend, add, trace (with its adjoint `add_to_diagonal`) and
/// contraction (batched or not) run through adrules-strided's kernels on Flex's own buffers
/// instead: operands are read in place as strided views (Flex layouts carry strides and an
/// offset, so transposed, sliced or broadcast operands are not copied), contractions run on
/// faer's GEMM, and the output is a fresh buffer handed to Flex without copying (or C, or A
/// for `add_to_diagonal`, updated in place when it is uniquely owned and dense).
///
/// # Dtypes and scalars
/// Only f32 and f64 (burn has no complex dtype): complex data is [`Error::Unsupported`],
/// conjugation flags are no-ops, a complex α or β is [`Error::DTypeMismatch`] (projected to
/// its real part by the projecting primitives). burn writes a scalar as a tensor of shape
/// `[1]` (its autodiff and several backends do not take rank-0 tensors), so a [`BurnTensor`]
/// pairs a primitive with its logical shape.
#[derive(Clone, Debug)]
pub struct BurnBackend<B: Engine> {
    device: B::Device,
}

#[cfg(cube)]
impl BurnBackend<burn_dispatch::backends::Cube> {
    /// The backend of burn's cubecl runtimes on the device a user-facing [`Device`] names
    /// (`Device::wgpu(DeviceKind::DefaultDevice)`, `Device::cuda(0)`, …; an autodiff device
    /// is read as the device it wraps).
    ///
    /// # Errors
    /// [`Error::DeviceMismatch`](adrules_core::Error::DeviceMismatch) (`"device"`) for a
    /// device of another backend.
    ///
    /// [`Device`]: burn_tensor::Device
    pub fn cube(device: &burn_tensor::Device) -> Result<Self> {
        match device.as_dispatch().clone().inner() {
            burn_dispatch::DispatchDevice::Cube(d) => Ok(BurnBackend::new(d)),
            #[allow(unreachable_patterns)]
            other => Err(adrules_core::Error::DeviceMismatch {
                arg: "device".into(),
                expected: "a cubecl device (wgpu, Vulkan, Metal, CUDA, ROCm)".into(),
                actual: format!("{other:?}"),
            }),
        }
    }
}

impl<B: Engine> BurnBackend<B> {
    /// The backend on `device`.
    pub fn new(device: B::Device) -> Self {
        BurnBackend { device }
    }

    /// The device every tensor of this backend lives on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// Checks dtype (f32/f64) and device of a tensor argument `arg`.
    pub(crate) fn check(&self, arg: &str, t: &BurnTensor<B>) -> Result<DType> {
        let dtype = check_dtype(arg, t.primitive.dtype())?;
        let device = t.primitive.device();
        if device != self.device {
            let expected = format!("{:?}", self.device);
            let actual = format!("{device:?}");
            return Err(Error::DeviceMismatch {
                arg: arg.into(),
                expected,
                actual,
            });
        }
        Ok(dtype)
    }

    /// The burn-specific checks, run before the contract's ([`check`]): every argument is
    /// f32 or f64 and on this backend's device. Returns the first argument's dtype.
    fn supported(&self, args: &[(&str, &BurnTensor<B>)]) -> Result<DType> {
        let dtypes: Result<Vec<DType>> = args.iter().map(|(arg, t)| self.check(arg, t)).collect();
        Ok(dtypes?.first().copied().unwrap_or(DType::F32))
    }

    /// The primitive of `t` in dtype `to` (no-op when it already is).
    fn cast(t: &BurnTensor<B>, to: DType) -> FloatTensor<B> {
        let (p, same) = (t.primitive.clone(), dtype_of(t.primitive.dtype()));
        unless(same == Some(to), p, |p| B::float_cast(p, float_dtype(to)))
    }

    /// `t` in dtype `to` (the same handle when it already is).
    fn in_dtype(t: &BurnTensor<B>, to: DType) -> BurnTensor<B> {
        BurnTensor::logical(Self::cast(t, to), &t.dims)
    }

    /// `C ← β·C + α·P(A)` for real `α`, `β` in C's dtype `dc` (arguments checked): the Flex
    /// kernel when C and A live there, else burn's ops.
    fn add_real(
        c: &mut BurnTensor<B>,
        a: &BurnTensor<B>,
        p: &Permutation,
        alpha: f64,
        beta: f64,
        dc: DType,
    ) -> Result<()> {
        let ac = Self::in_dtype(a, dc);
        let prim = AddOp::new(p.clone()).alpha(alpha).beta(beta).into();
        if !flex::run(c, &[&ac], Kernel::Primitive(&prim), dc)? {
            let term = Self::permute(ac.primitive, p.as_slice());
            Self::update(c, term, alpha, beta);
        }
        Ok(())
    }

    /// `t` permuted by `axes` (no-op for the identity, including on scalars).
    fn permute(t: FloatTensor<B>, axes: &[usize]) -> FloatTensor<B> {
        let identity = axes.iter().enumerate().all(|(m, &p)| m == p);
        unless(identity, t, |t| B::float_permute(t, axes))
    }

    /// `t` reshaped to the primitive shape of logical `dims`.
    fn reshape(t: FloatTensor<B>, dims: &[usize]) -> FloatTensor<B> {
        let shape = physical(dims);
        unless(t.shape() == shape, t, |t| B::float_reshape(t, shape))
    }

    fn scaled(t: FloatTensor<B>, s: f64) -> FloatTensor<B> {
        unless(s == 1.0, t, |t| B::float_mul_scalar(t, s.into()))
    }

    /// Zeros of logical shape `dims`: one zero broadcast to the shape (burn's `expand`), so
    /// no buffer of the full size is allocated on backends whose expand is a view (Flex);
    /// burn's ops read it like any tensor and never write into a broadcast in place.
    pub(crate) fn broadcast_zeros(&self, dims: &[usize], dtype: DType) -> BurnTensor<B> {
        let shape = physical(dims);
        let ones = Shape::from(vec![1; shape.num_dims()]);
        let one = B::float_zeros(ones, &self.device, float_dtype(dtype));
        BurnTensor::logical(B::float_expand(one, shape), dims)
    }

    /// `c ← β·c + α·term` with `β = 0` a strong zero (C not read); `term` has C's primitive
    /// shape and dtype, α and β are already real numbers.
    fn update(c: &mut BurnTensor<B>, term: FloatTensor<B>, alpha: f64, beta: f64) {
        let add = |t| B::float_add(Self::scaled(c.primitive.clone(), beta), t);
        c.primitive = unless(beta == 0.0, Self::scaled(term, alpha), add);
    }

    /// The generalized trace of A in dtype `to` (shapes already checked): A grouped, each
    /// group's diagonal sliced out, the summed groups flattened into one axis and summed.
    fn trace_term(&self, a: &BurnTensor<B>, spec: &TraceSpec, to: DType) -> FloatTensor<B> {
        let kept: Vec<usize> = spec.kept().iter().map(|g| a.dims[g[0]]).collect();
        if a.dims.contains(&0) {
            // An empty output or an empty sum.
            return self.broadcast_zeros(&kept, to).primitive;
        }
        let (order, grouped, diag, slices) = diagonal(spec, &a.dims);
        let t = Self::reshape(Self::permute(Self::cast(a, to), &order), &grouped);
        let t = unless(slices.is_empty(), t, |t| B::float_slice(t, &slices));
        let flat = [kept.as_slice(), &[diag[kept.len()..].iter().product()]].concat();
        let sum = |t| B::float_sum_dim(Self::reshape(t, &flat), kept.len());
        Self::reshape(unless(spec.summed().is_empty(), t, sum), &kept)
    }

    /// `P_{pAB}(A·B)` by TTGT (transpose, transpose, GEMM, transpose) for A and B of one
    /// dtype (shapes already checked); batch axes lead both operands of one batched matmul.
    fn ttgt(&self, a: &BurnTensor<B>, b: &BurnTensor<B>, spec: &ContractSpec) -> FloatTensor<B> {
        let (da, db, to) = (&a.dims, &b.dims, self.dtype(a));
        let of = |d: &[usize], axes: &[usize]| axes.iter().map(|&i| d[i]).collect::<Vec<_>>();
        let (batch, open_a) = (of(da, spec.batch_a()), of(da, spec.open_a()));
        let (open_b, contr) = (of(db, spec.open_b()), of(da, spec.contr_a()));
        let inter = [batch.as_slice(), &open_a, &open_b].concat();
        let [l, m, n, k] = [&batch, &open_a, &open_b, &contr].map(|d| d.iter().product::<usize>());
        if l == 0 || m == 0 || n == 0 || k == 0 {
            // An empty result or an empty sum (some backends' matmul rejects empty matrices).
            let dims = spec.perm_ab().apply(&inter);
            return self.broadcast_zeros(&dims, to).primitive;
        }
        // Unbatched: one rank-2 matmul; batched: burn's matmul over the leading batch axis.
        let lead: &[usize] = if batch.is_empty() { &[] } else { &[l] };
        let matrix = |t, axes: &[&[usize]], rows_cols: [usize; 2]| {
            let t = Self::permute(Self::cast(t, to), &axes.concat());
            Self::reshape(t, &[lead, &rows_cols].concat())
        };
        let am = matrix(a, &[spec.batch_a(), spec.open_a(), spec.contr_a()], [m, k]);
        let bm = matrix(b, &[spec.batch_b(), spec.contr_b(), spec.open_b()], [k, n]);
        let cm = Self::reshape(B::float_matmul(am, bm), &inter);
        Self::permute(cm, spec.perm_ab().as_slice())
    }

    fn read(&self, t: FloatTensor<B>) -> Result<TensorData> {
        read_sync(B::float_into_data(t)).map_err(engine_error)
    }

    /// The one value of a one-element primitive, in `dtype`.
    fn read_value(&self, t: FloatTensor<B>, dtype: DType) -> Result<DynScalar> {
        transfers::record_scalar();
        let value = self.read(t)?.iter::<f64>().next();
        let value = value.ok_or_else(|| engine_error("an empty one-element tensor"))?;
        Ok(DynScalar::from_c64(value.into(), dtype))
    }
}

impl<B: Engine> Backend for BurnBackend<B> {
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
        transfers::record_to_host(data.bytes().len());
        let host = if dtype.is_double() {
            HostData::F64(data.try_into_vec::<f64>().map_err(engine_error)?)
        } else {
            HostData::F32(data.try_into_vec::<f32>().map_err(engine_error)?)
        };
        HostTensor::new(&t.dims, host)
    }

    fn from_host(&self, h: HostTensor) -> Result<Self::Tensor> {
        let (dims, data) = h.into_parts();
        transfers::record_from_host(data.len() * data.dtype().size_of());
        let data = match data {
            HostData::F32(v) => TensorData::new(v, physical(&dims)),
            HostData::F64(v) => TensorData::new(v, physical(&dims)),
            other => return Err(unsupported(format!("{} tensors", other.dtype()))),
        };
        let t = B::float_from_data(data, &self.device);
        Ok(BurnTensor::logical(t, &dims))
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
        let dc = self.supported(&[("c", c), ("a", a)])?;
        let k = check::add(self, c, a, p, alpha, beta)?;
        Self::add_real(c, a, p, k.alpha.re(), k.beta.re(), dc)
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
        let dc = self.supported(&[("c", c), ("a", a)])?;
        let beta = check::add_projected(self, c, a, p, beta)?.re();
        // Real data: the real part of α·P(A) is Re(α)·P(A), rounded to C's precision.
        Self::add_real(c, a, p, alpha.re(), beta, dc)
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
        let dc = self.supported(&[("c", c), ("a", a)])?;
        let k = check::trace(self, c, a, spec, alpha, beta)?;
        let (alpha, beta) = (k.alpha.re(), k.beta.re());
        let ac = Self::in_dtype(a, dc);
        let prim = TraceOp::new(spec.clone()).alpha(alpha).beta(beta).into();
        if !flex::run(c, &[&ac], Kernel::Primitive(&prim), dc)? {
            Self::update(c, self.trace_term(&ac, spec, dc), alpha, beta);
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
        let da = self.supported(&[("a", a), ("c", c)])?;
        check::add_to_diagonal(self, a, c, spec)?;
        let (cc, kernel) = (
            Self::in_dtype(c, da),
            Kernel::AddToDiagonal(spec, alpha.re()),
        );
        if flex::run(a, &[&cc], kernel, da)? || a.dims.contains(&0) {
            return Ok(());
        }
        // Real data: proj(α·C) = Re(α)·C rounded to A's precision, broadcast over the summed
        // groups, written on the diagonal of zeros of the grouped shape, then ungrouped.
        let (order, grouped, diag, slices) = diagonal(spec, &a.dims);
        let nk = spec.kept().len();
        let ones = [&diag[..nk], &vec![1; diag.len() - nk]].concat();
        let values = Self::scaled(Self::cast(c, da), alpha.re());
        let values = B::float_expand(Self::reshape(values, &ones), physical(&diag));
        let zeros = || B::float_zeros(physical(&grouped), &self.device, float_dtype(da));
        let on_zeros = |v| B::float_slice_assign(zeros(), &slices, v);
        let full = unless(slices.is_empty(), values, on_zeros);
        let ordered: Vec<usize> = order.iter().map(|&i| a.dims[i]).collect();
        let inverse = Permutation::named("trace spec (kept, summed)", &order)?.inverse();
        let full = Self::permute(Self::reshape(full, &ordered), inverse.as_slice());
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
        let dc = self.supported(&[("c", c), ("a", a), ("b", b)])?;
        let k = check::contract(self, c, a, b, spec, alpha, beta)?;
        let (alpha, beta) = (k.alpha.re(), k.beta.re());
        let (ac, bc) = (Self::in_dtype(a, dc), Self::in_dtype(b, dc));
        let prim = ContractOp::new(spec.clone()).alpha(alpha).beta(beta).into();
        if !flex::run(c, &[&ac, &bc], Kernel::Primitive(&prim), dc)? {
            Self::update(c, self.ttgt(&ac, &bc, spec), alpha, beta);
        }
        Ok(())
    }

    fn inner(&self, x: &Self::Tensor, y: &Self::Tensor) -> Result<DynScalar> {
        self.supported(&[("x", x), ("y", y)])?;
        let dtype = check::inner(self, x, y)?;
        if x.dims.contains(&0) {
            return Ok(DynScalar::zero(dtype));
        }
        let prod = B::float_mul(Self::cast(x, dtype), Self::cast(y, dtype));
        self.read_value(B::float_sum(prod), dtype)
    }

    /// `Σ (T − T) = 0` with burn's own ops on the tensor's device (an exact 0 for finite
    /// elements, NaN otherwise): two ops and one scalar read.
    fn all_finite(&self, t: &Self::Tensor) -> Result<bool> {
        let dtype = self.supported(&[("t", t)])?;
        if t.dims.contains(&0) {
            return Ok(true);
        }
        let d = B::float_sub(t.primitive.clone(), t.primitive.clone());
        Ok(self.read_value(B::float_sum(d), dtype)?.is_zero())
    }

    fn scale(&self, t: &mut Self::Tensor, s: DynScalar) -> Result<()> {
        let dt = self.supported(&[("t", t)])?;
        let s = s.cast(dt, "s")?.re();
        t.primitive = if s == 0.0 {
            self.broadcast_zeros(&t.dims, dt).primitive
        } else {
            Self::scaled(t.primitive.clone(), s)
        };
        Ok(())
    }

    fn scalar(&self, t: &Self::Tensor) -> Result<DynScalar> {
        self.supported(&[("tensor", t)])?;
        let dtype = check::scalar(self, t)?;
        self.read_value(t.primitive.clone(), dtype)
    }
}

#[cfg(test)]
mod flex_tests {
    //! The Flex fast path ([`flex::run`]) as the backend calls it.
    use adrules_core::HostTensor;
    use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};
    use burn_backend::ops::FloatTensorOps;
    use burn_flex::Flex;
    #[allow(deprecated)]
    use burn_ndarray::NdArray;

    use super::*;

    fn flex(h: &HostTensor) -> BurnTensor<Flex> {
        BurnBackend::<Flex>::new(Default::default())
            .from_host(h.clone())
            .unwrap()
    }

    #[test]
    fn only_flex_takes_the_fast_path() {
        let mut rng = Rng::seed(1);
        let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        let (a, b) = (
            rng.tensor(&[2, 3], DType::F64),
            rng.tensor(&[3, 4], DType::F64),
        );
        let fb = BurnBackend::<Flex>::new(Default::default());
        let mut c = fb.zeros(&[2, 4], DType::F64).unwrap();
        let prim = ContractOp::new(spec).into();
        let operands = [&flex(&a), &flex(&b)];
        assert!(flex::run(&mut c, &operands, Kernel::Primitive(&prim), DType::F64).unwrap());
        #[allow(deprecated)]
        let nb = BurnBackend::<NdArray>::new(Default::default());
        let mut c = nb.zeros(&[2, 4], DType::F64).unwrap();
        let (a, b) = (nb.from_host(a).unwrap(), nb.from_host(b).unwrap());
        assert!(!flex::run(&mut c, &[&a, &b], Kernel::Primitive(&prim), DType::F64).unwrap());
    }

    #[test]
    fn batched_contractions_diagonals_and_adjoints_take_the_fast_path() {
        let mut rng = Rng::seed(4);
        let fb = BurnBackend::<Flex>::new(Default::default());
        let batched = ContractSpec::from_labels("ibj", "bjk", "kbi").unwrap();
        let (a, b) = (
            flex(&rng.tensor(&[3, 2, 4], DType::F64)),
            flex(&rng.tensor(&[2, 4, 5], DType::F64)),
        );
        let mut c = fb.zeros(&[5, 2, 3], DType::F64).unwrap();
        let prim = ContractOp::new(batched).into();
        assert!(flex::run(&mut c, &[&a, &b], Kernel::Primitive(&prim), DType::F64).unwrap());
        let diagonal = TraceSpec::from_labels("ibjb", "jbi").unwrap();
        let x = flex(&rng.tensor(&[3, 2, 4, 2], DType::F32));
        let mut d = fb.zeros(&[4, 2, 3], DType::F32).unwrap();
        let prim = TraceOp::new(diagonal.clone()).alpha(2.0).into();
        assert!(flex::run(&mut d, &[&x], Kernel::Primitive(&prim), DType::F32).unwrap());
        let mut y = fb.zeros(&[3, 2, 4, 2], DType::F32).unwrap();
        let kernel = Kernel::AddToDiagonal(&diagonal, 1.0);
        assert!(flex::run(&mut y, &[&d], kernel, DType::F32).unwrap());
        // y holds d on its diagonal: tracing it again gives d back.
        let mut again = fb.zeros(&[4, 2, 3], DType::F32).unwrap();
        let (one, zero) = (1.0.into(), 0.0.into());
        fb.trace(&mut again, &y, &diagonal, Conj::No, one, zero)
            .unwrap();
        assert_eq!(fb.to_host(&again).unwrap(), fb.to_host(&d).unwrap());
    }

    #[test]
    fn strided_and_broadcast_operands_are_read_in_place() {
        let mut rng = Rng::seed(2);
        let spec = ContractSpec::from_labels("ijk", "kjl", "li").unwrap();
        let ha = rng.tensor(&[4, 3, 2], DType::F64); // stored as (k, j, i), read permuted
        let a = Flex::float_permute(flex(&ha).into_primitive(), &[2, 1, 0]);
        assert!(!a.is_contiguous(), "a transposed view, not a copy");
        let b = Flex::float_expand(
            flex(&rng.tensor(&[1, 3, 5], DType::F64)).into_primitive(),
            Shape::new([4, 3, 5]),
        );
        let (a, b) = (BurnTensor::new(a), BurnTensor::new(b));
        let fb = BurnBackend::<Flex>::new(Default::default());
        let mut c = fb.zeros(&[5, 2], DType::F64).unwrap();
        let prim = ContractOp::new(spec.clone()).alpha(2.0).into();
        assert!(flex::run(&mut c, &[&a, &b], Kernel::Primitive(&prim), DType::F64).unwrap());

        let r = ReferenceBackend;
        let (ra, rb) = (
            r.from_host(fb.to_host(&a).unwrap()).unwrap(),
            r.from_host(fb.to_host(&b).unwrap()).unwrap(),
        );
        let mut rc = r.zeros(&[5, 2], DType::F64).unwrap();
        r.contract(
            &mut rc,
            &ra,
            &rb,
            &spec,
            Conj::No,
            Conj::No,
            2.0.into(),
            0.0.into(),
        )
        .unwrap();
        Tolerance::for_dtype(DType::F64)
            .check(
                &Value::Tensor(fb.to_host(&c).unwrap()),
                &Value::Tensor((*rc).clone()),
                "contraction of a transposed and a broadcast operand",
            )
            .unwrap();
    }

    #[test]
    fn an_update_in_place_never_changes_another_handle() {
        let mut rng = Rng::seed(3);
        let (ha, hc) = (
            rng.tensor(&[3, 2], DType::F32),
            rng.tensor(&[2, 3], DType::F32),
        );
        let fb = BurnBackend::<Flex>::new(Default::default());
        let mut c = flex(&hc);
        let kept = c.clone();
        let p = Permutation::new(&[1, 0]).unwrap();
        let prim = AddOp::new(p).beta(1.0).into();
        assert!(flex::run(&mut c, &[&flex(&ha)], Kernel::Primitive(&prim), DType::F32).unwrap());
        assert_eq!(
            fb.to_host(&kept).unwrap(),
            hc,
            "the other handle is unchanged"
        );
        let got = fb.to_host(&c).unwrap();
        let (a, c0, g) = (
            ha.as_slice::<f32>().unwrap(),
            hc.as_slice::<f32>().unwrap(),
            got.as_slice::<f32>().unwrap(),
        );
        for i in 0..2 {
            for j in 0..3 {
                assert_eq!(g[i * 3 + j], c0[i * 3 + j] + a[j * 2 + i]);
            }
        }
    }
}
