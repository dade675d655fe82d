//! The matrix exponential by scaling and squaring with a Padé approximant, with its
//! Fréchet derivative and the adjoint of that by the block-triangular method.

use faer::linalg::solvers::Solve;
use faer::{Mat, MatRef};

use super::{Cotangents, Outputs, WithTangents, input_mats, square_dims, square_rule};
use crate::backend::Backend;
use crate::error::Result;
use crate::linalg::common::{abs, mm, real};
use crate::linalg::driver::{host_mats, per_matrix};
use crate::rule::{Primal, Rule, SyncBackend};
use crate::scalar::ImplicitScalar;
use std::sync::Arc;

/// The coefficients `b₀ … b₁₃` of the `[13/13]` Padé approximant of `eˣ` (Higham 2005,
/// Table 2.3).
const B13: [f64; 14] = [
    64764752532480000.0,
    32382376266240000.0,
    7771770303897600.0,
    1187353796428800.0,
    129060195264000.0,
    10559470521600.0,
    670442572800.0,
    33522128640.0,
    1323241920.0,
    40840800.0,
    960960.0,
    16380.0,
    182.0,
    1.0,
];

/// `θ₁₃`: below this 1-norm the `[13/13]` approximant is exact to the double unit roundoff
/// (Higham 2005, Table 2.3).
const THETA13: f64 = 5.371920351148152;

/// The number of squarings `s = max(0, ⌈log₂(‖A‖₁/θ₁₃)⌉)` and the factor `2⁻ˢ` that brings
/// `‖A‖₁` to at most `θ₁₃`.
fn squarings<T: ImplicitScalar>(a: MatRef<'_, T>) -> (i32, T) {
    let norm1 = (0..a.ncols())
        .map(|j| (0..a.nrows()).map(|i| abs(a[(i, j)])).sum::<f64>())
        .fold(0.0, f64::max);
    let s = if norm1 > THETA13 {
        (norm1 / THETA13).log2().ceil().max(0.0) as i32
    } else {
        0
    };
    (s, real::<T>(0.5f64.powi(s)))
}

/// `e^A` for one square matrix: `A/2ˢ` with `s = max(0, ⌈log₂(‖A‖₁/θ₁₃)⌉)`, the `[13/13]`
/// Padé approximant `r = (V − U)⁻¹·(V + U)` of it, squared `s` times (Higham, "The scaling
/// and squaring method for the matrix exponential revisited", SIAM J. Matrix Anal. Appl. 26
/// (2005), Algorithm 2.3, with the degree fixed at 13: the lower degrees are a speed-up for
/// small norms only).
pub(crate) fn expm<T: ImplicitScalar>(a: MatRef<'_, T>) -> Mat<T> {
    let n = a.nrows();
    if n == 0 {
        return Mat::zeros(0, 0);
    }
    let (s, scale) = squarings(a);
    let a = Mat::from_fn(n, n, |i, j| a[(i, j)] * scale);
    let eye = Mat::<T>::identity(n, n);
    let b = |k: usize| real::<T>(B13[k]);
    let a2 = mm(a.as_ref(), a.as_ref());
    let a4 = mm(a2.as_ref(), a2.as_ref());
    let a6 = mm(a4.as_ref(), a2.as_ref());
    let lin = |c: [usize; 3], d: [usize; 4]| -> (Mat<T>, Mat<T>) {
        let inner = Mat::from_fn(n, n, |i, j| {
            b(c[0]) * a6[(i, j)] + b(c[1]) * a4[(i, j)] + b(c[2]) * a2[(i, j)]
        });
        let rest = Mat::from_fn(n, n, |i, j| {
            b(d[0]) * a6[(i, j)]
                + b(d[1]) * a4[(i, j)]
                + b(d[2]) * a2[(i, j)]
                + b(d[3]) * eye[(i, j)]
        });
        (inner, rest)
    };
    let (ui, ur) = lin([13, 11, 9], [7, 5, 3, 1]);
    let u = mm(a.as_ref(), (mm(a6.as_ref(), ui.as_ref()) + ur).as_ref());
    let (vi, vr) = lin([12, 10, 8], [6, 4, 2, 0]);
    let v = mm(a6.as_ref(), vi.as_ref()) + vr;
    let p = &v + &u;
    let q = &v - &u;
    let mut r = q.partial_piv_lu().solve(p.as_ref());
    for _ in 0..s {
        r = mm(r.as_ref(), r.as_ref());
    }
    r
}

