//! The fuzz target of the engines' rule bridges: `adrules::candle::apply_rule`,
//! `adrules::burn::apply_rule` and `adrules::dfdx::apply_rule` with the sample rules of
//! [`adrules_testing::samples`] (`Mul`, `Split`, `Fma`, `Failing`) on random shapes (rank 0
//! to 3, zero-size axes, an input of another shape in a quarter of the inputs), against the
//! core's checked driver [`adrules::rule::rrule`] on the strided backend:
//!
//! - the engine refuses exactly what the core refuses, with the same kind of typed error
//!   (dfdx, whose tape follows one tensor, refuses the two-output `Split` with
//!   [`Error::Unsupported`]);
//! - the outputs and the gradients of `L = Σⱼ Σ Yⱼ ⊙ Wⱼ` from the engine's own backward
//!   pass are the core pullback's for the cotangents `Wⱼ`, bit for bit (the same rule on the
//!   same values: the engines only carry the cotangents);
//! - `Failing`'s pullback is a typed error out of the engine's `try_backward`, never a panic;
//! - the inputs are unchanged.
//!
//! burn has no rank-0 tensors: its inputs of rank 0 have shape `[1]` (the rule sees `[1]`),
//! and the reference is computed on those shapes. dfdx gets f64 inputs of one rank.

use adrules::rule::{self, Rule};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, DType, Error, HostTensor};
use adrules_testing::Rng;
use adrules_testing::samples::{Failing, Fma, Mul, Split};

use crate::Finding;
use crate::engines::{f64s, same_kind, same_values};

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// The engines of the target.
const ENGINES: [&str; 3] = ["candle", "burn", "dfdx"];

/// One input: the engine, the rule's index in `[Mul, Split, Fma, Failing]`, the inputs.
struct Input {
    engine: usize,
    rule: usize,
    dtype: DType,
    hosts: Vec<HostTensor>,
    rng: Rng,
}

fn shape(rng: &mut Rng, rank: usize) -> Vec<usize> {
    (0..rank).map(|_| rng.below(4)).collect()
}

impl Input {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::seed(seed);
        let engine = rng.below(3);
        let rule = rng.below(4);
        let dtype = if engine == 2 || rng.below(2) == 0 {
            DType::F64
        } else {
            DType::F32
        };
        let inputs = [2, 1, 3, 1][rule];
        let rank = rng.below(4);
        let mut dims = shape(&mut rng, rank);
        if engine == 1 && rank == 0 {
            dims = vec![1];
        }
        let mut shapes = vec![dims.clone(); inputs];
        if inputs > 1 && rng.below(4) == 0 {
            let j = 1 + rng.below(inputs - 1);
            let other = if engine == 2 {
                // dfdx: one shape type for every operand, so the same rank
                shape(&mut rng, rank)
            } else {
                let r = 1 + rng.below(3);
                shape(&mut rng, r)
            };
            shapes[j] = other;
        }
        let hosts = shapes.iter().map(|d| rng.tensor(d, dtype)).collect();
        Input {
            engine,
            rule,
            dtype,
            hosts,
            rng,
        }
    }

    fn text(&self) -> String {
        let shapes: Vec<&[usize]> = self.hosts.iter().map(|h| h.dims()).collect();
        let rule = ["Mul", "Split", "Fma", "Failing"][self.rule];
        format!("{}: {rule} {shapes:?} {}", ENGINES[self.engine], self.dtype)
    }
}

/// The number of elements of the inputs of `seed`.
pub(crate) fn size(seed: u64) -> usize {
    Input::new(seed).hosts.iter().map(HostTensor::len).sum()
}

/// What an engine did with the input, as row-major `f64`s: the outputs, the gradient of
/// every input (`None`: the engine gave none) or the backward pass's typed error, and the
/// inputs after the call.
struct Outcome {
    outputs: Vec<Vec<f64>>,
    grads: Result<Vec<Option<Vec<f64>>>, Error>,
    inputs: Vec<Vec<f64>>,
}

