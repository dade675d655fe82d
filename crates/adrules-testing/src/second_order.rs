//! [`check_pullback_tangent`]: the test of a rule's second order
//! ([`Pullback::pullback_tangent`](adrules_core::rule::Pullback::pullback_tangent)) against
//! central finite differences of its pullback.

use adrules_core::rule::{self, Rule, SyncBackend};
use adrules_core::{Complex64, Error, HostData, HostTensor, Result};

use crate::Rng;

/// `x + h·d` for host tensors of one shape, in `x`'s dtype.
fn shifted(x: &HostTensor, d: &HostTensor, h: f64) -> Result<HostTensor> {
    let (xv, dv) = (x.data().to_c64_vec(), d.data().to_c64_vec());
    let v: Vec<Complex64> = xv.iter().zip(&dv).map(|(a, b)| a + b * h).collect();
    HostTensor::new(x.dims(), HostData::from_c64_projected(&v, x.dtype()))
}

/// Checks the second order of `rule` at `inputs` (host tensors, on `be`) with seeded random
/// input tangents `ẋ`, output cotangents `ȳ` and their tangents `ȳ̇`: the `x̄` of
/// `pullback_tangent` equals `pullback`'s, and its `ẋ̄` equals the central difference
/// `(x̄(x + h·ẋ, ȳ + h·ȳ̇) − x̄(x − h·ẋ, ȳ − h·ȳ̇))/(2h)` (`h = 10⁻⁶`) within a relative
/// `10⁻⁶` of its norm (double-precision inputs). Returns the largest relative error.
///
/// # Errors
/// The rule's errors; [`Error::InvalidArgument`] naming the rule and the input when a
/// check fails.
pub fn check_pullback_tangent<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[HostTensor],
    seed: u64,
) -> Result<f64> {
    let mut rng = Rng::seed(seed);
    let up = |hs: &[HostTensor]| -> Result<Vec<B::Tensor>> {
        hs.iter().map(|h| be.from_host(h.clone())).collect()
    };
    let xs = up(inputs)?;
    let refs: Vec<&B::Tensor> = xs.iter().collect();
    let active = vec![true; xs.len()];
    let (ys, pb) = rule::rrule(rule, be, &refs, &active)?;
    let ys: Vec<HostTensor> = ys.iter().map(|y| be.to_host(y)).collect::<Result<_>>()?;
    let random = |hs: &[HostTensor], rng: &mut Rng| -> Vec<HostTensor> {
        hs.iter().map(|h| rng.tensor(h.dims(), h.dtype())).collect()
    };
    let (x_dot, y_bar, y_bar_dot) = (
        random(inputs, &mut rng),
        random(&ys, &mut rng),
        random(&ys, &mut rng),
    );
    let some = |v: Vec<B::Tensor>| v.into_iter().map(Some).collect::<Vec<_>>();
    let (bar, dot) = pb.pullback_tangent(
        &some(up(&y_bar)?),
        &some(up(&x_dot)?),
        &some(up(&y_bar_dot)?),
    )?;
    let first = pb.pullback(&some(up(&y_bar)?))?;
    let h = 1e-6;
    let at = |s: f64| -> Result<Vec<Option<B::Tensor>>> {
        let x: Vec<HostTensor> = inputs
            .iter()
            .zip(&x_dot)
            .map(|(x, d)| shifted(x, d, s * h))
            .collect::<Result<_>>()?;
        let c: Vec<HostTensor> = y_bar
            .iter()
            .zip(&y_bar_dot)
            .map(|(c, d)| shifted(c, d, s * h))
            .collect::<Result<_>>()?;
        let xs = up(&x)?;
        let refs: Vec<&B::Tensor> = xs.iter().collect();
        let (_, pb) = rule::rrule(rule, be, &refs, &active)?;
        pb.pullback(&some(up(&c)?))
    };
    let (plus, minus) = (at(1.0)?, at(-1.0)?);
    let mut worst = 0.0f64;
    let host = |t: &Option<B::Tensor>| -> Result<Vec<Complex64>> {
        t.as_ref()
            .map(|t| be.to_host(t).map(|h| h.data().to_c64_vec()))
            .transpose()
            .map(Option::unwrap_or_default)
    };
    for i in 0..inputs.len() {
        let (b0, b1) = (host(&bar[i])?, host(&first[i])?);
        let (d, p, m) = (host(&dot[i])?, host(&plus[i])?, host(&minus[i])?);
        let norm = |v: &[Complex64]| v.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt();
        let diff: Vec<Complex64> = b0.iter().zip(&b1).map(|(a, b)| a - b).collect();
        if norm(&diff) > 1e-12 * norm(&b1).max(1.0) {
            let why = format!("input {i}: pullback_tangent's cotangent differs from pullback's");
            return Err(Error::invalid(format!("rule `{}`", rule.name()), why));
        }
        let fd: Vec<Complex64> = p.iter().zip(&m).map(|(a, b)| (a - b) / (2.0 * h)).collect();
        let err: Vec<Complex64> = d.iter().zip(&fd).map(|(a, b)| a - b).collect();
        let rel = norm(&err) / norm(&fd).max(1.0);
        worst = worst.max(rel);
        if rel > 1e-6 {
            let why = format!(
                "input {i}: the tangent of the cotangent is off finite differences by {rel:e} \
                 (relative)"
            );
            return Err(Error::invalid(format!("rule `{}`", rule.name()), why));
        }
    }
    Ok(worst)
}
