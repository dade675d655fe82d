//! Second order of implicit functions ([`Linearization::hvp`], [`Linearization::hvp_with`]):
//! the HVP of `φ(x) = Re⟨ȳ, y(x)⟩` by the second-order implicit function theorem, against
//! - closed forms derived here for the cases of the implicit test vectors that have one
//!   (T1 `y = √x`, T5 the fixed point `y = θ·cos y`, T13 the Solow steady state), with user
//!   closures (`FnMaps::with_second_order`) and with conditions written as networks;
//! - the dense closed form of a bilinear fixed point `y = X·y + b` (real and complex), whose
//!   second derivatives come from the network rules alone;
//! - central differences of the implicit gradient (the solver run at `x ± h·v`);
//! - the `hvp` entries of `solve.jsonl` (PyTorch), in all four dtypes;
//!
//! and the dense Hessian from HVPs, the general form (a cotangent that depends on `y`) and
//! the typed errors.

use std::sync::Arc;

use crate::support::implicit::{cv, data, solve_batched, t64};
use adrules_core::implicit::{
    DenseMaps, FnMaps, ImplicitFunction, ImplicitScalar, Linearization, Method, NetworkConditions,
    Point, SolverOptions, TermOperand,
};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Complex32, Complex64, DType, Error, HostTensor, Result};
use adrules_strided::Strided;
use adrules_testing::Rng;
use adrules_testing::oracle::{OracleCase, load, oracle_dir};
use faer::Mat;
use faer::linalg::solvers::Solve;

fn einsum_plan(subscripts: &str, dims: &[Vec<usize>]) -> NetworkPlan {
    let net = Network::einsum(subscripts).unwrap();
    NetworkPlan::new(&net, dims, &Order::Default).unwrap()
}

fn rel(got: &[Complex64], want: &[Complex64]) -> f64 {
    let d: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).norm_sqr())
        .sum::<f64>()
        .sqrt();
    let n: f64 = want.iter().map(|w| w.norm_sqr()).sum::<f64>().sqrt();
    d / n.max(1e-300)
}

// ---------------------------------------------------------------------------------------
// T1: y = √x, c = y⊙y − x. A = diag(2y), B = −I; g = Re⟨u, c⟩ has ∇_y g = 2·conj(y)… for
// real data ∇_y g = 2y⊙u, ∇_x g = −u, so wy = 2u⊙dy, wx = 0, and the HVP of φ = ȳ·y is
// d²√x/dx² = −x^{−3/2}/4: H·v = −ȳ⊙v / (4 x^{3/2}).
// ---------------------------------------------------------------------------------------

fn sqrt_solver(x: &[HostTensor], _: &()) -> Result<(HostTensor, ())> {
    let y: Vec<f64> = x[0].as_slice::<f64>()?.iter().map(|v| v.sqrt()).collect();
    Ok((t64(x[0].dims(), y), ()))
}

fn sqrt_closures(p: &Point<(), ()>) -> Result<FnMaps<f64>> {
    let y: Arc<[f64]> = p.y_data::<f64>()?.into();
    let m = y.len();
    let y2 = Arc::clone(&y);
    Ok(FnMaps::hermitian(
        m,
        m,
        move |v: &[f64], o: &mut [f64]| (0..m).for_each(|i| o[i] = 2.0 * y[i] * v[i]),
        |v: &[f64], o: &mut [f64]| (0..v.len()).for_each(|i| o[i] = -v[i]),
        |u: &[f64], o: &mut [f64]| (0..u.len()).for_each(|i| o[i] = -u[i]),
    )
    .with_second_order(move |u, _dx, dy, wy, wx| {
        let _ = &y2;
        (0..u.len()).for_each(|i| wy[i] = 2.0 * u[i] * dy[i]);
        wx.iter_mut().for_each(|w| *w = 0.0);
    }))
}

/// `c = y⊙y − x` as networks: `einsum("i,i->i", y, y) − einsum("i->i", x)`.
fn sqrt_network(m: usize) -> NetworkConditions<Strided> {
    NetworkConditions::new(Strided)
        .term(
            1.0,
            einsum_plan("i,i->i", &[vec![m], vec![m]]),
            &[TermOperand::Unknown, TermOperand::Unknown],
        )
        .unwrap()
        .term(
            -1.0,
            einsum_plan("i->i", &[vec![m]]),
            &[TermOperand::Input(0)],
        )
        .unwrap()
}

