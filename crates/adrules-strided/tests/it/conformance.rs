//! The conformance suite (`adrules_testing::conformance`) on the strided backend: every
//! shared rule, every dtype, any rank.

adrules_testing::conformance_suite!(adrules_strided::Strided);
