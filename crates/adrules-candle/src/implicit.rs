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

use std::sync::Arc;

use adrules_core::implicit::{
    Conditions, ConditionsVjp, ImplicitFunction, ImplicitScalar, LinearMaps, Point, SolverOptions,
    Structure, VjpMaps, device,
};
use adrules_core::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};
use adrules_core::{Backend, Error, HostTensor, Result};
use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor, Var, WithDType};

use crate::backend::CandleBackend;
use crate::convert::{check_device, from_candle, to_candle};

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

/// Evaluates the implicit function `func` at the candle tensors `x` and records its
/// pullback in candle's graph: returns `y` (on the device of `x`) and the solver's byproduct.
///
/// The solver runs once, on host copies of `x`, and is never differentiated; the pullback is
/// the implicit-function rule of the core
/// ([`Linearization::vjp`](adrules_core::implicit::Linearization::vjp): solve
/// `Aᴴ·u = −ȳ`, then `x̄ = Bᴴ·u`), with the linear maps of `func`'s conditions (for example
/// [`CandleConditions`]). The [`Linearization`](adrules_core::implicit::Linearization) is
/// the implicit function's core [`Rule`] at this solution, recorded by the crate's one
/// bridge ([`apply_rule`](crate::apply_rule)): `y` is copied to the device of `x`, and any
/// number of inputs gets its gradient (more than 3 are packed into one op, one copy of
/// `x`). With no input, `y` is returned as a constant.
///
/// # Errors
/// A typed [`Error`] wrapped in candle's error (recover it with
/// [`adrules_error`](crate::adrules_error)): [`Error::DeviceMismatch`] when the inputs live
/// on different devices; [`Error::DTypeMismatch`] when an input is not of dtype `T`; the
/// errors of [`ImplicitFunction::vjp`] (the solver's, the conditions', the linear solver's,
/// a non-finite input or solution, a solution above the function's
/// [conditions tolerance](ImplicitFunction::with_conditions_tolerance)). In backward:
/// [`Error::InvalidArgument`] (`"y_bar"`) for a non-finite cotangent (the policy of
/// [`adrules_core::implicit`]), the linear solver's.
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
    // the linearization is the implicit function's rule at this solution: the crate's one
    // bridge records it
    let y = crate::rule::run(&lin, x)?.remove(0);
    Ok((y, z))
}

/// The solver of an [`Implicit`]: `y` from the inputs, candle tensors on their device.
type DeviceSolver = dyn Fn(&[Tensor]) -> candle_core::Result<Tensor> + Send + Sync;
/// The conditions of an [`Implicit`]: `c(x, y)` from candle tensors on the inputs' device.
type DeviceConditions = dyn Fn(&[Tensor], &Tensor) -> candle_core::Result<Tensor> + Send + Sync;

/// A function `y(x)` computed by a solver and defined by conditions `c(x, y) = 0`, both
/// closures on candle tensors **on the inputs' device** (CPU, CUDA, Metal): nothing is copied
/// to the host in the forward pass, and a matrix-free pullback stays on the device.
///
/// [`implicit`] takes the core's [`ImplicitFunction`], whose solver works on host tensors;
/// this type is for solvers written in candle (a fixed-point iteration on the GPU, say).
///
/// # Math and where it runs
/// The pullback of `ȳ` solves `Aᴴ·u = −ȳ` and returns `x̄ = Bᴴ·u` (`A = ∂c/∂y`,
/// `B = ∂c/∂x` at the solution; real data, so `ᴴ = ᵀ`), with `Aᴴ·u` and `Bᴴ·u` from one
/// candle backward pass of `⟨c(x, y), u⟩` through the conditions' graph, built once at the
/// solution. With a matrix-free solver (GMRES, CG: [`Method::Auto`] for `m >`
/// [`AUTO_DENSE_LIMIT`], or asked for) the solve runs on the device through
/// [`adrules_core::implicit::device`]: its vectors are candle tensors, one backward pass per
/// iteration, only scalars (inner products, norms) read back. With a dense solver
/// ([`Method::Lu`], [`Method::Cholesky`], `Auto` for `m ≤ 200`) it runs on the host: `x`,
/// `y`, `ȳ` are copied there once, `A` is assembled from `m` VJPs (each unit vector copied to
/// the device, its VJP back), factorized by faer, and `x̄` is copied back.
///
/// # Layout
/// `solver(x)` receives the inputs as given (detached from the graph) and returns `y` of any
/// shape; `conditions(x, y)` receives the inputs and `y` (as variables of a fresh graph) and
/// returns `c` with as many elements as `y`. All inputs and `y` share one dtype, f32 or f64,
/// and one device. The output is `y`, differentiable with respect to every input.
///
/// The op is a core [`Rule`] run through the crate's one bridge
/// ([`apply_rule`](crate::apply_rule)): one custom op over the inputs whose output is `y`
/// (copied once into candle's storage) and whose backward is the implicit pullback; with more
/// than 3 inputs (candle's custom ops take at most 3) its one input is every input flattened
/// and concatenated (one copy of the inputs).
///
/// [`Method::Auto`]: adrules_core::implicit::Method::Auto
/// [`Method::Lu`]: adrules_core::implicit::Method::Lu
/// [`Method::Cholesky`]: adrules_core::implicit::Method::Cholesky
/// [`AUTO_DENSE_LIMIT`]: adrules_core::implicit::AUTO_DENSE_LIMIT
#[derive(Clone)]
pub struct Implicit {
    solver: Arc<DeviceSolver>,
    conditions: Arc<DeviceConditions>,
    options: SolverOptions,
    structure: Structure,
    conditions_tolerance: Option<f64>,
}

