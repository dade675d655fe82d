//! The cross-backend conformance suite: every shared rule checked on a backend.
//!
//! Each check runs a primitive call through the backend under test and compares
//! - the primal with the naive [`ReferenceBackend`];
//! - the pushforward with central finite differences of the primal (evaluated in double
//!   precision);
//! - every input's cotangent with finite differences (`Re⟨C̄, J_i·ẋ_i⟩ = Re⟨x̄_i, ẋ_i⟩`, one
//!   input at a time);
//! - pushforward against pullback with the adjoint (dot-product) test;
//! - that inactive inputs get no cotangent.
//!
//! A test file instantiates the whole suite for one backend with [`suite!`]. The matrix
//! follows issue 3: dtypes f32/f64/c32/c64 and mixed element-type pairs, every conjugation-flag
//! combination, α and β in {0 constant, 0.0 active, random real, random complex}, the
//! reference implementation's test vectors (TensorOperations.jl `test/ad.jl`, 0-based), and the
//! gap cases of `shared/notes/rules-math.md`.

#![allow(dead_code)] // each test binary uses a subset of the helpers

use adrules::rules::{Activity, AddOp, ContractOp, Cotangents, Tangents, TraceOp};
use adrules::{
    Backend, Conj, ContractSpec, DType, DynScalar, HostTensor, Permutation, Result, TraceSpec,
};
use adrules_testing::oracle::{load, oracle_dir};
use adrules_testing::{
    FiniteDifference, ReferenceBackend, Rng, Tolerance, Value, adjoint_mismatch,
};

/// What the backend under test can do.
#[derive(Clone, Debug)]
pub struct Config {
    /// dtypes to test (the backend's own list by default)
    pub dtypes: Vec<DType>,
    /// largest rank of any tensor the backend accepts
    pub max_rank: usize,
}

impl Config {
    /// Every dtype the backend stores, any rank.
    pub fn of<B: Backend>(be: &B) -> Self {
        Config {
            dtypes: be.dtypes().to_vec(),
            max_rank: usize::MAX,
        }
    }

    fn supports(&self, dtypes: &[DType], ranks: &[usize]) -> bool {
        dtypes.iter().all(|d| self.dtypes.contains(d)) && ranks.iter().all(|&r| r <= self.max_rank)
    }
}

/// Instantiates every conformance test for a backend expression (and optionally a config).
macro_rules! suite {
    ($be:expr) => {
        conformance::suite!($be, conformance::Config::of(&$be));
    };
    ($be:expr, $cfg:expr) => {
        #[test]
        fn add_rules() {
            conformance::add_rules(&$be, &$cfg);
        }
        #[test]
        fn trace_rules() {
            conformance::trace_rules(&$be, &$cfg);
        }
        #[test]
        fn contract_rules() {
            conformance::contract_rules(&$be, &$cfg);
        }
        #[test]
        fn scalar_rules() {
            conformance::scalar_rules(&$be, &$cfg);
        }
        #[test]
        fn swapped_operands_give_identical_cotangents() {
            conformance::swapped_operands(&$be, &$cfg);
        }
        #[test]
        fn accumulate_adds_into_existing_buffers() {
            conformance::accumulate(&$be, &$cfg);
        }
        #[test]
        fn multi_dot_oracle_as_pairwise_chain() {
            conformance::multi_dot_oracle(&$be, &$cfg);
        }
        #[test]
        fn rule_errors_are_typed() {
            conformance::rule_errors(&$be, &$cfg);
        }
    };
}
pub(crate) use suite;

/// One primitive call under test.
#[derive(Clone, Debug)]
enum Op {
    Add(AddOp),
    Trace(TraceOp),
    Contract(ContractOp),
}

impl Op {
    fn coeffs(&self) -> (DynScalar, DynScalar) {
        match self {
            Op::Add(o) => (o.alpha, o.beta),
            Op::Trace(o) => (o.alpha, o.beta),
            Op::Contract(o) => (o.alpha, o.beta),
        }
    }

    fn with_coeffs(&self, alpha: DynScalar, beta: DynScalar) -> Op {
        match self {
            Op::Add(o) => Op::Add(o.clone().alpha(alpha).beta(beta)),
            Op::Trace(o) => Op::Trace(o.clone().alpha(alpha).beta(beta)),
            Op::Contract(o) => Op::Contract(o.clone().alpha(alpha).beta(beta)),
        }
    }

    fn has_b(&self) -> bool {
        matches!(self, Op::Contract(_))
    }