/// The core's outputs and pullback, on the strided backend: `Err` when the driver refuses
/// the call; otherwise the outputs and the cotangents of the inputs (or the pullback's
/// error) for the output cotangents `w`.
type Reference = Result<(Vec<HostTensor>, Result<Vec<Option<HostTensor>>, Error>), Error>;

fn reference<R: Rule>(
    rule: &R,
    hosts: &[HostTensor],
    rng: &mut Rng,
) -> (Reference, Vec<HostTensor>) {
    let be = Strided;
    let xs: Vec<Tensor> = hosts
        .iter()
        .map(|h| be.from_host(h.clone()).expect("a stored dtype"))
        .collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let (ys, pb) = match rule::rrule(rule, &be, &refs, &vec![true; refs.len()]) {
        Ok(r) => r,
        Err(e) => return (Err(e), Vec::new()),
    };
    let dtype = hosts[0].dtype();
    let ws: Vec<HostTensor> = ys.iter().map(|y| rng.tensor(&be.dims(y), dtype)).collect();
    let cots: Vec<Option<Tensor>> = ws
        .iter()
        .map(|w| Some(be.from_host(w.clone()).expect("a stored dtype")))
        .collect();
    let grads = pb.pullback(&cots).and_then(|g| {
        g.iter()
            .map(|t| t.as_ref().map(|t| be.to_host(t)).transpose())
            .collect()
    });
    let ys = ys.iter().map(|y| be.to_host(y).expect("host")).collect();
    (Ok((ys, grads)), ws)
}

/// The rule bridge of `seed`'s engine with `seed`'s sample rule against the core.
pub(crate) fn rules(seed: u64) -> Result<(), Finding> {
    let mut input = Input::new(seed);
    match input.rule {
        0 => check(&Mul, &mut input),
        1 => check(&Split, &mut input),
        2 => check(&Fma, &mut input),
        _ => check(&Failing, &mut input),
    }
}

fn check<R: Rule + Clone + 'static>(rule: &R, input: &mut Input) -> Result<(), Finding> {
    let text = input.text();
    let (expected, ws) = reference(rule, &input.hosts, &mut input.rng);
    let accepted = expected.is_ok();
    let got = match input.engine {
        0 => candle(rule, &input.hosts, accepted.then_some(&ws[..])),
        1 => burn(rule, &input.hosts, accepted.then_some(&ws[..])),
        _ => dfdx(rule, &input.hosts, accepted.then_some(&ws[..])),
    };
    if input.engine == 2 && rule.num_outputs() != 1 {
        return match got {
            Err(Error::Unsupported { .. }) => Ok(()),
            Err(e) => Err(wrong(format!("{text}: refused with {e}, not Unsupported"))),
            Ok(_) => Err(wrong(format!("{text}: a two-output rule accepted"))),
        };
    }
    let (got, (ys, grads)) = match (got, expected) {
        (Err(g), Err(e)) if same_kind(&g, &e) => return Ok(()),
        (Err(g), Err(e)) => {
            return Err(wrong(format!(
                "{text}: refused with {g}, the core with {e}"
            )));
        }
        (Ok(_), Err(e)) => return Err(wrong(format!("{text}: accepted, the core refuses: {e}"))),
        (Err(g), Ok(_)) => return Err(wrong(format!("{text}: refused, the core accepts: {g}"))),
        (Ok(g), Ok(e)) => (g, e),
    };
    for (k, (after, h)) in got.inputs.iter().zip(&input.hosts).enumerate() {
        if !same_values(after, &f64s(h)) {
            return Err(Finding::Mutated(format!("{text}: input {k} changed")));
        }
    }
    if got.outputs.len() != ys.len() {
        return Err(wrong(format!("{text}: {} outputs", got.outputs.len())));
    }
    for (j, (g, y)) in got.outputs.iter().zip(&ys).enumerate() {
        if !same_values(g, &f64s(y)) {
            return Err(wrong(format!("{text}: output {j} differs from the core's")));
        }
    }
    match (got.grads, grads) {
        (Err(g), Err(e)) if same_kind(&g, &e) => Ok(()),
        (Err(g), Err(e)) => Err(wrong(format!(
            "{text}: backward failed with {g}, the core pullback with {e}"
        ))),
        (Ok(_), Err(e)) => Err(wrong(format!(
            "{text}: backward succeeded, the core pullback fails: {e}"
        ))),
        (Err(g), Ok(_)) => Err(wrong(format!(
            "{text}: backward failed, the core pullback succeeds: {g}"
        ))),
        (Ok(g), Ok(e)) => {
            for (k, (g, e)) in g.iter().zip(&e).enumerate() {
                match (g, e) {
                    (Some(g), Some(e)) if same_values(g, &f64s(e)) => {}
                    (None, Some(e)) if e.is_empty() => {}
                    (None, None) => {}
                    (g, e) => {
                        return Err(wrong(format!(
                            "{text}: cotangent of input {k}: {:?}, the core's {:?}",
                            g.as_ref().map(|g| &g[..g.len().min(4)]),
                            e.as_ref().map(|e| f64s(e)[..e.len().min(4)].to_vec())
                        )));
                    }
                }
            }
            Ok(())
        }
    }
}

