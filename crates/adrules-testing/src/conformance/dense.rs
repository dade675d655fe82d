//! The dense linear-algebra rules of `adrules_core::linalg` (Cholesky, triangular solve,
//! solve, inverse, determinant, slogdet, matrix exponential, pseudo-inverse) on a backend:
//! the oracle files `cholesky.jsonl`, `det.jsonl`, `slogdet.jsonl`, `solve.jsonl`,
//! `matrix_exp.jsonl`, `pinv.jsonl`, `lu_factor.jsonl` and `eig_values_vectors_abs.jsonl` (PyTorch 2.10, cross-checked by finite
//! differences) replayed through the rule drivers ([`dense_oracle`]: every probe's JVP by
//! `rule::frule` and VJP by `rule::rrule`), and identities of the primal with typed errors
//! for bad input ([`dense_identities`]). [`check_rule`](crate::rule::check_rule) runs on each
//! rule in [`builtin_rules`](super::builtin::builtin_rules).

use adrules_core::linalg::{
    CholeskyRule, DetRule, EigRule, InvRule, LuFactorRule, MatrixExpRule, PinvRule, SlogdetRule,
    SolveRule, SolveTriangularRule,
};
use adrules_core::rule::{self, Rule, SyncBackend};
use adrules_core::{Complex64, DType, Error, HostData, HostTensor, Result};

use super::Config;
use super::case::report;
use crate::Rng;
use crate::oracle::{OracleCase, assert_close, load_for};

/// The oracle files of the dense rules, replayed by [`dense_oracle`] and
/// [`engine_dense_oracle`].
const FILES: [&str; 7] = [
    "cholesky.jsonl",
    "det.jsonl",
    "slogdet.jsonl",
    "solve.jsonl",
    "matrix_exp.jsonl",
    "pinv.jsonl",
    "lu_factor.jsonl",
];

/// The `rtol` of a `pinv.jsonl` case (`null`: the default).
fn pinv_rtol(case: &OracleCase) -> Option<f64> {
    case.kwargs["rtol"].as_f64()
}

/// Replays every probe of `case` through `rule` on `be`: the output tangents of
/// [`rule::frule`] along the probe's directions against the file's JVPs, and the input
/// cotangents of [`rule::rrule`]'s pullback of the probe's cotangents against its VJPs.
/// `outputs` names the rule's outputs in the file (`["value"]`, or `["output_0",
/// "output_1"]`). With `hermitian_wrapper` (the Cholesky file's convention, as the
/// database's eigh files: the function is `f(A + Aᴴ)` of one input `A`), the input and
/// the directions enter as `X + Xᴴ` and the cotangent leaves as `Ḡ + Ḡᴴ`.
///
/// # Errors
/// The rule's errors (a typed error for a case the rule refuses).
///
/// # Panics
/// When a derivative is outside the case's first-order tolerance, naming the case.
pub fn replay_case<R: Rule, B: SyncBackend>(
    rule: &R,
    be: &B,
    case: &OracleCase,
    outputs: &[&str],
    hermitian_wrapper: bool,
) -> Result<()> {
    let tol = case.first_order_tolerance();
    let wrap = |h: &HostTensor| -> Result<HostTensor> {
        if hermitian_wrapper {
            plus_adjoint(h)
        } else {
            Ok(h.clone())
        }
    };
    let xs: Vec<B::Tensor> = case
        .inputs_in_order()
        .into_iter()
        .map(|h| be.from_host(wrap(h)?))
        .collect::<Result<_>>()?;
    let refs: Vec<&B::Tensor> = xs.iter().collect();
    let names: Vec<&String> = case.inputs.keys().collect();
    for probe in &case.probes {
        let dirs: Vec<B::Tensor> = names
            .iter()
            .map(|n| be.from_host(wrap(&probe.direction[*n])?))
            .collect::<Result<_>>()?;
        let dir_refs: Vec<Option<&B::Tensor>> = dirs.iter().map(Some).collect();
        let (_, tangents) = rule::frule(rule, be, &refs, &dir_refs)?;
        let (_, pb) = rule::rrule(rule, be, &refs, &vec![true; refs.len()])?;
        let mut cots = Vec::new();
        for (j, out) in outputs.iter().enumerate() {
            let (want, cot) = if outputs.len() == 1 && !probe.jvps.contains_key(*out) {
                (&probe.jvp, &probe.cotangent)
            } else {
                (&probe.jvps[*out], &probe.cotangents[*out])
            };
            let what = format!("{} {} jvp {out}", case.id, probe.id);
            match &tangents[j] {
                Some(t) => assert_close(tol, &be.to_host(t)?, want, &what),
                None => assert_close(
                    tol,
                    &HostTensor::zeros(want.dims(), want.dtype())?,
                    want,
                    &what,
                ),
            }
            cots.push(Some(be.from_host(cot.clone())?));
        }
        // outputs the file does not name (LU's pivots) get no cotangent
        cots.resize(rule.num_outputs(), None);
        let bars = pb.pullback(&cots)?;
        for (i, n) in names.iter().enumerate() {
            let got = bars[i].as_ref().map(|t| be.to_host(t)).transpose()?;
            let want = &probe.vjp[*n];
            let got = match got {
                Some(g) => wrap(&g)?,
                None => HostTensor::zeros(want.dims(), want.dtype())?,
            };
            assert_close(
                tol,
                &got,
                want,
                &format!("{} {} vjp {n}", case.id, probe.id),
            );
        }
    }
    Ok(())
}

