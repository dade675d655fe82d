//! The shared conformance suite (top-level `tests/conformance`) on the generic path of burn
//! ops, over the NdArray backend (the top-level `tests/burn.rs` runs it on Flex, which takes
//! the strided fast path). NdArray is deprecated upstream; it serves here as a second,
//! independent burn backend, with its limit of rank 6.

// The suite names the facade crate `adrules`, which re-exports the core at its root.
extern crate adrules_core as adrules;

#[path = "../../../tests/conformance/mod.rs"]
mod conformance;

use adrules_burn::BurnBackend;
#[allow(deprecated)]
use burn_ndarray::NdArray;

#[allow(deprecated)]
fn backend() -> BurnBackend<NdArray> {
    BurnBackend::new(Default::default())
}

conformance::suite!(
    backend(),
    conformance::Config {
        dtypes: vec![adrules::DType::F32, adrules::DType::F64],
        max_rank: 6,
    }
);
