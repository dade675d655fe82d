//! Gradients of the adrules ops recorded on burn's autodiff graph, checked three ways:
//! against the core rules on the strided CPU backend, against central finite differences
//! of the primal, and against burn's own `einsum` autodiff on the same expression. The
//! generic checks run on two inner backends (Flex and NdArray) to show the generic path.

use adrules_burn::burn_autodiff::Autodiff;
use adrules_burn::burn_autodiff::checkpoint::strategy::NoCheckpointing;
use adrules_burn::burn_backend::ops::FloatTensorOps;
use adrules_burn::burn_backend::tensor::FloatTensor;
use adrules_burn::burn_backend::{AutodiffBackend, Backend as BurnBackendTrait};
use adrules_burn::burn_flex::Flex;
use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_burn::{BurnBackend, BurnTensor, Op, forward, forward_autodiff};
use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::rules::{Activity, AddOp, ContractOp, Primitive, TraceOp};
use adrules_core::{Backend, ContractSpec, DType, DynScalar, HostTensor, Permutation, TraceSpec};
use adrules_strided::Strided;
use adrules_testing::{FiniteDifference, ReferenceBackend, Rng, Tolerance, Value};
// burn-ndarray is deprecated upstream; it serves here as a second, independent backend
// (different matmul, strides and reductions) on which the generic path must also be right.
#[allow(deprecated)]
use burn_ndarray::NdArray;

type Ad<B> = Autodiff<B, NoCheckpointing>;

fn be<B: BurnBackendTrait>() -> BurnBackend<B> {
    BurnBackend::new(Default::default())
}

/// A leaf of `Autodiff<B>` holding `h`, requiring gradients when `grad`.
fn leaf<B: BurnBackendTrait>(h: &HostTensor, grad: bool) -> FloatTensor<Ad<B>> {
    let t = Ad::<B>::from_inner(be::<B>().from_host(h.clone()).unwrap().into_primitive());
    if grad {
        Ad::<B>::float_set_require_grad(t, true)
    } else {
        t
    }
}

/// `L = Σ out ⊙ w` on `Autodiff<B>`.
fn loss<B: BurnBackendTrait>(out: FloatTensor<Ad<B>>, w: &HostTensor) -> FloatTensor<Ad<B>> {
    Ad::<B>::float_sum(Ad::<B>::float_mul(out, leaf::<B>(w, false)))
}

fn host<B: BurnBackendTrait>(t: &FloatTensor<B>) -> HostTensor {
    be::<B>().to_host(&BurnTensor::new(t.clone())).unwrap()
}

/// Gradients of `Σ op(x) ⊙ w` from the adrules node on `Autodiff<B>`, for the inputs marked
/// active (`None` for the others, which must receive none).
fn burn_gradients<B: BurnBackendTrait, const N: usize>(
    op: &Op,
    x: &[HostTensor; N],
    active: [bool; N],
    w: &HostTensor,
) -> Vec<Option<HostTensor>> {
    let leaves: [FloatTensor<Ad<B>>; N] = std::array::from_fn(|i| leaf::<B>(&x[i], active[i]));
    let out = forward_autodiff::<B, NoCheckpointing, N>(op, leaves.clone()).unwrap();
    let grads = Ad::<B>::backward(loss::<B>(out, w));
    leaves
        .iter()
        .map(|t| Ad::<B>::grad(t, &grads).map(|g| host::<B>(&g)))
        .collect()
}

/// The same gradients from the core rules on another backend (the strided CPU backend).
fn rule_gradients<R: Backend, const N: usize>(
    r: &R,
    op: &Op,
    x: &[HostTensor; N],
    active: [bool; N],
    w: &HostTensor,
) -> Vec<Option<HostTensor>> {
    let t: Vec<_> = x.iter().map(|h| r.from_host(h.clone()).unwrap()).collect();
    let wt = r.from_host(w.clone()).unwrap();
    let h = |t: Option<R::Tensor>| t.map(|t| r.to_host(&t).unwrap());
    if let Op::Network(plan) = op {
        let operands: Vec<&R::Tensor> = t.iter().collect();
        let (_, pullback) = plan.rrule(r, &operands, &active).unwrap();
        return pullback.pullback(&wt).unwrap().into_iter().map(h).collect();
    }
    let dtype = x.iter().fold(DType::F32, |d, h| d.join(h.dtype()));
    let mut c = r.zeros(w.dims(), dtype).unwrap();
    let act = Activity {
        a: active[0],
        b: N > 1 && active[N - 1],
        ..Activity::NONE
    };
    let g = match op {
        Op::Primitive(Primitive::Add(o)) => o.rrule(r, &mut c, &t[0], act).unwrap().pullback(&wt),
        Op::Primitive(Primitive::Trace(o)) => o.rrule(r, &mut c, &t[0], act).unwrap().pullback(&wt),
        Op::Primitive(Primitive::Contract(o)) => {
            o.rrule(r, &mut c, &t[0], &t[1], act).unwrap().pullback(&wt)
        }
        _ => unreachable!("every op is listed"),
    }
    .unwrap();
    let mut v = vec![h(g.a)];
    if N > 1 {
        v.push(h(g.b));
    }
    v
}

