//! Conformance of the primitives' second-order rule
//! ([`Primitive::pullback_tangent`](adrules_core::rules::Primitive::pullback_tangent)): add,
//! trace and contraction, every conjugation flag, real, complex and mixed dtypes, batch axes,
//! constant coefficients (β ≠ 0 with C active), and the typed errors.

use adrules_core::rules::{Activity, AddOp, ContractOp, Cotangents, Primitive, TraceOp};
use adrules_core::{
    Backend, Complex64, ContractSpec, DType, Error, HostTensor, Permutation, Result, TraceSpec,
};

use super::Config;
use super::case::{CONJ, rel_err, report, tol};
use crate::{ReferenceBackend, Rng, Value};

/// One second-order case: an op with constant coefficients, the tensors `[C, operands…]`
/// and which of them are active.
struct SecondCase {
    name: String,
    op: Primitive,
    tensors: Vec<HostTensor>,
    active: Activity,
}

/// The cotangents `[C̄_in, Ā, B̄]` of the active inputs, on the reference backend in
/// `Complex64` / `f64`, at `x` for the cotangent `c_bar`.
fn reference_pullback(case: &SecondCase, x: &[Value], c_bar: &Value) -> Result<Vec<Option<Value>>> {
    let be = ReferenceBackend;
    let up = |v: &Value| be.from_host(v.widen().tensor("tensor")?.clone());
    let c = up(&x[0])?;
    let ops: Vec<_> = x[1..].iter().map(up).collect::<Result<_>>()?;
    let refs: Vec<_> = ops.iter().collect();
    let g = case
        .op
        .pullback_at(&be, &c, &refs, case.active)?
        .pullback(&up(c_bar)?)?;
    let host = |t: Option<std::sync::Arc<HostTensor>>| -> Result<Option<Value>> {
        t.map(|t| Ok(Value::Tensor(be.to_host(&t)?))).transpose()
    };
    Ok(vec![host(g.c)?, host(g.a)?, host(g.b)?])
}

impl SecondCase {
    fn dtypes(&self) -> Vec<DType> {
        let mut d: Vec<DType> = self.tensors.iter().map(HostTensor::dtype).collect();
        d.extend([self.op.alpha().dtype(), self.op.beta().dtype()]);
        d
    }

