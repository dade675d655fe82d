//! The decompositions inside candle's graph (`adrules_candle::linalg`): the oracle files
//! `svd_s.jsonl`, `svd_u_abs.jsonl`, `svd_uvh_product.jsonl`, `qr.jsonl` and
//! `eigh_values_vectors_abs.jsonl` (PyTorch 2.10, cross-checked by finite differences)
//! replayed through candle's own `backward()` in f32 and f64: each case's gauge-invariant
//! observable is written with candle ops on the factors, and the gradient of
//! `L = Σ observable ⊙ cotangent` is compared with the file's VJP. Then an SVD inside a
//! larger graph against the core's rule composed by hand, the truncated SVD's discarded
//! term, a gauge-dependent loss refused from `backward()` with a typed error, constants
//! left without a node, and bad input; the clustered eigh's gradient against the core's
//! pullback on the strided backend, and its bad input.

use adrules_candle::candle_core::{Device, Tensor, Var};
use adrules_candle::linalg::{self as dense, eigh, eigh_clustered, qr, svd, svd_truncated};
use adrules_candle::{CandleBackend, adrules_error, try_backward};
use adrules_core::linalg::{
    ClusterOptions, QrMode, RuleOptions, SvdCotangents, SvdMode, Truncation, qr_frule, svd_rrule,
};
use adrules_core::{Backend, DType, Error, HostTensor};
use adrules_testing::conformance::dense::{DenseOp, engine_dense_oracle};
use adrules_testing::conformance::linalg::clustered_problem;
use adrules_testing::oracle::{OracleCase, Tolerance, assert_close, load_for};

/// f64 results computed two ways from the same factors.
const TIGHT: Tolerance = Tolerance {
    atol: 1e-12,
    rtol: 1e-10,
};

fn up(h: &HostTensor) -> Tensor {
    CandleBackend::cpu().from_host(h.clone()).unwrap()
}

fn down(t: &Tensor) -> HostTensor {
    CandleBackend::cpu().to_host(t).unwrap()
}

fn cases(file: &str) -> Vec<OracleCase> {
    let cases = load_for(file, &[DType::F32, DType::F64]).unwrap();
    assert!(!cases.is_empty(), "{file}: no cases");
    cases
}

/// `Σ x ⊙ c` (a scalar tensor; 0 for empty tensors).
fn dot(x: &Tensor, c: &HostTensor) -> Tensor {
    (x * up(c)).unwrap().sum_all().unwrap()
}

/// candle's gradient of `a` from `loss` (zeros when no path reaches `a`), on the host.
fn grad(loss: &Tensor, a: &Var, ctx: &str) -> HostTensor {
    let grads = try_backward(loss).unwrap_or_else(|e| panic!("{ctx}: backward: {e}"));
    match grads.get(a.as_tensor()) {
        Some(g) => down(g),
        None => down(&a.as_tensor().zeros_like().unwrap()),
    }
}

fn check(case: &OracleCase, got: &HostTensor, want: &HostTensor, what: &str) {
    assert_close(
        case.first_order_tolerance(),
        got,
        want,
        &format!("{} {what}", case.id),
    );
}

#[test]
fn svd_through_candle_backward_matches_the_oracles() {
    let mut checked = 0;
    for file in ["svd_s.jsonl", "svd_u_abs.jsonl", "svd_uvh_product.jsonl"] {
        for case in cases(file) {
            let a = Var::from_tensor(&up(&case.inputs["a"])).unwrap();
            let d = a.dims().to_vec();
            let r = d.len();
            let k = d[r - 2].min(d[r - 1]);
            let mode = if case.kwargs["full_matrices"].as_bool().unwrap_or(true) {
                SvdMode::Full
            } else {
                SvdMode::Thin
            };
            for p in &case.probes {
                let f = svd(a.as_tensor(), mode, RuleOptions::default())
                    .unwrap_or_else(|e| panic!("{}: {e}", case.id));
                // the observables are on the leading k columns of U and rows of Vh
                let u = f.u.narrow(r - 1, 0, k).unwrap();
                let vh = f.vh.narrow(r - 2, 0, k).unwrap();
                let c = &p.cotangents;
                let loss = match case.observable.as_str() {
                    "svd_s" => dot(&f.s, &c["s"]),
                    "svd_u_abs" => dot(&u.abs().unwrap(), &c["u"]),
                    "svd_uvh_product" if k == 0 => dot(&f.s, &c["s"]),
                    "svd_uvh_product" => {
                        let prod = u.matmul(&vh).unwrap();
                        (dot(&f.s, &c["s"]) + dot(&prod, &c["uvh"])).unwrap()
                    }
                    other => panic!("{}: unknown observable {other}", case.id),
                };
                check(&case, &grad(&loss, &a, &case.id), &p.vjp["a"], "vjp a");
                checked += 1;
            }
        }
    }
    assert!(checked >= 150, "only {checked} probes");
}

