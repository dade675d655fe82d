//! Implicit functions whose conditions are written with burn tensors ([`Implicit`]).

use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};

use adrules_core::implicit::{
    Conditions, ImplicitFunction, ImplicitScalar, LinearMaps, Point, SolverOptions,
};
use adrules_core::{Backend as _, DType, Error, HostTensor, Result};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Element, TensorData, TensorMetadata};
use burn_flex::{Flex, FlexTensor};
use burn_tensor::{Device, Tensor};
use faer::{Mat, MatRef};

use crate::backend::{BurnBackend, BurnTensor, engine_error};
use crate::node::Rule;
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
/// # The linear maps from burn's autodiff ([`LinearMaps`])
/// - `Aᴴ·u` and `Bᴴ·u` are vector–Jacobian products: one burn backward pass of
///   `⟨c(x, y), u⟩` with `y` (respectively the `x`) as leaves gives `∂⟨c, u⟩/∂y = Aᵀ·u`
///   (`∂/∂x = Bᵀ·u`); the data are real, so `ᴴ = ᵀ`.
/// - `A·v` and `B·v` are Jacobian–vector products, which burn cannot compute directly: it
///   has no forward mode, and the transpose trick (differentiate the VJP `u ↦ Aᵀ·u`, linear
///   in `u`, once more to get its transpose `v ↦ A·v`) needs a backward pass through the
///   backward pass, which burn does not record (its backward steps run on the inner
///   backend: no double backward). They come instead from the dense Jacobians, assembled
///   exactly from `m` VJPs with the unit cotangents `e_i` (row `i` of `A` and of `B` from
///   one backward pass), built once on first use and cached.
///
/// The implicit *pullback* needs only `Aᴴ` and `Bᴴ`: with a matrix-free solver (GMRES, CG)
/// each iteration is one backward pass of `c`. Under [`Method::Auto`] the core factorizes a
/// dense `A` when `m ≤` [`AUTO_DENSE_LIMIT`] (200), built through `A·v`, i.e. from the `m`
/// VJPs above; for larger `m` it picks GMRES or CG, which never assemble anything.
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
    /// In backward (see [`crate::take_backward_errors`]): the conditions returning a wrong
    /// number of values, and the linear solver's failures.
    pub fn apply<const N: usize>(&self, x: [Operand; N]) -> Result<Tensor<1>> {
        run(self.clone(), x)
    }
}

/// The common dtype of the inputs.
fn common_dtype<B: Backend>(be: &BurnBackend<B>, x: &[BurnTensor<B>]) -> Result<DType> {
    let mut dtype = None;
    for (i, t) in x.iter().enumerate() {
        let d = be.check(&format!("x[{i}]"), t)?;
        match dtype {
            None => dtype = Some(d),
            Some(e) if e != d => {
                return Err(Error::DTypeMismatch {
                    arg: format!("x[{i}]"),
                    expected: e.to_string(),
                    actual: d,
                });
            }
            _ => {}
        }
    }
    dtype.ok_or_else(|| Error::CountMismatch {
        arg: "x".into(),
        expected: 1,
        actual: 0,
    })
}

/// A primitive of `B` as a flattened Flex tensor (`B` must be Flex).
fn flat_flex<B: Backend>(t: &FloatTensor<B>) -> Result<Tensor<1>> {
    let flex = (t as &dyn Any)
        .downcast_ref::<FlexTensor>()
        .ok_or_else(|| Error::Unsupported {
            backend: crate::backend::NAME.into(),
            what: format!(
                "implicit functions on {}: their closures take Flex tensors",
                B::name(&t.device())
            ),
        })?;
    let n = flex.layout().num_elements();
    Ok(Tensor::<1>::from_primitive::<Flex>(
        flex.reshape([n].into()),
    ))
}

impl Rule for Implicit {
    /// the solution `y`
    type Saved<B: Backend> = BurnTensor<B>;

    fn scalar_input(&self, _i: usize) -> bool {
        false
    }

