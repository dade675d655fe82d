//! Conformance of implicit differentiation with conditions evaluated on the backend
//! ([`NetworkConditions`]): a linear fixed point against its closed form.

use adrules_core::implicit::{
    Conditions, ImplicitFunction, ImplicitScalar, Linearization, Method, NetworkConditions,
    SolverOptions, TermOperand,
};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::rule::{self, Keeps, Pullback, Rule, SyncBackend};
use adrules_core::{
    Backend, Complex32, Complex64, DType, DynScalar, Error, HostData, HostTensor, Result,
};
use faer::Mat;
use faer::linalg::solvers::Solve;

use super::Config;
use super::case::report;
use crate::rule::{RuleCheck, check_rule};
use crate::{Rng, Tolerance, Value, adjoint_mismatch};

/// Size of the unknown.
const N: usize = 4;

fn plan(subscripts: &str, dims: &[&[usize]]) -> Result<NetworkPlan> {
    NetworkPlan::new(&Network::einsum(subscripts)?, dims, &Order::Default)
}

fn host(dims: &[usize], v: &[Complex64], dtype: DType) -> Result<HostTensor> {
    HostTensor::new(dims, HostData::from_c64_projected(v, dtype))
}

/// `M·v` for a row-major `n×n` matrix.
fn matvec(m: &[Complex64], v: &[Complex64]) -> Vec<Complex64> {
    let n = v.len();
    (0..n)
        .map(|i| (0..n).map(|j| m[i * n + j] * v[j]).sum())
        .collect()
}

/// `(I − W)⁻¹·r` (or `(I − W)⁻ᴴ·r` with `adjoint`) by faer's LU on the host.
fn closed_form(w: &[Complex64], r: &[Complex64], adjoint: bool) -> Vec<Complex64> {
    let n = r.len();
    let m = Mat::from_fn(n, n, |i, j| {
        let wij = if adjoint {
            w[j * n + i].conj()
        } else {
            w[i * n + j]
        };
        Complex64::new(if i == j { 1.0 } else { 0.0 }, 0.0) - wij
    });
    let x = m.partial_piv_lu().solve(Mat::from_fn(n, 1, |i, _| r[i]));
    (0..n).map(|i| x[(i, 0)]).collect()
}

