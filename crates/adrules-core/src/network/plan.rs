//! [`NetworkPlan`]: a network lowered, for fixed shapes, to a sequence of primitive calls,
//! and its primal executor.

use smallvec::SmallVec;

use super::greedy::TreeStats;
use super::structure::Network;
use super::tree::{ContractionTree, Order};
use crate::alloc::{Allocator, HeapAllocator, Lifetime};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::rules::{AddOp, ContractOp, Primitive, TraceOp};
use crate::scalar::{DType, DynScalar};
use crate::spec::{Axes, Conj, ContractSpec, Dims, Permutation, TraceSpec};

/// One primitive call of a plan: `out = primitive(inputs)` with α = 1 and β = 0. Values
/// `0..n` are the operands; step `s` produces value `n + s`; the last step produces the
/// network's result.
///
/// The primitive is a [`Primitive::Trace`] (the partial traces of one operand), a
/// [`Primitive::Contract`] (one merge of the contraction tree; the conjugation flags are the
/// operands' flags, [`Conj::No`] for intermediates), or a [`Primitive::Add`] (only for a
/// one-operand network without traces).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    inputs: SmallVec<[usize; 2]>,
    primitive: Primitive,
}

impl Step {
    /// The values this step reads, in the primitive's operand order.
    pub fn inputs(&self) -> &[usize] {
        &self.inputs
    }

    /// The primitive call (α = 1, β = 0).
    pub fn primitive(&self) -> &Primitive {
        &self.primitive
    }
}

/// A network lowered for fixed operand shapes: validated once, executed many times.
///
/// Lowering (TensorOperations' convention, 0-based): the partial traces of each operand come
/// first (a [`Step`] with [`Primitive::Trace`]); then every merge of the [`ContractionTree`] is one
/// [`Step`] with [`Primitive::Contract`] over all labels its two values share. An intermediate keeps its axes in
/// the order `(open axes of a…, open axes of b…)`, so its contraction writes without an
/// output permutation; the last step permutes into the output order. Contracted axes are
/// paired in the axis order of the larger of the two values, which spares the larger one a
/// transposition in GEMM-based backends. Conjugation flags act on operands only; intermediates
/// are stored unconjugated.
///
/// Intermediates take the joined dtype of what they contract ([`DType::join`]); the result
/// takes the joined dtype of all operands.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkPlan {
    operand_dims: Vec<Dims>,
    tree: ContractionTree,
    steps: Vec<Step>,
    step_dims: Vec<Dims>,
    cost: f64,
}

fn positions(of: &[usize], within: &[usize]) -> Axes {
    of.iter()
        .map(|l| within.iter().position(|m| m == l).unwrap_or(usize::MAX))
        .collect()
}

fn size(labels: &[usize], label_dims: &[usize]) -> f64 {
    labels.iter().map(|&l| label_dims[l] as f64).product()
}

/// Lowers the merge of values labelled `la` and `lb`; labels for which `keep` is true are
/// still needed after it (in the output or another live value). Shared labels are batch labels when kept and
/// contracted otherwise; with `out`, the result is permuted into that label order. Returns the
/// spec and the labels of the result.
fn lower_pair(
    la: &[usize],
    lb: &[usize],
    label_dims: &[usize],
    keep: &impl Fn(usize) -> bool,
    out: Option<&[usize]>,
) -> Result<(ContractSpec, Vec<usize>)> {
    let larger = if size(lb, label_dims) > size(la, label_dims) {
        lb
    } else {
        la
    };
    let shared: Vec<usize> = larger
        .iter()
        .copied()
        .filter(|l| la.contains(l) && lb.contains(l))
        .collect();
    let (batch, contr): (Vec<usize>, Vec<usize>) = shared.iter().partition(|&&l| keep(l));
    let open_a: Vec<usize> = la.iter().copied().filter(|l| !shared.contains(l)).collect();
    let open_b: Vec<usize> = lb.iter().copied().filter(|l| !shared.contains(l)).collect();
    let natural: Vec<usize> = batch
        .iter()
        .chain(&open_a)
        .chain(&open_b)
        .copied()
        .collect();
    let perm: Axes = match out {
        Some(out) => positions(out, &natural),
        None => (0..natural.len()).collect(),
    };
    let spec = ContractSpec::batched(
        &positions(&batch, la),
        &positions(&batch, lb),
        &positions(&open_a, la),
        &positions(&contr, la),
        &positions(&contr, lb),
        &positions(&open_b, lb),
        &perm,
    )?;
    Ok((spec, out.map_or(natural, <[usize]>::to_vec)))
}

