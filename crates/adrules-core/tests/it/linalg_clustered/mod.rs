//! The clustered eigendecomposition (`eigh_clustered*`): the adjoint identity in every
//! dtype, finite differences of `W` and `C'` on spectra with 2- and 3-fold near-degenerate
//! and exactly degenerate clusters, covariance under gauges that commute with `G`,
//! batching, the diagnostics and the typed errors; the second order in [`second`].

mod second;

use crate::support::linalg::*;
use adrules_core::linalg::{
    ClusterOptions, QrMode, RuleOptions, eigh_clustered, eigh_clustered_frule,
    eigh_clustered_rrule, qr,
};
use adrules_core::{DType, Error, HostTensor};
use adrules_testing::conformance::linalg::clustered_tangent_vs_fd;
use faer::Mat;

const ALL: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];
/// χ, the bond dimension `D` of the `(α, i)` index: `n = CHI·D`
const CHI: usize = 4;
const D: usize = 2;
const N: usize = CHI * D;

fn wide(dtype: DType) -> DType {
    if dtype.is_complex() {
        DType::C64
    } else {
        DType::F64
    }
}

/// A random unitary `m×m` (QR of a normal matrix), in double precision.
fn unitary(m: usize, dtype: DType, seed: u64) -> Mat<C> {
    mats(&host(
        &qr(
            &be(),
            &dev(&random(&[m, m], wide(dtype), seed)),
            QrMode::Reduced,
        )
        .unwrap()
        .q,
    ))
    .remove(0)
}

fn diag(x: &[f64]) -> Mat<C> {
    Mat::from_fn(x.len(), x.len(), |i, j| {
        if i == j {
            C::new(x[i], 0.0)
        } else {
            C::new(0.0, 0.0)
        }
    })
}

/// `U·diag(λ)·Uᴴ` for a random unitary `U`, as a `[N, N]` tensor of `dtype`.
fn spectral(lam: &[f64], dtype: DType, seed: u64) -> Mat<C> {
    let u = unitary(lam.len(), dtype, seed);
    let a = &u * diag(lam) * u.adjoint();
    // exactly Hermitian
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| {
        (a[(i, j)] + a[(j, i)].conj()) * 0.5
    })
}

fn tensor(x: &Mat<C>, dtype: DType) -> HostTensor {
    unmats(&[], x.nrows(), x.ncols(), std::slice::from_ref(x), dtype)
}

/// The 2×2 generic Hermitian `M` on the bond index (complex off-diagonal for complex data).
fn m2(dtype: DType) -> Mat<C> {
    let off = if dtype.is_complex() {
        C::new(0.37, 0.21)
    } else {
        C::new(0.37, 0.0)
    };
    Mat::from_fn(D, D, |i, j| match (i, j) {
        (0, 0) => C::new(1.0, 0.0),
        (1, 1) => C::new(-0.61, 0.0),
        (0, 1) => off,
        _ => off.conj(),
    })
}

/// `G = I_χ ⊗ M` on the index `(α, i)` (row-major, `α·D + i`): it commutes with every
/// gauge `O ⊗ I` on the environment index `α`.
fn secondary(dtype: DType) -> Mat<C> {
    let m = m2(dtype);
    Mat::from_fn(N, N, |r, s| {
        if r / D == s / D {
            m[(r % D, s % D)]
        } else {
            C::new(0.0, 0.0)
        }
    })
}

/// `r = e_0 + 0.5·e_1` (the CTMRG example's sign rule), invariant under `diag(1, O') ⊗ I`.
fn reference(dtype: DType) -> HostTensor {
    let mut r = vec![0.0; N];
    r[0] = 1.0;
    r[1] = 0.5;
    HostTensor::from_vec(&[N], r)
        .unwrap()
        .to_dtype_projected(dtype.real())
}

/// A spectrum with a simple leading eigenvalue, a 2-fold and a 3-fold cluster (relative
/// splittings `scale` and `2·scale`, `scale = 0` exactly degenerate), a negative and a small
/// eigenvalue; with `delta = 1e-3` and `keep = 6` the kept clusters are `1, 2, 3`.
fn spectrum(scale: f64) -> Vec<f64> {
    vec![
        6.0,
        4.0,
        4.0 * (1.0 - scale),
        2.5,
        2.5 * (1.0 - scale),
        2.5 * (1.0 - 2.0 * scale),
        -1.0,
        0.3,
    ]
}

