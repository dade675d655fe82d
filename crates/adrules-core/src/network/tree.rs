//! Contraction order: [`ContractionTree`], the [`Order`] to build one, and the
//! [`Optimizer`]s that search for a cheap one, within a [`Search`] budget.
//!
//! # Greedy and random greedy: this crate's own
//! [`Optimizer::Greedy`] is the greedy heuristic of opt_einsum (Daniel G. A. Smith and Johnnie
//! Gray, *opt_einsum – A Python package for optimizing contraction order for einsum-like
//! expressions*, JOSS 3(26), 753, 2018), implemented here in near-linear time (candidate pairs
//! only through shared summed labels, at most 8 live holders of a hyperedge scanned, a binary heap
//! with lazy deletion, per-label holder counts, exact integer costs) and run in four
//! variants: opt_einsum's own, reproduced tree for tree on networks whose labels have at most
//! 9 holders and no repeated label sets (a test compares costs with
//! opt_einsum 3.4.0's on lattices, random graphs and an MPS norm), and three that differ in
//! the queue policy and cost weight. [`Optimizer::RandomGreedy`] samples randomised variants
//! within the budget; [`Optimizer::Auto`] (the default for Einstein strings) adds a fixed
//! number of them, so it stays deterministic (unless a run reaches the budget, see
//! [`Search`]). omeco's greedy (0.2.6) grows about as `n³`
//! (5.5 s for an 800-tensor MPS norm, where this one takes about a millisecond) and breaks
//! ties in hash-map order (its trees vary between runs); on the networks of the benches this
//! one's trees cost the same or less (a test checks it).
//!
//! # Exhaustive and TreeSA: omeco
//! The exact and annealing searches come from [omeco](https://crates.io/crates/omeco) (MIT),
//! the Rust port of OMEinsumContractionOrders.jl by the authors of OMEinsum.jl, rather than
//! from opt-einsum-path (Apache-2.0, a port of Python's opt_einsum):
//! - **quality of paths**: omeco offers an exact dynamic-programming search (minimum flops,
//!   per connected component) and TreeSA (simulated annealing on trees, the method of choice
//!   for large tensor networks, Kalachev et al. 2021); the opt_einsum family covers small
//!   networks equally well (optimal, dp) but has no tree annealing for large ones;
//! - **dependency weight**: omeco's dependencies (rand, rayon, serde, serde_json, thiserror,
//!   priority-queue) are already in this workspace except priority-queue; opt-einsum-path
//!   pulls in num (big integers), itertools, lazy_static and the duplicate proc-macro, and
//!   takes networks as strings that it parses again;
//! - **licence**: MIT sits inside this workspace's `MIT OR Apache-2.0`; an Apache-2.0-only
//!   dependency would not;
//! - **API**: omeco takes integer labels and returns a binary tree (`NestedEinsum`), which
//!   maps one to one onto [`ContractionTree`].
//!
//! omeco's searches cannot be interrupted: the [`Search`] budget decides whether to start
//! them and how long to wait (see [`Search`]), so planning never hangs. Both crates are
//! young, single-maintainer ports; the tree they return is validated here like any
//! user-supplied tree, so a defect there surfaces as a typed error, not a wrong number.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ::omeco::{ExhaustiveSearch, optimize_exhaustive};
use rayon::prelude::*;

use self::omeco_search::{EXHAUSTIVE_RATE, exhaustive_work, flatten, omeco_code, treesa};

use super::greedy::{Greedy, TreeStats};
use super::partition::hyper;
use super::structure::{Label, Network, Notation};
use crate::error::{Error, Result};

/// A binary contraction tree over `operands` tensors, in SSA form: values `0..operands` are
/// the operands (after their partial traces), and merge `k` contracts two earlier values into
/// value `operands + k`. A full tree has `operands − 1` merges and uses every value except
/// the last exactly once; the last value is the network's result. Merging two values
/// contracts every label they share; merging values with no shared label is an outer product.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContractionTree {
    operands: usize,
    merges: Vec<[usize; 2]>,
}

