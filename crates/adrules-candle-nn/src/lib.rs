//! # adrules-candle-nn
//!
//! Trainable layers as candle modules ([`candle_nn::Module`], built from a [`VarBuilder`] as
//! candle-nn's layers are): [`Einsum`], an einsum with learnable operands whose pairwise
//! steps are `adrules-candle`'s ops; [`Deq`], a deep-equilibrium layer whose fixed point is
//! differentiated by the implicit function theorem through [`Implicit`], so that its memory
//! does not grow with the solver's iterations.
//!
//! The configurations are the core's ([`EinsumConfig`], [`DeqConfig`] from
//! [`adrules_core::layers`], where the formulas, the checks and the initialisation are
//! written): the same seed gives the same initial parameters as burn's layers
//! (`adrules_burn_nn`), to the bit. Parameters come from the [`VarBuilder`] under the names
//! `w0`, `w1`, … (einsum) and `w`, `u`, `b` (DEQ): a name the builder already holds (loaded
//! weights, a `VarMap` filled before) is used as it is; a variable the builder creates (a
//! `VarMap`'s) is set to the seeded initial values. Errors are candle errors carrying the
//! typed [`adrules_core::Error`] ([`adrules_candle::adrules_error`]).
//!
//! # Example: the fixed point `z = tanh(W·z + x)` and its gradients
//! ```
//! use adrules_candle::candle_core::{DType, Device, Tensor, Var};
//! use adrules_candle_nn::candle_nn::{Module, VarBuilder, VarMap};
//! use adrules_candle_nn::{Deq, DeqConfig};
//!
//! # fn main() -> adrules_candle::candle_core::Result<()> {
//! let varmap = VarMap::new();
//! let vb = VarBuilder::from_varmap(&varmap, DType::F64, &Device::Cpu);
//! // no input map and no bias: f(z, x) = tanh(z·Wᵀ + x), one sample per row
//! let config = DeqConfig::new(3).with_bias(false).with_tolerance(1e-13);
//! let deq = Deq::new(&config, vb)?;
//! let x = Var::from_vec(vec![0.5f64, -1.0, 2.0], (1, 3), &Device::Cpu)?;
//! let z = deq.forward(x.as_tensor())?;
//! let residual = (deq.step(&z, x.as_tensor())? - &z)?.abs()?.max_all()?;
//! assert!(residual.to_scalar::<f64>()? < 1e-12);
//! // one backward pass: the implicit pullback, no iteration recorded
//! let grads = z.sum_all()?.backward()?;
//! assert_eq!(grads.get(deq.w()).unwrap().dims(), [3, 3]);
//! assert_eq!(grads.get(x.as_tensor()).unwrap().dims(), [1, 3]);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

use adrules_core::implicit::SolverOptions;
use adrules_core::layers::{self, EinsumLayout};
use adrules_core::{Error, Result};
use candle_core::{DType, Tensor, Var};
use candle_nn::{Init, Module, VarBuilder};

use adrules_candle::{Implicit, adrules_dtype, from_candle, to_candle};

pub use adrules_core::layers::{DeqConfig, EinsumConfig};
/// candle-nn, at the version the layers implement [`Module`] of (`=0.11.1`).
pub use candle_nn;

/// The parameter `name` of `shape`: the builder's tensor when it holds one, else the
/// variable it creates, set to `values` (row-major).
fn parameter(
    vb: &VarBuilder,
    name: &str,
    shape: &[usize],
    values: Vec<f64>,
) -> candle_core::Result<Tensor> {
    adrules_dtype(vb.dtype(), name).map_err(to_candle)?;
    let fresh = !vb.contains_tensor(name);
    let t = vb.get_with_hints(shape, name, Init::Const(0.0))?;
    if fresh && t.is_variable() {
        let v = Tensor::from_vec(values, shape, vb.device())?.to_dtype(vb.dtype())?;
        Var::from_tensor(&t)?.set(&v)?;
    }
    Ok(t)
}

/// An einsum with learnable operands (see [`EinsumConfig`]): `forward(x)` is
/// `einsum(equation, [weights with x at position input])`, each pairwise step one adrules
/// custom op of candle's graph.
#[derive(Clone, Debug)]
pub struct Einsum {
    weights: Vec<Tensor>,
    layout: EinsumLayout,
}

impl Einsum {
    /// The layer, its learnable operands `w0`, `w1`, … from `vb` (see the [module docs](self)).
    ///
    /// # Errors
    /// Those of [`EinsumConfig::layout`] (the string, the input index, the shapes against the
    /// labels); [`Error::Unsupported`] for a builder dtype other than f32/f64; the builder's
    /// (a held tensor of another shape).
    pub fn new(config: &EinsumConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let layout = config.layout().map_err(to_candle)?;
        let weights = layout
            .init()
            .into_iter()
            .zip(layout.shapes())
            .enumerate()
            .map(|(k, (v, s))| parameter(&vb, &format!("w{k}"), s, v))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Einsum { weights, layout })
    }

    /// The learnable operands, in the string's order, the input left out.
    pub fn weights(&self) -> &[Tensor] {
        &self.weights
    }

    /// The checked string and shapes.
    pub fn layout(&self) -> &EinsumLayout {
        &self.layout
    }
}