    fn primal<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        _active: &[bool],
    ) -> Result<(BurnTensor<B>, BurnTensor<B>)> {
        let dtype = common_dtype(be, x)?;
        let xs = x
            .iter()
            .map(|t| flat_flex::<B>(t.primitive()))
            .collect::<Result<Vec<_>>>()?;
        let y = (self.solver)(&xs)?;
        let y_dtype = crate::backend::check_dtype("y (solver output)", y.dtype())?;
        if y_dtype != dtype {
            return Err(Error::DTypeMismatch {
                arg: "y (solver output)".into(),
                expected: dtype.to_string(),
                actual: y_dtype,
            });
        }
        let y = y
            .try_into_primitive::<Flex>()
            .map_err(|e| engine_error(format!("{e:?}")))?;
        let y = (Box::new(y) as Box<dyn Any>)
            .downcast::<FloatTensor<B>>()
            .map_err(|_| engine_error("a Flex solution on a non-Flex backend"))?;
        let y = BurnTensor::new(*y);
        Ok((y.clone(), y))
    }

    fn memory_bound(&self) -> bool {
        false
    }

    fn keeps(&self, active: &[bool]) -> Vec<bool> {
        vec![active.iter().any(|&a| a); active.len()]
    }

    fn pullback<B: Backend>(
        &self,
        be: &BurnBackend<B>,
        x: &[BurnTensor<B>],
        y: &BurnTensor<B>,
        active: &[bool],
        c_bar: &BurnTensor<B>,
    ) -> Result<Vec<Option<BurnTensor<B>>>> {
        let host = |t: &BurnTensor<B>| be.to_host(t);
        let x = x.iter().map(host).collect::<Result<Vec<_>>>()?;
        let (y, y_bar) = (host(y)?, host(c_bar)?);
        let x_bar = if y.dtype().is_double() {
            self.vjp::<f64>(&x, y, &y_bar)?
        } else {
            self.vjp::<f32>(&x, y, &y_bar)?
        };
        x_bar
            .into_iter()
            .zip(active)
            .map(|(g, &on)| on.then(|| be.from_host(g)).transpose())
            .collect()
    }
}

impl Implicit {
    /// `x̄ = Jᴴ·ȳ` at the solution `y` by the core's implicit pullback.
    fn vjp<T: ImplicitScalar + Element>(
        &self,
        x: &[HostTensor],
        y: HostTensor,
        y_bar: &HostTensor,
    ) -> Result<Vec<HostTensor>> {
        let conditions = BurnConditions(Arc::clone(&self.conditions));
        let at_solution = move |_: &[HostTensor], _: &()| Ok((y.clone(), ()));
        let f = ImplicitFunction::<T, (), (), _, _>::new(at_solution, conditions)
            .with_linear_solver(self.options.clone());
        let (_, _, lin) = f.vjp(x, &())?;
        lin.vjp(y_bar)
    }
}

/// The user's conditions as a source of [`LinearMaps`] for the core.
struct BurnConditions(Arc<ConditionsFn>);

impl<T: ImplicitScalar + Element> Conditions<T, (), ()> for BurnConditions {
    fn linearize(&self, at: &Point<'_, (), ()>) -> Result<Box<dyn LinearMaps<T>>> {
        Ok(Box::new(BurnMaps::<T>::new(
            Arc::clone(&self.0),
            at.x,
            at.y,
        )?))
    }
}

/// The dense `A = ∂c/∂y` and `B = ∂c/∂x`.
type Jacobians<T> = (Mat<T>, Mat<T>);

/// The linear maps of burn-written conditions at one point (see the module docs).
struct BurnMaps<T: ImplicitScalar> {
    conditions: Arc<ConditionsFn>,
    x: Vec<Vec<T>>,
    y: Vec<T>,
    device: Device,
    /// `c(x, y)` at the point
    values: Vec<T>,
    /// `(A, B)`, assembled from `m` VJPs on first use
    dense: OnceLock<Result<Jacobians<T>>>,
}

/// `v` as a rank-1 tensor on `device`.
fn tensor<T: Element>(v: &[T], device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(v.to_vec(), [v.len()]), (device, T::dtype()))
}

fn values<T: Element>(t: Tensor<1>) -> Result<Vec<T>> {
    t.into_data().try_into_vec::<T>().map_err(engine_error)
}

impl<T: ImplicitScalar + Element> BurnMaps<T> {
    fn new(conditions: Arc<ConditionsFn>, x: &[HostTensor], y: &HostTensor) -> Result<Self> {
        let typed = |t: &HostTensor| t.as_slice::<T>().map(<[T]>::to_vec);
        let mut maps = BurnMaps {
            conditions,
            x: x.iter().map(typed).collect::<Result<_>>()?,
            y: typed(y)?,
            device: Device::flex().autodiff(),
            values: Vec::new(),
            dense: OnceLock::new(),
        };
        let (x, y) = maps.leaves(false, false);
        maps.values = values(maps.evaluate(&x, &y)?)?;
        Ok(maps)
    }

