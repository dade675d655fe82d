//! Conformance of the pairwise contraction `C ← β·C + α·P(op(A)·op(B))` ([`ContractOp`]):
//! the full matrix, operand symmetry, accumulation, the multi_dot oracle as a chain of
//! pairwise contractions, and the typed errors of the rules.

use adrules_core::rules::{Activity, ContractOp, Tangents};
use adrules_core::{Backend, Conj, ContractSpec, DType, Error, HostTensor};

use super::Config;
use super::case::{CONJ, Case, coefficient_variants, run_all};
use crate::oracle::{OracleCase, load, oracle_dir};
use crate::{Rng, Tolerance, Value};

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
                        op: ContractOp::new(spec.clone())
                            .conj(ca, cb)
                            .alpha(al)
                            .beta(bt)
                            .into(),
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
        op: ContractOp::new(spec.clone())
            .alpha(rng.scalar(DType::F64))
            .beta(rng.scalar(DType::F64))
            .into(),
        tensors: vec![
            rng.tensor(&c_dims, DType::F32),
            rng.tensor(a_dims, DType::F32),
            rng.tensor(b_dims, DType::F32),
        ],
        active: Activity::ALL,
    });
    cases.push(Case {
        name: format!("{name} real A, B with complex α into complex C"),
        op: ContractOp::new(spec.clone())
            .alpha(rng.scalar(DType::C64))
            .beta(rng.scalar(DType::C64))
            .into(),
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
/// contr_b (1,0), open_b (2), output permutation (2,1,3,0) over the whole matrix (dtype pairs,
/// the four conjugation combinations, every α × β variant); a plain matrix product; an outer
/// product; a contraction to a scalar; zero-size contracted and open dimensions (those with
/// random α, β); batched contractions: `bij,bjk->bik` over the whole matrix, and (with random
/// α, β) batch axes permuted in C, attention scores, a Hadamard product, a batched outer
/// product and a zero-size batch.
///
/// # Panics
/// With the failing cases, or when the config supports none.
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
    // Batched contractions (a label in A, B and C).
    let bmm = ContractSpec::from_labels("bij", "bjk", "bik").unwrap();
    cases.extend(contract_cases(
        &mut rng,
        "batched bij,bjk->bik",
        &bmm,
        &[3, 2, 4],
        &[3, 4, 5],
        true,
    ));
    for (name, la, lb, lc, da, db) in [
        (
            "batch permuted ibj,bjk->kbi",
            "ibj",
            "bjk",
            "kbi",
            &[2, 3, 4][..],
            &[3, 4, 2][..],
        ),
        (
            "attention bhqd,bhkd->bhqk",
            "bhqd",
            "bhkd",
            "bhqk",
            &[2, 2, 3, 4],
            &[2, 2, 5, 4],
        ),
        ("hadamard ij,ij->ji", "ij", "ij", "ji", &[3, 4], &[3, 4]),
        (
            "batched outer bi,bj->bij",
            "bi",
            "bj",
            "bij",
            &[3, 2],
            &[3, 4],
        ),
        (
            "zero-size batch",
            "bij",
            "bjk",
            "bik",
            &[0, 2, 3],
            &[0, 3, 4],
        ),
    ] {
        let spec = ContractSpec::from_labels(la, lb, lc).unwrap();
        cases.extend(contract_cases(&mut rng, name, &spec, da, db, false));
    }
    run_all(be, cfg, cases);
}

fn cot_host<B: Backend>(be: &B, t: &Option<B::Tensor>) -> HostTensor {
    be.to_host(t.as_ref().expect("active input has a cotangent"))
        .unwrap()
}

/// Swapping the operand order (A·B vs B·A with the spec and the conjugation flags mirrored)
/// gives the same primal and identical cotangents, for every configured dtype.
///
/// # Panics
/// On the first mismatch.
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
///
/// # Panics
/// On the first mismatch.
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

/// The cases of the oracle file `multi_dot.jsonl` (independent PyTorch references) in a
/// configured dtype; panics when the file is missing or none is.
pub(crate) fn multi_dot_cases(cfg: &Config) -> Vec<OracleCase> {
    let dir = oracle_dir();
    let cases: Vec<OracleCase> = load(&dir.join("multi_dot.jsonl"))
        .unwrap()
        .into_iter()
        .filter(|case| cfg.dtypes.contains(&case.dtype))
        .collect();
    assert!(
        !cases.is_empty(),
        "no multi_dot case has a dtype this backend supports"
    );
    cases
}

/// Every case of the oracle `multi_dot.jsonl` as a chain of pairwise contractions
/// `((a·b)·c)·…`: the JVP through the chained pushforwards and the VJP through the chained
/// pullbacks against PyTorch's references, within each case's tolerances (and our own
/// per-dtype tolerance, since the file's are loose).
///
/// # Panics
/// On the first mismatch; when the oracle file is missing or no case has a configured dtype.
pub fn multi_dot_oracle<B: Backend>(be: &B, cfg: &Config) {
    for case in &multi_dot_cases(cfg) {
        let xs: Vec<B::Tensor> = case
            .inputs_in_order()
            .into_iter()
            .map(|t| be.from_host(t.clone()).unwrap())
            .collect();
        let names: Vec<&String> = case.inputs.keys().collect();
        let mm = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
        let tol = case.first_order_tolerance();
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
}

/// Rules reject mismatched tangents and cotangents with typed errors naming them, and leave
/// C untouched on error: a tangent of the wrong shape (`"tangent of a"`), an operand of the
/// wrong shape, a cotangent of the wrong shape (`"c_bar"`), and (when f64 and c64 are
/// configured) a complex tangent of a real operand.
///
/// # Panics
/// On the first unexpected result.
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
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "tangent of a"),
        "{e}"
    );
    assert_eq!(
        be.to_host(&c).unwrap(),
        c0,
        "C unchanged after a failed frule"
    );
    let e = op.rrule(be, &mut c, &a, &wrong, Activity::ALL).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. } | Error::RankMismatch { .. }),
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
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "c_bar"),
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
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    }
}
