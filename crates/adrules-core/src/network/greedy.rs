//! The greedy contraction-order heuristic of opt_einsum (Daniel G. A. Smith and Johnnie Gray,
//! *opt_einsum – A Python package for optimizing contraction order for einsum-like
//! expressions*, JOSS 3(26), 753, 2018; `opt_einsum.paths.ssa_greedy_optimize`), in
//! `O(n · d · log n)` for `n` operands with `d` candidates each (at most 8 live holders of a label
//! are scanned, see [`HOLDERS_SCANNED`]), with the variations of [`Greedy`] (queue policy, ties, cost weight, seeded jitter) that
//! [`super::tree`] runs side by side and samples from.
//!
//! Candidate pairs are only values that share a summed label (one not in the output), found
//! through the holders of each label; a binary heap orders them by cost, then by SSA ids
//! (deterministic), and stale entries (a value already consumed) are skipped when popped.
//! After a merge only pairs of the new value with its neighbours are pushed: the cost of a
//! pair depends on its two label lists and on whether each of their labels is held
//! elsewhere, which changes only for pairs with the new value. A label held by every operand
//! is treated as an output label while choosing (it can only be summed by the last merge;
//! opt_einsum does the same), which keeps a shared batch label from making every pair a
//! candidate. When no connected pair remains, the values are joined by outer products,
//! smallest first (as opt_einsum does). A run can be given a deadline
//! ([`Greedy::run_until`]): past it, what is left is joined as in that last phase.
//!
//! **Why the queue policy matters.** opt_einsum pushes, for each new value, only its
//! cheapest candidate ([`Queue::Cheapest`]); a candidate made stale by another merge is then
//! gone, and the value waits for a neighbour's merge to be considered again. Pushing every
//! candidate ([`Queue::All`], the textbook greedy) lets a merge made cheap early be taken
//! late, after its operands grew elsewhere, and grows blobs that swallow their
//! neighbourhood: measured on a 10×10 lattice with bond 4, 1.46e12 multiply-adds against
//! opt_einsum's 4.9e10 (on an 8×8 lattice with bond 8 it is the other way round, 5.53e12
//! against 5.66e12). Neither policy dominates, so the planner runs both.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Instant;

use num_bigint::BigInt;
use num_traits::ToPrimitive;

/// A cost ordered by [`f64::total_cmp`]; NaN (from sizes beyond `f64`) is stored as +∞.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cost(f64);

impl Cost {
    fn new(c: f64) -> Cost {
        Cost(if c.is_nan() { f64::INFINITY } else { c })
    }
}

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

/// Which candidates of a new value enter the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    /// every candidate pair (the textbook greedy)
    All,
    /// only the cheapest pair of each new value, and initially, for each summed label and
    /// each of its holders, the cheapest pair with a later holder (opt_einsum's default)
    Cheapest,
}

/// How pairs of equal cost are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ties {
    /// by the smaller SSA id, then the larger
    SmallerFirst,
    /// by the larger SSA id, then the smaller (opt_einsum's `(cost, id2, id1)`)
    LargerFirst,
}

/// One greedy run: the cost of merging values `i` and `j` is
/// `size(result) − alpha · (size(i) + size(j))`, times `1 + jitter · g` with `g` a standard
/// normal draw from `seed` when `jitter > 0` (opt_einsum's `"memory-removed-jitter"` uses
/// 0.01). `alpha = 1` is opt_einsum's default (`"memory-removed"`), `alpha = 0` omeco's and
/// OMEinsumContractionOrders' (the size of the result).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Greedy {
    pub(crate) alpha: f64,
    pub(crate) queue: Queue,
    pub(crate) ties: Ties,
    pub(crate) jitter: f64,
    pub(crate) seed: u64,
}

impl Greedy {
    /// opt_einsum's `greedy` exactly (cost, queue and ties), deterministic.
    pub(crate) const OPT_EINSUM: Greedy = Greedy {
        alpha: 1.0,
        queue: Queue::Cheapest,
        ties: Ties::LargerFirst,
        jitter: 0.0,
        seed: 0,
    };

