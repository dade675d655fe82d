//! Small [`Rule`]s with known derivatives, for the tests of the engines' rule bridges (the
//! same rule through candle, burn, dfdx and the strided backend) and as templates for a
//! rule author. Each is written with the [`Backend`] primitives only, so it runs on every
//! backend; each has an frule, so [`check_rule`](crate::rule::check_rule) checks the adjoint
//! identity too.
//!
//! | rule | inputs | outputs | pullback | keeps |
//! |---|---|---|---|---|
//! | [`Mul`] | `a`, `b` (one shape) | `a ⊙ b` | `ā = conj(b) ⊙ ȳ`, `b̄ = conj(a) ⊙ ȳ` | both inputs |
//! | [`Split`] | `x` | `3·x`, `x ⊙ x` | `x̄ = 3·ȳ₀ + 2·conj(x) ⊙ ȳ₁` | the input |
//! | [`Fma`] | `a`, `b`, `c` (one shape) | `a ⊙ b + c` | `ā = conj(b) ⊙ ȳ`, `b̄ = conj(a) ⊙ ȳ`, `c̄ = ȳ` | `a`, `b` |
//! | [`Failing`] | `x` | `x` | fails with [`Error::InvalidArgument`] (`"failing"`) | nothing |

use adrules_core::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};
use adrules_core::{Backend, Conj, ContractSpec, DynScalar, Error, Permutation, Result};

/// `x ⊙ y` (the elementwise product: a contraction whose axes are all batch axes), `conj(x)`
/// when `conj` says so, in the joined dtype.
///
/// # Errors
/// The backend's (shapes that differ: [`Error::ShapeMismatch`]); ranks above 52.
pub fn hadamard<B: Backend>(be: &B, x: &B::Tensor, y: &B::Tensor, conj: Conj) -> Result<B::Tensor> {
    let labels: String = ('a'..='z').chain('A'..='Z').take(be.rank(x)).collect();
    let spec = ContractSpec::from_labels(&labels, &labels, &labels)?;
    let dtype = be.dtype(x).join(be.dtype(y));
    let mut c = be.empty(&be.dims(x), dtype)?;
    let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
    be.contract(&mut c, x, y, &spec, conj, Conj::No, one, zero)?;
    Ok(c)
}

/// `c ← c + s·x`.
///
/// # Errors
/// The backend's.
pub fn axpy<B: Backend>(be: &B, c: &mut B::Tensor, s: f64, x: &B::Tensor) -> Result<()> {
    let id = Permutation::identity(be.rank(x));
    be.add(c, x, &id, Conj::No, DynScalar::F64(s), DynScalar::F64(1.0))
}

/// `Σ sᵢ·xᵢ` over the present `xᵢ` (zeros of `like`'s shape and dtype for none).
fn combination<B: Backend>(
    be: &B,
    like: &B::Tensor,
    terms: &[(f64, Option<B::Tensor>)],
) -> Result<B::Tensor> {
    let mut c = be.zeros(&be.dims(like), be.dtype(like))?;
    for (s, x) in terms {
        if let Some(x) = x {
            axpy(be, &mut c, *s, x)?;
        }
    }
    Ok(c)
}

/// Checks that the inputs share one shape (argument `"input i"`).
fn same_shapes<B: Backend>(be: &B, x: &[&B::Tensor]) -> Result<()> {
    let d0 = be.dims(x[0]);
    for (i, t) in x.iter().enumerate().skip(1) {
        let d = be.dims(t);
        if d != d0 {
            return Err(Error::shape(format!("input {i}"), &d0, &d));
        }
    }
    Ok(())
}

type Cot<B> = Vec<Option<<B as Backend>::Tensor>>;

/// `y = a ⊙ b` (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mul;

impl Rule for Mul {
    fn name(&self) -> &str {
        "mul"
    }

