//! The integration tests of `adrules-burn`, one binary: the conformance suite on
//! `BurnBackend` over Flex (the strided fast path) and over NdArray (burn's generic ops)
//! (`conformance`), then what the suite cannot see: the ops inside burn's autodiff graph,
//! the user-facing `Tensor` API, routing between burn's backends and devices, implicit
//! functions with burn closures, the decompositions, host transfers, training loops, and any core `Rule` through `apply_rule`.

mod support;

mod conformance;
mod devices;
mod einsum_vs_burn;
mod general_primitives;
mod gradients;
mod implicit;
mod implicit_policy;
mod linalg;
mod rule;
mod tensor_api;
mod training;
mod transfers;
