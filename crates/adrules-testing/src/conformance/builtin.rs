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
//! gauge too); and the dense rules ([`CholeskyRule`] lower and upper, [`SolveTriangularRule`]
//! in its eight variants, [`SolveRule`] with vector and matrix right-hand sides,
//! [`InvRule`], [`DetRule`], [`SlogdetRule`], [`MatrixExpRule`], and of tall and wide
//! matrices [`PinvRule`], [`LuFactorRule`], [`LstsqRule`], [`MatrixNormRule`]), batched, on well-conditioned inputs (a
//! positive-definite one for Cholesky). [`EighRule`](adrules_core::rule::EighRule) is not here: its input must be
//! Hermitian, and `check_rule`'s random perturbations leave that set (`decomposition_rules`
//! checks eigh's rules on Hermitian inputs).

use adrules_core::linalg::{MatrixNorm, RuleOptions, Truncation};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::rule::{
    CholeskyRule, DetRule, InvRule, LstsqRule, LuFactorRule, MatrixExpRule, MatrixNormRule,
    PinvRule, PrimitiveCall, QrRule, Rule, SlogdetRule, SolveRule, SolveTriangularRule, SvdRule,
    SyncBackend, TruncatedSvdRule,
};
use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{
    Conj, ContractSpec, DType, DynScalar, HostData, HostTensor, Permutation, Result, TraceSpec,
};

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

/// [`check_rule`] on `rule` with the inputs `xs` (host tensors); a failure is pushed to
/// `failures` with the rule's name and `what`.
fn with_inputs<R: Rule, B: SyncBackend>(
    be: &B,
    rng: &mut Rng,
    rule: &R,
    xs: Vec<HostTensor>,
    what: &str,
    failures: &mut Vec<String>,
) -> Result<()> {
    let xs: Vec<B::Tensor> = xs
        .into_iter()
        .map(|h| be.from_host(h))
        .collect::<Result<_>>()?;
    let refs: Vec<&B::Tensor> = xs.iter().collect();
    let config = RuleCheck {
        seed: rng.below(1 << 30) as u64,
        ..RuleCheck::default()
    };
    if let Err(e) = check_rule(rule, be, &refs, &config) {
        failures.push(format!("{} {what}: {e}", rule.name()));
    }
    Ok(())
}

/// A random `[batch…, n, n]` matrix plus `shift·I` in each matrix of the batch, and with
/// `hermitian`, `M·Mᴴ + shift·I` instead (positive definite).
fn shifted(
    rng: &mut Rng,
    batch: &[usize],
    n: usize,
    shift: f64,
    hermitian: bool,
    dtype: DType,
) -> Result<HostTensor> {
    let dims: Vec<usize> = batch.iter().copied().chain([n, n]).collect();
    let m = rng.tensor(&dims, dtype).data().to_c64_vec();
    let mut v = m.clone();
    for (b, block) in v.chunks_mut((n * n).max(1)).enumerate() {
        let mb = &m[b * n * n..(b + 1) * n * n];
        for i in 0..n {
            for j in 0..n {
                if hermitian {
                    block[i * n + j] = (0..n).map(|k| mb[i * n + k] * mb[j * n + k].conj()).sum();
                }
                if i == j {
                    block[i * n + j] += shift;
                }
            }
        }
    }
    HostTensor::new(&dims, HostData::from_c64_projected(&v, dtype))
}

/// The dense rules (Cholesky, triangular solves, solve, inverse, det, slogdet) through
/// [`check_rule`] on well-conditioned inputs of `dtype`, batched.
fn dense<B: SyncBackend>(
    be: &B,
    rng: &mut Rng,
    dtype: DType,
    failures: &mut Vec<String>,
) -> Result<usize> {
    let mut ran = 0;
    for upper in [false, true] {
        let a = shifted(rng, &[2], 4, 4.0, true, dtype)?;
        with_inputs(
            be,
            rng,
            &CholeskyRule { upper },
            vec![a],
            "[2, 4, 4]",
            failures,
        )?;
        ran += 1;
        for left in [true, false] {
            for unit_diagonal in [false, true] {
                let rule = SolveTriangularRule {
                    upper,
                    left,
                    unit_diagonal,
                };
                let a = shifted(rng, &[2], 4, 4.0, false, dtype)?;
                let b = rng.tensor(if left { &[2, 4, 3] } else { &[2, 3, 4] }, dtype);
                with_inputs(be, rng, &rule, vec![a, b], &format!("{rule:?}"), failures)?;
                ran += 1;
            }
        }
    }
    for b_dims in [&[2usize, 4][..], &[2, 4, 3]] {
        let a = shifted(rng, &[2], 4, 4.0, false, dtype)?;
        let b = rng.tensor(b_dims, dtype);
        with_inputs(
            be,
            rng,
            &SolveRule,
            vec![a, b],
            &format!("b {b_dims:?}"),
            failures,
        )?;
        ran += 1;
    }
    let a = shifted(rng, &[2], 4, 4.0, false, dtype)?;
    with_inputs(be, rng, &InvRule, vec![a.clone()], "[2, 4, 4]", failures)?;
    with_inputs(be, rng, &DetRule, vec![a.clone()], "[2, 4, 4]", failures)?;
    with_inputs(be, rng, &SlogdetRule, vec![a], "[2, 4, 4]", failures)?;
    // ‖A‖₁ above θ₁₃ for one matrix of the batch: scaling and squaring take part
    let a = shifted(rng, &[2], 4, 3.0, false, dtype)?;
    with_inputs(be, rng, &MatrixExpRule, vec![a], "[2, 4, 4]", failures)?;
    for dims in [[2usize, 4, 3], [2, 3, 4]] {
        let a = rng.tensor(&dims, dtype);
        with_inputs(
            be,
            rng,
            &PinvRule::default(),
            vec![a],
            &format!("{dims:?}"),
            failures,
        )?;
        let a = rng.tensor(&dims, dtype);
        with_inputs(
            be,
            rng,
            &LuFactorRule,
            vec![a],
            &format!("{dims:?}"),
            failures,
        )?;
    }
    for b_dims in [&[2usize, 4][..], &[2, 4, 2]] {
        let a = rng.tensor(&[2, 4, 3], dtype);
        let b = rng.tensor(b_dims, dtype);
        let what = format!("b {b_dims:?}");
        with_inputs(be, rng, &LstsqRule::default(), vec![a, b], &what, failures)?;
    }
    for norm in [
        MatrixNorm::Frobenius,
        MatrixNorm::Nuclear,
        MatrixNorm::Spectral,
    ] {
        let a = rng.tensor(&[2, 4, 3], dtype);
        let what = format!("{norm:?}");
        with_inputs(be, rng, &MatrixNormRule { norm }, vec![a], &what, failures)?;
    }
    Ok(ran + 13)
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
    let mut dense_ran = 0;
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
        match dense(be, &mut rng, dtype, &mut failures) {
            Ok(n) => dense_ran += n,
            Err(e) => failures.push(format!("{dtype} dense rules: {e}")),
        }
    }
    report(ran + dense_ran, failures);
}