impl ContractionTree {
    /// Validates a tree given as merges in SSA form (see the type docs).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero operands; [`Error::CountMismatch`] (argument
    /// `"merges"`) when there are not `operands − 1` merges; [`Error::InvalidIndices`]
    /// (argument `"merge k"`) when a merge uses a value that does not exist yet, or one that an
    /// earlier merge already consumed, or the same value twice.
    pub fn new(operands: usize, merges: Vec<[usize; 2]>) -> Result<Self> {
        if operands == 0 {
            return Err(Error::invalid(
                "operands",
                "a tree needs at least one operand",
            ));
        }
        if merges.len() != operands - 1 {
            return Err(Error::CountMismatch {
                arg: "merges".into(),
                expected: operands - 1,
                actual: merges.len(),
            });
        }
        let mut used = vec![false; 2 * operands - 1];
        for (k, m) in merges.iter().enumerate() {
            let available = operands + k;
            for (i, &v) in m.iter().enumerate() {
                let reason = if v >= available {
                    Some(format!(
                        "value {v} does not exist yet (values 0..{available})"
                    ))
                } else if used[v] || (i == 1 && m[0] == v) {
                    Some(format!("value {v} is already consumed"))
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(Error::indices(format!("merge {k}"), m, reason));
                }
                used[v] = true;
            }
        }
        Ok(ContractionTree { operands, merges })
    }

    /// Number of operands (leaves).
    pub fn operands(&self) -> usize {
        self.operands
    }

    /// The merges, in execution order.
    pub fn merges(&self) -> &[[usize; 2]] {
        &self.merges
    }
}