    /// The deterministic variants run by `Optimizer::Greedy`: opt_einsum's, then its cost with
    /// every candidate queued, then the result-size cost (`alpha = 0`) with both queues.
    pub(crate) const VARIANTS: [Greedy; 4] = [
        Greedy::OPT_EINSUM,
        Greedy {
            queue: Queue::All,
            ties: Ties::SmallerFirst,
            ..Greedy::OPT_EINSUM
        },
        Greedy {
            alpha: 0.0,
            ..Greedy::OPT_EINSUM
        },
        Greedy {
            alpha: 0.0,
            queue: Queue::All,
            ties: Ties::SmallerFirst,
            ..Greedy::OPT_EINSUM
        },
    ];

    /// A randomised variant for sampling (`trial` of a search seeded `seed`): `alpha` uniform
    /// in [0, 2], either queue and either tie order, jitter log-uniform in [0.001, 1].
    pub(crate) fn sampled(seed: u64, trial: u64) -> Greedy {
        let mut rng = SplitMix(seed ^ trial.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let alpha = 2.0 * rng.uniform();
        let queue = if rng.next() & 1 == 0 {
            Queue::All
        } else {
            Queue::Cheapest
        };
        let ties = if rng.next() & 1 == 0 {
            Ties::SmallerFirst
        } else {
            Ties::LargerFirst
        };
        let jitter = 10f64.powf(-3.0 + 3.0 * rng.uniform());
        Greedy {
            alpha,
            queue,
            ties,
            jitter,
            seed: rng.next(),
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood, *Fast splittable pseudorandom number generators*, 2014).
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.uniform(); // (0, 1]
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// A greedy order: merges in SSA form (see [`super::ContractionTree`]).
pub(crate) struct GreedyTree {
    pub(crate) merges: Vec<[usize; 2]>,
}

/// Live values while a greedy run merges them.
struct State<'a> {
    dims: &'a [f64],
    /// the dimensions as integers, for exact sizes
    dims_exact: Vec<u128>,
    is_out: Vec<bool>,
    labels: Vec<Vec<usize>>,
    size: Vec<f64>,
    /// the size as an integer, while it fits in `u128`
    exact: Vec<Option<u128>>,
    alive: Vec<bool>,
    /// holders of each summed label: every live one, and consumed ones not yet dropped
    holders: Vec<Vec<usize>>,
    /// live values holding each label
    count: Vec<usize>,
    /// scratch marks, stamped per use: the labels of the first value of a pair, and the
    /// neighbours already collected
    mark: Vec<usize>,
    seen: Vec<usize>,
    stamp: usize,
}

impl State<'_> {
    /// Labels and size of the result of merging `a` and `b`: the labels still needed (in the
    /// output or held by another live value).
    fn result(&mut self, a: usize, b: usize) -> (Vec<usize>, f64, Option<u128>) {
        let mut out = Vec::with_capacity(self.labels[a].len() + self.labels[b].len());
        let (size, exact) = self.visit(a, b, |l| out.push(l));
        (out, size, exact)
    }

    /// Size of the result of merging `a` and `b` (as [`State::result`], without its labels).
    fn result_size(&mut self, a: usize, b: usize) -> (f64, Option<u128>) {
        self.visit(a, b, |_| {})
    }

    /// Calls `keep` on each label the result of merging `a` and `b` keeps; returns its size.
    fn visit(&mut self, a: usize, b: usize, mut keep: impl FnMut(usize)) -> (f64, Option<u128>) {
        self.stamp += 2;
        let stamp = self.stamp;
        for &l in &self.labels[a] {
            self.mark[l] = stamp;
        }
        let mut size = 1.0;
        let mut exact = Some(1u128);
        for &l in &self.labels[b] {
            let both = self.mark[l] == stamp;
            if both {
                self.mark[l] = stamp + 1; // visited from b
            }
            if self.is_out[l] || self.count[l] > 1 + usize::from(both) {
                keep(l);
                size *= self.dims[l];
                exact = exact.and_then(|e| e.checked_mul(self.dims_exact[l]));
            }
        }
        for &l in &self.labels[a] {
            if self.mark[l] == stamp && (self.is_out[l] || self.count[l] > 1) {
                keep(l);
                size *= self.dims[l];
                exact = exact.and_then(|e| e.checked_mul(self.dims_exact[l]));
            }
        }
        (size, exact)
    }

    /// `size(a ∪ b result) − [alpha1] · (size(a) + size(b))` as a big integer.
    fn big_cost(&mut self, alpha1: bool, a: usize, b: usize) -> BigInt {
        let (out, _, _) = self.result(a, b);
        // dimensions are gathered in a u128 until it would overflow, so a size of rank r
        // takes about r / 64 big multiplications (one per dimension made a 10,000-vertex
        // random graph's greedy run take seconds)
        let size = |labels: &[usize]| -> BigInt {
            let (mut big, mut chunk) = (BigInt::from(1u8), 1u128);
            for &l in labels {
                let d = self.dims_exact[l];
                match chunk.checked_mul(d) {
                    Some(c) => chunk = c,
                    None => {
                        big *= chunk;
                        chunk = d;
                    }
                }
            }
            big * chunk
        };
        let r = size(&out);
        if alpha1 {
            r - size(&self.labels[a]) - size(&self.labels[b])
        } else {
            r
        }
    }

    /// Live values sharing a summed label with `a`: at most [`HOLDERS_SCANNED`] other live
    /// holders of each label.
    fn neighbours(&mut self, a: usize) -> Vec<usize> {
        let State {
            labels,
            holders,
            alive,
            seen,
            ..
        } = self;
        let mut out = Vec::new();
        for &l in &labels[a] {
            // holder lists are cleaned lazily: a consumed value is dropped when met here
            let h = &mut holders[l];
            let (mut i, mut others) = (0, 0);
            while i < h.len() && others < HOLDERS_SCANNED {
                let b = h[i];
                if !alive[b] {
                    h.swap_remove(i);
                    continue;
                }
                i += 1;
                if b == a {
                    continue;
                }
                others += 1;
                if seen[b] != a {
                    seen[b] = a;
                    out.push(b);
                }
            }
        }
        out
    }

    /// Size of the open labels of `v` (the key of the outer-product phase,
    /// opt_einsum's `size(key & output)`), as `f64` and exactly while it fits.
    fn open_size(&self, v: usize) -> (Cost, Exact) {
        let (mut size, mut exact) = (1.0, Some(1u128));
        for &l in self.labels[v].iter().filter(|&&l| self.is_out[l]) {
            size *= self.dims[l];
            exact = exact.and_then(|e| e.checked_mul(self.dims_exact[l]));
        }
        let exact = exact
            .and_then(|e| i128::try_from(e).ok())
            .map_or(Exact::None, Exact::Small);
        (Cost::new(size), exact)
    }

    /// Consumes `a` and `b` into the new value with labels `out` and size `size`.
    fn merge(&mut self, a: usize, b: usize, (out, size, exact): Result3) -> usize {
        let v = self.labels.len();
        for x in [a, b] {
            self.alive[x] = false;
            for &l in &self.labels[x] {
                self.count[l] -= 1; // (x leaves `holders` lazily, see `neighbours`)
            }
        }
        for &l in &out {
            self.count[l] += 1;
            if !self.is_out[l] {
                self.holders[l].push(v);
            }
        }
        self.labels.push(out);
        self.size.push(size);
        self.exact.push(exact);
        self.alive.push(true);
        v
    }
}

/// A merge's result: labels, size, size as an integer (while it fits).
type Result3 = (Vec<usize>, f64, Option<u128>);

/// A queued pair: its cost (as `f64`, then exactly when the sizes fit in integers: with
/// sizes beyond 2⁵³ the `f64` difference `size(result) − size(a) − size(b)` rounds, which
/// changes which pair wins and made trees on random graphs 30× costlier than opt_einsum's,
/// whose sizes are Python integers), then the two SSA ids in tie order.
type Entry = Reverse<(Cost, Exact, usize, usize)>;

/// An exact cost: `i128` while it fits, else a big integer (sizes beyond 2¹²⁷, as on random
/// graphs of a thousand tensors); `None` for costs that are not integers (a fractional α or
/// jitter). Ordered numerically.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exact {
    None,
    Small(i128),
    Big(BigInt),
}

