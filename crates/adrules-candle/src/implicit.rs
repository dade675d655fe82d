//! Implicit functions on candle: conditions written with candle tensors become the core's
//! [`LinearMaps`] through candle's autograd, and [`implicit`] registers the implicit pullback
//! as a candle op (the solver is never differentiated).
//!
//! # Where each map comes from
//! Candle has reverse mode only. The conditions' graph `c(x, y)` is built once at the
//! solution, and [`CandleConditions`] supplies the core's [`ConditionsVjp`]: the values of
//! `c` and one vector–Jacobian product, a `backward()` of `⟨c, u⟩` through that graph (real
//! data, so `Aᴴ = Aᵀ`), giving `Aᴴ·u` and `Bᴴ·u` exactly. The core's [`VjpMaps`] turns that
//! into the four maps: the adjoint ones by one backward pass per vector, the forward ones
//! (pushforwards, a dense `A` for the dense solvers) from the Jacobians it assembles from `m`
//! unit VJPs once, on first use. A matrix-free adjoint solve (GMRES or CG on `Aᴴ`, what
//! [`Method::Auto`](adrules_core::implicit::Method::Auto) picks for large `m`) never
//! assembles them: it costs one backward pass per Krylov iteration. No finite differences,
//! no second-order autograd (which candle only gives through the process-wide
//! `CANDLE_GRAD_DO_NOT_DETACH` switch).

use adrules_core::implicit::{
    Conditions, ConditionsVjp, ImplicitFunction, ImplicitScalar, LinearMaps, Linearization, Point,
    Structure, VjpMaps,
};
use adrules_core::{Backend, Error, HostTensor, Result};
use candle_core::backprop::GradStore;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, Device, Layout, MetalStorage, Shape, Tensor, Var, WithDType,
};

use crate::backend::CandleBackend;
use crate::convert::{check_device, from_candle, to_candle};
use crate::kernel::Storage;

/// The element types of implicit functions on candle: `f32` and `f64` (the types that are
/// both candle dtypes and [`ImplicitScalar`]s; not meant to be implemented by hand).
pub trait CandleScalar: ImplicitScalar + WithDType {}
impl<T: ImplicitScalar + WithDType> CandleScalar for T {}

/// Conditions `c(x, y, z, args) = 0` written with candle tensors, as a source of the core's
/// [`Conditions`]: `f(x, y, z, args)` receives the inputs and the solution as candle tensors
/// on `device` (shaped as given to the implicit function) and returns the conditions as one
/// tensor of any shape with as many elements as `y` (flattened row-major), of the same dtype.
///
/// Wrap it in [`FixedPoint`](adrules_core::implicit::FixedPoint) to write a map `T(x, y)`
/// instead of conditions. See the [module documentation](self) for how each linear map is
/// obtained.
pub struct CandleConditions<F> {
    device: Device,
    f: F,
    structure: Structure,
}

impl<F> CandleConditions<F> {
    /// The conditions `f`, evaluated on `device`.
    pub fn new(device: Device, f: F) -> Self {
        CandleConditions {
            device,
            f,
            structure: Structure::General,
        }
    }

    /// Declares the structure of `A = ∂c/∂y` (see [`Structure`]).
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }
}

