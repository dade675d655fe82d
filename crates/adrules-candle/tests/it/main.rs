//! The integration tests of `adrules-candle`, one binary: the conformance suite on
//! `CandleBackend` (`conformance`), then what the suite cannot see: the ops inside candle's
//! own autograd, non-contiguous inputs, the einsum oracle through candle's `backward`,
//! implicit functions with candle closures, second order on candle tensors, and any core `Rule` through `apply_rule`.

mod conformance;
mod einsum_oracle;
mod general_primitives;
mod hvp;
mod implicit;
mod implicit_device;
mod implicit_policy;
mod linalg;
mod network;
mod ops;
mod rule;
