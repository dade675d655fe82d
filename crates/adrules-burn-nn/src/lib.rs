//! # adrules-burn-nn
//!
//! Trainable layers as burn modules (`#[derive(Module)]`, built from a `#[derive(Config)]` with
//! `init(&device)`, as burn-nn's layers are): [`Einsum`], an einsum with learnable operands,
//! one adrules network node per call; [`Deq`], a deep-equilibrium layer whose fixed point is
//! differentiated by the implicit function theorem through [`Implicit`], so that its memory
//! does not grow with the solver's iterations.
//!
//! The engine-independent half (the checks of the configurations, the fan-in, the
//! deterministic initialisation shared with candle's layers, the convergence test) is
//! [`adrules_core::layers`]; the formulas are written there. Both layers train with any burn
//! optimizer (burn-optim's `GradientsParams::from_grads` and `Optimizer::step`).
//!
//! # Example: the fixed point `z = tanh(W·z + x)` and its gradients
//! ```
//! use adrules_burn::burn_tensor::{DType, Device, Tensor, TensorData};
//! use adrules_burn_nn::DeqConfig;
//!
//! # fn main() -> adrules_core::Result<()> {
//! let device = Device::flex().autodiff();
//! // no input map and no bias: f(z, x) = tanh(z·Wᵀ + x), one sample per row
//! let config = DeqConfig::new(3).with_bias(false).with_tolerance(1e-13);
//! let deq = config.with_dtype(Some(DType::F64)).init(&device)?;
//! let data = TensorData::new(vec![0.5f64, -1.0, 2.0], [1, 3]);
//! let x = Tensor::<2>::from_data(data, (&device, DType::F64)).require_grad();
//! let z = deq.forward(x.clone())?;
//! let residual = (deq.step(z.clone(), x.clone()) - z.clone()).abs().max();
//! assert!(residual.into_scalar::<f64>() < 1e-12);
//! // one backward pass: the implicit pullback, no iteration recorded
//! let grads = z.sum().backward();
//! assert_eq!(deq.w.grad(&grads).unwrap().dims(), [3, 3]);
//! assert_eq!(x.grad(&grads).unwrap().dims(), [1, 3]);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

use adrules_core::implicit::SolverOptions;
use adrules_core::layers::{self, EinsumLayout};
use adrules_core::{Error, Result};
use burn::config::Config;
use burn::module::{Module, Param};
use burn_core as burn;
use burn_tensor::{DType, Device, Tensor, TensorCreationOptions, TensorData};

use adrules_burn::{Implicit, Operand, einsum};

/// burn-core, at the version the layers derive their `Module` and `Config` from (`=0.22.1`):
/// a module of yours that holds these layers derives with `use adrules_burn_nn::burn_core as
/// burn;` in scope (burn's derives name the crate `burn`).
pub use burn_core;

/// The most operands (the input included) an [`Einsum`] layer takes: burn's einsum here is
/// typed by its operand count, and the layer dispatches over `1..=MAX_OPERANDS`.
pub const MAX_OPERANDS: usize = 8;

/// The largest rank of a learnable operand of an [`Einsum`] layer ([`Weight`]'s variants).
pub const MAX_WEIGHT_RANK: usize = 6;

/// The configuration of an [`Einsum`] layer: `y = einsum(equation, operands)` with operand
/// `input` the layer's input and the others learnable. See [`adrules_core::layers`] for the
/// checks and the initialisation (uniform in `±1/√fan_in`, fan-in the product of the summed
/// dimensions of the operand; the same values as candle's layer for the same seed).
#[derive(Config, Debug)]
pub struct EinsumConfig {
    /// the Einstein string (torch's grammar), e.g. `"bi,ij->bj"`
    pub equation: String,
    /// the shapes of the learnable operands, in the string's order, the input left out
    pub shapes: Vec<Vec<usize>>,
    /// which operand of the string is the input
    #[config(default = 0)]
    pub input: usize,
    /// the seed of the initialisation
    #[config(default = 0)]
    pub seed: u64,
    /// the dtype of the parameters (`None`: the device's default float dtype)
    pub dtype: Option<DType>,
}

