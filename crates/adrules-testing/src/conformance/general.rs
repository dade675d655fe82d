//! Conformance of the generalized primitives on the shapes ML users and physicists write:
//! [`Backend::trace`] over diagonals, batched diagonals, sums, traces and hypertraces, its
//! adjoint [`Backend::add_to_diagonal`], and [`Backend::contract`] with batch labels
//! (attention, Hadamard products, row-wise dots, outer products), each against the naive
//! [`ReferenceBackend`].
//!
//! Beyond the rule matrix of [`trace`](super::trace) and [`contract`](super::contract), these
//! checks pin the primitive contract itself on many label patterns:
//! - **strong zero**: with `β = 0` the output starts filled with NaN, and no NaN may reach the
//!   result;
//! - **value semantics**: `add_to_diagonal` onto a tensor leaves another handle to the same
//!   tensor unchanged;
//! - the whole rules (every input active, `β ≠ 0`) on each pattern: primal and every
//!   cotangent against the same rule on the reference backend;
//! - the three ways to write `Σ_j A[i,j]·B[i,j]` (Hadamard then sum, batched contraction,
//!   reference) agree.

use adrules_core::rules::{Activity, ContractOp, Primitive, TraceOp};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, DynScalar, HostData, HostTensor, TraceSpec,
};

use super::Config;
use super::case::report;
use crate::{ReferenceBackend, Rng, Tolerance, Value};

/// `(labels of A, labels of C, dims of A)` of the trace cases.
pub type TraceCase = (&'static str, &'static str, &'static [usize]);

/// Every pattern of the generalized trace (adapters reuse the list for their own layouts).
pub const TRACES: &[TraceCase] = &[
    ("ii", "i", &[4, 4]),                   // diagonal
    ("bii", "bi", &[2, 3, 3]),              // batched diagonal
    ("ibi", "ib", &[3, 2, 3]),              // diagonal of non-adjacent axes
    ("iii", "i", &[3, 3, 3]),               // diagonal of three axes
    ("ibjb", "jbi", &[3, 2, 4, 2]),         // batched diagonal, permuted
    ("bijj", "jb", &[2, 3, 4, 4]),          // diagonal, sum, permutation
    ("ij", "i", &[3, 4]),                   // sums over one axis
    ("ij", "j", &[3, 4]),                   //
    ("ijk", "", &[2, 3, 4]),                // full sum
    ("iii", "", &[3, 3, 3]),                // hypertrace
    ("iiii", "", &[2, 2, 2, 2]),            //
    ("ii", "", &[4, 4]),                    // classic full trace
    ("iji", "j", &[3, 4, 3]),               // classic partial trace
    ("ijil", "lj", &[3, 4, 3, 5]),          //
    ("ijji", "", &[3, 2, 2, 3]),            // double trace
    ("iijk", "kj", &[3, 3, 4, 5]),          // trace, sum, permutation
    ("iijjk", "kj", &[3, 3, 2, 2, 4]),      // trace, diagonal, permutation
    ("iijkjl", "lki", &[2, 2, 3, 4, 3, 2]), // diagonal kept, pair summed
    ("ijij", "ij", &[2, 3, 2, 3]),          // diagonal of two pairs
    ("aibica", "cb", &[2, 3, 4, 3, 5, 2]),  // rank 6: two traces, permuted
    ("ijiki", "kj", &[2, 3, 2, 4, 2]),      // hypertrace, permutation
    ("iiij", "i", &[3, 3, 3, 4]),           // diagonal of three axes, sum
    ("ijk", "kij", &[2, 3, 4]),             // a plain permutation
    ("ij", "ji", &[3, 4]),                  //
    ("", "", &[]),                          // a scalar
    ("iii", "i", &[1, 1, 1]),               // dimension 1
    ("ii", "i", &[0, 0]),                   // empty output
    ("ij", "i", &[3, 0]),                   // empty sum: zeros
    ("bii", "bi", &[0, 3, 3]),              // empty batch
    ("iij", "j", &[0, 0, 2]),               // empty trace: zeros
];

/// `(labels of A, of B, of C, dims of A, dims of B)` of the contraction cases.
pub type ContractCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static [usize],
    &'static [usize],
);

