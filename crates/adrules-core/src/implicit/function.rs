//! [`ImplicitFunction`]: a solver and its conditions; [`Linearization`]: the pushforward and
//! the pullback at one solution, sharing one factorization.

use crate::finite;
use std::marker::PhantomData;
use std::sync::Arc;

use super::ImplicitScalar;
use super::conditions::{Conditions, Point, typed};
use super::maps::LinearMaps;
use super::solver::{Factorization, LinearSolver, SolveStats, SolverOptions, System};
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::scalar::Scalar;
use crate::spec::Dims;

/// What the rules do when a linear solve fails numerically ([`Error::Singular`],
/// [`Error::NotConverged`], or a non-finite `A`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OnFailure {
    /// return the error (default)
    #[default]
    Error,
    /// return NaN-filled tangents or cotangents, with the error in
    /// [`SolveStats::failure`]. Errors in the caller's arguments (shapes, dtypes, counts) and
    /// errors reported by the maps are still returned as errors.
    NanFill,
}

/// A function `y(x)` defined by conditions `c(x, y, z, args) = 0` and computed by a solver
/// `solve(x, args) -> (y, z)` that is never differentiated: derivatives come from the
/// implicit function theorem at the solution (see the [module documentation](super)).
///
/// - `T`: the element type of `x` and `y` (all inputs and the output share it);
/// - `Z`: the solver's byproduct, a constant (zero tangent, no cotangent);
/// - `A`: the constant arguments (zero tangent, no cotangent);
/// - `S`: the solver, `Fn(&[HostTensor], &A) -> Result<(HostTensor, Z)>`;
/// - `C`: the [`Conditions`].
pub struct ImplicitFunction<T: ImplicitScalar, Z, A: ?Sized, S, C> {
    solver: S,
    conditions: C,
    linear_solver: Arc<dyn LinearSolver<T>>,
    on_failure: OnFailure,
    conditions_tolerance: Option<f64>,
    marker: PhantomData<fn(&A) -> Z>,
}

/// The solver of an [`ImplicitFunction`] made with
/// [`from_conditions`](ImplicitFunction::from_conditions): none. Such a function is
/// linearized at solutions computed elsewhere ([`ImplicitFunction::linearize_at`]), for
/// engines whose solver runs on their own tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NoSolver;

impl<T, Z, A, C> ImplicitFunction<T, Z, A, NoSolver, C>
where
    T: ImplicitScalar,
    A: ?Sized,
    C: Conditions<T, Z, A>,
{
    /// The function defined by `conditions`, without a solver: linearize it at solutions
    /// computed elsewhere with [`linearize_at`](ImplicitFunction::linearize_at). Default
    /// linear solver and failure policy as [`new`](ImplicitFunction::new).
    pub fn from_conditions(conditions: C) -> Self {
        ImplicitFunction::new(NoSolver, conditions)
    }
}

