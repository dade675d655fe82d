//! Networks as one dfdx op, against the network rule run directly on the strided backend
//! and finite differences of the reference primal.

use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Backend, DType, Error, HostTensor, Result};
use adrules_dfdx::dfdx::prelude::*;
use adrules_dfdx::{DfdxBackend, DfdxTensor, einsum, ncon, network, try_backward};
use adrules_strided::Strided;
use adrules_testing::{FiniteDifference, ReferenceBackend, Rng, Tolerance, Value};

type Traced<S> = Tensor<S, f64, Cpu, OwnedTape<f64, Cpu>>;

fn tensor<S: Shape>(h: &HostTensor) -> Tensor<S, f64, Cpu> {
    DfdxBackend::default()
        .from_host(h.clone())
        .unwrap()
        .to_tensor::<S, f64>()
        .unwrap()
}

fn host<S: Shape, T>(t: &Tensor<S, f64, Cpu, T>) -> HostTensor {
    DfdxBackend::default()
        .to_host(&DfdxTensor::new(t.retaped::<NoneTape>()).unwrap())
        .unwrap()
}

fn check(got: &HostTensor, want: &HostTensor, what: &str) {
    Tolerance::for_dtype(DType::F64)
        .check(
            &Value::Tensor(got.clone()),
            &Value::Tensor(want.clone()),
            what,
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The network's gradients for the output cotangent `w`, by its rule on the strided
/// backend (no dfdx).
fn rule_gradients(plan: &NetworkPlan, x: &[HostTensor], w: &HostTensor) -> Vec<HostTensor> {
    let be = Strided;
    let t: Vec<_> = x.iter().map(|h| be.from_host(h.clone()).unwrap()).collect();
    let refs: Vec<_> = t.iter().collect();
    let (_, pb) = plan.rrule(&be, &refs, &vec![true; x.len()]).unwrap();
    pb.pullback(&be.from_host(w.clone()).unwrap())
        .unwrap()
        .into_iter()
        .map(|g| be.to_host(&g.unwrap()).unwrap())
        .collect()
}

fn reference(plan: &NetworkPlan, x: &[HostTensor]) -> Result<HostTensor> {
    let be = ReferenceBackend;
    let t: Vec<_> = x
        .iter()
        .map(|h| be.from_host(h.clone()))
        .collect::<Result<_>>()?;
    be.to_host(&plan.execute(&be, &t.iter().collect::<Vec<_>>())?)
}

/// `⟨w, J_k·d⟩ = ⟨x̄_k, d⟩` for each operand `k` along a random direction.
fn fd_check(plan: &NetworkPlan, x: &[HostTensor], grads: &[HostTensor], w: &HostTensor) {
    let mut rng = Rng::seed(99);
    let xs: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
    let f = |v: &[Value]| -> Result<Value> {
        let t: Vec<HostTensor> = v
            .iter()
            .map(|v| v.tensor("x").cloned())
            .collect::<Result<_>>()?;
        reference(plan, &t).map(Value::Tensor)
    };
    let wv = Value::Tensor(w.clone());
    for (k, g) in grads.iter().enumerate() {
        let d: Vec<Value> = x
            .iter()
            .enumerate()
            .map(|(j, t)| {
                Value::Tensor(if j == k {
                    rng.tensor(t.dims(), DType::F64)
                } else {
                    HostTensor::zeros(t.dims(), DType::F64).unwrap()
                })
            })
            .collect();
        let jd = FiniteDifference::default().jvp(f, &xs, &d).unwrap();
        let (lhs, gv) = (wv.inner(&jd).unwrap().re, Value::Tensor(g.clone()));
        let rhs = gv.inner(&d[k]).unwrap().re;
        let scale = wv.norm() * jd.norm() + gv.norm() * d[k].norm();
        assert!(
            (lhs - rhs).abs() <= 1e-9 * scale,
            "operand {k}: {lhs} vs {rhs}"
        );
    }
}

/// `abc,bde,cdf->aef` with the tape on the middle operand only; the others are parameters.
#[test]
fn einsum_three_operands_tape_in_the_middle() {
    let mut rng = Rng::seed(31);
    let dims = [vec![2, 3, 4], vec![3, 5, 6], vec![4, 5, 2]];
    let x: Vec<HostTensor> = dims.iter().map(|d| rng.tensor(d, DType::F64)).collect();
    let plan = NetworkPlan::new(
        &Network::einsum("abc,bde,cdf->aef").unwrap(),
        &dims,
        &Order::Default,
    )
    .unwrap();
    let w = rng.tensor(plan.output_dims(), DType::F64);
    let (a, b, c) = (
        tensor::<Rank3<2, 3, 4>>(&x[0]),
        tensor::<(usize, usize, usize)>(&x[1]),
        tensor::<Rank3<4, 5, 2>>(&x[2]),
    );
    let y: Traced<Rank3<2, 6, 2>> =
        einsum("abc,bde,cdf->aef", (a.clone(), b.leaky_trace(), c.clone())).unwrap();
    check(&host(&y), &reference(&plan, &x).unwrap(), "primal");
    let g = try_backward((y * tensor::<Rank3<2, 6, 2>>(&w)).sum()).unwrap();
    let got = vec![host(&g.get(&a)), host(&g.get(&b)), host(&g.get(&c))];
    let want = rule_gradients(&plan, &x, &w);
    for k in 0..3 {
        check(&got[k], &want[k], &format!("gradient of operand {k}"));
    }
    fd_check(&plan, &x, &got, &w);
    // Without a tape: the primal only.
    let y: Tensor<Rank3<2, 6, 2>, f64, Cpu> = network(&plan, (a, b, c)).unwrap();
    check(
        &host(&y),
        &reference(&plan, &x).unwrap(),
        "primal without tape",
    );
}

/// `⟨ψ|O|ψ⟩` in ncon form with ψ passed twice (one traced, one not), and a partial trace
/// (label 5 twice in O): ψ's gradient gets both contributions.
#[test]
fn ncon_repeated_operand_and_trace() {
    let mut rng = Rng::seed(32);
    let indices = [vec![1, 2], vec![1, 2, 5, 5, 3, 4], vec![3, 4]];
    let dims = [vec![2, 3], vec![2, 3, 2, 2, 2, 3], vec![2, 3]];
    let psi = rng.tensor(&dims[0], DType::F64);
    let o = rng.tensor(&dims[1], DType::F64);
    let x = vec![psi.clone(), o.clone(), psi.clone()];
    let plan = NetworkPlan::new(
        &Network::ncon(&indices, None).unwrap(),
        &dims,
        &Order::Default,
    )
    .unwrap();
    let (p, op) = (
        tensor::<Rank2<2, 3>>(&psi),
        tensor::<(usize, usize, usize, usize, usize, usize)>(&o),
    );
    let pt = p.leaky_trace();
    let y: Traced<()> = ncon(&indices, (pt.with_empty_tape(), op.clone(), pt)).unwrap();
    check(&host(&y), &reference(&plan, &x).unwrap(), "primal");
    let g = try_backward(y).unwrap();
    let w = HostTensor::from_vec(&[], vec![1.0]).unwrap();
    let want = rule_gradients(&plan, &x, &w);
    let mut want_psi = want[0].as_slice::<f64>().unwrap().to_vec();
    for (a, b) in want_psi.iter_mut().zip(want[2].as_slice::<f64>().unwrap()) {
        *a += b;
    }
    let want_psi = HostTensor::from_vec(&[2, 3], want_psi).unwrap();
    check(&host(&g.get(&p)), &want_psi, "gradient of ψ (both uses)");
    check(&host(&g.get(&op)), &want[1], "gradient of O");
}

/// A chain of matrices given as a `Vec` (one shape type, one tape type).
#[test]
fn vec_operands() {
    let mut rng = Rng::seed(33);
    let dims = vec![vec![4, 4]; 4];
    let x: Vec<HostTensor> = dims.iter().map(|d| rng.tensor(d, DType::F64)).collect();
    let plan = NetworkPlan::new(
        &Network::einsum("ij,jk,kl,lm->im").unwrap(),
        &dims,
        &Order::Default,
    )
    .unwrap();
    let ts: Vec<Tensor<Rank2<4, 4>, f64, Cpu>> = x.iter().map(tensor).collect();
    let y: Traced<Rank2<4, 4>> = network(
        &plan,
        ts.iter().map(|t| t.leaky_trace()).collect::<Vec<_>>(),
    )
    .unwrap();
    let w = rng.tensor(&[4, 4], DType::F64);
    let g = try_backward((y * tensor::<Rank2<4, 4>>(&w)).sum()).unwrap();
    let want = rule_gradients(&plan, &x, &w);
    for (k, t) in ts.iter().enumerate() {
        check(
            &host(&g.get(t)),
            &want[k],
            &format!("gradient of operand {k}"),
        );
    }
}

#[test]
fn errors_are_typed() {
    let dev: Cpu = Default::default();
    let a: Tensor<Rank2<2, 3>, f64, Cpu> = dev.sample_normal();
    let b: Tensor<Rank2<3, 4>, f64, Cpu> = dev.sample_normal();
    let plan = NetworkPlan::new(
        &Network::einsum("ij,jk->ik").unwrap(),
        &[[2, 3], [3, 4]],
        &Order::Default,
    )
    .unwrap();
    let e = network::<Rank2<2, 4>, _, _>(&plan, (a.clone(),)).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, expected: 2, actual: 1 } if arg == "operands"),
        "{e}"
    );
    let e = network::<Rank2<2, 4>, _, _>(&plan, (a.clone(), a.clone())).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "operand 1"),
        "{e}"
    );
    let e = network::<Rank2<4, 2>, _, _>(&plan, (a.clone(), b.clone())).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "output"),
        "{e}"
    );
    let e = einsum::<Rank2<2, 4>, _, _>("ij,jk->ik->k", (a.clone(), b.clone())).unwrap_err();
    assert!(matches!(e, Error::Parse { .. }), "{e}");
    let e = ncon::<Rank2<2, 4>, _, _, _>(&[vec![-1, 1], vec![2, -2]], (a, b)).unwrap_err();
    assert!(matches!(e, Error::InvalidLabel { .. }), "{e}");
}
