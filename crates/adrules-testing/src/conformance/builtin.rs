//! adrules' own operations checked as [`Rule`](adrules_core::rule::Rule)s on a backend, by the
//! rule author's test kit [`check_rule`]: finite differences of the pullback, absent
//! cotangents, the frule against finite differences and the frule/rrule adjoint identity,
//! non-mutation of the inputs. The rules: the primitives ([`Primitive`]: a permuted add, a
//! partial trace, a contraction with conjugation flags, each fresh (`β = 0`) and updating a
//! C (`β ≠ 0`, C the first input), and a contraction given C with `β = 0`
//! ([`PrimitiveCall`])), a planned three-operand network ([`NetworkPlan`]), and the
//! decompositions [`SvdRule`] (thin), [`TruncatedSvdRule`] (rank 2) and [`QrRule`]
//! (reduced) in double precision (SVD
//! real only: of a complex matrix it has a phase gauge that a random cotangent of `U`
//! depends on, which the rule refuses with `GaugeIllDefined`, as the conformance group
//! `decomposition_rules` checks; the full and complete modes' complement columns are such a
//! gauge too). [`EighRule`](adrules_core::rule::EighRule) is not here: its input must be
//! Hermitian, and `check_rule`'s random perturbations leave that set (`decomposition_rules`
//! checks eigh's rules on Hermitian inputs).

use adrules_core::linalg::{RuleOptions, Truncation};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::rule::{PrimitiveCall, QrRule, Rule, SvdRule, SyncBackend, TruncatedSvdRule};
use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{Conj, ContractSpec, DType, DynScalar, Permutation, Result, TraceSpec};

use super::Config;
use super::case::report;
use crate::Rng;
use crate::rule::{RuleCheck, check_rule};

/// Runs [`check_rule`] on `rule` with random inputs of `dims` in `dtype`; a failure is
/// pushed to `failures` with `what`.
fn one<R: Rule, B: SyncBackend>(
    be: &B,
    rng: &mut Rng,
    rule: &R,
    dims: &[&[usize]],
    dtype: DType,
    failures: &mut Vec<String>,
) -> Result<()> {
    let xs: Vec<B::Tensor> = dims
        .iter()
        .map(|d| be.from_host(rng.tensor(d, dtype)))
        .collect::<Result<_>>()?;
    let refs: Vec<&B::Tensor> = xs.iter().collect();
    let config = RuleCheck {
        seed: rng.below(1 << 30) as u64,
        ..RuleCheck::default()
    };
    if let Err(e) = check_rule(rule, be, &refs, &config) {
        failures.push(format!("{dtype} {} {dims:?}: {e}", rule.name()));
    }
    Ok(())
}

/// The primitives, fresh and updating C, with `α = 1.5` and (updating) `β = −0.5`.
fn primitives() -> Result<Vec<(Primitive, Vec<Vec<usize>>)>> {
    let add: Primitive = AddOp::new(Permutation::new(&[2, 0, 1])?)
        .conj(Conj::Yes)
        .into();
    let trace: Primitive = TraceOp::new(TraceSpec::from_labels("iajj", "ai")?).into();
    let contract: Primitive = ContractOp::new(ContractSpec::from_labels("ijl", "ljk", "ki")?)
        .conj(Conj::No, Conj::Yes)
        .into();
    let (alpha, beta) = (DynScalar::F64(1.5), DynScalar::F64(-0.5));
    let mut cases = Vec::new();
    for (op, operands, out) in [
        (add, vec![vec![2, 3, 4]], vec![4, 2, 3]),
        (trace, vec![vec![2, 3, 4, 4]], vec![3, 2]),
        (contract, vec![vec![2, 3, 4], vec![4, 3, 5]], vec![5, 2]),
    ] {
        let fresh = op.clone().with_coefficients(alpha, DynScalar::F64(0.0));
        cases.push((fresh, operands.clone()));
        let mut with_c = vec![out];
        with_c.extend(operands);
        cases.push((op.with_coefficients(alpha, beta), with_c));
    }
    Ok(cases)
}

/// Every built-in rule through [`check_rule`] on `be`, in each dtype of `cfg` (the
/// decompositions in f64, and QR in c64 too, where `cfg` has them).
///
/// # Panics
/// With the failing cases (the first eight), or when `cfg` supports none.
pub fn builtin_rules<B: SyncBackend>(be: &B, cfg: &Config) {
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut rng = Rng::seed(45);
    let mut run = |failures: &mut Vec<String>, r: Result<()>, what: &str| {
        ran += 1;
        if let Err(e) = r {
            failures.push(format!("{what}: {e}"));
        }
    };
    let cases = primitives().expect("valid specs");
    let net = Network::einsum("ij,jk,kl->il").expect("a valid einsum");
    let shapes = [vec![2, 3], vec![3, 4], vec![4, 2]];
    let plan = NetworkPlan::new(&net, &shapes, &Order::Default).expect("a valid plan");
    for &dtype in &cfg.dtypes {
        if cfg.supports(&[dtype], &[4]) {
            for (op, dims) in &cases {
                let dims: Vec<&[usize]> = dims.iter().map(Vec::as_slice).collect();
                let r = one(be, &mut rng, op, &dims, dtype, &mut failures);
                run(&mut failures, r, Rule::name(op));
            }
            let dims: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let r = one(be, &mut rng, &plan, &dims, dtype, &mut failures);
            run(&mut failures, r, "network");
            // C among the inputs with β = 0 (not read; its cotangent is zero)
            let (op, dims) = cases[5].clone();
            let op = op.with_coefficients(DynScalar::F64(1.5), DynScalar::F64(0.0));
            let call = PrimitiveCall::new(op, 3).expect("C first");
            let dims: Vec<&[usize]> = dims.iter().map(Vec::as_slice).collect();
            let r = one(be, &mut rng, &call, &dims, dtype, &mut failures);
            run(&mut failures, r, "contract with C, beta = 0");
        }
        if !cfg.supports(&[dtype], &[3]) || !dtype.is_double() {
            continue;
        }
        for dims in [[4usize, 3], [3, 4]] {
            let d: &[&[usize]] = &[&dims];
            let r = one(be, &mut rng, &QrRule::default(), d, dtype, &mut failures);
            run(&mut failures, r, "qr");
            if !dtype.is_complex() {
                let r = one(be, &mut rng, &SvdRule::default(), d, dtype, &mut failures);
                run(&mut failures, r, "svd");
                let truncated = TruncatedSvdRule {
                    truncation: Truncation::rank(2),
                    options: RuleOptions::default(),
                };
                let r = one(be, &mut rng, &truncated, d, dtype, &mut failures);
                run(&mut failures, r, "svd_truncated");
            }
        }
    }
    report(ran, failures);
}