impl<T, Z, A, S, C> ImplicitFunction<T, Z, A, S, C>
where
    T: ImplicitScalar,
    A: ?Sized,
    C: Conditions<T, Z, A>,
{
    /// The function computed by `solver` and defined by `conditions`, with the default
    /// linear solver ([`SolverOptions::default`], i.e. [`Method::Auto`](super::Method::Auto))
    /// and [`OnFailure::Error`].
    pub fn new(solver: S, conditions: C) -> Self {
        ImplicitFunction {
            solver,
            conditions,
            linear_solver: Arc::new(SolverOptions::default()),
            on_failure: OnFailure::Error,
            conditions_tolerance: None,
            marker: PhantomData,
        }
    }

    /// Uses another linear solver ([`SolverOptions`] or any [`LinearSolver`]).
    pub fn with_linear_solver(mut self, solver: impl LinearSolver<T> + 'static) -> Self {
        self.linear_solver = Arc::new(solver);
        self
    }

    /// Sets the failure policy.
    pub fn with_failure_policy(mut self, on_failure: OnFailure) -> Self {
        self.on_failure = on_failure;
        self
    }

    /// Refuses solutions that do not satisfy the conditions: every linearization
    /// ([`linearize`](Self::linearize), [`linearize_at`](Self::linearize_at), [`jvp`](Self::jvp),
    /// [`vjp`](Self::vjp)) checks `‖c(x, y, z, args)‖₂ ≤ tolerance` (absolute, the 2-norm of
    /// the `m` condition values) and returns [`Error::NotConverged`] (`"conditions c(x, y)"`,
    /// with the norm reached) otherwise: the implicit function theorem gives the derivatives
    /// of an exact root, and a solver stopped early has none. Off by default
    /// ([`Linearization::conditions_norm`] reports the norm either way).
    ///
    /// The conditions' source must evaluate `c` ([`LinearMaps::conditions`]: [`VjpMaps`],
    /// [`NetworkConditions`], [`FnMaps::with_conditions`](super::FnMaps::with_conditions), …); a source that
    /// does not is refused with [`Error::InvalidArgument`] (`"conditions_tolerance"`), as is a
    /// negative or NaN `tolerance` (`+∞` accepts any finite norm).
    ///
    /// [`VjpMaps`]: super::VjpMaps
    /// [`NetworkConditions`]: super::NetworkConditions
    pub fn with_conditions_tolerance(mut self, tolerance: f64) -> Self {
        self.conditions_tolerance = Some(tolerance);
        self
    }

    /// Linearizes the conditions at a solution `(y, z)` of `x` computed elsewhere (the solver
    /// is not run) and prepares the linear solver, as
    /// [`linearize`](Self::linearize) does after solving. For engines that rebuild the
    /// linearization in their backward pass from the inputs and the solution they kept.
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when an input or `y` is not of dtype `T`;
    /// [`Error::ShapeMismatch`] when the maps' dimensions disagree with `x` and `y`; the
    /// errors of the conditions; [`Error::NotConverged`] (`"conditions c(x, y)"`) when a
    /// [conditions tolerance](Self::with_conditions_tolerance) is set and `‖c‖₂` exceeds it;
    /// the errors of [`LinearSolver::factorize`] unless the policy is [`OnFailure::NanFill`].
    /// Invalid solver options are always errors.
    pub fn linearize_at(
        &self,
        x: &[HostTensor],
        y: HostTensor,
        z: &Z,
        args: &A,
    ) -> Result<Linearization<T>> {
        for (i, t) in x.iter().enumerate() {
            typed::<T>(t, &format!("x[{i}]"))?;
        }
        typed::<T>(&y, "y")?;
        let maps: Arc<dyn LinearMaps<T>> = Arc::from(self.conditions.linearize(&Point {
            x,
            y: &y,
            byproduct: z,
            args,
        })?);
        let n: usize = x.iter().map(HostTensor::len).sum();
        if maps.num_unknowns() != y.len() {
            return Err(Error::shape(
                "conditions: number of unknowns m (rows of A)",
                &[y.len()],
                &[maps.num_unknowns()],
            ));
        }
        if maps.num_inputs() != n {
            return Err(Error::shape(
                "conditions: number of input elements n (columns of B)",
                &[n],
                &[maps.num_inputs()],
            ));
        }
        if let Some(c) = maps.conditions()
            && c.len() != y.len()
        {
            return Err(Error::shape(
                "conditions: values c(x, y)",
                &[y.len()],
                &[c.len()],
            ));
        }
        if let Some(tolerance) = self.conditions_tolerance {
            let c = maps.conditions().ok_or_else(|| {
                Error::invalid(
                    "conditions_tolerance",
                    "the conditions' source does not evaluate c(x, y) (LinearMaps::conditions \
                     is None), so the residual cannot be checked",
                )
            })?;
            check_conditions_norm(super::solver::norm(c), tolerance)?;
        }
        let factorization = match self.linear_solver.factorize(&maps) {
            Ok(f) => Ok(f),
            Err(e) if self.on_failure == OnFailure::NanFill && numerical(&e) => Err(e),
            Err(e) => return Err(e),
        };
        Ok(Linearization {
            inner: Arc::new(Inner {
                y,
                x_dims: x
                    .iter()
                    .map(|t| t.dims().iter().copied().collect())
                    .collect(),
                maps,
                factorization,
                on_failure: self.on_failure,
            }),
        })
    }
}