/// T1's closed-form HVP `−ȳ⊙v / (4 x^{3/2})`.
fn t1_hvp(x: &HostTensor, y_bar: &HostTensor, v: &HostTensor) -> Vec<Complex64> {
    let (x, yb, v) = (data::<f64>(x), data::<f64>(y_bar), data::<f64>(v));
    (0..x.len())
        .map(|i| Complex64::new(-yb[i] * v[i] / (4.0 * x[i].powf(1.5)), 0.0))
        .collect()
}

#[test]
fn t1_square_root_hvp_matches_the_closed_form() {
    let x = [t64(&[3], vec![4.0, 9.0, 2.0])];
    let y_bar = t64(&[3], vec![1.0, -2.0, 0.5]);
    let v = [t64(&[3], vec![0.3, 1.0, -0.7])];
    let want = t1_hvp(&x[0], &y_bar, &v[0]);
    for method in [Method::Lu, Method::Gmres] {
        let opts = SolverOptions::from(method);
        let closures =
            ImplicitFunction::new(sqrt_solver, sqrt_closures).with_linear_solver(opts.clone());
        let (_, (), lin) = closures.vjp(&x, &()).unwrap();
        let got = lin.hvp(&y_bar, &v).unwrap();
        assert!(
            rel(&cv(&got[0]), &want) < 1e-12,
            "closures, {method:?}: {got:?}"
        );
        let network = ImplicitFunction::<f64, _, _, _, _>::new(sqrt_solver, sqrt_network(3))
            .with_linear_solver(opts);
        let (_, (), lin) = network.vjp(&x, &()).unwrap();
        let r = lin.hvp_with(&y_bar, &v, None).unwrap();
        assert!(
            rel(&cv(&r.hvp[0]), &want) < 1e-12,
            "network, {method:?}: {:?}",
            r.hvp
        );
        // the gradient that comes with it: ȳ/(2√x)
        let g: Vec<Complex64> = (0..3)
            .map(|i| {
                Complex64::new(
                    data::<f64>(&y_bar)[i] / (2.0 * data::<f64>(&x[0])[i].sqrt()),
                    0.0,
                )
            })
            .collect();
        assert!(rel(&cv(&r.gradient[0]), &g) < 1e-12);
        // dy = v/(2√x)
        let dy: Vec<Complex64> = (0..3)
            .map(|i| {
                Complex64::new(
                    data::<f64>(&v[0])[i] / (2.0 * data::<f64>(&x[0])[i].sqrt()),
                    0.0,
                )
            })
            .collect();
        assert!(rel(&cv(&r.dy), &dy) < 1e-12);
    }
}

/// The dense Hessian of T1 is diagonal, `−ȳ_i/(4x_i^{3/2})`, and for a complex problem it
/// is symmetric in real coordinates.
#[test]
fn dense_hessian_from_hvps() {
    let x = [t64(&[3], vec![4.0, 9.0, 2.0])];
    let y_bar = t64(&[3], vec![1.0, -2.0, 0.5]);
    let f = ImplicitFunction::<f64, _, _, _, _>::new(sqrt_solver, sqrt_network(3));
    let (_, (), lin) = f.vjp(&x, &()).unwrap();
    let h = lin.hessian(&y_bar).unwrap();
    assert_eq!(h.dims(), &[3, 3]);
    let hv = h.as_slice::<f64>().unwrap();
    for i in 0..3 {
        for j in 0..3 {
            let want = if i == j {
                -data::<f64>(&y_bar)[i] / (4.0 * data::<f64>(&x[0])[i].powf(1.5))
            } else {
                0.0
            };
            assert!(
                (hv[i * 3 + j] - want).abs() < 1e-14,
                "H[{i},{j}] = {}",
                hv[i * 3 + j]
            );
        }
    }
}

