//! The integration tests of `adrules-burn-nn`, one binary: the trainable layers inside burn's
//! autodiff graph, trained by burn's own optimizer (`layers`).

mod layers;