impl Exact {
    fn big(&self) -> Option<BigInt> {
        match self {
            Exact::None => None,
            Exact::Small(x) => Some(BigInt::from(*x)),
            Exact::Big(x) => Some(x.clone()),
        }
    }
}

impl PartialOrd for Exact {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Exact {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Exact::Small(a), Exact::Small(b)) => a.cmp(b),
            (Exact::None, Exact::None) => Ordering::Equal,
            (Exact::None, _) => Ordering::Less,
            (_, Exact::None) => Ordering::Greater,
            _ => self.big().cmp(&other.big()),
        }
    }
}

/// Other live holders of one label scanned for candidates of a value (and, initially, later
/// holders paired with each holder): a hyperedge held by `deg ≫ 8` values would otherwise
/// make every pair of them a candidate (`deg²` work and heap entries; 10,000 operands sharing
/// one summed label took minutes). With the cap a run is `O(n · 8 · rank · log n)`; on
/// networks whose labels have at most 9 holders (every graph) it changes nothing.
const HOLDERS_SCANNED: usize = 8;

/// Labels whose initial candidates [`Greedy::run_until`] queues between two readings of the
/// clock (it reads it before every merge).
pub(crate) const CLOCK_EVERY: usize = 32;

/// `size(r) − alpha · (size(a) + size(b))` in integers, for `alpha` 0 or 1 and sizes that fit.
fn exact_cost(alpha: f64, r: Option<u128>, a: Option<u128>, b: Option<u128>) -> Option<i128> {
    let r = i128::try_from(r?).ok()?;
    if alpha == 0.0 {
        return Some(r);
    }
    if alpha != 1.0 {
        return None;
    }
    let ab = i128::try_from(a?.checked_add(b?)?).ok()?;
    r.checked_sub(ab)
}

