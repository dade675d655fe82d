//! [`check_rule`]: the test kit for a [`Rule`] (ChainRulesTestUtils' `test_rrule` and
//! `test_frule` in one call).
//!
//! For a rule and a point `x` (its inputs, on any backend), with seeded random output
//! cotangents `ȳ` and input tangents `ẋ` (standard normal entries, the dtypes of the outputs
//! and inputs), it checks:
//! 1. **the pullback against finite differences**: every entry of every input cotangent
//!    `x̄ᵢ` equals the derivative of the real loss `L(x) = Σⱼ Re⟨ȳⱼ, fⱼ(x)⟩` with respect to
//!    that entry (`∂L/∂re + i·∂L/∂im` for a complex entry, the crate's convention), by central
//!    differences ([`FiniteDifference`], on the inputs widened to f64 / c64) within the
//!    input dtype's tolerance;
//! 2. **absent cotangents are zeros**: for each output `j`, the pullback given `ȳⱼ` alone
//!    (the others `None`) equals the pullback given `ȳⱼ` and explicit zeros;
//! 3. **the forward rule**, when the rule has one (anything but [`no_frule`]'s error): its
//!    outputs equal the rrule's, its tangents equal finite differences of the outputs along
//!    `ẋ`, and the adjoint identity `Σⱼ Re⟨ȳⱼ, ẏⱼ⟩ = Σᵢ Re⟨x̄ᵢ, ẋᵢ⟩` holds;
//! 4. **the primal**: [`Rule::primal`] (through the driver) equals the rrule's outputs;
//! 5. **nothing the caller owns changes**: the inputs, the cotangents handed to the pullback
//!    and the tangents handed to the frule read the same, bit for bit, after every call.
//!
//! Every call goes through the core's checked drivers ([`rule::rrule`], [`rule::frule`],
//! [`rule::primal`]), so a rule that breaks its declarations (output count, shapes, a
//! pullback reading an input it did not keep) fails with the driver's typed error. A rule
//! that returns an error, or panics, is a [`RuleCheckError`], never a panic of the check.
//!
//! Use small inputs: the finite differences evaluate the primal 4 times per real entry of
//! every input (8 per complex entry).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use adrules_core::rule::{self, Rule, SyncBackend, no_frule};
use adrules_core::{Complex64, DType, Error, HostTensor};

use crate::fd::FiniteDifference;
use crate::random::Rng;
use crate::tolerance::Tolerance;
use crate::value::Value;

/// How [`check_rule`] checks: the seed of the random cotangents and tangents, the
/// finite-difference scheme, the tolerances, which inputs are active.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleCheck {
    /// seed of the random `ȳ` and `ẋ`
    pub seed: u64,
    /// the finite-difference scheme (default: 4th order, `h = 1e-3`)
    pub fd: FiniteDifference,
    /// the tolerance of every comparison with finite differences, or `None` for the
    /// default of the compared value's dtype: `1e-6` absolute and relative for f64 / c64,
    /// `1e-3` for f32 / c32 ([`Tolerance::for_dtype`] loosened for the differences' error)
    pub tolerance: Option<Tolerance>,
    /// the largest relative mismatch of the adjoint identity accepted, or `None` for the
    /// default: `1e-10` when every input and output is double precision, `1e-4` otherwise
    pub adjoint_tolerance: Option<f64>,
    /// which inputs are active in the rrule (`None`: all); inactive ones must get `None`
    pub active: Option<Vec<bool>>,
}

impl Default for RuleCheck {
    fn default() -> Self {
        RuleCheck {
            seed: 0x5eed,
            fd: FiniteDifference::default(),
            tolerance: None,
            adjoint_tolerance: None,
            active: None,
        }
    }
}

/// What [`check_rule`] measured on a rule that passed.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleReport {
    /// the rule's name
    pub rule: String,
    /// the worst violation ratio of the input cotangents against finite differences (at
    /// most 1)
    pub pullback_ratio: f64,
    /// the forward rule's measurements, `None` for a rule without one
    pub frule: Option<FruleReport>,
    /// the number of primal evaluations the finite differences made
    pub evaluations: usize,
}

/// What [`check_rule`] measured on a forward rule.
#[derive(Clone, Debug, PartialEq)]
pub struct FruleReport {
    /// the worst violation ratio of the output tangents against finite differences
    pub tangent_ratio: f64,
    /// the relative mismatch of the adjoint identity
    pub adjoint_mismatch: f64,
}