/// The fixed point `y = W·y + γ·x` in `dtype`, with `W` an input (`w_input`) or a constant
/// of the conditions, and one linear solver; `Err` describes the first failure.
fn linear_fixed_point<B, T>(
    be: &B,
    rng: &mut Rng,
    w_input: bool,
    method: Method,
) -> std::result::Result<(), String>
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
    T: ImplicitScalar,
{
    let dtype = T::DTYPE;
    let name = format!("fixed point {dtype} W input {w_input} {method:?}");
    let err = |e: Error| format!("{name}: {e}");
    let tolerance = if dtype.is_double() {
        Tolerance {
            atol: 1e-8,
            rtol: 1e-8,
        }
    } else {
        Tolerance {
            atol: 2e-3,
            rtol: 2e-3,
        }
    };
    // W of Frobenius (hence spectral) norm 1/2: I − W is well conditioned and the host
    // iteration contracts.
    let w0 = rng.tensor(&[N, N], dtype).data().to_c64_vec();
    let norm = w0.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt();
    let w_h = host(
        &[N, N],
        &w0.iter().map(|z| z * (0.5 / norm)).collect::<Vec<_>>(),
        dtype,
    )
    .map_err(err)?;
    let w = w_h.data().to_c64_vec();
    let x_h = rng.tensor(&[N], dtype);
    let gamma = if dtype.is_complex() {
        Complex64::new(0.6, -0.8)
    } else {
        Complex64::new(1.5, 0.0)
    };

    // The conditions c = W·y + γ·x − y as three networks on the backend.
    let mv = plan("ij,j->i", &[&[N, N], &[N]]).map_err(err)?;
    let id = plan("i->i", &[&[N]]).map_err(err)?;
    let mut conditions = NetworkConditions::new(be.clone());
    let (w_operand, x_operand) = if w_input {
        (TermOperand::Input(0), TermOperand::Input(1))
    } else {
        let k = conditions.constant(be.from_host(w_h.clone()).map_err(err)?);
        (TermOperand::Constant(k), TermOperand::Input(0))
    };
    let conditions = conditions
        .term(1.0, mv, &[w_operand, TermOperand::Unknown])
        .and_then(|c| c.term(DynScalar::from_c64(gamma, dtype), id.clone(), &[x_operand]))
        .and_then(|c| c.term(-1.0, id, &[TermOperand::Unknown]))
        .map_err(err)?;

    // The solver: the fixed-point iteration on the host (‖W‖ ≤ 1/2: 2⁻¹²⁰ after 120 steps).
    let w_const = w.clone();
    let solve = move |xs: &[HostTensor], _: &()| -> Result<(HostTensor, ())> {
        let (w, x) = if w_input {
            (xs[0].data().to_c64_vec(), xs[1].data().to_c64_vec())
        } else {
            (w_const.clone(), xs[0].data().to_c64_vec())
        };
        let mut y = vec![Complex64::new(0.0, 0.0); N];
        for _ in 0..120 {
            y = matvec(&w, &y)
                .iter()
                .zip(&x)
                .map(|(wy, x)| wy + gamma * x)
                .collect();
        }
        Ok((host(&[N], &y, dtype)?, ()))
    };
    let f =
        ImplicitFunction::new(solve, conditions).with_linear_solver(SolverOptions::from(method));
    let xs: Vec<HostTensor> = if w_input {
        vec![w_h.clone(), x_h.clone()]
    } else {
        vec![x_h.clone()]
    };
    let (y, (), lin): (HostTensor, (), Linearization<T>) = f.vjp(&xs, &()).map_err(err)?;
    let check = |got: &HostTensor, want: &[Complex64], what: &str| {
        let want = host(got.dims(), want, dtype).map_err(err)?;
        tolerance
            .check(&Value::Tensor(got.clone()), &Value::Tensor(want), what)
            .map_err(|e| format!("{name}: {e}"))
    };

    // The solution and the conditions there (evaluated on the backend).
    let x = x_h.data().to_c64_vec();
    let gx: Vec<Complex64> = x.iter().map(|x| gamma * x).collect();
    check(&y, &closed_form(&w, &gx, false), "y = (I − W)⁻¹·γx")?;
    // ‖c‖ at the rounded solution: a few rounding errors of the terms.
    let eps = if dtype.is_double() {
        f64::EPSILON
    } else {
        f64::from(f32::EPSILON)
    };
    let scale = 1.0 + Value::Tensor(y.clone()).norm() + Value::Tensor(x_h.clone()).norm();
    let c_norm = lin.conditions_norm().unwrap_or(f64::INFINITY);
    if c_norm > 1e3 * eps * scale {
        return Err(format!("{name}: ‖c(x, y)‖ = {c_norm:e} at the solution"));
    }

    // Pushforward: dy = (I − W)⁻¹·(dW·y + γ·dx).
    let y = y.data().to_c64_vec();
    let dw_h = rng.tensor(&[N, N], dtype);
    let dx_h = rng.tensor(&[N], dtype);
    let dws = dw_h.data().to_c64_vec();
    let mut rhs: Vec<Complex64> = dx_h.data().to_c64_vec().iter().map(|d| gamma * d).collect();
    let dirs = if w_input {
        for (r, v) in rhs.iter_mut().zip(matvec(&dws, &y)) {
            *r += v;
        }
        vec![dw_h, dx_h]
    } else {
        vec![dx_h]
    };
    let dy = lin.jvp(&dirs).map_err(err)?;
    check(&dy, &closed_form(&w, &rhs, false), "dy")?;

    // Pullback: u = (I − W)⁻ᴴ·ȳ, x̄ = conj(γ)·u, W̄ = u·yᴴ; no cotangent for a constant W.
    let ybar_h = rng.tensor(&[N], dtype);
    let u = closed_form(&w, &ybar_h.data().to_c64_vec(), true);
    let grads = lin.vjp(&ybar_h).map_err(err)?;
    if grads.len() != xs.len() {
        return Err(format!(
            "{name}: {} cotangents for {} inputs",
            grads.len(),
            xs.len()
        ));
    }
    let xbar: Vec<Complex64> = u.iter().map(|u| gamma.conj() * u).collect();
    check(&grads[xs.len() - 1], &xbar, "x̄")?;
    if w_input {
        let wbar: Vec<Complex64> = (0..N * N).map(|k| u[k / N] * y[k % N].conj()).collect();
        check(&grads[0], &wbar, "W̄")?;
    }

    // Second order (`Linearization::hvp`, the conditions' second derivatives from the
    // backend's network rules): with W an input, d(W̄) = du·yᴴ + u·dyᴴ and
    // d(x̄) = conj(γ)·du with du = (I − W)⁻ᴴ·dWᴴ·u; with W a constant, y is linear in x and
    // the HVP is zero.
    let hv = lin.hvp(&ybar_h, &dirs).map_err(err)?;
    if w_input {
        let dwh_u: Vec<Complex64> = (0..N)
            .map(|i| (0..N).map(|j| dws[j * N + i].conj() * u[j]).sum())
            .collect();
        let du = closed_form(&w, &dwh_u, true);
        let dyv = dy.data().to_c64_vec();
        let hw: Vec<Complex64> = (0..N * N)
            .map(|k| du[k / N] * y[k % N].conj() + u[k / N] * dyv[k % N].conj())
            .collect();
        check(&hv[0], &hw, "HVP of W")?;
        let hx: Vec<Complex64> = du.iter().map(|d| gamma.conj() * d).collect();
        check(&hv[1], &hx, "HVP of x")?;
    } else {
        check(
            &hv[0],
            &[Complex64::new(0.0, 0.0); N],
            "HVP of a linear map",
        )?;
    }

    // The linearization as a core rule (what the engines' `implicit` entries record): through
    // the drivers on the backend, the solution, the pullback and the pushforward above; and
    // the implicit function as a rule solving at every call through `check_rule` (finite
    // differences, adjoint identity, non-mutation) in double precision.
    let on_be = xs.iter().map(|t| be.from_host(t.clone()));
    let on_be: Vec<B::Tensor> = on_be.collect::<Result<_>>().map_err(err)?;
    let refs: Vec<&B::Tensor> = on_be.iter().collect();
    let (out, pb) = rule::rrule(&lin, be, &refs, &vec![true; refs.len()]).map_err(err)?;
    let ybar_be = be.from_host(ybar_h.clone()).map_err(err)?;
    let x_bar = pb.pullback(&[Some(ybar_be)]).map_err(err)?;
    let dirs_be = dirs.iter().map(|t| be.from_host(t.clone()));
    let dirs_be: Vec<B::Tensor> = dirs_be.collect::<Result<_>>().map_err(err)?;
    let dirs_refs: Vec<Option<&B::Tensor>> = dirs_be.iter().map(Some).collect();
    let (_, dy_rule) = rule::frule(&lin, be, &refs, &dirs_refs).map_err(err)?;
    let same =
        |t: Option<&B::Tensor>, want: &HostTensor, what: &str| -> std::result::Result<(), String> {
            let got = t.map(|t| be.to_host(t)).transpose().map_err(err)?;
            match got {
                Some(g) if g.data() == want.data() => Ok(()),
                _ => Err(format!(
                    "{name}: the linearization's rule gives another {what}"
                )),
            }
        };
    same(out.first(), lin.y(), "y")?;
    same(dy_rule[0].as_ref(), &dy, "dy")?;
    for (g, want) in x_bar.iter().zip(&grads) {
        same(g.as_ref(), want, "cotangent")?;
    }
    if dtype.is_double() {
        let config = RuleCheck {
            seed: 45,
            ..RuleCheck::default()
        };
        check_rule(&Solving(&f, xs.len()), be, &refs, &config)
            .map_err(|e| format!("{name}: check_rule: {e}"))?;
    }

    // Adjoint test between the two.
    let m = adjoint_mismatch(
        &Value::Tensor(ybar_h),
        &Value::Tensor(dy),
        &grads
            .into_iter()
            .map(|g| Some(Value::Tensor(g)))
            .collect::<Vec<_>>(),
        &dirs.into_iter().map(Value::Tensor).collect::<Vec<_>>(),
    )
    .map_err(err)?;
    if m > tolerance.rtol {
        return Err(format!("{name}: adjoint test mismatch {m:e}"));
    }
    Ok(())
}

