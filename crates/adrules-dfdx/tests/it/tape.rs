//! The dfdx tape ops against the shared rules and finite differences.
//!
//! Every case builds dfdx tensors from random host data, runs the op on dfdx's tape, takes
//! the gradient of `L = Σ W ⊙ C` (W random, so `C̄ = W`) with dfdx's backward pass, and
//! compares
//! - the primal with the naive reference backend;
//! - every operand's gradient with the pullback of the same rule run directly on the strided
//!   backend (no dfdx involved), and with central finite differences of the reference primal
//!   (`⟨W, J_i·ẋ_i⟩ = ⟨x̄_i, ẋ_i⟩` along a random direction, one operand at a time).
//!
//! Contractions run with the tape on the left operand, on the right one, and on both; the
//! gradients must be the same in all three placements. The cases follow the conformance
//! suite's specs (TensorOperations.jl's test vectors), plus rank-6 operands and outputs.

use adrules_core::rules::{Activity, AddOp, ContractOp, TraceOp};
use adrules_core::{
    Backend, ContractSpec, DType, DynScalar, Error, HostTensor, Permutation, Result, TraceSpec,
};
use adrules_dfdx::dfdx::prelude::*;
use adrules_dfdx::{DfdxBackend, DfdxElement, add, contract, trace, try_backward};
use adrules_strided::Strided;
use adrules_testing::{FiniteDifference, ReferenceBackend, Rng, Tolerance, Value};

type R1 = (usize,);
type R2 = (usize, usize);
type R3 = (usize, usize, usize);
type R4 = (usize, usize, usize, usize);
type R5 = (usize, usize, usize, usize, usize);
type R6 = (usize, usize, usize, usize, usize, usize);
type Traced<S, E> = Tensor<S, E, Cpu, OwnedTape<E, Cpu>>;

/// A dfdx tensor of shape type `S` holding `h` (converted to `E`).
fn tensor<S: Shape, E: DfdxElement>(h: &HostTensor) -> Tensor<S, E, Cpu> {
    DfdxBackend::default()
        .from_host(h.to_dtype_projected(E::DTYPE))
        .unwrap()
        .to_tensor::<S, E>()
        .unwrap()
}

/// The elements of a dfdx tensor (with or without tape) as host data.
fn host<S: Shape, E: DfdxElement, T>(t: &Tensor<S, E, Cpu, T>) -> HostTensor {
    let be = DfdxBackend::default();
    be.to_host(&adrules_dfdx::DfdxTensor::new(t.retaped::<NoneTape>()).unwrap())
        .unwrap()
}

/// `L = Σ W ⊙ C`, with dfdx's own ops (our full contraction when C has no elements: dfdx's
/// `sum` indexes one element of an empty tensor and panics).
fn weighted_sum<S: Shape, E: DfdxElement>(c: Traced<S, E>, w: Tensor<S, E, Cpu>) -> Traced<Rank0, E>
where
    Cpu: Device<E>,
{
    if c.shape().num_elements() > 0 {
        (c * w).sum::<Rank0, S::AllAxes>()
    } else {
        let all: Vec<usize> = (0..S::NUM_DIMS).collect();
        let spec = ContractSpec::new(&[], &all, &all, &[], &[]).unwrap();
        contract(&ContractOp::new(spec), c, w).unwrap()
    }
}