/// The Fréchet derivative `L(A, E)` of the exponential, by the scaling and squaring
/// algorithm differentiated alongside the primal (Al-Mohy & Higham, "Computing the Fréchet
/// derivative of the matrix exponential, with an application to condition number
/// estimation", SIAM J. Matrix Anal. Appl. 30 (2009), Algorithm 6.4, degree 13): the
/// `[13/13]` Padé numerator and denominator `U ± V` and their directional derivatives
/// `L_U`, `L_V` from the powers `A²ᵏ` and theirs `M₂ₖ`, `L_R = (V − U)⁻¹·(L_U + L_V +
/// (L_U − L_V)·R)`, then `s` squarings `L ← R·L + L·R`, `R ← R²`: about three times the
/// primal's work (the block form `exp([[A, E], [0, A]])`, the same number, costs about ten).
/// With `(A, E)` replaced by `(Aᴴ, Ē)` it is the adjoint `L*(A, Ē) = L(Aᴴ, Ē)`.
pub(crate) fn expm_frechet<T: ImplicitScalar>(a: MatRef<'_, T>, e: MatRef<'_, T>) -> Mat<T> {
    let n = a.nrows();
    if n == 0 {
        return Mat::zeros(0, 0);
    }
    let (s, scale) = squarings(a);
    let a = Mat::from_fn(n, n, |i, j| a[(i, j)] * scale);
    let e = Mat::from_fn(n, n, |i, j| e[(i, j)] * scale);
    let b = |k: usize| real::<T>(B13[k]);
    let (a, e) = (a.as_ref(), e.as_ref());
    let a2 = mm(a, a);
    let m2 = mm(a, e) + mm(e, a);
    let a4 = mm(a2.as_ref(), a2.as_ref());
    let m4 = mm(a2.as_ref(), m2.as_ref()) + mm(m2.as_ref(), a2.as_ref());
    let a6 = mm(a2.as_ref(), a4.as_ref());
    let m6 = mm(a4.as_ref(), m2.as_ref()) + mm(m4.as_ref(), a2.as_ref());
    let comb = |x6: &Mat<T>, x4: &Mat<T>, x2: &Mat<T>, c: [usize; 3], eye: Option<usize>| {
        Mat::from_fn(n, n, |i, j| {
            let d = match eye {
                Some(k) if i == j => b(k),
                _ => T::zero(),
            };
            b(c[0]) * x6[(i, j)] + b(c[1]) * x4[(i, j)] + b(c[2]) * x2[(i, j)] + d
        })
    };
    let w1 = comb(&a6, &a4, &a2, [13, 11, 9], None);
    let w2 = comb(&a6, &a4, &a2, [7, 5, 3], Some(1));
    let z1 = comb(&a6, &a4, &a2, [12, 10, 8], None);
    let z2 = comb(&a6, &a4, &a2, [6, 4, 2], Some(0));
    let lw1 = comb(&m6, &m4, &m2, [13, 11, 9], None);
    let lw2 = comb(&m6, &m4, &m2, [7, 5, 3], None);
    let lz1 = comb(&m6, &m4, &m2, [12, 10, 8], None);
    let lz2 = comb(&m6, &m4, &m2, [6, 4, 2], None);
    let w = mm(a6.as_ref(), w1.as_ref()) + w2;
    let u = mm(a, w.as_ref());
    let v = mm(a6.as_ref(), z1.as_ref()) + z2;
    let lw = mm(a6.as_ref(), lw1.as_ref()) + mm(m6.as_ref(), w1.as_ref()) + lw2;
    let lu = mm(a, lw.as_ref()) + mm(e, w.as_ref());
    let lv = mm(a6.as_ref(), lz1.as_ref()) + mm(m6.as_ref(), z1.as_ref()) + lz2;
    let q = (&v - &u).partial_piv_lu();
    let mut r = q.solve((&v + &u).as_ref());
    let rhs = &lu + &lv + mm((&lu - &lv).as_ref(), r.as_ref());
    let mut l = q.solve(rhs.as_ref());
    for _ in 0..s {
        l = mm(r.as_ref(), l.as_ref()) + mm(l.as_ref(), r.as_ref());
        r = mm(r.as_ref(), r.as_ref());
    }
    l
}

