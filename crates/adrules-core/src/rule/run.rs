//! The drivers of a [`Rule`]: the checks around the user's code that every engine shares.

use std::fmt;
use std::sync::Arc;

use super::{Keeps, Primal, Pullback, Rule, SyncBackend};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::scalar::{DType, DynScalar};
use crate::spec::{Conj, Dims, Permutation};

/// Shape and dtype of an input or output.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Meta {
    pub dims: Dims,
    pub dtype: DType,
}

impl Meta {
    fn of<B: Backend>(be: &B, t: &B::Tensor) -> Self {
        Meta {
            dims: be.dims(t),
            dtype: be.dtype(t),
        }
    }
}

/// [`Error::InvalidArgument`] naming the rule, for a rule that breaks its declarations.
fn broken(name: &str, why: impl Into<String>) -> Error {
    Error::invalid(format!("rule `{name}`"), why)
}

/// Checks `N`, the activity flags' count and the rule's own checks.
fn check_inputs<R: Rule, B: Backend>(rule: &R, be: &B, inputs: &[&B::Tensor]) -> Result<()> {
    let n = rule.num_inputs();
    if n == 0 || rule.num_outputs() == 0 {
        let why = "declares no inputs or no outputs (a rule has at least one of each)";
        return Err(broken(rule.name(), why));
    }
    count("inputs", n, inputs.len())?;
    rule.check(be, inputs)
}

fn count(arg: &str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::CountMismatch {
            arg: arg.into(),
            expected,
            actual,
        })
    }
}

/// Checks that the rule returned `M` outputs.
fn check_outputs<R: Rule, B: Backend>(rule: &R, outputs: &[B::Tensor]) -> Result<()> {
    let m = rule.num_outputs();
    if outputs.len() != m {
        let why = format!("returned {} outputs, declares {m}", outputs.len());
        return Err(broken(rule.name(), why));
    }
    Ok(())
}

/// Checks that `t` has the shape and dtype of `like`, naming `arg`.
fn check_like<B: Backend>(be: &B, arg: &str, t: &B::Tensor, like: &Meta) -> Result<()> {
    let dims = be.dims(t);
    if dims != like.dims {
        return Err(Error::shape(arg, &like.dims, &dims));
    }
    let dtype = be.dtype(t);
    if dtype != like.dtype {
        return Err(Error::DTypeMismatch {
            arg: arg.into(),
            expected: like.dtype.to_string(),
            actual: dtype,
        });
    }
    Ok(())
}

/// The outputs of `rule` on `inputs` (checked: the count, [`Rule::check`], the number of
/// outputs).
///
/// # Errors
/// See the [module docs](super#errors).
pub fn primal<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
) -> Result<Vec<B::Tensor>> {
    check_inputs(rule, be, inputs)?;
    let outputs = rule.primal(be, inputs)?;
    check_outputs::<R, B>(rule, &outputs)?;
    Ok(outputs)
}

/// The outputs of `rule` on `inputs` and their tangents for the input tangents `tangents`
/// (`None`: zero), checked: the counts, the tangents' shapes and dtypes (those of their
/// inputs), [`Rule::check`], the number of outputs and tangents, the output tangents' shapes
/// (those of their outputs; their dtypes are projected onto the outputs').
///
/// # Errors
/// See the [module docs](super#errors); [`Error::Unsupported`] for a rule without a forward
/// rule ([`super::no_frule`]).
#[allow(clippy::type_complexity)]
pub fn frule<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
    tangents: &[Option<&B::Tensor>],
) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
    check_inputs(rule, be, inputs)?;
    count("tangents", inputs.len(), tangents.len())?;
    for (i, (t, x)) in tangents.iter().zip(inputs).enumerate() {
        if let Some(t) = t {
            check_like(be, &format!("tangent {i}"), t, &Meta::of(be, x))?;
        }
    }
    let (outputs, dots) = rule.frule(be, inputs, tangents)?;
    check_outputs::<R, B>(rule, &outputs)?;
    if dots.len() != outputs.len() {
        let why = format!(
            "returned {} output tangents for {} outputs",
            dots.len(),
            outputs.len()
        );
        return Err(broken(rule.name(), why));
    }
    let dots = dots
        .into_iter()
        .zip(&outputs)
        .enumerate()
        .map(|(j, (d, y))| {
            let what = format!("its tangent of output {j}");
            d.map(|d| conform(be, rule.name(), &what, d, &Meta::of(be, y)))
                .transpose()
        })
        .collect::<Result<_>>()?;
    Ok((outputs, dots))
}