impl<T, Z, A, S, C> ImplicitFunction<T, Z, A, S, C>
where
    T: ImplicitScalar,
    A: ?Sized,
    S: Fn(&[HostTensor], &A) -> Result<(HostTensor, Z)>,
    C: Conditions<T, Z, A>,
{
    /// Runs the solver (no derivatives).
    ///
    /// # Errors
    /// [`Error::DTypeMismatch`] when an input or the solver's `y` is not of dtype `T`;
    /// [`Error::InvalidArgument`] (`"x[i]"`, before the solver runs, or
    /// `"y (solver output)"`) for a non-finite entry (the non-finite policy of the
    /// [module](super)); whatever the solver reports.
    pub fn solve(&self, x: &[HostTensor], args: &A) -> Result<(HostTensor, Z)> {
        for (i, t) in x.iter().enumerate() {
            let arg = format!("x[{i}]");
            typed::<T>(t, &arg)?;
            check_finite(t, &arg)?;
        }
        let (y, z) = (self.solver)(x, args)?;
        typed::<T>(&y, "y (solver output)")?;
        check_finite(&y, "y (solver output)")?;
        Ok((y, z))
    }

    /// Solves once, linearizes the conditions at the solution and prepares the linear solver
    /// (for a dense method: builds and factorizes `A` once). The result serves any number of
    /// pushforwards and pullbacks.
    ///
    /// # Errors
    /// As [`ImplicitFunction::solve`]; [`Error::ShapeMismatch`] when the maps' dimensions
    /// disagree with `x` and `y`; the errors of the conditions; the errors of
    /// [`LinearSolver::factorize`] unless the policy is [`OnFailure::NanFill`] (then they
    /// surface in the statistics of each solve). Invalid solver options are always errors.
    pub fn linearize(&self, x: &[HostTensor], args: &A) -> Result<(Linearization<T>, Z)> {
        let (y, z) = self.solve(x, args)?;
        let lin = self.linearize_at(x, y, &z, args)?;
        Ok((lin, z))
    }

    /// Pushforward (JVP): `y`, `z` and the tangents `dy_j = J·dx_j` for a block of tangent
    /// directions, each one tangent tensor per input (same shapes and dtype as `x`).
    /// One linear solve with `k` right-hand sides: `A·dY = −B·dX`.
    ///
    /// # Errors
    /// As [`ImplicitFunction::linearize`] and [`Linearization::jvp_many`].
    pub fn jvp<D: AsRef<[HostTensor]>>(
        &self,
        x: &[HostTensor],
        args: &A,
        tangents: &[D],
    ) -> Result<(HostTensor, Z, ImplicitTangents)> {
        let (lin, z) = self.linearize(x, args)?;
        let t = lin.jvp_many(tangents, None)?;
        Ok((lin.y().clone(), z, t))
    }

    /// Pullback (VJP): `y`, `z` and the pullback, a [`Linearization`] that owns its copy of
    /// `y`, the maps and the factorization, and can be applied any number of times.
    ///
    /// # Errors
    /// As [`ImplicitFunction::linearize`].
    pub fn vjp(&self, x: &[HostTensor], args: &A) -> Result<(HostTensor, Z, Linearization<T>)> {
        let (lin, z) = self.linearize(x, args)?;
        Ok((lin.y().clone(), z, lin))
    }
}

/// [`Error::InvalidArgument`] naming `arg` for the first non-finite entry of `t` (the
/// non-finite policy of implicit functions: inputs, solutions and cotangents are refused,
/// not propagated).
pub(crate) fn check_finite(t: &HostTensor, arg: &str) -> Result<()> {
    match finite::host_first_non_finite(t) {
        None => Ok(()),
        Some(i) => Err(Error::invalid(
            arg,
            format!(
                "entry {i} (row-major) is not finite ({:?}): implicit functions refuse \
                 non-finite inputs, solutions and cotangents",
                t.data().get(i)
            ),
        )),
    }
}

/// The residual check of [`ImplicitFunction::with_conditions_tolerance`] (and of the
/// adapters' implicit ops): `Ok` when `‖c‖₂ = norm ≤ tolerance`.
///
/// # Errors
/// [`Error::InvalidArgument`] (`"conditions_tolerance"`) for a negative or NaN `tolerance`;
/// [`Error::NotConverged`] (`"conditions c(x, y)"`, 0 iterations: the solver is the
/// caller's) when `norm` exceeds it or is not finite.
pub fn check_conditions_norm(norm: f64, tolerance: f64) -> Result<()> {
    if tolerance.is_nan() || tolerance < 0.0 {
        return Err(Error::invalid(
            "conditions_tolerance",
            format!("{tolerance} is not a non-negative number"),
        ));
    }
    if norm.is_finite() && norm <= tolerance {
        return Ok(());
    }
    Err(Error::NotConverged {
        arg: "conditions c(x, y)".into(),
        iterations: 0,
        residual: norm,
        tolerance,
    })
}