/// Why [`check_rule`] failed. Every variant names what disagreed and by how much.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RuleCheckError {
    /// the rule (or its driver, or the backend) returned this error
    Rule(Error),
    /// the rule panicked, with the panic's message
    Panicked(String),
    /// an input cotangent disagrees with finite differences of the loss
    Pullback {
        /// the input
        input: usize,
        /// the worst element and the tolerance
        detail: String,
    },
    /// an inactive input got a cotangent, or an active one none
    Activity {
        /// the input
        input: usize,
        /// what happened
        detail: String,
    },
    /// the pullback with an absent cotangent differs from the one with explicit zeros
    AbsentCotangent {
        /// the output whose cotangent alone was given
        output: usize,
        /// the worst element
        detail: String,
    },
    /// an output of the frule or of the primal differs from the rrule's
    Outputs {
        /// which call (`"frule"`, `"primal"`)
        call: &'static str,
        /// the output and the worst element
        detail: String,
    },
    /// an output tangent of the frule disagrees with finite differences
    Frule {
        /// the output
        output: usize,
        /// the worst element and the tolerance
        detail: String,
    },
    /// the adjoint identity `Σ Re⟨ȳ, ẏ⟩ = Σ Re⟨x̄, ẋ⟩` fails
    Adjoint {
        /// the relative mismatch
        mismatch: f64,
        /// the tolerance
        tolerance: f64,
    },
    /// something the caller owns changed during a call
    Mutated {
        /// what changed (`"input 0"`, `"cotangent 1"`, `"tangent 0"`) and during which call
        what: String,
    },
}

impl fmt::Display for RuleCheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleCheckError::Rule(e) => write!(f, "the rule failed: {e}"),
            RuleCheckError::Panicked(m) => write!(f, "the rule panicked: {m}"),
            RuleCheckError::Pullback { input, detail } => write!(
                f,
                "the cotangent of input {input} disagrees with finite differences: {detail}"
            ),
            RuleCheckError::Activity { input, detail } => write!(f, "input {input}: {detail}"),
            RuleCheckError::AbsentCotangent { output, detail } => write!(
                f,
                "the pullback with only output {output}'s cotangent differs from the one with \
                 explicit zero cotangents: {detail}"
            ),
            RuleCheckError::Outputs { call, detail } => {
                write!(f, "the {call}'s outputs differ from the rrule's: {detail}")
            }
            RuleCheckError::Frule { output, detail } => write!(
                f,
                "the frule's tangent of output {output} disagrees with finite differences: \
                 {detail}"
            ),
            RuleCheckError::Adjoint {
                mismatch,
                tolerance,
            } => write!(
                f,
                "the adjoint identity between frule and rrule fails: relative mismatch \
                 {mismatch:.3e} > {tolerance:.1e}"
            ),
            RuleCheckError::Mutated { what } => write!(f, "{what} changed"),
        }
    }
}

impl std::error::Error for RuleCheckError {}

impl From<Error> for RuleCheckError {
    fn from(e: Error) -> Self {
        RuleCheckError::Rule(e)
    }
}

type Checked<T> = std::result::Result<T, RuleCheckError>;

