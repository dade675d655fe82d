//! The fuzz target of the engines' layers, `adrules::candle::nn` and `adrules::burn::nn`:
//!
//! - **einsum layer**: the einsum target's calls ([`einsum_case`]) with a random operand as
//!   the layer's input and the others learnable, the input of its shape or of another one.
//!   The layer must refuse exactly the configurations [`adrules::layers::EinsumConfig::layout`]
//!   refuses and the inputs its `check_input` refuses (the same kind of typed error; burn also
//!   refuses more than 8 operands and learnable operands of rank 0 or above 6 with
//!   [`Error::Unsupported`]), refuse the calls the core's planner refuses, and otherwise give
//!   the core's einsum of the seeded initial weights and finite gradients of every weight and
//!   the input from the engine's backward pass of `Σ y`;
//! - **deep-equilibrium layer**: random configurations (valid ones, and a zero size, a
//!   contraction outside `(0, 1)`, a tolerance that is not positive and finite, no iteration)
//!   and inputs (`[B, d]`, an empty batch, the wrong features, the wrong rank, a NaN): the
//!   same refusals as [`adrules::layers::DeqConfig::validate`] and `check_input`, a typed
//!   error for a NaN input, and otherwise a fixed point (`max |f(z, x) − z| ≤ 2·tolerance`)
//!   whose implicit backward pass gives finite gradients of `W`, `U`, `b` and `x`.
//!
//! Each input runs one layer on one engine (f32 or f64). No input may panic.

use adrules::layers::{DeqConfig, EinsumConfig};
use adrules::network::{Network, NetworkPlan, Order};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, DType, Error, HostData, HostTensor};
use adrules_testing::Rng;
use adrules_testing::fuzz::einsum_case;

use crate::Finding;
use crate::engines::{close, f64s, same_kind};

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// The einsum layer's input of `seed`: the call, the input's index, the weights' shapes and
/// the input's shape.
struct EinsumInput {
    engine: usize,
    dtype: DType,
    config: EinsumConfig,
    input_dims: Vec<usize>,
    x: HostTensor,
}

/// The deep-equilibrium layer's input of `seed`.
struct DeqInput {
    engine: usize,
    dtype: DType,
    config: DeqConfig,
    x: HostTensor,
}

fn draw(seed: u64) -> (Rng, usize, usize, DType) {
    let mut rng = Rng::seed(seed ^ 0x1a7e);
    let engine = rng.below(2);
    let layer = rng.below(2);
    let dtype = [DType::F32, DType::F64][rng.below(2)];
    (rng, engine, layer, dtype)
}

impl EinsumInput {
    fn new(seed: u64, mut rng: Rng, engine: usize, dtype: DType) -> Self {
        let (s, mut shapes) = einsum_case(seed);
        let k = rng
            .below(shapes.len().max(1))
            .min(shapes.len().saturating_sub(1));
        let mut input_dims = shapes.get(k).cloned().unwrap_or_default();
        if !shapes.is_empty() {
            shapes.remove(k);
        }
        match rng.below(8) {
            0 if !input_dims.is_empty() => {
                let i = rng.below(input_dims.len());
                input_dims[i] += 1;
            }
            1 => input_dims.push(2),
            _ => {}
        }
        let x = rng.tensor(&input_dims, dtype);
        let config = EinsumConfig::new(s, shapes).with_input(k).with_seed(seed);
        EinsumInput {
            engine,
            dtype,
            config,
            input_dims,
            x,
        }
    }

    fn text(&self) -> String {
        let c = &self.config;
        format!(
            "{} einsum layer: {:?} weights {:?} input {} of {:?} {}",
            ["candle", "burn"][self.engine],
            c.equation,
            c.shapes,
            c.input,
            self.input_dims,
            self.dtype
        )
    }
}

