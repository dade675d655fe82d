//! The pullback skeleton the three primitives share: [`OpPullback`] saves the primal point
//! (activity, the operands a cotangent reads, `C_old` for `β̄`, shapes and dtypes), checks
//! `C̄`, deposits `C̄_in = conj(β)·C̄` and `β̄ = ⟨C_old, C̄⟩` and checks fresh cotangents for
//! finiteness. For the one-operand primitives (add, trace) the macro [`unary_op!`] also writes
//! the op itself (struct, builders, `apply`, `rrule`, `pullback_at`, `frule`, kernel call and
//! shape check) and [`Unary`] gates and deposits `Ā` and `ᾱ`. Each op file keeps only its own
//! formulas: the cotangents of its operands and of `α` ([`Formulas`], or [`Unary`] for add
//! and trace) and its index map and backend kernel.
//!
//! The traits are public only so that [`OpPullback`] can name them in its bounds; they live in
//! this private module and cannot be implemented outside the crate (a sealed trait).

use std::fmt::Debug;

use smallvec::SmallVec;

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DynScalar;

use super::{
    Activity, Cotangents, Meta, Tangents, check_coeff_tangent, check_like, deposit_beta, deposit_c,
    deposit_coeff, tangent_start,
};

/// A primitive's own reverse-mode formulas, plugged into [`OpPullback`].
pub trait Formulas: Coefficients + Clone + Debug {
    /// What the pullback derives from the op once (a contraction: the specs of `Ā` and `B̄`).
    type Plan: Clone + Debug;

    /// Which operands the pullback keeps, in order (`false`: no cotangent reads it).
    fn keeps(&self, active: Activity) -> [bool; 2];

    /// The plan.
    ///
    /// # Errors
    /// Those of building it (a contraction's cotangent specs).
    fn plan(&self) -> Result<Self::Plan>;

    /// Adds the cotangents of the operands and of `α` for the output cotangent into the
    /// step's cotangents, reading the saved point (`C̄` already checked against C).
    ///
    /// # Errors
    /// Backend errors; shape/dtype errors of existing buffers.
    fn operand_cotangents<B: Backend>(&self, plan: &Self::Plan, step: Step<'_, B>) -> Result<()>;
}

/// One backward step of a rule: the backend, the saved point, the output cotangent `C̄` and
/// the cotangents being accumulated.
pub struct Step<'s, B: Backend> {
    be: &'s B,
    at: &'s Saved<B>,
    c_bar: &'s B::Tensor,
    into: &'s mut Cotangents<B>,
}

/// The parts of a [`Step`]: the backend, the saved point, `C̄`, the cotangents.
pub(crate) type Parts<'s, B> = (
    &'s B,
    &'s Saved<B>,
    &'s <B as Backend>::Tensor,
    &'s mut Cotangents<B>,
);

impl<'s, B: Backend> Step<'s, B> {
    /// Its parts, to read and write.
    pub(crate) fn parts(self) -> Parts<'s, B> {
        (self.be, self.at, self.c_bar, self.into)
    }
}

/// What a pullback read at the primal point.
#[derive(Clone, Debug)]
pub struct Saved<B: Backend> {
    /// the operands in order, each kept only when a cotangent reads it
    pub(crate) operands: SmallVec<[Option<B::Tensor>; 2]>,
    /// the operands' shapes and dtypes
    pub(crate) metas: SmallVec<[Meta; 2]>,
    /// C before the update, kept only when β is active
    pub(crate) c_old: Option<B::Tensor>,
    pub(crate) c_meta: Meta,
    pub(crate) active: Activity,
}

/// What the cotangent formulas of a [`Unary`] op read: the backend, the saved point and the
/// output cotangent `C̄` (already checked against C).
pub struct Point<'s, B: Backend> {
    pub(crate) be: &'s B,
    pub(crate) at: &'s Saved<B>,
    pub(crate) c_bar: &'s B::Tensor,
}

impl<B: Backend> Clone for Point<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Point<'_, B> {}

