//! Oracle replay of the decompositions: `svd_s.jsonl`, `svd_u_abs.jsonl`,
//! `svd_uvh_product.jsonl`, `qr.jsonl`, `eigh_values_vectors_abs.jsonl` and the two
//! `*_gauge_ill_defined.jsonl` files of `adrules-testing`'s `oracles/` (PyTorch 2.10,
//! cross-checked by finite differences), all four dtypes, square, tall, wide, batched and zero-size inputs,
//! thin and full SVDs.
//!
//! The derivatives of the SVD and eigh files belong to gauge-invariant observables of the
//! factors (the singular values; `|U|`; `U·Vh` with `S`; the eigenvalues with `|V|`), each
//! on the leading `k = min(m, n)` columns; the tests compose the observable with our
//! decomposition and its rules. eigh follows PyTorch's Hermitian wrapper: the function is
//! `eigh(A + Aᴴ)`, so the direction enters as `D + Dᴴ` and the cotangent leaves as
//! `B̄ + B̄ᴴ`. QR compares the raw factors, which the real diagonal of LAPACK's sign makes
//! functions of `A`. The `hvp` entries (second order, f64 and c128) are replayed for the SVD,
//! QR and eigh.

use crate::support::linalg::*;
use adrules_core::linalg::{
    QrMode, RuleOptions, SvdCotangents, SvdMode, eigh_frule, eigh_rrule, qr_frule, qr_rrule,
    svd_frule, svd_rrule,
};
use adrules_core::{DType, Error, HostTensor};
use adrules_testing::oracle::{OracleCase, assert_close, load_for};

const ALL: [DType; 4] = [DType::F32, DType::F64, DType::C32, DType::C64];

fn cases(file: &str) -> Vec<OracleCase> {
    let cases = load_for(file, &ALL).unwrap();
    assert!(!cases.is_empty(), "{file}: no cases");
    cases
}

fn mode(case: &OracleCase) -> SvdMode {
    if case.kwargs["full_matrices"].as_bool().unwrap_or(true) {
        SvdMode::Full
    } else {
        SvdMode::Thin
    }
}

/// `(m, n, k)` of the case's input.
fn mnk(a: &HostTensor) -> (usize, usize, usize) {
    let d = a.dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    (m, n, m.min(n))
}

fn check(case: &OracleCase, got: &HostTensor, want: &HostTensor, what: &str) {
    let tol = case.first_order_tolerance();
    assert_close(tol, got, want, &format!("{} {what}", case.id));
}

/// `(m, n, k)`, the widths `ku`, `kv` of `U` and `Vh`, and the mode of an SVD case.
#[derive(Clone, Copy)]
struct SvdShape {
    m: usize,
    n: usize,
    k: usize,
    ku: usize,
    kv: usize,
    mode: SvdMode,
}

/// Every case of the three SVD files, with its shape.
fn svd_cases() -> Vec<(OracleCase, SvdShape)> {
    ["svd_s.jsonl", "svd_u_abs.jsonl", "svd_uvh_product.jsonl"]
        .into_iter()
        .flat_map(cases)
        .map(|case| {
            let (m, n, k) = mnk(&case.inputs["a"]);
            let mode = mode(&case);
            let (ku, kv) = if mode == SvdMode::Full {
                (m, n)
            } else {
                (k, k)
            };
            let shape = SvdShape {
                m,
                n,
                k,
                ku,
                kv,
                mode,
            };
            (case, shape)
        })
        .collect()
}