/// Checks `rule` at the point `inputs` on `be` (see the [module docs](self) for what is
/// checked).
///
/// # Errors
/// The first check that fails, as a [`RuleCheckError`].
///
/// # Example
/// ```
/// use adrules_core::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};
/// use adrules_core::{Backend, Conj, DynScalar, HostTensor, Permutation, Result};
/// use adrules_testing::rule::{RuleCheck, RuleCheckError, check_rule};
/// use adrules_testing::ReferenceBackend;
///
/// /// `y = s·x` for a constant `s`: `x̄ = conj(s)·ȳ`, `ẏ = s·ẋ`.
/// #[derive(Debug)]
/// struct Scale(f64);
///
/// impl Scale {
///     fn scaled<B: Backend>(&self, be: &B, x: &B::Tensor, s: f64) -> Result<B::Tensor> {
///         let mut y = be.empty(&be.dims(x), be.dtype(x))?;
///         let id = Permutation::identity(be.rank(x));
///         be.add(&mut y, x, &id, Conj::No, DynScalar::F64(s), DynScalar::F64(0.0))?;
///         Ok(y)
///     }
/// }
///
/// impl Rule for Scale {
///     fn name(&self) -> &str { "scale" }
///     fn num_inputs(&self) -> usize { 1 }
///     fn num_outputs(&self) -> usize { 1 }
///     fn keeps(&self, _: &[bool]) -> Keeps { Keeps::none(1, 1) }
///     fn rrule<B: SyncBackend>(
///         &self, be: &B, x: &[&B::Tensor], _: &[bool],
///     ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
///         let s = self.0;
///         let pb = move |be: &B, _: &Primal<B>, c: &[Option<B::Tensor>]| -> Result<Vec<Option<B::Tensor>>> {
///             let x_bar = Scale(s).scaled(be, c[0].as_ref().unwrap(), s)?;
///             Ok(vec![Some(x_bar)])
///         };
///         Ok((vec![self.scaled(be, x[0], s)?], Box::new(pb)))
///     }
///     fn frule<B: SyncBackend>(
///         &self, be: &B, x: &[&B::Tensor], dx: &[Option<&B::Tensor>],
///     ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
///         let dy = dx[0].map(|d| self.scaled(be, d, self.0)).transpose()?;
///         Ok((vec![self.scaled(be, x[0], self.0)?], vec![dy]))
///     }
/// }
///
/// # fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
/// let be = ReferenceBackend;
/// let x = be.from_host(HostTensor::from_vec(&[2, 3], vec![1.0, -2.0, 0.5, 3.0, 1.5, -1.0])?)?;
/// let report = check_rule(&Scale(2.5), &be, &[&x], &RuleCheck::default())?;
/// assert!(report.pullback_ratio <= 1.0 && report.frule.is_some());
/// # Ok(())
/// # }
/// ```
pub fn check_rule<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
    config: &RuleCheck,
) -> Checked<RuleReport> {
    match catch_unwind(AssertUnwindSafe(|| run(rule, be, inputs, config))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(RuleCheckError::Panicked(msg))
        }
    }
}

/// The default tolerance of a comparison with finite differences in `dtype`.
fn fd_tolerance(config: &RuleCheck, dtype: DType) -> Tolerance {
    config.tolerance.unwrap_or(if dtype.is_double() {
        Tolerance {
            atol: 1e-6,
            rtol: 1e-6,
        }
    } else {
        Tolerance::for_dtype(dtype)
    })
}

fn host<B: SyncBackend>(be: &B, t: &B::Tensor) -> Checked<HostTensor> {
    Ok(be.to_host(t)?)
}

/// Fails when a value the caller owns no longer reads as `before`.
fn unchanged<B: SyncBackend>(
    be: &B,
    what: &str,
    call: &str,
    t: &B::Tensor,
    before: &HostTensor,
) -> Checked<()> {
    if &host(be, t)? == before {
        Ok(())
    } else {
        let what = format!("{what} (during the {call})");
        Err(RuleCheckError::Mutated { what })
    }
}

fn all_unchanged<B: SyncBackend>(
    be: &B,
    what: &str,
    call: &str,
    ts: &[Option<&B::Tensor>],
    before: &[Option<HostTensor>],
) -> Checked<()> {
    for (k, (t, h)) in ts.iter().zip(before).enumerate() {
        if let (Some(t), Some(h)) = (t, h) {
            unchanged(be, &format!("{what} {k}"), call, t, h)?;
        }
    }
    Ok(())
}

/// `Σⱼ Re⟨aⱼ, bⱼ⟩` and `Σⱼ ‖aⱼ‖·‖bⱼ‖` over present pairs.
fn dot(a: &[Option<Value>], b: &[Option<Value>]) -> Checked<(f64, f64)> {
    let (mut sum, mut scale) = (0.0, 0.0);
    for (a, b) in a.iter().zip(b) {
        if let (Some(a), Some(b)) = (a, b) {
            sum += a.inner(b)?.re;
            scale += a.norm() * b.norm();
        }
    }
    Ok((sum, scale))
}

fn compare(
    tol: Tolerance,
    actual: &Value,
    expected: &Value,
    what: &str,
) -> Checked<Option<String>> {
    Ok(tol.check(actual, expected, what).err())
}

