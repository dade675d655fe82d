//! [`Network`]: the validated, shape-independent structure of a tensor network.

use std::collections::HashMap;
use std::fmt::{self, Display};

use crate::error::{Error, Result};
use crate::spec::{Axes, Conj};

/// An index label as the user wrote it: an ncon integer or an Einstein-string letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Label {
    /// an ncon label (positive: contracted, negative: open)
    Int(i64),
    /// an Einstein-string letter
    Char(char),
    /// dimension `d` (counted from the left of the broadcast ellipsis shape) of an Einstein
    /// string's `...`, once the operand ranks are known
    Ellipsis(usize),
    /// a size-1 axis of operand `k` (axis `.1`) broadcast under an ellipsis against a larger
    /// dimension: a label of its own, summed away (numpy's broadcasting rule)
    Broadcast(usize, usize),
}

impl Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Int(i) => write!(f, "{i}"),
            Label::Char(c) => write!(f, "'{c}'"),
            Label::Ellipsis(d) => write!(f, "'...' (ellipsis dimension {d})"),
            Label::Broadcast(k, axis) => write!(f, "'...' (broadcast axis {axis} of operand {k})"),
        }
    }
}

/// The notation a network was written in; it decides the default contraction order
/// ([`crate::network::Order::Default`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Notation {
    /// ncon index lists
    Ncon,
    /// an Einstein string
    Einsum,
}

/// A validated tensor network: one label list per operand, the output labels and one
/// conjugation flag per operand. Shapes are not part of it (see
/// [`NetworkPlan`](crate::network::NetworkPlan)).
///
/// **Einstein strings** ([`Network::einsum`]) follow torch's grammar: a label may appear any
/// number of times. A label in the output is kept: in one operand it is open, in several it
/// is a batch label (`b` in `bij,bjk->bik`), repeated within one operand it is a diagonal
/// (`ii->i`). A label not in the output is summed: once in the network a sum over one axis
/// (`ij->i`), twice a contraction or trace, three or more times a hyperedge (`i,i,i->`).
/// Rejected with [`Error::InvalidLabel`]: a label repeated in the output, an output label that
/// no operand has.
///
/// **ncon lists** ([`Network::ncon`]) keep the strict tensor-network convention: every label
/// appears exactly twice in total, either **open** (once in an operand and once in the
/// output) or **contracted** (twice among the operands, not in the output; two occurrences in
/// one operand are a partial trace). Anything else is rejected with [`Error::InvalidLabel`]:
/// a label used three or more times, a label used once and absent from the output, a label
/// repeated in the output, an output label that no operand has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    notation: Notation,
    labels: Vec<Label>,
    inputs: Vec<Axes>,
    output: Axes,
    conj: Vec<Conj>,
    /// Where each operand's `...` sits among its labels (Einstein strings only).
    ellipsis: Vec<Option<usize>>,
    /// Where the output's `...` sits among its labels.
    output_ellipsis: Option<usize>,
}

fn operand_arg(k: usize) -> String {
    format!("operand {k}")
}