/// Batched and unbatched contractions (adapters reuse the list for their own layouts).
pub const CONTRACTIONS: &[ContractCase] = &[
    ("bij", "bjk", "bik", &[2, 3, 4], &[2, 4, 5]),
    ("bhqd", "bhkd", "bhqk", &[2, 3, 4, 5], &[2, 3, 6, 5]), // attention scores
    ("bhqk", "bhkd", "bhqd", &[2, 3, 4, 6], &[2, 3, 6, 5]), // attention values
    ("ibj", "bjk", "kbi", &[3, 2, 4], &[2, 4, 5]),          // batch axis permuted in C
    ("bij", "bjk", "bki", &[3, 2, 4], &[3, 4, 5]),          // (batch, open B, open A)
    ("abij", "bjka", "kiba", &[2, 3, 4, 5], &[3, 5, 6, 2]), // two batch axes, permuted
    ("ij", "ij", "ij", &[3, 4], &[3, 4]),                   // Hadamard: every axis batch
    ("ij", "ji", "ji", &[3, 4], &[4, 3]),                   // Hadamard, transposed
    ("ij", "ij", "i", &[3, 4], &[3, 4]),                    // row-wise dot products
    ("ij", "ji", "j", &[3, 4], &[4, 3]),                    // batched dot, transposed
    ("bi", "bj", "bij", &[2, 3], &[2, 4]),                  // batched outer product
    ("ab", "c", "cab", &[2, 3], &[4]),                      // outer product
    ("ij", "jk", "ki", &[3, 4], &[4, 5]),                   // unbatched
    ("abc", "cd", "dab", &[2, 3, 4], &[4, 5]),              //
    ("ijk", "jki", "", &[2, 3, 4], &[3, 4, 2]),             // unbatched, full
    ("bij", "bjk", "bik", &[0, 3, 4], &[0, 4, 5]),          // zero-size batch
    ("bij", "bjk", "bik", &[2, 3, 0], &[2, 0, 5]),          // empty sum: zeros
    ("bij", "bjk", "kib", &[2, 0, 4], &[2, 4, 5]),          // empty open axis
];

/// `(α, β)` of the primal checks; with `β = 0` the output starts NaN-filled.
const COEFFICIENTS: [(f64, f64); 4] = [(1.0, 0.0), (-0.75, 0.0), (2.5, 1.0), (-1.5, 0.5)];

/// A tensor of `dims` filled with NaN (NaN + NaN·i for complex dtypes).
fn nan(dims: &[usize], dtype: DType) -> HostTensor {
    let n: usize = dims.iter().product();
    let data = match dtype {
        DType::F32 => HostData::F32(vec![f32::NAN; n]),
        DType::F64 => HostData::F64(vec![f64::NAN; n]),
        DType::C32 => HostData::C32(vec![num_complex::Complex32::new(f32::NAN, f32::NAN); n]),
        DType::C64 => HostData::C64(vec![num_complex::Complex64::new(f64::NAN, f64::NAN); n]),
    };
    HostTensor::new(dims, data).expect("dims match the data")
}

/// `Err` unless `got` has `want`'s dtype and shape, only finite entries, and agrees within
/// the dtype's tolerance.
fn matches(got: &HostTensor, want: &HostTensor, what: &str) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "{what}: dtype {} for {}",
            got.dtype(),
            want.dtype()
        ));
    }
    if got.data().to_c64_vec().iter().any(|z| !z.is_finite()) {
        return Err(format!(
            "{what}: non-finite entries (a strong zero leaked?)"
        ));
    }
    Tolerance::for_dtype(want.dtype())
        .check(
            &Value::Tensor(got.clone()),
            &Value::Tensor(want.clone()),
            what,
        )
        .map_err(|e| format!("{what}: {e}"))
}

/// One step of a check: `Err` with a description of the first problem.
type Step = Result<(), String>;