/// `t` with `like`'s dtype (projected when it differs), after checking its shape; a wrong
/// shape is the rule's fault.
fn conform<B: Backend>(
    be: &B,
    name: &str,
    what: &str,
    t: B::Tensor,
    like: &Meta,
) -> Result<B::Tensor> {
    let dims = be.dims(&t);
    if dims != like.dims {
        let why = format!("{what} has shape {dims:?}, expected {:?}", like.dims);
        return Err(broken(name, why));
    }
    let dtype = be.dtype(&t);
    if dtype == like.dtype {
        return Ok(t);
    }
    let mut c = be.empty(&like.dims, like.dtype)?;
    let id = Permutation::identity(dims.len());
    let one = DynScalar::one(dtype);
    be.add_projected(&mut c, &t, &id, Conj::No, one, DynScalar::zero(like.dtype))?;
    Ok(c)
}

/// The outputs of `rule` on `inputs` and its checked pullback, for the inputs flagged in
/// `active`: the counts and [`Rule::check`] come first, then [`Rule::rrule`], then the number
/// of outputs and the rule's [`Keeps`]. The pullback holds the kept inputs and outputs (a
/// handle each, no copy), so [`RulePullback::pullback`] needs only the cotangents; an engine
/// that keeps them its own way takes them out with [`RulePullback::take_primal`].
///
/// # Errors
/// See the [module docs](super#errors).
pub fn rrule<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
    active: &[bool],
) -> Result<(Vec<B::Tensor>, RulePullback<B>)> {
    check_inputs(rule, be, inputs)?;
    count("active", inputs.len(), active.len())?;
    let (outputs, pullback) = rule.rrule(be, inputs, active)?;
    check_outputs::<R, B>(rule, &outputs)?;
    let refs: Vec<&B::Tensor> = outputs.iter().collect();
    let pb = checked(rule, be, inputs, &refs, active, pullback)?;
    Ok((outputs, pb))
}

/// The checked pullback of `rule` at the inputs `inputs` and the outputs `outputs` an engine
/// computed itself (it wrote them into its own storage, or recomputes them), for the inputs
/// flagged in `active`, without running the rule's primal: [`Rule::pullback_at`]. `Ok(None)`
/// when the rule has no pullback of its own primal point (its pullback needs what its
/// [`rrule`](Rule::rrule) computes: call [`rrule`]). The checks are [`rrule`]'s, plus the
/// outputs' count.
///
/// # Errors
/// See the [module docs](super#errors).
pub fn pullback_at<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
    outputs: &[&B::Tensor],
    active: &[bool],
) -> Result<Option<RulePullback<B>>> {
    check_inputs(rule, be, inputs)?;
    count("active", inputs.len(), active.len())?;
    count("outputs", rule.num_outputs(), outputs.len())?;
    match rule.pullback_at(be, inputs, outputs, active) {
        None => Ok(None),
        Some(pullback) => checked(rule, be, inputs, outputs, active, pullback?).map(Some),
    }
}

/// The [`RulePullback`] of `pullback` (the rule's keeps checked against the counts; the kept
/// inputs and outputs taken as handles).
fn checked<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    inputs: &[&B::Tensor],
    outputs: &[&B::Tensor],
    active: &[bool],
    pullback: Box<dyn Pullback<B>>,
) -> Result<RulePullback<B>> {
    let keeps = rule.keeps(active);
    if keeps.inputs.len() != inputs.len() || keeps.outputs.len() != outputs.len() {
        let why = format!(
            "keeps {} inputs and {} outputs of {} and {}",
            keeps.inputs.len(),
            keeps.outputs.len(),
            inputs.len(),
            outputs.len()
        );
        return Err(broken(rule.name(), why));
    }
    let pick = |keep: &[bool], all: &[&B::Tensor]| -> Vec<_> {
        all.iter()
            .zip(keep)
            .map(|(&t, &k)| k.then(|| t.clone()))
            .collect()
    };
    let primal = Primal::new(
        pick(&keeps.inputs, inputs),
        pick(&keeps.outputs, outputs),
        active.to_vec(),
    );
    Ok(RulePullback {
        name: rule.name().into(),
        be: be.clone(),
        inner: Arc::from(pullback),
        inputs: inputs.iter().map(|t| Meta::of(be, t)).collect(),
        outputs: outputs.iter().map(|t| Meta::of(be, t)).collect(),
        keeps,
        active: active.to_vec(),
        primal: Some(primal),
    })
}

/// The checked pullback of one [`rrule`] call (cheap to clone: the user's pullback is
/// shared).
///
/// [`pullback`](Self::pullback) checks the output cotangents (count, shapes, dtypes), runs the
/// rule's [`Pullback`] (not at all when every output cotangent is absent: the active inputs
/// then get zeros), and checks what it returns: one entry per input, each of its input's
/// shape, projected onto its input's dtype; an active input left at `None` gets zeros, an
/// inactive one gets `None`.
#[derive(Clone)]
pub struct RulePullback<B: SyncBackend> {
    name: Arc<str>,
    be: B,
    inner: Arc<dyn Pullback<B>>,
    inputs: Vec<Meta>,
    outputs: Vec<Meta>,
    keeps: Keeps,
    active: Vec<bool>,
    primal: Option<Primal<B>>,
}