impl std::fmt::Debug for Implicit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Implicit")
            .field("options", &self.options)
            .field("structure", &self.structure)
            .finish_non_exhaustive()
    }
}

impl Implicit {
    /// The function computed by `solver` and defined by `conditions` (see the type's docs),
    /// with the core's default linear solver ([`SolverOptions::default`]).
    pub fn new(
        solver: impl Fn(&[Tensor]) -> candle_core::Result<Tensor> + Send + Sync + 'static,
        conditions: impl Fn(&[Tensor], &Tensor) -> candle_core::Result<Tensor> + Send + Sync + 'static,
    ) -> Self {
        Implicit {
            solver: Arc::new(solver),
            conditions: Arc::new(conditions),
            options: SolverOptions::default(),
            structure: Structure::General,
            conditions_tolerance: None,
        }
    }

    /// Refuses solutions that do not satisfy the conditions: the forward pass evaluates
    /// `c(x, y)` once more (no graph) and returns [`Error::NotConverged`]
    /// (`"conditions c(x, y)"`) when `‖c‖₂ > tolerance` (absolute), as
    /// [`ImplicitFunction::with_conditions_tolerance`] does. Off by default.
    pub fn with_conditions_tolerance(mut self, tolerance: f64) -> Self {
        self.conditions_tolerance = Some(tolerance);
        self
    }

    /// Uses these options for the linear solves of the pullback.
    pub fn with_linear_solver(mut self, options: SolverOptions) -> Self {
        self.options = options;
        self
    }

    /// Declares the structure of `A = ∂c/∂y` (see [`Structure`]; CG needs a definite tag).
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }

    /// `y(x)`, recorded in candle's graph with the implicit pullback.
    ///
    /// # Errors
    /// A typed [`Error`] in candle's error (see [`adrules_error`](crate::adrules_error)):
    /// [`Error::InvalidArgument`] (`"x"`) for no input; [`Error::DeviceMismatch`] for inputs on
    /// different devices or a `y` on another device; [`Error::DTypeMismatch`] for inputs or
    /// `y` of different dtypes, [`Error::Unsupported`] for a dtype other than f32/f64; the
    /// solver's errors; [`Error::InvalidArgument`] (`"x[i]"` or `"y (solver output)"`) for a
    /// non-finite input or solution, and with a
    /// [conditions tolerance](Self::with_conditions_tolerance) [`Error::NotConverged`]
    /// (`"conditions c(x, y)"`): the policy of [`adrules_core::implicit`]. In backward (candle
    /// returns them from `backward()`): [`Error::InvalidArgument`] (`"y_bar"`) for a
    /// non-finite cotangent, the conditions' errors (wrong number of values, dtype) and the
    /// linear solver's.
    pub fn apply(&self, x: &[&Tensor]) -> candle_core::Result<Tensor> {
        self.record(x).map_err(to_candle)
    }

    fn record(&self, x: &[&Tensor]) -> Result<Tensor> {
        let first = x
            .first()
            .ok_or_else(|| Error::invalid("x", "an implicit function needs at least one input"))?;
        let (device, dtype) = (first.device().clone(), first.dtype());
        crate::convert::adrules_dtype(dtype, "x[0]")?;
        for (i, t) in x.iter().enumerate() {
            check_device(t, &device, &format!("x[{i}]"))?;
            same_dtype(t.dtype(), dtype, &format!("x[{i}]"))?;
        }
        let call = ImplicitCall {
            f: self.clone(),
            n: x.len(),
        };
        Ok(crate::rule::run(&call, x)?.remove(0))
    }

    /// `y(x)` by the solver on `be` from the inputs `detached` (without their graph), checked
    /// (finiteness, device and dtype of `y`, the conditions tolerance).
    fn solve(&self, be: &CandleBackend, detached: &[Tensor]) -> Result<Tensor> {
        let (device, dtype) = (be.device(), detached[0].dtype());
        for (i, t) in detached.iter().enumerate() {
            device::check_finite(be, t, &format!("x[{i}]"))?;
        }
        let y = (self.solver)(detached).map_err(from_candle)?.detach();
        check_device(&y, device, "y (solver output)")?;
        same_dtype(y.dtype(), dtype, "y (solver output)")?;
        device::check_finite(be, &y, "y (solver output)")?;
        if let Some(tolerance) = self.conditions_tolerance {
            let arg = "conditions c(x, y)";
            let c = (self.conditions)(detached, &y).map_err(from_candle)?;
            if c.elem_count() != y.elem_count() {
                return Err(Error::shape(
                    "conditions c(x, y) (elements)",
                    &[y.elem_count()],
                    &[c.elem_count()],
                ));
            }
            same_dtype(c.dtype(), dtype, arg)?;
            let c = c.flatten_all().map_err(from_candle)?;
            device::check_conditions(be, &c, tolerance)?;
        }
        Ok(y)
    }
}

