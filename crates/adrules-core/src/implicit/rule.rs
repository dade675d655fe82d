//! A solved implicit function as a [`Rule`]: its [`Linearization`] at the solution, recorded
//! by every engine's one bridge (candle's and dfdx's `implicit`, or
//! [`rule::rrule`](crate::rule::rrule) on any backend).
//!
//! The solver runs once, outside the rule (on host tensors, never differentiated); the rule
//! is the implicit function *at that point*: its output is the solution `y` and its pullback
//! and pushforward are the implicit function theorem's (Blondel et al. 2022, eq. (2)–(3);
//! ImplicitDifferentiation.jl; JAXopt `root_vjp`/`root_jvp`), with `A = ∂c/∂y` and
//! `B = ∂c/∂x` at the solution:
//! - pullback: solve `Aᴴ·u = −ȳ`, then `x̄ = Bᴴ·u` ([`Linearization::vjp`]);
//! - pushforward: solve `A·ẏ = −B·ẋ` ([`Linearization::jvp`]).

use super::ImplicitScalar;
use super::function::Linearization;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};

/// The implicit function at the solution this linearization was built at (by
/// [`ImplicitFunction::vjp`](super::ImplicitFunction::vjp) or
/// [`linearize`](super::ImplicitFunction::linearize)), as a rule of `N` inputs (the `x` the
/// solver saw, in order and shape) and one output (the solution `y`, a copy of
/// [`Linearization::y`] on the backend).
///
/// The rule does not re-solve: its inputs' *values* are those it was solved at (the engines'
/// `implicit` entries pass exactly them), so it is a rule of one call, not a function to
/// check by finite differences (check the [`ImplicitFunction`](super::ImplicitFunction)
/// itself with its host checks). Its pullback keeps nothing of the primal (the
/// linearization owns the maps and the prepared solver); it moves the cotangent to the host,
/// solves there and moves `x̄` back.
impl<T: ImplicitScalar> Rule for Linearization<T> {
    fn name(&self) -> &str {
        "implicit"
    }

    fn num_inputs(&self) -> usize {
        self.input_dims().len()
    }

    fn num_outputs(&self) -> usize {
        1
    }

    /// Each input has the shape the solver saw ([`Error::ShapeMismatch`] naming `"x[i]"`) and
    /// the linearization's dtype ([`Error::DTypeMismatch`] naming `"x[i]"`).
    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        for (i, (t, dims)) in x.iter().zip(self.input_dims()).enumerate() {
            let arg = format!("x[{i}]");
            if be.dims(t).as_slice() != dims.as_slice() {
                return Err(Error::shape(arg, dims, &be.dims(t)));
            }
            if be.dtype(t) != T::DTYPE {
                return Err(Error::DTypeMismatch {
                    arg,
                    expected: T::DTYPE.to_string(),
                    actual: be.dtype(t),
                });
            }
        }
        Ok(())
    }

    fn keeps(&self, active: &[bool]) -> Keeps {
        Keeps::none(active.len(), 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        _x: &[&B::Tensor],
        _active: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let y = be.from_host(self.y().clone())?;
        let lin = self.clone();
        let pullback = move |be: &B, p: &Primal<B>, y_bar: &[Option<B::Tensor>]| {
            let n = p.activity().len();
            let Some(y_bar) = &y_bar[0] else {
                return Ok(vec![None; n]);
            };
            let x_bar = lin.vjp(&be.to_host(y_bar)?)?;
            x_bar
                .into_iter()
                .zip(p.activity())
                .map(|(g, &a)| a.then(|| be.from_host(g)).transpose())
                .collect()
        };
        Ok((vec![y], Box::new(pullback)))
    }

    /// `ẏ = J·ẋ` by one solve; absent tangents are zeros (none at all: a zero `ẏ`, no solve).
    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        _x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let y = be.from_host(self.y().clone())?;
        if dx.iter().all(Option::is_none) {
            return Ok((vec![y], vec![None]));
        }
        let dx = dx
            .iter()
            .zip(self.input_dims())
            .map(|(t, dims)| match t {
                Some(t) => be.to_host(t),
                None => HostTensor::zeros(dims, T::DTYPE),
            })
            .collect::<Result<Vec<_>>>()?;
        let dy = be.from_host(self.jvp(&dx)?)?;
        Ok((vec![y], vec![Some(dy)]))
    }

    fn primal<B: SyncBackend>(&self, be: &B, _x: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        Ok(vec![be.from_host(self.y().clone())?])
    }
}