fn check(tol: Tolerance, got: &HostTensor, want: &HostTensor, what: &str) {
    tol.check(
        &Value::Tensor(got.clone()),
        &Value::Tensor(want.clone()),
        what,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Tolerance of a finite-difference check in `dtype` (as the conformance suite).
fn fd_tol(dtype: DType) -> f64 {
    if dtype.is_double() { 1e-9 } else { 2e-4 }
}

/// Checks each gradient `grads[i]` of `L = Re⟨w, f(x)⟩` against central differences of `f`
/// (evaluated in double precision) along a random direction of input `i`.
fn fd_check(
    name: &str,
    f: impl Fn(&[HostTensor]) -> Result<HostTensor>,
    x: &[HostTensor],
    grads: &[HostTensor],
    w: &HostTensor,
    rng: &mut Rng,
) {
    let xs: Vec<Value> = x.iter().cloned().map(Value::Tensor).collect();
    let fv = |v: &[Value]| -> Result<Value> {
        let t: Vec<HostTensor> = v
            .iter()
            .map(|v| v.tensor("x").cloned())
            .collect::<Result<_>>()?;
        f(&t).map(Value::Tensor)
    };
    let wv = Value::Tensor(w.clone());
    for (i, g) in grads.iter().enumerate() {
        let d: Vec<Value> = xs
            .iter()
            .enumerate()
            .map(|(j, v)| {
                let t = v.tensor("x").unwrap();
                if i == j {
                    Value::Tensor(rng.tensor(t.dims(), DType::F64))
                } else {
                    Value::Tensor(HostTensor::zeros(t.dims(), DType::F64).unwrap())
                }
            })
            .collect();
        let jd = FiniteDifference::default().jvp(fv, &xs, &d).unwrap();
        let lhs = wv.inner(&jd).unwrap().re;
        let gv = Value::Tensor(g.clone());
        let rhs = gv.inner(&d[i]).unwrap().re;
        let scale = wv.norm() * jd.norm() + gv.norm() * d[i].norm();
        assert!(
            (lhs - rhs).abs() <= fd_tol(g.dtype()) * scale.max(1e-300),
            "{name}: gradient of operand {i} fails the finite-difference check: {lhs} vs {rhs}"
        );
    }
}

/// The reference primal of a contraction (naive loops), in the inputs' dtype.
fn reference_contract(op: &ContractOp, x: &[HostTensor]) -> Result<HostTensor> {
    let be = ReferenceBackend;
    let (a, b) = (be.from_host(x[0].clone())?, be.from_host(x[1].clone())?);
    let dims = op.spec.output_dims(x[0].dims(), x[1].dims())?;
    let mut c = be.zeros(&dims, x[0].dtype().join(x[1].dtype()))?;
    op.apply(&be, &mut c, &a, &b)?;
    be.to_host(&c)
}

/// One contraction case, for the shape types `Out`, `SA`, `SB` and element type `E`.
fn contract_case<Out: Shape, SA: Shape, SB: Shape, E: DfdxElement>(
    name: &str,
    spec: ContractSpec,
    a_dims: &[usize],
    b_dims: &[usize],
    seed: u64,
) where
    Cpu: Device<E>,
{
    let name = format!("{name} ({})", E::DTYPE);
    let mut rng = Rng::seed(seed);
    let dt = E::DTYPE;
    let op = ContractOp::new(spec).alpha(rng.scalar(DType::F64));
    let (ha, hb) = (rng.tensor(a_dims, dt), rng.tensor(b_dims, dt));
    let out_dims = op.spec.output_dims(a_dims, b_dims).unwrap();
    let hw = rng.tensor(&out_dims, dt);
    let tol = Tolerance::for_dtype(dt);

    // The rule on the strided backend, without dfdx.
    let be = Strided;
    let (sa, sb) = (
        be.from_host(ha.clone()).unwrap(),
        be.from_host(hb.clone()).unwrap(),
    );
    let mut sc = be.zeros(&out_dims, dt).unwrap();
    let pb = op
        .rrule(&be, &mut sc, &sa, &sb, Activity::OPERANDS)
        .unwrap();
    let cot = pb.pullback(&be.from_host(hw.clone()).unwrap()).unwrap();
    let want_ga = be.to_host(cot.a.as_ref().unwrap()).unwrap();
    let want_gb = be.to_host(cot.b.as_ref().unwrap()).unwrap();
    let want_c = reference_contract(&op, &[ha.clone(), hb.clone()]).unwrap();

    let (a, b, w) = (
        tensor::<SA, E>(&ha),
        tensor::<SB, E>(&hb),
        tensor::<Out, E>(&hw),
    );
    macro_rules! placement {
        ($label:expr, $a:expr, $b:expr) => {{
            let c: Traced<Out, E> = contract(&op, $a, $b).unwrap();
            check(
                tol,
                &host(&c),
                &want_c,
                &format!("{name}, {}: primal", $label),
            );
            let g = try_backward(weighted_sum(c, w.clone())).unwrap();
            let (ga, gb) = (host(&g.get(&a)), host(&g.get(&b)));
            check(
                tol,
                &ga,
                &want_ga,
                &format!("{name}, {}: gradient of a", $label),
            );
            check(
                tol,
                &gb,
                &want_gb,
                &format!("{name}, {}: gradient of b", $label),
            );
            vec![ga, gb]
        }};
    }
    let grads = placement!("tape on a", a.leaky_trace(), b.clone());
    placement!("tape on b", a.clone(), b.leaky_trace());
    placement!("tapes on both", a.leaky_trace(), b.leaky_trace());

    // Without a tape: the primal only, and a result without tape.
    let c: Tensor<Out, E, Cpu> = contract(&op, a.clone(), b.clone()).unwrap();
    check(tol, &host(&c), &want_c, &format!("{name}, no tape: primal"));

    fd_check(
        &name,
        |x| reference_contract(&op, x),
        &[ha, hb],
        &grads,
        &hw,
        &mut rng,
    );
}

fn contract_cases<E: DfdxElement>()
where
    Cpu: Device<E>,
{
    // TensorOperations.jl's vector: A (2,3,4,2,5), open (1,3,4), contracted (0,2) with B's
    // (1,0); B (4,2,3), open (2); output permutation (2,1,3,0).
    let reference = ContractSpec::new(&[1, 3, 4], &[0, 2], &[1, 0], &[2], &[2, 1, 3, 0]).unwrap();
    contract_case::<R4, R5, R3, E>(
        "reference vector",
        reference,
        &[2, 3, 4, 2, 5],
        &[4, 2, 3],
        1,
    );
    let mm = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    contract_case::<R2, R2, R2, E>("matrix product", mm.clone(), &[3, 4], &[4, 5], 2);
    let outer = ContractSpec::from_labels("ij", "k", "kji").unwrap();
    contract_case::<R3, R2, R1, E>("outer product", outer, &[2, 3], &[4], 3);
    let dot = ContractSpec::from_labels("ij", "ji", "").unwrap();
    contract_case::<(), R2, R2, E>("to scalar", dot, &[3, 4], &[4, 3], 4);
    contract_case::<R2, R2, R2, E>("zero-size contracted", mm.clone(), &[3, 0], &[0, 2], 5);
    contract_case::<R2, R2, R2, E>("zero-size open", mm, &[0, 4], &[4, 2], 6);
    // Rank 6 everywhere: A and the output rank 6, B rank 4.
    let r6 = ContractSpec::from_labels("abcdef", "fegh", "hgdcba").unwrap();
    contract_case::<R6, R6, R4, E>("rank 6", r6, &[2, 1, 3, 2, 3, 2], &[2, 3, 2, 3], 7);
    // Static shapes: Rank3<2, 3, 4> · Rank2<4, 5> → Rank3<5, 3, 2>.
    let st = ContractSpec::from_labels("ijk", "kl", "lji").unwrap();
    contract_case::<Rank3<5, 3, 2>, Rank3<2, 3, 4>, Rank2<4, 5>, E>(
        "static shapes",
        st,
        &[2, 3, 4],
        &[4, 5],
        8,
    );
}

#[test]
fn contract_gradients_match_rules_and_finite_differences() {
    contract_cases::<f32>();
    contract_cases::<f64>();
}

/// A one-operand op under test.
#[derive(Clone)]
enum Unary {
    Add(AddOp),
    Trace(TraceOp),
}

impl Unary {
    fn out_dims(&self, a_dims: &[usize]) -> Vec<usize> {
        match self {
            Unary::Add(op) => op.perm.apply(a_dims).to_vec(),
            Unary::Trace(op) => op.spec.output_dims(a_dims).unwrap().to_vec(),
        }
    }

    /// The primal on any backend, into a fresh C of A's dtype.
    fn primal<B: Backend>(&self, be: &B, x: &[HostTensor]) -> Result<HostTensor> {
        let a = be.from_host(x[0].clone())?;
        let mut c = be.zeros(&self.out_dims(x[0].dims()), x[0].dtype())?;
        match self {
            Unary::Add(op) => op.apply(be, &mut c, &a)?,
            Unary::Trace(op) => op.apply(be, &mut c, &a)?,
        }
        be.to_host(&c)
    }

    /// The cotangent of A for the output cotangent `w`, by the rule on the strided backend.
    fn pullback(&self, a: &HostTensor, w: &HostTensor) -> HostTensor {
        let be = Strided;
        let (sa, sw) = (
            be.from_host(a.clone()).unwrap(),
            be.from_host(w.clone()).unwrap(),
        );
        let mut c = be.zeros(w.dims(), a.dtype()).unwrap();
        let only_a = Activity {
            a: true,
            ..Activity::NONE
        };
        let cot = match self {
            Unary::Add(op) => op.rrule(&be, &mut c, &sa, only_a).unwrap().pullback(&sw),
            Unary::Trace(op) => op.rrule(&be, &mut c, &sa, only_a).unwrap().pullback(&sw),
        };
        be.to_host(cot.unwrap().a.as_ref().unwrap()).unwrap()
    }

    /// The dfdx op.
    fn run<Out: Shape, S: Shape, E: DfdxElement, T: Tape<E, Cpu>>(
        &self,
        a: Tensor<S, E, Cpu, T>,
    ) -> Result<Tensor<Out, E, Cpu, T>> {
        match self {
            Unary::Add(op) => add(op, a),
            Unary::Trace(op) => trace(op, a),
        }
    }
}

/// One case of a one-operand op: primal, gradient against the rule, finite differences.
fn unary_case<Out: Shape, S: Shape, E: DfdxElement>(
    name: &str,
    op: Unary,
    a_dims: &[usize],
    seed: u64,
) where
    Cpu: Device<E>,
{
    let name = format!("{name} ({})", E::DTYPE);
    let mut rng = Rng::seed(seed);
    let dt = E::DTYPE;
    let ha = rng.tensor(a_dims, dt);
    let hw = rng.tensor(&op.out_dims(a_dims), dt);
    let tol = Tolerance::for_dtype(dt);
    let want_ga = op.pullback(&ha, &hw);
    let want_c = op
        .primal(&ReferenceBackend, std::slice::from_ref(&ha))
        .unwrap();

    let (a, w) = (tensor::<S, E>(&ha), tensor::<Out, E>(&hw));
    let c: Traced<Out, E> = op.run(a.leaky_trace()).unwrap();
    check(tol, &host(&c), &want_c, &format!("{name}: primal"));
    let g = try_backward(weighted_sum(c, w)).unwrap();
    let ga = host(&g.get(&a));
    check(tol, &ga, &want_ga, &format!("{name}: gradient"));
    let c: Tensor<Out, E, Cpu> = op.run(a.clone()).unwrap();
    check(tol, &host(&c), &want_c, &format!("{name}, no tape: primal"));
    fd_check(
        &name,
        |x| op.primal(&ReferenceBackend, x),
        &[ha],
        &[ga],
        &hw,
        &mut rng,
    );
}

fn add_case<Out: Shape, S: Shape, E: DfdxElement>(
    name: &str,
    perm: &[usize],
    a_dims: &[usize],
    seed: u64,
) where
    Cpu: Device<E>,
{
    let op =
        AddOp::new(Permutation::new(perm).unwrap()).alpha(Rng::seed(seed + 100).scalar(DType::F64));
    unary_case::<Out, S, E>(&format!("add {name}"), Unary::Add(op), a_dims, seed);
}

fn trace_case<Out: Shape, S: Shape, E: DfdxElement>(
    name: &str,
    spec: TraceSpec,
    a_dims: &[usize],
    seed: u64,
) where
    Cpu: Device<E>,
{
    let op = TraceOp::new(spec).alpha(Rng::seed(seed + 100).scalar(DType::F64));
    unary_case::<Out, S, E>(&format!("trace {name}"), Unary::Trace(op), a_dims, seed);
}

fn unary_cases<E: DfdxElement>()
where
    Cpu: Device<E>,
{
    add_case::<R5, R5, E>("reference vector", &[1, 0, 3, 2, 4], &[2, 3, 4, 2, 1], 11);
    add_case::<(), (), E>("rank 0", &[], &[], 12);
    add_case::<R3, R3, E>("zero-size", &[2, 0, 1], &[3, 0, 2], 13);
    add_case::<R6, R6, E>("rank 6", &[5, 3, 1, 0, 4, 2], &[2, 1, 3, 2, 2, 3], 14);
    add_case::<Rank2<4, 3>, Rank2<3, 4>, E>("static transpose", &[1, 0], &[3, 4], 15);
    let single = TraceSpec::new(&[2, 4, 1], &[0], &[3]).unwrap();
    trace_case::<R3, R5, E>("single pair", single, &[2, 3, 4, 2, 5], 16);
    let double = TraceSpec::new(&[1], &[0, 2], &[3, 4]).unwrap();
    trace_case::<R1, R5, E>("two pairs", double, &[2, 3, 4, 2, 4], 17);
    let full = TraceSpec::new(&[], &[0, 1], &[2, 3]).unwrap();
    trace_case::<(), R4, E>("full", full, &[3, 2, 3, 2], 18);
    let r6 = TraceSpec::new(&[5, 1, 3, 0], &[2], &[4]).unwrap();
    trace_case::<R4, R6, E>("rank 6", r6, &[2, 3, 4, 2, 4, 3], 19);
}

#[test]
fn add_and_trace_gradients_match_rules_and_finite_differences() {
    unary_cases::<f32>();
    unary_cases::<f64>();
}

/// `contract(x, x)`: the same tensor as both operands (one traced, one not, and both
/// traced) receives both contributions, `W·xᵀ + xᵀ·W` for `L = Σ W ⊙ (x·x)`.
#[test]
fn operand_passed_twice_gets_both_contributions() {
    let mut rng = Rng::seed(21);
    let [hx, hw] = [(); 2].map(|_| rng.tensor(&[4, 4], DType::F64));
    let (x, w) = (
        tensor::<Rank2<4, 4>, f64>(&hx),
        tensor::<Rank2<4, 4>, f64>(&hw),
    );
    let (xv, wv) = (x.as_vec(), w.as_vec());
    let mut want = vec![0.0; 16];
    for i in 0..4 {
        for j in 0..4 {
            for k in 0..4 {
                want[i * 4 + j] += wv[i * 4 + k] * xv[j * 4 + k] + xv[k * 4 + i] * wv[k * 4 + j];
            }
        }
    }
    let want = HostTensor::from_vec(&[4, 4], want).unwrap();
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let tol = Tolerance::for_dtype(DType::F64);
    let c: Traced<Rank2<4, 4>, f64> = contract(&op, x.leaky_trace(), x.clone()).unwrap();
    let g = try_backward((c * w.clone()).sum()).unwrap();
    check(tol, &host(&g.get(&x)), &want, "x·x, tape on the left");
    let xt = x.leaky_trace();
    let c: Traced<Rank2<4, 4>, f64> = contract(&op, xt.with_empty_tape(), xt).unwrap();
    let g = try_backward((c * w).sum()).unwrap();
    check(tol, &host(&g.get(&x)), &want, "x·x, both traced");
}

/// A permuted (non-contiguous) dfdx view as an operand: the op reads it in logical order,
/// and dfdx's own permute and contiguous ops carry the gradient back to the original.
#[test]
fn non_contiguous_operands() {
    let mut rng = Rng::seed(22);
    let (ha, hb, hw) = (
        rng.tensor(&[4, 3], DType::F64),
        rng.tensor(&[4, 5], DType::F64),
        rng.tensor(&[3, 5], DType::F64),
    );
    let (a, b) = (
        tensor::<Rank2<4, 3>, f64>(&ha),
        tensor::<Rank2<4, 5>, f64>(&hb),
    );
    let w = tensor::<Rank2<3, 5>, f64>(&hw);
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    // C = aᵀ·b through a permuted view of `a`, against dfdx's own matmul.
    let at = a.leaky_trace().permute::<Rank2<3, 4>, Axes2<1, 0>>();
    let c: Traced<Rank2<3, 5>, f64> = contract(&op, at, b.clone()).unwrap();
    let native = a
        .leaky_trace()
        .permute::<Rank2<3, 4>, Axes2<1, 0>>()
        .matmul(b.clone());
    let tol = Tolerance::for_dtype(DType::F64);
    check(
        tol,
        &host(&c),
        &host(&native),
        "primal against dfdx's matmul",
    );
    let g = try_backward((c * w.clone()).sum()).unwrap();
    let gn = try_backward((native * w).sum()).unwrap();
    check(
        tol,
        &host(&g.get(&a)),
        &host(&gn.get(&a)),
        "gradient of a against dfdx",
    );
    check(
        tol,
        &host(&g.get(&b)),
        &host(&gn.get(&b)),
        "gradient of b against dfdx",
    );
}

/// Our op inside a graph of dfdx ops, its output used twice, with gradients accumulated
/// into a `Gradients` allocated by the caller: the result matches the same graph written
/// with dfdx's matmul.
#[test]
fn inside_a_dfdx_graph() {
    let dev: Cpu = Default::default();
    let x: Tensor<Rank2<3, 4>, f64, Cpu> = dev.sample_normal();
    let w: Tensor<Rank2<4, 2>, f64, Cpu> = dev.sample_normal();
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let loss_of = |y: Traced<Rank2<3, 2>, f64>| {
        let y2 = y.with_empty_tape();
        (y.tanh() * y2).sum::<Rank0, _>()
    };
    let mine: Traced<Rank2<3, 2>, f64> =
        contract(&op, x.trace(Gradients::leaky()), w.clone()).unwrap();
    let g = try_backward(loss_of(mine)).unwrap();
    let native = x.trace(Gradients::leaky()).matmul(w.clone());
    let gn = try_backward(loss_of(native)).unwrap();
    let tol = Tolerance::for_dtype(DType::F64);
    check(tol, &host(&g.get(&x)), &host(&gn.get(&x)), "gradient of x");
    check(
        tol,
        &host(&g.get(&w)),
        &host(&gn.get(&w)),
        "gradient of the untraced w",
    );
}

#[test]
fn bad_arguments_are_typed_errors() {
    let dev: Cpu = Default::default();
    let a: Tensor<Rank2<2, 3>, f64, Cpu> = dev.sample_normal();
    let b: Tensor<Rank2<3, 4>, f64, Cpu> = dev.sample_normal();
    let mm = ContractSpec::from_labels("ij", "jk", "ik").unwrap();
    let op = ContractOp::new(mm.clone());
    // The output shape type: wrong rank, wrong static dimension.
    let e = contract::<Rank3<2, 4, 1>, _, _, _, _, _>(&op, a.clone(), b.clone()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::RankMismatch {
                expected: 2,
                actual: 3,
                ..
            }
        ),
        "{e}"
    );
    let e = contract::<Rank2<2, 5>, _, _, _, _, _>(&op, a.clone(), b.clone()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "output"),
        "{e}"
    );
    assert!(e.to_string().contains("[2, 4]"), "{e}");
    // Operands that do not fit the spec.
    let e = contract::<R2, _, _, _, _, _>(&op, a.clone(), a.clone()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // β ≠ 0 and a complex α.
    let e = contract::<R2, _, _, _, _, _>(&op.clone().beta(1.0), a.clone(), b.clone()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "beta"),
        "{e}"
    );
    let complex = DynScalar::C64(adrules_core::Complex64::new(1.0, 1.0));
    let e = contract::<R2, _, _, _, _, _>(&op.clone().alpha(complex), a.clone(), b).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "alpha"),
        "{e}"
    );
    // A permutation of the wrong length, a trace spec of the wrong rank.
    let e = add::<R2, _, _, _>(&AddOp::new(Permutation::identity(3)), a.clone()).unwrap_err();
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
    let tr = TraceOp::new(TraceSpec::new(&[], &[0], &[1]).unwrap());
    let e = trace::<(), _, _, _>(&tr, a.clone()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = trace::<(), _, _, _>(&tr, a.reshape::<Rank3<1, 2, 3>>()).unwrap_err();
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
}