/// An [`Implicit`] called with `n` inputs, as a core [`Rule`] run by the crate's bridge
/// ([`apply_rule`](crate::apply_rule); more than 3 inputs are packed into one op there): its
/// closures are candle code, so it runs on [`CandleBackend`] only.
#[derive(Clone, Debug)]
struct ImplicitCall {
    f: Implicit,
    n: usize,
}

impl Rule for ImplicitCall {
    fn name(&self) -> &str {
        "implicit"
    }

    fn num_inputs(&self) -> usize {
        self.n
    }

    fn num_outputs(&self) -> usize {
        1
    }

    /// Every input and the solution `y`, when an input is active
    /// ([`device::rule_keeps`]).
    fn keeps(&self, active: &[bool]) -> Keeps {
        device::rule_keeps(active)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let be: &CandleBackend = cast_ref(be)?;
        let x = x.iter().map(|t| cast_ref::<_, Tensor>(*t).cloned());
        let y = self.f.solve(be, &x.collect::<Result<Vec<_>>>()?)?;
        let (f, n) = (self.f.clone(), self.n);
        let pullback = move |_: &B, p: &Primal<B>, c: &[Option<B::Tensor>]| {
            let Some(y_bar) = &c[0] else {
                return Ok(vec![None; n]);
            };
            let x = (0..n).map(|i| cast_ref::<_, Tensor>(p.input(i)?).cloned());
            let point = DevicePoint {
                f: f.clone(),
                x: x.collect::<Result<_>>()?,
                y: cast_ref::<_, Tensor>(p.output(0)?)?.clone(),
            };
            let y_bar: &Tensor = cast_ref(y_bar)?;
            let x_bar = match point.y.dtype() {
                candle_core::DType::F64 => point.pullback::<f64>(y_bar)?,
                _ => point.pullback::<f32>(y_bar)?,
            };
            let keep = |(g, &on): (Tensor, &bool)| on.then(|| cast(g)).transpose();
            x_bar.into_iter().zip(p.activity()).map(keep).collect()
        };
        Ok((vec![cast(y)?], Box::new(pullback)))
    }
}

/// What a [`cast_ref`] or [`cast`] that fails was for.
const CANDLE_CODE: &str = "an implicit function with candle closures (it runs on candle only)";

/// `x` as the candle type `Y` it is ([`adrules_core::rule::downcast_ref`]).
///
/// # Errors
/// [`Error::Unsupported`] when it is not (an [`Implicit`] called on another backend).
fn cast_ref<X: 'static, Y: 'static>(x: &X) -> Result<&Y> {
    adrules_core::rule::downcast_ref(x, CANDLE_CODE)
}

/// `x` as the type `Y` it is, by value ([`adrules_core::rule::downcast`]).
///
/// # Errors
/// As [`cast_ref`].
fn cast<X: 'static, Y: 'static>(x: X) -> Result<Y> {
    adrules_core::rule::downcast(x, CANDLE_CODE)
}

/// Checks that argument `arg` has the dtype `want` of the first input.
fn same_dtype(actual: candle_core::DType, want: candle_core::DType, arg: &str) -> Result<()> {
    if actual == want {
        return Ok(());
    }
    Err(Error::DTypeMismatch {
        arg: arg.into(),
        expected: format!("{want:?}, the dtype of x[0]"),
        actual: crate::convert::adrules_dtype(actual, arg)?,
    })
}