fn options(dtype: DType) -> ClusterOptions {
    ClusterOptions::new(6, 1e-3).with_reference(reference(dtype))
}

fn tol(dtype: DType) -> f64 {
    if dtype.is_double() { 1e-11 } else { 2e-4 }
}

/// `⟨W̄, Ẇ⟩ + ⟨C̄', Ċ'⟩ = Re⟨Ā, Ȧ⟩` in every dtype, near-degenerate, exactly degenerate
/// and batched, with and without broadening.
#[test]
fn rules_are_adjoint() {
    for dtype in ALL {
        for (case, scale) in [1e-5, 0.0].into_iter().enumerate() {
            for rule in [RuleOptions::default(), RuleOptions::broadened(1e-6)] {
                let seed = 700 + 10 * case as u64;
                let a0 = spectral(&spectrum(scale), dtype, seed);
                let a1 = spectral(&spectrum(scale), dtype, seed + 1);
                let a = unmats(&[2], N, N, &[a0, a1], dtype);
                let g = dev(&tensor(&secondary(dtype), dtype));
                let a_dot = random(&[2, N, N], dtype, seed + 2);
                let opts = options(dtype);
                let (out, tan) =
                    eigh_clustered_frule(&be(), &dev(&a), &dev(&a_dot), &g, &opts, rule).unwrap();
                let (_, pb) = eigh_clustered_rrule(&be(), &dev(&a), &g, &opts, rule).unwrap();
                assert_eq!(pb.kept(), 6);
                for info in &out.info {
                    assert_eq!(info.sizes, vec![1, 2, 3], "{dtype}");
                }
                let wbar = random(&[2, N, 6], dtype, seed + 3);
                let cbar = random(&[2, 6, 6], dtype, seed + 4);
                let a_bar = host(&pb.pullback(Some(&dev(&wbar)), Some(&dev(&cbar))).unwrap());
                let (tw, tc) = (host(&tan.basis), host(&tan.corner));
                let lhs = dot(&wbar, &tw) + dot(&cbar, &tc);
                let rhs = dot(&a_bar, &a_dot);
                let scale = norm(&wbar) * norm(&tw) + norm(&cbar) * norm(&tc);
                let gap = (lhs - rhs).abs() / (scale + norm(&a_bar) * norm(&a_dot));
                assert!(gap < tol(dtype), "{dtype} {scale}: adjoint gap {gap:e}");
                // Ā Hermitian
                let skew = axpy(&plus_adjoint(&a_bar), -2.0, &a_bar);
                assert!(
                    norm(&skew) <= 1e-5 * norm(&a_bar),
                    "{dtype}: Ā not Hermitian"
                );
                // only one cotangent at a time
                let only_w = host(&pb.pullback(Some(&dev(&wbar)), None).unwrap());
                let only_c = host(&pb.pullback(None, Some(&dev(&cbar))).unwrap());
                let sum = axpy(&only_w, 1.0, &only_c);
                assert!(norm(&axpy(&sum, -1.0, &a_bar)) <= tol(dtype) * norm(&a_bar));
            }
        }
    }
}

/// The pushforward against central differences of `W` and `C'`, near-degenerate
/// (splittings `10⁻⁵`, far below the step's effect on nothing but the inner rotation, which
/// `G` fixes) and exactly degenerate, real and complex.
#[test]
fn tangent_matches_finite_differences() {
    for dtype in [DType::F64, DType::C64] {
        for (case, scale) in [1e-5, 0.0].into_iter().enumerate() {
            let seed = 800 + 10 * case as u64;
            let a = tensor(&spectral(&spectrum(scale), dtype, seed), dtype);
            let a_dot = plus_adjoint(&random(&[N, N], dtype, seed + 1));
            let g = dev(&tensor(&secondary(dtype), dtype));
            let (_, tan) = eigh_clustered_frule(
                &be(),
                &dev(&a),
                &dev(&a_dot),
                &g,
                &options(dtype),
                RuleOptions::default(),
            )
            .unwrap();
            let (err, size) = clustered_tangent_vs_fd(
                &be(),
                &a,
                &a_dot,
                &g,
                &options(dtype),
                [&host(&tan.basis), &host(&tan.corner)],
            )
            .unwrap();
            assert!(size > 1e-2, "{dtype}: a trivial direction");
            assert!(
                err < 1e-7 * size,
                "{dtype} splitting {scale}: tangent vs fd {err:e} (|fd| {size:e})"
            );
        }
    }
}