/// `true` for the failures of the linear algebra that [`OnFailure::NanFill`] replaces
/// (a singular or non-finite `A`, an iterative solver at its limit).
fn numerical(e: &Error) -> bool {
    match e {
        Error::Singular { .. } | Error::NotConverged { .. } => true,
        Error::InvalidArgument { arg, .. } => arg == "A = ∂c/∂y",
        _ => false,
    }
}

/// Tangents returned by the implicit pushforward ([`Linearization::jvp_many`]).
#[derive(Clone, Debug)]
pub struct ImplicitTangents {
    /// `dy_j = J·dx_j` for each direction, shaped like `y`
    pub dy: Vec<HostTensor>,
    /// statistics of the solve `A·dY = −B·dX`
    pub stats: SolveStats,
}

/// Cotangents returned by the implicit pullback ([`Linearization::vjp_many`]).
#[derive(Clone, Debug)]
pub struct ImplicitCotangents<T> {
    /// `x̄_j = Jᴴ·ȳ_j` for each output cotangent: one tensor per input, shaped like it
    pub dx: Vec<Vec<HostTensor>>,
    /// the adjoint solutions `u_j` of `Aᴴ·u_j = −ȳ_j` (`m×k`, vector after vector): the
    /// Lagrange multipliers of the conditions, and a warm start for a later pullback
    pub adjoint: Vec<T>,
    /// statistics of the solve `Aᴴ·U = −Ȳ`
    pub stats: SolveStats,
}

/// The second-order result of an implicit function ([`Linearization::hvp_with`]).
#[derive(Clone, Debug)]
pub struct ImplicitHvp<T> {
    /// the gradient `x̄ = Jᴴ·ȳ` of `φ(x) = Re⟨ȳ, y(x)⟩`: one tensor per input
    pub gradient: Vec<HostTensor>,
    /// the Hessian-vector product `d/dε x̄(x + ε·dx)`: one tensor per input
    pub hvp: Vec<HostTensor>,
    /// the tangent of the solution `dy = J·dx`, shaped like `y`
    pub dy: HostTensor,
    /// the adjoint `u` (`Aᴴ·u = −ȳ`) and its tangent `du` (length `m` each)
    pub adjoint: (Vec<T>, Vec<T>),
    /// statistics of the three solves: `Aᴴ·u = −ȳ`, `A·dy = −B·dx`, `Aᴴ·du = −(ȳ̇ + wy)`
    pub stats: [SolveStats; 3],
}

/// The tangent of an output cotangent that depends on `y` (`ȳ = ∇L(y)` gives
/// `ȳ̇ = ∇²L(y)·dy`): receives `dy`, returns `ȳ̇` shaped like `y`.
pub type CotangentTangent<'a> = &'a dyn Fn(&HostTensor) -> Result<HostTensor>;

struct Inner<T: ImplicitScalar> {
    y: HostTensor,
    x_dims: Vec<Dims>,
    maps: Arc<dyn LinearMaps<T>>,
    factorization: std::result::Result<Box<dyn Factorization<T>>, Error>,
    on_failure: OnFailure,
}

/// The pushforward and the pullback of an implicit function at one solution: the linear
/// maps there and one prepared linear solver (one dense factorization serves both modes).
/// Cheap to clone (reference-counted); `Send + Sync`; owns everything it reads.
///
/// Formulas (Blondel et al. 2022, eq. (2)–(3); ImplicitDifferentiation.jl; JAXopt
/// `root_jvp`/`root_vjp`), with `A = ∂c/∂y`, `B = ∂c/∂x` at the solution:
/// - pushforward: solve `A·dy = −B·dx`;
/// - pullback: solve `Aᴴ·u = −ȳ`, then `x̄ = Bᴴ·u`.
#[derive(Clone)]
pub struct Linearization<T: ImplicitScalar> {
    inner: Arc<Inner<T>>,
}

