//! The dense rules of `src/linalg/dense/` on the strided backend, beyond the conformance
//! groups `dense_oracle`, `dense_identities_and_errors` and `builtin_rules_pass_check_rule`
//! (which every backend runs): `host_lu`'s factors, the triangular solve reading one
//! triangle only, Cholesky's upper factor and its Hermitian part, overflow and zero-size
//! edges, and property tests of the identities `A·inv(A) = I`,
//! `det(A·B) = det(A)·det(B)`, `A·solve(A, B) = B` and `exp(A)·exp(−A) = I` over random
//! sizes, batches, scales and dtypes.

use adrules_core::linalg::{
    CholeskyRule, DetRule, InvRule, MatrixExpRule, SlogdetRule, SolveRule, SolveTriangularRule,
    host_lu,
};
use adrules_core::rule::{self, Rule};
use adrules_core::{Backend, Complex64, DType, Error, HostData, HostTensor};
use adrules_strided::Strided;
use adrules_testing::Rng;
use proptest::prelude::*;

fn ht(dims: &[usize], v: &[Complex64], dtype: DType) -> HostTensor {
    HostTensor::new(dims, HostData::from_c64_projected(v, dtype)).unwrap()
}

fn c(h: &HostTensor) -> Vec<Complex64> {
    h.data().to_c64_vec()
}