/// `adrules::candle::apply_rule` on candle's CPU device, then candle's backward of the loss
/// when `ws` (the output cotangents) is given.
fn candle<R: Rule>(
    rule: &R,
    hosts: &[HostTensor],
    ws: Option<&[HostTensor]>,
) -> Result<Outcome, Error> {
    use adrules::candle::candle_core::{DType as CDType, Device, Tensor as CTensor, Var};
    use adrules::candle::{apply_rule, candle_dtype, from_candle, try_backward};
    let cdt = candle_dtype(hosts[0].dtype())?;
    let tensor = |h: &HostTensor| {
        CTensor::from_vec(f64s(h), h.dims(), &Device::Cpu)
            .and_then(|t| t.to_dtype(cdt))
            .map_err(from_candle)
    };
    let values = |t: &CTensor| -> Result<Vec<f64>, Error> {
        t.to_dtype(CDType::F64)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(from_candle)
    };
    let vars: Vec<Var> = hosts
        .iter()
        .map(|h| Var::from_tensor(&tensor(h)?).map_err(from_candle))
        .collect::<Result<_, _>>()?;
    let ts: Vec<&CTensor> = vars.iter().map(|v| v.as_tensor()).collect();
    let ys = apply_rule(rule, &ts).map_err(from_candle)?;
    let outputs = ys.iter().map(values).collect::<Result<_, _>>()?;
    let inputs = ts.iter().map(|t| values(t)).collect::<Result<_, _>>()?;
    let Some(ws) = ws else {
        return Ok(Outcome {
            outputs,
            grads: Ok(Vec::new()),
            inputs,
        });
    };
    let mut loss: Option<CTensor> = None;
    for (y, w) in ys.iter().zip(ws) {
        let term = y
            .mul(&tensor(w)?)
            .and_then(|t| t.sum_all())
            .map_err(from_candle)?;
        loss = Some(match loss {
            None => term,
            Some(l) => (l + term).map_err(from_candle)?,
        });
    }
    let loss = loss.ok_or_else(|| Error::invalid("fuzz", "a rule without outputs"))?;
    let grads = match try_backward(&loss) {
        Ok(g) => ts
            .iter()
            .map(|t| g.get(t).map(values).transpose())
            .collect::<Result<_, _>>(),
        Err(e) => Err(e),
    };
    Ok(Outcome {
        outputs,
        grads,
        inputs,
    })
}

/// One output of burn's `apply_rule` (rank `D`): its values and the loss term `Σ Y ⊙ W`.
fn burn_output<const D: usize>(
    y: adrules::burn::Operand,
    w: Option<&HostTensor>,
    dt: adrules::burn::burn_tensor::DType,
) -> Result<(Vec<f64>, Option<adrules::burn::burn_tensor::Tensor<1>>), Error> {
    use crate::adapters::burn_target::{device, values};
    use adrules::burn::burn_tensor::{Tensor as BTensor, TensorData};
    let y: BTensor<D> = y.into_tensor()?;
    let v = values(&y);
    let term = w.map(|w| {
        let w = BTensor::<D>::from_data(TensorData::new(f64s(w), y.dims()), (&device(), dt));
        (y * w).sum()
    });
    Ok((v, term))
}