/// The general form: `φ = ½‖y‖² = ½Σx` has the constant gradient ½ and a zero Hessian; with
/// `ȳ = y` and `ȳ̇ = dy` the two second-order terms must cancel.
#[test]
fn general_form_with_a_cotangent_that_depends_on_y() {
    let x = [t64(&[3], vec![4.0, 9.0, 2.0])];
    let f = ImplicitFunction::<f64, _, _, _, _>::new(sqrt_solver, sqrt_network(3));
    let (y, (), lin) = f.vjp(&x, &()).unwrap();
    let v = [t64(&[3], vec![0.3, 1.0, -0.7])];
    let identity = |dy: &HostTensor| Ok(dy.clone());
    let r = lin.hvp_with(&y, &v, Some(&identity)).unwrap();
    for (g, h) in data::<f64>(&r.gradient[0])
        .iter()
        .zip(data::<f64>(&r.hvp[0]))
    {
        assert!((g - 0.5).abs() < 1e-14, "gradient {g}");
        assert!(h.abs() < 1e-14, "HVP {h}");
    }
    // without ȳ̇ it is the HVP of the linear φ = ⟨y(x₀), y(x)⟩, which is not zero
    let h = lin.hvp(&y, &v).unwrap();
    assert!(data::<f64>(&h[0]).iter().all(|h| h.abs() > 1e-3));
    // a ȳ̇ of the wrong shape is a typed error
    let wrong = |_: &HostTensor| Ok(t64(&[2], vec![0.0, 0.0]));
    let e = lin.hvp_with(&y, &v, Some(&wrong)).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "y_bar_dot"),
        "{e:?}"
    );
}

// ---------------------------------------------------------------------------------------
// T5: the fixed point y = θ·cos y, c = θ cos y − y. With D = 1 + θ sin y:
// y' = cos y / D, y'' = −(sin y·y'·D + cos y·(sin y + θ cos y·y')) / D².
// g = u·c: ∇_y g = −u(θ sin y + 1), tangent −u(dθ sin y + θ cos y·dy); ∇_θ g = u cos y,
// tangent −u sin y·dy.
// ---------------------------------------------------------------------------------------

#[test]
fn t5_fixed_point_second_derivative() {
    let solve = |x: &[HostTensor], _: &()| {
        let th = x[0].as_slice::<f64>()?[0];
        let mut y = 0.5;
        for _ in 0..200 {
            y = th * f64::cos(y);
        }
        Ok((t64(&[1], vec![y]), ()))
    };
    let conditions = |p: &Point<(), ()>| {
        let th = p.x_data::<f64>(0)?[0];
        let y = p.y_data::<f64>()?[0];
        Ok(FnMaps::new(
            1,
            1,
            move |v: &[f64], o: &mut [f64]| o[0] = -(th * y.sin() + 1.0) * v[0],
            move |u: &[f64], o: &mut [f64]| o[0] = -(th * y.sin() + 1.0) * u[0],
            move |v: &[f64], o: &mut [f64]| o[0] = y.cos() * v[0],
            move |u: &[f64], o: &mut [f64]| o[0] = y.cos() * u[0],
        )
        .with_second_order(move |u, dx, dy, wy, wx| {
            wy[0] = -u[0] * (dx[0] * y.sin() + th * y.cos() * dy[0]);
            wx[0] = -u[0] * y.sin() * dy[0];
        }))
    };
    let f = ImplicitFunction::new(solve, conditions);
    let x = [t64(&[1], vec![1.0])];
    let (y, (), lin) = f.vjp(&x, &()).unwrap();
    let y = data::<f64>(&y)[0];
    assert!((y - 0.7390851332151607).abs() < 1e-14);
    let th = 1.0;
    let d = 1.0 + th * y.sin();
    let y1 = y.cos() / d;
    assert!((y1 - 0.4416107917053284).abs() < 1e-14);
    let y2 = -(y.sin() * y1 * d + y.cos() * (y.sin() + th * y.cos() * y1)) / (d * d);
    let h = lin
        .hvp(&t64(&[1], vec![1.0]), &[t64(&[1], vec![1.0])])
        .unwrap();
    let got = data::<f64>(&h[0])[0];
    assert!(
        (got - y2).abs() < 1e-13 * y2.abs(),
        "y'' = {got}, closed form {y2}"
    );
}

