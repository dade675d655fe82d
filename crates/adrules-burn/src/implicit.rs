//! Implicit functions whose conditions are written with burn tensors ([`Implicit`]).

use std::fmt;
use std::sync::Arc;

use adrules_core::implicit::{
    ConditionsVjp, ImplicitFunction, ImplicitScalar, Point, SolverOptions, VjpMaps,
};
use adrules_core::{Backend as _, DType, Error, HostTensor, Result};
use burn_backend::{Backend, Element, TensorData, TensorMetadata};
use burn_flex::Flex;
use burn_tensor::{Device, Tensor};

use crate::convert::{check_dtype, engine_error, unsupported};
use crate::flex;
use crate::handle::BurnTensor;
use crate::node::{At, Cotangents, Rule};
use crate::tensor::{Operand, run};

/// The solver: `y` (flattened) from the inputs (flattened, on the plain Flex device).
type Solver = dyn Fn(&[Tensor<1>]) -> Result<Tensor<1>> + Send + Sync;
/// The conditions `c(x, y)` (flattened), evaluated on an autodiff Flex device.
type ConditionsFn = dyn Fn(&[Tensor<1>], &Tensor<1>) -> Tensor<1> + Send + Sync;

/// A function `y(x)` computed by a solver and defined by conditions `c(x, y) = 0`, both
/// closures on burn's user-facing tensors (Flex). As a burn op it is one autodiff node over
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
/// The implicit *pullback* needs only `Aᴴ` and `Bᴴ`: with a matrix-free solver (GMRES, CG)
/// each iteration is one backward pass of `c`, and no Jacobian is ever assembled. Under
/// [`Method::Auto`] the core factorizes a dense `A` when `m ≤` [`AUTO_DENSE_LIMIT`] (200),
/// assembled from `m` VJPs; for larger `m` it picks GMRES or CG.
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
}

impl fmt::Debug for Implicit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Implicit")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Implicit {
    /// The function computed by `solver` and defined by `conditions`, with the core's default
    /// linear solver ([`SolverOptions::default`]).
    ///
    /// `solver(x)` receives the inputs flattened, on the plain Flex device, and returns `y`
    /// flattened. `conditions(x, y)` receives flattened tensors on an autodiff Flex device
    /// and returns `c(x, y)` flattened (as many values as `y` has); it must be built from
    /// burn's differentiable ops.
    pub fn new(
        solver: impl Fn(&[Tensor<1>]) -> Result<Tensor<1>> + Send + Sync + 'static,
        conditions: impl Fn(&[Tensor<1>], &Tensor<1>) -> Tensor<1> + Send + Sync + 'static,
    ) -> Self {
        Implicit {
            solver: Arc::new(solver),
            conditions: Arc::new(conditions),
            options: SolverOptions::default(),
        }
    }

    /// Uses these options for the linear solves of the pullback.
    pub fn with_linear_solver(mut self, options: SolverOptions) -> Self {
        self.options = options;
        self
    }

    /// `y(x)`, flattened. With any input on an autodiff device this is one node whose
    /// pullback is the implicit pullback; nothing about the solver is recorded.
    ///
    /// # Errors
    /// Before anything is recorded: those of the routing (see [`crate::apply`]), a dtype
    /// other than the inputs' common f32/f64 or a non-rank-1 `y` from the solver
    /// ([`Error::DTypeMismatch`], [`Error::RankMismatch`]), and whatever the solver reports.
    /// In backward (see [`crate::try_backward`] and [`crate::take_backward_errors`]): the
    /// conditions returning a wrong number of values, and the linear solver's failures.
    pub fn apply<const N: usize>(&self, x: [Operand; N]) -> Result<Tensor<1>> {
        run(self.clone(), x)
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

/// A tensor of `B` as a flattened Flex tensor (`B` must be Flex).
fn flat_flex<B: Backend>(t: &BurnTensor<B>) -> Result<Tensor<1>> {
    let backend = B::name(&t.primitive().device());
    let why = format!("implicit functions on {backend}: their closures take Flex tensors");
    let flex = flex::as_flex(t).ok_or_else(|| unsupported(why))?;
    let n = flex.layout().num_elements();
    let flat = flex.reshape([n].into());
    Ok(Tensor::<1>::from_primitive::<Flex>(flat))
}

impl Rule for Implicit {
    /// the solution `y`
    type Saved<B: Backend> = BurnTensor<B>;

    fn primal<B: Backend>(&self, at: &At<'_, B>) -> Result<(BurnTensor<B>, BurnTensor<B>)> {
        let why = "an implicit function needs at least one input";
        let first = at.x.first().ok_or_else(|| Error::invalid("x", why))?;
        let dtype = at.be.dtype(first);
        for (i, t) in at.x.iter().enumerate() {
            same_dtype(format!("x[{i}]"), at.be.dtype(t), dtype)?;
        }
        let y = (self.solver)(&at.x.iter().map(flat_flex).collect::<Result<Vec<_>>>()?)?;
        let arg = "y (solver output)";
        same_dtype(arg.into(), check_dtype(arg, y.dtype())?, dtype)?;
        let y = y.try_into_primitive::<Flex>();
        let y = flex::into_primitive::<B>(y.map_err(|e| engine_error(format!("{e:?}")))?)?;
        Ok((BurnTensor::new(y.clone()), BurnTensor::new(y)))
    }

    fn keeps(&self, active: &[bool]) -> Vec<bool> {
        vec![active.iter().any(|&a| a); active.len()]
    }

    fn pullback<B: Backend>(
        &self,
        at: &At<'_, B>,
        y: &BurnTensor<B>,
        c_bar: &BurnTensor<B>,
    ) -> Cotangents<B> {
        let host = |t: &BurnTensor<B>| at.be.to_host(t);
        let x = at.x.iter().map(host).collect::<Result<Vec<_>>>()?;
        let (y, y_bar) = (host(y)?, host(c_bar)?);
        let x_bar = if y.dtype().is_double() {
            self.vjp::<f64>(&x, y, &y_bar)?
        } else {
            self.vjp::<f32>(&x, y, &y_bar)?
        };
        let back = |(g, &on): (HostTensor, &bool)| on.then(|| at.be.from_host(g)).transpose();
        x_bar.into_iter().zip(at.active).map(back).collect()
    }
}

impl Implicit {
    /// `x̄ = Jᴴ·ȳ` at the solution `y` by the core's implicit pullback, the conditions
    /// linearized at `(x, y)` as [`VjpMaps`] of [`BurnPoint`].
    fn vjp<T: ImplicitScalar + Element>(
        &self,
        x: &[HostTensor],
        y: HostTensor,
        y_bar: &HostTensor,
    ) -> Result<Vec<HostTensor>> {
        let conditions = Arc::clone(&self.conditions);
        let linearize = move |at: &Point<'_, (), ()>| -> Result<VjpMaps<T, BurnPoint<T>>> {
            let point = BurnPoint::new(Arc::clone(&conditions), at.x, at.y)?;
            Ok(VjpMaps::new(point))
        };
        let f = ImplicitFunction::<T, (), (), _, _>::from_conditions(linearize);
        let f = f.with_linear_solver(self.options.clone());
        f.linearize_at(x, y, &(), &())?.vjp(y_bar)
    }
}