/// `X + Xᴴ` for every matrix of `x: [batch…, n, n]`.
fn plus_adjoint(x: &HostTensor) -> Result<HostTensor> {
    let d = x.dims();
    let n = d[d.len() - 1];
    let v = c64(x);
    let mut out = v.clone();
    for (b, block) in out.chunks_mut((n * n).max(1)).enumerate() {
        for i in 0..n {
            for j in 0..n {
                block[i * n + j] += v[b * n * n + j * n + i].conj();
            }
        }
    }
    ht(d, &out, x.dtype())
}

/// Every case of `cholesky.jsonl` (lower and upper; the file's function is `cholesky(A + Aᴴ)`),
/// `det.jsonl`, `slogdet.jsonl`, `solve.jsonl`, `matrix_exp.jsonl`, `pinv.jsonl` and
/// `lu_factor.jsonl` (the packed factors; square, tall and wide) whose dtype and rank `cfg` supports, replayed by [`replay_case`] (square,
/// batched and zero-size inputs; vector and matrix right-hand sides).
///
/// # Panics
/// On a mismatch or an error, naming the case; when `cfg` supports no case.
pub fn dense_oracle<B: SyncBackend>(be: &B, cfg: &Config) {
    let mut ran = 0;
    let mut failures = Vec::new();
    for file in FILES {
        for case in load_for(file, &cfg.dtypes).expect("the oracle file") {
            let rank = case.inputs["a"].dims().len();
            if !cfg.supports(&[case.dtype], &[rank]) {
                continue;
            }
            ran += 1;
            let r = match file {
                "cholesky.jsonl" => {
                    let upper = case.kwargs["upper"].as_bool().unwrap_or(false);
                    replay_case(&CholeskyRule { upper }, be, &case, &["value"], true)
                }
                "det.jsonl" => replay_case(&DetRule, be, &case, &["value"], false),
                "slogdet.jsonl" => {
                    replay_case(&SlogdetRule, be, &case, &["output_0", "output_1"], false)
                }
                "matrix_exp.jsonl" => replay_case(&MatrixExpRule, be, &case, &["value"], false),
                "pinv.jsonl" => {
                    let rule = PinvRule {
                        rtol: pinv_rtol(&case),
                    };
                    replay_case(&rule, be, &case, &["value"], false)
                }
                // the pivots (our second output, P) carry no derivative
                "lu_factor.jsonl" => replay_case(&LuFactorRule, be, &case, &["output_0"], false),
                _ => replay_case(&SolveRule, be, &case, &["value"], false),
            };
            if let Err(e) = r {
                failures.push(format!("{}: {e}", case.id));
            }
        }
    }
    for case in load_for("eig_values_vectors_abs.jsonl", &cfg.dtypes).expect("the oracle file") {
        let rank = case.inputs["a"].dims().len();
        if !cfg.supports(&[case.dtype, case.dtype.complex()], &[rank]) {
            continue;
        }
        ran += 1;
        if let Err(e) = replay_eig(be, &case) {
            failures.push(format!("{}: {e}", case.id));
        }
    }
    report(ran, failures);
}