/// A contraction-order search. [`Greedy`](Optimizer::Greedy) is this crate's own (opt_einsum's
/// greedy heuristic); [`Exhaustive`](Optimizer::Exhaustive) and [`TreeSa`](Optimizer::TreeSa)
/// come from [omeco](https://crates.io/crates/omeco). Every search is bounded by the
/// [`Search`] budget: planning never hangs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Optimizer {
    /// [`Exhaustive`](Optimizer::Exhaustive) up to
    /// [`AUTO_EXHAUSTIVE_MAX`](Optimizer::AUTO_EXHAUSTIVE_MAX) operands; above, the
    /// [`Greedy`](Optimizer::Greedy) runs and
    /// [`AUTO_SAMPLES`](Optimizer::AUTO_SAMPLES) seeded
    /// [`RandomGreedy`](Optimizer::RandomGreedy) trials (seed 0: deterministic while no run
    /// reaches the budget, see [`Search`]), the tree with the fewest flops kept. Chosen from the order-quality table of docs/PERFORMANCE.md: on
    /// random 3-regular graphs the trials cut the greedy cost by 10⁵ to 10⁶, on lattices by
    /// 1.2 to 1.5×, and planning, the runs spread over the rayon pool, takes less time than
    /// opt_einsum's greedy on each network of the table (2 threads). [`Hyper`](Optimizer::Hyper)
    /// finds far cheaper trees on lattices and random graphs (the same table) but spends its
    /// whole budget and depends on the clock, so it is asked for, not the default.
    #[default]
    Auto,
    /// Greedy pairwise search after opt_einsum's `greedy` (Daniel G. A. Smith and Johnnie
    /// Gray, *opt_einsum – A Python package for optimizing contraction order for einsum-like
    /// expressions*, JOSS 3(26), 753, 2018): repeatedly merges the connected pair (sharing a
    /// summed label) of least cost `size(result) − α·(size(a) + size(b))`; then joins
    /// disconnected parts by outer products, smallest first. Four deterministic runs, and the
    /// tree with the fewest flops is kept (the first on a tie): opt_einsum's own (α = 1, only
    /// each new value's cheapest pair queued, ties by the larger SSA id), so the tree is never
    /// costlier than opt_einsum's greedy on a network without repeated label sets (which
    /// opt_einsum merges eagerly first) and without labels held by more than 9 operands
    /// (beyond, candidates are capped, see below); α = 1 with every pair queued; and α = 0 (omeco's
    /// and OMEinsumContractionOrders' cost, the size of the result) with both queues.
    /// Neither queue policy dominates (the order-quality table of docs/PERFORMANCE.md). A
    /// label held by every operand is treated as open while choosing, and at most 8 live
    /// holders of a hyperedge are scanned for candidates. `O(n · r · log n)` for `n` operands
    /// of rank at most `r` (10,000 scalars plan in 8 ms, 10,000 operands with hyperedges of
    /// degree 5,000 in 0.13 s; on random graphs `r` grows with `n`: on a 10,000-vertex random
    /// 3-regular graph a run takes seconds). The runs are cut at the [`Search`] budget, or
    /// after 0.25 s if the budget is shorter: past it a run joins the values it has left,
    /// smallest first, in `O(values · (rank + log values))`, so its tree is then costlier and
    /// depends on the clock.
    Greedy,
    /// Exact dynamic programming minimising the total flop count within each connected
    /// component (omeco `ExhaustiveSearch`); components are joined by outer products from the
    /// smallest up. Exponential: about `3^k · labels` steps for a component of `k` operands;
    /// when that estimate does not fit the [`Search`] budget, the search is not started and
    /// the [`Greedy`](Optimizer::Greedy) tree is returned instead.
    Exhaustive,
    /// Simulated annealing on trees (omeco `TreeSA::fast()`: one trial, 100 temperatures,
    /// up to 20 sweeps each; Kalachev, Panteleev, Zhou, Yung, *Recursive multi-tensor
    /// contraction for XEB verification of quantum circuits*, 2021), for large networks where
    /// greedy trees are too costly. The sweeps per temperature are scaled down to fit half the
    /// [`Search`] budget (estimated from the network's size); when even one sweep per
    /// temperature does not fit, or the annealing has not returned when the budget runs out,
    /// the [`Greedy`](Optimizer::Greedy) tree is returned. Of the annealed and the greedy
    /// tree, the one with fewer flops is kept. Not reproducible between runs: omeco's greedy
    /// start breaks ties in hash-map order (a 10×10 lattice gave 2.5e9 to 3.8e9 multiply-adds
    /// in five runs).
    TreeSa,
    /// Randomised greedy sampling within the [`Search`] budget (opt_einsum's
    /// `RandomGreedy`, cotengra's hyper-optimised greedy): the [`Greedy`](Optimizer::Greedy)
    /// trees first, then greedy runs with a random cost weight α ∈ [0, 2], queue policy, tie
    /// order and a multiplicative Gaussian jitter of relative size 10⁻³ to 1 on every pair's
    /// cost, drawn from [`Search::seed`], until the budget is spent; the tree with the fewest
    /// flops is kept. Anytime: the best tree so far is returned when the budget ends (the run
    /// under way then is cut, see [`Greedy`](Optimizer::Greedy)); the trials are
    /// deterministic for a seed, but how many fit, and so the tree, depends on the machine.
    RandomGreedy,
    /// A hyper-optimizer within the [`Search`] budget (cotengra's `HyperOptimizer`, Gray and
    /// Kourtis, Quantum 5, 410 (2021)), followed by tree annealing: the
    /// [`Greedy`](Optimizer::Greedy) trees first; then, for a tenth of the budget,
    /// alternately partition-based trees (recursive bisection of the network's hypergraph,
    /// Fiduccia–Mattheyses refinement, groups below a sampled cutoff contracted greedily; the
    /// cutoff, the balance and the seed sampled from [`Search::seed`]) and
    /// [`RandomGreedy`](Optimizer::RandomGreedy) trials, in batches over the rayon pool; then,
    /// for the rest of the budget, one simulated-annealing chain per thread of the pool from
    /// the best tree so far (TreeSA's local rotations, Kalachev, Panteleev, Zhou, Yung,
    /// arXiv:2108.05665 (2021), with the energy of OMEinsumContractionOrders.jl: the change of
    /// `log₂` of the two altered merges' multiply-adds; β rising from 1 to 8 per bit over the
    /// remaining time). The tree with the fewest flops is kept (anytime: sample runs are cut
    /// at the end of the sampling share, the annealing reads the clock every 256 nodes of a
    /// sweep; the greedy start gets at least 0.25 s, as for every search). How many trials and sweeps fit
    /// depends on the machine, so the tree does too. On the quality networks of
    /// docs/PERFORMANCE.md, 2 s give trees at most as costly as cotengra's
    /// `HyperOptimizer` finds in 10 s (with KaHyPar, with or without its annealing): equal
    /// or up to 1.3× cheaper on the lattices and the MPS norm, 14× to 10²⁵× cheaper on
    /// random 3-regular graphs.
    Hyper,
}

