//! The conformance suite on candle tensors (CPU): the shared rules evaluated through
//! `CandleBackend`'s primitives (f32 and f64; complex cases are skipped by the config).
#![cfg(feature = "candle")]

mod conformance;

conformance::suite!(adrules::candle::CandleBackend::cpu());