/// A host tensor of `want`'s shape and dtype from complex values.
fn like(want: &HostTensor, v: &[Complex64]) -> Result<HostTensor> {
    ht(want.dims(), v, want.dtype())
}

/// A case of `eig_values_vectors_abs.jsonl` through [`EigRule`]: the file's derivatives are
/// those of the eigenvalues and of `|V|` (gauge invariant). The order of the eigenvalues is
/// the implementation's (LAPACK's in the file, faer's here), so each matrix's eigenvalues
/// are matched to the file's by their tangents (greedily, nearest first) before comparing.
fn replay_eig<B: SyncBackend>(be: &B, case: &OracleCase) -> Result<()> {
    let tol = case.first_order_tolerance();
    let a = &case.inputs["a"];
    let d = a.dims();
    let n = d[d.len() - 1];
    let count: usize = d[..d.len() - 2].iter().product();
    let x = be.from_host(a.clone())?;
    for probe in &case.probes {
        let dir = be.from_host(probe.direction["a"].clone())?;
        let (outs, tans) = rule::frule(&EigRule, be, &[&x], &[Some(&dir)])?;
        let v = c64(&be.to_host(&outs[1])?);
        let host = |t: &Option<B::Tensor>| -> Result<Vec<Complex64>> {
            match t {
                Some(t) => Ok(c64(&be.to_host(t)?)),
                None => Ok(vec![Complex64::new(0.0, 0.0); count * n * n.max(1)]),
            }
        };
        let (l_dot, v_dot) = (host(&tans[0])?, host(&tans[1])?);
        let (want_l, want_v) = (&probe.jvps["values"], &probe.jvps["vectors"]);
        let wl = c64(want_l);
        // perm[b·n + j]: our index of the file's eigenvalue j of matrix b
        let mut perm = vec![0; count * n];
        for b in 0..count {
            let mut used = vec![false; n];
            for j in 0..n {
                let i = (0..n)
                    .filter(|&i| !used[i])
                    .min_by(|&p, &q| {
                        let dp = (l_dot[b * n + p] - wl[b * n + j]).norm();
                        let dq = (l_dot[b * n + q] - wl[b * n + j]).norm();
                        dp.total_cmp(&dq)
                    })
                    .unwrap_or(j);
                used[i] = true;
                perm[b * n + j] = i;
            }
        }
        let at = |b: usize, r: usize, j: usize| b * n * n + r * n + perm[b * n + j];
        let l_al: Vec<Complex64> = (0..count * n).map(|p| l_dot[p / n * n + perm[p]]).collect();
        let abs_dot: Vec<Complex64> = (0..count * n * n)
            .map(|p| {
                let (b, r, j) = (p / (n * n), p / n % n, p % n);
                let (vv, vd) = (v[at(b, r, j)], v_dot[at(b, r, j)]);
                Complex64::new((vv.conj() * vd).re / vv.norm(), 0.0)
            })
            .collect();
        let what = format!("{} {}", case.id, probe.id);
        assert_close(
            tol,
            &like(want_l, &l_al)?,
            want_l,
            &format!("{what} jvp values"),
        );
        assert_close(
            tol,
            &like(want_v, &abs_dot)?,
            want_v,
            &format!("{what} jvp |V|"),
        );
        // the cotangents, in our order: λ̄ and V̄ = W ∘ V/|V|
        let (cl, cw) = (
            c64(&probe.cotangents["values"]),
            c64(&probe.cotangents["vectors"]),
        );
        let mut l_bar = vec![Complex64::new(0.0, 0.0); count * n];
        let mut v_bar = vec![Complex64::new(0.0, 0.0); count * n * n];
        for b in 0..count {
            for j in 0..n {
                l_bar[b * n + perm[b * n + j]] = cl[b * n + j];
                for r in 0..n {
                    let vv = v[at(b, r, j)];
                    v_bar[at(b, r, j)] = vv * (cw[b * n * n + r * n + j].re / vv.norm());
                }
            }
        }
        let complex = case.dtype.complex();
        let (_, pb) = rule::rrule(&EigRule, be, &[&x], &[true])?;
        let l_dims: Vec<usize> = d[..d.len() - 1].to_vec();
        let cots = [
            Some(be.from_host(ht(&l_dims, &l_bar, complex)?)?),
            Some(be.from_host(ht(d, &v_bar, complex)?)?),
        ];
        let bars = pb.pullback(&cots)?;
        let got = match &bars[0] {
            Some(g) => be.to_host(g)?,
            None => HostTensor::zeros(d, case.dtype)?,
        };
        assert_close(tol, &got, &probe.vjp["a"], &format!("{what} vjp a"));
    }
    Ok(())
}

