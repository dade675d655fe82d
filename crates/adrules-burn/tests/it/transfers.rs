//! Host transfers of an implicit pullback, counted by the core's
//! [`transfers`](adrules_core::backend::transfers) counters (process-wide, so the test runs in
//! a child process of its own and no other test moves data meanwhile): a matrix-free (GMRES) pullback on a non-Flex backend
//! copies no tensor to or from the host in any Krylov iteration, only scalars; the dense
//! pullback (LU on the host) copies, which shows the counters see copies.

use adrules_burn::burn_tensor::{DType, Device, Tensor, TensorData};
use adrules_burn::try_backward;
use adrules_core::backend::transfers::Transfers;
use adrules_core::implicit::Method;

/// `h = tanh(W·h + b)` with n unknowns, `W` a fixed contraction; the gradient of `Σ h·r`
/// w.r.t. b, and the transfers of the backward pass alone.
fn backward_transfers(device: &Device, n: usize, method: Method) -> (Vec<f32>, Transfers) {
    let ad = device.clone().autodiff();
    let w: Vec<f32> = (0..n * n)
        .map(|k| (((k * 7919) % 1000) as f32 / 1000.0 - 0.5) * (1.0 / n as f32))
        .collect();
    let w = Tensor::<1>::from_data(TensorData::new(w, [n * n]), (&ad, DType::F32));
    let b: Vec<f32> = (0..n)
        .map(|i| ((i * 31) % 17) as f32 / 17.0 - 0.5)
        .collect();
    let b = Tensor::<1>::from_data(TensorData::new(b, [n]), (&ad, DType::F32)).require_grad();
    let layer = crate::support::common::tanh_layer(n, 60, method);
    let h = layer.apply([(&w).into(), (&b).into()]).unwrap();
    let r: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
    let loss = (h * Tensor::<1>::from_data(TensorData::new(r, [n]), (device, DType::F32))).sum();
    let before = Transfers::now();
    let grads = try_backward(&loss).unwrap();
    let moved = Transfers::now().since(&before);
    let g = b.grad(&grads).unwrap().into_data().iter::<f32>().collect();
    (g, moved)
}

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]

    #[test]
    fn a_matrix_free_implicit_pullback_moves_only_scalars() {
        #[allow(unused_mut)]
        let mut devices: Vec<(&str, Device)> = vec![("flex", Device::flex())];
        #[cfg(feature = "ndarray")]
        {
            #[allow(deprecated)]
            devices.push(("ndarray", Device::ndarray()));
        }
        #[cfg(feature = "wgpu")]
        {
            use adrules_burn::burn_tensor::DeviceKind;
            let probe = std::panic::catch_unwind(|| {
                let d = Device::wgpu(DeviceKind::DefaultDevice);
                Tensor::<1>::ones([2], (&d, DType::F32))
                    .sum()
                    .into_scalar::<f32>()
            });
            match probe {
                Ok(_) => devices.push(("wgpu", Device::wgpu(DeviceKind::DefaultDevice))),
                Err(_) if std::env::var("CI").as_deref() == Ok("true") => {
                    panic!("no wgpu adapter under CI=true (apt-get install mesa-vulkan-drivers)")
                }
                Err(_) => eprintln!("skipping wgpu: no adapter"),
            }
        }
        let n = 300;
        for (name, device) in &devices {
            let (gmres, moved) = backward_transfers(device, n, Method::Gmres);
            assert_eq!(
                (moved.to_host, moved.from_host),
                (0, 0),
                "{name}: GMRES pullback copied tensors: {moved:?}"
            );
            // Each GMRES iteration reads its Gram–Schmidt coefficients and norms back.
            assert!(moved.scalars > 10, "{name}: {moved:?}");
            eprintln!("{name}: GMRES pullback, n = {n}: {moved:?}");
            let (lu, dense) = backward_transfers(device, n, Method::Lu);
            assert!(
                dense.to_host >= 3 && dense.from_host >= 1,
                "{name}: the dense pullback copies x, y, ȳ to the host and x̄ back: {dense:?}"
            );
            let scale = lu.iter().fold(1.0f32, |m, v| m.max(v.abs()));
            for (k, (a, b)) in gmres.iter().zip(&lu).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-3 * scale,
                    "{name}: entry {k}: GMRES {a} vs LU {b}"
                );
            }
        }
    }
}