impl<T, Z, A, F> Conditions<T, Z, A> for CandleConditions<F>
where
    T: CandleScalar,
    A: ?Sized,
    F: Fn(&[Tensor], &Tensor, &Z, &A) -> candle_core::Result<Tensor>,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        let be = CandleBackend::new(self.device.clone());
        let var = |h: &HostTensor| -> Result<Var> {
            Var::from_tensor(&be.from_host(h.clone())?).map_err(from_candle)
        };
        let x: Vec<Var> = at.x.iter().map(var).collect::<Result<_>>()?;
        let y = var(at.y)?;
        let xt: Vec<Tensor> = x.iter().map(|v| v.as_tensor().clone()).collect();
        let c = (self.f)(&xt, y.as_tensor(), at.byproduct, at.args).map_err(from_candle)?;
        if c.dtype() != <T as WithDType>::DTYPE {
            return Err(Error::DTypeMismatch {
                arg: "conditions c(x, y)".into(),
                expected: format!("{} (the dtype of y)", <T as adrules_core::Scalar>::DTYPE),
                actual: crate::convert::adrules_dtype(c.dtype(), "conditions c(x, y)")?,
            });
        }
        let m = at.y.len();
        if c.elem_count() != m {
            return Err(Error::shape(
                "conditions c(x, y) (elements)",
                &[m],
                &[c.elem_count()],
            ));
        }
        let c = c.flatten_all().map_err(from_candle)?;
        let values = c.to_vec1::<T>().map_err(from_candle)?;
        let vjp = CandleVjp {
            c,
            x,
            y,
            m,
            n: at.x.iter().map(HostTensor::len).sum(),
            values,
        };
        Ok(Box::new(VjpMaps::new(vjp).with_structure(self.structure)))
    }
}

/// The conditions of [`CandleConditions`] at one point: their graph and its leaves.
struct CandleVjp<T: CandleScalar> {
    /// `c(x, y)` flattened, with its graph back to the leaves
    c: Tensor,
    x: Vec<Var>,
    y: Var,
    m: usize,
    n: usize,
    values: Vec<T>,
}

/// The gradient of `v` in `grads`, flattened, into `out` (zeros when `c` does not depend on
/// `v`).
fn write<T: CandleScalar>(grads: &GradStore, v: &Var, out: &mut [T]) -> Result<()> {
    match grads.get(v.as_tensor()) {
        Some(g) => {
            let g = g
                .flatten_all()
                .and_then(|g| g.to_vec1::<T>())
                .map_err(from_candle)?;
            out.copy_from_slice(&g);
        }
        None => out.fill(T::zero()),
    }
    Ok(())
}

impl<T: CandleScalar> ConditionsVjp<T> for CandleVjp<T> {
    fn num_unknowns(&self) -> usize {
        self.m
    }

    fn num_inputs(&self) -> usize {
        self.n
    }

    fn values(&self) -> &[T] {
        &self.values
    }

    /// One backward pass of `⟨c, u⟩`: the gradient of `y` is `Aᴴ·u`, those of the inputs,
    /// concatenated, `Bᴴ·u`.
    fn vjp(&self, u: &[T], y_bar: Option<&mut [T]>, x_bar: Option<&mut [T]>) -> Result<()> {
        let u = Tensor::from_slice(u, self.m, self.c.device()).map_err(from_candle)?;
        let grads = (&self.c * &u)
            .and_then(|p| p.sum_all())
            .and_then(|l| l.backward())
            .map_err(from_candle)?;
        if let Some(out) = y_bar {
            write(&grads, &self.y, out)?;
        }
        if let Some(out) = x_bar {
            let mut offset = 0;
            for x in &self.x {
                let len = x.elem_count();
                write(&grads, x, &mut out[offset..offset + len])?;
                offset += len;
            }
        }
        Ok(())
    }
}

/// The candle op of an implicit function: forward = the solution `y` (already computed),
/// backward = the implicit pullback `x̄ = Bᴴ·u`, `Aᴴ·u = −ȳ`, for the inputs packed into one
/// vector.
struct ImplicitNode<T: CandleScalar> {
    lin: Linearization<T>,
}

impl<T: CandleScalar> ImplicitNode<T> {
    fn fwd<S: Storage>(&self, (s, _): (&S, &Layout)) -> candle_core::Result<(S, Shape)> {
        let y = self.lin.y();
        let data = y.as_slice::<T>().map_err(to_candle)?;
        let storage = candle_core::backend::BackendDevice::storage_from_slice(s.device(), data)?;
        Ok((storage, Shape::from(y.dims())))
    }
}

