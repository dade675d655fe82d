//! The integration tests of `adrules-candle-nn`, one binary: the trainable layers inside
//! candle's autograd, trained by candle-nn's optimizer (`layers`).

mod layers;
