//! Slicing: a network contracted slice by slice, so that one slice's intermediates stay within
//! a memory target ([`SlicedPlan`]).
//!
//! # The identity
//! Fixing a contracted label `l` (one not in the output) to each of its values `i` splits a
//! network into `d_l` networks whose results add up to the whole:
//! `N(T) = Σ_i N(T|_{l=i})`, where `T|_{l=i}` restricts every axis labelled `l` to index `i`.
//! Slicing a set `S` of labels gives `Π_{l∈S} d_l` slices; in each, every intermediate that
//! held a label of `S` is `d_l` times smaller, while the work grows by the share of merges that
//! did not touch `S` (they are repeated in every slice). This is the slicing of cotengra
//! (Gray and Kourtis, *Hyper-optimized tensor network contraction*, Quantum 5, 410 (2021),
//! §IV) and of Chen et al. (*Simulating the Sycamore quantum supremacy circuits*,
//! arXiv:2103.03074); omeco ports the same idea (`slice_code`).
//!
//! # How a slice is run
//! One slice is itself a network: every axis of operand `k` that carries a sliced label gets
//! a label of its own, contracted with a one-hot vector `e_i` (the slice's index of that
//! label). Each operand is first merged with its one-hot vectors (a selection, linear in the
//! operand's size), then the network's tree runs on the selected operands. That one
//! [`NetworkPlan`] serves every slice (only the one-hot vectors change), and its rules are the
//! network rules, so the derivatives need no formula of their own:
//! - **value**: `C = Σ_j C_j`, written into one accumulator (`β = 1` from the second slice);
//! - **pullback**: `C_j` is linear in the operands, so `T̄_k = Σ_j pullback_j(C̄)_k`; the
//!   selection's own pullback scatters a slice's cotangent into its rows of `T̄_k`, and the
//!   cotangents of operands without a sliced label simply accumulate. The pullback of
//!   [`SlicedPlan::rrule`] recomputes each slice's forward pass (the memory bound is the
//!   point); [`SlicedPlan::value_and_gradient`] does both in one pass when `C̄` is known
//!   beforehand (a scalar loss);
//! - **pushforward**: `Ċ = Σ_j Ċ_j`;
//! - **HVP** of `φ = Re⟨C̄, N(T)⟩ = Σ_j Re⟨C̄, N_j(T)⟩`: the sum of the slices' HVPs.
//!
//! Only contracted labels are sliced, so every slice's result has the output's shape.
//!
//! # Choosing the labels
//! Greedily, as cotengra's `SliceFinder`: while one slice exceeds the target, take the
//! largest intermediate of the tree (the result of a merge, the network's result excepted)
//! and slice the one of its labels that keeps the total work `Π_{l∈S} d_l · cost(one slice)`
//! smallest (ties: the larger dimension); or, for an elements target, the label of any
//! oversize intermediate with the least extra work per unit of excess size it removes. Both
//! rules and six seeded variants (random ties, jittered scores) are tried and the cheapest
//! slicing is kept. A searched order ([`Order::Optimize`], [`Order::Search`], the default
//! for Einstein strings) is then searched again for the network with the sliced labels of
//! dimension 1, and sliced again (up to four trees per rule), as cotengra
//! reconfigures a tree after slicing; explicit orders keep their tree.
//!
//! Measured (`cargo xtask bench`, `docs/PERFORMANCE.md`): on random graphs the work grows
//! little (16 slices: +1 %), on lattices much more (an 8×8 lattice with bond 4, a 256th of
//! the largest intermediate: 6.4× the unsliced work); slicing a greedy tree of a 6×6
//! lattice to a 256th costs 10⁷× its work, which only a tree searched together with its
//! slices (cotengra's subtree reconfiguration) would avoid.

mod run;

pub use run::{Between, SlicedPullback, ValueAndGradient};

use super::greedy::{SplitMix, walk_merges};
use super::plan::{NetworkPlan, prepare};
use super::structure::{Label, Network, Notation};
use super::tree::{ContractionTree, Order};
use crate::error::{Error, Result};
use crate::scalar::DType;
use crate::spec::{Conj, Dims};