/// PyTorch's QR (LAPACK) leaves the signs of `diag(R)` to the Householder pivots; ours are
/// non-negative. With `D` those signs (constant, read off the tangent of `R` against the
/// file's), `Q_torch = Q·D` and `R_torch = D·R`, so the loss is `⟨Q̄·D, Q⟩ + ⟨D·R̄, R⟩`.
#[test]
fn qr_through_candle_backward_matches_the_oracle() {
    let be = CandleBackend::cpu();
    let mut checked = 0;
    for case in cases("qr.jsonl") {
        let a = Var::from_tensor(&up(&case.inputs["a"])).unwrap();
        for p in &case.probes {
            let (_, tan) = qr_frule(&be, &a.detach(), &up(&p.direction["a"]), QrMode::Reduced)
                .unwrap_or_else(|e| panic!("{}: {e}", case.id));
            let signs = row_signs(&down(&tan.r), &p.jvps["output_1"]);
            let qbar = scale(&p.cotangents["output_0"], &signs, true);
            let rbar = scale(&p.cotangents["output_1"], &signs, false);
            let f = qr(a.as_tensor(), QrMode::Reduced).unwrap();
            let loss = (dot(&f.q, &qbar) + dot(&f.r, &rbar)).unwrap();
            check(&case, &grad(&loss, &a, &case.id), &p.vjp["a"], "vjp a");
            checked += 1;
        }
    }
    assert!(checked >= 72, "only {checked} probes");
}

/// Per matrix of a batch, the sign (±1) of each row of `ours` against `theirs`: the row
/// flipped when their inner product is negative.
fn row_signs(ours: &HostTensor, theirs: &HostTensor) -> Vec<f64> {
    let d = ours.dims();
    let (rows, cols) = (d[d.len() - 2], d[d.len() - 1]);
    let (x, y) = (re(ours), re(theirs));
    let mut signs = Vec::new();
    if rows * cols == 0 {
        return signs; // nothing to flip: every sign defaults to +1
    }
    for (mx, my) in x.chunks(rows * cols).zip(y.chunks(rows * cols)) {
        for i in 0..rows {
            let s: f64 = (0..cols).map(|j| mx[i * cols + j] * my[i * cols + j]).sum();
            signs.push(if s < 0.0 { -1.0 } else { 1.0 });
        }
    }
    signs
}

/// `t·D` (`columns`: scale column `j` of each matrix) or `D·t` (rows), `D` per matrix.
fn scale(t: &HostTensor, signs: &[f64], columns: bool) -> HostTensor {
    let d = t.dims();
    let (rows, cols) = (d[d.len() - 2], d[d.len() - 1]);
    let per = if columns { cols } else { rows };
    let mut v = re(t);
    if rows * cols == 0 {
        return t.clone();
    }
    for (b, m) in v.chunks_mut(rows * cols).enumerate() {
        for i in 0..rows {
            for j in 0..cols {
                let k = if columns { j } else { i };
                // the signs are per row of R, i.e. per column of Q: both index min(m, n)
                m[i * cols + j] *= signs.get(b * per + k).copied().unwrap_or(1.0);
            }
        }
    }
    match t.dtype() {
        DType::F32 => HostTensor::from_vec(d, v.iter().map(|&x| x as f32).collect()).unwrap(),
        _ => HostTensor::from_vec(d, v).unwrap(),
    }
}

