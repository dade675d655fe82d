//! [`Primitive`]: one call of add, trace or contract, seen uniformly, and its
//! [`PrimitivePullback`]. Network steps and every engine adapter go through it, so the
//! dispatch over the three primitives exists once.

use smallvec::SmallVec;

use crate::backend::{Backend, check};
use crate::error::{Error, Result};
use crate::scalar::{DType, DynScalar};
use crate::spec::Dims;

use super::{
    Activity, AddOp, AddPullback, ContractOp, ContractPullback, Cotangents, Tangents, TraceOp,
    TracePullback,
};

/// One call of a tensor primitive: `C ← β·C + α·op(operands)` with the operands in input
/// order, `[A]` for [`AddOp`] and [`TraceOp`], `[A, B]` for [`ContractOp`].
///
/// Engines that see an op as "a list of inputs" (burn, candle, dfdx) use this type instead of
/// matching on the three ops: it gives the output shape, the fresh-output coefficient check,
/// the primal, the pullback (also at a primal point computed elsewhere) and the pushforward,
/// with cotangents in input order. The rules are those of the wrapped op (see [`AddOp`],
/// [`TraceOp`], [`ContractOp`] for the formulas and their source).
///
/// # Inputs with C
/// An engine op may take C as an extra first input (`[C, A]`, `[C, A, B]`) to compute
/// `β·C + α·op(…)`; without it the output is fresh and β must be zero
/// ([`takes_c`](Self::takes_c)). [`activity`](Self::activity) and
/// [`cotangents_in_order`](Self::cotangents_in_order) translate between that input order and
/// [`Activity`] / [`Cotangents`].
// The contraction variant holds seven inline axis lists (no heap allocation for rank ≤ 8);
// primitives live in plans, built once, so their size is not on a hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Primitive {
    /// permuted add `C ← β·C + α·P_p(op(A))`
    Add(AddOp),
    /// generalized partial trace (traces, diagonals, sums; see [`TraceSpec`](crate::TraceSpec))
    Trace(TraceOp),
    /// pairwise contraction `C ← β·C + α·P(op(A)·op(B))`
    Contract(ContractOp),
}

impl From<AddOp> for Primitive {
    fn from(op: AddOp) -> Self {
        Primitive::Add(op)
    }
}

impl From<TraceOp> for Primitive {
    fn from(op: TraceOp) -> Self {
        Primitive::Trace(op)
    }
}

impl From<ContractOp> for Primitive {
    fn from(op: ContractOp) -> Self {
        Primitive::Contract(op)
    }
}

fn count_error(expected: usize, actual: usize) -> Error {
    Error::CountMismatch {
        arg: "operands".into(),
        expected,
        actual,
    }
}

impl Primitive {
    /// Number of operands (C not counted): 1 for add and trace, 2 for a contraction.
    pub fn arity(&self) -> usize {
        match self {
            Primitive::Contract(_) => 2,
            _ => 1,
        }
    }