/// `a·b` for row-major `m × k` and `k × n`.
fn mm(a: &[Complex64], b: &[Complex64], m: usize, k: usize, n: usize) -> Vec<Complex64> {
    let mut out = vec![Complex64::new(0.0, 0.0); m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    out
}

fn max_dist(x: &[Complex64], y: &[Complex64]) -> f64 {
    x.iter()
        .zip(y)
        .map(|(p, q)| (p - q).norm())
        .fold(0.0, f64::max)
}

fn run<R: Rule>(r: &R, x: &[&HostTensor]) -> adrules_core::Result<Vec<HostTensor>> {
    let xs: Vec<_> = x
        .iter()
        .map(|h| Strided.from_host((*h).clone()).unwrap())
        .collect();
    let refs: Vec<_> = xs.iter().collect();
    Ok(rule::primal(r, &Strided, &refs)?
        .iter()
        .map(|t| Strided.to_host(t).unwrap())
        .collect())
}

#[test]
fn host_lu_factors_reconstruct_a_with_a_permutation_and_triangles() {
    let mut rng = Rng::seed(7);
    for dtype in DType::ALL {
        for dims in [[4usize, 4], [3, 5], [5, 3]] {
            let a = rng.tensor(&[2, dims[0], dims[1]], dtype);
            let [p, l, u] = host_lu(&a).unwrap();
            let (m, n, k) = (dims[0], dims[1], dims[0].min(dims[1]));
            assert_eq!(
                (p.dims(), l.dims(), u.dims()),
                (&[2, m, m][..], &[2, m, k][..], &[2, k, n][..])
            );
            for b in 0..2 {
                let (pv, lv, uv) = (c(&p), c(&l), c(&u));
                let (pb, lb, ub) = (
                    &pv[b * m * m..][..m * m],
                    &lv[b * m * k..][..m * k],
                    &uv[b * k * n..][..k * n],
                );
                let plu = mm(&mm(pb, lb, m, m, k), ub, m, k, n);
                let av = c(&a);
                let d = max_dist(&plu, &av[b * m * n..][..m * n]);
                let tol = if dtype.is_double() { 1e-12 } else { 1e-5 };
                assert!(d < tol, "{dtype} {dims:?}: P·L·U off by {d:e}");
                for i in 0..m {
                    assert_eq!(
                        pb[i * m..][..m].iter().filter(|z| z.norm() == 1.0).count(),
                        1
                    );
                    for j in 0..k {
                        let want_one = i == j;
                        assert!(j <= i || lb[i * k + j].norm() == 0.0, "L upper entry");
                        assert!(
                            !want_one || lb[i * k + j] == Complex64::new(1.0, 0.0),
                            "L diagonal"
                        );
                    }
                }
                for i in 0..k {
                    for j in 0..i.min(n) {
                        assert_eq!(ub[i * n + j].norm(), 0.0, "U lower entry");
                    }
                }
            }
        }
    }
}

#[test]
fn the_triangular_solve_reads_and_differentiates_one_triangle() {
    let mut rng = Rng::seed(8);
    for dtype in [DType::F64, DType::C64] {
        for (upper, left, unit_diagonal) in [
            (false, true, false),
            (true, false, true),
            (true, true, false),
        ] {
            let rule = SolveTriangularRule {
                upper,
                left,
                unit_diagonal,
            };
            let n = 4;
            let mut a = c(&rng.tensor(&[n, n], dtype));
            for i in 0..n {
                a[i * n + i] += Complex64::new(4.0, 0.0);
            }
            let b = rng.tensor(&[n, 3], dtype);
            let b = if left { b } else { ht(&[3, n], &c(&b), dtype) };
            let x1 = run(&rule, &[&ht(&[n, n], &a, dtype), &b]).unwrap();
            // other triangle (and, unit, the diagonal) replaced by garbage
            let garbage: Vec<Complex64> = (0..n * n)
                .map(|p| {
                    let (i, j) = (p / n, p % n);
                    let inside = if upper { j > i } else { i > j } || (i == j && !unit_diagonal);
                    if inside {
                        a[p]
                    } else {
                        Complex64::new(1e3 * (p as f64 + 1.0), 7.0)
                    }
                })
                .collect();
            let ag = ht(&[n, n], &garbage, dtype);
            let x2 = run(&rule, &[&ag, &b]).unwrap();
            assert_eq!(
                c(&x1[0]),
                c(&x2[0]),
                "{rule:?}: the other triangle was read"
            );
            let xs = [
                Strided.from_host(ag).unwrap(),
                Strided.from_host(b.clone()).unwrap(),
            ];
            let (y, pb) = rule::rrule(&rule, &Strided, &[&xs[0], &xs[1]], &[true, true]).unwrap();
            let ones = Strided
                .from_host(ht(
                    &Strided.dims(&y[0]),
                    &[Complex64::new(1.0, 0.5); 12],
                    dtype,
                ))
                .unwrap();
            let g = pb.pullback(&[Some(ones)]).unwrap();
            let a_bar = c(&Strided.to_host(g[0].as_ref().unwrap()).unwrap());
            for (p, g) in a_bar.iter().enumerate() {
                let (i, j) = (p / n, p % n);
                let inside = if upper { j > i } else { i > j } || (i == j && !unit_diagonal);
                assert!(
                    inside || g.norm() == 0.0,
                    "{rule:?}: cotangent outside the triangle"
                );
            }
        }
    }
}

#[test]
fn cholesky_reads_the_hermitian_part_and_its_upper_factor_is_the_adjoint() {
    let n = 3;
    for dtype in [DType::F64, DType::C64] {
        let m = [4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 2.0].map(|x| Complex64::new(x, 0.0));
        let mut skew = m;
        // add an anti-Hermitian part: the factor must not change
        skew[1] += Complex64::new(0.3, 0.1);
        skew[3] -= Complex64::new(0.3, -0.1);
        let l = run(&CholeskyRule::default(), &[&ht(&[n, n], &m, dtype)]).unwrap();
        let l2 = run(&CholeskyRule::default(), &[&ht(&[n, n], &skew, dtype)]).unwrap();
        assert!(max_dist(&c(&l[0]), &c(&l2[0])) < 1e-15, "{dtype}");
        let u = run(&CholeskyRule { upper: true }, &[&ht(&[n, n], &m, dtype)]).unwrap();
        let (lv, uv) = (c(&l[0]), c(&u[0]));
        for i in 0..n {
            for j in 0..n {
                assert_eq!(uv[i * n + j], lv[j * n + i].conj());
            }
        }
    }
}

#[test]
fn overflow_is_a_typed_error_and_empty_matrices_have_unit_determinant() {
    let big = ht(
        &[2, 2],
        &[1e200, 0.0, 0.0, 1e200].map(|x| Complex64::new(x, 0.0)),
        DType::F64,
    );
    match run(&DetRule, &[&big]) {
        Err(Error::NonFinite { arg, .. }) => assert_eq!(arg, "det"),
        other => panic!("{other:?}"),
    }
    let sl = run(&SlogdetRule, &[&big]).unwrap();
    assert!((c(&sl[1])[0].re - 400.0 * 10f64.ln()).abs() < 1e-10);
    let empty = HostTensor::zeros(&[3, 0, 0], DType::C32).unwrap();
    assert_eq!(
        c(&run(&DetRule, &[&empty]).unwrap()[0]),
        vec![Complex64::new(1.0, 0.0); 3]
    );
    let sl = run(&SlogdetRule, &[&empty]).unwrap();
    assert_eq!((sl[0].dtype(), sl[1].dtype()), (DType::C32, DType::F32));
    assert_eq!(run(&InvRule, &[&empty]).unwrap()[0].dims(), &[3, 0, 0]);
}

/// A well-conditioned random `[batch, n, n]` (`X + 2·√n·I`).
fn conditioned(rng: &mut Rng, batch: usize, n: usize, dtype: DType) -> HostTensor {
    let mut v = c(&rng.tensor(&[batch, n, n], dtype));
    for b in 0..batch {
        for i in 0..n {
            v[b * n * n + i * n + i] += Complex64::new(2.0 * (n as f64).sqrt(), 0.0);
        }
    }
    ht(&[batch, n, n], &v, dtype)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn inverse_determinant_and_solve_identities(
        n in 1usize..7, batch in 1usize..3, k in 1usize..4, d in 0usize..4, seed in 0u64..1000,
    ) {
        let dtype = DType::ALL[d];
        let mut rng = Rng::seed(seed);
        let tol = if dtype.is_double() { 1e-10 } else { 2e-3 };
        let a = conditioned(&mut rng, batch, n, dtype);
        let b = conditioned(&mut rng, batch, n, dtype);
        let rhs = rng.tensor(&[batch, n, k], dtype);
        let (av, bv) = (c(&a), c(&b));
        let y = c(&run(&InvRule, &[&a]).unwrap()[0]);
        let x = c(&run(&SolveRule, &[&a, &rhs]).unwrap()[0]);
        let (da, db) = (c(&run(&DetRule, &[&a]).unwrap()[0]), c(&run(&DetRule, &[&b]).unwrap()[0]));
        let rv = c(&rhs);
        for i in 0..batch {
            let (ab, bb) = (&av[i * n * n..][..n * n], &bv[i * n * n..][..n * n]);
            let eye: Vec<Complex64> = (0..n * n).map(|p| Complex64::new(if p / n == p % n { 1.0 } else { 0.0 }, 0.0)).collect();
            prop_assert!(max_dist(&mm(ab, &y[i * n * n..][..n * n], n, n, n), &eye) < tol);
            prop_assert!(max_dist(&mm(ab, &x[i * n * k..][..n * k], n, n, k), &rv[i * n * k..][..n * k]) < tol * 10.0);
            let prod = ht(&[n, n], &mm(ab, bb, n, n, n), dtype);
            let dab = c(&run(&DetRule, &[&prod]).unwrap()[0])[0];
            prop_assert!((dab - da[i] * db[i]).norm() <= tol * dab.norm());
        }
    }

    #[test]
    fn the_exponential_of_minus_a_is_the_inverse(
        n in 1usize..7, scale in 0.1f64..8.0, d in 0usize..4, seed in 0u64..1000,
    ) {
        let dtype = DType::ALL[d];
        let mut rng = Rng::seed(seed);
        let a: Vec<Complex64> = c(&rng.tensor(&[n, n], dtype)).iter().map(|z| z * scale).collect();
        let minus: Vec<Complex64> = a.iter().map(|z| -z).collect();
        let e = c(&run(&MatrixExpRule, &[&ht(&[n, n], &a, dtype)]).unwrap()[0]);
        let f = c(&run(&MatrixExpRule, &[&ht(&[n, n], &minus, dtype)]).unwrap()[0]);
        let eye: Vec<Complex64> = (0..n * n).map(|p| Complex64::new(if p / n == p % n { 1.0 } else { 0.0 }, 0.0)).collect();
        let size = e.iter().map(|z| z.norm()).fold(0.0, f64::max) * f.iter().map(|z| z.norm()).fold(0.0, f64::max);
        let tol = if dtype.is_double() { 1e-12 } else { 1e-4 } * size.max(1.0) * n as f64;
        prop_assert!(max_dist(&mm(&e, &f, n, n, n), &eye) < tol);
    }
}

#[test]
fn eig_satisfies_a_v_equals_v_lambda_and_refuses_a_phase_dependent_loss() {
    let mut rng = Rng::seed(11);
    for dtype in DType::ALL {
        let n = 5;
        let a = rng.tensor(&[2, n, n], dtype);
        let out = run(&adrules_core::linalg::EigRule, &[&a]).unwrap();
        let complex = dtype.complex();
        assert_eq!((out[0].dtype(), out[1].dtype()), (complex, complex));
        let (av, lam, v) = (c(&a), c(&out[0]), c(&out[1]));
        for b in 0..2 {
            let (ab, vb) = (&av[b * n * n..][..n * n], &v[b * n * n..][..n * n]);
            let lhs = mm(ab, vb, n, n, n);
            let rhs: Vec<Complex64> = (0..n * n).map(|p| vb[p] * lam[b * n + p % n]).collect();
            let tol = if dtype.is_double() { 1e-12 } else { 1e-4 };
            assert!(
                max_dist(&lhs, &rhs) < tol * 10.0,
                "{dtype}: A·V ≠ V·diag(λ)"
            );
            for j in 0..n {
                let norm: f64 = (0..n).map(|i| vb[i * n + j].norm_sqr()).sum::<f64>().sqrt();
                assert!(
                    (norm - 1.0).abs() < tol,
                    "{dtype}: column {j} has norm {norm}"
                );
            }
        }
        // a random complex cotangent of V depends on the phases of the columns
        let x = Strided.from_host(a).unwrap();
        let (_, pb) =
            rule::rrule(&adrules_core::linalg::EigRule, &Strided, &[&x], &[true]).unwrap();
        let v_bar = Strided.from_host(rng.tensor(&[2, n, n], complex)).unwrap();
        match pb.pullback(&[None, Some(v_bar)]) {
            Err(Error::GaugeIllDefined { arg, .. }) => assert_eq!(arg, "eig"),
            other => panic!("{dtype}: {other:?}"),
        }
    }
}