    /// Primal on any backend from host values `[C, A, (B)]` and the op's coefficients.
    fn primal<B: Backend>(&self, be: &B, t: &[HostTensor]) -> Result<HostTensor> {
        let mut c = be.from_host(t[0].clone())?;
        let a = be.from_host(t[1].clone())?;
        match self {
            Op::Add(o) => o.apply(be, &mut c, &a)?,
            Op::Trace(o) => o.apply(be, &mut c, &a)?,
            Op::Contract(o) => {
                let b = be.from_host(t[2].clone())?;
                o.apply(be, &mut c, &a, &b)?
            }
        }
        be.to_host(&c)
    }
}

/// A full check of one op on host inputs `[C, A, (B)]`.
struct Case {
    name: String,
    op: Op,
    tensors: Vec<HostTensor>,
    active: Activity,
}

fn tol(dtypes: &[DType]) -> f64 {
    if dtypes.iter().all(|d| d.is_double()) {
        1e-9
    } else {
        2e-4
    }
}

fn rel_err(x: &Value, y: &Value) -> f64 {
    let d: f64 = x
        .to_c64_vec()
        .iter()
        .zip(y.to_c64_vec())
        .map(|(a, b)| (a - b).norm_sqr())
        .sum::<f64>()
        .sqrt();
    d / (y.norm() + x.norm()).max(1e-300)
}

impl Case {
    fn dtypes(&self) -> Vec<DType> {
        let (al, be) = self.op.coeffs();
        let mut d: Vec<DType> = self.tensors.iter().map(|t| t.dtype()).collect();
        d.extend([al.dtype(), be.dtype()]);
        d
    }

    /// The input values in order `[C, A, (B), α, β]` and their activity.
    fn inputs(&self) -> (Vec<Value>, Vec<bool>) {
        let (al, be) = self.op.coeffs();
        let mut v: Vec<Value> = self.tensors.iter().cloned().map(Value::Tensor).collect();
        let mut act = vec![self.active.c, self.active.a];
        if self.op.has_b() {
            act.push(self.active.b);
        }
        v.push(Value::Scalar(al));
        v.push(Value::Scalar(be));
        act.extend([self.active.alpha, self.active.beta]);
        (v, act)
    }