impl Optimizer {
    /// Every optimizer, in declaration order (for benches, fuzzing and tests that try each).
    pub const ALL: [Optimizer; 6] = [
        Optimizer::Auto,
        Optimizer::Greedy,
        Optimizer::Exhaustive,
        Optimizer::TreeSa,
        Optimizer::RandomGreedy,
        Optimizer::Hyper,
    ];

    /// Largest operand count for which [`Optimizer::Auto`] searches exhaustively.
    pub const AUTO_EXHAUSTIVE_MAX: usize = 10;

    /// Seeded [`RandomGreedy`](Optimizer::RandomGreedy) trials (seed 0, so the tree is
    /// deterministic) that [`Optimizer::Auto`] adds to the [`Greedy`](Optimizer::Greedy) runs
    /// above [`AUTO_EXHAUSTIVE_MAX`](Optimizer::AUTO_EXHAUSTIVE_MAX) operands.
    pub const AUTO_SAMPLES: u64 = 16;
}

/// An [`Optimizer`] with its time budget and random seed: `Order::Search(Search::new(opt))` is
/// `Order::Optimize(opt)`.
///
/// - **budget** (default [`Search::DEFAULT_BUDGET`], 2 s): wall-clock time the search may
///   take. omeco's searches cannot be interrupted, so the budget acts before and around them:
///   an exhaustive search whose estimated work exceeds it is not started, the annealing's
///   schedule is shortened to fit half of it, and an annealing still running when it ends is
///   abandoned (its thread finishes in the background; its result is dropped) for the greedy
///   tree; [`RandomGreedy`](Optimizer::RandomGreedy) and [`Hyper`](Optimizer::Hyper) sample
///   until it is spent. The greedy runs (the start of every search, and
///   [`Auto`](Optimizer::Auto)'s fixed trials) are cut at the budget, but get at least
///   0.25 s: a run past it joins the values it has left, smallest first, and a variant not
///   started by then is skipped. Measured with `cargo run --release -p adrules-benches --bin
///   planner-budget` on networks of 10,000 operands: no search overran its budget by more
///   than 0.27 s (docs/PERFORMANCE.md).
/// - **seed** (default 0): the randomness of [`TreeSa`](Optimizer::TreeSa),
///   [`RandomGreedy`](Optimizer::RandomGreedy) and [`Hyper`](Optimizer::Hyper). omeco 0.2.6 seeds its generator with a fixed
///   constant and takes no seed, so for TreeSA a non-zero seed relabels the network (a seeded
///   shuffle of the operands, which changes the annealing's trajectory but not the network);
///   seed 0 keeps omeco's own order. The other optimizers ignore it.
///
/// A search whose budget is exceeded still returns a valid tree (the best found so far, at
/// least the greedy one). Plans for the same network, shapes and search are reproducible for
/// [`Auto`](Optimizer::Auto), [`Greedy`](Optimizer::Greedy) and
/// [`Exhaustive`](Optimizer::Exhaustive) (their budget decisions aside: an exhaustive search
/// not started, a greedy run cut); not for
/// [`RandomGreedy`](Optimizer::RandomGreedy) and [`Hyper`](Optimizer::Hyper) (how many trials
/// fit depends on the clock) nor
/// [`TreeSa`](Optimizer::TreeSa) (omeco's hash-map ties, and the clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Search {
    optimizer: Optimizer,
    budget: Duration,
    seed: u64,
}

