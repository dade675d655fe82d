//! Generators of random inputs for fuzzing the public API: one seed, one call. Shared by
//! the einsum grammar's property tests and `cargo xtask fuzz`.

use crate::Rng;

const LETTERS: [char; 5] = ['a', 'b', 'c', 'd', 'B'];

/// A random call of torch's einsum grammar for seed `seed`: the string, and shapes from
/// random letter dimensions (0 to 3), with batch labels, hyperedges, diagonals, sums, implicit
/// output, ellipses with broadcasting, size-1 axes, and an occasional wrong dimension, wrong
/// rank or stray character so that the error paths run too: valid and invalid calls both
/// ([`naive_einsum`](crate::naive_einsum) decides which).
pub fn einsum_case(seed: u64) -> (String, Vec<Vec<usize>>) {
    let mut rng = Rng::seed(seed);
    let dims: Vec<usize> = LETTERS
        .iter()
        .map(|_| [0, 1, 2, 2, 3, 2, 3, 2, 3, 1][rng.below(10)])
        .collect();
    let ell: Vec<usize> = (0..2).map(|_| 1 + rng.below(3)).collect();
    let n = 1 + rng.below(3);
    let mut terms = Vec::new();
    let mut shapes = Vec::new();
    let mut any_ellipsis = false;
    for _ in 0..n {
        let len = rng.below(4);
        let idx: Vec<usize> = (0..len).map(|_| rng.below(LETTERS.len())).collect();
        let mut word: String = idx.iter().map(|&i| LETTERS[i]).collect();
        let mut shape: Vec<usize> = idx.iter().map(|&i| dims[i]).collect();
        if rng.below(3) == 0 {
            any_ellipsis = true;
            let at = rng.below(len + 1);
            let e = rng.below(3);
            // right-aligned ellipsis dims, sometimes broadcast (1)
            let ed: Vec<usize> = (0..e)
                .map(|j| if rng.below(4) == 0 { 1 } else { ell[2 - e + j] })
                .collect();
            word.insert_str(
                word.char_indices().nth(at).map_or(word.len(), |(p, _)| p),
                "...",
            );
            shape.splice(at..at, ed);
        }
        match rng.below(12) {
            0 if !shape.is_empty() => {
                let k = rng.below(shape.len());
                shape[k] += 1;
            }
            1 => shape.push(2),
            // a size-1 axis: broadcast against the letter's dimension elsewhere
            3 | 4 if !shape.is_empty() => {
                let k = rng.below(shape.len());
                shape[k] = 1;
            }
            2 => word.push(['.', '1', '-'][rng.below(3)]),
            _ => {}
        }
        if rng.below(4) == 0 {
            word.insert(0, ' ');
        }
        terms.push(word);
        shapes.push(shape);
    }
    let mut s = terms.join(",");
    if rng.below(3) != 0 {
        s.push_str("->");
        let mut used: Vec<char> = Vec::new();
        for c in s.chars().filter(|c| c.is_ascii_alphabetic()) {
            if !used.contains(&c) {
                used.push(c);
            }
        }
        let order = rng.permutation(used.len());
        for &i in order.iter().take(rng.below(used.len() + 1)) {
            s.push(used[i]);
        }
        match rng.below(10) {
            0 => s.push('z'),                         // in no operand
            1 if !used.is_empty() => s.push(used[0]), // maybe repeated
            _ => {}
        }
        if any_ellipsis && rng.below(2) == 0 {
            s.insert_str(
                s.len() - rng.below(2).min(s.len() - s.rfind('>').unwrap_or(0) - 1),
                "...",
            );
        }
        // an output `...` that no operand has (torch: it stands for no axes); drawn from a
        // separate stream so that a seed's other draws stay as they were
        let mut extra = Rng::seed(seed ^ 0xe111_75e5);
        if !any_ellipsis && extra.below(6) == 0 {
            let tail = s.len() - s.rfind('>').unwrap_or(0) - 1;
            s.insert_str(s.len() - extra.below(tail + 1), "...");
        }
    }
    (s, shapes)
}
