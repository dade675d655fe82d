//! The decompositions inside burn's graph (`adrules_burn::linalg`): the oracle files
//! `svd_s.jsonl`, `svd_u_abs.jsonl`, `svd_uvh_product.jsonl`, `qr.jsonl` and
//! `eigh_values_vectors_abs.jsonl` (PyTorch 2.10, cross-checked by finite differences)
//! replayed through burn's own `backward()` in f32 and f64: each case's gauge-invariant
//! observable is written with burn ops on the factors, and the gradient of
//! `L = Σ observable ⊙ cotangent` is compared with the file's VJP. Then an SVD inside a
//! larger graph against the core's rule composed by hand (on the strided backend), the
//! truncated SVD's discarded term, a gauge-dependent loss reported from `backward()` with a
//! typed error, constants left without a node, bad input, and NdArray routing; the
//! clustered eigh's gradient against the core's pullback on the strided backend, and its
//! bad input.

use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_burn::linalg::{self, eigh, eigh_clustered, qr, svd, svd_truncated};
use adrules_burn::{take_backward_errors, try_backward};
use adrules_core::linalg::{
    ClusterOptions, QrMode, RuleOptions, SvdCotangents, SvdMode, Truncation, qr_frule, svd_rrule,
};
use adrules_core::{Backend, DType, Error, HostTensor};
use adrules_strided::Strided;
use adrules_testing::conformance::dense::{DenseOp, engine_dense_oracle};
use adrules_testing::conformance::linalg::clustered_problem;
use adrules_testing::oracle::{OracleCase, Tolerance, assert_close, load_for};

/// f64 results computed two ways from the same factors.
const TIGHT: Tolerance = Tolerance {
    atol: 1e-12,
    rtol: 1e-10,
};

fn autodiff() -> Device {
    Device::flex().autodiff()
}

/// `h` as a burn tensor on `device`, of shape `dims` (`h`'s own when `None`).
fn up_as<const D: usize>(h: &HostTensor, dims: &[usize], device: &Device) -> Tensor<D> {
    let (data, dtype) = match h.dtype() {
        DType::F64 => (
            TensorData::new(h.as_slice::<f64>().unwrap().to_vec(), dims.to_vec()),
            BurnDType::F64,
        ),
        _ => (
            TensorData::new(h.as_slice::<f32>().unwrap().to_vec(), dims.to_vec()),
            BurnDType::F32,
        ),
    };
    Tensor::<D>::from_data(data, (device, dtype))
}

fn up<const D: usize>(h: &HostTensor, device: &Device) -> Tensor<D> {
    up_as(h, h.dims(), device)
}

fn down<const D: usize>(t: Tensor<D>) -> HostTensor {
    let dims = t.dims().to_vec();
    let data = t.into_data();
    match data.dtype() {
        BurnDType::F64 => HostTensor::from_vec(&dims, data.iter::<f64>().collect()).unwrap(),
        _ => HostTensor::from_vec(&dims, data.iter::<f32>().collect()).unwrap(),
    }
}

fn cases(file: &str) -> Vec<OracleCase> {
    let cases = load_for(file, &[DType::F32, DType::F64]).unwrap();
    assert!(!cases.is_empty(), "{file}: no cases");
    cases
}

/// `Σ x ⊙ c` (`c` read in `x`'s shape: the vectors carry a unit axis here).
fn dot<const D: usize>(x: Tensor<D>, c: &HostTensor) -> Tensor<1> {
    let c = up_as::<D>(c, &x.dims(), &x.device());
    (x * c).sum()
}

/// burn's gradient of `a` from `loss`, on the host (zeros when no path reaches `a`: every
/// factor empty).
fn grad<const D: usize>(loss: &Tensor<1>, a: &Tensor<D>, ctx: &str) -> HostTensor {
    let zeros = || down(a.zeros_like().inner());
    if !loss.is_tracked() {
        return zeros();
    }
    let grads = try_backward(loss).unwrap_or_else(|e| panic!("{ctx}: backward: {e}"));
    a.grad(&grads).map_or_else(zeros, down)
}

fn check(case: &OracleCase, got: &HostTensor, want: &HostTensor, what: &str) {
    assert_close(
        case.first_order_tolerance(),
        got,
        want,
        &format!("{} {what}", case.id),
    );
}