impl<T: ImplicitScalar> std::fmt::Debug for Linearization<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Linearization")
            .field("y_dims", &self.inner.y.dims())
            .field("x_dims", &self.inner.x_dims)
            .field("structure", &self.inner.maps.structure())
            .finish_non_exhaustive()
    }
}

fn check_tensor<T: ImplicitScalar>(t: &HostTensor, dims: &[usize], arg: &str) -> Result<()> {
    if t.dims() != dims {
        return Err(Error::shape(arg, dims, t.dims()));
    }
    typed::<T>(t, arg).map(|_| ())
}

fn nan<T: ImplicitScalar>() -> T {
    let nan = <<T as Scalar>::Real as Scalar>::from_f64(f64::NAN);
    T::from_parts(nan, nan)
}

impl<T: ImplicitScalar> Linearization<T> {
    /// The solution `y` (the pullback's own copy).
    pub fn y(&self) -> &HostTensor {
        &self.inner.y
    }

    /// The shapes of the inputs `x`.
    pub fn input_dims(&self) -> &[Dims] {
        &self.inner.x_dims
    }

    /// The linear maps at the solution.
    pub fn maps(&self) -> &dyn LinearMaps<T> {
        self.inner.maps.as_ref()
    }

    /// `‖c(x, y, z, args)‖₂` at the solution, when the conditions' source evaluated it:
    /// check it, because implicit derivatives are those of an exact root.
    pub fn conditions_norm(&self) -> Option<f64> {
        self.inner.maps.conditions().map(super::solver::norm)
    }

    fn num_inputs(&self) -> usize {
        self.inner.maps.num_inputs()
    }

    /// Solves `op(A)·X = R`, or NaN-fills `X` under [`OnFailure::NanFill`].
    fn solve(
        &self,
        system: System,
        rhs: &[T],
        k: usize,
        guess: Option<&[T]>,
    ) -> Result<(Vec<T>, SolveStats)> {
        let m = self.inner.y.len();
        let mut x = vec![T::zero(); m * k];
        if let Some(g) = guess {
            if g.len() != m * k {
                return Err(Error::shape("guess", &[m, k], &[g.len()]));
            }
            x.copy_from_slice(g);
        }
        let result = match &self.inner.factorization {
            Ok(f) => f.solve(system, rhs, &mut x, k, guess.is_some()),
            Err(e) => Err(e.clone()),
        };
        match result {
            Ok(stats) => Ok((x, stats)),
            Err(e) if self.inner.on_failure == OnFailure::NanFill && numerical(&e) => {
                x.fill(nan());
                let stats = SolveStats {
                    solver: "failed",
                    iterations: 0,
                    residuals: vec![f64::NAN; k],
                    failure: Some(e),
                };
                Ok((x, stats))
            }
            Err(e) => Err(e),
        }
    }

    /// Pushforward of one tangent direction (one tensor per input): `dy = J·dx`.
    ///
    /// # Errors
    /// See [`Linearization::jvp_many`].
    pub fn jvp(&self, dx: &[HostTensor]) -> Result<HostTensor> {
        Ok(self.jvp_many(&[dx], None)?.dy.remove(0))
    }