/// One learnable operand of an [`Einsum`] layer, a parameter of its own rank.
#[derive(Module, Debug)]
#[allow(missing_docs)]
pub enum Weight {
    R1(Param<Tensor<1>>),
    R2(Param<Tensor<2>>),
    R3(Param<Tensor<3>>),
    R4(Param<Tensor<4>>),
    R5(Param<Tensor<5>>),
    R6(Param<Tensor<6>>),
}

impl Weight {
    /// The current value as an einsum operand (tracked by autodiff as the parameter is).
    pub fn operand(&self) -> Operand {
        match self {
            Weight::R1(p) => p.val().into(),
            Weight::R2(p) => p.val().into(),
            Weight::R3(p) => p.val().into(),
            Weight::R4(p) => p.val().into(),
            Weight::R5(p) => p.val().into(),
            Weight::R6(p) => p.val().into(),
        }
    }

    /// The shape.
    pub fn dims(&self) -> Vec<usize> {
        self.operand().dims()
    }

    /// The value as a rank-`D` tensor.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] when the parameter's rank is not `D`.
    pub fn value<const D: usize>(&self) -> Result<Tensor<D>> {
        self.operand().into_tensor()
    }

    /// The gradient of the parameter in `grads`, as a rank-`D` tensor (`None` without one).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] when the parameter's rank is not `D`.
    pub fn grad<const D: usize>(
        &self,
        grads: &burn_tensor::Gradients,
    ) -> Result<Option<Tensor<D>>> {
        let g = match self {
            Weight::R1(p) => p.grad(grads).map(Operand::from),
            Weight::R2(p) => p.grad(grads).map(Operand::from),
            Weight::R3(p) => p.grad(grads).map(Operand::from),
            Weight::R4(p) => p.grad(grads).map(Operand::from),
            Weight::R5(p) => p.grad(grads).map(Operand::from),
            Weight::R6(p) => p.grad(grads).map(Operand::from),
        };
        g.map(Operand::into_tensor).transpose()
    }

    fn new(values: Vec<f64>, shape: &[usize], options: TensorCreationOptions) -> Result<Self> {
        macro_rules! param {
            ($d:literal, $v:ident) => {{
                let mut dims = [0usize; $d];
                dims.copy_from_slice(shape);
                let data = TensorData::new(values, dims);
                Weight::$v(Param::from_tensor(Tensor::<$d>::from_data(data, options)))
            }};
        }
        Ok(match shape.len() {
            1 => param!(1, R1),
            2 => param!(2, R2),
            3 => param!(3, R3),
            4 => param!(4, R4),
            5 => param!(5, R5),
            6 => param!(6, R6),
            r => {
                return Err(Error::Unsupported {
                    backend: "burn (adrules_burn_nn::Einsum)".into(),
                    what: format!("a learnable operand of rank {r} (at most {MAX_WEIGHT_RANK})"),
                });
            }
        })
    }
}

/// Creation options for `dtype` (or the device's default float dtype) on `device`.
fn options(device: &Device, dtype: Option<DType>) -> TensorCreationOptions {
    let o = TensorCreationOptions::new(device.clone());
    match dtype {
        Some(d) => o.with_dtype(d),
        None => o,
    }
}