impl Default for Search {
    fn default() -> Self {
        Search::new(Optimizer::Auto)
    }
}

impl Search {
    /// Default time budget of a search.
    pub const DEFAULT_BUDGET: Duration = Duration::from_secs(2);

    /// `optimizer` with the default budget and seed 0.
    pub const fn new(optimizer: Optimizer) -> Self {
        Search {
            optimizer,
            budget: Search::DEFAULT_BUDGET,
            seed: 0,
        }
    }

    /// The same search with time budget `budget` (see the type docs; `Duration::ZERO` asks for
    /// the greedy tree whenever a search would take time; the greedy runs, and
    /// [`Optimizer::Auto`]'s fixed trials, still get 0.25 s; `Duration::MAX` means no limit).
    pub const fn with_budget(self, budget: Duration) -> Self {
        Search { budget, ..self }
    }

    /// The same search with seed `seed` (used by [`Optimizer::TreeSa`],
    /// [`Optimizer::RandomGreedy`] and [`Optimizer::Hyper`]).
    pub const fn with_seed(self, seed: u64) -> Self {
        Search { seed, ..self }
    }

    /// The optimizer.
    pub fn optimizer(&self) -> Optimizer {
        self.optimizer
    }

    /// The time budget.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl From<Optimizer> for Search {
    fn from(optimizer: Optimizer) -> Self {
        Search::new(optimizer)
    }
}

/// How to choose the contraction tree of a network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// The notation's default: for ncon, the ncon convention (positive labels in increasing
    /// order, see [`Order::Labels`]); for Einstein strings, [`Optimizer::Auto`] with the
    /// default [`Search`] budget.
    #[default]
    Default,
    /// The ncon sequence rule with an explicit label order (TensorOperations' `order`
    /// keyword): partial traces first; then, for each contracted label in this order that is
    /// still open between two values, contract those two values over every label they share
    /// (with a hyperedge, the two values holding it that come first, by their first operand);
    /// finally, join disconnected parts by outer products from left to right. The list must be
    /// a permutation of the network's contracted labels (traced ones included). Linear in
    /// the size of the network (times the number of holders of a hyperedge).
    Labels(Vec<Label>),
    /// An order searched by an [`Optimizer`] for the given shapes, with the default
    /// [`Search`] budget and seed.
    Optimize(Optimizer),
    /// An order searched for the given shapes, with an explicit budget and seed.
    Search(Search),
    /// An explicit tree.
    Tree(ContractionTree),
}

impl Order {
    /// [`Order::Labels`] from ncon labels.
    pub fn ncon(labels: &[i64]) -> Order {
        Order::Labels(labels.iter().map(|&l| Label::Int(l)).collect())
    }
}

/// Values and their labels while a tree is built by the sequence rule: live holders and holder
/// counts per label, so that each merge costs the ranks of its two values (plus the holders
/// of their labels).
struct Frontier {
    /// labels of each value (SSA ids)
    labels: Vec<Vec<usize>>,
    /// smallest operand in each value's subtree: the frontier's left-to-right order
    first: Vec<usize>,
    alive: Vec<bool>,
    /// live values holding each label
    holders: Vec<Vec<usize>>,
    is_out: Vec<bool>,
    merges: Vec<[usize; 2]>,
    /// scratch: `mark[l] == v` while merge `v` runs and label `l` is held by its second value
    mark: Vec<usize>,
}