impl Greedy {
    /// [`Greedy::run_until`] without a deadline.
    #[cfg(test)]
    pub(crate) fn run(self, inputs: &[Vec<usize>], output: &[usize], dims: &[f64]) -> GreedyTree {
        self.run_until(inputs, output, dims, None)
    }

    /// Greedy order for operands labelled `inputs` (label ids `< dims.len()`, each distinct
    /// within an operand; a label held by one operand only is expected in the output, as
    /// after the operands' own traces), `output` labels and `dims[l]` = the dimension of
    /// label `l` (at least 1).
    ///
    /// Complexity `O(n · d · log n + Σ ranks)` time and `O(n · d + labels)` memory, with
    /// `d = min(deg, 8) · rank` candidates per value (see [`HOLDERS_SCANNED`]); on graphs
    /// whose intermediates grow (random graphs), rank grows with `n` and so does the time
    /// (a 10,000-vertex random 3-regular graph: seconds).
    ///
    /// Cut short at `deadline`: the clock is read before every merge (and every
    /// [`CLOCK_EVERY`] labels while the initial candidates are queued), and once past
    /// `deadline` the values left are joined as in the outer-product phase (smallest open
    /// size first; shared labels are summed by the merge that joins their holders),
    /// `O(values · (rank + log values))`. A run that is not cut gives the same tree with or
    /// without a deadline (`None`: never cut).
    pub(crate) fn run_until(
        self,
        inputs: &[Vec<usize>],
        output: &[usize],
        dims: &[f64],
        deadline: Option<Instant>,
    ) -> GreedyTree {
        let n = inputs.len();
        let nl = dims.len();
        let total = 2 * n.max(1) - 1;
        let mut st = State {
            dims,
            dims_exact: dims.iter().map(|&d| d as u128).collect(),
            is_out: vec![false; nl],
            labels: Vec::with_capacity(total),
            size: Vec::with_capacity(total),
            exact: Vec::with_capacity(total),
            alive: Vec::with_capacity(total),
            holders: vec![Vec::new(); nl],
            count: vec![0; nl],
            mark: vec![usize::MAX; nl],
            seen: vec![usize::MAX; total],
            stamp: 0,
        };
        for &l in output {
            st.is_out[l] = true;
        }
        for ax in inputs {
            for &l in ax {
                st.count[l] += 1;
            }
        }
        // a label on every operand is summed by the last merge only: treat it as output
        if n > 1 {
            for l in 0..nl {
                if st.count[l] == n {
                    st.is_out[l] = true;
                }
            }
        }
        for (k, ax) in inputs.iter().enumerate() {
            for &l in ax {
                if !st.is_out[l] {
                    st.holders[l].push(k);
                }
            }
            st.size.push(ax.iter().map(|&l| dims[l]).product());
            let exact = ax
                .iter()
                .try_fold(1u128, |e, &l| e.checked_mul(st.dims_exact[l]));
            st.exact.push(exact);
            st.labels.push(ax.clone());
            st.alive.push(true);
        }
        let mut rng = SplitMix(self.seed);
        let mut entry = |st: &mut State<'_>, a: usize, b: usize| -> Entry {
            let (size, exact) = st.result_size(a, b);
            let mut c = size - self.alpha * (st.size[a] + st.size[b]);
            let mut e = Exact::None;
            if self.jitter > 0.0 {
                c *= 1.0 + self.jitter * rng.normal();
            } else if self.alpha == 0.0 || self.alpha == 1.0 {
                // rounding is monotone: (c, e) orders as e does
                if let Some(x) = exact_cost(self.alpha, exact, st.exact[a], st.exact[b]) {
                    (c, e) = (x as f64, Exact::Small(x));
                } else {
                    let x = st.big_cost(self.alpha == 1.0, a, b);
                    c = x.to_f64().unwrap_or(c);
                    e = Exact::Big(x);
                }
            }
            let (lo, hi) = (a.min(b), a.max(b));
            match self.ties {
                Ties::SmallerFirst => Reverse((Cost::new(c), e, lo, hi)),
                Ties::LargerFirst => Reverse((Cost::new(c), e, hi, lo)),
            }
        };
        let mut heap: BinaryHeap<Entry> = BinaryHeap::new();
        let mut push = |st: &mut State<'_>,
                        heap: &mut BinaryHeap<Entry>,
                        a: usize,
                        bs: &[usize]| match self.queue {
            Queue::All => {
                for &b in bs {
                    let e = entry(st, a, b);
                    heap.push(e);
                }
            }
            Queue::Cheapest => {
                let best = bs.iter().map(|&b| entry(st, a, b)).max();
                heap.extend(best);
            }
        };
        // initial candidates: for each summed label and each of its holders (in id order),
        // the next holders, at most HOLDERS_SCANNED (every pair of a graph's edge); `All`
        // queues each pair (a pair sharing several labels twice, harmlessly), `Cheapest` the
        // cheapest per holder and label, as opt_einsum does
        for l in 0..nl {
            if l.is_multiple_of(CLOCK_EVERY) && deadline.is_some_and(|d| Instant::now() >= d) {
                break; // the main loop stops at once too: what is left is joined below
            }
            let hs = std::mem::take(&mut st.holders[l]);
            for (i, &a) in hs.iter().enumerate().take(hs.len().saturating_sub(1)) {
                let end = hs.len().min(i + 1 + HOLDERS_SCANNED);
                push(&mut st, &mut heap, a, &hs[i + 1..end]);
            }
            st.holders[l] = hs;
        }