fn run<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
    config: &RuleCheck,
) -> Checked<RuleReport> {
    let n = inputs.len();
    let active = config.active.clone().unwrap_or_else(|| vec![true; n]);
    let x0: Vec<HostTensor> = inputs.iter().map(|t| host(be, t)).collect::<Checked<_>>()?;
    let x0_opt: Vec<Option<HostTensor>> = x0.iter().cloned().map(Some).collect();
    let inputs_opt: Vec<Option<&B::Tensor>> = inputs.iter().map(|&t| Some(t)).collect();
    let mut rng = Rng::seed(config.seed);

    // the rrule, its outputs and random output cotangents
    let (y, pb) = rule::rrule(rule, be, inputs, &active)?;
    all_unchanged(be, "input", "rrule", &inputs_opt, &x0_opt)?;
    let y_host: Vec<HostTensor> = y.iter().map(|t| host(be, t)).collect::<Checked<_>>()?;
    let ybar_host: Vec<HostTensor> = y_host
        .iter()
        .map(|h| rng.tensor(h.dims(), h.dtype()))
        .collect();
    let ybar: Vec<Option<B::Tensor>> = ybar_host
        .iter()
        .map(|h| be.from_host(h.clone()).map(Some))
        .collect::<Result<_, _>>()?;
    let ybar_opt: Vec<Option<HostTensor>> = ybar_host.iter().cloned().map(Some).collect();
    let ybar_refs: Vec<Option<&B::Tensor>> = ybar.iter().map(Option::as_ref).collect();

    // the pullback
    let x_bar = pb.pullback(&ybar)?;
    all_unchanged(be, "input", "pullback", &inputs_opt, &x0_opt)?;
    all_unchanged(be, "cotangent", "pullback", &ybar_refs, &ybar_opt)?;
    let mut x_bar_host = Vec::with_capacity(n);
    for (i, c) in x_bar.iter().enumerate() {
        match (c, active[i]) {
            (Some(c), true) => x_bar_host.push(Some(Value::Tensor(host(be, c)?))),
            (None, false) => x_bar_host.push(None),
            (Some(_), false) => {
                let detail = "is not active but got a cotangent".to_string();
                return Err(RuleCheckError::Activity { input: i, detail });
            }
            (None, true) => {
                let detail = "is active but got no cotangent".to_string();
                return Err(RuleCheckError::Activity { input: i, detail });
            }
        }
    }

    // the primal agrees with the rrule
    let y_primal = rule::primal(rule, be, inputs)?;
    all_unchanged(be, "input", "primal", &inputs_opt, &x0_opt)?;
    same_outputs(be, "primal", &y_primal, &y_host)?;

    // finite differences of L(x) = Σⱼ Re⟨ȳⱼ, fⱼ(x)⟩, entry by entry
    let ybar_values: Vec<Value> = ybar_host.iter().cloned().map(Value::Tensor).collect();
    let loss = |x: &[Value]| -> adrules_core::Result<Value> {
        let t: Vec<B::Tensor> = x
            .iter()
            .map(|v| be.from_host(v.tensor("input")?.clone()))
            .collect::<adrules_core::Result<_>>()?;
        let refs: Vec<&B::Tensor> = t.iter().collect();
        let y = rule::primal(rule, be, &refs)?;
        let mut l = 0.0;
        for (yj, bj) in y.iter().zip(&ybar_values) {
            l += bj.inner(&Value::Tensor(be.to_host(yj)?))?.re;
        }
        Ok(Value::Scalar(adrules_core::DynScalar::F64(l)))
    };
    let x_values: Vec<Value> = x0.iter().cloned().map(Value::Tensor).collect();
    let zeros: Vec<Value> = x_values
        .iter()
        .map(|v| zero_like(&v.widen()))
        .collect::<adrules_core::Result<_>>()?;
    let mut evaluations = 0;
    let mut worst: f64 = 0.0;
    for i in (0..n).filter(|&i| active[i]) {
        let wide = &zeros[i];
        let complex = wide.dtype().is_complex();
        let len = x0[i].len();
        let mut grad = vec![Complex64::new(0.0, 0.0); len];
        for (k, g) in grad.iter_mut().enumerate() {
            for unit in [Complex64::new(1.0, 0.0), Complex64::new(0.0, 1.0)] {
                if unit.im != 0.0 && !complex {
                    continue;
                }
                let mut e = vec![Complex64::new(0.0, 0.0); len];
                e[k] = unit;
                let mut dx = zeros.clone();
                dx[i] = wide.with_values(&e)?;
                let dl = config.fd.jvp(loss, &x_values, &dx)?;
                evaluations += 4;
                *g += unit * dl.to_c64_vec()[0].re;
            }
        }
        let fd = x_values[i].with_values(&grad)?.widen();
        let actual = x_bar_host[i].as_ref().map(Value::widen);
        let actual = actual.ok_or_else(|| Error::invalid("x_bar", "missing"))?;
        let tol = fd_tolerance(config, x0[i].dtype());
        worst = worst.max(tol.ratio(&actual, &fd, "x_bar")?);
        if let Some(detail) = compare(tol, &actual, &fd, &format!("x_bar {i}"))? {
            return Err(RuleCheckError::Pullback { input: i, detail });
        }
    }

    // absent cotangents are zeros
    let m = y.len();
    for j in 0..m {
        let alone: Vec<Option<B::Tensor>> = (0..m)
            .map(|l| if l == j { ybar[l].clone() } else { None })
            .collect();
        let zeroed: Vec<Option<B::Tensor>> = (0..m)
            .map(|l| {
                if l == j {
                    Ok(ybar[l].clone())
                } else {
                    be.zeros(y_host[l].dims(), y_host[l].dtype()).map(Some)
                }
            })
            .collect::<adrules_core::Result<_>>()?;
        let a = pb.pullback(&alone)?;
        let z = pb.pullback(&zeroed)?;
        for (i, (a, z)) in a.iter().zip(&z).enumerate() {
            if let (Some(a), Some(z)) = (a, z) {
                let (a, z) = (Value::Tensor(host(be, a)?), Value::Tensor(host(be, z)?));
                let tol = Tolerance::for_dtype(x0[i].dtype());
                if let Some(detail) = compare(tol, &a, &z, &format!("x_bar {i}"))? {
                    return Err(RuleCheckError::AbsentCotangent { output: j, detail });
                }
            }
        }
    }
    all_unchanged(be, "cotangent", "pullback", &ybar_refs, &ybar_opt)?;

    let frule = check_frule(
        rule,
        be,
        inputs,
        config,
        &mut rng,
        &FruleAt {
            x0: &x0,
            x_values: &x_values,
            y_host: &y_host,
            ybar_values: &ybar_values,
            x_bar: &x_bar_host,
        },
    )?;
    if let Some((_, evals)) = &frule {
        evaluations += evals;
    }
    Ok(RuleReport {
        rule: rule.name().to_string(),
        pullback_ratio: worst,
        frule: frule.map(|f| f.0),
        evaluations,
    })
}

