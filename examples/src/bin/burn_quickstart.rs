//! adrules ops inside a plain burn training loop (feature `burn`).
//!
//! Fits the core tensor `G` of a Tucker-like model `y[a, b] = Σ_{c,d} x[a, c, d]·G[c, d, b]`
//! (one adrules contraction node per step) and then the bias of a fixed-point layer
//! `h = tanh(W·h + b)` (one adrules implicit node per step, gradients by the implicit
//! function theorem, not by unrolling the iteration).
//!
//! Run: `cargo run --release -p adrules-examples --features burn --bin burn_quickstart`

use adrules::burn::burn_tensor::{DType, Device, Distribution, Tensor};
use adrules::burn::{Implicit, contract};
use adrules::rules::ContractOp;
use adrules::{ContractSpec, Result};

fn main() -> Result<()> {
    let device = Device::flex().autodiff();
    let f64_normal = |dims: [usize; 3]| {
        Tensor::<3>::random(dims, Distribution::Normal(0.0, 1.0), (&device, DType::F64))
    };

    // --- a contraction node in a gradient-descent loop ---
    let x = f64_normal([16, 4, 5]);
    let g_true = f64_normal([4, 5, 3]);
    let op = ContractOp::new(ContractSpec::from_labels("acd", "cdb", "ab")?);
    let y_true: Tensor<2> = contract(&op, &x, &g_true)?;
    let mut g = Tensor::<3>::zeros([4, 5, 3], (&device, DType::F64));
    for it in 0..=60 {
        let g_leaf = g.clone().detach().require_grad();
        let y: Tensor<2> = contract(&op, &x, &g_leaf)?;
        let loss = (y - y_true.clone()).powi_scalar(2).mean();
        if it % 20 == 0 {
            println!(
                "contraction fit, step {it:2}: loss {:.3e}",
                loss.clone().into_scalar::<f64>()
            );
        }
        let grads = loss.backward();
        let grad = g_leaf
            .grad(&grads)
            .expect("G is a leaf that requires gradients");
        g = g_leaf.detach() - grad.mul_scalar(0.5);
    }

    // --- an implicit fixed-point layer ---
    let n = 8;
    let w = Tensor::<2>::random(
        [n, n],
        Distribution::Uniform(-0.15, 0.15),
        (&device, DType::F64),
    )
    .reshape([n * n]);
    let step = move |w: &Tensor<1>, b: &Tensor<1>, h: &Tensor<1>| {
        let wh = w.clone().reshape([n, n]).matmul(h.clone().reshape([n, 1]));
        (wh.reshape([n]) + b.clone()).tanh()
    };
    let layer = Implicit::new(
        move |x| {
            let mut h = x[1].zeros_like();
            for _ in 0..200 {
                h = step(&x[0], &x[1], &h);
            }
            Ok(h)
        },
        move |x, h| step(&x[0], &x[1], h) - h.clone(),
    );
    let target = Tensor::<1>::random([n], Distribution::Uniform(-0.5, 0.5), (&device, DType::F64));
    let mut b = Tensor::<1>::zeros([n], (&device, DType::F64));
    for it in 0..=30 {
        let b_leaf = b.clone().detach().require_grad();
        let h = layer.apply([(&w).into(), (&b_leaf).into()])?;
        let loss = (h - target.clone()).powi_scalar(2).sum();
        if it % 10 == 0 {
            println!(
                "fixed-point fit, step {it:2}: loss {:.3e}",
                loss.clone().into_scalar::<f64>()
            );
        }
        let grads = loss.backward();
        let grad = b_leaf
            .grad(&grads)
            .expect("b is a leaf that requires gradients");
        b = b_leaf.detach() - grad.mul_scalar(0.5);
    }
    Ok(())
}