/// The second order of the rules on one LU ([`SolveRule`] with vector and matrix right-hand
/// sides, [`InvRule`], [`DetRule`], [`SlogdetRule`]), of [`CholeskyRule`] (lower and upper)
/// and of [`SolveTriangularRule`] (left and right, unit diagonal) by
/// [`check_pullback_tangent`](crate::check_pullback_tangent) (central differences of the
/// pullback along random input and cotangent tangents) on well-conditioned batched inputs,
/// in the double-precision dtypes of `cfg`.
///
/// # Panics
/// On a failed check (the first eight listed); when `cfg` has no double dtype.
pub fn dense_second_order<B: SyncBackend>(be: &B, cfg: &Config) {
    let mut ran = 0;
    let mut failures = Vec::new();
    let mut rng = Rng::seed(4949);
    for &dtype in &cfg.dtypes {
        if !dtype.is_double() || !cfg.supports(&[dtype], &[3]) {
            continue;
        }
        let n = 4;
        let mut a = c64(&rng.tensor(&[2, n, n], dtype));
        for b in 0..2 {
            for i in 0..n {
                a[b * n * n + i * n + i] += Complex64::new(4.0, 0.0);
            }
        }
        let a = ht(&[2, n, n], &a, dtype).expect("a");
        let vec_b = rng.tensor(&[2, n], dtype);
        let mat_b = rng.tensor(&[2, n, 3], dtype);
        let seed = rng.below(1 << 30) as u64;
        let cases: [(&str, Result<f64>); 5] = [
            (
                "solve, vector b",
                crate::check_pullback_tangent(&SolveRule, be, &[a.clone(), vec_b], seed),
            ),
            (
                "solve, matrix b",
                crate::check_pullback_tangent(&SolveRule, be, &[a.clone(), mat_b], seed),
            ),
            (
                "inv",
                crate::check_pullback_tangent(&InvRule, be, std::slice::from_ref(&a), seed),
            ),
            (
                "det",
                crate::check_pullback_tangent(&DetRule, be, std::slice::from_ref(&a), seed),
            ),
            (
                "slogdet",
                crate::check_pullback_tangent(&SlogdetRule, be, std::slice::from_ref(&a), seed),
            ),
        ];
        let mut cases: Vec<(String, Result<f64>)> =
            cases.into_iter().map(|(w, r)| (w.to_string(), r)).collect();
        // Cholesky of A·Aᴴ (positive definite), and the triangular solves
        let av = c64(&a);
        let mut spd = vec![Complex64::new(0.0, 0.0); 2 * n * n];
        for b in 0..2 {
            for i in 0..n {
                for j in 0..n {
                    spd[b * n * n + i * n + j] = (0..n)
                        .map(|k| av[b * n * n + i * n + k] * av[b * n * n + j * n + k].conj())
                        .sum();
                }
            }
        }
        let spd = ht(&[2, n, n], &spd, dtype).expect("spd");
        for upper in [false, true] {
            let rule = CholeskyRule { upper };
            let r = crate::check_pullback_tangent(&rule, be, std::slice::from_ref(&spd), seed);
            cases.push((format!("{rule:?}"), r));
            for (left, unit_diagonal) in [(true, false), (false, false), (true, true)] {
                let rule = SolveTriangularRule {
                    upper,
                    left,
                    unit_diagonal,
                };
                let dims = if left { [2, n, 3] } else { [2, 3, n] };
                let b = rng.tensor(&dims, dtype);
                let r = crate::check_pullback_tangent(&rule, be, &[a.clone(), b], seed);
                cases.push((format!("{rule:?}"), r));
            }
        }
        for (what, r) in cases {
            ran += 1;
            if let Err(e) = r {
                failures.push(format!("{dtype} {what}: {e}"));
            }
        }
    }
    report(ran, failures);
}