/// With `O = diag(1, O') ⊗ I` (commutes with `G`, fixes `r`): `W(O·A·Oᴴ) = O·W(A)` and the
/// same `C'`, for a multiplet-carrying `A`; and the basis of an exactly degenerate spectrum
/// does not depend on the eigenvectors the solver returns inside the degenerate spaces.
#[test]
fn basis_is_covariant_and_well_defined() {
    for dtype in ALL {
        let t = if dtype.is_double() { 1e-10 } else { 1e-3 };
        let a = spectral(&spectrum(1e-5), dtype, 900);
        let o3 = unitary(CHI - 1, dtype, 901);
        let oenv = Mat::from_fn(CHI, CHI, |i, j| match (i, j) {
            (0, 0) => C::new(1.0, 0.0),
            (0, _) | (_, 0) => C::new(0.0, 0.0),
            _ => o3[(i - 1, j - 1)],
        });
        let o = Mat::from_fn(N, N, |r, s| {
            if r % D == s % D {
                oenv[(r / D, s / D)]
            } else {
                C::new(0.0, 0.0)
            }
        });
        let b = &o * &a * o.adjoint();
        let g = dev(&tensor(&secondary(dtype), dtype));
        let run = |x: &Mat<C>| {
            let out = eigh_clustered(&be(), &dev(&tensor(x, dtype)), &g, &options(dtype)).unwrap();
            (
                mats(&host(&out.basis)).remove(0),
                mats(&host(&out.corner)).remove(0),
            )
        };
        let (wa, ca) = run(&a);
        let (wb, cb) = run(&b);
        let ow = &o * &wa;
        assert!((&wb - &ow).norm_l2() < t, "{dtype}: W(OAOᴴ) ≠ O·W(A)");
        assert!(
            (&cb - &ca).norm_l2() < t * 10.0,
            "{dtype}: C' not invariant"
        );
        // W is orthonormal and diagonalises G on each cluster; C' block-diagonal with the cluster blocks
        let gram = wa.adjoint() * &wa - Mat::<C>::identity(6, 6);
        assert!(gram.norm_l2() < t, "{dtype}: WᴴW ≠ I");
        let gw = wa.adjoint() * secondary(dtype) * &wa;
        let cluster = |i: usize| [0, 1, 1, 2, 2, 2][i];
        for i in 0..6 {
            for j in 0..6 {
                if i != j && cluster(i) == cluster(j) {
                    assert!(
                        gw[(i, j)].norm() < t,
                        "{dtype}: WᴴGW not diagonal: {}",
                        gw[(i, j)]
                    );
                }
            }
        }
        assert!(ca[(0, 1)].norm() < t && ca[(2, 4)].norm() < t && ca[(1, 3)].norm() < t);
        // rᴴw > 0 per column
        for q in 0..6 {
            let rw = wa[(0, q)] + wa[(1, q)] * 0.5;
            assert!(
                rw.re > 0.0 && rw.im.abs() < t,
                "{dtype}: phase of column {q}"
            );
        }
        // exact degeneracy: two constructions of one spectrum (different eigenvectors
        // inside the degenerate spaces) give one W
        let lam = spectrum(0.0);
        let u = unitary(N, dtype, 902);
        let rot = unitary(3, dtype, 903);
        let mut inner = Mat::<C>::identity(N, N);
        for i in 0..3 {
            for j in 0..3 {
                inner[(3 + i, 3 + j)] = rot[(i, j)];
            }
        }
        let u2 = &u * &inner;
        let e1 = &u * diag(&lam) * u.adjoint();
        let e2 = &u2 * diag(&lam) * u2.adjoint();
        let (w1, _) = run(&e1);
        let (w2, _) = run(&e2);
        assert!(
            (&w1 - &w2).norm_l2() < t,
            "{dtype}: W depends on the eigh gauge"
        );
    }
}