/// The pullback of one primitive call ([`AddPullback`](super::AddPullback),
/// [`TracePullback`](super::TracePullback), [`ContractPullback`](super::ContractPullback)):
/// owns (reference-counted handles of) what it reads and can be applied many times. The
/// formulas are on each op ([`AddOp`](super::AddOp), [`TraceOp`](super::TraceOp),
/// [`ContractOp`](super::ContractOp)).
#[derive(Clone, Debug)]
pub struct OpPullback<B: Backend, Op: Formulas> {
    backend: B,
    op: Op,
    plan: Op::Plan,
    at: Saved<B>,
}

impl<B: Backend, Op: Formulas> OpPullback<B, Op> {
    /// The pullback of `op` at `(C, operands)` (shapes already checked).
    pub(crate) fn at(
        be: &B,
        op: &Op,
        c: &B::Tensor,
        operands: &[&B::Tensor],
        active: Activity,
    ) -> Result<Self> {
        let keeps = op.keeps(active);
        Ok(OpPullback {
            backend: be.clone(),
            op: op.clone(),
            plan: op.plan()?,
            at: Saved {
                operands: operands
                    .iter()
                    .zip(keeps)
                    .map(|(t, keep)| keep.then(|| (*t).clone()))
                    .collect(),
                metas: operands.iter().map(|t| Meta::of(be, t)).collect(),
                c_old: active.beta.then(|| c.clone()),
                c_meta: Meta::of(be, c),
                active,
            },
        })
    }

    /// The pullback of `op` at a point given by what it reads (`at`, shapes already
    /// checked): the operands [`Formulas::keeps`] names must be present.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] (`"operands"`) for an operand a cotangent reads that
    /// `at` lacks; those of building the plan.
    pub(crate) fn from_saved(be: &B, op: &Op, at: Saved<B>) -> Result<Self> {
        let keeps = op.keeps(at.active);
        for (k, keep) in keeps.iter().enumerate() {
            if *keep && at.operands.get(k).is_none_or(Option::is_none) {
                let why = format!("operand {k} is read by a cotangent and was not kept");
                return Err(crate::error::Error::invalid("operands", why));
            }
        }
        Ok(OpPullback {
            backend: be.clone(),
            op: op.clone(),
            plan: op.plan()?,
            at,
        })
    }

    /// Fresh cotangents of the active inputs for the output cotangent `c_bar`.
    ///
    /// # Errors
    /// [`crate::Error::ShapeMismatch`] / [`crate::Error::DTypeMismatch`] naming `"c_bar"`
    /// when `c_bar` does not match C; backend errors; [`crate::Error::NonFinite`] for a
    /// cotangent that is not finite although `c_bar` and what the pullback read are
    /// ([`crate::finite`]).
    pub fn pullback(&self, c_bar: &B::Tensor) -> Result<Cotangents<B>> {
        let mut g = Cotangents::default();
        self.accumulate(c_bar, &mut g)?;
        let mut read: SmallVec<[Option<&B::Tensor>; 4]> = SmallVec::new();
        read.push(Some(c_bar));
        read.extend(self.at.operands.iter().map(Option::as_ref));
        read.push(self.at.c_old.as_ref());
        g.checked(&self.backend, &read)
    }

    /// Adds the cotangents of the active inputs into `into`: a `None` slot receives a fresh
    /// buffer; an existing buffer is updated with β = 1, in place where the backend and the
    /// dtypes allow (engines that accumulate gradients).
    ///
    /// # Errors
    /// As [`pullback`](Self::pullback), plus shape/dtype errors of existing buffers.
    pub fn accumulate(&self, c_bar: &B::Tensor, into: &mut Cotangents<B>) -> Result<()> {
        let (be, at) = (&self.backend, &self.at);
        check_like(be, "c_bar", c_bar, &at.c_meta)?;
        if at.active.c {
            deposit_c(be, &mut into.c, c_bar, &at.c_meta, self.op.coefficients().1)?;
        }
        let step = Step {
            be,
            at,
            c_bar,
            into: &mut *into,
        };
        self.op.operand_cotangents(&self.plan, step)?;
        if let (true, Some(c_old)) = (at.active.beta, &at.c_old) {
            deposit_beta(be, &mut into.beta, c_old, c_bar, self.op.coefficients().1)?;
        }
        Ok(())
    }
}

