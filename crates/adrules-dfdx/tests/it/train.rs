//! A typed-shape dfdx model with one contraction layer, trained with dfdx's SGD optimizer.
//!
//! The layer maps a batch `x[b, i, j]` (shape `Rank3<B, 4, 3>`) to `y[b, k] = Σ_{i,j}
//! x[b, i, j]·W[i, j, k]` with a weight `W` of shape `Rank3<4, 3, 2>`, through
//! `adrules_dfdx::contract`. Targets come from a teacher weight; the loss is dfdx's MSE. The
//! loss is recomputed independently (naive loops on host copies of x, the targets and the
//! current weight) before every step and must agree with dfdx's value, and it must fall.

use adrules_core::rules::ContractOp;
use adrules_core::{ContractSpec, Error};
use adrules_dfdx::contract;
use adrules_dfdx::dfdx::nn::modules::{Module, ModuleVisitor, TensorCollection};
use adrules_dfdx::dfdx::nn::{TensorOptions, ZeroGrads};
use adrules_dfdx::dfdx::optim::{Optimizer, Sgd, SgdConfig};
use adrules_dfdx::dfdx::prelude::*;

const BATCH: usize = 8;

/// `y[b, k] = Σ_{i,j} x[b, i, j]·W[i, j, k]`.
struct ContractionLayer<E: Dtype = f32, D: Device<E> = Cpu> {
    weight: Tensor<Rank3<4, 3, 2>, E, D>,
}

impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for ContractionLayer<E, D> {
    type To<E2: Dtype, D2: Device<E2>> = ContractionLayer<E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            Self::tensor(
                "weight",
                |s| &s.weight,
                |s| &mut s.weight,
                TensorOptions::reset_with(|t| t.try_fill_with_zeros()),
            ),
            |weight| ContractionLayer { weight },
        )
    }
}

impl<T: Tape<f32, Cpu>> Module<Tensor<Rank3<BATCH, 4, 3>, f32, Cpu, T>> for ContractionLayer {
    type Output = Tensor<Rank2<BATCH, 2>, f32, Cpu, T>;
    type Error = Error;

    fn try_forward(
        &self,
        x: Tensor<Rank3<BATCH, 4, 3>, f32, Cpu, T>,
    ) -> Result<Self::Output, Error> {
        let op = ContractOp::new(ContractSpec::from_labels("bij", "ijk", "bk")?);
        // The parameter has no tape; the batch carries it (either placement works).
        contract(&op, x, self.weight.clone())
    }
}

/// MSE of the layer on host data, by naive loops in f64.
fn host_loss(x: &[f32], w: &[f32], target: &[f32]) -> f64 {
    let mut sum = 0.0;
    for b in 0..BATCH {
        for k in 0..2 {
            let mut y = 0.0f64;
            for i in 0..4 {
                for j in 0..3 {
                    y += x[b * 12 + i * 3 + j] as f64 * w[i * 6 + j * 2 + k] as f64;
                }
            }
            let d = y - target[b * 2 + k] as f64;
            sum += d * d;
        }
    }
    sum / (BATCH * 2) as f64
}

#[test]
fn sgd_training_decreases_the_loss() {
    let dev = Cpu::seed_from_u64(17);
    let mut model = ContractionLayer {
        weight: dev.sample_normal(),
    };
    let teacher = ContractionLayer {
        weight: dev.sample_normal(),
    };
    let x: Tensor<Rank3<BATCH, 4, 3>, f32, Cpu> = dev.sample_normal();
    let target = teacher.try_forward(x.clone()).unwrap();
    let (xv, tv) = (x.as_vec(), target.as_vec());

    let mut opt = Sgd::new(
        &model,
        SgdConfig {
            lr: 0.05,
            momentum: None,
            weight_decay: None,
        },
    );
    let mut grads = model.alloc_grads();
    let mut losses = Vec::new();
    for step in 0..30 {
        let independent = host_loss(&xv, &model.weight.as_vec(), &tv);
        let y = model.try_forward(x.trace(grads)).unwrap();
        let loss = mse_loss(y, target.clone());
        let value = loss.array() as f64;
        assert!(
            (value - independent).abs() <= 1e-5 * (1.0 + independent),
            "step {step}: dfdx loss {value} vs independent {independent}"
        );
        losses.push(independent);
        grads = adrules_dfdx::try_backward(loss).unwrap();
        opt.update(&mut model, &grads).unwrap();
        model.zero_grads(&mut grads);
    }
    let last = host_loss(&xv, &model.weight.as_vec(), &tv);
    eprintln!("MSE by step (independent): {losses:?}, after 30 steps {last}");
    assert!(
        losses.windows(2).all(|w| w[1] < w[0]),
        "the loss must fall at every step: {losses:?}"
    );
    assert!(last < 0.5 * losses[0], "loss {} → {last}", losses[0]);
}