    fn num_inputs(&self) -> usize {
        2
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        same_shapes(be, x)
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::inputs(2, 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let pb = |be: &B, x: &Primal<B>, c: &[Option<B::Tensor>]| -> Result<Cot<B>> {
            let (a, b, c) = (x.input(0)?, x.input(1)?, c[0].as_ref());
            let bar = |other: &B::Tensor, i: usize| match (x.active(i), c) {
                (true, Some(c)) => hadamard(be, other, c, Conj::Yes).map(Some),
                _ => Ok(None),
            };
            Ok(vec![bar(b, 0)?, bar(a, 1)?])
        };
        Ok((vec![hadamard(be, x[0], x[1], Conj::No)?], Box::new(pb)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Cot<B>)> {
        let y = hadamard(be, x[0], x[1], Conj::No)?;
        let da = dx[0].map(|d| hadamard(be, d, x[1], Conj::No)).transpose()?;
        let db = dx[1].map(|d| hadamard(be, x[0], d, Conj::No)).transpose()?;
        let dy = combination(be, &y, &[(1.0, da), (1.0, db)])?;
        Ok((vec![y], vec![Some(dy)]))
    }
}

/// `(y₀, y₁) = (3·x, x ⊙ x)` (see the module docs): a two-output rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split;

impl Rule for Split {
    fn name(&self) -> &str {
        "split"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        2
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::inputs(1, 2)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let pb = |be: &B, p: &Primal<B>, c: &[Option<B::Tensor>]| -> Result<Cot<B>> {
            let x = p.input(0)?;
            let sq = c[1]
                .as_ref()
                .map(|c| hadamard(be, x, c, Conj::Yes))
                .transpose()?;
            Ok(vec![Some(combination(
                be,
                x,
                &[(3.0, c[0].clone()), (2.0, sq)],
            )?)])
        };
        let y0 = combination(be, x[0], &[(3.0, Some(x[0].clone()))])?;
        let y1 = hadamard(be, x[0], x[0], Conj::No)?;
        Ok((vec![y0, y1], Box::new(pb)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Cot<B>)> {
        let y0 = combination(be, x[0], &[(3.0, Some(x[0].clone()))])?;
        let y1 = hadamard(be, x[0], x[0], Conj::No)?;
        let Some(d) = dx[0] else {
            return Ok((vec![y0, y1], vec![None, None]));
        };
        let d0 = combination(be, x[0], &[(3.0, Some(d.clone()))])?;
        let d1 = combination(be, &y1, &[(2.0, Some(hadamard(be, x[0], d, Conj::No)?))])?;
        Ok((vec![y0, y1], vec![Some(d0), Some(d1)]))
    }
}

/// `y = a ⊙ b + c` (see the module docs): three inputs, of which the pullback keeps two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fma;

impl Rule for Fma {
    fn name(&self) -> &str {
        "fma"
    }

    fn num_inputs(&self) -> usize {
        3
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        same_shapes(be, x)
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps {
            inputs: vec![true, true, false],
            outputs: vec![false],
        }
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let (mut out, mul) = Mul.rrule(be, &x[..2], &active[..2])?;
        let mut y = out.remove(0);
        axpy(be, &mut y, 1.0, x[2])?;
        let pb = move |be: &B, p: &Primal<B>, c: &[Option<B::Tensor>]| -> Result<Cot<B>> {
            let ab = Primal::new(
                p.inputs()[..2].to_vec(),
                vec![None],
                p.activity()[..2].to_vec(),
            );
            let mut bar = mul.pullback(be, &ab, c)?;
            bar.push(c[0].clone().filter(|_| p.active(2)));
            Ok(bar)
        };
        Ok((vec![y], Box::new(pb)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Cot<B>)> {
        let (mut y, mut dy) = Mul.frule(be, &x[..2], &dx[..2])?;
        axpy(be, &mut y[0], 1.0, x[2])?;
        if let (Some(d), Some(dc)) = (&mut dy[0], dx[2]) {
            axpy(be, d, 1.0, dc)?;
        }
        Ok((y, dy))
    }
}

/// `y = x` with a pullback that always fails (see the module docs): for the tests of the
/// engines' reporting of failures inside backward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Failing;

impl Rule for Failing {
    fn name(&self) -> &str {
        "failing"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::none(1, 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let pb = |_: &B, _: &Primal<B>, _: &[Option<B::Tensor>]| -> Result<Cot<B>> {
            Err(Error::invalid("failing", "this pullback always fails"))
        };
        let y = combination(be, x[0], &[(1.0, Some(x[0].clone()))])?;
        Ok((vec![y], Box::new(pb)))
    }
}
