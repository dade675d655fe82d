//! The conformance suite (`adrules_testing::conformance`) on the burn adapter's backend over
//! each burn backend this build routes: Flex (f32 and f64; the strided fast path), and with
//! the facade features NdArray (`burn-ndarray`: burn's generic ops on the CPU) and wgpu
//! (`burn-wgpu`: burn's cubecl backend on a Vulkan device, f32; `cargo xtask test-wgpu`, on lavapipe without a GPU). burn has no
//! complex dtype.
#![cfg(feature = "burn")]

use adrules::burn::BurnBackend;
use adrules::burn::burn_flex::Flex;

adrules_testing::conformance_suite!(BurnBackend::<Flex>::new(Default::default()));

#[cfg(feature = "burn-ndarray")]
mod ndarray {
    use adrules::DType;
    use adrules::burn::BurnBackend;
    #[allow(deprecated)]
    use adrules::burn::burn_dispatch::backends::NdArray;
    use adrules_testing::conformance::Config;

    #[allow(deprecated)]
    fn backend() -> BurnBackend<NdArray> {
        BurnBackend::new(Default::default())
    }

    // NdArray holds rank ≤ 6.
    adrules_testing::conformance_suite!(
        backend(),
        Config {
            dtypes: vec![DType::F32, DType::F64],
            max_rank: 6,
        }
    );
}

#[cfg(feature = "burn-wgpu")]
mod wgpu {
    use adrules::DType;
    use adrules::burn::BurnBackend;
    use adrules::burn::burn_dispatch::backends::Cube;
    use adrules_testing::conformance::Config;

    /// burn's wgpu device (the default adapter: lavapipe without a GPU).
    fn backend() -> BurnBackend<Cube> {
        use adrules::burn::burn_tensor::{Device, DeviceKind};
        BurnBackend::cube(&Device::wgpu(DeviceKind::DefaultDevice)).unwrap()
    }

    // WGSL has no f64: the wgpu runtime stores f32.
    adrules_testing::conformance_suite!(
        backend(),
        Config {
            dtypes: vec![DType::F32],
            max_rank: 8,
        }
    );
}