    fn run<B: Backend>(&self, be: &B, rng: &mut Rng) -> std::result::Result<(), String> {
        let err = |e: adrules::Error| format!("{}: {e}", self.name);
        let nt = self.tensors.len();
        let (x, active) = self.inputs();
        let tolerance = tol(&self.dtypes());

        // Primal against the reference.
        let got = self.op.primal(be, &self.tensors).map_err(err)?;
        let want = self
            .op
            .primal(&ReferenceBackend, &self.tensors)
            .map_err(err)?;
        let r = rel_err(&Value::Tensor(got.clone()), &Value::Tensor(want));
        if r > tolerance {
            return Err(format!(
                "{}: primal differs from the reference by {r:e}",
                self.name
            ));
        }

        // Directions for the active inputs (zero for inactive ones) and a cotangent.
        let dx: Vec<Value> = x
            .iter()
            .zip(&active)
            .map(|(v, &on)| {
                let r = match v {
                    Value::Tensor(t) => Value::Tensor(rng.tensor(t.dims(), t.dtype())),
                    Value::Scalar(s) => Value::Scalar(rng.scalar(s.dtype())),
                };
                if on {
                    r
                } else {
                    v.axpy(-1.0, v).expect("same shape") // zero of the same kind
                }
            })
            .collect();
        let cbar_h = rng.tensor(got.dims(), got.dtype());
        let cbar_v = Value::Tensor(cbar_h.clone());

        // Rules on the backend under test.
        let up = |t: &HostTensor| be.from_host(t.clone()).map_err(err);
        let dev: Vec<B::Tensor> = self
            .tensors
            .iter()
            .map(up)
            .collect::<std::result::Result<_, _>>()?;
        let ddev: Vec<B::Tensor> = dx[..nt]
            .iter()
            .map(|v| up(v.tensor("direction").expect("tensor")))
            .collect::<std::result::Result<_, _>>()?;
        let scal = |v: &Value| match v {
            Value::Scalar(s) => *s,
            Value::Tensor(_) => unreachable!("coefficient directions are scalars"),
        };
        let tangents = Tangents::<B> {
            c: active[0].then_some(&ddev[0]),
            a: active[1].then_some(&ddev[1]),
            b: if self.op.has_b() && active[2] {
                Some(&ddev[2])
            } else {
                None
            },
            alpha: active[nt].then(|| scal(&dx[nt])),
            beta: active[nt + 1].then(|| scal(&dx[nt + 1])),
        };
        let cbar = up(&cbar_h)?;
        let mut c_f = dev[0].clone();
        let mut c_r = dev[0].clone();
        let (dc, cot): (B::Tensor, Cotangents<B>) = match &self.op {
            Op::Add(o) => {
                let dc = o.frule(be, &mut c_f, &dev[1], tangents).map_err(err)?;
                let pb = o.rrule(be, &mut c_r, &dev[1], self.active).map_err(err)?;
                (dc, pb.pullback(&cbar).map_err(err)?)
            }
            Op::Trace(o) => {
                let dc = o.frule(be, &mut c_f, &dev[1], tangents).map_err(err)?;
                let pb = o.rrule(be, &mut c_r, &dev[1], self.active).map_err(err)?;
                (dc, pb.pullback(&cbar).map_err(err)?)
            }
            Op::Contract(o) => {
                let dc = o
                    .frule(be, &mut c_f, &dev[1], &dev[2], tangents)
                    .map_err(err)?;
                let pb = o
                    .rrule(be, &mut c_r, &dev[1], &dev[2], self.active)
                    .map_err(err)?;
                (dc, pb.pullback(&cbar).map_err(err)?)
            }
        };
        // The rules must leave the same primal as the plain call, and not touch the inputs.
        for (label, c) in [("frule", &c_f), ("rrule", &c_r)] {
            let v = Value::Tensor(be.to_host(c).map_err(err)?);
            if rel_err(&v, &Value::Tensor(got.clone())) > tolerance {
                return Err(format!("{}: {label} primal differs from apply", self.name));
            }
        }
        if be.to_host(&dev[0]).map_err(err)? != self.tensors[0] {
            return Err(format!("{}: the caller's C handle was modified", self.name));
        }

        // Cotangents as values in input order, checking activity.
        let host = |t: &Option<B::Tensor>| -> std::result::Result<Option<Value>, String> {
            t.as_ref()
                .map(|t| be.to_host(t).map(Value::Tensor).map_err(err))
                .transpose()
        };
        let mut xbar = vec![host(&cot.c)?, host(&cot.a)?];
        if self.op.has_b() {
            xbar.push(host(&cot.b)?);
        } else if cot.b.is_some() {
            return Err(format!(
                "{}: cotangent for a B that does not exist",
                self.name
            ));
        }
        xbar.push(cot.alpha.map(Value::Scalar));
        xbar.push(cot.beta.map(Value::Scalar));
        for (i, (xb, &on)) in xbar.iter().zip(&active).enumerate() {
            if xb.is_some() != on {
                return Err(format!(
                    "{}: input {i} active = {on} but cotangent present = {}",
                    self.name,
                    xb.is_some()
                ));
            }
            if let Some(xb) = xb
                && xb.dtype() != x[i].dtype()
            {
                return Err(format!(
                    "{}: cotangent {i} has dtype {} but its primal {}",
                    self.name,
                    xb.dtype(),
                    x[i].dtype()
                ));
            }
        }

        // Pushforward against finite differences (all directions at once).
        let fd = FiniteDifference::default();
        let f = |v: &[Value]| -> Result<Value> {
            let (al, bt) = match (&v[nt], &v[nt + 1]) {
                (Value::Scalar(a), Value::Scalar(b)) => (*a, *b),
                _ => unreachable!(),
            };
            let t: Vec<HostTensor> = v[..nt]
                .iter()
                .map(|v| v.tensor("x").cloned())
                .collect::<Result<_>>()?;
            self.op
                .with_coeffs(al, bt)
                .primal(&ReferenceBackend, &t)
                .map(Value::Tensor)
        };
        let dc_v = Value::Tensor(be.to_host(&dc).map_err(err)?);
        let fd_all = fd.jvp(f, &x, &dx).map_err(err)?;
        let r = rel_err(&dc_v, &fd_all);
        if r > tolerance {
            return Err(format!(
                "{}: pushforward differs from finite differences by {r:e}",
                self.name
            ));
        }

        // Each cotangent against finite differences along its own direction.
        for i in 0..x.len() {
            let Some(xb) = &xbar[i] else { continue };
            let mut d = dx.clone();
            for (j, dj) in d.iter_mut().enumerate() {
                if j != i {
                    *dj = dj.axpy(-1.0, dj).expect("same shape");
                }
            }
            let fd_i = fd.jvp(f, &x, &d).map_err(err)?;
            let lhs = cbar_v.inner(&fd_i).map_err(err)?.re;
            let rhs = xb.inner(&dx[i]).map_err(err)?.re;
            // FD noise scales with the whole output's sensitivity, not with this input's
            // (which is exactly zero when, say, α = 0).
            let scale = cbar_v.norm() * (fd_i.norm() + fd_all.norm()) + xb.norm() * dx[i].norm();
            if (lhs - rhs).abs() > tolerance * scale.max(1e-300) {
                return Err(format!(
                    "{}: cotangent of input {i} fails the finite-difference check: {lhs} vs {rhs}",
                    self.name
                ));
            }
        }

        // Adjoint test between the two rules.
        let m = adjoint_mismatch(&cbar_v, &dc_v, &xbar, &dx).map_err(err)?;
        if m > tolerance {
            return Err(format!("{}: adjoint test mismatch {m:e}", self.name));
        }
        Ok(())
    }
}