impl DeqInput {
    fn new(seed: u64, mut rng: Rng, engine: usize, dtype: DType) -> Self {
        let hidden = rng.below(5);
        let input_features = match rng.below(3) {
            0 => Some(rng.below(4)),
            _ => None,
        };
        let contraction = match rng.below(10) {
            0 => [0.0, 1.0, f64::NAN, -0.5, 1.5][rng.below(5)],
            _ => 0.05 + 0.85 * rng.below(1000) as f64 / 1000.0,
        };
        let valid_tol = if dtype == DType::F64 { 1e-11 } else { 1e-5 };
        let tolerance = match rng.below(10) {
            0 => [0.0, f64::NAN, -1e-5, f64::INFINITY][rng.below(4)],
            _ => valid_tol,
        };
        let max_iterations = if rng.below(16) == 0 { 0 } else { 1000 };
        let config = DeqConfig::new(hidden)
            .with_bias(rng.below(2) == 0)
            .with_contraction(contraction)
            .with_tolerance(tolerance)
            .with_max_iterations(max_iterations)
            .with_seed(seed);
        let config = match input_features {
            Some(d) => config.with_input_features(d),
            None => config,
        };
        let d = config.features();
        let batch = 1 + rng.below(3);
        let dims = match rng.below(10) {
            0 => vec![0, d],
            1 => vec![batch, d + 1],
            2 => vec![batch],
            3 => vec![batch, d, 1],
            _ => vec![batch, d],
        };
        let mut x = rng.tensor(&dims, dtype);
        if rng.below(12) == 0 && !x.is_empty() {
            let mut v = f64s(&x);
            v[0] = f64::NAN;
            x = HostTensor::new(&dims, HostData::F64(v))
                .expect("its shape")
                .to_dtype_projected(dtype);
        }
        DeqInput {
            engine,
            dtype,
            config,
            x,
        }
    }

    fn text(&self) -> String {
        format!(
            "{} deq layer: {:?} x {:?} {}",
            ["candle", "burn"][self.engine],
            self.config,
            self.x.dims(),
            self.dtype
        )
    }
}

/// The size of the input of `seed`: the elements of the input and the parameters.
pub(crate) fn size(seed: u64) -> usize {
    let (rng, engine, layer, dtype) = draw(seed);
    if layer == 0 {
        let e = EinsumInput::new(seed, rng, engine, dtype);
        e.x.len()
            + e.config
                .shapes
                .iter()
                .map(|s| s.iter().product::<usize>())
                .sum::<usize>()
    } else {
        let d = DeqInput::new(seed, rng, engine, dtype);
        d.x.len() + d.config.hidden * d.config.hidden
    }
}

/// The layer of `seed` on its engine.
pub(crate) fn layers(seed: u64) -> Result<(), Finding> {
    let (rng, engine, layer, dtype) = draw(seed);
    if layer == 0 {
        einsum_layer(&EinsumInput::new(seed, rng, engine, dtype))
    } else {
        deq_layer(&DeqInput::new(seed, rng, engine, dtype))
    }
}

/// What an engine's layer did: the output, and the gradients of the parameters and the
/// input (`None`: no gradient) from its backward pass of `Σ y`.
struct Outcome {
    value: Vec<f64>,
    grads: Result<Vec<Option<Vec<f64>>>, Error>,
}

/// Which stage refused.
enum Refusal {
    /// building the layer
    Build(Error),
    /// its forward pass
    Forward(Error),
}

fn all_finite(grads: &[Option<Vec<f64>>]) -> bool {
    grads.iter().flatten().flatten().all(|v| v.is_finite())
}

