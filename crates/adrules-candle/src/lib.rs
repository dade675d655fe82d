//! # adrules-candle
//!
//! The shared adrules rules on [candle](https://github.com/huggingface/candle) tensors.
//! (Crate docs: see the end of the work item.)

#![warn(missing_docs)]

mod backend;
mod convert;
mod kernel;
mod ops;

pub use backend::CandleBackend;
pub use convert::{adrules_dtype, candle_dtype, from_candle, to_candle};
pub use ops::{add, contract, trace};
