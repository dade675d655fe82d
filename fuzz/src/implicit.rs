//! The fuzz target of the engines' implicit functions: `adrules::candle::Implicit` and
//! `adrules::burn::Implicit` with the conditions of a linear system written as engine
//! closures, `c(A, x, y) = A·y − x = 0`, solved by a dense Gaussian elimination with partial
//! pivoting (in f64, on the host; [`Error::Singular`] for a pivot at most `n·ε·max|A|`). The
//! gradient of `L = Σ Ȳ ⊙ y` is known in closed form, `x̄ = A⁻ᵀ·ȳ` and `Ā = −x̄·yᵀ`, so
//! every input is checked against it:
//!
//! - a random or ill-conditioned `A` (`n ≤ 4`, f32 and f64): `y` solves the system, and
//!   the engine's backward pass gives an `x̄` with `Aᵀ·x̄ = ȳ` up to a backward error of
//!   `64·n·ε·(‖A‖·‖x̄‖ + ‖ȳ‖)` and `Ā = −x̄·yᵀ`, or [`Error::Singular`] (a numerically
//!   singular `Aᵀ`);
//! - a singular `A` with `x ≠ 0`: the solver's [`Error::Singular`] out of the forward pass;
//! - a singular `A` (a zero row) with `x = 0`, solved by `y = 0`: the forward pass succeeds
//!   and the backward pass must be [`Error::Singular`] (the adjoint system has no solution),
//!   never a number;
//! - a NaN or an infinity in `A` or `x`: [`Error::InvalidArgument`] in the forward pass;
//! - a NaN or an infinity in the cotangent `ȳ`: [`Error::InvalidArgument`] out of the
//!   engine's `try_backward`, never a NaN gradient.
//!
//! Every error must be typed, no input may panic, and `A` and `x` are unchanged.

use adrules::{DType, Error};
use adrules_testing::Rng;

use crate::Finding;
use crate::engines::same_values;

fn wrong(what: impl Into<String>) -> Finding {
    Finding::Wrong(what.into())
}

/// The kinds of systems.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Random,
    IllConditioned,
    /// two equal rows, `x ≠ 0`: no solution
    SingularSolve,
    /// a zero row, `x = 0`: the solution `y = 0`, a singular adjoint system
    SingularAdjoint,
    NonFiniteA,
    NonFiniteX,
    NonFiniteCotangent,
}

const KINDS: [Kind; 7] = [
    Kind::Random,
    Kind::IllConditioned,
    Kind::SingularSolve,
    Kind::SingularAdjoint,
    Kind::NonFiniteA,
    Kind::NonFiniteX,
    Kind::NonFiniteCotangent,
];

/// One input: the engine (0 candle, 1 burn), the system and the cotangent, row-major,
/// rounded to the dtype.
struct Input {
    engine: usize,
    dtype: DType,
    kind: Kind,
    n: usize,
    a: Vec<f64>,
    x: Vec<f64>,
    y_bar: Vec<f64>,
}

/// The size of the input of `seed`: the elements of `A` and `x`.
pub(crate) fn size(seed: u64) -> usize {
    let n = Input::new(seed).n;
    n * n + n
}

fn round(v: f64, dtype: DType) -> f64 {
    if dtype == DType::F32 {
        v as f32 as f64
    } else {
        v
    }
}

impl Input {
    fn new(seed: u64) -> Self {
        let mut rng = Rng::seed(seed);
        let engine = rng.below(2);
        let dtype = [DType::F32, DType::F64][rng.below(2)];
        let kind = KINDS[rng.below(KINDS.len())];
        let n = 1 + rng.below(4);
        let mut a: Vec<f64> = (0..n * n).map(|_| round(rng.normal(), dtype)).collect();
        let mut x: Vec<f64> = (0..n).map(|_| round(rng.normal(), dtype)).collect();
        let mut y_bar: Vec<f64> = (0..n).map(|_| round(rng.normal(), dtype)).collect();
        let bad = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][rng.below(3)];
        let (i, j) = (rng.below(n), rng.below(n));
        match kind {
            Kind::Random => {}
            Kind::IllConditioned => {
                // the last row within δ of the first (A itself when n = 1: a tiny pivot)
                let delta = if dtype == DType::F64 { 1e-7 } else { 1e-3 };
                for c in 0..n {
                    let v = if n == 1 { 0.0 } else { a[c] };
                    a[(n - 1) * n + c] = round(v + delta * a[(n - 1) * n + c], dtype);
                }
            }
            Kind::SingularSolve => {
                // two equal rows (a zero one when n = 1), and a right-hand side off their span
                for c in 0..n {
                    a[j * n + c] = if n == 1 {
                        0.0
                    } else {
                        a[((j + 1) % n) * n + c]
                    };
                }
                x[j] = x[(j + 1) % n] + 1.0;
            }
            Kind::SingularAdjoint => {
                for c in 0..n {
                    a[i * n + c] = 0.0;
                }
                x.iter_mut().for_each(|v| *v = 0.0);
            }
            Kind::NonFiniteA => a[i * n + j] = bad,
            Kind::NonFiniteX => x[i] = bad,
            Kind::NonFiniteCotangent => y_bar[i] = bad,
        }
        Input {
            engine,
            dtype,
            kind,
            n,
            a,
            x,
            y_bar,
        }
    }

    fn text(&self) -> String {
        let engine = ["candle", "burn"][self.engine];
        format!(
            "{engine}: {:?} {} n = {}: A {:?}, x {:?}, ȳ {:?}",
            self.kind, self.dtype, self.n, self.a, self.x, self.y_bar
        )
    }
}