fn einsum_layer(input: &EinsumInput) -> Result<(), Finding> {
    let text = input.text();
    let layout = input.config.layout();
    let got = if input.engine == 0 {
        candle_einsum(input)
    } else {
        burn_einsum(input)
    };
    let layout = match (layout, got) {
        (Err(e), Err(Refusal::Build(g))) if same_kind(&g, &e) => return Ok(()),
        (Err(e), got) => {
            let got = got.map(|o| o.value.len()).map_err(|r| match r {
                Refusal::Build(e) | Refusal::Forward(e) => e,
            });
            return Err(wrong(format!(
                "{text}: {got:?}, the core's layout refuses: {e}"
            )));
        }
        (Ok(_), Err(Refusal::Build(Error::Unsupported { .. }))) if input.engine == 1 => {
            return Ok(());
        }
        (Ok(l), Err(Refusal::Build(g))) => {
            return Err(wrong(format!(
                "{text}: layer refused: {g}, the core's layout accepts {:?}",
                l.shapes()
            )));
        }
        (Ok(l), got) => (l, got),
    };
    let (layout, got) = layout;
    if let Err(e) = layout.check_input(&input.input_dims) {
        return match got {
            Err(Refusal::Forward(g)) if same_kind(&g, &e) => Ok(()),
            Err(Refusal::Forward(g)) => Err(wrong(format!(
                "{text}: refused with {g}, check_input with {e}"
            ))),
            _ => Err(wrong(format!("{text}: accepted, check_input refuses: {e}"))),
        };
    }
    // the core's value of the call with the seeded initial weights
    let weights: Vec<HostTensor> = layout
        .init()
        .into_iter()
        .zip(layout.shapes())
        .map(|(v, s)| {
            HostTensor::new(s, HostData::F64(v)).map(|h| h.to_dtype_projected(input.dtype))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| wrong(format!("{text}: {e}")))?;
    let hosts = layout.operands(input.x.clone(), weights);
    let shapes: Vec<Vec<usize>> = hosts.iter().map(|h| h.dims().to_vec()).collect();
    let planned = Network::einsum(layout.equation())
        .and_then(|n| NetworkPlan::new(&n, &shapes, &Order::Default));
    let expected = planned.and_then(|_| {
        let xs: Vec<Tensor> = hosts
            .iter()
            .map(|h| Strided.from_host(h.clone()))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&Tensor> = xs.iter().collect();
        adrules::network::einsum(&Strided, layout.equation(), &refs).and_then(|t| t.to_host())
    });
    let (got, expected) = match (got, expected) {
        (Err(Refusal::Forward(_)), Err(_)) => return Ok(()),
        (Ok(_), Err(e)) => return Err(wrong(format!("{text}: accepted, the core refuses: {e}"))),
        (Err(Refusal::Forward(g)) | Err(Refusal::Build(g)), _) => {
            return Err(wrong(format!("{text}: refused: {g}")));
        }
        (Ok(g), Ok(e)) => (g, e),
    };
    close(&got.value, &f64s(&expected), input.dtype)
        .map_err(|w| wrong(format!("{text}: value: {w}")))?;
    match got.grads {
        Ok(g) if all_finite(&g) => Ok(()),
        Ok(_) => Err(wrong(format!("{text}: a non-finite gradient"))),
        Err(e) => Err(wrong(format!("{text}: backward: {e}"))),
    }
}

fn candle_einsum(input: &EinsumInput) -> Result<Outcome, Refusal> {
    use adrules::candle::candle_core::{Device, Tensor as CTensor, Var};
    use adrules::candle::nn::Einsum;
    use adrules::candle::nn::candle_nn::{Module, VarBuilder, VarMap};
    use adrules::candle::{candle_dtype, from_candle, try_backward};
    let build = |e: adrules::candle::candle_core::Error| Refusal::Build(from_candle(e));
    let forward = |e: adrules::candle::candle_core::Error| Refusal::Forward(from_candle(e));
    let cdt = candle_dtype(input.dtype).map_err(Refusal::Build)?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, cdt, &Device::Cpu);
    let layer = Einsum::new(&input.config, vb).map_err(build)?;
    let x = CTensor::from_vec(f64s(&input.x), input.x.dims(), &Device::Cpu)
        .and_then(|t| t.to_dtype(cdt))
        .and_then(|t| Var::from_tensor(&t))
        .map_err(build)?;
    let y = layer.forward(x.as_tensor()).map_err(forward)?;
    let values = |t: &CTensor| {
        t.to_dtype(adrules::candle::candle_core::DType::F64)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f64>())
    };
    let value = values(&y).map_err(forward)?;
    let grads = y
        .sum_all()
        .map_err(from_candle)
        .and_then(|l| try_backward(&l))
        .and_then(|g| {
            layer
                .weights()
                .iter()
                .chain([x.as_tensor()])
                .map(|t| g.get(t).map(values).transpose().map_err(from_candle))
                .collect()
        });
    Ok(Outcome { value, grads })
}

