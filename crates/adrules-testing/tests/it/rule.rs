//! `check_rule` on a correct two-output rule (real and complex, all or some inputs active)
//! and its power to fail: each injected defect (a wrong pullback, a missing conjugation, a
//! wrong frule, an absent cotangent not treated as zero, a cotangent of the wrong shape, a
//! panic, an input changed in place) is the matching typed `RuleCheckError`, never a panic.

use std::sync::{Arc, Mutex};

use adrules_core::rule::{Keeps, Primal, Pullback, Rule, SyncBackend};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, Error, HostTensor, Permutation, Result,
    TraceSpec,
};
use adrules_testing::rule::{RuleCheck, RuleCheckError, check_rule};
use adrules_testing::{ReferenceBackend, Rng};

/// The defect injected into [`Poly`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    /// `ā` scaled by `1 + 1e-3`
    Scaled,
    /// `b̄ = a ⊙ ȳ₀` instead of `conj(a) ⊙ ȳ₀` (wrong on complex data only)
    NoConj,
    /// `ẏ₀ = ȧ ⊙ b` (the `a ⊙ ḃ` term dropped)
    Frule,
    /// an absent `ȳ₀` read as ones
    Absent,
    /// `ā` of shape `[1]`
    Shape,
    /// the pullback panics
    Panic,
    /// the primal scales a clone of `a` in place: harmless on a backend that keeps value
    /// semantics, a change of the caller's input on [`Leaky`]
    Mutate,
}

/// `(y₀, y₁) = (a ⊙ b, 3·a)`: `ā = conj(b) ⊙ ȳ₀ + 3·ȳ₁`, `b̄ = conj(a) ⊙ ȳ₀`;
/// `ẏ₀ = ȧ ⊙ b + a ⊙ ḃ`, `ẏ₁ = 3·ȧ`.
#[derive(Debug)]
struct Poly(Fault);

fn hadamard<B: Backend>(be: &B, x: &B::Tensor, y: &B::Tensor, conj: Conj) -> Result<B::Tensor> {
    let labels: String = ('a'..='z').take(be.rank(x)).collect();
    let spec = ContractSpec::from_labels(&labels, &labels, &labels)?;
    let dtype = be.dtype(x).join(be.dtype(y));
    let mut c = be.empty(&be.dims(x), dtype)?;
    let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
    be.contract(&mut c, x, y, &spec, conj, Conj::No, one, zero)?;
    Ok(c)
}

/// `c ← c + s·x`.
fn axpy<B: Backend>(be: &B, c: &mut B::Tensor, s: f64, x: &B::Tensor) -> Result<()> {
    let id = Permutation::identity(be.rank(x));
    be.add(c, x, &id, Conj::No, DynScalar::F64(s), DynScalar::F64(1.0))
}

fn scaled<B: Backend>(be: &B, x: &B::Tensor, s: f64) -> Result<B::Tensor> {
    let mut y = be.zeros(&be.dims(x), be.dtype(x))?;
    axpy(be, &mut y, s, x)?;
    Ok(y)
}

struct PolyPullback(Fault);

impl<B: SyncBackend> Pullback<B> for PolyPullback {
    fn pullback(
        &self,
        be: &B,
        x: &Primal<B>,
        c: &[Option<B::Tensor>],
    ) -> Result<Vec<Option<B::Tensor>>> {
        let (a, b) = (x.input(0)?, x.input(1)?);
        let y0_bar = match (&c[0], self.0) {
            (None, Fault::Absent) => {
                let n = be.to_host(a)?.len();
                let ones = vec![adrules_core::Complex64::new(1.0, 0.0); n];
                let ones = adrules_core::HostData::from_c64_projected(&ones, be.dtype(a));
                Some(be.from_host(HostTensor::new(&be.dims(a), ones)?)?)
            }
            (c0, _) => c0.clone(),
        };
        let mut a_bar = be.zeros(&be.dims(a), be.dtype(a))?;
        let mut b_bar = be.zeros(&be.dims(b), be.dtype(b))?;
        if let Some(c0) = &y0_bar {
            axpy(be, &mut a_bar, 1.0, &hadamard(be, b, c0, Conj::Yes)?)?;
            let conj = if self.0 == Fault::NoConj {
                Conj::No
            } else {
                Conj::Yes
            };
            axpy(be, &mut b_bar, 1.0, &hadamard(be, a, c0, conj)?)?;
        }
        if let Some(c1) = &c[1] {
            axpy(be, &mut a_bar, 3.0, c1)?;
        }
        match self.0 {
            Fault::Scaled => be.scale(&mut a_bar, DynScalar::F64(1.001))?,
            Fault::Shape => a_bar = be.zeros(&[1], be.dtype(a))?,
            Fault::Panic => panic!("a pullback that panics"),
            _ => {}
        }
        Ok(vec![
            x.active(0).then_some(a_bar),
            x.active(1).then_some(b_bar),
        ])
    }
}