/// The entries of a real tensor as f64.
fn re(t: &HostTensor) -> Vec<f64> {
    t.data().to_c64_vec().iter().map(|z| z.re).collect()
}

/// eigh follows PyTorch's Hermitian wrapper: the function is `eigh(A + Aᵀ)`, written here
/// with candle's own transpose and add, so candle differentiates the wrapper too.
#[test]
fn eigh_through_candle_backward_matches_the_oracle() {
    let mut checked = 0;
    for case in cases("eigh_values_vectors_abs.jsonl") {
        let a = Var::from_tensor(&up(&case.inputs["a"])).unwrap();
        let r = a.dims().len();
        for p in &case.probes {
            let b = (a.as_tensor() + a.as_tensor().transpose(r - 2, r - 1).unwrap()).unwrap();
            let f = eigh(&b, RuleOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", case.id));
            let loss = (dot(&f.values, &p.cotangents["values"])
                + dot(&f.vectors.abs().unwrap(), &p.cotangents["vectors"]))
            .unwrap();
            check(&case, &grad(&loss, &a, &case.id), &p.vjp["a"], "vjp a");
            checked += 1;
        }
    }
    assert!(checked >= 16, "only {checked} probes");
}

fn randn(dims: &[usize], seed: u64) -> Tensor {
    up(&adrules_testing::random::Rng::seed(seed).tensor(dims, DType::F64))
}

#[test]
fn svd_inside_a_larger_graph_equals_the_core_rule_composed_by_hand() {
    // L = Σ W ⊙ (U·diag(S)²) + Σ tanh(Vh), A = X·Y: candle differentiates the product, the
    // square, tanh and the contractions; the SVD node in between
    let x = Var::from_tensor(&randn(&[5, 3], 1)).unwrap();
    let y = randn(&[3, 4], 2);
    let w = randn(&[5, 4], 3); // shaped as U: [m, k], k = min(5, 4)
    let a = x.as_tensor().matmul(&y).unwrap();
    let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
    let s2 = f.s.sqr().unwrap();
    let us2 = f.u.broadcast_mul(&s2.unsqueeze(0).unwrap()).unwrap();
    let loss = ((&us2 * &w).unwrap().sum_all().unwrap() + f.vh.tanh().unwrap().sum_all().unwrap())
        .unwrap();
    let got = down(
        &try_backward(&loss)
            .unwrap()
            .get(x.as_tensor())
            .unwrap()
            .clone(),
    );

    // by hand: Ū = W·diag(S²), S̄ = 2·S∘Σᵢ(W∘U)ᵢ, V̄h = 1 − tanh²(Vh), then Ā from the core's
    // pullback and X̄ = Ā·Yᵀ
    let be = CandleBackend::cpu();
    let (g, pb) = svd_rrule(&be, &a.detach(), SvdMode::Thin, RuleOptions::default()).unwrap();
    let ubar = w
        .broadcast_mul(&g.s.sqr().unwrap().unsqueeze(0).unwrap())
        .unwrap();
    let sbar = ((&w * &g.u).unwrap().sum(0).unwrap() * (&g.s * 2.0).unwrap()).unwrap();
    let th = g.vh.tanh().unwrap();
    let vhbar = (1.0 - (&th * &th).unwrap()).unwrap();
    let abar = pb
        .pullback(SvdCotangents {
            u: Some(&ubar),
            s: Some(&sbar),
            vh: Some(&vhbar),
            discarded: None,
        })
        .unwrap();
    let want = down(&abar.matmul(&y.t().unwrap()).unwrap());
    assert_close(TIGHT, &got, &want, "x̄ through svd");
}

#[test]
fn truncated_svd_takes_the_discarded_spectrum() {
    // ‖A − U_r S_r Vh_r‖² = Σ discarded²: its gradient is 2·(A − U_r S_r Vh_r) (Eckart–Young)
    let a = Var::from_tensor(&randn(&[6, 4], 4)).unwrap();
    let t = svd_truncated(a.as_tensor(), Truncation::rank(2), RuleOptions::default()).unwrap();
    assert_eq!((t.rank, t.discarded.dims()), (2, &[2][..]));
    let loss = t.discarded.sqr().unwrap().sum_all().unwrap();
    let got = down(
        &try_backward(&loss)
            .unwrap()
            .get(a.as_tensor())
            .unwrap()
            .clone(),
    );
    let low = t
        .svd
        .u
        .broadcast_mul(&t.svd.s.unsqueeze(0).unwrap())
        .unwrap()
        .matmul(&t.svd.vh)
        .unwrap();
    let want = down(&((a.as_tensor() - low).unwrap() * 2.0).unwrap());
    assert_close(TIGHT, &got, &want, "gradient of the discarded weight");
}

#[test]
fn a_gauge_dependent_loss_is_a_typed_error_from_backward() {
    // eigenvalues 1, 1, 2: any basis of the first eigenspace will do, so Σ V[:, 0] is not
    // a function of A
    let a = Var::from_tensor(
        &Tensor::from_vec(
            vec![1f64, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0],
            (3, 3),
            &Device::Cpu,
        )
        .unwrap(),
    )
    .unwrap();
    let f = eigh(a.as_tensor(), RuleOptions::default()).unwrap();
    let loss = f.vectors.narrow(1, 0, 1).unwrap().sum_all().unwrap();
    match try_backward(&loss) {
        Err(Error::GaugeIllDefined { arg, .. }) => assert_eq!(arg, "eigh"),
        other => panic!("expected GaugeIllDefined, got {:?}", other.map(|_| ())),
    }
    // the eigenvalues alone are fine: their gradient is V·diag(λ̄)·Vᵀ = the identity here
    let f = eigh(a.as_tensor(), RuleOptions::default()).unwrap();
    let g = try_backward(&f.values.sum_all().unwrap()).unwrap();
    let eye = Tensor::eye(3, adrules_candle::candle_core::DType::F64, &Device::Cpu).unwrap();
    let diff = (g.get(a.as_tensor()).unwrap() - eye)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap();
    assert!(diff.to_scalar::<f64>().unwrap() < 1e-12);
}

#[test]
fn constants_get_no_node_and_bad_input_is_a_typed_error() {
    // a constant: plain tensors, no graph node
    let a = randn(&[4, 3], 5);
    let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
    assert!(!f.u.track_op() && !f.s.track_op() && !f.vh.track_op());
    // a vector, a non-square eigh, a non-finite entry, a negative broadening
    let v = Var::from_tensor(&randn(&[4], 6)).unwrap();
    let e = svd(v.as_tensor(), SvdMode::Thin, RuleOptions::default()).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::RankMismatch { .. })),
        "{e}"
    );
    let m = Var::from_tensor(&randn(&[4, 3], 7)).unwrap();
    let e = eigh(m.as_tensor(), RuleOptions::default()).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::ShapeMismatch { .. })),
        "{e}"
    );
    let nan = Var::from_tensor(&(randn(&[3, 3], 8) * f64::NAN).unwrap()).unwrap();
    let e = qr(nan.as_tensor(), QrMode::Reduced).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::InvalidArgument { .. })),
        "{e}"
    );
    let e = svd(m.as_tensor(), SvdMode::Thin, RuleOptions::broadened(-1.0)).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::InvalidArgument { .. })),
        "{e}"
    );
    let e = svd_truncated(
        m.as_tensor(),
        Truncation::tolerance(f64::NAN),
        RuleOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::InvalidArgument { .. })),
        "{e}"
    );
    let half = m
        .as_tensor()
        .to_dtype(adrules_candle::candle_core::DType::F16)
        .unwrap();
    let e = svd(&half, SvdMode::Thin, RuleOptions::default()).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::Unsupported { .. })),
        "{e}"
    );
    // the operands are unchanged
    assert_eq!(down(&m.as_tensor().clone()), down(&randn(&[4, 3], 7)));
}

