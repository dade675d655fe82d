//! Property tests: every primitive of the strided backend against the naive reference
//! backend, over the four dtypes and their mixtures, conjugation flags, coefficients
//! (0, 1, real, complex), random shapes (zero-size dimensions and rank 0 included), random
//! permutations and strided layouts (permuted, padded, reversed) for inputs and outputs.

use std::sync::Arc;

use crate::support::common::*;
use adrules_core::{
    Backend, Conj, ContractSpec, DType, DynScalar, Error, HostTensor, Permutation, TraceSpec,
};
use adrules_strided::Strided;
use adrules_testing::ReferenceBackend;
use proptest::prelude::*;

const CASES: u32 = 1000;

fn conj() -> impl Strategy<Value = Conj> {
    any::<bool>().prop_map(Conj::from_bool)
}

/// C's initial values: random, or NaN when β is zero (strong zero), on the given layout.
fn output(dtype: DType, dims: &[usize], spec: &LayoutSpec, seed: u64, beta: DynScalar) -> Case {
    let n: usize = dims.iter().product();
    let mut vals = values(seed ^ 0x9e37, n);
    if beta.is_zero() && seed.is_multiple_of(2) {
        vals.iter_mut()
            .for_each(|v| *v = adrules_core::Complex64::new(f64::NAN, f64::NAN));
    }
    make(dtype, dims, spec, &vals)
}

/// Runs `ours` on the strided case and `theirs` on the reference, and compares: both fail
/// with the same error variant, or both succeed with matching values.
fn compare(
    mut c: Case,
    terms: usize,
    ours: impl FnOnce(&mut adrules_strided::Tensor) -> adrules_core::Result<()>,
    theirs: impl FnOnce(&mut Arc<HostTensor>) -> adrules_core::Result<()>,
) -> Result<(), TestCaseError> {
    let mut reference = c.host.clone();
    let r_ours = ours(&mut c.tensor);
    let r_ref = theirs(&mut reference);
    match (r_ours, r_ref) {
        (Ok(()), Ok(())) => {
            assert_matches(&c.tensor, &reference, terms, &c.positions);
            Ok(())
        }
        (Err(a), Err(b)) => {
            prop_assert_eq!(
                std::mem::discriminant(&a),
                std::mem::discriminant(&b),
                "{} vs {}",
                a,
                b
            );
            Ok(())
        }
        (a, b) => Err(TestCaseError::fail(format!(
            "strided {a:?}, reference {b:?}"
        ))),
    }
}