impl Rule for Poly {
    fn name(&self) -> &str {
        "poly"
    }

    fn num_inputs(&self) -> usize {
        2
    }

    fn num_outputs(&self) -> usize {
        2
    }

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        let (a, b) = (be.dims(x[0]), be.dims(x[1]));
        if a == b {
            Ok(())
        } else {
            Err(Error::shape("b", &a, &b))
        }
    }

    fn keeps(&self, _: &[bool]) -> Keeps {
        Keeps::inputs(2, 2)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let y0 = hadamard(be, x[0], x[1], Conj::No)?;
        let y1 = if self.0 == Fault::Mutate {
            let mut y1 = x[0].clone();
            be.scale(&mut y1, DynScalar::F64(3.0))?;
            y1
        } else {
            scaled(be, x[0], 3.0)?
        };
        Ok((vec![y0, y1], Box::new(PolyPullback(self.0))))
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let (y, _) = self.rrule(be, x, &[false, false])?;
        let mut dy0 = be.zeros(&be.dims(x[0]), be.dtype(&y[0]))?;
        if let Some(da) = dx[0] {
            axpy(be, &mut dy0, 1.0, &hadamard(be, da, x[1], Conj::No)?)?;
        }
        if let (Some(db), false) = (dx[1], self.0 == Fault::Frule) {
            axpy(be, &mut dy0, 1.0, &hadamard(be, x[0], db, Conj::No)?)?;
        }
        let dy1 = dx[0].map(|da| scaled(be, da, 3.0)).transpose()?;
        Ok((y, vec![Some(dy0), dy1]))
    }
}

fn inputs<B: Backend>(be: &B, dtype: DType, seed: u64) -> [B::Tensor; 2] {
    let mut rng = Rng::seed(seed);
    [0, 1].map(|_| be.from_host(rng.tensor(&[2, 3], dtype)).unwrap())
}

fn check<B: SyncBackend>(
    rule: &Poly,
    be: &B,
    dtype: DType,
) -> std::result::Result<adrules_testing::RuleReport, RuleCheckError> {
    let [a, b] = inputs(be, dtype, 7);
    check_rule(rule, be, &[&a, &b], &RuleCheck::default())
}

#[test]
fn a_correct_rule_passes_on_every_dtype() {
    for dtype in [DType::F64, DType::C64, DType::F32, DType::C32] {
        let r = check(&Poly(Fault::None), &ReferenceBackend, dtype).unwrap();
        assert!(r.pullback_ratio <= 1.0, "{dtype}: {r:?}");
        let f = r.frule.expect("the rule has an frule");
        assert!(
            f.tangent_ratio <= 1.0 && f.adjoint_mismatch < 1e-4,
            "{dtype}: {f:?}"
        );
        assert!(r.evaluations > 0);
    }
    // one input active: the other gets no cotangent
    let [a, b] = inputs(&ReferenceBackend, DType::F64, 3);
    let config = RuleCheck {
        active: Some(vec![false, true]),
        ..RuleCheck::default()
    };
    check_rule(&Poly(Fault::None), &ReferenceBackend, &[&a, &b], &config).unwrap();
}

#[test]
fn the_sample_rules_pass() {
    use adrules_testing::samples::{Fma, Mul, Split};
    for dtype in [DType::F64, DType::C64] {
        let be = ReferenceBackend;
        let [a, b] = inputs(&be, dtype, 11);
        let [c, _] = inputs(&be, dtype, 12);
        let config = RuleCheck::default();
        check_rule(&Mul, &be, &[&a, &b], &config).unwrap();
        check_rule(&Split, &be, &[&a], &config).unwrap();
        let r = check_rule(&Fma, &be, &[&a, &b, &c], &config).unwrap();
        assert!(r.frule.is_some());
    }
}

#[test]
fn each_injected_defect_fails_with_its_error() {
    let be = ReferenceBackend;
    let e = check(&Poly(Fault::Scaled), &be, DType::F64).unwrap_err();
    assert!(
        matches!(e, RuleCheckError::Pullback { input: 0, .. }),
        "{e}"
    );
    // a missing conjugation is invisible on real data, caught on complex data
    check(&Poly(Fault::NoConj), &be, DType::F64).unwrap();
    let e = check(&Poly(Fault::NoConj), &be, DType::C64).unwrap_err();
    assert!(
        matches!(e, RuleCheckError::Pullback { input: 1, .. }),
        "{e}"
    );
    let e = check(&Poly(Fault::Frule), &be, DType::F64).unwrap_err();
    assert!(matches!(e, RuleCheckError::Frule { output: 0, .. }), "{e}");
    let e = check(&Poly(Fault::Absent), &be, DType::F64).unwrap_err();
    assert!(
        matches!(e, RuleCheckError::AbsentCotangent { output: 1, .. }),
        "{e}"
    );
    let e = check(&Poly(Fault::Shape), &be, DType::F64).unwrap_err();
    match &e {
        RuleCheckError::Rule(Error::InvalidArgument { arg, reason }) => {
            assert_eq!(arg, "rule `poly`");
            assert!(reason.contains("input 0"), "{reason}");
        }
        _ => panic!("{e}"),
    }
    let e = check(&Poly(Fault::Panic), &be, DType::F64).unwrap_err();
    assert!(
        matches!(&e, RuleCheckError::Panicked(m) if m.contains("panics")),
        "{e}"
    );
    // bad input is the rule's own typed error
    let mut rng = Rng::seed(1);
    let a = be.from_host(rng.tensor(&[2, 3], DType::F64)).unwrap();
    let b = be.from_host(rng.tensor(&[3], DType::F64)).unwrap();
    let e = check_rule(&Poly(Fault::None), &be, &[&a, &b], &RuleCheck::default()).unwrap_err();
    assert!(
        matches!(e, RuleCheckError::Rule(Error::ShapeMismatch { ref arg, .. }) if arg == "b"),
        "{e}"
    );
}

