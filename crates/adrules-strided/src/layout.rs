//! Strides and the checks that make a strided layout safe to read and to write.
//!
//! A layout is `(dims, strides, offset)`: element `i = (i_0, …, i_{r-1})` lives at position
//! `offset + Σ_k i_k·strides[k]` of the buffer, in elements. Strides may be negative (a
//! reversed axis) or zero (a broadcast axis, read-only).

use smallvec::SmallVec;

use adrules_core::{Error, Result};

/// Strides in elements, one per axis (inline up to rank 8, heap beyond).
pub type Strides = SmallVec<[isize; 8]>;

/// Row-major strides of `dims` (the last axis varies fastest, stride 1).
///
/// Computed with wrapping arithmetic; call it on shapes whose element count fits in memory.
pub fn row_major_strides(dims: &[usize]) -> Strides {
    let mut s: Strides = SmallVec::from_elem(0, dims.len());
    let mut acc: isize = 1;
    for (k, &d) in dims.iter().enumerate().rev() {
        s[k] = acc;
        acc = acc.wrapping_mul(d.max(1) as isize);
    }
    s
}

/// Number of elements of `dims`.
///
/// # Errors
/// [`Error::InvalidArgument`] (argument `"dims"`) when the product overflows `isize::MAX`.
pub(crate) fn numel(dims: &[usize]) -> Result<usize> {
    let mut n: usize = 1;
    for &d in dims {
        n = n.checked_mul(d).ok_or_else(|| overflow(dims))?;
    }
    if n > isize::MAX as usize {
        return Err(overflow(dims));
    }
    Ok(n)
}

fn overflow(dims: &[usize]) -> Error {
    Error::invalid(
        "dims",
        format!("the element count of shape {dims:?} overflows"),
    )
}

/// Checks that the strided layout `(dims, strides, offset)` addresses only positions
/// `0..len` of a buffer of `len` elements. A layout with a zero-size dimension addresses no
/// position, so any offset passes.
///
/// # Errors
/// [`Error::CountMismatch`] (argument `"strides"`) when `strides.len() != dims.len()`;
/// [`Error::InvalidArgument`] (argument `"dims"` for an element count that overflows,
/// `"strides"` when a reachable element is outside the buffer).
pub(crate) fn check_bounds(
    dims: &[usize],
    strides: &[isize],
    offset: usize,
    len: usize,
) -> Result<()> {
    if strides.len() != dims.len() {
        return Err(Error::CountMismatch {
            arg: "strides".into(),
            expected: dims.len(),
            actual: strides.len(),
        });
    }
    numel(dims)?;
    if dims.contains(&0) {
        return Ok(());
    }
    let (mut lo, mut hi) = (offset as i128, offset as i128);
    for (&d, &s) in dims.iter().zip(strides) {
        let reach = (d as i128 - 1) * s as i128;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    if lo < 0 || hi >= len as i128 {
        return Err(Error::invalid(
            "strides",
            format!(
                "layout dims {dims:?}, strides {strides:?}, offset {offset} reaches positions \
                 {lo}..={hi}, outside the buffer of {len} elements"
            ),
        ));
    }
    Ok(())
}

/// `true` when distinct multi-indices of `(dims, strides)` address distinct positions.
///
/// The test is the usual sufficient one: sorted by `|stride|`, every axis steps over the whole
/// extent of the faster axes. Layouts of zero elements never overlap.
pub(crate) fn is_non_overlapping(dims: &[usize], strides: &[isize]) -> bool {
    if dims.contains(&0) {
        return true;
    }
    let mut axes: SmallVec<[(usize, usize); 8]> = dims
        .iter()
        .zip(strides)
        .filter(|(d, _)| **d > 1)
        .map(|(&d, &s)| (s.unsigned_abs(), d))
        .collect();
    axes.sort_unstable();
    let mut extent: usize = 0;
    for (s, d) in axes {
        if s <= extent {
            return false;
        }
        extent = extent.saturating_add(s.saturating_mul(d - 1));
    }
    true
}

/// `true` when `strides` are the row-major strides of `dims` (axes of size 1 may have any
/// stride).
pub(crate) fn is_row_major(dims: &[usize], strides: &[isize]) -> bool {
    let mut acc: isize = 1;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d != 1 && s != acc {
            return false;
        }
        acc = acc.wrapping_mul(d as isize);
    }
    true
}

/// Dense, positive strides for `dims` that keep the axis order of `strides`: the axis with the
/// smallest `|stride|` gets stride 1 (ties keep the later axis fastest, as in row-major order).
pub(crate) fn dense_like(dims: &[usize], strides: &[isize]) -> Strides {
    let mut order: SmallVec<[usize; 8]> = (0..dims.len()).collect();
    order.sort_by(|&x, &y| {
        strides[y]
            .unsigned_abs()
            .cmp(&strides[x].unsigned_abs())
            .then(x.cmp(&y))
    });
    let mut out: Strides = SmallVec::from_elem(0, dims.len());
    let mut acc: isize = 1;
    for &k in order.iter().rev() {
        out[k] = acc;
        acc = acc.wrapping_mul(dims[k].max(1) as isize);
    }
    out
}

/// Calls `f` with the offsets (in elements) under each of the `N` stride sets of every
/// multi-index of `dims`, in row-major order (an odometer: one addition per step); nothing for
/// an empty index space, once (all offsets 0) for rank 0.
pub(crate) fn for_each_offset<const N: usize>(
    dims: &[usize],
    strides: [&[isize]; N],
    mut f: impl FnMut([isize; N]),
) {
    if dims.contains(&0) {
        return;
    }
    let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, dims.len());
    let mut o = [0isize; N];
    loop {
        f(o);
        let mut k = dims.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < dims[k] {
                for (o, s) in o.iter_mut().zip(&strides) {
                    *o += s[k];
                }
                break;
            }
            let back = (dims[k] - 1) as isize;
            for (o, s) in o.iter_mut().zip(&strides) {
                *o -= back * s[k];
            }
            idx[k] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_overlap() {
        assert!(check_bounds(&[2, 3], &[3, 1], 0, 6).is_ok());
        assert!(check_bounds(&[2, 3], &[3, 1], 1, 6).is_err());
        assert!(check_bounds(&[2, 3], &[-3, 1], 3, 6).is_ok());
        assert!(check_bounds(&[2, 3], &[-3, 1], 2, 6).is_err());
        assert!(check_bounds(&[0, 3], &[-3, 1], 6, 6).is_ok());
        assert!(
            check_bounds(&[0, 3], &[-3, 1], 7, 6).is_ok(),
            "empty: no element read"
        );
        assert!(matches!(
            check_bounds(&[2, 3], &[1], 0, 6),
            Err(Error::CountMismatch { .. })
        ));
        assert!(is_non_overlapping(&[2, 3], &[3, 1]));
        assert!(is_non_overlapping(&[2, 3], &[1, 2]));
        assert!(!is_non_overlapping(&[2, 3], &[2, 1]));
        assert!(!is_non_overlapping(&[2, 3], &[0, 1]));
        assert!(is_non_overlapping(&[1, 3], &[0, 1]));
        assert!(is_row_major(&[2, 1, 3], &[3, 100, 1]));
        assert_eq!(dense_like(&[2, 3, 4], &[1, -8, 2]).as_slice(), &[1, 8, 2]);
        assert_eq!(row_major_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
    }
}