impl Frontier {
    /// Merges values `i` and `j` (`i` first); the result keeps the labels still needed (in
    /// the output or in another live value): open and batch labels stay, the others are
    /// summed.
    fn merge(&mut self, i: usize, j: usize) {
        let v = self.labels.len();
        let mut res: Vec<usize> = Vec::with_capacity(self.labels[i].len() + self.labels[j].len());
        // labels of j marked with this merge's stamp: membership in O(1), the merge in
        // O(rank(i) + rank(j))
        for &l in &self.labels[j] {
            self.mark[l] = v;
        }
        for &l in &self.labels[i] {
            let shared = self.mark[l] == v;
            if shared {
                self.mark[l] = usize::MAX; // added from i
            }
            if self.is_out[l] || self.holders[l].len() > 1 + usize::from(shared) {
                res.push(l);
            }
        }
        for &l in &self.labels[j] {
            if self.mark[l] == v && (self.is_out[l] || self.holders[l].len() > 1) {
                res.push(l);
            }
        }
        for x in [i, j] {
            self.alive[x] = false;
            for &l in &self.labels[x] {
                let h = &mut self.holders[l];
                if let Some(p) = h.iter().position(|&y| y == x) {
                    h.swap_remove(p);
                }
            }
        }
        for &l in &res {
            self.holders[l].push(v);
        }
        self.merges.push([i, j]);
        self.first.push(self.first[i].min(self.first[j]));
        self.alive.push(true);
        self.labels.push(res);
    }
}

impl Network {
    /// The tree `order` asks for, given the dimension of every label (by id).
    pub(crate) fn tree(&self, label_dims: &[usize], order: &Order) -> Result<ContractionTree> {
        match (order, self.notation()) {
            (Order::Default, Notation::Ncon) => {
                let is_out = self.output_mask();
                let mut labels: Vec<Label> = (0..self.num_labels())
                    .filter(|&id| !is_out[id])
                    .map(|id| self.label(id))
                    .collect();
                labels.sort();
                self.sequence_tree(&labels)
            }
            (Order::Default, Notation::Einsum) => {
                self.optimized_tree(label_dims, Search::default())
            }
            (Order::Labels(labels), _) => self.sequence_tree(labels),
            (Order::Optimize(opt), _) => self.optimized_tree(label_dims, Search::new(*opt)),
            (Order::Search(search), _) => self.optimized_tree(label_dims, *search),
            (Order::Tree(tree), _) => {
                if tree.operands() != self.num_operands() {
                    return Err(Error::CountMismatch {
                        arg: "tree operands".into(),
                        expected: self.num_operands(),
                        actual: tree.operands(),
                    });
                }
                Ok(tree.clone())
            }
        }
    }

    fn frontier(&self) -> Frontier {
        let n = self.num_operands();
        let labels = self.kept_labels();
        let mut holders: Vec<Vec<usize>> = vec![Vec::new(); self.num_labels()];
        for (k, ax) in labels.iter().enumerate() {
            for &l in ax {
                holders[l].push(k);
            }
        }
        let mut all = Vec::with_capacity(2 * n);
        all.extend(labels);
        Frontier {
            labels: all,
            first: (0..n).collect(),
            alive: vec![true; n],
            holders,
            is_out: self.output_mask(),
            merges: Vec::with_capacity(n.saturating_sub(1)),
            mark: vec![usize::MAX; self.num_labels()],
        }
    }

