//! The conformance suite (`adrules_testing::conformance`) on the embedded strided backend.

adrules_testing::conformance_suite!(adrules::strided::Strided);
