//! The oracle `einsum.jsonl` (torch's full einsum grammar, PyTorch references cross-checked
//! against JAX and finite differences) replayed through candle's own graph: every `f32` /
//! `f64` case through the user-facing [`einsum`] on candle `Var`s, the primal against the
//! file's `output`, and for each probe candle's `backward()` of `L = Σ C ⊙ C̄` (one custom op
//! per step of the plan, the shared pullbacks inside candle's backward pass) against the
//! file's VJP of every operand. The cases the file marks `error` must give a typed adrules
//! error inside candle's (the variant of the core's einsum), without a panic, leaving the
//! operands unchanged.

use std::mem::discriminant;

use adrules_candle::candle_core::{Tensor, Var};
use adrules_candle::{CandleBackend, adrules_error, einsum};
use adrules_core::{Backend, DType, HostTensor};
use adrules_testing::oracle::{OracleCase, assert_close, load_for};

fn up(h: &HostTensor) -> Tensor {
    CandleBackend::cpu().from_host(h.clone()).unwrap()
}

fn down(t: &Tensor) -> HostTensor {
    CandleBackend::cpu().to_host(t).unwrap()
}

/// A case the oracle marks `error`: a typed error from [`einsum`] (the variant the core's
/// einsum gives), no panic, operands unchanged.
fn replay_error(case: &OracleCase, ctx: &str) {
    let inputs = case.inputs_in_order();
    let vars: Vec<Var> = inputs
        .iter()
        .map(|h| Var::from_tensor(&up(h)).unwrap())
        .collect();
    let xs: Vec<&Tensor> = vars.iter().map(|v| v.as_tensor()).collect();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        einsum(case.subscripts.as_deref().unwrap(), &xs)
    }));
    match run {
        Err(_) => panic!("{ctx}: panicked instead of returning an error"),
        Ok(Ok(t)) => panic!("{ctx}: accepted, gave shape {:?}", t.dims()),
        Ok(Err(e)) => {
            let typed = adrules_error(&e)
                .unwrap_or_else(|| panic!("{ctx}: not a typed adrules error: {e}"));
            let want = case
                .einsum_error()
                .unwrap_or_else(|| panic!("{}: the core accepts it", case.id));
            assert_eq!(
                discriminant(typed),
                discriminant(&want),
                "{ctx}: candle gave `{typed}`, the core `{want}`"
            );
            assert!(!typed.to_string().is_empty(), "{ctx}: empty message");
        }
    }
    for (v, h) in vars.iter().zip(&inputs) {
        assert_eq!(&down(v.as_tensor()), *h, "{ctx}: an operand changed");
    }
}

/// A success case: the primal, then candle's gradients for every probe's cotangent.
fn replay_success(case: &OracleCase, ctx: &str) {
    let subscripts = case.subscripts.as_deref().unwrap();
    let tol = case.first_order_tolerance();
    let names: Vec<&String> = case.inputs.keys().collect();
    let vars: Vec<Var> = case
        .inputs_in_order()
        .iter()
        .map(|h| Var::from_tensor(&up(h)).unwrap())
        .collect();
    let xs: Vec<&Tensor> = vars.iter().map(|v| v.as_tensor()).collect();
    let out = einsum(subscripts, &xs).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let expected = case.output.as_ref().expect("success cases have an output");
    assert_close(tol, &down(&out), expected, &format!("{ctx} primal"));
    assert!(!case.probes.is_empty(), "{ctx}: no probes");
    for (i, probe) in case.probes.iter().enumerate() {
        // A fresh graph per probe: candle's backward leaves the graph as it was, but the
        // probes are independent.
        let out = einsum(subscripts, &xs).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let loss = (&out * &up(&probe.cotangent))
            .and_then(|p| p.sum_all())
            .unwrap_or_else(|e| panic!("{ctx}: loss: {e}"));
        let grads = loss
            .backward()
            .unwrap_or_else(|e| panic!("{ctx} probe {i}: backward: {e}"));
        for (n, v) in names.iter().zip(&vars) {
            let what = format!("{ctx} probe {i} VJP {n}");
            let want = &probe.vjp[*n];
            let got = grads
                .get(v.as_tensor())
                .map(down)
                .unwrap_or_else(|| panic!("{what}: candle gave no gradient"));
            assert_close(tol, &got, want, &what);
        }
    }
}

#[test]
fn einsum_oracle_through_candle_autograd() {
    // f32 and f64 only: candle has no complex dtype
    let real = [DType::F32, DType::F64];
    let cases = load_for("einsum.jsonl", &real).unwrap();
    let (mut ok, mut errors) = (0, 0);
    for case in &cases {
        let ctx = format!("{} ({})", case.id, case.subscripts.as_deref().unwrap());
        if case.expects_error {
            replay_error(case, &ctx);
            errors += 1;
        } else {
            replay_success(case, &ctx);
            ok += 1;
        }
    }
    println!(
        "candle einsum oracle: {ok} success cases and {errors} error cases replayed, 0 skipped"
    );
    assert!(ok >= 60, "only {ok} f32/f64 success cases replayed");
    assert!(errors >= 7, "only {errors} rejected inputs replayed");
}

/// torch's grammar beyond the oracle file (`adrules_testing::grammar`): an output `...` when
/// no operand has one is empty (`"R->..."` sums `[6]` to a scalar, `"O->...O"` is the
/// identity), `""` and `" "` return a rank-0 operand. The primal and candle's gradient of
/// `Σ C̄ ⊙ C` against the hand-computed values, in f32 and f64.
#[test]
fn empty_ellipsis_and_empty_strings_follow_torch() {
    for dtype in [DType::F32, DType::F64] {
        for case in adrules_testing::grammar::empty_ellipsis_cases(dtype) {
            let ctx = format!("{:?} {dtype:?}", case.subscripts);
            let x = Var::from_tensor(&up(&case.input)).unwrap();
            let y =
                einsum(case.subscripts, &[x.as_tensor()]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(down(&y), case.output, "{ctx}: value");
            let loss = (&y * &up(&case.cotangent)).unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let g = grads
                .get(x.as_tensor())
                .unwrap_or_else(|| panic!("{ctx}: no gradient"));
            assert_eq!(down(g), case.vjp, "{ctx}: gradient");
        }
    }
}