/// The loss `Σ C` of `C = A·B` (A traced) with a backward op that runs just before ours and
/// resizes C's gradient buffer to `len` elements (8 is right), so that our backward fails.
fn planted_failure(len: usize) -> Tensor<Rank0, f64, Cpu, OwnedTape<f64, Cpu>> {
    let dev: Cpu = Default::default();
    let a: Tensor<Rank2<2, 3>, f64, Cpu> = dev.sample_normal();
    let b: Tensor<Rank2<3, 4>, f64, Cpu> = dev.sample_normal();
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let c: Traced<Rank2<2, 4>, f64> = contract(&op, a.leaky_trace(), b).unwrap();
    let (c, mut tape) = c.split_tape();
    let ghost = c.clone();
    tape.add_backward_op(move |g: &mut Gradients<f64, Cpu>| {
        g.get_or_alloc_mut(&ghost)?.resize(len, 0.0);
        Ok(())
    });
    c.put_tape(tape).sum::<Rank0, _>()
}

/// Whether `e` is our "output cotangent" shape error for a buffer of `len` elements.
fn is_cotangent_error(e: &Error, len: usize) -> bool {
    matches!(e, Error::ShapeMismatch { arg, expected, actual }
        if arg == "output cotangent" && expected == &[8] && actual == &[len])
}

