//! The DEQ classifier on candle: the CPU device, the layers of `adrules::candle::nn` from a
//! `VarMap`, candle-nn's SGD.

use std::time::Instant;

use adrules::candle::candle_core::{DType, Device, Result, Tensor};
use adrules::candle::nn::candle_nn::{Module, Optimizer, SGD, VarBuilder, VarMap, ops};
use adrules::candle::nn::{Deq, DeqConfig, Einsum, EinsumConfig};
use adrules::candle::to_candle;

use super::{Epoch, MemoryRow, Rings, Setup, accuracy, peak_bytes};

/// `logits = einsum("bh,hc->bc", z*(x), V)`.
pub struct Classifier {
    /// the fixed point `z* = tanh(z*·Wᵀ + x·Uᵀ + b)` (variables `deq.w`, `deq.u`, `deq.b`)
    pub deq: Deq,
    /// the read-out `V`, `h×classes` (variable `readout.w0`)
    pub readout: Einsum,
    /// the variables
    pub varmap: VarMap,
}

impl Classifier {
    /// The model of `setup` for `classes` classes (seeded: the same values as
    /// `on_burn::Classifier::new`).
    ///
    /// # Errors
    /// The layers' configuration errors.
    pub fn new(setup: &Setup, classes: usize) -> Result<Self> {
        let varmap = VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, dtype(setup), &Device::Cpu);
        let config = DeqConfig::new(setup.hidden)
            .with_input_features(2)
            .with_contraction(setup.contraction)
            .with_tolerance(setup.tolerance)
            .with_max_iterations(setup.max_iterations)
            .with_seed(setup.seed);
        let deq = Deq::new(&config, vb.pp("deq"))?;
        let config =
            EinsumConfig::new("bh,hc->bc", vec![vec![setup.hidden, classes]]).with_seed(setup.seed);
        let readout = Einsum::new(&config, vb.pp("readout"))?;
        Ok(Classifier {
            deq,
            readout,
            varmap,
        })
    }

    /// The logits of the rows of `x`, through the implicit node.
    ///
    /// # Errors
    /// The layers' (a fixed point that does not converge, …).
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        self.readout.forward(&self.deq.forward(x)?)
    }
}

fn dtype(setup: &Setup) -> DType {
    if setup.f64 { DType::F64 } else { DType::F32 }
}

/// The mean cross-entropy of `logits` against one-hot labels.
fn cross_entropy(logits: &Tensor, one_hot: &Tensor) -> Result<Tensor> {
    let n = logits.dims()[0] as f64;
    (ops::log_softmax(logits, 1)? * one_hot)?
        .sum_all()?
        .affine(-1.0 / n, 0.0)
}

/// Points `start..end` of `data` and their one-hot labels.
fn batch(data: &Rings, start: usize, end: usize, setup: &Setup) -> Result<[Tensor; 2]> {
    let (x, y) = data.batch(start..end).map_err(to_candle)?;
    let rows = end - start;
    let x = Tensor::from_vec(x, (rows, 2), &Device::Cpu)?.to_dtype(dtype(setup))?;
    let y = Tensor::from_vec(y, (rows, data.classes), &Device::Cpu)?.to_dtype(dtype(setup))?;
    Ok([x, y])
}

fn scalar(t: &Tensor) -> Result<f64> {
    t.to_dtype(DType::F64)?.to_scalar::<f64>()
}

/// Loss and accuracy on the whole data set, and the solver's iterations.
fn evaluate(model: &Classifier, data: &Rings, setup: &Setup) -> Result<Epoch> {
    let [x, y] = batch(data, 0, data.len(), setup)?;
    let (z, iterations) = model.deq.solve(&x)?;
    let logits = model.readout.forward(&z)?;
    let host = logits
        .to_dtype(DType::F64)?
        .flatten_all()?
        .to_vec1::<f64>()?;
    Ok(Epoch {
        loss: scalar(&cross_entropy(&logits, &y)?)?,
        accuracy: accuracy(&host, &data.labels, data.classes).map_err(to_candle)?,
        iterations,
        seconds: 0.0,
    })
}

/// Trains as [`super::train`] describes, calling `progress` with each point as it comes; the
/// first point is before training.
///
/// # Errors
/// The layers' errors (in candle's error, the typed one inside:
/// `adrules::candle::adrules_error`), and those of the implicit backward pass.
pub fn train(
    setup: &Setup,
    data: &Rings,
    progress: &mut dyn FnMut(usize, &Epoch),
) -> Result<Vec<Epoch>> {
    let model = Classifier::new(setup, data.classes)?;
    let mut sgd = SGD::new(model.varmap.all_vars(), setup.lr)?;
    let mut curve = vec![evaluate(&model, data, setup)?];
    progress(0, &curve[0]);
    for _ in 0..setup.epochs {
        let started = Instant::now();
        for start in (0..data.len()).step_by(setup.batch) {
            let end = (start + setup.batch).min(data.len());
            let [x, y] = batch(data, start, end, setup)?;
            let loss = cross_entropy(&model.logits(&x)?, &y)?;
            sgd.backward_step(&loss)?;
            model.deq.clamp_contraction(setup.max_contraction)?;
        }
        let seconds = started.elapsed().as_secs_f64();
        curve.push(Epoch {
            seconds,
            ..evaluate(&model, data, setup)?
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
    let [x, y] = batch(data, 0, data.len(), setup)?;
    let mut rows = Vec::new();
    for &tolerance in tolerances {
        let setup = Setup {
            tolerance,
            ..setup.clone()
        };
        let model = Classifier::new(&setup, data.classes)?;
        let (_, iterations) = model.deq.solve(&x)?;
        let gradient = |logits: Result<Tensor>| -> Result<()> {
            cross_entropy(&logits?, &y)?.backward().map(drop)
        };
        // a first gradient outside the measurement: buffers the engine keeps for later calls
        gradient(model.logits(&x))?;
        let (implicit, implicit_bytes) = peak_bytes(|| gradient(model.logits(&x)));
        implicit?;
        let unrolled = || {
            let z = model.deq.forward_unrolled(&x, iterations)?;
            gradient(model.readout.forward(&z))
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