/// Positions of each label of `labels` in `ax` (the axes of one diagonal group).
fn group(ax: &[usize], l: usize) -> Axes {
    (0..ax.len()).filter(|&i| ax[i] == l).collect()
}

/// Validates `dims` against `network` (one shape per operand, matching ranks, equal dimensions
/// of paired axes) and returns the dimension of every label (0 for a label without axes).
fn label_dims<D: AsRef<[usize]>>(network: &Network, dims: &[D]) -> Result<Vec<usize>> {
    let mut label_dims: Vec<Option<(usize, usize, usize)>> = vec![None; network.num_labels()];
    for (k, (d, labels)) in dims.iter().zip(network.inputs()).enumerate() {
        let d = d.as_ref();
        if d.len() != labels.len() {
            return Err(Error::rank(format!("operand {k}"), labels.len(), d.len()));
        }
        for (axis, (&dim, &id)) in d.iter().zip(labels).enumerate() {
            match label_dims[id] {
                None => label_dims[id] = Some((dim, k, axis)),
                Some((first, k0, a0)) if first != dim => {
                    return Err(Error::shape(
                        format!(
                            "operand {k} (axis {axis}, label {}, paired with axis {a0} of operand {k0})",
                            network.label(id)
                        ),
                        &[first],
                        &[dim],
                    ));
                }
                Some(_) => {}
            }
        }
    }
    let label_dims: Vec<usize> = label_dims.iter().map(|d| d.map_or(0, |d| d.0)).collect();
    Ok(label_dims)
}

/// The validation and order search shared by [`NetworkPlan::new`] and
/// [`NetworkPlan::choose_order`]: the network with its ellipses expanded (when it has some),
/// the label dimensions, the tree and its statistics.
pub(super) fn prepare<D: AsRef<[usize]>>(
    network: &Network,
    dims: &[D],
    order: &Order,
) -> Result<(Option<Network>, Vec<usize>, ContractionTree, TreeStats)> {
    if dims.len() != network.num_operands() {
        return Err(Error::CountMismatch {
            arg: "dims".into(),
            expected: network.num_operands(),
            actual: dims.len(),
        });
    }
    let expanded = network.instantiate(dims)?;
    let net = expanded.as_ref().unwrap_or(network);
    let label_dims = label_dims(net, dims)?;
    let tree = net.tree(&label_dims, order)?;
    let stats = TreeStats::of(&net.kept_labels(), net.output(), &label_dims, tree.merges());
    Ok((expanded, label_dims, tree, stats))
}

/// A contraction order chosen for fixed shapes, before lowering: the tree, its cost and its
/// largest intermediate ([`NetworkPlan::choose_order`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ChosenOrder {
    /// the contraction tree
    pub tree: ContractionTree,
    /// multiply-adds of the tree's merges (sum over merges of the product of the dimensions
    /// of every label the merge touches; [`NetworkPlan::cost`] adds the steps on single
    /// operands: their traces, or the permutation of a one-operand network), `+∞` beyond
    /// `f64`
    pub cost: f64,
    /// log₂ of the number of elements of the largest intermediate (results of merges, the
    /// network's result included; a zero dimension counted as 1)
    pub log2_largest: f64,
    /// whether every intermediate has at most `usize::MAX` elements (else
    /// [`NetworkPlan::new`] refuses the tree)
    pub fits: bool,
}

impl NetworkPlan {
    /// The contraction tree that `order` chooses for operands of shapes `dims`, its cost and
    /// its largest intermediate, without lowering it: also for trees whose intermediates
    /// cannot be allocated (which [`NetworkPlan::new`] refuses), so that orders can be
    /// compared and memory checked before planning.
    ///
    /// # Errors
    /// As [`NetworkPlan::new`], except the refusal of intermediates beyond `usize::MAX`.
    pub fn choose_order<D: AsRef<[usize]>>(
        network: &Network,
        dims: &[D],
        order: &Order,
    ) -> Result<ChosenOrder> {
        let (_, _, tree, stats) = prepare(network, dims, order)?;
        Ok(ChosenOrder {
            tree,
            cost: stats.flops,
            log2_largest: stats.log2_largest,
            fits: stats.overflow.is_none(),
        })
    }

