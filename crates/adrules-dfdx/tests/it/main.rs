//! The integration tests of `adrules-dfdx`, one binary: the conformance suite on
//! `DfdxBackend` (`conformance`), then what the suite cannot see: the ops on dfdx's tape
//! with static shapes, the einsum oracle through dfdx's backward pass, implicit functions as
//! dfdx ops a training loop with dfdx's optimizer, and any one-output core `Rule` through
//! `apply_rule`.

mod conformance;
mod einsum_oracle;
mod general;
mod implicit;
mod network;
mod rule;
mod tape;
mod train;
