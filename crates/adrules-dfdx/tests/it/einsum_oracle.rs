//! The oracle `einsum.jsonl` (torch's full einsum grammar, PyTorch references cross-checked
//! against JAX and finite differences) replayed through dfdx's tape: every `f32` / `f64` case
//! through the user-facing [`einsum`] (one op on dfdx's tape, the network pullback in its
//! backward closure), the primal against the file's `output`, and for each probe dfdx's
//! backward pass of `L = Σ C ⊙ C̄` against the file's VJP of every operand. The cases the
//! file marks `error` must give the typed error of the core's einsum, without a panic,
//! leaving the operands unchanged.
//!
//! dfdx ranks are static, so each case is dispatched on its operand count and ranks to
//! run-time-dim shape types `(usize, …)` ([`DISPATCH`]); a case beyond the dispatch is
//! counted as skipped, and at least 80 % of the success cases must run. The tape rides on
//! the first operand (the others are `NoneTape` and still get gradients).

use std::mem::discriminant;
use std::panic::{AssertUnwindSafe, catch_unwind};

use adrules_core::{Backend, DType, HostTensor, Result};
use adrules_dfdx::dfdx::prelude::*;
use adrules_dfdx::{DfdxElement, DfdxTensor, Operands, Ranked, einsum, try_backward};
use adrules_testing::oracle::{OracleCase, assert_close, load_for};

type Traced<S, E> = Tensor<S, E, Cpu, OwnedTape<E, Cpu>>;

/// The dispatch, for the report: the ranks each operand count is compiled for.
const DISPATCH: &str =
    "1 or 2 operands of rank 0 to 4, 3 operands of one rank 0 to 4; output rank 0 to 4";
/// The largest output rank dispatched (and of an operand).
const MAX_RANK: usize = 4;

/// The host copy of a dfdx tensor (any tape).
fn host<S: Shape, E: DfdxElement, T>(t: &Tensor<S, E, Cpu, T>) -> HostTensor {
    adrules_dfdx::DfdxBackend::default()
        .to_host(&DfdxTensor::new(t.retaped::<NoneTape>()).unwrap())
        .unwrap()
}

/// A host tensor as a dfdx tensor of shape type `S`.
fn tensor<S: Shape, E: DfdxElement>(h: &HostTensor) -> Tensor<S, E, Cpu> {
    adrules_dfdx::DfdxBackend::default()
        .from_host(h.clone())
        .unwrap()
        .to_tensor::<S, E>()
        .unwrap()
}

/// Binds `$t` to the dfdx tensor inside a [`Ranked`] of rank at most [`MAX_RANK`] and runs
/// `$body` (expanded once per rank); `$skip` for a higher rank.
macro_rules! with_operand {
    ($r:expr, $t:ident => $body:expr, else $skip:expr) => {
        match $r {
            Ranked::R0($t) => $body,
            Ranked::R1($t) => $body,
            Ranked::R2($t) => $body,
            Ranked::R3($t) => $body,
            Ranked::R4($t) => $body,
            _ => $skip,
        }
    };
}

/// [`with_operand!`] for three operands of one rank (0 to 4), binding `$a`, `$b`, `$c`.
///
/// Each arm of the dispatch is one instantiation of the adapter's generic op (output shape
/// × operand shapes), and LLVM's time grows with their number: every rank 0 to 4 for each
/// of three operands would be 625 instantiations per element type, where one common rank is
/// 25 (measured on one core: a cold build of this file takes about 2 minutes with the full
/// product, 5 without incremental compilation; about 1 minute with a common rank).
macro_rules! with_common_rank {
    ($x:expr, $a:ident, $b:ident, $c:ident => $body:expr, else $skip:expr) => {
        match $x {
            (Ranked::R0($a), Ranked::R0($b), Ranked::R0($c)) => $body,
            (Ranked::R1($a), Ranked::R1($b), Ranked::R1($c)) => $body,
            (Ranked::R2($a), Ranked::R2($b), Ranked::R2($c)) => $body,
            (Ranked::R3($a), Ranked::R3($b), Ranked::R3($c)) => $body,
            (Ranked::R4($a), Ranked::R4($b), Ranked::R4($c)) => $body,
            _ => $skip,
        }
    };
}

/// Runs `$body` with the type `$O` set to the run-time-dim shape type of rank `$rank`
/// (at most [`MAX_RANK`]); `$skip` for a higher rank.
macro_rules! with_output {
    ($rank:expr, $O:ident => $body:expr, else $skip:expr) => {
        match $rank {
            0 => {
                type $O = ();
                $body
            }
            1 => {
                type $O = (usize,);
                $body
            }
            2 => {
                type $O = (usize, usize);
                $body
            }
            3 => {
                type $O = (usize, usize, usize);
                $body
            }
            4 => {
                type $O = (usize, usize, usize, usize);
                $body
            }
            _ => $skip,
        }
    };
}