/// α or β variants of the matrix: 0 constant, 0.0 active, random real, random complex.
fn coefficient_variants(rng: &mut Rng, dtype: DType) -> Vec<(String, DynScalar, bool)> {
    let mut v = vec![
        (
            "0 constant".to_string(),
            DynScalar::zero(dtype.real()),
            false,
        ),
        (
            "0.0 active".to_string(),
            DynScalar::zero(dtype.real()),
            true,
        ),
        ("random real".to_string(), rng.scalar(dtype.real()), true),
    ];
    if dtype.is_complex() {
        v.push(("random complex".to_string(), rng.scalar(dtype), true));
    }
    v
}

const CONJ: [Conj; 2] = [Conj::No, Conj::Yes];

fn run_all<B: Backend>(be: &B, cfg: &Config, cases: Vec<Case>) {
    let mut rng = Rng::seed(7);
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases {
        let ranks: Vec<usize> = case.tensors.iter().map(|t| t.dims().len()).collect();
        if !cfg.supports(&case.dtypes(), &ranks) {
            continue;
        }
        ran += 1;
        if let Err(e) = case.run(be, &mut rng) {
            failures.push(e);
        }
    }
    assert!(ran > 0, "no case is supported by this backend's config");
    assert!(
        failures.is_empty(),
        "{} of {ran} cases failed; first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Element-type pairs (A, C) for add and trace; coefficients take C's dtype.
const UNARY_PAIRS: [(DType, DType); 6] = [
    (DType::F32, DType::F32),
    (DType::F64, DType::F64),
    (DType::C32, DType::C32),
    (DType::C64, DType::C64),
    (DType::F32, DType::F64),
    (DType::F64, DType::C64),
];

fn unary_cases(
    rng: &mut Rng,
    name: &str,
    a_dims: &[usize],
    c_dims: &[usize],
    make: &dyn Fn(Conj) -> Op,
) -> Vec<Case> {
    let mut cases = Vec::new();
    for (ta, tc) in UNARY_PAIRS {
        for conj in CONJ {
            for (an, al, al_on) in coefficient_variants(rng, tc) {
                for (bn, bt, bt_on) in coefficient_variants(rng, tc) {
                    cases.push(Case {
                        name: format!("{name} A:{ta} C:{tc} conj:{conj:?} α {an} β {bn}"),
                        op: make(conj).with_coeffs(al, bt),
                        tensors: vec![rng.tensor(c_dims, tc), rng.tensor(a_dims, ta)],
                        active: Activity {
                            c: true,
                            a: true,
                            b: false,
                            alpha: al_on,
                            beta: bt_on,
                        },
                    });
                }
            }
        }
        // An f32 tensor with f64 coefficients (rounded into the f32 kernels).
        if tc == DType::F32 {
            cases.push(Case {
                name: format!("{name} f32 tensors with f64 α, β"),
                op: make(Conj::No).with_coeffs(rng.scalar(DType::F64), rng.scalar(DType::F64)),
                tensors: vec![rng.tensor(c_dims, tc), rng.tensor(a_dims, ta)],
                active: Activity::ALL,
            });
        }
    }
    cases
}

/// Permuted add: the reference vector A (2,3,4,2,1) with permutation (1,0,3,2,4), and a
/// rank-0 add.
pub fn add_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(1);
    let p = Permutation::new(&[1, 0, 3, 2, 4]).unwrap();
    let c_dims: Vec<usize> = p.apply(&[2, 3, 4, 2, 1]).to_vec();
    let mut cases = unary_cases(&mut rng, "add", &[2, 3, 4, 2, 1], &c_dims, &|conj| {
        Op::Add(AddOp::new(p.clone()).conj(conj))
    });
    cases.extend(unary_cases(&mut rng, "add rank 0", &[], &[], &|conj| {
        Op::Add(AddOp::new(Permutation::identity(0)).conj(conj))
    }));
    cases.extend(unary_cases(
        &mut rng,
        "add zero-size",
        &[3, 0, 2],
        &[2, 3, 0],
        &|conj| Op::Add(AddOp::new(Permutation::new(&[2, 0, 1]).unwrap()).conj(conj)),
    ));
    run_all(be, cfg, cases);
}

/// Partial trace: A (2,3,4,2,5) with p = (2,4,1), pair (0,3); the double trace A (2,3,4,2,4),
/// p = (1), pairs (0,3) and (2,4); a full trace to a scalar (p empty).
pub fn trace_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(2);
    let single = TraceSpec::new(&[2, 4, 1], &[0], &[3]).unwrap();
    let double = TraceSpec::new(&[1], &[0, 2], &[3, 4]).unwrap();
    let full = TraceSpec::new(&[], &[0, 1], &[2, 3]).unwrap();
    let mut cases = unary_cases(&mut rng, "trace", &[2, 3, 4, 2, 5], &[4, 5, 3], &|conj| {
        Op::Trace(TraceOp::new(single.clone()).conj(conj))
    });
    cases.extend(unary_cases(
        &mut rng,
        "double trace",
        &[2, 3, 4, 2, 4],
        &[3],
        &|conj| Op::Trace(TraceOp::new(double.clone()).conj(conj)),
    ));
    cases.extend(unary_cases(
        &mut rng,
        "full trace",
        &[3, 2, 3, 2],
        &[],
        &|conj| Op::Trace(TraceOp::new(full.clone()).conj(conj)),
    ));
    run_all(be, cfg, cases);
}