/// An [`Implicit`] at its solution: the inputs and `y`, detached.
struct DevicePoint {
    f: Implicit,
    x: Vec<Tensor>,
    y: Tensor,
}

impl DevicePoint {
    /// The conditions' graph at `(x, y)`, as the VJP source of the pullback.
    fn graph<T: CandleScalar>(&self) -> Result<CandleVjp<T>> {
        let var = |t: &Tensor| Var::from_tensor(t).map_err(from_candle);
        let x: Vec<Var> = self.x.iter().map(var).collect::<Result<_>>()?;
        let y = var(&self.y)?;
        let xt: Vec<Tensor> = x.iter().map(|v| v.as_tensor().clone()).collect();
        let c = (self.f.conditions)(&xt, y.as_tensor()).map_err(from_candle)?;
        let m = self.y.elem_count();
        if c.elem_count() != m {
            return Err(Error::shape(
                "conditions c(x, y) (elements)",
                &[m],
                &[c.elem_count()],
            ));
        }
        same_dtype(c.dtype(), self.y.dtype(), "conditions c(x, y)")?;
        let c = c.flatten_all().map_err(from_candle)?;
        let n = self.x.iter().map(Tensor::elem_count).sum();
        Ok(CandleVjp {
            c,
            x,
            y,
            m,
            n,
            values: Vec::new(),
        })
    }

    /// `x̄` (packed like the op's input) for `ȳ`: the core's engine pullback, a dense solve
    /// on the host or a matrix-free one on the device ([`device::engine_pullback`]).
    fn pullback<T: CandleScalar>(&self, y_bar: &Tensor) -> Result<Vec<Tensor>> {
        let be = CandleBackend::new(self.y.device().clone());
        let structure = self.f.structure;
        let flat = |t: &Tensor| t.flatten_all().map_err(from_candle);
        let (y, y_bar) = (flat(&self.y)?, flat(y_bar)?);
        let host = || -> Result<VjpMaps<T, CandleVjp<T>>> {
            let mut vjp = self.graph::<T>()?;
            vjp.values = vjp.c.to_vec1::<T>().map_err(from_candle)?;
            Ok(VjpMaps::new(vjp).with_structure(structure))
        };
        let device = || -> Result<DeviceMaps<T>> {
            let vjp = self.graph::<T>()?;
            Ok(DeviceMaps { vjp, structure })
        };
        let x: Vec<&Tensor> = self.x.iter().collect();
        let options = &self.f.options;
        let x_bar = device::engine_pullback(&be, &x, &y, &y_bar, options, host, device)?;
        let shaped = |(g, x): (Tensor, &Tensor)| g.reshape(x.shape()).map_err(from_candle);
        x_bar.into_iter().zip(&self.x).map(shaped).collect()
    }
}

/// The adjoint maps of the conditions' graph on candle tensors (the device pullback).
struct DeviceMaps<T: CandleScalar> {
    vjp: CandleVjp<T>,
    structure: Structure,
}

impl<T: CandleScalar> DeviceMaps<T> {
    /// The gradients of `⟨c, u⟩`.
    fn backward(&self, u: &Tensor) -> Result<GradStore> {
        let u = u.flatten_all().map_err(from_candle)?;
        (&self.vjp.c * &u)
            .and_then(|p| p.sum_all())
            .and_then(|l| l.backward())
            .map_err(from_candle)
    }
}

impl<T: CandleScalar> device::AdjointMaps<CandleBackend> for DeviceMaps<T> {
    fn num_unknowns(&self) -> usize {
        self.vjp.m
    }

    fn structure(&self) -> Structure {
        self.structure
    }

    fn apply_a_adjoint(&self, u: &Tensor) -> Result<Tensor> {
        let grads = self.backward(u)?;
        let y = self.vjp.y.as_tensor();
        match grads.get(y) {
            // detached: a gradient of a leaf still refers to the backward pass's
            // intermediate cotangents, which every Krylov vector would otherwise keep alive
            Some(g) => g.flatten_all().map(|t| t.detach()).map_err(from_candle),
            None => Tensor::zeros(self.vjp.m, y.dtype(), y.device()).map_err(from_candle),
        }
    }

    fn apply_b_adjoint(&self, u: &Tensor) -> Result<Vec<Tensor>> {
        let grads = self.backward(u)?;
        let grad = |x: &Var| match grads.get(x.as_tensor()) {
            Some(g) => Ok(g.detach()),
            None => x.as_tensor().zeros_like().map_err(from_candle),
        };
        self.vjp.x.iter().map(grad).collect()
    }
}
