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
}

impl Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Int(i) => write!(f, "{i}"),
            Label::Char(c) => write!(f, "'{c}'"),
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
/// Every label appears exactly twice in total:
/// - **open**: once in an operand and once in the output;
/// - **contracted**: twice among the operands and not in the output. Two occurrences in the
///   same operand are a partial trace (done first), in two operands a contraction.
///
/// Anything else is rejected with [`Error::InvalidLabel`]: a label used three or more times
/// (hyperedges and batch labels such as `"bij,bjk->bik"`), a label used once and absent from
/// the output (a sum over one axis), a label repeated in the output, an output label that no
/// operand has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    notation: Notation,
    labels: Vec<Label>,
    inputs: Vec<Axes>,
    output: Axes,
    conj: Vec<Conj>,
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
        for &l in output {
            let id = id_of(l, &mut labels);
            if id == first.len() {
                return Err(Error::InvalidLabel {
                    arg: "output".into(),
                    label: l.to_string(),
                    reason: "appears in the output but in no operand".into(),
                });
            }
            if out.contains(&id) {
                return Err(Error::InvalidLabel {
                    arg: "output".into(),
                    label: l.to_string(),
                    reason: "appears twice in the output".into(),
                });
            }
            out.push(id);
        }
        for (id, &l) in labels.iter().enumerate() {
            let open = out.contains(&id);
            let reason = match (open, n_in[id]) {
                (true, 1) | (false, 2) => continue,
                (true, n) => format!(
                    "appears in the output and {n} times among the operands; an open label \
                     appears once in an operand and once in the output (batch labels and \
                     hyperedges are not supported)"
                ),
                (false, 1) => "appears once and not in the output; a contracted label appears \
                               exactly twice (summing over a single axis is not supported)"
                    .to_string(),
                (false, n) => format!(
                    "appears {n} times; a contracted label appears exactly twice (hyperedges \
                     are not supported)"
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
            inputs: lists,
            output: out,
            conj,
        })
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

    /// The id of `label`, if the network has it.
    pub(crate) fn label_id(&self, label: Label) -> Option<usize> {
        self.labels.iter().position(|&l| l == label)
    }

    /// `true` when label `id` is contracted (or traced), i.e. not in the output.
    pub(crate) fn is_contracted(&self, id: usize) -> bool {
        !self.output.contains(&id)
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
            let e = Network::from_labels(Notation::Einsum, &inputs, &c(out)).unwrap_err();
            assert_eq!(reason(e), (expected.0.to_string(), expected.1.to_string()));
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