/// `(α, β)` of a call.
pub type Ab = (DynScalar, DynScalar);

/// The coefficients of an op (implemented for the three by `rules::coefficients!`).
pub trait Coefficients {
    /// `(α, β)`.
    fn coefficients(&self) -> Ab;
}

/// The kernel `C ← β·C + α·K(op(A))` of a one-operand primitive (add, trace) and its shape
/// check; written by [`unary_op!`](crate::rules::skeleton::unary_op) from the op's backend
/// method and index map.
pub trait UnaryKernel {
    /// Checks the shapes of A and C.
    ///
    /// # Errors
    /// Shape or rank mismatch.
    fn check_shapes(&self, a: &[usize], c: &[usize]) -> Result<()>;

    /// `C ← β·C + α·K(op(A))`, `(α, β) = ab`, with this op's index map and conjugation flag.
    ///
    /// # Errors
    /// The backend's.
    fn kernel<B: Backend>(&self, be: &B, c: &mut B::Tensor, a: &B::Tensor, ab: Ab) -> Result<()>;
}

/// A one-operand primitive `C ← β·C + α·K(op(A))` (add, trace): its kernel and shape check
/// ([`UnaryKernel`]) and the cotangents of A and α; it is then a [`Formulas`] (keeping A only
/// for `ᾱ`), and its `rrule`, `pullback_at` and `frule` are the same code for both
/// ([`rrule`], [`pullback_at`], [`frule`]). Its struct, inherent methods and
/// [`UnaryKernel`] are written by [`unary_op!`](crate::rules::skeleton::unary_op); the op
/// file implements this trait, its cotangent formulas.
pub trait Unary: UnaryKernel + Coefficients + Clone + Debug {
    /// Adds `Ā` for the output cotangent into `slot` (A active).
    ///
    /// # Errors
    /// Backend errors; shape/dtype errors of an existing buffer.
    fn a_cotangent<B: Backend>(&self, p: Point<'_, B>, slot: &mut Option<B::Tensor>) -> Result<()>;

    /// `⟨K(op(A)), C̄⟩` for the kept A, the cotangent of α before its projection onto α's
    /// dtype.
    ///
    /// # Errors
    /// Backend errors.
    fn alpha_cotangent<B: Backend>(&self, p: Point<'_, B>, a: &B::Tensor) -> Result<DynScalar>;
}

impl<Op: Unary> Formulas for Op {
    type Plan = ();

    fn keeps(&self, active: Activity) -> [bool; 2] {
        [active.alpha, false]
    }

    fn plan(&self) -> Result<()> {
        Ok(())
    }

    /// `Ā` ([`Unary::a_cotangent`]), then `ᾱ` ([`Unary::alpha_cotangent`], projected).
    fn operand_cotangents<B: Backend>(&self, _: &(), step: Step<'_, B>) -> Result<()> {
        let (be, at, c_bar, into) = step.parts();
        let p = Point { be, at, c_bar };
        if at.active.a {
            self.a_cotangent(p, &mut into.a)?;
        }
        if let (true, Some(a)) = (at.active.alpha, &at.operands[0]) {
            let v = self.alpha_cotangent(p, a)?;
            deposit_coeff(&mut into.alpha, v, self.coefficients().0);
        }
        Ok(())
    }
}

/// The primal of a [`Unary`] op, `C ← β·C + α·K(op(A))` with the op's own `(α, β)`.
pub(crate) fn apply<B: Backend, Op: Unary>(
    op: &Op,
    be: &B,
    c: &mut B::Tensor,
    a: &B::Tensor,
) -> Result<()> {
    op.kernel(be, c, a, op.coefficients())
}

/// The pullback of a [`Unary`] op at `(C, A)` (`c` before the update).
pub(crate) fn pullback_at<B: Backend, Op: Unary>(
    op: &Op,
    be: &B,
    c: &B::Tensor,
    a: &B::Tensor,
    active: Activity,
) -> Result<OpPullback<B, Op>> {
    op.check_shapes(&be.dims(a), &be.dims(c))?;
    OpPullback::at(be, op, c, &[a], active)
}

/// The primal of a [`Unary`] op, updating `c`, and its pullback; `c` unchanged on error.
pub(crate) fn rrule<B: Backend, Op: Unary>(
    op: &Op,
    be: &B,
    c: &mut B::Tensor,
    a: &B::Tensor,
    active: Activity,
) -> Result<OpPullback<B, Op>> {
    let pb = pullback_at(op, be, c, a, active)?;
    apply(op, be, c, a)?;
    Ok(pb)
}

/// The primal of a [`Unary`] op, updating `c`, and the tangent of the updated C:
/// `Ċ' = β·Ċ + β̇·C_old + α·K(op(Ȧ)) + α̇·K(op(A))`, computed before the primal overwrites C.
pub(crate) fn frule<B: Backend, Op: Unary>(
    op: &Op,
    be: &B,
    c: &mut B::Tensor,
    a: &B::Tensor,
    t: Tangents<'_, B>,
) -> Result<B::Tensor> {
    op.check_shapes(&be.dims(a), &be.dims(c))?;
    let (alpha, beta) = op.coefficients();
    let (c_meta, a_meta) = (Meta::of(be, c), Meta::of(be, a));
    let one = DynScalar::one(c_meta.dtype);
    let mut dc = tangent_start(be, c, &c_meta, beta, t.c, t.beta)?;
    if let Some(da) = t.a {
        check_like(be, "tangent of a", da, &a_meta)?;
        op.kernel(be, &mut dc, da, (alpha, one))?;
    }
    if let Some(dal) = t.alpha {
        check_coeff_tangent("tangent of alpha", Some(dal), alpha)?;
        op.kernel(be, &mut dc, a, (dal, one))?;
    }
    t.check_output(be, "c_dot", &dc, &[c, a])?;
    op.kernel(be, c, a, (alpha, beta))?;
    Ok(dc)
}

/// Writes a one-operand op (add, trace) around its index map. From
/// `pub struct Op(kernel: Backend::k, check: Map::c) -> Pullback { map: Map }` (with the docs
/// of the op and of its map field) it writes the struct (`map`, then `conj`, `alpha`, `beta`),
/// its builders, `apply`, `rrule`, `pullback_at` and `frule` (the skeleton's [`apply`],
/// [`rrule`], [`pullback_at`], [`frule`]), the alias `Pullback<B> = OpPullback<B, Op>`, and
/// [`UnaryKernel`]: `check_shapes` is `self.map.c(a, c)`, `kernel` is
/// `be.k(c, a, &self.map, self.conj, α, β)`. The op file implements [`Unary`], its cotangent
/// formulas. (A macro rather than one generic struct because the public structs keep their
/// own field names, `AddOp::perm` and `TraceOp::spec`, and their methods stay inherent,
/// callable without importing a trait.)
macro_rules! unary_op {
    (
        $(#[$doc:meta])*
        pub struct $op:ident(
            kernel: Backend::$kernel:ident,
            check: $check_ty:ident::$check:ident $(,)?
        ) -> $pullback:ident {
            $(#[$map_doc:meta])*
            $map:ident: $map_ty:ident $(,)?
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $op {
            $(#[$map_doc])*
            pub $map: $map_ty,
            /// conjugation flag of A
            pub conj: $crate::spec::Conj,
            /// α
            pub alpha: $crate::scalar::DynScalar,
            /// β (zero is a strong zero: C is not read)
            pub beta: $crate::scalar::DynScalar,
        }

        impl $op {
            #[doc = concat!(
                "The op with this `", stringify!($map), "`, no conjugation, α = 1 and β = 0 ",
                "(both `f64`, cast to C's dtype): the primal writes the mapped A into C."
            )]
            pub fn new($map: $map_ty) -> Self {
                $op {
                    $map,
                    conj: $crate::spec::Conj::No,
                    alpha: $crate::scalar::DynScalar::F64(1.0),
                    beta: $crate::scalar::DynScalar::F64(0.0),
                }
            }

            /// Sets the conjugation flag.
            pub fn conj(mut self, conj: $crate::spec::Conj) -> Self {
                self.conj = conj;
                self
            }

            coefficient_builders!();

            #[doc = concat!(
                "The primal `C ← β·C + α·K(op(A))`, `K` the map of `", stringify!($map),
                "` (see [`", stringify!($op), "`])."
            )]
            ///
            /// # Errors
            #[doc = concat!(
                "Those of [`Backend::", stringify!($kernel),
                "`](crate::Backend::", stringify!($kernel), ")."
            )]
            pub fn apply<B: $crate::Backend>(
                &self,
                be: &B,
                c: &mut B::Tensor,
                a: &B::Tensor,
            ) -> $crate::Result<()> {
                $crate::rules::skeleton::apply(self, be, c, a)
            }

            /// The primal, updating `c` in place, and its pullback. The pullback keeps A only
            /// when α is active and `C_old` only when β is active.
            ///
            /// # Errors
            #[doc = concat!(
                "Those of [`pullback_at`](Self::pullback_at) and of [`Backend::",
                stringify!($kernel), "`](crate::Backend::", stringify!($kernel),
                "); on error `c` is unchanged."
            )]
            pub fn rrule<B: $crate::Backend>(
                &self,
                be: &B,
                c: &mut B::Tensor,
                a: &B::Tensor,
                active: $crate::rules::Activity,
            ) -> $crate::Result<$pullback<B>> {
                $crate::rules::skeleton::rrule(self, be, c, a, active)
            }