fn burn_einsum(input: &EinsumInput) -> Result<Outcome, Refusal> {
    use adrules::burn::burn_tensor::{Gradients, Tensor as BTensor, TensorData};
    use adrules::burn::nn::{Einsum, EinsumConfig as BurnConfig, Weight};

    use crate::adapters::burn_target::{device, dtype, values};
    let c = &input.config;
    let config = BurnConfig {
        equation: c.equation.clone(),
        shapes: c.shapes.clone(),
        input: c.input,
        seed: c.seed,
        dtype: Some(dtype(input.dtype)),
    };
    let layer = config.init(&device()).map_err(Refusal::Build)?;
    // the output rank the core plans (rank 0 as burn's [1]); inputs of rank 0 or above 4
    // and outputs above 4 are left out (burn's ranks are compile-time)
    let out_rank = input
        .config
        .layout()
        .ok()
        .and_then(|l| {
            let shapes: Vec<Vec<usize>> = l
                .operands(input.input_dims.clone(), l.shapes().to_vec())
                .into_iter()
                .collect();
            let net = Network::einsum(l.equation()).ok()?;
            NetworkPlan::new(&net, &shapes, &Order::Default)
                .ok()
                .map(|p| p.output_dims().len())
        })
        .unwrap_or(1)
        .max(1);
    fn weight_grad(w: &Weight, g: &Gradients) -> adrules::Result<Option<Vec<f64>>> {
        Ok(match w.dims().len() {
            1 => w.grad::<1>(g)?.map(|t| values(&t)),
            2 => w.grad::<2>(g)?.map(|t| values(&t)),
            3 => w.grad::<3>(g)?.map(|t| values(&t)),
            4 => w.grad::<4>(g)?.map(|t| values(&t)),
            5 => w.grad::<5>(g)?.map(|t| values(&t)),
            _ => w.grad::<6>(g)?.map(|t| values(&t)),
        })
    }
    fn run<const DI: usize, const DO: usize>(
        layer: &Einsum,
        x: &HostTensor,
        dt: adrules::burn::burn_tensor::DType,
    ) -> Result<Outcome, Refusal> {
        let dims: [usize; DI] = x.dims().try_into().expect("the rank DI");
        let x = BTensor::<DI>::from_data(TensorData::new(f64s(x), dims), (&device(), dt))
            .require_grad();
        let y: BTensor<DO> = layer.forward(x.clone()).map_err(Refusal::Forward)?;
        let value = values(&y);
        let grads = adrules::burn::try_backward(&y.sum()).and_then(|g| {
            let mut out: Vec<Option<Vec<f64>>> = layer
                .weights
                .iter()
                .map(|w| weight_grad(w, &g))
                .collect::<adrules::Result<_>>()?;
            out.push(x.grad(&g).map(|t| values(&t)));
            Ok(out)
        });
        Ok(Outcome { value, grads })
    }
    let dt = dtype(input.dtype);
    macro_rules! dispatch {
        ($($di:literal),*; $($do:literal),*) => {
            dispatch!(@outer [$($di),*] [$($do),*])
        };
        (@outer [$($di:literal),*] $dos:tt) => {
            match input.input_dims.len() {
                $($di => dispatch!(@inner $di $dos),)*
                _ => return Err(Refusal::Build(Error::Unsupported {
                    backend: "fuzz".into(),
                    what: "an input rank burn's layer target leaves out".into(),
                })),
            }
        };
        (@inner $di:literal [$($do:literal),*]) => {
            match out_rank {
                $($do => run::<$di, $do>(&layer, &input.x, dt),)*
                _ => return Err(Refusal::Build(Error::Unsupported {
                    backend: "fuzz".into(),
                    what: "an output rank burn's layer target leaves out".into(),
                })),
            }
        };
    }
    dispatch!(1, 2, 3, 4; 1, 2, 3, 4)
}