/// `adrules::burn::apply_rule` on Flex with autodiff, then burn's backward of the loss
/// (through `adrules::burn::try_backward`) when `ws` is given.
fn burn<R: Rule + Clone + 'static>(
    rule: &R,
    hosts: &[HostTensor],
    ws: Option<&[HostTensor]>,
) -> Result<Outcome, Error> {
    use crate::adapters::burn_target::{dtype, leaf};
    use adrules::burn::{apply_rule, try_backward};
    let dt = dtype(hosts[0].dtype());
    let leaves = hosts
        .iter()
        .map(|h| leaf(h, dt))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::invalid("fuzz", "a rank above 8"))?;
    let ops: Vec<_> = leaves.iter().map(|l| l.operand.clone()).collect();
    let ys = match ops.len() {
        1 => apply_rule(rule, <[_; 1]>::try_from(ops).expect("1 operand")),
        2 => apply_rule(rule, <[_; 2]>::try_from(ops).expect("2 operands")),
        3 => apply_rule(rule, <[_; 3]>::try_from(ops).expect("3 operands")),
        n => return Err(Error::invalid("fuzz", format!("{n} operands"))),
    }?;
    let mut outputs = Vec::new();
    let mut loss: Option<adrules::burn::burn_tensor::Tensor<1>> = None;
    for (j, y) in ys.into_iter().enumerate() {
        let w = ws.map(|ws| &ws[j]);
        let (v, term) = match y.dims().len() {
            1 => burn_output::<1>(y, w, dt),
            2 => burn_output::<2>(y, w, dt),
            3 => burn_output::<3>(y, w, dt),
            r => Err(Error::invalid("fuzz", format!("an output of rank {r}"))),
        }?;
        outputs.push(v);
        if let Some(t) = term {
            loss = Some(match loss {
                None => t,
                Some(l) => l + t,
            });
        }
    }
    let inputs = leaves.iter().map(|l| (l.value)()).collect();
    let grads = match loss {
        None => Ok(Vec::new()),
        Some(loss) => {
            try_backward(&loss).map(|g| leaves.iter().map(|l| (l.gradient)(&g)).collect())
        }
    };
    Ok(Outcome {
        outputs,
        grads,
        inputs,
    })
}

/// dfdx's values of a tensor of `S`, as `f64`s.
fn dfdx_values<S: adrules::dfdx::dfdx::prelude::Shape, T>(
    t: &adrules::dfdx::dfdx::prelude::Tensor<S, f64, adrules::dfdx::dfdx::prelude::Cpu, T>,
) -> Result<Vec<f64>, Error> {
    use adrules::dfdx::{DfdxBackend, DfdxTensor};
    let t = DfdxTensor::new(t.retaped())?;
    Ok(f64s(&DfdxBackend::default().to_host(&t)?))
}