#[test]
fn eigh_clustered_through_candle_backward_equals_the_core_rule() {
    for dtype in [DType::F64, DType::F32] {
        let p = clustered_problem(dtype).unwrap();
        let av = Var::from_tensor(&up(&p.a)).unwrap();
        let gv = Var::from_tensor(&up(&p.g)).unwrap();
        let rule = RuleOptions::default();
        let f = eigh_clustered(av.as_tensor(), gv.as_tensor(), &p.opts, rule).unwrap();
        assert!(f.info.iter().all(|i| i.sizes == [1, 2, 1]), "{:?}", f.info);
        assert!(f.basis.track_op() && f.corner.track_op() && !f.values.track_op());
        assert_eq!(f.values.dims(), &[2, 4]);
        // L = Σ W ⊙ W̄ + Σ C' ⊙ C̄
        let loss = (dot(&f.basis, &p.w_bar) + dot(&f.corner, &p.c_bar)).unwrap();
        let grads = try_backward(&loss).unwrap();
        let got = down(grads.get(av.as_tensor()).unwrap());
        // G is a constant: no gradient reaches it
        assert!(grads.get(gv.as_tensor()).is_none());
        p.assert_matches(&got, &down(&f.basis), &down(&f.values));
    }
}

#[test]
fn eigh_clustered_bad_input_is_a_typed_error() {
    let p = clustered_problem(DType::F64).unwrap();
    let (a, g, opts) = (p.a, p.g, p.opts);
    let av = Var::from_tensor(&up(&a)).unwrap();
    let rule = RuleOptions::default();
    // a non-symmetric A
    let skew = Var::from_tensor(&randn(&[6, 6], 13)).unwrap();
    let e = eigh_clustered(skew.as_tensor(), &up(&g), &opts, rule).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::InvalidArgument { .. })),
        "{e}"
    );
    // a G that is not [n, n]
    let e = eigh_clustered(av.as_tensor(), &randn(&[5, 5], 14), &opts, rule).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::ShapeMismatch { .. })),
        "{e}"
    );
    // keep = 0
    let e =
        eigh_clustered(av.as_tensor(), &up(&g), &ClusterOptions::new(0, 1e-3), rule).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::InvalidArgument { .. })),
        "{e}"
    );
    // a G of another dtype than A is refused, not cast
    let g32 = up(&g.to_dtype_projected(DType::F32));
    let e = eigh_clustered(av.as_tensor(), &g32, &opts, rule).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::DTypeMismatch { arg, .. }) if arg == "g"),
        "{e}"
    );
}