/// What one slice of a [`SlicedPlan`] must fit in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemoryTarget {
    /// Every intermediate of the contraction tree (the result of a merge, the network's
    /// result excepted) has at most this many elements in one slice: cotengra's
    /// `target_size`, omeco's `sc_target` as `2^sc`.
    Elements(usize),
    /// The temporaries of one slice's gradient ([`SlicedPlan::value_and_gradient`], the
    /// pullback of [`SlicedPlan::rrule`]) take at most `bytes` bytes for operands of `dtype`,
    /// as [`SlicedPlan::slice_bytes`] estimates them: the intermediates the slice's pullback
    /// keeps, its own result, the cotangents live at once in the reverse sweep, and at every
    /// step a scratch copy of the step's inputs and output (what a TTGT contraction may
    /// transpose), plus the bookkeeping of the recorded steps and of the one-hot vectors
    /// (constants measured on the strided backend). The forward pass of one slice needs less.
    /// The caller's operands, the returned value and the returned cotangents are not counted;
    /// the bookkeeping grows with every sliced label, so a target below it cannot be met.
    Bytes {
        /// the limit
        bytes: usize,
        /// the element type the operands will have (the estimate scales with its size)
        dtype: DType,
    },
}

/// Estimated temporaries of one slice, in elements ([`SlicedPlan::slice_elements`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SliceMemory {
    /// the largest intermediate of the tree in one slice (a merge's result, the network's
    /// result excepted)
    pub largest: f64,
    /// the forward pass ([`SlicedPlan::execute`]): the intermediates alive at once, plus the
    /// step's scratch (a copy of its inputs and output)
    pub forward: f64,
    /// the gradient (see [`MemoryTarget::Bytes`])
    pub gradient: f64,
    /// steps of one slice's plan (each a recorded pullback in the gradient)
    pub steps: f64,
    /// one-hot vectors of one slice, kept for the whole run (a handle each)
    pub handles: f64,
}

/// A network contracted slice by slice (see [`SlicedPlan::new`] and the [`network`](crate::network) module): a plan for one slice,
/// the sliced labels and their dimensions. Built by [`SlicedPlan::new`] for a
/// [`MemoryTarget`]; executed, differentiated (pullback, pushforward, HVP) and run on the
/// rayon pool by the methods of `run.rs`.
#[derive(Clone, Debug, PartialEq)]
pub struct SlicedPlan {
    /// one slice: the operands, then one one-hot vector per axis that carries a sliced label
    plan: NetworkPlan,
    operand_dims: Vec<Dims>,
    /// the sliced labels and their dimensions
    labels: Vec<Label>,
    dims: Vec<usize>,
    /// the sliced labels' ids in the (expanded) network
    label_ids: Vec<usize>,
    /// per one-hot operand of `plan` (operands `n..`): the sliced label it selects (an index
    /// into `labels`) and the operand it is merged with
    vectors: Vec<(usize, usize)>,
    slices: usize,
    memory: SliceMemory,
    unsliced: SliceMemory,
    unsliced_cost: f64,
}

/// What the slicer knows of the unsliced tree: each merge's touched labels and result.
struct Merges {
    touched: Vec<Vec<usize>>,
    result: Vec<Vec<usize>>,
    log2_dims: Vec<f64>,
}

impl Merges {
    fn new(net: &Network, label_dims: &[usize], tree: &ContractionTree) -> Merges {
        let (mut touched, mut result) = (Vec::new(), Vec::new());
        walk_merges(
            &net.kept_labels(),
            net.output(),
            label_dims.len(),
            tree.merges(),
            |_, t, r| {
                touched.push(t.to_vec());
                result.push(r.to_vec());
            },
        );
        let log2_dims = label_dims
            .iter()
            .map(|&d| (d.max(1) as f64).log2())
            .collect();
        Merges {
            touched,
            result,
            log2_dims,
        }
    }

    fn log2_of(&self, labels: &[usize], sliced: &[bool]) -> f64 {
        labels
            .iter()
            .filter(|&&l| !sliced[l])
            .map(|&l| self.log2_dims[l])
            .sum()
    }

    /// The largest intermediate of one slice: its merge and log₂ elements (`None` without
    /// intermediates, the last merge's result being the network's).
    fn largest(&self, sliced: &[bool]) -> Option<(usize, f64)> {
        let intermediates = self.result.len().saturating_sub(1);
        (0..intermediates)
            .map(|m| (m, self.log2_of(&self.result[m], sliced)))
            .max_by(|x, y| x.1.total_cmp(&y.1))
    }