    /// The point on the autodiff device, `x` and `y` requiring gradients as asked.
    fn leaves(&self, grad_x: bool, grad_y: bool) -> (Vec<Tensor<1>>, Tensor<1>) {
        let leaf = |v: &[T], grad: bool| {
            let t = tensor(v, &self.device);
            if grad { t.require_grad() } else { t }
        };
        let x = self.x.iter().map(|v| leaf(v, grad_x)).collect();
        (x, leaf(&self.y, grad_y))
    }

    /// `c(x, y)`, checked to have one value per unknown.
    fn evaluate(&self, x: &[Tensor<1>], y: &Tensor<1>) -> Result<Tensor<1>> {
        let c = (self.conditions)(x, y);
        let m = self.y.len();
        if c.dims() != [m] {
            return Err(Error::shape("conditions c(x, y)", &[m], &c.dims()));
        }
        Ok(c)
    }

    /// `(Aᵀ·u, Bᵀ·u)` from one backward pass of `⟨c(x, y), u⟩`, each only when asked
    /// (otherwise empty). A part of `c` independent of a leaf gives zeros.
    fn vjp(&self, u: &[T], want_a: bool, want_b: bool) -> Result<(Vec<T>, Vec<T>)> {
        let (x, y) = self.leaves(want_b, want_a);
        let c = self.evaluate(&x, &y)?;
        let grads = (c * tensor(u, &self.device)).sum().backward();
        let grad = |t: &Tensor<1>, len: usize| match t.grad(&grads) {
            Some(g) => values(g),
            None => Ok(vec![T::zero(); len]),
        };
        let a = if want_a {
            grad(&y, self.y.len())?
        } else {
            Vec::new()
        };
        let mut b = Vec::new();
        if want_b {
            for (t, v) in x.iter().zip(&self.x) {
                b.extend(grad(t, v.len())?);
            }
        }
        Ok((a, b))
    }

    /// The dense `A` and `B`, row `i` from the VJP with the unit cotangent `e_i`.
    fn dense(&self) -> Result<&Jacobians<T>> {
        self.dense
            .get_or_init(|| {
                let (m, n) = (self.num_unknowns(), self.num_inputs());
                let (mut a, mut b) = (Mat::<T>::zeros(m, m), Mat::<T>::zeros(m, n));
                let mut e = vec![T::zero(); m];
                for i in 0..m {
                    e[i] = T::one();
                    let (ra, rb) = self.vjp(&e, true, true)?;
                    e[i] = T::zero();
                    (0..m).for_each(|j| a[(i, j)] = ra[j]);
                    (0..n).for_each(|j| b[(i, j)] = rb[j]);
                }
                Ok((a, b))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// `out = M·v` for a block of `k` vectors (column-major).
    fn product(mat: &Mat<T>, v: &[T], out: &mut [T], k: usize) {
        let r = mat * MatRef::from_column_major_slice(v, mat.ncols(), k);
        for j in 0..k {
            for i in 0..mat.nrows() {
                out[j * mat.nrows() + i] = r[(i, j)];
            }
        }
    }

    /// `out = Mᵀ·u` for a block of `k` vectors through [`vjp`](Self::vjp).
    fn adjoint(&self, u: &[T], out: &mut [T], k: usize, of_a: bool) -> Result<()> {
        let (m, len) = (
            self.num_unknowns(),
            if of_a {
                self.num_unknowns()
            } else {
                self.num_inputs()
            },
        );
        for j in 0..k {
            let (a, b) = self.vjp(&u[j * m..(j + 1) * m], of_a, !of_a)?;
            out[j * len..(j + 1) * len].copy_from_slice(if of_a { &a } else { &b });
        }
        Ok(())
    }
}

impl<T: ImplicitScalar + Element> LinearMaps<T> for BurnMaps<T> {
    fn num_unknowns(&self) -> usize {
        self.y.len()
    }

    fn num_inputs(&self) -> usize {
        self.x.iter().map(Vec::len).sum()
    }

    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        Self::product(&self.dense()?.0, v, out, k);
        Ok(())
    }

    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.adjoint(u, out, k, true)
    }

    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        Self::product(&self.dense()?.1, v, out, k);
        Ok(())
    }

    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.adjoint(u, out, k, false)
    }

    /// The assembled `A` once some product needed it; `None` before, so that choosing a
    /// matrix-free solver never pays for the assembly (a dense solver builds `A` through
    /// [`apply_a`](LinearMaps::apply_a), which assembles it).
    fn dense_a(&self) -> Option<Mat<T>> {
        match self.dense.get() {
            Some(Ok((a, _))) => Some(a.clone()),
            _ => None,
        }
    }

    fn conditions(&self) -> Option<&[T]> {
        Some(&self.values)
    }
}