/// Element-type pairs (A, B) for contraction; C and the coefficients take the joined dtype.
const BINARY_PAIRS: [(DType, DType); 7] = [
    (DType::F32, DType::F32),
    (DType::F64, DType::F64),
    (DType::C32, DType::C32),
    (DType::C64, DType::C64),
    (DType::F32, DType::F64),
    (DType::F64, DType::C64),
    (DType::C64, DType::F64),
];

fn contract_cases(
    rng: &mut Rng,
    name: &str,
    spec: &ContractSpec,
    a_dims: &[usize],
    b_dims: &[usize],
    full_matrix: bool,
) -> Vec<Case> {
    let c_dims = spec.output_dims(a_dims, b_dims).unwrap().to_vec();
    let mut cases = Vec::new();
    for (ta, tb) in BINARY_PAIRS {
        let tc = ta.join(tb);
        for ca in CONJ {
            for cb in CONJ {
                let variants: Vec<_> = if full_matrix {
                    let al = coefficient_variants(rng, tc);
                    let bt = coefficient_variants(rng, tc);
                    al.iter()
                        .flat_map(|a| bt.iter().map(move |b| (a.clone(), b.clone())))
                        .collect()
                } else {
                    let r = rng.scalar(tc);
                    vec![(
                        ("random".into(), r, true),
                        ("random".into(), rng.scalar(tc), true),
                    )]
                };
                for ((an, al, al_on), (bn, bt, bt_on)) in variants {
                    cases.push(Case {
                        name: format!("{name} A:{ta} B:{tb} conj:({ca:?},{cb:?}) α {an} β {bn}"),
                        op: Op::Contract(ContractOp::new(spec.clone()).conj(ca, cb))
                            .with_coeffs(al, bt),
                        tensors: vec![
                            rng.tensor(&c_dims, tc),
                            rng.tensor(a_dims, ta),
                            rng.tensor(b_dims, tb),
                        ],
                        active: Activity {
                            c: true,
                            a: true,
                            b: true,
                            alpha: al_on,
                            beta: bt_on,
                        },
                    });
                }
            }
        }
    }
    // f32 tensors with f64 coefficients; real tensors with a complex α into a complex C.
    cases.push(Case {
        name: format!("{name} f32 tensors with f64 α, β"),
        op: Op::Contract(ContractOp::new(spec.clone()))
            .with_coeffs(rng.scalar(DType::F64), rng.scalar(DType::F64)),
        tensors: vec![
            rng.tensor(&c_dims, DType::F32),
            rng.tensor(a_dims, DType::F32),
            rng.tensor(b_dims, DType::F32),
        ],
        active: Activity::ALL,
    });
    cases.push(Case {
        name: format!("{name} real A, B with complex α into complex C"),
        op: Op::Contract(ContractOp::new(spec.clone()))
            .with_coeffs(rng.scalar(DType::C64), rng.scalar(DType::C64)),
        tensors: vec![
            rng.tensor(&c_dims, DType::C64),
            rng.tensor(a_dims, DType::F64),
            rng.tensor(b_dims, DType::F64),
        ],
        active: Activity::ALL,
    });
    cases
}

