//! Helpers shared by the test modules.

pub mod implicit;
pub mod linalg;
pub mod network;