/// A batch of two equals two single calls (outputs, tangents and cotangents); the
/// diagnostics; batch items that keep different counts are refused.
#[test]
fn batches_and_diagnostics() {
    let dtype = DType::C64;
    let a0 = spectral(&spectrum(1e-5), dtype, 950);
    let a1 = spectral(&spectrum(2e-5), dtype, 951);
    let g = dev(&tensor(&secondary(dtype), dtype));
    let opts = options(dtype);
    let rule = RuleOptions::default();
    let both = unmats(&[2], N, N, &[a0.clone(), a1.clone()], dtype);
    let dots = random(&[2, N, N], dtype, 952);
    let wbar = random(&[2, N, 6], dtype, 953);
    let (out, pb) = eigh_clustered_rrule(&be(), &dev(&both), &g, &opts, rule).unwrap();
    let tan = pb.tangent(&dev(&dots)).unwrap();
    let abar = mats(&host(&pb.pullback(Some(&dev(&wbar)), None).unwrap()));
    let (w, c, dw) = (
        mats(&host(&out.basis)),
        mats(&host(&out.corner)),
        mats(&host(&tan.basis)),
    );
    let vals = host(&out.values).data().to_c64_vec();
    for (b, x) in [a0, a1].iter().enumerate() {
        let (o1, p1) =
            eigh_clustered_rrule(&be(), &dev(&tensor(x, dtype)), &g, &opts, rule).unwrap();
        let d1 = tensor(&mats(&dots)[b], dtype);
        let t1 = p1.tangent(&dev(&d1)).unwrap();
        let wb1 = tensor(&mats(&wbar)[b], dtype);
        let ab1 = mats(&host(&p1.pullback(Some(&dev(&wb1)), None).unwrap())).remove(0);
        assert!((&mats(&host(&o1.basis))[0] - &w[b]).norm_l2() < 1e-13);
        assert!((&mats(&host(&o1.corner))[0] - &c[b]).norm_l2() < 1e-13);
        assert!((&mats(&host(&t1.basis))[0] - &dw[b]).norm_l2() < 1e-11);
        assert!((&ab1 - &abar[b]).norm_l2() < 1e-11);
        assert_eq!(o1.info[0], out.info[b]);
        let v1 = host(&o1.values).data().to_c64_vec();
        assert_eq!(v1.as_slice(), &vals[6 * b..6 * b + 6]);
    }
    // diagnostics against the spectrum: kept 6, 4, 4(1−s), 2.5…, next |−1|
    let info = &out.info[0];
    assert!((info.gap - (2.5 * (1.0 - 2e-5) - 1.0) / 6.0).abs() < 1e-12);
    assert!((info.weight - 1.0 / 6.0).abs() < 1e-12);
    assert!(info.kept_gap > 0.01 && info.kept_gap.is_finite());
    let v = host(&out.values).data().to_c64_vec();
    let want = [
        6.0,
        4.0,
        4.0 * (1.0 - 1e-5),
        2.5,
        2.5 * (1.0 - 1e-5),
        2.5 * (1.0 - 2e-5),
    ];
    for (x, y) in v.iter().zip(want) {
        assert!((x.re - y).abs() < 1e-12, "values {v:?}");
    }
    // keep = 4 cuts before the 3-fold cluster: k = 3; keep = 2 keeps 1; the cutoff
    let k_of = |o: ClusterOptions| {
        let out = eigh_clustered(
            &be(),
            &dev(&tensor(&spectral(&spectrum(1e-5), dtype, 955), dtype)),
            &g,
            &o,
        )
        .unwrap();
        out.info[0].sizes.iter().sum::<usize>()
    };
    assert_eq!(k_of(options(dtype).with_cutoff(0.0)), 6);
    assert_eq!(
        k_of(ClusterOptions {
            keep: 4,
            ..options(dtype)
        }),
        3
    );
    assert_eq!(
        k_of(ClusterOptions {
            keep: 2,
            ..options(dtype)
        }),
        1
    );
    assert_eq!(
        k_of(
            ClusterOptions {
                keep: 8,
                ..options(dtype)
            }
            .with_cutoff(0.1)
        ),
        7
    );
    // a batch whose items keep different counts
    let a2 = spectral(&[6.0, 4.0, 3.0, 2.5, 2.0, 1.5, 1.0, 0.3], dtype, 956);
    let mixed = unmats(
        &[2],
        N,
        N,
        &[spectral(&spectrum(1e-5), dtype, 957), a2],
        dtype,
    );
    let o = ClusterOptions {
        keep: 5,
        ..options(dtype)
    };
    let got = eigh_clustered(&be(), &dev(&mixed), &g, &o);
    assert!(
        matches!(&got, Err(Error::InvalidArgument { arg, .. }) if arg == "keep"),
        "{got:?}"
    );
}

