//! The DEQ classifier on burn: Flex with autodiff, the layers of `adrules::burn::nn` in a
//! `#[derive(Module)]`, burn-optim's SGD.

use std::time::Instant;

use adrules::Result;
use adrules::burn::burn_tensor::activation::log_softmax;
use adrules::burn::burn_tensor::{DType, Device, Tensor, TensorData};
use adrules::burn::nn::burn_core as burn;
use adrules::burn::nn::{Deq, DeqConfig, Einsum, EinsumConfig};
use adrules::burn::try_backward;
use burn::module::Module;
use burn_optim::{GradientsParams, SgdConfig};

use super::{Epoch, MemoryRow, Rings, Setup, accuracy, peak_bytes};

/// `logits = einsum("bh,hc->bc", z*(x), V)`.
#[derive(Module, Debug)]
pub struct Classifier {
    /// the fixed point `z* = tanh(z*·Wᵀ + x·Uᵀ + b)`
    pub deq: Deq,
    /// the read-out `V`, `h×classes`
    pub readout: Einsum,
}

impl Classifier {
    /// The model of `setup` for `classes` classes, parameters on `device` (seeded: the same
    /// values as `on_candle::Classifier::new`).
    ///
    /// # Errors
    /// The layers' configuration errors.
    pub fn new(setup: &Setup, classes: usize, device: &Device) -> Result<Self> {
        let dtype = Some(if setup.f64 { DType::F64 } else { DType::F32 });
        let deq = DeqConfig::new(setup.hidden)
            .with_input_features(Some(2))
            .with_contraction(setup.contraction)
            .with_tolerance(setup.tolerance)
            .with_max_iterations(setup.max_iterations)
            .with_seed(setup.seed)
            .with_dtype(dtype)
            .init(device)?;
        let readout = EinsumConfig::new("bh,hc->bc".into(), vec![vec![setup.hidden, classes]])
            .with_seed(setup.seed)
            .with_dtype(dtype)
            .init(device)?;
        Ok(Classifier { deq, readout })
    }

    /// The logits of the rows of `x`, through the implicit node.
    ///
    /// # Errors
    /// The layers' (a fixed point that does not converge, …).
    pub fn logits(&self, x: Tensor<2>) -> Result<Tensor<2>> {
        self.readout.forward(self.deq.forward(x)?)
    }
}

/// The mean cross-entropy of `logits` against one-hot labels.
fn cross_entropy(logits: Tensor<2>, one_hot: Tensor<2>) -> Tensor<1> {
    let n = logits.dims()[0] as f64;
    (log_softmax(logits, 1) * one_hot)
        .sum()
        .mul_scalar(-1.0 / n)
}

/// Points `start..end` of `data` and their one-hot labels, on `device`.
fn batch(
    data: &Rings,
    start: usize,
    end: usize,
    setup: &Setup,
    device: &Device,
) -> Result<[Tensor<2>; 2]> {
    let dtype = if setup.f64 { DType::F64 } else { DType::F32 };
    let (x, y) = data.batch(start..end)?;
    let rows = end - start;
    Ok([(x, 2), (y, data.classes)]
        .map(|(v, cols)| Tensor::<2>::from_data(TensorData::new(v, [rows, cols]), (device, dtype))))
}

/// Loss and accuracy on the whole data set, and the solver's iterations.
fn evaluate(model: &Classifier, data: &Rings, setup: &Setup, device: &Device) -> Result<Epoch> {
    let [x, y] = batch(data, 0, data.len(), setup, device)?;
    let (z, iterations) = model.deq.solve(x)?;
    let logits: Tensor<2> = model.readout.forward(z.autodiff())?;
    let host: Vec<f64> = logits.clone().into_data().iter::<f64>().collect();
    let loss = cross_entropy(logits, y).into_scalar::<f64>();
    Ok(Epoch {
        loss,
        accuracy: accuracy(&host, &data.labels, data.classes)?,
        iterations,
        seconds: 0.0,
    })
}

/// Trains as [`super::train`] describes, calling `progress` with each point as it comes; the
/// first point is before training.
///
/// # Errors
/// The layers' errors, and errors of the implicit backward pass ([`try_backward`]).
pub fn train(
    setup: &Setup,
    data: &Rings,
    progress: &mut dyn FnMut(usize, &Epoch),
) -> Result<Vec<Epoch>> {
    let device = Device::flex().autodiff();
    let mut model = Classifier::new(setup, data.classes, &device)?;
    let mut optim = SgdConfig::new().init();
    let mut curve = vec![evaluate(&model, data, setup, &device)?];
    progress(0, &curve[0]);
    for _ in 0..setup.epochs {
        let started = Instant::now();
        for start in (0..data.len()).step_by(setup.batch) {
            let end = (start + setup.batch).min(data.len());
            let [x, y] = batch(data, start, end, setup, &device)?;
            let loss = cross_entropy(model.logits(x)?, y);
            let grads = GradientsParams::from_grads(try_backward(&loss)?, &model);
            model = optim.step(setup.lr, model, grads);
            model.deq = model.deq.clamp_contraction(setup.max_contraction)?;
        }
        let seconds = started.elapsed().as_secs_f64();
        curve.push(Epoch {
            seconds,
            ..evaluate(&model, data, setup, &device)?
        });
        progress(curve.len() - 1, &curve[curve.len() - 1]);
    }
    Ok(curve)
}

/// The peak heap of one gradient of the loss on the whole data set, implicit and unrolled
/// through as many iterations as the solver takes, for each tolerance (see [`MemoryRow`]).
///
/// # Errors
/// As [`train`].
pub fn memory(setup: &Setup, data: &Rings, tolerances: &[f64]) -> Result<Vec<MemoryRow>> {
    let device = Device::flex().autodiff();
    let [x, y] = batch(data, 0, data.len(), setup, &device)?;
    let mut rows = Vec::new();
    for &tolerance in tolerances {
        let setup = Setup {
            tolerance,
            ..setup.clone()
        };
        let model = Classifier::new(&setup, data.classes, &device)?;
        let (_, iterations) = model.deq.solve(x.clone())?;
        let gradient = |logits: Result<Tensor<2>>| -> Result<()> {
            try_backward(&cross_entropy(logits?, y.clone())).map(drop)
        };
        // a first gradient outside the measurement: buffers the engine keeps for later calls
        gradient(model.logits(x.clone()))?;
        let (implicit, implicit_bytes) = peak_bytes(|| gradient(model.logits(x.clone())));
        implicit?;
        let unrolled = || {
            let z = model.deq.forward_unrolled(x.clone(), iterations)?;
            gradient(model.readout.forward(z))
        };
        let (unrolled, unrolled_bytes) = peak_bytes(unrolled);
        unrolled?;
        rows.push(MemoryRow {
            tolerance,
            iterations,
            implicit: implicit_bytes,
            unrolled: unrolled_bytes,
        });
    }
    Ok(rows)
}