fn engine<T>(what: &str, r: adrules_core::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn scalar(x: f64, dtype: DType) -> DynScalar {
    DynScalar::from_c64(x.into(), dtype)
}

/// Test dtypes of the config among the four.
fn dtypes(cfg: &Config) -> Vec<DType> {
    [DType::F32, DType::F64, DType::C32, DType::C64]
        .into_iter()
        .filter(|d| cfg.dtypes.contains(d))
        .collect()
}

fn check_trace<B: Backend>(be: &B, rng: &mut Rng, case: TraceCase, dtype: DType) -> Step {
    let (la, lc, dims) = case;
    let r = ReferenceBackend;
    let spec = TraceSpec::from_labels(la, lc).expect("valid case");
    let out = spec.output_dims(dims).expect("valid case").to_vec();
    let ha = rng.tensor(dims, dtype);
    let what = |op: &str, alpha: f64, beta: f64| {
        format!("{op} {la}->{lc} on {dims:?}, {dtype}, α = {alpha}, β = {beta}")
    };
    for (alpha, beta) in COEFFICIENTS {
        let w = what("trace", alpha, beta);
        let (a1, b1) = (scalar(alpha, dtype), scalar(beta, dtype));
        let c0 = rng.tensor(&out, dtype);
        let start = if beta == 0.0 {
            nan(&out, dtype)
        } else {
            c0.clone()
        };
        let mut c = engine(&w, be.from_host(start))?;
        let a = engine(&w, be.from_host(ha.clone()))?;
        engine(&w, be.trace(&mut c, &a, &spec, Conj::No, a1, b1))?;
        let mut want = engine(&w, r.from_host(c0))?;
        let ra = engine(&w, r.from_host(ha.clone()))?;
        engine(&w, r.trace(&mut want, &ra, &spec, Conj::No, a1, b1))?;
        matches(&engine(&w, be.to_host(&c))?, &want, &w)?;
    }
    for alpha in [1.0, -0.75] {
        let w = what("add_to_diagonal", alpha, 1.0);
        let a1 = scalar(alpha, dtype);
        let hc = rng.tensor(&out, dtype);
        let (c, rc) = (
            engine(&w, be.from_host(hc.clone()))?,
            engine(&w, r.from_host(hc))?,
        );
        // Onto a dense A (another handle to it must not see the update) and onto zeros (the
        // broadcast zeros the trace pullback starts from).
        let mut a = engine(&w, be.from_host(ha.clone()))?;
        let other = a.clone();
        engine(&w, be.add_to_diagonal(&mut a, &c, &spec, Conj::No, a1))?;
        let mut want = engine(&w, r.from_host(ha.clone()))?;
        engine(&w, r.add_to_diagonal(&mut want, &rc, &spec, Conj::No, a1))?;
        matches(&engine(&w, be.to_host(&a))?, &want, &w)?;
        if engine(&w, be.to_host(&other))? != ha {
            return Err(format!("{w}: another handle to A changed"));
        }
        let mut z = engine(&w, be.zeros(dims, dtype))?;
        engine(&w, be.add_to_diagonal(&mut z, &c, &spec, Conj::No, a1))?;
        let mut want = engine(&w, r.zeros(dims, dtype))?;
        engine(&w, r.add_to_diagonal(&mut want, &rc, &spec, Conj::No, a1))?;
        matches(
            &engine(&w, be.to_host(&z))?,
            &want,
            &format!("{w}, onto zeros"),
        )?;
    }
    Ok(())
}

fn check_contract<B: Backend>(be: &B, rng: &mut Rng, case: ContractCase, dtype: DType) -> Step {
    let (la, lb, lc, da, db) = case;
    let r = ReferenceBackend;
    let spec = ContractSpec::from_labels(la, lb, lc).expect("valid case");
    let out = spec.output_dims(da, db).expect("valid case").to_vec();
    let (ha, hb) = (rng.tensor(da, dtype), rng.tensor(db, dtype));
    // Conjugation flags matter only for complex dtypes; one of each there.
    let flags: &[(Conj, Conj)] = if dtype.is_complex() {
        &[
            (Conj::No, Conj::No),
            (Conj::Yes, Conj::No),
            (Conj::No, Conj::Yes),
        ]
    } else {
        &[(Conj::No, Conj::No)]
    };
    for &(ca, cb) in flags {
        for (alpha, beta) in COEFFICIENTS {
            let w = format!(
                "contract {la},{lb}->{lc} on {da:?}, {db:?}, {dtype}, conj ({ca:?}, {cb:?}), \
                 α = {alpha}, β = {beta}"
            );
            let (a1, b1) = (scalar(alpha, dtype), scalar(beta, dtype));
            let c0 = rng.tensor(&out, dtype);
            let start = if beta == 0.0 {
                nan(&out, dtype)
            } else {
                c0.clone()
            };
            let mut c = engine(&w, be.from_host(start))?;
            let (x, y) = (
                engine(&w, be.from_host(ha.clone()))?,
                engine(&w, be.from_host(hb.clone()))?,
            );
            engine(&w, be.contract(&mut c, &x, &y, &spec, ca, cb, a1, b1))?;
            let mut want = engine(&w, r.from_host(c0))?;
            let (rx, ry) = (
                engine(&w, r.from_host(ha.clone()))?,
                engine(&w, r.from_host(hb.clone()))?,
            );
            engine(&w, r.contract(&mut want, &rx, &ry, &spec, ca, cb, a1, b1))?;
            matches(&engine(&w, be.to_host(&c))?, &want, &w)?;
        }
    }
    Ok(())
}

/// `Σ_j A[i, j]·B[i, j]` three ways: the Hadamard product `ij,ij->ij` then the sum `ij->i`,
/// and the batched contraction `ij,ij->i`; both against the reference.
fn check_dot_rows<B: Backend>(be: &B, rng: &mut Rng, dtype: DType) -> Step {
    let w = format!("row dot products, {dtype}");
    let (ha, hb) = (rng.tensor(&[3, 4], dtype), rng.tensor(&[3, 4], dtype));
    let (x, y) = (
        engine(&w, be.from_host(ha.clone()))?,
        engine(&w, be.from_host(hb.clone()))?,
    );
    let (one, zero) = (scalar(1.0, dtype), scalar(0.0, dtype));
    let hadamard = ContractSpec::from_labels("ij", "ij", "ij").expect("valid");
    let mut h = engine(&w, be.zeros(&[3, 4], dtype))?;
    engine(
        &w,
        be.contract(&mut h, &x, &y, &hadamard, Conj::No, Conj::No, one, zero),
    )?;
    let mut via_trace = engine(&w, be.zeros(&[3], dtype))?;
    let sum = TraceSpec::from_labels("ij", "i").expect("valid");
    engine(&w, be.trace(&mut via_trace, &h, &sum, Conj::No, one, zero))?;
    let dot = ContractSpec::from_labels("ij", "ij", "i").expect("valid");
    let mut direct = engine(&w, be.zeros(&[3], dtype))?;
    engine(
        &w,
        be.contract(&mut direct, &x, &y, &dot, Conj::No, Conj::No, one, zero),
    )?;
    let r = ReferenceBackend;
    let (rx, ry) = (engine(&w, r.from_host(ha))?, engine(&w, r.from_host(hb))?);
    let mut want = engine(&w, r.zeros(&[3], dtype))?;
    engine(
        &w,
        r.contract(&mut want, &rx, &ry, &dot, Conj::No, Conj::No, one, zero),
    )?;
    matches(
        &engine(&w, be.to_host(&via_trace))?,
        &want,
        &format!("{w}, via trace"),
    )?;
    matches(
        &engine(&w, be.to_host(&direct))?,
        &want,
        &format!("{w}, batched"),
    )
}

/// Every trace pattern of the list (diagonals, sums, traces, hypertraces, permutations, rank 0,
/// zero-size axes) and its adjoint `add_to_diagonal`, in every dtype of the config, against
/// the reference; `β = 0` starts from a NaN-filled C; another handle to the updated A must
/// not change.
///
/// # Panics
/// With the failing cases, or when the config supports none.
pub fn general_traces<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(31);
    let (mut ran, mut failures) = (0, Vec::new());
    for dtype in dtypes(cfg) {
        for &case in TRACES {
            if case.2.len() > cfg.max_rank {
                continue;
            }
            ran += 1;
            if let Err(e) = check_trace(be, &mut rng, case, dtype) {
                failures.push(e);
            }
        }
    }
    report(ran, failures);
}

