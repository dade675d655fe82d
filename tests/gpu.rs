//! The conformance suite (`adrules_testing::conformance`, einsum oracle cases included) on the
//! GPU backends: candle's CUDA device (`candle-cuda`) and burn's cubecl backend on CUDA
//! (`burn-cuda`). Needs an NVIDIA GPU; run by `cargo xtask gpu-check`, not by `test-all`.
#![cfg(any(feature = "candle-cuda", feature = "burn-cuda"))]

#[cfg(feature = "candle-cuda")]
mod candle_cuda {
    use adrules::candle::CandleBackend;
    use adrules::candle::candle_core::{self, Device};

    fn backend() -> CandleBackend {
        CandleBackend::new(Device::new_cuda(0).expect("candle-cuda needs CUDA device 0"))
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
        let target = adrules::candle::einsum(expr, &parts.iter().collect::<Vec<_>>()).unwrap();
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
            let fit = adrules::candle::einsum(expr, &ops).unwrap();
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

#[cfg(feature = "burn-cuda")]
mod burn_cuda {
    use adrules::DType;
    use adrules::burn::BurnBackend;
    use adrules::burn::burn_dispatch::backends::Cube;
    use adrules_testing::conformance::Config;

    fn backend() -> BurnBackend<Cube> {
        BurnBackend::cube(&adrules::burn::burn_tensor::Device::cuda(0)).unwrap()
    }

    adrules_testing::conformance_suite!(
        backend(),
        Config {
            dtypes: vec![DType::F32, DType::F64],
            max_rank: 8,
        }
    );

    /// An implicit fixed point on the GPU with GMRES: the pullback moves no tensor to the
    /// host, and its gradient matches the dense (host LU) pullback.
    #[test]
    fn implicit_fixed_point_stays_on_cuda() {
        use adrules::backend::transfers::Transfers;
        use adrules::burn::burn_tensor::{DType as BDType, Device, Tensor, TensorData};
        use adrules::burn::{Implicit, try_backward};
        use adrules::implicit::{Method, SolverOptions};
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
