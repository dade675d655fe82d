//! Value semantics (copy-on-write), strong zeros, every error the backend returns, ndarray and
//! host interop without copies, high ranks, and the multi-threaded paths of large problems.

use std::sync::Arc;

use adrules_core::{
    Backend, Complex32, Complex64, Conj, ContractSpec, DType, DynScalar, Error, HostData,
    HostTensor, Permutation, TraceSpec,
};
use adrules_strided::{Storage, Strided, StridedView, StridedViewMut, Tensor, kernels};
use ndarray::{Array, Array2, ArrayView2, ArrayViewMut2, IxDyn, s};

mod errors;

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

fn buffer_ptr(t: &Tensor) -> *const u8 {
    match t.storage() {
        Storage::F32(b) => b.as_ptr().cast(),
        Storage::F64(b) => b.as_ptr().cast(),
        Storage::C32(b) => b.as_ptr().cast(),
        Storage::C64(b) => b.as_ptr().cast(),
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

// ---------------------------------------------------------------- copy-on-write

#[test]
fn updates_never_reach_other_handles() {
    let be = Strided;
    let a = Tensor::from_vec(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let mut c = a.clone();
    assert!(c.shares_storage(&a));
    be.scale(&mut c, 2.0.into()).unwrap();
    assert!(!c.shares_storage(&a));
    assert_eq!(f64s(&a), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(f64s(&c), vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);

    // A transposed handle sharing the buffer, written through view_mut: the copy keeps the
    // transposed axis order, the original is untouched.
    let mut t = a.permuted(&Permutation::new(&[1, 0]).unwrap()).unwrap();
    kernels::scale(&mut t.view_mut::<f64>().unwrap(), -1.0);
    assert_eq!(f64s(&t), vec![-1.0, -4.0, -2.0, -5.0, -3.0, -6.0]);
    assert_eq!(t.strides(), &[1, 3]);
    assert_eq!(f64s(&a), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

    // β = 0 into a shared C: the other handle keeps its values.
    let mut c = a.clone();
    let keep = c.clone();
    be.add(
        &mut c,
        &Tensor::from_vec(&[2, 3], vec![0.5; 6]).unwrap(),
        &Permutation::identity(2),
        Conj::No,
        1.0.into(),
        0.0.into(),
    )
    .unwrap();
    assert_eq!(f64s(&c), vec![0.5; 6]);
    assert_eq!(f64s(&keep), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn unique_outputs_are_updated_in_place() {
    let be = Strided;
    let mut c = Tensor::zeros(&[3, 4], DType::C64).unwrap();
    let before = buffer_ptr(&c);
    let a = Tensor::from_vec(&[4, 3], vec![1.0f32; 12]).unwrap();
    be.add(
        &mut c,
        &a,
        &Permutation::new(&[1, 0]).unwrap(),
        Conj::Yes,
        2.0.into(),
        1.0.into(),
    )
    .unwrap();
    assert_eq!(buffer_ptr(&c), before);
    assert_eq!(
        c.to_vec::<Complex64>().unwrap(),
        vec![Complex64::new(2.0, 0.0); 12]
    );
}

#[test]
fn broadcast_tensors_are_read_and_materialised_on_write() {
    let base = Tensor::from_vec(&[3], vec![1.0, 2.0, 3.0]).unwrap();
    // a 2×3 view repeating the vector (stride 0 along axis 0)
    let mut b = base.strided(&[2, 3], &[0, 1], 0).unwrap();
    assert_eq!(f64s(&b), vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    kernels::scale(&mut b.view_mut::<f64>().unwrap(), 10.0);
    assert_eq!(f64s(&b), vec![10.0, 20.0, 30.0, 10.0, 20.0, 30.0]);
    assert_eq!(f64s(&base), vec![1.0, 2.0, 3.0]);
}

// ---------------------------------------------------------------- strong zero

#[test]
fn beta_zero_is_a_strong_zero() {
    let be = Strided;
    let nan =
        |dims: &[usize]| Tensor::from_vec(dims, vec![f64::NAN; dims.iter().product()]).unwrap();
    let a = Tensor::from_vec(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();

    let mut c = nan(&[2, 2]);
    be.add(
        &mut c,
        &a,
        &Permutation::new(&[1, 0]).unwrap(),
        Conj::No,
        2.0.into(),
        0.0.into(),
    )
    .unwrap();
    assert_eq!(f64s(&c), vec![2.0, 6.0, 4.0, 8.0]);

    let mut c = nan(&[]);
    be.trace(
        &mut c,
        &a,
        &TraceSpec::new(&[], &[0], &[1]).unwrap(),
        Conj::No,
        1.0.into(),
        0.0.into(),
    )
    .unwrap();
    assert_eq!(be.scalar(&c).unwrap(), DynScalar::F64(5.0));

    let mut c = nan(&[2, 2]);
    let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    be.contract(
        &mut c,
        &a,
        &a,
        &spec,
        Conj::No,
        Conj::No,
        1.0.into(),
        0.0.into(),
    )
    .unwrap();
    assert_eq!(f64s(&c), vec![7.0, 10.0, 15.0, 22.0]);

    // a C that is not a matrix for GEMM (the temporary path) and β = 0
    let mut c = nan(&[2, 2])
        .permuted(&Permutation::new(&[1, 0]).unwrap())
        .unwrap();
    be.contract(
        &mut c,
        &a,
        &a,
        &spec,
        Conj::No,
        Conj::No,
        1.0.into(),
        0.0.into(),
    )
    .unwrap();
    assert_eq!(f64s(&c), vec![7.0, 10.0, 15.0, 22.0]);

    let mut c = nan(&[3, 2]);
    be.scale(&mut c, 0.0.into()).unwrap();
    assert_eq!(f64s(&c), vec![0.0; 6]);

    // zero contracted dimension: C ← β·C
    let mut c = nan(&[2, 2]);
    let empty = Tensor::zeros(&[2, 0], DType::F64).unwrap();
    let empty_b = Tensor::zeros(&[0, 2], DType::F64).unwrap();
    be.contract(
        &mut c,
        &empty,
        &empty_b,
        &spec,
        Conj::No,
        Conj::No,
        1.0.into(),
        0.0.into(),
    )
    .unwrap();
    assert_eq!(f64s(&c), vec![0.0; 4]);
}

// ---------------------------------------------------------------- errors

fn arg_of(e: &Error) -> String {
    match e {
        Error::RankMismatch { arg, .. }
        | Error::ShapeMismatch { arg, .. }
        | Error::DTypeMismatch { arg, .. }
        | Error::InvalidArgument { arg, .. }
        | Error::CountMismatch { arg, .. } => arg.clone(),
        Error::Aliasing { output, input } => format!("{output}/{input}"),
        other => panic!("unexpected error {other}"),
    }
}

/// Shapes whose element count overflows, and allocations the system cannot serve, are typed
/// errors at every entry point (host data, `from_host`, `zeros`), never a wrapped count, a
/// panic or an abort.
#[test]
fn huge_shapes_and_failed_allocations_are_typed_errors() {
    let be = Strided;
    let dims_err = |e: Error| {
        assert!(
            matches!(e, Error::InvalidArgument { ref arg, .. } if arg == "dims"),
            "{e}"
        )
    };
    // usize::MAX² wraps to 1 without a checked product.
    dims_err(HostTensor::new(&[usize::MAX, usize::MAX], HostData::F64(vec![1.0])).unwrap_err());
    dims_err(HostTensor::from_vec::<f64>(&[1 << 63, 2], vec![]).unwrap_err());
    dims_err(HostTensor::zeros(&[usize::MAX, 2], DType::F64).unwrap_err());
    // A zero-size tensor is fine, but not with an axis whose strides would overflow.
    assert!(HostTensor::zeros(&[0, 3], DType::F64).unwrap().is_empty());
    dims_err(HostTensor::zeros(&[0, usize::MAX], DType::F64).unwrap_err());
    // 512 TiB, beyond a 47-bit address space whatever the overcommit policy: the allocator
    // refuses, and that is an error, not an abort.
    dims_err(Tensor::zeros(&[1 << 46], DType::F64).unwrap_err());
    dims_err(be.zeros(&[1 << 45], DType::C64).unwrap_err());
    dims_err(HostTensor::zeros(&[1 << 46], DType::F64).unwrap_err());
}

// ---------------------------------------------------------------- interop

#[test]
fn ndarray_views_convert_without_copies() {
    let arr = Array2::from_shape_fn((4, 5), |(i, j)| (10 * i + j) as f64);
    let rev: ArrayView2<f64> = arr.slice(s![..;-1, 1..;2]);
    let v = StridedView::from(rev);
    assert_eq!(v.as_ptr(), rev.as_ptr());
    assert_eq!(v.dims(), rev.shape());
    assert_eq!(v.strides(), rev.strides());
    assert_eq!(v.get(&[0, 1]), Some(33.0));
    let back = v.to_ndarray();
    assert_eq!(back.as_ptr(), rev.as_ptr());
    assert_eq!(back, rev.into_dyn());

    // mutable round trip: write through the strided view, read through ndarray
    let mut arr = Array2::<Complex64>::zeros((3, 4));
    let ptr = arr.as_ptr();
    {
        let mut m = StridedViewMut::from(arr.slice_mut(s![.., ..;-1]));
        let src = StridedView::row_major(
            &[
                1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0,
            ],
            &[4, 3],
        )
        .unwrap();
        kernels::add(
            &mut m,
            &src,
            &Permutation::new(&[1, 0]).unwrap(),
            Conj::No,
            Complex64::new(0.0, 1.0),
            Complex64::new(0.0, 0.0),
        )
        .unwrap();
        let nd = m.into_ndarray();
        assert_eq!(nd[[1, 2]], Complex64::new(0.0, 8.0));
    }
    // arr[i, 3 - j] = i·src[j, i]: the reversed column order is visible through ndarray
    assert_eq!(arr[[0, 3]], Complex64::new(0.0, 1.0));
    assert_eq!(arr[[2, 0]], Complex64::new(0.0, 12.0));
    assert_eq!(arr.as_ptr(), ptr);
    let mut arr2 = Array2::<f32>::zeros((2, 2));
    let raw = arr2.as_mut_ptr();
    let vm: StridedViewMut<f32> = ArrayViewMut2::from(&mut arr2).into();
    let nd = vm.into_ndarray();
    assert_eq!(nd.as_ptr(), raw.cast_const());
}

#[test]
fn owned_data_moves_in_and_out_without_copies() {
    let arr = Array::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let p = arr.as_ptr();
    let t = Tensor::from(arr);
    assert_eq!(buffer_ptr(&t), p.cast());
    let back = t.into_ndarray::<f64>().unwrap();
    assert_eq!(back.as_ptr(), p);

    // a non-standard layout (reversed axis) moves in too, values intact
    let mut arr = Array2::from_shape_vec((2, 3), vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    arr.invert_axis(ndarray::Axis(1));
    let p = arr.as_ptr();
    let t = Tensor::from_ndarray(arr);
    assert_eq!(t.view::<f32>().unwrap().as_ptr(), p);
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]
    );

    let h = HostTensor::from_vec(&[3], vec![Complex32::new(1.0, 2.0); 3]).unwrap();
    let p = h.as_slice::<Complex32>().unwrap().as_ptr();
    let t = Tensor::from_host(h);
    assert_eq!(buffer_ptr(&t), p.cast());
    let shared = t.clone();
    let h = t.into_host().unwrap();
    // still shared with `shared`, so this one was copied
    assert_ne!(h.as_slice::<Complex32>().unwrap().as_ptr(), p);
    let h = shared.into_host().unwrap();
    assert_eq!(h.as_slice::<Complex32>().unwrap().as_ptr(), p);
}

// ---------------------------------------------------------------- ranks

#[test]
fn high_ranks_work() {
    let be = Strided;
    let rank = 17;
    let dims: Vec<usize> = (0..rank).map(|k| if k % 4 == 0 { 2 } else { 1 }).collect();
    let n: usize = dims.iter().product();
    let a = Tensor::from_vec(&dims, (0..n).map(|x| x as f64).collect()).unwrap();
    let p: Vec<usize> = (0..rank).rev().collect();
    let p = Permutation::new(&p).unwrap();
    let mut c = Tensor::zeros(&p.apply(&dims), DType::F64).unwrap();
    be.add(&mut c, &a, &p, Conj::No, 1.0.into(), 0.0.into())
        .unwrap();
    // reversing axes of a 2×2×2×2×2 tensor (plus unit axes) reverses the bits of the index
    let got = f64s(&c);
    for (i, g) in got.iter().enumerate() {
        let rev = (0..5).fold(0, |acc, b| acc | (((i >> b) & 1) << (4 - b)));
        assert_eq!(*g, rev as f64);
    }
    let spec = ContractSpec::new(
        &[],
        &(0..rank).collect::<Vec<_>>(),
        &(0..rank).collect::<Vec<_>>(),
        &[],
        &[],
    )
    .unwrap();
    let mut s = Tensor::zeros(&[], DType::F64).unwrap();
    be.contract(
        &mut s,
        &a,
        &a,
        &spec,
        Conj::No,
        Conj::No,
        1.0.into(),
        0.0.into(),
    )
    .unwrap();
    let sq: f64 = (0..n).map(|x| (x * x) as f64).sum();
    assert_eq!(be.scalar(&s).unwrap(), DynScalar::F64(sq));
}

// ---------------------------------------------------------------- large problems, threads

/// Naive permuted copy in row-major index order.
fn naive_permute<T: Copy>(a: &[T], dims: &[usize], p: &[usize]) -> Vec<T> {
    let sa = crate::support::common::rm(dims);
    let dc: Vec<usize> = p.iter().map(|&k| dims[k]).collect();
    let mut out = Vec::with_capacity(a.len());
    adrules_testing::reference::for_each_index(&dc, |i| {
        let off: isize = i
            .iter()
            .enumerate()
            .map(|(m, &x)| x as isize * sa[p[m]])
            .sum();
        out.push(a[off as usize]);
    });
    out
}

#[test]
fn large_permutations_match_a_naive_loop_on_two_threads() {
    pool(2).install(|| {
        // f64 plain copy of 16 MiB: streaming stores, split across threads
        let dims = [64, 32, 64, 16];
        let p = [3, 1, 0, 2];
        let n: usize = dims.iter().product();
        let a: Vec<f64> = (0..n).map(|x| x as f64).collect();
        let mut c = vec![0.0; n];
        let pdims: Vec<usize> = p.iter().map(|&k| dims[k]).collect();
        kernels::add(
            &mut StridedViewMut::row_major(&mut c, &pdims).unwrap(),
            &StridedView::row_major(&a, &dims).unwrap(),
            &Permutation::new(&p).unwrap(),
            Conj::No,
            1.0,
            0.0,
        )
        .unwrap();
        assert!(c == naive_permute(&a, &dims, &p));

        // c64 with conjugation, α and β: the buffered tile path, on a reversed output
        let dims = [40, 3, 70];
        let p = [2, 1, 0];
        let n: usize = dims.iter().product();
        let a: Vec<Complex64> = (0..n).map(|x| Complex64::new(x as f64, 1.0)).collect();
        let mut c = vec![Complex64::new(1.0, 1.0); n];
        let pdims: Vec<usize> = p.iter().map(|&k| dims[k]).collect();
        let mut cv = StridedViewMut::new(&mut c, &pdims, &[-(3 * 40), -40, -1], n - 1).unwrap();
        let (alpha, beta) = (Complex64::new(0.5, -1.0), Complex64::new(2.0, 0.0));
        kernels::add(
            &mut cv,
            &StridedView::row_major(&a, &dims).unwrap(),
            &Permutation::new(&p).unwrap(),
            Conj::Yes,
            alpha,
            beta,
        )
        .unwrap();
        let expected = naive_permute(&a, &dims, &p);
        for (i, e) in expected.iter().enumerate() {
            assert_eq!(
                c[n - 1 - i],
                beta * Complex64::new(1.0, 1.0) + alpha * e.conj()
            );
        }

        // f32 transposes with odd sizes (edges of the 16×16 register tiles)
        for (r, k) in [(1000, 1003), (17, 4099)] {
            let a: Vec<f32> = (0..r * k).map(|x| x as f32).collect();
            let mut c = vec![0.0f32; r * k];
            kernels::add(
                &mut StridedViewMut::row_major(&mut c, &[k, r]).unwrap(),
                &StridedView::row_major(&a, &[r, k]).unwrap(),
                &Permutation::new(&[1, 0]).unwrap(),
                Conj::No,
                1.0,
                0.0,
            )
            .unwrap();
            assert!(c == naive_permute(&a, &[r, k], &[1, 0]));
        }
    });
}

#[test]
fn large_reductions_and_contractions_are_correct_and_deterministic() {
    pool(2).install(|| {
        let n = 1 << 20;
        let x: Vec<f64> = (0..n).map(|i| ((i % 7) as f64) - 3.0).collect();
        let y: Vec<f32> = (0..n).map(|i| ((i % 5) as f32) * 0.5).collect();
        let xv = StridedView::row_major(&x, &[1024, 1024]).unwrap();
        let yv = StridedView::row_major(&y, &[1024, 1024]).unwrap();
        let s1: f64 = kernels::inner(&xv, &yv).unwrap();
        let s2: f64 = kernels::inner(&xv, &yv).unwrap();
        assert_eq!(s1.to_bits(), s2.to_bits());
        let exact: f64 = x.iter().zip(&y).map(|(a, b)| a * *b as f64).sum();
        assert!((s1 - exact).abs() < 1e-9 * (1.0 + exact.abs()));

        // GEMM on the rayon pool (m·n·k = 2^21), operands read in place, C transposed
        let (m, k, nn) = (128, 128, 128);
        let a: Vec<f64> = (0..m * k).map(|i| (i % 11) as f64).collect();
        let b: Vec<f64> = (0..k * nn).map(|i| (i % 13) as f64).collect();
        let mut c = vec![f64::NAN; m * nn];
        let spec = ContractSpec::from_labels("ik", "kj", "ji").unwrap();
        kernels::contract(
            &mut StridedViewMut::row_major(&mut c, &[nn, m]).unwrap(),
            &StridedView::row_major(&a, &[m, k]).unwrap(),
            &StridedView::row_major(&b, &[k, nn]).unwrap(),
            &spec,
            Conj::No,
            Conj::No,
            1.0,
            0.0,
        )
        .unwrap();
        for i in (0..m).step_by(7) {
            for j in (0..nn).step_by(5) {
                let e: f64 = (0..k).map(|l| a[i * k + l] * b[l * nn + j]).sum();
                assert_eq!(c[j * m + i], e);
            }
        }
    });
}

#[test]
fn contraction_orders_and_temporaries_are_exercised() {
    // abcd,cdef->abef style with permuted operands: some plans read in place, some copy
    let be = Strided;
    let d = 5;
    let vals = |seed: u64| {
        crate::support::common::values(seed, d * d * d * d)
            .into_iter()
            .map(|z| z.re)
            .collect::<Vec<f64>>()
    };
    let a = Tensor::from_vec(&[d, d, d, d], vals(1)).unwrap();
    let b = Tensor::from_vec(&[d, d, d, d], vals(2)).unwrap();
    let reference = adrules_testing::ReferenceBackend;
    let ha = Arc::new(a.to_host().unwrap());
    let hb = Arc::new(b.to_host().unwrap());
    for labels in [
        ("abcd", "cdef", "abef"),
        ("abcd", "cdef", "feba"),
        ("abcd", "dcfe", "aebf"),
        ("cabd", "efcd", "baef"),
        ("abcd", "efgh", "abcdefgh"),
    ] {
        let spec = ContractSpec::from_labels(labels.0, labels.1, labels.2).unwrap();
        let dc = spec.output_dims(a.dims(), b.dims()).unwrap();
        let mut c = Tensor::zeros(&dc, DType::F64).unwrap();
        be.contract(
            &mut c,
            &a,
            &b,
            &spec,
            Conj::No,
            Conj::No,
            2.0.into(),
            0.0.into(),
        )
        .unwrap();
        let mut hc = Arc::new(HostTensor::zeros(&dc, DType::F64).unwrap());
        reference
            .contract(
                &mut hc,
                &ha,
                &hb,
                &spec,
                Conj::No,
                Conj::No,
                2.0.into(),
                0.0.into(),
            )
            .unwrap();
        let (got, want) = (f64s(&c), hc.as_slice::<f64>().unwrap().to_vec());
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() < 1e-12 * (1.0 + w.abs()) * 25.0,
                "{labels:?}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn batched_contractions_match_reference() {
    // Open axes that do not fuse (a outside c, d, e) make TTGT run one GEMM per index of a
    // (in A's or in B's group) instead of packing a copy.
    let be = Strided;
    let reference = adrules_testing::ReferenceBackend;
    let d = 16;
    for (la, lb, lc) in [
        ("acde", "cdf", "aef"),
        ("abc", "bde", "acde"),
        ("cdf", "acde", "fae"),
    ] {
        for dtype in [DType::F64, DType::C64] {
            let spec = ContractSpec::from_labels(la, lb, lc).unwrap();
            let make = |labels: &str, seed: u64| {
                let dims = vec![d; labels.len()];
                let v = crate::support::common::values(seed, dims.iter().product());
                let t = match dtype {
                    DType::F64 => {
                        Tensor::from_vec(&dims, v.iter().map(|z| z.re).collect()).unwrap()
                    }
                    _ => Tensor::from_vec(&dims, v).unwrap(),
                };
                let h = Arc::new(t.to_host().unwrap());
                (t, h)
            };
            let ((a, ha), (b, hb), (mut c, mut hc)) = (make(la, 1), make(lb, 2), make(lc, 3));
            let (alpha, beta) = match dtype {
                DType::F64 => (DynScalar::F64(0.5), DynScalar::F64(-1.5)),
                _ => (
                    DynScalar::C64(Complex64::new(0.5, 1.0)),
                    DynScalar::C64(Complex64::new(0.0, -1.0)),
                ),
            };
            be.contract(&mut c, &a, &b, &spec, Conj::Yes, Conj::No, alpha, beta)
                .unwrap();
            reference
                .contract(&mut hc, &ha, &hb, &spec, Conj::Yes, Conj::No, alpha, beta)
                .unwrap();
            let got = c.to_host().unwrap().data().to_c64_vec();
            let want = hc.data().to_c64_vec();
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).norm() < 1e-12 * 256.0 * (1.0 + w.norm()),
                    "{la},{lb}->{lc} {dtype}: {g} vs {w}"
                );
            }
        }
    }
}
