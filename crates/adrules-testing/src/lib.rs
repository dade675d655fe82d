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
//! - [`reference`]: a naive loop implementation of the backend trait, the ground truth that
//!   fast backends are tested against;
//! - [`oracle`]: replay of the independent reference gradients in `shared/oracles`.
//!
//! Complex cotangents follow the convention of the core crate (`z̄ = ∂L/∂re + i·∂L/∂im`), so
//! for a real loss `L = Re⟨ȳ, y⟩` the adjoint test compares real parts.

#![warn(missing_docs)]

pub mod fd;
pub mod oracle;
pub mod random;
pub mod reference;
pub mod tolerance;
pub mod value;

pub use fd::{FiniteDifference, Stencil, adjoint_mismatch};
pub use random::Rng;
pub use reference::ReferenceBackend;
pub use tolerance::Tolerance;
pub use value::Value;
