//! The conformance suite (`adrules_testing::conformance`) on candle tensors: the shared rules
//! evaluated through `CandleBackend`'s primitives on the CPU (f32 and f64; complex cases are
//! skipped by the config), and with the crate's feature `cuda` on CUDA device 0
//! (`cargo xtask gpu-check`; needs an NVIDIA GPU).

adrules_testing::conformance_suite!(adrules_candle::CandleBackend::cpu());

#[cfg(feature = "cuda")]
mod cuda {
    use adrules_candle::CandleBackend;
    use adrules_candle::candle_core::{self, Device};

    fn backend() -> CandleBackend {
        CandleBackend::new(Device::new_cuda(0).expect("the feature cuda needs CUDA device 0"))
    }

    adrules_testing::conformance_suite!(backend());

    /// The candle example's tensor-train fit on the GPU: the loss falls as on the CPU, and
    /// the trained cores stay on the device.
    #[test]
    fn the_tensor_train_example_trains_on_cuda() {
        let dev = Device::new_cuda(0).unwrap();
        let expr = "ia,ajb,bkc,cl->ijkl";
        let t = |dims: &[usize]| candle_core::Tensor::randn(0f32, 1.0, dims, &dev).unwrap();
        let parts = [t(&[6, 2]), t(&[2, 6, 2]), t(&[2, 6, 2]), t(&[2, 6])];
        let target = adrules_candle::einsum(expr, &parts.iter().collect::<Vec<_>>()).unwrap();
        let init = |dims: &[usize]| candle_core::Var::randn(0f32, 0.5, dims, &dev).unwrap();
        let cores = [
            init(&[6, 4]),
            init(&[4, 6, 4]),
            init(&[4, 6, 4]),
            init(&[4, 6]),
        ];
        let mut losses = Vec::new();
        for _ in 0..200 {
            let ops: Vec<_> = cores.iter().map(|v| v.as_tensor()).collect();
            let fit = adrules_candle::einsum(expr, &ops).unwrap();
            let loss = (fit - &target).unwrap().sqr().unwrap().mean_all().unwrap();
            losses.push(loss.to_scalar::<f32>().unwrap());
            let grads = loss.backward().unwrap();
            for core in &cores {
                let g = grads.get(core.as_tensor()).unwrap();
                assert!(g.device().is_cuda());
                core.set(&(core.as_tensor() - (g * 0.02).unwrap()).unwrap())
                    .unwrap();
            }
        }
        let (first, last) = (losses[0], *losses.last().unwrap());
        assert!(last < 0.2 * first, "loss {first} → {last}");
    }
}
