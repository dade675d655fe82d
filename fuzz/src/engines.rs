//! The fuzz targets of the decompositions as engine nodes: `adrules::candle::linalg` and
//! `adrules::burn::linalg` (`svd` thin and full, `qr` reduced and complete, `eigh`) on the
//! special matrices of the core's `linalg` target (random, zero, rank one, degenerate,
//! subnormal, huge, NaN, infinity; up to 4×4, zero-size included, optionally batched; f32
//! and f64), against the core's rrule on the strided backend with the same matrix:
//!
//! - the engine refuses exactly what the core refuses, with the same kind of typed error;
//! - the factors equal the core's (within [`Tolerance::for_dtype`], relative to the largest
//!   entry of each factor);
//! - the engine's own backward pass of a gauge-invariant loss (`Σ W ⊙ S` for svd, `Σ W ⊙ λ`
//!   for eigh, `Σ W_Q ⊙ Q + Σ W_R ⊙ R` for the reduced qr and `Σ W_R ⊙ R` for the complete
//!   one, whose complement columns of `Q` have no gauge-free cotangent) gives the core
//!   pullback's cotangent of `A` for the same cotangents, or the same kind of typed error
//!   (candle's and burn's `try_backward`);
//! - `A` is unchanged.

use adrules::linalg::{
    QrMode, RuleOptions, SvdCotangents, SvdMode, eigh_rrule, qr_rrule, svd_rrule,
};
use adrules::strided::{Strided, Tensor};
use adrules::{Backend, DType, Error, HostTensor};
use adrules_testing::{Rng, Tolerance};

use crate::Finding;
use crate::targets::{KINDS, finite, hermitian, matrix};

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// The values of a real host tensor, row-major, as `f64`s.
pub(crate) fn f64s(h: &HostTensor) -> Vec<f64> {
    h.data().to_c64_vec().iter().map(|z| z.re).collect()
}

/// `actual` against `expected` (row-major `f64`s of the same length) within the dtype's
/// tolerance, both divided by the largest `|expected|` (1 when that is zero or not finite).
pub(crate) fn close(actual: &[f64], expected: &[f64], dtype: DType) -> Result<(), String> {
    if actual.len() != expected.len() {
        return Err(format!(
            "{} values, expected {}",
            actual.len(),
            expected.len()
        ));
    }
    let scale = expected.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    let scale = if scale > 0.0 && scale.is_finite() {
        scale
    } else {
        1.0
    };
    let tol = Tolerance::for_dtype(dtype);
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let (a, e) = (a / scale, e / scale);
        // a NaN is close to nothing but a NaN of the same bits
        let within = (a - e).abs() <= tol.atol + tol.rtol * e.abs();
        if a.to_bits() != e.to_bits() && !within {
            return Err(format!(
                "element {i} is {} but expected {} (scale {scale:e})",
                a * scale,
                e * scale
            ));
        }
    }
    Ok(())
}

/// The same values, a NaN equal to a NaN.
pub(crate) fn same_values(x: &[f64], y: &[f64]) -> bool {
    x.len() == y.len()
        && x.iter()
            .zip(y)
            .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
}

/// Two typed errors of the same kind (variant).
pub(crate) fn same_kind(a: &Error, b: &Error) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The decomposition of an input: which one, on which matrix, with which cotangents.
pub(crate) struct Input {
    /// 0 svd thin, 1 svd full, 2 qr reduced, 3 qr complete, 4 eigh
    op: usize,
    dtype: DType,
    a: HostTensor,
    /// the cotangent of each factor (core shapes; `None`: the loss does not use it), in the
    /// order svd `[U, S, Vh]`, qr `[Q, R]`, eigh `[λ, V]`
    cotangents: Vec<Option<HostTensor>>,
    /// the case, for messages
    text: String,
}

/// The number of elements of the matrix of input `seed` (its first draws).
pub(crate) fn size(seed: u64) -> usize {
    let mut rng = Rng::seed(seed);
    let _dtype = rng.below(2);
    let _kind = rng.below(KINDS.len());
    let (m, n) = (rng.below(5), rng.below(5));
    let batch = if rng.below(4) == 0 { 2 } else { 1 };
    let square = rng.below(5) == 4;
    batch * m * if square { m } else { n }
}

