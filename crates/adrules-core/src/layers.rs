//! The engine-independent half of the trainable layers of the adapters
//! (`adrules_burn_nn`, `adrules_candle_nn`): the checked configuration of an einsum layer
//! ([`EinsumConfig`] → [`EinsumLayout`]) and of a deep-equilibrium layer ([`DeqConfig`]),
//! their deterministic initialisation ([`uniform`]: the same seed gives the same values, to
//! the bit, on every engine), and the fixed-point driver ([`fixed_point`]) whose convergence
//! test and typed failures every adapter shares.
//!
//! # Einsum layer
//! `y = einsum(equation, operands)` where one operand (`input`) is the layer's input and the
//! others are learnable. Weight `k` (the `k`-th learnable operand in the string's order) is
//! initialised uniformly in `±1/√fan_in(k)`, where `fan_in(k)` is the product of the
//! dimensions of its labels that are summed (labels absent from the output; a label repeated
//! within the weight counted once; 1 when none is summed). For `"bi,ij->bj"` with the input
//! first this is `±1/√dim(i)`, PyTorch's and burn's `Linear` default bound.
//!
//! # Deep-equilibrium layer
//! For an input batch `x ∈ ℝ^{B×d}` (one sample per row) the layer returns `z* ∈ ℝ^{B×h}`,
//! the fixed point of
//!
//! ```text
//! f_θ(z, x) = tanh(z·Wᵀ + x·Uᵀ + 1·bᵀ),    z* = f_θ(z*, x),
//! ```
//!
//! row by row, with `W ∈ ℝ^{h×h}`, `U ∈ ℝ^{h×d}` and `b ∈ ℝ^h` learnable. Without an input
//! map (`input_features: None`) the input enters as it is, `d = h` and `x·Uᵀ` is replaced by
//! `x`; without bias `b = 0`. The forward pass iterates `z_{k+1} = f_θ(z_k, x)` from
//! `z_0 = 0` without recording anything ([`fixed_point`]); the gradient is the implicit one
//! of the conditions `c(θ, x, z) = f_θ(z, x) − z = 0` (the implicit function theorem:
//! `x̄ = −(∂c/∂x)ᵀ·(∂c/∂z)⁻ᵀ·z̄`, Bai, Kolter & Koltun, *Deep Equilibrium Models*, NeurIPS
//! 2019; Blondel et al. 2022), so its memory does not depend on the number of iterations.
//!
//! **Contractive initialisation.** `W` is drawn uniformly and rescaled to the Frobenius norm
//! `γ = contraction` (default 1/2). Since `‖W‖₂ ≤ ‖W‖_F = γ < 1` and `tanh` is 1-Lipschitz,
//! `z ↦ f_θ(z, x)` is a `γ`-contraction of every row in the 2-norm: the fixed point exists,
//! is unique, and the iteration converges linearly with rate `γ` (Banach). Training may
//! move `W` out of that set; the iteration then fails with [`Error::NotConverged`] (or
//! [`Error::NonFinite`]), never with a silent number.

use crate::error::{Error, Result};
use crate::network::greedy::SplitMix;
use crate::network::{Label, Network};

/// `n` values uniform in `[−bound, bound)`, deterministic in `(seed, stream)`: a SplitMix64
/// generator (Steele, Lea & Flood 2014; the reference constants of `splitmix64.c`) started at
/// `seed ^ (stream · 0xD1B54A32D192ED03)`, each 64-bit output `r` mapped
/// to `bound·(2·u − 1)` with `u = (r >> 11)·2⁻⁵³ ∈ [0, 1)`. The layers draw stream `k` for
/// their `k`-th parameter; engines that round these f64 values to f32 round them alike, so
/// every engine starts from the same parameters.
pub fn uniform(seed: u64, stream: u64, n: usize, bound: f64) -> Vec<f64> {
    let mut rng = SplitMix(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
    (0..n)
        .map(|_| bound * (2.0 * rng.uniform() - 1.0))
        .collect()
}

/// The configuration of an einsum layer (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EinsumConfig {
    /// the Einstein string (torch's grammar), e.g. `"bi,ij->bj"`
    pub equation: String,
    /// the shapes of the learnable operands, in the string's operand order with the input
    /// left out
    pub shapes: Vec<Vec<usize>>,
    /// which operand of the string is the layer's input (default 0)
    pub input: usize,
    /// the seed of the initialisation ([`uniform`]; default 0)
    pub seed: u64,
}

