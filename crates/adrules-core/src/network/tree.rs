//! Contraction order: [`ContractionTree`], the [`Order`] to build one, and the
//! [`Optimizer`]s that search for a cheap one.
//!
//! # Why omeco
//! Optimized orders come from [omeco](https://crates.io/crates/omeco) (MIT), the Rust port of
//! OMEinsumContractionOrders.jl by the authors of OMEinsum.jl, rather than from
//! opt-einsum-path (Apache-2.0, a port of Python's opt_einsum):
//! - **quality of paths**: omeco offers an exact dynamic-programming search (minimum flops,
//!   per connected component), a greedy heuristic, and TreeSA (simulated annealing on
//!   trees, the method of choice for large tensor networks, Kalachev et al. 2021); the
//!   opt_einsum family covers small networks equally well (optimal, dp) but has no tree
//!   annealing for large ones;
//! - **dependency weight**: omeco's dependencies (rand, rayon, serde, serde_json, thiserror,
//!   priority-queue) are already in this workspace except priority-queue; opt-einsum-path
//!   pulls in num (big integers), itertools, lazy_static and the duplicate proc-macro, and
//!   takes networks as strings that it parses again;
//! - **licence**: MIT sits inside this workspace's `MIT OR Apache-2.0`; an Apache-2.0-only
//!   dependency would not;
//! - **API**: omeco takes integer labels and returns a binary tree (`NestedEinsum`), which
//!   maps one to one onto [`ContractionTree`].
//!
//! Both crates are young, single-maintainer ports; the tree they return is validated here
//! like any user-supplied tree, so a defect there surfaces as a typed error, not a wrong
//! number.

use std::collections::HashMap;

use omeco::{
    EinCode, ExhaustiveSearch, GreedyMethod, NestedEinsum, TreeSA, optimize_exhaustive,
    optimize_greedy, optimize_treesa,
};

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

/// A contraction-order search of [omeco](https://crates.io/crates/omeco).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Optimizer {
    /// [`Exhaustive`](Optimizer::Exhaustive) up to
    /// [`AUTO_EXHAUSTIVE_MAX`](Optimizer::AUTO_EXHAUSTIVE_MAX) operands, then
    /// [`Greedy`](Optimizer::Greedy).
    #[default]
    Auto,
    /// Greedy pairwise search (omeco `GreedyMethod`, deterministic, α = 0): repeatedly
    /// contracts the pair that shrinks the total size most. Fast, good for large networks.
    Greedy,
    /// Exact dynamic programming minimising the total flop count within each connected
    /// component (omeco `ExhaustiveSearch`); components are joined by outer products from the
    /// smallest up. Exponential in the number of operands.
    Exhaustive,
    /// Simulated annealing on trees (omeco `TreeSA::fast()`, Kalachev, Panteleev, Zhou,
    /// Yung, *Recursive multi-tensor contraction for XEB verification of quantum circuits*,
    /// 2021). Randomised; for large networks where greedy trees are too costly.
    TreeSa,
}

impl Optimizer {
    /// Largest operand count for which [`Optimizer::Auto`] searches exhaustively.
    pub const AUTO_EXHAUSTIVE_MAX: usize = 10;
}

/// How to choose the contraction tree of a network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// The notation's default: for ncon, the ncon convention (positive labels in increasing
    /// order, see [`Order::Labels`]); for Einstein strings, [`Optimizer::Auto`].
    #[default]
    Default,
    /// The ncon sequence rule with an explicit label order (TensorOperations' `order`
    /// keyword): partial traces first; then, for each contracted label in this order that is
    /// still open between two values, contract those two values over every label they share;
    /// finally, join disconnected parts by outer products from left to right. The list must be
    /// a permutation of the network's contracted labels (traced ones included).
    Labels(Vec<Label>),
    /// An order searched by an [`Optimizer`] for the given shapes.
    Optimize(Optimizer),
    /// An explicit tree.
    Tree(ContractionTree),
}

impl Order {
    /// [`Order::Labels`] from ncon labels.
    pub fn ncon(labels: &[i64]) -> Order {
        Order::Labels(labels.iter().map(|&l| Label::Int(l)).collect())
    }
}

/// Values and their labels while a tree is built.
struct Frontier {
    next: usize,
    values: Vec<(usize, Vec<usize>)>,
    merges: Vec<[usize; 2]>,
    output: Vec<usize>,
}