            /// The pullback at the primal point `(C, A)` without computing the primal, for
            /// engines that run the primal themselves (a custom op whose forward is a fused
            /// kernel). `c` is C as it was *before* the update: only its shape and dtype are
            /// read, unless β is active (then it is kept for `β̄`). Same pullback as
            /// [`rrule`](Self::rrule).
            ///
            /// # Errors
            #[doc = concat!(
                "Shape or rank mismatch of `a` and `c` (see [`", stringify!($check_ty), "::",
                stringify!($check), "`](crate::", stringify!($check_ty), "::",
                stringify!($check), "))."
            )]
            pub fn pullback_at<B: $crate::Backend>(
                &self,
                be: &B,
                c: &B::Tensor,
                a: &B::Tensor,
                active: $crate::rules::Activity,
            ) -> $crate::Result<$pullback<B>> {
                $crate::rules::skeleton::pullback_at(self, be, c, a, active)
            }

            /// The primal, updating `c` in place, and the tangent of the updated C (computed
            /// before the primal overwrites C; its formula is on the type).
            ///
            /// # Errors
            #[doc = concat!(
                "Those of [`pullback_at`](Self::pullback_at) and of [`Backend::",
                stringify!($kernel), "`](crate::Backend::", stringify!($kernel), ");"
            )]
            /// a tangent whose shape or dtype does not match its primal
            /// ([`crate::Error::ShapeMismatch`] / [`crate::Error::DTypeMismatch`] naming
            /// `"tangent of a"` etc.); [`crate::Error::NonFinite`] for a tangent that is not
            /// finite although its inputs are. On error `c` is unchanged.
            pub fn frule<B: $crate::Backend>(
                &self,
                be: &B,
                c: &mut B::Tensor,
                a: &B::Tensor,
                t: $crate::rules::Tangents<'_, B>,
            ) -> $crate::Result<B::Tensor> {
                $crate::rules::skeleton::frule(self, be, c, a, t)
            }
        }

        #[doc = concat!(
            "Pullback of one [`", stringify!($op), "`] call (the shared [`OpPullback`]",
            "(crate::rules::OpPullback)): `pullback(&c̄)` for fresh cotangents, ",
            "`accumulate(&c̄, &mut grads)` into existing buffers."
        )]
        pub type $pullback<B> = $crate::rules::OpPullback<B, $op>;

        impl $crate::rules::skeleton::UnaryKernel for $op {
            fn check_shapes(&self, a: &[usize], c: &[usize]) -> $crate::Result<()> {
                self.$map.$check(a, c)
            }

            fn kernel<B: $crate::Backend>(
                &self,
                be: &B,
                c: &mut B::Tensor,
                a: &B::Tensor,
                ab: $crate::rules::skeleton::Ab,
            ) -> $crate::Result<()> {
                be.$kernel(c, a, &self.$map, self.conj, ab.0, ab.1)
            }
        }
    };
}
pub(crate) use unary_op;