impl<B: SyncBackend> fmt::Debug for RulePullback<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RulePullback")
            .field("rule", &self.name)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("keeps", &self.keeps)
            .finish_non_exhaustive()
    }
}

impl<B: SyncBackend> RulePullback<B> {
    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The backend of the `rrule` call.
    pub fn backend(&self) -> &B {
        &self.be
    }

    /// The number of inputs `N`.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// The number of outputs `M`.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The shape of input `i` (`None` past the last).
    pub fn input_dims(&self, i: usize) -> Option<&[usize]> {
        self.inputs.get(i).map(|m| m.dims.as_slice())
    }

    /// The dtype of input `i`.
    pub fn input_dtype(&self, i: usize) -> Option<DType> {
        self.inputs.get(i).map(|m| m.dtype)
    }

    /// The shape of output `j`.
    pub fn output_dims(&self, j: usize) -> Option<&[usize]> {
        self.outputs.get(j).map(|m| m.dims.as_slice())
    }

    /// The dtype of output `j`.
    pub fn output_dtype(&self, j: usize) -> Option<DType> {
        self.outputs.get(j).map(|m| m.dtype)
    }

    /// What the pullback reads ([`Rule::keeps`] for this call's activity).
    pub fn keeps(&self) -> &Keeps {
        &self.keeps
    }

    /// Which inputs are active.
    pub fn active(&self) -> &[bool] {
        &self.active
    }

    /// Takes the kept inputs and outputs out of the pullback (for an engine that keeps or
    /// recomputes them itself; hand them back through
    /// [`pullback_with`](Self::pullback_with)). `None` when taken already.
    pub fn take_primal(&mut self) -> Option<Primal<B>> {
        self.primal.take()
    }