        let mut merges: Vec<[usize; 2]> = Vec::with_capacity(n.saturating_sub(1));
        while let Some(Reverse((_, _, x, y))) = heap.pop() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let (a, b) = (x.min(y), x.max(y));
            if !st.alive[a] || !st.alive[b] {
                continue;
            }
            let r = st.result(a, b);
            let v = st.merge(a, b, r);
            merges.push([a, b]);
            let bs = st.neighbours(v);
            if !bs.is_empty() {
                push(&mut st, &mut heap, v, &bs);
            }
        }

        // what is left: outer products, smallest first by the size of the open labels (as
        // opt_einsum; values left here may still share summed labels, which the merge sums)
        let mut rest: BinaryHeap<Reverse<(Cost, Exact, usize)>> = (0..st.labels.len())
            .filter(|&v| st.alive[v])
            .map(|v| {
                let (c, e) = st.open_size(v);
                Reverse((c, e, v))
            })
            .collect();
        while rest.len() > 1 {
            let (Some(Reverse((_, _, a))), Some(Reverse((_, _, b)))) = (rest.pop(), rest.pop())
            else {
                break;
            };
            let (a, b) = (a.min(b), a.max(b));
            let r = st.result(a, b);
            let v = st.merge(a, b, r);
            merges.push([a, b]);
            let (c, e) = st.open_size(v);
            rest.push(Reverse((c, e, v)));
        }
        GreedyTree { merges }
    }
}

