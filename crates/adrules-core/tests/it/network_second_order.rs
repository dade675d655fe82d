//! The network's second order beyond the conformance suite (which checks HVPs on every
//! backend): the dense Hessian, the general form with a cotangent tangent, the allocator
//! path, and the typed errors. Closed forms derived here.

use adrules_core::network::{Network, NetworkPlan, Order, SecondOrder};
use adrules_core::{Backend, Complex64, DType, Error, HostTensor};
use adrules_strided::{BufferPool, Strided};
use adrules_testing::Rng;

fn plan(subscripts: &str, dims: &[Vec<usize>]) -> NetworkPlan {
    NetworkPlan::new(&Network::einsum(subscripts).unwrap(), dims, &Order::Default).unwrap()
}

fn host(t: &<Strided as Backend>::Tensor) -> Vec<Complex64> {
    Strided.to_host(t).unwrap().data().to_c64_vec()
}

/// `φ(a, b) = Re⟨c̄, a·b⟩ = Σ_ik c̄_ik Σ_j a_ij b_jk` (real) has the Hessian
/// `∂²φ/∂a_ij∂b_jk = c̄_ik` and zero blocks `∂²φ/∂a∂a`, `∂²φ/∂b∂b`.
#[test]
fn dense_hessian_of_a_matrix_product_is_the_closed_form() {
    let (n, m, p) = (2, 3, 2);
    let pl = plan("ij,jk->ik", &[vec![n, m], vec![m, p]]);
    let mut rng = Rng::seed(3);
    let a = Strided.from_host(rng.tensor(&[n, m], DType::F64)).unwrap();
    let b = Strided.from_host(rng.tensor(&[m, p], DType::F64)).unwrap();
    let cbar_h = rng.tensor(&[n, p], DType::F64);
    let cbar_v = cbar_h.data().to_c64_vec();
    let cbar = Strided.from_host(cbar_h).unwrap();
    let h = pl
        .hessian(&Strided, &[&a, &b], &cbar, &[true, true])
        .unwrap();
    let d = n * m + m * p;
    assert_eq!(h.dims(), &[d, d]);
    assert_eq!(h.dtype(), DType::F64);
    let hv = h.as_slice::<f64>().unwrap();
    for r in 0..d {
        for c in 0..d {
            let want = match (r < n * m, c < n * m) {
                (true, false) => {
                    let (i, j) = (r / m, r % m);
                    let (j2, k) = ((c - n * m) / p, (c - n * m) % p);
                    if j == j2 { cbar_v[i * p + k].re } else { 0.0 }
                }
                (false, true) => {
                    let (i, j) = (c / m, c % m);
                    let (j2, k) = ((r - n * m) / p, (r - n * m) % p);
                    if j == j2 { cbar_v[i * p + k].re } else { 0.0 }
                }
                _ => 0.0,
            };
            assert!(
                (hv[r * d + c] - want).abs() < 1e-14,
                "H[{r},{c}] = {}",
                hv[r * d + c]
            );
        }
    }
}

/// A complex network's dense Hessian in real coordinates is symmetric and its columns are
/// the HVPs along the unit directions.
#[test]
fn complex_hessian_is_symmetric_in_real_coordinates() {
    let pl = plan("ij,jk,ki->", &[vec![2, 2], vec![2, 3], vec![3, 2]]);
    let mut rng = Rng::seed(4);
    let xs: Vec<_> = [[2, 2], [2, 3], [3, 2]]
        .iter()
        .map(|d| Strided.from_host(rng.tensor(d, DType::C64)).unwrap())
        .collect();
    let refs: Vec<_> = xs.iter().collect();
    let cbar = Strided.from_host(rng.tensor(&[], DType::C64)).unwrap();
    let active = [true, false, true];
    let h = pl.hessian(&Strided, &refs, &cbar, &active).unwrap();
    let d = 2 * (4 + 6);
    assert_eq!(h.dims(), &[d, d]);
    let hv = h.as_slice::<f64>().unwrap();
    let scale = hv.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(scale > 0.1);
    for r in 0..d {
        for c in 0..d {
            assert!(
                (hv[r * d + c] - hv[c * d + r]).abs() < 1e-13 * scale,
                "H[{r},{c}]"
            );
        }
    }
    // column 1 (the imaginary part of a[0,0]) is the HVP along i·e_0 of operand 0
    let mut e = HostTensor::zeros(&[2, 2], DType::C64).unwrap();
    e.data_mut()
        .set_projected(0, adrules_core::DynScalar::C64(Complex64::new(0.0, 1.0)))
        .unwrap();
    let e = Strided.from_host(e).unwrap();
    let r = pl
        .hvp(&Strided, &refs, &cbar, &[Some(&e), None, None], &active)
        .unwrap();
    assert!(r.hvp[1].is_none());
    let h0 = host(r.hvp[0].as_ref().unwrap());
    let h2 = host(r.hvp[2].as_ref().unwrap());
    let col: Vec<f64> = h0.iter().chain(&h2).flat_map(|z| [z.re, z.im]).collect();
    for (row, v) in col.iter().enumerate() {
        assert!((hv[row * d + 1] - v).abs() < 1e-13 * scale);
    }
}