/// `Σ_i ⟨x̄_i, ẋ_i⟩` against central finite differences of `L(x) = Σ op(x) ⊙ w`, the primal
/// evaluated in f64 by the adrules forward on plain Flex.
fn fd_mismatch<const N: usize>(
    op: &Op,
    x: &[HostTensor; N],
    grads: &[Option<HostTensor>],
    w: &HostTensor,
    rng: &mut Rng,
) -> f64 {
    let flex = be::<Flex>();
    let xv: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
    let dx: Vec<Value> = x
        .iter()
        .zip(grads)
        .map(|(h, g)| {
            let d = Value::Tensor(rng.tensor(h.dims(), DType::F64));
            if g.is_some() {
                d
            } else {
                d.axpy(-1.0, &d).unwrap()
            }
        })
        .collect();
    let wv = Value::Tensor(w.to_dtype_projected(DType::F64));
    let f = |v: &[Value]| -> adrules_core::Result<Value> {
        let p: [FloatTensor<Flex>; N] = std::array::from_fn(|i| {
            let h = v[i].tensor("x").unwrap().clone();
            flex.from_host(h).unwrap().into_primitive()
        });
        let out = BurnTensor::read(forward::<Flex, N>(op, p)?, op.output_rank() == 0);
        let out = Value::Tensor(flex.to_host(&out)?);
        Ok(Value::Scalar(DynScalar::from_c64(
            wv.inner(&out)?,
            DType::F64,
        )))
    };
    let fd = FiniteDifference::default().jvp(f, &xv, &dx).unwrap();
    let mut rhs = 0.0;
    let mut scale = 0.0;
    for (g, d) in grads.iter().zip(&dx) {
        if let Some(g) = g {
            let g = Value::Tensor(g.to_dtype_projected(DType::F64));
            rhs += g.inner(d).unwrap().re;
            scale += g.norm() * d.norm();
        }
    }
    let lhs = fd.to_c64_vec()[0].re;
    (lhs - rhs).abs() / scale.max(1e-300)
}

/// One op checked on inner backend `B` in `dtype`, every activity pattern with at least one
/// active input.
fn check_op<B: BurnBackendTrait, const N: usize>(op: Op, dims: [&[usize]; N], dtype: DType) {
    let mut rng = Rng::seed(11);
    let x: [HostTensor; N] = std::array::from_fn(|i| rng.tensor(dims[i], dtype));
    let flex = be::<Flex>();
    let p: [FloatTensor<Flex>; N] =
        std::array::from_fn(|i| flex.from_host(x[i].clone()).unwrap().into_primitive());
    let out = forward::<Flex, N>(&op, p).unwrap();
    let out_dims = flex.dims(&BurnTensor::read(out, op.output_rank() == 0));
    let w = rng.tensor(&out_dims, dtype);
    let tol = Tolerance::for_dtype(dtype);
    for mask in 1..(1u32 << N) {
        let active: [bool; N] = std::array::from_fn(|i| mask & (1 << i) != 0);
        let got = burn_gradients::<B, N>(&op, &x, active, &w);
        let want = rule_gradients(&Strided, &op, &x, active, &w);
        for i in 0..N {
            match (&got[i], &want[i]) {
                (Some(g), Some(e)) => {
                    assert_eq!(g.dtype(), dtype, "{op:?}: gradient dtype of input {i}");
                    tol.check(
                        &Value::Tensor(g.clone()),
                        &Value::Tensor(e.clone()),
                        &format!("{op:?} gradient {i} (active {active:?})"),
                    )
                    .unwrap()
                }
                (None, None) => {}
                (g, e) => panic!(
                    "{op:?}: input {i} active {} but burn gradient {} and strided {}",
                    active[i],
                    g.is_some(),
                    e.is_some()
                ),
            }
        }
        let m = fd_mismatch(&op, &x, &got, &w, &mut rng);
        let fd_tol = if dtype.is_double() { 1e-8 } else { 1e-4 };
        assert!(m < fd_tol, "{op:?}: finite-difference mismatch {m:e}");
    }
}

