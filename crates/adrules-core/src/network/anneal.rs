//! Simulated annealing on contraction trees (TreeSA: Kalachev, Panteleev, Zhou, Yung,
//! *Recursive multi-tensor contraction for XEB verification of quantum circuits*,
//! arXiv:2108.05665 (2021), §IV; the local rules and the energy as in
//! OMEinsumContractionOrders.jl's `treesa.jl`), started from a given tree.
//!
//! A binary tree over the operands is changed by *rotations*: at a node `N = (a, (b₁, b₂))`
//! the sibling `a` trades places with a grandchild, giving `(b₁, (a, b₂))` or
//! `(b₂, (b₁, a))` (and the mirror moves when `a` is the internal child). Only the inner
//! node's result changes: with `open(X)` the labels of `X`'s result (a leaf's own labels),
//! the new inner node `(x, y)` under `N` beside `z` keeps
//! `open(x, y) = (open(x) ∪ open(y)) ∩ (open(z) ∪ open(N))`,
//! the labels still needed by `z` or above `N` (hyperedges and output labels included). A
//! merge costs `2^tc` multiply-adds with `tc = Σ log₂ d` over the labels it touches,
//! `open(x) ∪ open(y)`, the measure of `TreeStats`. A move's energy change is that of the
//! two merges it alters, `ΔE = log₂(2^tc′_inner + 2^tc′_N) − log₂(2^tc_inner + 2^tc_N)`,
//! accepted with probability `min(1, e^{−β ΔE})`.
//!
//! One sweep visits every internal node top-down and tries one random applicable rotation
//! there. β rises linearly in wall-clock time from [`BETA_START`] to [`BETA_END`] over the
//! time given, so the schedule fits any budget; the tree with the fewest total multiply-adds
//! seen at the end of a sweep is returned (anytime).

use std::time::{Duration, Instant};

use super::greedy::{SplitMix, log2_add, walk_merges};

/// Inverse temperature (per bit of a move's cost change) at the start of the schedule. The
/// schedule (1 → 8, started from the best sampled tree) was chosen on the quality networks of
/// docs/PERFORMANCE.md (one run each): starting hotter (β = 0.3) gave a costlier tree on the
/// 1,000-vertex random graph, ending colder (β = 25) on both random graphs, within 2 s.
const BETA_START: f64 = 1.0;
/// Inverse temperature at the end of the schedule.
const BETA_END: f64 = 8.0;

const NONE: usize = usize::MAX;

/// Nodes a sweep visits between two readings of the clock.
const CLOCK_NODES: usize = 256;

/// A binary tree with the labels of every node's result as a sorted list.
struct Tree {
    /// `2n − 1` nodes: leaves `0..n`, then the internal nodes
    children: Vec<[usize; 2]>,
    root: usize,
    /// the labels of each node's result, sorted (a leaf: its own labels)
    open: Vec<Vec<u32>>,
    /// `log₂` of the multiply-adds of each internal node's merge (leaves: unused)
    tc: Vec<f64>,
    /// `log₂ d` of every label
    lw: Vec<f64>,
    n: usize,
}

/// Calls `f` on every label of the union of the sorted lists `a` and `b`, once each, in order.
fn for_union(a: &[u32], b: &[u32], mut f: impl FnMut(u32)) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        f(x.min(y));
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    a[i..].iter().chain(&b[j..]).for_each(|&l| f(l));
}

/// Whether the sorted list `a` holds `l`, advancing the cursor `i` (queries in increasing order).
fn holds(a: &[u32], i: &mut usize, l: u32) -> bool {
    while *i < a.len() && a[*i] < l {
        *i += 1;
    }
    *i < a.len() && a[*i] == l
}

