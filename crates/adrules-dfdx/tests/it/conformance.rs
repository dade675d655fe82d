//! The conformance suite (`adrules_testing::conformance`) on dfdx tensors: the core `Backend`
//! over `DfdxTensor` (dfdx CPU tensors of rank ≤ 6 in an enum), whose primitives copy in to
//! the strided backend and move the result back into dfdx tensors with the same functions the
//! dfdx tape ops use. The tape ops themselves are checked against these rules in the other
//! modules of this binary.

use adrules_core::DType;
use adrules_testing::conformance::Config;

adrules_testing::conformance_suite!(
    adrules_dfdx::DfdxBackend::default(),
    Config {
        dtypes: vec![DType::F32, DType::F64],
        max_rank: adrules_dfdx::MAX_RANK,
    }
);
