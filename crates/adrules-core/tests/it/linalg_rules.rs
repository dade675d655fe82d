//! The decomposition rules on random inputs, beyond the oracle files: the adjoint
//! (dot-product) identity `⟨ȳ, J·ẋ⟩ = ⟨Jᴴ·ȳ, ẋ⟩` between every pushforward and its
//! pullback (full and complete modes, truncated SVDs, wide QR, batches), finite differences
//! of gauge-invariant observables, the discarded subspace's term of the truncated SVD,
//! degenerate spectra with and without broadening, and the typed errors.

use crate::support::linalg::*;
use adrules_core::linalg::{
    QrMode, RuleOptions, SvdCotangents, SvdMode, Truncation, eigh, eigh_frule, eigh_rrule, qr,
    qr_frule, qr_rrule, svd, svd_frule, svd_rrule, svd_truncated, svd_truncated_frule,
    svd_truncated_rrule,
};
use adrules_core::{DType, Error, HostTensor};
use adrules_testing::{FiniteDifference, Stencil, Value};
use faer::Mat;

mod qr_eigh;

mod errors;

mod second_order;

const ALL: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];

/// The relative mismatch of the adjoint identity `⟨ȳ, ẏ⟩ = ⟨x̄, ẋ⟩`, summed over outputs.
fn adjoint_gap(
    pairs: &[(&HostTensor, &HostTensor)],
    x_bar: &HostTensor,
    x_dot: &HostTensor,
) -> f64 {
    let lhs: f64 = pairs.iter().map(|(yb, yd)| dot(yb, yd)).sum();
    let rhs = dot(x_bar, x_dot);
    let scale: f64 = pairs
        .iter()
        .map(|(yb, yd)| norm(yb) * norm(yd))
        .sum::<f64>()
        + norm(x_bar) * norm(x_dot);
    (lhs - rhs).abs() / scale.max(f64::MIN_POSITIVE)
}

fn tol(dtype: DType) -> f64 {
    if dtype.is_double() { 1e-11 } else { 2e-4 }
}

/// A random matrix with well separated singular values `s = (k, k − 1, …, 1)·scale`.
fn separated(batch: &[usize], m: usize, n: usize, dtype: DType, seed: u64) -> HostTensor {
    let k = m.min(n);
    let s: Vec<f64> = (0..k).map(|i| (k - i) as f64).collect();
    with_spectrum(batch, m, n, &s, dtype, seed)
}

/// `U·diag(s)·Vᴴ` with random unitary `U`, `V` (from QR of random matrices).
fn with_spectrum(
    batch: &[usize],
    m: usize,
    n: usize,
    s: &[f64],
    dtype: DType,
    seed: u64,
) -> HostTensor {
    let count: usize = batch.iter().product();
    let wide = if dtype.is_complex() {
        DType::C64
    } else {
        DType::F64
    };
    let mut out = Vec::new();
    for b in 0..count {
        let u = mats(&host(
            &qr(
                &be(),
                &dev(&random(&[m, m], wide, seed + 2 * b as u64)),
                QrMode::Reduced,
            )
            .unwrap()
            .q,
        ))
        .remove(0);
        let v = mats(&host(
            &qr(
                &be(),
                &dev(&random(&[n, n], wide, seed + 2 * b as u64 + 1)),
                QrMode::Reduced,
            )
            .unwrap()
            .q,
        ))
        .remove(0);
        let d = Mat::from_fn(m, n, |i, j| {
            if i == j && i < s.len() {
                C::new(s[i], 0.0)
            } else {
                C::new(0.0, 0.0)
            }
        });
        out.push(&u * &d * v.adjoint());
    }
    unmats(batch, m, n, &out, dtype)
}