fn deq_layer(input: &DeqInput) -> Result<(), Finding> {
    let text = input.text();
    if input.engine == 1 && input.x.dims().len() != 2 {
        // burn's layer takes a `Tensor<2>`: another rank does not compile
        return Ok(());
    }
    let got = if input.engine == 0 {
        candle_deq(input)
    } else {
        burn_deq(input)
    };
    if let Err(e) = input.config.validate() {
        return match got {
            Err(Refusal::Build(g)) if same_kind(&g, &e) => Ok(()),
            _ => Err(wrong(format!(
                "{text}: not refused as validate() refuses: {e}"
            ))),
        };
    }
    if let Err(e) = input.config.check_input(input.x.dims()) {
        return match got {
            Err(Refusal::Forward(g)) if same_kind(&g, &e) => Ok(()),
            Err(Refusal::Forward(g)) => Err(wrong(format!(
                "{text}: refused with {g}, check_input with {e}"
            ))),
            _ => Err(wrong(format!("{text}: accepted, check_input refuses: {e}"))),
        };
    }
    let finite = f64s(&input.x).iter().all(|v| v.is_finite());
    let got = match (finite, got) {
        (false, Err(Refusal::Forward(_))) => return Ok(()),
        (false, Ok(_)) => return Err(wrong(format!("{text}: a NaN input accepted"))),
        (_, Err(Refusal::Build(e) | Refusal::Forward(e))) => {
            return Err(wrong(format!("{text}: refused: {e}")));
        }
        (true, Ok(o)) => o,
    };
    if !got.value.iter().all(|v| v.is_finite()) {
        return Err(wrong(format!("{text}: a non-finite fixed point")));
    }
    match got.grads {
        Ok(g) if all_finite(&g) && g.iter().all(Option::is_some) => Ok(()),
        Ok(g) => Err(wrong(format!("{text}: gradients {g:?}"))),
        Err(e) => Err(wrong(format!("{text}: backward: {e}"))),
    }
}

/// `max |f(z, x) − z|` against `2·tolerance` plus rounding: `z` is a fixed point.
fn fixed_point(text: &str, residual: f64, config: &DeqConfig, dtype: DType) -> Result<(), Refusal> {
    let eps = if dtype == DType::F64 { 1e-14 } else { 1e-5 };
    if residual <= 2.0 * config.tolerance + eps {
        return Ok(());
    }
    let why = format!("{text}: max |f(z, x) − z| = {residual:e}");
    Err(Refusal::Forward(Error::invalid(
        "fuzz: not a fixed point",
        why,
    )))
}