impl EinsumConfig {
    /// `equation` with learnable operands of these shapes, the input first, seed 0.
    pub fn new(equation: impl Into<String>, shapes: Vec<Vec<usize>>) -> Self {
        EinsumConfig {
            equation: equation.into(),
            shapes,
            input: 0,
            seed: 0,
        }
    }

    /// Makes operand `input` of the string the layer's input.
    pub fn with_input(mut self, input: usize) -> Self {
        self.input = input;
        self
    }

    /// Uses `seed` for the initialisation.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The checked layout.
    ///
    /// # Errors
    /// [`Error::Parse`] / [`Error::InvalidLabel`] for a string that does not parse;
    /// [`Error::InvalidArgument`] (`"input"`) for an input index beyond the operands;
    /// [`Error::CountMismatch`] (`"shapes"`) for not one shape per learnable operand;
    /// [`Error::InvalidArgument`] (`"shapes[k]"`) for a learnable operand written with `...`,
    /// given a zero dimension or too many elements to allocate; [`Error::RankMismatch`] (`"shapes[k]"`) for a shape whose
    /// rank is not its number of labels; [`Error::InvalidLabel`] (`"shapes[k]"`) for a label
    /// given two different dimensions.
    pub fn layout(&self) -> Result<EinsumLayout> {
        EinsumLayout::new(self)
    }
}

/// A checked [`EinsumConfig`]: the parsed string, the shapes, the fan-in of every learnable
/// operand.
#[derive(Clone, Debug, PartialEq)]
pub struct EinsumLayout {
    config: EinsumConfig,
    network: Network,
    /// `(label, dimension)` fixed by the learnable operands
    dims: Vec<(Label, usize)>,
    fan_in: Vec<usize>,
}

impl EinsumLayout {
    fn new(config: &EinsumConfig) -> Result<Self> {
        let network = Network::einsum(&config.equation)?;
        let n = network.num_operands();
        if config.input >= n {
            let why = format!("operand {} of a string with {n} operands", config.input);
            return Err(Error::invalid("input", why));
        }
        if config.shapes.len() + 1 != n {
            return Err(Error::CountMismatch {
                arg: "shapes".into(),
                expected: n - 1,
                actual: config.shapes.len(),
            });
        }
        let output = network.output_labels();
        let mut dims: Vec<(Label, usize)> = Vec::new();
        let mut fan_in = Vec::with_capacity(config.shapes.len());
        for (k, shape) in config.shapes.iter().enumerate() {
            let arg = format!("shapes[{k}]");
            let operand = if k < config.input { k } else { k + 1 };
            if network.operand_ellipsis(operand).is_some() {
                let why = "a learnable operand needs explicit labels, not `...`";
                return Err(Error::invalid(arg, why));
            }
            let labels = network.operand_labels(operand).unwrap_or_default();
            if labels.len() != shape.len() {
                return Err(Error::rank(arg, labels.len(), shape.len()));
            }
            if shape.contains(&0) {
                return Err(Error::invalid(
                    arg,
                    format!("{shape:?} has a zero dimension"),
                ));
            }
            elements(&arg, shape)?;
            let mut summed: Vec<Label> = Vec::new();
            for (&label, &d) in labels.iter().zip(shape) {
                match dims.iter().find(|(l, _)| *l == label) {
                    Some(&(_, known)) if known != d => {
                        return Err(Error::InvalidLabel {
                            arg,
                            label: label.to_string(),
                            reason: format!("dimension {d}, but {known} elsewhere"),
                        });
                    }
                    Some(_) => {}
                    None => dims.push((label, d)),
                }
                if !output.contains(&label) && !summed.contains(&label) {
                    summed.push(label);
                }
            }
            let fan = summed.iter().map(|l| dim_of(&dims, *l)).product::<usize>();
            fan_in.push(fan.max(1));
        }
        Ok(EinsumLayout {
            config: config.clone(),
            network,
            dims,
            fan_in,
        })
    }