impl Input {
    /// The input of `seed` (the draws of [`size`] first).
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = Rng::seed(seed);
        let dtype = [DType::F32, DType::F64][rng.below(2)];
        let kind = KINDS[rng.below(KINDS.len())];
        let (m, n) = (rng.below(5), rng.below(5));
        let batch: Vec<usize> = if rng.below(4) == 0 { vec![2] } else { vec![] };
        let op = rng.below(5);
        let n = if op == 4 { m } else { n };
        let mut a = matrix(&mut rng, &batch, m, n, dtype, kind);
        if op == 4 && finite(&a) {
            a = hermitian(&a);
        }
        let k = m.min(n);
        let mut cot = |dims: &[usize]| {
            let mut d = batch.clone();
            d.extend_from_slice(dims);
            Some(rng.tensor(&d, dtype))
        };
        let cotangents = match op {
            0 | 1 => vec![None, cot(&[k]), None],
            2 => vec![cot(&[m, k]), cot(&[k, n])],
            3 => vec![None, cot(&[m, n])],
            _ => vec![cot(&[n]), None],
        };
        let text = format!("op {op} {kind:?} {dtype} {batch:?} {m}×{n}");
        Input {
            op,
            dtype,
            a,
            cotangents,
            text,
        }
    }

    fn svd_mode(&self) -> SvdMode {
        if self.op == 0 {
            SvdMode::Thin
        } else {
            SvdMode::Full
        }
    }

    fn qr_mode(&self) -> QrMode {
        if self.op == 2 {
            QrMode::Reduced
        } else {
            QrMode::Complete
        }
    }

    /// The core's factors and the cotangent of `A` (or the pullback's error), on the strided
    /// backend.
    fn core(&self) -> Result<(Vec<HostTensor>, Result<HostTensor, Error>), Error> {
        let be = Strided;
        let x = be.from_host(self.a.clone())?;
        let cots: Vec<Option<Tensor>> = self
            .cotangents
            .iter()
            .map(|c| c.clone().map(|c| be.from_host(c)).transpose())
            .collect::<Result<_, _>>()?;
        let host = |ts: &[&Tensor]| -> Result<Vec<HostTensor>, Error> {
            ts.iter().map(|t| be.to_host(t)).collect()
        };
        let (factors, grad) = match self.op {
            0 | 1 => {
                let (f, pb) = svd_rrule(&be, &x, self.svd_mode(), RuleOptions::default())?;
                let g = pb.pullback(SvdCotangents {
                    s: cots[1].as_ref(),
                    ..Default::default()
                });
                (host(&[&f.u, &f.s, &f.vh])?, g)
            }
            2 | 3 => {
                let (f, pb) = qr_rrule(&be, &x, self.qr_mode())?;
                let g = pb.pullback(cots[0].as_ref(), cots[1].as_ref());
                (host(&[&f.q, &f.r])?, g)
            }
            _ => {
                let (f, pb) = eigh_rrule(&be, &x, RuleOptions::default())?;
                let g = pb.pullback(cots[0].as_ref(), None);
                (host(&[&f.values, &f.vectors])?, g)
            }
        };
        Ok((factors, grad.and_then(|g| be.to_host(&g))))
    }

    /// Compares an engine's outcome with the core's.
    fn compare(&self, engine: &str, got: Result<Outcome, Error>) -> Result<(), Finding> {
        let text = format!("{engine}: {}", self.text);
        let expected = self.core();
        let (got, (factors, grad)) = match (got, expected) {
            (Err(g), Err(e)) if same_kind(&g, &e) => return Ok(()),
            (Err(g), Err(e)) => {
                return Err(wrong(format!(
                    "{text}: refused with {g}, the core with {e}"
                )));
            }
            (Ok(_), Err(e)) => {
                return Err(wrong(format!("{text}: accepted, the core refuses: {e}")));
            }
            (Err(g), Ok(_)) => {
                return Err(wrong(format!("{text}: refused, the core accepts: {g}")));
            }
            (Ok(g), Ok(e)) => (g, e),
        };
        if !same_values(&got.a_after, &f64s(&self.a)) {
            return Err(Finding::Mutated(format!("{text}: A changed")));
        }
        for (i, (g, e)) in got.factors.iter().zip(&factors).enumerate() {
            close(g, &f64s(e), self.dtype)
                .map_err(|w| wrong(format!("{text}: factor {i}: {w}")))?;
        }
        match (got.grad, grad) {
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
            (Ok(None), Ok(e)) if e.is_empty() => Ok(()),
            (Ok(None), Ok(_)) => Err(wrong(format!("{text}: no gradient of A"))),
            (Ok(Some(g)), Ok(e)) => {
                close(&g, &f64s(&e), self.dtype).map_err(|w| wrong(format!("{text}: Ā: {w}")))
            }
        }
    }
}

