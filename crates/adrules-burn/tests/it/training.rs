//! A five-tensor network (a tensor train) fitted to a target by gradient descent in a plain
//! burn loop: the network is one adrules node per step, and the loss, recomputed
//! independently on the naive reference backend from the parameters, decreases.

use adrules_burn::burn_tensor::{DType as BurnDType, Device, Tensor, TensorData};
use adrules_core::{Backend, DType, HostTensor};
use adrules_testing::{ReferenceBackend, Rng};

const EXPR: &str = "ia,ajb,bkc,cld,dm->ijklm";
const DIMS: [&[usize]; 5] = [&[3, 2], &[2, 3, 2], &[2, 3, 2], &[2, 3, 2], &[2, 3]];

fn tensor<const D: usize>(h: &HostTensor, device: &Device) -> Tensor<D> {
    let v = h.as_slice::<f64>().unwrap().to_vec();
    let dims: [usize; D] = h.dims().try_into().unwrap();
    Tensor::<D>::from_data(TensorData::new(v, dims), (device, BurnDType::F64))
}

fn host<const D: usize>(t: &Tensor<D>) -> HostTensor {
    let v: Vec<f64> = t.clone().into_data().iter::<f64>().collect();
    HostTensor::from_vec(&t.dims(), v).unwrap()
}

/// `‖network(cores) − target‖²` on the reference backend (naive loops).
fn reference_loss(cores: &[HostTensor], target: &HostTensor) -> f64 {
    let r = ReferenceBackend;
    let t: Vec<_> = cores
        .iter()
        .map(|c| r.from_host(c.clone()).unwrap())
        .collect();
    let refs: Vec<_> = t.iter().collect();
    let out = adrules_core::network::einsum(&r, EXPR, &refs).unwrap();
    let (o, y) = (
        out.as_slice::<f64>().unwrap(),
        target.as_slice::<f64>().unwrap(),
    );
    o.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum()
}

#[test]
fn five_tensor_network_trains_in_a_burn_loop() {
    let device = Device::flex().autodiff();
    let mut rng = Rng::seed(21);
    // The target is itself a tensor train, so a low loss is reachable.
    let truth: Vec<HostTensor> = DIMS.iter().map(|d| rng.tensor(d, DType::F64)).collect();
    let r = ReferenceBackend;
    let t: Vec<_> = truth
        .iter()
        .map(|c| r.from_host(c.clone()).unwrap())
        .collect();
    let refs: Vec<_> = t.iter().collect();
    let target = (*adrules_core::network::einsum(&r, EXPR, &refs).unwrap()).clone();
    let target_t = tensor::<5>(&target, &device);

    let mut cores: Vec<HostTensor> = truth
        .iter()
        .map(|c| {
            let noise = rng.tensor(c.dims(), DType::F64);
            let v: Vec<f64> = c
                .as_slice::<f64>()
                .unwrap()
                .iter()
                .zip(noise.as_slice::<f64>().unwrap())
                .map(|(a, n)| a + 0.3 * n)
                .collect();
            HostTensor::from_vec(c.dims(), v).unwrap()
        })
        .collect();
    let mut losses = vec![reference_loss(&cores, &target)];
    let lr = 5e-5;
    for _ in 0..8 {
        let a = tensor::<2>(&cores[0], &device).require_grad();
        let b = tensor::<3>(&cores[1], &device).require_grad();
        let c = tensor::<3>(&cores[2], &device).require_grad();
        let d = tensor::<3>(&cores[3], &device).require_grad();
        let e = tensor::<2>(&cores[4], &device).require_grad();
        let out: Tensor<5> = adrules_burn::einsum(
            EXPR,
            [
                (&a).into(),
                (&b).into(),
                (&c).into(),
                (&d).into(),
                (&e).into(),
            ],
        )
        .unwrap();
        let residual = out - target_t.clone();
        let grads = (residual.clone() * residual).sum().backward();
        let step2 = |p: &Tensor<2>| host(&(p.clone() - p.grad(&grads).unwrap().mul_scalar(lr)));
        let step3 = |p: &Tensor<3>| host(&(p.clone() - p.grad(&grads).unwrap().mul_scalar(lr)));
        cores = vec![step2(&a), step3(&b), step3(&c), step3(&d), step2(&e)];
        losses.push(reference_loss(&cores, &target));
    }
    for pair in losses.windows(2) {
        assert!(pair[1] < pair[0], "loss did not decrease: {losses:?}");
    }
    assert!(losses[8] < 0.5 * losses[0], "{losses:?}");
    assert!(adrules_burn::take_backward_errors().is_empty());
}