/// `y` with `A·y = x` (`A`: `n×n` row-major) by Gaussian elimination with partial pivoting
/// in f64; `y = 0` for `x = 0`.
///
/// # Errors
/// [`Error::Singular`] (`"A"`) for a pivot at most `n·ε·max|A|` (`ε` of `dtype`).
fn solve(a: &[f64], x: &[f64], n: usize, dtype: DType) -> Result<Vec<f64>, Error> {
    if x.iter().all(|&v| v == 0.0) {
        return Ok(vec![0.0; n]);
    }
    let eps = if dtype == DType::F64 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    };
    let max = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let threshold = n as f64 * eps * max;
    let (mut m, mut y) = (a.to_vec(), x.to_vec());
    for k in 0..n {
        let p = (k..n)
            .max_by(|&r, &s| m[r * n + k].abs().total_cmp(&m[s * n + k].abs()))
            .unwrap_or(k);
        let pivot = m[p * n + k];
        if pivot.abs() <= threshold {
            return Err(Error::Singular {
                arg: "A".into(),
                reason: format!("pivot {k} is {pivot:e}, at most n·ε·max|A| = {threshold:e}"),
            });
        }
        for c in 0..n {
            m.swap(k * n + c, p * n + c);
        }
        y.swap(k, p);
        for r in k + 1..n {
            let l = m[r * n + k] / pivot;
            for c in k..n {
                m[r * n + c] -= l * m[k * n + c];
            }
            y[r] -= l * y[k];
        }
    }
    for k in (0..n).rev() {
        let s: f64 = (k + 1..n).map(|c| m[k * n + c] * y[c]).sum();
        y[k] = (y[k] - s) / m[k * n + k];
    }
    Ok(y)
}

/// The gradients of `A` and `x`, row-major (`None`: the engine gave none).
type Gradients = (Option<Vec<f64>>, Option<Vec<f64>>);

/// What the engine did: `y`, then the gradients of `A` and `x` (`None`: none given) or the
/// backward pass's error, and `A` and `x` after the call.
struct Outcome {
    y: Vec<f64>,
    grads: Result<Gradients, Error>,
    a_after: Vec<f64>,
    x_after: Vec<f64>,
}

/// The implicit function of `seed` through its engine, checked against the closed form.
pub(crate) fn implicit(seed: u64) -> Result<(), Finding> {
    let input = Input::new(seed);
    let got = if input.engine == 0 {
        candle(&input)
    } else {
        burn(&input)
    };
    check(&input, got)
}