impl<T: CandleScalar> CustomOp1 for ImplicitNode<T> {
    fn name(&self) -> &'static str {
        "adrules-implicit"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.fwd((s, l))
    }
    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        self.fwd((s, l))
    }
    fn metal_fwd(
        &self,
        s: &MetalStorage,
        l: &Layout,
    ) -> candle_core::Result<(MetalStorage, Shape)> {
        self.fwd((s, l))
    }

    fn bwd(
        &self,
        x: &Tensor,
        _res: &Tensor,
        y_bar: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let be = CandleBackend::new(y_bar.device().clone());
        let y_bar = be.to_host(y_bar).map_err(to_candle)?;
        let x_bar = self.lin.vjp(&y_bar).map_err(to_candle)?;
        let mut packed = Vec::with_capacity(x.elem_count());
        for g in &x_bar {
            packed.extend_from_slice(g.as_slice::<T>().map_err(to_candle)?);
        }
        Tensor::from_vec(packed, x.elem_count(), x.device()).map(Some)
    }
}

/// Evaluates the implicit function `func` at the candle tensors `x` and records its
/// pullback in candle's graph: returns `y` (on the device of `x`) and the solver's byproduct.
///
/// The solver runs once, on host copies of `x`, and is never differentiated; the pullback is
/// the implicit-function rule of the core ([`Linearization::vjp`]: solve `Aᴴ·u = −ȳ`, then
/// `x̄ = Bᴴ·u`), with the linear maps of `func`'s conditions (for example
/// [`CandleConditions`]). Candle differentiates at most three inputs per op, so the inputs are
/// flattened and concatenated into one tensor (candle's own `cat`, whose backward hands each
/// input its slice of the gradient): any number of inputs gets its gradient, for one copy of
/// `x`. With no input, `y` is returned as a constant.
///
/// # Errors
/// A typed [`Error`] wrapped in candle's error (recover it with
/// [`adrules_error`](crate::adrules_error)): [`Error::DeviceMismatch`] when the inputs live
/// on different devices; [`Error::DTypeMismatch`] when an input is not of dtype `T`; the
/// errors of [`ImplicitFunction::vjp`] (the solver's, the conditions', the linear solver's).
pub fn implicit<T, Z, A, S, C>(
    func: &ImplicitFunction<T, Z, A, S, C>,
    x: &[&Tensor],
    args: &A,
) -> candle_core::Result<(Tensor, Z)>
where
    T: CandleScalar,
    A: ?Sized,
    S: Fn(&[HostTensor], &A) -> Result<(HostTensor, Z)>,
    C: Conditions<T, Z, A>,
{
    record(func, x, args).map_err(to_candle)
}

/// [`implicit`] with the adrules error.
fn record<T, Z, A, S, C>(
    func: &ImplicitFunction<T, Z, A, S, C>,
    x: &[&Tensor],
    args: &A,
) -> Result<(Tensor, Z)>
where
    T: CandleScalar,
    A: ?Sized,
    S: Fn(&[HostTensor], &A) -> Result<(HostTensor, Z)>,
    C: Conditions<T, Z, A>,
{
    let device = x.first().map_or(Device::Cpu, |t| t.device().clone());
    for (i, t) in x.iter().enumerate() {
        check_device(t, &device, &format!("x[{i}]"))?;
    }
    let be = CandleBackend::new(device.clone());
    let xh: Vec<HostTensor> = x.iter().map(|t| be.to_host(t)).collect::<Result<_>>()?;
    let (y, z, lin) = func.vjp(&xh, args)?;
    if x.is_empty() {
        return Ok((be.from_host(y)?, z));
    }
    let flat: Vec<Tensor> = x
        .iter()
        .map(|t| t.flatten_all())
        .collect::<candle_core::Result<_>>()
        .map_err(from_candle)?;
    let packed = Tensor::cat(&flat, 0).map_err(from_candle)?;
    let out = packed
        .apply_op1(ImplicitNode { lin })
        .map_err(from_candle)?;
    Ok((out, z))
}