/// Cost and largest intermediate of a tree (merges in SSA form over operands labelled
/// `inputs`), with the label rule of [`Greedy::run_until`] and of the lowering: a merge's result
/// keeps the labels in the output or still held by another live value. The one costing of
/// trees: the planner compares orders with it, `NetworkPlan` reports and checks it.
/// `O(Σ ranks + merges · rank)`.
pub(crate) struct TreeStats {
    /// multiply-adds: sum over merges of the product of the dimensions of every label touched
    /// (`+∞` beyond `f64`)
    pub(crate) flops: f64,
    /// `log₂` of `flops`, finite however large (`−∞` for a tree without work); the searches
    /// compare trees by it, as trees of large random graphs cost beyond 2¹⁰²⁴
    pub(crate) log2_flops: f64,
    /// log₂ of the element count of the largest merge result (a zero dimension counted as 1)
    pub(crate) log2_largest: f64,
    /// the first merge whose result has more than `usize::MAX` elements, and its log₂ size
    pub(crate) overflow: Option<(usize, f64)>,
}

/// Walks the merges of a tree (SSA form over operands labelled `inputs`) with the label rule
/// of [`Greedy::run_until`] and of the lowering: a merge's result keeps the labels in the output
/// or still held by another live value. Calls `visit(m, touched, result)` for merge `m` with
/// every label it touches (each once) and the labels of its result. The one walk behind
/// [`TreeStats`] and the slicer (`super::slice`). `O(Σ ranks + merges · rank)`.
pub(crate) fn walk_merges(
    inputs: &[Vec<usize>],
    output: &[usize],
    num_labels: usize,
    merges: &[[usize; 2]],
    mut visit: impl FnMut(usize, &[usize], &[usize]),
) {
    let mut is_out = vec![false; num_labels];
    for &l in output {
        is_out[l] = true;
    }
    let mut holders = vec![0usize; num_labels];
    for ax in inputs {
        for &l in ax {
            holders[l] += 1;
        }
    }
    let mut labels: Vec<Vec<usize>> = inputs.to_vec();
    let mut mark = vec![usize::MAX; num_labels];
    for (m, &[a, b]) in merges.iter().enumerate() {
        let mut touched: Vec<usize> = Vec::new();
        for &l in labels[a].iter().chain(&labels[b]) {
            holders[l] -= 1;
            if mark[l] != m {
                mark[l] = m;
                touched.push(l);
            }
        }
        let res: Vec<usize> = touched
            .iter()
            .copied()
            .filter(|&l| is_out[l] || holders[l] > 0)
            .collect();
        visit(m, &touched, &res);
        for &l in &res {
            holders[l] += 1;
        }
        labels.push(res);
    }
}