impl Frontier {
    /// Merges values `i` and `j`; the result keeps the labels still needed (in the output or
    /// in another value): open and batch labels stay, the others are summed.
    fn merge(&mut self, i: usize, j: usize) {
        let (vj, lj) = self.values.remove(j);
        let (vi, li) = &self.values[i];
        let (vi, li) = (*vi, li.clone());
        let needed = |l: &usize| {
            self.output.contains(l)
                || self
                    .values
                    .iter()
                    .enumerate()
                    .any(|(x, (_, lx))| x != i && lx.contains(l))
        };
        let labels: Vec<usize> = li
            .iter()
            .chain(lj.iter().filter(|l| !li.contains(l)))
            .copied()
            .filter(needed)
            .collect();
        self.merges.push([vi, vj]);
        self.values[i] = (self.next, labels);
        self.next += 1;
    }
}

impl Network {
    /// Label ids of operand `k` that survive its own diagonals and sums: each distinct label
    /// once (first appearance order), when the output or another operand needs it.
    pub(crate) fn kept_labels(&self, k: usize) -> Vec<usize> {
        let ax = &self.inputs()[k];
        let mut kept: Vec<usize> = Vec::with_capacity(ax.len());
        for &l in ax {
            let needed = self.output().contains(&l)
                || self
                    .inputs()
                    .iter()
                    .enumerate()
                    .any(|(m, other)| m != k && other.contains(&l));
            if needed && !kept.contains(&l) {
                kept.push(l);
            }
        }
        kept
    }

