//! The elementwise operations the engine runs: `C ← β·C + α·map(A)` (with a strong zero β),
//! plain copies, and in-place scaling.

use adrules_core::{Complex64, Scalar};

use super::engine::Op;
use crate::element::{convert, to_c64};

/// β, classified once per call so that inner loops carry no branch.
#[derive(Clone, Copy)]
pub(crate) enum Beta<T> {
    /// strong zero: C is not read
    Zero,
    /// accumulate
    One,
    /// any other value
    Other(T),
}

impl<T: Scalar> Beta<T> {
    pub(crate) fn new(beta: T) -> Self {
        if beta == T::zero() {
            Beta::Zero
        } else if beta == T::one() {
            Beta::One
        } else {
            Beta::Other(beta)
        }
    }
}

/// How an input element becomes an output element (promotion, conjugation, projection).
pub(crate) trait Map<TA, TC>: Copy + Sync {
    fn map(self, a: TA) -> TC;
}

/// Conversion ([`convert`]: promotion for the pairs callers allow), conjugating first when
/// `CONJ`.
#[derive(Clone, Copy)]
pub(crate) struct Converting<const CONJ: bool>;

impl<TA: Scalar, TC: Scalar, const CONJ: bool> Map<TA, TC> for Converting<CONJ> {
    #[inline(always)]
    fn map(self, a: TA) -> TC {
        convert(if CONJ { a.conj() } else { a })
    }
}

/// `proj(α·op(a))`: computed in `Complex64`, then the real part for a real output and
/// rounding to the output's precision (reverse-mode projection).
#[derive(Clone, Copy)]
pub(crate) struct Projecting {
    pub(crate) alpha: Complex64,
    pub(crate) conj: bool,
}

impl<TA: Scalar, TC: Scalar> Map<TA, TC> for Projecting {
    #[inline(always)]
    fn map(self, a: TA) -> TC {
        let z = to_c64(a);
        TC::from_c64_unchecked(self.alpha * if self.conj { z.conj() } else { z })
    }
}

/// `c[i] ← f(a[i])` without reading C.
#[inline(always)]
unsafe fn write<TA: Copy, TC: Copy>(
    n: usize,
    c: *mut TC,
    sc: isize,
    a: *const TA,
    sa: isize,
    f: impl Fn(TA) -> TC,
) {
    // SAFETY: the caller vouches for n elements on both sides, C's distinct from A's.
    unsafe {
        if sc == 1 && sa == 1 {
            let (cs, as_) = (
                std::slice::from_raw_parts_mut(c, n),
                std::slice::from_raw_parts(a, n),
            );
            for (y, &x) in cs.iter_mut().zip(as_) {
                *y = f(x);
            }
        } else {
            for i in 0..n as isize {
                *c.offset(i * sc) = f(*a.offset(i * sa));
            }
        }
    }
}

/// `c[i] ← f(c[i], a[i])`.
#[inline(always)]
unsafe fn update<TA: Copy, TC: Copy>(
    n: usize,
    c: *mut TC,
    sc: isize,
    a: *const TA,
    sa: isize,
    f: impl Fn(TC, TA) -> TC,
) {
    // SAFETY: as in `write`.
    unsafe {
        if sc == 1 && sa == 1 {
            let (cs, as_) = (
                std::slice::from_raw_parts_mut(c, n),
                std::slice::from_raw_parts(a, n),
            );
            for (y, &x) in cs.iter_mut().zip(as_) {
                *y = f(*y, x);
            }
        } else {
            for i in 0..n as isize {
                let p = c.offset(i * sc);
                *p = f(*p, *a.offset(i * sa));
            }
        }
    }
}

/// `C ← β·C + α·map(A)`.
pub(crate) struct Axpby<TC, M> {
    pub(crate) alpha: TC,
    pub(crate) beta: Beta<TC>,
    pub(crate) map: M,
}

impl<TA: Copy + Sync, TC: Scalar, M: Map<TA, TC>> Op<TA, TC> for Axpby<TC, M> {
    #[inline]
    unsafe fn line(&self, n: usize, c: *mut TC, sc: isize, a: *const TA, sa: isize) {
        let (al, m) = (self.alpha, self.map);
        let one = al == TC::one();
        // SAFETY: forwarded.
        unsafe {
            match (self.beta, one) {
                (Beta::Zero, true) => write(n, c, sc, a, sa, |x| m.map(x)),
                (Beta::Zero, false) => write(n, c, sc, a, sa, |x| al * m.map(x)),
                (Beta::One, true) => update(n, c, sc, a, sa, |y, x| y + m.map(x)),
                (Beta::One, false) => update(n, c, sc, a, sa, |y, x| y + al * m.map(x)),
                (Beta::Other(b), true) => update(n, c, sc, a, sa, |y, x| b * y + m.map(x)),
                (Beta::Other(b), false) => update(n, c, sc, a, sa, |y, x| b * y + al * m.map(x)),
            }
        }
    }
}

/// `C ← A`, bit for bit.
pub(crate) struct CopyOp;

impl<T: Copy + Sync> Op<T, T> for CopyOp {
    #[inline]
    unsafe fn line(&self, n: usize, c: *mut T, sc: isize, a: *const T, sa: isize) {
        // SAFETY: forwarded; A and C are disjoint.
        unsafe {
            if sc == 1 && sa == 1 {
                std::ptr::copy_nonoverlapping(a, c, n);
            } else {
                write(n, c, sc, a, sa, |x| x);
            }
        }
    }

    fn is_copy(&self) -> bool {
        true
    }
}

/// `C ← s·C`, or `C ← 0` for `None` (a strong zero). The engine's `a` operand is C itself
/// and is never read.
pub(crate) struct ScaleOp<T>(pub(crate) Option<T>);

impl<T: Scalar> Op<T, T> for ScaleOp<T> {
    #[inline]
    unsafe fn line(&self, n: usize, c: *mut T, sc: isize, _a: *const T, _sa: isize) {
        // SAFETY: forwarded (only C is touched).
        unsafe {
            if sc == 1 {
                let cs = std::slice::from_raw_parts_mut(c, n);
                match self.0 {
                    None => cs.fill(T::zero()),
                    Some(s) => cs.iter_mut().for_each(|y| *y = s * *y),
                }
            } else {
                for i in 0..n as isize {
                    let p = c.offset(i * sc);
                    *p = match self.0 {
                        None => T::zero(),
                        Some(s) => s * *p,
                    };
                }
            }
        }
    }
}