/// `adrules::dfdx::apply_rule` with a `Vec` of operands of one rank (f64), then dfdx's
/// backward of the loss (through `adrules::dfdx::try_backward`) when `ws` is given.
fn dfdx<R: Rule>(
    rule: &R,
    hosts: &[HostTensor],
    ws: Option<&[HostTensor]>,
) -> Result<Outcome, Error> {
    use adrules::dfdx::dfdx::prelude::{
        Cpu, HasShape, OwnedTape, Rank0, Shape, SumTo, Tensor as DTensor, Trace,
    };
    use adrules::dfdx::{DfdxBackend, Ranked, apply_rule, try_backward, with_rank};
    let rank = hosts[0].dims().len();
    if hosts.iter().any(|h| h.dims().len() != rank) {
        return Err(Error::invalid("fuzz", "operands of several ranks"));
    }
    let dev = Cpu::default();
    let ranked = hosts
        .iter()
        .map(|h| Ranked::<f64>::from_host(&dev, h.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let ran: Option<Result<Outcome, Error>> = with_rank!(rank, S => {
        let run = || -> Result<Outcome, Error> {
            let xs: Vec<DTensor<S, f64, Cpu>> =
                ranked.iter().map(|x| x.to_tensor::<S>()).collect::<Result<_, _>>()?;
            let traced: Vec<DTensor<S, f64, Cpu, OwnedTape<f64, Cpu>>> =
                xs.iter().map(|x| x.leaky_trace()).collect();
            let y: DTensor<S, f64, Cpu, OwnedTape<f64, Cpu>> = apply_rule(rule, traced)?;
            let outputs = vec![dfdx_values(&y)?];
            let inputs = xs.iter().map(dfdx_values).collect::<Result<_, _>>()?;
            let Some(ws) = ws else {
                return Ok(Outcome { outputs, grads: Ok(Vec::new()), inputs });
            };
            let w: DTensor<S, f64, Cpu> = DfdxBackend::default()
                .from_host(ws[0].clone())?
                .to_tensor::<S, f64>()?;
            let loss: DTensor<Rank0, f64, Cpu, OwnedTape<f64, Cpu>> =
                if y.shape().num_elements() == 0 {
                    // dfdx's sum to a scalar of no element is not 0: the same loss through
                    // the adapter's einsum
                    let labels = &"abc"[..S::NUM_DIMS];
                    adrules::dfdx::einsum(&format!("{labels},{labels}->"), (y, w))?
                } else {
                    (y * w).sum::<Rank0, _>()
                };
            let grads = match try_backward(loss) {
                Ok(g) => xs.iter().map(|x| dfdx_values(&g.get(x)).map(Some)).collect(),
                Err(e) => Err(e),
            };
            Ok(Outcome { outputs, grads, inputs })
        };
        Some(run())
    }, else None);
    ran.unwrap_or_else(|| Err(Error::invalid("fuzz", "a rank above 6")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every engine runs every rule, and the accepted calls reach the gradient comparison.
    #[test]
    fn every_engine_reaches_the_gradient_comparison() {
        // [engine][rule]: calls whose backward pass ran (Failing: failed with a typed error)
        let mut reached = [[0; 4]; 3];
        for seed in 0..1500 {
            let mut input = Input::new(seed);
            let ws = |input: &mut Input| -> Vec<HostTensor> {
                let (r, ws) = match input.rule {
                    0 => reference(&Mul, &input.hosts, &mut input.rng),
                    1 => reference(&Split, &input.hosts, &mut input.rng),
                    2 => reference(&Fma, &input.hosts, &mut input.rng),
                    _ => reference(&Failing, &input.hosts, &mut input.rng),
                };
                if r.is_ok() { ws } else { Vec::new() }
            };
            let ws = ws(&mut input);
            if ws.is_empty() {
                continue;
            }
            let got = match (input.engine, input.rule) {
                (0, 0) => candle(&Mul, &input.hosts, Some(&ws)),
                (0, 1) => candle(&Split, &input.hosts, Some(&ws)),
                (0, 2) => candle(&Fma, &input.hosts, Some(&ws)),
                (0, _) => candle(&Failing, &input.hosts, Some(&ws)),
                (1, 0) => burn(&Mul, &input.hosts, Some(&ws)),
                (1, 1) => burn(&Split, &input.hosts, Some(&ws)),
                (1, 2) => burn(&Fma, &input.hosts, Some(&ws)),
                (1, _) => burn(&Failing, &input.hosts, Some(&ws)),
                (_, 0) => dfdx(&Mul, &input.hosts, Some(&ws)),
                (_, 1) => dfdx(&Split, &input.hosts, Some(&ws)),
                (_, 2) => dfdx(&Fma, &input.hosts, Some(&ws)),
                (_, _) => dfdx(&Failing, &input.hosts, Some(&ws)),
            };
            let ran = match (input.engine, input.rule, got) {
                (2, 1, Err(Error::Unsupported { .. })) => true,
                (
                    _,
                    3,
                    Ok(Outcome {
                        grads: Err(Error::InvalidArgument { .. }),
                        ..
                    }),
                ) => true,
                (_, _, Ok(Outcome { grads: Ok(g), .. })) => !g.is_empty(),
                _ => false,
            };
            reached[input.engine][input.rule] += usize::from(ran);
        }
        assert!(reached.iter().flatten().all(|&n| n >= 10), "{reached:?}");
    }
}
