//! The calls into [omeco](https://crates.io/crates/omeco) (its exhaustive search and TreeSA)
//! and the estimates that keep them within the [`super::Search`] budget.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

use omeco::{EinCode, NestedEinsum, TreeSA, optimize_treesa};

use super::super::greedy::SplitMix;
use crate::error::{Error, Result};

/// Steps an omeco exhaustive search takes per second (the unit of [`exhaustive_work`]):
/// 1.7e8 to 3.8e8 measured on rings of 8 to 12 operands (2-core machine, release build;
/// `calibrate_budget_estimates`), rounded down.
pub(super) const EXHAUSTIVE_RATE: f64 = 1e8;

/// Estimated steps of omeco's exhaustive search: `Σ_c 3^{k_c} · (labels + 1)` over the
/// connected components (through any shared label) of `k_c` operands.
pub(super) fn exhaustive_work(ixs: &[Vec<usize>], num_labels: usize) -> f64 {
    // union-find over operands, joined through the first holder of each label
    let mut parent: Vec<usize> = (0..ixs.len()).collect();
    fn root(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    let mut holder: Vec<Option<usize>> = vec![None; num_labels];
    for (k, ax) in ixs.iter().enumerate() {
        for &l in ax {
            match holder[l] {
                None => holder[l] = Some(k),
                Some(h) => {
                    let (a, b) = (root(&mut parent, h), root(&mut parent, k));
                    parent[a] = b;
                }
            }
        }
    }
    let mut size = vec![0usize; ixs.len()];
    for k in 0..ixs.len() {
        let r = root(&mut parent, k);
        size[r] += 1;
    }
    size.iter()
        .filter(|&&s| s > 1)
        .map(|&s| 3f64.powi(s as i32) * (num_labels + 1) as f64)
        .sum()
}

/// omeco's input: the operands' kept labels (in the order `perm`, when given) and the label
/// dimensions (at least 1).
pub(super) fn omeco_code(
    ixs: &[Vec<usize>],
    output: &[usize],
    label_dims: &[usize],
    perm: Option<&[usize]>,
) -> (EinCode<usize>, HashMap<usize, usize>) {
    let ixs: Vec<Vec<usize>> = match perm {
        Some(p) => p.iter().map(|&k| ixs[k].clone()).collect(),
        None => ixs.to_vec(),
    };
    let sizes: HashMap<usize, usize> = label_dims
        .iter()
        .enumerate()
        .map(|(id, &d)| (id, d.max(1)))
        .collect();
    (EinCode::new(ixs, output.to_vec()), sizes)
}

/// Seconds per operand³ of omeco's greedy (TreeSA's initial tree): 5.5 s for 800 operands.
pub(super) const OMECO_GREEDY_CUBIC: f64 = 1.1e-8;
/// Seconds per tree node and sweep of omeco's annealing, its greedy start included: 3e-7 to
/// 1.2e-6 measured on MPS norms of 50 to 200 operands (release build, 2-core machine;
/// `calibrate_budget_estimates`), rounded up.
pub(super) const TREESA_NODE: f64 = 1e-6;
/// Temperatures of `TreeSA::fast()`, and its sweeps per temperature.
pub(super) const TREESA_BETAS: usize = 100;
pub(super) const TREESA_NITERS: usize = 20;

/// omeco's TreeSA within `budget` (see [`Optimizer::TreeSa`]); `None` when it does not fit or
/// does not return in time.
pub(super) fn treesa(
    ixs: &[Vec<usize>],
    output: &[usize],
    label_dims: &[usize],
    n: usize,
    budget: Duration,
    seed: u64,
) -> Result<Option<Vec<[usize; 2]>>> {
    let nf = n as f64;
    let init = OMECO_GREEDY_CUBIC * nf.powi(3);
    let per_level = 2.0 * nf * TREESA_NODE;
    let room = budget.as_secs_f64() / 2.0 - init;
    let niters = (room / (TREESA_BETAS as f64 * per_level)).floor();
    if niters < 1.0 {
        return Ok(None);
    }
    let niters = (niters as usize).min(TREESA_NITERS);
    let perm: Vec<usize> = if seed == 0 {
        (0..n).collect()
    } else {
        shuffled(n, seed)
    };
    let (code, sizes) = omeco_code(ixs, output, label_dims, Some(&perm));
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::Builder::new()
        .name("adrules-treesa".into())
        .spawn(move || {
            let config = TreeSA::fast().with_niters(niters);
            let nested = optimize_treesa(&code, &sizes, &config);
            let merges = nested.map(|t| flatten(&t, n, Some(&perm)));
            let _ = tx.send(merges);
        });
    if worker.is_err() {
        return Ok(None); // no thread: the greedy tree
    }
    match rx.recv_timeout(budget) {
        Ok(Some(merges)) => merges.map(Some),
        Ok(None) | Err(_) => Ok(None),
    }
}

/// A permutation of `0..n` from `seed` (Fisher–Yates with SplitMix64).
pub(super) fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = SplitMix(seed);
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        p.swap(i, j);
    }
    p
}

/// Post-order walk of omeco's tree into SSA merges (iterative: annealed trees can be deep);
/// leaf `t` is operand `perm[t]` when a permutation is given.
pub(super) fn flatten(
    root: &NestedEinsum<usize>,
    n: usize,
    perm: Option<&[usize]>,
) -> Result<Vec<[usize; 2]>> {
    let mut merges = Vec::with_capacity(n.saturating_sub(1));
    // (node, children done); finished values on `done`
    let mut stack: Vec<(&NestedEinsum<usize>, bool)> = vec![(root, false)];
    let mut done: Vec<usize> = Vec::new();
    while let Some((node, expanded)) = stack.pop() {
        match node {
            NestedEinsum::Leaf { tensor_index } => {
                let t = *tensor_index;
                let k = match perm {
                    Some(p) => p.get(t).copied(),
                    None => Some(t),
                };
                done.push(k.filter(|&k| k < n).ok_or_else(|| {
                    Error::invalid("order", format!("omeco returned an unknown tensor {t}"))
                })?);
            }
            NestedEinsum::Node { args, .. } => match (args.as_slice(), expanded) {
                ([a, b], false) => {
                    stack.push((node, true));
                    stack.push((b, false));
                    stack.push((a, false));
                }
                ([_, _], true) => {
                    let (Some(b), Some(a)) = (done.pop(), done.pop()) else {
                        return Err(Error::invalid("order", "omeco returned a malformed tree"));
                    };
                    merges.push([a, b]);
                    done.push(n + merges.len() - 1);
                }
                _ => {
                    return Err(Error::invalid(
                        "order",
                        format!("omeco returned a node with {} children", args.len()),
                    ));
                }
            },
        }
    }
    Ok(merges)
}