    /// Pushforward of a block of `k` tangent directions, each one tensor per input:
    /// solves `A·dY = −B·dX` with `k` right-hand sides. `guess` is an optional initial
    /// `dY` (`m×k`, vector after vector: the flattened `dy`s) for iterative solvers.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] when a direction has not one tensor per input,
    /// [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] when a tangent does not match its
    /// input or the guess has the wrong length, the solve's errors (see
    /// [`OnFailure`]) and the maps' errors; [`Error::NonFinite`] (`"dy[j]"`) for a tangent that
    /// overflows although `y` and the directions are finite ([`crate::finite`]).
    pub fn jvp_many<D: AsRef<[HostTensor]>>(
        &self,
        tangents: &[D],
        guess: Option<&[T]>,
    ) -> Result<ImplicitTangents> {
        let (m, n, k) = (self.inner.y.len(), self.num_inputs(), tangents.len());
        let mut dx = Vec::with_capacity(n * k);
        for (j, direction) in tangents.iter().enumerate() {
            let direction = direction.as_ref();
            if direction.len() != self.inner.x_dims.len() {
                return Err(Error::CountMismatch {
                    arg: format!("tangents[{j}]"),
                    expected: self.inner.x_dims.len(),
                    actual: direction.len(),
                });
            }
            for (i, (t, dims)) in direction.iter().zip(&self.inner.x_dims).enumerate() {
                let arg = format!("tangents[{j}][{i}]");
                check_tensor::<T>(t, dims, &arg)?;
                dx.extend_from_slice(typed::<T>(t, &arg)?);
            }
        }
        let mut rhs = vec![T::zero(); m * k];
        if m > 0 && n > 0 && k > 0 {
            self.inner.maps.apply_b(&dx, &mut rhs, k)?;
            rhs.iter_mut().for_each(|v| *v = -*v);
        }
        let (dy, stats) = self.solve(System::Direct, &rhs, k, guess)?;
        let dims = self.inner.y.dims();
        let dy: Vec<HostTensor> = (0..k)
            .map(|j| HostTensor::new(dims, T::wrap(dy[j * m..(j + 1) * m].to_vec())))
            .collect::<Result<_>>()?;
        if stats.failure.is_none() {
            let inputs_finite = || {
                finite::host_all_finite(&self.inner.y)
                    && tangents
                        .iter()
                        .all(|d| d.as_ref().iter().all(finite::host_all_finite))
            };
            for (j, t) in dy.iter().enumerate() {
                finite::check_host(|| format!("dy[{j}]"), t, inputs_finite)?;
            }
        }
        Ok(ImplicitTangents { dy, stats })
    }

    /// Second order: the Hessian-vector product of `φ(x) = Re⟨ȳ, y(x)⟩` along `dx` (one
    /// tensor per input), one tensor per input. See [`hvp_with`](Self::hvp_with).
    ///
    /// # Errors
    /// As [`hvp_with`](Self::hvp_with).
    pub fn hvp(&self, y_bar: &HostTensor, dx: &[HostTensor]) -> Result<Vec<HostTensor>> {
        Ok(self.hvp_with(y_bar, dx, None)?.hvp)
    }