// ---------------------------------------------------------------------------------------
// T13: Solow steady state s·A·k^α = (n+δ)·k: k* = (sA/(n+δ))^{1/(1−α)},
// dk*/ds = k*/(s(1−α)), d²k*/ds² = α·k*/(s(1−α))².
// g = u·c: ∇_k g = u(sAαk^{α−1} − (n+δ)), tangent u(ds·Aαk^{α−1} + sAα(α−1)k^{α−2}·dk);
// ∇_s g = u·A·k^α, tangent u·A·α·k^{α−1}·dk.
// ---------------------------------------------------------------------------------------

#[test]
fn t13_solow_steady_state_second_derivative() {
    let (a, n, delta, alpha) = (1.0, 0.01, 0.05, 0.3);
    let solve = move |x: &[HostTensor], _: &()| {
        let s = x[0].as_slice::<f64>()?[0];
        Ok((
            t64(&[1], vec![(s * a / (n + delta)).powf(1.0 / (1.0 - alpha))]),
            (),
        ))
    };
    let conditions = move |p: &Point<(), ()>| {
        let s = p.x_data::<f64>(0)?[0];
        let k = p.y_data::<f64>()?[0];
        let dcdk = s * a * alpha * k.powf(alpha - 1.0) - (n + delta);
        let dcds = a * k.powf(alpha);
        Ok(FnMaps::new(
            1,
            1,
            move |v: &[f64], o: &mut [f64]| o[0] = dcdk * v[0],
            move |u: &[f64], o: &mut [f64]| o[0] = dcdk * u[0],
            move |v: &[f64], o: &mut [f64]| o[0] = dcds * v[0],
            move |u: &[f64], o: &mut [f64]| o[0] = dcds * u[0],
        )
        .with_second_order(move |u, dx, dy, wy, wx| {
            wy[0] = u[0]
                * (dx[0] * a * alpha * k.powf(alpha - 1.0)
                    + s * a * alpha * (alpha - 1.0) * k.powf(alpha - 2.0) * dy[0]);
            wx[0] = u[0] * a * alpha * k.powf(alpha - 1.0) * dy[0];
        }))
    };
    let f = ImplicitFunction::new(solve, conditions);
    let s = 0.2;
    let (k, (), lin) = f.vjp(&[t64(&[1], vec![s])], &()).unwrap();
    let k = data::<f64>(&k)[0];
    assert!((k - 5.5843115041821845).abs() < 1e-12);
    let want = alpha * k / (s * (1.0 - alpha)).powi(2);
    let r = lin
        .hvp_with(&t64(&[1], vec![1.0]), &[t64(&[1], vec![1.0])], None)
        .unwrap();
    assert!((data::<f64>(&r.gradient[0])[0] - 39.88793931558703).abs() < 1e-10);
    let got = data::<f64>(&r.hvp[0])[0];
    assert!(
        (got - want).abs() < 1e-12 * want,
        "d²k/ds² = {got}, closed form {want}"
    );
}

// ---------------------------------------------------------------------------------------
// A bilinear fixed point y = X·y + b (c = X·y + b − y as networks): y = (I − X)⁻¹·b,
// dy = (I − X)⁻¹·dX·y. For φ = Re⟨ȳ, y⟩ the gradient is X̄ = w·yᴴ with w = (I − X)⁻ᴴ·ȳ,
// and its tangent d(X̄) = dw·yᴴ + w·dyᴴ with dw = (I − X)⁻ᴴ·dXᴴ·w.
// ---------------------------------------------------------------------------------------

fn bilinear_conditions(n: usize, b: HostTensor) -> NetworkConditions<Strided> {
    let mut c = NetworkConditions::new(Strided);
    let kb = c.constant(adrules_core::Backend::from_host(&Strided, b).unwrap());
    c.term(
        1.0,
        einsum_plan("ij,j->i", &[vec![n, n], vec![n]]),
        &[TermOperand::Input(0), TermOperand::Unknown],
    )
    .unwrap()
    .term(
        1.0,
        einsum_plan("i->i", &[vec![n]]),
        &[TermOperand::Constant(kb)],
    )
    .unwrap()
    .term(
        -1.0,
        einsum_plan("i->i", &[vec![n]]),
        &[TermOperand::Unknown],
    )
    .unwrap()
}