#[test]
fn svd_rules_are_adjoint() {
    let shapes: [(&[usize], usize, usize); 5] = [
        (&[], 4, 4),
        (&[], 6, 3),
        (&[], 3, 6),
        (&[2], 5, 2),
        (&[2, 1], 2, 5),
    ];
    for dtype in ALL {
        for (i, &(batch, m, n)) in shapes.iter().enumerate() {
            for mode in [SvdMode::Thin, SvdMode::Full] {
                let seed = 100 + 10 * i as u64;
                let mut dims = batch.to_vec();
                dims.extend([m, n]);
                let a = separated(batch, m, n, dtype, seed);
                let a_dot = random(&dims, dtype, seed + 1);
                let (out, tan) =
                    svd_frule(&be(), &dev(&a), &dev(&a_dot), mode, RuleOptions::default()).unwrap();
                let (_, pb) = svd_rrule(&be(), &dev(&a), mode, RuleOptions::default()).unwrap();
                // a gauge-invariant cotangent: that of L = Re⟨W, U·diag(g(S))·Vh⟩ … built from
                // random Ū, V̄h projected onto the gauge-invariant subspace is involved; instead
                // use the cotangent of a random function of U·Vh (invariant) and of S.
                let u = host(&out.u);
                let vh = host(&out.vh);
                let k = m.min(n);
                let (uk, vhk) = (narrow(&u, k, true), narrow(&vh, k, false));
                let w = random(&dims, dtype, seed + 2);
                let (ku, kv) = if mode == SvdMode::Full {
                    (m, n)
                } else {
                    (k, k)
                };
                let mut ubar = pad(&matmap(&w, &vhk, m, k, |w, vh| w * vh.adjoint()), m, ku);
                let mut vhbar = pad(&matmap(&uk, &w, k, n, |u, w| u.adjoint() * w), kv, n);
                if mode == SvdMode::Full {
                    // the complement through its projector: Ū⊥ = H·U⊥, V̄⊥ = H'·V⊥ (H, H'
                    // Hermitian), the cotangents of Re⟨H, U⊥·U⊥ᴴ⟩/2 and its analogue
                    let h = plus_adjoint(&random(&[m, m], dtype, seed + 4));
                    let h2 = plus_adjoint(&random(&[n, n], dtype, seed + 5));
                    let up = matmap(&u, &u, m, ku, |u, _| {
                        let x = &mats(&h)[0] * u;
                        Mat::from_fn(
                            m,
                            ku,
                            |i, j| if j < k { C::new(0.0, 0.0) } else { x[(i, j)] },
                        )
                    });
                    let vp = matmap(&vh, &vh, kv, n, |vh, _| {
                        let x = vh * &mats(&h2)[0];
                        Mat::from_fn(
                            kv,
                            n,
                            |i, j| if i < k { C::new(0.0, 0.0) } else { x[(i, j)] },
                        )
                    });
                    ubar = axpy(&ubar, 1.0, &up);
                    vhbar = axpy(&vhbar, 1.0, &vp);
                }
                let sbar = random(host(&out.s).dims(), dtype.real(), seed + 3);
                let cot = SvdCotangents {
                    u: Some(&dev(&ubar)),
                    s: Some(&dev(&sbar)),
                    vh: Some(&dev(&vhbar)),
                    discarded: None,
                };
                let a_bar = host(&pb.pullback(cot).unwrap());
                let gap = adjoint_gap(
                    &[
                        (&ubar, &host(&tan.u)),
                        (&sbar, &host(&tan.s)),
                        (&vhbar, &host(&tan.vh)),
                    ],
                    &a_bar,
                    &a_dot,
                );
                assert!(
                    gap < tol(dtype),
                    "{dtype} {dims:?} {mode:?}: adjoint gap {gap:e}"
                );
            }
        }
    }
}

/// For real SVDs every cotangent is gauge-invariant (the gauge is a discrete sign), so a
/// fully random `Ū`, `V̄h` checks the whole pullback, including the terms of the
/// complement of the thin factors.
#[test]
fn real_svd_rules_are_adjoint_for_any_cotangent() {
    for dtype in [DType::F32, DType::F64] {
        for &(m, n) in &[(5, 3), (3, 5), (4, 4)] {
            let a = separated(&[], m, n, dtype, 7);
            let a_dot = random(&[m, n], dtype, 8);
            let (out, tan) = svd_frule(
                &be(),
                &dev(&a),
                &dev(&a_dot),
                SvdMode::Thin,
                RuleOptions::default(),
            )
            .unwrap();
            let (_, pb) =
                svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).unwrap();
            let ubar = random(host(&out.u).dims(), dtype, 9);
            let vhbar = random(host(&out.vh).dims(), dtype, 10);
            let cot = SvdCotangents {
                u: Some(&dev(&ubar)),
                vh: Some(&dev(&vhbar)),
                ..Default::default()
            };
            let a_bar = host(&pb.pullback(cot).unwrap());
            let gap = adjoint_gap(
                &[(&ubar, &host(&tan.u)), (&vhbar, &host(&tan.vh))],
                &a_bar,
                &a_dot,
            );
            assert!(gap < tol(dtype), "{dtype} {m}×{n}: adjoint gap {gap:e}");
        }
    }
}

