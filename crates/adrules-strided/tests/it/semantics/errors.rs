//! Every error of the strided backend is typed and names its argument.

use super::*;

#[test]
fn every_error_is_typed_and_names_its_argument() {
    let be = Strided;
    let one = DynScalar::F64(1.0);
    let a = Tensor::from_vec(&[2, 3], vec![1.0; 6]).unwrap();
    let id2 = Permutation::identity(2);
    let t = Permutation::new(&[1, 0]).unwrap();
    let mut c = Tensor::zeros(&[3, 2], DType::F64).unwrap();

    // ranks and shapes
    let e = be
        .add(&mut c, &a, &Permutation::identity(3), Conj::No, one, one)
        .unwrap_err();
    assert!(
        matches!(e, Error::RankMismatch { .. }) && arg_of(&e) == "a",
        "{e}"
    );
    let mut c3 = Tensor::zeros(&[3, 2, 1], DType::F64).unwrap();
    let e = be.add(&mut c3, &a, &id2, Conj::No, one, one).unwrap_err();
    assert!(
        matches!(e, Error::RankMismatch { .. }) && arg_of(&e) == "c",
        "{e}"
    );
    let e = be.add(&mut c, &a, &id2, Conj::No, one, one).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && arg_of(&e) == "c",
        "{e}"
    );
    let e = be.scalar(&a).unwrap_err();
    assert!(
        matches!(e, Error::RankMismatch { .. }) && arg_of(&e) == "tensor",
        "{e}"
    );
    let e = a.permuted(&Permutation::identity(3)).unwrap_err();
    assert!(
        matches!(e, Error::RankMismatch { .. }) && arg_of(&e) == "permutation",
        "{e}"
    );
    let mut s0 = Tensor::zeros(&[], DType::F64).unwrap();
    let e = be
        .trace(
            &mut s0,
            &a,
            &TraceSpec::new(&[], &[0], &[1]).unwrap(),
            Conj::No,
            one,
            one,
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && arg_of(&e).starts_with("a"),
        "{e}"
    );
    let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    let mut c22 = Tensor::zeros(&[2, 2], DType::F64).unwrap();
    let e = be
        .contract(&mut c22, &a, &a, &spec, Conj::No, Conj::No, one, one)
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && arg_of(&e).starts_with("b"),
        "{e}"
    );
    let e = be.inner(&a, &c).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && arg_of(&e) == "y",
        "{e}"
    );
    let e = Tensor::from_vec(&[2, 2], vec![1.0f32; 3]).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && arg_of(&e) == "data",
        "{e}"
    );

    // dtypes
    let z = Tensor::from_vec(&[2, 3], vec![Complex64::new(1.0, 1.0); 6]).unwrap();
    let e = be.add(&mut c, &z, &t, Conj::No, one, one).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "a",
        "{e}"
    );
    let i = DynScalar::C64(Complex64::new(0.0, 1.0));
    let e = be.add(&mut c, &a, &t, Conj::No, i, one).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "alpha",
        "{e}"
    );
    let e = be.add(&mut c, &a, &t, Conj::No, one, i).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "beta",
        "{e}"
    );
    let e = be
        .add_projected(&mut c, &z, &t, Conj::No, i, i)
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "beta",
        "{e}"
    );
    let zt = Tensor::from_vec(&[3, 2], vec![Complex32::new(1.0, 1.0); 6]).unwrap();
    let e = be
        .contract(&mut c22, &a, &zt, &spec, Conj::No, Conj::No, one, one)
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "b",
        "{e}"
    );
    let e = be.scale(&mut c, i).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "s",
        "{e}"
    );
    let e = a.view::<f32>().unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "tensor",
        "{e}"
    );
    let e = c.view_mut::<Complex64>().unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { .. }) && arg_of(&e) == "tensor",
        "{e}"
    );

    // aliasing
    let mut alias = a.clone();
    let e = be
        .add(&mut alias, &a, &id2, Conj::No, one, one)
        .unwrap_err();
    assert_eq!(
        (matches!(e, Error::Aliasing { .. }), arg_of(&e)),
        (true, "c/a".to_string())
    );
    let sq = Tensor::from_vec(&[2, 2], vec![1.0; 4]).unwrap();
    let mut alias = sq.clone();
    let e = be
        .contract(&mut alias, &c22, &sq, &spec, Conj::No, Conj::No, one, one)
        .unwrap_err();
    assert_eq!(arg_of(&e), "c/b");
    let mut alias = sq.permuted(&t).unwrap();
    let e = be
        .trace(
            &mut alias,
            &sq,
            &TraceSpec::new(&[0, 1], &[], &[]).unwrap(),
            Conj::No,
            one,
            one,
        )
        .unwrap_err();
    assert_eq!(arg_of(&e), "c/a");
    let mut alias = sq.clone();
    let e = be
        .add_to_diagonal(
            &mut alias,
            &sq,
            &TraceSpec::new(&[0, 1], &[], &[]).unwrap(),
            Conj::No,
            one,
        )
        .unwrap_err();
    assert_eq!(arg_of(&e), "a/c");

    // layouts
    let e = Tensor::from_parts(vec![0.0f64; 6], &[2, 3], &[3, 1], 1).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "strides",
        "{e}"
    );
    let e = Tensor::from_parts(vec![0.0f64; 6], &[2, 3], &[-3, 1], 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "strides",
        "{e}"
    );
    // an empty layout reaches no element: any offset is accepted (tests/it/empty_views.rs)
    assert!(Tensor::from_parts(vec![0.0f64; 6], &[0, 3], &[3, 1], 7).is_ok());
    let e = Tensor::from_parts(vec![0.0f64; 6], &[1, 3], &[3, 1], 4).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "strides",
        "{e}"
    );
    let e = Tensor::from_parts(vec![0.0f64; 6], &[2, 3], &[3], 0).unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { .. }) && arg_of(&e) == "strides",
        "{e}"
    );
    let e = a.strided(&[3, 3], &[3, 1], 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "strides",
        "{e}"
    );
    let mut data = [0.0f64; 6];
    let e = StridedViewMut::new(&mut data, &[2, 3], &[1, 1], 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "strides",
        "{e}"
    );
    let e = StridedView::new(&data, &[2, 3], &[3, 1], 4).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "strides",
        "{e}"
    );
    let e = StridedView::row_major(&data, &[4, 2]).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && arg_of(&e) == "data",
        "{e}"
    );
    let e = Tensor::zeros(&[usize::MAX / 2, 4], DType::F64).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "dims",
        "{e}"
    );
    let e = kernels::add(
        &mut StridedViewMut::row_major(&mut data, &[6]).unwrap(),
        &StridedView::row_major(&[1.0f32; 6], &[6]).unwrap(),
        &id2,
        Conj::No,
        1.0,
        0.0,
    )
    .unwrap_err();
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
}