fn check(input: &Input, got: Result<Outcome, Error>) -> Result<(), Finding> {
    let text = input.text();
    let reference = solve(&input.a, &input.x, input.n, input.dtype);
    let got = match (input.kind, got) {
        (Kind::NonFiniteA | Kind::NonFiniteX, Err(Error::InvalidArgument { .. })) => {
            return Ok(());
        }
        (Kind::NonFiniteA | Kind::NonFiniteX, r) => {
            let r = r.map(|o| o.y);
            return Err(wrong(format!("{text}: {r:?}, not a refused input")));
        }
        (_, Err(Error::Singular { .. })) if reference.is_err() => return Ok(()),
        (_, Err(e)) => return Err(wrong(format!("{text}: refused: {e}"))),
        (_, Ok(_)) if reference.is_err() => {
            return Err(wrong(format!("{text}: accepted, the solver refuses")));
        }
        (_, Ok(o)) => o,
    };
    if !same_values(&got.a_after, &input.a) || !same_values(&got.x_after, &input.x) {
        return Err(Finding::Mutated(format!("{text}: A or x changed")));
    }
    let n = input.n;
    let eps = if input.dtype == DType::F64 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    };
    let tol = 64.0 * n as f64 * eps;
    let norm = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let a_norm = (0..n)
        .map(|r| {
            input.a[r * n..(r + 1) * n]
                .iter()
                .map(|v| v.abs())
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    let y = &got.y;
    if y.len() != n {
        return Err(wrong(format!("{text}: y has {} values", y.len())));
    }
    for r in 0..n {
        let ay: f64 = (0..n).map(|c| input.a[r * n + c] * y[c]).sum();
        if (ay - input.x[r]).abs() > tol * (a_norm * norm(y) + norm(&input.x)) {
            return Err(wrong(format!("{text}: y = {y:?} does not solve A·y = x")));
        }
    }
    let (a_bar, x_bar) = match (input.kind, got.grads) {
        (Kind::NonFiniteCotangent, Err(Error::InvalidArgument { .. })) => return Ok(()),
        (Kind::NonFiniteCotangent, g) => {
            return Err(wrong(format!(
                "{text}: a non-finite cotangent gave {g:?}, not a typed error"
            )));
        }
        (Kind::SingularAdjoint, Err(Error::Singular { .. })) => return Ok(()),
        (Kind::SingularAdjoint, g) => {
            return Err(wrong(format!(
                "{text}: a singular adjoint system gave {g:?}, not Error::Singular"
            )));
        }
        (_, Err(Error::Singular { .. })) => return Ok(()),
        (_, Err(e)) => return Err(wrong(format!("{text}: backward: {e}"))),
        (_, Ok((Some(a_bar), Some(x_bar)))) => (a_bar, x_bar),
        (_, Ok(g)) => return Err(wrong(format!("{text}: a missing gradient: {g:?}"))),
    };
    if a_bar.len() != n * n || x_bar.len() != n {
        return Err(wrong(format!("{text}: gradients of the wrong sizes")));
    }
    if !a_bar.iter().chain(&x_bar).all(|v| v.is_finite()) {
        return Err(wrong(format!("{text}: a non-finite gradient {x_bar:?}")));
    }
    // Aᵀ·x̄ = ȳ up to a backward error
    let bound = tol * (a_norm.max(1e-300) * norm(&x_bar) * n as f64 + norm(&input.y_bar));
    for c in 0..n {
        let atx: f64 = (0..n).map(|r| input.a[r * n + c] * x_bar[r]).sum();
        if (atx - input.y_bar[c]).abs() > bound {
            return Err(wrong(format!(
                "{text}: x̄ = {x_bar:?} is not A⁻ᵀ·ȳ (column {c}: {atx:e} against {:e})",
                input.y_bar[c]
            )));
        }
    }
    // Ā = −x̄·yᵀ
    let scale = norm(&x_bar) * norm(y);
    for r in 0..n {
        for c in 0..n {
            let want = -x_bar[r] * y[c];
            if (a_bar[r * n + c] - want).abs() > tol * scale.max(f64::MIN_POSITIVE) {
                return Err(wrong(format!(
                    "{text}: Ā[{r}, {c}] = {:e}, not −x̄·yᵀ = {want:e}",
                    a_bar[r * n + c]
                )));
            }
        }
    }
    Ok(())
}

/// `adrules::candle::Implicit` on candle's CPU device, then `try_backward` of `Σ Ȳ ⊙ y`.
fn candle(input: &Input) -> Result<Outcome, Error> {
    use adrules::candle::candle_core::{DType as CDType, Device, Tensor, Var};
    use adrules::candle::{Implicit, candle_dtype, from_candle, to_candle, try_backward};
    let (n, dtype) = (input.n, input.dtype);
    let cdt = candle_dtype(dtype)?;
    let values = |t: &Tensor| -> Result<Vec<f64>, Error> {
        t.to_dtype(CDType::F64)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(from_candle)
    };
    let tensor = |v: &[f64], dims: &[usize]| {
        Tensor::from_vec(v.to_vec(), dims, &Device::Cpu)
            .and_then(|t| t.to_dtype(cdt))
            .map_err(from_candle)
    };
    let solver = move |v: &[Tensor]| {
        let read = |t: &Tensor| t.to_dtype(CDType::F64)?.flatten_all()?.to_vec1::<f64>();
        let y = solve(&read(&v[0])?, &read(&v[1])?, n, dtype).map_err(to_candle)?;
        Tensor::from_vec(y, n, v[1].device())?.to_dtype(v[1].dtype())
    };
    let conditions = |v: &[Tensor], y: &Tensor| v[0].matmul(&y.unsqueeze(1)?)?.squeeze(1)? - &v[1];
    let f = Implicit::new(solver, conditions);
    let a = Var::from_tensor(&tensor(&input.a, &[n, n])?).map_err(from_candle)?;
    let x = Var::from_tensor(&tensor(&input.x, &[n])?).map_err(from_candle)?;
    let y = f
        .apply(&[a.as_tensor(), x.as_tensor()])
        .map_err(from_candle)?;
    let loss = y
        .mul(&tensor(&input.y_bar, &[n])?)
        .and_then(|t| t.sum_all())
        .map_err(from_candle)?;
    let grads = match try_backward(&loss) {
        Ok(g) => {
            let get = |v: &Var| g.get(v.as_tensor()).map(values).transpose();
            get(&a).and_then(|ga| Ok((ga, get(&x)?)))
        }
        Err(e) => Err(e),
    };
    Ok(Outcome {
        y: values(&y)?,
        grads,
        a_after: values(a.as_tensor())?,
        x_after: values(x.as_tensor())?,
    })
}

/// `adrules::burn::Implicit` on Flex with autodiff, then `try_backward` of `Σ Ȳ ⊙ y`.
fn burn(input: &Input) -> Result<Outcome, Error> {
    use adrules::burn::burn_tensor::{Tensor, TensorData};
    use adrules::burn::{Implicit, try_backward};

    use crate::adapters::burn_target::{device, dtype as burn_dtype, values};
    let (n, dtype) = (input.n, input.dtype);
    let dt = burn_dtype(dtype);
    let solver = move |v: &[Tensor<1>]| -> adrules::Result<Tensor<1>> {
        let y = solve(&values(&v[0]), &values(&v[1]), n, dtype)?;
        let data = TensorData::new(y, [n]);
        Ok(Tensor::<1>::from_data(data, (&v[1].device(), v[1].dtype())))
    };
    let conditions = move |v: &[Tensor<1>], y: &Tensor<1>| -> Tensor<1> {
        let a = v[0].clone().reshape([n, n]);
        a.matmul(y.clone().reshape([n, 1])).reshape([n]) - v[1].clone()
    };
    let f = Implicit::new(solver, conditions);
    let dev = device();
    let a =
        Tensor::<2>::from_data(TensorData::new(input.a.clone(), [n, n]), (&dev, dt)).require_grad();
    let x =
        Tensor::<1>::from_data(TensorData::new(input.x.clone(), [n]), (&dev, dt)).require_grad();
    let y = f.apply([(&a).into(), (&x).into()])?;
    let w = Tensor::<1>::from_data(TensorData::new(input.y_bar.clone(), [n]), (&dev, dt));
    let grads = try_backward(&(y.clone() * w).sum()).map(|g| {
        (
            a.grad(&g).map(|t| values(&t)),
            x.grad(&g).map(|t| values(&t)),
        )
    });
    Ok(Outcome {
        y: values(&y),
        grads,
        a_after: values(&a),
        x_after: values(&x),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense solve solves, and refuses a singular system.
    #[test]
    fn the_reference_solver_solves_and_refuses_singular_systems() {
        let a = [2.0, 1.0, 1.0, 3.0];
        let y = solve(&a, &[3.0, 5.0], 2, DType::F64).unwrap();
        assert!(
            (y[0] - 0.8).abs() < 1e-15 && (y[1] - 1.4).abs() < 1e-15,
            "{y:?}"
        );
        let e = solve(&[1.0, 2.0, 2.0, 4.0], &[1.0, 0.0], 2, DType::F64).unwrap_err();
        assert!(matches!(e, Error::Singular { .. }), "{e}");
        assert_eq!(
            solve(&[0.0; 4], &[0.0; 2], 2, DType::F32).unwrap(),
            [0.0; 2]
        );
    }

    /// Every kind of system occurs, and the well-posed ones reach the gradient comparison on
    /// both engines.
    #[test]
    fn well_posed_inputs_reach_the_gradient_comparison() {
        let mut kinds = [false; 7];
        let mut compared = [0; 2];
        for seed in 0..300 {
            let input = Input::new(seed);
            kinds[KINDS.iter().position(|&k| k == input.kind).unwrap()] = true;
            let got = if input.engine == 0 {
                candle(&input)
            } else {
                burn(&input)
            };
            if input.kind == Kind::Random
                && matches!(
                    got,
                    Ok(Outcome {
                        grads: Ok((Some(_), Some(_))),
                        ..
                    })
                )
            {
                compared[input.engine] += 1;
            }
        }
        assert!(kinds.iter().all(|&k| k), "{kinds:?}");
        assert!(compared.iter().all(|&c| c > 5), "{compared:?}");
    }
}
