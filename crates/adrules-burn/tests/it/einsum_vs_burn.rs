//! `adrules_burn::einsum` (one node of burn's graph, backward by the core's network
//! pullback, plan from the core's plan cache) against burn 0.22's own `Tensor::einsum`
//! autodiff (a chain of burn ops differentiated by burn) on the strings ML users write,
//! in f32 and f64, on Flex with autodiff. The loss is `Σ W ⊙ C` with a random weight `W`,
//! so the cotangent of `C` is not all ones; the primal and the gradients of both operands
//! are compared.
//!
//! burn's einsum accepts every string here (batch labels, attention, the two contractions
//! from burn users' models, diagonals, sums, implicit output, ellipsis with broadcasting),
//! so no case falls back to the adrules reference pullback. The five two-operand strings
//! are also checked, on both sides, against `adrules_testing::naive_einsum` (a brute-force
//! evaluator sharing no code with either), primal and gradients.
//!
//! Then the grammar on the adrules side (diagonal, sum, implicit output, ellipsis with
//! broadcasting) and its typed errors: a bad string, mismatched dimensions and a wrong
//! operand count are `adrules_core::Error`s, not panics.

use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_core::{Error, HostData, HostTensor};
use adrules_testing::{Rng, naive_einsum};

/// A tensor of shape `dims` with standard normal entries (seeded) on `device`.
fn random<const D: usize>(dims: [usize; D], dtype: BurnDType, seed: u64) -> Tensor<D> {
    let device = Device::flex().autodiff();
    let mut rng = Rng::seed(seed);
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    Tensor::<D>::from_data(TensorData::new(v, dims), (&device, dtype))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

/// Relative tolerance per dtype, against the largest magnitude of the reference (the
/// entries are sums of `d` products of normal samples: cancellation makes small entries
/// carry the absolute error of the large ones).
fn tolerance(dtype: BurnDType) -> f64 {
    match dtype {
        BurnDType::F32 => 2e-5,
        _ => 1e-12,
    }
}

fn assert_close(ours: &[f64], theirs: &[f64], dtype: BurnDType, what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths");
    let scale = theirs.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    let tol = tolerance(dtype) * scale;
    for (i, (x, y)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            (x - y).abs() <= tol,
            "{what}: element {i}: {x} vs {y} (tolerance {tol:e})"
        );
    }
}

/// The primal and the gradients of `Σ W ⊙ C` for both operands, `C = einsum(expr, a, b)`
/// by adrules (`ours`) or by burn.
fn run2<const DA: usize, const DB: usize, const DC: usize>(
    ours: bool,
    expr: &str,
    (a, b, w): (&Tensor<DA>, &Tensor<DB>, &Tensor<DC>),
) -> [Vec<f64>; 3] {
    let (a, b) = (a.clone().require_grad(), b.clone().require_grad());
    let c: Tensor<DC> = if ours {
        adrules_burn::einsum(expr, [(&a).into(), (&b).into()]).expect("valid einsum")
    } else {
        Tensor::<DC>::einsum(expr, [(&a).into(), (&b).into()])
    };
    let grads = (c.clone() * w.clone()).sum().backward();
    let ga = a.grad(&grads).expect("gradient of a");
    let gb = b.grad(&grads).expect("gradient of b");
    [values(c), values(ga), values(gb)]
}

/// The same for one operand.
fn run1<const DA: usize, const DC: usize>(
    ours: bool,
    expr: &str,
    (a, w): (&Tensor<DA>, &Tensor<DC>),
) -> [Vec<f64>; 2] {
    let a = a.clone().require_grad();
    let c: Tensor<DC> = if ours {
        adrules_burn::einsum(expr, [(&a).into()]).expect("valid einsum")
    } else {
        Tensor::<DC>::einsum(expr, [(&a).into()])
    };
    let grads = (c.clone() * w.clone()).sum().backward();
    [values(c), values(a.grad(&grads).expect("gradient of a"))]
}

/// `naive_einsum` (adrules-testing's brute-force evaluator, sharing no code with either
/// einsum) on f64 copies of `operands`.
fn naive(expr: &str, operands: &[(&[usize], &[f64])]) -> Vec<f64> {
    let hosts: Vec<HostTensor> = operands
        .iter()
        .map(|(dims, v)| HostTensor::new(dims, HostData::F64(v.to_vec())).expect("shape"))
        .collect();
    let refs: Vec<&HostTensor> = hosts.iter().collect();
    match naive_einsum(expr, &refs).expect("valid einsum").data() {
        HostData::F64(v) => v.clone(),
        other => panic!("naive einsum returned {:?}", other.dtype()),
    }
}

