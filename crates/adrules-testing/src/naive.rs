//! [`naive_einsum`]: an independent, loop-over-everything evaluator of torch's einsum grammar,
//! the ground truth the planned einsum is fuzzed against.
//!
//! It shares no code with the core's parser or planner: it parses the string itself, expands
//! and broadcasts ellipses itself (numpy's right-aligned rule) and sums the product of all
//! operands over every assignment of every label, in `Complex64`.

use adrules_core::{Complex64, DType, HostData, HostTensor};

/// One parsed term: `(letters, position of "..." among them)`.
type Term = (Vec<char>, Option<usize>);

fn parse_term(t: &str) -> Option<Term> {
    let t: String = t.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut letters = Vec::new();
    let mut ellipsis = None;
    let mut rest = t.as_str();
    while let Some(c) = rest.chars().next() {
        if let Some(r) = rest.strip_prefix("...") {
            if ellipsis.replace(letters.len()).is_some() {
                return None;
            }
            rest = r;
        } else if c.is_ascii_alphabetic() {
            letters.push(c);
            rest = &rest[1..];
        } else {
            return None;
        }
    }
    Some((letters, ellipsis))
}

/// `torch.einsum(subscripts, *operands)` by brute force, or `None` when torch's grammar and
/// shape rules reject the call (parse error, wrong operand count, rank mismatch, a repeated or
/// unknown output label, dimensions of one letter that neither agree nor are 1 across
/// operands, unequal dimensions of a letter repeated in one operand, ellipsis dimensions that
/// neither agree nor are 1). Size-1 axes broadcast, as in torch; an output `...` when no
/// operand has one is empty, and an empty or blank string is one rank-0 operand. The result has the joined dtype of the operands (f64 for none).
///
/// Cost: the product of every label's dimension times the operand count; for small tests
/// only.
pub fn naive_einsum(subscripts: &str, operands: &[&HostTensor]) -> Option<HostTensor> {
    let mut parts = subscripts.split("->");
    let lhs = parts.next()?;
    let rhs = parts.next();
    if parts.next().is_some() {
        return None;
    }
    let terms: Vec<Term> = lhs.split(',').map(parse_term).collect::<Option<_>>()?;
    if terms.len() != operands.len() {
        return None;
    }
    // ellipsis ranks and the broadcast ellipsis shape
    let mut ell_rank = Vec::new();
    for ((letters, e), t) in terms.iter().zip(operands) {
        let r = t.dims().len();
        match e {
            Some(_) if r >= letters.len() => ell_rank.push(r - letters.len()),
            None if r == letters.len() => ell_rank.push(0),
            _ => return None,
        }
    }
    let width = ell_rank.iter().copied().max().unwrap_or(0);
    let mut ell_dims = vec![1usize; width];
    for (k, ((_, e), t)) in terms.iter().zip(operands).enumerate() {
        if let Some(at) = e {
            for j in 0..ell_rank[k] {
                let (g, d) = (width - ell_rank[k] + j, t.dims()[at + j]);
                if d != 1 {
                    if ell_dims[g] != 1 && ell_dims[g] != d {
                        return None;
                    }
                    ell_dims[g] = d;
                }
            }
        }
    }
    let any_ellipsis = terms.iter().any(|t| t.1.is_some());
    let all: Vec<char> = terms.iter().flat_map(|t| t.0.iter().copied()).collect();
    let output: Term = match rhs {
        Some(r) => {
            let mut out = parse_term(r)?;
            // an ellipsis that no operand has stands for no axes (torch and numpy)
            if !any_ellipsis {
                out.1 = None;
            }
            for (i, c) in out.0.iter().enumerate() {
                if out.0[..i].contains(c) || !all.contains(c) {
                    return None;
                }
            }
            out
        }
        None => {
            let mut once: Vec<char> = all
                .iter()
                .copied()
                .filter(|c| all.iter().filter(|d| *d == c).count() == 1)
                .collect();
            once.sort_unstable();
            (once, any_ellipsis.then_some(0))
        }
    };
    // letter dimensions: torch broadcasts a size-1 axis against the same letter's larger
    // dimension in another operand; within one operand a repeated letter's dims must agree
    let mut letters: Vec<char> = all.clone();
    letters.sort_unstable();
    letters.dedup();
    let mut dim = vec![1usize; letters.len()];
    for ((ls, e), t) in terms.iter().zip(operands) {
        let mut own: Vec<(char, usize)> = Vec::new();
        for (i, c) in ls.iter().enumerate() {
            let axis = match e {
                Some(at) if i >= *at => i + t.dims().len() - ls.len(),
                _ => i,
            };
            let x = letters.binary_search(c).ok()?;
            let d = t.dims()[axis];
            if own.iter().any(|&(o, od)| o == *c && od != d) {
                return None;
            }
            own.push((*c, d));
            if d != 1 {
                if dim[x] != 1 && dim[x] != d {
                    return None;
                }
                dim[x] = d;
            }
        }
    }
    // the loop: variables are the letters, then the ellipsis dimensions
    let vars: Vec<usize> = dim
        .iter()
        .copied()
        .chain(ell_dims.iter().copied())
        .collect();
    let axis_var = |ls: &[char], e: Option<usize>, rank: usize, er: usize| -> Vec<usize> {
        let mut v = Vec::with_capacity(rank);
        for i in 0..rank {
            let named = match e {
                Some(at) if i < at => Some(i),
                Some(at) if i >= at + er => Some(i - er),
                Some(_) => None,
                None => Some(i),
            };
            v.push(match named {
                Some(n) => letters.binary_search(&ls[n]).unwrap_or(0),
                None => letters.len() + width - er + (i - e.unwrap_or(0)),
            });
        }
        v
    };
    let op_vars: Vec<Vec<usize>> = terms
        .iter()
        .zip(operands)
        .enumerate()
        .map(|(k, ((ls, e), t))| axis_var(ls, *e, t.dims().len(), ell_rank[k]))
        .collect();
    let out_rank = output.0.len() + if output.1.is_some() { width } else { 0 };
    let out_vars = axis_var(&output.0, output.1, out_rank, width);
    let out_dims: Vec<usize> = out_vars.iter().map(|&v| vars[v]).collect();
    let values: Vec<Vec<Complex64>> = operands.iter().map(|t| t.data().to_c64_vec()).collect();
    let mut out = vec![Complex64::new(0.0, 0.0); out_dims.iter().product()];
    if !vars.contains(&0) {
        let mut x = vec![0usize; vars.len()];
        'outer: loop {
            let mut p = Complex64::new(1.0, 0.0);
            for (k, t) in operands.iter().enumerate() {
                let mut off = 0;
                for (axis, &v) in op_vars[k].iter().enumerate() {
                    let d = t.dims()[axis];
                    off = off * d + if d == 1 { 0 } else { x[v] };
                }
                p *= values[k][off];
            }
            let mut off = 0;
            for (&v, &d) in out_vars.iter().zip(&out_dims) {
                off = off * d + x[v];
            }
            out[off] += p;
            for i in (0..vars.len()).rev() {
                x[i] += 1;
                if x[i] < vars[i] {
                    continue 'outer;
                }
                x[i] = 0;
            }
            break;
        }
    }
    let dtype = operands
        .iter()
        .map(|t| t.dtype())
        .reduce(DType::join)
        .unwrap_or(DType::F64);
    let data = HostData::from_c64_projected(&out, dtype);
    HostTensor::new(&out_dims, data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[usize], v: &[f64]) -> HostTensor {
        HostTensor::from_vec(dims, v.to_vec()).unwrap()
    }

    #[test]
    fn small_cases_by_hand() {
        let a = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = t(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
        let mm = naive_einsum("ij,jk", &[&a, &b]).unwrap();
        assert_eq!(mm.as_slice::<f64>().unwrap(), &[19.0, 22.0, 43.0, 50.0]);
        let tr = naive_einsum("ii", &[&a]).unwrap();
        assert_eq!(tr.as_slice::<f64>().unwrap(), &[5.0]);
        let diag = naive_einsum("ii->i", &[&a]).unwrap();
        assert_eq!(diag.as_slice::<f64>().unwrap(), &[1.0, 4.0]);
        let rows = naive_einsum("ij->i", &[&a]).unwrap();
        assert_eq!(rows.as_slice::<f64>().unwrap(), &[3.0, 7.0]);
        let had = naive_einsum("ij,ij->ji", &[&a, &b]).unwrap();
        assert_eq!(had.as_slice::<f64>().unwrap(), &[5.0, 21.0, 12.0, 32.0]);
        // broadcasting a size-1 ellipsis axis: (1, 2) against (2, 2)
        let r = t(&[1, 2], &[1.0, 10.0]);
        let bc = naive_einsum("...j,...j->...", &[&r, &b]).unwrap();
        assert_eq!(bc.as_slice::<f64>().unwrap(), &[65.0, 87.0]);
        for bad in [
            "ij,jk->iik",
            "ij,jk->iz",
            "ij,jk->...z",
            "i.j",
            "ij,jk->ik->i",
        ] {
            assert!(naive_einsum(bad, &[&a, &b]).is_none(), "{bad}");
        }
        assert!(naive_einsum("ijk,jk->i", &[&a, &b]).is_none());
        // named size-1 axes broadcast across operands: (1, 2) against (2, 2)
        let nb = naive_einsum("ij,ij->ij", &[&r, &b]).unwrap();
        assert_eq!(nb.as_slice::<f64>().unwrap(), &[5.0, 60.0, 7.0, 80.0]);
        // but not within one operand
        assert!(naive_einsum("ii->i", &[&r]).is_none());
        // torch: an ellipsis no operand has is empty; a blank string is a rank-0 operand
        let v = t(&[6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let sum = naive_einsum("R->...", &[&v]).unwrap();
        assert_eq!(
            (sum.dims(), sum.as_slice::<f64>().unwrap()),
            (&[][..], &[21.0][..])
        );
        let id = naive_einsum("O->...O", &[&v]).unwrap();
        assert_eq!(id, v);
        let x = t(&[], &[-2.5]);
        for s in ["", " "] {
            assert_eq!(naive_einsum(s, &[&x]).unwrap(), x, "{s:?}");
            assert!(naive_einsum(s, &[&v]).is_none(), "{s:?}");
        }
    }
}