impl Network {
    /// Validates the generic label rules (see the type docs) and assigns label ids in order
    /// of first appearance. Conjugation flags start as [`Conj::No`].
    pub(crate) fn from_labels<I: AsRef<[Label]>>(
        notation: Notation,
        inputs: &[I],
        output: &[Label],
    ) -> Result<Self> {
        if inputs.is_empty() {
            return Err(Error::invalid(
                "operands",
                "a network needs at least one operand",
            ));
        }
        let mut ids: HashMap<Label, usize> = HashMap::new();
        let mut labels: Vec<Label> = Vec::new();
        // first operand where each label appears, and its count among operands / output
        let mut first: Vec<usize> = Vec::new();
        let mut n_in: Vec<usize> = Vec::new();
        let mut id_of = |l: Label, labels: &mut Vec<Label>| -> usize {
            *ids.entry(l).or_insert_with(|| {
                labels.push(l);
                labels.len() - 1
            })
        };
        let mut lists: Vec<Axes> = Vec::with_capacity(inputs.len());
        for (k, list) in inputs.iter().enumerate() {
            let mut axes = Axes::new();
            for &l in list.as_ref() {
                let id = id_of(l, &mut labels);
                if id == first.len() {
                    first.push(k);
                    n_in.push(0);
                }
                n_in[id] += 1;
                axes.push(id);
            }
            lists.push(axes);
        }
        let mut out = Axes::new();
        let mut is_out = vec![false; labels.len()];
        for &l in output {
            let id = id_of(l, &mut labels);
            if id == first.len() {
                return Err(Error::InvalidLabel {
                    arg: "output".into(),
                    label: l.to_string(),
                    reason: "appears in the output but in no operand".into(),
                });
            }
            if is_out[id] {
                return Err(Error::InvalidLabel {
                    arg: "output".into(),
                    label: l.to_string(),
                    reason: "appears twice in the output".into(),
                });
            }
            is_out[id] = true;
            out.push(id);
        }
        for (id, &l) in labels.iter().enumerate() {
            if notation != Notation::Ncon {
                break;
            }
            let open = is_out[id];
            let reason = match (open, n_in[id]) {
                (true, 1) | (false, 2) => continue,
                (true, n) => format!(
                    "appears in the output and {n} times among the operands; in ncon lists an \
                     open label appears once in an operand and once in the output (write an \
                     Einstein string for batch labels)"
                ),
                (false, 1) => "appears once and not in the output; in ncon lists a contracted \
                               label appears exactly twice (write an Einstein string to sum \
                               over one axis)"
                    .to_string(),
                (false, n) => format!(
                    "appears {n} times; in ncon lists a contracted label appears exactly twice \
                     (write an Einstein string for hyperedges)"
                ),
            };
            return Err(Error::InvalidLabel {
                arg: operand_arg(first[id]),
                label: l.to_string(),
                reason,
            });
        }
        let conj = vec![Conj::No; lists.len()];
        Ok(Network {
            notation,
            labels,
            ellipsis: vec![None; lists.len()],
            inputs: lists,
            output: out,
            conj,
            output_ellipsis: None,
        })
    }

    /// Records where each operand's and the output's `...` sits (positions among their
    /// labels). Einstein strings only; validated by the parser.
    pub(crate) fn with_ellipsis(
        mut self,
        inputs: Vec<Option<usize>>,
        output: Option<usize>,
    ) -> Self {
        self.ellipsis = inputs;
        self.output_ellipsis = output;
        self
    }

    /// Where operand `k`'s `...` sits among its labels (`None` without one, or when there is
    /// no operand `k`).
    pub fn operand_ellipsis(&self, k: usize) -> Option<usize> {
        self.ellipsis.get(k).copied().flatten()
    }

    /// `true` when some operand or the output has an ellipsis.
    pub fn has_ellipsis(&self) -> bool {
        self.output_ellipsis.is_some() || self.ellipsis.iter().any(Option::is_some)
    }

    /// The network for operands of shapes `dims`, with every ellipsis expanded into
    /// [`Label::Ellipsis`] labels (right-aligned, numpy's rule) and every size-1 axis that
    /// broadcasts against a larger dimension of the same label in another operand (or of the
    /// same ellipsis dimension) relabelled [`Label::Broadcast`] (summed away: torch's
    /// broadcasting rule). `None` when nothing changes (the network is already concrete for
    /// these shapes). ncon networks never broadcast.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] naming the operand when its rank is below its number of named
    /// labels; [`Error::ShapeMismatch`] naming the operand and axis when ellipsis dimensions
    /// do not broadcast (neither equal nor 1).
    pub(crate) fn instantiate<D: AsRef<[usize]>>(&self, dims: &[D]) -> Result<Option<Network>> {
        if self.notation != Notation::Einsum {
            return Ok(None);
        }
        let (mut inputs, output) = match self.ellipsis_labels(dims)? {
            Some(expanded) => expanded,
            None => (
                (0..self.inputs.len())
                    .map(|k| self.operand_labels(k).unwrap_or_default())
                    .collect(),
                self.output_labels(),
            ),
        };
        let mut changed = self.has_ellipsis();
        // torch's rule for a label: its dimensions agree or are 1 across operands
        let rank_ok =
            |k: usize, l: &[Label]| dims.get(k).is_some_and(|d| d.as_ref().len() == l.len());
        let mut target: HashMap<Label, usize> = HashMap::new();
        for (k, l) in inputs.iter().enumerate().filter(|(k, l)| rank_ok(*k, l)) {
            for (&lab, &d) in l.iter().zip(dims[k].as_ref()) {
                if d != 1 {
                    target.entry(lab).or_insert(d);
                }
            }
        }
        for (k, l) in inputs.iter_mut().enumerate() {
            if !rank_ok(k, l) {
                continue;
            }
            let d = dims[k].as_ref();
            for axis in 0..l.len() {
                let lab = l[axis];
                let larger = target.get(&lab).is_some_and(|&t| t != 1);
                let own = l.iter().zip(d).any(|(&m, &dm)| m == lab && dm != 1);
                if d[axis] == 1 && larger && !own {
                    l[axis] = Label::Broadcast(k, axis);
                    changed = true;
                }
            }
        }
        if !changed {
            return Ok(None);
        }
        Ok(Some(
            Network::from_labels(self.notation, &inputs, &output)?.with_conj(&self.conj)?,
        ))
    }