/// Contraction: the reference vector A (2,3,4,2,5), open_a (1,3,4), contr_a (0,2), B (4,2,3),
/// contr_b (1,0), open_b (2), output permutation (2,1,3,0); a plain matrix product; an outer
/// product; a contraction to a scalar; zero-size dimensions.
pub fn contract_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(3);
    let reference = ContractSpec::new(&[1, 3, 4], &[0, 2], &[1, 0], &[2], &[2, 1, 3, 0]).unwrap();
    let mut cases = contract_cases(
        &mut rng,
        "contract",
        &reference,
        &[2, 3, 4, 2, 5],
        &[4, 2, 3],
        true,
    );
    let mm = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    cases.extend(contract_cases(
        &mut rng,
        "matrix product",
        &mm,
        &[3, 4],
        &[4, 5],
        false,
    ));
    let outer = ContractSpec::from_labels("ij", "k", "kji").unwrap();
    cases.extend(contract_cases(
        &mut rng,
        "outer product",
        &outer,
        &[2, 3],
        &[4],
        false,
    ));
    let dot = ContractSpec::from_labels("ij", "ji", "").unwrap();
    cases.extend(contract_cases(
        &mut rng,
        "to scalar",
        &dot,
        &[3, 4],
        &[4, 3],
        false,
    ));
    cases.extend(contract_cases(
        &mut rng,
        "zero-size contracted",
        &mm,
        &[3, 0],
        &[0, 2],
        false,
    ));
    cases.extend(contract_cases(
        &mut rng,
        "zero-size open",
        &mm,
        &[0, 4],
        &[4, 2],
        false,
    ));
    run_all(be, cfg, cases);
}

/// Scalar extraction: value, pullback (projected onto the tensor's dtype) and pushforward.
pub fn scalar_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(4);
    for &dt in &cfg.dtypes {
        let h = rng.tensor(&[], dt);
        let t = be.from_host(h.clone()).unwrap();
        let (v, pb) = adrules::rules::scalar_rrule(be, &t).unwrap();
        assert_eq!(v, h.data().get(0).unwrap());
        let cbar = rng.scalar(DType::C64);
        let g = be.to_host(&pb.pullback(cbar).unwrap()).unwrap();
        assert_eq!(g.dtype(), dt);
        assert!(g.dims().is_empty());
        let want = cbar.project(dt);
        assert_eq!(
            g.data().get(0).unwrap(),
            want,
            "scalar pullback projects onto {dt}"
        );
        let dh = rng.tensor(&[], dt);
        let dt_dev = be.from_host(dh.clone()).unwrap();
        let (v2, dv) = adrules::rules::scalar_frule(be, &t, &dt_dev).unwrap();
        assert_eq!(v2, v);
        assert_eq!(dv, dh.data().get(0).unwrap());
        let not_scalar = be.from_host(rng.tensor(&[2], dt)).unwrap();
        assert!(matches!(
            adrules::rules::scalar_rrule(be, &not_scalar),
            Err(adrules::Error::RankMismatch { .. })
        ));
    }
}

fn cot_host<B: Backend>(be: &B, t: &Option<B::Tensor>) -> HostTensor {
    be.to_host(t.as_ref().expect("active input has a cotangent"))
        .unwrap()
}

