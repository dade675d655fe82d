//! The checked drivers of `adrules_core::rule` on a deliberately broken rule: each broken
//! declaration (output count, keeps length, a pullback reading an input it did not keep, a
//! cotangent count or shape, a tangent shape) is a typed error naming the rule or the
//! argument; absent cotangents give zeros without running the pullback; an engine that takes
//! the primal out hands it back through `pullback_with`; the multi-output node runs the same
//! pullback as the driver.

use adrules_core::rule::{self, Keeps, OutputsNode, Primal, Pullback, Rule, SyncBackend};
use adrules_core::{Backend, Conj, DType, DynScalar, Error, HostTensor, Permutation, Result};
use adrules_strided::{Strided, Tensor};

/// `(2·x, x)` with a defect.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Broken {
    None,
    /// one output instead of two
    Outputs,
    /// keeps of the wrong length
    Keeps,
    /// reads input 0 without keeping it
    Reads,
    /// one cotangent for one input... of shape `[1]`
    Shape,
    /// three cotangents for one input
    Count,
}

#[derive(Debug)]
struct Twice(Broken);

fn scaled<B: Backend>(be: &B, x: &B::Tensor, s: f64) -> Result<B::Tensor> {
    let mut y = be.zeros(&be.dims(x), be.dtype(x))?;
    let id = Permutation::identity(be.rank(x));
    be.add(
        &mut y,
        x,
        &id,
        Conj::No,
        DynScalar::F64(s),
        DynScalar::F64(0.0),
    )?;
    Ok(y)
}

impl Rule for Twice {
    fn name(&self) -> &str {
        "twice"
    }
    fn num_inputs(&self) -> usize {
        1
    }
    fn num_outputs(&self) -> usize {
        2
    }
    fn keeps(&self, _: &[bool]) -> Keeps {
        match self.0 {
            Broken::Keeps => Keeps::all(2, 2),
            Broken::Reads => Keeps::none(1, 2),
            _ => Keeps::inputs(1, 2),
        }
    }
    fn rrule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        _: &[bool],
    ) -> Result<(Vec<B::Tensor>, Box<dyn Pullback<B>>)> {
        let fault = self.0;
        let pb = move |be: &B, p: &Primal<B>, c: &[Option<B::Tensor>]| {
            let x = p.input(0)?;
            let mut x_bar = be.zeros(&be.dims(x), be.dtype(x))?;
            let id = Permutation::identity(be.rank(x));
            for (c, s) in c.iter().zip([2.0, 1.0]) {
                if let Some(c) = c {
                    be.add(
                        &mut x_bar,
                        c,
                        &id,
                        Conj::No,
                        DynScalar::F64(s),
                        DynScalar::F64(1.0),
                    )?;
                }
            }
            Ok(match fault {
                Broken::Shape => vec![Some(be.zeros(&[1], DType::F64)?)],
                Broken::Count => vec![None, None, None],
                _ => vec![Some(x_bar)],
            })
        };
        let mut y = vec![scaled(be, x[0], 2.0)?, x[0].clone()];
        if fault == Broken::Outputs {
            y.pop();
        }
        Ok((y, Box::new(pb)))
    }
}

fn x() -> Tensor {
    Strided
        .from_host(HostTensor::from_vec(&[3], vec![1.0, -2.0, 0.5]).unwrap())
        .unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    Strided
        .to_host(t)
        .unwrap()
        .as_slice::<f64>()
        .unwrap()
        .to_vec()
}

fn rule_error(e: Error, want: &str) {
    match e {
        Error::InvalidArgument { arg, reason } => {
            assert_eq!(arg, "rule `twice`");
            assert!(reason.contains(want), "{reason}");
        }
        e => panic!("{e}"),
    }
}

