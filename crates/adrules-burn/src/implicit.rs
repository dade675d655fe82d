//! Implicit functions whose conditions are written with burn tensors ([`Implicit`]).

use std::fmt;
use std::sync::Arc;

use adrules_core::implicit::{
    ConditionsVjp, ImplicitScalar, SolverOptions, Structure, VjpMaps, device,
};
use adrules_core::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};
use adrules_core::{Backend as _, DType, Error, Result};
use burn_backend::{Backend, Element, TensorData};
use burn_tensor::Tensor;

use crate::backend::BurnBackend;
use crate::convert::{check_dtype, engine_error, physical};
use crate::handle::BurnTensor;
use crate::tensor::{OnBurn, Operand, cast, cast_ref, from_tensor, on_burn, run, to_tensor};

/// The solver: `y` (flattened) from the inputs (flattened, on their plain device).
type Solver = dyn Fn(&[Tensor<1>]) -> Result<Tensor<1>> + Send + Sync;
/// The conditions `c(x, y)` (flattened), evaluated on the autodiff variant of the inputs'
/// device.
type ConditionsFn = dyn Fn(&[Tensor<1>], &Tensor<1>) -> Tensor<1> + Send + Sync;

/// A function `y(x)` computed by a solver and defined by conditions `c(x, y) = 0`, both
/// closures on burn's user-facing tensors, on any routed backend (Flex, and with this crate's
/// features NdArray and the cubecl devices: wgpu, Vulkan, Metal, CUDA, ROCm; see
/// [`crate::apply`]). As a burn op it is one autodiff node over
/// all inputs whose pullback is the core's implicit pullback ([`adrules_core::implicit`]):
/// solve `Aᴴ·u = −ȳ`, then `x̄ = Bᴴ·u`, with `A = ∂c/∂y` and `B = ∂c/∂x` at the solution.
/// The solver is never differentiated.
///
/// # The linear maps from burn's autodiff
/// The adapter supplies the values of `c` and one vector–Jacobian product
/// ([`ConditionsVjp`]): one burn backward pass of `⟨c(x, y), u⟩` with `y` (and, when asked,
/// the `x`) as leaves gives `∂⟨c, u⟩/∂y = Aᵀ·u` and `∂/∂x = Bᵀ·u` (the data are real, so
/// `ᴴ = ᵀ`). The core's [`VjpMaps`] makes the four linear maps of it: `Aᴴ·u` and `Bᴴ·u` one
/// backward pass per vector; `A·v` and `B·v` (burn has no forward mode and no double
/// backward) from the dense Jacobians assembled from `m` unit VJPs, only when a dense solver
/// needs `A`.
///
/// The implicit *pullback* needs only `Aᴴ` and `Bᴴ`. With a matrix-free solver (GMRES, CG)
/// it runs on the inputs' device through [`adrules_core::implicit::device`]: every Krylov
/// vector is a burn tensor on that device, each iteration is one backward pass of `c` there,
/// and only scalars (inner products, norms) are read back to the host; no Jacobian is
/// assembled. A dense solver ([`Method::Lu`], [`Method::Cholesky`], and [`Method::Auto`]
/// when `m ≤` [`AUTO_DENSE_LIMIT`] (200)) runs on the host: `x`, `y` and `ȳ` are copied
/// there once, `A` is assembled from `m` VJPs on the device (each unit vector copied to the
/// device and its VJP back), factorized by faer, and `x̄` is copied back to the device. Small
/// systems are cheaper that way than `m` device round trips of a Krylov solve.
///
/// [`Method::Lu`]: adrules_core::implicit::Method::Lu
/// [`Method::Cholesky`]: adrules_core::implicit::Method::Cholesky
///
/// # Layout
/// The closures see every tensor flattened to rank 1, row-major (the flattening order of
/// [`adrules_core::implicit`]): the inputs `x` in call order and the solution `y`; the
/// conditions return the `m` values of `c` as one rank-1 tensor of the length of `y`. The
/// op returns `y` flattened; reshape it with burn's (differentiable) `reshape`. All inputs
/// and `y` share one dtype, f32 or f64.
///
/// [`Method::Auto`]: adrules_core::implicit::Method::Auto
/// [`AUTO_DENSE_LIMIT`]: adrules_core::implicit::AUTO_DENSE_LIMIT
#[derive(Clone)]
pub struct Implicit {
    solver: Arc<Solver>,
    conditions: Arc<ConditionsFn>,
    options: SolverOptions,
    structure: Structure,
    conditions_tolerance: Option<f64>,
}

