//! adrules' own operations as values of the [`Rule`] trait, so that they run wherever a
//! user's rule runs (the strided backend through [`rrule`](super::rrule), and each engine's
//! `apply_rule`) and [`check_rule`]-style test kits check them like any other rule.
//!
//! | rule | inputs | outputs | pullback (formula and source) |
//! |---|---|---|---|
//! | [`PrimitiveCall`], [`Primitive`] (add, trace, contraction) | the operands, with C first (a [`Primitive`]: when `β ≠ 0`) | `C ← β·C + α·op(…)` | [`Primitive::pullback_at`] (TensorOperations.jl's rules; `MATH.md`, "The primitives") |
//! | [`NetworkPlan`] | the network's operands, in order | the contracted network | [`NetworkPlan::rrule`]: the pairwise steps' pullbacks in reverse |
//! | [`SvdRule`] | `A` `[batch…, m, n]` | `U`, `S` (real), `Vh` | [`SvdPullback::pullback`](crate::linalg::SvdPullback::pullback) (Townsend 2016, Wan & Zhang 2019) |
//! | [`QrRule`] | `A` `[batch…, m, n]` | `Q`, `R` | [`QrPullback::pullback`](crate::linalg::QrPullback::pullback) (Walter & Lehmann 2018, Liao et al. 2019) |
//! | [`TruncatedSvdRule`] | `A` `[batch…, m, n]` | `U`, `S`, `Vh`, the discarded values | as [`SvdRule`], with the discarded subspace's term |
//! | [`ClusteredEighRule`] | `A` `[batch…, n, n]`, Hermitian; `G` a constant | `W`, `C' = Wᴴ·A·W` | [`ClusteredEighPullback::pullback`](crate::linalg::ClusteredEighPullback::pullback) (Kato's projector derivative) |
//! | [`EighRule`] | `A` `[batch…, n, n]`, Hermitian (within `√ε·max|A|`) | `λ` (real, ascending), `V` | [`EighPullback::pullback`](crate::linalg::EighPullback::pullback) (Giles 2008) |
//!
//! Each pullback owns what it reads (the primitives' saved operands, the networks' recorded
//! steps, the decompositions' host factors), so each rule [keeps](Rule::keeps) nothing of
//! the [`Primal`], but the primitives, which keep the operands a cotangent reads (an engine
//! then keeps them its own way). The entry points users already call (`einsum`,
//! `linalg::svd`, the adapters' functions) are unchanged; these are the same rules seen
//! through the trait.
//!
//! [`check_rule`]: https://docs.rs/adrules-testing/latest/adrules_testing/rule/fn.check_rule.html

use super::{Keeps, Primal, Pullback, Rule, SyncBackend};
use crate::backend::Backend;
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex, PoisonError};

use crate::host::HostTensor;
use crate::linalg::{
    ClusterInfo, ClusterOptions, ClusteredEigh, QrMode, RuleOptions, SvdCotangents, SvdMode,
    Truncation, eigh_clustered_frule, eigh_clustered_rrule, eigh_frule, eigh_rrule, qr_frule,
    qr_rrule, svd_frule, svd_rrule, svd_truncated_frule, svd_truncated_rrule,
};
use crate::network::NetworkPlan;
use crate::rules::{Primitive, Tangents};

type Outputs<B> = (Vec<<B as Backend>::Tensor>, Box<dyn Pullback<B>>);
type Cotangents<B> = Result<Vec<Option<<B as Backend>::Tensor>>>;

/// The methods every decomposition rule shares: the name, one input `A`, `$m` outputs, and
/// nothing kept (the pullback owns the factors it reads, on the host).
macro_rules! decomposition_rule {
    ($name:literal, $m:literal) => {
        fn name(&self) -> &str {
            $name
        }

        fn num_inputs(&self) -> usize {
            1
        }

        fn num_outputs(&self) -> usize {
            $m
        }

        fn keeps(&self, _: &[bool]) -> Keeps {
            Keeps::none(1, $m)
        }
    };
}

/// The `frule` of a rule along a zero tangent: the outputs, every tangent `None`.
///
/// # Errors
/// Those of the rule's primal.
#[allow(clippy::type_complexity)]
fn absent_tangent<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    x: &[&B::Tensor],
) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
    Ok((rule.primal(be, x)?, vec![None; rule.num_outputs()]))
}

/// A pullback of one input for a rule whose cotangents are all absent: `None` for the input.
fn none<B: Backend>(n: usize) -> Cotangents<B> {
    Ok(vec![None; n])
}