/// Swapping the operand order (A·B vs B·A with the spec mirrored) gives identical cotangents.
pub fn swapped_operands<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(5);
    for &dt in &cfg.dtypes {
        let ab = ContractSpec::from_labels("abc", "cbd", "da").unwrap();
        let ba = ContractSpec::from_labels("cbd", "abc", "da").unwrap();
        let (ha, hb) = (rng.tensor(&[2, 3, 4], dt), rng.tensor(&[4, 3, 5], dt));
        let (a, b) = (be.from_host(ha).unwrap(), be.from_host(hb).unwrap());
        let cbar = be.from_host(rng.tensor(&[5, 2], dt)).unwrap();
        let al = rng.scalar(dt);
        let (ca, cb) = (Conj::Yes, Conj::No);
        let mut c1 = be.zeros(&[5, 2], dt).unwrap();
        let mut c2 = be.zeros(&[5, 2], dt).unwrap();
        let g1 = ContractOp::new(ab)
            .conj(ca, cb)
            .alpha(al)
            .rrule(be, &mut c1, &a, &b, Activity::ALL)
            .unwrap()
            .pullback(&cbar)
            .unwrap();
        let g2 = ContractOp::new(ba)
            .conj(cb, ca)
            .alpha(al)
            .rrule(be, &mut c2, &b, &a, Activity::ALL)
            .unwrap()
            .pullback(&cbar)
            .unwrap();
        let t = Tolerance::for_dtype(dt);
        let v = |h: HostTensor| Value::Tensor(h);
        t.check(
            &v(be.to_host(&c1).unwrap()),
            &v(be.to_host(&c2).unwrap()),
            "primal",
        )
        .unwrap();
        t.check(
            &v(cot_host(be, &g1.a)),
            &v(cot_host(be, &g2.b)),
            "cotangent of A",
        )
        .unwrap();
        t.check(
            &v(cot_host(be, &g1.b)),
            &v(cot_host(be, &g2.a)),
            "cotangent of B",
        )
        .unwrap();
        let (x, y) = (g1.alpha.unwrap().to_c64(), g2.alpha.unwrap().to_c64());
        assert!((x - y).norm() <= 1e-3 * (1.0 + x.norm()), "ᾱ {x} vs {y}");
    }
}

/// `accumulate` adds into existing buffers: twice into the same slots equals twice the
/// fresh cotangents; coefficient cotangents add too.
pub fn accumulate<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(6);
    for &dt in &cfg.dtypes {
        let spec = ContractSpec::from_labels("ij", "jk", "ki").unwrap();
        let a = be.from_host(rng.tensor(&[3, 4], dt)).unwrap();
        let b = be.from_host(rng.tensor(&[4, 2], dt)).unwrap();
        let mut c = be.from_host(rng.tensor(&[2, 3], dt)).unwrap();
        let op = ContractOp::new(spec)
            .alpha(rng.scalar(dt))
            .beta(rng.scalar(dt));
        let pb = op.rrule(be, &mut c, &a, &b, Activity::ALL).unwrap();
        let cbar = be.from_host(rng.tensor(&[2, 3], dt)).unwrap();
        let fresh = pb.pullback(&cbar).unwrap();
        let mut acc = pb.pullback(&cbar).unwrap();
        pb.accumulate(&cbar, &mut acc).unwrap();
        let tol = Tolerance::for_dtype(dt);
        for (f, a) in [(&fresh.a, &acc.a), (&fresh.b, &acc.b), (&fresh.c, &acc.c)] {
            let f = be.to_host(f.as_ref().unwrap()).unwrap();
            let a = be.to_host(a.as_ref().unwrap()).unwrap();
            let twice = Value::Tensor(f.clone())
                .axpy(1.0, &Value::Tensor(f))
                .unwrap();
            tol.check(&Value::Tensor(a), &twice, "accumulated cotangent")
                .unwrap();
        }
        let (f, a) = (fresh.alpha.unwrap().to_c64(), acc.alpha.unwrap().to_c64());
        assert!((a - f * 2.0).norm() <= 1e-3 * (1.0 + f.norm()));
    }
}

