//! Restarted GMRES, written once over the small vector-space trait [`KrylovSpace`]
//! (`space.rs`, shared with CG in `cg.rs`) that the host's slices (`krylov.rs`, over
//! [`LinearMaps`](super::LinearMaps)) and a backend's tensors (`device.rs`, over
//! [`AdjointMaps`](super::device::AdjointMaps)) both implement, as KrylovKit.jl's solvers
//! are written once over VectorInterface.jl.
//!
//! # Algorithm
//! Saad & Schultz, "GMRES: A generalized minimal residual algorithm for solving nonsymmetric
//! linear systems", SIAM J. Sci. Stat. Comput. 7(3), 1986. Each cycle builds an orthonormal
//! Krylov basis `V` (classical Gram–Schmidt applied twice, which keeps it orthogonal to
//! working precision), reduces the Hessenberg matrix to triangular form with complex Givens
//! rotations as it grows, and stops when the least-squares residual `|g_{j+1}|` reaches the
//! tolerance, the basis is full, or the Krylov space is invariant (breakdown). The cycle
//! then updates `x ← x + V·y` and recomputes the true residual `b − op·x`, on which
//! convergence is decided. A zero diagonal entry of the triangular factor shows a singular
//! operator.
//!
//! The small least-squares problem (the `(p+1)×p` Hessenberg matrix, its rotations, the back
//! substitution) is on the host, in the element type `T` of the data (complex for complex
//! data); only the vector operations go through the space.

use faer::Mat;

use super::ImplicitScalar;
use super::space::KrylovSpace;
use crate::error::{Error, Result};
use crate::scalar::{RealScalar, Scalar};

/// The limits of one GMRES solve.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GmresLimits {
    /// relative residual `‖b − op·x‖ / ‖b‖` to reach
    pub(crate) tolerance: f64,
    /// operator applications allowed, restarts included
    pub(crate) max_iterations: usize,
    /// `p`: the Krylov basis size of a cycle (≥ 1)
    pub(crate) restart: usize,
}

impl GmresLimits {
    fn not_converged(&self, iterations: usize, residual: f64) -> Error {
        Error::NotConverged {
            arg: "GMRES".into(),
            iterations,
            residual,
            tolerance: self.tolerance,
        }
    }
}

/// Restarted GMRES(`p`) on `op·x = b` from the iterate `x` with residual `r = b − op·x` of
/// norm `beta`; `b_norm = ‖b‖ > 0` (finite). Returns the solution, the operator
/// applications used and the true relative residual reached.
///
/// # Errors
/// [`Error::NotConverged`] (arg `"GMRES"`) at `max_iterations` with the true relative
/// residual; [`Error::Singular`] on a breakdown that leaves a residual (see
/// [`back_substitute`]); the space's errors.
pub(crate) fn gmres<T: ImplicitScalar, S: KrylovSpace<T>>(
    space: &S,
    limits: GmresLimits,
    b: &S::Vector,
    b_norm: f64,
    mut x: S::Vector,
    mut r: S::Vector,
    mut beta: f64,
) -> Result<(S::Vector, usize, f64)> {
    let eps = super::eps::<T>();
    let target = limits.tolerance * b_norm;
    let p = limits.restart;
    let mut basis = space.basis(p + 1);
    let mut h = Mat::<T>::zeros(p + 1, p);
    let mut rotations: Vec<(T, T)> = Vec::with_capacity(p);
    let mut g = vec![T::zero(); p + 1];
    let mut coef = vec![T::zero(); p];
    let mut d = vec![T::zero(); p];
    let mut iterations = 0;
    loop {
        if beta <= target {
            return Ok((x, iterations, beta / b_norm));
        }
        if iterations >= limits.max_iterations {
            return Err(limits.not_converged(iterations, beta / b_norm));
        }
        space.clear(&mut basis);
        space.push_scaled(&mut basis, &r, T::from_f64(1.0 / beta))?;
        g.fill(T::zero());
        g[0] = T::from_f64(beta);
        rotations.clear();
        let mut used = 0;
        for j in 0..p {
            let mut w = space.apply(&basis, j)?;
            iterations += 1;
            let w_norm = space.norm(&w)?;
            if !w_norm.is_finite() {
                return Err(space.non_finite("‖op·v‖", w_norm));
            }
            let c = &mut coef[..=j];
            c.fill(T::zero());
            // Classical Gram–Schmidt, twice: all coefficients of a pass from the same w.
            for _ in 0..2 {
                let d = &mut d[..=j];
                space.project(&basis, &mut w, d)?;
                c.iter_mut().zip(d.iter()).for_each(|(c, &d)| *c += d);
            }
            let h_next = space.norm(&w)?;
            arnoldi_column(&mut h, &mut rotations, &mut g, c, h_next);
            used = j + 1;
            // The new vector lies in the span of the basis: the Krylov space is invariant.
            if h_next <= eps * w_norm {
                break;
            }
            space.push_normalized(&mut basis, w, T::from_f64(1.0 / h_next))?;
            if g[j + 1].modulus().to_f64() <= target || iterations >= limits.max_iterations {
                break;
            }
        }
        let y = &mut coef[..used];
        back_substitute(&h, &g, y, iterations)?;
        space.combine(&mut x, &basis, y)?;
        (r, beta) = space.residual(b, &x)?;
    }
}

