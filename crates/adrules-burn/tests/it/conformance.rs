//! The conformance suite (`adrules_testing::conformance`) on [`BurnBackend`] over each burn
//! backend this build can reach: Flex (f32 and f64; the strided fast path), NdArray (burn's
//! generic ops on an independent CPU implementation, rank ≤ 6; deprecated upstream, it
//! serves here as a second burn backend), and with the crate's features wgpu (`wgpu`: burn's
//! cubecl backend on a Vulkan device, f32; `cargo xtask test-wgpu`, on lavapipe without a
//! GPU) and CUDA (`cuda`: `cargo xtask gpu-check` on an NVIDIA GPU). burn has no complex
//! dtype.

use adrules_burn::BurnBackend;

mod flex {
    use super::*;
    use adrules_burn::burn_flex::Flex;

    adrules_testing::conformance_suite!(BurnBackend::<Flex>::new(Default::default()));
}

mod ndarray {
    use super::*;
    use adrules_core::DType;
    use adrules_testing::conformance::Config;
    #[allow(deprecated)]
    use burn_ndarray::NdArray;

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

#[cfg(feature = "wgpu")]
mod wgpu {
    use super::*;
    use adrules_burn::burn_dispatch::backends::Cube;
    use adrules_core::DType;
    use adrules_testing::conformance::Config;

    /// burn's wgpu device (the default adapter: lavapipe without a GPU).
    fn backend() -> BurnBackend<Cube> {
        use adrules_burn::burn_tensor::{Device, DeviceKind};
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

/// On CUDA device 0 (`cargo xtask gpu-check`; needs an NVIDIA GPU).
#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use adrules_burn::burn_dispatch::backends::Cube;
    use adrules_core::DType;
    use adrules_testing::conformance::Config;

    fn backend() -> BurnBackend<Cube> {
        BurnBackend::cube(&adrules_burn::burn_tensor::Device::cuda(0)).unwrap()
    }

    adrules_testing::conformance_suite!(
        backend(),
        Config {
            dtypes: vec![DType::F32, DType::F64],
            max_rank: 8,
        }
    );

    rusty_fork::rusty_fork_test! {
        #![rusty_fork(timeout_ms = 300_000)]

        /// An implicit fixed point on the GPU with GMRES: the pullback moves no tensor to the
        /// host (the process-wide transfer counters, so the test runs in a child process of its
        /// own), and its gradient matches the dense (host LU) pullback.
        #[test]
        fn implicit_fixed_point_stays_on_cuda() {
            use adrules_burn::burn_tensor::{DType as BDType, Device, Tensor, TensorData};
            use adrules_burn::{Implicit, try_backward};
            use adrules_core::backend::transfers::Transfers;
            use adrules_core::implicit::{Method, SolverOptions};
            let n = 1000;
            let device = Device::cuda(0);
            let ad = device.clone().autodiff();
            let run = |method: Method| {
                let w: Vec<f32> = (0..n * n)
                    .map(|k| (((k * 7919) % 1000) as f32 / 1000.0 - 0.5) / n as f32)
                    .collect();
                let w = Tensor::<1>::from_data(TensorData::new(w, [n * n]), (&ad, BDType::F32));
                let b = Tensor::<1>::ones([n], (&ad, BDType::F32)).require_grad();
                let step = move |w: &Tensor<1>, b: &Tensor<1>, h: &Tensor<1>| {
                    let wh = w.clone().reshape([n, n]).matmul(h.clone().reshape([n, 1]));
                    (wh.reshape([n]) + b.clone()).tanh()
                };
                let layer = Implicit::new(
                    move |x| {
                        let mut h = x[1].zeros_like();
                        for _ in 0..50 {
                            h = step(&x[0], &x[1], &h);
                        }
                        Ok(h)
                    },
                    move |x, h| step(&x[0], &x[1], h) - h.clone(),
                )
                .with_linear_solver(SolverOptions::from(method));
                let h = layer.apply([(&w).into(), (&b).into()]).unwrap();
                let loss = h.sum();
                let before = Transfers::now();
                let grads = try_backward(&loss).unwrap();
                let moved = Transfers::now().since(&before);
                let g: Vec<f32> = b.grad(&grads).unwrap().into_data().iter::<f32>().collect();
                (g, moved)
            };
            let (gmres, moved) = run(Method::Gmres);
            assert_eq!((moved.to_host, moved.from_host), (0, 0), "{moved:?}");
            let (lu, _) = run(Method::Lu);
            for (a, b) in gmres.iter().zip(&lu) {
                assert!((a - b).abs() <= 1e-3 * b.abs().max(1.0), "{a} vs {b}");
            }
        }
    }
}