impl fmt::Debug for Implicit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Implicit")
            .field("options", &self.options)
            .field("structure", &self.structure)
            .finish_non_exhaustive()
    }
}

impl Implicit {
    /// The function computed by `solver` and defined by `conditions`, with the core's default
    /// linear solver ([`SolverOptions::default`]).
    ///
    /// `solver(x)` receives the inputs flattened, on their device without autodiff, and
    /// returns `y` flattened, on the same device. `conditions(x, y)` receives flattened
    /// tensors on the autodiff variant of that device and returns `c(x, y)` flattened (as
    /// many values as `y` has); it must be built from burn's differentiable ops, and tensors
    /// it creates must be on the device of its arguments (`y.device()`).
    pub fn new(
        solver: impl Fn(&[Tensor<1>]) -> Result<Tensor<1>> + Send + Sync + 'static,
        conditions: impl Fn(&[Tensor<1>], &Tensor<1>) -> Tensor<1> + Send + Sync + 'static,
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
    /// `c(x, y)` once more and returns [`Error::NotConverged`] (`"conditions c(x, y)"`) when
    /// `‖c‖₂ > tolerance` (absolute), as
    /// [`ImplicitFunction::with_conditions_tolerance`](adrules_core::implicit::ImplicitFunction::with_conditions_tolerance)
    /// does. Off by default.
    pub fn with_conditions_tolerance(mut self, tolerance: f64) -> Self {
        self.conditions_tolerance = Some(tolerance);
        self
    }

    /// Uses these options for the linear solves of the pullback.
    pub fn with_linear_solver(mut self, options: SolverOptions) -> Self {
        self.options = options;
        self
    }

    /// Declares the structure of `A = ∂c/∂y` (see [`Structure`]): a definite tag lets
    /// [`Method::Auto`] pick CG (matrix-free) or Cholesky (dense), and is what [`Method::Cg`]
    /// needs; the default is [`Structure::General`].
    ///
    /// [`Method::Auto`]: adrules_core::implicit::Method::Auto
    /// [`Method::Cg`]: adrules_core::implicit::Method::Cg
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }

    /// `y(x)`, flattened. With any input on an autodiff device this is one node whose
    /// pullback is the implicit pullback; nothing about the solver is recorded.
    ///
    /// # Errors
    /// Before anything is recorded: [`Error::InvalidArgument`] (`"x"`) for no input; those
    /// of the routing (see [`crate::apply`]), a dtype
    /// other than the inputs' common f32/f64 or a non-rank-1 `y` from the solver
    /// ([`Error::DTypeMismatch`]), a `y` on another device ([`Error::DeviceMismatch`]),
    /// whatever the solver reports; a non-finite input or solution ([`Error::InvalidArgument`]
    /// naming `"x[i]"` or `"y (solver output)"`) and, with a
    /// [conditions tolerance](Self::with_conditions_tolerance), `‖c(x, y)‖₂` above it
    /// ([`Error::NotConverged`], `"conditions c(x, y)"`): the policy of
    /// [`adrules_core::implicit`].
    /// In backward (see [`crate::try_backward`] and [`crate::take_backward_errors`]): a
    /// non-finite cotangent ([`Error::InvalidArgument`], `"y_bar"`), the
    /// conditions returning a wrong number of values ([`Error::ShapeMismatch`]) or another
    /// dtype than `y`'s ([`Error::DTypeMismatch`]), both naming `"conditions c(x, y)"`, and
    /// the linear solver's failures.
    pub fn apply<const N: usize>(&self, x: [Operand; N]) -> Result<Tensor<1>> {
        if N == 0 {
            let why = "an implicit function needs at least one input";
            return Err(Error::invalid("x", why));
        }
        let call = ImplicitCall {
            f: self.clone(),
            n: N,
        };
        run(Arc::new(call), x)
    }
}

/// An [`Implicit`] called with `n` inputs, as a core [`Rule`] run by the crate's bridge: its
/// closures are burn code, so it runs on burn's routed backends only ([`on_burn`]).
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

    fn rrule<Bk: SyncBackend>(
        &self,
        be: &Bk,
        x: &[&Bk::Tensor],
        _: &[bool],
    ) -> Result<(Vec<Bk::Tensor>, Box<dyn Pullback<Bk>>)> {
        let y = on_burn(be, Solve { f: &self.f, x })?;
        let (f, n) = (self.f.clone(), self.n);
        let pullback = move |be: &Bk, primal: &Primal<Bk>, c: &[Option<Bk::Tensor>]| {
            let Some(c_bar) = &c[0] else {
                return Ok(vec![None; n]);
            };
            on_burn(
                be,
                Pull {
                    f: &f,
                    primal,
                    c_bar,
                },
            )
        };
        Ok((vec![y], Box::new(pullback)))
    }
}