/// Adds column `j = coef.len() − 1` of the Arnoldi process to the GMRES least-squares
/// problem: stores the Gram–Schmidt coefficients `coef` (`h_{0..=j, j}`) in column `j` of the
/// Hessenberg matrix `h` (`(p+1)×p`), applies the previous Givens `rotations` to it, appends
/// the rotation that zeroes `h_{j+1, j} = h_next` and applies it to `g`, so that
/// `H[..=j, ..=j]` is upper triangular and `|g[j+1]|` is the least-squares residual.
fn arnoldi_column<T: ImplicitScalar>(
    h: &mut Mat<T>,
    rotations: &mut Vec<(T, T)>,
    g: &mut [T],
    coef: &[T],
    h_next: f64,
) {
    let j = coef.len() - 1;
    for (i, &c) in coef.iter().enumerate() {
        h[(i, j)] = c;
    }
    for (i, &(cs, sn)) in rotations.iter().enumerate() {
        let (a, b) = (h[(i, j)], h[(i + 1, j)]);
        h[(i, j)] = cs * a + sn * b;
        h[(i + 1, j)] = cs * b - Scalar::conj(sn) * a;
    }
    let (cs, sn, rho) = givens(h[(j, j)], T::from_f64(h_next));
    h[(j, j)] = rho;
    rotations.push((cs, sn));
    g[j + 1] = -Scalar::conj(sn) * g[j];
    g[j] = cs * g[j];
}

/// Back substitution `R·y = g[..used]` with the triangular factor `R = H[..used, ..used]`
/// (`used = y.len()`) of a GMRES cycle that ran `iterations` iterations in all.
///
/// # Errors
/// [`Error::Singular`] (arg `"GMRES"`) when a diagonal entry of `R` vanishes relative to
/// `R`'s largest entry: the Krylov space is invariant under the operator but the residual
/// cannot be reduced.
fn back_substitute<T: ImplicitScalar>(
    h: &Mat<T>,
    g: &[T],
    y: &mut [T],
    iterations: usize,
) -> Result<()> {
    let used = y.len();
    let eps = super::eps::<T>();
    let scale = (0..used)
        .flat_map(|j| (0..=j).map(move |i| (i, j)))
        .map(|(i, j)| h[(i, j)].modulus().to_f64())
        .fold(0.0, f64::max);
    for i in (0..used).rev() {
        let diag = h[(i, i)];
        if diag.modulus().to_f64() <= used as f64 * eps * scale {
            return Err(Error::Singular {
                arg: "GMRES".into(),
                reason: format!(
                    "breakdown after {iterations} iterations: the Krylov space is \
                     invariant under A but the residual cannot be reduced (diagonal \
                     {i} of the triangular factor vanishes)"
                ),
            });
        }
        let mut s = g[i];
        for l in i + 1..used {
            s -= h[(i, l)] * y[l];
        }
        y[i] = s / diag;
    }
    Ok(())
}

/// Givens rotation `(c, s, ρ)` with real `c ≥ 0` such that
/// `[c, s; −conj(s), c]·[a; b] = [ρ; 0]`, for complex `a` and real `b ≥ 0`.
fn givens<T: ImplicitScalar>(a: T, b: T) -> (T, T, T) {
    let (abs_a, abs_b) = (a.modulus().to_f64(), b.modulus().to_f64());
    if abs_b == 0.0 {
        return (T::one(), T::zero(), a);
    }
    if abs_a == 0.0 {
        return (T::zero(), T::one(), b);
    }
    let rho = abs_a.hypot(abs_b);
    let phase = a * T::from_f64(1.0 / abs_a);
    (
        T::from_f64(abs_a / rho),
        phase * Scalar::conj(b) * T::from_f64(1.0 / rho),
        phase * T::from_f64(rho),
    )
}
