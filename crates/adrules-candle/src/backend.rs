//! [`CandleBackend`]: the core [`Backend`] trait on candle tensors, so that every shared rule
//! (pullbacks, pushforwards, networks, implicit functions) runs on any candle device.

use adrules_core::backend::{check, transfers};
use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, HostData, HostTensor, Permutation, Result,
    TraceSpec,
};
use candle_core::{Device, Tensor};

use crate::convert::{NAME, candle_dtype, check_device, from_candle, tensor_dtype, unsupported};
use crate::forward::Forward;

/// The shared rules' [`Backend`] on candle tensors of one device.
///
/// `Tensor = candle_core::Tensor`; dtypes `f32` and `f64` (complex dtypes are
/// [`Error::Unsupported`]: candle has none). Candle tensors are immutable, so every "in-place"
/// update `C ← β·C + α·op(…)` replaces the handle `*c` with a new tensor: another handle to
/// the old C (a pullback's snapshot, the caller's copy) keeps seeing the old values, which is
/// the value semantics the rules rely on. For the same reason C may be the same tensor as A
/// or B: nothing is overwritten in place, so aliasing is harmless and not an error here.
///
/// Each primitive's `α·op(…)` (permuted add, generalized trace, batched contraction) runs the
/// storage-level forward of the differentiable ops (one code path for CPU, CUDA and Metal,
/// see the crate docs), without recording a backward node; `β·C` and the sum are candle's
/// `affine` and `add`. [`Backend::add_to_diagonal`] (the trace's adjoint) is written with
/// candle's tensor ops (broadcast, zero padding, reshape, permute), so it too runs on any
/// device: each group of A's axes, flattened, holds its diagonal at a fixed stride.
///
/// # Checks
/// Every tensor argument must live on this backend's device ([`Error::DeviceMismatch`]) and
/// have dtype f32 or f64 ([`Error::Unsupported`] for candle's other dtypes); these come
/// first, then the checks of the [`Backend`] contract, shared by every backend
/// ([`adrules_core::backend::check`]: shapes, dtypes, coefficients).
///
/// [`Backend::dtype`] cannot fail: it reports every candle dtype other than `f64` as `F32`;
/// every primitive then rejects such a tensor with [`Error::Unsupported`].
///
/// [`Error::DeviceMismatch`]: adrules_core::Error::DeviceMismatch
/// [`Error::Unsupported`]: adrules_core::Error::Unsupported
#[derive(Clone, Debug)]
pub struct CandleBackend {
    device: Device,
}

impl CandleBackend {
    /// The backend on `device`.
    pub fn new(device: Device) -> Self {
        CandleBackend { device }
    }

    /// The backend on the CPU.
    pub fn cpu() -> Self {
        CandleBackend::new(Device::Cpu)
    }

    /// The device tensors of this backend live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Checks that every tensor of `args` (with its argument name) lives on this device and
    /// has a served dtype (f32, f64); returns the dtypes in order.
    fn served<const N: usize>(&self, args: [(&Tensor, &str); N]) -> Result<[DType; N]> {
        let mut dtypes = [DType::F32; N];
        for (d, (t, arg)) in dtypes.iter_mut().zip(args) {
            check_device(t, &self.device, arg)?;
            *d = tensor_dtype(t, arg)?;
        }
        Ok(dtypes)
    }

    /// `*c ← β·c + α·op(x)` for one primitive call, computed in `wide` and cast to C's dtype
    /// `dc`.
    fn update(
        &self,
        c: &mut Tensor,
        prim: Primitive,
        x: &[&Tensor],
        beta: f64,
        wide: DType,
        dc: DType,
    ) -> Result<()> {
        let t = Forward::new(prim, wide)?.apply(x)?;
        let t = t.to_dtype(candle_dtype(dc)?).map_err(from_candle)?;
        Self::axpby(c, beta, t)
    }

    /// `*c ← β·c + t` (β = 0 is a strong zero: C is not read).
    fn axpby(c: &mut Tensor, beta: f64, t: Tensor) -> Result<()> {
        *c = if beta == 0.0 {
            t
        } else if beta == 1.0 {
            (&*c + &t).map_err(from_candle)?
        } else {
            (c.affine(beta, 0.0).map_err(from_candle)? + &t).map_err(from_candle)?
        };
        Ok(())
    }
}

