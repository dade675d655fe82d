//! The facade's tests, one binary: what changes with the facade's features. The conformance
//! suite itself runs in each backend's crate (`cargo test -p adrules-candle` proves candle
//! conforms); here every backend the build has (through the facade's re-exports) computes
//! the same computations, which must agree with the naive reference backend and so with each
//! other.

mod agreement;
#[cfg(all(feature = "burn", feature = "candle"))]
mod layers;