    fn sequence_tree(&self, order: &[Label]) -> Result<ContractionTree> {
        let bad = |l: Label, reason: &str| Error::InvalidLabel {
            arg: "order".into(),
            label: l.to_string(),
            reason: reason.into(),
        };
        let id_of: HashMap<Label, usize> = (0..self.num_labels())
            .map(|id| (self.label(id), id))
            .collect();
        let is_out = self.output_mask();
        let mut listed = vec![false; self.num_labels()];
        let mut ids = Vec::with_capacity(order.len());
        for &l in order {
            match id_of.get(&l) {
                Some(&id) if !is_out[id] => {
                    if listed[id] {
                        return Err(bad(l, "appears twice in the order"));
                    }
                    listed[id] = true;
                    ids.push(id);
                }
                _ => return Err(bad(l, "is not a contracted label of the network")),
            }
        }
        if let Some(id) = (0..self.num_labels()).find(|&id| !is_out[id] && !listed[id]) {
            return Err(bad(
                self.label(id),
                "is contracted but missing from the order",
            ));
        }
        let mut f = self.frontier();
        for id in ids {
            // the two holders that come first in the frontier (by first operand)
            let mut two: [Option<usize>; 2] = [None, None];
            for &v in &f.holders[id] {
                let key = f.first[v];
                match two {
                    [None, _] => two[0] = Some(v),
                    [Some(a), _] if key < f.first[a] => two = [Some(v), two[0]],
                    [Some(_), None] => two[1] = Some(v),
                    [Some(_), Some(b)] if key < f.first[b] => two[1] = Some(v),
                    _ => {}
                }
            }
            if let [Some(i), Some(j)] = two {
                f.merge(i, j);
            }
        }
        let mut rest: Vec<usize> = (0..f.labels.len()).filter(|&v| f.alive[v]).collect();
        rest.sort_by_key(|&v| f.first[v]);
        if let Some((&head, tail)) = rest.split_first() {
            let mut acc = head;
            for &v in tail {
                f.merge(acc, v);
                acc = f.labels.len() - 1;
            }
        }
        ContractionTree::new(self.num_operands(), f.merges)
    }

    fn optimized_tree(&self, label_dims: &[usize], search: Search) -> Result<ContractionTree> {
        let n = self.num_operands();
        if n <= 2 {
            return ContractionTree::new(n, if n == 2 { vec![[0, 1]] } else { vec![] });
        }
        let start = Instant::now();
        let ixs: Vec<Vec<usize>> = self.kept_labels();
        let output = self.output();
        // Zero-size labels make every order free; the search costs them as 1.
        let search_dims: Vec<usize> = label_dims.iter().map(|&d| d.max(1)).collect();
        let dims: Vec<f64> = search_dims.iter().map(|&d| d as f64).collect();
        // trees are compared by log₂ of their flops: random graphs' trees exceed f64
        let flops = |m: &[[usize; 2]]| TreeStats::of(&ixs, output, &search_dims, m).log2_flops;
        // the greedy runs are cut at the budget, but get at least GREEDY_MIN_TIME
        // `None`: a budget too large for the clock, no deadline
        let greedy_deadline = start.checked_add(search.budget.max(GREEDY_MIN_TIME));
        let deadline = start.checked_add(search.budget);
        let greedy = || {
            let variants = Greedy::VARIANTS;
            best_greedy(&ixs, output, &dims, &search_dims, variants, greedy_deadline)
        };
        let merges = match search.optimizer {
            Optimizer::Greedy => greedy().0,
            Optimizer::Auto if n > Optimizer::AUTO_EXHAUSTIVE_MAX => {
                // without a summed label shared by two operands (and not by all), every
                // variant gives the same outer products: one run
                let samples = if has_candidates(&ixs, self.output_mask()) {
                    Optimizer::AUTO_SAMPLES
                } else {
                    0
                };
                let sampled = (0..samples).map(|t| Greedy::sampled(0, t));
                let variants = Greedy::VARIANTS.into_iter().chain(sampled);
                best_greedy(&ixs, output, &dims, &search_dims, variants, greedy_deadline).0
            }
            Optimizer::RandomGreedy => {
                let (mut best, mut best_flops) = greedy();
                let mut trial = 0u64;
                // without candidates every trial gives the greedy tree
                let useful = has_candidates(&ixs, self.output_mask());
                while useful && start.elapsed() < search.budget {
                    let g = Greedy::sampled(search.seed, trial)
                        .run_until(&ixs, output, &dims, deadline);
                    let f = flops(&g.merges);
                    if f < best_flops {
                        (best, best_flops) = (g.merges, f);
                    }
                    trial += 1;
                }
                best
            }
            Optimizer::Hyper => {
                let start_tree = greedy();
                let budget = search.budget.saturating_sub(start.elapsed());
                hyper(
                    &ixs,
                    output,
                    &dims,
                    &search_dims,
                    budget,
                    search.seed,
                    start_tree,
                )
            }
            Optimizer::Auto | Optimizer::Exhaustive => {
                let explicit = search.optimizer == Optimizer::Exhaustive;
                if exhaustive_work(&ixs, self.num_labels())
                    > EXHAUSTIVE_RATE * search.budget.as_secs_f64()
                {
                    greedy().0
                } else {
                    let (code, sizes) = omeco_code(&ixs, output, label_dims, None);
                    match optimize_exhaustive(&code, &sizes, &ExhaustiveSearch::default()) {
                        Ok(nested) => flatten(&nested, n, None)?,
                        Err(e) if explicit => {
                            return Err(Error::invalid("order", format!("omeco: {e}")));
                        }
                        Err(_) => greedy().0,
                    }
                }
            }
            Optimizer::TreeSa => {
                let (g, g_flops) = greedy();
                let left = search.budget.saturating_sub(start.elapsed());
                match treesa(&ixs, output, label_dims, n, left, search.seed)? {
                    Some(m) if flops(&m) < g_flops => m,
                    _ => g,
                }
            }
        };
        ContractionTree::new(n, merges)
    }
}