fn bilinear_case<T: ImplicitScalar>(dtype: DType, tol: f64) {
    let n = 5;
    let mut rng = Rng::seed(77);
    let mut x0 = rng.tensor(&[n, n], dtype).data().to_c64_vec();
    x0.iter_mut().for_each(|v| *v *= 0.15); // ‖X‖ < 1: a contraction
    let b = rng.tensor(&[n], dtype);
    let y_bar = rng.tensor(&[n], dtype);
    let v = rng.tensor(&[n, n], dtype);
    let to_t = |z: &[Complex64], dims: &[usize]| {
        HostTensor::new(dims, adrules_core::HostData::from_c64_projected(z, dtype)).unwrap()
    };
    let xt = to_t(&x0, &[n, n]);
    let bv = b.data().to_c64_vec();
    let bv_solver = bv.clone();
    let solve = move |x: &[HostTensor], _: &()| {
        let xs = x[0].data().to_c64_vec();
        let m = Mat::<Complex64>::from_fn(n, n, |i, j| {
            (if i == j {
                Complex64::new(1.0, 0.0)
            } else {
                Complex64::new(0.0, 0.0)
            }) - xs[i * n + j]
        });
        let rhs = Mat::<Complex64>::from_fn(n, 1, |i, _| bv_solver[i]);
        let y = m.partial_piv_lu().solve(&rhs);
        let y: Vec<Complex64> = (0..n).map(|i| y[(i, 0)]).collect();
        Ok((
            HostTensor::new(
                &[n],
                adrules_core::HostData::from_c64_projected(&y, x[0].dtype()),
            )?,
            (),
        ))
    };
    let f = ImplicitFunction::new(solve, bilinear_conditions(n, b.clone()));
    let (_, (), lin): (_, _, Linearization<T>) = f.vjp(std::slice::from_ref(&xt), &()).unwrap();
    let got = lin.hvp(&y_bar, std::slice::from_ref(&v)).unwrap();
    // dense closed form in Complex64
    let xs = xt.data().to_c64_vec();
    let im = Mat::<Complex64>::from_fn(n, n, |i, j| {
        (if i == j {
            Complex64::new(1.0, 0.0)
        } else {
            Complex64::new(0.0, 0.0)
        }) - xs[i * n + j]
    });
    let lu = im.partial_piv_lu();
    let lu_h = im.adjoint().to_owned();
    let lu_h = lu_h.partial_piv_lu();
    let col = |z: &[Complex64]| Mat::<Complex64>::from_fn(n, 1, |i, _| z[i]);
    let y = lu.solve(&col(&bv));
    let w = lu_h.solve(&col(&y_bar.data().to_c64_vec()));
    let dxs = v.data().to_c64_vec();
    let dxm = Mat::<Complex64>::from_fn(n, n, |i, j| dxs[i * n + j]);
    let dy = lu.solve(&(&dxm * &y));
    let dw = lu_h.solve(&(dxm.adjoint() * &w));
    let want: Vec<Complex64> = (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            dw[(i, 0)] * y[(j, 0)].conj() + w[(i, 0)] * dy[(j, 0)].conj()
        })
        .collect();
    let e = rel(&cv(&got[0]), &want);
    assert!(e < tol, "{dtype}: relative error {e:e}");
    if dtype == DType::C64 {
        // the dense Hessian in real coordinates (50 of them) is symmetric
        let h = lin.hessian(&y_bar).unwrap();
        let d = 2 * n * n;
        assert_eq!(h.dims(), &[d, d]);
        let hv = h.as_slice::<f64>().unwrap();
        let scale = hv.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for r in 0..d {
            for c in 0..d {
                assert!(
                    (hv[r * d + c] - hv[c * d + r]).abs() <= 1e-12 * scale,
                    "H[{r},{c}]"
                );
            }
        }
    }
    // the HVP against central differences of the implicit gradient
    let h = 1e-5;
    let shifted = |s: f64| {
        let xs: Vec<Complex64> = xs.iter().zip(&dxs).map(|(x, d)| x + d * s).collect();
        let (_, (), l): (_, _, Linearization<T>) = f.vjp(&[to_t(&xs, &[n, n])], &()).unwrap();
        cv(&l.vjp(&y_bar).unwrap()[0])
    };
    if dtype.is_double() {
        let (p, m) = (shifted(h), shifted(-h));
        let fd: Vec<Complex64> = p.iter().zip(&m).map(|(p, m)| (p - m) / (2.0 * h)).collect();
        let e = rel(&cv(&got[0]), &fd);
        assert!(
            e < 1e-7,
            "{dtype}: against central differences of the gradient: {e:e}"
        );
    }
}