    /// The intermediates (merges but the last), largest first in one slice.
    fn by_size(&self, sliced: &[bool]) -> Vec<usize> {
        let intermediates = self.result.len().saturating_sub(1);
        let mut order: Vec<(usize, f64)> = (0..intermediates)
            .map(|m| (m, self.log2_of(&self.result[m], sliced)))
            .collect();
        order.sort_by(|x, y| y.1.total_cmp(&x.1));
        order.into_iter().map(|(m, _)| m).collect()
    }

    /// The label to slice: in the largest intermediate (for a bytes target, the largest one
    /// that still has a sliceable label), the one keeping the total work smallest (ties: the
    /// larger dimension).
    fn best_in_largest(
        &self,
        sliced: &mut [bool],
        sliceable: &impl Fn(usize) -> bool,
        target: MemoryTarget,
        mut rng: Option<&mut SplitMix>,
    ) -> Option<usize> {
        // an elements target is the largest intermediate itself; a bytes target counts them
        // all, so the largest one that can still be sliced is taken
        let depth = match target {
            MemoryTarget::Elements(_) => 1,
            MemoryTarget::Bytes { .. } => usize::MAX,
        };
        let mut order = self.by_size(sliced);
        if let Some(rng) = rng.as_deref_mut() {
            // a random one of the largest (equal sizes) first
            let top = self.log2_of(&self.result[*order.first()?], sliced);
            let ties = order
                .iter()
                .take_while(|&&m| self.log2_of(&self.result[m], sliced) >= top - 1e-9)
                .count();
            order.swap(0, (rng.next() % ties as u64) as usize);
        }
        let candidates: Vec<usize> = order
            .into_iter()
            .take(depth)
            .map(|m| -> Vec<usize> {
                self.result[m]
                    .iter()
                    .copied()
                    .filter(|&l| sliceable(l))
                    .collect()
            })
            .find(|c| !c.is_empty())?;
        let jitter: Vec<f64> = match rng {
            Some(rng) => candidates.iter().map(|_| rng.uniform()).collect(),
            None => vec![0.0; candidates.len()],
        };
        let score = |work: f64, l: usize| {
            let i = candidates.iter().position(|&c| c == l).unwrap_or(0);
            work + jitter[i]
        };
        self.cheapest(sliced, candidates.clone(), score)
    }

    /// The label to slice for an elements target: among the labels of the intermediates
    /// above `limit`, the one that costs the least extra work per unit of excess removed
    /// (excess: `Σ_m max(0, log₂ size_m − log₂ limit)`), so that a label shared by many
    /// oversize intermediates is preferred.
    fn best_for_excess(
        &self,
        sliced: &mut [bool],
        sliceable: &impl Fn(usize) -> bool,
        limit: usize,
    ) -> Option<usize> {
        let cap = (limit.max(1) as f64).log2();
        let over: Vec<(usize, f64)> = (0..self.result.len().saturating_sub(1))
            .map(|m| (m, self.log2_of(&self.result[m], sliced) - cap))
            .filter(|&(_, excess)| excess > 1e-9)
            .collect();
        let mut gain = vec![0.0f64; self.log2_dims.len()];
        for &(m, excess) in &over {
            for &l in &self.result[m] {
                if sliceable(l) {
                    gain[l] += excess.min(self.log2_dims[l]);
                }
            }
        }
        let candidates: Vec<usize> = (0..gain.len()).filter(|&l| gain[l] > 0.0).collect();
        let now = self.log2_work(sliced);
        let score = |work: f64, l: usize| (work - now).max(0.0) / gain[l];
        self.cheapest(sliced, candidates, score)
    }

    /// The candidate with the smallest `score(log₂ work once it is sliced, label)` (ties: the
    /// larger dimension, then the smaller id).
    fn cheapest(
        &self,
        sliced: &mut [bool],
        candidates: Vec<usize>,
        score: impl Fn(f64, usize) -> f64,
    ) -> Option<usize> {
        candidates
            .into_iter()
            .map(|l| {
                sliced[l] = true;
                let work = self.log2_work(sliced);
                sliced[l] = false;
                (l, score(work, l))
            })
            .min_by(|x, y| {
                x.1.total_cmp(&y.1)
                    .then(self.log2_dims[y.0].total_cmp(&self.log2_dims[x.0]))
            })
            .map(|(l, _)| l)
    }