/// The element types replayed, with dfdx's `Σ c ⊙ w` (dfdx's binary kernels are
/// implemented per concrete element type).
trait Elem: DfdxElement {
    fn weighted_sum<O: Shape>(c: Traced<O, Self>, w: Tensor<O, Self, Cpu>) -> Traced<Rank0, Self>;
}

macro_rules! elem {
    ($($t:ty),+) => {$(
        impl Elem for $t {
            fn weighted_sum<O: Shape>(
                c: Traced<O, Self>,
                w: Tensor<O, Self, Cpu>,
            ) -> Traced<Rank0, Self> {
                (c * w).sum::<Rank0, _>()
            }
        }
    )+};
}
elem!(f32, f64);

/// What one call gives: the primal, and dfdx's gradients for the cotangent when one was
/// given.
type Outcome<E> = Result<(HostTensor, Option<Gradients<E, Cpu>>)>;

/// `C = einsum(subscripts, operands)` with the output shape type `O`, then, for a cotangent
/// `w`, dfdx's backward pass of `L = Σ C ⊙ w`.
fn run<E, O, X>(subscripts: &str, operands: X, w: Option<&HostTensor>) -> Outcome<E>
where
    E: Elem,
    O: Shape,
    X: Operands<E, Tape = OwnedTape<E, Cpu>>,
{
    let c: Traced<O, E> = einsum(subscripts, operands)?;
    finish(c, w)
}

/// The second half of [`run`], generic over the output shape only.
fn finish<E: Elem, O: Shape>(c: Traced<O, E>, w: Option<&HostTensor>) -> Outcome<E> {
    let primal = host(&c);
    let Some(w) = w else {
        return Ok((primal, None));
    };
    let w = tensor::<O, E>(w);
    let loss: Traced<Rank0, E> = if c.shape().num_elements() == 0 {
        // dfdx's reduction to a scalar divides by the number of stored elements (0 here):
        // "attempt to divide by zero". The full contraction with `w` is the same loss,
        // through the adapter's op.
        let labels = &"abcd"[..O::NUM_DIMS];
        einsum(&format!("{labels},{labels}->"), (c, w))?
    } else {
        E::weighted_sum(c, w)
    };
    Ok((primal, Some(try_backward(loss)?)))
}

/// The operands of a case as dfdx tensors with run-time dims.
fn operands<E: DfdxElement>(case: &OracleCase) -> Vec<Ranked<E>> {
    let dev = Cpu::default();
    case.inputs_in_order()
        .into_iter()
        .map(|h| Ranked::from_host(&dev, h.clone()).unwrap())
        .collect()
}

/// [`run`] on `xs` with the shape types of their ranks and of `out_rank`, the tape on the
/// first operand; `None` when a rank or the operand count is beyond the dispatch.
fn dispatch<E: Elem>(
    subscripts: &str,
    xs: &[Ranked<E>],
    out_rank: usize,
    w: Option<&HostTensor>,
) -> Option<Outcome<E>> {
    let s = subscripts;
    match xs {
        [a] => with_operand!(a, a => with_output!(out_rank, O => Some(
            run::<E, O, _>(s, (a.leaky_trace(),), w)
        ), else None), else None),
        [a, b] => with_operand!(a, a => with_operand!(b, b => with_output!(out_rank, O => Some(
            run::<E, O, _>(s, (a.leaky_trace(), b.clone()), w)
        ), else None), else None), else None),
        [a, b, c] => with_common_rank!((a, b, c), a, b, c => with_output!(out_rank, O => Some(
            run::<E, O, _>(s, (a.leaky_trace(), b.clone(), c.clone()), w)
        ), else None), else None),
        _ => None,
    }
}

/// The gradient of operand `x` in `g`, on the host.
fn gradient<E: DfdxElement>(g: &Gradients<E, Cpu>, x: &Ranked<E>) -> HostTensor {
    with_operand!(x, t => host(&g.get(t)), else unreachable!("dispatched operands have rank ≤ 4"))
}

/// How a case went.
enum Replay {
    Ran,
    Skipped,
}

