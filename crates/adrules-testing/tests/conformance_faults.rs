//! The conformance checks can fail: each check, run on the reference backend with one
//! injected defect, must panic. (The suite passing on the exact reference backend is the
//! root package's `tests/reference.rs`.)

use std::panic::catch_unwind;

use adrules_core::{
    Backend, Complex64, Conj, ContractSpec, DType, Dims, DynScalar, HostTensor, Permutation,
    Result, TraceSpec,
};
use adrules_testing::ReferenceBackend;
use adrules_testing::conformance::{Config, add, contract, implicit, network, tensorscalar, trace};

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
}

#[derive(Clone, Copy, Debug)]
struct Faulty(Fault);

fn scaled(s: DynScalar, by: f64) -> DynScalar {
    DynScalar::from_c64(s.to_c64() * by, s.dtype())
}

impl Faulty {
    fn has(&self, f: Fault) -> bool {
        self.0 == f
    }
}

impl Backend for Faulty {
    type Tensor = <ReferenceBackend as Backend>::Tensor;

    fn name(&self) -> &'static str {
        "faulty reference"
    }
    fn dtypes(&self) -> &'static [DType] {
        ReferenceBackend.dtypes()
    }
    fn dims(&self, t: &Self::Tensor) -> Dims {
        ReferenceBackend.dims(t)
    }
    fn dtype(&self, t: &Self::Tensor) -> DType {
        ReferenceBackend.dtype(t)
    }
    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Self::Tensor> {
        ReferenceBackend.zeros(dims, dtype)
    }
    fn to_host(&self, t: &Self::Tensor) -> Result<HostTensor> {
        ReferenceBackend.to_host(t)
    }
    fn from_host(&self, h: HostTensor) -> Result<Self::Tensor> {
        ReferenceBackend.from_host(h)
    }
    fn add(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let alpha = if self.has(Fault::AddConjugatesAlpha) {
            alpha.conj()
        } else {
            alpha
        };
        ReferenceBackend.add(c, a, p, conj, alpha, beta)
    }
    fn add_projected(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        ReferenceBackend.add_projected(c, a, p, conj, alpha, beta)
    }
    fn trace(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        ReferenceBackend.trace(c, a, spec, conj, alpha, beta)
    }
    fn add_to_diagonal(
        &self,
        a: &mut Self::Tensor,
        c: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        let alpha = if self.has(Fault::DiagonalDoublesAlpha) {
            scaled(alpha, 2.0)
        } else {
            alpha
        };
        ReferenceBackend.add_to_diagonal(a, c, spec, conj, alpha)
    }
    fn contract(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        b: &Self::Tensor,
        spec: &ContractSpec,
        conj_a: Conj,
        conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let conj_b = if self.has(Fault::ContractIgnoresConjB) {
            Conj::No
        } else {
            conj_b
        };
        let alpha = if self.has(Fault::ContractScaled) {
            scaled(alpha, 1.001)
        } else {
            alpha
        };
        let beta = if self.has(Fault::ContractDropsBeta) {
            DynScalar::zero(beta.dtype())
        } else {
            beta
        };
        ReferenceBackend.contract(c, a, b, spec, conj_a, conj_b, alpha, beta)
    }
    fn inner(&self, x: &Self::Tensor, y: &Self::Tensor) -> Result<DynScalar> {
        ReferenceBackend.inner(x, y)
    }
    fn scale(&self, t: &mut Self::Tensor, s: DynScalar) -> Result<()> {
        ReferenceBackend.scale(t, s)
    }
    fn scalar(&self, t: &Self::Tensor) -> Result<DynScalar> {
        let s = ReferenceBackend.scalar(t)?;
        Ok(if self.has(Fault::ScalarConjugated) {
            s.conj()
        } else {
            s
        })
    }
}

/// `check` must panic on the backend with `fault`.
fn detects(check: fn(&Faulty, &Config), fault: Fault) {
    let be = Faulty(fault);
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

/// The faults are faults: the exact arithmetic differs (guards against a fault that the
/// wrapper silently fails to inject).
#[test]
fn the_faulty_backend_differs_from_the_reference() {
    let z = Complex64::new(0.5, 2.0);
    let be = Faulty(Fault::ScalarConjugated);
    let t = be
        .from_host(HostTensor::from_vec(&[], vec![z]).unwrap())
        .unwrap();
    assert_eq!(be.scalar(&t).unwrap().to_c64(), z.conj());
}