/// Bad input gets typed errors, never a panic.
#[test]
fn bad_input_gets_typed_errors() {
    let dtype = DType::F64;
    let a = tensor(&spectral(&spectrum(1e-5), dtype, 990), dtype);
    let g = tensor(&secondary(dtype), dtype);
    let opts = options(dtype);
    let call = |a: &HostTensor, g: &HostTensor, o: &ClusterOptions| {
        eigh_clustered(&be(), &dev(a), &dev(g), o).map(|_| ())
    };
    let inv = |r: adrules_core::Result<()>, name: &str| {
        assert!(
            matches!(&r, Err(Error::InvalidArgument { arg, .. }) if arg == name),
            "{name}: {r:?}"
        )
    };
    // non-square A, rank-1 A, G of the wrong shape, r of the wrong shape
    let rect = random(&[N, N - 1], dtype, 991);
    assert!(matches!(
        call(&rect, &g, &opts),
        Err(Error::ShapeMismatch { .. })
    ));
    let vec1 = random(&[N], dtype, 992);
    assert!(matches!(
        call(&vec1, &g, &opts),
        Err(Error::RankMismatch { .. })
    ));
    let g_small = random(&[N - 1, N - 1], dtype, 993);
    assert!(matches!(
        call(&a, &g_small, &opts),
        Err(Error::ShapeMismatch { .. })
    ));
    let bad_r = ClusterOptions::new(6, 1e-3).with_reference(random(&[N - 1], dtype, 994));
    assert!(matches!(
        call(&a, &g, &bad_r),
        Err(Error::ShapeMismatch { .. })
    ));
    // non-Hermitian G and A, non-finite A and G
    inv(call(&a, &random(&[N, N], dtype, 995), &opts), "g");
    inv(call(&random(&[N, N], dtype, 996), &g, &opts), "a");
    let nan = map1(&a, dtype, |z| {
        if z == a.data().to_c64_vec()[0] {
            C::new(f64::NAN, 0.0)
        } else {
            z
        }
    });
    assert!(matches!(
        call(&nan, &g, &opts),
        Err(Error::InvalidArgument { .. })
    ));
    let g_inf = map1(&g, dtype, |z| {
        if z.re == 1.0 {
            C::new(f64::INFINITY, 0.0)
        } else {
            z
        }
    });
    inv(call(&a, &g_inf, &opts), "g");
    // a G of another precision than A is refused, not cast
    for (ga, gg) in [(DType::F64, DType::F32), (DType::F32, DType::F64)] {
        let (a, g) = (a.to_dtype_projected(ga), g.to_dtype_projected(gg));
        let o = ClusterOptions::new(6, 1e-3).with_reference(reference(ga));
        let got = call(&a, &g, &o);
        assert!(
            matches!(&got, Err(Error::DTypeMismatch { arg, .. }) if arg == "g"),
            "A {ga}, G {gg}: {got:?}"
        );
    }
    // an empty A has no eigenvalue to keep
    let empty = HostTensor::from_vec(&[0, 0], Vec::<f64>::new()).unwrap();
    let g0 = HostTensor::from_vec(&[0, 0], Vec::<f64>::new()).unwrap();
    let got = call(&empty, &g0, &ClusterOptions::new(6, 1e-3));
    assert!(
        matches!(&got, Err(Error::InvalidArgument { .. })),
        "{got:?}"
    );
    // options
    inv(
        call(
            &a,
            &g,
            &ClusterOptions {
                keep: 0,
                ..opts.clone()
            },
        ),
        "keep",
    );
    inv(
        call(
            &a,
            &g,
            &ClusterOptions {
                delta: -1.0,
                ..opts.clone()
            },
        ),
        "delta",
    );
    // the refused value is printed in its shortest form, not as 300 decimals
    let tiny = ClusterOptions {
        delta: -1e-300,
        ..opts.clone()
    };
    match call(&a, &g, &tiny) {
        Err(Error::InvalidArgument { arg, reason }) => {
            assert_eq!(arg, "delta");
            assert!(reason.ends_with("got -1e-300"), "{reason}");
        }
        other => panic!("delta = -1e-300: {other:?}"),
    }
    inv(
        call(
            &a,
            &g,
            &ClusterOptions {
                cutoff: f64::NAN,
                ..opts.clone()
            },
        ),
        "cutoff",
    );
    inv(
        call(
            &a,
            &g,
            &ClusterOptions {
                keep: 1,
                delta: 0.5,
                ..opts.clone()
            },
        ),
        "keep",
    );
    let zero = map1(&a, dtype, |_| C::new(0.0, 0.0));
    inv(call(&zero, &g, &opts), "a");
    let rule = RuleOptions::broadened(-1.0);
    let r = eigh_clustered_rrule(&be(), &dev(&a), &dev(&g), &opts, rule).map(|_| ());
    inv(r, "broadening");
    // complex G or r with real A
    let gc = tensor(&secondary(DType::C64), DType::C64);
    assert!(matches!(
        call(&a, &gc, &opts),
        Err(Error::DTypeMismatch { .. })
    ));
    // a G that does not split a multiplet (G = I): degenerate μ
    let eye = tensor(&Mat::<C>::identity(N, N), dtype);
    let got = call(&a, &eye, &opts);
    assert!(matches!(got, Err(Error::GaugeIllDefined { .. })), "{got:?}");
    // a reference orthogonal to a column: rᴴw = 0 (A diagonal, W = e_3 for λ = 6)
    let mut d = vec![0.0; N * N];
    for (i, l) in [0.5, 0.4, 0.3, 6.0, 0.2, 0.1, 0.05, 0.01]
        .iter()
        .enumerate()
    {
        d[i * N + i] = *l;
    }
    let diag_a = HostTensor::from_vec(&[N, N], d).unwrap();
    let got = call(
        &diag_a,
        &g,
        &ClusterOptions {
            keep: 1,
            ..opts.clone()
        },
    );
    assert!(
        matches!(&got, Err(Error::GaugeIllDefined { arg, .. }) if arg == "reference"),
        "{got:?}"
    );
    // the default reference (largest entry) works there
    let ok = call(&diag_a, &g, &ClusterOptions::new(1, 1e-3));
    assert!(ok.is_ok(), "{ok:?}");
    // and with the fallback, the column orthogonal to r takes it: the same basis
    let fallback = ClusterOptions {
        keep: 1,
        ..opts.clone()
    }
    .with_fallback();
    let with = eigh_clustered(&be(), &dev(&diag_a), &dev(&g), &fallback).unwrap();
    let plain = eigh_clustered(
        &be(),
        &dev(&diag_a),
        &dev(&g),
        &ClusterOptions::new(1, 1e-3),
    );
    assert_eq!(host(&with.basis), host(&plain.unwrap().basis));
    // columns whose overlap does not vanish keep the given reference's phase
    let given = eigh_clustered(&be(), &dev(&a), &dev(&g), &opts).unwrap();
    let both = eigh_clustered(&be(), &dev(&a), &dev(&g), &opts.clone().with_fallback()).unwrap();
    assert_eq!(host(&given.basis), host(&both.basis));
    // cotangents of the wrong shape, non-finite cotangents
    let (_, pb) =
        eigh_clustered_rrule(&be(), &dev(&a), &dev(&g), &opts, RuleOptions::default()).unwrap();
    let r = pb.pullback(Some(&dev(&random(&[N, 5], dtype, 997))), None);
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })));
    let cb = map1(&random(&[6, 6], dtype, 998), dtype, |_| {
        C::new(f64::NAN, 0.0)
    });
    let r = pb.pullback(None, Some(&dev(&cb)));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })));
    let r = pb.tangent(&dev(&random(&[N, N + 1], dtype, 999)));
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })));
}