    /// Second order: `(x̄, ẋ̄)`, the input cotangents for `cotangents` and their tangents along
    /// the input tangents `tangents` (`N`, `None` zero) and the cotangents' tangents
    /// `cotangent_tangents` (`M`, `None` zero) — with constant cotangents, the
    /// Hessian-vector product `H_φ·ẋ` of `φ = Re Σⱼ⟨ȳⱼ, yⱼ⟩` (see
    /// [`Pullback::pullback_tangent`]). Both checked as [`pullback`](Self::pullback)'s
    /// results are; an inactive input gets `None` in both, an active one whose rule returns
    /// `None` gets zeros.
    ///
    /// # Errors
    /// As [`pullback`](Self::pullback); [`Error::CountMismatch`] (`"tangents"`,
    /// `"cotangent tangents"`), [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming
    /// `"tangent i"` or `"cotangent tangent j"`; [`Error::Unsupported`] when the rule's
    /// pullback has no second order.
    #[allow(clippy::type_complexity)]
    pub fn pullback_tangent(
        &self,
        cotangents: &[Option<B::Tensor>],
        tangents: &[Option<B::Tensor>],
        cotangent_tangents: &[Option<B::Tensor>],
    ) -> Result<(Vec<Option<B::Tensor>>, Vec<Option<B::Tensor>>)> {
        let be = &self.be;
        let primal = self.primal.as_ref().ok_or_else(|| {
            Error::invalid("primal", "taken out of the pullback: use `pullback_with`")
        })?;
        count("cotangents", self.outputs.len(), cotangents.len())?;
        count("tangents", self.inputs.len(), tangents.len())?;
        count(
            "cotangent tangents",
            self.outputs.len(),
            cotangent_tangents.len(),
        )?;
        for (j, meta) in self.outputs.iter().enumerate() {
            if let Some(c) = &cotangents[j] {
                check_like(be, &format!("cotangent {j}"), c, meta)?;
            }
            if let Some(c) = &cotangent_tangents[j] {
                check_like(be, &format!("cotangent tangent {j}"), c, meta)?;
            }
        }
        for (i, meta) in self.inputs.iter().enumerate() {
            if let Some(t) = &tangents[i] {
                check_like(be, &format!("tangent {i}"), t, meta)?;
            }
        }
        let (bar, dot) = self
            .inner
            .pullback_tangent(be, primal, cotangents, tangents, cotangent_tangents)
            .ok_or_else(|| Error::Unsupported {
                backend: be.name().into(),
                what: format!("second order (pullback_tangent) of rule `{}`", self.name),
            })??;
        if bar.len() != self.inputs.len() || dot.len() != self.inputs.len() {
            let why = format!(
                "its pullback_tangent returned {} and {} cotangents for {} inputs",
                bar.len(),
                dot.len(),
                self.inputs.len()
            );
            return Err(broken(&self.name, why));
        }
        let fix = |xs: Vec<Option<B::Tensor>>, what: &str| -> Result<Vec<Option<B::Tensor>>> {
            xs.into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let m = &self.inputs[i];
                    match (c, self.active.get(i) == Some(&true)) {
                        (Some(c), true) => {
                            let what = format!("its {what} of input {i}");
                            conform(be, &self.name, &what, c, m).map(Some)
                        }
                        (None, true) => be.zeros(&m.dims, m.dtype).map(Some),
                        _ => Ok(None),
                    }
                })
                .collect()
        };
        Ok((fix(bar, "cotangent")?, fix(dot, "cotangent tangent")?))
    }

    /// The cotangents of the inputs for the output cotangents `cotangents` (`M` of them,
    /// `None`: zero), from the inputs and outputs kept by [`rrule`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`"primal"`) when [`take_primal`](Self::take_primal) took
    /// them; otherwise as [`pullback_with`](Self::pullback_with).
    pub fn pullback(&self, cotangents: &[Option<B::Tensor>]) -> Result<Vec<Option<B::Tensor>>> {
        let primal = self.primal.as_ref().ok_or_else(|| {
            Error::invalid("primal", "taken out of the pullback: use `pullback_with`")
        })?;
        self.pullback_on(&self.be, primal, cotangents)
    }

    /// [`pullback`](Self::pullback) from the kept inputs and outputs `primal` (those
    /// [`keeps`](Self::keeps) names must be present), on the backend of the `rrule` call.
    ///
    /// # Errors
    /// As [`pullback_on`](Self::pullback_on).
    pub fn pullback_with(
        &self,
        primal: &Primal<B>,
        cotangents: &[Option<B::Tensor>],
    ) -> Result<Vec<Option<B::Tensor>>> {
        self.pullback_on(&self.be, primal, cotangents)
    }

    /// [`pullback_with`](Self::pullback_with) on `be` (a backend value for the cotangents'
    /// device, as an engine builds one in its backward pass).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"cotangents"`); [`Error::ShapeMismatch`] or
    /// [`Error::DTypeMismatch`] naming `"cotangent j"` for a cotangent unlike output `j`;
    /// [`Error::InvalidArgument`] (`"primal"`) when a kept input or output is missing; the
    /// rule's own errors; [`Error::InvalidArgument`] naming the rule when its pullback
    /// returns a wrong number of cotangents or one of a wrong shape.
    pub fn pullback_on(
        &self,
        be: &B,
        primal: &Primal<B>,
        cotangents: &[Option<B::Tensor>],
    ) -> Result<Vec<Option<B::Tensor>>> {
        count("cotangents", self.outputs.len(), cotangents.len())?;
        for (j, (c, meta)) in cotangents.iter().zip(&self.outputs).enumerate() {
            if let Some(c) = c {
                check_like(be, &format!("cotangent {j}"), c, meta)?;
            }
        }
        let keeps = self.keeps.inputs.iter().zip(primal.inputs());
        let outs = self.keeps.outputs.iter().zip(primal.outputs());
        let missing = keeps.chain(outs).any(|(&k, t)| k && t.is_none())
            || primal.inputs().len() != self.inputs.len()
            || primal.outputs().len() != self.outputs.len()
            || primal.activity() != self.active;
        if missing {
            let why = format!(
                "lacks an input or output that rule `{}` keeps, or has another activity",
                self.name
            );
            return Err(Error::invalid("primal", why));
        }
        let active = &self.active;
        let zeros = |i: usize| -> Result<Option<B::Tensor>> {
            let m = &self.inputs[i];
            let on = active.get(i) == Some(&true);
            on.then(|| be.zeros(&m.dims, m.dtype)).transpose()
        };
        if cotangents.iter().all(Option::is_none) {
            return (0..self.inputs.len()).map(zeros).collect();
        }
        let x_bar = self.inner.pullback(be, primal, cotangents)?;
        if x_bar.len() != self.inputs.len() {
            let why = format!(
                "its pullback returned {} cotangents for {} inputs",
                x_bar.len(),
                self.inputs.len()
            );
            return Err(broken(&self.name, why));
        }
        x_bar
            .into_iter()
            .enumerate()
            .map(|(i, c)| match c {
                Some(c) if active.get(i) == Some(&true) => {
                    let what = format!("its cotangent of input {i}");
                    conform(be, &self.name, &what, c, &self.inputs[i]).map(Some)
                }
                _ => zeros(i),
            })
            .collect()
    }
}
