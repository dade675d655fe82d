//! # adrules-testing
//!
//! Utilities to check automatic-differentiation rules, for adrules itself and for downstream
//! crates that write their own rules:
//! - [`fd`]: central finite differences (2- or 4-point stencil, chosen step) of functions of
//!   tensors and coefficients, and the adjoint (dot-product) test
//!   `⟨ȳ, J·ẋ⟩ = ⟨Jᴴ·ȳ, ẋ⟩` between a pushforward and a pullback;
//! - [`random`]: seeded random real and complex tensors and scalars;
//! - [`tolerance`]: per-dtype tolerances and elementwise closeness checks;
//! - [`value`]: [`Value`], a tensor or a coefficient with the vector-space operations above;
//! - [`reference`](mod@reference): a naive loop implementation of the backend trait, the
//!   ground truth that fast backends are tested against;
//! - [`forwarding`]: [`Forwarding`], a backend that delegates to another and calls a hook
//!   before each primitive (counting calls, injecting defects);
//! - [`implicit`]: finite-difference conditions, a reference source of an implicit
//!   function's linear maps;
//! - [`naive`]: [`naive_einsum`], a brute-force evaluator of torch's einsum grammar;
//! - [`grammar`]: einsum calls of torch's grammar with hand-computed values and gradients
//!   (empty ellipses, empty strings), replayed on every engine;
//! - [`networks`]: the planner's benchmark networks (lattices, random regular graphs, MPS
//!   norms) as ncon label lists;
//! - [`fuzz`]: seeded generators of random API calls (einsum strings and shapes);
//! - [`rule`](mod@rule): [`check_rule`], the test kit of a [`Rule`](adrules_core::rule::Rule)
//!   (ChainRulesTestUtils' `test_rrule` and `test_frule`): finite differences of the
//!   pullback, absent cotangents as zeros, the frule and the adjoint identity, non-mutation
//!   of the caller's tensors;
//! - [`samples`]: small rules with known derivatives (one and two outputs, three inputs, a
//!   failing pullback) for the engines' rule bridges' tests;
//! - [`oracle`]: replay of independent reference gradients (JSONL oracle files);
//! - `conformance` (feature `conformance`): the cross-backend conformance suite, split per
//!   rule group (add, trace, contract, tensorscalar, network, implicit), instantiated for a
//!   backend by one `conformance_suite!(backend)` call in a test file.
//!
//! Complex cotangents follow the convention of the core crate (`z̄ = ∂L/∂re + i·∂L/∂im`), so
//! for a real loss `L = Re⟨ȳ, y⟩` the adjoint test compares real parts.

#![warn(missing_docs)]

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod fd;
pub mod forwarding;
pub mod fuzz;
pub mod grammar;
pub mod implicit;
pub mod naive;
pub mod networks;
pub mod oracle;
pub mod random;
pub mod reference;
pub mod rule;
pub mod samples;
pub mod second_order;
pub mod tolerance;
pub mod value;

pub use fd::{FiniteDifference, Stencil, adjoint_mismatch};
pub use forwarding::{Forwarding, Hook};
pub use implicit::FiniteDifferenceConditions;
pub use naive::naive_einsum;
pub use random::Rng;
pub use reference::ReferenceBackend;
pub use rule::{RuleCheck, RuleCheckError, RuleReport, check_rule};
pub use second_order::check_pullback_tangent;
pub use tolerance::Tolerance;
pub use value::Value;

/// The code blocks of this crate's `README.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