fn contract(a: &str, b: &str, c: &str) -> Op {
    ContractOp::new(ContractSpec::from_labels(a, b, c).unwrap()).into()
}

/// A network case: the network planned (in its default order) for `dims`.
fn network(network: Network, dims: Vec<Vec<usize>>) -> (Op, Vec<Vec<usize>>) {
    let plan = NetworkPlan::new(&network, &dims, &Order::Default).unwrap();
    (plan.into(), dims)
}

fn cases() -> Vec<(Op, Vec<Vec<usize>>)> {
    vec![
        (
            contract("abcd", "cdef", "abef"),
            vec![vec![2, 3, 4, 5], vec![4, 5, 3, 2]],
        ),
        (
            contract("ijk", "kjl", "li"),
            vec![vec![3, 4, 5], vec![5, 4, 2]],
        ),
        (contract("ij", "kl", "ljik"), vec![vec![2, 3], vec![4, 5]]),
        (
            contract("ijk", "jki", ""),
            vec![vec![2, 3, 4], vec![3, 4, 2]],
        ),
        (
            ContractOp::new(ContractSpec::from_labels("ab", "bc", "ca").unwrap())
                .alpha(-1.5)
                .into(),
            vec![vec![3, 4], vec![4, 2]],
        ),
        (
            AddOp::new(Permutation::new(&[2, 0, 1]).unwrap())
                .alpha(2.0)
                .into(),
            vec![vec![2, 3, 4]],
        ),
        (
            TraceOp::new(TraceSpec::new(&[3, 1], &[0], &[2]).unwrap()).into(),
            vec![vec![3, 4, 3, 5]],
        ),
        (
            TraceOp::new(TraceSpec::new(&[], &[0, 1], &[3, 2]).unwrap())
                .alpha(0.5)
                .into(),
            vec![vec![2, 3, 3, 2]],
        ),
        network(
            Network::einsum("abc,bde,cdf->aef").unwrap(),
            vec![vec![2, 3, 4], vec![3, 2, 3], vec![4, 2, 2]],
        ),
        // a partial trace inside operand 0, then a contraction, as ncon lists
        network(
            Network::ncon(&[vec![1, -1, 1, 2], vec![2, -2]], None).unwrap(),
            vec![vec![3, 2, 3, 4], vec![4, 5]],
        ),
        network(
            Network::einsum("ia,ajb,bkc,cld,dm->ijklm").unwrap(),
            vec![
                vec![2, 3],
                vec![3, 2, 2],
                vec![2, 3, 3],
                vec![3, 2, 2],
                vec![2, 3],
            ],
        ),
        network(
            Network::einsum("ab,bc,ca->").unwrap(),
            vec![vec![2, 3], vec![3, 4], vec![4, 2]],
        ),
    ]
}

fn check_all<B: BurnBackendTrait>(dtype: DType) {
    for (op, dims) in cases() {
        match dims.as_slice() {
            [a] => check_op::<B, 1>(op, [a], dtype),
            [a, b] => check_op::<B, 2>(op, [a, b], dtype),
            [a, b, c] => check_op::<B, 3>(op, [a, b, c], dtype),
            [a, b, c, d, e] => check_op::<B, 5>(op, [a, b, c, d, e], dtype),
            _ => unreachable!("no case with this many operands"),
        }
    }
}

#[test]
fn flex_f64_gradients_match_strided_rules_and_finite_differences() {
    check_all::<Flex>(DType::F64);
}

#[test]
fn flex_f32_gradients_match_strided_rules_and_finite_differences() {
    check_all::<Flex>(DType::F32);
}

#[test]
#[allow(deprecated)]
fn ndarray_f64_gradients_match_strided_rules_and_finite_differences() {
    check_all::<NdArray>(DType::F64);
}