/// `t` with its axis `axis` (of dimension `n`) spread onto the diagonal of `g` axes of
/// dimension `n`, flattened: an axis of `n^g` entries holding entry `i` at `i·(1 + n + … +
/// n^(g−1))` and zeros elsewhere (`t` itself for `g = 1`). Padding the axis to `n × d` with
/// zeros and keeping the first `n^g` entries of the flattened pair puts every entry there.
fn onto_diagonal(t: &Tensor, axis: usize, n: usize, g: usize) -> Result<Tensor> {
    if g == 1 {
        return Ok(t.clone());
    }
    let d: usize = (0..g).map(|j| n.pow(j as u32)).sum();
    let mut flat = t.dims().to_vec();
    flat[axis] = n * d;
    t.unsqueeze(axis + 1)
        .and_then(|t| t.pad_with_zeros(axis + 1, 0, d - 1))
        .and_then(|t| t.reshape(flat))
        .and_then(|t| t.narrow(axis, 0, n.pow(g as u32)))
        .map_err(from_candle)
}

impl Backend for CandleBackend {
    type Tensor = Tensor;

    fn dims(&self, t: &Tensor) -> Dims {
        t.dims().iter().copied().collect()
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn dtypes(&self) -> &'static [DType] {
        &[DType::F32, DType::F64]
    }

    fn dtype(&self, t: &Tensor) -> DType {
        match t.dtype() {
            candle_core::DType::F64 => DType::F64,
            _ => DType::F32,
        }
    }

