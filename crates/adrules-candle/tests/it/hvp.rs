//! Second order on candle tensors (`network_hvp`, `einsum_hvp`): the HVP of
//! `φ = Σ c̄ ⊙ einsum(…)` against closed forms, tracked inputs read without their graph,
//! typed errors.

use adrules_candle::{adrules_error, einsum_hvp};
use adrules_core::Error;
use candle_core::{DType, Device, Tensor, Var};

fn t(v: &[f64], dims: &[usize]) -> Tensor {
    Tensor::from_slice(v, dims, &Device::Cpu).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.flatten_all().unwrap().to_vec1::<f64>().unwrap()
}

#[test]
fn matrix_product_hvp_is_the_closed_form() {
    let a = Var::from_tensor(&t(&[1.0, -2.0, 0.5, 3.0, 1.5, -1.0], &[2, 3])).unwrap();
    let b = t(
        &[
            0.2, 1.0, -0.5, 2.0, 1.0, 0.0, -1.0, 0.5, 3.0, -2.0, 1.0, 0.25,
        ],
        &[3, 4],
    );
    let cbar = t(&[1.0, 2.0, -1.0, 0.5, 0.0, -3.0, 1.0, 2.0], &[2, 4]);
    let da = t(&[0.5, 0.0, -1.0, 2.0, 1.0, 1.0], &[2, 3]);
    let db = t(
        &[1.0, -1.0, 0.0, 2.0, 0.5, 0.5, 1.0, -2.0, 0.0, 1.0, 1.0, 1.0],
        &[3, 4],
    );
    let h = einsum_hvp(
        "ij,jk->ik",
        &[a.as_tensor(), &b],
        &cbar,
        &[Some(&da), Some(&db)],
    )
    .unwrap();
    assert_eq!(h.len(), 2);
    // H·(dA, dB) = (c̄·dBᵀ, dAᵀ·c̄)
    let want_a = cbar.matmul(&db.t().unwrap()).unwrap();
    let want_b = da.t().unwrap().matmul(&cbar).unwrap();
    for (got, want) in h.iter().zip([want_a, want_b]) {
        assert_eq!(got.dims(), want.dims());
        assert_eq!(got.dtype(), DType::F64);
        for (g, w) in values(got).iter().zip(values(&want)) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
    }
    // a cubic φ = Σ c̄ ⊙ (x ⊙ x ⊙ x): the HVP is 6·c̄ ⊙ x ⊙ v
    let x = t(&[1.0, -2.0, 0.5], &[3]);
    let c = t(&[1.0, 0.5, -1.0], &[3]);
    let v = t(&[2.0, 1.0, 3.0], &[3]);
    let h = einsum_hvp(
        "i,i,i->i",
        &[&x, &x, &x],
        &c,
        &[Some(&v), Some(&v), Some(&v)],
    )
    .unwrap();
    let sum: Vec<f64> = (0..3)
        .map(|i| h.iter().map(|t| values(t)[i]).sum())
        .collect();
    for (i, s) in sum.iter().enumerate() {
        let want = 6.0 * values(&c)[i] * values(&x)[i] * values(&v)[i];
        assert!((s - want).abs() < 1e-12, "{s} vs {want}");
    }
}

#[test]
fn hvp_errors_are_typed() {
    let a = t(&[1.0; 6], &[2, 3]);
    let b = t(&[1.0; 12], &[3, 4]);
    let cbar = t(&[1.0; 8], &[2, 4]);
    let e = einsum_hvp("ij,jk->ik", &[&a, &b], &cbar, &[Some(&b), None]).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::ShapeMismatch { arg, .. }) if arg == "tangent 0"),
        "{e:?}"
    );
    let e = einsum_hvp("ij,jk->ik", &[&a, &b], &a, &[None, None]).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::ShapeMismatch { arg, .. }) if arg == "c_bar"),
        "{e:?}"
    );
    let e = einsum_hvp("ij,jk->ik", &[&a, &b], &cbar, &[None]).unwrap_err();
    assert!(
        matches!(adrules_error(&e), Some(Error::CountMismatch { arg, .. }) if arg == "tangents"),
        "{e:?}"
    );
}