impl EinsumConfig {
    /// The layer, its learnable operands initialised on `device`.
    ///
    /// # Errors
    /// Those of [`adrules_core::layers::EinsumConfig::layout`] (the string, the input index,
    /// the shapes against the labels); [`Error::Unsupported`] for more than
    /// [`MAX_OPERANDS`] operands or a learnable operand of rank 0 or above
    /// [`MAX_WEIGHT_RANK`]; [`Error::Unsupported`] for a dtype other than f32/f64.
    pub fn init(&self, device: &Device) -> Result<Einsum> {
        let layout = layers::EinsumConfig {
            equation: self.equation.clone(),
            shapes: self.shapes.clone(),
            input: self.input,
            seed: self.seed,
        }
        .layout()?;
        if layout.num_operands() > MAX_OPERANDS {
            return Err(Error::Unsupported {
                backend: "burn (adrules_burn_nn::Einsum)".into(),
                what: format!(
                    "{} operands (at most {MAX_OPERANDS})",
                    layout.num_operands()
                ),
            });
        }
        check_float(self.dtype)?;
        let options = options(device, self.dtype);
        let weights = layout
            .init()
            .into_iter()
            .zip(layout.shapes())
            .map(|(v, s)| Weight::new(v, s, options.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Einsum { weights, layout })
    }
}

/// f32 and f64 only, as the rules.
fn check_float(dtype: Option<DType>) -> Result<()> {
    match dtype {
        None | Some(DType::F32 | DType::F64) => Ok(()),
        Some(other) => Err(Error::Unsupported {
            backend: "burn (adrules_burn_nn)".into(),
            what: format!("parameters of dtype {other:?} (f32 and f64 only)"),
        }),
    }
}

/// An einsum with learnable operands (see [`EinsumConfig`]): `forward(x)` is
/// `einsum(equation, [weights with x at position input])`, one adrules network node of
/// burn's graph whose backward pass is the core's network pullback.
#[derive(Module, Debug)]
pub struct Einsum {
    /// the learnable operands, in the string's order, the input left out
    pub weights: Vec<Weight>,
    #[module(skip)]
    layout: EinsumLayout,
}

impl Einsum {
    /// The checked string and shapes.
    pub fn layout(&self) -> &EinsumLayout {
        &self.layout
    }

    /// `einsum(equation, operands)` with `input` in its place, of output rank `DO` (a rank-0
    /// result as shape `[1]`, burn's convention).
    ///
    /// # Errors
    /// [`Error::RankMismatch`] / [`Error::ShapeMismatch`] (`"input"`) for an input that does not
    /// fit the string and the learnable operands' dimensions; [`Error::RankMismatch`]
    /// (`"output"`) for a `DO` that is not the string's output rank; the routing and dtype
    /// errors of [`adrules_burn::apply`].
    pub fn forward<const DI: usize, const DO: usize>(
        &self,
        input: Tensor<DI>,
    ) -> Result<Tensor<DO>> {
        self.layout.check_input(&input.dims())?;
        let weights = self.weights.iter().map(Weight::operand);
        let operands = self.layout.operands(Operand::from(input), weights);
        einsum_any(self.layout.equation(), operands)
    }
}

/// [`einsum`] with a run-time number of operands.
fn einsum_any<const D: usize>(equation: &str, operands: Vec<Operand>) -> Result<Tensor<D>> {
    macro_rules! by_count {
        ($($n:literal)*) => {
            match operands.len() {
                $($n => match <[Operand; $n]>::try_from(operands) {
                    Ok(array) => einsum::<$n, D>(equation, array),
                    Err(v) => Err(Error::rank("operands", $n, v.len())),
                },)*
                n => Err(Error::Unsupported {
                    backend: "burn (adrules_burn_nn::Einsum)".into(),
                    what: format!("{n} operands (at most {MAX_OPERANDS})"),
                }),
            }
        };
    }
    by_count!(1 2 3 4 5 6 7 8)
}

/// The configuration of a [`Deq`] layer: the fixed point `z* = tanh(z*·Wᵀ + x·Uᵀ + b)` of
/// each row of the input, see [`adrules_core::layers`] for the map, its contractive
/// initialisation (`‖W‖_F = contraction`) and the stopping rule.
#[derive(Config, Debug)]
pub struct DeqConfig {
    /// `h`, the features of the fixed point
    pub hidden: usize,
    /// `d`, the input features mapped by a learnable `U` (`h×d`); `None`: no input map, the
    /// input has `h` features and enters as it is
    pub input_features: Option<usize>,
    /// whether the map has a learnable bias `b`
    #[config(default = true)]
    pub bias: bool,
    /// `γ ∈ (0, 1)`, the Frobenius norm of the initial `W` (a bound of the contraction factor)
    #[config(default = 0.5)]
    pub contraction: f64,
    /// the iteration stops when `max |z_{k+1} − z_k| ≤ tolerance`
    #[config(default = 1e-5)]
    pub tolerance: f64,
    /// iterations allowed before [`Error::NotConverged`]
    #[config(default = 200)]
    pub max_iterations: usize,
    /// the seed of the initialisation
    #[config(default = 0)]
    pub seed: u64,
    /// the dtype of the parameters (`None`: the device's default float dtype)
    pub dtype: Option<DType>,
}

impl DeqConfig {
    /// The engine-independent configuration.
    pub fn core(&self) -> layers::DeqConfig {
        layers::DeqConfig {
            hidden: self.hidden,
            input_features: self.input_features,
            bias: self.bias,
            contraction: self.contraction,
            tolerance: self.tolerance,
            max_iterations: self.max_iterations,
            seed: self.seed,
        }
    }

