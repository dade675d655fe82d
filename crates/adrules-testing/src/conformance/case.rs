//! The full check of one primitive call ([`Case`]), shared by the add, trace and contract
//! groups, and the helpers the groups share (tolerances, coefficient variants, the runner).

use adrules_core::rules::{Activity, Cotangents, Primitive, Tangents};
use adrules_core::{Backend, Conj, DType, DynScalar, Error, HostTensor, Result};

use super::Config;
use crate::{FiniteDifference, ReferenceBackend, Rng, Value, adjoint_mismatch};

/// Primal of `op` on any backend from host values `[C, A, (B)]`.
fn primal<B: Backend>(op: &Primitive, be: &B, t: &[HostTensor]) -> Result<HostTensor> {
    let mut c = be.from_host(t[0].clone())?;
    let x: Vec<B::Tensor> = t[1..]
        .iter()
        .map(|h| be.from_host(h.clone()))
        .collect::<Result<_>>()?;
    let refs: Vec<&B::Tensor> = x.iter().collect();
    op.apply(be, &mut c, &refs)?;
    be.to_host(&c)
}

/// A full check of one primitive call on host inputs `[C, A, (B)]`.
pub(crate) struct Case {
    pub name: String,
    pub op: Primitive,
    pub tensors: Vec<HostTensor>,
    pub active: Activity,
}

/// Relative tolerance of a case whose tensors and coefficients have these dtypes.
pub(crate) fn tol(dtypes: &[DType]) -> f64 {
    if dtypes.iter().all(|d| d.is_double()) {
        1e-9
    } else {
        2e-4
    }
}

/// `‖x − y‖ / (‖x‖ + ‖y‖)`.
pub(crate) fn rel_err(x: &Value, y: &Value) -> f64 {
    let d: f64 = x
        .to_c64_vec()
        .iter()
        .zip(y.to_c64_vec())
        .map(|(a, b)| (a - b).norm_sqr())
        .sum::<f64>()
        .sqrt();
    d / (y.norm() + x.norm()).max(1e-300)
}

/// A zero of the same kind, shape and dtype as `v`.
pub(crate) fn zero_like(v: &Value) -> Value {
    v.axpy(-1.0, v).expect("same shape")
}

/// A random direction of the same kind, shape and dtype as `v`.
pub(crate) fn random_like(rng: &mut Rng, v: &Value) -> Value {
    match v {
        Value::Tensor(t) => Value::Tensor(rng.tensor(t.dims(), t.dtype())),
        Value::Scalar(s) => Value::Scalar(rng.scalar(s.dtype())),
    }
}

impl Case {
    fn has_b(&self) -> bool {
        self.op.arity() == 2
    }

    pub(crate) fn dtypes(&self) -> Vec<DType> {
        let mut d: Vec<DType> = self.tensors.iter().map(|t| t.dtype()).collect();
        d.extend([self.op.alpha().dtype(), self.op.beta().dtype()]);
        d
    }

    /// The input values in order `[C, A, (B), α, β]` and their activity.
    fn inputs(&self) -> (Vec<Value>, Vec<bool>) {
        let mut v: Vec<Value> = self.tensors.iter().cloned().map(Value::Tensor).collect();
        let mut act = vec![self.active.c, self.active.a];
        if self.has_b() {
            act.push(self.active.b);
        }
        v.push(Value::Scalar(self.op.alpha()));
        v.push(Value::Scalar(self.op.beta()));
        act.extend([self.active.alpha, self.active.beta]);
        (v, act)
    }

    pub(crate) fn run<B: Backend>(&self, be: &B, rng: &mut Rng) -> std::result::Result<(), String> {
        let err = |e: Error| format!("{}: {e}", self.name);
        let nt = self.tensors.len();
        let (x, active) = self.inputs();
        let tolerance = tol(&self.dtypes());

        // Primal against the reference.
        let got = primal(&self.op, be, &self.tensors).map_err(err)?;
        let want = primal(&self.op, &ReferenceBackend, &self.tensors).map_err(err)?;
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
                let r = random_like(rng, v);
                if on { r } else { zero_like(v) }
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
            b: if self.has_b() && active[2] {
                Some(&ddev[2])
            } else {
                None
            },
            alpha: active[nt].then(|| scal(&dx[nt])),
            beta: active[nt + 1].then(|| scal(&dx[nt + 1])),
        };
        let cbar = up(&cbar_h)?;
        let operands: Vec<&B::Tensor> = dev[1..].iter().collect();
        let mut c_f = dev[0].clone();
        let mut c_r = dev[0].clone();
        let dc = self
            .op
            .frule(be, &mut c_f, &operands, tangents)
            .map_err(err)?;
        let pb = self
            .op
            .rrule(be, &mut c_r, &operands, self.active)
            .map_err(err)?;
        let cot: Cotangents<B> = pb.pullback(&cbar).map_err(err)?;
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
        if self.has_b() {
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
            let op = self.op.clone().with_coefficients(al, bt);
            primal(&op, &ReferenceBackend, &t).map(Value::Tensor)
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
                    *dj = zero_like(dj);
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
pub(crate) fn coefficient_variants(rng: &mut Rng, dtype: DType) -> Vec<(String, DynScalar, bool)> {
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

/// Both conjugation flags.
pub(crate) const CONJ: [Conj; 2] = [Conj::No, Conj::Yes];

/// Runs every case the config supports (at least one must be), and panics with the first
/// failures.
pub(crate) fn run_all<B: Backend>(be: &B, cfg: &Config, cases: Vec<Case>) {
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
    report(ran, failures);
}

/// Panics when no case ran, or with the first failures.
pub(crate) fn report(ran: usize, failures: Vec<String>) {
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

/// The matrix of add or trace cases for A of `a_dims` into C of `c_dims`: every dtype pair,
/// both conjugation flags, every α × β variant, and f32 tensors with f64 coefficients.
pub(crate) fn unary_cases(
    rng: &mut Rng,
    name: &str,
    a_dims: &[usize],
    c_dims: &[usize],
    make: &dyn Fn(Conj) -> Primitive,
) -> Vec<Case> {
    let mut cases = Vec::new();
    for (ta, tc) in UNARY_PAIRS {
        for conj in CONJ {
            for (an, al, al_on) in coefficient_variants(rng, tc) {
                for (bn, bt, bt_on) in coefficient_variants(rng, tc) {
                    cases.push(Case {
                        name: format!("{name} A:{ta} C:{tc} conj:{conj:?} α {an} β {bn}"),
                        op: make(conj).with_coefficients(al, bt),
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
                op: make(Conj::No)
                    .with_coefficients(rng.scalar(DType::F64), rng.scalar(DType::F64)),
                tensors: vec![rng.tensor(c_dims, tc), rng.tensor(a_dims, ta)],
                active: Activity::ALL,
            });
        }
    }
    cases
}
