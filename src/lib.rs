//! # adrules
//!
//! Automatic-differentiation rules for tensor contraction, permuted addition, partial trace,
//! whole tensor networks and implicit functions, written once over a backend trait and
//! plugged into the engines Rust users already have.
//!
//! This facade re-exports [`adrules_core`] at the top level and, behind the default feature
//! `strided`, the embedded CPU backend as [`strided`].

pub use adrules_core::*;

/// The embedded strided CPU backend (feature `strided`, on by default).
#[cfg(feature = "strided")]
pub use adrules_strided as strided;

/// The burn adapter: the rules as burn autodiff ops (feature `burn`).
#[cfg(feature = "burn")]
pub use adrules_burn as burn;
