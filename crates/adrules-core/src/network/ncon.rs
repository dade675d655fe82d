//! The ncon front-end: networks written as integer index lists (Pfeifer, Evenbly, Singh,
//! Vidal, *NCON: A tensor network contractor for MATLAB*, arXiv:1402.0939; the same
//! convention as TensorOperations.jl's `ncon` and `@ncon`).

use std::collections::BTreeMap;

use super::structure::{Label, Network, Notation};
use crate::error::{Error, Result};

fn bad(arg: &str, label: i64, reason: impl Into<String>) -> Error {
    Error::InvalidLabel {
        arg: arg.into(),
        label: label.to_string(),
        reason: reason.into(),
    }
}

impl Network {
    /// A network in ncon notation: `indices[k]` labels the axes of operand `k`.
    ///
    /// - A **positive** label is contracted: it appears exactly twice, in two operands (a
    ///   contraction) or twice in one operand (a partial trace, done before any contraction).
    /// - A **negative** label is open: it appears exactly once. Without `output`, the open
    ///   labels must be `−1, −2, …, −k` and output axis `m` carries label `−(m+1)`. With
    ///   `output`, they may be any negative numbers and `output` lists each of them once, in
    ///   the order of the output axes.
    /// - `0` is not a label.
    ///
    /// The default contraction order ([`Order::Default`](super::Order::Default)) is the ncon
    /// convention: positive labels in increasing order.
    ///
    /// ncon keeps this strict tensor-network convention on purpose (it is what the ncon
    /// sequence rule and tensor-network codes expect, and a label used three times is almost
    /// always a typo there). Batch labels, hyperedges, diagonals kept in the output and sums
    /// over single axes are written as Einstein strings ([`Network::einsum`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty network; [`Error::InvalidLabel`] for the label
    /// `0`, a positive label that does not appear exactly twice, a negative label that appears
    /// twice, negative labels that are not `−1…−k` (without `output`), a positive, repeated,
    /// unknown or missing label in `output`.
    ///
    /// # Example
    /// ```
    /// use adrules_core::network::Network;
    /// // C[i, k] = Σ_j A[i, j] · B[j, k]
    /// let net = Network::ncon(&[[-1, 1], [1, -2]], None).unwrap();
    /// assert_eq!(net.num_operands(), 2);
    /// ```
    pub fn ncon<I: AsRef<[i64]>>(indices: &[I], output: Option<&[i64]>) -> Result<Network> {
        let mut count: BTreeMap<i64, (usize, usize)> = BTreeMap::new(); // label -> (count, first operand)
        for (k, list) in indices.iter().enumerate() {
            for &l in list.as_ref() {
                if l == 0 {
                    return Err(bad(
                        &format!("operand {k}"),
                        0,
                        "0 is not an ncon label (positive labels are contracted, negative \
                         labels are open)",
                    ));
                }
                count.entry(l).or_insert((0, k)).0 += 1;
            }
        }
        for (&l, &(n, k)) in &count {
            let arg = format!("operand {k}");
            if l > 0 && n != 2 {
                return Err(bad(
                    &arg,
                    l,
                    format!(
                        "positive (contracted) label appears {n} time(s); it must appear exactly twice"
                    ),
                ));
            }
            if l < 0 && n != 1 {
                return Err(bad(
                    &arg,
                    l,
                    format!("negative (open) label appears {n} times; it must appear exactly once"),
                ));
            }
        }
        let open: Vec<i64> = count.keys().copied().filter(|&l| l < 0).collect();
        let output: Vec<i64> = match output {
            None => {
                let k = open.len() as i64;
                if let Some(&l) = open.iter().find(|&&l| l < -k) {
                    let missing = (1..=k).map(|m| -m).find(|m| !count.contains_key(m));
                    return Err(bad(
                        "indices",
                        l,
                        format!(
                            "the {k} open labels must be -1..-{k} when no output is given{}",
                            missing
                                .map(|m| format!(" ({m} is missing)"))
                                .unwrap_or_default()
                        ),
                    ));
                }
                (1..=k).map(|m| -m).collect()
            }
            Some(out) => {
                let mut listed: std::collections::BTreeSet<i64> = std::collections::BTreeSet::new();
                for &l in out {
                    if l >= 0 {
                        return Err(bad(
                            "output",
                            l,
                            "output labels are the open (negative) labels",
                        ));
                    }
                    if !listed.insert(l) {
                        return Err(bad("output", l, "appears twice in the output"));
                    }
                    if !count.contains_key(&l) {
                        return Err(bad("output", l, "appears in the output but in no operand"));
                    }
                }
                if let Some(&l) = open.iter().find(|l| !listed.contains(l)) {
                    return Err(bad(
                        "output",
                        l,
                        "is open (negative) but missing from the output",
                    ));
                }
                out.to_vec()
            }
        };
        let inputs: Vec<Vec<Label>> = indices
            .iter()
            .map(|l| l.as_ref().iter().map(|&x| Label::Int(x)).collect())
            .collect();
        let output: Vec<Label> = output.into_iter().map(Label::Int).collect();
        Network::from_labels(Notation::Ncon, &inputs, &output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label_of(e: Error) -> (String, String) {
        match e {
            Error::InvalidLabel { arg, label, .. } => (arg, label),
            other => panic!("expected InvalidLabel, got {other:?}"),
        }
    }

    #[test]
    fn ncon_validation() {
        let net = Network::ncon(&[vec![-1, 1, 2, 2], vec![1, -2]], None).unwrap();
        assert_eq!(net.output_labels(), vec![Label::Int(-1), Label::Int(-2)]);
        let with_out = Network::ncon(&[[-5, 1], [1, -3]], Some(&[-3, -5])).unwrap();
        assert_eq!(
            with_out.output_labels(),
            vec![Label::Int(-3), Label::Int(-5)]
        );
        let err =
            |idx: &[&[i64]], out: Option<&[i64]>| label_of(Network::ncon(idx, out).unwrap_err());
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(err(&[&[-1, 0]], None), s("operand 0", "0"));
        assert_eq!(err(&[&[-1, 1], &[1, 1]], None), s("operand 0", "1"));
        assert_eq!(err(&[&[-1, 1], &[2, -2]], None), s("operand 0", "1"));
        assert_eq!(err(&[&[-1, 1], &[1, -1]], None), s("operand 0", "-1"));
        assert_eq!(err(&[&[-1, 1], &[1, -3]], None), s("indices", "-3"));
        assert_eq!(err(&[&[-1, 1], &[1, -2]], Some(&[-1, 1])), s("output", "1"));
        assert_eq!(
            err(&[&[-1, 1], &[1, -2]], Some(&[-1, -1])),
            s("output", "-1")
        );
        assert_eq!(
            err(&[&[-1, 1], &[1, -2]], Some(&[-1, -2, -3])),
            s("output", "-3")
        );
        assert_eq!(err(&[&[-1, 1], &[1, -2]], Some(&[-2])), s("output", "-1"));
        assert!(matches!(
            Network::ncon::<&[i64]>(&[], None),
            Err(Error::InvalidArgument { .. })
        ));
    }
}