    /// Second order by the implicit function theorem, forward-over-reverse: the gradient
    /// `x̄ = Bᴴ·u` of `φ(x) = Re⟨ȳ, y(x)⟩` and its tangent along `dx`. Differentiating
    /// `Aᴴ·u = −ȳ` and `x̄ = Bᴴ·u` along `(dx, dy)`:
    /// 1. `Aᴴ·u = −ȳ` (the pullback's adjoint solve);
    /// 2. `A·dy = −B·dx` (the pushforward);
    /// 3. `(wy, wx) = (d[Aᴴ]·u, d[Bᴴ]·u)` along `(dx, dy)`: the second derivatives of the
    ///    conditions, [`LinearMaps::adjoint_tangent`];
    /// 4. `Aᴴ·du = −(ȳ̇ + wy)`, with `ȳ̇ = y_bar_dot(dy)` when the cotangent depends on `y`
    ///    (the general form, for `φ = L(y(x))`), else `0`;
    /// 5. `H·dx = wx + Bᴴ·du`.
    ///
    /// The three solves share the linearization's one factorization (or its iterative
    /// solver). Source: the second-order implicit function theorem as in Blondel et al.,
    /// "Efficient and Modular Implicit Differentiation", NeurIPS 2022 (forward-over-reverse
    /// of their eq. (3)); Griewank and Walther, *Evaluating Derivatives*, §15.
    ///
    /// For complex data the maps are complex-linear and `H·dx` is the real directional
    /// derivative of the cotangent `x̄ = ∂φ/∂re + i·∂φ/∂im`.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] / [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] for a
    /// `dx` that does not match the inputs or a `y_bar` (or returned `ȳ̇`) that does not match
    /// `y`; [`Error::Unsupported`] when the conditions' source has no second derivatives; the
    /// solves' errors (see [`OnFailure`]; under [`OnFailure::NanFill`] the results of a failed
    /// solve are NaN and its error is in its [`SolveStats::failure`]).
    pub fn hvp_with(
        &self,
        y_bar: &HostTensor,
        dx: &[HostTensor],
        y_bar_dot: Option<CotangentTangent<'_>>,
    ) -> Result<ImplicitHvp<T>> {
        let (m, n) = (self.inner.y.len(), self.num_inputs());
        if dx.len() != self.inner.x_dims.len() {
            return Err(Error::CountMismatch {
                arg: "dx".into(),
                expected: self.inner.x_dims.len(),
                actual: dx.len(),
            });
        }
        let mut dxv = Vec::with_capacity(n);
        for (i, (t, dims)) in dx.iter().zip(&self.inner.x_dims).enumerate() {
            let arg = format!("dx[{i}]");
            check_tensor::<T>(t, dims, &arg)?;
            dxv.extend_from_slice(typed::<T>(t, &arg)?);
        }
        let first = self.vjp_many(std::slice::from_ref(y_bar), None)?;
        let u = first.adjoint;
        let tangent = self.jvp_many(&[dx], None)?;
        let dy = tangent
            .dy
            .into_iter()
            .next()
            .ok_or_else(|| Error::invalid("dx", "the pushforward returned no tangent"))?;
        let dyv = typed::<T>(&dy, "dy")?.to_vec();
        let (mut wy, mut wx) = (vec![T::zero(); m], vec![T::zero(); n]);
        if m > 0 {
            self.inner
                .maps
                .adjoint_tangent(&u, &dxv, &dyv, &mut wy, &mut wx)?;
        }
        if let Some(f) = y_bar_dot {
            let d = f(&dy)?;
            check_tensor::<T>(&d, self.inner.y.dims(), "y_bar_dot")?;
            for (w, v) in wy.iter_mut().zip(typed::<T>(&d, "y_bar_dot")?) {
                *w += *v;
            }
        }
        let rhs: Vec<T> = wy.iter().map(|&v| -v).collect();
        let (du, du_stats) = self.solve(System::Adjoint, &rhs, 1, None)?;
        let mut h = wx;
        if du_stats.failure.is_some() {
            h.fill(nan());
        } else if m > 0 && n > 0 {
            let mut bdu = vec![T::zero(); n];
            self.inner.maps.apply_b_adjoint(&du, &mut bdu, 1)?;
            for (h, v) in h.iter_mut().zip(bdu) {
                *h += v;
            }
        }
        let mut offset = 0;
        let hvp = self
            .inner
            .x_dims
            .iter()
            .map(|dims| {
                let len: usize = dims.iter().product();
                let data = h[offset..offset + len].to_vec();
                offset += len;
                HostTensor::new(dims, T::wrap(data))
            })
            .collect::<Result<Vec<_>>>()?;
        if du_stats.failure.is_none() {
            // the gradient and dy were checked by the pullback and the pushforward
            let inputs_finite = || {
                finite::host_all_finite(&self.inner.y)
                    && finite::host_all_finite(y_bar)
                    && dx.iter().all(finite::host_all_finite)
            };
            for (i, t) in hvp.iter().enumerate() {
                finite::check_host(|| format!("hvp[{i}]"), t, inputs_finite)?;
            }
        }
        let gradient = first.dx.into_iter().next().unwrap_or_default();
        Ok(ImplicitHvp {
            gradient,
            hvp,
            dy,
            adjoint: (u, du),
            stats: [first.stats, tangent.stats, du_stats],
        })
    }

    /// The dense Hessian of `φ(x) = Re⟨ȳ, y(x)⟩`, one [`hvp`](Self::hvp) per real coordinate
    /// (for small problems and tests; each HVP runs the three solves). Coordinates: the inputs
    /// in order, each flattened row-major; a complex element contributes its real part then
    /// its imaginary part. Entry `(i, j)` is `∂²φ/∂ξ_i∂ξ_j` (symmetric up to the solves'
    /// accuracy); a row-major `D×D` host tensor of the real dtype of `T`.
    ///
    /// # Errors
    /// As [`hvp`](Self::hvp).
    pub fn hessian(&self, y_bar: &HostTensor) -> Result<HostTensor> {
        let complex = T::DTYPE.is_complex();
        let parts: &[bool] = if complex { &[false, true] } else { &[false] };
        let mut coords: Vec<(usize, usize, bool)> = Vec::new();
        for (i, dims) in self.inner.x_dims.iter().enumerate() {
            let len: usize = dims.iter().product();
            for e in 0..len {
                for &im in parts {
                    coords.push((i, e, im));
                }
            }
        }
        let d = coords.len();
        let real = T::DTYPE.real();
        let mut h = HostTensor::zeros(&[d, d], real)?;
        for (j, &(i, e, im)) in coords.iter().enumerate() {
            let mut dx: Vec<HostTensor> = self
                .inner
                .x_dims
                .iter()
                .map(|dims| HostTensor::zeros(dims, T::DTYPE))
                .collect::<Result<_>>()?;
            let one = if im {
                crate::Complex64::new(0.0, 1.0)
            } else {
                crate::Complex64::new(1.0, 0.0)
            };
            dx[i]
                .data_mut()
                .set_projected(e, crate::DynScalar::C64(one))?;
            let column = self.hvp(y_bar, &dx)?;
            let column: Vec<Vec<crate::Complex64>> =
                column.iter().map(|t| t.data().to_c64_vec()).collect();
            for (r, &(i2, e2, im2)) in coords.iter().enumerate() {
                let z = column[i2][e2];
                let v = if im2 { z.im } else { z.re };
                h.data_mut()
                    .set_projected(r * d + j, crate::DynScalar::F64(v))?;
            }
        }
        Ok(h)
    }