/// An implicit function as a rule that solves at every call, then is its
/// [`Linearization`]'s rule there (the linearization is the rule of one call, at its
/// solution): what [`check_rule`] can perturb.
struct Solving<'f, F>(&'f F, usize);

impl<F> std::fmt::Debug for Solving<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Solving")
    }
}

impl<T, S, C> Rule for Solving<'_, ImplicitFunction<T, (), (), S, C>>
where
    T: ImplicitScalar,
    S: Fn(&[HostTensor], &()) -> Result<(HostTensor, ())> + Send + Sync,
    C: Conditions<T, (), ()> + Send + Sync,
{
    fn name(&self) -> &str {
        "implicit (solving)"
    }

    fn num_inputs(&self) -> usize {
        self.1
    }

    fn num_outputs(&self) -> usize {
        1
    }

    fn keeps(&self, active: &[bool]) -> Keeps {
        Keeps::none(active.len(), 1)
    }

    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        active: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let xs: Vec<HostTensor> = x.iter().map(|t| be.to_host(t)).collect::<Result<_>>()?;
        let (_, (), lin) = self.0.vjp(&xs, &())?;
        lin.rrule(be, x, active)
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<(Vec<B::Tensor>, Vec<Option<B::Tensor>>)> {
        let xs: Vec<HostTensor> = x.iter().map(|t| be.to_host(t)).collect::<Result<_>>()?;
        let (lin, ()) = self.0.linearize(&xs, &())?;
        lin.frule(be, x, dx)
    }
}