/// Every case of `shared/oracles/multi_dot.jsonl` as a chain of pairwise contractions
/// `((a·b)·c)·…`: the JVP through the chained pushforwards and the VJP through the chained
/// pullbacks against PyTorch's references, within each case's tolerances (and our own
/// per-dtype tolerance, since the file's are loose).
pub fn multi_dot_oracle<B: Backend>(be: &B, cfg: &Config) {
    let dir = oracle_dir(env!("CARGO_MANIFEST_DIR")).unwrap();
    let cases = load(&dir.join("multi_dot.jsonl")).unwrap();
    let mut ran = 0;
    for case in &cases {
        if !cfg.dtypes.contains(&case.dtype) {
            continue;
        }
        ran += 1;
        let xs: Vec<B::Tensor> = case
            .inputs_in_order()
            .into_iter()
            .map(|t| be.from_host(t.clone()).unwrap())
            .collect();
        let names: Vec<&String> = case.inputs.keys().collect();
        let mm = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        let tol = case
            .tolerance
            .min(Tolerance::for_dtype(case.dtype).max(Tolerance {
                atol: 1e-5,
                rtol: 1e-4,
            }));
        for probe in &case.probes {
            // Forward: chain of pushforwards; reverse: chain of pullbacks.
            let dxs: Vec<B::Tensor> = names
                .iter()
                .map(|n| be.from_host(probe.direction[*n].clone()).unwrap())
                .collect();
            let mut acc = xs[0].clone();
            let mut dacc = dxs[0].clone();
            let mut pullbacks = Vec::new();
            for (x, dx) in xs.iter().zip(&dxs).skip(1) {
                let out_dims = mm.output_dims(&be.dims(&acc), &be.dims(x)).unwrap();
                let op = ContractOp::new(mm.clone());
                let mut c = be.zeros(&out_dims, case.dtype).unwrap();
                let mut c2 = be.zeros(&out_dims, case.dtype).unwrap();
                let t = Tangents {
                    a: Some(&dacc),
                    b: Some(dx),
                    ..Tangents::default()
                };
                let dc = op.frule(be, &mut c, &acc, x, t).unwrap();
                pullbacks.push(op.rrule(be, &mut c2, &acc, x, Activity::OPERANDS).unwrap());
                acc = c;
                dacc = dc;
            }
            let jvp = Value::Tensor(be.to_host(&dacc).unwrap());
            tol.check(
                &jvp,
                &Value::Tensor(probe.jvp.clone()),
                &format!("{} JVP", case.id),
            )
            .unwrap();
            let mut cbar = be.from_host(probe.cotangent.clone()).unwrap();
            let mut grads: Vec<HostTensor> = Vec::new();
            for pb in pullbacks.iter().rev() {
                let g = pb.pullback(&cbar).unwrap();
                grads.push(be.to_host(g.b.as_ref().unwrap()).unwrap());
                cbar = g.a.unwrap();
            }
            grads.push(be.to_host(&cbar).unwrap());
            grads.reverse();
            for (n, g) in names.iter().zip(grads) {
                tol.check(
                    &Value::Tensor(g),
                    &Value::Tensor(probe.vjp[*n].clone()),
                    &format!("{} VJP {n}", case.id),
                )
                .unwrap();
            }
        }
    }
    assert!(
        ran > 0,
        "no multi_dot case has a dtype this backend supports"
    );
}

/// Rules reject mismatched tangents and cotangents with typed errors naming them, and leave
/// C untouched on error.
pub fn rule_errors<B: Backend>(be: &B, cfg: &Config) {
    let dt = cfg.dtypes[0];
    let mut rng = Rng::seed(8);
    let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    let a = be.from_host(rng.tensor(&[2, 3], dt)).unwrap();
    let b = be.from_host(rng.tensor(&[3, 4], dt)).unwrap();
    let c0 = rng.tensor(&[2, 4], dt);
    let mut c = be.from_host(c0.clone()).unwrap();
    let op = ContractOp::new(spec.clone()).beta(1.0);
    let wrong = be.from_host(rng.tensor(&[3, 2], dt)).unwrap();
    let e = op
        .frule(
            be,
            &mut c,
            &a,
            &b,
            Tangents {
                a: Some(&wrong),
                ..Tangents::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(&e, adrules::Error::ShapeMismatch { arg, .. } if arg == "tangent of a"),
        "{e}"
    );
    assert_eq!(
        be.to_host(&c).unwrap(),
        c0,
        "C unchanged after a failed frule"
    );
    let e = op.rrule(be, &mut c, &a, &wrong, Activity::ALL).unwrap_err();
    assert!(
        matches!(
            e,
            adrules::Error::ShapeMismatch { .. } | adrules::Error::RankMismatch { .. }
        ),
        "{e}"
    );
    assert_eq!(
        be.to_host(&c).unwrap(),
        c0,
        "C unchanged after a failed rrule"
    );
    let pb = op.rrule(be, &mut c, &a, &b, Activity::ALL).unwrap();
    let e = pb.pullback(&wrong).unwrap_err();
    assert!(
        matches!(&e, adrules::Error::ShapeMismatch { arg, .. } if arg == "c_bar"),
        "{e}"
    );
    if cfg.dtypes.contains(&DType::F64) && cfg.dtypes.contains(&DType::C64) {
        let real = be.from_host(rng.tensor(&[2, 3], DType::F64)).unwrap();
        let real_b = be.from_host(rng.tensor(&[3, 4], DType::F64)).unwrap();
        let mut rc = be.zeros(&[2, 4], DType::F64).unwrap();
        let complex_t = be.from_host(rng.tensor(&[2, 3], DType::C64)).unwrap();
        let e = ContractOp::new(spec)
            .frule(
                be,
                &mut rc,
                &real,
                &real_b,
                Tangents {
                    a: Some(&complex_t),
                    ..Tangents::default()
                },
            )
            .unwrap_err();
        assert!(matches!(e, adrules::Error::DTypeMismatch { .. }), "{e}");
    }
}