    /// `"add"`, `"trace"` or `"contract"`.
    pub fn name(&self) -> &'static str {
        match self {
            Primitive::Add(_) => "add",
            Primitive::Trace(_) => "trace",
            Primitive::Contract(_) => "contract",
        }
    }

    /// α.
    pub fn alpha(&self) -> DynScalar {
        match self {
            Primitive::Add(o) => o.alpha,
            Primitive::Trace(o) => o.alpha,
            Primitive::Contract(o) => o.alpha,
        }
    }

    /// β.
    pub fn beta(&self) -> DynScalar {
        match self {
            Primitive::Add(o) => o.beta,
            Primitive::Trace(o) => o.beta,
            Primitive::Contract(o) => o.beta,
        }
    }

    /// The same call with α and β replaced.
    pub fn with_coefficients(self, alpha: DynScalar, beta: DynScalar) -> Self {
        match self {
            Primitive::Add(o) => Primitive::Add(o.alpha(alpha).beta(beta)),
            Primitive::Trace(o) => Primitive::Trace(o.alpha(alpha).beta(beta)),
            Primitive::Contract(o) => Primitive::Contract(o.alpha(alpha).beta(beta)),
        }
    }

    /// The rank operand `k` must have (`None` for `k ≥` [`arity`](Self::arity)).
    pub fn operand_rank(&self, k: usize) -> Option<usize> {
        match (self, k) {
            (Primitive::Add(o), 0) => Some(o.perm.len()),
            (Primitive::Trace(o), 0) => Some(o.spec.rank_a()),
            (Primitive::Contract(o), 0) => Some(o.spec.rank_a()),
            (Primitive::Contract(o), 1) => Some(o.spec.rank_b()),
            _ => None,
        }
    }

    /// The rank of the output.
    pub fn output_rank(&self) -> usize {
        match self {
            Primitive::Add(o) => o.perm.len(),
            Primitive::Trace(o) => o.spec.rank_c(),
            Primitive::Contract(o) => o.spec.rank_c(),
        }
    }

    /// The output shape for operands of shapes `operands` (in input order).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"operands"`) for a wrong number of shapes; the shape errors
    /// of [`Permutation::output_dims`](crate::Permutation::output_dims),
    /// [`TraceSpec::output_dims`](crate::TraceSpec::output_dims) and
    /// [`ContractSpec::output_dims`](crate::ContractSpec::output_dims) (naming `"a"`, `"b"`).
    pub fn output_dims<D: AsRef<[usize]>>(&self, operands: &[D]) -> Result<Dims> {
        match (self, operands) {
            (Primitive::Add(o), [a]) => o.perm.output_dims(a.as_ref()),
            (Primitive::Trace(o), [a]) => o.spec.output_dims(a.as_ref()),
            (Primitive::Contract(o), [a, b]) => o.spec.output_dims(a.as_ref(), b.as_ref()),
            _ => Err(count_error(self.arity(), operands.len())),
        }
    }

    /// The coefficient check of an engine op that returns a fresh output of `dtype`: β must be
    /// zero and α must cast to `dtype` ([`check::fresh_output`]). Returns α in `dtype`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `"beta"`; [`Error::DTypeMismatch`] naming `"alpha"`.
    pub fn fresh_alpha(&self, dtype: DType) -> Result<DynScalar> {
        check::fresh_output(self.alpha(), self.beta(), dtype)
    }

    /// Whether an engine op given `inputs` tensors has C as its first input: `false` for
    /// [`arity`](Self::arity) inputs (a fresh output), `true` for one more.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"inputs"`) for any other count; [`Error::InvalidArgument`]
    /// naming `"beta"` for a nonzero β without C.
    pub fn takes_c(&self, inputs: usize) -> Result<bool> {
        let arity = self.arity();
        if inputs == arity + 1 {
            return Ok(true);
        }
        if inputs != arity {
            return Err(Error::CountMismatch {
                arg: "inputs".into(),
                expected: arity,
                actual: inputs,
            });
        }
        if !self.beta().is_zero() {
            return Err(Error::invalid(
                "beta",
                format!(
                    "is {}, but no input C was given to scale: pass C first",
                    self.beta()
                ),
            ));
        }
        Ok(false)
    }

    /// The [`Activity`] of a call whose inputs, in order `[C?, operands…]` (C first when
    /// `with_c`), are active where `active` says; α and β are constants.
    pub fn activity(&self, with_c: bool, active: &[bool]) -> Activity {
        let at = |i: usize| active.get(i).copied().unwrap_or(false);
        let k = usize::from(with_c);
        Activity {
            c: with_c && at(0),
            a: at(k),
            b: self.arity() == 2 && at(k + 1),
            alpha: false,
            beta: false,
        }
    }

    /// The cotangents of the inputs in order `[C?, operands…]` (C first when `with_c`).
    pub fn cotangents_in_order<B: Backend>(
        &self,
        g: Cotangents<B>,
        with_c: bool,
    ) -> SmallVec<[Option<B::Tensor>; 3]> {
        let mut v = SmallVec::new();
        if with_c {
            v.push(g.c);
        }
        v.push(g.a);
        if self.arity() == 2 {
            v.push(g.b);
        }
        v
    }

    /// Whether the pullback reads operand `k` (in input order, C not counted) for the given
    /// activity: a contraction reads A when B or α is active and B when A or α is active; add
    /// and trace read A only for ᾱ. Engines that checkpoint inputs save only these.
    pub fn reads_operand(&self, k: usize, active: Activity) -> bool {
        match (self, k) {
            (Primitive::Contract(_), 0) => active.b || active.alpha,
            (Primitive::Contract(_), 1) => active.a || active.alpha,
            (_, 0) => active.alpha,
            _ => false,
        }
    }

    /// A fresh output for `operands`: a tensor of the [output shape](Self::output_dims) in
    /// the joined dtype of the operands, with unspecified elements ([`Backend::empty`]: it is
    /// written with β = 0, a strong zero).
    ///
    /// # Errors
    /// As [`output_dims`](Self::output_dims); the backend's allocation errors.
    pub fn fresh_output<B: Backend>(&self, be: &B, operands: &[&B::Tensor]) -> Result<B::Tensor> {
        let dims = self.output_dims(&check::dims_of(be, operands))?;
        be.empty(&dims, check::joined_dtype(be, operands))
    }

    /// The primal `C ← β·C + α·op(operands)`.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"operands"`) for a wrong number of operands; the errors of
    /// [`Backend::add`], [`Backend::trace`] or [`Backend::contract`].
    pub fn apply<B: Backend>(&self, be: &B, c: &mut B::Tensor, x: &[&B::Tensor]) -> Result<()> {
        match (self, x) {
            (Primitive::Add(op), [a]) => op.apply(be, c, a),
            (Primitive::Trace(op), [a]) => op.apply(be, c, a),
            (Primitive::Contract(op), [a, b]) => op.apply(be, c, a, b),
            _ => Err(count_error(self.arity(), x.len())),
        }
    }

    /// The primal, updating `c` in place, and its pullback (see the wrapped op's `rrule`).
    ///
    /// # Errors
    /// As [`apply`](Self::apply); on error `c` is unchanged.
    pub fn rrule<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        x: &[&B::Tensor],
        active: Activity,
    ) -> Result<PrimitivePullback<B>> {
        let pb = self.pullback_at(be, c, x, active)?;
        self.apply(be, c, x)?;
        Ok(pb)
    }

    /// The pullback at the primal point `(C, operands)` without computing the primal, for
    /// engines that run the primal themselves: `c` is C before the update (only its shape
    /// and dtype are read unless β is active), or any tensor of C's shape and dtype for a
    /// fresh output.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"operands"`); the shape errors of the wrapped op's
    /// `pullback_at`.
    pub fn pullback_at<B: Backend>(
        &self,
        be: &B,
        c: &B::Tensor,
        x: &[&B::Tensor],
        active: Activity,
    ) -> Result<PrimitivePullback<B>> {
        Ok(match (self, x) {
            (Primitive::Add(op), [a]) => PrimitivePullback::Add(op.pullback_at(be, c, a, active)?),
            (Primitive::Trace(op), [a]) => {
                PrimitivePullback::Trace(op.pullback_at(be, c, a, active)?)
            }
            (Primitive::Contract(op), [a, b]) => {
                PrimitivePullback::Contract(Box::new(op.pullback_at(be, c, a, b, active)?))
            }
            _ => return Err(count_error(self.arity(), x.len())),
        })
    }

    /// The pullback at a primal point given by what it reads, for a caller that kept the
    /// operands itself (the [`Rule`](crate::rule::Rule) of a primitive, whose engine keeps
    /// the inputs its [`Keeps`](crate::rule::Keeps) names): `operands[k]` is operand `k`
    /// where [`reads_operand`](Self::reads_operand) says a cotangent reads it (`None`
    /// otherwise), `metas` the shape and dtype of every operand, `c` those of C. β must
    /// not be active (C before the update is not kept). The cotangents are those of
    /// [`pullback_at`](Self::pullback_at) at the same point, to the bit.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (`"operands"`); [`Error::InvalidArgument`] (`"operands"`)
    /// for an operand a cotangent reads that is `None`, or (`"beta"`) for an active β.
    pub(crate) fn pullback_saved<B: Backend>(
        &self,
        be: &B,
        c: (Dims, DType),
        operands: &[(Dims, DType, Option<B::Tensor>)],
        active: Activity,
    ) -> Result<PrimitivePullback<B>> {
        if operands.len() != self.arity() {
            return Err(count_error(self.arity(), operands.len()));
        }
        if active.beta {
            let why = "β is active: its cotangent reads C before the update, which is not kept";
            return Err(Error::invalid("beta", why));
        }
        let meta = |(dims, dtype): (Dims, DType)| super::Meta { dims, dtype };
        let at = super::skeleton::Saved {
            operands: operands.iter().map(|o| o.2.clone()).collect(),
            metas: operands.iter().map(|o| meta((o.0.clone(), o.1))).collect(),
            c_old: None,
            c_meta: meta(c),
            active,
        };
        Ok(match self {
            Primitive::Add(op) => PrimitivePullback::Add(AddPullback::from_saved(be, op, at)?),
            Primitive::Trace(op) => {
                PrimitivePullback::Trace(TracePullback::from_saved(be, op, at)?)
            }
            Primitive::Contract(op) => {
                PrimitivePullback::Contract(Box::new(ContractPullback::from_saved(be, op, at)?))
            }
        })
    }

    /// Second order (forward-over-reverse): the tangent of this call's pullback.
    ///
    /// The pullback `C̄ ↦ (C̄_in, Ā, B̄)` at the primal point `(c, x)`, differentiated along
    /// the operand tangents `dx` (one per operand in input order, `None` a zero tangent) and a
    /// tangent `c_bar_dot` of the output cotangent `c_bar` (`None`: a constant cotangent):
    /// returns `d/dε pullback_{x + ε·ẋ}(C̄ + ε·C̄̇)` for the active inputs, projected onto each
    /// input's dtype like the first-order cotangents.
    ///
    /// With α and β constants every pullback is linear in `C̄` and real-linear in each operand
    /// it reads (a contraction's `Ā` reads B and `B̄` reads A; add and trace read none), so the
    /// product rule gives, with `Ā[X; Y]` the pullback formula of [`ContractOp`] for the
    /// cotangent X with B replaced by Y (and `B̄[X; Y]` with A replaced by Y):
    /// - add, trace: `dĀ = Ā[C̄̇]`, `dC̄_in = conj(β)·C̄̇`;
    /// - contraction: `dĀ = Ā[C̄̇; B] + Ā[C̄; Ḃ]`, `dB̄ = B̄[C̄̇; A] + B̄[C̄; Ȧ]`,
    ///   `dC̄_in = conj(β)·C̄̇`.
    ///
    /// Each term is one call of the first-order rule, so conjugation flags, batch axes and
    /// dtype projection are those of the first order. This is forward-over-reverse
    /// differentiation (Pearlmutter, "Fast exact multiplication by the Hessian", Neural
    /// Computation 6, 147 (1994); JAX's `jvp` of `vjp`). For complex data the tangent is the
    /// real directional derivative of the cotangent (`∂φ/∂re + i·∂φ/∂im`) of a real
    /// `φ = Re⟨C̄, C⟩`: the Hessian-vector product in the crate's cotangent convention.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `"active"` when α or β is active (coefficients are
    /// constants at second order); [`Error::CountMismatch`] (`"operands"`, `"tangents"`);
    /// [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming `"tangent of a"`,
    /// `"tangent of b"` or `"c_bar"`; backend errors.
    #[allow(clippy::too_many_arguments)]
    pub fn pullback_tangent<B: Backend>(
        &self,
        be: &B,
        c: &B::Tensor,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
        c_bar: &B::Tensor,
        c_bar_dot: Option<&B::Tensor>,
        active: Activity,
    ) -> Result<Cotangents<B>> {
        if active.alpha || active.beta {
            return Err(Error::invalid(
                "active",
                "alpha and beta are constants in the second-order rules (mark them inactive)",
            ));
        }
        if x.len() != self.arity() {
            return Err(count_error(self.arity(), x.len()));
        }
        if dx.len() != self.arity() {
            return Err(Error::CountMismatch {
                arg: "tangents".into(),
                expected: self.arity(),
                actual: dx.len(),
            });
        }
        check::like(be, "c_bar", c_bar, &be.dims(c), be.dtype(c))?;
        let mut out = Cotangents::default();
        if let Some(cd) = c_bar_dot {
            self.pullback_at(be, c, x, active)?
                .accumulate(cd, &mut out)?;
        }
        if let (Primitive::Contract(op), [a, b]) = (self, x) {
            if let (true, Some(db)) = (active.a, dx[1]) {
                check::like(be, "tangent of b", db, &be.dims(b), be.dtype(b))?;
                let only_a = Activity {
                    a: true,
                    ..Activity::NONE
                };
                op.pullback_at(be, c, a, db, only_a)?
                    .accumulate(c_bar, &mut out)?;
            }
            if let (true, Some(da)) = (active.b, dx[0]) {
                check::like(be, "tangent of a", da, &be.dims(a), be.dtype(a))?;
                let only_b = Activity {
                    b: true,
                    ..Activity::NONE
                };
                op.pullback_at(be, c, da, b, only_b)?
                    .accumulate(c_bar, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The primal, updating `c` in place, and the tangent of the updated C (see the wrapped
    /// op's `frule`).
    ///
    /// # Errors
    /// As [`apply`](Self::apply); mismatched tangents; on error `c` is unchanged.
    pub fn frule<B: Backend>(
        &self,
        be: &B,
        c: &mut B::Tensor,
        x: &[&B::Tensor],
        t: Tangents<'_, B>,
    ) -> Result<B::Tensor> {
        match (self, x) {
            (Primitive::Add(op), [a]) => op.frule(be, c, a, t),
            (Primitive::Trace(op), [a]) => op.frule(be, c, a, t),
            (Primitive::Contract(op), [a, b]) => op.frule(be, c, a, b, t),
            _ => Err(count_error(self.arity(), x.len())),
        }
    }
}

/// The pullback of a [`Primitive`] call; owns what it reads and can be applied many times.
#[derive(Clone, Debug)]
pub enum PrimitivePullback<B: Backend> {
    /// of an add
    Add(AddPullback<B>),
    /// of a trace
    Trace(TracePullback<B>),
    /// of a contraction
    Contract(Box<ContractPullback<B>>),
}

impl<B: Backend> PrimitivePullback<B> {
    /// Fresh cotangents of the active inputs for the output cotangent `c_bar`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] naming `"c_bar"`; backend errors.
    pub fn pullback(&self, c_bar: &B::Tensor) -> Result<Cotangents<B>> {
        match self {
            PrimitivePullback::Add(pb) => pb.pullback(c_bar),
            PrimitivePullback::Trace(pb) => pb.pullback(c_bar),
            PrimitivePullback::Contract(pb) => pb.pullback(c_bar),
        }
    }

    /// Adds the cotangents of the active inputs into `into` (in place into existing buffers).
    ///
    /// # Errors
    /// As [`pullback`](Self::pullback), plus shape/dtype errors of existing buffers.
    pub fn accumulate(&self, c_bar: &B::Tensor, into: &mut Cotangents<B>) -> Result<()> {
        match self {
            PrimitivePullback::Add(pb) => pb.accumulate(c_bar, into),
            PrimitivePullback::Trace(pb) => pb.accumulate(c_bar, into),
            PrimitivePullback::Contract(pb) => pb.accumulate(c_bar, into),
        }
    }
}
