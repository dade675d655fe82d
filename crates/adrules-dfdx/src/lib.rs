//! # adrules-dfdx (draft)
#![warn(missing_docs)]

mod backend;
mod bridge;
mod element;
mod error;
mod implicit;
mod operands;
mod ops;
mod record;
mod tape;

pub use backend::{DfdxBackend, DfdxTensor, MAX_RANK, Ranked};
/// The dfdx version this crate is built against (`=0.13.0`).
pub use dfdx;
pub use element::DfdxElement;
pub use error::{from_dfdx, take_backward_error, try_backward};
pub use implicit::implicit;
pub use operands::Operands;
pub use ops::{add, contract, trace};
pub use tape::{JoinTape, JoinTapes};
