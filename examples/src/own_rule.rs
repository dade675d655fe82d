//! Writing your own rule, as a downstream crate would, on adrules' public API only: two
//! operations defined once with [`adrules::rule::Rule`], checked by
//! [`adrules_testing::check_rule`], run on the strided backend and (with the features
//! `candle` and `burn`) as candle and burn ops through `adrules::candle::apply_rule` and
//! `adrules::burn::apply_rule`; [`on_burn`] and [`on_candle`] train a loss built on
//! [`LogSumExp`] with the engines' own optimizers (burn-optim's SGD on a
//! `#[derive(Module)]`, candle-nn's SGD).
//!
//! - [`LogSumExp`]: `y = log Σ_axes exp(x)` over chosen axes, numerically stable (the maximum
//!   subtracted first), pullback `x̄ = exp(x − y) ⊙ ȳ` (the softmax times the broadcast
//!   cotangent), pushforward `ẏ = Σ_axes exp(x − y) ⊙ ẋ`;
//! - [`MaxArg`]: two outputs over the last axis, the maximum and its position (as a float):
//!   `x̄ = ȳ₀` at the position of the maximum and 0 elsewhere; the position is piecewise
//!   constant, so its cotangent contributes nothing.
//!
//! The backend trait has no `exp` or `log`, so both compute on host copies (`to_host`,
//! `from_host`): one copy in and out per call, on every backend and device. Real dtypes only
//! (a complex input is `Error::DTypeMismatch` naming `"x"`).

use adrules::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};
use adrules::{Backend, DType, Error, HostTensor, Result};

/// The input as f64 on the host, with its dims and dtype.
fn host<B: Backend>(be: &B, t: &B::Tensor) -> Result<(Vec<usize>, Vec<f64>, DType)> {
    let h = be.to_host(t)?;
    let dtype = h.dtype();
    let v = h.to_dtype_projected(DType::F64).as_slice::<f64>()?.to_vec();
    Ok((h.dims().to_vec(), v, dtype))
}

/// `v` (f64, shape `dims`) as a tensor of `dtype` on `be`.
fn device<B: Backend>(be: &B, dims: &[usize], v: Vec<f64>, dtype: DType) -> Result<B::Tensor> {
    be.from_host(HostTensor::from_vec(dims, v)?.to_dtype_projected(dtype))
}

/// A real input of rank at least `rank`.
fn check_real<B: Backend>(be: &B, x: &B::Tensor, rank: usize) -> Result<()> {
    let dtype = be.dtype(x);
    if dtype.is_complex() {
        let expected = "a real dtype".into();
        return Err(Error::DTypeMismatch {
            arg: "x".into(),
            expected,
            actual: dtype,
        });
    }
    if be.rank(x) < rank {
        return Err(Error::rank("x", rank, be.rank(x)));
    }
    Ok(())
}

/// For each row-major index of `dims`, the row-major index of the output that keeps the axes
/// not in `axes`; and the output's dims.
fn reduce_map(dims: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let out: Vec<usize> = (0..dims.len())
        .filter(|a| !axes.contains(a))
        .map(|a| dims[a])
        .collect();
    let n: usize = dims.iter().product();
    let mut map = Vec::with_capacity(n);
    for k in 0..n {
        let (mut rest, mut o, mut stride) = (k, 0, 1);
        for a in (0..dims.len()).rev() {
            let i = rest % dims[a];
            rest /= dims[a];
            if !axes.contains(&a) {
                o += i * stride;
                stride *= dims[a];
            }
        }
        map.push(o);
    }
    (map, out)
}

/// `y = log Σ_axes exp(x)` (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSumExp {
    /// the axes summed over (0-based, distinct)
    pub axes: Vec<usize>,
}

impl LogSumExp {
    /// `(y, softmax weights exp(x − y))` on the host.
    fn compute(&self, x: &[f64], map: &[usize], m: usize) -> (Vec<f64>, Vec<f64>) {
        let mut max = vec![f64::NEG_INFINITY; m];
        for (&v, &o) in x.iter().zip(map) {
            max[o] = max[o].max(v);
        }
        let mut sum = vec![0.0; m];
        for (&v, &o) in x.iter().zip(map) {
            if max[o].is_finite() {
                sum[o] += (v - max[o]).exp();
            }
        }
        let y: Vec<f64> = (0..m)
            .map(|o| {
                if max[o].is_finite() {
                    max[o] + sum[o].ln()
                } else {
                    max[o]
                }
            })
            .collect();
        let w = x
            .iter()
            .zip(map)
            .map(|(&v, &o)| {
                if y[o].is_finite() {
                    (v - y[o]).exp()
                } else {
                    0.0
                }
            })
            .collect();
        (y, w)
    }
}