#[test]
fn bilinear_fixed_point_through_the_network_rules() {
    bilinear_case::<f64>(DType::F64, 1e-13);
    bilinear_case::<Complex64>(DType::C64, 1e-13);
    bilinear_case::<f32>(DType::F32, 1e-5);
    bilinear_case::<Complex32>(DType::C32, 1e-5);
}

// ---------------------------------------------------------------------------------------
// solve.jsonl: y = solve(a, b) with c = a·y − b written as batched networks, so that its
// second derivatives (∇_y g = aᴴ·u with tangent daᴴ·u, ∇_a g = u·yᴴ with tangent u·dyᴴ) come
// from the network rules.
// ---------------------------------------------------------------------------------------

/// `c = a·y − b` as networks (batched einsum), second derivatives from the network rules.
fn solve_network(a: &HostTensor, b: &HostTensor) -> NetworkConditions<Strided> {
    let r = a.dims().len();
    let batch: String = "pqrs"[..r - 2].to_string();
    let vector = b.dims().len() == r - 1;
    let (yb, out) = if vector {
        (format!("{batch}j"), format!("{batch}i"))
    } else {
        (format!("{batch}jk"), format!("{batch}ik"))
    };
    let dims_a = a.dims().to_vec();
    let dims_b = b.dims().to_vec();
    NetworkConditions::new(Strided)
        .term(
            1.0,
            einsum_plan(&format!("{batch}ij,{yb}->{out}"), &[dims_a, dims_b.clone()]),
            &[TermOperand::Input(0), TermOperand::Unknown],
        )
        .unwrap()
        .term(
            -1.0,
            einsum_plan(&format!("{out}->{out}"), &[dims_b]),
            &[TermOperand::Input(1)],
        )
        .unwrap()
}

fn replay_hvp<T: ImplicitScalar>(case: &OracleCase, dtype: DType, tol: f64) -> usize {
    let cast = |t: &HostTensor| t.to_dtype_projected(dtype);
    let (a, b) = (cast(&case.inputs["a"]), cast(&case.inputs["b"]));
    let f = ImplicitFunction::new(solve_batched::<T>, solve_network(&a, &b));
    let (_, (), lin): (_, _, Linearization<T>) = f.vjp(&[a.clone(), b.clone()], &()).unwrap();
    let mut checked = 0;
    for probe in &case.probes {
        if probe.hvp.is_empty() {
            continue;
        }
        let v = [cast(&probe.direction["a"]), cast(&probe.direction["b"])];
        let got = lin.hvp(&cast(&probe.cotangent), &v).unwrap();
        for (name, g) in ["a", "b"].iter().zip(&got) {
            let want = cv(&probe.hvp[*name]);
            let e = rel(&cv(g), &want);
            assert!(
                e < tol,
                "{} ({dtype}) HVP {name}: relative error {e:e} > {tol:e}",
                case.id
            );
            // the file's own second-order tolerance, elementwise
            let t = case.second_order_tolerance();
            for (g, w) in cv(g).iter().zip(&want) {
                assert!(
                    (g - w).norm() <= t.atol + t.rtol * w.norm() + tol * 10.0,
                    "{} {name}",
                    case.id
                );
            }
        }
        checked += 1;
    }
    checked
}

#[test]
fn solve_oracle_hvp_in_every_dtype() {
    let dir = oracle_dir();
    let cases = load(&dir.join("solve.jsonl")).unwrap();
    let mut checked = 0;
    for case in cases
        .iter()
        .filter(|c| c.probes.iter().any(|p| !p.hvp.is_empty()))
    {
        match case.dtype {
            DType::F64 => {
                checked += replay_hvp::<f64>(case, DType::F64, 1e-9);
                checked += replay_hvp::<f32>(case, DType::F32, 1e-3);
            }
            DType::C64 => {
                checked += replay_hvp::<Complex64>(case, DType::C64, 1e-9);
                checked += replay_hvp::<Complex32>(case, DType::C32, 1e-3);
            }
            _ => {}
        }
    }
    assert!(checked >= 48, "only {checked} HVP probes checked");
}