fn candle_deq(input: &DeqInput) -> Result<Outcome, Refusal> {
    use adrules::candle::candle_core::{DType as CDType, Device, Tensor as CTensor, Var};
    use adrules::candle::nn::Deq;
    use adrules::candle::nn::candle_nn::{Module, VarBuilder, VarMap};
    use adrules::candle::{candle_dtype, from_candle, try_backward};
    let build = |e: adrules::candle::candle_core::Error| Refusal::Build(from_candle(e));
    let forward = |e: adrules::candle::candle_core::Error| Refusal::Forward(from_candle(e));
    let cdt = candle_dtype(input.dtype).map_err(Refusal::Build)?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, cdt, &Device::Cpu);
    let deq = Deq::new(&input.config, vb).map_err(build)?;
    let x = CTensor::from_vec(f64s(&input.x), input.x.dims(), &Device::Cpu)
        .and_then(|t| t.to_dtype(cdt))
        .and_then(|t| Var::from_tensor(&t))
        .map_err(build)?;
    let z = deq.forward(x.as_tensor()).map_err(forward)?;
    let values = |t: &CTensor| {
        t.to_dtype(CDType::F64)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f64>())
    };
    let value = values(&z).map_err(forward)?;
    let residual = deq
        .step(&z.detach(), &x.as_tensor().detach())
        .and_then(|f| values(&(f - z.detach())?))
        .map_err(forward)?
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    fixed_point("candle", residual, &input.config, input.dtype)?;
    let params: Vec<&CTensor> = [Some(deq.w()), deq.u(), deq.b(), Some(x.as_tensor())]
        .into_iter()
        .flatten()
        .collect();
    let grads = z
        .sum_all()
        .map_err(from_candle)
        .and_then(|l| try_backward(&l))
        .and_then(|g| {
            params
                .iter()
                .map(|t| g.get(t).map(values).transpose().map_err(from_candle))
                .collect()
        });
    Ok(Outcome { value, grads })
}

fn burn_deq(input: &DeqInput) -> Result<Outcome, Refusal> {
    use adrules::burn::burn_tensor::{Tensor as BTensor, TensorData};
    use adrules::burn::nn::DeqConfig as BurnConfig;

    use crate::adapters::burn_target::{device, dtype, values};
    let c = &input.config;
    let config = BurnConfig {
        hidden: c.hidden,
        input_features: c.input_features,
        bias: c.bias,
        contraction: c.contraction,
        tolerance: c.tolerance,
        max_iterations: c.max_iterations,
        seed: c.seed,
        dtype: Some(dtype(input.dtype)),
    };
    let deq = config.init(&device()).map_err(Refusal::Build)?;
    let dims: [usize; 2] = input.x.dims().try_into().expect("rank 2");
    let x = BTensor::<2>::from_data(
        TensorData::new(f64s(&input.x), dims),
        (&device(), dtype(input.dtype)),
    )
    .require_grad();
    let z = deq.forward(x.clone()).map_err(Refusal::Forward)?;
    let value = values(&z);
    let f = deq.step(z.clone().detach(), x.clone().detach());
    let residual = values(&(f - z.clone().detach()))
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()));
    fixed_point("burn", residual, &input.config, input.dtype)?;
    let grads = adrules::burn::try_backward(&z.sum()).map(|g| {
        let mut out = vec![deq.w.grad(&g).map(|t| values(&t))];
        if let Some(u) = &deq.u {
            out.push(u.grad(&g).map(|t| values(&t)));
        }
        if let Some(b) = &deq.b {
            out.push(b.grad(&g).map(|t| values(&t)));
        }
        out.push(x.grad(&g).map(|t| values(&t)));
        out
    });
    Ok(Outcome { value, grads })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Valid calls reach the value and gradient checks on both engines, for both layers.
    #[test]
    fn valid_inputs_reach_the_gradient_checks() {
        // [engine][layer]: inputs whose forward and backward passes both succeeded
        let mut reached = [[0; 2]; 2];
        for seed in 0..400 {
            let (rng, engine, layer, dtype) = draw(seed);
            let got = if layer == 0 {
                let input = EinsumInput::new(seed, rng, engine, dtype);
                if engine == 0 {
                    candle_einsum(&input)
                } else {
                    burn_einsum(&input)
                }
            } else {
                let input = DeqInput::new(seed, rng, engine, dtype);
                if engine == 1 && input.x.dims().len() != 2 {
                    continue;
                }
                if engine == 0 {
                    candle_deq(&input)
                } else {
                    burn_deq(&input)
                }
            };
            if matches!(got, Ok(Outcome { grads: Ok(_), .. })) {
                reached[engine][layer] += 1;
            }
        }
        assert!(reached.iter().flatten().all(|&n| n >= 10), "{reached:?}");
    }
}