/// One call of a [`Primitive`] as a rule, with or without C among its inputs: the operands
/// in order (`[A]` for add and trace, `[A, B]` for a contraction), and C first when
/// `with_c` (`[C, A]`, `[C, A, B]`) to compute `C ← β·C + α·op(…)`. Without C the output is
/// fresh and β must be zero; with C and `β = 0`, C is not read and its cotangent is
/// `conj(β)·C̄ = 0`. α and β are constants of the rule.
///
/// [`Primitive`] itself is a rule too: with C exactly when `β ≠ 0`.
#[derive(Clone, Debug, PartialEq)]
pub struct PrimitiveCall {
    op: Primitive,
    with_c: bool,
}

impl PrimitiveCall {
    /// The call of `op` with `inputs` tensors (its arity, or one more with C first).
    ///
    /// # Errors
    /// Those of [`Primitive::takes_c`]: [`Error::CountMismatch`] (`"inputs"`), or
    /// [`Error::InvalidArgument`] (`"beta"`) for a nonzero β without C.
    pub fn new(op: Primitive, inputs: usize) -> Result<Self> {
        let with_c = op.takes_c(inputs)?;
        Ok(PrimitiveCall { op, with_c })
    }

    /// The primitive.
    pub fn op(&self) -> &Primitive {
        &self.op
    }

    /// Whether the inputs start with C.
    pub fn with_c(&self) -> bool {
        self.with_c
    }

    /// `(C to update, the operands)` for the rule's inputs.
    fn split_inputs<'x, B: Backend>(
        &self,
        be: &B,
        x: &'x [&'x B::Tensor],
    ) -> Result<(B::Tensor, &'x [&'x B::Tensor])> {
        if self.with_c {
            Ok((x[0].clone(), &x[1..]))
        } else {
            Ok((self.op.fresh_output(be, x)?, x))
        }
    }

    /// The pullback of this call on the inputs `x` with output (or C) `c`: it reads the
    /// operands it keeps from the [`Primal`] and the shapes and dtypes recorded here
    /// ([`Primitive::pullback_saved`]).
    fn pullback_for<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        c: &B::Tensor,
    ) -> Box<dyn Pullback<B>> {
        let (with_c, k) = (self.with_c, usize::from(self.with_c));
        let c_meta = (be.dims(c), be.dtype(c));
        let metas: Vec<_> = x[k..].iter().map(|t| (be.dims(t), be.dtype(t))).collect();
        let (op, n) = (self.op.clone(), x.len());
        let pullback = move |be: &B, p: &Primal<B>, c_bar: &[Option<B::Tensor>]| -> Cotangents<B> {
            let Some(c_bar) = &c_bar[0] else {
                return none::<B>(n);
            };
            let act = op.activity(with_c, p.activity());
            let kept = |(j, (dims, dtype)): (usize, &(crate::Dims, crate::DType))| {
                let t = p.inputs().get(j + k).cloned().flatten();
                (dims.clone(), *dtype, t)
            };
            let operands: Vec<_> = metas.iter().enumerate().map(kept).collect();
            let pb = op.pullback_saved(be, c_meta.clone(), &operands, act)?;
            Ok(op
                .cotangents_in_order(pb.pullback(c_bar)?, with_c)
                .into_vec())
        };
        Box::new(pullback)
    }
}

impl From<Primitive> for PrimitiveCall {
    /// With C exactly when `β ≠ 0`.
    fn from(op: Primitive) -> Self {
        let with_c = !op.beta().is_zero();
        PrimitiveCall { op, with_c }
    }
}

/// `C ← β·C + α·op(operands)` as a rule: `N` = the arity (1 for add and trace, 2 for a
/// contraction), plus C as the first input with C. α and β are constants of the rule
/// (their cotangents are the primitives' own [`Primitive::pullback_at`] with an
/// [`Activity`](crate::rules::Activity) flag).
///
/// The pullback reads the operands from the [`Primal`]: the rule
/// [keeps](Rule::keeps) exactly the operands a cotangent reads
/// ([`Primitive::reads_operand`]: a contraction's `Ā` reads B and `B̄` reads A; add and
/// trace read none) and never C, so an engine keeps them its own way (burn through its
/// checkpointer). Add and trace are [memory bound](Rule::memory_bound), a contraction is not.
impl Rule for PrimitiveCall {
    fn name(&self) -> &str {
        self.op.name()
    }

    fn num_inputs(&self) -> usize {
        self.op.arity() + usize::from(self.with_c)
    }

    fn num_outputs(&self) -> usize {
        1
    }

    /// C has the output's rank, the operands their spec's.
    fn input_rank(&self, i: usize) -> Option<usize> {
        match i.checked_sub(usize::from(self.with_c)) {
            None => Some(self.op.output_rank()),
            Some(k) => self.op.operand_rank(k),
        }
    }

    /// Add and trace: a permutation or a sum is cheaper to recompute than to keep.
    fn memory_bound(&self) -> bool {
        !matches!(self.op, Primitive::Contract(_))
    }