#[test]
fn svd_matches_the_oracles() {
    let mut checked = 0;
    for (case, shape) in svd_cases() {
        {
            let SvdShape {
                m,
                n,
                k,
                ku,
                kv,
                mode,
            } = shape;
            let a = &case.inputs["a"];
            let dt = case.dtype;
            let be = be();
            for p in &case.probes {
                // forward
                let (out, tan) = svd_frule(
                    &be,
                    &dev(a),
                    &dev(&p.direction["a"]),
                    mode,
                    RuleOptions::default(),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", case.id));
                let (u, vh) = (
                    narrow(&host(&out.u), k, true),
                    narrow(&host(&out.vh), k, false),
                );
                let (du, dvh) = (
                    narrow(&host(&tan.u), k, true),
                    narrow(&host(&tan.vh), k, false),
                );
                let ds = host(&tan.s);
                // reverse
                let (_, pb) = svd_rrule(&be, &dev(a), mode, RuleOptions::default()).unwrap();
                let c = &p.cotangents;
                let (mut ubar, mut sbar, mut vhbar) = (None, None, None);
                match case.observable.as_str() {
                    "svd_s" => {
                        check(&case, &ds, &p.jvps["s"], "jvp s");
                        sbar = Some(dev(&c["s"]));
                    }
                    "svd_u_abs" => {
                        check(
                            &case,
                            &abs_tangent(&u, &du, dt.real()),
                            &p.jvps["u"],
                            "jvp |u|",
                        );
                        ubar = Some(dev(&pad(&abs_cotangent(&u, &c["u"], dt), m, ku)));
                    }
                    "svd_uvh_product" => {
                        let prod_dot = axpy(
                            &matmap(&du, &vh, m, n, |x, y| x * y),
                            1.0,
                            &matmap(&u, &dvh, m, n, |x, y| x * y),
                        );
                        check(&case, &ds, &p.jvps["s"], "jvp s");
                        if !p.jvps["uvh"].is_empty() {
                            check(&case, &prod_dot, &p.jvps["uvh"], "jvp uvh");
                        }
                        let w = &c["uvh"];
                        if k > 0 {
                            ubar = Some(dev(&pad(
                                &matmap(w, &vh, m, k, |w, vh| w * vh.adjoint()),
                                m,
                                ku,
                            )));
                            vhbar = Some(dev(&pad(
                                &matmap(&u, w, k, n, |u, w| u.adjoint() * w),
                                kv,
                                n,
                            )));
                        }
                        sbar = Some(dev(&c["s"]));
                    }
                    other => panic!("{}: unknown observable {other}", case.id),
                }
                let cot = SvdCotangents {
                    u: ubar.as_ref(),
                    s: sbar.as_ref(),
                    vh: vhbar.as_ref(),
                    discarded: None,
                };
                let a_bar = host(
                    &pb.pullback(cot)
                        .unwrap_or_else(|e| panic!("{}: {e}", case.id)),
                );
                check(&case, &a_bar, &p.vjp["a"], "vjp a");
                checked += 1;
            }
        }
    }
    assert!(checked >= 600, "only {checked} probes");
}

/// Second order of the SVD: the Hessian-vector products of the three observables by
/// [`SvdPullback::pullback_tangent`](adrules_core::linalg::SvdPullback::pullback_tangent),
/// thin and full, against the oracles' `hvp` entries (f64 and c128: the files hold no
/// single-precision HVPs). The cotangents' tangents along the path come from our tangents
/// of the factors: `|U|`'s cotangent `Ȳ∘U/|U|` moves with `U̇`; `U·Vh`'s cotangents
/// `Ū = W·Vhᴴ`, `V̄h = Uᴴ·W` move as `W·V̇hᴴ`, `U̇ᴴ·W`; `S̄` is constant.
#[test]
fn svd_hvp_matches_the_oracles() {
    let mut checked = 0;
    for (case, shape) in svd_cases() {
        {
            let SvdShape {
                m,
                n,
                k,
                ku,
                kv,
                mode,
            } = shape;
            let a = &case.inputs["a"];
            let dt = case.dtype;
            let be = be();
            for p in &case.probes {
                let Some(want) = p.hvp.get("a") else { continue };
                let a_dot = dev(&p.direction["a"]);
                let (out, tan) = svd_frule(&be, &dev(a), &a_dot, mode, RuleOptions::default())
                    .unwrap_or_else(|e| panic!("{}: {e}", case.id));
                let (u, vh) = (
                    narrow(&host(&out.u), k, true),
                    narrow(&host(&out.vh), k, false),
                );
                let (du, dvh) = (
                    narrow(&host(&tan.u), k, true),
                    narrow(&host(&tan.vh), k, false),
                );
                let c = &p.cotangents;
                let (mut ubar, mut sbar, mut vhbar) = (None, None, None);
                let (mut ubar_dot, mut vhbar_dot) = (None, None);
                match case.observable.as_str() {
                    "svd_s" => sbar = Some(dev(&c["s"])),
                    "svd_u_abs" => {
                        ubar = Some(dev(&pad(&abs_cotangent(&u, &c["u"], dt), m, ku)));
                        ubar_dot = Some(dev(&pad(
                            &abs_cotangent_tangent(&u, &du, &c["u"], dt),
                            m,
                            ku,
                        )));
                    }
                    "svd_uvh_product" => {
                        let w = &c["uvh"];
                        if k > 0 {
                            let wv = |vh: &HostTensor| {
                                dev(&pad(&matmap(w, vh, m, k, |w, vh| w * vh.adjoint()), m, ku))
                            };
                            let uw = |u: &HostTensor| {
                                dev(&pad(&matmap(u, w, k, n, |u, w| u.adjoint() * w), kv, n))
                            };
                            ubar = Some(wv(&vh));
                            ubar_dot = Some(wv(&dvh));
                            vhbar = Some(uw(&u));
                            vhbar_dot = Some(uw(&du));
                        }
                        sbar = Some(dev(&c["s"]));
                    }
                    other => panic!("{}: unknown observable {other}", case.id),
                }
                let (_, pb) = svd_rrule(&be, &dev(a), mode, RuleOptions::default()).unwrap();
                let cot = SvdCotangents {
                    u: ubar.as_ref(),
                    s: sbar.as_ref(),
                    vh: vhbar.as_ref(),
                    discarded: None,
                };
                let cot_dot = SvdCotangents {
                    u: ubar_dot.as_ref(),
                    vh: vhbar_dot.as_ref(),
                    ..Default::default()
                };
                let (_, got) = pb
                    .pullback_tangent(cot, &a_dot, cot_dot)
                    .unwrap_or_else(|e| panic!("{}: {e}", case.id));
                assert_close(
                    case.second_order_tolerance(),
                    &host(&got),
                    want,
                    &format!("{} hvp a", case.id),
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 324, "only {checked} probes");
}

/// The column signs `D` (`dⱼ = ±1` per matrix and column) that take our QR (`Rⱼⱼ > 0`) to
/// PyTorch's (LAPACK's sign): read off the diagonal of `Ṙ`, which `D` multiplies. Only the
/// sign of each column is inferred; every entry is then checked.
fn lapack_signs(ours_dr: &HostTensor, theirs_dr: &HostTensor) -> Vec<Vec<f64>> {
    mats(ours_dr)
        .iter()
        .zip(&mats(theirs_dr))
        .map(|(o, t)| {
            (0..o.nrows().min(o.ncols()))
                .map(|j| {
                    if (t[(j, j)] * o[(j, j)].conj()).re < 0.0 {
                        -1.0
                    } else {
                        1.0
                    }
                })
                .collect()
        })
        .collect()
}

/// `X·D` (`cols`) or `D·X` for the signs of [`lapack_signs`].
fn with_signs(x: &HostTensor, d: &[Vec<f64>], cols: bool) -> HostTensor {
    let dims = x.dims();
    let (m, n) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let ys: Vec<_> = mats(x)
        .iter()
        .zip(d)
        .map(|(x, d)| {
            faer::Mat::from_fn(m, n, |i, j| {
                let s = if cols { d.get(j) } else { d.get(i) };
                x[(i, j)] * s.copied().unwrap_or(1.0)
            })
        })
        .collect();
    unmats(&batch_of(x), m, n, &ys, x.dtype())
}

/// QR against PyTorch's, whose gauge (LAPACK's sign of `Rⱼⱼ`) differs from ours (positive
/// `Rⱼⱼ`) by constant column signs `D`: `Q_torch = Q·D`, `R_torch = D·R`, so
/// `Q̇_torch = Q̇·D`, `Ṙ_torch = D·Ṙ` and `Ā_torch = pullback(Q̄·D, D·R̄)`.
#[test]
fn qr_matches_the_oracle() {
    let mut checked = 0;
    for case in cases("qr.jsonl") {
        let a = &case.inputs["a"];
        let be = be();
        let (out, pb) = qr_rrule(&be, &dev(a), QrMode::Reduced).unwrap();
        for d in mats(&host(&out.r)).iter() {
            for j in 0..d.nrows().min(d.ncols()) {
                assert!(
                    d[(j, j)].im == 0.0 && d[(j, j)].re >= 0.0,
                    "{}: R diagonal {:?}",
                    case.id,
                    d[(j, j)]
                );
            }
        }
        for p in &case.probes {
            let (_, tan) = qr_frule(&be, &dev(a), &dev(&p.direction["a"]), QrMode::Reduced)
                .unwrap_or_else(|e| panic!("{}: {e}", case.id));
            let dr = host(&tan.r);
            let d = lapack_signs(&dr, &p.jvps["output_1"]);
            check(
                &case,
                &with_signs(&host(&tan.q), &d, true),
                &p.jvps["output_0"],
                "jvp Q",
            );
            check(
                &case,
                &with_signs(&dr, &d, false),
                &p.jvps["output_1"],
                "jvp R",
            );
            let qb = dev(&with_signs(&p.cotangents["output_0"], &d, true));
            let rb = dev(&with_signs(&p.cotangents["output_1"], &d, false));
            let a_bar = host(&pb.pullback(Some(&qb), Some(&rb)).unwrap());
            check(&case, &a_bar, &p.vjp["a"], "vjp a");
            checked += 1;
        }
    }
    assert!(checked >= 144, "only {checked} probes");
}

/// Second order of QR: `H_φ·Ȧ` for `φ = Re⟨Q̄, Q⟩ + Re⟨R̄, R⟩` (constant cotangents) by
/// [`QrPullback::pullback_tangent`](adrules_core::linalg::QrPullback::pullback_tangent),
/// against the oracle's `hvp` entries in PyTorch's gauge (`Ā_torch = pullback(Q̄·D, D·R̄)`
/// and likewise its tangent, `D` constant).
#[test]
fn qr_hvp_matches_the_oracle() {
    let mut checked = 0;
    for case in cases("qr.jsonl") {
        let a = &case.inputs["a"];
        let be = be();
        let (_, pb) = qr_rrule(&be, &dev(a), QrMode::Reduced).unwrap();
        for p in &case.probes {
            let Some(want) = p.hvp.get("a") else { continue };
            let a_dot = dev(&p.direction["a"]);
            let (_, tan) = qr_frule(&be, &dev(a), &a_dot, QrMode::Reduced).unwrap();
            let d = lapack_signs(&host(&tan.r), &p.jvps["output_1"]);
            let qb = dev(&with_signs(&p.cotangents["output_0"], &d, true));
            let rb = dev(&with_signs(&p.cotangents["output_1"], &d, false));
            let (_, got) = pb
                .pullback_tangent(Some(&qb), Some(&rb), &a_dot, None, None)
                .unwrap_or_else(|e| panic!("{}: {e}", case.id));
            assert_close(
                case.second_order_tolerance(),
                &host(&got),
                want,
                &format!("{} hvp a", case.id),
            );
            checked += 1;
        }
    }
    assert!(checked >= 72, "only {checked} probes");
}

#[test]
fn eigh_matches_the_oracle() {
    let mut checked = 0;
    for case in cases("eigh_values_vectors_abs.jsonl") {
        let dt = case.dtype;
        let b = plus_adjoint(&case.inputs["a"]);
        let be = be();
        for p in &case.probes {
            let b_dot = plus_adjoint(&p.direction["a"]);
            let (out, tan) = eigh_frule(&be, &dev(&b), &dev(&b_dot), RuleOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", case.id));
            let v = host(&out.vectors);
            check(&case, &host(&tan.values), &p.jvps["values"], "jvp values");
            check(
                &case,
                &abs_tangent(&v, &host(&tan.vectors), dt.real()),
                &p.jvps["vectors"],
                "jvp |V|",
            );
            let (_, pb) = eigh_rrule(&be, &dev(&b), RuleOptions::default()).unwrap();
            let vbar = dev(&abs_cotangent(&v, &p.cotangents["vectors"], dt));
            let lbar = dev(&p.cotangents["values"]);
            let b_bar = host(&pb.pullback(Some(&lbar), Some(&vbar)).unwrap());
            check(&case, &plus_adjoint(&b_bar), &p.vjp["a"], "vjp a");
            checked += 1;
        }
    }
    assert!(checked >= 32, "only {checked} probes");
}

/// Second order: the Hessian-vector products of `φ(A) = ⟨λ̄, λ⟩ + ⟨Ȳ, |V|⟩` (through the
/// Hermitian wrapper) by [`EighPullback::pullback_tangent`], with the tangent of the `|V|`
/// cotangent along the path, against the oracle's `hvp` entries.
#[test]
fn eigh_hvp_matches_the_oracle() {
    let mut checked = 0;
    for case in cases("eigh_values_vectors_abs.jsonl") {
        let dt = case.dtype;
        let b = plus_adjoint(&case.inputs["a"]);
        let be = be();
        for p in &case.probes {
            let Some(want) = p.hvp.get("a") else { continue };
            let b_dot = plus_adjoint(&p.direction["a"]);
            let (out, tan) =
                eigh_frule(&be, &dev(&b), &dev(&b_dot), RuleOptions::default()).unwrap();
            let (v, v_dot) = (host(&out.vectors), host(&tan.vectors));
            let y = &p.cotangents["vectors"];
            let vbar = dev(&abs_cotangent(&v, y, dt));
            let vbar_dot = dev(&abs_cotangent_tangent(&v, &v_dot, y, dt));
            let lbar = dev(&p.cotangents["values"]);
            let (_, pb) = eigh_rrule(&be, &dev(&b), RuleOptions::default()).unwrap();
            let (_, dot) = pb
                .pullback_tangent(
                    Some(&lbar),
                    Some(&vbar),
                    &dev(&b_dot),
                    None,
                    Some(&vbar_dot),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", case.id));
            let got = plus_adjoint(&host(&dot));
            assert_close(
                case.second_order_tolerance(),
                &got,
                want,
                &format!("{} hvp a", case.id),
            );
            checked += 1;
        }
    }
    assert!(checked >= 16, "only {checked} probes");
}

/// PyTorch's `test_invariance_error_spectral_decompositions`: `|Σ(U + Vh)|` for the SVD and
/// `|Σ V|` for eigh depend on the phases of the vectors, and must be refused.
#[test]
fn gauge_dependent_losses_are_refused() {
    for case in cases("svd_gauge_ill_defined.jsonl") {
        assert!(case.expects_error);
        let a = &case.inputs["a"];
        let (_, pb) = svd_rrule(&be(), &dev(a), SvdMode::Thin, RuleOptions::default()).unwrap();
        let out = adrules_core::linalg::svd(&be(), &dev(a), SvdMode::Thin).unwrap();
        let (u, vh) = (host(&out.u), host(&out.vh));
        // L = |z|, z = Σ(U + Vh): z̄ = z/|z| on every entry of U and of Vh
        let z: adrules_core::Complex64 = u
            .data()
            .to_c64_vec()
            .iter()
            .chain(vh.data().to_c64_vec().iter())
            .sum();
        let zbar = z / z.norm();
        let ubar = dev(&map1(&u, case.dtype, |_| zbar));
        let vhbar = dev(&map1(&vh, case.dtype, |_| zbar));
        let cot = SvdCotangents {
            u: Some(&ubar),
            vh: Some(&vhbar),
            ..Default::default()
        };
        match pb.pullback(cot) {
            Err(Error::GaugeIllDefined { arg, .. }) => assert_eq!(arg, "svd"),
            other => panic!("{}: expected GaugeIllDefined, got {other:?}", case.id),
        }
    }
    for case in cases("eigh_gauge_ill_defined.jsonl") {
        assert!(case.expects_error);
        let a = &case.inputs["a"];
        let (out, pb) = eigh_rrule(&be(), &dev(a), RuleOptions::default()).unwrap();
        let v = host(&out.vectors);
        let z: adrules_core::Complex64 = v.data().to_c64_vec().iter().sum();
        let vbar = dev(&map1(&v, case.dtype, |_| z / z.norm()));
        match pb.pullback(None, Some(&vbar)) {
            Err(Error::GaugeIllDefined { arg, .. }) => assert_eq!(arg, "eigh"),
            other => panic!("{}: expected GaugeIllDefined, got {other:?}", case.id),
        }
    }
}