/// A real loss of the SVD factors: `Σ w ∘ |U|` over the leading columns plus `Σ c·s` (gauge
/// invariant), by finite differences in double precision.
fn fd_u_abs_loss(
    a: &HostTensor,
    dir: &HostTensor,
    w: &HostTensor,
    c: &HostTensor,
    k: usize,
    trunc: Option<usize>,
) -> f64 {
    let f = |x: &[Value]| -> adrules_core::Result<Value> {
        let x = x[0].tensor("a")?;
        let (u, s) = match trunc {
            None => {
                let o = svd(&be(), &dev(x), SvdMode::Thin)?;
                (host(&o.u), host(&o.s))
            }
            Some(r) => {
                let o = svd_truncated(&be(), &dev(x), Truncation::rank(r))?;
                (host(&o.svd.u), host(&o.svd.s))
            }
        };
        let u = narrow(&u, k, true);
        let l = dot(w, &map1(&u, DType::F64, |z| C::new(z.norm(), 0.0)))
            + dot(c, &s.to_dtype_projected(DType::F64));
        Ok(Value::Tensor(HostTensor::from_vec(&[], vec![l])?))
    };
    let fd = FiniteDifference {
        stencil: Stencil::Central4,
        step: 1e-4,
    };
    let y = fd
        .jvp(
            f,
            &[Value::Tensor(a.clone())],
            &[Value::Tensor(dir.clone())],
        )
        .unwrap();
    y.to_c64_vec()[0].re
}

#[test]
fn svd_gradient_matches_finite_differences() {
    for dtype in [DType::F64, DType::C64] {
        for &(m, n) in &[(5, 3), (3, 5), (4, 4)] {
            let k = m.min(n);
            let a = separated(&[], m, n, dtype, 21);
            let dir = random(&[m, n], dtype, 22);
            let w = random(&[m, k], DType::F64, 23);
            let c = random(&[k], DType::F64, 24);
            let want = fd_u_abs_loss(&a, &dir, &w, &c, k, None);
            let (out, pb) =
                svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::default()).unwrap();
            let u = host(&out.u);
            let ubar = abs_cotangent(&u, &w, dtype);
            let cot = SvdCotangents {
                u: Some(&dev(&ubar)),
                s: Some(&dev(&c)),
                ..Default::default()
            };
            let got = dot(&host(&pb.pullback(cot).unwrap()), &dir);
            assert!(
                (got - want).abs() < 1e-7 * want.abs().max(1.0),
                "{dtype} {m}×{n}: {got} vs fd {want}"
            );
        }
    }
}

/// The truncated SVD's gradient against finite differences on inputs with a gap at the
/// truncation (`s = 8, 6, 4 | 1.5, 1, 0.5`): exact with the discarded subspace's term, off
/// by a clear margin without it.
#[test]
fn truncated_svd_needs_the_discarded_term() {
    for dtype in [DType::F64, DType::C64] {
        let (m, n, r) = (7, 6, 3);
        let s = [8.0, 6.0, 4.0, 1.5, 1.0, 0.5];
        let a = with_spectrum(&[], m, n, &s, dtype, 31);
        let dir = random(&[m, n], dtype, 32);
        let w = random(&[m, r], DType::F64, 33);
        let c = random(&[r], DType::F64, 34);
        let want = fd_u_abs_loss(&a, &dir, &w, &c, r, Some(r));
        let mut errs = Vec::new();
        for term in [true, false] {
            let opts = RuleOptions {
                discarded_term: term,
                ..RuleOptions::default()
            };
            let (out, pb) =
                svd_truncated_rrule(&be(), &dev(&a), Truncation::rank(r), opts).unwrap();
            assert_eq!(out.rank, r);
            let ubar = abs_cotangent(&host(&out.svd.u), &w, dtype);
            let cot = SvdCotangents {
                u: Some(&dev(&ubar)),
                s: Some(&dev(&c)),
                ..Default::default()
            };
            let got = dot(&host(&pb.pullback(cot).unwrap()), &dir);
            errs.push((got - want).abs() / want.abs().max(1.0));
        }
        assert!(
            errs[0] < 1e-7,
            "{dtype}: with the term, relative error {:e}",
            errs[0]
        );
        assert!(
            errs[1] > 1e-3,
            "{dtype}: without the term the error {:e} should be visible",
            errs[1]
        );
    }
}