    /// The layer, its parameters initialised on `device`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field ([`adrules_core::layers::DeqConfig::validate`]);
    /// [`Error::Unsupported`] for a dtype other than f32/f64.
    pub fn init(&self, device: &Device) -> Result<Deq> {
        let config = self.core();
        let p = config.init()?;
        check_float(self.dtype)?;
        let o = options(device, self.dtype);
        let (h, d) = (config.hidden, config.features());
        let matrix = |v: Vec<f64>, rows: usize, cols: usize| {
            let t = Tensor::<2>::from_data(TensorData::new(v, [rows, cols]), o.clone());
            Param::from_tensor(t)
        };
        let w = matrix(p.w, h, h);
        let u = p.u.map(|u| matrix(u, h, d));
        let b = p.b.map(|b| {
            Param::from_tensor(Tensor::<1>::from_data(TensorData::new(b, [h]), o.clone()))
        });
        Ok(Deq {
            w,
            u,
            b,
            config,
            linear_solver: SolverOptions::default(),
        })
    }
}

/// A deep-equilibrium layer (see [`DeqConfig`]): `forward(x)` for `x` of shape `[B, d]`
/// returns the fixed points `z*` of shape `[B, h]`, one per row, found by fixed-point
/// iteration without autodiff and recorded as one [`Implicit`] node of burn's graph over `x`,
/// `W`, `U`, `b`: the backward pass solves `(∂c/∂z)ᵀ·u = −z̄` with the conditions
/// `c = f_θ(z, x) − z` differentiated by burn's own autodiff, matrix-free (GMRES) above 200
/// unknowns (`B·h`), and applies `(∂c/∂θ)ᵀ`. Its memory is that of `x`, `z*`, the parameters
/// and the Krylov basis, whatever the number of iterations.
#[derive(Module, Debug)]
pub struct Deq {
    /// `W`, `h×h`
    pub w: Param<Tensor<2>>,
    /// `U`, `h×d`, with an input map
    pub u: Option<Param<Tensor<2>>>,
    /// `b`, `h`, with a bias
    pub b: Option<Param<Tensor<1>>>,
    #[module(skip)]
    config: layers::DeqConfig,
    #[module(skip)]
    linear_solver: SolverOptions,
}

/// The shapes the conditions' flattened inputs are read back with.
#[derive(Clone, Copy, Debug)]
struct Shapes {
    h: usize,
    d: usize,
    u: bool,
    b: bool,
}

/// The parameters `W`, `U?`, `b?` as matrices and vectors.
type Parameters = (Tensor<2>, Option<Tensor<2>>, Option<Tensor<1>>);

impl Shapes {
    /// `x` (`[B, d]`) and the parameters from the flattened `[x, W, U?, b?]`.
    fn unflatten(&self, xs: &[Tensor<1>], batch: usize) -> (Tensor<2>, Parameters) {
        let x = xs[0].clone().reshape([batch, self.d]);
        let w = xs[1].clone().reshape([self.h, self.h]);
        let u = self.u.then(|| xs[2].clone().reshape([self.h, self.d]));
        let b = self.b.then(|| xs[xs.len() - 1].clone());
        (x, (w, u, b))
    }
}

/// The fixed points of `x`'s rows for the parameters `(w, u, b)`, by
/// [`layers::fixed_point`] from `z = 0`.
fn iterate(config: &layers::DeqConfig, p: &Parameters, x: Tensor<2>) -> Result<(Tensor<2>, usize)> {
    let z0 = zeros(&x, config.hidden);
    layers::fixed_point(z0, config, |z| {
        let next = step(&p.0, p.1.as_ref(), p.2.as_ref(), x.clone(), z.clone());
        let change = max_change(&next, z);
        Ok((next, change))
    })
}

/// `tanh(z·Wᵀ + x·Uᵀ + b)` (`x` itself without `U`).
fn step(
    w: &Tensor<2>,
    u: Option<&Tensor<2>>,
    b: Option<&Tensor<1>>,
    x: Tensor<2>,
    z: Tensor<2>,
) -> Tensor<2> {
    let input = match u {
        Some(u) => x.matmul(u.clone().transpose()),
        None => x,
    };
    let pre = z.matmul(w.clone().transpose()) + input;
    let pre = match b {
        Some(b) => pre + b.clone().unsqueeze::<2>(),
        None => pre,
    };
    pre.tanh()
}

/// Zeros `[B, h]` on `x`'s device, of `x`'s dtype, not tracked.
fn zeros(x: &Tensor<2>, h: usize) -> Tensor<2> {
    Tensor::<2>::zeros([x.dims()[0], h], (&x.device(), x.dtype()))
}

/// The largest absolute difference of two tensors.
fn max_change(a: &Tensor<2>, b: &Tensor<2>) -> f64 {
    (a.clone() - b.clone()).abs().max().into_scalar::<f64>()
}

impl Deq {
    /// The engine-independent configuration (sizes, tolerance, iteration limit).
    pub fn config(&self) -> &layers::DeqConfig {
        &self.config
    }

