//! The conformance suite on the naive reference backend: the rules themselves are right
//! independently of any fast kernel.

mod conformance;

conformance::suite!(adrules_testing::ReferenceBackend);