/// `A·B` of row-major `n × n` matrices (complex).
fn matmul(a: &[Complex64], b: &[Complex64], n: usize) -> Vec<Complex64> {
    let mut c = vec![Complex64::new(0.0, 0.0); n * n];
    for i in 0..n {
        for k in 0..n {
            for j in 0..n {
                c[i * n + j] += a[i * n + k] * b[k * n + j];
            }
        }
    }
    c
}

/// The largest modulus of `x − y`.
fn dist(x: &[Complex64], y: &[Complex64]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(p, q)| (p - q).norm())
        .fold(0.0, f64::max)
}

/// Identities of the primal on random matrices in every dtype of `cfg` (`n = 6`):
/// `A·inv(A) = I`, `det(A·B) = det(A)·det(B)`, `s·exp(l) = det(A)` for slogdet,
/// `L·Lᴴ = A` for a Hermitian positive-definite `A`, `A·solve(A, B) = B`, `T·X = B` for the
/// triangular solve (which reads one triangle only); and typed errors: a non-square `A`,
/// a singular one (`Singular`), an indefinite one (`NotPositiveDefinite`), a non-finite
/// entry, a right-hand side of another length or dtype.
///
/// # Panics
/// On a failed identity or an untyped error; when `cfg` supports no dtype.
pub fn dense_identities<B: SyncBackend>(be: &B, cfg: &Config) {
    let mut ran = 0;
    let mut failures = Vec::new();
    let mut rng = Rng::seed(49);
    for &dtype in &cfg.dtypes {
        if !cfg.supports(&[dtype], &[2]) {
            continue;
        }
        ran += 1;
        if let Err(e) = identities(be, &mut rng, dtype) {
            failures.push(format!("{dtype}: {e}"));
        }
    }
    report(ran, failures);
}

/// A host tensor of `dtype` from complex values (projected onto a real dtype).
fn ht(dims: &[usize], v: &[Complex64], dtype: DType) -> Result<HostTensor> {
    HostTensor::new(dims, HostData::from_c64_projected(v, dtype))
}

fn c64(h: &HostTensor) -> Vec<Complex64> {
    h.data().to_c64_vec()
}