/// The forward pass of an [`ImplicitCall`] on the burn backend it runs on.
struct Solve<'a, 'b, Bk: SyncBackend> {
    f: &'a Implicit,
    x: &'a [&'b Bk::Tensor],
}

impl<Bk: SyncBackend> OnBurn<Bk> for Solve<'_, '_, Bk> {
    type Output = Bk::Tensor;

    fn run<B: Backend>(self, be: &BurnBackend<B>) -> Result<Bk::Tensor> {
        let x = self
            .x
            .iter()
            .map(|t| cast_ref::<_, BurnTensor<B>>(*t).cloned());
        let x = x.collect::<Result<Vec<_>>>()?;
        cast(self.f.solve(be, &x)?)
    }
}

/// The pullback of an [`ImplicitCall`] on the burn backend it runs on.
struct Pull<'a, Bk: SyncBackend> {
    f: &'a Implicit,
    primal: &'a Primal<Bk>,
    c_bar: &'a Bk::Tensor,
}

impl<Bk: SyncBackend> OnBurn<Bk> for Pull<'_, Bk> {
    type Output = Vec<Option<Bk::Tensor>>;

    fn run<B: Backend>(self, be: &BurnBackend<B>) -> Result<Self::Output> {
        let n = self.primal.inputs().len();
        let x = (0..n).map(|i| cast_ref::<_, BurnTensor<B>>(self.primal.input(i)?).cloned());
        let x = x.collect::<Result<Vec<_>>>()?;
        let y = cast_ref::<_, BurnTensor<B>>(self.primal.output(0)?)?;
        let c_bar = cast_ref::<_, BurnTensor<B>>(self.c_bar)?;
        let g = self.f.pullback(be, &x, y, c_bar, self.primal.activity())?;
        g.into_iter().map(|g| g.map(cast).transpose()).collect()
    }
}

/// Checks that argument `arg` has the dtype `want` of the first input.
fn same_dtype(arg: String, actual: DType, want: DType) -> Result<()> {
    let expected = format!("{want}, the dtype of x[0]");
    let e = Error::DTypeMismatch {
        arg,
        expected,
        actual,
    };
    if actual == want { Ok(()) } else { Err(e) }
}

/// A tensor of `B` as a flattened plain user-facing tensor on its device (no copy).
fn flat<B: Backend>(t: &BurnTensor<B>) -> Result<Tensor<1>> {
    let n = t.dims().iter().product::<usize>();
    let flat = B::float_reshape(t.primitive().clone(), [n].into());
    to_tensor::<B, 1>(flat)
}

