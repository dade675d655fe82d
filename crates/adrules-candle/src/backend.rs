//! [`CandleBackend`]: the core [`Backend`] trait on candle tensors, so that every shared rule
//! (pullbacks, pushforwards, networks, implicit functions) runs on any candle device.

use adrules_core::rules::{AddOp, ContractOp, TraceOp};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, Error, HostData, HostTensor, Permutation,
    Result, TraceSpec,
};
use candle_core::{Device, Tensor};

use crate::convert::{NAME, candle_dtype, check_device, from_candle, tensor_dtype, unsupported};
use crate::ops::{AddNode, ContractNode, TraceNode};

/// The shared rules' [`Backend`] on candle tensors of one device.
///
/// `Tensor = candle_core::Tensor`; dtypes `f32` and `f64` (complex dtypes are
/// [`Error::Unsupported`]: candle has none). Candle tensors are immutable, so every "in-place"
/// update `C ← β·C + α·op(…)` replaces the handle `*c` with a new tensor: another handle to
/// the old C (a pullback's snapshot, the caller's copy) keeps seeing the old values, which is
/// the value semantics the rules rely on. For the same reason C may be the same tensor as A
/// or B: nothing is overwritten in place, so aliasing is harmless and not an error here.
///
/// Each primitive's `α·op(…)` runs the storage-level kernel of the matching custom op (one
/// code path for CPU, CUDA and Metal, see the crate docs), without recording a backward node;
/// `β·C` and the sum are candle's `affine` and `add`. Every tensor argument must live on this
/// backend's device ([`Error::DeviceMismatch`] otherwise).
///
/// [`Backend::dtype`] cannot fail: it reports every candle dtype other than `f64` as `F32`;
/// every primitive then rejects such a tensor with [`Error::Unsupported`].
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

    /// The dtype of `t` after checking it is served and lives on this device.
    fn check(&self, t: &Tensor, arg: &str) -> Result<DType> {
        check_device(t, &self.device, arg)?;
        tensor_dtype(t, arg)
    }

    /// Checks that `input` promotes to `target` (the strict primitives never narrow).
    fn check_promotes(arg: &str, input: DType, target: DType) -> Result<()> {
        if input.promotes_to(target) {
            Ok(())
        } else {
            Err(Error::DTypeMismatch {
                arg: arg.into(),
                expected: format!("a dtype that promotes to {target}"),
                actual: input,
            })
        }
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

    /// The shared part of `add` and `add_projected`: `*c ← β·c + cast(α·P_p(A))`, computed
    /// in `wide` and cast to C's dtype.
    #[allow(clippy::too_many_arguments)]
    fn add_in(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        p: &Permutation,
        alpha: f64,
        beta: f64,
        wide: DType,
        dc: DType,
    ) -> Result<()> {
        let node = AddNode::new(AddOp::new(p.clone()).alpha(alpha), wide)?;
        let t = a.apply_op1_no_bwd(&node).map_err(from_candle)?;
        let t = t.to_dtype(candle_dtype(dc)?).map_err(from_candle)?;
        Self::axpby(c, beta, t)
    }
}

impl Backend for CandleBackend {
    type Tensor = Tensor;