    /// The label lists of the operands and the output with every ellipsis expanded
    /// (see [`instantiate`](Self::instantiate)); `None` without an ellipsis.
    #[allow(clippy::type_complexity)]
    fn ellipsis_labels<D: AsRef<[usize]>>(
        &self,
        dims: &[D],
    ) -> Result<Option<(Vec<Vec<Label>>, Vec<Label>)>> {
        if !self.has_ellipsis() {
            return Ok(None);
        }
        // ellipsis rank of each operand, and the broadcast ellipsis shape (right-aligned)
        let mut ranks = Vec::with_capacity(self.inputs.len());
        for (k, (d, ax)) in dims.iter().zip(&self.inputs).enumerate() {
            let d = d.as_ref();
            let e = match self.ellipsis[k] {
                Some(_) if d.len() >= ax.len() => d.len() - ax.len(),
                Some(_) => {
                    return Err(Error::RankMismatch {
                        arg: format!(
                            "operand {k} (its subscripts name {} axes besides '...')",
                            ax.len()
                        ),
                        expected: ax.len(),
                        actual: d.len(),
                    });
                }
                None => 0,
            };
            ranks.push(e);
        }
        let width = ranks.iter().copied().max().unwrap_or(0);
        let mut shape: Vec<(usize, usize, usize)> = vec![(1, usize::MAX, 0); width];
        for (k, d) in dims.iter().enumerate() {
            let Some(at) = self.ellipsis[k] else { continue };
            let d = d.as_ref();
            for j in 0..ranks[k] {
                let (g, dim) = (width - ranks[k] + j, d[at + j]);
                match shape[g] {
                    (1, _, _) => shape[g] = (dim, k, at + j),
                    (s, _, _) if dim == 1 || dim == s => {}
                    (s, k0, a0) => {
                        return Err(Error::shape(
                            format!(
                                "operand {k} (axis {}, ellipsis dimension {g}, which does not \
                                 broadcast against axis {a0} of operand {k0}: dimensions must \
                                 agree or be 1)",
                                at + j
                            ),
                            &[s],
                            &[dim],
                        ));
                    }
                }
            }
        }
        let inputs: Vec<Vec<Label>> = (0..self.inputs.len())
            .map(|k| {
                let mut l = self.operand_labels(k).unwrap_or_default();
                if let Some(at) = self.ellipsis[k] {
                    // size-1 axes are relabelled by the broadcasting pass of `instantiate`
                    let first = width - ranks[k];
                    l.splice(at..at, (first..width).map(Label::Ellipsis));
                }
                l
            })
            .collect();
        let mut output = self.output_labels();
        if let Some(at) = self.output_ellipsis {
            output.splice(at..at, (0..width).map(Label::Ellipsis));
        }
        Ok(Some((inputs, output)))
    }

    /// Sets one conjugation flag per operand: operand `k` enters the network as
    /// `conj(T_k)` when `conj[k]` is [`Conj::Yes`] (a no-op for real data).
    ///
    /// # Errors
    /// [`Error::CountMismatch`] (argument `"conj"`) when `conj.len()` differs from the number
    /// of operands.
    pub fn with_conj(mut self, conj: &[Conj]) -> Result<Self> {
        if conj.len() != self.inputs.len() {
            return Err(Error::CountMismatch {
                arg: "conj".into(),
                expected: self.inputs.len(),
                actual: conj.len(),
            });
        }
        self.conj = conj.to_vec();
        Ok(self)
    }

    /// The notation the network was written in.
    pub fn notation(&self) -> Notation {
        self.notation
    }

    /// Number of operands.
    pub fn num_operands(&self) -> usize {
        self.inputs.len()
    }

    /// The conjugation flag of every operand.
    pub fn conj(&self) -> &[Conj] {
        &self.conj
    }

    /// The labels of operand `k`, one per axis, or `None` when there is no operand `k`.
    pub fn operand_labels(&self, k: usize) -> Option<Vec<Label>> {
        self.inputs
            .get(k)
            .map(|ax| ax.iter().map(|&id| self.labels[id]).collect())
    }