    fn run<B: Backend>(&self, be: &B, rng: &mut Rng) -> std::result::Result<(), String> {
        let err = |e: Error| format!("{}: {e}", self.name);
        let x: Vec<Value> = self.tensors.iter().cloned().map(Value::Tensor).collect();
        let dx: Vec<Value> = self
            .tensors
            .iter()
            .map(|t| Value::Tensor(rng.tensor(t.dims(), t.dtype())))
            .collect();
        let c_bar = Value::Tensor(rng.tensor(self.tensors[0].dims(), self.tensors[0].dtype()));
        let c_bar_dot = Value::Tensor(rng.tensor(self.tensors[0].dims(), self.tensors[0].dtype()));
        // The pullback is bilinear in (operands, C̄): the central difference with step 1,
        // (P(x + ẋ; C̄ + C̄̇) − P(x − ẋ; C̄ − C̄̇)) / 2, is its exact tangent.
        let shifted = |s: f64| -> Result<Vec<Option<Value>>> {
            let xs: Vec<Value> = std::iter::once(Ok(x[0].clone()))
                .chain(
                    x[1..]
                        .iter()
                        .zip(&dx[1..])
                        .map(|(x, d)| x.widen().axpy(s, &d.widen())),
                )
                .collect::<Result<_>>()?;
            reference_pullback(self, &xs, &c_bar.widen().axpy(s, &c_bar_dot.widen())?)
        };
        let (plus, minus) = (shifted(1.0).map_err(err)?, shifted(-1.0).map_err(err)?);
        let up = |v: &Value| be.from_host(v.tensor("tensor")?.clone());
        let c = up(&x[0]).map_err(err)?;
        let ops: Vec<B::Tensor> = x[1..].iter().map(up).collect::<Result<_>>().map_err(err)?;
        let dops: Vec<B::Tensor> = dx[1..].iter().map(up).collect::<Result<_>>().map_err(err)?;
        let refs: Vec<&B::Tensor> = ops.iter().collect();
        let drefs: Vec<Option<&B::Tensor>> = dops.iter().map(Some).collect();
        let (cb, cbd) = (up(&c_bar).map_err(err)?, up(&c_bar_dot).map_err(err)?);
        let got: Cotangents<B> = self
            .op
            .pullback_tangent(be, &c, &refs, &drefs, &cb, Some(&cbd), self.active)
            .map_err(err)?;
        let tolerance = tol(&self.dtypes());
        let flags = [self.active.c, self.active.a, self.active.b];
        for (i, got) in [got.c, got.a, got.b].into_iter().enumerate() {
            let name = ["C", "A", "B"][i];
            match (got, &plus[i], &minus[i], flags[i]) {
                (None, None, None, false) => {}
                (Some(g), Some(p), Some(m), true) => {
                    let g = Value::Tensor(be.to_host(&g).map_err(err)?);
                    if g.dtype() != self.tensors[i].dtype() {
                        return Err(format!(
                            "{}: tangent of {name}̄ has dtype {}",
                            self.name,
                            g.dtype()
                        ));
                    }
                    let d = p.axpy(-1.0, m).map_err(err)?;
                    let half: Vec<Complex64> = d.to_c64_vec().iter().map(|z| z * 0.5).collect();
                    let want = d.with_values(&half).map_err(err)?;
                    let e = rel_err(&g, &want);
                    if e > tolerance {
                        return Err(format!(
                            "{}: tangent of {name}̄: relative error {e:.2e} > {tolerance:.0e}",
                            self.name
                        ));
                    }
                }
                _ => return Err(format!("{}: {name}: wrong set of results", self.name)),
            }
        }
        Ok(())
    }
}

/// dtype pairs (operand, C) and (A, B) the cases are drawn in.
const PAIRS: [(DType, DType); 6] = [
    (DType::F32, DType::F32),
    (DType::F64, DType::F64),
    (DType::C32, DType::C32),
    (DType::C64, DType::C64),
    (DType::F64, DType::C64),
    (DType::C64, DType::F64),
];

fn cases(rng: &mut Rng) -> Result<Vec<SecondCase>> {
    let mut cases = Vec::new();
    let active = |c: bool, a: bool, b: bool| Activity {
        c,
        a,
        b,
        ..Activity::NONE
    };
    let perm = Permutation::new(&[2, 0, 1])?;
    let trace = TraceSpec::new(&[2, 4, 1], &[0], &[3])?;
    let contractions = [
        (
            "ijk,kjl->li",
            ContractSpec::from_labels("ijk", "kjl", "li")?,
            [2, 3, 4],
            [4, 3, 2],
        ),
        (
            "bij,bjk->bik",
            ContractSpec::from_labels("bij", "bjk", "bik")?,
            [2, 3, 4],
            [2, 4, 3],
        ),
    ];
    for (t1, t2) in PAIRS {
        let tc = t1.join(t2);
        let coeff = |rng: &mut Rng| rng.scalar(tc);
        for conj in CONJ {
            cases.push(SecondCase {
                name: format!("add p=(2,0,1) A:{t1} C:{tc} conj:{conj:?}"),
                op: AddOp::new(perm.clone())
                    .conj(conj)
                    .alpha(coeff(rng))
                    .beta(coeff(rng))
                    .into(),
                tensors: vec![rng.tensor(&[4, 2, 3], tc), rng.tensor(&[2, 3, 4], t1)],
                active: active(true, true, false),
            });
            cases.push(SecondCase {
                name: format!("trace A:{t1} C:{tc} conj:{conj:?}"),
                op: TraceOp::new(trace.clone())
                    .conj(conj)
                    .alpha(coeff(rng))
                    .beta(coeff(rng))
                    .into(),
                tensors: vec![rng.tensor(&[4, 5, 3], tc), rng.tensor(&[2, 3, 4, 2, 5], t1)],
                active: active(true, true, false),
            });
        }
        for (name, spec, a_dims, b_dims) in &contractions {
            let c_dims = spec.output_dims(a_dims, b_dims)?;
            for ca in CONJ {
                for cb in CONJ {
                    for (c_on, a_on, b_on) in [
                        (true, true, true),
                        (false, true, false),
                        (false, false, true),
                    ] {
                        cases.push(SecondCase {
                            name: format!(
                                "contract {name} A:{t1} B:{t2} conj:({ca:?},{cb:?}) active (C {c_on}, A {a_on}, B {b_on})"
                            ),
                            op: ContractOp::new(spec.clone())
                                .conj(ca, cb)
                                .alpha(coeff(rng))
                                .beta(coeff(rng))
                                .into(),
                            tensors: vec![
                                rng.tensor(&c_dims, tc),
                                rng.tensor(a_dims, t1),
                                rng.tensor(b_dims, t2),
                            ],
                            active: active(c_on, a_on, b_on),
                        });
                    }
                }
            }
        }
    }
    Ok(cases)
}