/// Every batched and unbatched contraction of the list (attention, Hadamard, row dots, outer
/// products, permuted batch axes, zero-size batches and sums), in every dtype of the config
/// (complex ones with conjugation flags), against the reference; `β = 0` starts from a
/// NaN-filled C; and the row-wise dot product three ways.
///
/// # Panics
/// With the failing cases, or when the config supports none.
pub fn batched_contractions<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(9);
    let (mut ran, mut failures) = (0, Vec::new());
    for dtype in dtypes(cfg) {
        for &case in CONTRACTIONS {
            let rank = case.2.len().max(case.3.len()).max(case.4.len());
            if rank > cfg.max_rank {
                continue;
            }
            ran += 1;
            if let Err(e) = check_contract(be, &mut rng, case, dtype) {
                failures.push(e);
            }
        }
        ran += 1;
        if let Err(e) = check_dot_rows(be, &mut rng, dtype) {
            failures.push(e);
        }
    }
    report(ran, failures);
}

/// The rule of `op` (every input active) on `be` and on the reference: the primal and every
/// cotangent (`C̄`, `Ā`, `B̄`, `ᾱ`, `β̄`) must agree.
fn check_rule<B: Backend>(
    be: &B,
    rng: &mut Rng,
    op: Primitive,
    dims: &[&[usize]],
    out: &[usize],
    dtype: DType,
    what: &str,
) -> Step {
    let r = ReferenceBackend;
    let hx: Vec<HostTensor> = dims.iter().map(|d| rng.tensor(d, dtype)).collect();
    let (hc, hw) = (rng.tensor(out, dtype), rng.tensor(out, dtype));
    let x: Vec<B::Tensor> = hx
        .iter()
        .map(|h| engine(what, be.from_host(h.clone())))
        .collect::<Result<_, _>>()?;
    let rx: Vec<_> = hx
        .iter()
        .map(|h| engine(what, r.from_host(h.clone())))
        .collect::<Result<_, _>>()?;
    let mut c = engine(what, be.from_host(hc.clone()))?;
    let pb = engine(
        what,
        op.rrule(be, &mut c, &x.iter().collect::<Vec<_>>(), Activity::ALL),
    )?;
    let g = engine(what, pb.pullback(&engine(what, be.from_host(hw.clone()))?))?;
    let mut rc = engine(what, r.from_host(hc))?;
    let rpb = engine(
        what,
        op.rrule(&r, &mut rc, &rx.iter().collect::<Vec<_>>(), Activity::ALL),
    )?;
    let rg = engine(what, rpb.pullback(&engine(what, r.from_host(hw))?))?;
    matches(
        &engine(what, be.to_host(&c))?,
        &rc,
        &format!("{what}: primal"),
    )?;
    let pairs = [("C̄", &g.c, &rg.c), ("Ā", &g.a, &rg.a), ("B̄", &g.b, &rg.b)];
    for (name, got, want) in pairs {
        match (got, want) {
            (Some(got), Some(want)) => matches(
                &engine(what, be.to_host(got))?,
                want,
                &format!("{what}: {name}"),
            )?,
            (None, None) => {}
            _ => return Err(format!("{what}: {name} present on one backend only")),
        }
    }
    let tol = Tolerance::for_dtype(dtype);
    for (name, got, want) in [("ᾱ", g.alpha, rg.alpha), ("β̄", g.beta, rg.beta)] {
        let (Some(got), Some(want)) = (got, want) else {
            return Err(format!("{what}: {name} missing"));
        };
        let (got, want) = (got.to_c64(), want.to_c64());
        if (got - want).norm() > tol.atol + tol.rtol * want.norm() {
            return Err(format!("{what}: {name} {got} against {want}"));
        }
    }
    Ok(())
}