/// The general form: with zero operand tangents the result is the pullback of `C̄̇` (the
/// pullback is linear in the cotangent); with the pooled allocator the results are those of
/// the heap.
#[test]
fn cotangent_tangent_and_allocator() {
    let pl = plan(
        "abc,bde,cdf->aef",
        &[vec![3, 4, 2], vec![4, 3, 2], vec![2, 3, 3]],
    );
    let mut rng = Rng::seed(5);
    let dims = [[3, 4, 2], [4, 3, 2], [2, 3, 3]];
    let xs: Vec<_> = dims
        .iter()
        .map(|d| Strided.from_host(rng.tensor(d, DType::F64)).unwrap())
        .collect();
    let vs: Vec<_> = dims
        .iter()
        .map(|d| Strided.from_host(rng.tensor(d, DType::F64)).unwrap())
        .collect();
    let refs: Vec<_> = xs.iter().collect();
    let cbar = Strided
        .from_host(rng.tensor(&[3, 2, 3], DType::F64))
        .unwrap();
    let w = Strided
        .from_host(rng.tensor(&[3, 2, 3], DType::F64))
        .unwrap();
    let all = [true; 3];
    let none = [None, None, None];
    let request = SecondOrder {
        c_bar: &cbar,
        c_bar_dot: Some(&w),
        tangents: &none,
        active: &all,
        gradient: true,
    };
    let r = pl
        .second_order(&Strided, &adrules_core::HeapAllocator, &refs, &request)
        .unwrap();
    let (_, pb) = pl.rrule(&Strided, &refs, &all).unwrap();
    let want = pb.pullback(&w).unwrap();
    let grad = pb.pullback(&cbar).unwrap();
    for k in 0..3 {
        let (g, wg) = (
            host(r.hvp[k].as_ref().unwrap()),
            host(want[k].as_ref().unwrap()),
        );
        assert!(g.iter().zip(&wg).all(|(a, b)| (a - b).norm() < 1e-12));
        let (g, wg) = (
            host(r.gradient[k].as_ref().unwrap()),
            host(grad[k].as_ref().unwrap()),
        );
        assert!(g.iter().zip(&wg).all(|(a, b)| (a - b).norm() < 1e-12));
    }
    // pooled intermediates give the same HVP as the heap
    let tangents: Vec<_> = vs.iter().map(Some).collect();
    let heap = pl.hvp(&Strided, &refs, &cbar, &tangents, &all).unwrap();
    let pool = BufferPool::new();
    let request = SecondOrder {
        c_bar: &cbar,
        c_bar_dot: None,
        tangents: &tangents,
        active: &all,
        gradient: false,
    };
    let pooled = pl.second_order(&Strided, &pool, &refs, &request).unwrap();
    for k in 0..3 {
        assert_eq!(
            host(heap.hvp[k].as_ref().unwrap()),
            host(pooled.hvp[k].as_ref().unwrap())
        );
        assert!(pooled.gradient[k].is_none());
    }
}

#[test]
fn second_order_errors_are_typed() {
    let pl = plan("ij,jk->ik", &[vec![2, 3], vec![3, 4]]);
    let mut rng = Rng::seed(6);
    let t = |rng: &mut Rng, d: &[usize]| Strided.from_host(rng.tensor(d, DType::F64)).unwrap();
    let (a, b, c) = (
        t(&mut rng, &[2, 3]),
        t(&mut rng, &[3, 4]),
        t(&mut rng, &[2, 4]),
    );
    let (a_before, b_before) = (host(&a), host(&b));
    let wrong = t(&mut rng, &[3, 2]);
    let e = pl
        .hvp(&Strided, &[&a, &b], &c, &[None], &[true, true])
        .unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { ref arg, .. } if arg == "tangents"),
        "{e:?}"
    );
    let e = pl
        .hvp(&Strided, &[&a, &b], &c, &[None, None], &[true])
        .unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { ref arg, .. } if arg == "active"),
        "{e:?}"
    );
    let e = pl
        .hvp(
            &Strided,
            &[&a, &b],
            &c,
            &[Some(&wrong), None],
            &[true, true],
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "tangent 0"),
        "{e:?}"
    );
    let e = pl
        .hvp(&Strided, &[&a, &b], &a, &[None, None], &[true, true])
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "c_bar"),
        "{e:?}"
    );
    let cz = Strided.from_host(rng.tensor(&[2, 4], DType::C64)).unwrap();
    let e = pl
        .hvp(&Strided, &[&a, &b], &cz, &[None, None], &[true, true])
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { ref arg, .. } if arg == "c_bar"),
        "{e:?}"
    );
    let e = pl.hessian(&Strided, &[&a, &b], &c, &[true]).unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { ref arg, .. } if arg == "active"),
        "{e:?}"
    );
    assert_eq!(host(&a), a_before);
    assert_eq!(host(&b), b_before);
}
