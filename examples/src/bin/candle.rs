//! Fit a tensor train (matrix-product state) to a target tensor with candle.
//!
//! The network `ia,ajb,bkc,cl->ijkl` is contracted by `adrules::candle::einsum`: the core plans
//! the contraction order once per call, each step is an adrules custom op in candle's graph,
//! and `loss.backward()` runs the shared pullbacks. The optimizer is a plain candle loop.
//!
//! Run: `cargo run --release -p adrules-examples --features candle --bin candle`.

use adrules::candle::candle_core::{Device, Result, Tensor, Var};
use adrules::candle::einsum;

fn main() -> Result<()> {
    let dev = Device::Cpu;
    let (d, bond) = (6, 4);
    // A target: a tensor train of bond dimension 2, plus noise.
    let t = |dims: &[usize]| Tensor::randn(0f64, 1.0, dims, &dev);
    let parts = [t(&[d, 2])?, t(&[2, d, 2])?, t(&[2, d, 2])?, t(&[2, d])?];
    let parts: Vec<&Tensor> = parts.iter().collect();
    let target = einsum("ia,ajb,bkc,cl->ijkl", &parts)?;
    let rms = target.sqr()?.mean_all()?.sqrt()?.to_scalar::<f64>()?;
    let target = ((target / rms)? + Tensor::randn(0f64, 0.05, (d, d, d, d), &dev)?)?;

    let init = |dims: &[usize]| Var::randn(0f64, 0.5, dims, &dev);
    let cores = [
        init(&[d, bond])?,
        init(&[bond, d, bond])?,
        init(&[bond, d, bond])?,
        init(&[bond, d])?,
    ];
    let lr = 0.5;
    for step in 0..=300 {
        let ops: Vec<&Tensor> = cores.iter().map(|v| v.as_tensor()).collect();
        let fit = einsum("ia,ajb,bkc,cl->ijkl", &ops)?;
        let loss = (fit - &target)?.sqr()?.mean_all()?;
        let grads = loss.backward()?;
        for core in &cores {
            let g = grads.get(core.as_tensor()).expect("every core is trained");
            core.set(&(core.as_tensor() - (g * lr)?)?)?;
        }
        if step % 50 == 0 {
            let rel =
                (loss.to_scalar::<f64>()? / target.sqr()?.mean_all()?.to_scalar::<f64>()?).sqrt();
            println!("step {step:3}: relative error {rel:.4}");
        }
    }
    Ok(())
}