    /// log₂ of the total work `Π_{l∈S} d_l · Σ_m Π_{l ∈ touched_m \ S} d_l` (log-sum-exp, so
    /// that costs beyond `f64` still compare).
    fn log2_work(&self, sliced: &[bool]) -> f64 {
        let per: Vec<f64> = self
            .touched
            .iter()
            .map(|t| self.log2_of(t, sliced))
            .collect();
        let top = per.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let slices: f64 = (0..sliced.len())
            .filter(|&l| sliced[l])
            .map(|l| self.log2_dims[l])
            .sum();
        if top == f64::NEG_INFINITY {
            return slices;
        }
        slices + top + per.iter().map(|x| (x - top).exp2()).sum::<f64>().log2()
    }
}

impl SlicedPlan {
    /// Plans `network` for operands of shapes `dims` in the contraction order `order` (as
    /// [`NetworkPlan::new`]), then slices contracted labels until one slice fits `target`
    /// (none when the unsliced plan fits: one slice).
    ///
    /// # Errors
    /// The errors of [`NetworkPlan::new`] (for the unsliced tree as for one slice);
    /// [`Error::MemoryLimit`] (argument `"target"`) when no slicing fits: the largest
    /// intermediate left holds only labels that cannot be sliced (output labels, dimension 1),
    /// or the number of slices would exceed `usize::MAX`.
    pub fn new<D: AsRef<[usize]>>(
        network: &Network,
        dims: &[D],
        order: &Order,
        target: MemoryTarget,
    ) -> Result<Self> {
        let (expanded, label_dims, tree, stats) = prepare(network, dims, order)?;
        let net = expanded.as_ref().unwrap_or(network);
        let dims: Vec<Dims> = dims.iter().map(|d| d.as_ref().into()).collect();
        // a searched order is searched again for the sliced network (its labels of dimension
        // 1), as cotengra reconfigures a tree after slicing; explicit orders are kept
        let search = match order {
            Order::Optimize(_) | Order::Search(_) => true,
            Order::Default => net.notation() != Notation::Ncon,
            Order::Labels(_) | Order::Tree(_) => false,
        };
        let mut best: Option<SlicedPlan> = None;
        let mut unsliced = None;
        let mut failure = None;
        let mut keep = |result: Result<SlicedPlan>, best: &mut Option<SlicedPlan>| match result {
            Ok(mut plan) => {
                plan.unsliced_cost = stats.flops;
                let labels = plan.label_ids.clone();
                if best.as_ref().is_none_or(|b| plan.cost() < b.cost()) {
                    *best = Some(plan);
                }
                Some(labels)
            }
            Err(e) => {
                failure = Some(e);
                None
            }
        };
        // a tree that fits unsliced needs no trial
        let first = slice_tree(net, &dims, &label_dims, &tree, target, 0, &mut unsliced);
        if let Ok(mut plan) = first
            && plan.num_slices() == 1
        {
            plan.unsliced_cost = stats.flops;
            return Ok(plan);
        }
        // the seeded trials on the first tree
        for trial in 2..TRIALS {
            let r = slice_tree(net, &dims, &label_dims, &tree, target, trial, &mut unsliced);
            keep(r, &mut best);
        }
        // the deterministic strategies, each followed through its own replanned trees
        for trial in 0..2 {
            let mut tree = tree.clone();
            for _ in 0..REPLANS {
                let r = slice_tree(net, &dims, &label_dims, &tree, target, trial, &mut unsliced);
                let Some(labels) = keep(r, &mut best).filter(|l| search && !l.is_empty()) else {
                    break;
                };
                let mut sliced_dims = label_dims.clone();
                for l in labels {
                    sliced_dims[l] = 1;
                }
                let next = net.tree(&sliced_dims, order)?;
                if next == tree {
                    break;
                }
                tree = next;
            }
        }
        match (best, failure) {
            (Some(best), _) => Ok(best),
            (None, Some(e)) => Err(e),
            (None, None) => Err(Error::invalid("order", "no contraction tree was searched")),
        }
    }

    /// Number of operands.
    pub fn num_operands(&self) -> usize {
        self.operand_dims.len()
    }

    /// The shape the plan expects for operand `k`.
    pub fn operand_dims(&self, k: usize) -> Option<&[usize]> {
        self.operand_dims.get(k).map(|d| d.as_slice())
    }

    /// The shape of the result.
    pub fn output_dims(&self) -> &[usize] {
        self.plan.output_dims()
    }

    /// The sliced labels (in the notation of the network, ellipsis dimensions as
    /// [`Label::Ellipsis`]), empty when the unsliced network fits.
    pub fn sliced_labels(&self) -> &[Label] {
        &self.labels
    }

