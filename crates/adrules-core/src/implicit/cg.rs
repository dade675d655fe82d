//! Conjugate gradients, written once over [`KrylovSpace`] like GMRES (`gmres.rs`): the
//! host's slices (`krylov.rs`) and a backend's tensors (`device.rs`) run this one loop.
//!
//! # Algorithm
//! Hestenes & Stiefel, "Methods of conjugate gradients for solving linear systems", J. Res.
//! Nat. Bur. Standards 49(6), 1952, unpreconditioned, on the Hermitian positive-definite
//! `S = σ·op` with right-hand side `σ·b`, where `σ = −1` for a negative-definite tag and
//! `+1` otherwise (a negative-definite `op` is CG on `−op`). From the iterate `x` with
//! residual `r = σ·(b − op·x)` and `p = r`, each iteration computes `q = op·p` and the
//! curvature `κ = σ·Re(pᴴ·q) = pᴴ·S·p`, then
//!
//! `α = ‖r‖²/κ`, `x ← x + α·p`, `r ← r − α·σ·q`, `p ← r + (‖r_new‖²/‖r‖²)·p`.
//!
//! It stops when the recursive residual reaches `‖r‖ ≤ tolerance·‖b‖` (checked before each
//! iteration, so a warm start that already satisfies it takes 0 iterations), and reports the
//! true relative residual `‖b − op·x‖/‖b‖` from one more application of `op`. The scalars
//! (`‖r‖²`, `κ`, `α`, the ratio) are `f64` whatever `T`; only the vector operations go through
//! the space: per iteration one application, two real scalars (`Re(pᴴ·q)`, `‖r‖`) and three
//! updates.

use super::ImplicitScalar;
use super::space::KrylovSpace;
use crate::error::{Error, Result};

/// The limits and the sign of one CG solve.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CgLimits {
    /// relative residual `‖b − op·x‖ / ‖b‖` to reach (on the recursive residual)
    pub(crate) tolerance: f64,
    /// operator applications allowed
    pub(crate) max_iterations: usize,
    /// CG on `−op` (negative-definite tag)
    pub(crate) negate: bool,
}

/// Conjugate gradients on `op·x = b` (on `−op·x = −b` when `limits.negate`) from the
/// iterate `x` with residual `r = b − op·x` of norm `r_norm`; `b_norm = ‖b‖ > 0` (finite).
/// Returns the solution, the iterations (operator applications, the final residual's
/// excluded) and the true relative residual `‖b − op·x‖ / ‖b‖`.
///
/// # Errors
/// - [`Error::NotConverged`] (arg `"CG"`) after `max_iterations` iterations, with the true
///   relative residual.
/// - [`Error::Singular`] (arg `"CG"`) when a curvature `pᴴ·(σ·op)·p` is not positive: `op`
///   is not definite as tagged.
/// - The space's [`non_finite`](KrylovSpace::non_finite) error when `pᴴ·op·p` or `‖r‖²` is
///   not finite; the space's errors.
pub(crate) fn cg<T: ImplicitScalar, S: KrylovSpace<T>>(
    space: &S,
    limits: CgLimits,
    b: &S::Vector,
    b_norm: f64,
    mut x: S::Vector,
    r: &S::Vector,
    r_norm: f64,
) -> Result<(S::Vector, usize, f64)> {
    let sign = if limits.negate { -1.0 } else { 1.0 };
    let target = limits.tolerance * b_norm;
    let mut r = space.scaled(r, T::from_f64(sign))?;
    let mut p = r.clone();
    let mut rr = r_norm * r_norm;
    let mut iterations = 0;
    while rr.sqrt() > target {
        if iterations >= limits.max_iterations {
            let residual = space.residual(b, &x)?.1 / b_norm;
            return Err(Error::NotConverged {
                arg: "CG".into(),
                iterations: limits.max_iterations,
                residual,
                tolerance: limits.tolerance,
            });
        }
        // q = op·p, so S·p = σ·q.
        let q = space.apply_vector(&p)?;
        iterations += 1;
        let pq = space.real_inner(&p, &q)?;
        if !pq.is_finite() {
            return Err(space.non_finite("pᴴ·op·p", pq));
        }
        let curvature = sign * pq;
        if curvature <= 0.0 {
            return Err(Error::Singular {
                arg: "CG".into(),
                reason: format!(
                    "breakdown: pᴴ·A·p has the wrong sign, A is not {} definite",
                    if limits.negate {
                        "negative"
                    } else {
                        "positive"
                    }
                ),
            });
        }
        let alpha = rr / curvature;
        space.update(&mut x, &p, T::from_f64(alpha), T::one())?;
        space.update(&mut r, &q, T::from_f64(-sign * alpha), T::one())?;
        let rr_next = space.norm(&r)?.powi(2);
        if !rr_next.is_finite() {
            return Err(space.non_finite("‖r‖²", rr_next));
        }
        // p ← r + (‖r_next‖² / ‖r‖²)·p
        space.update(&mut p, &r, T::one(), T::from_f64(rr_next / rr))?;
        rr = rr_next;
    }
    let residual = space.residual(b, &x)?.1 / b_norm;
    Ok((x, iterations, residual))
}