/// What an engine did with an accepted input, as row-major `f64`s: the factors (core order
/// and element order), the gradient of `A` (`None`: the engine gave none) or the backward
/// pass's typed error, and `A` after the call.
struct Outcome {
    factors: Vec<Vec<f64>>,
    grad: Result<Option<Vec<f64>>, Error>,
    a_after: Vec<f64>,
}

/// The decomposition of `seed` through `adrules::candle::linalg` on candle's CPU device, and
/// candle's backward pass of the loss.
pub(crate) fn candle(seed: u64) -> Result<(), Finding> {
    let input = Input::new(seed);
    input.compare("candle", candle_run(&input))
}

fn candle_run(input: &Input) -> Result<Outcome, Error> {
    use adrules::candle::candle_core::{DType as CDType, Device, Tensor as CTensor, Var};
    use adrules::candle::{candle_dtype, from_candle, linalg, try_backward};
    let cdt = candle_dtype(input.dtype)?;
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
    let a = Var::from_tensor(&tensor(&input.a)?).map_err(from_candle)?;
    let at = a.as_tensor();
    let factors: Vec<CTensor> = match input.op {
        0 | 1 => {
            let f =
                linalg::svd(at, input.svd_mode(), RuleOptions::default()).map_err(from_candle)?;
            vec![f.u, f.s, f.vh]
        }
        2 | 3 => {
            let f = linalg::qr(at, input.qr_mode()).map_err(from_candle)?;
            vec![f.q, f.r]
        }
        _ => {
            let f = linalg::eigh(at, RuleOptions::default()).map_err(from_candle)?;
            vec![f.values, f.vectors]
        }
    };
    let mut loss: Option<CTensor> = None;
    for (f, w) in factors.iter().zip(&input.cotangents) {
        if let Some(w) = w {
            let term = f
                .mul(&tensor(w)?)
                .and_then(|t| t.sum_all())
                .map_err(from_candle)?;
            loss = Some(match loss {
                None => term,
                Some(l) => (l + term).map_err(from_candle)?,
            });
        }
    }
    let loss = loss.ok_or_else(|| Error::invalid("fuzz", "a loss without a term"))?;
    let grad = match try_backward(&loss) {
        Ok(grads) => Ok(grads.get(at).map(values).transpose()?),
        Err(e) => Err(e),
    };
    Ok(Outcome {
        factors: factors.iter().map(values).collect::<Result<_, _>>()?,
        grad,
        a_after: values(at)?,
    })
}

/// The decomposition of `seed` through `adrules::burn::linalg` on Flex with autodiff, and
/// burn's backward pass of the loss (through `adrules::burn::try_backward`).
pub(crate) fn burn(seed: u64) -> Result<(), Finding> {
    let input = Input::new(seed);
    let got = if input.a.dims().len() == 2 {
        burn_run::<2>(&input)
    } else {
        burn_run::<3>(&input)
    };
    input.compare("burn", got)
}

