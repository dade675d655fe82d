//! Networks on candle, chained from the pairwise custom ops: gradients against the core's
//! network pullback on the strided backend and against finite differences, candle's autograd
//! of the same network written with matmul, an operand used twice, ncon with flags, a
//! 5-tensor network trained in a plain candle loop, and typed errors.

use adrules_candle::candle_core::{Tensor, Var};
use adrules_candle::{CandleBackend, adrules_error, einsum, ncon, network};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Backend, DType, Dims, Error, HostTensor};
use adrules_strided::Strided;
use adrules_testing::{FiniteDifference, Rng, Tolerance, Value};

fn up(h: &HostTensor) -> Tensor {
    CandleBackend::cpu().from_host(h.clone()).unwrap()
}

fn down(t: &Tensor) -> HostTensor {
    CandleBackend::cpu().to_host(t).unwrap()
}

fn close(got: &HostTensor, want: &HostTensor, tol: f64, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    Tolerance {
        atol: tol,
        rtol: tol,
    }
    .check(
        &Value::Tensor(got.clone()),
        &Value::Tensor(want.clone()),
        what,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn plan(subscripts: &str, dims: &[&[usize]]) -> NetworkPlan {
    let net = Network::einsum(subscripts).unwrap();
    let dims: Vec<Dims> = dims.iter().map(|d| d.iter().copied().collect()).collect();
    NetworkPlan::new(&net, &dims, &Order::Default).unwrap()
}

/// `L = ⟨W, network(x)⟩` and `∂L/∂x` by candle's backward pass.
fn grads(plan: &NetworkPlan, x: &[HostTensor], w: &HostTensor) -> (HostTensor, Vec<HostTensor>) {
    let vars: Vec<Var> = x
        .iter()
        .map(|h| Var::from_tensor(&up(h)).unwrap())
        .collect();
    let xs: Vec<&Tensor> = vars.iter().map(|v| v.as_tensor()).collect();
    let out = network(plan, &xs).unwrap();
    let g = (&out * &up(w))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let g = vars
        .iter()
        .map(|v| down(g.get(v.as_tensor()).unwrap()))
        .collect();
    (down(&out), g)
}

const CASES: [(&str, &[&[usize]]); 6] = [
    ("ij,jk,kl->il", &[&[3, 4], &[4, 5], &[5, 2]]),
    ("abc,bde,cdf->aef", &[&[2, 3, 4], &[3, 5, 2], &[4, 5, 3]]),
    (
        "ab,bcx,cdy,dez,ea->xyz",
        &[&[2, 3], &[3, 2, 2], &[2, 3, 3], &[3, 2, 2], &[2, 2]],
    ),
    ("iij,jk->k", &[&[3, 3, 4], &[4, 2]]),
    ("ijk->kij", &[&[2, 3, 4]]),
    ("i,j->ji", &[&[3], &[4]]),
];

#[test]
fn gradients_match_the_network_pullback_and_finite_differences() {
    let mut rng = Rng::seed(31);
    for dtype in [DType::F64, DType::F32] {
        let tol = Tolerance::for_dtype(dtype).rtol;
        for (subscripts, dims) in CASES {
            let p = plan(subscripts, dims);
            let x: Vec<HostTensor> = dims.iter().map(|d| rng.tensor(d, dtype)).collect();
            let w = rng.tensor(p.output_dims(), dtype);
            let (out, g) = grads(&p, &x, &w);
            // The core's network rules on the strided backend.
            let xs: Vec<_> = x
                .iter()
                .map(|h| Strided.from_host(h.clone()).unwrap())
                .collect();
            let refs: Vec<_> = xs.iter().collect();
            let (want, pb) = p.rrule(&Strided, &refs, &vec![true; x.len()]).unwrap();
            close(
                &out,
                &Strided.to_host(&want).unwrap(),
                tol,
                &format!("{subscripts}: primal"),
            );
            let cot = pb.pullback(&Strided.from_host(w.clone()).unwrap()).unwrap();
            for (k, (g, c)) in g.iter().zip(&cot).enumerate() {
                let c = Strided.to_host(c.as_ref().unwrap()).unwrap();
                close(
                    g,
                    &c,
                    tol,
                    &format!("{subscripts} {dtype}: gradient {k} vs network pullback"),
                );
            }
            if dtype != DType::F64 {
                continue;
            }
            // Finite differences of the candle network, all inputs at once.
            let xv: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
            let dx: Vec<Value> = x
                .iter()
                .map(|h| Value::Tensor(rng.tensor(h.dims(), dtype)))
                .collect();
            let f = |v: &[Value]| {
                let t: Vec<Tensor> = v.iter().map(|v| up(v.tensor("x").unwrap())).collect();
                let r: Vec<&Tensor> = t.iter().collect();
                Ok(Value::Tensor(down(&network(&p, &r).unwrap())))
            };
            let jvp = FiniteDifference::default().jvp(f, &xv, &dx).unwrap();
            let lhs = Value::Tensor(w.clone()).inner(&jvp).unwrap().re;
            let rhs: f64 = g
                .iter()
                .zip(&dx)
                .map(|(g, d)| Value::Tensor(g.clone()).inner(d).unwrap().re)
                .sum();
            assert!(
                (lhs - rhs).abs() < 1e-8 * (1.0 + lhs.abs()),
                "{subscripts}: FD {lhs} vs {rhs}"
            );
        }
    }
}

/// The same network through candle's own matmul autograd, with one operand used twice.
#[test]
fn operand_used_twice_matches_candle_autograd() {
    let mut rng = Rng::seed(32);
    let x = Var::from_tensor(&up(&rng.tensor(&[4, 4], DType::F64))).unwrap();
    let y = Var::from_tensor(&up(&rng.tensor(&[4, 4], DType::F64))).unwrap();
    let w = up(&rng.tensor(&[4, 4], DType::F64));
    let (xt, yt) = (x.as_tensor(), y.as_tensor());
    let ours = einsum("ij,jk,kl->il", &[xt, yt, xt]).unwrap();
    let theirs = xt.matmul(yt).unwrap().matmul(xt).unwrap();
    close(&down(&ours), &down(&theirs), 1e-12, "primal");
    let g1 = (&ours * &w).unwrap().sum_all().unwrap().backward().unwrap();
    let g2 = (&theirs * &w)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    for v in [xt, yt] {
        close(
            &down(g1.get(v).unwrap()),
            &down(g2.get(v).unwrap()),
            1e-12,
            "gradient",
        );
    }
}

/// ncon lists equal the Einstein form.
#[test]
fn ncon_matches_einsum() {
    let mut rng = Rng::seed(33);
    let a = up(&rng.tensor(&[3, 4, 2], DType::F64));
    let b = up(&rng.tensor(&[4, 5], DType::F64));
    let c = up(&rng.tensor(&[5, 2], DType::F64));
    let ours = ncon(&[vec![-1, 1, 2], vec![1, 3], vec![3, 2]], &[&a, &b, &c]).unwrap();
    let want = einsum("abc,bd,dc->a", &[&a, &b, &c]).unwrap();
    close(&down(&ours), &down(&want), 1e-12, "ncon vs einsum");
}

/// A 5-tensor ring (`ab,bcx,cdy,dez,ea->xyz`) fitted to a target by plain gradient descent
/// in candle. The loss is recomputed independently at every check (strided backend on host
/// copies, host arithmetic) and must decrease.
#[test]
fn five_tensor_network_trains() {
    let mut rng = Rng::seed(34);
    let (subscripts, dims) = CASES[2];
    let p = plan(subscripts, dims);
    let target = rng.tensor(p.output_dims(), DType::F64);
    let target_t = up(&target);
    let vars: Vec<Var> = dims
        .iter()
        .map(|d| {
            let t = (up(&rng.tensor(d, DType::F64)) * 0.5).unwrap();
            Var::from_tensor(&t).unwrap()
        })
        .collect();
    let loss_host = |vars: &[Var]| -> f64 {
        let xs: Vec<_> = vars
            .iter()
            .map(|v| Strided.from_host(down(v.as_tensor())).unwrap())
            .collect();
        let refs: Vec<_> = xs.iter().collect();
        let out = Strided
            .to_host(&p.execute(&Strided, &refs).unwrap())
            .unwrap();
        out.as_slice::<f64>()
            .unwrap()
            .iter()
            .zip(target.as_slice::<f64>().unwrap())
            .map(|(a, b)| (a - b).powi(2))
            .sum()
    };
    let mut history = vec![loss_host(&vars)];
    for step in 1..=40 {
        let xs: Vec<&Tensor> = vars.iter().map(|v| v.as_tensor()).collect();
        let out = network(&p, &xs).unwrap();
        let loss = (&out - &target_t)
            .unwrap()
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap();
        let grads = loss.backward().unwrap();
        for v in &vars {
            let g = grads
                .get(v.as_tensor())
                .expect("every operand gets a gradient");
            v.set(&(v.as_tensor() - (g * 0.02).unwrap()).unwrap())
                .unwrap();
        }
        if step % 10 == 0 {
            history.push(loss_host(&vars));
        }
    }
    assert!(
        history.windows(2).all(|w| w[1] < w[0]),
        "losses {history:?}"
    );
    assert!(history[4] < 0.5 * history[0], "losses {history:?}");
}

/// The typed adrules error inside a candle error (the test fails if there is none).
fn typed(e: candle_core::Error) -> Error {
    adrules_error(&e)
        .cloned()
        .unwrap_or_else(|| panic!("not an adrules error: {e}"))
}

#[test]
fn bad_input_is_a_typed_error() {
    let mut rng = Rng::seed(35);
    let a = up(&rng.tensor(&[3, 4], DType::F64));
    let b = up(&rng.tensor(&[5, 2], DType::F64));
    let e = typed(einsum("ij,jk->ik", &[&a, &b]).unwrap_err());
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = typed(einsum("ij,jk->ik", &[&a]).unwrap_err());
    assert!(matches!(e, Error::CountMismatch { .. }), "{e}");
    let e = typed(einsum("ij,jk->ik->k", &[&a, &b]).unwrap_err());
    assert!(matches!(e, Error::Parse { .. }), "{e}");
    let e = typed(ncon(&[vec![-1, 0]], &[&a]).unwrap_err());
    assert!(matches!(e, Error::InvalidLabel { .. }), "{e}");
    let p = plan("ij,jk->ik", &[&[3, 4], &[4, 2]]);
    let e = typed(network(&p, &[&a, &b]).unwrap_err());
    assert!(
        matches!(e, Error::ShapeMismatch { ref arg, .. } if arg.starts_with("operand 1")),
        "{e}"
    );
    let e = typed(network(&p, &[&a]).unwrap_err());
    assert!(matches!(e, Error::CountMismatch { .. }), "{e}");
    let half = a.to_dtype(adrules_candle::candle_core::DType::F16).unwrap();
    let e = typed(einsum("ij->ji", &[&half]).unwrap_err());
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
}
