//! The cross-backend conformance suite (feature `conformance`): every shared rule checked on
//! one [`Backend`].
//!
//! Each primitive check runs a call through the backend under test and compares
//! - the primal with the naive [`ReferenceBackend`](crate::ReferenceBackend);
//! - the pushforward with central finite differences of the primal (evaluated in double
//!   precision on the reference backend);
//! - every input's cotangent with finite differences (`Re⟨C̄, J_i·ẋ_i⟩ = Re⟨x̄_i, ẋ_i⟩`, one
//!   input at a time);
//! - pushforward against pullback with the adjoint (dot-product) test;
//! - that inactive inputs get no cotangent.
//!
//! The matrix: dtypes f32/f64/c32/c64 and mixed element-type pairs, every conjugation-flag
//! combination, α and β in {0 constant, 0.0 active, random real, random complex}, the test
//! vectors of TensorOperations.jl v5.8.0
//! ([`test/ad.jl`](https://github.com/Jutho/TensorOperations.jl/blob/v5.8.0/test/ad.jl),
//! 0-based here), the defects of the reference listed in [`adrules_core::math`] (an active β
//! equal to 0.0, a full trace to a scalar) and edge cases (rank 0, zero-size dimensions, outer
//! products, contractions to a scalar).
//!
//! # Groups
//! One module per rule group, each check a public function `check(be, cfg)` that panics with
//! the failing cases:
//! - [`add`] — [`add_rules`](add::add_rules);
//! - [`trace`] — [`trace_rules`](trace::trace_rules);
//! - [`contract`] — [`contract_rules`](contract::contract_rules),
//!   [`swapped_operands`](contract::swapped_operands),
//!   [`accumulate`](contract::accumulate), [`multi_dot_oracle`](contract::multi_dot_oracle)
//!   (the oracle as a chain of pairwise contractions), [`rule_errors`](contract::rule_errors);
//! - [`tensorscalar`] — [`tensorscalar_rules`](tensorscalar::tensorscalar_rules);
//! - [`general`] — [`general_traces`](general::general_traces) and
//!   [`batched_contractions`](general::batched_contractions), [`general_rules`](general::general_rules): the primitives and their rules on many label
//!   patterns (diagonals, hypertraces, attention, Hadamard products, zero-size axes) against
//!   the reference, NaN-filled outputs under a strong zero, handle value semantics;
//! - [`network`] — [`network_rules`](network::network_rules) (random networks through
//!   [`NetworkPlan`](adrules_core::network::NetworkPlan)) and
//!   [`multi_dot_network`](network::multi_dot_network) (the oracle as one network);
//! - second order — [`primitive_second_order`](second::primitive_second_order) (the
//!   primitives' forward-over-reverse rule), [`network_hvp`](network::network_hvp) (HVPs of
//!   random networks against a stencil on the gradient, Hessian symmetry) and
//!   [`multi_dot_hvp`](network::multi_dot_hvp) (the `hvp` entries of `multi_dot.jsonl`);
//! - [`einsum`] — [`einsum_oracle`](einsum::einsum_oracle) (the oracle `einsum.jsonl`, torch's
//!   grammar, values, JVPs, VJPs and rejected inputs) and
//!   [`einsum_empty_ellipsis`](einsum::einsum_empty_ellipsis) (empty ellipses and strings);
//! - [`linalg`] — [`decomposition_rules`](linalg::decomposition_rules) (SVD, truncated SVD,
//!   QR and eigh: reconstruction, agreement with the reference backend, adjoint identity,
//!   the gauge error);
//! - [`dense`] — [`dense_oracle`](dense::dense_oracle) (`cholesky.jsonl`, `det.jsonl`,
//!   `slogdet.jsonl`, `solve.jsonl` replayed through the rules) and
//!   [`dense_identities`](dense::dense_identities) (`A·inv(A) = I`, `det(A·B) =
//!   det(A)·det(B)`, `L·Lᴴ = A`, …, and typed errors for bad input) and
//!   [`dense_second_order`](dense::dense_second_order) (the second order of solve, inv, det
//!   and slogdet against finite differences of their pullbacks);
//! - [`finite`] — [`finite_output_policy`](finite::finite_output_policy) (`all_finite`, and
//!   overflows from finite inputs as typed errors naming the output; NaN inputs propagate);
//! - [`implicit`] — [`fixed_point_rules`](implicit::fixed_point_rules) (a linear fixed point
//!   as [`NetworkConditions`](adrules_core::implicit::NetworkConditions) on the backend,
//!   against its closed form).
//!
//! The oracle checks read their files (`multi_dot.jsonl`, `einsum.jsonl`, …) from
//! [`oracle_dir`](crate::oracle::oracle_dir), the folder `oracles/` that ships inside this
//! package: the suite runs the same from this repository and from a git or registry
//! dependency.
//!
//! # Running it on a backend
//! [`conformance_suite!`](crate::conformance_suite) instantiates one `#[test]` per check for a
//! backend expression, with [`Config::of`] the backend or an explicit [`Config`]. In a
//! backend crate, with `adrules-testing = { version = "0.1", features = ["conformance"] }`
//! among the dev-dependencies, a module `tests/it/conformance.rs` of the crate's test binary:
//! ```
//! use adrules_core::DType;
//! use adrules_testing::ReferenceBackend;
//!
//! // every dtype the backend stores, any rank
//! adrules_testing::conformance_suite!(ReferenceBackend);
//!
//! // or a restricted configuration (several instantiations go in separate modules)
//! mod real_rank_six {
//!     use super::*;
//!     adrules_testing::conformance_suite!(
//!         ReferenceBackend,
//!         adrules_testing::conformance::Config {
//!             dtypes: vec![DType::F32, DType::F64],
//!             max_rank: 6,
//!         }
//!     );
//! }
//! # fn main() {}
//! ```
//! The backend expression is evaluated once per test. The implicit check needs the backend
//! and its tensors to be `Send + Sync + 'static` (as
//! [`NetworkConditions`](adrules_core::implicit::NetworkConditions) does).

