//! Partition-based contraction trees: recursive bisection of the network's hypergraph, the
//! method of cotengra's `PartitionTreeBuilder` (Gray and Kourtis, *Hyper-optimized tensor
//! network contraction*, Quantum 5, 410 (2021), §III B; there with KaHyPar, here with our own
//! bisection).
//!
//! The operands are split in two parts that share as little as possible (the cut: the sum of
//! `log₂ d` over the labels held on both sides, i.e. the log of the size of the merge that
//! joins the parts), each part is split again, down to groups of at most `cutoff` operands,
//! which are contracted by the greedy heuristic; the tree follows the splits upwards. Each
//! bisection grows one part breadth-first from a random operand to half the group, then
//! improves it by Fiduccia–Mattheyses passes (*A linear-time heuristic for improving network
//! partitions*, DAC 1982): move the operand of best gain that keeps both parts within
//! `(½ + imbalance)·g`, lock it, and keep the best prefix of the moves. Labels held by more
//! than [`HYPEREDGE_CAP`] operands of a group are left out of the cut (a hyperedge that wide
//! is cut by any balanced split). [`Partition::sampled`] draws `cutoff`, `imbalance` and the
//! seed, for the hyper-optimizer of [`super::Optimizer::Hyper`].

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use std::time::{Duration, Instant};

use rayon::prelude::*;

use super::anneal::anneal;
use super::greedy::{Greedy, SplitMix, TreeStats};

/// Labels held by more operands of a group than this do not count in its cut.
const HYPEREDGE_CAP: usize = 64;

/// Grown and refined splits per bisection, the best cut kept.
const RESTARTS: usize = 4;

/// Fiduccia–Mattheyses passes per bisection at most (each stops early without gain).
const PASSES: usize = 6;

/// The share of [`hyper`]'s budget spent sampling trees; the rest anneals the best of them.
/// Chosen on the quality networks of docs/PERFORMANCE.md (one run each): with 0.3 or 0.5 the
/// random graphs' trees were costlier (the annealing gains more than further samples).
const SAMPLE_SHARE: f64 = 0.1;

/// The parameters of one partition-based tree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Partition {
    /// groups of at most this many operands are contracted greedily
    pub(crate) cutoff: usize,
    /// each part holds at most `(½ + imbalance)` of its group
    pub(crate) imbalance: f64,
    /// the randomness of the starting operands and of ties
    pub(crate) seed: u64,
}

impl Partition {
    /// Trial `trial` of a hyper-optimization seeded by `seed`: `cutoff` in `2..=16`,
    /// `imbalance` in `[0.01, 0.5)`.
    pub(crate) fn sampled(seed: u64, trial: u64) -> Partition {
        let mut rng = SplitMix(seed ^ trial.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xA5A5_A5A5);
        Partition {
            cutoff: 2 + (rng.next() % 15) as usize,
            imbalance: 0.01 + 0.49 * rng.uniform(),
            seed: rng.next(),
        }
    }

    /// The tree's merges (SSA form) for operands labelled `ixs` (each label once per operand),
    /// output labels `output` and label dimensions `dims`.
    /// Past `deadline` (if any), groups are no longer split: each becomes a leaf whose greedy
    /// run is cut at the deadline too (see `Greedy::run_until`).
    pub(crate) fn run(
        &self,
        ixs: &[Vec<usize>],
        output: &[usize],
        dims: &[f64],
        deadline: Option<Instant>,
    ) -> Vec<[usize; 2]> {
        let n = ixs.len();
        let nl = dims.len();
        let mut holders = vec![Vec::new(); nl];
        for (k, ax) in ixs.iter().enumerate() {
            for &l in ax {
                holders[l].push(k);
            }
        }
        let mut is_out = vec![false; nl];
        for &l in output {
            is_out[l] = true;
        }
        let mut b = Builder {
            ixs,
            holders,
            is_out,
            dims,
            w: dims.iter().map(|&d| d.max(1.0).log2()).collect(),
            cutoff: self.cutoff.max(2),
            imbalance: self.imbalance.clamp(0.0, 0.5),
            rng: SplitMix(self.seed),
            merges: Vec::with_capacity(n.saturating_sub(1)),
            member: vec![0; n],
            stamp: 0,
            side: vec![false; n],
            count: vec![[0; 2]; nl],
            deadline,
        };
        if n > 1 {
            b.build((0..n).collect());
        }
        b.merges
    }
}

