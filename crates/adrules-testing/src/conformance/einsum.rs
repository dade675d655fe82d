//! Conformance of the general einsum ([`adrules_core::network::einsum`] in torch's grammar):
//! the oracle `einsum.jsonl` replayed on the backend.

use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Backend, DType, HostTensor};

use super::Config;
use super::network::oracle_probes;
use crate::Value;
use crate::oracle::{OracleCase, load_for};

/// The cases of `einsum.jsonl` whose dtype and ranks the config supports.
fn einsum_cases(cfg: &Config) -> Vec<OracleCase> {
    let cases: Vec<OracleCase> = load_for("einsum.jsonl", &cfg.dtypes)
        .unwrap()
        .into_iter()
        .filter(|case| {
            let ranks: Vec<usize> = case.inputs.values().map(|t| t.dims().len()).collect();
            cfg.supports(&[case.dtype], &ranks)
        })
        .collect();
    assert!(
        !cases.is_empty(),
        "no einsum case has a dtype this backend supports"
    );
    cases
}

/// Every case of the oracle `einsum.jsonl` (torch's grammar: batch and Hadamard labels,
/// hyperedges, diagonals, single-axis sums, implicit output, ellipsis with broadcasting, rank
/// 0, zero-size dimensions) through [`adrules_core::network::einsum`] (the primal, against the
/// file's `output`), [`NetworkPlan::frule`] (the JVP) and [`NetworkPlan::rrule`] (the VJP of
/// every operand), within each case's tolerance tightened to ours. Every case the file marks
/// `error` must give a typed error from the one-call `einsum` (never a panic) and leave the
/// operands unchanged.
///
/// # Panics
/// On the first mismatch; when the oracle file is missing or no case has a configured dtype.
pub fn einsum_oracle<B: Backend>(be: &B, cfg: &Config) {
    let cases = einsum_cases(cfg);
    let mut errors = 0;
    for case in &cases {
        let subscripts = case
            .subscripts
            .as_deref()
            .expect("einsum cases have subscripts");
        let inputs = case.inputs_in_order();
        let xs: Vec<B::Tensor> = inputs
            .iter()
            .map(|t| be.from_host((*t).clone()).unwrap())
            .collect();
        let refs: Vec<&B::Tensor> = xs.iter().collect();
        let ctx = format!("{} ({subscripts})", case.id);
        if case.expects_error {
            errors += 1;
            match adrules_core::network::einsum(be, subscripts, &refs) {
                Ok(t) => panic!("{ctx}: accepted, gave shape {:?}", be.dims(&t)),
                Err(e) => assert!(!e.to_string().is_empty(), "{ctx}: empty message"),
            }
            for (x, t) in xs.iter().zip(&inputs) {
                let after: HostTensor = be.to_host(x).unwrap();
                assert_eq!(&after, *t, "{ctx}: an operand changed");
            }
            continue;
        }
        let tol = case.first_order_tolerance();
        let primal = adrules_core::network::einsum(be, subscripts, &refs)
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let expected = case.output.clone().expect("success cases have an output");
        tol.check(
            &Value::Tensor(be.to_host(&primal).unwrap()),
            &Value::Tensor(expected),
            &format!("{ctx} primal"),
        )
        .unwrap();
        let net = Network::einsum(subscripts).unwrap();
        let dims: Vec<&[usize]> = inputs.iter().map(|t| t.dims()).collect();
        let plan = NetworkPlan::new(&net, &dims, &Order::Default)
            .unwrap_or_else(|e| panic!("{ctx}: planning: {e}"));
        oracle_probes(be, &plan, &refs, case, subscripts);
    }
    if cfg.dtypes.contains(&DType::F64) {
        assert!(
            errors >= 7,
            "only {errors} of the oracle's rejected inputs were replayed"
        );
    }
}

/// torch's grammar beyond the oracle file ([`crate::grammar::empty_ellipsis_cases`]): an
/// output `...` when no operand has one is empty (`"R->..."` on `[6]` sums to a scalar,
/// `"O->...O"` on `[4]` is the identity), an empty or blank string on a rank-0 operand returns
/// it. The one-call `einsum` and [`NetworkPlan::rrule`] (the primal and the VJP of the case's
/// cotangent) against the hand-computed values, in each real dtype of the config.
///
/// # Panics
/// On the first mismatch.
pub fn einsum_empty_ellipsis<B: Backend>(be: &B, cfg: &Config) {
    for &dtype in cfg.dtypes.iter().filter(|d| !d.is_complex()) {
        for case in crate::grammar::empty_ellipsis_cases(dtype) {
            let s = case.subscripts;
            let ctx = format!("{s:?} {dtype:?}");
            let x = be.from_host(case.input.clone()).unwrap();
            let y = adrules_core::network::einsum(be, s, &[&x])
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(be.to_host(&y).unwrap(), case.output, "{ctx}: einsum");
            let net = Network::einsum(s).unwrap();
            let plan = NetworkPlan::new(&net, &[case.input.dims()], &Order::Default)
                .unwrap_or_else(|e| panic!("{ctx}: planning: {e}"));
            let (y, pb) = plan
                .rrule(be, &[&x], &[true])
                .unwrap_or_else(|e| panic!("{ctx}: rrule: {e}"));
            assert_eq!(be.to_host(&y).unwrap(), case.output, "{ctx}: rrule primal");
            let c = be.from_host(case.cotangent.clone()).unwrap();
            let g = pb
                .pullback(&c)
                .unwrap_or_else(|e| panic!("{ctx}: pullback: {e}"));
            let g = g[0]
                .as_ref()
                .unwrap_or_else(|| panic!("{ctx}: no cotangent"));
            assert_eq!(be.to_host(g).unwrap(), case.vjp, "{ctx}: VJP");
            assert_eq!(
                be.to_host(&x).unwrap(),
                case.input,
                "{ctx}: the operand changed"
            );
        }
    }
}