/// A case the oracle marks `error`: the core's typed error (same variant), no panic,
/// operands unchanged. The output rank is that of the letters after `->` (the planning error
/// comes first, whatever it is).
fn replay_error<E: Elem>(case: &OracleCase, ctx: &str) -> Replay {
    let subscripts = case.subscripts.as_deref().unwrap();
    let xs = operands::<E>(case);
    let out_rank = subscripts
        .split_once("->")
        .map_or(0, |(_, o)| {
            o.chars().filter(char::is_ascii_alphabetic).count()
        })
        .min(MAX_RANK);
    let got = catch_unwind(AssertUnwindSafe(|| {
        dispatch(subscripts, &xs, out_rank, None)
    }))
    .unwrap_or_else(|_| panic!("{ctx}: panicked instead of returning an error"));
    let Some(got) = got else {
        return Replay::Skipped;
    };
    let e = match got {
        Ok((c, _)) => panic!("{ctx}: accepted, gave dims {:?}", c.dims()),
        Err(e) => e,
    };
    let want = case
        .einsum_error()
        .unwrap_or_else(|| panic!("{}: the core accepts it", case.id));
    assert_eq!(
        discriminant(&e),
        discriminant(&want),
        "{ctx}: dfdx gave `{e}`, the core `{want}`"
    );
    assert!(!e.to_string().is_empty(), "{ctx}: empty message");
    for (x, h) in xs.iter().zip(case.inputs_in_order()) {
        let after = with_operand!(x, t => host(t), else unreachable!());
        assert_eq!(&after, h, "{ctx}: an operand changed");
    }
    Replay::Ran
}

/// A success case: the primal, then dfdx's gradients for every probe's cotangent (a fresh
/// tape per probe).
fn replay_success<E: Elem>(case: &OracleCase, ctx: &str) -> Replay {
    let subscripts = case.subscripts.as_deref().unwrap();
    let tol = case.first_order_tolerance();
    let expected = case.output.as_ref().expect("success cases have an output");
    let xs = operands::<E>(case);
    let out_rank = expected.dims().len();
    let Some(primal) = dispatch(subscripts, &xs, out_rank, None) else {
        return Replay::Skipped;
    };
    let (primal, _) = primal.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_close(tol, &primal, expected, &format!("{ctx} primal"));
    assert!(!case.probes.is_empty(), "{ctx}: no probes");
    let names: Vec<&String> = case.inputs.keys().collect();
    for (i, probe) in case.probes.iter().enumerate() {
        let (_, g) = dispatch(subscripts, &xs, out_rank, Some(&probe.cotangent))
            .expect("dispatched above")
            .unwrap_or_else(|e| panic!("{ctx} probe {i}: {e}"));
        let g = g.expect("a cotangent was given");
        for (n, x) in names.iter().zip(&xs) {
            let what = format!("{ctx} probe {i} VJP {n}");
            assert_close(tol, &gradient(&g, x), &probe.vjp[*n], &what);
        }
    }
    Replay::Ran
}

#[test]
fn einsum_oracle_through_dfdx_tape() {
    let real = [DType::F32, DType::F64];
    let cases = load_for("einsum.jsonl", &real).unwrap();
    let (mut ran, mut errors, mut skipped) = (0usize, 0usize, Vec::new());
    for case in &cases {
        let ctx = format!("{} ({})", case.id, case.subscripts.as_deref().unwrap());
        let replay = match (case.expects_error, case.dtype) {
            (true, DType::F32) => replay_error::<f32>(case, &ctx),
            (true, _) => replay_error::<f64>(case, &ctx),
            (false, DType::F32) => replay_success::<f32>(case, &ctx),
            (false, _) => replay_success::<f64>(case, &ctx),
        };
        match (replay, case.expects_error) {
            (Replay::Ran, false) => ran += 1,
            (Replay::Ran, true) => errors += 1,
            (Replay::Skipped, _) => skipped.push(ctx),
        }
    }
    let success = cases.iter().filter(|c| !c.expects_error).count();
    println!(
        "dfdx einsum oracle: {ran} of {success} success cases and {errors} error cases replayed \
         (dispatch: {DISPATCH}); {} skipped: {skipped:?}",
        skipped.len()
    );
    assert!(
        ran * 5 >= success * 4,
        "only {ran} of {success} f32/f64 success cases replayed"
    );
    assert!(errors >= 7, "only {errors} rejected inputs replayed");
}

/// torch's grammar beyond the oracle file (`adrules_testing::grammar`): an output `...` when
/// no operand has one is empty (`"R->..."` sums `[6]` to a scalar, `"O->...O"` is the
/// identity), `""` and `" "` return a rank-0 operand. The primal and dfdx's gradient of
/// `Σ C̄ ⊙ C` against the hand-computed values, in f32 and f64.
#[test]
fn empty_ellipsis_and_empty_strings_follow_torch() {
    fn replay<E: Elem>(dtype: DType) {
        for case in adrules_testing::grammar::empty_ellipsis_cases(dtype) {
            let ctx = format!("{:?} {dtype:?}", case.subscripts);
            let xs = vec![Ranked::<E>::from_host(&Cpu::default(), case.input.clone()).unwrap()];
            let out_rank = case.output.dims().len();
            let (y, g) = dispatch(case.subscripts, &xs, out_rank, Some(&case.cotangent))
                .expect("rank ≤ 4")
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(y, case.output, "{ctx}: value");
            let g = g.expect("a cotangent was given");
            assert_eq!(gradient(&g, &xs[0]), case.vjp, "{ctx}: gradient");
        }
    }
    replay::<f32>(DType::F32);
    replay::<f64>(DType::F64);
}
