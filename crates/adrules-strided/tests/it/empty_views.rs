//! Views with a zero-size dimension reach no element, so every constructor accepts them at any
//! offset (as numpy accepts `np.zeros((0, 3))[:, 1]`), every kernel handles them without
//! reading memory, and non-empty views that leave the buffer are still refused.

use adrules_core::{Backend, Conj, ContractSpec, DType, DynScalar, Error, Permutation};
use adrules_strided::{Strided, StridedView, StridedViewMut, Tensor, kernels};

fn arg_of(e: &Error) -> &str {
    match e {
        Error::InvalidArgument { arg, .. } | Error::CountMismatch { arg, .. } => arg,
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn columns_and_slices_of_an_empty_tensor_are_views() {
    let t = Tensor::zeros(&[0, 3], DType::F64).unwrap();
    assert_eq!(t.storage().len(), 0);
    // column 1 of a [0, 3] tensor: numpy's `a[:, 1]`
    let col = t.strided(&[0], &[3], 1).unwrap();
    assert_eq!(col.dims(), &[0]);
    assert!(col.shares_storage(&t));
    assert_eq!(col.offset(), 0, "an empty view has no element (0, …, 0)");
    assert!(col.to_vec::<f64>().unwrap().is_empty());
    // the whole [0, 3] layout one past, and far past, the end of the (empty) buffer
    for offset in [1, 3, 1 << 40, usize::MAX] {
        let v = t.strided(&[0, 3], &[3, 1], offset).unwrap();
        assert_eq!((v.dims(), v.strides()), (&[0, 3][..], &[3, 1][..]));
        assert!(v.to_vec::<f64>().unwrap().is_empty());
        assert!(v.to_host().unwrap().as_slice::<f64>().unwrap().is_empty());
    }
    // reversed and broadcast strides on an empty axis are fine as well
    let v = t.strided(&[3, 0], &[-1, 0], 7).unwrap();
    assert!(v.into_ndarray::<f64>().unwrap().is_empty());
}

#[test]
fn empty_views_of_a_nonempty_buffer_at_any_offset() {
    let data: Vec<f64> = (1..=6).map(f64::from).collect();
    // the zero rows "after" the last row of a [2, 3] matrix, and far beyond the buffer
    for offset in [0, 5, 6, 7, 100] {
        let t = Tensor::from_parts(data.clone(), &[0, 3], &[3, 1], offset).unwrap();
        assert_eq!((t.dims(), t.len()), (&[0, 3][..], 0));
        assert!(t.is_empty());
    }
    let base = Tensor::from_vec(&[2, 3], data.clone()).unwrap();
    let mut e = base.strided(&[0, 3], &[3, 1], 9).unwrap();
    // writing through the empty view (copy-on-write, scaling, a β = 0 update) touches nothing
    Strided.scale(&mut e, DynScalar::F64(f64::NAN)).unwrap();
    assert_eq!(e.view_mut::<f64>().unwrap().len(), 0);
    assert_eq!(
        base.to_vec::<f64>().unwrap(),
        data,
        "the shared buffer changed"
    );
}

#[test]
fn kernels_read_nothing_from_empty_operands_at_an_offset() {
    let be = Strided;
    let empty = Tensor::zeros(&[0, 3], DType::F64).unwrap();
    // A[2, 0] and B[0, 2] as views far past the end of an empty buffer: A·B is a sum over an
    // empty index, 0, so C = α·0 + β·C keeps C with β = 1 and is zero with β = 0.
    let a = empty.strided(&[2, 0], &[0, 3], 5).unwrap();
    let b = empty.strided(&[0, 2], &[1, 3], 11).unwrap();
    let spec = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    let mut c = Tensor::from_vec(&[2, 2], vec![1.0f64, 2.0, 3.0, 4.0]).unwrap();
    be.contract(
        &mut c,
        &a,
        &b,
        &spec,
        Conj::No,
        Conj::No,
        2.0.into(),
        1.0.into(),
    )
    .unwrap();
    assert_eq!(c.to_vec::<f64>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
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
    assert_eq!(c.to_vec::<f64>().unwrap(), [0.0; 4]);
    // a permuted add of an empty view into an empty output, and their inner product
    let mut out = be.zeros(&[0, 2], DType::F64).unwrap();
    let at = a.permuted(&Permutation::new(&[1, 0]).unwrap()).unwrap();
    be.add(
        &mut out,
        &a,
        &Permutation::new(&[1, 0]).unwrap(),
        Conj::No,
        1.0.into(),
        1.0.into(),
    )
    .unwrap();
    assert_eq!(out.dims(), &[0, 2]);
    assert_eq!(be.inner(&at, &out).unwrap(), DynScalar::F64(0.0));
}

#[test]
fn borrowed_views_accept_empty_layouts_at_any_offset() {
    let data = [1.0f32, 2.0, 3.0];
    for offset in [0, 3, 4, usize::MAX] {
        let v = StridedView::new(&data, &[0, 3], &[3, 1], offset).unwrap();
        assert_eq!(v.len(), 0);
        assert!(v.to_vec().unwrap().is_empty());
        assert!(v.to_ndarray().is_empty());
    }
    let v = StridedView::<f64>::new(&[], &[0], &[3], 1).unwrap();
    assert!(v.is_empty());
    let mut buf = [7.0f64; 3];
    let mut m = StridedViewMut::new(&mut buf, &[3, 0], &[1, 1], 10).unwrap();
    kernels::add(
        &mut m,
        &StridedView::<f64>::new(&[], &[3, 0], &[0, 0], 2).unwrap(),
        &Permutation::identity(2),
        Conj::No,
        1.0,
        0.0,
    )
    .unwrap();
    assert!(m.into_ndarray().is_empty());
    assert_eq!(buf, [7.0; 3], "an empty write changed the buffer");
}

#[test]
fn nonempty_views_outside_the_buffer_are_still_refused() {
    let empty = Tensor::zeros(&[0, 3], DType::F64).unwrap();
    // one row of the empty tensor: a real element, and there is none
    let e = empty.strided(&[1, 3], &[3, 1], 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert_eq!(arg_of(&e), "strides");
    let e = empty.strided(&[1], &[1], 1).unwrap_err();
    assert_eq!(arg_of(&e), "strides");
    let six = Tensor::from_vec(&[2, 3], vec![0.0f64; 6]).unwrap();
    for (dims, strides, offset) in [
        (&[2usize, 3][..], &[3isize, 1][..], 1usize),
        (&[2, 3], &[-3, 1], 2),
        (&[1, 3], &[3, 1], 4),
        (&[1], &[1], 6),
        (&[], &[], 6),
    ] {
        let e = six.strided(dims, strides, offset).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { .. }) && arg_of(&e) == "strides",
            "{dims:?} {strides:?} {offset}: {e}"
        );
    }
    // the rank check comes first, empty or not
    let e = empty.strided(&[0, 3], &[1], 5).unwrap_err();
    assert!(matches!(e, Error::CountMismatch { .. }), "{e}");
    let e = StridedView::new(&[1.0f64], &[0, 2], &[1], 3).unwrap_err();
    assert!(matches!(e, Error::CountMismatch { .. }), "{e}");
    let mut one = [0.0f64];
    let e = StridedViewMut::new(&mut one, &[2], &[1], 0).unwrap_err();
    assert_eq!(arg_of(&e), "strides");
}
