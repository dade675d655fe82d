//! Conformance of the generalized partial trace (traces, diagonals, sums; [`TraceOp`]).

use adrules_core::rules::TraceOp;
use adrules_core::{Backend, TraceSpec};

use super::Config;
use super::case::{run_all, unary_cases};
use crate::Rng;

/// Partial trace: A (2,3,4,2,5) with p = (2,4,1), pair (0,3); the double trace A (2,3,4,2,4),
/// p = (1), pairs (0,3) and (2,4); a full trace to a scalar (p empty); the generalized forms
/// (a batched diagonal `bii->ib`, the hyperdiagonal `iii->i`, a sum over one axis `ijk->ki`,
/// the hypertrace `iii->`, a mix of diagonal, trace and plain axes `aibia->ib`, a sum over a
/// zero-size axis); each over the whole matrix (see the [module documentation](super)).
///
/// # Panics
/// With the failing cases, or when the config supports none.
pub fn trace_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(2);
    let single = TraceSpec::new(&[2, 4, 1], &[0], &[3]).unwrap();
    let double = TraceSpec::new(&[1], &[0, 2], &[3, 4]).unwrap();
    let full = TraceSpec::new(&[], &[0, 1], &[2, 3]).unwrap();
    let mut cases = unary_cases(&mut rng, "trace", &[2, 3, 4, 2, 5], &[4, 5, 3], &|conj| {
        TraceOp::new(single.clone()).conj(conj).into()
    });
    cases.extend(unary_cases(
        &mut rng,
        "double trace",
        &[2, 3, 4, 2, 4],
        &[3],
        &|conj| TraceOp::new(double.clone()).conj(conj).into(),
    ));
    cases.extend(unary_cases(
        &mut rng,
        "full trace",
        &[3, 2, 3, 2],
        &[],
        &|conj| TraceOp::new(full.clone()).conj(conj).into(),
    ));
    // The generalized trace: diagonals, hyperdiagonals, sums over single axes, and mixes.
    for (name, a, c, dims) in [
        ("batched diagonal bii->ib", "bii", "ib", &[3, 4, 4][..]),
        ("hyperdiagonal iii->i", "iii", "i", &[3, 3, 3]),
        ("sum ijk->ki", "ijk", "ki", &[2, 3, 4]),
        ("hypertrace iii->", "iii", "", &[3, 3, 3]),
        ("mixed aibia->ib", "aibia", "ib", &[2, 3, 4, 3, 2]),
        ("zero-size sum ij->i", "ij", "i", &[3, 0]),
    ] {
        let spec = TraceSpec::from_labels(a, c).unwrap();
        let out = spec.output_dims(dims).unwrap();
        cases.extend(unary_cases(&mut rng, name, dims, &out, &|conj| {
            TraceOp::new(spec.clone()).conj(conj).into()
        }));
    }
    run_all(be, cfg, cases);
}
