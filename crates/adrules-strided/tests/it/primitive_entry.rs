//! `kernels::primitive` and `kernels::primitive_fresh`, the one entry for every `Primitive`
//! call: bit-identical to calling the kernel directly (conjugation flags, α and β taken from
//! the call), and typed errors for a wrong operand count and a complex α with a real C.

use adrules_core::rules::{AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{Complex64, Conj, ContractSpec, Error, Permutation, TraceSpec};
use adrules_strided::{StridedView, StridedViewMut, kernels};

fn values(n: usize, seed: f64) -> Vec<Complex64> {
    (0..n)
        .map(|i| {
            Complex64::new(
                (i as f64 * 0.37 + seed).sin(),
                (i as f64 * 0.91 - seed).cos(),
            )
        })
        .collect()
}

/// `primitive` on C (dims `dc`) from the operands (dims `dx`) against `direct` on a copy.
fn same(
    prim: &Primitive,
    dx: &[&[usize]],
    dc: &[usize],
    direct: impl Fn(&mut StridedViewMut<'_, Complex64>, &[StridedView<'_, Complex64>]),
) {
    let data: Vec<Vec<Complex64>> = dx
        .iter()
        .enumerate()
        .map(|(k, d)| values(d.iter().product(), k as f64))
        .collect();
    let x: Vec<StridedView<'_, Complex64>> = data
        .iter()
        .zip(dx)
        .map(|(v, d)| StridedView::row_major(v, d).unwrap())
        .collect();
    let c0 = values(dc.iter().product(), 7.0);
    let (mut got, mut want) = (c0.clone(), c0);
    kernels::primitive(
        &mut StridedViewMut::row_major(&mut got, dc).unwrap(),
        &x,
        prim,
    )
    .unwrap();
    direct(&mut StridedViewMut::row_major(&mut want, dc).unwrap(), &x);
    assert_eq!(got, want, "{}", prim.name());
    let (fresh, dims) = kernels::primitive_fresh::<_, Complex64>(&x, prim).unwrap();
    let mut zero = vec![Complex64::new(0.0, 0.0); fresh.len()];
    let fresh_prim = prim.clone().with_coefficients(prim.alpha(), 0.0.into());
    kernels::primitive(
        &mut StridedViewMut::row_major(&mut zero, dc).unwrap(),
        &x,
        &fresh_prim,
    )
    .unwrap();
    assert_eq!(
        (fresh, dims.as_slice()),
        (zero, dc),
        "{} fresh",
        prim.name()
    );
}

#[test]
fn the_entry_runs_each_primitive_as_its_kernel() {
    let (alpha, beta) = (Complex64::new(0.5, -1.25), Complex64::new(-0.75, 0.5));
    let p = Permutation::new(&[2, 0, 1]).unwrap();
    let add = AddOp::new(p.clone()).alpha(alpha).beta(beta);
    let add = Primitive::from(AddOp {
        conj: Conj::Yes,
        ..add
    });
    same(&add, &[&[2, 3, 4]], &[4, 2, 3], |c, x| {
        kernels::add(c, &x[0], &p, Conj::Yes, alpha, beta).unwrap()
    });
    let spec = TraceSpec::from_labels("ijjk", "ki").unwrap();
    let trace = TraceOp::new(spec.clone()).alpha(alpha).beta(beta);
    let trace = Primitive::from(TraceOp {
        conj: Conj::Yes,
        ..trace
    });
    same(&trace, &[&[2, 3, 3, 4]], &[4, 2], |c, x| {
        kernels::trace(c, &x[0], &spec, Conj::Yes, alpha, beta).unwrap()
    });
    let spec = ContractSpec::from_labels("bij", "bjk", "kbi").unwrap();
    let contract = ContractOp::new(spec.clone()).alpha(alpha).beta(beta);
    let contract = Primitive::from(ContractOp {
        conj_b: Conj::Yes,
        ..contract
    });
    same(&contract, &[&[2, 3, 4], &[2, 4, 5]], &[5, 2, 3], |c, x| {
        kernels::contract(c, &x[0], &x[1], &spec, Conj::No, Conj::Yes, alpha, beta).unwrap()
    });
}

#[test]
fn the_entry_reports_a_wrong_operand_count_and_a_complex_alpha() {
    let a = vec![1.0f64; 6];
    let av = StridedView::row_major(&a, &[2, 3]).unwrap();
    let mut c = vec![0.0f64; 6];
    let mut cv = StridedViewMut::row_major(&mut c, &[3, 2]).unwrap();
    let add = Primitive::from(AddOp::new(Permutation::new(&[1, 0]).unwrap()));
    let err = kernels::primitive(&mut cv, &[av.clone(), av.clone()], &add).unwrap_err();
    assert!(
        matches!(err, Error::CountMismatch { ref arg, expected: 1, actual: 2 } if arg == "operands"),
        "{err:?}"
    );
    let err = kernels::primitive_fresh::<f64, f64>(&[], &add).unwrap_err();
    assert!(matches!(err, Error::CountMismatch { .. }), "{err:?}");
    let complex = add.with_coefficients(Complex64::new(0.0, 1.0).into(), 0.0.into());
    let err = kernels::primitive(&mut cv, &[av], &complex).unwrap_err();
    assert!(
        matches!(err, Error::DTypeMismatch { ref arg, .. } if arg == "alpha"),
        "{err:?}"
    );
}
