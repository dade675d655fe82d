//! The greedy contraction-order heuristic of opt_einsum (Daniel G. A. Smith and Johnnie Gray,
//! *opt_einsum – A Python package for optimizing contraction order for einsum-like
//! expressions*, JOSS 3(26), 753, 2018; `opt_einsum.paths.ssa_greedy_optimize`), in
//! `O(n · deg² · log n)` for `n` operands whose labels are each held by at most `deg` of them.
//!
//! Candidate pairs are only values that share a summed label (one not in the output), found
//! through the holders of each label; a binary heap orders them by cost, then by the smaller
//! SSA ids (deterministic), and stale entries (a value already consumed) are skipped when
//! popped. After a merge only the pairs of the new value with its neighbours are pushed: the
//! cost of a pair depends on its two label lists and on whether each of their labels is held
//! elsewhere, which changes only for pairs with the new value. When no connected pair
//! remains, the values are joined by outer products, smallest first (as opt_einsum does).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A cost ordered by [`f64::total_cmp`] (NaN, from sizes beyond `f64`, sorts last).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cost(f64);

impl Eq for Cost {}

impl PartialOrd for Cost {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Cost {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The objective of one greedy run: the cost of merging `i` and `j` is
/// `size(result) − alpha · (size(i) + size(j))`. `alpha = 1` is opt_einsum's default
/// (`"memory-removed"`), `alpha = 0` omeco's and OMEinsumContractionOrders' default (the
/// size of the result).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Greedy {
    pub(crate) alpha: f64,
}

/// A greedy order: merges in SSA form (see [`super::ContractionTree`]) and their flop count
/// (sum over merges of the product of the dimensions of every label the merge touches).
pub(crate) struct GreedyTree {
    pub(crate) merges: Vec<[usize; 2]>,
    pub(crate) flops: f64,
}

impl Greedy {
    /// Greedy order for operands labelled `inputs` (label ids `< log2_dims.len()`, each
    /// distinct within an operand; a label held by one operand only is expected in the output,
    /// as after the operands' own traces), `output` labels and `log2_dims[l]` = log₂ of the
    /// dimension of label `l`.
    ///
    /// Complexity `O(n · deg² · log n + Σ ranks)` time and `O(n · deg² + labels)` memory.
    pub(crate) fn run(
        self,
        inputs: &[Vec<usize>],
        output: &[usize],
        log2_dims: &[f64],
    ) -> GreedyTree {
        let n = inputs.len();
        let nl = log2_dims.len();
        let mut is_out = vec![false; nl];
        for &l in output {
            is_out[l] = true;
        }
        let total = 2 * n.max(1) - 1;
        let mut labels: Vec<Vec<usize>> = Vec::with_capacity(total);
        let mut log_size: Vec<f64> = Vec::with_capacity(total);
        let mut alive: Vec<bool> = Vec::with_capacity(total);
        // live holders of each summed label, and how many live values hold each label
        let mut holders: Vec<Vec<usize>> = vec![Vec::new(); nl];
        let mut count: Vec<usize> = vec![0; nl];
        for (k, ax) in inputs.iter().enumerate() {
            for &l in ax {
                count[l] += 1;
                if !is_out[l] {
                    holders[l].push(k);
                }
            }
            log_size.push(ax.iter().map(|&l| log2_dims[l]).sum());
            labels.push(ax.clone());
            alive.push(true);
        }
        // scratch marks, stamped per use: which labels the first value of a pair holds, and
        // which neighbours were already pushed
        let mut mark: Vec<usize> = vec![usize::MAX; nl];
        let mut seen: Vec<usize> = vec![usize::MAX; total];
        let mut stamp = 0usize;

        let mut merges: Vec<[usize; 2]> = Vec::with_capacity(n.saturating_sub(1));
        let mut flops = 0.0;
        let mut heap: BinaryHeap<Reverse<(Cost, usize, usize)>> = BinaryHeap::new();

        // result labels, log₂ size of the result and log₂ size of everything touched
        let result = |a: usize,
                      b: usize,
                      labels: &[Vec<usize>],
                      count: &[usize],
                      mark: &mut [usize],
                      stamp: usize|
         -> (Vec<usize>, f64, f64) {
            for &l in &labels[a] {
                mark[l] = stamp;
            }
            let mut out = Vec::with_capacity(labels[a].len() + labels[b].len());
            let (mut log_out, mut log_all) = (0.0, 0.0);
            for &l in &labels[b] {
                let both = mark[l] == stamp;
                if both {
                    mark[l] = stamp.wrapping_add(1); // visited from b
                }
                let held = if both { 2 } else { 1 };
                log_all += log2_dims[l];
                if is_out[l] || count[l] > held {
                    out.push(l);
                    log_out += log2_dims[l];
                }
            }
            for &l in &labels[a] {
                if mark[l] != stamp {
                    continue; // shared: done above
                }
                log_all += log2_dims[l];
                if is_out[l] || count[l] > 1 {
                    out.push(l);
                    log_out += log2_dims[l];
                }
            }
            (out, log_out, log_all)
        };

        let cost = |log_out: f64, a: usize, b: usize, log_size: &[f64]| {
            let c = log_out.exp2() - self.alpha * (log_size[a].exp2() + log_size[b].exp2());
            Cost(c)
        };

        // candidates of value `a` with every live neighbour `b` (through summed labels);
        // `only_larger`: only `b > a` (the initial pass, where each pair is seen twice)
        #[allow(clippy::too_many_arguments)]
        fn push_neighbours(
            a: usize,
            only_larger: bool,
            labels: &[Vec<usize>],
            holders: &[Vec<usize>],
            seen: &mut [usize],
            mut push: impl FnMut(usize, usize),
        ) {
            for &l in &labels[a] {
                for &b in &holders[l] {
                    if b == a || (only_larger && b < a) || seen[b] == a {
                        continue;
                    }
                    seen[b] = a;
                    push(a.min(b), a.max(b));
                }
            }
        }

        for a in 0..n {
            let mut pairs = Vec::new();
            push_neighbours(a, true, &labels, &holders, &mut seen, |x, y| {
                pairs.push((x, y))
            });
            for (x, y) in pairs {
                stamp += 2;
                let (_, lo, _) = result(x, y, &labels, &count, &mut mark, stamp);
                heap.push(Reverse((cost(lo, x, y, &log_size), x, y)));
            }
        }

        while let Some(Reverse((_, a, b))) = heap.pop() {
            if !alive[a] || !alive[b] {
                continue;
            }
            stamp += 2;
            let (out, lo, la) = result(a, b, &labels, &count, &mut mark, stamp);
            flops += la.exp2();
            let v = labels.len();
            for x in [a, b] {
                alive[x] = false;
                for &l in &labels[x] {
                    count[l] -= 1;
                    if !is_out[l] {
                        let h = &mut holders[l];
                        if let Some(p) = h.iter().position(|&y| y == x) {
                            h.swap_remove(p);
                        }
                    }
                }
            }
            for &l in &out {
                count[l] += 1;
                if !is_out[l] {
                    holders[l].push(v);
                }
            }
            merges.push([a, b]);
            labels.push(out);
            log_size.push(lo);
            alive.push(true);
            let mut pairs = Vec::new();
            push_neighbours(v, false, &labels, &holders, &mut seen, |x, y| {
                pairs.push((x, y))
            });
            for (x, y) in pairs {
                stamp += 2;
                let (_, lo, _) = result(x, y, &labels, &count, &mut mark, stamp);
                heap.push(Reverse((cost(lo, x, y, &log_size), x, y)));
            }
        }

        // disconnected parts: outer products, smallest first
        let mut rest: BinaryHeap<Reverse<(Cost, usize)>> = (0..labels.len())
            .filter(|&v| alive[v])
            .map(|v| Reverse((Cost(log_size[v]), v)))
            .collect();
        while rest.len() > 1 {
            let (Some(Reverse((_, a))), Some(Reverse((_, b)))) = (rest.pop(), rest.pop()) else {
                break;
            };
            let (a, b) = (a.min(b), a.max(b));
            stamp += 2;
            let (out, lo, la) = result(a, b, &labels, &count, &mut mark, stamp);
            flops += la.exp2();
            for x in [a, b] {
                for &l in &labels[x] {
                    count[l] -= 1;
                }
            }
            for &l in &out {
                count[l] += 1;
            }
            let v = labels.len();
            merges.push([a, b]);
            labels.push(out);
            log_size.push(lo);
            rest.push(Reverse((Cost(lo), v)));
        }
        GreedyTree { merges, flops }
    }
}

/// Flop count of `merges` (SSA form) over operands labelled `inputs`, with the same label
/// rule as [`Greedy::run`]: `O(Σ ranks + merges · rank)`.
pub(crate) fn tree_flops(
    inputs: &[Vec<usize>],
    output: &[usize],
    log2_dims: &[f64],
    merges: &[[usize; 2]],
) -> f64 {
    let nl = log2_dims.len();
    let mut is_out = vec![false; nl];
    for &l in output {
        is_out[l] = true;
    }
    let mut count = vec![0usize; nl];
    let mut labels: Vec<Vec<usize>> = inputs.to_vec();
    for ax in inputs {
        for &l in ax {
            count[l] += 1;
        }
    }
    let mut mark = vec![usize::MAX; nl];
    let mut flops = 0.0;
    for (k, &[a, b]) in merges.iter().enumerate() {
        for &l in &labels[a] {
            mark[l] = k;
        }
        let mut out = Vec::new();
        let mut log_all = 0.0;
        for &l in &labels[b] {
            let held = if mark[l] == k { 2 } else { 1 };
            if held == 2 {
                mark[l] = usize::MAX;
            }
            log_all += log2_dims[l];
            if is_out[l] || count[l] > held {
                out.push(l);
            }
        }
        for &l in &labels[a] {
            if mark[l] != k {
                continue;
            }
            log_all += log2_dims[l];
            if is_out[l] || count[l] > 1 {
                out.push(l);
            }
        }
        flops += f64::exp2(log_all);
        for x in [a, b] {
            for &l in &labels[x] {
                count[l] -= 1;
            }
        }
        for &l in &out {
            count[l] += 1;
        }
        labels.push(out);
    }
    flops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(n: usize, merges: &[[usize; 2]]) {
        assert!(super::super::ContractionTree::new(n, merges.to_vec()).is_ok());
    }

    #[test]
    fn chain_and_disconnected() {
        // ab,bc,cd->ad with b large: contract the small ends first
        let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
        let log2 = vec![1.0, 6.0, 1.0, 1.0];
        for alpha in [0.0, 1.0] {
            let t = Greedy { alpha }.run(&inputs, &[0, 3], &log2);
            valid(3, &t.merges);
            assert_eq!(t.flops, tree_flops(&inputs, &[0, 3], &log2, &t.merges));
        }
        // scalars and vectors without shared labels: outer products only
        let inputs = vec![vec![], vec![0], vec![], vec![1]];
        let t = Greedy { alpha: 1.0 }.run(&inputs, &[0, 1], &[1.0, 2.0]);
        valid(4, &t.merges);
        assert_eq!(t.merges[0], [0, 2]);
    }
}