impl Implicit {
    /// `y(x)` by the solver on `be`, checked (dtypes, devices, finiteness, the conditions
    /// tolerance).
    fn solve<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        xs: &[BurnTensor<B>],
    ) -> Result<BurnTensor<B>> {
        let why = "an implicit function needs at least one input";
        let first = xs.first().ok_or_else(|| Error::invalid("x", why))?;
        let dtype = be.dtype(first);
        for (i, t) in xs.iter().enumerate() {
            let arg = format!("x[{i}]");
            same_dtype(arg.clone(), be.dtype(t), dtype)?;
            device::check_finite(be, t, &arg)?;
        }
        let x = xs.iter().map(flat).collect::<Result<Vec<_>>>()?;
        let device = x[0].device();
        let y = (self.solver)(&x)?.without_autodiff();
        let arg = "y (solver output)";
        same_dtype(arg.into(), check_dtype(arg, y.dtype())?, dtype)?;
        if y.device() != device {
            return Err(Error::DeviceMismatch {
                arg: arg.into(),
                expected: format!("{device:?} (the device of the inputs)"),
                actual: format!("{:?}", y.device()),
            });
        }
        let y = BurnTensor::new(from_tensor::<B, 1>(arg, y)?);
        device::check_finite(be, &y, arg)?;
        if let Some(tolerance) = self.conditions_tolerance {
            let point = Conditions {
                c: Arc::clone(&self.conditions),
                x,
                y: flat(&y)?,
            };
            let (_, _, c) = point.evaluate(false, false)?;
            let c = from_tensor::<B, 1>("conditions c(x, y)", c.without_autodiff())?;
            device::check_conditions(be, &BurnTensor::new(c), tolerance)?;
        }
        Ok(y)
    }

    /// The cotangents of the inputs `x` (`None` for an inactive one) at the solution `y` for
    /// the cotangent `c_bar` of `y`.
    fn pullback<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        y: &BurnTensor<B>,
        c_bar: &BurnTensor<B>,
        active: &[bool],
    ) -> Result<Vec<Option<BurnTensor<B>>>> {
        let point = Conditions {
            c: Arc::clone(&self.conditions),
            x: x.iter().map(flat).collect::<Result<_>>()?,
            y: flat(y)?,
        };
        let x_bar = if be.dtype(y).is_double() {
            self.engine_pullback::<B, f64>(be, x, point, y, c_bar)?
        } else {
            self.engine_pullback::<B, f32>(be, x, point, y, c_bar)?
        };
        let keep = |(g, &on): (BurnTensor<B>, &bool)| on.then_some(g);
        Ok(x_bar.into_iter().zip(active).map(keep).collect())
    }

    /// `x̄ = Jᴴ·ȳ` at the solution `y` by the core's engine pullback
    /// ([`device::engine_pullback`]): a dense solve on the host over the [`VjpMaps`] of VJPs
    /// on the device, or a matrix-free one on the device.
    fn engine_pullback<B: Backend, T: ImplicitScalar + Element>(
        &self,
        be: &BurnBackend<B>,
        xs: &[BurnTensor<B>],
        point: Conditions,
        y: &BurnTensor<B>,
        y_bar: &BurnTensor<B>,
    ) -> Result<Vec<BurnTensor<B>>> {
        let structure = self.structure;
        let host_point = point.clone();
        let host = move || -> Result<VjpMaps<T, HostPoint<T>>> {
            Ok(VjpMaps::new(HostPoint::<T>::new(host_point)?).with_structure(structure))
        };
        let device = || -> Result<DeviceMaps<B>> {
            Ok(DeviceMaps {
                point,
                x_dims: xs.iter().map(|t| t.dims().to_vec()).collect(),
                structure,
                _backend: std::marker::PhantomData,
            })
        };
        let x: Vec<&BurnTensor<B>> = xs.iter().collect();
        device::engine_pullback(be, &x, y, y_bar, &self.options, host, device)
    }
}

/// burn-written conditions at one point `(x, y)`, every tensor flattened and plain, on the
/// inputs' device.
#[derive(Clone)]
struct Conditions {
    /// the conditions `c(x, y)`
    c: Arc<ConditionsFn>,
    x: Vec<Tensor<1>>,
    y: Tensor<1>,
}

impl Conditions {
    fn num_unknowns(&self) -> usize {
        self.y.dims()[0]
    }

    /// `c(x, y)` on the autodiff device, with gradients required of `y` when `grad_y` and of
    /// every `x` when `grad_x`, checked to have one value per unknown.
    fn evaluate(
        &self,
        grad_y: bool,
        grad_x: bool,
    ) -> Result<(Vec<Tensor<1>>, Tensor<1>, Tensor<1>)> {
        let leaf = |t: &Tensor<1>, grad: bool| {
            let t = t.clone().autodiff();
            if grad { t.require_grad() } else { t }
        };
        let x: Vec<_> = self.x.iter().map(|t| leaf(t, grad_x)).collect();
        let y = leaf(&self.y, grad_y);
        let c = (self.c)(&x, &y);
        let m = self.num_unknowns();
        let arg = "conditions c(x, y)";
        if c.dims() != [m] {
            return Err(Error::shape(arg, &[m], &c.dims()));
        }
        let want = check_dtype("y", self.y.dtype())?;
        same_dtype(arg.into(), check_dtype(arg, c.dtype())?, want)?;
        Ok((x, y, c))
    }