    /// The dimensions of the sliced labels.
    pub fn sliced_dims(&self) -> &[usize] {
        &self.dims
    }

    /// Per operand, whether one of its axes carries a sliced label: the operands whose
    /// cotangents each slice scatters into (the others' accumulate over every slice).
    pub fn sliced_operands(&self) -> Vec<bool> {
        let mut sliced = vec![false; self.num_operands()];
        for &(_, k) in &self.vectors {
            sliced[k] = true;
        }
        sliced
    }

    /// Number of slices: the product of [`sliced_dims`](Self::sliced_dims).
    pub fn num_slices(&self) -> usize {
        self.slices
    }

    /// The plan of one slice: the network's operands first, then one one-hot vector per axis
    /// that carries a sliced label (each operand is merged with its vectors first, then the
    /// network's tree runs).
    pub fn slice_plan(&self) -> &NetworkPlan {
        &self.plan
    }

    /// Multiply-adds of all slices together (one slice's [`NetworkPlan::cost`], the
    /// selections included, times [`num_slices`](Self::num_slices)).
    pub fn cost(&self) -> f64 {
        self.plan.cost() * self.slices as f64
    }

    /// Multiply-adds of the unsliced tree's merges (as [`super::ChosenOrder::cost`]), to
    /// compare with [`cost`](Self::cost).
    pub fn unsliced_cost(&self) -> f64 {
        self.unsliced_cost
    }

    /// One slice's temporaries, in elements (see [`SliceMemory`]).
    pub fn slice_elements(&self) -> SliceMemory {
        self.memory
    }

    /// The same estimate for the unsliced network.
    pub fn unsliced_elements(&self) -> SliceMemory {
        self.unsliced
    }

    /// One slice's temporaries in bytes for operands of `dtype`: `(forward, gradient)`, the
    /// estimates [`MemoryTarget::Bytes`] bounds (see the `bytes` estimate).
    pub fn slice_bytes(&self, dtype: DType) -> (f64, f64) {
        bytes(&self.memory, dtype)
    }
}

/// Heap bookkeeping of one tensor handle besides its elements (shared storage header,
/// layout), as counted for the one-hot vectors: measured below 512 bytes on the strided
/// backend (`crates/adrules-strided/tests/it/network_sliced_memory.rs`).
const HANDLE_BYTES: f64 = 512.0;
/// Heap bookkeeping of one recorded step of a pullback besides its tensors' elements (the
/// primitive's index specs, the handles of what it reads, the kernels' index arrays):
/// measured at about 3.5 KiB on the strided backend (same test).
const RECORD_BYTES: f64 = 4096.0;

/// [`SliceMemory`] in bytes for `dtype`, with the bookkeeping: the one-hot vectors' handles in
/// both passes, a record per step in the gradient, two in the forward pass (a step's own).
fn bytes(m: &SliceMemory, dtype: DType) -> (f64, f64) {
    let size = dtype.size_of() as f64;
    let fixed = m.handles * HANDLE_BYTES;
    (
        m.forward * size + fixed + 2.0 * RECORD_BYTES,
        m.gradient * size + fixed + m.steps * RECORD_BYTES,
    )
}

/// How many contraction trees [`SlicedPlan::new`] slices at most: the first, then each
/// searched again for the network with the labels the previous one sliced set to dimension 1.
const REPLANS: usize = 4;

/// Greedy slicings tried per tree: trial 0 by [`Merges::best_in_largest`], trial 1 (elements
/// targets) by [`Merges::best_for_excess`], the others by `best_in_largest` with seeded random
/// ties and jittered scores (cotengra's `SliceFinder` samples the same way); the cheapest
/// is kept.
const TRIALS: u64 = 8;

