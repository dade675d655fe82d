//! The two paths of the batched contraction (direct loops for tiny slices, one GEMM per slice
//! for larger ones) against the naive reference, on transposed and strided operands, complex
//! with conjugation, and a NaN-filled C under a strong zero.

use std::sync::Arc;

use adrules_core::{Backend, Complex64, Conj, ContractSpec, DType, DynScalar, HostTensor};
use adrules_strided::{Strided, Tensor};
use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};

fn check(la: &str, lb: &str, lc: &str, da: &[usize], db: &[usize], dtype: DType, seed: u64) {
    let mut rng = Rng::seed(seed);
    let spec = ContractSpec::from_labels(la, lb, lc).unwrap();
    let dc = spec.output_dims(da, db).unwrap().to_vec();
    let (ha, hb) = (rng.tensor(da, dtype), rng.tensor(db, dtype));
    for (conj_a, conj_b) in [
        (Conj::No, Conj::No),
        (Conj::Yes, Conj::No),
        (Conj::No, Conj::Yes),
    ] {
        for (alpha, beta) in [
            (DynScalar::one(dtype), DynScalar::zero(dtype)),
            (DynScalar::F64(0.5), DynScalar::F64(-2.0)),
        ] {
            let hc = if beta.is_zero() {
                let nan = vec![Complex64::new(f64::NAN, f64::NAN); dc.iter().product()];
                HostTensor::new(&dc, adrules_core::HostData::from_c64_projected(&nan, dtype))
                    .unwrap()
            } else {
                rng.tensor(&dc, dtype)
            };
            let (ra, rb) = (Arc::new(ha.clone()), Arc::new(hb.clone()));
            let mut expected = Arc::new(hc.clone());
            ReferenceBackend
                .contract(&mut expected, &ra, &rb, &spec, conj_a, conj_b, alpha, beta)
                .unwrap();
            let expected = (*expected).clone();
            // A transposed in memory (its axes reversed), B plain
            let a_t = Strided.from_host(ha.clone()).unwrap();
            let rev: Vec<usize> = (0..da.len()).rev().collect();
            let p = adrules_core::Permutation::new(&rev).unwrap();
            let rev_dims: Vec<usize> = rev.iter().map(|&i| da[i]).collect();
            let mut t = Strided.zeros(&rev_dims, dtype).unwrap();
            let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
            Strided.add(&mut t, &a_t, &p, Conj::No, one, zero).unwrap();
            let a_rev: Tensor = t.permuted(&p).unwrap();
            for a in [&a_t, &a_rev] {
                let b = Strided.from_host(hb.clone()).unwrap();
                let mut c = Strided.from_host(hc.clone()).unwrap();
                Strided
                    .contract(&mut c, a, &b, &spec, conj_a, conj_b, alpha, beta)
                    .unwrap();
                let got = Strided.to_host(&c).unwrap();
                Tolerance::for_dtype(dtype)
                    .check(
                        &Value::Tensor(got),
                        &Value::Tensor(expected.clone()),
                        &format!(
                            "{la},{lb}->{lc} {dtype:?} {conj_a:?} {conj_b:?} {alpha:?} {beta:?}"
                        ),
                    )
                    .unwrap();
            }
        }
    }
}

#[test]
fn tiny_slices_run_as_loops_and_match_reference() {
    for dtype in [DType::F64, DType::C64, DType::F32] {
        check("ij", "ij", "ji", &[5, 7], &[5, 7], dtype, 1); // Hadamard: 1×1×1 slices
        check("bi", "bi", "b", &[6, 9], &[6, 9], dtype, 2); // row-wise dot
        check("bij", "bjk", "kbi", &[3, 2, 4], &[3, 4, 5], dtype, 3);
    }
}

#[test]
fn large_slices_run_as_gemms_and_match_reference() {
    for dtype in [DType::F64, DType::C64] {
        check("bij", "bjk", "bik", &[3, 9, 8], &[3, 8, 10], dtype, 4);
        check(
            "bhqd",
            "bhkd",
            "bhqk",
            &[2, 2, 9, 8],
            &[2, 2, 10, 8],
            dtype,
            5,
        );
        check("ibj", "bjk", "kbi", &[9, 2, 8], &[2, 8, 9], dtype, 6);
    }
}

/// Contractions without open axes (the element-wise and dot kernels, no GEMM): Hadamard
/// products, row-wise dots with the contracted axis inner or outer, inner products, extent-1
/// open axes, empty index spaces and empty sums, and sizes split over two threads.
#[test]
fn contractions_without_open_axes_match_reference() {
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    for dtype in [DType::F64, DType::C64, DType::F32, DType::C32] {
        check("ij", "ij", "ij", &[37, 29], &[37, 29], dtype, 11);
        check("bi", "bi", "b", &[3, 1003], &[3, 1003], dtype, 12);
        check("ib", "ib", "b", &[7, 13], &[7, 13], dtype, 13);
        check("ij", "ij", "", &[6, 11], &[6, 11], dtype, 14);
        check("ij", "ji", "", &[6, 11], &[11, 6], dtype, 15);
        check("abc", "abc", "ac", &[3, 5, 4], &[3, 5, 4], dtype, 16);
        check("iaj", "ibj", "ibaj", &[4, 1, 5], &[4, 1, 5], dtype, 17);
        check("bkl", "blk", "b", &[3, 4, 5], &[3, 5, 4], dtype, 18);
        check("ij", "ij", "ij", &[0, 3], &[0, 3], dtype, 19);
        check("bi", "bi", "b", &[4, 0], &[4, 0], dtype, 20);
    }
    two.install(|| {
        for dtype in [DType::F64, DType::C64] {
            check("ij", "ij", "ji", &[400, 400], &[400, 400], dtype, 21);
            check("bi", "bi", "b", &[300, 500], &[300, 500], dtype, 22);
            check("ib", "ib", "b", &[500, 300], &[500, 300], dtype, 23);
        }
    });
}