/// A failure inside the backward pass (here: an output gradient buffer of the wrong length,
/// planted by a backward op that runs before ours) is returned as our typed error through
/// `try_backward`, with its message; nothing panics. dfdx's own `try_backward` reports it as
/// `CpuError::WrongNumElements` and the typed error waits for `take_backward_errors`; an
/// error left unread is never reported for a later pass.
#[test]
fn backward_failures_are_typed_errors() {
    use adrules_dfdx::take_backward_errors;
    take_backward_errors();
    // dfdx's try_backward: its own error; the typed one is left unread (stale).
    let e = planted_failure(0).try_backward().unwrap_err();
    assert!(matches!(e, CpuError::WrongNumElements));
    // Ours: the error of this pass (3 elements), not the stale one (0 elements).
    let e = try_backward(planted_failure(3)).unwrap_err();
    assert!(is_cotangent_error(&e, 3), "{e}");
    assert!(take_backward_errors().is_empty());
    // A stale error does not fail a pass that succeeds.
    assert!(planted_failure(0).try_backward().is_err());
    assert!(try_backward(planted_failure(8)).is_ok());
    // The typed error of dfdx's try_backward, read with take_backward_errors.
    assert!(planted_failure(5).try_backward().is_err());
    let errors = take_backward_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(is_cotangent_error(&errors[0], 5), "{}", errors[0]);
    assert!(errors[0].to_string().contains("output cotangent"));
    assert!(take_backward_errors().is_empty());
    // Errors of a graph built on another thread are read there, not here.
    let other = std::thread::spawn(|| {
        assert!(planted_failure(2).try_backward().is_err());
        take_backward_errors()
    })
    .join()
    .unwrap();
    assert_eq!(other.len(), 1);
    assert!(is_cotangent_error(&other[0], 2), "{}", other[0]);
    assert!(take_backward_errors().is_empty());
}