/// The second-order rule of add, trace and contraction on the backend against the exact
/// central difference of the first-order pullback (bilinear in operands and cotangent, so
/// the step-1 central difference is exact; evaluated in double precision on the reference
/// backend), for a random operand tangent and a random cotangent tangent at once; the
/// tangents keep their input's dtype (projection) and inactive inputs get none. Then the typed
/// errors: active α or β, a wrong number of tangents, a tangent of the wrong shape.
///
/// # Panics
/// With the failing cases; when the config supports none.
pub fn primitive_second_order<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(16);
    let (mut ran, mut failures) = (0, Vec::new());
    for case in cases(&mut rng).expect("valid specs") {
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
    // typed errors
    let Some(&dt) = cfg
        .dtypes
        .iter()
        .find(|d| d.is_double())
        .or(cfg.dtypes.first())
    else {
        return;
    };
    let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    let op: Primitive = ContractOp::new(spec).into();
    let mut t = |d: &[usize]| be.from_host(rng.tensor(d, dt)).unwrap();
    let (a, b, c, bad) = (t(&[2, 3]), t(&[3, 4]), t(&[2, 4]), t(&[4, 3]));
    let all = Activity {
        alpha: true,
        ..Activity::OPERANDS
    };
    let e = op.pullback_tangent(be, &c, &[&a, &b], &[None, None], &c, None, all);
    assert!(
        matches!(e, Err(Error::InvalidArgument { ref arg, .. }) if arg == "active"),
        "active α: {e:?}"
    );
    let e = op.pullback_tangent(be, &c, &[&a, &b], &[None], &c, None, Activity::OPERANDS);
    assert!(
        matches!(e, Err(Error::CountMismatch { ref arg, .. }) if arg == "tangents"),
        "one tangent for two operands: {e:?}"
    );
    let e = op.pullback_tangent(
        be,
        &c,
        &[&a, &b],
        &[None, Some(&bad)],
        &c,
        None,
        Activity::OPERANDS,
    );
    assert!(
        matches!(e, Err(Error::ShapeMismatch { ref arg, .. }) if arg == "tangent of b"),
        "a tangent of B with B's transposed shape: {e:?}"
    );
    let e = op.pullback_tangent(
        be,
        &c,
        &[&a, &b],
        &[None, None],
        &a,
        None,
        Activity::OPERANDS,
    );
    assert!(
        matches!(e, Err(Error::ShapeMismatch { ref arg, .. }) if arg == "c_bar"),
        "a cotangent of the wrong shape: {e:?}"
    );
}
