//! Conditions written as tensor networks ([`NetworkConditions`]): the maps come from the
//! network rules alone, and must agree with closed forms, finite differences of the whole
//! solver, and the adjoint test.

use crate::support::implicit::{data, refusing, t64};
use adrules_core::implicit::Linearization;
use adrules_core::implicit::{
    FixedPoint, ImplicitFunction, Method, NetworkConditions, SolverOptions, TermOperand,
};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Complex64, Error, HostTensor};
use adrules_strided::Strided;
use adrules_testing::Rng;
use faer::Mat;
use faer::linalg::solvers::Solve;

fn plan(indices: &[Vec<i64>], dims: &[Vec<usize>]) -> NetworkPlan {
    let net = Network::ncon(indices, None).unwrap();
    NetworkPlan::new(&net, dims, &Order::Default).unwrap()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y = a⁻¹·b` with `c = a·y − b` as two networks: `ncon([a, y])` and `−ncon([b])`.
#[test]
fn linear_solve_matches_the_closed_form() {
    let n = 4;
    let mut rng = Rng::seed(31);
    let a0: Vec<f64> = rng
        .tensor(&[n, n], adrules_core::DType::F64)
        .as_slice::<f64>()
        .unwrap()
        .to_vec();
    let a: Vec<f64> = a0
        .iter()
        .enumerate()
        .map(|(i, v)| if i % (n + 1) == 0 { v + 4.0 } else { *v })
        .collect();
    let b: Vec<f64> = (0..n).map(|i| i as f64 - 1.5).collect();
    let am = Mat::from_fn(n, n, |i, j| a[i * n + j]);
    let solve = move |x: &[HostTensor], _: &()| {
        let a = x[0].as_slice::<f64>()?;
        let b = x[1].as_slice::<f64>()?;
        let m = Mat::from_fn(n, n, |i, j| a[i * n + j]);
        let rhs = Mat::from_fn(n, 1, |i, _| b[i]);
        let y = m.partial_piv_lu().solve(&rhs);
        Ok((t64(&[n], (0..n).map(|i| y[(i, 0)]).collect()), ()))
    };
    let (solve, calls) = refusing(solve);
    let conditions = NetworkConditions::new(Strided)
        .term(
            1.0,
            plan(&[vec![-1, 1], vec![1]], &[vec![n, n], vec![n]]),
            &[TermOperand::Input(0), TermOperand::Unknown],
        )
        .unwrap()
        .term(
            -1.0,
            plan(&[vec![-1]], &[vec![n]]),
            &[TermOperand::Input(1)],
        )
        .unwrap();
    for method in [Method::Lu, Method::Gmres] {
        calls.set(0);
        let f = ImplicitFunction::new(&solve, conditions.clone())
            .with_linear_solver(SolverOptions::from(method));
        let x = [t64(&[n, n], a.clone()), t64(&[n], b.clone())];
        let (y, (), lin): (HostTensor, (), Linearization<f64>) = f.vjp(&x, &()).unwrap();
        let y = data::<f64>(&y);
        assert!(lin.conditions_norm().unwrap() < 1e-12);
        // dy = a⁻¹ (db − da·y)
        let da: Vec<f64> = (0..n * n)
            .map(|i| ((i * 7) % 5) as f64 / 5.0 - 0.4)
            .collect();
        let db: Vec<f64> = (0..n).map(|i| 0.3 * i as f64).collect();
        let rhs = Mat::from_fn(n, 1, |i, _| db[i] - dot(&da[i * n..(i + 1) * n], &y));
        let want = am.partial_piv_lu().solve(&rhs);
        let dy = lin
            .jvp(&[t64(&[n, n], da.clone()), t64(&[n], db.clone())])
            .unwrap();
        for (i, v) in data::<f64>(&dy).iter().enumerate() {
            assert!(
                (v - want[(i, 0)]).abs() < 1e-10,
                "{method:?}: dy[{i}] = {v}, want {}",
                want[(i, 0)]
            );
        }
        // ā = −u yᵀ, b̄ = u with aᵀ u = ȳ
        let ybar: Vec<f64> = (0..n).map(|i| 1.0 - 0.25 * i as f64).collect();
        let g = lin.vjp(&t64(&[n], ybar.clone())).unwrap();
        let u = am
            .transpose()
            .partial_piv_lu()
            .solve(Mat::from_fn(n, 1, |i, _| ybar[i]));
        for (i, v) in data::<f64>(&g[1]).iter().enumerate() {
            assert!((v - u[(i, 0)]).abs() < 1e-10, "b̄[{i}]");
        }
        for (k, v) in data::<f64>(&g[0]).iter().enumerate() {
            let want = -u[(k / n, 0)] * y[k % n];
            assert!((v - want).abs() < 1e-10, "ā[{k}] = {v}, want {want}");
        }
        assert_eq!(calls.get(), 1, "the solver ran once");
    }
}

/// The leading eigenvector of a symmetric matrix `M` (the input), defined by the conditions
/// `c = M·v − ⟨v, M·v⟩·v`, cubic in `v` (three slots of the unknown in one network): the
/// derivative of the eigenvector against finite differences of the whole solver, and the
/// adjoint test.
#[test]
fn eigenvector_conditions_cubic_in_the_unknown() {
    let n = 5;
    let mut rng = Rng::seed(32);
    let r = rng.tensor(&[n, n], adrules_core::DType::F64);
    let r = r.as_slice::<f64>().unwrap();
    let m: Vec<f64> = (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            r[i * n + j] + r[j * n + i] + if i == j { 3.0 * i as f64 } else { 0.0 }
        })
        .collect();
    let eig = |m: &[f64]| -> Vec<f64> {
        let mat = Mat::from_fn(n, n, |i, j| m[i * n + j]);
        let e = mat.self_adjoint_eigen(faer::Side::Lower).unwrap();
        let v: Vec<f64> = (0..n).map(|i| e.U()[(i, n - 1)]).collect();
        let s = if v[0] < 0.0 { -1.0 } else { 1.0 };
        v.iter().map(|x| x * s).collect()
    };
    let solve = move |x: &[HostTensor], _: &()| Ok((t64(&[n], eig(x[0].as_slice::<f64>()?)), ()));
    let mv = plan(&[vec![-1, 1], vec![1]], &[vec![n, n], vec![n]]);
    let vmvv = plan(
        &[vec![1], vec![1, 2], vec![2], vec![-1]],
        &[vec![n], vec![n, n], vec![n], vec![n]],
    );
    let conditions = NetworkConditions::new(Strided)
        .term(1.0, mv, &[TermOperand::Input(0), TermOperand::Unknown])
        .unwrap()
        .term(
            -1.0,
            vmvv,
            &[
                TermOperand::Unknown,
                TermOperand::Input(0),
                TermOperand::Unknown,
                TermOperand::Unknown,
            ],
        )
        .unwrap();
    let f = ImplicitFunction::new(solve, conditions)
        .with_linear_solver(SolverOptions::from(Method::Lu));
    let x = [t64(&[n, n], m.clone())];
    let (y, (), lin): (HostTensor, (), Linearization<f64>) = f.vjp(&x, &()).unwrap();
    assert!(lin.conditions_norm().unwrap() < 1e-12);
    // Symmetric direction so that the perturbed input stays symmetric.
    let dm: Vec<f64> = (0..n * n)
        .map(|k| ((k / n + k % n) % 3) as f64 - 1.0)
        .collect();
    let dy = data::<f64>(&lin.jvp(&[t64(&[n, n], dm.clone())]).unwrap());
    let h = 1e-4;
    let at = |t: f64| {
        eig(&m
            .iter()
            .zip(&dm)
            .map(|(a, d)| a + t * d)
            .collect::<Vec<_>>())
    };
    let (p2, p1, m1, m2) = (at(2.0 * h), at(h), at(-h), at(-2.0 * h));
    for i in 0..n {
        let fd = (-p2[i] + 8.0 * p1[i] - 8.0 * m1[i] + m2[i]) / (12.0 * h);
        assert!((dy[i] - fd).abs() < 1e-8, "dv[{i}] = {} vs FD {fd}", dy[i]);
    }
    let ybar: Vec<f64> = (0..n).map(|i| (i as f64).sin()).collect();
    let g = data::<f64>(&lin.vjp(&t64(&[n], ybar.clone())).unwrap()[0]);
    let lhs = dot(&ybar, &dy);
    let rhs = dot(&g, &dm);
    assert!(
        (lhs - rhs).abs() < 1e-10 * (1.0 + lhs.abs()),
        "adjoint test: {lhs} vs {rhs}"
    );
    let _ = y;
}

/// A complex fixed point `y = M·y + b` (M contractive) as `FixedPoint` around one network
/// term plus a constant: the complex convention `x̄ = Bᴴ·u` through the network pullback.
#[test]
fn complex_fixed_point_with_a_constant_operand() {
    let n = 3;
    let mut rng = Rng::seed(33);
    let mm = rng.tensor(&[n, n], adrules_core::DType::C64);
    let mm: Vec<Complex64> = mm
        .as_slice::<Complex64>()
        .unwrap()
        .iter()
        .map(|z| z * 0.2)
        .collect();
    let b: Vec<Complex64> = (0..n).map(|i| Complex64::new(1.0, i as f64)).collect();
    let be = Strided;
    let mut conditions = NetworkConditions::new(be);
    let kb = conditions.constant(
        adrules_core::Backend::from_host(&be, HostTensor::from_vec(&[n], b.clone()).unwrap())
            .unwrap(),
    );
    let conditions = conditions
        .term(
            1.0,
            plan(&[vec![-1, 1], vec![1]], &[vec![n, n], vec![n]]),
            &[TermOperand::Input(0), TermOperand::Unknown],
        )
        .unwrap()
        .term(
            1.0,
            plan(&[vec![-1]], &[vec![n]]),
            &[TermOperand::Constant(kb)],
        )
        .unwrap();
    let bb = b.clone();
    let solve = move |x: &[HostTensor], _: &()| {
        let m = x[0].as_slice::<Complex64>()?;
        let a = Mat::from_fn(n, n, |i, j| if i == j { Complex64::new(1.0, 0.0) } else { Complex64::new(0.0, 0.0) } - m[i * n + j]);
        let y = a.partial_piv_lu().solve(Mat::from_fn(n, 1, |i, _| bb[i]));
        Ok((
            HostTensor::from_vec(&[n], (0..n).map(|i| y[(i, 0)]).collect::<Vec<_>>())?,
            (),
        ))
    };
    let f = ImplicitFunction::new(solve, FixedPoint::new(conditions));
    let x = [HostTensor::from_vec(&[n, n], mm.clone()).unwrap()];
    let (y, (), lin): (HostTensor, (), Linearization<Complex64>) = f.vjp(&x, &()).unwrap();
    assert!(lin.conditions_norm().unwrap() < 1e-12);
    let y = data::<Complex64>(&y);
    // y = (I − M)⁻¹ b; dy = (I − M)⁻¹ dM y; M̄ = u yᴴ with (I − M)ᴴ u = ȳ.
    let ybar: Vec<Complex64> = (0..n).map(|i| Complex64::new(0.5, -(i as f64))).collect();
    let g = data::<Complex64>(
        &lin.vjp(&HostTensor::from_vec(&[n], ybar.clone()).unwrap())
            .unwrap()[0],
    );
    let ima = Mat::from_fn(n, n, |i, j| if i == j { Complex64::new(1.0, 0.0) } else { Complex64::new(0.0, 0.0) } - mm[i * n + j]);
    let u = ima
        .adjoint()
        .partial_piv_lu()
        .solve(Mat::from_fn(n, 1, |i, _| ybar[i]));
    for k in 0..n * n {
        let want = u[(k / n, 0)] * y[k % n].conj();
        assert!(
            (g[k] - want).norm() < 1e-10,
            "M̄[{k}] = {} want {want}",
            g[k]
        );
    }
}

/// Bad terms are typed errors.
#[test]
fn network_conditions_validation() {
    let p = plan(&[vec![-1, 1], vec![1]], &[vec![2, 2], vec![2]]);
    let e = NetworkConditions::new(Strided)
        .term(1.0, p.clone(), &[TermOperand::Unknown])
        .unwrap_err();
    assert!(matches!(e, Error::CountMismatch { .. }), "{e}");
    let e = NetworkConditions::new(Strided)
        .term(
            1.0,
            p.clone(),
            &[TermOperand::Unknown, TermOperand::Constant(0)],
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // A term whose output is not y-shaped fails at linearization.
    let c = NetworkConditions::new(Strided)
        .term(
            1.0,
            plan(&[vec![1], vec![1]], &[vec![2], vec![2]]),
            &[TermOperand::Unknown, TermOperand::Input(0)],
        )
        .unwrap();
    let solve = |_: &[HostTensor], _: &()| Ok((t64(&[2], vec![1.0, 0.0]), ()));
    let f = ImplicitFunction::new(solve, c);
    let e = f
        .vjp(&[t64(&[2], vec![1.0, 1.0])], &())
        .map(|r: (HostTensor, (), Linearization<f64>)| r.0)
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
}