    /// The configuration this layout checked.
    pub fn config(&self) -> &EinsumConfig {
        &self.config
    }

    /// The Einstein string.
    pub fn equation(&self) -> &str {
        &self.config.equation
    }

    /// Which operand of the string is the input.
    pub fn input(&self) -> usize {
        self.config.input
    }

    /// The number of operands of the string (the input included).
    pub fn num_operands(&self) -> usize {
        self.network.num_operands()
    }

    /// The shapes of the learnable operands.
    pub fn shapes(&self) -> &[Vec<usize>] {
        &self.config.shapes
    }

    /// The fan-in of every learnable operand (the product of its summed dimensions).
    pub fn fan_in(&self) -> &[usize] {
        &self.fan_in
    }

    /// The initialisation bound `1/√fan_in` of every learnable operand.
    pub fn bounds(&self) -> Vec<f64> {
        self.fan_in
            .iter()
            .map(|&f| 1.0 / (f as f64).sqrt())
            .collect()
    }

    /// The initial values of every learnable operand, row-major: weight `k` is
    /// `uniform(seed, k, len, 1/√fan_in(k))` ([`uniform`]).
    pub fn init(&self) -> Vec<Vec<f64>> {
        let bounds = self.bounds();
        self.config
            .shapes
            .iter()
            .zip(bounds)
            .enumerate()
            .map(|(k, (s, b))| uniform(self.config.seed, k as u64, s.iter().product(), b))
            .collect()
    }

    /// The rank of the output, when it does not depend on an ellipsis of the input.
    pub fn output_rank(&self) -> Option<usize> {
        (!self.network.has_ellipsis()).then(|| self.network.output_labels().len())
    }

    /// The operands in the string's order: the input at [`input`](Self::input), the
    /// learnable ones around it.
    pub fn operands<T>(&self, input: T, weights: impl IntoIterator<Item = T>) -> Vec<T> {
        let mut all: Vec<T> = weights.into_iter().collect();
        all.insert(self.config.input.min(all.len()), input);
        all
    }

    /// Checks an input shape against the string (its rank, when the input has no `...`) and
    /// the dimensions the learnable operands fix.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] or [`Error::ShapeMismatch`] naming `"input"`.
    pub fn check_input(&self, dims: &[usize]) -> Result<()> {
        let k = self.config.input;
        if self.network.operand_ellipsis(k).is_some() {
            return Ok(());
        }
        let labels = self.network.operand_labels(k).unwrap_or_default();
        if labels.len() != dims.len() {
            return Err(Error::rank("input", labels.len(), dims.len()));
        }
        let expected: Vec<usize> = labels
            .iter()
            .zip(dims)
            .map(|(l, &d)| self.dims.iter().find(|(x, _)| x == l).map_or(d, |p| p.1))
            .collect();
        if expected != dims {
            return Err(Error::shape("input", &expected, dims));
        }
        Ok(())
    }
}

fn dim_of(dims: &[(Label, usize)], label: Label) -> usize {
    dims.iter().find(|(l, _)| *l == label).map_or(1, |p| p.1)
}

/// The number of elements of a parameter of shape `dims`, when its f64 values fit in an
/// allocation (`isize::MAX` bytes).
///
/// # Errors
/// [`Error::InvalidArgument`] naming `arg` when they do not (the product overflows).
fn elements(arg: &str, dims: &[usize]) -> Result<usize> {
    const MAX: usize = isize::MAX as usize / std::mem::size_of::<f64>();
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d).filter(|&n| n <= MAX))
        .ok_or_else(|| Error::invalid(arg, format!("a parameter of shape {dims:?} is too large")))
}