#[test]
fn broken_declarations_are_typed_errors() {
    let (be, x) = (Strided, x());
    let e = rule::rrule(&Twice(Broken::Outputs), &be, &[&x], &[true]).unwrap_err();
    rule_error(e, "returned 1 outputs, declares 2");
    let e = rule::rrule(&Twice(Broken::Keeps), &be, &[&x], &[true]).unwrap_err();
    rule_error(e, "keeps 2 inputs");
    let ones = scaled(&be, &x, 0.0).unwrap();
    let (_, pb) = rule::rrule(&Twice(Broken::Reads), &be, &[&x], &[true]).unwrap();
    let e = pb.pullback(&[Some(ones.clone()), None]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, reason } if arg == "primal" && reason.contains("not kept")),
        "{e}"
    );
    let (_, pb) = rule::rrule(&Twice(Broken::Shape), &be, &[&x], &[true]).unwrap();
    rule_error(
        pb.pullback(&[Some(ones.clone()), None]).unwrap_err(),
        "cotangent of input 0 has shape [1]",
    );
    let (_, pb) = rule::rrule(&Twice(Broken::Count), &be, &[&x], &[true]).unwrap();
    rule_error(
        pb.pullback(&[Some(ones.clone()), None]).unwrap_err(),
        "3 cotangents for 1 inputs",
    );
}

#[test]
fn bad_arguments_are_typed_errors() {
    let (be, x) = (Strided, x());
    let rule = Twice(Broken::None);
    let e = rule::rrule(&rule, &be, &[&x, &x], &[true, true]).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, expected: 1, actual: 2 } if arg == "inputs"),
        "{e}"
    );
    let e = rule::rrule(&rule, &be, &[&x], &[]).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, .. } if arg == "active"),
        "{e}"
    );
    let (_, pb) = rule::rrule(&rule, &be, &[&x], &[true]).unwrap();
    let e = pb.pullback(&[None]).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, .. } if arg == "cotangents"),
        "{e}"
    );
    let short = Strided.zeros(&[2], DType::F64).unwrap();
    let e = pb.pullback(&[None, Some(short)]).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { arg, .. } if arg == "cotangent 1"),
        "{e}"
    );
    let f32s = Strided.zeros(&[3], DType::F32).unwrap();
    let e = pb.pullback(&[Some(f32s), None]).unwrap_err();
    assert!(
        matches!(&e, Error::DTypeMismatch { arg, .. } if arg == "cotangent 0"),
        "{e}"
    );
    // no frule: the typed Unsupported of `no_frule`
    let e = rule::frule(&rule, &be, &[&x], &[None]).unwrap_err();
    assert_eq!(e, rule::no_frule("strided", "twice"));
}

#[test]
fn absent_cotangents_and_taken_primals() {
    let (be, x) = (Strided, x());
    let rule = Twice(Broken::None);
    let (y, mut pb) = rule::rrule(&rule, &be, &[&x], &[true]).unwrap();
    assert_eq!(values(&y[0]), [2.0, -4.0, 1.0]);
    // every cotangent absent: zeros, the pullback not run (a `Reads` rule would fail)
    let (_, reads) = rule::rrule(&Twice(Broken::Reads), &be, &[&x], &[true]).unwrap();
    assert_eq!(
        values(reads.pullback(&[None, None]).unwrap()[0].as_ref().unwrap()),
        [0.0; 3]
    );
    let ones = be
        .from_host(HostTensor::from_vec(&[3], vec![1.0; 3]).unwrap())
        .unwrap();
    let want = pb
        .pullback(&[Some(ones.clone()), Some(ones.clone())])
        .unwrap();
    assert_eq!(values(want[0].as_ref().unwrap()), [3.0; 3]);
    // an engine that keeps the primal itself
    let primal = pb.take_primal().unwrap();
    let e = pb.pullback(&[Some(ones.clone()), None]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "primal"),
        "{e}"
    );
    let got = pb
        .pullback_with(&primal, &[Some(ones.clone()), Some(ones.clone())])
        .unwrap();
    assert_eq!(values(got[0].as_ref().unwrap()), [3.0; 3]);
    let wrong = Primal::new(vec![None], vec![None, None], vec![true]);
    let e = pb
        .pullback_with(&wrong, &[Some(ones.clone()), None])
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "primal"),
        "{e}"
    );
    // the multi-output node: output 1 alone
    let (_, pb) = rule::rrule(&rule, &be, &[&x], &[true]).unwrap();
    let node = OutputsNode::new(pb.clone());
    let t = node.deposit(1, ones.clone()).unwrap();
    let got = node.pullback(&t).unwrap();
    let want = pb.pullback(&[None, Some(ones.clone())]).unwrap();
    assert_eq!(
        values(got[0].as_ref().unwrap()),
        values(want[0].as_ref().unwrap())
    );
    let e = node.deposit(2, ones).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { arg, .. } if arg == "output"),
        "{e}"
    );
}