    /// Pullback of one output cotangent: `x̄ = Jᴴ·ȳ`, one tensor per input.
    ///
    /// # Errors
    /// See [`Linearization::vjp_many`].
    pub fn vjp(&self, y_bar: &HostTensor) -> Result<Vec<HostTensor>> {
        Ok(self
            .vjp_many(std::slice::from_ref(y_bar), None)?
            .dx
            .remove(0))
    }

    /// Pullback of a block of `k` output cotangents: solves `Aᴴ·U = −Ȳ` with `k`
    /// right-hand sides, then `X̄ = Bᴴ·U`. `guess` is an optional initial `U` (`m×k`, for
    /// example the [`ImplicitCotangents::adjoint`] of a previous pullback).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] when a cotangent does not match
    /// `y` or the guess has the wrong length; [`Error::InvalidArgument`] (`"y_bar"` for one
    /// cotangent, `"cotangents[j]"` for a block) for a non-finite cotangent, whatever the
    /// solver; the solve's errors (see [`OnFailure`]) and the maps' errors;
    /// [`Error::NonFinite`] (`"x_bar[j][i]"`) for a cotangent that overflows although `y` and
    /// the cotangents are finite ([`crate::finite`]).
    pub fn vjp_many(
        &self,
        y_bars: &[HostTensor],
        guess: Option<&[T]>,
    ) -> Result<ImplicitCotangents<T>> {
        let (m, n, k) = (self.inner.y.len(), self.num_inputs(), y_bars.len());
        let mut rhs = Vec::with_capacity(m * k);
        for (j, t) in y_bars.iter().enumerate() {
            let arg = format!("cotangents[{j}]");
            check_tensor::<T>(t, self.inner.y.dims(), &arg)?;
            check_finite(t, if k == 1 { "y_bar" } else { &arg })?;
            rhs.extend(typed::<T>(t, &arg)?.iter().map(|&v| -v));
        }
        let (u, stats) = self.solve(System::Adjoint, &rhs, k, guess)?;
        let mut x_bar = vec![T::zero(); n * k];
        if stats.failure.is_some() {
            x_bar.fill(nan());
        } else if m > 0 && n > 0 && k > 0 {
            self.inner.maps.apply_b_adjoint(&u, &mut x_bar, k)?;
        }
        let dx: Vec<Vec<HostTensor>> = (0..k)
            .map(|j| {
                let mut offset = j * n;
                self.inner
                    .x_dims
                    .iter()
                    .map(|dims| {
                        let len: usize = dims.iter().product();
                        let data = x_bar[offset..offset + len].to_vec();
                        offset += len;
                        HostTensor::new(dims, T::wrap(data))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        if stats.failure.is_none() {
            let inputs_finite = || {
                finite::host_all_finite(&self.inner.y) && y_bars.iter().all(finite::host_all_finite)
            };
            for (j, xs) in dx.iter().enumerate() {
                for (i, t) in xs.iter().enumerate() {
                    finite::check_host(|| format!("x_bar[{j}][{i}]"), t, inputs_finite)?;
                }
            }
        }
        Ok(ImplicitCotangents {
            dx,
            adjoint: u,
            stats,
        })
    }
}
