//! Einsum calls of torch's grammar that the oracle files do not cover, with their values and
//! gradients computed by hand: an output `...` when no operand has one (empty, as in torch and
//! numpy), and empty or blank strings on a rank-0 operand (torch returns the operand). Each
//! adapter replays them through its engine's graph; the conformance suite through a backend.

use adrules_core::{DType, HostTensor};

/// One single-operand einsum call: `subscripts` on `input` gives `output`, and the VJP of the
/// cotangent `cotangent` (the shape of `output`) is `vjp` (the shape of `input`).
#[derive(Clone, Debug)]
pub struct GrammarCase {
    /// the Einstein string
    pub subscripts: &'static str,
    /// the operand
    pub input: HostTensor,
    /// torch's result
    pub output: HostTensor,
    /// a cotangent of the result
    pub cotangent: HostTensor,
    /// the operand's cotangent (the VJP of `cotangent`)
    pub vjp: HostTensor,
}

/// The four calls of torch's grammar with an empty ellipsis or an empty string, in `dtype`
/// (values exact in f32): `"R->..."` on `[6]` (the sum; VJP `c̄·1`), `"O->...O"` on `[4]`
/// (the identity; VJP `c̄`), `""` and `" "` on a rank-0 operand (the operand; VJP `c̄`).
///
/// # Panics
/// For a complex `dtype` (the values are real; use a real one).
pub fn empty_ellipsis_cases(dtype: DType) -> Vec<GrammarCase> {
    assert!(
        !dtype.is_complex(),
        "empty_ellipsis_cases: real dtypes only"
    );
    let t = |dims: &[usize], v: &[f64]| {
        HostTensor::from_vec(dims, v.to_vec())
            .unwrap()
            .to_dtype_projected(dtype)
    };
    vec![
        GrammarCase {
            subscripts: "R->...",
            input: t(&[6], &[0.5, -1.0, 1.5, -2.0, 2.5, -3.0]),
            output: t(&[], &[-1.5]),
            cotangent: t(&[], &[0.75]),
            vjp: t(&[6], &[0.75; 6]),
        },
        GrammarCase {
            subscripts: "O->...O",
            input: t(&[4], &[1.25, -0.5, 2.0, 3.0]),
            output: t(&[4], &[1.25, -0.5, 2.0, 3.0]),
            cotangent: t(&[4], &[0.5, 1.0, -1.0, 2.0]),
            vjp: t(&[4], &[0.5, 1.0, -1.0, 2.0]),
        },
        GrammarCase {
            subscripts: "",
            input: t(&[], &[-2.5]),
            output: t(&[], &[-2.5]),
            cotangent: t(&[], &[1.5]),
            vjp: t(&[], &[1.5]),
        },
        GrammarCase {
            subscripts: " ",
            input: t(&[], &[4.0]),
            output: t(&[], &[4.0]),
            cotangent: t(&[], &[-0.5]),
            vjp: t(&[], &[-0.5]),
        },
    ]
}