fn identities<B: SyncBackend>(be: &B, rng: &mut Rng, dtype: DType) -> Result<()> {
    let n = 6;
    let tol = if dtype.is_double() { 1e-10 } else { 1e-3 };
    let fail = |what: &str, d: f64| Error::invalid(what, format!("off by {d:e}"));
    let eye: Vec<Complex64> = (0..n * n)
        .map(|p| Complex64::new(if p / n == p % n { 1.0 } else { 0.0 }, 0.0))
        .collect();
    let dev = |h: HostTensor| be.from_host(h);
    let host = |t: &B::Tensor| be.to_host(t).map(|h| c64(&h));
    // diagonally dominant: well conditioned
    let shifted = |rng: &mut Rng| -> Result<HostTensor> {
        let r = c64(&rng.tensor(&[n, n], dtype));
        let v: Vec<Complex64> = (0..n * n)
            .map(|p| {
                r[p] + if p / n == p % n {
                    Complex64::new(4.0, 0.0)
                } else {
                    0.0.into()
                }
            })
            .collect();
        ht(&[n, n], &v, dtype)
    };
    let (ah, bh) = (shifted(rng)?, shifted(rng)?);
    let (a, b) = (dev(ah.clone())?, dev(bh.clone())?);
    let (av, bv) = (c64(&ah), c64(&bh));
    let y = adrules_core::linalg::inv(be, &a)?;
    let d = dist(&matmul(&av, &host(&y)?, n), &eye);
    if d > tol * 10.0 {
        return Err(fail("A·inv(A) = I", d));
    }
    let ab = dev(ht(&[n, n], &matmul(&av, &bv, n), dtype)?)?;
    let (da, db, dab) = (
        host(&adrules_core::linalg::det(be, &a)?)?[0],
        host(&adrules_core::linalg::det(be, &b)?)?[0],
        host(&adrules_core::linalg::det(be, &ab)?)?[0],
    );
    let d = (dab - da * db).norm() / dab.norm();
    if d > tol * 10.0 {
        return Err(fail("det(A·B) = det(A)·det(B)", d));
    }
    let [s, l] = adrules_core::linalg::slogdet(be, &a)?;
    let d = (host(&s)?[0] * host(&l)?[0].re.exp() - da).norm() / da.norm();
    if d > tol * 10.0 {
        return Err(fail("s·exp(l) = det(A)", d));
    }
    // A·X = B
    let x = adrules_core::linalg::solve(be, &a, &b)?;
    let d = dist(&matmul(&av, &host(&x)?, n), &bv);
    if d > tol * 10.0 {
        return Err(fail("A·solve(A, B) = B", d));
    }
    // L·Lᴴ = M·Mᴴ + n·I
    let mh: Vec<Complex64> = (0..n * n).map(|p| av[(p % n) * n + p / n].conj()).collect();
    let spd: Vec<Complex64> = matmul(&av, &mh, n);
    let spd_t = dev(ht(&[n, n], &spd, dtype)?)?;
    let lv = host(&adrules_core::linalg::cholesky(be, &spd_t)?)?;
    let lh: Vec<Complex64> = (0..n * n).map(|p| lv[(p % n) * n + p / n].conj()).collect();
    let d = dist(&matmul(&lv, &lh, n), &spd) / spd.iter().map(|z| z.norm()).fold(0.0, f64::max);
    if d > tol
        || (0..n)
            .any(|i| lv[i * n + i].re <= 0.0 || (i + 1..n).any(|j| lv[i * n + j] != 0.0.into()))
    {
        return Err(fail("L·Lᴴ = A, L lower with a positive diagonal", d));
    }
    // T·X = B with garbage in the other triangle (not read)
    for upper in [false, true] {
        let rule = SolveTriangularRule {
            upper,
            left: true,
            unit_diagonal: false,
        };
        let x = adrules_core::linalg::solve_triangular(be, &a, &b, rule)?;
        let t: Vec<Complex64> = (0..n * n)
            .map(|p| {
                let (i, j) = (p / n, p % n);
                if (upper && j >= i) || (!upper && i >= j) {
                    av[p]
                } else {
                    0.0.into()
                }
            })
            .collect();
        let d = dist(&matmul(&t, &host(&x)?, n), &bv);
        if d > tol * 10.0 {
            return Err(fail("T·solve_triangular(A, B) = B", d));
        }
    }
    errors(be, dtype, &a)
}

