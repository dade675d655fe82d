#![cfg(feature = "dfdx")]
//! The conformance suite on dfdx tensors: the core `Backend` over `DfdxTensor` (dfdx CPU
//! tensors of rank ≤ 6 in an enum), whose primitives copy in to the strided backend and move
//! the result back into dfdx tensors with the same functions the dfdx tape ops use. The tape
//! ops themselves are checked against these rules in `crates/adrules-dfdx/tests/`.

mod conformance;

use adrules::DType;

conformance::suite!(
    adrules::dfdx::DfdxBackend::default(),
    conformance::Config {
        dtypes: vec![DType::F32, DType::F64],
        max_rank: adrules::dfdx::MAX_RANK,
    }
);