    /// The tree `order` asks for, given the dimension of every label (by id).
    pub(crate) fn tree(&self, label_dims: &[usize], order: &Order) -> Result<ContractionTree> {
        match (order, self.notation()) {
            (Order::Default, Notation::Ncon) => {
                let mut labels: Vec<Label> = (0..self.num_labels())
                    .filter(|&id| self.is_contracted(id))
                    .map(|id| self.label(id))
                    .collect();
                labels.sort();
                self.sequence_tree(&labels)
            }
            (Order::Default, Notation::Einsum) => self.optimized_tree(label_dims, Optimizer::Auto),
            (Order::Labels(labels), _) => self.sequence_tree(labels),
            (Order::Optimize(opt), _) => self.optimized_tree(label_dims, *opt),
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
        Frontier {
            next: n,
            values: (0..n).map(|k| (k, self.kept_labels(k))).collect(),
            merges: Vec::with_capacity(n.saturating_sub(1)),
            output: self.output().to_vec(),
        }
    }

    fn sequence_tree(&self, order: &[Label]) -> Result<ContractionTree> {
        let bad = |l: Label, reason: &str| Error::InvalidLabel {
            arg: "order".into(),
            label: l.to_string(),
            reason: reason.into(),
        };
        let mut ids = Vec::with_capacity(order.len());
        for (i, &l) in order.iter().enumerate() {
            match self.label_id(l) {
                Some(id) if self.is_contracted(id) => {}
                _ => return Err(bad(l, "is not a contracted label of the network")),
            }
            if order[..i].contains(&l) {
                return Err(bad(l, "appears twice in the order"));
            }
            ids.extend(self.label_id(l));
        }
        if let Some(id) =
            (0..self.num_labels()).find(|&id| self.is_contracted(id) && !ids.contains(&id))
        {
            return Err(bad(
                self.label(id),
                "is contracted but missing from the order",
            ));
        }
        let mut f = self.frontier();
        for id in ids {
            let mut holders = f
                .values
                .iter()
                .enumerate()
                .filter(|(_, (_, l))| l.contains(&id));
            if let (Some((i, _)), Some((j, _))) = (holders.next(), holders.next()) {
                f.merge(i, j);
            }
        }
        while f.values.len() > 1 {
            f.merge(0, 1);
        }
        ContractionTree::new(self.num_operands(), f.merges)
    }

    fn optimized_tree(&self, label_dims: &[usize], opt: Optimizer) -> Result<ContractionTree> {
        let n = self.num_operands();
        if n <= 2 {
            return ContractionTree::new(n, if n == 2 { vec![[0, 1]] } else { vec![] });
        }
        let ixs: Vec<Vec<usize>> = (0..n).map(|k| self.kept_labels(k)).collect();
        let code = EinCode::new(ixs, self.output().to_vec());
        // Zero-size labels make every order free; give the search finite logarithms.
        let sizes: HashMap<usize, usize> = label_dims
            .iter()
            .enumerate()
            .map(|(id, &d)| (id, d.max(1)))
            .collect();
        let greedy = || optimize_greedy(&code, &sizes, &GreedyMethod::default());
        let nested = match opt {
            Optimizer::Auto if n <= Optimizer::AUTO_EXHAUSTIVE_MAX => {
                optimize_exhaustive(&code, &sizes, &ExhaustiveSearch::default())
                    .ok()
                    .or_else(greedy)
            }
            Optimizer::Auto | Optimizer::Greedy => greedy(),
            Optimizer::Exhaustive => Some(
                optimize_exhaustive(&code, &sizes, &ExhaustiveSearch::default())
                    .map_err(|e| Error::invalid("order", format!("omeco: {e}")))?,
            ),
            Optimizer::TreeSa => optimize_treesa(&code, &sizes, &TreeSA::fast()),
        }
        .ok_or_else(|| Error::invalid("order", "omeco found no contraction tree"))?;
        let mut merges = Vec::with_capacity(n - 1);
        flatten(&nested, n, &mut merges)?;
        ContractionTree::new(n, merges)
    }
}

/// Post-order walk of omeco's tree into SSA merges; returns the value of `node`.
fn flatten(node: &NestedEinsum<usize>, n: usize, merges: &mut Vec<[usize; 2]>) -> Result<usize> {
    match node {
        NestedEinsum::Leaf { tensor_index } => Ok(*tensor_index),
        NestedEinsum::Node { args, .. } => match args.as_slice() {
            [a, b] => {
                let a = flatten(a, n, merges)?;
                let b = flatten(b, n, merges)?;
                merges.push([a, b]);
                Ok(n + merges.len() - 1)
            }
            _ => Err(Error::invalid(
                "order",
                format!("omeco returned a node with {} children", args.len()),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_validation() {
        assert!(ContractionTree::new(3, vec![[0, 1], [3, 2]]).is_ok());
        assert!(ContractionTree::new(1, vec![]).is_ok());
        for (n, merges) in [
            (3, vec![[0, 1]]),
            (3, vec![[0, 1], [0, 2]]),
            (3, vec![[0, 4], [3, 2]]),
            (2, vec![[1, 1]]),
            (0, vec![]),
        ] {
            assert!(
                ContractionTree::new(n, merges.clone()).is_err(),
                "{merges:?}"
            );
        }
    }

    #[test]
    fn ncon_sequence_rule() {
        // A[-1,1,2] B[2,3] C[3,1,-2]: label 1 joins A and C first, then 2 brings in B.
        let net = Network::ncon(&[vec![-1, 1, 2], vec![2, 3], vec![3, 1, -2]], None).unwrap();
        let dims = vec![2; net.num_labels()];
        let t = net.tree(&dims, &Order::Default).unwrap();
        assert_eq!(t.merges(), &[[0, 2], [3, 1]]);
        let t = net.tree(&dims, &Order::ncon(&[3, 2, 1])).unwrap();
        assert_eq!(t.merges(), &[[1, 2], [0, 3]]);
        // disconnected: outer products left to right; traces are not merges
        let net = Network::ncon(&[vec![-1, 1, 1], vec![-2], vec![-3, 2], vec![2]], None).unwrap();
        let t = net.tree(&[2; 6], &Order::Default).unwrap();
        assert_eq!(t.merges(), &[[2, 3], [0, 1], [5, 4]]);
        for bad in [vec![1, 2], vec![1], vec![1, 2, 3, 3], vec![1, -1, 2]] {
            let net = Network::ncon(&[vec![-1, 1, 2], vec![2, 3], vec![3, 1, -2]], None).unwrap();
            assert!(matches!(
                net.tree(&[2; 5], &Order::ncon(&bad)),
                Err(Error::InvalidLabel { .. })
            ));
        }
    }

    #[test]
    fn optimizers_give_valid_trees() {
        let net = Network::einsum("ab,bc,cd,de,ef,fa->").unwrap();
        for opt in [
            Optimizer::Auto,
            Optimizer::Greedy,
            Optimizer::Exhaustive,
            Optimizer::TreeSa,
        ] {
            let t = net
                .tree(&[3, 4, 5, 6, 7, 8], &Order::Optimize(opt))
                .unwrap();
            assert_eq!(t.merges().len(), 5);
        }
    }
}