/// The matrix exponential as a rule: one input `A: [batch…, n, n]`, one output `e^A` of its
/// shape, by scaling and squaring with the `[13/13]` Padé approximant (Higham 2005) on the
/// host (faer's products and LU).
///
/// **Pushforward**: the Fréchet derivative `L(A, Ȧ)`, the upper-right block of
/// `exp([[A, Ȧ], [0, A]])`, computed by Al-Mohy & Higham's differentiated scaling and
/// squaring (2009, Algorithm 6.4; about three times the primal). **Pullback**: its adjoint,
/// `Ā = L(Aᴴ, Ȳ)`.
/// First order only.
///
/// # Errors
/// [`Error::RankMismatch`](crate::Error::RankMismatch), a non-square matrix
/// ([`Error::ShapeMismatch`](crate::Error::ShapeMismatch)), a non-finite entry
/// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)), an exponential beyond the
/// dtype's range ([`Error::NonFinite`](crate::Error::NonFinite)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatrixExpRule;

/// `e^A` (see [`MatrixExpRule`]).
///
/// # Errors
/// As [`MatrixExpRule`].
pub fn matrix_exp<B: SyncBackend>(be: &B, a: &B::Tensor) -> Result<B::Tensor> {
    Ok(crate::rule::primal(&MatrixExpRule, be, &[a])?.remove(0))
}

impl Rule for MatrixExpRule {
    square_rule!("matrix_exp", 1, rrule_t, frule_t);
}

#[allow(clippy::type_complexity)]
fn forward<B: Backend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
) -> Result<(B::Tensor, Vec<Mat<T>>, Vec<usize>, usize)> {
    let (batch, n) = square_dims(&be.dims(a), "a")?;
    let mats = input_mats::<B, T>(be, a, "a")?;
    let h = per_matrix::<T, Mat<T>>(&batch, ("exp_a", n, n), |b| Ok(expm(mats[b].as_ref())))?;
    Ok((be.from_host(h)?, mats, batch, n))
}

fn rrule_t<B: SyncBackend, T: ImplicitScalar>(be: &B, a: &B::Tensor) -> Result<Outputs<B>> {
    let (out, mats, batch, n) = forward::<B, T>(be, a)?;
    let mats = Arc::new(mats);
    let pullback = move |be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
        let Some(y) = &y[0] else {
            return Ok(vec![None]);
        };
        let bars = host_mats::<B, T>(be, y, &batch, [n, n], "exp_a_bar")?;
        let h = per_matrix::<T, Mat<T>>(&batch, ("a_bar", n, n), |b| {
            let ah = mats[b].adjoint().to_owned();
            Ok(expm_frechet(ah.as_ref(), bars[b].as_ref()))
        })?;
        Ok(vec![Some(be.from_host(h)?)])
    };
    Ok((vec![out], Box::new(pullback)))
}

fn frule_t<B: SyncBackend, T: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
) -> Result<WithTangents<B>> {
    let (out, mats, batch, n) = forward::<B, T>(be, a)?;
    let Some(a_dot) = a_dot else {
        return Ok((vec![out], vec![None]));
    };
    let dots = host_mats::<B, T>(be, a_dot, &batch, [n, n], "a_dot")?;
    let h = per_matrix::<T, Mat<T>>(&batch, ("exp_a_dot", n, n), |b| {
        Ok(expm_frechet(mats[b].as_ref(), dots[b].as_ref()))
    })?;
    Ok((vec![out], vec![Some(be.from_host(h)?)]))
}