#[test]
fn mixed_f32_f64_operands_get_gradients_in_their_own_dtype() {
    let mut rng = Rng::seed(3);
    let x = [
        rng.tensor(&[3, 4], DType::F32),
        rng.tensor(&[4, 2], DType::F64),
    ];
    let op = contract("ij", "jk", "ik");
    let w = rng.tensor(&[3, 2], DType::F64);
    let got = burn_gradients::<Flex, 2>(&op, &x, [true, true], &w);
    let want = rule_gradients(&ReferenceBackend, &op, &x, [true, true], &w);
    assert_eq!(got[0].as_ref().unwrap().dtype(), DType::F32);
    assert_eq!(got[1].as_ref().unwrap().dtype(), DType::F64);
    for i in 0..2 {
        Tolerance::for_dtype(DType::F32)
            .check(
                &Value::Tensor(got[i].clone().unwrap()),
                &Value::Tensor(want[i].clone().unwrap()),
                "mixed",
            )
            .unwrap();
    }
}

// ---- against burn's own einsum autodiff, on the user-facing Tensor API ----

fn t<const D: usize>(h: &HostTensor, device: &Device) -> Tensor<D> {
    let data = match h.dtype() {
        DType::F64 => TensorData::new(h.as_slice::<f64>().unwrap().to_vec(), h.dims().to_vec()),
        _ => TensorData::new(h.as_slice::<f32>().unwrap().to_vec(), h.dims().to_vec()),
    };
    let dtype = if h.dtype() == DType::F64 {
        BurnDType::F64
    } else {
        BurnDType::F32
    };
    Tensor::<D>::from_data(data, (device, dtype))
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    t.into_data().iter::<f64>().collect()
}

fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1.0);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * scale,
            "{what}: element {i}: {x} vs {y}"
        );
    }
}

/// Forward and both gradients of a two-operand expression through adrules and through burn's
/// `einsum`, on Flex with autodiff.
fn versus_einsum<const DA: usize, const DB: usize, const DC: usize>(
    expr: &str,
    labels: (&str, &str, &str),
    da: [usize; DA],
    db: [usize; DB],
    dtype: DType,
) {
    let device = Device::flex().autodiff();
    let mut rng = Rng::seed(5);
    let (ha, hb) = (rng.tensor(&da, dtype), rng.tensor(&db, dtype));
    let op = ContractOp::new(ContractSpec::from_labels(labels.0, labels.1, labels.2).unwrap());
    let run = |ours: bool| {
        let a = t::<DA>(&ha, &device).require_grad();
        let b = t::<DB>(&hb, &device).require_grad();
        let c: Tensor<DC> = if ours {
            adrules_burn::contract(&op, &a, &b).unwrap()
        } else {
            Tensor::<DC>::einsum(expr, [(&a).into(), (&b).into()])
        };
        let w = c.clone().mul_scalar(0.5).add_scalar(1.0);
        let grads = (c.clone() * w.detach()).sum().backward();
        (
            values(c),
            values(a.grad(&grads).unwrap()),
            values(b.grad(&grads).unwrap()),
        )
    };
    let (ours, theirs) = (run(true), run(false));
    let tol = if dtype.is_double() { 1e-12 } else { 1e-5 };
    assert_close(&ours.0, &theirs.0, tol, &format!("{expr} forward"));
    assert_close(&ours.1, &theirs.1, tol, &format!("{expr} gradient of a"));
    assert_close(&ours.2, &theirs.2, tol, &format!("{expr} gradient of b"));
}

#[test]
fn contract_matches_burn_einsum_autodiff() {
    for dtype in [DType::F64, DType::F32] {
        versus_einsum::<4, 4, 4>(
            "abcd,cdef->abef",
            ("abcd", "cdef", "abef"),
            [2, 3, 4, 5],
            [4, 5, 3, 2],
            dtype,
        );
        versus_einsum::<3, 3, 2>(
            "ijk,kjl->li",
            ("ijk", "kjl", "li"),
            [3, 4, 5],
            [5, 4, 2],
            dtype,
        );
        versus_einsum::<2, 2, 4>("ij,kl->ljik", ("ij", "kl", "ljik"), [2, 3], [4, 5], dtype);
    }
}