    /// A stride-0 broadcast of a single zero: O(1) memory. The rules only ever replace such
    /// a tensor (β = 0) or read it, so no dense buffer of zeros is allocated for a fresh
    /// cotangent or output.
    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::zeros((), candle_dtype(dtype)?, &self.device)
            .and_then(|z| z.broadcast_as(dims))
            .map_err(from_candle)
    }

    fn to_host(&self, t: &Tensor) -> Result<HostTensor> {
        let dtype = tensor_dtype(t, "tensor")?;
        transfers::record_to_host(t.elem_count() * dtype.size_of());
        let flat = t.reshape(t.elem_count()).map_err(from_candle)?;
        let data = match dtype {
            DType::F32 => HostData::F32(flat.to_vec1().map_err(from_candle)?),
            _ => HostData::F64(flat.to_vec1().map_err(from_candle)?),
        };
        HostTensor::new(t.dims(), data)
    }

    fn from_host(&self, h: HostTensor) -> Result<Tensor> {
        let dtype = h.dtype();
        transfers::record_from_host(h.len() * dtype.size_of());
        let (dims, data) = h.into_parts();
        let dims = dims.to_vec();
        match data {
            HostData::F32(v) => Tensor::from_vec(v, dims, &self.device).map_err(from_candle),
            HostData::F64(v) => Tensor::from_vec(v, dims, &self.device).map_err(from_candle),
            _ => Err(unsupported(dtype)),
        }
    }

    fn add(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        p: &Permutation,
        _: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let [_, dc] = self.served([(a, "a"), (c, "c")])?;
        let k = check::add(self, c, a, p, alpha, beta)?;
        let prim = AddOp::new(p.clone()).alpha(k.alpha.re()).into();
        self.update(c, prim, &[a], k.beta.re(), dc, dc)
    }

    fn add_projected(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        p: &Permutation,
        _: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let [da, dc] = self.served([(a, "a"), (c, "c")])?;
        let beta = check::add_projected(self, c, a, p, beta)?.re();
        // Real data: proj(α·A) = Re(α)·A, computed in the wider dtype, rounded to C's.
        let prim = AddOp::new(p.clone()).alpha(alpha.re()).into();
        self.update(c, prim, &[a], beta, da.join(dc), dc)
    }

    fn trace(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        spec: &TraceSpec,
        _: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let [_, dc] = self.served([(a, "a"), (c, "c")])?;
        let k = check::trace(self, c, a, spec, alpha, beta)?;
        let prim = TraceOp::new(spec.clone()).alpha(k.alpha.re()).into();
        self.update(c, prim, &[a], k.beta.re(), dc, dc)
    }

    fn add_to_diagonal(
        &self,
        a: &mut Tensor,
        c: &Tensor,
        spec: &TraceSpec,
        _: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        let [da, dc] = self.served([(a, "a"), (c, "c")])?;
        check::add_to_diagonal(self, a, c, spec)?;
        if a.elem_count() == 0 {
            return Ok(());
        }
        // With A's axes ordered by group (kept, then summed), a group of g axes of dimension
        // n is one axis of n^g entries whose diagonal is every d-th entry, d = 1 + n + … +
        // n^(g−1). The update is α·C broadcast over the summed groups, each group's axis
        // embedded onto that diagonal, scattered back to A's axis order.
        let dims = a.dims().to_vec();
        let groups: Vec<&[usize]> = spec
            .kept()
            .iter()
            .chain(spec.summed())
            .map(|g| g.as_slice())
            .collect();
        let group_dims: Vec<usize> = groups.iter().map(|g| dims[g[0]]).collect();
        let ones = vec![1; spec.summed().len()];
        let mut update = c
            .to_dtype(candle_dtype(da.join(dc))?)
            .and_then(|c| c.affine(alpha.re(), 0.0))
            .and_then(|c| c.to_dtype(a.dtype()))
            .and_then(|c| c.reshape([c.dims(), &ones].concat()))
            .and_then(|c| c.broadcast_as(group_dims.as_slice()))
            .map_err(from_candle)?;
        for (axis, g) in groups.iter().enumerate() {
            update = onto_diagonal(&update, axis, group_dims[axis], g.len())?;
        }
        let order: Vec<usize> = groups.concat();
        let grouped: Vec<usize> = order.iter().map(|&i| dims[i]).collect();
        let back = Permutation::new(&order)?.inverse();
        let update = update
            .reshape(grouped)
            .and_then(|u| u.permute(back.as_slice()))
            .map_err(from_candle)?;
        *a = (&*a + &update).map_err(from_candle)?;
        Ok(())
    }

    fn contract(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        b: &Tensor,
        spec: &ContractSpec,
        _: Conj,
        _: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let [_, _, dc] = self.served([(a, "a"), (b, "b"), (c, "c")])?;
        let k = check::contract(self, c, a, b, spec, alpha, beta)?;
        let prim = ContractOp::new(spec.clone()).alpha(k.alpha.re()).into();
        self.update(c, prim, &[a, b], k.beta.re(), dc, dc)
    }

    fn inner(&self, x: &Tensor, y: &Tensor) -> Result<DynScalar> {
        self.served([(x, "x"), (y, "y")])?;
        let dtype = check::inner(self, x, y)?;
        // Σ x·y as one GEMM of a 1 × n row and an n × 1 column (no elementwise temporary).
        let all: Vec<usize> = (0..x.rank()).collect();
        let spec = ContractSpec::new(&[], &all, &all, &[], &[])?;
        let s = Forward::new(ContractOp::new(spec).into(), dtype)?.apply(&[x, y])?;
        self.scalar(&s)
    }

    /// `Σ (T − T) = 0` with candle's own ops on the tensor's device (an exact 0 for finite
    /// elements, NaN otherwise).
    fn all_finite(&self, t: &Tensor) -> Result<bool> {
        self.served([(t, "t")])?;
        if t.elem_count() == 0 {
            return Ok(true);
        }
        let s = t
            .sub(t)
            .and_then(|d| d.sum_all())
            .and_then(|s| s.to_dtype(candle_core::DType::F64))
            .and_then(|s| s.to_scalar::<f64>())
            .map_err(from_candle)?;
        Ok(s == 0.0)
    }

    fn scale(&self, t: &mut Tensor, s: DynScalar) -> Result<()> {
        let [dt] = self.served([(t, "t")])?;
        let s = s.cast(dt, "s")?.re();
        if s == 0.0 {
            *t = t.zeros_like().map_err(from_candle)?;
        } else if s != 1.0 {
            *t = t.affine(s, 0.0).map_err(from_candle)?;
        }
        Ok(())
    }

    fn scalar(&self, t: &Tensor) -> Result<DynScalar> {
        tensor_dtype(t, "tensor")?;
        transfers::record_scalar();
        match check::scalar(self, t)? {
            DType::F32 => Ok(DynScalar::F32(t.to_scalar().map_err(from_candle)?)),
            _ => Ok(DynScalar::F64(t.to_scalar().map_err(from_candle)?)),
        }
    }
}
