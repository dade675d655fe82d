//! Helpers shared by the test modules.

pub mod common;
