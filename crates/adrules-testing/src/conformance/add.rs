//! Conformance of the permuted add `C ← β·C + α·P_p(op(A))` ([`AddOp`]).

use adrules_core::rules::AddOp;
use adrules_core::{Backend, Permutation};

use super::Config;
use super::case::{run_all, unary_cases};
use crate::Rng;

/// Permuted add: the reference vector A (2,3,4,2,1) with permutation (1,0,3,2,4), a rank-0
/// add and an add with a zero-size dimension, each over the whole matrix (dtype pairs A → C,
/// both conjugation flags, every α × β variant; see the [module documentation](super)).
///
/// # Panics
/// With the failing cases, or when the config supports none.
pub fn add_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut rng = Rng::seed(1);
    let p = Permutation::new(&[1, 0, 3, 2, 4]).unwrap();
    let c_dims: Vec<usize> = p.apply(&[2, 3, 4, 2, 1]).to_vec();
    let mut cases = unary_cases(&mut rng, "add", &[2, 3, 4, 2, 1], &c_dims, &|conj| {
        AddOp::new(p.clone()).conj(conj).into()
    });
    cases.extend(unary_cases(&mut rng, "add rank 0", &[], &[], &|conj| {
        AddOp::new(Permutation::identity(0)).conj(conj).into()
    }));
    cases.extend(unary_cases(
        &mut rng,
        "add zero-size",
        &[3, 0, 2],
        &[2, 3, 0],
        &|conj| {
            AddOp::new(Permutation::new(&[2, 0, 1]).unwrap())
                .conj(conj)
                .into()
        },
    ));
    run_all(be, cfg, cases);
}