/// [`super::Optimizer::Hyper`]: starting from `best` (a tree and `log₂` of its flops, as
/// `TreeStats::log2_flops`), partition-based
/// and random-greedy trials alternately, in batches of twice the rayon pool's threads, for
/// [`SAMPLE_SHARE`] of `budget` (an adaptive share, three quarters of each batch to the method
/// that found the best tree, was tried and made the 8×8 lattice 1.5× costlier); then one
/// annealing chain per thread of the pool ([`anneal`], seeds derived from `seed`) from the best
/// sampled tree until `budget` is spent. The tree with the fewest flops (`search_dims`) is
/// returned. The choice within a batch is made in trial order, so it does not depend on the
/// threads.
pub(crate) fn hyper(
    ixs: &[Vec<usize>],
    output: &[usize],
    dims: &[f64],
    search_dims: &[usize],
    budget: Duration,
    seed: u64,
    best: (Vec<[usize; 2]>, f64),
) -> Vec<[usize; 2]> {
    let start = Instant::now();
    let sample_budget = budget.mul_f64(SAMPLE_SHARE);
    // `None`: a budget too large for the clock, no deadline
    let (until, deadline) = (start.checked_add(sample_budget), start.checked_add(budget));
    let (mut best, mut best_flops) = best;
    let threads = rayon::current_num_threads().max(1) as u64;
    let batch = 2 * threads;
    let mut trial = 0u64;
    while start.elapsed() < sample_budget {
        let runs: Vec<(Vec<[usize; 2]>, f64)> = (trial..trial + batch)
            .into_par_iter()
            .map(|t| {
                let merges = if t % 2 == 0 {
                    Partition::sampled(seed, t / 2).run(ixs, output, dims, until)
                } else {
                    Greedy::sampled(seed, t / 2)
                        .run_until(ixs, output, dims, until)
                        .merges
                };
                let f = TreeStats::of(ixs, output, search_dims, &merges).log2_flops;
                (merges, f)
            })
            .collect();
        for (m, f) in runs {
            if f < best_flops {
                (best, best_flops) = (m, f);
            }
        }
        trial += batch;
    }
    // a budget beyond the clock anneals for a year
    let deadline = deadline.unwrap_or_else(|| start + Duration::from_secs(365 * 86_400));
    if Instant::now() >= deadline || ixs.len() < 3 {
        return best;
    }
    let annealed: Vec<(Vec<[usize; 2]>, f64)> = (0..threads)
        .into_par_iter()
        .map(|k| {
            anneal(
                ixs,
                output,
                dims,
                &best,
                deadline,
                usize::MAX,
                seed ^ k.wrapping_mul(0x9E37),
            )
        })
        .collect();
    for (m, f) in annealed {
        if f < best_flops {
            (best, best_flops) = (m, f);
        }
    }
    best
}

struct Builder<'a> {
    ixs: &'a [Vec<usize>],
    holders: Vec<Vec<usize>>,
    is_out: Vec<bool>,
    dims: &'a [f64],
    /// `log₂ d` of every label: its weight in a cut
    w: Vec<f64>,
    cutoff: usize,
    imbalance: f64,
    rng: SplitMix,
    merges: Vec<[usize; 2]>,
    /// `member[k] == stamp` while operand `k` is in the group at hand
    member: Vec<u64>,
    stamp: u64,
    /// the part of each operand of the group (`true`: the second)
    side: Vec<bool>,
    /// per label: its holders in each part of the group at hand
    count: Vec<[usize; 2]>,
    /// past it, groups are no longer split and leaves' greedy runs are cut
    deadline: Option<Instant>,
}

/// A heap entry: a move's gain, a random tie-break, the operand.
#[derive(PartialEq)]
struct Move(f64, u64, usize);

impl Eq for Move {}

impl PartialOrd for Move {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Move {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

impl Builder<'_> {
    fn n(&self) -> usize {
        self.ixs.len()
    }

    /// Marks `group` as the group at hand.
    fn enter(&mut self, group: &[usize]) {
        self.stamp += 1;
        for &k in group {
            self.member[k] = self.stamp;
        }
    }