    /// Lowers `network` for operands of shapes `dims`, with the contraction tree that `order`
    /// asks for.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"dims"`) when `dims` does not have one shape per
    /// operand; [`Error::RankMismatch`] (argument `"operand k"`) when a shape's rank differs
    /// from the length of the operand's label list; [`Error::ShapeMismatch`] naming the
    /// operand, axis and label when the two axes of a contracted (or traced) label differ in
    /// dimension; the errors of [`Order`] (an invalid label order or tree, an optimizer
    /// failure); [`Error::InvalidArgument`] (argument `"order"`) when an intermediate of the
    /// chosen tree would hold more than `usize::MAX` elements.
    pub fn new<D: AsRef<[usize]>>(network: &Network, dims: &[D], order: &Order) -> Result<Self> {
        let n = network.num_operands();
        let (expanded, label_dims, tree, stats) = prepare(network, dims, order)?;
        let network = expanded.as_ref().unwrap_or(network);
        if let Some((s, log2)) = stats.overflow {
            return Err(Error::invalid(
                "order",
                format!(
                    "merge {s} of the contraction tree makes an intermediate of about \
                     2^{log2:.0} elements, more than usize::MAX: no tree this order gives can \
                     be allocated (search longer, e.g. Optimizer::TreeSa or RandomGreedy with \
                     a budget, and check NetworkPlan::choose_order first)"
                ),
            ));
        }
        let mut steps = Vec::new();
        // labels of every value, and the flag to apply when reading it
        let mut labels: Vec<Vec<usize>> = network.inputs().iter().map(|l| l.to_vec()).collect();
        let mut conj: Vec<Conj> = network.conj().to_vec();
        let output = network.output();
        let is_out = network.output_mask();
        // value holding operand k after its own diagonals and sums
        let mut leaf: Vec<usize> = (0..n).collect();
        let all_kept = network.kept_labels();
        for ((k, ax), kept) in network.inputs().iter().enumerate().zip(all_kept) {
            let reduced = kept.len() < ax.len();
            if !reduced && n > 1 {
                continue;
            }
            let target = if n == 1 { output.to_vec() } else { kept };
            let primitive = if reduced {
                let kept_groups: Vec<Axes> = target.iter().map(|&l| group(ax, l)).collect();
                let mut summed: Vec<Axes> = Vec::new();
                for (i, &l) in ax.iter().enumerate() {
                    if !target.contains(&l) && !ax[..i].contains(&l) {
                        summed.push(group(ax, l));
                    }
                }
                let spec = TraceSpec::from_groups(&kept_groups, &summed)?;
                TraceOp::new(spec).conj(network.conj()[k]).into()
            } else {
                let p = positions(&target, ax);
                AddOp::new(Permutation::new(&p)?)
                    .conj(network.conj()[k])
                    .into()
            };
            steps.push(Step {
                inputs: SmallVec::from_slice(&[k]),
                primitive,
            });
            leaf[k] = labels.len();
            labels.push(target);
            conj.push(Conj::No);
        }
        let mut value_of: Vec<usize> = leaf;
        let last = tree.merges().len();
        // how many live values of the tree hold each label (each value's labels are distinct)
        let mut holders: Vec<usize> = vec![0; network.num_labels()];
        for &v in &value_of {
            for &l in &labels[v] {
                holders[l] += 1;
            }
        }
        for (m, &[x, y]) in tree.merges().iter().enumerate() {
            let (a, b) = (value_of[x], value_of[y]);
            for &l in labels[a].iter().chain(&labels[b]) {
                holders[l] -= 1;
            }
            // needed later: in the output or held by another live value
            let keep = |l: usize| is_out[l] || holders[l] > 0;
            let out = (m + 1 == last).then_some(output);
            let (mut a, mut b) = (a, b);
            let (mut spec, mut res) = lower_pair(&labels[a], &labels[b], &label_dims, &keep, out)?;
            if !spec.perm_ab().is_identity() {
                let (s2, r2) = lower_pair(&labels[b], &labels[a], &label_dims, &keep, out)?;
                if s2.perm_ab().is_identity() {
                    (spec, res) = (s2, r2);
                    std::mem::swap(&mut a, &mut b);
                }
            }
            steps.push(Step {
                inputs: SmallVec::from_slice(&[a, b]),
                primitive: ContractOp::new(spec).conj(conj[a], conj[b]).into(),
            });
            for &l in &res {
                holders[l] += 1;
            }
            value_of.push(labels.len());
            labels.push(res);
            conj.push(Conj::No);
        }
        let mut cost = 0.0;
        // labels touched by each step, marked per step: linear in the ranks
        let mut mark = vec![usize::MAX; network.num_labels()];
        let mut step_dims: Vec<Dims> = Vec::with_capacity(steps.len());
        for (s, step) in steps.iter().enumerate() {
            let res = &labels[n + s];
            let mut all: Vec<usize> = Vec::new();
            for &v in step.inputs() {
                for &l in &labels[v] {
                    if mark[l] != s {
                        mark[l] = s;
                        all.push(l);
                    }
                }
            }
            cost += size(&all, &label_dims);
            let d: Dims = res.iter().map(|&l| label_dims[l]).collect();
            step_dims.push(d);
        }
        Ok(NetworkPlan {
            operand_dims: dims
                .iter()
                .map(|d| d.as_ref().iter().copied().collect())
                .collect(),
            tree,
            steps,
            step_dims,
            cost,
        })
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
        self.step_dims.last().map_or(&[], |d| d.as_slice())
    }