/// The trace and contraction rules (every input active, `α`, `β` random) on every pattern of
/// [`TRACES`] and [`CONTRACTIONS`], in every dtype of the config: the primal and every
/// cotangent against the same rule on the reference backend.
///
/// # Panics
/// With the failing cases, or when the config supports none.
pub fn general_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(34);
    let (mut ran, mut failures) = (0, Vec::new());
    for dtype in dtypes(cfg) {
        for &(la, lc, dims) in TRACES {
            if dims.len() > cfg.max_rank {
                continue;
            }
            let spec = TraceSpec::from_labels(la, lc).expect("valid case");
            let out = spec.output_dims(dims).expect("valid case").to_vec();
            let op: Primitive = TraceOp::new(spec)
                .alpha(rng.scalar(dtype))
                .beta(rng.scalar(dtype))
                .into();
            let what = format!("trace rule {la}->{lc} on {dims:?}, {dtype}");
            ran += 1;
            if let Err(e) = check_rule(be, &mut rng, op, &[dims], &out, dtype, &what) {
                failures.push(e);
            }
        }
        for &(la, lb, lc, da, db) in CONTRACTIONS {
            if da.len().max(db.len()).max(lc.len()) > cfg.max_rank {
                continue;
            }
            let spec = ContractSpec::from_labels(la, lb, lc).expect("valid case");
            let out = spec.output_dims(da, db).expect("valid case").to_vec();
            let op: Primitive = ContractOp::new(spec)
                .alpha(rng.scalar(dtype))
                .beta(rng.scalar(dtype))
                .into();
            let what = format!("contraction rule {la},{lb}->{lc} on {da:?}, {db:?}, {dtype}");
            ran += 1;
            if let Err(e) = check_rule(be, &mut rng, op, &[da, db], &out, dtype, &what) {
                failures.push(e);
            }
        }
    }
    report(ran, failures);
}