#[test]
fn trace_and_add_match_burn_einsum_autodiff() {
    let device = Device::flex().autodiff();
    let mut rng = Rng::seed(9);
    let ha = rng.tensor(&[3, 4, 3, 5], DType::F64);
    let hw = rng.tensor(&[5, 4], DType::F64);
    let op = TraceOp::new(TraceSpec::new(&[3, 1], &[0], &[2]).unwrap());
    let run = |ours: bool| {
        let a = t::<4>(&ha, &device).require_grad();
        let c: Tensor<2> = if ours {
            adrules_burn::trace(&op, &a).unwrap()
        } else {
            Tensor::<2>::einsum("ijil->lj", [(&a).into()])
        };
        let grads = (c.clone() * t::<2>(&hw, &device)).sum().backward();
        (values(c), values(a.grad(&grads).unwrap()))
    };
    let (ours, theirs) = (run(true), run(false));
    assert_close(&ours.0, &theirs.0, 1e-12, "trace forward");
    assert_close(&ours.1, &theirs.1, 1e-12, "trace gradient");

    let hx = rng.tensor(&[2, 3, 4], DType::F64);
    let hw = rng.tensor(&[4, 2, 3], DType::F64);
    let op = AddOp::new(Permutation::new(&[2, 0, 1]).unwrap()).alpha(2.0);
    let run = |ours: bool| {
        let a = t::<3>(&hx, &device).require_grad();
        let c: Tensor<3> = if ours {
            adrules_burn::add(&op, &a).unwrap()
        } else {
            Tensor::<3>::einsum("ijk->kij", [(&a).into()]).mul_scalar(2.0)
        };
        let grads = (c.clone() * t::<3>(&hw, &device)).sum().backward();
        (values(c), values(a.grad(&grads).unwrap()))
    };
    let (ours, theirs) = (run(true), run(false));
    assert_close(&ours.0, &theirs.0, 1e-12, "add forward");
    assert_close(&ours.1, &theirs.1, 1e-12, "add gradient");
}

#[test]
fn networks_match_burn_einsum_autodiff() {
    let device = Device::flex().autodiff();
    let mut rng = Rng::seed(13);
    let dims: [&[usize]; 5] = [&[2, 3], &[3, 2, 2], &[2, 3, 3], &[3, 2, 2], &[2, 3]];
    let h: Vec<HostTensor> = dims.iter().map(|d| rng.tensor(d, DType::F64)).collect();
    let expr = "ia,ajb,bkc,cld,dm->ijklm";
    let run = |ours: bool| {
        let (a, e) = (
            t::<2>(&h[0], &device).require_grad(),
            t::<2>(&h[4], &device).require_grad(),
        );
        let (b, c, d) = (
            t::<3>(&h[1], &device).require_grad(),
            t::<3>(&h[2], &device).require_grad(),
            t::<3>(&h[3], &device).require_grad(),
        );
        let operands = [
            (&a).into(),
            (&b).into(),
            (&c).into(),
            (&d).into(),
            (&e).into(),
        ];
        let out: Tensor<5> = if ours {
            adrules_burn::einsum(expr, operands).unwrap()
        } else {
            Tensor::<5>::einsum(
                expr,
                [
                    (&a).into(),
                    (&b).into(),
                    (&c).into(),
                    (&d).into(),
                    (&e).into(),
                ],
            )
        };
        let grads = (out.clone() * out.clone()).sum().backward();
        let mut v = vec![values(out)];
        v.push(values(a.grad(&grads).unwrap()));
        v.push(values(b.grad(&grads).unwrap()));
        v.push(values(c.grad(&grads).unwrap()));
        v.push(values(d.grad(&grads).unwrap()));
        v.push(values(e.grad(&grads).unwrap()));
        v
    };
    let (ours, theirs) = (run(true), run(false));
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        assert_close(o, t, 1e-12, &format!("five-tensor network, value {i}"));
    }

    let ha = rng.tensor(&[3, 2, 3, 4], DType::F64);
    let hb = rng.tensor(&[4, 5], DType::F64);
    let run = |ours: bool| {
        let a = t::<4>(&ha, &device).require_grad();
        let b = t::<2>(&hb, &device).require_grad();
        let out: Tensor<2> = if ours {
            adrules_burn::ncon(
                &[vec![1, -1, 1, 2], vec![2, -2]],
                [(&a).into(), (&b).into()],
            )
            .unwrap()
        } else {
            Tensor::<2>::einsum("xaxb,bc->ac", [(&a).into(), (&b).into()])
        };
        let grads = (out.clone() * out.clone()).sum().backward();
        [
            values(out),
            values(a.grad(&grads).unwrap()),
            values(b.grad(&grads).unwrap()),
        ]
    };
    let (ours, theirs) = (run(true), run(false));
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        assert_close(o, t, 1e-12, &format!("ncon with a trace, value {i}"));
    }
}