#[test]
fn truncated_svd_rules_are_adjoint_and_report_what_was_discarded() {
    for dtype in ALL {
        let (m, n) = (6, 5);
        let s = [5.0, 4.0, 3.0, 0.5, 0.25];
        let a = with_spectrum(&[2], m, n, &s, dtype, 41);
        let t = Truncation {
            max_rank: Some(4),
            rtol: 0.2,
        };
        let (out, pb) = svd_truncated_rrule(&be(), &dev(&a), t, RuleOptions::default()).unwrap();
        assert_eq!(out.rank, 3, "{dtype}: s > 0.2·s₀ keeps three");
        let disc = host(&out.discarded).data().to_c64_vec();
        let want = [0.5, 0.25, 0.5, 0.25];
        for (g, w) in disc.iter().zip(want) {
            assert!((g.re - w).abs() < 1e-5, "{dtype}: discarded {disc:?}");
        }
        let a_dot = random(&[2, m, n], dtype, 42);
        let (_, tan) =
            svd_truncated_frule(&be(), &dev(&a), &dev(&a_dot), t, RuleOptions::default()).unwrap();
        let (uk, vhk) = (host(&out.svd.u), host(&out.svd.vh));
        let w = random(&[2, m, n], dtype, 43);
        let ubar = matmap(&w, &vhk, m, 3, |w, vh| w * vh.adjoint());
        let vhbar = matmap(&uk, &w, 3, n, |u, w| u.adjoint() * w);
        let sbar = random(&[2, 3], dtype.real(), 44);
        let dbar = random(&[2, 2], dtype.real(), 45);
        let cot = SvdCotangents {
            u: Some(&dev(&ubar)),
            s: Some(&dev(&sbar)),
            vh: Some(&dev(&vhbar)),
            discarded: Some(&dev(&dbar)),
        };
        let a_bar = host(&pb.pullback(cot).unwrap());
        let gap = adjoint_gap(
            &[
                (&ubar, &host(&tan.svd.u)),
                (&sbar, &host(&tan.svd.s)),
                (&vhbar, &host(&tan.svd.vh)),
                (&dbar, &host(&tan.discarded)),
            ],
            &a_bar,
            &a_dot,
        );
        assert!(gap < tol(dtype), "{dtype}: adjoint gap {gap:e}");
    }
}

/// The factors are what they claim: `U·diag(S)·Vh = A` with orthonormal columns, `Q·R = A`
/// with `R` upper triangular, `V·diag(λ)·Vᴴ = A`.
#[test]
fn factors_reconstruct_their_input() {
    for dtype in ALL {
        let eps = if dtype.is_double() { 1e-12 } else { 1e-4 };
        for &(m, n) in &[(5, 3), (3, 5), (4, 4), (0, 3), (3, 0)] {
            let a = random(&[2, m, n], dtype, 61);
            let k = m.min(n);
            for mode in [SvdMode::Thin, SvdMode::Full] {
                let o = svd(&be(), &dev(&a), mode).unwrap();
                let (u, s, vh) = (
                    narrow(&host(&o.u), k, true),
                    host(&o.s),
                    narrow(&host(&o.vh), k, false),
                );
                let sv = s.data().to_c64_vec();
                let rec: Vec<Mat<C>> = mats(&u)
                    .iter()
                    .zip(mats(&vh))
                    .enumerate()
                    .map(|(b, (u, vh))| {
                        let d = Mat::from_fn(k, k, |i, j| {
                            if i == j {
                                sv[b * k + i]
                            } else {
                                C::new(0.0, 0.0)
                            }
                        });
                        u * d * vh
                    })
                    .collect();
                let rec = unmats(&[2], m, n, &rec, DType::C64);
                let err = norm(&axpy(&rec, -1.0, &a.to_dtype_projected(DType::C64)));
                assert!(
                    err <= eps * norm(&a).max(1.0),
                    "{dtype} {m}×{n} {mode:?}: ‖UΣVh − A‖ = {err:e}"
                );
                let full_u = host(&o.u);
                let ku = full_u.dims()[2];
                let gram = matmap(&full_u, &full_u, ku, ku, |u, _| u.adjoint() * u);
                let id = unmats(
                    &[2],
                    ku,
                    ku,
                    &[Mat::identity(ku, ku), Mat::identity(ku, ku)],
                    DType::C64,
                );
                assert!(
                    norm(&axpy(&gram.to_dtype_projected(DType::C64), -1.0, &id)) < eps * 10.0,
                    "{dtype} {m}×{n}: UᴴU ≠ I"
                );
            }
            for mode in [QrMode::Reduced, QrMode::Complete] {
                let o = qr(&be(), &dev(&a), mode).unwrap();
                let (q, r) = (host(&o.q), host(&o.r));
                let rec = matmap(&q, &r, m, n, |q, r| q * r);
                let err = norm(&axpy(&rec, -1.0, &a));
                assert!(
                    err <= eps * norm(&a).max(1.0),
                    "{dtype} {m}×{n} {mode:?}: ‖QR − A‖ = {err:e}"
                );
                for rm in mats(&r) {
                    for i in 0..rm.nrows() {
                        for j in 0..i.min(rm.ncols()) {
                            assert_eq!(rm[(i, j)], C::new(0.0, 0.0), "R not upper triangular");
                        }
                    }
                }
            }
        }
        let h = plus_adjoint(&random(&[2, 4, 4], dtype, 62));
        let o = eigh(&be(), &dev(&h)).unwrap();
        let (l, v) = (host(&o.values).data().to_c64_vec(), host(&o.vectors));
        let rec: Vec<Mat<C>> = mats(&v)
            .iter()
            .enumerate()
            .map(|(b, v)| {
                let d = Mat::from_fn(4, 4, |i, j| {
                    if i == j {
                        l[b * 4 + i]
                    } else {
                        C::new(0.0, 0.0)
                    }
                });
                v * d * v.adjoint()
            })
            .collect();
        let rec = unmats(&[2], 4, 4, &rec, DType::C64);
        let err = norm(&axpy(&rec, -1.0, &h.to_dtype_projected(DType::C64)));
        assert!(
            err <= eps * 10.0 * norm(&h),
            "{dtype}: ‖VΛVᴴ − A‖ = {err:e}"
        );
        assert!(
            l.chunks(4)
                .all(|c| c.windows(2).all(|w| w[0].re <= w[1].re)),
            "{dtype}: eigenvalues not sorted"
        );
    }
}