/// The configuration of a deep-equilibrium layer (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct DeqConfig {
    /// `h`, the features of the fixed point `z`
    pub hidden: usize,
    /// `d`, the features of the input when it is mapped by a learnable `U` (`h×d`); `None`
    /// (the default): no input map, the input has `h` features and enters as it is
    pub input_features: Option<usize>,
    /// whether the map has a learnable bias `b` (default `true`)
    pub bias: bool,
    /// `γ`, the Frobenius norm of the initial `W` and so a bound of the initial map's
    /// contraction factor; in `(0, 1)`, default 0.5
    pub contraction: f64,
    /// the iteration stops when `max |z_{k+1} − z_k| ≤ tolerance`; default `1e-5`
    pub tolerance: f64,
    /// iterations allowed before [`Error::NotConverged`]; default 200
    pub max_iterations: usize,
    /// the seed of the initialisation ([`uniform`]; default 0)
    pub seed: u64,
}

/// The initial parameters of a deep-equilibrium layer, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct DeqParameters {
    /// `W`, `h×h`: `uniform(seed, 0, h², 1)` rescaled to Frobenius norm `γ`
    pub w: Vec<f64>,
    /// `U`, `h×d`: `uniform(seed, 1, h·d, 1/√d)`, with an input map
    pub u: Option<Vec<f64>>,
    /// `b`, `h`: `uniform(seed, 2, h, 1/√d)` (`d = h` without an input map), with a bias
    pub b: Option<Vec<f64>>,
}

impl DeqConfig {
    /// A layer of `hidden` features with the defaults of the fields.
    pub fn new(hidden: usize) -> Self {
        DeqConfig {
            hidden,
            input_features: None,
            bias: true,
            contraction: 0.5,
            tolerance: 1e-5,
            max_iterations: 200,
            seed: 0,
        }
    }

    /// Maps inputs of `d` features by a learnable `U`.
    pub fn with_input_features(mut self, d: usize) -> Self {
        self.input_features = Some(d);
        self
    }

    /// With or without the bias `b`.
    pub fn with_bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }

    /// The Frobenius norm `γ` of the initial `W`.
    pub fn with_contraction(mut self, contraction: f64) -> Self {
        self.contraction = contraction;
        self
    }

    /// The iteration's stopping tolerance (`max |z_{k+1} − z_k|`).
    pub fn with_tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The iteration limit.
    pub fn with_max_iterations(mut self, max_iterations: usize) -> Self {
        self.max_iterations = max_iterations;
        self
    }

    /// Uses `seed` for the initialisation.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// `d`, the features of the input.
    pub fn features(&self) -> usize {
        self.input_features.unwrap_or(self.hidden)
    }

    /// Checks the fields.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field: `hidden` or `input_features` zero,
    /// `contraction` outside `(0, 1)`, `tolerance` not positive and finite,
    /// `max_iterations` zero; `hidden` (`W`, `h×h`) or `input_features` (`U`, `h×d`) when a
    /// parameter has too many elements to allocate.
    pub fn validate(&self) -> Result<()> {
        if self.hidden == 0 {
            return Err(Error::invalid("hidden", "at least one feature"));
        }
        if self.input_features == Some(0) {
            return Err(Error::invalid("input_features", "at least one feature"));
        }
        if !(self.contraction > 0.0 && self.contraction < 1.0) {
            let why = format!("{} is not in (0, 1)", self.contraction);
            return Err(Error::invalid("contraction", why));
        }
        if !(self.tolerance > 0.0 && self.tolerance.is_finite()) {
            let why = format!("{} is not positive and finite", self.tolerance);
            return Err(Error::invalid("tolerance", why));
        }
        if self.max_iterations == 0 {
            return Err(Error::invalid("max_iterations", "at least one iteration"));
        }
        elements("hidden", &[self.hidden, self.hidden])?;
        elements("input_features", &[self.hidden, self.features()])?;
        Ok(())
    }

    /// Checks the shape `[B, d]` of an input batch (`B ≥ 1` samples of `d` =
    /// [`features`](Self::features)) and returns `B`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] (`"x"`) for a rank other than 2; [`Error::ShapeMismatch`]
    /// (`"x"`) for `d` other than the layer's features or an empty batch.
    pub fn check_input(&self, dims: &[usize]) -> Result<usize> {
        let want = self.features();
        match *dims {
            [batch, d] if batch > 0 && d == want => Ok(batch),
            [batch, d] => Err(Error::shape("x", &[batch.max(1), want], &[batch, d])),
            _ => Err(Error::rank("x", 2, dims.len())),
        }
    }

    /// The initial parameters ([`DeqParameters`]), after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Those of [`validate`](Self::validate).
    pub fn init(&self) -> Result<DeqParameters> {
        self.validate()?;
        let (h, d) = (self.hidden, self.features());
        let mut w = uniform(self.seed, 0, h * h, 1.0);
        let norm = w.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 0.0 {
            w.iter_mut().for_each(|v| *v *= self.contraction / norm);
        }
        let bound = 1.0 / (d as f64).sqrt();
        let u = self
            .input_features
            .map(|d| uniform(self.seed, 1, h * d, bound));
        let b = self.bias.then(|| uniform(self.seed, 2, h, bound));
        Ok(DeqParameters { w, u, b })
    }
}