/// Whether some summed label is held by at least two operands but not by all: only then do
/// the greedy variants differ.
fn has_candidates(ixs: &[Vec<usize>], is_out: Vec<bool>) -> bool {
    let mut count = vec![0usize; is_out.len()];
    for ax in ixs {
        for &l in ax {
            count[l] += 1;
        }
    }
    (0..count.len()).any(|l| !is_out[l] && count[l] >= 2 && count[l] < ixs.len())
}

/// The least time the greedy runs of every optimizer get, whatever the budget: below it a
/// run is not cut (a budget of zero still gives the greedy tree of any network whose greedy
/// runs take less; 10,000 operands with hyperedges of degree 5,000 take 0.13 s).
pub(crate) const GREEDY_MIN_TIME: Duration = Duration::from_millis(250);

/// The tree with the fewest flops of the greedy `variants` (the first on a tie), and `log₂`
/// of its flops.
/// The runs are independent and go to the rayon pool (they are deterministic, and the choice
/// is made in the variants' order, so the result does not depend on the threads). Runs are
/// cut at `deadline` ([`Greedy::run_until`]), and a variant other than the first that starts
/// after it is skipped; so the tree is deterministic unless the deadline is reached (then
/// which runs were cut or skipped depends on the clock and the threads).
fn best_greedy(
    ixs: &[Vec<usize>],
    output: &[usize],
    dims: &[f64],
    search_dims: &[usize],
    variants: impl IntoIterator<Item = Greedy>,
    deadline: Option<Instant>,
) -> (Vec<[usize; 2]>, f64) {
    let variants: Vec<Greedy> = variants.into_iter().collect();
    let runs: Vec<Option<(Vec<[usize; 2]>, f64)>> = variants
        .into_par_iter()
        .enumerate()
        .map(|(k, g)| {
            if k > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            let merges = g.run_until(ixs, output, dims, deadline).merges;
            let flops = TreeStats::of(ixs, output, search_dims, &merges).log2_flops;
            Some((merges, flops))
        })
        .collect();
    let mut best: Option<(Vec<[usize; 2]>, f64)> = None;
    for (merges, flops) in runs.into_iter().flatten() {
        if best.as_ref().is_none_or(|(_, f)| flops < *f) {
            best = Some((merges, flops));
        }
    }
    best.unwrap_or_default()
}

mod omeco_search;

#[cfg(test)]
mod tests;