    /// One burn backward pass of `⟨c(x, y), u⟩` for `u` on the device: `Aᵀ·u` (when
    /// `grad_y`) and `B_kᵀ·u` for every input `k` (when `grad_x`), plain tensors on the
    /// device; a leaf `c` does not depend on gets zeros.
    fn vjp(
        &self,
        u: Tensor<1>,
        grad_y: bool,
        grad_x: bool,
    ) -> Result<(Option<Tensor<1>>, Vec<Tensor<1>>)> {
        let (x, y, c) = self.evaluate(grad_y, grad_x)?;
        let loss = (c * u).sum();
        let grads = loss.is_tracked().then(|| loss.backward());
        let grad = |t: &Tensor<1>| {
            let g = grads.as_ref().and_then(|g| t.grad(g));
            g.unwrap_or_else(|| t.zeros_like().without_autodiff())
        };
        let y_bar = grad_y.then(|| grad(&y));
        let x_bar = if grad_x {
            x.iter().map(grad).collect()
        } else {
            Vec::new()
        };
        Ok((y_bar, x_bar))
    }
}

/// The adjoint maps of [`Conditions`] on `B`'s tensors, for the device pullback.
struct DeviceMaps<B> {
    point: Conditions,
    /// the logical shape of every input
    x_dims: Vec<Vec<usize>>,
    structure: Structure,
    _backend: std::marker::PhantomData<B>,
}

impl<B: Backend> device::AdjointMaps<BurnBackend<B>> for DeviceMaps<B> {
    fn num_unknowns(&self) -> usize {
        self.point.num_unknowns()
    }

    fn structure(&self) -> Structure {
        self.structure
    }

    fn apply_a_adjoint(&self, u: &BurnTensor<B>) -> Result<BurnTensor<B>> {
        let u = flat(u)?;
        let (a, _) = self.point.vjp(u, true, false)?;
        let a = a.ok_or_else(|| engine_error("no gradient of y"))?;
        Ok(BurnTensor::new(from_tensor::<B, 1>("Aᴴ·u", a)?))
    }

    fn apply_b_adjoint(&self, u: &BurnTensor<B>) -> Result<Vec<BurnTensor<B>>> {
        let (_, x_bar) = self.point.vjp(flat(u)?, false, true)?;
        let shaped = |(g, dims): (Tensor<1>, &Vec<usize>)| {
            let g = from_tensor::<B, 1>("Bᴴ·u", g)?;
            Ok(BurnTensor::logical(
                B::float_reshape(g, physical(dims)),
                dims,
            ))
        };
        x_bar.into_iter().zip(&self.x_dims).map(shaped).collect()
    }
}

/// [`Conditions`] seen from the host, for the dense solvers: the values of `c` and one VJP
/// of a host vector (copied to the device and back).
struct HostPoint<T> {
    point: Conditions,
    /// `c(x, y)` at the point
    values: Vec<T>,
    /// the number of input elements
    n: usize,
}

impl<T: ImplicitScalar + Element> HostPoint<T> {
    fn new(point: Conditions) -> Result<Self> {
        let (_, _, c) = point.evaluate(false, false)?;
        let values = c.into_data().try_into_vec::<T>().map_err(engine_error)?;
        let n = point.x.iter().map(|t| t.dims()[0]).sum();
        Ok(HostPoint { point, values, n })
    }

    /// `v` as a rank-1 tensor on the point's device.
    fn tensor(&self, v: &[T]) -> Tensor<1> {
        let data = TensorData::new(v.to_vec(), [v.len()]);
        Tensor::<1>::from_data(data, (&self.point.y.device(), T::dtype()))
    }
}

/// `t`'s values into `out`.
fn read_into<T: Element>(t: Tensor<1>, out: &mut [T]) -> Result<()> {
    let v = t.into_data().try_into_vec::<T>().map_err(engine_error)?;
    out.iter_mut().zip(v).for_each(|(o, v)| *o = v);
    Ok(())
}

impl<T: ImplicitScalar + Element> ConditionsVjp<T> for HostPoint<T> {
    fn num_unknowns(&self) -> usize {
        self.point.num_unknowns()
    }

    fn num_inputs(&self) -> usize {
        self.n
    }

    fn values(&self) -> &[T] {
        &self.values
    }

    fn vjp(&self, u: &[T], y_bar: Option<&mut [T]>, x_bar: Option<&mut [T]>) -> Result<()> {
        let (grad_y, grad_x) = (y_bar.is_some(), x_bar.is_some());
        let (a, b) = self.point.vjp(self.tensor(u), grad_y, grad_x)?;
        if let (Some(out), Some(a)) = (y_bar, a) {
            read_into(a, out)?;
        }
        if let Some(out) = x_bar {
            let mut at = 0;
            for g in b {
                let len = g.dims()[0];
                read_into(g, &mut out[at..at + len])?;
                at += len;
            }
        }
        Ok(())
    }
}