impl Module for Einsum {
    /// `einsum(equation, operands)` with the input in its place.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] / [`Error::ShapeMismatch`] (`"input"`) for an input that does
    /// not fit the string and the learnable operands; those of [`adrules_candle::einsum`].
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.layout.check_input(xs.dims()).map_err(to_candle)?;
        let operands = self.layout.operands(xs, self.weights.iter());
        adrules_candle::einsum(self.layout.equation(), &operands)
    }
}

/// A deep-equilibrium layer (see [`DeqConfig`] and [`adrules_core::layers`]): `forward(x)` for
/// `x` of shape `(B, d)` returns the fixed points `z*` of shape `(B, h)` of
/// `z = tanh(z·Wᵀ + x·Uᵀ + b)`, one per row, found by fixed-point iteration on detached
/// tensors and recorded as one [`Implicit`] node over `x`, `W`, `U`, `b`: the backward pass
/// solves `(∂c/∂z)ᵀ·u = −z̄` with the conditions `c = f_θ(z, x) − z` differentiated by candle's
/// own backward pass, matrix-free (GMRES) above 200 unknowns (`B·h`), and applies
/// `(∂c/∂θ)ᵀ`. Its memory is that of `x`, `z*`, the parameters and the Krylov basis,
/// whatever the number of iterations.
#[derive(Clone, Debug)]
pub struct Deq {
    w: Tensor,
    u: Option<Tensor>,
    b: Option<Tensor>,
    config: DeqConfig,
    linear_solver: SolverOptions,
}

/// `tanh(z·Wᵀ + x·Uᵀ + b)` (`x` itself without `U`).
fn step(
    w: &Tensor,
    u: Option<&Tensor>,
    b: Option<&Tensor>,
    x: &Tensor,
    z: &Tensor,
) -> candle_core::Result<Tensor> {
    let input = match u {
        Some(u) => x.matmul(&u.t()?)?,
        None => x.clone(),
    };
    let pre = (z.matmul(&w.t()?)? + input)?;
    let pre = match b {
        Some(b) => pre.broadcast_add(b)?,
        None => pre,
    };
    pre.tanh()
}

/// The largest absolute difference of two tensors.
fn max_change(a: &Tensor, b: &Tensor) -> candle_core::Result<f64> {
    (a - b)?
        .abs()?
        .max_all()?
        .to_dtype(DType::F64)?
        .to_scalar::<f64>()
}

/// The fixed points of `x`'s rows for the parameters `(w, u, b)` (plain tensors).
fn iterate(
    config: &DeqConfig,
    w: &Tensor,
    u: Option<&Tensor>,
    b: Option<&Tensor>,
    x: &Tensor,
) -> Result<(Tensor, usize)> {
    let z0 = Tensor::zeros((x.dims()[0], config.hidden), x.dtype(), x.device());
    layers::fixed_point(z0.map_err(from_candle)?, config, |z| {
        let next = step(w, u, b, x, z).map_err(from_candle)?;
        let change = max_change(&next, z).map_err(from_candle)?;
        Ok((next, change))
    })
}

impl Deq {
    /// The layer, its parameters `w` (`h×h`), `u` (`h×d`, with an input map) and `b` (`h`,
    /// with a bias) from `vb` (see the [module docs](self)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field ([`DeqConfig::validate`]);
    /// [`Error::Unsupported`] for a builder dtype other than f32/f64; the builder's.
    pub fn new(config: &DeqConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let p = config.init().map_err(to_candle)?;
        let (h, d) = (config.hidden, config.features());
        let w = parameter(&vb, "w", &[h, h], p.w)?;
        let u = p.u.map(|u| parameter(&vb, "u", &[h, d], u)).transpose()?;
        let b = p.b.map(|b| parameter(&vb, "b", &[h], b)).transpose()?;
        Ok(Deq {
            w,
            u,
            b,
            config: config.clone(),
            linear_solver: SolverOptions::default(),
        })
    }