    /// The value holding the contraction of `group` (merges appended).
    fn build(&mut self, group: Vec<usize>) -> usize {
        let late = self.deadline.is_some_and(|d| Instant::now() >= d);
        if group.len() <= self.cutoff || late {
            return self.leaf(&group);
        }
        let (a, b) = self.bisect(&group);
        if a.is_empty() || b.is_empty() {
            return self.leaf(&group);
        }
        let x = self.build(a);
        let y = self.build(b);
        self.merges.push([x, y]);
        self.n() + self.merges.len() - 1
    }

    /// A group contracted by opt_einsum's greedy: its labels held outside it (or in the
    /// output) stay open.
    fn leaf(&mut self, group: &[usize]) -> usize {
        if let [only] = group {
            return *only;
        }
        let inputs: Vec<Vec<usize>> = group.iter().map(|&k| self.ixs[k].clone()).collect();
        // a label is open when in the output or held outside the group: fewer of its
        // holders inside than in all (`count` is scratch here: [holders inside, listed])
        for ax in &inputs {
            for &l in ax {
                self.count[l] = [0, 0];
            }
        }
        for ax in &inputs {
            for &l in ax {
                self.count[l][0] += 1;
            }
        }
        let mut open: Vec<usize> = Vec::new();
        for ax in &inputs {
            for &l in ax {
                let c = &mut self.count[l];
                if c[1] == 0 && (self.is_out[l] || c[0] < self.holders[l].len()) {
                    c[1] = 1;
                    open.push(l);
                }
            }
        }
        let local = Greedy::OPT_EINSUM
            .run_until(&inputs, &open, self.dims, self.deadline)
            .merges;
        let (g, base) = (group.len(), self.n() + self.merges.len());
        for [a, b] in local {
            let global = |v: usize| if v < g { group[v] } else { base + v - g };
            self.merges.push([global(a), global(b)]);
        }
        self.n() + self.merges.len() - 1
    }

    /// The labels of operand `k` that count in the group's cut.
    fn cut_labels(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        self.ixs[k].iter().copied().filter(move |&l| {
            let c = self.count[l];
            c[0] + c[1] >= 2 && c[0] + c[1] <= HYPEREDGE_CAP
        })
    }

    /// The change of the cut when operand `k` moves to the other part (positive: smaller).
    fn gain(&self, k: usize) -> f64 {
        let s = usize::from(self.side[k]);
        self.cut_labels(k)
            .map(|l| {
                let (own, other) = (self.count[l][s], self.count[l][1 - s]);
                if own == 1 && other > 0 {
                    self.w[l]
                } else if own > 1 && other == 0 {
                    -self.w[l]
                } else {
                    0.0
                }
            })
            .sum()
    }

    fn flip(&mut self, k: usize) {
        let s = usize::from(self.side[k]);
        for i in 0..self.ixs[k].len() {
            let l = self.ixs[k][i];
            self.count[l][s] -= 1;
            self.count[l][1 - s] += 1;
        }
        self.side[k] = !self.side[k];
    }

    /// Splits `group` in two (see the module docs): the best cut of [`RESTARTS`] grown and
    /// refined splits.
    fn bisect(&mut self, group: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let mut best: Option<(f64, Vec<bool>)> = None;
        for _ in 0..RESTARTS {
            self.split(group);
            let mut cut = 0.0;
            for &k in group {
                for l in self.cut_labels(k) {
                    let c = self.count[l];
                    // counted once, by its first holder in the group
                    if c[0] > 0
                        && c[1] > 0
                        && self.ixs[k].contains(&l)
                        && self.first_in_group(l) == k
                    {
                        cut += self.w[l];
                    }
                }
            }
            if best.as_ref().is_none_or(|(b, _)| cut < *b) {
                best = Some((cut, group.iter().map(|&k| self.side[k]).collect()));
            }
        }
        let sides = best.map(|b| b.1).unwrap_or_default();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (&k, &side) in group.iter().zip(&sides) {
            if side { b.push(k) } else { a.push(k) }
        }
        (a, b)
    }

    /// The first holder of label `l` in the group at hand.
    fn first_in_group(&self, l: usize) -> usize {
        self.holders[l]
            .iter()
            .copied()
            .find(|&k| self.member[k] == self.stamp)
            .unwrap_or(usize::MAX)
    }

