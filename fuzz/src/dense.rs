//! The dense linear-algebra rules (`adrules::linalg::{CholeskyRule, SolveTriangularRule,
//! SolveRule, InvRule, DetRule, SlogdetRule, LuFactorRule, PinvRule, LstsqRule,
//! MatrixExpRule, MatrixNormRule}`) on the fuzzer's matrices (random, zero, rank one,
//! degenerate, subnormal, huge, with a NaN or an infinity), small and batched, in four
//! dtypes: the primal and a pullback of a random cotangent through the checked drivers.
//! Findings: a panic, a non-finite output or cotangent returned as `Ok`, a non-finite input
//! accepted, an input changed.

use adrules::linalg::{
    CholeskyRule, DetRule, InvRule, LstsqRule, LuFactorRule, MatrixExpRule, MatrixNorm,
    MatrixNormRule, PinvRule, SlogdetRule, SolveRule, SolveTriangularRule,
};
use adrules::rule::{self, Rule};
use adrules::strided::Strided;
use adrules::{Backend, DType, HostTensor};
use adrules_testing::Rng;

use crate::Finding;
use crate::targets::{KINDS, finite, matrix, same};

const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// `(op, square)`: the operation of `seed`'s draw and whether its `A` is square.
const OPS: [(&str, bool); 11] = [
    ("cholesky", true),
    ("solve_triangular", true),
    ("solve", true),
    ("inv", true),
    ("det", true),
    ("slogdet", true),
    ("lu_factor", false),
    ("pinv", false),
    ("lstsq", false),
    ("matrix_exp", true),
    ("matrix_norm", false),
];

/// The input size of `seed` (elements of `A`).
pub(crate) fn size(seed: u64) -> usize {
    let mut rng = Rng::seed(seed);
    let _ = (rng.below(4), rng.below(KINDS.len()));
    let (m, n) = (rng.below(5), rng.below(5));
    let batch = if rng.below(4) == 0 { 2 } else { 1 };
    batch * m * n.max(1)
}

/// The dense rule of `seed`, its primal and a pullback.
pub(crate) fn dense(seed: u64) -> Result<(), Finding> {
    let mut rng = Rng::seed(seed);
    let dtype = DTYPES[rng.below(4)];
    let kind = KINDS[rng.below(KINDS.len())];
    let (m, n) = (rng.below(5), rng.below(5));
    let batch: Vec<usize> = if rng.below(4) == 0 { vec![2] } else { vec![] };
    let op = rng.below(OPS.len());
    let (name, square) = OPS[op];
    let n = if square { m } else { n };
    let a = matrix(&mut rng, &batch, m, n, dtype, kind);
    let rhs = |rows: usize, rng: &mut Rng| {
        let dims: Vec<usize> = batch.iter().copied().chain([rows, 2]).collect();
        rng.tensor(&dims, dtype)
    };
    let mut hosts = vec![a];
    match name {
        "solve" | "solve_triangular" | "lstsq" => hosts.push(rhs(m, &mut rng)),
        _ => {}
    }
    let case = format!("{name} {kind:?} {dtype} {batch:?} {m}×{n}");
    let upper = rng.below(2) == 0;
    match name {
        "cholesky" => run(&CholeskyRule { upper }, &hosts, &mut rng, &case),
        "solve_triangular" => {
            let r = SolveTriangularRule {
                upper,
                left: true,
                unit_diagonal: rng.below(2) == 0,
            };
            run(&r, &hosts, &mut rng, &case)
        }
        "solve" => run(&SolveRule, &hosts, &mut rng, &case),
        "inv" => run(&InvRule, &hosts, &mut rng, &case),
        "det" => run(&DetRule, &hosts, &mut rng, &case),
        "slogdet" => run(&SlogdetRule, &hosts, &mut rng, &case),
        "lu_factor" => run(&LuFactorRule, &hosts, &mut rng, &case),
        "pinv" => run(&PinvRule::default(), &hosts, &mut rng, &case),
        "lstsq" => run(&LstsqRule::default(), &hosts, &mut rng, &case),
        "matrix_exp" => run(&MatrixExpRule, &hosts, &mut rng, &case),
        _ => {
            let norm = [
                MatrixNorm::Frobenius,
                MatrixNorm::Nuclear,
                MatrixNorm::Spectral,
            ][rng.below(3)];
            run(&MatrixNormRule { norm }, &hosts, &mut rng, &case)
        }
    }
}

/// `rule` on `hosts` through the drivers: the findings of the module docs.
fn run<R: Rule>(rule: &R, hosts: &[HostTensor], rng: &mut Rng, case: &str) -> Result<(), Finding> {
    let be = Strided;
    let xs: Vec<_> = hosts
        .iter()
        .map(|h| be.from_host(h.clone()))
        .collect::<adrules::Result<_>>()
        .map_err(|e| wrong(format!("{case}: from_host: {e}")))?;
    let refs: Vec<_> = xs.iter().collect();
    let input_finite = hosts.iter().all(finite);
    let outcome = rule::rrule(rule, &be, &refs, &vec![true; refs.len()]);
    let unchanged = |what: &str| -> Result<(), Finding> {
        for (x, h) in xs.iter().zip(hosts) {
            match be.to_host(x) {
                Ok(now) if same(&now, h) => {}
                _ => return Err(Finding::Mutated(format!("{case}: an input changed {what}"))),
            }
        }
        Ok(())
    };
    unchanged("in the primal")?;
    let (outs, pb) = match outcome {
        Err(_) => return Ok(()),
        Ok(_) if !input_finite => {
            return Err(wrong(format!("{case}: a non-finite input was accepted")));
        }
        Ok(x) => x,
    };
    let mut cots = Vec::with_capacity(outs.len());
    for (j, y) in outs.iter().enumerate() {
        let h = be
            .to_host(y)
            .map_err(|e| wrong(format!("{case}: to_host: {e}")))?;
        if !finite(&h) {
            return Err(wrong(format!("{case}: output {j} is not finite but Ok")));
        }
        let c = rng.tensor(h.dims(), h.dtype());
        cots.push(Some(
            be.from_host(c).map_err(|e| wrong(format!("{case}: {e}")))?,
        ));
    }
    if let Ok(bars) = pb.pullback(&cots) {
        for (i, g) in bars.iter().enumerate() {
            let Some(g) = g else { continue };
            let h = be
                .to_host(g)
                .map_err(|e| wrong(format!("{case}: to_host: {e}")))?;
            if !finite(&h) {
                return Err(wrong(format!("{case}: cotangent {i} is not finite but Ok")));
            }
        }
    }
    unchanged("in the pullback")
}