    /// The output labels, one per output axis.
    pub fn output_labels(&self) -> Vec<Label> {
        self.output.iter().map(|&id| self.labels[id]).collect()
    }

    /// Label ids (dense, `0..num_labels`) per axis of each operand.
    pub(crate) fn inputs(&self) -> &[Axes] {
        &self.inputs
    }

    /// Label ids of the output axes.
    pub(crate) fn output(&self) -> &[usize] {
        &self.output
    }

    /// Number of distinct labels.
    pub(crate) fn num_labels(&self) -> usize {
        self.labels.len()
    }

    /// The label with id `id`.
    pub(crate) fn label(&self, id: usize) -> Label {
        self.labels[id]
    }

    /// `true` when label `id` is contracted (or traced), i.e. not in the output (`O(output)`;
    /// use [`output_mask`](Self::output_mask) for many labels).
    #[cfg(test)]
    pub(crate) fn is_contracted(&self, id: usize) -> bool {
        !self.output.contains(&id)
    }

    /// For each label id, `true` when it is in the output. `O(labels)`.
    pub(crate) fn output_mask(&self) -> Vec<bool> {
        let mut is_out = vec![false; self.labels.len()];
        for &l in &self.output {
            is_out[l] = true;
        }
        is_out
    }

    /// Label ids of every operand that survive its own diagonals and sums: each distinct
    /// label once (first appearance order), when the output or another operand needs it.
    /// `O(Σ ranks + labels)`: per-label counts of the operands holding it, no scans.
    pub(crate) fn kept_labels(&self) -> Vec<Vec<usize>> {
        let nl = self.labels.len();
        let is_out = self.output_mask();
        // operands holding each label (each operand counted once), via a last-seen stamp
        let mut holders = vec![0usize; nl];
        let mut last = vec![usize::MAX; nl];
        for (k, ax) in self.inputs.iter().enumerate() {
            for &l in ax {
                if last[l] != k {
                    last[l] = k;
                    holders[l] += 1;
                }
            }
        }
        last.fill(usize::MAX);
        self.inputs
            .iter()
            .enumerate()
            .map(|(k, ax)| {
                let mut kept = Vec::with_capacity(ax.len());
                for &l in ax {
                    if last[l] != k && (is_out[l] || holders[l] > 1) {
                        kept.push(l);
                    }
                    last[l] = k;
                }
                kept
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Vec<Label> {
        s.chars().map(Label::Char).collect()
    }

    fn reason(e: Error) -> (String, String) {
        match e {
            Error::InvalidLabel { arg, label, .. } => (arg, label),
            other => panic!("expected InvalidLabel, got {other:?}"),
        }
    }

    #[test]
    fn label_rules() {
        let ok = Network::from_labels(Notation::Einsum, &[c("ab"), c("bc")], &c("ac")).unwrap();
        assert_eq!(ok.num_operands(), 2);
        assert_eq!(ok.output(), &[0, 2]);
        assert!(ok.is_contracted(1) && !ok.is_contracted(0));
        let cases = [
            (["ab", "bb"], "a", ("operand 0", "'b'")),
            (["ab", "b"], "ab", ("operand 0", "'b'")),
            (["ab", "bc"], "acc", ("output", "'c'")),
            (["ab", "bc"], "acd", ("output", "'d'")),
            (["ab", "bc"], "a", ("operand 1", "'c'")),
            (["ab", "ac"], "abc", ("operand 0", "'a'")),
        ];
        for (inputs, out, expected) in cases {
            let inputs = inputs.map(c);
            // ncon's strict convention rejects batch labels, sums and hyperedges ...
            let e = Network::from_labels(Notation::Ncon, &inputs, &c(out)).unwrap_err();
            assert_eq!(reason(e), (expected.0.to_string(), expected.1.to_string()));
            // ... Einstein strings reject only bad outputs
            let general = Network::from_labels(Notation::Einsum, &inputs, &c(out));
            assert_eq!(
                general.is_err(),
                expected.0 == "output",
                "{inputs:?} -> {out}"
            );
        }
        assert!(matches!(
            Network::from_labels::<Vec<Label>>(Notation::Einsum, &[], &[]),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            ok.clone().with_conj(&[Conj::Yes]),
            Err(Error::CountMismatch { .. })
        ));
        let conj = ok.with_conj(&[Conj::Yes, Conj::No]).unwrap();
        assert_eq!(conj.conj(), &[Conj::Yes, Conj::No]);
    }
}
