//! # adrules-testing
//!
//! Utilities to check automatic-differentiation rules, for adrules itself and for downstream
//! crates that write their own rules:
//! - [`reference`]: a naive loop implementation of the backend trait, the ground truth that
//!   fast backends are tested against.
//! - [`oracle`]: replay of the independent reference gradients in `shared/oracles`.

#![warn(missing_docs)]

pub mod oracle;
pub mod reference;

pub use reference::ReferenceBackend;
