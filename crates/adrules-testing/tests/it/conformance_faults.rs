//! The conformance checks can fail: each check, run on the reference backend with one
//! injected defect, must panic. (The suite passing on the exact reference backend is the
//! module `conformance` of this binary.)

use std::panic::catch_unwind;

use adrules_core::{Backend, Complex64, Conj, DynScalar, HostTensor, Result};
use adrules_testing::ReferenceBackend;
use adrules_testing::conformance::{
    Config, add, contract, general, implicit, network, tensorscalar, trace,
};
use adrules_testing::forwarding::{Call, Forwarding, Hook, Primitive};

/// One defect injected into the reference backend.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// `add` uses conj(α)
    AddConjugatesAlpha,
    /// `contract` ignores β (overwrites C instead of accumulating into it)
    ContractDropsBeta,
    /// `add_to_diagonal` (the trace pullback) adds 2α
    DiagonalDoublesAlpha,
    /// `contract` ignores B's conjugation flag
    ContractIgnoresConjB,
    /// `contract` scales by 1 + 10⁻³
    ContractScaled,
    /// `scalar` returns the conjugate
    ScalarConjugated,
    /// `contract` with `β = 0` reads C (no strong zero: NaN in C leaks)
    ContractReadsC,
}

/// The reference backend with one defect, injected by a [`Hook`] of the forwarding backend.
type Faulty = Forwarding<ReferenceBackend, Fault>;

fn scaled(s: DynScalar, by: f64) -> DynScalar {
    DynScalar::from_c64(s.to_c64() * by, s.dtype())
}

impl Hook for Fault {
    fn before(&self, call: &mut Call) -> Result<()> {
        match (self, call.primitive) {
            (Fault::AddConjugatesAlpha, Primitive::Add) => {
                call.alpha = call.alpha.map(|a| a.conj())
            }
            (Fault::DiagonalDoublesAlpha, Primitive::AddToDiagonal) => {
                call.alpha = call.alpha.map(|a| scaled(a, 2.0))
            }
            (Fault::ContractIgnoresConjB, Primitive::Contract) => call.conj[1] = Conj::No,
            (Fault::ContractScaled, Primitive::Contract) => {
                call.alpha = call.alpha.map(|a| scaled(a, 1.001))
            }
            (Fault::ContractDropsBeta, Primitive::Contract) => {
                call.beta = call.beta.map(|b| DynScalar::zero(b.dtype()))
            }
            (Fault::ContractReadsC, Primitive::Contract) => {
                call.beta = call.beta.map(|b| {
                    if b.is_zero() {
                        scaled(DynScalar::one(b.dtype()), 1e-30)
                    } else {
                        b
                    }
                })
            }
            _ => {}
        }
        Ok(())
    }

    fn scalar_result(&self, primitive: Primitive, value: DynScalar) -> DynScalar {
        if *self == Fault::ScalarConjugated && primitive == Primitive::Scalar {
            value.conj()
        } else {
            value
        }
    }
}

/// `check` must panic on the backend with `fault`.
fn detects(check: fn(&Faulty, &Config), fault: Fault) {
    let be = Forwarding::new(ReferenceBackend, fault);
    let outcome = catch_unwind(|| check(&be, &Config::of(&be)));
    assert!(
        outcome.is_err(),
        "the check passed with the fault {fault:?}"
    );
}

#[test]
fn add_rules_detect_a_conjugated_alpha() {
    detects(add::add_rules, Fault::AddConjugatesAlpha);
}

#[test]
fn trace_rules_detect_a_wrong_trace_pullback() {
    detects(trace::trace_rules, Fault::DiagonalDoublesAlpha);
}

#[test]
fn contract_rules_detect_an_ignored_conjugation() {
    detects(contract::contract_rules, Fault::ContractIgnoresConjB);
}

#[test]
fn swapped_operands_detect_an_ignored_conjugation() {
    detects(contract::swapped_operands, Fault::ContractIgnoresConjB);
}

#[test]
fn accumulate_detects_an_overwrite() {
    detects(contract::accumulate, Fault::ContractDropsBeta);
}

#[test]
fn multi_dot_oracle_detects_a_scaled_contraction() {
    detects(contract::multi_dot_oracle, Fault::ContractScaled);
}

#[test]
fn tensorscalar_rules_detect_a_conjugated_value() {
    detects(tensorscalar::tensorscalar_rules, Fault::ScalarConjugated);
}

#[test]
fn network_rules_detect_an_ignored_conjugation() {
    detects(network::network_rules, Fault::ContractIgnoresConjB);
}

#[test]
fn network_rules_detect_a_wrong_trace_pullback() {
    detects(network::network_rules, Fault::DiagonalDoublesAlpha);
}

#[test]
fn multi_dot_network_detects_a_scaled_contraction() {
    detects(network::multi_dot_network, Fault::ContractScaled);
}

#[test]
fn fixed_point_rules_detect_a_scaled_contraction() {
    detects(implicit::fixed_point_rules, Fault::ContractScaled);
}

#[test]
fn fixed_point_rules_detect_an_ignored_conjugation_in_the_adjoint() {
    detects(implicit::fixed_point_rules, Fault::ContractIgnoresConjB);
}

#[test]
fn general_traces_detect_a_wrong_trace_pullback() {
    detects(general::general_traces, Fault::DiagonalDoublesAlpha);
}

#[test]
fn batched_contractions_detect_an_ignored_conjugation() {
    detects(general::batched_contractions, Fault::ContractIgnoresConjB);
}

#[test]
fn batched_contractions_detect_an_overwrite() {
    detects(general::batched_contractions, Fault::ContractDropsBeta);
}

#[test]
fn batched_contractions_detect_a_missing_strong_zero() {
    detects(general::batched_contractions, Fault::ContractReadsC);
}

#[test]
fn general_rules_detect_a_scaled_contraction() {
    detects(general::general_rules, Fault::ContractScaled);
}

#[test]
fn general_rules_detect_a_wrong_trace_pullback() {
    detects(general::general_rules, Fault::DiagonalDoublesAlpha);
}

/// The faults are faults: the exact arithmetic differs (guards against a fault that the
/// wrapper silently fails to inject).
#[test]
fn the_faulty_backend_differs_from_the_reference() {
    let z = Complex64::new(0.5, 2.0);
    let be = Forwarding::new(ReferenceBackend, Fault::ScalarConjugated);
    let t = be
        .from_host(HostTensor::from_vec(&[], vec![z]).unwrap())
        .unwrap();
    assert_eq!(be.scalar(&t).unwrap().to_c64(), z.conj());
}