    /// The operands' shapes against the op's spec and, with `β ≠ 0`, C's shape against the
    /// output's: [`Error::ShapeMismatch`] naming `"c"`, or the spec's errors.
    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        let k = usize::from(self.with_c);
        let dims: Vec<_> = x[k..].iter().map(|t| be.dims(t)).collect();
        let out = self.op.output_dims(&dims)?;
        if k == 1 && be.dims(x[0]).as_slice() != out.as_slice() {
            return Err(Error::shape("c", &out, &be.dims(x[0])));
        }
        Ok(())
    }

    /// The operands a cotangent reads, never C, no output.
    fn keeps(&self, active: &[bool]) -> Keeps {
        let with_c = self.with_c;
        let (k, act) = (usize::from(with_c), self.op.activity(with_c, active));
        Keeps {
            inputs: (0..active.len())
                .map(|i| i >= k && self.op.reads_operand(i - k, act))
                .collect(),
            outputs: vec![false],
        }
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _active: &[bool],
    ) -> Result<Outputs<B>> {
        let (mut c, ops) = self.split_inputs(be, x)?;
        let pullback = self.pullback_for(be, x, &c);
        self.op.apply(be, &mut c, ops)?;
        Ok((vec![c], pullback))
    }

    /// The pullback reads only the operands it keeps and the shapes and dtypes: an engine
    /// that wrote C itself gets it without running the primitive.
    fn pullback_at<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        outputs: &[&B::Tensor],
        _active: &[bool],
    ) -> Option<Result<Box<dyn Pullback<B>>>> {
        Some(Ok(self.pullback_for(be, x, outputs[0])))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let k = usize::from(self.with_c);
        let (mut c, ops) = self.split_inputs(be, x)?;
        let t = Tangents {
            c: if k == 1 { dx[0] } else { None },
            a: dx[k],
            b: dx.get(k + 1).copied().flatten(),
            alpha: None,
            beta: None,
        };
        let dc = self.op.frule(be, &mut c, ops, t)?;
        Ok((vec![c], vec![Some(dc)]))
    }

    fn primal<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        let (mut c, ops) = self.split_inputs(be, x)?;
        self.op.apply(be, &mut c, ops)?;
        Ok(vec![c])
    }
}

/// `C ← β·C + α·op(operands)` as a rule, with C first exactly when `β ≠ 0`: the rule of
/// [`PrimitiveCall::from`] this primitive (see [`PrimitiveCall`]).
impl Rule for Primitive {
    fn name(&self) -> &str {
        Primitive::name(self)
    }

    fn num_inputs(&self) -> usize {
        self.call().num_inputs()
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn input_rank(&self, i: usize) -> Option<usize> {
        self.call().input_rank(i)
    }

    fn memory_bound(&self) -> bool {
        self.call().memory_bound()
    }

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        self.call().check(be, x)
    }

    fn keeps(&self, active: &[bool]) -> Keeps {
        self.call().keeps(active)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        active: &[bool],
    ) -> Result<Outputs<B>> {
        self.call().rrule(be, x, active)
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        self.call().frule(be, x, dx)
    }

    fn pullback_at<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        outputs: &[&B::Tensor],
        active: &[bool],
    ) -> Option<Result<Box<dyn Pullback<B>>>> {
        self.call().pullback_at(be, x, outputs, active)
    }

    fn primal<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor]) -> Result<Vec<B::Tensor>> {
        self.call().primal(be, x)
    }
}

impl Primitive {
    /// The call of this primitive with C exactly when `β ≠ 0`.
    fn call(&self) -> PrimitiveCall {
        PrimitiveCall::from(self.clone())
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

    /// Each operand's planned rank.
    fn input_rank(&self, i: usize) -> Option<usize> {
        self.operand_dims(i).map(<[usize]>::len)
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
    decomposition_rule!("svd", 3);

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
            return absent_tangent(self, be, x);
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
    decomposition_rule!("qr", 2);

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
            return absent_tangent(self, be, x);
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
    decomposition_rule!("eigh", 2);

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
            return absent_tangent(self, be, x);
        };
        let (y, t) = eigh_frule(be, x[0], dx, self.options)?;
        Ok((
            vec![y.values, y.vectors],
            vec![Some(t.values), Some(t.vectors)],
        ))
    }
}

/// The truncated SVD `A ≈ U·diag(S)·Vh` of rank `r` as a rule (see
/// [`svd_truncated_rrule`](crate::linalg::svd_truncated_rrule) for the truncation, the gauge
/// and the errors): one input `A: [batch…, m, n]`, four outputs `[U, S, Vh, discarded]`
/// (`[batch…, m, r]`, `[batch…, r]`, `[batch…, r, n]`, `[batch…, k − r]`; the rank `r` is
/// `S`'s last axis). The pullback is
/// [`SvdPullback::pullback`](crate::linalg::SvdPullback::pullback) with the discarded
/// subspace's term unless [`RuleOptions::discarded_term`] is off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TruncatedSvdRule {
    /// the largest rank and relative cutoff
    pub truncation: Truncation,
    /// degeneracy tolerance, broadening, discarded term
    pub options: RuleOptions,
}