#[test]
fn repeated_and_concurrent_backward_passes_each_get_their_own_gradient() {
    // two losses of the same factors, differentiated again and again, and from four threads
    // at once: each pass's cotangents reach the pullback, no other pass's
    let a = Var::from_tensor(&randn(&[5, 4], 7)).unwrap();
    let f = svd(a.as_tensor(), SvdMode::Thin, RuleOptions::default()).unwrap();
    let (w, z) = (randn(&[5, 4], 8), randn(&[4, 4], 9));
    // L₁ uses U twice and S, L₂ uses Vh only
    let l1 = ((&f.u * &w).unwrap().sum_all().unwrap()
        + (f.u.sqr().unwrap().sum_all().unwrap() * f.s.sum_all().unwrap()).unwrap())
    .unwrap();
    let l2 = (&f.vh * &z).unwrap().sum_all().unwrap();
    let by_hand = |u: Option<Tensor>, s: Option<Tensor>, vh: Option<Tensor>| {
        let be = CandleBackend::cpu();
        let (_, pb) = svd_rrule(&be, &a.detach(), SvdMode::Thin, RuleOptions::default()).unwrap();
        let cot = SvdCotangents {
            u: u.as_ref(),
            s: s.as_ref(),
            vh: vh.as_ref(),
            discarded: None,
        };
        down(&pb.pullback(cot).unwrap())
    };
    // Ū = W + 2·U·Σs, S̄ = ΣU² (every entry), V̄h = Z
    let (sum_s, sum_u2) = (
        f.s.sum_all().unwrap(),
        f.u.sqr().unwrap().sum_all().unwrap(),
    );
    let ubar = (&w + f.u.broadcast_mul(&(sum_s * 2.0).unwrap()).unwrap()).unwrap();
    let sbar = sum_u2.broadcast_as(4).unwrap().contiguous().unwrap();
    let want1 = by_hand(Some(ubar), Some(sbar), None);
    let want2 = by_hand(None, None, Some(z.clone()));
    let first1 = grad(&l1, &a, "L₁");
    assert_close(TIGHT, &first1, &want1, "L₁ by hand");
    let first2 = grad(&l2, &a, "L₂");
    assert_close(TIGHT, &first2, &want2, "L₂ by hand");
    let same = |got: &HostTensor, want: &HostTensor, what: &str| {
        assert_eq!(
            got.as_slice::<f64>().unwrap(),
            want.as_slice::<f64>().unwrap(),
            "{what}"
        );
    };
    for _ in 0..3 {
        same(&grad(&l2, &a, "L₂ again"), &first2, "L₂ again");
        same(&grad(&l1, &a, "L₁ again"), &first1, "L₁ again");
    }
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..4)
            .map(|t| {
                let (l1, l2, a) = (&l1, &l2, &a);
                scope.spawn(move || {
                    let loss = if t % 2 == 0 { l1 } else { l2 };
                    (
                        t,
                        (0..10).map(|_| grad(loss, a, "thread")).collect::<Vec<_>>(),
                    )
                })
            })
            .collect();
        for run in runs {
            let (t, grads) = run.join().unwrap();
            let want = if t % 2 == 0 { &first1 } else { &first2 };
            for g in &grads {
                same(g, want, &format!("thread {t}"));
            }
        }
    });
}