/// The primal and both gradients of `Σ W ⊙ C` from `naive_einsum`, for an explicit
/// two-operand string without ellipsis or repeated labels in which every label of an operand
/// is in the output or the other operand: then `∂L/∂A = einsum("out,B->A", W, B)` and
/// `∂L/∂B = einsum("out,A->B", W, A)`.
fn naive2(
    expr: &str,
    (da, a): (&[usize], &[f64]),
    (db, b): (&[usize], &[f64]),
    (dc, w): (&[usize], &[f64]),
) -> [Vec<f64>; 3] {
    let (lhs, out) = expr.split_once("->").expect("explicit output");
    let (la, lb) = lhs.split_once(',').expect("two operands");
    [
        naive(expr, &[(da, a), (db, b)]),
        naive(&format!("{out},{lb}->{la}"), &[(dc, w), (db, b)]),
        naive(&format!("{out},{la}->{lb}"), &[(dc, w), (da, a)]),
    ]
}

/// Compares adrules and burn on `expr` with operands of shapes `da`, `db` (output `dc`)
/// in f32 and f64; with `independent`, both also against [`naive2`].
fn check2<const DA: usize, const DB: usize, const DC: usize>(
    expr: &str,
    da: [usize; DA],
    db: [usize; DB],
    dc: [usize; DC],
    independent: bool,
) {
    for dtype in [BurnDType::F32, BurnDType::F64] {
        let (a, b, w) = (
            random(da, dtype, 1),
            random(db, dtype, 2),
            random(dc, dtype, 3),
        );
        let ours = run2(true, expr, (&a, &b, &w));
        let theirs = run2(false, expr, (&a, &b, &w));
        let truth = independent.then(|| {
            let (a, b, w) = (values(a), values(b), values(w));
            naive2(expr, (&da, &a), (&db, &b), (&dc, &w))
        });
        for (k, what) in ["primal", "gradient of a", "gradient of b"]
            .iter()
            .enumerate()
        {
            let what = format!("{expr} {dtype:?} {what}");
            assert_close(&ours[k], &theirs[k], dtype, &what);
            if let Some(truth) = &truth {
                assert_close(
                    &ours[k],
                    &truth[k],
                    dtype,
                    &format!("{what} (adrules vs naive)"),
                );
                assert_close(
                    &theirs[k],
                    &truth[k],
                    dtype,
                    &format!("{what} (burn vs naive)"),
                );
            }
        }
    }
    assert!(adrules_burn::take_backward_errors().is_empty());
}

fn check1<const DA: usize, const DC: usize>(expr: &str, da: [usize; DA], dc: [usize; DC]) {
    for dtype in [BurnDType::F32, BurnDType::F64] {
        let (a, w) = (random(da, dtype, 4), random(dc, dtype, 5));
        let ours = run1(true, expr, (&a, &w));
        let theirs = run1(false, expr, (&a, &w));
        for (k, what) in ["primal", "gradient of a"].iter().enumerate() {
            assert_close(
                &ours[k],
                &theirs[k],
                dtype,
                &format!("{expr} {dtype:?} {what}"),
            );
        }
    }
    assert!(adrules_burn::take_backward_errors().is_empty());
}

#[test]
fn batched_matmul_matches_burn() {
    check2("bij,bjk->bik", [3, 4, 5], [3, 5, 6], [3, 4, 6], true);
}

#[test]
fn attention_scores_match_burn() {
    check2(
        "bhqd,bhkd->bhqk",
        [2, 3, 4, 5],
        [2, 3, 6, 5],
        [2, 3, 4, 6],
        true,
    );
}

#[test]
fn attention_values_match_burn() {
    check2(
        "bhqk,bhkd->bhqd",
        [2, 3, 4, 6],
        [2, 3, 6, 5],
        [2, 3, 4, 5],
        true,
    );
}

#[test]
fn query_feature_map_contraction_matches_burn() {
    // queries against a feature map (DETR-style mask heads)
    check2(
        "bqc,bchw->bqhw",
        [2, 4, 3],
        [2, 3, 5, 6],
        [2, 4, 5, 6],
        true,
    );
}

#[test]
fn per_row_channel_mixing_matches_burn() {
    // a channel mixing with a weight per image row (relative position embeddings)
    check2(
        "bhwc,hkc->bhwk",
        [2, 3, 4, 5],
        [3, 6, 5],
        [2, 3, 4, 6],
        true,
    );
}