/// The backward pass lends dfdx's gradient buffers to the rules without copying: the
/// operand's buffer (allocated before our op runs) and the output cotangent's buffer are the
/// same allocations after it, and the operand's received the contribution in place.
#[test]
fn gradient_buffers_are_updated_in_place() {
    use std::cell::Cell;
    use std::rc::Rc;
    let dev: Cpu = Default::default();
    let a: Tensor<Rank2<30, 40>, f64, Cpu> = dev.sample_normal();
    let b: Tensor<Rank2<40, 50>, f64, Cpu> = dev.sample_normal();
    let op = ContractOp::new(ContractSpec::from_labels("ij", "jk", "ik").unwrap());
    let seen = Rc::new(Cell::new([0usize; 4]));
    // Runs after our op (registered before it): where the buffers are then.
    let (at, mut tape) = a.leaky_trace().split_tape();
    let (ka, out_key) = (
        a.clone(),
        Rc::new(Cell::new(None::<Tensor<Rank2<30, 50>, f64, Cpu>>)),
    );
    let (seen_after, out_after) = (seen.clone(), out_key.clone());
    tape.add_backward_op(move |g: &mut Gradients<f64, Cpu>| {
        let mut s = seen_after.get();
        s[2] = g.get_or_alloc_mut(&ka)?.as_ptr() as usize;
        let out = out_after.take().unwrap();
        s[3] = g.get_or_alloc_mut(&out)?.as_ptr() as usize;
        seen_after.set(s);
        Ok(())
    });
    let c: Traced<Rank2<30, 50>, f64> = contract(&op, at.put_tape(tape), b.clone()).unwrap();
    // Runs before our op: allocate a's gradient with a marker, note both buffers.
    let (c, mut tape) = c.split_tape();
    out_key.set(Some(c.clone()));
    let (ka, kc, seen_before) = (a.clone(), c.clone(), seen.clone());
    tape.add_backward_op(move |g: &mut Gradients<f64, Cpu>| {
        let buf = g.get_or_alloc_mut(&ka)?;
        buf.fill(1.0);
        let mut s = seen_before.get();
        s[0] = buf.as_ptr() as usize;
        s[1] = g.get_or_alloc_mut(&kc)?.as_ptr() as usize;
        seen_before.set(s);
        Ok(())
    });
    let w: Tensor<Rank2<30, 50>, f64, Cpu> = dev.sample_normal();
    let g = try_backward((c.put_tape(tape) * w.clone()).sum()).unwrap();
    let [a_before, c_before, a_after, c_after] = seen.get();
    assert_eq!(a_before, a_after, "a's gradient buffer was replaced");
    assert_eq!(
        c_before, c_after,
        "the output cotangent's buffer was replaced"
    );
    // The contribution was added to the marker: ā = 1 + W·bᵀ.
    let want = w.matmul(b.permute::<Rank2<50, 40>, Axes2<1, 0>>()) + 1.0;
    check(
        Tolerance::for_dtype(DType::F64),
        &host(&g.get(&a)),
        &host(&want),
        "accumulated gradient",
    );
}