/// What the frule's checks read of the rrule's.
struct FruleAt<'a> {
    x0: &'a [HostTensor],
    x_values: &'a [Value],
    y_host: &'a [HostTensor],
    ybar_values: &'a [Value],
    x_bar: &'a [Option<Value>],
}

/// Fails when `y` does not equal `want` (within the dtype's tolerance).
fn same_outputs<B: SyncBackend>(
    be: &B,
    call: &'static str,
    y: &[B::Tensor],
    want: &[HostTensor],
) -> Checked<()> {
    for (j, (y, w)) in y.iter().zip(want).enumerate() {
        let (a, e) = (Value::Tensor(host(be, y)?), Value::Tensor(w.clone()));
        let tol = Tolerance::for_dtype(w.dtype());
        if let Some(detail) = compare(tol, &a, &e, &format!("output {j}"))? {
            return Err(RuleCheckError::Outputs { call, detail });
        }
    }
    Ok(())
}

/// The frule's checks; `None` for a rule without one.
fn check_frule<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
    config: &RuleCheck,
    rng: &mut Rng,
    at: &FruleAt<'_>,
) -> Checked<Option<(FruleReport, usize)>> {
    let active = config
        .active
        .clone()
        .unwrap_or_else(|| vec![true; inputs.len()]);
    let dx_host: Vec<HostTensor> = at
        .x0
        .iter()
        .zip(&active)
        .map(|(h, &a)| {
            let t = rng.tensor(h.dims(), h.dtype());
            if a {
                Ok(t)
            } else {
                HostTensor::zeros(h.dims(), h.dtype())
            }
        })
        .collect::<adrules_core::Result<_>>()?;
    let dx: Vec<B::Tensor> = dx_host
        .iter()
        .map(|h| be.from_host(h.clone()))
        .collect::<adrules_core::Result<_>>()?;
    let dx_refs: Vec<Option<&B::Tensor>> = dx.iter().map(Some).collect();
    let (y, dy) = match rule::frule(rule, be, inputs, &dx_refs) {
        Err(e) if e == no_frule(be.name(), rule.name()) => return Ok(None),
        r => r?,
    };
    let inputs_opt: Vec<Option<&B::Tensor>> = inputs.iter().map(|&t| Some(t)).collect();
    let x0_opt: Vec<Option<HostTensor>> = at.x0.iter().cloned().map(Some).collect();
    all_unchanged(be, "input", "frule", &inputs_opt, &x0_opt)?;
    let dx_opt: Vec<Option<HostTensor>> = dx_host.iter().cloned().map(Some).collect();
    all_unchanged(be, "tangent", "frule", &dx_refs, &dx_opt)?;
    same_outputs(be, "frule", &y, at.y_host)?;
    let dy_values: Vec<Option<Value>> = dy
        .iter()
        .zip(at.y_host)
        .map(|(d, h)| {
            Ok(Some(match d {
                Some(d) => Value::Tensor(host(be, d)?),
                None => Value::Tensor(HostTensor::zeros(h.dims(), h.dtype())?),
            }))
        })
        .collect::<Checked<_>>()?;

    // the tangents against finite differences of each output along ẋ
    let dx_values: Vec<Value> = dx_host.iter().cloned().map(Value::Tensor).collect();
    let mut worst: f64 = 0.0;
    let mut evaluations = 0;
    for (j, dy) in dy_values.iter().enumerate() {
        let out = |x: &[Value]| -> adrules_core::Result<Value> {
            let t: Vec<B::Tensor> = x
                .iter()
                .map(|v| be.from_host(v.tensor("input")?.clone()))
                .collect::<adrules_core::Result<_>>()?;
            let refs: Vec<&B::Tensor> = t.iter().collect();
            let y = rule::primal(rule, be, &refs)?;
            Ok(Value::Tensor(be.to_host(&y[j])?))
        };
        let fd = config.fd.jvp(out, at.x_values, &dx_values)?;
        evaluations += 4;
        let dy = match dy {
            Some(d) => d.widen(),
            None => zero_like(&fd)?,
        };
        let tol = fd_tolerance(config, at.y_host[j].dtype());
        worst = worst.max(tol.ratio(&dy, &fd.widen(), "y_dot")?);
        if let Some(detail) = compare(tol, &dy, &fd.widen(), &format!("y_dot {j}"))? {
            return Err(RuleCheckError::Frule { output: j, detail });
        }
    }

    // the adjoint identity Σ Re⟨ȳ, ẏ⟩ = Σ Re⟨x̄, ẋ⟩
    let ybar: Vec<Option<Value>> = at.ybar_values.iter().cloned().map(Some).collect();
    let (lhs, s1) = dot(&ybar, &dy_values)?;
    let dx_opt: Vec<Option<Value>> = dx_values.into_iter().map(Some).collect();
    let (rhs, s2) = dot(at.x_bar, &dx_opt)?;
    let mismatch = (lhs - rhs).abs() / (s1 + s2).max(f64::MIN_POSITIVE);
    let double = at
        .x0
        .iter()
        .map(|h| h.dtype())
        .chain(at.y_host.iter().map(|h| h.dtype()));
    let double = double.into_iter().all(DType::is_double);
    let tolerance = config
        .adjoint_tolerance
        .unwrap_or(if double { 1e-10 } else { 1e-4 });
    if mismatch.is_nan() || mismatch > tolerance {
        return Err(RuleCheckError::Adjoint {
            mismatch,
            tolerance,
        });
    }
    let report = FruleReport {
        tangent_ratio: worst,
        adjoint_mismatch: mismatch,
    };
    Ok(Some((report, evaluations)))
}

/// Zeros of `v`'s kind, shape and dtype.
fn zero_like(v: &Value) -> adrules_core::Result<Value> {
    let n = v.to_c64_vec().len();
    v.with_values(&vec![Complex64::new(0.0, 0.0); n])
}