#[test]
fn grammar_diagonal_sum_implicit_and_ellipsis() {
    // diagonal and row sums, one operand
    check1("ii->i", [4, 4], [4]);
    check1("ij->i", [3, 5], [3]);
    // implicit output: the labels seen once, sorted ("ik")
    check2("ij,jk", [3, 4], [4, 5], [3, 5], false);
    // ellipsis with broadcasting: [2, 1] against [5] gives the batch [2, 5]
    check2(
        "...ij,...jk->...ik",
        [2, 1, 3, 4],
        [5, 4, 2],
        [2, 5, 3, 2],
        false,
    );

    // The implicit and the explicit form of the same network agree.
    let a = random([3, 4], BurnDType::F64, 6);
    let b = random([4, 5], BurnDType::F64, 7);
    let implicit: Tensor<2> = adrules_burn::einsum("ij,jk", [(&a).into(), (&b).into()]).unwrap();
    let explicit: Tensor<2> =
        adrules_burn::einsum("ij,jk->ik", [(&a).into(), (&b).into()]).unwrap();
    assert_eq!(implicit.dims(), [3, 5]);
    assert_close(
        &values(implicit),
        &values(explicit),
        BurnDType::F64,
        "implicit vs explicit",
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let a = random([3, 4], BurnDType::F64, 8).require_grad();
    let b = random([4, 5], BurnDType::F64, 9).require_grad();
    let c = random([5, 5], BurnDType::F64, 10);

    // an output label that no operand has
    let e = adrules_burn::einsum::<2, 2>("ij,jk->iz", [(&a).into(), (&b).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidLabel { arg, .. } if arg == "output"),
        "ij,jk->iz: {e:?}"
    );

    // a syntax error
    let e = adrules_burn::einsum::<2, 2>("ij,jk->->ik", [(&a).into(), (&b).into()]).unwrap_err();
    assert!(matches!(e, Error::Parse { .. }), "ij,jk->->ik: {e:?}");

    // j is 4 in a and 5 in c
    let e = adrules_burn::einsum::<2, 2>("ij,jk->ik", [(&a).into(), (&c).into()]).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }),
        "mismatched j: {e:?}"
    );

    // ellipsis dimensions that do not broadcast ([3] against [2])
    let x = random([3, 2, 2], BurnDType::F64, 11);
    let y = random([2, 2, 2], BurnDType::F64, 12);
    let e =
        adrules_burn::einsum::<2, 3>("...ij,...jk->...ik", [(&x).into(), (&y).into()]).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }),
        "ellipsis dims 3 vs 2: {e:?}"
    );

    // an operand of the wrong rank
    let e = adrules_burn::einsum::<2, 2>("ijk,jk->ik", [(&a).into(), (&b).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::RankMismatch { arg, expected: 3, actual: 2 } if arg == "operand 0"),
        "rank 2 for ijk: {e:?}"
    );

    // one operand too many, one too few
    let e = adrules_burn::einsum::<3, 2>("ij,jk->ik", [(&a).into(), (&b).into(), (&c).into()])
        .unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { .. }),
        "3 operands: {e:?}"
    );
    let e = adrules_burn::einsum::<1, 2>("ij,jk->ik", [(&a).into()]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::CountMismatch {
                expected: 2,
                actual: 1,
                ..
            }
        ),
        "1 operand: {e:?}"
    );

    // the wrong output rank for the string
    let e = adrules_burn::einsum::<2, 3>("ij,jk->ik", [(&a).into(), (&b).into()]).unwrap_err();
    assert!(
        matches!(&e, Error::RankMismatch { arg, expected: 2, actual: 3 } if arg == "output"),
        "output rank: {e:?}"
    );

    // Nothing was recorded: the leaves still differentiate as before.
    let grads = (a.clone() * 2.0).sum().backward();
    assert_eq!(values(a.grad(&grads).unwrap()), vec![2.0; 12]);
    assert!(b.grad(&grads).is_none());
    assert!(adrules_burn::take_backward_errors().is_empty());
}

/// torch's grammar beyond burn's own einsum (`adrules_testing::grammar`): an output `...`
/// when no operand has one is empty (`"R->..."` sums `[6]` to a scalar, `"O->...O"` is the
/// identity), `""` and `" "` return a rank-0 operand (shape `[1]` in burn). The primal and
/// the gradient of `Σ C̄ ⊙ C` through burn's backward, against the hand-computed values, in
/// f32 and f64.
#[test]
fn empty_ellipsis_and_empty_strings_follow_torch() {
    use adrules_testing::grammar::empty_ellipsis_cases;
    let device = Device::flex().autodiff();
    let burn_dims = |h: &HostTensor| {
        if h.dims().is_empty() {
            vec![1]
        } else {
            h.dims().to_vec()
        }
    };
    let up = |h: &HostTensor, dtype: BurnDType| {
        let v = h
            .data()
            .to_c64_vec()
            .iter()
            .map(|z| z.re)
            .collect::<Vec<f64>>();
        Tensor::<1>::from_data(TensorData::new(v, burn_dims(h)), (&device, dtype))
    };
    let host = |h: &HostTensor| {
        h.data()
            .to_c64_vec()
            .iter()
            .map(|z| z.re)
            .collect::<Vec<f64>>()
    };
    for (dtype, ours) in [
        (BurnDType::F32, adrules_core::DType::F32),
        (BurnDType::F64, adrules_core::DType::F64),
    ] {
        for case in empty_ellipsis_cases(ours) {
            let ctx = format!("{:?} {dtype:?}", case.subscripts);
            let x = up(&case.input, dtype).require_grad();
            let y: Tensor<1> = adrules_burn::einsum(case.subscripts, [(&x).into()])
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(y.dims().to_vec(), burn_dims(&case.output), "{ctx}: shape");
            assert_eq!(values(y.clone()), host(&case.output), "{ctx}: value");
            let grads = (y * up(&case.cotangent, dtype)).sum().backward();
            let g = x
                .grad(&grads)
                .unwrap_or_else(|| panic!("{ctx}: no gradient"));
            assert_eq!(values(g), host(&case.vjp), "{ctx}: gradient");
        }
    }
    assert!(adrules_burn::take_backward_errors().is_empty());
}
