//! Any one-output [`Rule`] of the core (a downstream crate's own operation) as one op on
//! dfdx's tape: [`apply_rule`].

use adrules_core::rule::{self, Rule};
use adrules_core::{Error, Result};
use adrules_strided::{Strided, Tensor as StridedTensor};
use dfdx::prelude::{PutTape, Shape, Tape, Tensor};
use dfdx::tensor::Cpu;

use crate::bridge::{copy_out, shape_for};
use crate::element::DfdxElement;
use crate::operands::{Collected, Operands};
use crate::record::{add_fresh, record};

/// Runs the one-output `rule` on `operands` (in the rule's order) as **one** op on dfdx's
/// tape, whose backward is the rule's pullback.
///
/// As [`network`](crate::network): the operands are copied to the host and the rule runs
/// through the core's checked driver ([`rule::rrule`], every operand active when the result
/// is traced; [`rule::primal`] otherwise) on the strided backend; the output is moved into a
/// dfdx tensor of shape type `Out`; the backward pass applies the pullback once and adds
/// every operand's cotangent into its gradient. The pullback keeps what the rule
/// [keeps](Rule::keeps) (host handles) until the backward pass.
///
/// # Errors
/// [`Error::Unsupported`] for a rule with several outputs (dfdx's tape follows one tensor:
/// call it on the strided backend, or through candle or burn); [`Error::CountMismatch`]
/// (`"operands"`); the core driver's (the rule's own [`check`](Rule::check) first);
/// [`Error::RankMismatch`] / [`Error::ShapeMismatch`] when `Out` does not fit the output. A
/// failure of the pullback stops dfdx's backward pass; the typed error is reported as for
/// every op of this crate ([`try_backward`](crate::try_backward)).
pub fn apply_rule<Out, E, X, R>(rule: &R, operands: X) -> Result<Tensor<Out, E, Cpu, X::Tape>>
where
    Out: Shape,
    E: DfdxElement,
    X: Operands<E>,
    R: Rule,
{
    if rule.num_outputs() != 1 {
        return Err(Error::Unsupported {
            backend: "dfdx".into(),
            what: format!(
                "rule `{}` with {} outputs (dfdx's tape follows one tensor)",
                rule.name(),
                rule.num_outputs()
            ),
        });
    }
    if operands.count() != rule.num_inputs() {
        return Err(Error::CountMismatch {
            arg: "operands".into(),
            expected: rule.num_inputs(),
            actual: operands.count(),
        });
    }
    run(rule, operands.collect()?)
}

/// [`apply_rule`] on operands already collected (one output, counts checked).
pub(crate) fn run<Out, E, T, R>(rule: &R, xs: Collected<E, T>) -> Result<Tensor<Out, E, Cpu, T>>
where
    Out: Shape,
    E: DfdxElement,
    T: Tape<E, Cpu>,
    R: Rule,
{
    let inputs: Vec<StridedTensor> = xs.data.into_iter().map(StridedTensor::from_host).collect();
    let refs: Vec<&StridedTensor> = inputs.iter().collect();
    if !T::OWNS_TAPE {
        let y = rule::primal(rule, &Strided, &refs)?.remove(0);
        let shape: Out = shape_for(y.dims(), "output")?;
        return Ok(copy_out(&xs.device, y, shape)?.put_tape(xs.tape));
    }
    let (mut y, pullback) = rule::rrule(rule, &Strided, &refs, &vec![true; refs.len()])?;
    drop(inputs); // the pullback keeps its own handles of what it reads
    let y = y.remove(0);
    let shape: Out = shape_for(y.dims(), "output")?;
    let out: Tensor<Out, E, Cpu> = copy_out(&xs.device, y, shape)?;
    let mut x_bar: Option<Vec<Option<StridedTensor>>> = None;
    Ok(record(out, xs.tape, xs.keys, move |c_bar, k, slot| {
        if x_bar.is_none() {
            x_bar = Some(pullback.pullback(&[Some(c_bar.clone())])?);
        }
        match x_bar.as_ref().and_then(|x| x.get(k)) {
            Some(Some(cot)) => add_fresh(slot, cot),
            _ => Ok(()),
        }
    }))
}