/// burn-written conditions at one point `(x, y)`: their values and one VJP by burn's
/// backward pass (see [`Implicit`]). `leaves` holds the inputs, then `y`.
struct BurnPoint<T> {
    /// the conditions `c(x, y)`
    c: Arc<ConditionsFn>,
    leaves: Vec<Vec<T>>,
    /// `c(x, y)` at the point
    values: Vec<T>,
}

/// `v` as a rank-1 tensor on the autodiff Flex device.
fn tensor<T: Element>(v: &[T]) -> Tensor<1> {
    let data = TensorData::new(v.to_vec(), [v.len()]);
    Tensor::<1>::from_data(data, (&Device::flex().autodiff(), T::dtype()))
}

impl<T: ImplicitScalar + Element> BurnPoint<T> {
    fn new(c: Arc<ConditionsFn>, x: &[HostTensor], y: &HostTensor) -> Result<Self> {
        let typed = |t: &HostTensor| t.as_slice::<T>().map(<[T]>::to_vec);
        let leaves = x.iter().chain([y]).map(typed).collect::<Result<_>>()?;
        let values = Vec::new();
        let mut point = BurnPoint { c, leaves, values };
        let c = point.evaluate(&point.leaves(|_| false))?;
        point.values = c.into_data().try_into_vec::<T>().map_err(engine_error)?;
        Ok(point)
    }

    /// The leaves on the autodiff device, leaf `i` requiring gradients when `grad(i)`.
    fn leaves(&self, grad: impl Fn(usize) -> bool) -> Vec<Tensor<1>> {
        let leaf = |(i, v): (usize, &Vec<T>)| {
            let t = tensor(v);
            if grad(i) { t.require_grad() } else { t }
        };
        self.leaves.iter().enumerate().map(leaf).collect()
    }

    /// `c(x, y)` of the leaves `[x…, y]`, checked to have one value per unknown.
    fn evaluate(&self, leaves: &[Tensor<1>]) -> Result<Tensor<1>> {
        let (y, x) = leaves
            .split_last()
            .ok_or_else(|| engine_error("no leaves"))?;
        let c = (self.c)(x, y);
        let m = self.num_unknowns();
        if c.dims() != [m] {
            return Err(Error::shape("conditions c(x, y)", &[m], &c.dims()));
        }
        Ok(c)
    }
}

impl<T: ImplicitScalar + Element> ConditionsVjp<T> for BurnPoint<T> {
    fn num_unknowns(&self) -> usize {
        self.leaves.last().map_or(0, Vec::len)
    }

    fn num_inputs(&self) -> usize {
        self.leaves.iter().map(Vec::len).sum::<usize>() - self.num_unknowns()
    }

    fn values(&self) -> &[T] {
        &self.values
    }

    /// One burn backward pass of `⟨c(x, y), u⟩`; a leaf `c` does not depend on gets zeros.
    fn vjp(&self, u: &[T], y_bar: Option<&mut [T]>, x_bar: Option<&mut [T]>) -> Result<()> {
        let n = self.leaves.len() - 1;
        let (grad_x, grad_y) = (x_bar.is_some(), y_bar.is_some());
        let leaves = self.leaves(|i| if i == n { grad_y } else { grad_x });
        let loss = (self.evaluate(&leaves)? * tensor(u)).sum();
        let grads = loss.is_tracked().then(|| loss.backward());
        // The gradients of `leaves` into `out`, one after the other (zeros where none).
        let write = |leaves: &[Tensor<1>], out: &mut [T]| -> Result<()> {
            out.fill(T::zero());
            let mut at = 0;
            for t in leaves {
                let len = t.dims()[0];
                if let Some(g) = grads.as_ref().and_then(|g| t.grad(g)) {
                    let g = g.into_data().try_into_vec::<T>().map_err(engine_error)?;
                    for (o, g) in out[at..at + len].iter_mut().zip(g) {
                        *o = g;
                    }
                }
                at += len;
            }
            Ok(())
        };
        if let Some(out) = y_bar {
            write(&leaves[n..], out)?;
        }
        if let Some(out) = x_bar {
            write(&leaves[..n], out)?;
        }
        Ok(())
    }
}
