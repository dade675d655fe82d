//! The Einstein-string front-end (`"abc,bde,cdf->aef"`).

use super::structure::{Label, Network, Notation};
use crate::error::{Error, Result};

/// Longest string an error repeats in full; longer ones are cut to a window around the
/// problem (the position stays the byte offset in the whole string).
const QUOTE_MAX: usize = 120;

fn parse_error(input: &str, position: usize, reason: impl Into<String>) -> Error {
    let quoted = if input.len() <= QUOTE_MAX {
        input.to_string()
    } else {
        let boundary = |mut i: usize| {
            while !input.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let from = boundary(position.saturating_sub(QUOTE_MAX / 2));
        let to = boundary((from + QUOTE_MAX).min(input.len()));
        let (pre, post) = (
            if from > 0 { "…" } else { "" },
            if to < input.len() { "…" } else { "" },
        );
        format!("{pre}{}{post}", &input[from..to])
    };
    Error::Parse {
        input: quoted,
        position,
        reason: reason.into(),
    }
}

/// One operand or the output while parsing: its labels and where its `...` sits.
#[derive(Default)]
struct Term {
    labels: Vec<Label>,
    ellipsis: Option<usize>,
}

impl Network {
    /// A network written as an Einstein string in torch's grammar:
    /// `"<operand>,<operand>,…[-><output>]"`.
    ///
    /// Each operand and the output is a (possibly empty, for rank 0) word of ASCII letters,
    /// one letter per axis, with at most one ellipsis `...` standing for any number of
    /// leading, middle or trailing axes; ASCII whitespace is ignored. The label rules of
    /// [`Network`] for Einstein strings apply: a letter in the output is kept (open, batch or
    /// diagonal), a letter absent from it is summed (a sum over one axis, a contraction, a
    /// trace or a hyperedge).
    ///
    /// - **Implicit output** (no `->`, torch's and numpy's rule): the ellipsis dimensions
    ///   first (when some operand has `...`), then every letter that appears exactly once in
    ///   the operands, in alphabetical order with upper case before lower case (ASCII order):
    ///   `"ij,jk"` is `"ij,jk->ik"`, `"ba,ca"` is `"ba,ca->bc"`, `"ii"` is a trace.
    /// - **Ellipsis**: the `...` of operands are aligned from the right and broadcast as in
    ///   numpy: each ellipsis dimension must agree across operands or be 1 (a size-1 axis is
    ///   broadcast, and its cotangent summed).
    /// - **Broadcasting of named labels** (torch's rule): a size-1 axis broadcasts against the
    ///   same label's larger dimension in another operand (`ij,ij->ij` on `[1, 3]` and
    ///   `[2, 3]`); the dimensions of a label repeated within one operand must agree. An output without `...` sums the ellipsis
    ///   dimensions. The number of axes an ellipsis stands for is known once shapes are
    ///   ([`NetworkPlan::new`](super::NetworkPlan::new)).
    ///
    /// The default contraction order ([`Order::Default`](super::Order::Default)) is
    /// optimized ([`Optimizer::Auto`](super::Optimizer::Auto)) over the hypergraph.
    ///
    /// - **Empty ellipsis and empty strings** (torch's and numpy's rule): `...` in the output
    ///   when no operand has one stands for no axes (`"i->..."` on `[6]` sums to a scalar,
    ///   `"i->...i"` is the identity); an empty or blank string is one rank-0 operand with an
    ///   implicit (rank-0) output, so `""` and `" "` return their scalar operand (and refuse
    ///   an operand of another rank when planned).
    ///
    /// Rejected, with [`Error::Parse`] naming the byte position: more than one `->`; a `.`
    /// that is not part of `...`, or two ellipses in one term; any character other than an
    /// ASCII letter, `,`, `->`, `.` and whitespace; a `,` in the output. Rejected with
    /// [`Error::InvalidLabel`]: a letter repeated in the output, an output letter that no
    /// operand has.
    ///
    /// # Errors
    /// As listed above.
    ///
    /// # Example
    /// ```
    /// use adrules_core::network::{Label, Network};
    /// let net = Network::einsum("bij,bjk->bik").unwrap(); // batched matmul
    /// assert_eq!(net.num_operands(), 2);
    /// let implicit = Network::einsum("ij,jk").unwrap();
    /// assert_eq!(implicit.output_labels(), vec![Label::Char('i'), Label::Char('k')]);
    /// assert!(Network::einsum("ij,jk->iz").is_err()); // 'z' is in no operand
    /// ```
    pub fn einsum(subscripts: &str) -> Result<Network> {
        let s = subscripts;
        let mut inputs: Vec<Term> = Vec::new();
        let mut current = Term::default();
        let mut output: Option<Term> = None;
        let bytes = s.as_bytes();
        let mut chars = s.char_indices().peekable();
        while let Some((pos, ch)) = chars.next() {
            let term = output.as_mut().unwrap_or(&mut current);
            match ch {
                c if c.is_ascii_alphabetic() => term.labels.push(Label::Char(c)),
                c if c.is_ascii_whitespace() => {}
                '.' => {
                    if bytes.get(pos..pos + 3) != Some(b"...") {
                        return Err(parse_error(
                            s,
                            pos,
                            "a '.' must be part of an ellipsis '...'",
                        ));
                    }
                    if term.ellipsis.is_some() {
                        return Err(parse_error(s, pos, "more than one '...' in one term"));
                    }
                    term.ellipsis = Some(term.labels.len());
                    chars.next();
                    chars.next();
                }
                ',' if output.is_none() => inputs.push(std::mem::take(&mut current)),
                ',' => return Err(parse_error(s, pos, "the output cannot contain ','")),
                '-' if matches!(chars.peek(), Some((_, '>'))) => {
                    chars.next();
                    if output.is_some() {
                        return Err(parse_error(s, pos, "more than one '->'"));
                    }
                    inputs.push(std::mem::take(&mut current));
                    output = Some(Term::default());
                }
                c => {
                    return Err(parse_error(
                        s,
                        pos,
                        format!(
                            "unexpected {c:?}: labels are ASCII letters (a-z, A-Z), operands are \
                             separated by ',', '...' stands for any number of axes and the \
                             output follows '->'"
                        ),
                    ));
                }
            }
        }
        let any_ellipsis = inputs
            .iter()
            .chain([&current])
            .any(|t| t.ellipsis.is_some());
        let output = match output {
            // torch's and numpy's rule: an ellipsis absent from every operand stands for no
            // axes, so `...` in the output is empty (`"i->...i"` is `"i->i"`)
            Some(mut out) => {
                if !any_ellipsis {
                    out.ellipsis = None;
                }
                out
            }
            None => {
                inputs.push(current);
                implicit_output(&inputs, any_ellipsis)
            }
        };
        let labels: Vec<&[Label]> = inputs.iter().map(|t| t.labels.as_slice()).collect();
        Ok(
            Network::from_labels(Notation::Einsum, &labels, &output.labels)?
                .with_ellipsis(inputs.iter().map(|t| t.ellipsis).collect(), output.ellipsis),
        )
    }
}

/// torch's implicit output: the ellipsis first, then the letters used exactly once, sorted
/// (ASCII: upper case before lower case).
fn implicit_output(inputs: &[Term], any_ellipsis: bool) -> Term {
    let mut count: std::collections::BTreeMap<Label, usize> = std::collections::BTreeMap::new();
    for t in inputs {
        for &l in &t.labels {
            *count.entry(l).or_insert(0) += 1;
        }
    }
    // sorted by the map's order (Label's Ord: ASCII order for letters)
    let once: Vec<Label> = count
        .into_iter()
        .filter_map(|(l, c)| (c == 1).then_some(l))
        .collect();
    Term {
        labels: once,
        ellipsis: any_ellipsis.then_some(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<Label> {
        s.chars().map(Label::Char).collect()
    }

    #[test]
    fn parses_and_rejects() {
        let net = Network::einsum(" ab , bc -> ac ").unwrap();
        assert_eq!(net.operand_labels(1).unwrap(), chars("bc"));
        let scalar = Network::einsum("ij,ji->").unwrap();
        assert!(scalar.output_labels().is_empty());
        let rank0 = Network::einsum(",ab->ab").unwrap();
        assert_eq!(rank0.num_operands(), 2);
        assert_eq!(Network::einsum("->").unwrap().num_operands(), 1);
        for (bad, pos) in [
            ("ij,jk->ik->", 9),
            ("..ij,jk->ik", 0),
            ("ij,jk->i.k", 8),
            ("i...j...,jk->ik", 5),
            ("i1,1k->ik", 1),
            ("ij,jk->i,k", 8),
            ("ij-jk->ik", 2),
            ("ij>jk->ik", 2),
            ("ié->i", 1),
        ] {
            match Network::einsum(bad) {
                Err(Error::Parse { position, .. }) => assert_eq!(position, pos, "{bad:?}"),
                other => panic!("{bad:?}: expected a parse error, got {other:?}"),
            }
        }
        for bad in ["ij,jk->iik", "ij,jk->ikl", "ij,jk->iz"] {
            assert!(
                matches!(Network::einsum(bad), Err(Error::InvalidLabel { .. })),
                "{bad:?}"
            );
        }
        // the whole ML grammar is accepted
        for good in [
            "bij,bjk->bik",
            "bhqd,bhkd->bhqk",
            "ij,ij->ij",
            "ij,ij->i",
            "ii->i",
            "ij->i",
            "ij,jk",
            "...ij,...jk->...ik",
            "i,i,i->",
            "ai,bi,ci->abci",
        ] {
            assert!(Network::einsum(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn absent_ellipsis_and_empty_strings_follow_torch() {
        // `...` in the output with no operand ellipsis stands for no axes
        for (s, same) in [
            ("R->...", "R->"),
            ("O->...O", "O->O"),
            ("ij,jk->...ik", "ij,jk->ik"),
            ("i->i...", "i->i"),
        ] {
            let (net, want) = (Network::einsum(s).unwrap(), Network::einsum(same).unwrap());
            assert!(!net.has_ellipsis(), "{s}");
            assert_eq!(net.output_labels(), want.output_labels(), "{s}");
            assert_eq!(net.operand_labels(0), want.operand_labels(0), "{s}");
        }
        // an empty or blank string: one rank-0 operand, rank-0 output
        for s in ["", " ", "   ", "->", " -> "] {
            let net = Network::einsum(s).unwrap();
            assert_eq!(net.num_operands(), 1, "{s:?}");
            assert!(net.operand_labels(0).unwrap().is_empty(), "{s:?}");
            assert!(net.output_labels().is_empty(), "{s:?}");
        }
    }

    #[test]
    fn long_strings_are_quoted_around_the_problem() {
        let long = format!("{},jk->ik%", "ab".repeat(50_000));
        match Network::einsum(&long) {
            Err(Error::Parse {
                input, position, ..
            }) => {
                assert_eq!(position, long.len() - 1);
                assert!(input.len() < 200 && input.ends_with('%'), "{input}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn implicit_output_follows_torch() {
        for (s, out) in [
            ("ij,jk", "ik"),
            ("ba,ca", "bc"),
            ("ii", ""),
            ("i,j", "ij"),
            ("bA,ab", "Aa"),
            ("Ba,b", "Bab"),
        ] {
            let net = Network::einsum(s).unwrap();
            assert_eq!(net.output_labels(), chars(out), "{s}");
        }
        let net = Network::einsum("...ij,...jk").unwrap();
        assert!(net.has_ellipsis());
        assert_eq!(net.output_labels(), chars("ik"));
    }

    #[test]
    fn ellipsis_expands_and_broadcasts() {
        let net = Network::einsum("...ij,...jk->...ik").unwrap();
        let e = net
            .instantiate(&[vec![2, 1, 3, 4], vec![5, 4, 2]])
            .unwrap()
            .unwrap();
        assert_eq!(
            e.operand_labels(0).unwrap(),
            vec![
                Label::Ellipsis(0),
                Label::Broadcast(0, 1),
                Label::Char('i'),
                Label::Char('j')
            ]
        );
        assert_eq!(
            e.operand_labels(1).unwrap(),
            vec![Label::Ellipsis(1), Label::Char('j'), Label::Char('k')]
        );
        assert_eq!(
            e.output_labels(),
            vec![
                Label::Ellipsis(0),
                Label::Ellipsis(1),
                Label::Char('i'),
                Label::Char('k')
            ]
        );
        assert!(matches!(
            net.instantiate(&[vec![2, 3, 4], vec![3, 4, 5]]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            net.instantiate(&[vec![3], vec![3, 4, 5]]),
            Err(Error::RankMismatch { .. })
        ));
        assert!(
            Network::einsum("ij->ij")
                .unwrap()
                .instantiate(&[[1, 2]])
                .unwrap()
                .is_none()
        );
    }
}