fn burn_run<const D: usize>(input: &Input) -> Result<Outcome, Error> {
    use adrules::burn::burn_tensor::{DType as BDType, Device, Tensor as BTensor, TensorData};
    use adrules::burn::{linalg, try_backward};
    let device = Device::flex().autodiff();
    let dt = if input.dtype == DType::F64 {
        BDType::F64
    } else {
        BDType::F32
    };
    let values = |t: &BTensor<D>| -> Vec<f64> { t.clone().into_data().iter::<f64>().collect() };
    let dims: [usize; D] = input
        .a
        .dims()
        .try_into()
        .map_err(|_| Error::invalid("fuzz", "a rank other than D"))?;
    let a = BTensor::<D>::from_data(TensorData::new(f64s(&input.a), dims), (&device, dt))
        .require_grad();
    let factors: Vec<BTensor<D>> = match input.op {
        0 | 1 => {
            let f = linalg::svd(&a, input.svd_mode(), RuleOptions::default())?;
            vec![f.u, f.s, f.vh]
        }
        2 | 3 => {
            let f = linalg::qr(&a, input.qr_mode())?;
            vec![f.q, f.r]
        }
        _ => {
            let f = linalg::eigh(&a, RuleOptions::default())?;
            vec![f.values, f.vectors]
        }
    };
    let mut loss: Option<BTensor<1>> = None;
    for (f, w) in factors.iter().zip(&input.cotangents) {
        if let Some(w) = w {
            // the engine's shape (a vector factor keeps a unit axis), the core's values
            let w = BTensor::<D>::from_data(TensorData::new(f64s(w), f.dims()), (&device, dt));
            let term = (f.clone() * w).sum();
            loss = Some(match loss {
                None => term,
                Some(l) => l + term,
            });
        }
    }
    let loss = loss.ok_or_else(|| Error::invalid("fuzz", "a loss without a term"))?;
    let grad = try_backward(&loss).map(|grads| a.grad(&grads).map(|g| values(&g)));
    Ok(Outcome {
        factors: factors.iter().map(values).collect(),
        grad,
        a_after: values(&a),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::Kind;

    /// The comparison fails on a wrong value and passes on a scaled copy's rounding.
    #[test]
    fn close_is_relative_to_the_largest_entry() {
        assert!(close(&[1e300, 2e300], &[1e300, 2e300], DType::F64).is_ok());
        assert!(close(&[1e300, 2.1e300], &[1e300, 2e300], DType::F64).is_err());
        assert!(close(&[1.0], &[1.0, 2.0], DType::F64).is_err());
        assert!(close(&[f64::NAN], &[0.0], DType::F32).is_err());
    }

    /// Every matrix kind and every decomposition occur among the first seeds.
    #[test]
    fn inputs_cover_every_kind_and_op() {
        let mut ops = [false; 5];
        let mut kinds = [false; 8];
        for seed in 0..400 {
            let mut rng = Rng::seed(seed);
            let _ = rng.below(2);
            let k = rng.below(KINDS.len());
            kinds[k] = true;
            ops[Input::new(seed).op] = true;
        }
        assert!(ops.iter().all(|&x| x) && kinds.iter().all(|&x| x));
        assert_eq!(KINDS[0], Kind::Random);
    }

    /// Both engines accept most inputs and return a gradient to compare: the target
    /// checks the backward pass, not only refusals.
    #[test]
    fn most_inputs_reach_the_gradient_comparison() {
        let (mut candle, mut burn) = (0, 0);
        for seed in 0..200 {
            let input = Input::new(seed);
            if matches!(
                candle_run(&input),
                Ok(Outcome {
                    grad: Ok(Some(_)),
                    ..
                })
            ) {
                candle += 1;
            }
            let got = if input.a.dims().len() == 2 {
                burn_run::<2>(&input)
            } else {
                burn_run::<3>(&input)
            };
            if matches!(
                got,
                Ok(Outcome {
                    grad: Ok(Some(_)),
                    ..
                })
            ) {
                burn += 1;
            }
        }
        assert!(
            candle > 60 && burn > 60,
            "candle {candle}, burn {burn} of 200"
        );
    }
}