/// Slices `tree` greedily until one slice fits `target` (see the module docs and
/// [`TRIALS`] for what `trial` selects). `unsliced` receives the estimate of the first tree
/// without slicing.
fn slice_tree(
    net: &Network,
    dims: &[Dims],
    label_dims: &[usize],
    tree: &ContractionTree,
    target: MemoryTarget,
    trial: u64,
    unsliced: &mut Option<SliceMemory>,
) -> Result<SlicedPlan> {
    let mut rng = (trial >= 2).then(|| SplitMix(0x51ce ^ trial.wrapping_mul(0x9E37_79B9)));
    let merges = Merges::new(net, label_dims, tree);
    let is_out = net.output_mask();
    let mut sliced = vec![false; label_dims.len()];
    let (limit, unit) = match target {
        MemoryTarget::Elements(e) => (e, "elements"),
        MemoryTarget::Bytes { bytes, .. } => (bytes, "bytes"),
    };
    loop {
        let labels: Vec<usize> = (0..sliced.len()).filter(|&l| sliced[l]).collect();
        let largest = merges.largest(&sliced);
        let largest_elements = largest.map_or(0.0, |(_, log2)| log2.exp2());
        // an elements target needs the slice plan only once it fits (and for the estimate of
        // the unsliced tree)
        let built = match target {
            MemoryTarget::Elements(e) if unsliced.is_some() && largest_elements > e as f64 => None,
            _ => {
                let (plan, vectors) = slice_plan(net, dims, label_dims, tree, &labels)?;
                let mut memory = live_elements(&plan, net.num_operands());
                memory.largest = largest_elements;
                unsliced.get_or_insert(memory);
                Some((plan, vectors, memory))
            }
        };
        let needed = match (target, &built) {
            (MemoryTarget::Bytes { dtype, .. }, Some((_, _, memory))) => bytes(memory, dtype).1,
            _ => largest_elements,
        };
        let fail = |reason: String| Error::MemoryLimit {
            arg: "target".into(),
            limit,
            needed,
            unit: unit.into(),
            reason,
        };
        if let (true, Some((plan, vectors, memory))) = (needed <= limit as f64, built) {
            let whole = unsliced.unwrap_or(memory);
            let slices = labels
                .iter()
                .try_fold(1usize, |p, &l| p.checked_mul(label_dims[l]))
                .ok_or_else(|| fail("fitting it takes more than usize::MAX slices".into()))?;
            return Ok(SlicedPlan {
                plan,
                operand_dims: dims.to_vec(),
                labels: labels.iter().map(|&l| net.label(l)).collect(),
                dims: labels.iter().map(|&l| label_dims[l]).collect(),
                label_ids: labels,
                vectors,
                slices,
                memory,
                unsliced: whole,
                unsliced_cost: 0.0,
            });
        }
        let Some((m, _)) = largest else {
            return Err(fail(
                "the contraction tree has no intermediate to slice (what remains is the \
                 operands, the result and the scratch of the steps on them)"
                    .into(),
            ));
        };
        let can: Vec<bool> = (0..sliced.len())
            .map(|l| !is_out[l] && !sliced[l] && label_dims[l] > 1)
            .collect();
        let sliceable = |l: usize| can[l];
        let l = match target {
            MemoryTarget::Elements(e) if trial == 1 => {
                merges.best_for_excess(&mut sliced, &sliceable, e)
            }
            _ => merges.best_in_largest(&mut sliced, &sliceable, target, rng.as_mut()),
        };
        let Some(l) = l else {
            let names: Vec<String> = merges.result[m]
                .iter()
                .map(|&l| net.label(l).to_string())
                .collect();
            let also = match target {
                MemoryTarget::Bytes { .. } => ", and so does every other intermediate",
                MemoryTarget::Elements(_) => "",
            };
            return Err(fail(format!(
                "the largest intermediate left (merge {m} of the tree, labels [{}]) holds \
                 only output labels, labels of dimension 1 and labels already sliced{also}",
                names.join(", ")
            )));
        };
        sliced[l] = true;
    }
}