/// The factor `max/‖W‖_F` that rescales `W` (its values, in any order) to Frobenius norm
/// `max`, when its norm is larger; `None` when `‖W‖_F ≤ max` (nothing to do). The adapters'
/// `clamp_contraction` applies it after an optimizer step, the projection of a projected
/// gradient method onto `{‖W‖_F ≤ max}`, where the map stays a `max`-contraction (see the
/// [module docs](self)).
///
/// # Errors
/// [`Error::InvalidArgument`] (`"max"`) for `max` outside `(0, 1)`; [`Error::NonFinite`]
/// (`"w"`) for a norm that is not finite (a parameter that diverged: no factor restores it).
pub fn contraction_scale(w: impl IntoIterator<Item = f64>, max: f64) -> Result<Option<f64>> {
    if !(max > 0.0 && max < 1.0) {
        return Err(Error::invalid("max", format!("{max} is not in (0, 1)")));
    }
    let norm = w.into_iter().map(|v| v * v).sum::<f64>().sqrt();
    if !norm.is_finite() {
        return Err(Error::NonFinite {
            arg: "w".into(),
            reason: format!("its Frobenius norm is {norm}"),
        });
    }
    Ok((norm > max).then(|| max / norm))
}

/// Iterates `z ← step(z)` from `z0` until the change `step` reports (`max |z_{k+1} − z_k|`)
/// is at most `config.tolerance`; returns the last iterate and the number of steps. Nothing
/// here is differentiated: the adapters call it on tensors without autodiff.
///
/// # Errors
/// [`Error::NonFinite`] (`"fixed point z = f(z, x)"`) as soon as the change is not finite;
/// [`Error::NotConverged`] (same name) after `config.max_iterations` steps, with the last
/// change as the residual; `step`'s own errors.
pub fn fixed_point<T>(
    z0: T,
    config: &DeqConfig,
    mut step: impl FnMut(&T) -> Result<(T, f64)>,
) -> Result<(T, usize)> {
    const ARG: &str = "fixed point z = f(z, x)";
    let mut z = z0;
    let mut change = f64::INFINITY;
    for k in 1..=config.max_iterations {
        let (next, c) = step(&z)?;
        (z, change) = (next, c);
        if !change.is_finite() {
            let reason = format!("the change between iterates is {change} at iteration {k}");
            return Err(Error::NonFinite {
                arg: ARG.into(),
                reason,
            });
        }
        if change <= config.tolerance {
            return Ok((z, k));
        }
    }
    Err(Error::NotConverged {
        arg: ARG.into(),
        iterations: config.max_iterations,
        residual: change,
        tolerance: config.tolerance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_deterministic_bounded_and_centred() {
        let v = uniform(7, 3, 20_000, 0.25);
        assert_eq!(v, uniform(7, 3, 20_000, 0.25));
        assert_ne!(v[..8], uniform(7, 4, 8, 0.25)[..]);
        assert!(v.iter().all(|x| (-0.25..0.25).contains(x)));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        // the variance of U(-a, a) is a²/3; the mean of 20 000 draws is within 4σ of 0
        let var = v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64;
        assert!(
            mean.abs() < 4.0 * (0.0625f64 / 3.0 / 20_000.0).sqrt(),
            "{mean}"
        );
        assert!((var - 0.0625 / 3.0).abs() < 0.05 * 0.0625 / 3.0, "{var}");
    }

    #[test]
    fn fan_in_is_the_product_of_summed_dimensions() {
        let l = EinsumConfig::new("bi,ij->bj", vec![vec![3, 4]])
            .layout()
            .unwrap();
        assert_eq!(l.fan_in(), [3]);
        let l = EinsumConfig::new("ijk,bjk,kl->bil", vec![vec![2, 3, 5], vec![5, 7]])
            .with_input(1)
            .layout()
            .unwrap();
        // the first weight sums j and k (3·5), the second k (5)
        assert_eq!(l.fan_in(), [15, 5]);
        assert_eq!(l.output_rank(), Some(3));
        assert!(l.check_input(&[9, 3, 5]).is_ok());
        let e = l.check_input(&[9, 4, 5]).unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "input"),
            "{e}"
        );
        let e = l.check_input(&[9, 3]).unwrap_err();
        assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
        assert_eq!(l.operands('x', ['a', 'b']), ['a', 'x', 'b']);
        // a Hadamard scale sums nothing
        let l = EinsumConfig::new("bi,i->bi", vec![vec![4]])
            .layout()
            .unwrap();
        assert_eq!(l.fan_in(), [1]);
    }

    #[test]
    fn bad_einsum_configs_are_typed_errors() {
        let err = |c: EinsumConfig| c.layout().unwrap_err();
        assert!(matches!(
            err(EinsumConfig::new("bi,ij->bk", vec![vec![3, 4]])),
            Error::InvalidLabel { .. }
        ));
        assert!(matches!(
            err(EinsumConfig::new("bi,ij-bj", vec![vec![3, 4]])),
            Error::Parse { .. }
        ));
        let e = err(EinsumConfig::new("bi,ij->bj", vec![]));
        assert!(
            matches!(
                e,
                Error::CountMismatch {
                    expected: 1,
                    actual: 0,
                    ..
                }
            ),
            "{e}"
        );
        let e = err(EinsumConfig::new("bi,ij->bj", vec![vec![3]]));
        assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
        let e = err(EinsumConfig::new(
            "bi,ij,jk->bk",
            vec![vec![3, 4], vec![5, 2]],
        ));
        assert!(
            matches!(e, Error::InvalidLabel { ref arg, .. } if arg == "shapes[1]"),
            "{e}"
        );
        let e = err(EinsumConfig::new("bi,ij->bj", vec![vec![3, 4]]).with_input(2));
        assert!(
            matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "input"),
            "{e}"
        );
        let e = err(EinsumConfig::new("bi,...j->bj", vec![vec![3, 4]]));
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        let e = err(EinsumConfig::new("bi,ij->bj", vec![vec![0, 4]]));
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }

    #[test]
    fn deq_init_is_contractive_and_bad_configs_are_typed_errors() {
        let c = DeqConfig::new(6)
            .with_input_features(3)
            .with_contraction(0.4);
        let p = c.init().unwrap();
        let norm = p.w.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!((norm - 0.4).abs() < 1e-12, "{norm}");
        assert_eq!(p.u.as_ref().map(Vec::len), Some(18));
        assert!(p.b.unwrap().iter().all(|v| v.abs() < 1.0 / 3f64.sqrt()));
        for bad in [
            DeqConfig::new(0),
            DeqConfig::new(2).with_contraction(1.0),
            DeqConfig::new(2)
                .with_tolerance(0.0)
                .with_max_iterations(10),
            DeqConfig::new(2)
                .with_tolerance(1e-6)
                .with_max_iterations(0),
            DeqConfig::new(2).with_input_features(0),
        ] {
            assert!(
                matches!(bad.init(), Err(Error::InvalidArgument { .. })),
                "{bad:?}"
            );
        }
        // z ← z/2 + 1 converges to 2; with two iterations allowed it does not
        let halve = |z: &f64| Ok((z / 2.0 + 1.0, (z / 2.0 + 1.0 - z).abs()));
        let (z, k) = fixed_point(
            0.0,
            &DeqConfig::new(1)
                .with_tolerance(1e-9)
                .with_max_iterations(100),
            halve,
        )
        .unwrap();
        assert!((z - 2.0).abs() < 1e-8 && k > 20, "{z} after {k}");
        let e = fixed_point(
            0.0,
            &DeqConfig::new(1)
                .with_tolerance(1e-9)
                .with_max_iterations(2),
            halve,
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::NotConverged { iterations: 2, .. }),
            "{e}"
        );
        let e = fixed_point(0.0, &DeqConfig::new(1), |_| Ok((f64::NAN, f64::NAN))).unwrap_err();
        assert!(matches!(e, Error::NonFinite { .. }), "{e}");
    }

    #[test]
    fn sizes_beyond_an_allocation_are_typed_errors() {
        let huge = usize::MAX / 2;
        let e = DeqConfig::new(huge).init().unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "hidden"),
            "{e}"
        );
        let e = DeqConfig::new(4)
            .with_input_features(huge)
            .init()
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "input_features"),
            "{e}"
        );
        // 2^62 f64 values overflow no usize but exceed isize::MAX bytes
        let e = EinsumConfig::new("bi,ij->bj", vec![vec![1 << 31, 1 << 31]])
            .layout()
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "shapes[0]"),
            "{e}"
        );
        let e = EinsumConfig::new("bi,ijk->bk", vec![vec![huge, huge, 3]])
            .layout()
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }

    #[test]
    fn input_batches_and_contraction_scales_are_checked() {
        let c = DeqConfig::new(4).with_input_features(3);
        assert_eq!(c.check_input(&[5, 3]).unwrap(), 5);
        for (dims, shape) in [(&[5usize, 4][..], true), (&[0, 3], true), (&[3], false)] {
            let e = c.check_input(dims).unwrap_err();
            let ok = match e {
                Error::ShapeMismatch { ref arg, .. } => shape && arg == "x",
                Error::RankMismatch { ref arg, .. } => !shape && arg == "x",
                _ => false,
            };
            assert!(ok, "{dims:?}: {e}");
        }
        assert_eq!(DeqConfig::new(3).check_input(&[1, 3]).unwrap(), 1);
        // ‖(3, 4)‖_F = 5 (exact): rescaled to 0.5 by 0.1; ‖(0.3, 0.4)‖_F ≤ 0.9: kept
        assert_eq!(contraction_scale([3.0, 4.0], 0.5).unwrap(), Some(0.1));
        assert_eq!(contraction_scale([0.3, 0.4], 0.9).unwrap(), None);
        for max in [0.0, 1.0, f64::NAN, -0.5] {
            let e = contraction_scale([0.3], max).unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "max"),
                "{e}"
            );
        }
        let e = contraction_scale([0.3, f64::INFINITY], 0.5).unwrap_err();
        assert!(
            matches!(e, Error::NonFinite { ref arg, .. } if arg == "w"),
            "{e}"
        );
    }
}
