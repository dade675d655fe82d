//! `NetworkPlan::evaluate`: the plan run through a caller-supplied step evaluator (as engine
//! adapters do) gives the same result as `NetworkPlan::execute`, and each intermediate
//! reaches exactly the step that reads it and is dropped right after it.

use std::cell::Cell;
use std::rc::Rc;

use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Backend, DType, Error};
use adrules_testing::{ReferenceBackend, Rng, Tolerance, Value};

#[test]
fn evaluate_matches_execute() {
    let be = ReferenceBackend;
    let mut rng = Rng::seed(41);
    let cases: [(&str, &[&[usize]]); 5] = [
        ("abc,bd,cd->a", &[&[2, 3, 4], &[3, 5], &[4, 5]]),
        ("iij,jk->k", &[&[3, 3, 4], &[4, 2]]),
        ("ijk->kji", &[&[2, 3, 4]]),
        (
            "ab,bcx,cdy,dez,ea->xyz",
            &[&[2, 3], &[3, 2, 2], &[2, 3, 3], &[3, 2, 2], &[2, 2]],
        ),
        ("i,j->ji", &[&[3], &[4]]),
    ];
    for (subscripts, dims) in cases {
        let plan =
            NetworkPlan::new(&Network::einsum(subscripts).unwrap(), dims, &Order::Default).unwrap();
        let x: Vec<_> = dims
            .iter()
            .map(|d| be.from_host(rng.tensor(d, DType::F64)).unwrap())
            .collect();
        let refs: Vec<_> = x.iter().collect();
        let want = be.to_host(&plan.execute(&be, &refs).unwrap()).unwrap();
        let mut seen = 0;
        let got = plan
            .evaluate(&refs, |step, inputs| {
                let d: Vec<Vec<usize>> = inputs.iter().map(|t| be.dims(t).to_vec()).collect();
                assert_eq!(d.len(), step.inputs().len());
                let out = step.primitive().output_dims(&d)?;
                assert_eq!(Some(out.as_slice()), plan.step_dims(seen));
                seen += 1;
                let mut c = be.zeros(&out, DType::F64)?;
                step.primitive().apply(&be, &mut c, inputs)?;
                Ok(c)
            })
            .unwrap();
        assert_eq!(seen, plan.steps().len());
        Tolerance::for_dtype(DType::F64)
            .check(
                &Value::Tensor(be.to_host(&got).unwrap()),
                &Value::Tensor(want),
                subscripts,
            )
            .unwrap();
    }
}

#[test]
fn evaluate_checks_the_operand_count() {
    let plan = NetworkPlan::new(
        &Network::einsum("ij,jk->ik").unwrap(),
        &[[2, 3], [3, 4]],
        &Order::Default,
    )
    .unwrap();
    let e = plan.evaluate(&[&1.0f64], |_, x| Ok(*x[0])).unwrap_err();
    assert!(
        matches!(e, Error::CountMismatch { ref arg, .. } if arg == "operands"),
        "{e}"
    );
}

/// A value that counts the live intermediates.
struct Counted(Rc<Cell<usize>>);

impl Counted {
    fn new(live: &Rc<Cell<usize>>) -> Self {
        live.set(live.get() + 1);
        Counted(live.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

#[test]
fn evaluate_drops_each_intermediate_after_its_reader() {
    let dims: &[&[usize]] = &[&[2, 3], &[3, 2, 2], &[2, 3, 3], &[3, 2, 2], &[2, 2]];
    let plan = NetworkPlan::new(
        &Network::einsum("ab,bcx,cdy,dez,ea->xyz").unwrap(),
        dims,
        &Order::Default,
    )
    .unwrap();
    let n = plan.num_operands();
    let operands_live = Rc::new(Cell::new(0));
    let operands: Vec<_> = (0..n).map(|_| Counted::new(&operands_live)).collect();
    let refs: Vec<_> = operands.iter().collect();
    let live = Rc::new(Cell::new(0));
    let mut s = 0;
    let out = plan
        .evaluate(&refs, |step, inputs| {
            assert_eq!(inputs.len(), step.inputs().len());
            // produced by the s earlier steps, minus those the earlier steps consumed
            let consumed = plan.steps()[..s]
                .iter()
                .flat_map(|p| p.inputs())
                .filter(|&&v| v >= n)
                .count();
            assert_eq!(
                live.get(),
                s - consumed,
                "live intermediates before step {s}"
            );
            s += 1;
            Ok(Counted::new(&live))
        })
        .unwrap();
    assert_eq!(s, plan.steps().len());
    assert_eq!(live.get(), 1, "only the result is alive");
    drop(out);
    assert_eq!(live.get(), 0);
    assert_eq!(
        operands_live.get(),
        n,
        "the operands are borrowed, never dropped"
    );
}