use adrules_core::{Backend, DType};

mod case;

pub mod add;
pub mod builtin;
pub mod contract;
pub mod dense;
pub mod einsum;
pub mod finite;
pub mod general;
pub mod implicit;
pub mod linalg;
pub mod network;
mod normalize;
pub mod second;
pub mod tensorscalar;
pub mod trace;

/// What the backend under test can do.
#[derive(Clone, Debug)]
pub struct Config {
    /// dtypes to test (the backend's own list by default); a case whose tensors or
    /// coefficients need another dtype is skipped
    pub dtypes: Vec<DType>,
    /// largest rank of any tensor the backend accepts (intermediates included); cases with
    /// larger tensors are skipped
    pub max_rank: usize,
}

impl Config {
    /// Every dtype the backend stores, any rank.
    pub fn of<B: Backend>(be: &B) -> Self {
        Config {
            dtypes: be.dtypes().to_vec(),
            max_rank: usize::MAX,
        }
    }

    pub(crate) fn supports(&self, dtypes: &[DType], ranks: &[usize]) -> bool {
        dtypes.iter().all(|d| self.dtypes.contains(d)) && ranks.iter().all(|&r| r <= self.max_rank)
    }
}

/// Instantiates every conformance check as one `#[test]` function for a backend expression,
/// with [`Config::of`] the backend or the given [`Config`] expression (see the
/// [module documentation](crate::conformance) for an example). Needs the feature
/// `conformance` of `adrules-testing`.
///
/// The tests, one per check: `add_rules`, `trace_rules`, `contract_rules`,
/// `tensorscalar_rules`, `swapped_operands_give_identical_cotangents`,
/// `accumulate_adds_into_existing_buffers`, `multi_dot_oracle_as_pairwise_chain`,
/// `rule_errors_are_typed`, `network_rules_on_random_networks`,
/// `multi_dot_oracle_as_network`, `einsum_oracle`, `einsum_empty_ellipsis`,
/// `implicit_linear_fixed_point`,
/// `primitive_second_order`, `network_hvp_on_random_networks`, `multi_dot_oracle_hvp`,
/// `decomposition_rules`, `general_traces_and_adjoints`, `batched_contractions`,
/// `rules_on_general_patterns`, `finite_output_policy`, `dense_oracle`, `dense_second_order`,
/// `dense_identities_and_errors`, `builtin_rules_pass_check_rule`.
///
/// The backend must be a [`SyncBackend`](adrules_core::rule::SyncBackend) (`Send + Sync`
/// with `Send + Sync` tensors, as every engine's graph needs).
#[macro_export]
macro_rules! conformance_suite {
    ($be:expr $(,)?) => {
        $crate::conformance_suite!($be, $crate::conformance::Config::of(&$be));
    };
    ($be:expr, $cfg:expr $(,)?) => {
        #[test]
        fn add_rules() {
            $crate::conformance::add::add_rules(&$be, &$cfg);
        }
        #[test]
        fn trace_rules() {
            $crate::conformance::trace::trace_rules(&$be, &$cfg);
        }
        #[test]
        fn contract_rules() {
            $crate::conformance::contract::contract_rules(&$be, &$cfg);
        }
        #[test]
        fn tensorscalar_rules() {
            $crate::conformance::tensorscalar::tensorscalar_rules(&$be, &$cfg);
        }
        #[test]
        fn swapped_operands_give_identical_cotangents() {
            $crate::conformance::contract::swapped_operands(&$be, &$cfg);
        }
        #[test]
        fn accumulate_adds_into_existing_buffers() {
            $crate::conformance::contract::accumulate(&$be, &$cfg);
        }
        #[test]
        fn multi_dot_oracle_as_pairwise_chain() {
            $crate::conformance::contract::multi_dot_oracle(&$be, &$cfg);
        }
        #[test]
        fn rule_errors_are_typed() {
            $crate::conformance::contract::rule_errors(&$be, &$cfg);
        }
        #[test]
        fn network_rules_on_random_networks() {
            $crate::conformance::network::network_rules(&$be, &$cfg);
        }
        #[test]
        fn multi_dot_oracle_as_network() {
            $crate::conformance::network::multi_dot_network(&$be, &$cfg);
        }
        #[test]
        fn einsum_oracle() {
            $crate::conformance::einsum::einsum_oracle(&$be, &$cfg);
        }
        #[test]
        fn einsum_empty_ellipsis() {
            $crate::conformance::einsum::einsum_empty_ellipsis(&$be, &$cfg);
        }
        #[test]
        fn implicit_linear_fixed_point() {
            $crate::conformance::implicit::fixed_point_rules(&$be, &$cfg);
        }
        #[test]
        fn primitive_second_order() {
            $crate::conformance::second::primitive_second_order(&$be, &$cfg);
        }
        #[test]
        fn network_hvp_on_random_networks() {
            $crate::conformance::network::network_hvp(&$be, &$cfg);
        }
        #[test]
        fn multi_dot_oracle_hvp() {
            $crate::conformance::network::multi_dot_hvp(&$be, &$cfg);
        }
        #[test]
        fn decomposition_rules() {
            $crate::conformance::linalg::decomposition_rules(&$be, &$cfg);
        }
        #[test]
        fn general_traces_and_adjoints() {
            $crate::conformance::general::general_traces(&$be, &$cfg);
        }
        #[test]
        fn rules_on_general_patterns() {
            $crate::conformance::general::general_rules(&$be, &$cfg);
        }
        #[test]
        fn batched_contractions() {
            $crate::conformance::general::batched_contractions(&$be, &$cfg);
        }
        #[test]
        fn finite_output_policy() {
            $crate::conformance::finite::finite_output_policy(&$be, &$cfg);
        }
        #[test]
        fn dense_oracle() {
            $crate::conformance::dense::dense_oracle(&$be, &$cfg);
        }
        #[test]
        fn dense_second_order() {
            $crate::conformance::dense::dense_second_order(&$be, &$cfg);
        }
        #[test]
        fn dense_identities_and_errors() {
            $crate::conformance::dense::dense_identities(&$be, &$cfg);
        }
        #[test]
        fn builtin_rules_pass_check_rule() {
            $crate::conformance::builtin::builtin_rules(&$be, &$cfg);
        }
    };
}