#[test]
fn an_input_changed_in_place_is_caught() {
    // value semantics kept: the in-place scale of a clone is harmless
    check(&Poly(Fault::Mutate), &ReferenceBackend, DType::F64).unwrap();
    // on a backend whose handles share their storage, the same rule changes its input
    check(&Poly(Fault::None), &Leaky, DType::F64).unwrap();
    let e = check(&Poly(Fault::Mutate), &Leaky, DType::F64).unwrap_err();
    match &e {
        RuleCheckError::Mutated { what } => assert_eq!(what, "input 0 (during the rrule)"),
        _ => panic!("{e}"),
    }
}

/// A backend that breaks the value semantics of [`Backend`]: a tensor is a shared cell, and
/// an update through one handle is seen by every clone (the reference backend does the
/// arithmetic).
#[derive(Clone, Debug)]
struct Leaky;

type Cell = Arc<Mutex<Arc<HostTensor>>>;

fn get(t: &Cell) -> Arc<HostTensor> {
    t.lock().unwrap().clone()
}

/// Runs `f` on the reference backend's value of `c` and writes the result into the cell.
fn update(c: &mut Cell, f: impl FnOnce(&mut Arc<HostTensor>) -> Result<()>) -> Result<()> {
    let mut v = get(c);
    f(&mut v)?;
    *c.lock().unwrap() = v;
    Ok(())
}

fn cell(t: Arc<HostTensor>) -> Cell {
    Arc::new(Mutex::new(t))
}

impl Backend for Leaky {
    type Tensor = Cell;

    fn name(&self) -> &'static str {
        "leaky"
    }

    fn dtypes(&self) -> &'static [DType] {
        ReferenceBackend.dtypes()
    }

    fn dims(&self, t: &Cell) -> Dims {
        ReferenceBackend.dims(&get(t))
    }

    fn dtype(&self, t: &Cell) -> DType {
        ReferenceBackend.dtype(&get(t))
    }

    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Cell> {
        ReferenceBackend.zeros(dims, dtype).map(cell)
    }

    fn to_host(&self, t: &Cell) -> Result<HostTensor> {
        ReferenceBackend.to_host(&get(t))
    }

    fn from_host(&self, h: HostTensor) -> Result<Cell> {
        ReferenceBackend.from_host(h).map(cell)
    }

    fn add(
        &self,
        c: &mut Cell,
        a: &Cell,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let a = get(a);
        update(c, |c| ReferenceBackend.add(c, &a, p, conj, alpha, beta))
    }

    fn add_projected(
        &self,
        c: &mut Cell,
        a: &Cell,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let a = get(a);
        update(c, |c| {
            ReferenceBackend.add_projected(c, &a, p, conj, alpha, beta)
        })
    }

    fn trace(
        &self,
        c: &mut Cell,
        a: &Cell,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let a = get(a);
        update(c, |c| {
            ReferenceBackend.trace(c, &a, spec, conj, alpha, beta)
        })
    }

    fn add_to_diagonal(
        &self,
        a: &mut Cell,
        c: &Cell,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        let c = get(c);
        update(a, |a| {
            ReferenceBackend.add_to_diagonal(a, &c, spec, conj, alpha)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn contract(
        &self,
        c: &mut Cell,
        a: &Cell,
        b: &Cell,
        spec: &ContractSpec,
        conj_a: Conj,
        conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let (a, b) = (get(a), get(b));
        update(c, |c| {
            ReferenceBackend.contract(c, &a, &b, spec, conj_a, conj_b, alpha, beta)
        })
    }

    fn inner(&self, x: &Cell, y: &Cell) -> Result<DynScalar> {
        ReferenceBackend.inner(&get(x), &get(y))
    }

    fn scale(&self, t: &mut Cell, s: DynScalar) -> Result<()> {
        update(t, |t| ReferenceBackend.scale(t, s))
    }

    fn scalar(&self, t: &Cell) -> Result<DynScalar> {
        ReferenceBackend.scalar(&get(t))
    }
}