fn add_case() -> impl Strategy<Value = (Vec<usize>, Vec<usize>, LayoutSpec, LayoutSpec)> {
    (0..=5usize).prop_flat_map(|r| {
        (
            dims(r),
            Just((0..r).collect::<Vec<_>>()).prop_shuffle(),
            layout(r),
            layout(r),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn add_matches_reference(
        (da, p, la, lc) in add_case(),
        (ta, tc) in (dtype(), dtype()),
        conj in conj(),
        (alpha, beta) in (coefficient(), coefficient()),
        seed in any::<u64>(),
        projected in any::<bool>(),
    ) {
        let p = Permutation::new(&p).unwrap();
        let dc: Vec<usize> = p.apply(&da).to_vec();
        let a = make(ta, &da, &la, &values(seed, da.iter().product()));
        let c = output(tc, &dc, &lc, seed, beta);
        let (sa, ha) = (a.tensor.clone(), a.host.clone());
        if projected {
            compare(c, 1,
                |c| Strided.add_projected(c, &sa, &p, conj, alpha, beta),
                |c| ReferenceBackend.add_projected(c, &ha, &p, conj, alpha, beta))?;
        } else {
            compare(c, 1,
                |c| Strided.add(c, &sa, &p, conj, alpha, beta),
                |c| ReferenceBackend.add(c, &ha, &p, conj, alpha, beta))?;
        }
    }

    #[test]
    fn trace_and_its_adjoint_match_reference(
        (kept, summed) in (0..=2usize, 0..=2usize),
        sizes in proptest::collection::vec(1..=3usize, 4),
        seed in any::<u64>(),
        (ta, tc) in (dtype(), dtype()),
        conj in conj(),
        (alpha, beta) in (coefficient(), coefficient()),
        adjoint in any::<bool>(),
        (la, lc) in (layout(6), layout(2)),
    ) {
        // The generalized trace: `kept` output groups (a diagonal when a group has two axes)
        // and `summed` groups (a sum over one axis, a trace, a hypertrace), at most rank 6,
        // over A's axes in a seeded random order.
        let mut groups: Vec<usize> = sizes[..kept].iter().map(|&g| g.min(2)).collect();
        groups.extend(&sizes[2..2 + summed]);
        while groups.iter().sum::<usize>() > 6 {
            let big = groups.iter().position(|&g| g > 1).unwrap();
            groups[big] -= 1;
        }
        let rank_a: usize = groups.iter().sum();
        let mut axes: Vec<usize> = (0..rank_a).collect();
        let v = values(seed, 16);
        for i in (1..rank_a).rev() {
            axes.swap(i, (v[i].re.abs() * 1e6) as usize % (i + 1));
        }
        let mut split: Vec<Vec<usize>> = Vec::new();
        let mut at = 0;
        for &g in &groups {
            split.push(axes[at..at + g].to_vec());
            at += g;
        }
        let (kept_groups, summed_groups) = split.split_at(kept);
        let spec = TraceSpec::from_groups(kept_groups, summed_groups).unwrap();
        let mut da = vec![0usize; rank_a];
        for (k, g) in split.iter().enumerate() {
            let d = if k < kept {
                1 + (v[k].im.abs() * 1e6) as usize % 4
            } else {
                (v[8 + k].im.abs() * 1e6) as usize % 5
            };
            for &i in g {
                da[i] = d;
            }
        }
        let dc: Vec<usize> = spec.output_dims(&da).unwrap().to_vec();
        let spec_a = LayoutSpec {
            order: la.order.iter().copied().filter(|&k| k < rank_a).collect(),
            pad: la.pad[..rank_a].to_vec(),
            flip: la.flip[..rank_a].to_vec(),
            offset: la.offset,
        };
        let spec_c = LayoutSpec {
            order: lc.order.iter().copied().filter(|&k| k < kept).collect(),
            pad: lc.pad[..kept].to_vec(),
            flip: lc.flip[..kept].to_vec(),
            offset: lc.offset,
        };
        let terms: usize = spec.summed_dims(&da).iter().product();
        if adjoint {
            // A (the output) accumulates; C is the input.
            let cin = make(tc, &dc, &spec_c, &values(seed ^ 5, dc.iter().product()));
            let aout = make(ta, &da, &spec_a, &values(seed ^ 7, da.iter().product()));
            let (sc, hc) = (cin.tensor.clone(), cin.host.clone());
            compare(aout, 1,
                |a| Strided.add_to_diagonal(a, &sc, &spec, conj, alpha),
                |a| ReferenceBackend.add_to_diagonal(a, &hc, &spec, conj, alpha))?;
        } else {
            let a = make(ta, &da, &spec_a, &values(seed ^ 7, da.iter().product()));
            let c = output(tc, &dc, &spec_c, seed, beta);
            let (sa, ha) = (a.tensor.clone(), a.host.clone());
            compare(c, terms,
                |c| Strided.trace(c, &sa, &spec, conj, alpha, beta),
                |c| ReferenceBackend.trace(c, &ha, &spec, conj, alpha, beta))?;
        }
    }

    #[test]
    fn contract_matches_reference(
        (nl, na, nb, nk) in (0..=2usize, 0..=2usize, 0..=2usize, 0..=2usize),
        seed in any::<u64>(),
        (ta, tb, tc) in (dtype(), dtype(), dtype()),
        (conj_a, conj_b) in (conj(), conj()),
        (alpha, beta) in (coefficient(), coefficient()),
        (la, lb, lc) in (layout(6), layout(6), layout(6)),
        shuffles in proptest::collection::vec(any::<u32>(), 12),
    ) {
        let v = values(seed, 16);
        let dim = |k: usize| if v[k].re.abs() < 0.05 { 0 } else { 1 + (v[k].im.abs() * 1e6) as usize % 4 };
        let shuffle = |n: usize, salt: usize| {
            let mut x: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                x.swap(i, shuffles[(salt + i) % 12] as usize % (i + 1));
            }
            x
        };
        // A's axes: positions of (batch_a…, open_a…, contr_a…) after a shuffle; likewise
        // for B; batch axes (labels in A, B and C) in some cases.
        let pa = shuffle(nl + na + nk, 0);
        let pb = shuffle(nl + nb + nk, 4);
        let (batch_a, rest) = pa.split_at(nl);
        let (open_a, contr_a) = rest.split_at(na);
        let (batch_b, rest) = pb.split_at(nl);
        let (contr_b, open_b) = rest.split_at(nk);
        let perm = shuffle(nl + na + nb, 8);
        let spec =
            ContractSpec::batched(batch_a, batch_b, open_a, contr_a, contr_b, open_b, &perm)
                .unwrap();
        let mut da = vec![0usize; nl + na + nk];
        let mut db = vec![0usize; nl + nb + nk];
        for (x, &i) in open_a.iter().enumerate() { da[i] = dim(x); }
        for (x, &j) in open_b.iter().enumerate() { db[j] = dim(4 + x); }
        for k in 0..nk {
            let d = dim(8 + k);
            da[contr_a[k]] = d;
            db[contr_b[k]] = d;
        }
        for k in 0..nl {
            let d = dim(12 + k);
            da[batch_a[k]] = d;
            db[batch_b[k]] = d;
        }
        let dc = spec.output_dims(&da, &db).unwrap().to_vec();
        let sub = |l: &LayoutSpec, r: usize| LayoutSpec {
            order: l.order.iter().copied().filter(|&k| k < r).collect(),
            pad: l.pad[..r].to_vec(),
            flip: l.flip[..r].to_vec(),
            offset: l.offset,
        };
        let a = make(ta, &da, &sub(&la, da.len()), &values(seed ^ 1, da.iter().product()));
        let b = make(tb, &db, &sub(&lb, db.len()), &values(seed ^ 2, db.iter().product()));
        let c = output(tc, &dc, &sub(&lc, dc.len()), seed, beta);
        let terms: usize = contr_a.iter().map(|&i| da[i]).product();
        let (sa, ha, sb, hb) = (a.tensor.clone(), a.host.clone(), b.tensor.clone(), b.host.clone());
        compare(c, terms,
            |c| Strided.contract(c, &sa, &sb, &spec, conj_a, conj_b, alpha, beta),
            |c| ReferenceBackend.contract(c, &ha, &hb, &spec, conj_a, conj_b, alpha, beta))?;
    }

    #[test]
    fn inner_scale_and_scalar_match_reference(
        d in (0..=4usize).prop_flat_map(dims),
        (tx, ty) in (dtype(), dtype()),
        (lx, ly) in (layout(4), layout(4)),
        s in coefficient(),
        seed in any::<u64>(),
    ) {
        let r = d.len();
        let sub = |l: &LayoutSpec| LayoutSpec {
            order: l.order.iter().copied().filter(|&k| k < r).collect(),
            pad: l.pad[..r].to_vec(),
            flip: l.flip[..r].to_vec(),
            offset: l.offset,
        };
        let n: usize = d.iter().product();
        let x = make(tx, &d, &sub(&lx), &values(seed, n));
        let y = make(ty, &d, &sub(&ly), &values(seed ^ 3, n));
        let ours = Strided.inner(&x.tensor, &y.tensor).unwrap();
        let theirs = ReferenceBackend.inner(&x.host, &y.host).unwrap();
        prop_assert_eq!(ours.dtype(), theirs.dtype());
        let tol = tolerance(ours.dtype(), n);
        prop_assert!((ours.to_c64() - theirs.to_c64()).norm() <= tol * (1.0 + n as f64), "{} vs {}", ours, theirs);
        if r == 0 {
            prop_assert_eq!(Strided.scalar(&x.tensor).unwrap(), ReferenceBackend.scalar(&x.host).unwrap());
        } else {
            let rank_error = matches!(Strided.scalar(&x.tensor), Err(Error::RankMismatch { .. }));
            prop_assert!(rank_error);
        }
        let t = make(tx, &d, &sub(&lx), &{
            let mut v = values(seed, n);
            if s.is_zero() { v.iter_mut().for_each(|z| *z = adrules_core::Complex64::new(f64::NAN, f64::INFINITY)); }
            v
        });
        compare(t, 1, |t| Strided.scale(t, s), |t| ReferenceBackend.scale(t, s))?;
    }
}