/// The linear fixed point `y = W·y + γ·x` (`‖W‖ = 1/2`, `γ` complex on complex dtypes)
/// defined by the conditions `c = W·y + γ·x − y`, three networks of
/// [`NetworkConditions`] on the backend, solved by the fixed-point iteration on the host, for
/// every configured dtype, with `W` an input and `W` a constant of the conditions, under
/// dense LU and matrix-free GMRES (which applies `A·v` and `Aᴴ·u` through the backend's
/// network rules). [`ImplicitFunction`]'s solution, `‖c‖` there, pushforward and pullback are
/// checked against the closed form (`(I − W)⁻¹`, by faer's LU on the host:
/// `dy = (I − W)⁻¹(dW·y + γ·dx)`, `x̄ = conj(γ)·(I − W)⁻ᴴ·ȳ`, `W̄ = (I − W)⁻ᴴ·ȳ·yᴴ`), with one
/// cotangent per input (none for a constant), and against each other (adjoint test); the
/// [`Linearization`] as a core rule through the drivers (the same solution, pullback and
/// pushforward, to the bit) and the implicit function as a rule through [`check_rule`] (in
/// double precision); and the
/// second order ([`Linearization::hvp`], second derivatives of the conditions from the
/// backend's network rules) against its closed form
/// (`d(W̄) = du·yᴴ + u·dyᴴ`, `d(x̄) = conj(γ)·du`, `du = (I − W)⁻ᴴ·dWᴴ·u`; zero for constant W).
///
/// # Panics
/// With the failing cases, or when no dtype is configured or `max_rank < 2`.
pub fn fixed_point_rules<B>(be: &B, cfg: &Config)
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    let mut rng = Rng::seed(10);
    let (mut ran, mut failures) = (0, Vec::new());
    for &dt in &cfg.dtypes {
        if cfg.max_rank < 2 {
            break;
        }
        for w_input in [true, false] {
            for method in [Method::Lu, Method::Gmres] {
                let r = match dt {
                    DType::F32 => linear_fixed_point::<B, f32>(be, &mut rng, w_input, method),
                    DType::F64 => linear_fixed_point::<B, f64>(be, &mut rng, w_input, method),
                    DType::C32 => linear_fixed_point::<B, Complex32>(be, &mut rng, w_input, method),
                    DType::C64 => linear_fixed_point::<B, Complex64>(be, &mut rng, w_input, method),
                };
                ran += 1;
                if let Err(e) = r {
                    failures.push(e);
                }
            }
        }
    }
    report(ran, failures);
}