#[test]
fn second_order_errors_are_typed() {
    // user closures without second derivatives
    let no_second = |p: &Point<(), ()>| {
        let y: Arc<[f64]> = p.y_data::<f64>()?.into();
        let m = y.len();
        Ok(FnMaps::hermitian(
            m,
            m,
            move |v: &[f64], o: &mut [f64]| (0..m).for_each(|i| o[i] = 2.0 * y[i] * v[i]),
            |v: &[f64], o: &mut [f64]| (0..v.len()).for_each(|i| o[i] = -v[i]),
            |u: &[f64], o: &mut [f64]| (0..u.len()).for_each(|i| o[i] = -u[i]),
        ))
    };
    let x = [t64(&[2], vec![4.0, 9.0])];
    let y_bar = t64(&[2], vec![1.0, 1.0]);
    let (_, (), lin) = ImplicitFunction::new(sqrt_solver, no_second)
        .vjp(&x, &())
        .unwrap();
    let e = lin.hvp(&y_bar, &x).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    // dense Jacobians have no second derivatives
    let dense = |p: &Point<(), ()>| {
        let y = p.y_data::<f64>()?;
        let a = Mat::<f64>::from_fn(2, 2, |i, j| if i == j { 2.0 * y[i] } else { 0.0 });
        let b = Mat::<f64>::from_fn(2, 2, |i, j| if i == j { -1.0 } else { 0.0 });
        DenseMaps::new(a, b)
    };
    let (_, (), lin) = ImplicitFunction::new(sqrt_solver, dense)
        .vjp(&x, &())
        .unwrap();
    let e = lin.hvp(&y_bar, &x).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    // wrong number or shape of tangents, wrong cotangent
    let (_, (), lin) = ImplicitFunction::<f64, _, _, _, _>::new(sqrt_solver, sqrt_network(2))
        .vjp(&x, &())
        .unwrap();
    let e = lin.hvp(&y_bar, &[]).unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { ref arg, .. } if arg == "dx"),
        "{e:?}"
    );
    let e = lin.hvp(&y_bar, &[t64(&[3], vec![0.0; 3])]).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg == "dx[0]"),
        "{e:?}"
    );
    let e = lin.hvp(&t64(&[3], vec![0.0; 3]), &x).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e:?}");
    // the caller's tensors are unchanged
    assert_eq!(data::<f64>(&x[0]), vec![4.0, 9.0]);
    assert_eq!(data::<f64>(&y_bar), vec![1.0, 1.0]);
}

/// The finite-difference source of second derivatives (tests only,
/// `FiniteDifferenceConditions::with_second_order`) on user conditions with no second-order
/// map: T1's `c = y⊙y − x` against the closed form; without the option the HVP is refused.
#[test]
fn finite_difference_second_order_for_closures() {
    use adrules_testing::implicit::FiniteDifferenceConditions;
    let c = |p: &Point<(), ()>| -> Result<Vec<f64>> {
        let (x, y) = (p.x_data::<f64>(0)?, p.y_data::<f64>()?);
        Ok(y.iter().zip(x).map(|(y, x)| y * y - x).collect())
    };
    let f = ImplicitFunction::new(
        sqrt_solver,
        FiniteDifferenceConditions::new(c).with_second_order(),
    );
    let x = [t64(&[3], vec![4.0, 9.0, 2.0])];
    let y_bar = t64(&[3], vec![1.0, -2.0, 0.5]);
    let v = [t64(&[3], vec![0.3, 1.0, -0.7])];
    let (_, (), lin): (_, _, Linearization<f64>) = f.vjp(&x, &()).unwrap();
    let got = lin.hvp(&y_bar, &v).unwrap();
    let want = t1_hvp(&x[0], &y_bar, &v[0]);
    let e = rel(&cv(&got[0]), &want);
    assert!(
        e < 1e-6,
        "finite-difference second order: relative error {e:e}"
    );
    // without with_second_order the HVP is refused, not guessed
    let f = ImplicitFunction::new(sqrt_solver, FiniteDifferenceConditions::new(c));
    let (_, (), lin): (_, _, Linearization<f64>) = f.vjp(&x, &()).unwrap();
    assert!(matches!(
        lin.hvp(&y_bar, &v),
        Err(Error::Unsupported { .. })
    ));
}
