//! Agreement across backends: a batched network's value and gradient, and an SVD and its
//! pullback, computed on every backend this build of the facade reaches (the reference always; strided, candle, burn on Flex, dfdx with their
//! features), compared with the reference backend's results.

use adrules::linalg::{RuleOptions, SvdCotangents, SvdMode, svd_rrule};
use adrules::network::PlanCache;
use adrules::{Backend, DType, HostTensor};
use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};

/// What each backend computes, as host tensors in a fixed order, each with its name.
fn results<B: Backend>(be: &B) -> Vec<(&'static str, HostTensor)> {
    let mut rng = Rng::seed(2026);
    let up = |h: &HostTensor| be.from_host(h.clone()).expect("upload");
    let down = |t: &B::Tensor| be.to_host(t).expect("download");
    let mut out = Vec::new();

    // A batched three-tensor chain: the value, and the gradient of ⟨W, C⟩ for every operand.
    let expr = "bij,bjk,kl->bil";
    let dims: [&[usize]; 3] = [&[2, 3, 4], &[2, 4, 5], &[5, 3]];
    let x: Vec<HostTensor> = dims.iter().map(|d| rng.tensor(d, DType::F64)).collect();
    let plan = PlanCache::global().einsum(expr, &dims).expect("plan");
    let xs: Vec<B::Tensor> = x.iter().map(up).collect();
    let refs: Vec<&B::Tensor> = xs.iter().collect();
    let (c, pb) = plan.rrule(be, &refs, &[true, true, true]).expect("rrule");
    let w = rng.tensor(&be.dims(&c), DType::F64);
    out.push(("network value", down(&c)));
    for (k, g) in pb
        .pullback(&up(&w))
        .expect("pullback")
        .into_iter()
        .enumerate()
    {
        let name = ["network Ā", "network B̄", "network C̄"][k];
        out.push((name, down(&g.expect("every operand is active"))));
    }

    // The SVD of a 5×3 matrix: singular values, and the pullback of Σ s.
    let a = rng.tensor(&[5, 3], DType::F64);
    let (svd, pb) = svd_rrule(be, &up(&a), SvdMode::Thin, RuleOptions::default()).expect("svd");
    out.push(("singular values", down(&svd.s)));
    let ones = up(&HostTensor::from_vec(&[3], vec![1.0f64; 3]).expect("dims"));
    let cot = SvdCotangents {
        u: None,
        s: Some(&ones),
        vh: None,
        discarded: None,
    };
    out.push((
        "SVD pullback of Σ s",
        down(&pb.pullback(cot).expect("pullback")),
    ));
    out
}

/// `results(be)` agrees with the reference backend's, entry by entry.
fn agrees<B: Backend>(be: &B) {
    let want = results(&ReferenceBackend);
    let got = results(be);
    assert_eq!(got.len(), want.len());
    let tol = Tolerance::for_dtype(DType::F64);
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        tol.check(&Value::Tensor(g.clone()), &Value::Tensor(w.clone()), name)
            .unwrap_or_else(|e| panic!("{}: {name}: {e}", be.name()));
    }
}

/// The reference computes what the formulas say: `Σ s` of the SVD has the cotangent `U·Vᵀ`
/// (an independent check that the computations are not trivially equal everywhere).
#[test]
fn the_reference_results_are_not_degenerate() {
    let r = results(&ReferenceBackend);
    for (name, t) in &r {
        let v = t.data().to_c64_vec();
        assert!(
            !v.is_empty() && v.iter().any(|z| z.norm() > 1e-3),
            "{name}: {v:?}"
        );
    }
}

#[cfg(feature = "strided")]
#[test]
fn strided_agrees_with_the_reference() {
    agrees(&adrules::strided::Strided);
}

#[cfg(feature = "candle")]
#[test]
fn candle_agrees_with_the_reference() {
    agrees(&adrules::candle::CandleBackend::cpu());
}

#[cfg(feature = "burn")]
#[test]
fn burn_agrees_with_the_reference() {
    use adrules::burn::BurnBackend;
    use adrules::burn::burn_flex::Flex;
    agrees(&BurnBackend::<Flex>::new(Default::default()));
}

#[cfg(feature = "dfdx")]
#[test]
fn dfdx_agrees_with_the_reference() {
    agrees(&adrules::dfdx::DfdxBackend::default());
}
