//! The Einstein-string front-end (`"abc,bde,cdf->aef"`).

use super::structure::{Label, Network, Notation};
use crate::error::{Error, Result};

fn parse_error(input: &str, position: usize, reason: impl Into<String>) -> Error {
    Error::Parse {
        input: input.into(),
        position,
        reason: reason.into(),
    }
}

impl Network {
    /// A network written as an Einstein string `"<operand>,<operand>,…-><output>"`.
    ///
    /// Each operand and the output is a (possibly empty, for rank 0) word of ASCII letters,
    /// one letter per axis; ASCII whitespace is ignored. The label rules of [`Network`]
    /// apply: a letter shared by two operands (or repeated in one operand, a partial trace)
    /// and absent from the output is contracted; a letter in one operand and in the output is
    /// open. The default contraction order ([`Order::Default`](super::Order::Default)) is
    /// optimized ([`Optimizer::Auto`](super::Optimizer::Auto)).
    ///
    /// Rejected, with [`Error::Parse`] naming the byte position: an empty string; a missing
    /// `->` (implicit output, NumPy's alphabetical-order rule, is not supported); more than
    /// one `->`; an ellipsis (`...`); any character other than an ASCII letter, `,`, `->` and
    /// whitespace; a `,` in the output. Rejected with [`Error::InvalidLabel`]: a letter
    /// repeated in the output, an output letter that no operand has, a letter used three or
    /// more times (batch labels such as `"bij,bjk->bik"` and hyperedges), a letter used once
    /// and absent from the output (a sum over a single axis).
    ///
    /// # Errors
    /// As listed above.
    ///
    /// # Example
    /// ```
    /// use adrules_core::network::Network;
    /// let net = Network::einsum("abc,bde,cdf->aef").unwrap();
    /// assert_eq!(net.num_operands(), 3);
    /// assert!(Network::einsum("ij,jk").is_err()); // implicit output
    /// ```
    pub fn einsum(subscripts: &str) -> Result<Network> {
        let s = subscripts;
        if s.trim().is_empty() {
            return Err(parse_error(s, 0, "empty Einstein string"));
        }
        let mut inputs: Vec<Vec<Label>> = Vec::new();
        let mut current: Vec<Label> = Vec::new();
        let mut output: Option<Vec<Label>> = None;
        let mut chars = s.char_indices().peekable();
        while let Some((pos, ch)) = chars.next() {
            match ch {
                c if c.is_ascii_alphabetic() => match &mut output {
                    Some(out) => out.push(Label::Char(c)),
                    None => current.push(Label::Char(c)),
                },
                c if c.is_ascii_whitespace() => {}
                ',' if output.is_none() => inputs.push(std::mem::take(&mut current)),
                ',' => return Err(parse_error(s, pos, "the output cannot contain ','")),
                '-' if matches!(chars.peek(), Some((_, '>'))) => {
                    chars.next();
                    if output.is_some() {
                        return Err(parse_error(s, pos, "more than one '->'"));
                    }
                    inputs.push(std::mem::take(&mut current));
                    output = Some(Vec::new());
                }
                '.' => {
                    return Err(parse_error(
                        s,
                        pos,
                        "ellipsis ('...') is not supported: name every axis",
                    ));
                }
                c => {
                    return Err(parse_error(
                        s,
                        pos,
                        format!(
                            "unexpected {c:?}: labels are ASCII letters (a-z, A-Z), operands are \
                             separated by ',' and the output follows '->'"
                        ),
                    ));
                }
            }
        }
        let output = output.ok_or_else(|| {
            parse_error(
                s,
                s.len(),
                "missing '->': the output must be explicit (implicit output is not supported)",
            )
        })?;
        Network::from_labels(Notation::Einsum, &inputs, &output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let net = Network::einsum(" ab , bc -> ac ").unwrap();
        assert_eq!(
            net.operand_labels(1).unwrap(),
            vec![Label::Char('b'), Label::Char('c')]
        );
        let scalar = Network::einsum("ij,ji->").unwrap();
        assert!(scalar.output_labels().is_empty());
        let rank0 = Network::einsum(",ab->ab").unwrap();
        assert_eq!(rank0.num_operands(), 2);
        assert_eq!(Network::einsum("->").unwrap().num_operands(), 1);
        for (bad, pos) in [
            ("", 0),
            ("   ", 0),
            ("ij,jk", 5),
            ("ij,jk->ik->", 9),
            ("...ij,jk->ik", 0),
            ("ij,jk->i.k", 8),
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
        for bad in [
            "ij,jk->iik",
            "ij,jk->ikl",
            "ij,jk,jl->il",
            "ij->i",
            "bij,bjk->bik",
        ] {
            assert!(
                matches!(Network::einsum(bad), Err(Error::InvalidLabel { .. })),
                "{bad:?}"
            );
        }
    }
}