    /// Uses these options for the linear solves of the backward pass (default
    /// [`SolverOptions::default`]: dense up to 200 unknowns `B·h`, GMRES above).
    pub fn with_linear_solver(mut self, options: SolverOptions) -> Self {
        self.linear_solver = options;
        self
    }

    fn shapes(&self) -> Shapes {
        Shapes {
            h: self.config.hidden,
            d: self.config.features(),
            u: self.u.is_some(),
            b: self.b.is_some(),
        }
    }

    /// Checks `x`'s shape `[B, d]` (`B ≥ 1`) and returns `B`.
    fn check(&self, x: &Tensor<2>) -> Result<usize> {
        self.config.check_input(&x.dims())
    }

    /// One application of the map, `f_θ(z, x) = tanh(z·Wᵀ + x·Uᵀ + b)`, recorded by burn's
    /// autodiff as ordinary ops (`z`: `[B, h]`, `x`: `[B, d]`).
    pub fn step(&self, z: Tensor<2>, x: Tensor<2>) -> Tensor<2> {
        let u = self.u.as_ref().map(|p| p.val());
        let b = self.b.as_ref().map(|p| p.val());
        step(&self.w.val(), u.as_ref(), b.as_ref(), x, z)
    }

    /// The fixed points without gradient (the parameters and `x` read without autodiff) and
    /// the number of iterations the solver took.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`"x"`) for `x` not `[B, d]` with `B ≥ 1`; the iteration's
    /// [`Error::NotConverged`] and [`Error::NonFinite`] ([`adrules_core::layers::fixed_point`]).
    pub fn solve(&self, x: Tensor<2>) -> Result<(Tensor<2>, usize)> {
        self.check(&x)?;
        let plain = |p: &Param<Tensor<2>>| p.val().without_autodiff();
        let (w, u) = (plain(&self.w), self.u.as_ref().map(plain));
        let b = self.b.as_ref().map(|p| p.val().without_autodiff());
        iterate(&self.config, &(w, u, b), x.without_autodiff())
    }