/// One dense op of an oracle case through candle's graph: the input gradients of
/// `Σⱼ ⟨cotangentⱼ, outputⱼ⟩` by `backward()`.
fn dense_vjp(
    op: DenseOp,
    inputs: &[HostTensor],
    cots: &[HostTensor],
) -> candle_core::Result<Vec<HostTensor>> {
    let vars = inputs
        .iter()
        .map(|h| Var::from_tensor(&up(h)))
        .collect::<candle_core::Result<Vec<Var>>>()?;
    let a = vars[0].as_tensor();
    let outs = match op {
        DenseOp::Cholesky { upper } => vec![dense::cholesky(a, upper)?],
        DenseOp::Det => vec![dense::det(a)?],
        DenseOp::Slogdet => {
            let (sign, logabs) = dense::slogdet(a)?;
            vec![sign, logabs]
        }
        DenseOp::Solve => vec![dense::solve(a, vars[1].as_tensor())?],
        DenseOp::MatrixExp => vec![dense::matrix_exp(a)?],
        DenseOp::Pinv { rtol } => vec![dense::pinv(a, rtol)?],
        DenseOp::LuFactor => vec![dense::lu_factor(a)?.0],
    };
    let mut terms = outs.iter().zip(cots).map(|(o, c)| (o * up(c))?.sum_all());
    let first = terms.next().expect("one output")?;
    let loss = terms.try_fold(first, |s, t| s + t?)?;
    let grads = try_backward(&loss).map_err(adrules_candle::to_candle)?;
    Ok(vars
        .iter()
        .zip(inputs)
        .map(|(v, h)| {
            grads
                .get(v.as_tensor())
                .map_or_else(|| HostTensor::zeros(h.dims(), h.dtype()).unwrap(), down)
        })
        .collect())
}

#[test]
fn dense_ops_through_candle_backward_match_the_oracles() {
    let ran = engine_dense_oracle(&[DType::F32, DType::F64], usize::MAX, |op, x, c| {
        dense_vjp(op, x, c).map_err(adrules_candle::from_candle)
    });
    assert!(ran >= 60, "{ran} cases");
}

#[test]
fn det_backward_at_a_singular_matrix_is_a_typed_error() {
    let a = Var::from_slice(&[1.0f64, 2.0, 2.0, 4.0], (2, 2), &Device::Cpu).unwrap();
    let d = dense::det(a.as_tensor()).unwrap();
    assert_eq!(d.to_scalar::<f64>().unwrap(), 0.0);
    let e = try_backward(&d).unwrap_err();
    assert!(matches!(e, Error::Singular { .. }), "{e:?}");
    let e = dense::inv(a.as_tensor()).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::Singular { .. })),
        "{e:?}"
    );
}