/// One slice of `net` for the sliced labels `sliced`: the network whose every axis with a
/// sliced label has a label of its own, contracted with a one-hot vector (an operand after
/// the network's own); its tree merges each operand with its vectors, then follows `tree`.
/// Returns the plan and, per vector, the index into `sliced` of the label it selects and the
/// operand it selects from.
fn slice_plan(
    net: &Network,
    dims: &[Dims],
    label_dims: &[usize],
    tree: &ContractionTree,
    sliced: &[usize],
) -> Result<(NetworkPlan, Vec<(usize, usize)>)> {
    let n = net.num_operands();
    if sliced.is_empty() {
        let plan = NetworkPlan::new(net, dims, &Order::Tree(tree.clone()))?;
        return Ok((plan, Vec::new()));
    }
    let label = |id: usize| Label::Int(id as i64);
    let mut next = net.num_labels();
    // per vector: (index into `sliced`, operand, private label)
    let mut vectors: Vec<(usize, usize, usize)> = Vec::new();
    let mut inputs: Vec<Vec<Label>> = Vec::with_capacity(n);
    for (k, ax) in net.inputs().iter().enumerate() {
        let row = ax
            .iter()
            .map(|&l| match sliced.iter().position(|&s| s == l) {
                Some(s) => {
                    vectors.push((s, k, next));
                    next += 1;
                    label(next - 1)
                }
                None => label(l),
            });
        inputs.push(row.collect());
    }
    inputs.extend(vectors.iter().map(|&(_, _, p)| vec![label(p)]));
    let output: Vec<Label> = net.output().iter().map(|&l| label(l)).collect();
    let mut conj = net.conj().to_vec();
    conj.resize(n + vectors.len(), Conj::No);
    let ext = Network::from_labels(Notation::Einsum, &inputs, &output)?.with_conj(&conj)?;
    let mut ext_dims = dims.to_vec();
    ext_dims.extend(
        vectors
            .iter()
            .map(|&(s, _, _)| Dims::from(&[label_dims[sliced[s]]][..])),
    );
    // each operand merged with its vectors, then the tree over the selected operands
    let m = vectors.len();
    let mut current: Vec<usize> = (0..n).collect();
    let mut merges: Vec<[usize; 2]> = Vec::with_capacity(n + m - 1);
    for (v, &(_, k, _)) in vectors.iter().enumerate() {
        merges.push([current[k], n + v]);
        current[k] = n + m + merges.len() - 1;
    }
    let shift = n + 2 * m;
    for &[a, b] in tree.merges() {
        let at = |x: usize| if x < n { current[x] } else { x - n + shift };
        merges.push([at(a), at(b)]);
    }
    let ext_tree = ContractionTree::new(n + m, merges)?;
    let plan = NetworkPlan::new(&ext, &ext_dims, &Order::Tree(ext_tree))?;
    Ok((plan, vectors.iter().map(|v| (v.0, v.1)).collect()))
}

/// The estimate of [`SliceMemory`] (forward and gradient; `largest` is filled by the caller)
/// for one run of `plan`, in elements. A step's scratch is a copy of its inputs and output.
fn live_elements(plan: &NetworkPlan, network_operands: usize) -> SliceMemory {
    let n = plan.num_operands();
    // the one-hot vectors: d of them, of d elements, for a vector operand of dimension d
    let (mut vectors, mut handles) = (0.0, 0.0);
    for v in network_operands..n {
        let d = plan
            .operand_dims(v)
            .map_or(0.0, |d| d.iter().product::<usize>() as f64);
        vectors += d * d;
        handles += d;
    }
    let steps = plan.steps();
    let size = |v: usize| -> f64 {
        let d = if v < n {
            plan.operand_dims(v)
        } else {
            plan.step_dims(v - n)
        };
        d.map_or(0.0, |d| d.iter().map(|&x| x as f64).product())
    };
    let last = steps.len().saturating_sub(1);
    let (mut live, mut forward) = (0.0f64, 0.0f64);
    let (mut kept, mut forward_kept) = (0.0f64, 0.0f64);
    for (s, step) in steps.iter().enumerate() {
        let inputs: f64 = step.inputs().iter().map(|&v| size(v)).sum();
        let out = size(n + s);
        let scratch = inputs + out;
        // the last step writes the caller's accumulator
        let own = if s == last { 0.0 } else { out };
        forward = forward.max(live + own + scratch);
        for &v in step.inputs() {
            if v >= n {
                live -= size(v);
            }
        }
        live += own;
        // under a pullback every step's output stays, the slice's own result included
        forward_kept = forward_kept.max(kept + out + scratch);
        kept += out;
    }
    // reverse sweep: cotangents produced and not yet consumed (operands' until the end)
    let (mut pending, mut backward) = (0.0f64, 0.0f64);
    for (s, step) in steps.iter().enumerate().rev() {
        let inputs: f64 = step.inputs().iter().map(|&v| size(v)).sum();
        let out_bar = if s == last { 0.0 } else { size(n + s) };
        backward = backward.max(pending + inputs + inputs + size(n + s));
        pending += inputs - out_bar;
    }
    SliceMemory {
        largest: 0.0,
        // the one-hot vectors of every slice: an element each per index of their label
        forward: forward + vectors,
        gradient: forward_kept.max(kept + backward) + vectors,
        steps: steps.len() as f64,
        handles,
    }
}