    /// Uses these options for the linear solves of the backward pass (default
    /// [`SolverOptions::default`]: dense up to 200 unknowns `B·h`, GMRES above).
    pub fn with_linear_solver(mut self, options: SolverOptions) -> Self {
        self.linear_solver = options;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &DeqConfig {
        &self.config
    }

    /// `W`, `h×h`.
    pub fn w(&self) -> &Tensor {
        &self.w
    }

    /// `U`, `h×d`, with an input map.
    pub fn u(&self) -> Option<&Tensor> {
        self.u.as_ref()
    }

    /// `b`, `h`, with a bias.
    pub fn b(&self) -> Option<&Tensor> {
        self.b.as_ref()
    }

    /// Checks `x`'s shape `(B, d)` (`B ≥ 1`).
    fn check(&self, x: &Tensor) -> candle_core::Result<()> {
        self.config.check_input(x.dims()).map_err(to_candle)?;
        Ok(())
    }

    /// One application of the map, `f_θ(z, x) = tanh(z·Wᵀ + x·Uᵀ + b)`, recorded by candle's
    /// autodiff as ordinary ops (`z`: `(B, h)`, `x`: `(B, d)`).
    ///
    /// # Errors
    /// candle's, for tensors of the wrong shapes or dtypes.
    pub fn step(&self, z: &Tensor, x: &Tensor) -> candle_core::Result<Tensor> {
        step(&self.w, self.u.as_ref(), self.b.as_ref(), x, z)
    }

    /// The fixed points without gradient (everything detached) and the number of iterations
    /// the solver took.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] / [`Error::RankMismatch`] (`"x"`) for `x` not `(B, d)` with
    /// `B ≥ 1`; the iteration's [`Error::NotConverged`] and [`Error::NonFinite`]
    /// ([`adrules_core::layers::fixed_point`]).
    pub fn solve(&self, x: &Tensor) -> candle_core::Result<(Tensor, usize)> {
        self.check(x)?;
        let (u, b) = (
            self.u.as_ref().map(Tensor::detach),
            self.b.as_ref().map(Tensor::detach),
        );
        let (w, x) = (self.w.detach(), x.detach());
        iterate(&self.config, &w, u.as_ref(), b.as_ref(), &x).map_err(to_candle)
    }

    /// Rescales `W` in place to Frobenius norm `max` when its norm is larger (the scale
    /// computed on the host in f64 from `W`'s values, applied in `W`'s dtype; `W` unchanged
    /// otherwise). With `‖W‖_F ≤ max < 1` the map stays a `max`-contraction (see
    /// [`adrules_core::layers`]): called after each optimizer step, it keeps the fixed point
    /// well-posed during training, the projection of a projected gradient method.
    ///
    /// # Errors
    /// Those of [`layers::contraction_scale`] (`max` outside `(0, 1)`, a non-finite `W`);
    /// [`Error::InvalidArgument`] (`"w"`) when `W` needs rescaling but is not a variable (held
    /// weights that were loaded, not created).
    pub fn clamp_contraction(&self, max: f64) -> candle_core::Result<()> {
        let values = self
            .w
            .to_dtype(DType::F64)?
            .flatten_all()?
            .to_vec1::<f64>()?;
        let Some(scale) = layers::contraction_scale(values, max).map_err(to_candle)? else {
            return Ok(());
        };
        if !self.w.is_variable() {
            let e = Error::invalid("w", "not a variable: nothing to rescale in place");
            return Err(to_candle(e));
        }
        Var::from_tensor(&self.w)?.set(&self.w.affine(scale, 0.0)?)
    }

    /// The same fixed-point iteration run `iterations` times from `z = 0` with every step
    /// recorded by candle's autodiff (backpropagation through the unrolled solver): the
    /// reference the implicit gradient is tested against, whose memory grows with
    /// `iterations`. No convergence test.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] / [`Error::RankMismatch`] (`"x"`) for `x` not `(B, d)`.
    pub fn forward_unrolled(&self, x: &Tensor, iterations: usize) -> candle_core::Result<Tensor> {
        self.check(x)?;
        let mut z = Tensor::zeros((x.dims()[0], self.config.hidden), x.dtype(), x.device())?;
        for _ in 0..iterations {
            z = self.step(&z, x)?;
        }
        Ok(z)
    }
}

impl Module for Deq {
    /// The fixed points `z*` (`(B, h)`) of the rows of `x` (`(B, d)`), differentiable in `x`
    /// and the parameters by the implicit function theorem.
    ///
    /// # Errors
    /// As [`Deq::solve`] (before anything is recorded), and those of [`Implicit::apply`]
    /// (devices, dtypes: `x` and the parameters share one dtype). In backward (returned by
    /// `backward()`): the linear solver's failures, e.g. [`Error::NotConverged`] of GMRES
    /// when the map is far from contractive.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.check(xs)?;
        let (has_u, has_b) = (self.u.is_some(), self.b.is_some());
        // the inputs are [x, W, U?, b?]
        let parts = move |v: &[Tensor]| {
            let u = has_u.then(|| v[2].clone());
            let b = has_b.then(|| v[v.len() - 1].clone());
            (u, b)
        };
        let config = self.config.clone();
        let solver = move |v: &[Tensor]| {
            let (u, b) = parts(v);
            let (z, _) =
                iterate(&config, &v[1], u.as_ref(), b.as_ref(), &v[0]).map_err(to_candle)?;
            Ok(z)
        };
        let conditions = move |v: &[Tensor], z: &Tensor| {
            let (u, b) = parts(v);
            step(&v[1], u.as_ref(), b.as_ref(), &v[0], z)? - z
        };
        let f = Implicit::new(solver, conditions).with_linear_solver(self.linear_solver.clone());
        let mut inputs = vec![xs, &self.w];
        inputs.extend(self.u.iter().chain(&self.b));
        f.apply(&inputs)
    }
}

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
