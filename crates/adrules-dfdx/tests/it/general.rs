//! The generalized trace (diagonals, sums, hypertraces) and batched contractions through
//! dfdx's tape, with static output shapes: primal and gradients (dfdx's backward pass of
//! `L = Σ W ⊙ C`) against the same rules on the naive reference backend.

use std::sync::Arc;

use adrules_core::rules::{Activity, ContractOp, TraceOp};
use adrules_core::{Backend, ContractSpec, Error, HostTensor, TraceSpec};
use adrules_dfdx::dfdx::prelude::*;
use adrules_dfdx::{DfdxBackend, DfdxElement, contract, trace, try_backward};
use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};

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
    DfdxBackend::default()
        .to_host(&adrules_dfdx::DfdxTensor::new(t.retaped::<NoneTape>()).unwrap())
        .unwrap()
}

fn check(got: &HostTensor, want: &HostTensor, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: dims");
    Tolerance::for_dtype(want.dtype())
        .check(
            &Value::Tensor(got.clone()),
            &Value::Tensor(want.clone()),
            what,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// `L = Σ W ⊙ C` with dfdx's own ops.
fn loss<S: Shape, E: DfdxElement>(c: Traced<S, E>, w: Tensor<S, E, Cpu>) -> Traced<Rank0, E>
where
    Cpu: Device<E>,
{
    (c * w).sum::<Rank0, S::AllAxes>()
}

/// A batched contraction `la,lb->lc` through dfdx's tape against the reference rule.
fn contract_case<Out: Shape, SA: Shape, SB: Shape, E: DfdxElement>(
    labels: [&str; 3],
    da: &[usize],
    db: &[usize],
    seed: u64,
) where
    Cpu: Device<E>,
{
    let name = format!("{},{}->{} ({})", labels[0], labels[1], labels[2], E::DTYPE);
    let mut rng = Rng::seed(seed);
    let spec = ContractSpec::from_labels(labels[0], labels[1], labels[2]).unwrap();
    let op = ContractOp::new(spec).alpha(0.8);
    let out = op.spec.output_dims(da, db).unwrap();
    let (ha, hb, hw) = (
        rng.tensor(da, E::DTYPE),
        rng.tensor(db, E::DTYPE),
        rng.tensor(&out, E::DTYPE),
    );
    let rb = ReferenceBackend;
    let mut want_c = rb.zeros(&out, E::DTYPE).unwrap();
    let cot = op
        .rrule(
            &rb,
            &mut want_c,
            &Arc::new(ha.clone()),
            &Arc::new(hb.clone()),
            Activity::OPERANDS,
        )
        .unwrap()
        .pullback(&Arc::new(hw.clone()))
        .unwrap();
    let (a, b, w) = (
        tensor::<SA, E>(&ha),
        tensor::<SB, E>(&hb),
        tensor::<Out, E>(&hw),
    );
    let c: Traced<Out, E> = contract(&op, a.leaky_trace(), b.clone()).unwrap();
    check(&host(&c), &want_c, &format!("{name}: primal"));
    let g = try_backward(loss(c, w)).unwrap();
    check(&host(&g.get(&a)), &cot.a.unwrap(), &format!("{name}: Ā"));
    check(&host(&g.get(&b)), &cot.b.unwrap(), &format!("{name}: B̄"));
}

/// A generalized trace `la->lc` through dfdx's tape against the reference rule.
fn trace_case<Out: Shape, S: Shape, E: DfdxElement>(labels: [&str; 2], dims: &[usize], seed: u64)
where
    Cpu: Device<E>,
{
    let name = format!("{}->{} ({})", labels[0], labels[1], E::DTYPE);
    let mut rng = Rng::seed(seed);
    let op = TraceOp::new(TraceSpec::from_labels(labels[0], labels[1]).unwrap()).alpha(-1.3);
    let out = op.spec.output_dims(dims).unwrap();
    let (ha, hw) = (rng.tensor(dims, E::DTYPE), rng.tensor(&out, E::DTYPE));
    let rb = ReferenceBackend;
    let mut want_c = rb.zeros(&out, E::DTYPE).unwrap();
    let cot = op
        .rrule(&rb, &mut want_c, &Arc::new(ha.clone()), Activity::OPERANDS)
        .unwrap()
        .pullback(&Arc::new(hw.clone()))
        .unwrap();
    let (a, w) = (tensor::<S, E>(&ha), tensor::<Out, E>(&hw));
    let c: Traced<Out, E> = trace(&op, a.leaky_trace()).unwrap();
    check(&host(&c), &want_c, &format!("{name}: primal"));
    let g = try_backward(loss(c, w)).unwrap();
    check(&host(&g.get(&a)), &cot.a.unwrap(), &format!("{name}: Ā"));
    // Without a tape: the same primal.
    let c: Tensor<Out, E, Cpu> = trace(&op, a).unwrap();
    check(&host(&c), &want_c, &format!("{name}, no tape: primal"));
}

fn cases<E: DfdxElement>()
where
    Cpu: Device<E>,
{
    contract_case::<Rank3<3, 2, 5>, Rank3<3, 2, 4>, Rank3<3, 4, 5>, E>(
        ["bij", "bjk", "bik"],
        &[3, 2, 4],
        &[3, 4, 5],
        1,
    );
    contract_case::<Rank4<2, 3, 4, 6>, Rank4<2, 3, 4, 5>, Rank4<2, 3, 6, 5>, E>(
        ["bhqd", "bhkd", "bhqk"],
        &[2, 3, 4, 5],
        &[2, 3, 6, 5],
        2,
    );
    contract_case::<Rank4<2, 3, 4, 5>, Rank4<2, 3, 4, 6>, Rank4<2, 3, 6, 5>, E>(
        ["bhqk", "bhkd", "bhqd"],
        &[2, 3, 4, 6],
        &[2, 3, 6, 5],
        3,
    );
    // Batch label permuted in the output, with run-time dims.
    contract_case::<(usize, usize, usize), (usize, usize, usize), (usize, usize, usize), E>(
        ["ibj", "bjk", "kbi"],
        &[4, 3, 2],
        &[3, 2, 5],
        4,
    );
    contract_case::<Rank2<3, 4>, Rank2<3, 4>, Rank2<3, 4>, E>(
        ["ij", "ij", "ij"],
        &[3, 4],
        &[3, 4],
        5,
    );
    trace_case::<Rank2<3, 4>, Rank3<3, 4, 4>, E>(["bii", "bi"], &[3, 4, 4], 6);
    trace_case::<Rank1<3>, Rank3<3, 3, 3>, E>(["iii", "i"], &[3, 3, 3], 7);
    trace_case::<Rank2<4, 2>, Rank4<3, 3, 2, 4>, E>(["iijk", "kj"], &[3, 3, 2, 4], 8);
    trace_case::<Rank1<3>, Rank2<3, 5>, E>(["ij", "i"], &[3, 5], 9);
    trace_case::<Rank0, Rank3<3, 3, 3>, E>(["iii", ""], &[3, 3, 3], 10);
}

#[test]
fn batched_contractions_and_diagonals_through_the_tape() {
    cases::<f32>();
    cases::<f64>();
}

/// The output shape type must have the generalized spec's output rank.
#[test]
fn output_shape_follows_the_generalized_spec() {
    let a: Tensor<Rank3<2, 3, 3>, f64, Cpu> = Cpu::default().zeros();
    let op = TraceOp::new(TraceSpec::from_labels("bii", "bi").unwrap());
    let e = trace::<Rank3<2, 3, 3>, _, _, _>(&op, a.clone()).unwrap_err();
    assert!(matches!(e, Error::RankMismatch { .. }), "{e}");
    let ok: Tensor<Rank2<2, 3>, f64, Cpu> = trace(&op, a).unwrap();
    assert_eq!(ok.shape().concrete(), [2, 3]);
}