/// The typed errors of bad input.
fn errors<B: SyncBackend>(be: &B, dtype: DType, a: &B::Tensor) -> Result<()> {
    let expect = |what: &str, r: Result<Vec<B::Tensor>>, ok: fn(&Error) -> bool| match r {
        Err(e) if ok(&e) => Ok(()),
        Err(e) => Err(Error::invalid(what, format!("wrong error {e:?}"))),
        Ok(_) => Err(Error::invalid(what, "accepted")),
    };
    let host = |dims: &[usize], v: Vec<f64>| -> Result<B::Tensor> {
        let z: Vec<Complex64> = v.into_iter().map(|x| x.into()).collect();
        be.from_host(ht(dims, &z, dtype)?)
    };
    let wide = host(&[2, 3], vec![1.0; 6])?;
    let singular = host(&[2, 2], vec![1.0, 2.0, 2.0, 4.0])?;
    let indefinite = host(&[2, 2], vec![1.0, 0.0, 0.0, -1.0])?;
    let nan = host(&[2, 2], vec![1.0, f64::NAN, 0.0, 1.0])?;
    let rhs3 = host(&[3], vec![1.0; 3])?;
    let shape = |e: &Error| matches!(e, Error::ShapeMismatch { .. });
    let sing = |e: &Error| matches!(e, Error::Singular { .. });
    type Primal<'a, T> = &'a dyn Fn(&T) -> Result<Vec<T>>;
    let rules_1: [(&str, Primal<'_, B::Tensor>); 4] = [
        ("inv", &|x| rule::primal(&InvRule, be, &[x])),
        ("det", &|x| rule::primal(&DetRule, be, &[x])),
        ("slogdet", &|x| rule::primal(&SlogdetRule, be, &[x])),
        ("cholesky", &|x| {
            rule::primal(&CholeskyRule::default(), be, &[x])
        }),
    ];
    for (name, f) in rules_1 {
        expect(&format!("{name} of a 2 × 3 matrix"), f(&wide), shape)?;
        expect(&format!("{name} of a NaN"), f(&nan), |e| {
            matches!(e, Error::InvalidArgument { .. })
        })?;
    }
    expect(
        "inv of a singular matrix",
        rule::primal(&InvRule, be, &[&singular]),
        sing,
    )?;
    expect(
        "slogdet of a singular matrix",
        rule::primal(&SlogdetRule, be, &[&singular]),
        sing,
    )?;
    let (_, pb) = rule::rrule(&DetRule, be, &[&singular], &[true])?;
    let one = host(&[], vec![1.0])?;
    let r = pb
        .pullback(&[Some(one)])
        .map(|v| v.into_iter().flatten().collect());
    expect("the det pullback at a singular matrix", r, sing)?;
    expect(
        "cholesky of an indefinite matrix",
        rule::primal(&CholeskyRule::default(), be, &[&indefinite]),
        |e| matches!(e, Error::NotPositiveDefinite { .. }),
    )?;
    expect(
        "solve with a singular A",
        rule::primal(&SolveRule, be, &[&singular, &singular]),
        sing,
    )?;
    expect(
        "solve with b of length 3",
        rule::primal(&SolveRule, be, &[&singular, &rhs3]),
        shape,
    )?;
    let zero_diag = host(&[2, 2], vec![0.0, 0.0, 1.0, 1.0])?;
    let tri = SolveTriangularRule::default();
    expect(
        "solve_triangular with a zero pivot",
        rule::primal(&tri, be, &[&zero_diag, &singular]),
        sing,
    )?;
    let other = if dtype == DType::F64 {
        DType::F32
    } else {
        DType::F64
    };
    if be.dtypes().contains(&other) {
        let b = be.from_host(HostTensor::zeros(&be.dims(a), other)?)?;
        expect(
            "solve with b of another dtype",
            rule::primal(&SolveRule, be, &[a, &b]),
            |e| matches!(e, Error::DTypeMismatch { .. }),
        )?;
    }
    Ok(())
}

/// A dense operation of an oracle file, as an engine's test runs it (see
/// [`engine_dense_oracle`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DenseOp {
    /// `cholesky(A)` (`upper`: `U = Lᵀ`)
    Cholesky {
        /// the upper factor
        upper: bool,
    },
    /// `det(A)`
    Det,
    /// `[sign, log|det(A)|]`
    Slogdet,
    /// `solve(A, B)`
    Solve,
    /// `exp(A)`
    MatrixExp,
    /// the packed factors of `lu_factor(A)`
    LuFactor,
    /// `pinv(A)` with the relative cutoff `rtol` (`None`: the default)
    Pinv {
        /// the relative cutoff
        rtol: Option<f64>,
    },
}