impl Tree {
    /// The tree of `merges` (SSA form) over operands labelled `ixs`, output labels `output`
    /// and label dimensions `dims` (a dimension below 1 counted as 1).
    fn new(ixs: &[Vec<usize>], output: &[usize], dims: &[f64], merges: &[[usize; 2]]) -> Tree {
        let n = ixs.len();
        let nodes = 2 * n - 1;
        // label ids fit in u32: a network with 2³² labels would not fit in memory
        debug_assert!(dims.len() <= u32::MAX as usize + 1);
        let sorted = |ls: &[usize]| {
            let mut v: Vec<u32> = ls.iter().map(|&l| l as u32).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut open: Vec<Vec<u32>> = ixs.iter().map(|ax| sorted(ax)).collect();
        open.resize(nodes, Vec::new());
        // each merge's result: the labels in the output or still held outside (the label
        // rule of `TreeStats`)
        walk_merges(ixs, output, dims.len(), merges, |m, _, res| {
            open[n + m] = sorted(res);
        });
        let mut t = Tree {
            children: vec![[NONE; 2]; nodes],
            root: nodes - 1,
            open,
            tc: vec![0.0; nodes],
            lw: dims.iter().map(|&d| d.max(1.0).log2()).collect(),
            n,
        };
        for (m, &[a, b]) in merges.iter().enumerate() {
            t.children[n + m] = [a, b];
            t.tc[n + m] = t.union_size(&t.open[a], &t.open[b]);
        }
        t
    }

    /// `log₂` of the multiply-adds of a merge touching the labels of `a` and `b`.
    fn union_size(&self, a: &[u32], b: &[u32]) -> f64 {
        let mut s = 0.0;
        for_union(a, b, |l| s += self.lw[l as usize]);
        s
    }

    /// `log₂` of the tree's total multiply-adds (finite beyond 2¹⁰²⁴).
    fn log2_flops(&self) -> f64 {
        let tcs = &self.tc[self.n..];
        let top = tcs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        top + tcs.iter().map(|&t| (t - top).exp2()).sum::<f64>().log2()
    }

    /// Tries a random rotation at internal node `x` (see the module docs) at inverse
    /// temperature `beta`; `scratch` is reused between calls.
    fn try_move(&mut self, x: usize, beta: f64, rng: &mut SplitMix, scratch: &mut Vec<u32>) {
        let [c0, c1] = self.children[x];
        // the internal child `inner` (side `s`) and its sibling `a`
        let s = match [c0 >= self.n, c1 >= self.n] {
            [false, false] => return,
            [true, false] => 0,
            [false, true] => 1,
            [true, true] => (rng.next() & 1) as usize,
        };
        let inner = self.children[x][s];
        let a = self.children[x][1 - s];
        // `a` trades places with grandchild `up`; the new inner node is (a, stay)
        let g = (rng.next() >> 1 & 1) as usize;
        let up = self.children[inner][g];
        let stay = self.children[inner][1 - g];
        let (oa, os, ou, ox) = (
            &self.open[a],
            &self.open[stay],
            &self.open[up],
            &self.open[x],
        );
        // the new inner node touches open(a) ∪ open(stay) and keeps what `up` or `x` needs
        scratch.clear();
        let (mut tc_inner, mut iu, mut ix) = (0.0, 0, 0);
        for_union(oa, os, |l| {
            tc_inner += self.lw[l as usize];
            if holds(ou, &mut iu, l) || holds(ox, &mut ix, l) {
                scratch.push(l);
            }
        });
        let tc_x = self.union_size(ou, scratch);
        let de = log2_add(tc_inner, tc_x) - log2_add(self.tc[inner], self.tc[x]);
        if de > 0.0 && rng.uniform() >= (-beta * de).exp() {
            return;
        }
        // apply: x = (up, inner) with inner = (a, stay), sides kept
        self.children[inner] = [a, stay];
        self.children[x][1 - s] = up;
        std::mem::swap(&mut self.open[inner], scratch);
        self.tc[inner] = tc_inner;
        self.tc[x] = tc_x;
    }

    /// One sweep: every internal node, top-down, one tried move each; stopped early (the
    /// tree stays valid) when the clock, read every [`CLOCK_NODES`] nodes, passes `deadline`.
    fn sweep(
        &mut self,
        beta: f64,
        rng: &mut SplitMix,
        (stack, scratch): (&mut Vec<usize>, &mut Vec<u32>),
        deadline: Instant,
    ) {
        stack.clear();
        stack.push(self.root);
        let mut visited = 0usize;
        while let Some(x) = stack.pop() {
            if x < self.n {
                continue;
            }
            visited += 1;
            if visited.is_multiple_of(CLOCK_NODES) && Instant::now() >= deadline {
                return;
            }
            self.try_move(x, beta, rng, scratch);
            stack.extend(self.children[x]);
        }
    }

    /// The merges in SSA form (post-order from the root).
    fn merges(&self) -> Vec<[usize; 2]> {
        let mut id = vec![NONE; self.children.len()];
        id[..self.n]
            .iter_mut()
            .enumerate()
            .for_each(|(k, v)| *v = k);
        let mut merges = Vec::with_capacity(self.n - 1);
        let mut stack = vec![(self.root, false)];
        while let Some((x, done)) = stack.pop() {
            if x < self.n {
                continue;
            }
            let [a, b] = self.children[x];
            if done {
                merges.push([id[a], id[b]]);
                id[x] = self.n + merges.len() - 1;
            } else {
                stack.push((x, true));
                stack.push((b, false));
                stack.push((a, false));
            }
        }
        merges
    }
}

/// Anneals the tree `merges` (SSA form over operands labelled `ixs`, output labels `output`,
/// label dimensions `dims`) until `deadline` or for at most `max_sweeps` sweeps (β follows
/// whichever of the two is nearer its end), with the randomness of `seed`; returns the tree
/// with the fewest multiply-adds seen (never costlier than `merges`) and `log₂` of its
/// multiply-adds (the costing of `TreeStats`, to rounding). `merges` must be a complete tree
/// (`ixs.len() − 1` merges); anything else is returned as it is, with cost `+∞`.
pub(crate) fn anneal(
    ixs: &[Vec<usize>],
    output: &[usize],
    dims: &[f64],
    merges: &[[usize; 2]],
    deadline: Instant,
    max_sweeps: usize,
    seed: u64,
) -> (Vec<[usize; 2]>, f64) {
    let n = ixs.len();
    if n == 0 || merges.len() + 1 != n {
        return (merges.to_vec(), f64::INFINITY);
    }
    let mut t = Tree::new(ixs, output, dims, merges);
    let mut best = (merges.to_vec(), t.log2_flops());
    if n < 3 {
        return best; // no rotation exists
    }
    let start = Instant::now();
    let span = deadline
        .saturating_duration_since(start)
        .max(Duration::from_micros(1));
    let mut rng = SplitMix(seed ^ 0x5DEE_CE66_D1CE_4E5B);
    let (mut stack, mut scratch) = (Vec::new(), Vec::new());
    for sweep in 0..max_sweeps {
        let elapsed = start.elapsed();
        if elapsed >= span {
            break;
        }
        let frac = f64::max(
            elapsed.as_secs_f64() / span.as_secs_f64(),
            sweep as f64 / max_sweeps as f64,
        );
        let beta = BETA_START + (BETA_END - BETA_START) * frac;
        t.sweep(beta, &mut rng, (&mut stack, &mut scratch), deadline);
        let f = t.log2_flops();
        if f < best.1 {
            best = (t.merges(), f);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::ContractionTree;
    use crate::network::greedy::{Greedy, TreeStats};

    /// A ring of `n` matrices with a chord every third site, plus a hyperedge and an output
    /// label: every label rule appears.
    fn network(n: usize) -> (Vec<Vec<usize>>, Vec<usize>, Vec<usize>) {
        let mut ixs: Vec<Vec<usize>> = (0..n).map(|k| vec![k, (k + 1) % n]).collect();
        let mut l = n;
        for k in (0..n).step_by(3) {
            ixs[k].push(l);
            ixs[(k + n / 2) % n].push(l);
            l += 1;
        }
        for k in [1, 4, 9] {
            ixs[k].push(l); // a hyperedge on three operands
        }
        ixs[5].push(l + 1); // an output label
        let dims: Vec<usize> = (0..l + 2).map(|i| 2 + i % 3).collect();
        (ixs, vec![l + 1], dims)
    }

    #[test]
    fn annealed_trees_are_valid_costed_like_tree_stats_and_never_worse() {
        let (ixs, output, dims) = network(30);
        let fdims: Vec<f64> = dims.iter().map(|&d| d as f64).collect();
        let start = Greedy::OPT_EINSUM.run(&ixs, &output, &fdims).merges;
        let start_flops = TreeStats::of(&ixs, &output, &dims, &start).flops;
        // the label-list costing agrees with the label walk on the start tree
        let t = Tree::new(&ixs, &output, &fdims, &start);
        assert!((t.log2_flops().exp2() - start_flops).abs() <= 1e-9 * start_flops);
        for seed in 0..4 {
            let deadline = Instant::now() + Duration::from_secs(3600);
            let (m, f) = anneal(&ixs, &output, &fdims, &start, deadline, 300, seed);
            assert!(ContractionTree::new(ixs.len(), m.clone()).is_ok());
            let exact = TreeStats::of(&ixs, &output, &dims, &m);
            assert!(
                (f - exact.log2_flops).abs() <= 1e-9,
                "{f} vs {}",
                exact.log2_flops
            );
            assert!(exact.flops <= start_flops * (1.0 + 1e-12));
        }
    }

    #[test]
    fn annealing_improves_a_bad_tree() {
        // a chain contracted from both ends towards the middle in the worst order: merge the
        // far ends first (an outer product), then the rest
        let (ixs, output, dims) = network(24);
        let fdims: Vec<f64> = dims.iter().map(|&d| d as f64).collect();
        let n = ixs.len();
        let mut merges = vec![[0, n / 2]];
        let mut acc = n;
        for k in (1..n).filter(|&k| k != n / 2) {
            merges.push([acc, k]);
            acc = n + merges.len() - 1;
        }
        let bad = TreeStats::of(&ixs, &output, &dims, &merges).flops;
        let deadline = Instant::now() + Duration::from_secs(3600);
        let (m, _) = anneal(&ixs, &output, &fdims, &merges, deadline, 1000, 1);
        let f = TreeStats::of(&ixs, &output, &dims, &m).flops;
        assert!(f < bad / 2.0, "{f} vs {bad}");
    }

    /// A ring of `n` operands with a seeded random perfect matching of chords (3-regular).
    fn cubic(n: usize) -> Vec<Vec<usize>> {
        let mut ixs: Vec<Vec<usize>> = (0..n).map(|k| vec![k, (k + n - 1) % n]).collect();
        let mut rng = SplitMix(11);
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        for (c, pair) in order.chunks(2).enumerate() {
            ixs[pair[0]].push(n + c);
            ixs[pair[1]].push(n + c);
        }
        ixs
    }

    #[test]
    fn costs_beyond_f64_are_compared_in_log2() {
        // bonds of 2⁵⁰ on a 120-vertex cubic graph: the greedy tree costs beyond 2¹⁰²⁴
        let n = 120;
        let ixs = cubic(n);
        let dims = vec![1usize << 50; n + n / 2];
        let fdims = vec![(1u64 << 50) as f64; n + n / 2];
        let greedy = Greedy::OPT_EINSUM.run(&ixs, &[], &fdims).merges;
        let g = TreeStats::of(&ixs, &[], &dims, &greedy);
        assert!(
            g.flops.is_infinite() && g.log2_flops > 1024.0,
            "{}",
            g.log2_flops
        );
        let deadline = Instant::now() + Duration::from_secs(3600);
        let (m, log2) = anneal(&ixs, &[], &fdims, &greedy, deadline, 2000, 3);
        let exact = TreeStats::of(&ixs, &[], &dims, &m);
        assert!((log2 - exact.log2_flops).abs() <= 1e-9 * log2);
        assert!(log2 < g.log2_flops - 50.0, "{log2} vs {}", g.log2_flops);
    }

    #[test]
    fn annealing_beats_the_greedy_tree_on_a_random_cubic_graph() {
        let n = 80;
        let ixs = cubic(n);
        let dims = vec![2usize; n + n / 2];
        let fdims = vec![2.0; n + n / 2];
        let greedy = Greedy::OPT_EINSUM.run(&ixs, &[], &fdims).merges;
        let g = TreeStats::of(&ixs, &[], &dims, &greedy).flops;
        let deadline = Instant::now() + Duration::from_secs(3600);
        let (m, log2) = anneal(&ixs, &[], &fdims, &greedy, deadline, 3000, 5);
        let exact = TreeStats::of(&ixs, &[], &dims, &m);
        assert!((log2 - exact.log2_flops).abs() <= 1e-9);
        let f = exact.flops;
        assert!(f < g / 4.0, "annealed {f:e} vs greedy {g:e}");
    }
}
