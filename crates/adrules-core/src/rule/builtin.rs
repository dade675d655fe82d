//! adrules' own operations as values of the [`Rule`] trait, so that they run wherever a
//! user's rule runs (the strided backend through [`rrule`](super::rrule), and each engine's
//! `apply_rule`) and [`check_rule`]-style test kits check them like any other rule.
//!
//! | rule | inputs | outputs | pullback (formula and source) |
//! |---|---|---|---|
//! | [`Primitive`] (add, trace, contraction) | the operands, with C first when `β ≠ 0` | `C ← β·C + α·op(…)` | [`Primitive::pullback_at`] (TensorOperations.jl's rules; `MATH.md`, "The primitives") |
//! | [`NetworkPlan`] | the network's operands, in order | the contracted network | [`NetworkPlan::rrule`]: the pairwise steps' pullbacks in reverse |
//! | [`SvdRule`] | `A` `[batch…, m, n]` | `U`, `S` (real), `Vh` | [`SvdPullback::pullback`](crate::linalg::SvdPullback::pullback) (Townsend 2016, Wan & Zhang 2019) |
//! | [`QrRule`] | `A` `[batch…, m, n]` | `Q`, `R` | [`QrPullback::pullback`](crate::linalg::QrPullback::pullback) (Walter & Lehmann 2018, Liao et al. 2019) |
//! | [`EighRule`] | `A` `[batch…, n, n]`, Hermitian (within `√ε·max|A|`) | `λ` (real, ascending), `V` | [`EighPullback::pullback`](crate::linalg::EighPullback::pullback) (Giles 2008) |
//!
//! Each pullback owns what it reads (the primitives' saved operands, the networks' recorded
//! steps, the decompositions' host factors), so each rule [keeps](Rule::keeps) nothing of
//! the [`Primal`]. The entry points users already call (`einsum`, `linalg::svd`, the
//! adapters' functions) are unchanged; these are the same rules seen through the trait.
//!
//! [`check_rule`]: https://docs.rs/adrules-testing/latest/adrules_testing/rule/fn.check_rule.html

use super::{Keeps, Primal, Pullback, Rule, SyncBackend};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::linalg::{
    QrMode, RuleOptions, SvdCotangents, SvdMode, eigh_frule, eigh_rrule, qr_frule, qr_rrule,
    svd_frule, svd_rrule,
};
use crate::network::NetworkPlan;
use crate::rules::{Primitive, Tangents};

type Outputs<B> = (Vec<<B as Backend>::Tensor>, Box<dyn Pullback<B>>);
type Cotangents<B> = Result<Vec<Option<<B as Backend>::Tensor>>>;

/// A pullback of one input for a rule whose cotangents are all absent: `None` for the input.
fn none<B: Backend>(n: usize) -> Cotangents<B> {
    Ok(vec![None; n])
}

impl Primitive {
    /// Whether the rule's inputs start with C: `β ≠ 0`.
    fn with_c(&self) -> bool {
        !self.beta().is_zero()
    }

    /// `(C to update, the operands)` for the rule's inputs.
    fn split_inputs<'x, B: Backend>(
        &self,
        be: &B,
        x: &'x [&'x B::Tensor],
    ) -> Result<(B::Tensor, &'x [&'x B::Tensor])> {
        if self.with_c() {
            Ok((x[0].clone(), &x[1..]))
        } else {
            Ok((self.fresh_output(be, x)?, x))
        }
    }
}

/// `C ← β·C + α·op(operands)` as a rule: `N` = the arity (1 for add and trace, 2 for a
/// contraction) when `β = 0` (a fresh output), plus C as the first input when `β ≠ 0`.
/// α and β are constants of the rule (their cotangents are the primitives' own
/// [`Primitive::pullback_at`] with an [`Activity`](crate::rules::Activity) flag).
impl Rule for Primitive {
    fn name(&self) -> &str {
        Primitive::name(self)
    }

    fn num_inputs(&self) -> usize {
        self.arity() + usize::from(self.with_c())
    }

    fn num_outputs(&self) -> usize {
        1
    }