/// The oracle files of [`dense_oracle`] replayed through an engine's own graph: for every
/// real case of a dtype in `dtypes` whose input rank is at most `max_rank`, and each probe,
/// `vjp(op, inputs, cotangents)` must return the input gradients of
/// `Σⱼ ⟨cotangentⱼ, outputⱼ⟩` computed by the engine's op and its `backward()` (an engine
/// whose determinants keep unit axes reshapes the cotangents itself). The gradients are
/// compared with the file's VJPs at its tolerance (the Cholesky file's function
/// `cholesky(A + Aᵀ)` is composed here). Returns the number of cases replayed.
///
/// # Panics
/// On a mismatch or an error of `vjp`, naming the case; when no case is replayed.
pub fn engine_dense_oracle(
    dtypes: &[DType],
    max_rank: usize,
    mut vjp: impl FnMut(DenseOp, &[HostTensor], &[HostTensor]) -> Result<Vec<HostTensor>>,
) -> usize {
    let mut ran = 0;
    for file in FILES {
        for case in load_for(file, dtypes).expect("the oracle file") {
            if case.dtype.is_complex() || case.inputs["a"].dims().len() > max_rank {
                continue;
            }
            let (op, wrapper, outputs): (DenseOp, bool, &[&str]) = match file {
                "cholesky.jsonl" => {
                    let upper = case.kwargs["upper"].as_bool().unwrap_or(false);
                    (DenseOp::Cholesky { upper }, true, &["value"])
                }
                "det.jsonl" => (DenseOp::Det, false, &["value"]),
                "slogdet.jsonl" => (DenseOp::Slogdet, false, &["output_0", "output_1"]),
                "matrix_exp.jsonl" => (DenseOp::MatrixExp, false, &["value"]),
                "pinv.jsonl" => (
                    DenseOp::Pinv {
                        rtol: pinv_rtol(&case),
                    },
                    false,
                    &["value"],
                ),
                "lu_factor.jsonl" => (DenseOp::LuFactor, false, &["output_0"]),
                _ => (DenseOp::Solve, false, &["value"]),
            };
            let wrap = |h: &HostTensor| {
                if wrapper {
                    plus_adjoint(h)
                } else {
                    Ok(h.clone())
                }
            };
            let inputs: Vec<HostTensor> = case
                .inputs_in_order()
                .into_iter()
                .map(wrap)
                .collect::<Result<_>>()
                .expect("inputs");
            let tol = case.first_order_tolerance();
            for probe in &case.probes {
                let cots: Vec<HostTensor> =
                    if outputs.len() == 1 && !probe.cotangents.contains_key(outputs[0]) {
                        vec![probe.cotangent.clone()]
                    } else {
                        outputs
                            .iter()
                            .map(|o| probe.cotangents[*o].clone())
                            .collect()
                    };
                let grads = vjp(op, &inputs, &cots)
                    .unwrap_or_else(|e| panic!("{} {}: {e}", case.id, probe.id));
                for (g, name) in grads.iter().zip(case.inputs.keys()) {
                    let g = wrap(g).expect("a gradient of the input's shape");
                    let what = format!("{} {} gradient of {name}", case.id, probe.id);
                    assert_close(tol, &g, &probe.vjp[name], &what);
                }
            }
            ran += 1;
        }
    }
    assert!(ran > 0, "no dense oracle case replayed");
    ran
}