impl Rule for TruncatedSvdRule {
    decomposition_rule!("svd_truncated", 4);

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        let (out, pb) = svd_truncated_rrule(be, x[0], self.truncation, self.options)?;
        let pullback = move |_: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
            Ok(vec![Some(pb.pullback(SvdCotangents {
                u: y[0].as_ref(),
                s: y[1].as_ref(),
                vh: y[2].as_ref(),
                discarded: y[3].as_ref(),
            })?)])
        };
        let y = vec![out.svd.u, out.svd.s, out.svd.vh, out.discarded];
        Ok((y, Box::new(pullback)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let Some(dx) = dx[0] else {
            return absent_tangent(self, be, x);
        };
        let (y, t) = svd_truncated_frule(be, x[0], dx, self.truncation, self.options)?;
        Ok((
            vec![y.svd.u, y.svd.s, y.svd.vh, y.discarded],
            vec![
                Some(t.svd.u),
                Some(t.svd.s),
                Some(t.svd.vh),
                Some(t.discarded),
            ],
        ))
    }
}

/// What a [`ClusteredEighRule`] call found besides its outputs: the kept eigenvalues
/// `[batch…, k]` (real, on the host, sorted by `|λ|` descending) and one [`ClusterInfo`] per
/// matrix in row-major batch order.
pub type ClusteredByproduct = (HostTensor, Vec<ClusterInfo>);

/// The clustered eigendecomposition of a Hermitian `A` with the secondary operator `G` as a
/// rule (see [`eigh_clustered_rrule`](crate::linalg::eigh_clustered_rrule) for the
/// clusters, the gauge and the errors): one input `A: [batch…, n, n]`, two outputs
/// `[W, C']`, the basis `W: [batch…, n, k]` and the compressed matrix
/// `C' = Wᴴ·A·W: [batch…, k, k]`. `G: [n, n]` is a constant of the rule (no cotangent), in
/// `A`'s dtype. The pullback is
/// [`ClusteredEighPullback::pullback`](crate::linalg::ClusteredEighPullback::pullback) (Kato's
/// projector derivative; sources there).
///
/// The kept eigenvalues and the diagnostics are not differentiable outputs (`C'` carries the
/// eigenvalues; the cluster structure is piecewise constant): each call leaves them as a
/// **byproduct** ([`ClusteredEighRule::byproduct`]), shared by the clones of the rule.
#[derive(Clone, Debug)]
pub struct ClusteredEighRule {
    g: HostTensor,
    options: ClusterOptions,
    rule: RuleOptions,
    byproduct: Arc<Mutex<Option<ClusteredByproduct>>>,
}

impl ClusteredEighRule {
    /// The rule for the secondary operator `g` (host, `[n, n]`, Hermitian, `A`'s dtype), the
    /// cluster options and the pullback's options.
    pub fn new(g: HostTensor, options: ClusterOptions, rule: RuleOptions) -> Self {
        ClusteredEighRule {
            g,
            options,
            rule,
            byproduct: Arc::default(),
        }
    }

    /// The byproduct of the last call of this rule or a clone of it (`None` before any).
    pub fn byproduct(&self) -> Option<ClusteredByproduct> {
        self.byproduct
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn keep<B: Backend>(&self, be: &B, out: &ClusteredEigh<B>) -> Result<()> {
        let values = be.to_host(&out.values)?;
        *self
            .byproduct
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((values, out.info.clone()));
        Ok(())
    }
}

impl Rule for ClusteredEighRule {
    decomposition_rule!("eigh_clustered", 2);

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        let g = be.from_host(self.g.clone())?;
        let (out, pb) = eigh_clustered_rrule(be, x[0], &g, &self.options, self.rule)?;
        self.keep(be, &out)?;
        let pullback = move |_: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
            Ok(vec![Some(pb.pullback(y[0].as_ref(), y[1].as_ref())?)])
        };
        Ok((vec![out.basis, out.corner], Box::new(pullback)))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let Some(dx) = dx[0] else {
            return absent_tangent(self, be, x);
        };
        let g = be.from_host(self.g.clone())?;
        let (y, t) = eigh_clustered_frule(be, x[0], dx, &g, &self.options, self.rule)?;
        self.keep(be, &y)?;
        Ok((vec![y.basis, y.corner], vec![Some(t.basis), Some(t.corner)]))
    }
}