/// A close pair (`s = 3, 2.05, 2, 1`, gap `Δ = s₁² − s₂² ≈ 0.2`): the exact rule matches
/// finite differences; a broadening `ε` moves the gradient by a relative `O(ε/Δ²)`: below
/// 10⁻⁶ for `ε = 10⁻¹⁴`, visibly (more than 1 %) for `ε = Δ²`, where the pair's `F` term is
/// halved.
#[test]
fn broadening_bias_is_of_order_eps_over_gap_squared() {
    let s = [3.0, 2.05, 2.0, 1.0];
    let a = with_spectrum(&[], 5, 4, &s, DType::F64, 71);
    let dir = random(&[5, 4], DType::F64, 72);
    let w = random(&[5, 4], DType::F64, 73);
    let c = HostTensor::from_vec(&[4], vec![0.0; 4]).unwrap();
    let want = fd_u_abs_loss(&a, &dir, &w, &c, 4, None);
    let grad = |eps: f64| {
        let (out, pb) =
            svd_rrule(&be(), &dev(&a), SvdMode::Thin, RuleOptions::broadened(eps)).unwrap();
        let ubar = abs_cotangent(&host(&out.u), &w, DType::F64);
        let cot = SvdCotangents {
            u: Some(&dev(&ubar)),
            ..Default::default()
        };
        dot(&host(&pb.pullback(cot).unwrap()), &dir)
    };
    let exact = grad(0.0);
    assert!(
        (exact - want).abs() < 1e-6 * want.abs().max(1.0),
        "exact {exact} vs fd {want}"
    );
    let gap = s[1] * s[1] - s[2] * s[2];
    let small = grad(1e-14);
    assert!(
        (small - exact).abs() < 1e-6 * exact.abs(),
        "ε = 1e-14: {small} vs {exact}"
    );
    let large = grad(gap * gap);
    assert!(
        (large - exact).abs() > 1e-2 * exact.abs(),
        "ε = Δ²: {large} vs {exact}"
    );
}

#[derive(Clone, Copy, Debug)]
enum SvdCase {
    Mode(SvdMode),
    /// rank kept
    Truncated(usize),
}

/// The data of the gauge-invariant loss `φ(A) = ⟨S̄, S⟩ + ⟨D̄, S_discarded⟩ + ⟨W, |U|⟩ +
/// Re⟨Z, U·Vh⟩ + ½Re⟨H_U, U⊥·U⊥ᴴ⟩ + ½Re⟨H_V, V⊥·V⊥ᴴ⟩` on the kept columns (the complement
/// terms in full mode).
struct SvdLoss {
    sbar: HostTensor,
    dbar: HostTensor,
    w: HostTensor,
    z: HostTensor,
    hu: HostTensor,
    hv: HostTensor,
}
