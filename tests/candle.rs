//! The conformance suite (`adrules_testing::conformance`) on candle tensors (CPU): the shared
//! rules evaluated through `CandleBackend`'s primitives (f32 and f64; complex cases are
//! skipped by the config).
#![cfg(feature = "candle")]

adrules_testing::conformance_suite!(adrules::candle::CandleBackend::cpu());