    /// One grown and refined split of `group` into `self.side`.
    fn split(&mut self, group: &[usize]) {
        let g = group.len();
        self.enter(group);
        let stamp = self.stamp;
        for &k in group {
            self.side[k] = true;
        }
        // grow the first part breadth-first from random operands
        let half = g / 2;
        let mut grown = 0;
        let mut seen: Vec<usize> = Vec::new();
        let mut queue: VecDeque<usize> = VecDeque::new();
        let mut visited = vec![false; g];
        let pos = |k: usize, group: &[usize]| group.binary_search(&k).ok();
        while grown < half {
            let Some(k) = queue.pop_front() else {
                let unvisited: Vec<usize> = (0..g).filter(|&i| !visited[i]).collect();
                let i = unvisited[(self.rng.next() % unvisited.len() as u64) as usize];
                visited[i] = true;
                queue.push_back(group[i]);
                continue;
            };
            self.side[k] = false;
            grown += 1;
            seen.push(k);
            for &l in &self.ixs[k] {
                if self.holders[l].len() > HYPEREDGE_CAP {
                    continue;
                }
                for &u in &self.holders[l] {
                    if self.member[u] != stamp {
                        continue;
                    }
                    if let Some(i) = pos(u, group).filter(|&i| !visited[i]) {
                        visited[i] = true;
                        queue.push_back(u);
                    }
                }
            }
        }
        // the holders of every label in each part
        for &k in group {
            for &l in &self.ixs[k] {
                self.count[l] = [0, 0];
            }
        }
        for &k in group {
            for &l in &self.ixs[k] {
                self.count[l][usize::from(self.side[k])] += 1;
            }
        }
        let max_part = ((g as f64) * (0.5 + self.imbalance))
            .ceil()
            .max(half as f64 + 1.0) as usize;
        let mut size = [half, g - half];
        for _ in 0..PASSES {
            if !self.pass(group, &mut size, max_part) {
                break;
            }
        }
    }

    /// One Fiduccia–Mattheyses pass; `true` when it reduced the cut.
    fn pass(&mut self, group: &[usize], size: &mut [usize; 2], max_part: usize) -> bool {
        let g = group.len();
        let mut locked = vec![false; g];
        let index = |k: usize| group.binary_search(&k).unwrap_or(0);
        let mut gain: Vec<f64> = group.iter().map(|&k| self.gain(k)).collect();
        let mut heap: BinaryHeap<Move> = group
            .iter()
            .enumerate()
            .map(|(i, &k)| Move(gain[i], self.rng.next(), k))
            .collect();
        let (mut total, mut best, mut best_len) = (0.0f64, 0.0f64, 0usize);
        let mut moves: Vec<usize> = Vec::new();
        while let Some(Move(gv, _, k)) = heap.pop() {
            let i = index(k);
            if locked[i] || gv != gain[i] {
                continue; // stale
            }
            let to = 1 - usize::from(self.side[k]);
            if size[to] + 1 > max_part {
                continue;
            }
            self.flip(k);
            size[to] += 1;
            size[1 - to] -= 1;
            locked[i] = true;
            moves.push(k);
            total += gv;
            if total > best + 1e-9 {
                (best, best_len) = (total, moves.len());
            }
            for &l in &self.ixs[k] {
                if self.holders[l].len() > HYPEREDGE_CAP {
                    continue;
                }
                for &u in &self.holders[l] {
                    if self.member[u] != self.stamp {
                        continue;
                    }
                    let j = index(u);
                    if !locked[j] {
                        gain[j] = self.gain(u);
                        heap.push(Move(gain[j], self.rng.next(), u));
                    }
                }
            }
        }
        for &k in moves[best_len..].iter().rev() {
            let from = usize::from(self.side[k]);
            self.flip(k);
            size[from] -= 1;
            size[1 - from] += 1;
        }
        best > 1e-9
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::ContractionTree;

    #[test]
    fn trees_are_valid_for_every_parameter() {
        // a ring of 40 matrices, an outer product and a hyperedge
        let n = 40;
        let mut ixs: Vec<Vec<usize>> = (0..n).map(|k| vec![k, (k + 1) % n]).collect();
        ixs.push(vec![n]);
        ixs.push(vec![n + 1, 0]);
        ixs.push(vec![n + 1, 5]);
        let dims = vec![3.0; n + 2];
        for trial in 0..20 {
            let p = Partition::sampled(7, trial);
            let merges = p.run(&ixs, &[n], &dims, None);
            assert!(ContractionTree::new(ixs.len(), merges).is_ok(), "{p:?}");
        }
        assert!(Partition::sampled(1, 1) == Partition::sampled(1, 1));
    }
}