/// Calls `$f::<D>` for the rank of the case's input (2, 3 or 4).
macro_rules! by_rank {
    ($f:ident($case:expr)) => {
        match $case.inputs["a"].dims().len() {
            2 => $f::<2>($case),
            3 => $f::<3>($case),
            4 => $f::<4>($case),
            r => panic!("{}: rank {r}", $case.id),
        }
    };
}

fn svd_case<const D: usize>(case: &OracleCase) -> usize {
    let a = up::<D>(&case.inputs["a"], &autodiff()).require_grad();
    let d = a.dims();
    let k = d[D - 2].min(d[D - 1]);
    let mode = if case.kwargs["full_matrices"].as_bool().unwrap_or(true) {
        SvdMode::Full
    } else {
        SvdMode::Thin
    };
    for p in &case.probes {
        let f =
            svd(&a, mode, RuleOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", case.id));
        // the observables are on the leading k columns of U and rows of Vh
        let u = f.u.slice_dim(D - 1, 0..k);
        let vh = f.vh.slice_dim(D - 2, 0..k);
        let c = &p.cotangents;
        let loss = match case.observable.as_str() {
            "svd_s" => dot(f.s, &c["s"]),
            "svd_u_abs" => dot(u.abs(), &c["u"]),
            "svd_uvh_product" if k == 0 => dot(f.s, &c["s"]),
            "svd_uvh_product" => dot(f.s, &c["s"]) + dot(u.matmul(vh), &c["uvh"]),
            other => panic!("{}: unknown observable {other}", case.id),
        };
        check(case, &grad(&loss, &a, &case.id), &p.vjp["a"], "vjp a");
    }
    case.probes.len()
}

#[test]
fn svd_through_burn_backward_matches_the_oracles() {
    let mut checked = 0;
    for file in ["svd_s.jsonl", "svd_u_abs.jsonl", "svd_uvh_product.jsonl"] {
        for case in cases(file) {
            checked += by_rank!(svd_case(&case));
        }
    }
    assert!(checked >= 150, "only {checked} probes");
}

/// PyTorch's QR (LAPACK) leaves the signs of `diag(R)` to the Householder pivots; ours are
/// non-negative. With `D` those signs (constant, read off the tangent of `R` against the
/// file's), `Q_torch = Q·D` and `R_torch = D·R`, so the loss is `⟨Q̄·D, Q⟩ + ⟨D·R̄, R⟩`.
fn qr_case<const D: usize>(case: &OracleCase) -> usize {
    let be = Strided;
    let a = up::<D>(&case.inputs["a"], &autodiff()).require_grad();
    let sa = be.from_host(case.inputs["a"].clone()).unwrap();
    for p in &case.probes {
        let dir = be.from_host(p.direction["a"].clone()).unwrap();
        let (_, tan) = qr_frule(&be, &sa, &dir, QrMode::Reduced)
            .unwrap_or_else(|e| panic!("{}: {e}", case.id));
        let signs = row_signs(&be.to_host(&tan.r).unwrap(), &p.jvps["output_1"]);
        let qbar = scale(&p.cotangents["output_0"], &signs, true);
        let rbar = scale(&p.cotangents["output_1"], &signs, false);
        let f = qr(&a, QrMode::Reduced).unwrap();
        let loss = dot(f.q, &qbar) + dot(f.r, &rbar);
        check(case, &grad(&loss, &a, &case.id), &p.vjp["a"], "vjp a");
    }
    case.probes.len()
}

#[test]
fn qr_through_burn_backward_matches_the_oracle() {
    let checked: usize = cases("qr.jsonl").iter().map(|c| by_rank!(qr_case(c))).sum();
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
/// with burn's own transpose and add, so burn differentiates the wrapper too.
fn eigh_case<const D: usize>(case: &OracleCase) -> usize {
    let a = up::<D>(&case.inputs["a"], &autodiff()).require_grad();
    for p in &case.probes {
        let b = a.clone() + a.clone().swap_dims(D - 2, D - 1);
        let f = eigh(&b, RuleOptions::default()).unwrap_or_else(|e| panic!("{}: {e}", case.id));
        let loss =
            dot(f.values, &p.cotangents["values"]) + dot(f.vectors.abs(), &p.cotangents["vectors"]);
        check(case, &grad(&loss, &a, &case.id), &p.vjp["a"], "vjp a");
    }
    case.probes.len()
}

#[test]
fn eigh_through_burn_backward_matches_the_oracle() {
    let checked: usize = cases("eigh_values_vectors_abs.jsonl")
        .iter()
        .map(|c| by_rank!(eigh_case(c)))
        .sum();
    assert!(checked >= 16, "only {checked} probes");
}

fn randn(dims: &[usize], seed: u64) -> HostTensor {
    adrules_testing::random::Rng::seed(seed).tensor(dims, DType::F64)
}

#[test]
fn svd_inside_a_larger_graph_equals_the_core_rule_composed_by_hand() {
    // L = Σ W ⊙ (U·diag(S)²) + Σ tanh(Vh), A = X·Y: burn differentiates the product, the
    // square, tanh and the contractions; the SVD node in between
    let (dev, plain) = (autodiff(), Device::flex());
    let x = up::<2>(&randn(&[5, 3], 1), &dev).require_grad();
    let y = up::<2>(&randn(&[3, 4], 2), &dev);
    let w = up::<2>(&randn(&[5, 4], 3), &dev); // shaped as U: [m, k], k = min(5, 4)
    let a = x.clone().matmul(y.clone());
    let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
    assert_eq!(
        (f.u.dims(), f.s.dims(), f.vh.dims()),
        ([5, 4], [1, 4], [4, 4])
    );
    let us2 = f.u * f.s.powi_scalar(2); // S as a row broadcasts over U's rows
    let loss = (us2 * w.clone()).sum() + f.vh.tanh().sum();
    let got = down(x.grad(&try_backward(&loss).unwrap()).unwrap());

    // by hand on the strided backend: Ū = W·diag(S²), S̄ = 2·S∘Σᵢ(W∘U)ᵢ,
    // V̄h = 1 − tanh²(Vh), then Ā from the core's pullback and X̄ = Ā·Yᵀ
    let be = Strided;
    let sa = be.from_host(down(a.inner())).unwrap();
    let (g, pb) = svd_rrule(&be, &sa, SvdMode::Thin, RuleOptions::default()).unwrap();
    let plain_of = |t| up::<2>(&be.to_host(t).unwrap(), &plain);
    let (u, vh) = (plain_of(&g.u), plain_of(&g.vh));
    let s = up_as::<2>(&be.to_host(&g.s).unwrap(), &[1, 4], &plain);
    let w = w.inner();
    let ubar = w.clone() * s.clone().powi_scalar(2);
    let sbar = (w * u).sum_dim(0) * s * 2.0;
    let th = vh.tanh();
    let vhbar = th.clone().mul(th).neg().add_scalar(1.0);
    let strided = |t: Tensor<2>| be.from_host(down(t)).unwrap();
    let sbar = be.from_host(down(sbar.reshape([4]))).unwrap();
    let abar = pb
        .pullback(SvdCotangents {
            u: Some(&strided(ubar)),
            s: Some(&sbar),
            vh: Some(&strided(vhbar)),
            discarded: None,
        })
        .unwrap();
    let want = up::<2>(&be.to_host(&abar).unwrap(), &plain).matmul(y.inner().transpose());
    assert_close(TIGHT, &got, &down(want), "x̄ through svd");
}

#[test]
fn truncated_svd_takes_the_discarded_spectrum() {
    // ‖A − U_r S_r Vh_r‖² = Σ discarded²: its gradient is 2·(A − U_r S_r Vh_r) (Eckart–Young)
    let a = up::<2>(&randn(&[6, 4], 4), &autodiff()).require_grad();
    let t = svd_truncated(&a, Truncation::rank(2), RuleOptions::default()).unwrap();
    assert_eq!((t.rank, t.discarded.dims()), (2, [1, 2]));
    let loss = t.discarded.clone().powi_scalar(2).sum();
    let got = down(a.grad(&try_backward(&loss).unwrap()).unwrap());
    let low = (t.svd.u * t.svd.s).matmul(t.svd.vh);
    let want = down(((a.clone() - low) * 2.0).inner());
    assert_close(TIGHT, &got, &want, "gradient of the discarded weight");

    // without the discarded term: a loss of the kept factors only is fine (the discarded
    // values' cotangent is zero), one of the discarded values is a typed backward error
    let opts = RuleOptions {
        discarded_term: false,
        ..RuleOptions::default()
    };
    let t = svd_truncated(&a, Truncation::rank(2), opts).unwrap();
    let g = try_backward(&t.svd.s.sum()).unwrap();
    assert!(a.grad(&g).is_some());
    let t = svd_truncated(&a, Truncation::rank(2), opts).unwrap();
    match try_backward(&t.discarded.sum()) {
        Err(Error::InvalidArgument { arg, .. }) => assert_eq!(arg, "discarded_bar"),
        other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
    }
}

/// `diag(1, 1, 2)`: eigenvalues 1, 1, 2.
fn degenerate() -> Tensor<2> {
    let h = HostTensor::from_vec(&[3, 3], vec![1f64, 0., 0., 0., 1., 0., 0., 0., 2.]).unwrap();
    up::<2>(&h, &autodiff()).require_grad()
}

#[test]
fn a_gauge_dependent_loss_is_a_typed_error_from_backward() {
    // any basis of the first eigenspace will do, so Σ V[:, 0] is not a function of A
    let a = degenerate();
    let gauge_loss = || {
        eigh(&a, RuleOptions::default())
            .unwrap()
            .vectors
            .narrow(1, 0, 1)
            .sum()
    };
    match try_backward(&gauge_loss()) {
        Err(Error::GaugeIllDefined { arg, .. }) => assert_eq!(arg, "eigh"),
        other => panic!("expected GaugeIllDefined, got {:?}", other.map(|_| ())),
    }
    // through burn's own backward: a NaN-filled gradient, the error kept for this thread
    let grads = gauge_loss().backward();
    let g = down(a.grad(&grads).unwrap());
    assert!(re(&g).iter().all(|x| x.is_nan()), "{g:?}");
    let errors = take_backward_errors();
    assert!(
        matches!(errors.as_slice(), [Error::GaugeIllDefined { .. }]),
        "{errors:?}"
    );
    // the eigenvalues alone are fine: their gradient is V·diag(λ̄)·Vᵀ = the identity here
    let f = eigh(&a, RuleOptions::default()).unwrap();
    let g = down(a.grad(&try_backward(&f.values.sum()).unwrap()).unwrap());
    let eye = HostTensor::from_vec(&[3, 3], vec![1f64, 0., 0., 0., 1., 0., 0., 0., 1.]).unwrap();
    assert_close(TIGHT, &g, &eye, "gradient of Σ λ");
}

#[test]
fn constants_get_no_node_and_bad_input_is_a_typed_error() {
    // constants, on the plain and on the autodiff device: no node, plain values
    for device in [Device::flex(), autodiff()] {
        let a = up::<2>(&randn(&[4, 3], 5), &device);
        let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
        assert!(!f.u.is_tracked() && !f.s.is_tracked() && !f.vh.is_tracked());
        let q = qr(&a, QrMode::Complete).unwrap();
        assert_eq!((q.q.dims(), q.r.dims()), ([4, 4], [4, 3]));
        assert!(!q.q.is_tracked() && !q.r.is_tracked());
        // A = U·diag(S)·Vh from the values
        let back = down((f.u * f.s).matmul(f.vh).inner());
        assert_close(TIGHT, &back, &down(a.inner()), "U·S·Vh");
    }
    let dev = autodiff();
    // a vector, a non-square eigh, a non-finite entry, a non-symmetric eigh, a negative
    // broadening, a NaN truncation tolerance, half precision
    let v = up::<1>(&randn(&[4], 6), &dev).require_grad();
    let e = svd(&v, SvdMode::Thin, RuleOptions::default()).unwrap_err();
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
    let m = up::<2>(&randn(&[4, 3], 7), &dev).require_grad();
    let e = eigh(&m, RuleOptions::default()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let nan = (up::<2>(&randn(&[3, 3], 8), &dev) * f64::NAN).require_grad();
    let e = qr(&nan, QrMode::Reduced).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let skew = up::<2>(&randn(&[3, 3], 9), &dev).require_grad();
    let e = eigh(&skew, RuleOptions::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = svd(&m, SvdMode::Thin, RuleOptions::broadened(-1.0)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = svd_truncated(&m, Truncation::tolerance(f64::NAN), RuleOptions::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let half = m.clone().cast(BurnDType::F16);
    let e = svd(&half, SvdMode::Thin, RuleOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // nothing was recorded: m's graph is usable, and the operand unchanged
    assert_eq!(down(m.clone().inner()), randn(&[4, 3], 7));
    let f = svd(&m, SvdMode::Thin, RuleOptions::default()).unwrap();
    assert!(m.grad(&try_backward(&f.s.sum()).unwrap()).is_some());
    assert!(take_backward_errors().is_empty());
}

#[test]
#[allow(deprecated)] // burn-ndarray: a second, independent backend for the generic path
fn batched_svd_on_ndarray_matches_flex() {
    // the same gradient through burn's generic ops (NdArray) as through Flex, batched
    let h = randn(&[2, 3, 5, 4], 10);
    let run = |device: Device| {
        let a = up::<4>(&h, &device.autodiff()).require_grad();
        let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
        assert_eq!(f.s.dims(), [2, 3, 1, 4]);
        let loss = (f.u.abs() * f.s).sum() + f.vh.abs().sum();
        down(a.grad(&try_backward(&loss).unwrap()).unwrap())
    };
    assert_close(
        TIGHT,
        &run(Device::ndarray()),
        &run(Device::flex()),
        "ndarray vs flex",
    );
}

#[test]
fn eigh_clustered_through_burn_backward_equals_the_core_rule() {
    for dtype in [DType::F64, DType::F32] {
        let p = clustered_problem(dtype).unwrap();
        let dev = autodiff();
        let at = up::<3>(&p.a, &dev).require_grad();
        let gt = up::<2>(&p.g, &dev).require_grad();
        let f = eigh_clustered(&at, &gt, &p.opts, RuleOptions::default()).unwrap();
        assert!(f.info.iter().all(|i| i.sizes == [1, 2, 1]), "{:?}", f.info);
        assert!(f.basis.is_tracked() && f.corner.is_tracked() && !f.values.is_tracked());
        assert_eq!(f.values.dims(), [2, 1, 4]);
        // L = Σ W ⊙ W̄ + Σ C' ⊙ C̄
        let loss = dot(f.basis.clone(), &p.w_bar) + dot(f.corner, &p.c_bar);
        let grads = try_backward(&loss).unwrap();
        let got = down(at.grad(&grads).unwrap());
        // G is a constant: no gradient reaches it
        assert!(gt.grad(&grads).is_none());
        p.assert_matches(&got, &down(f.basis.inner()), &down(f.values.inner()));
    }
}

#[test]
fn eigh_clustered_bad_input_is_a_typed_error() {
    let p = clustered_problem(DType::F64).unwrap();
    let (a, g, opts) = (p.a, p.g, p.opts);
    let dev = autodiff();
    let at = up::<3>(&a, &dev).require_grad();
    let gt = up::<2>(&g, &dev);
    let rule = RuleOptions::default();
    // a non-symmetric A, a G that is not [n, n], keep = 0
    let skew = up::<2>(&randn(&[6, 6], 13), &dev).require_grad();
    let e = eigh_clustered(&skew, &gt, &opts, rule).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let small = up::<2>(&randn(&[5, 5], 14), &dev);
    let e = eigh_clustered(&at, &small, &opts, rule).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = eigh_clustered(&at, &gt, &ClusterOptions::new(0, 1e-3), rule).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // a G of another dtype than A is refused, not cast
    let g32 = up::<2>(&g.to_dtype_projected(DType::F32), &dev);
    let e = eigh_clustered(&at, &g32, &opts, rule).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "g"),
        "{e}"
    );
    assert!(take_backward_errors().is_empty());
}

#[test]
fn a_second_backward_through_the_same_graph_is_a_typed_error() {
    // burn keeps no graph after a backward pass and panics on a second one ("Burn does not
    // support retain_graph"); `try_backward` returns a typed error and leaves burn usable
    let dev = autodiff();
    let a = up::<2>(&randn(&[5, 4], 7), &dev).require_grad();
    let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
    let loss = f.s.sum();
    let first = down(a.grad(&try_backward(&loss).unwrap()).unwrap());
    let e = match try_backward(&loss) {
        Err(e) => e,
        Ok(_) => panic!("a second backward through a consumed graph was accepted"),
    };
    assert!(
        matches!(&e, Error::InvalidArgument { arg, reason } if arg == "loss"
            && reason.contains("already consumed")),
        "{e}"
    );
    // a fresh graph over the same leaf still differentiates, to the same gradient
    let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
    let again = down(a.grad(&try_backward(&f.s.sum()).unwrap()).unwrap());
    assert_eq!(again, first);
    assert!(take_backward_errors().is_empty());
}

#[test]
fn a_factor_used_twice_and_factors_left_unused_reach_the_pullback_once() {
    // L = Σ W ⊙ U + Σ U ⊙ U: burn sums U's two cotangents (Ū = W + 2·U), S and Vh take none
    let dev = autodiff();
    let a = up::<2>(&randn(&[5, 4], 7), &dev).require_grad();
    let w = up::<2>(&randn(&[5, 4], 8), &dev);
    let f = svd(&a, SvdMode::Thin, RuleOptions::default()).unwrap();
    let loss = (f.u.clone() * w.clone()).sum() + (f.u.clone() * f.u).sum();
    let got = down(a.grad(&try_backward(&loss).unwrap()).unwrap());

    let be = Strided;
    let sa = be.from_host(down(a.inner())).unwrap();
    let (g, pb) = svd_rrule(&be, &sa, SvdMode::Thin, RuleOptions::default()).unwrap();
    let u = up::<2>(&be.to_host(&g.u).unwrap(), &Device::flex());
    let ubar = be.from_host(down(w.inner() + u * 2.0)).unwrap();
    let cot = SvdCotangents {
        u: Some(&ubar),
        ..Default::default()
    };
    let want = be.to_host(&pb.pullback(cot).unwrap()).unwrap();
    assert_close(TIGHT, &got, &want, "ā with Ū only");
}

/// One dense op of an oracle case (`A` of rank `D`) through burn's graph: the gradient of
/// `Σⱼ ⟨cotangentⱼ, outputⱼ⟩` by `backward()`.
fn dense_vjp<const D: usize>(
    op: DenseOp,
    x: &[HostTensor],
    cots: &[HostTensor],
) -> Vec<HostTensor> {
    let a = up::<D>(&x[0], &autodiff()).require_grad();
    let loss = match op {
        DenseOp::Cholesky { upper } => dot(linalg::cholesky(&a, upper).unwrap(), &cots[0]),
        DenseOp::Det => dot(linalg::det(&a).unwrap(), &cots[0]),
        DenseOp::Slogdet => {
            let (sign, logabs) = linalg::slogdet(&a).unwrap();
            dot(sign, &cots[0]) + dot(logabs, &cots[1])
        }
        DenseOp::MatrixExp => dot(linalg::matrix_exp(&a).unwrap(), &cots[0]),
        DenseOp::Pinv { rtol } => dot(linalg::pinv(&a, rtol).unwrap(), &cots[0]),
        DenseOp::LuFactor => dot(linalg::lu_factor(&a).unwrap().0, &cots[0]),
        DenseOp::Solve => unreachable!("solve_vjp"),
    };
    vec![grad(&loss, &a, "dense")]
}

/// [`dense_vjp`] for the solve, `B` of rank `E`.
fn solve_vjp<const D: usize, const E: usize>(
    x: &[HostTensor],
    cots: &[HostTensor],
) -> Vec<HostTensor> {
    let a = up::<D>(&x[0], &autodiff()).require_grad();
    let b = up::<E>(&x[1], &autodiff()).require_grad();
    let loss = dot(linalg::solve(&a, &b).unwrap(), &cots[0]);
    let (za, zb) = (down(a.zeros_like().inner()), down(b.zeros_like().inner()));
    if !loss.is_tracked() {
        return vec![za, zb];
    }
    // one backward for both gradients (burn's graph is consumed by it)
    let grads = try_backward(&loss).unwrap_or_else(|e| panic!("solve: backward: {e}"));
    vec![
        a.grad(&grads).map_or(za, down),
        b.grad(&grads).map_or(zb, down),
    ]
}

#[test]
fn dense_ops_through_burn_backward_match_the_oracles() {
    let ran = engine_dense_oracle(&[DType::F32, DType::F64], 4, |op, x, c| {
        let ranks = (x[0].dims().len(), x.get(1).map(|b| b.dims().len()));
        Ok(match (op, ranks) {
            (DenseOp::Solve, (2, Some(1))) => solve_vjp::<2, 1>(x, c),
            (DenseOp::Solve, (2, Some(2))) => solve_vjp::<2, 2>(x, c),
            (DenseOp::Solve, (3, Some(2))) => solve_vjp::<3, 2>(x, c),
            (DenseOp::Solve, (3, Some(3))) => solve_vjp::<3, 3>(x, c),
            (DenseOp::Solve, (4, Some(3))) => solve_vjp::<4, 3>(x, c),
            (DenseOp::Solve, (4, Some(4))) => solve_vjp::<4, 4>(x, c),
            (_, (2, _)) => dense_vjp::<2>(op, x, c),
            (_, (3, _)) => dense_vjp::<3>(op, x, c),
            (_, (4, _)) => dense_vjp::<4>(op, x, c),
            r => panic!("ranks {r:?}"),
        })
    });
    assert!(ran >= 60, "{ran} cases");
}