    fn name(&self) -> &'static str {
        NAME
    }

    fn dtypes(&self) -> &'static [DType] {
        &[DType::F32, DType::F64]
    }

    fn dims(&self, t: &Tensor) -> Dims {
        t.dims().iter().copied().collect()
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
        let flat = t.reshape(t.elem_count()).map_err(from_candle)?;
        let data = match dtype {
            DType::F32 => HostData::F32(flat.to_vec1().map_err(from_candle)?),
            _ => HostData::F64(flat.to_vec1().map_err(from_candle)?),
        };
        HostTensor::new(t.dims(), data)
    }

    fn from_host(&self, h: HostTensor) -> Result<Tensor> {
        let dtype = h.dtype();
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
        _conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        p.check_add(a.dims(), c.dims())?;
        let (da, dc) = (self.check(a, "a")?, self.check(c, "c")?);
        Self::check_promotes("a", da, dc)?;
        let (alpha, beta) = (alpha.cast(dc, "alpha")?.re(), beta.cast(dc, "beta")?.re());
        self.add_in(c, a, p, alpha, beta, dc, dc)
    }

    fn add_projected(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        p: &Permutation,
        _conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        p.check_add(a.dims(), c.dims())?;
        let (da, dc) = (self.check(a, "a")?, self.check(c, "c")?);
        let beta = beta.cast(dc, "beta")?.re();
        // Real data: proj(α·A) = Re(α)·A, computed in the wider dtype, rounded to C's.
        self.add_in(c, a, p, alpha.re(), beta, da.join(dc), dc)
    }

    fn trace(
        &self,
        c: &mut Tensor,
        a: &Tensor,
        spec: &TraceSpec,
        _conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        spec.check(a.dims(), c.dims())?;
        let (da, dc) = (self.check(a, "a")?, self.check(c, "c")?);
        Self::check_promotes("a", da, dc)?;
        let (alpha, beta) = (alpha.cast(dc, "alpha")?.re(), beta.cast(dc, "beta")?.re());
        let node = TraceNode::new(TraceOp::new(spec.clone()).alpha(alpha), dc)?;
        let t = a.apply_op1_no_bwd(&node).map_err(from_candle)?;
        Self::axpby(c, beta, t)
    }

    fn add_to_diagonal(
        &self,
        a: &mut Tensor,
        c: &Tensor,
        spec: &TraceSpec,
        _conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        spec.check(a.dims(), c.dims())?;
        let (da, dc) = (self.check(a, "a")?, self.check(c, "c")?);
        if a.elem_count() == 0 {
            return Ok(());
        }
        // A viewed as (P, Q, Q) with its axes ordered (p, q1, q2): the diagonal of the last
        // two is where every traced pair agrees, so the update is C (as P × 1) times the
        // flattened identity, scattered back to A's axis order.
        let dims = a.dims();
        let q: usize = spec.q1().iter().map(|&i| dims[i]).product();
        let wide = candle_dtype(da.join(dc))?;
        let eye = Tensor::eye(q, wide, &self.device)
            .and_then(|e| e.reshape((1, q * q)))
            .map_err(from_candle)?;
        let order: Vec<usize> = spec
            .p()
            .iter()
            .chain(spec.q1())
            .chain(spec.q2())
            .copied()
            .collect();
        let grouped: Vec<usize> = order.iter().map(|&i| dims[i]).collect();
        let back = Permutation::new(&order)?.inverse();
        let update = c
            .to_dtype(wide)
            .and_then(|c| c.reshape((c.elem_count(), 1)))
            .and_then(|c| c.broadcast_mul(&eye))
            .and_then(|d| d.affine(alpha.re(), 0.0))
            .and_then(|d| d.reshape(grouped))
            .and_then(|d| d.permute(back.as_slice()))
            .and_then(|d| d.to_dtype(a.dtype()))
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
        _conj_a: Conj,
        _conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        spec.check(a.dims(), b.dims(), c.dims())?;
        let (da, db, dc) = (
            self.check(a, "a")?,
            self.check(b, "b")?,
            self.check(c, "c")?,
        );
        Self::check_promotes("a", da, dc)?;
        Self::check_promotes("b", db, dc)?;
        let (alpha, beta) = (alpha.cast(dc, "alpha")?.re(), beta.cast(dc, "beta")?.re());
        let node = ContractNode::new(ContractOp::new(spec.clone()).alpha(alpha), dc)?;
        let t = a.apply_op2_no_bwd(b, &node).map_err(from_candle)?;
        Self::axpby(c, beta, t)
    }

    fn inner(&self, x: &Tensor, y: &Tensor) -> Result<DynScalar> {
        if x.dims() != y.dims() {
            return Err(Error::shape("y", x.dims(), y.dims()));
        }
        let dtype = self.check(x, "x")?.join(self.check(y, "y")?);
        // Σ x·y as one GEMM of a 1 × n row and an n × 1 column (no elementwise temporary).
        let all: Vec<usize> = (0..x.rank()).collect();
        let spec = ContractSpec::new(&[], &all, &all, &[], &[])?;
        let node = ContractNode::new(ContractOp::new(spec), dtype)?;
        let s = x.apply_op2_no_bwd(y, &node).map_err(from_candle)?;
        self.scalar(&s)
    }

    fn scale(&self, t: &mut Tensor, s: DynScalar) -> Result<()> {
        let dt = self.check(t, "t")?;
        let s = s.cast(dt, "s")?.re();
        if s == 0.0 {
            *t = t.zeros_like().map_err(from_candle)?;
        } else if s != 1.0 {
            *t = t.affine(s, 0.0).map_err(from_candle)?;
        }
        Ok(())
    }

    fn scalar(&self, t: &Tensor) -> Result<DynScalar> {
        if t.rank() != 0 {
            return Err(Error::rank("tensor", 0, t.rank()));
        }
        match tensor_dtype(t, "tensor")? {
            DType::F32 => Ok(DynScalar::F32(t.to_scalar().map_err(from_candle)?)),
            _ => Ok(DynScalar::F64(t.to_scalar().map_err(from_candle)?)),
        }
    }
}