impl Rule for LogSumExp {
    fn name(&self) -> &str {
        "logsumexp"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        check_real(be, x[0], 0)?;
        let rank = be.rank(x[0]);
        let mut seen = vec![false; rank];
        for &a in &self.axes {
            if a >= rank || seen[a] {
                let why = format!("the axes must be distinct and below the rank {rank}");
                return Err(Error::indices("axes", &self.axes, why));
            }
            seen[a] = true;
        }
        Ok(())
    }

    /// The pullback recomputes the weights from the input and the output.
    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::all(1, 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let (dims, v, dtype) = host(be, x[0])?;
        let (map, out) = reduce_map(&dims, &self.axes);
        let (y, _) = self.compute(&v, &map, out.iter().product());
        let pb = move |be: &B,
                       p: &Primal<B>,
                       c: &[Option<B::Tensor>]|
              -> Result<Vec<Option<B::Tensor>>> {
            let (Some(c), (_, x, _), (_, y, _)) =
                (&c[0], host(be, p.input(0)?)?, host(be, p.output(0)?)?)
            else {
                return Ok(vec![None]);
            };
            let (_, c, _) = host(be, c)?;
            let x_bar = x
                .iter()
                .zip(&map)
                .map(|(&v, &o)| (v - y[o]).exp() * c[o])
                .collect();
            Ok(vec![Some(device(be, &dims, x_bar, dtype)?)])
        };
        Ok((vec![device(be, &out, y, dtype)?], Box::new(pb)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let (dims, v, dtype) = host(be, x[0])?;
        let (map, out) = reduce_map(&dims, &self.axes);
        let m = out.iter().product();
        let (y, w) = self.compute(&v, &map, m);
        let dy = match dx[0] {
            Some(d) => {
                let (_, d, _) = host(be, d)?;
                let mut dy = vec![0.0; m];
                for ((&w, &d), &o) in w.iter().zip(&d).zip(&map) {
                    dy[o] += w * d;
                }
                Some(device(be, &out, dy, dtype)?)
            }
            None => None,
        };
        Ok((vec![device(be, &out, y, dtype)?], vec![dy]))
    }
}

/// `(max, argmax)` over the last axis (see the module docs): two outputs of shape
/// `dims(x)[..rank − 1]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaxArg;

impl MaxArg {
    /// `(max, argmax)` per row of length `n`.
    fn compute(x: &[f64], n: usize) -> (Vec<f64>, Vec<usize>) {
        x.chunks(n)
            .map(|row| {
                let mut best = 0;
                for (i, &v) in row.iter().enumerate() {
                    if v > row[best] {
                        best = i;
                    }
                }
                (row[best], best)
            })
            .unzip()
    }
}

impl Rule for MaxArg {
    fn name(&self) -> &str {
        "maxarg"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        2
    }

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        check_real(be, x[0], 1)?;
        if be.dims(x[0]).last() == Some(&0) {
            return Err(Error::invalid("x", "the last axis is empty: no maximum"));
        }
        Ok(())
    }

    /// The pullback owns the positions of the maxima.
    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::none(1, 2)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let (dims, v, dtype) = host(be, x[0])?;
        let n = dims[dims.len() - 1];
        let (max, arg) = Self::compute(&v, n);
        let out = dims[..dims.len() - 1].to_vec();
        let pos: Vec<f64> = arg.iter().map(|&a| a as f64).collect();
        let y = vec![device(be, &out, max, dtype)?, device(be, &out, pos, dtype)?];
        let pb = move |be: &B,
                       _: &Primal<B>,
                       c: &[Option<B::Tensor>]|
              -> Result<Vec<Option<B::Tensor>>> {
            let mut x_bar = vec![0.0; arg.len() * n];
            if let Some(c) = &c[0] {
                let (_, c, _) = host(be, c)?;
                for (r, (&a, &c)) in arg.iter().zip(&c).enumerate() {
                    x_bar[r * n + a] = c;
                }
            }
            Ok(vec![Some(device(be, &dims, x_bar, dtype)?)])
        };
        Ok((y, Box::new(pb)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let (y, _) = self.rrule(be, x, &[false])?;
        let Some(d) = dx[0] else {
            return Ok((y, vec![None, None]));
        };
        let (dims, v, dtype) = host(be, x[0])?;
        let n = dims[dims.len() - 1];
        let (_, arg) = Self::compute(&v, n);
        let (_, d, _) = host(be, d)?;
        let dy: Vec<f64> = arg.iter().enumerate().map(|(r, &a)| d[r * n + a]).collect();
        let dy = device(be, &dims[..dims.len() - 1], dy, dtype)?;
        Ok((y, vec![Some(dy), None]))
    }
}

/// [`LogSumExp`] inside a burn model trained with burn's own optimizer: a module whose
/// parameter `θ: [1, n]` is fitted so that `logsumexp(θ) = 0` by burn-optim's SGD.
#[cfg(feature = "burn")]
pub mod on_burn {
    use adrules::Result;
    use adrules::burn::burn_tensor::{DType, Device, Tensor, TensorData};
    use adrules::burn::nn::burn_core as burn;
    use adrules::burn::{apply_rule, try_backward};
    use burn::module::{Module, Param};
    use burn_optim::{GradientsParams, SgdConfig};

    use super::LogSumExp;

    /// One parameter `θ: [1, n]`; its output is `logsumexp(θ)` over the last axis.
    #[derive(Module, Debug)]
    pub struct Fit {
        /// `θ`
        pub theta: Param<Tensor<2>>,
    }

    impl Fit {
        /// `θ = start` (f64) on `device`.
        pub fn new(start: &[f64], device: &Device) -> Self {
            let data = TensorData::new(start.to_vec(), [1, start.len()]);
            let theta = Tensor::from_data(data, (device, DType::F64));
            Fit {
                theta: Param::from_tensor(theta),
            }
        }

        /// The loss `logsumexp(θ)²` through the rule, as a burn op.
        ///
        /// # Errors
        /// The rule's (through `apply_rule`).
        pub fn loss(&self) -> Result<Tensor<1>> {
            let lse = LogSumExp { axes: vec![1] };
            let y: Tensor<1> = apply_rule(&lse, [(&self.theta.val()).into()])?[0]
                .clone()
                .into_tensor()?;
            Ok((y.clone() * y).sum())
        }
    }

    /// Trains `θ` from `start` for `steps` SGD steps of rate `lr` on Flex with autodiff;
    /// returns the loss before and after.
    ///
    /// # Errors
    /// The rule's, or one reported inside burn's backward pass.
    pub fn train(start: &[f64], steps: usize, lr: f64) -> Result<(f64, f64)> {
        let device = Device::flex().autodiff();
        let mut model = Fit::new(start, &device);
        let mut optim = SgdConfig::new().init();
        let first: f64 = model.loss()?.into_scalar();
        for _ in 0..steps {
            let loss = model.loss()?;
            let grads = GradientsParams::from_grads(try_backward(&loss)?, &model);
            model = optim.step(lr, model, grads);
        }
        Ok((first, model.loss()?.into_scalar()))
    }
}

/// [`LogSumExp`] trained with candle's own optimizer: `θ: [n]`, a candle `Var`, fitted so that
/// `logsumexp(θ) = 0` by candle-nn's SGD.
#[cfg(feature = "candle")]
pub mod on_candle {
    use adrules::Result;
    use adrules::candle::candle_core::{Device, Tensor, Var};
    use adrules::candle::nn::candle_nn::{Optimizer, SGD};
    use adrules::candle::{adrules_error, apply_rule};

    use super::LogSumExp;

    /// A candle error as the typed error it carries (or [`adrules::Error::Backend`]).
    fn typed(e: adrules::candle::candle_core::Error) -> adrules::Error {
        adrules_error(&e)
            .cloned()
            .unwrap_or(adrules::Error::Backend {
                backend: "candle".into(),
                message: e.to_string(),
            })
    }

    /// `logsumexp(θ)²` through the rule, as a candle op.
    fn loss(theta: &Tensor) -> Result<Tensor> {
        let lse = LogSumExp { axes: vec![0] };
        let y = apply_rule(&lse, &[theta]).map_err(typed)?;
        y[0].sqr().and_then(|t| t.sum_all()).map_err(typed)
    }

    /// Trains `θ` from `start` for `steps` SGD steps of rate `lr` on the CPU; returns the
    /// loss before and after.
    ///
    /// # Errors
    /// The rule's, or candle's (backward included).
    pub fn train(start: &[f64], steps: usize, lr: f64) -> Result<(f64, f64)> {
        let theta = Tensor::from_vec(start.to_vec(), start.len(), &Device::Cpu).map_err(typed)?;
        let theta = Var::from_tensor(&theta).map_err(typed)?;
        let mut sgd = SGD::new(vec![theta.clone()], lr).map_err(typed)?;
        let value = |t: &Tensor| -> Result<f64> { loss(t)?.to_scalar::<f64>().map_err(typed) };
        let first = value(theta.as_tensor())?;
        for _ in 0..steps {
            sgd.backward_step(&loss(theta.as_tensor())?)
                .map_err(typed)?;
        }
        Ok((first, value(theta.as_tensor())?))
    }
}
