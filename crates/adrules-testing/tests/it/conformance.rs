//! The conformance suite (`adrules_testing::conformance`) on the naive reference backend: the
//! rules themselves are right independently of any fast kernel.

adrules_testing::conformance_suite!(adrules_testing::ReferenceBackend);
