//! Contractions large enough for the kernel to repack an operand whose contracted index is
//! not its fastest (`k ≥ 384` with a free dimension of at least 128, see the contraction
//! kernel's `repack`), against the naive reference backend: row- and column-major outputs,
//! accumulation (β ≠ 0), conjugation flags, mixed dtypes (promotion while packing), and the
//! transposed products of a pullback (`Aᵀ·C̄`, `C̄·Bᵀ`).

use adrules_core::{
    Backend, Complex64, Conj, ContractSpec, DType, DynScalar, HostTensor, Permutation,
};
use adrules_strided::{Strided, Tensor};
use adrules_testing::{ReferenceBackend, Rng};

/// Largest |difference| over the largest |value| of the reference.
fn rel_err(ours: &HostTensor, reference: &HostTensor) -> f64 {
    let (a, b) = (ours.data().to_c64_vec(), reference.data().to_c64_vec());
    assert_eq!(a.len(), b.len());
    let scale = b.iter().map(|x| x.norm()).fold(0.0, f64::max).max(1e-300);
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).norm())
        .fold(0.0, f64::max)
        / scale
}

#[allow(clippy::too_many_arguments)]
fn check(
    labels: (&str, &str, &str),
    dims_a: &[usize],
    dims_b: &[usize],
    dims_c: &[usize],
    dtypes: (DType, DType, DType),
    conj: (Conj, Conj),
    c_col_major: bool,
    beta: f64,
) {
    let mut rng = Rng::seed(dims_a.iter().sum::<usize>() as u64 + 7);
    let (ha, hb, hc) = (
        rng.tensor(dims_a, dtypes.0),
        rng.tensor(dims_b, dtypes.1),
        rng.tensor(dims_c, dtypes.2),
    );
    let spec = ContractSpec::from_labels(labels.0, labels.1, labels.2).unwrap();
    let alpha = if dtypes.2.is_complex() {
        DynScalar::C64(Complex64::new(0.75, -0.5))
    } else {
        DynScalar::F64(0.75)
    };
    let beta = DynScalar::F64(beta);

    let be = Strided;
    let (a, b) = (
        be.from_host(ha.clone()).unwrap(),
        be.from_host(hb.clone()).unwrap(),
    );
    let mut c: Tensor = if c_col_major {
        // C laid out column-major: a row-major tensor of the reversed shape, transposed.
        let rev: Vec<usize> = dims_c.iter().rev().copied().collect();
        let t = be.zeros(&rev, dtypes.2).unwrap();
        let p = Permutation::new(&(0..dims_c.len()).rev().collect::<Vec<_>>()).unwrap();
        let mut t = t.permuted(&p).unwrap();
        be.add(
            &mut t,
            &be.from_host(hc.clone()).unwrap(),
            &Permutation::identity(dims_c.len()),
            Conj::No,
            DynScalar::F64(1.0),
            DynScalar::F64(0.0),
        )
        .unwrap();
        t
    } else {
        be.from_host(hc.clone()).unwrap()
    };
    be.contract(&mut c, &a, &b, &spec, conj.0, conj.1, alpha, beta)
        .unwrap();

    let rb = ReferenceBackend;
    let (ra, rbb) = (rb.from_host(ha).unwrap(), rb.from_host(hb).unwrap());
    let mut rc = rb.from_host(hc).unwrap();
    rb.contract(&mut rc, &ra, &rbb, &spec, conj.0, conj.1, alpha, beta)
        .unwrap();
    let err = rel_err(&be.to_host(&c).unwrap(), &rb.to_host(&rc).unwrap());
    let k: usize = dims_a.iter().product::<usize>() * dims_b.iter().product::<usize>()
        / dims_c.iter().product::<usize>();
    let k = (k as f64).sqrt();
    let eps = if [dtypes.0, dtypes.1, dtypes.2]
        .iter()
        .any(|d| !d.is_double())
    {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    };
    assert!(
        err < 50.0 * k * eps,
        "{labels:?} {dtypes:?} {conj:?} col-major C {c_col_major}: relative error {err:e}"
    );
}

#[test]
fn transposed_lhs_into_row_and_column_major_outputs() {
    // C[i, j] = Σ_k A[k, i]·B[k, j]: A's contracted index is its slow one.
    for c_col_major in [false, true] {
        for beta in [0.0, 1.0, -0.5] {
            check(
                ("ki", "kj", "ij"),
                &[400, 130],
                &[400, 140],
                &[130, 140],
                (DType::F64, DType::F64, DType::F64),
                (Conj::No, Conj::No),
                c_col_major,
                beta,
            );
        }
    }
}

#[test]
fn pullback_shaped_products_complex_and_mixed() {
    let c64 = (DType::C64, DType::C64, DType::C64);
    let conjs = [
        (Conj::No, Conj::No),
        (Conj::Yes, Conj::No),
        (Conj::No, Conj::Yes),
        (Conj::Yes, Conj::Yes),
    ];
    for conj in conjs {
        // B̄ = Aᵀ·C̄ for C = A·B, A: (a, k) with a = 16·25, as `abcd,cdef->abef` lowers.
        check(
            ("abk", "abj", "kj"),
            &[16, 25, 130],
            &[16, 25, 150],
            &[130, 150],
            c64,
            conj,
            false,
            0.0,
        );
        // Ā = C̄·Bᵀ, B: (k, j) row-major, so Bᵀ has the contracted index fastest
        check(
            ("ij", "kj", "ik"),
            &[150, 400],
            &[130, 400],
            &[150, 130],
            c64,
            conj,
            true,
            1.0,
        );
    }
    // promotion while packing: f32 and f64 operands into a c64 output
    check(
        ("ki", "kj", "ij"),
        &[390, 128],
        &[390, 129],
        &[128, 129],
        (DType::F32, DType::F64, DType::C64),
        (Conj::No, Conj::Yes),
        false,
        0.0,
    );
    check(
        ("ki", "kj", "ij"),
        &[390, 128],
        &[390, 129],
        &[128, 129],
        (DType::C32, DType::C32, DType::C32),
        (Conj::Yes, Conj::No),
        true,
        0.0,
    );
}