    /// The operands' shapes against the op's spec and, with `β ≠ 0`, C's shape against the
    /// output's: [`Error::ShapeMismatch`] naming `"c"`, or the spec's errors.
    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        let k = usize::from(self.with_c());
        let dims: Vec<_> = x[k..].iter().map(|t| be.dims(t)).collect();
        let out = self.output_dims(&dims)?;
        if k == 1 && be.dims(x[0]).as_slice() != out.as_slice() {
            return Err(Error::shape("c", &out, &be.dims(x[0])));
        }
        Ok(())
    }

    fn keeps(&self, active: &[bool]) -> Keeps {
        Keeps::none(active.len(), 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        active: &[bool],
    ) -> Result<Outputs<B>> {
        let with_c = self.with_c();
        let (mut c, ops) = self.split_inputs(be, x)?;
        let pb = Primitive::rrule(self, be, &mut c, ops, self.activity(with_c, active))?;
        let (op, n) = (self.clone(), x.len());
        let pullback = move |_: &B, _: &Primal<B>, c_bar: &[Option<B::Tensor>]| -> Cotangents<B> {
            let Some(c_bar) = &c_bar[0] else {
                return none::<B>(n);
            };
            Ok(op
                .cotangents_in_order(pb.pullback(c_bar)?, with_c)
                .into_vec())
        };
        Ok((vec![c], Box::new(pullback)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let k = usize::from(self.with_c());
        let (mut c, ops) = self.split_inputs(be, x)?;
        let t = Tangents {
            c: if k == 1 { dx[0] } else { None },
            a: dx[k],
            b: dx.get(k + 1).copied().flatten(),
            alpha: None,
            beta: None,
        };
        let dc = Primitive::frule(self, be, &mut c, ops, t)?;
        Ok((vec![c], vec![Some(dc)]))
    }

    fn primal<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        let (mut c, ops) = self.split_inputs(be, x)?;
        self.apply(be, &mut c, ops)?;
        Ok(vec![c])
    }
}

/// A planned network as a rule: its operands in, the contracted network out.
impl Rule for NetworkPlan {
    fn name(&self) -> &str {
        "network"
    }

    fn num_inputs(&self) -> usize {
        self.num_operands()
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn keeps(&self, active: &[bool]) -> Keeps {
        Keeps::none(active.len(), 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        active: &[bool],
    ) -> Result<Outputs<B>> {
        let (c, pb) = NetworkPlan::rrule(self, be, x, active)?;
        let n = x.len();
        let pullback = move |_: &B, _: &Primal<B>, c_bar: &[Option<B::Tensor>]| -> Cotangents<B> {
            let Some(c_bar) = &c_bar[0] else {
                return none::<B>(n);
            };
            pb.pullback(c_bar)
        };
        Ok((vec![c], Box::new(pullback)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let (c, dc) = NetworkPlan::frule(self, be, x, dx)?;
        Ok((vec![c], vec![Some(dc)]))
    }

    fn primal<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        Ok(vec![self.execute(be, x)?])
    }
}

/// The singular value decomposition `A = U·diag(S)·Vh` as a rule (see
/// [`svd_rrule`](crate::linalg::svd_rrule) for the shapes of each mode, the gauge and the
/// errors): one input `A`, three outputs `[U, S, Vh]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SvdRule {
    /// thin or full
    pub mode: SvdMode,
    /// degeneracy tolerance, broadening, discarded term
    pub options: RuleOptions,
}

impl Rule for SvdRule {
    fn name(&self) -> &str {
        "svd"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        3
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::none(1, 3)
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        let (out, pb) = svd_rrule(be, x[0], self.mode, self.options)?;
        let pullback = move |_: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
            let (u, s, vh) = (y[0].as_ref(), y[1].as_ref(), y[2].as_ref());
            Ok(vec![Some(pb.pullback(SvdCotangents {
                u,
                s,
                vh,
                discarded: None,
            })?)])
        };
        Ok((vec![out.u, out.s, out.vh], Box::new(pullback)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let Some(dx) = dx[0] else {
            return Ok((self.primal(be, x)?, vec![None, None, None]));
        };
        let (y, t) = svd_frule(be, x[0], dx, self.mode, self.options)?;
        Ok((vec![y.u, y.s, y.vh], vec![Some(t.u), Some(t.s), Some(t.vh)]))
    }
}

/// The QR decomposition `A = Q·R` as a rule (see [`qr_rrule`](crate::linalg::qr_rrule)):
/// one input `A`, two outputs `[Q, R]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QrRule {
    /// reduced or complete
    pub mode: QrMode,
}

impl Rule for QrRule {
    fn name(&self) -> &str {
        "qr"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        2
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::none(1, 2)
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        let (out, pb) = qr_rrule(be, x[0], self.mode)?;
        let pullback = move |_: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
            Ok(vec![Some(pb.pullback(y[0].as_ref(), y[1].as_ref())?)])
        };
        Ok((vec![out.q, out.r], Box::new(pullback)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let Some(dx) = dx[0] else {
            return Ok((self.primal(be, x)?, vec![None, None]));
        };
        let (y, t) = qr_frule(be, x[0], dx, self.mode)?;
        Ok((vec![y.q, y.r], vec![Some(t.q), Some(t.r)]))
    }
}

/// The Hermitian eigendecomposition `A = V·diag(λ)·Vᴴ` (a non-Hermitian `A` is an error) as a rule (see
/// [`eigh_rrule`](crate::linalg::eigh_rrule)): one input `A`, two outputs `[λ, V]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EighRule {
    /// degeneracy tolerance and broadening
    pub options: RuleOptions,
}

impl Rule for EighRule {
    fn name(&self) -> &str {
        "eigh"
    }

    fn num_inputs(&self) -> usize {
        1
    }

    fn num_outputs(&self) -> usize {
        2
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::none(1, 2)
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        let (out, pb) = eigh_rrule(be, x[0], self.options)?;
        let pullback = move |_: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
            Ok(vec![Some(pb.pullback(y[0].as_ref(), y[1].as_ref())?)])
        };
        Ok((vec![out.values, out.vectors], Box::new(pullback)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let Some(dx) = dx[0] else {
            return Ok((self.primal(be, x)?, vec![None, None]));
        };
        let (y, t) = eigh_frule(be, x[0], dx, self.options)?;
        Ok((
            vec![y.values, y.vectors],
            vec![Some(t.values), Some(t.vectors)],
        ))
    }
}
