//! Shared by the device tests: the implicit fixed-point layer `h = tanh(W·h + b)`.

use adrules_burn::Implicit;
use adrules_burn::burn_tensor::Tensor;
use adrules_core::implicit::{Method, SolverOptions};

/// The fixed point `h = tanh(W·h + b)` of inputs `[W (flattened n·n), b (n)]`: solved by
/// `iterations` steps from `h = 0`, differentiated implicitly with `method`.
pub fn tanh_layer(n: usize, iterations: usize, method: Method) -> Implicit {
    let step = move |w: &Tensor<1>, b: &Tensor<1>, h: &Tensor<1>| {
        let wh = w.clone().reshape([n, n]).matmul(h.clone().reshape([n, 1]));
        (wh.reshape([n]) + b.clone()).tanh()
    };
    Implicit::new(
        move |x| {
            let mut h = x[1].zeros_like();
            for _ in 0..iterations {
                h = step(&x[0], &x[1], &h);
            }
            Ok(h)
        },
        move |x, h| step(&x[0], &x[1], h) - h.clone(),
    )
    .with_linear_solver(SolverOptions::from(method))
}
