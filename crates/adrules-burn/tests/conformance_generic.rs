//! The shared conformance suite (`adrules_testing::conformance`) on the generic path of burn
//! ops, over the NdArray backend (the top-level `tests/burn.rs` runs it on Flex, which takes
//! the strided fast path). NdArray is deprecated upstream; it serves here as a second,
//! independent burn backend, with its limit of rank 6.

use adrules_burn::BurnBackend;
use adrules_core::DType;
use adrules_testing::conformance::Config;
#[allow(deprecated)]
use burn_ndarray::NdArray;

#[allow(deprecated)]
fn backend() -> BurnBackend<NdArray> {
    BurnBackend::new(Default::default())
}

adrules_testing::conformance_suite!(
    backend(),
    Config {
        dtypes: vec![DType::F32, DType::F64],
        max_rank: 6,
    }
);