    /// The contraction tree the plan follows.
    pub fn tree(&self) -> &ContractionTree {
        &self.tree
    }

    /// The primitive calls, in execution order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The shape of the value step `s` produces.
    pub fn step_dims(&self, s: usize) -> Option<&[usize]> {
        self.step_dims.get(s).map(|d| d.as_slice())
    }

    /// Scalar multiply-adds of the plan: for each step, the product of the dimensions of all
    /// labels it touches (for a contraction, output size × contracted size).
    pub fn cost(&self) -> f64 {
        self.cost
    }

    /// Runs the steps with a caller-supplied evaluator, for engines that execute each step as
    /// one of their own (differentiable) ops rather than as [`Backend`] updates (the candle
    /// adapter chains its custom ops this way): `eval(step, inputs)` returns the value of
    /// `step` from the values it reads, in [`Step::inputs`] order. Each intermediate is read by
    /// exactly one step and is dropped as soon as that step has run. Returns the last step's
    /// value. The values are opaque, so shapes are not checked here: check them against
    /// [`operand_dims`](Self::operand_dims) first.
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"operands"`) for a wrong number of operands; the
    /// errors of `eval`.
    pub fn evaluate<T>(
        &self,
        operands: &[&T],
        mut eval: impl FnMut(&Step, &[&T]) -> Result<T>,
    ) -> Result<T> {
        self.check_count(operands.len())?;
        self.fold_steps(
            operands,
            |s, inputs| eval(&self.steps[s], inputs).map(Some),
            drop,
        )?
        .ok_or_else(|| Error::invalid("plan", "a plan without steps"))
    }

    fn check_count(&self, actual: usize) -> Result<()> {
        if actual == self.num_operands() {
            return Ok(());
        }
        Err(Error::CountMismatch {
            arg: "operands".into(),
            expected: self.num_operands(),
            actual,
        })
    }

    /// The loop shared by [`evaluate`](Self::evaluate) and [`walk`](Self::walk): step `s`
    /// gets its inputs and yields its value through `eval(s, inputs)` (`None`: written
    /// elsewhere); an intermediate goes to `release` as soon as its consumer has run. Returns
    /// the last step's value.
    fn fold_steps<T>(
        &self,
        operands: &[&T],
        mut eval: impl FnMut(usize, &[&T]) -> Result<Option<T>>,
        mut release: impl FnMut(T),
    ) -> Result<Option<T>> {
        let n = operands.len();
        let mut values: SmallVec<[Option<T>; 16]> = (0..self.steps.len()).map(|_| None).collect();
        for (s, step) in self.steps.iter().enumerate() {
            let ids = step.inputs();
            let result = {
                let inputs: SmallVec<[&T; 2]> = ids
                    .iter()
                    .map(|&v| value(operands, &values, v))
                    .collect::<Result<_>>()?;
                eval(s, &inputs)?
            };
            values[s] = result;
            for &v in ids {
                if let Some(t) = v.checked_sub(n).and_then(|i| values[i].take()) {
                    release(t);
                }
            }
        }
        Ok(values.pop().flatten())
    }

    /// Checks operand count and shapes; returns the joined dtype of the operands.
    pub(crate) fn check_operands<B: Backend>(
        &self,
        be: &B,
        operands: &[&B::Tensor],
    ) -> Result<DType> {
        self.check_count(operands.len())?;
        let mut dtype = DType::F32;
        for (k, (t, d)) in operands.iter().zip(&self.operand_dims).enumerate() {
            let dims = be.dims(t);
            if dims != *d {
                return Err(Error::shape(format!("operand {k}"), d, &dims));
            }
            dtype = dtype.join(be.dtype(t));
        }
        Ok(dtype)
    }

    /// Contracts the network: a new tensor of shape [`output_dims`](Self::output_dims) and the
    /// joined dtype of the operands. Intermediates come from the heap ([`HeapAllocator`]).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"operands"`) for a wrong number of operands;
    /// [`Error::ShapeMismatch`] (argument `"operand k"`) when a shape differs from the planned
    /// one; dtype and engine errors of the backend; [`Error::NonFinite`] (argument
    /// `"output"`) when the value overflows although every operand is finite
    /// ([`crate::finite`]).
    pub fn execute<B: Backend>(&self, be: &B, operands: &[&B::Tensor]) -> Result<B::Tensor> {
        self.execute_with(be, &HeapAllocator, operands)
    }

    /// As [`execute`](Self::execute), with intermediates (and the result, as a
    /// [`Lifetime::Persistent`] allocation) from `alloc`.
    ///
    /// # Errors
    /// As [`execute`](Self::execute).
    pub fn execute_with<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
    ) -> Result<B::Tensor> {
        let dtype = self.check_operands(be, operands)?;
        let mut c = alloc.allocate(be, self.output_dims(), dtype, Lifetime::Persistent)?;
        let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
        self.run(be, alloc, operands, &mut c, one, zero)?;
        crate::finite::check(be, || "output".into(), &c, operands)?;
        Ok(c)
    }

    /// BLAS-style execution into an existing tensor: `C ← β·C + α·network(operands)`, with
    /// intermediates from `alloc` (given back as soon as consumed). `β = 0` is a strong zero.
    ///
    /// # Errors
    /// As [`execute`](Self::execute); [`Error::DTypeMismatch`] (argument `"operand k"`) when
    /// an operand's dtype does not promote to C's; the backend's shape and dtype errors for
    /// `c`, `alpha` and `beta`.
    pub fn execute_into<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        c: &mut B::Tensor,
        operands: &[&B::Tensor],
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        self.check_operands(be, operands)?;
        let c_dtype = be.dtype(c);
        for (k, t) in operands.iter().enumerate() {
            let dtype = be.dtype(t);
            if !dtype.promotes_to(c_dtype) {
                return Err(Error::DTypeMismatch {
                    arg: format!("operand {k}"),
                    expected: format!("a dtype that promotes to C's {c_dtype}"),
                    actual: dtype,
                });
            }
        }
        self.run(be, alloc, operands, c, alpha, beta)
    }

    fn run<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        c: &mut B::Tensor,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let last = self.steps.len() - 1;
        self.walk(be, alloc, operands, c, |s, out, inputs| {
            let op = &self.steps[s].primitive;
            if s == last {
                op.clone()
                    .with_coefficients(alpha, beta)
                    .apply(be, out, inputs)
            } else {
                op.apply(be, out, inputs)
            }
        })
    }

    /// Runs the steps in order, inside [`Allocator::scope`]: step `s` writes, through
    /// `f(s, out, inputs)`, into a fresh temporary from `alloc` (of the joined dtype of its
    /// inputs), except the last step, which writes into `c`. A temporary is given back to
    /// `alloc` as soon as its consumer has run; whatever `f` keeps of it (a pullback's clone)
    /// keeps the storage alive (see [`crate::alloc`]).
    pub(crate) fn walk<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        c: &mut B::Tensor,
        f: impl FnMut(usize, &mut B::Tensor, &[&B::Tensor]) -> Result<()>,
    ) -> Result<()> {
        alloc.scope(|| self.walk_steps(be, alloc, operands, c, f))
    }

    fn walk_steps<B: Backend, A: Allocator<B>>(
        &self,
        be: &B,
        alloc: &A,
        operands: &[&B::Tensor],
        c: &mut B::Tensor,
        mut f: impl FnMut(usize, &mut B::Tensor, &[&B::Tensor]) -> Result<()>,
    ) -> Result<()> {
        let last = self.steps.len() - 1;
        let eval = |s: usize, inputs: &[&B::Tensor]| {
            if s == last {
                f(s, c, inputs)?;
                return Ok(None);
            }
            let dtype = inputs
                .iter()
                .fold(DType::F32, |acc, t| acc.join(be.dtype(t)));
            let mut t = alloc.allocate(be, &self.step_dims[s], dtype, Lifetime::Temporary)?;
            f(s, &mut t, inputs)?;
            Ok(Some(t))
        };
        self.fold_steps(operands, eval, |t| alloc.free(t))?;
        Ok(())
    }
}

/// Value `v` during execution: operand `v`, or the result of step `v − n`.
pub(crate) fn value<'a, T>(operands: &[&'a T], values: &'a [Option<T>], v: usize) -> Result<&'a T> {
    let n = operands.len();
    if v < n {
        return Ok(operands[v]);
    }
    values
        .get(v - n)
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::invalid("plan", format!("value {v} is read before it is computed")))
}