impl TreeStats {
    pub(crate) fn of(
        inputs: &[Vec<usize>],
        output: &[usize],
        label_dims: &[usize],
        merges: &[[usize; 2]],
    ) -> TreeStats {
        let (mut flops, mut log2_largest, mut overflow) = (0.0, f64::NEG_INFINITY, None);
        let mut log2_flops = f64::NEG_INFINITY;
        walk_merges(
            inputs,
            output,
            label_dims.len(),
            merges,
            |m, touched, res| {
                flops += touched
                    .iter()
                    .map(|&l| label_dims[l] as f64)
                    .product::<f64>();
                let log2_merge: f64 = touched.iter().map(|&l| (label_dims[l] as f64).log2()).sum();
                log2_flops = log2_add(log2_flops, log2_merge);
                let log2: f64 = res
                    .iter()
                    .map(|&l| (label_dims[l].max(1) as f64).log2())
                    .sum();
                log2_largest = f64::max(log2_largest, log2);
                // a zero dimension makes the intermediate empty, however large the others
                let fits = res.iter().any(|&l| label_dims[l] == 0)
                    || res
                        .iter()
                        .try_fold(1usize, |p, &l| p.checked_mul(label_dims[l]))
                        .is_some();
                if !fits && overflow.is_none() {
                    overflow = Some((m, log2));
                }
            },
        );
        if merges.is_empty() {
            log2_largest = inputs.first().map_or(0.0, |ax| {
                ax.iter()
                    .map(|&l| (label_dims[l].max(1) as f64).log2())
                    .sum()
            });
        }
        TreeStats {
            flops,
            log2_flops,
            log2_largest,
            overflow,
        }
    }
}

/// `log₂(2^a + 2^b)` without overflow (`−∞` stands for zero).
pub(crate) fn log2_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp2().ln_1p() / std::f64::consts::LN_2
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
        let dims = vec![2.0, 64.0, 2.0, 2.0];
        for g in Greedy::VARIANTS
            .into_iter()
            .chain((0..8).map(|t| Greedy::sampled(3, t)))
        {
            let t = g.run(&inputs, &[0, 3], &dims);
            valid(3, &t.merges);
        }
        let t = Greedy::OPT_EINSUM.run(&inputs, &[0, 3], &dims);
        // (a,b) first: size 4 − (128 + 128) beats (b,c): 128 − (128 + 4)
        assert_eq!(t.merges, vec![[0, 1], [2, 3]]);
        // scalars and vectors without shared labels: outer products only, smallest first
        let inputs = vec![vec![], vec![0], vec![], vec![1]];
        let t = Greedy::OPT_EINSUM.run(&inputs, &[0, 1], &[2.0, 4.0]);
        valid(4, &t.merges);
        assert_eq!(t.merges[0], [0, 2]);
        // a label on every operand is open while choosing: outer products, then the sum
        let inputs = vec![vec![0], vec![0], vec![0], vec![0]];
        for g in Greedy::VARIANTS {
            valid(4, &g.run(&inputs, &[], &[3.0]).merges);
        }
    }

    #[test]
    fn a_run_cut_at_its_deadline_gives_a_valid_tree() {
        // a ring of 200 matrices with a chord every fourth site
        let n = 200;
        let mut inputs: Vec<Vec<usize>> = (0..n).map(|k| vec![k, (k + 1) % n]).collect();
        for (c, k) in (0..n).step_by(4).enumerate() {
            inputs[k].push(n + c);
            inputs[(k + 101) % n].push(n + c);
        }
        let dims = vec![2.0; n + n / 4];
        for g in Greedy::VARIANTS {
            let uncut = g.run(&inputs, &[], &dims).merges;
            let far = Instant::now() + std::time::Duration::from_secs(3600);
            assert_eq!(g.run_until(&inputs, &[], &dims, Some(far)).merges, uncut);
            // a deadline already past: no greedy merge, every value joined smallest first
            let cut = g
                .run_until(&inputs, &[], &dims, Some(Instant::now()))
                .merges;
            valid(n, &cut);
            assert_eq!(cut[0], [0, 1]); // all open sizes are 1: in id order
            assert_ne!(cut, uncut);
        }
    }

    #[test]
    fn sampled_variants_are_seeded() {
        let (a, b) = (Greedy::sampled(1, 2), Greedy::sampled(1, 2));
        assert_eq!((a.alpha, a.jitter, a.seed), (b.alpha, b.jitter, b.seed));
        let c = Greedy::sampled(1, 3);
        assert_ne!((a.alpha, a.seed), (c.alpha, c.seed));
        assert!((0.0..=2.0).contains(&a.alpha) && (1e-3..=1.0).contains(&a.jitter));
    }
}