/// `rule::downcast_ref` / `downcast`: a value of another type than the one asked for is a
/// typed `Unsupported` naming both types and the caller's purpose, never a panic.
#[test]
fn downcasts_to_another_type_are_typed_errors() {
    use adrules_core::rule::{downcast, downcast_ref};
    assert_eq!(*downcast_ref::<f64, f64>(&1.5, "x").unwrap(), 1.5);
    assert_eq!(downcast::<u32, u32>(7, "x").unwrap(), 7);
    match downcast_ref::<f64, u32>(&1.5, "engine code") {
        Err(adrules_core::Error::Unsupported { backend, what }) => {
            assert_eq!(backend, "f64");
            assert!(
                what.contains("engine code") && what.contains("u32"),
                "{what}"
            );
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert!(matches!(
        downcast::<f64, u32>(1.5, "engine code"),
        Err(adrules_core::Error::Unsupported { .. })
    ));
}

/// `rule::pullback_at` at a primal point an engine computed itself: a primitive's pullback
/// built there gives the cotangents of its `rrule`'s pullback to the bit (a contraction with
/// α and conjugation flags, with one operand active and with both); a rule without one is
/// `None`; a wrong count of outputs or a broken input is a typed error before anything runs.
#[test]
fn pullback_at_an_engines_primal_point() {
    use adrules_core::ContractSpec;
    use adrules_core::rule::PrimitiveCall;
    use adrules_core::rules::ContractOp;
    let be = Strided;
    let host = |dims: &[usize], seed: f64| {
        let n: usize = dims.iter().product();
        let v = (0..n).map(|i| ((i as f64 + seed) * 0.37).sin()).collect();
        be.from_host(HostTensor::from_vec(dims, v).unwrap())
            .unwrap()
    };
    let (a, b, c_bar) = (
        host(&[2, 3, 4], 1.0),
        host(&[4, 3, 5], 2.0),
        host(&[5, 2], 3.0),
    );
    let spec = ContractSpec::from_labels("ijl", "ljk", "ki").unwrap();
    let op = ContractOp::new(spec)
        .conj(Conj::No, Conj::Yes)
        .alpha(DynScalar::F64(1.5));
    let call = PrimitiveCall::new(op.into(), 2).unwrap();
    for active in [[true, true], [false, true], [true, false]] {
        let (y, pb) = rule::rrule(&call, &be, &[&a, &b], &active).unwrap();
        let at = rule::pullback_at(&call, &be, &[&a, &b], &[&y[0]], &active)
            .unwrap()
            .expect("a primitive builds its pullback at a primal point");
        let want = pb.pullback(&[Some(c_bar.clone())]).unwrap();
        let got = at.pullback(&[Some(c_bar.clone())]).unwrap();
        for (g, w) in got.iter().zip(&want) {
            let (g, w) = (g.as_ref().map(values), w.as_ref().map(values));
            assert_eq!(g.is_some(), w.is_some());
            let bits = |v: Vec<f64>| v.into_iter().map(f64::to_bits).collect::<Vec<_>>();
            assert_eq!(g.map(bits), w.map(bits), "{active:?}");
        }
    }
    let x = x();
    let (y, _) = rule::rrule(&Twice(Broken::None), &be, &[&x], &[true]).unwrap();
    let none = rule::pullback_at(&Twice(Broken::None), &be, &[&x], &[&y[0], &y[1]], &[true]);
    assert!(none.unwrap().is_none());
    let e = rule::pullback_at(&Twice(Broken::None), &be, &[&x], &[&y[0]], &[true]).unwrap_err();
    assert!(
        matches!(&e, Error::CountMismatch { arg, expected: 2, actual: 1 } if arg == "outputs"),
        "{e}"
    );
    let e = rule::pullback_at(&call, &be, &[&a, &a], &[&y[0]], &[true, true]).unwrap_err();
    assert!(matches!(&e, Error::ShapeMismatch { .. }), "{e}");
}