    /// The fixed points `z*` (`[B, h]`) of the rows of `x` (`[B, d]`), differentiable in `x`
    /// and the parameters by the implicit function theorem.
    ///
    /// # Errors
    /// As [`solve`](Self::solve) (before anything is recorded), and those of
    /// [`Implicit::apply`] (routing, dtypes: `x` and the parameters share one dtype). In
    /// backward (see [`adrules_burn::try_backward`]): the linear solver's failures, e.g.
    /// [`Error::NotConverged`] of GMRES when the map is far from contractive.
    pub fn forward(&self, x: Tensor<2>) -> Result<Tensor<2>> {
        let batch = self.check(&x)?;
        let (shapes, config) = (self.shapes(), self.config.clone());
        let solver = move |xs: &[Tensor<1>]| -> Result<Tensor<1>> {
            let (x, p) = shapes.unflatten(xs, batch);
            let (z, _) = iterate(&config, &p, x)?;
            Ok(z.reshape([batch * shapes.h]))
        };
        let conditions = move |xs: &[Tensor<1>], y: &Tensor<1>| {
            let z = y.clone().reshape([batch, shapes.h]);
            let (x, (w, u, b)) = shapes.unflatten(xs, batch);
            (step(&w, u.as_ref(), b.as_ref(), x, z.clone()) - z).reshape([batch * shapes.h])
        };
        let f = Implicit::new(solver, conditions).with_linear_solver(self.linear_solver.clone());
        let (x, w) = (Operand::from(x), Operand::from(self.w.val()));
        let z = match (&self.u, &self.b) {
            (Some(u), Some(b)) => f.apply([x, w, u.val().into(), b.val().into()]),
            (Some(u), None) => f.apply([x, w, u.val().into()]),
            (None, Some(b)) => f.apply([x, w, b.val().into()]),
            (None, None) => f.apply([x, w]),
        }?;
        Ok(z.reshape([batch, self.config.hidden]))
    }

    /// Rescales `W` to Frobenius norm `max` when its norm is larger (the scale computed on the
    /// host in f64 from `W`'s values, applied in `W`'s dtype; `W` unchanged otherwise). With
    /// `‖W‖_F ≤ max < 1` the map stays a `max`-contraction (see [`adrules_core::layers`]):
    /// called after each optimizer step, it keeps the fixed point well-posed during training,
    /// the projection of a projected gradient method. The parameter keeps its id.
    ///
    /// # Errors
    /// Those of [`layers::contraction_scale`]: [`Error::InvalidArgument`] (`"max"`) for `max`
    /// outside `(0, 1)`, [`Error::NonFinite`] (`"w"`) for a `W` that diverged.
    pub fn clamp_contraction(mut self, max: f64) -> Result<Self> {
        let scale = layers::contraction_scale(self.w.val().into_data().iter::<f64>(), max)?;
        if let Some(s) = scale {
            self.w = self.w.map(|w| w.mul_scalar(s).detach().require_grad());
        }
        Ok(self)
    }

    /// The same fixed-point iteration run `iterations` times from `z = 0` with every step
    /// recorded by burn's autodiff (backpropagation through the unrolled solver): the
    /// reference the implicit gradient is tested against, whose memory grows with
    /// `iterations`. No convergence test.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] (`"x"`) for `x` not `[B, d]` with `B ≥ 1`.
    pub fn forward_unrolled(&self, x: Tensor<2>, iterations: usize) -> Result<Tensor<2>> {
        self.check(&x)?;
        let mut z = zeros(&x, self.config.hidden);
        for _ in 0..iterations {
            z = self.step(z, x.clone());
        }
        Ok(z)
    }
}

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
