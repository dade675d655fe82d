//! Matrix-free solvers: restarted GMRES (ours: faer has none) and conjugate gradients
//! (faer's). Both solve one right-hand side at a time, so that the tolerance is a relative
//! residual per right-hand side.

use std::sync::{Arc, Mutex};

use faer::dyn_stack::{MemBuffer, MemStack, StackReq};
use faer::matrix_free::conjugate_gradient::{
    CgError, CgParams, conjugate_gradient, conjugate_gradient_scratch,
};
use faer::matrix_free::{IdentityPrecond, InitialGuessStatus, LinOp};
use faer::traits::ComplexField;
use faer::traits::math_utils::from_f64;
use faer::{Accum, MatMut, MatRef, Par};

use super::ImplicitScalar;
use super::maps::{LinearMaps, block, block_mut};
use super::solver::{Factorization, SolveStats, System, norm, relative_residuals};
use crate::error::{Error, Result};
use crate::scalar::{RealScalar, Scalar};

/// A matrix-free solver bound to the maps of one linearization.
pub(crate) struct Krylov<T: ImplicitScalar> {
    pub(crate) maps: Arc<dyn LinearMaps<T>>,
    pub(crate) ridge: T,
    /// CG (definite tag) instead of GMRES
    pub(crate) cg: bool,
    /// CG on `−A` (negative-definite tag)
    pub(crate) negate: bool,
    pub(crate) tolerance: f64,
    pub(crate) max_iterations: usize,
    pub(crate) restart: usize,
}

impl<T: ImplicitScalar> Krylov<T> {
    /// `out = op(A + λI)·v` for a block of `k` vectors.
    fn apply(&self, system: System, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        match system {
            System::Direct => self.maps.apply_a(v, out, k)?,
            System::Adjoint => self.maps.apply_a_adjoint(v, out, k)?,
        }
        if self.ridge != T::zero() {
            // λ is real: (A + λI)ᴴ = Aᴴ + λI.
            out.iter_mut()
                .zip(v)
                .for_each(|(o, &v)| *o += self.ridge * v);
        }
        // A non-finite product would only show as a NaN residual after every iteration ran.
        if let Some((i, o)) = out
            .iter()
            .enumerate()
            .find(|(_, o)| !Scalar::is_finite(**o))
        {
            return Err(Error::invalid(
                "A = ∂c/∂y",
                format!("the linear map returned a non-finite entry {i} ({o:?})"),
            ));
        }
        Ok(())
    }

    /// `r = b − op(A + λI)·x`.
    fn residual(&self, system: System, b: &[T], x: &[T], r: &mut [T]) -> Result<()> {
        self.apply(system, x, r, 1)?;
        r.iter_mut().zip(b).for_each(|(r, &b)| *r = b - *r);
        Ok(())
    }

    fn not_converged(&self, iterations: usize, residual: f64) -> Error {
        Error::NotConverged {
            arg: if self.cg { "CG" } else { "GMRES" }.into(),
            iterations,
            residual,
            tolerance: self.tolerance,
        }
    }

    /// Restarted GMRES on one right-hand side; returns the iterations used and the true
    /// relative residual reached. `x` holds the initial guess when `warm`, else zeros.
    ///
    /// Each cycle builds an orthonormal Krylov basis `V` (classical Gram–Schmidt applied twice,
    /// which keeps it orthogonal to working precision), reduces the Hessenberg matrix to
    /// triangular form with complex Givens rotations as it grows, and stops when the
    /// least-squares residual `|g_{j+1}|` reaches the tolerance, the basis is full, or the
    /// Krylov space is invariant (breakdown). Convergence is then checked on the true
    /// residual. A zero diagonal entry of the triangular factor shows a singular `A`.
    fn gmres(&self, system: System, b: &[T], x: &mut [T], warm: bool) -> Result<(usize, f64)> {
        let m = b.len();
        let b_norm = norm(b);
        if !b_norm.is_finite() {
            return Err(Error::invalid(
                "right-hand side",
                format!("has a non-finite entry (norm {b_norm})"),
            ));
        }
        if b_norm == 0.0 {
            x.fill(T::zero());
            return Ok((0, 0.0));
        }
        let eps = super::eps::<T>();
        let target = self.tolerance * b_norm;
        let p = self.restart;
        let mut basis = vec![T::zero(); m * (p + 1)];
        let mut h = faer::Mat::<T>::zeros(p + 1, p);
        let mut rotations: Vec<(T, T)> = Vec::with_capacity(p);
        let mut g = vec![T::zero(); p + 1];
        let mut coef = vec![T::zero(); p];
        let mut w = vec![T::zero(); m];
        let mut r = vec![T::zero(); m];
        let mut iterations = 0;
        if warm {
            self.residual(system, b, x, &mut r)?;
        } else {
            r.copy_from_slice(b);
        }
        let mut beta = norm(&r);
        loop {
            if beta <= target {
                return Ok((iterations, beta / b_norm));
            }
            if iterations >= self.max_iterations {
                return Err(self.not_converged(iterations, beta / b_norm));
            }
            let inv = T::from_f64(1.0 / beta);
            basis[..m]
                .iter_mut()
                .zip(&r)
                .for_each(|(v, &r)| *v = r * inv);
            g.fill(T::zero());
            g[0] = T::from_f64(beta);
            rotations.clear();
            let mut used = 0;
            for j in 0..p {
                self.apply(system, &basis[j * m..(j + 1) * m], &mut w, 1)?;
                iterations += 1;
                let w_norm = norm(&w);
                let v = block(&basis[..(j + 1) * m], m, j + 1);
                let c = &mut coef[..=j];
                c.fill(T::zero());
                for _ in 0..2 {
                    let mut d = vec![T::zero(); j + 1];
                    faer::linalg::matmul::matmul(
                        block_mut(&mut d, j + 1, 1),
                        Accum::Replace,
                        v.adjoint(),
                        block(&w, m, 1),
                        T::one(),
                        Par::Seq,
                    );
                    faer::linalg::matmul::matmul(
                        block_mut(&mut w, m, 1),
                        Accum::Add,
                        v,
                        block(&d, j + 1, 1),
                        -T::one(),
                        Par::Seq,
                    );
                    c.iter_mut().zip(&d).for_each(|(c, &d)| *c += d);
                }
                let h_next = norm(&w);
                arnoldi_column(&mut h, &mut rotations, &mut g, c, h_next);
                used = j + 1;
                // The new vector lies in the span of the basis: the Krylov space is invariant.
                if h_next <= eps * w_norm {
                    break;
                }
                let inv = T::from_f64(1.0 / h_next);
                basis[(j + 1) * m..(j + 2) * m]
                    .iter_mut()
                    .zip(&w)
                    .for_each(|(v, &w)| *v = w * inv);
                if g[j + 1].modulus().to_f64() <= target || iterations >= self.max_iterations {
                    break;
                }
            }
            let y = &mut coef[..used];
            back_substitute(&h, &g, y, iterations)?;
            faer::linalg::matmul::matmul(
                block_mut(x, m, 1),
                Accum::Add,
                block(&basis[..used * m], m, used),
                block(y, used, 1),
                T::one(),
                Par::Seq,
            );
            self.residual(system, b, x, &mut r)?;
            beta = norm(&r);
        }
    }

    /// Conjugate gradients (faer) on `A` or `−A`, for one right-hand side.
    fn cg(&self, system: System, b: &[T], x: &mut [T]) -> Result<usize> {
        let m = b.len();
        let sign = if self.negate { -T::one() } else { T::one() };
        let rhs: Vec<T> = b.iter().map(|&v| sign * v).collect();
        let op = CgOperator {
            krylov: self,
            system,
            sign,
            error: Mutex::new(None),
        };
        let params = CgParams::<<T as ComplexField>::Real> {
            initial_guess: InitialGuessStatus::MaybeNonZero,
            abs_tolerance: from_f64(0.0),
            rel_tolerance: from_f64(self.tolerance),
            max_iters: self.max_iterations,
            ..Default::default()
        };
        let precond = IdentityPrecond { dim: m };
        let par = Par::Seq;
        let mut mem = MemBuffer::new(conjugate_gradient_scratch(precond, &op, 1, par));
        let result = conjugate_gradient(
            block_mut(x, m, 1),
            precond,
            &op,
            block(&rhs, m, 1),
            params,
            |_| {},
            par,
            MemStack::new(&mut mem),
        );
        if let Some(e) = op.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        match result {
            Ok(info) => Ok(info.iter_count),
            Err(CgError::NoConvergence { .. }) => {
                let mut r = vec![T::zero(); m];
                self.residual(system, b, x, &mut r)?;
                Err(self.not_converged(self.max_iterations, norm(&r) / norm(b)))
            }
            Err(_) => Err(Error::Singular {
                arg: "CG".into(),
                reason: format!(
                    "breakdown: pᴴ·A·p has the wrong sign, A is not {} definite",
                    if self.negate { "negative" } else { "positive" }
                ),
            }),
        }
    }
}

/// Adds column `j = coef.len() − 1` of the Arnoldi process to the GMRES least-squares
/// problem: stores the Gram–Schmidt coefficients `coef` (`h_{0..=j, j}`) in column `j` of the
/// Hessenberg matrix `h` (`(p+1)×p`), applies the previous Givens `rotations` to it, appends
/// the rotation that zeroes `h_{j+1, j} = h_next` and applies it to `g`, so that
/// `H[..=j, ..=j]` is upper triangular and `|g[j+1]|` is the least-squares residual.
pub(crate) fn arnoldi_column<T: ImplicitScalar>(
    h: &mut faer::Mat<T>,
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
/// `R`'s largest entry: the Krylov space is invariant under `A` but the residual cannot be
/// reduced.
pub(crate) fn back_substitute<T: ImplicitScalar>(
    h: &faer::Mat<T>,
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

impl<T: ImplicitScalar> Factorization<T> for Krylov<T> {
    fn solve(
        &self,
        system: System,
        rhs: &[T],
        x: &mut [T],
        k: usize,
        warm_start: bool,
    ) -> Result<SolveStats> {
        let m = self.maps.num_unknowns();
        if !warm_start {
            x.fill(T::zero());
        }
        let mut iterations = 0;
        // GMRES ends on a true residual; CG's is recursive, so recompute it.
        let mut residuals = Vec::with_capacity(k);
        for j in 0..k {
            let (b, xj) = (&rhs[j * m..(j + 1) * m], &mut x[j * m..(j + 1) * m]);
            let used = if self.cg {
                self.cg(system, b, xj)?
            } else {
                let (used, residual) = self.gmres(system, b, xj, warm_start)?;
                residuals.push(residual);
                used
            };
            iterations = iterations.max(used);
        }
        if self.cg {
            let mut ax = vec![T::zero(); m * k];
            if m > 0 && k > 0 {
                self.apply(system, x, &mut ax, k)?;
            }
            residuals = relative_residuals(rhs, &ax, m, k);
        }
        Ok(SolveStats {
            solver: if self.cg { "cg" } else { "gmres" },
            iterations,
            residuals,
            failure: None,
        })
    }
}

/// `sign·op(A + λI)` as a faer operator. faer's operators cannot fail: the first error of
/// the maps is kept here, the output is zeroed (which stops CG at once) and the error is
/// returned after CG.
struct CgOperator<'a, T: ImplicitScalar> {
    krylov: &'a Krylov<T>,
    system: System,
    sign: T,
    error: Mutex<Option<Error>>,
}

impl<T: ImplicitScalar> std::fmt::Debug for CgOperator<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CgOperator")
            .field("system", &self.system)
            .finish_non_exhaustive()
    }
}

impl<T: ImplicitScalar> CgOperator<'_, T> {
    fn apply_conj(&self, mut out: MatMut<'_, T>, rhs: MatRef<'_, T>, conj: bool) {
        let (m, k) = (rhs.nrows(), rhs.ncols());
        let c = |v: T| if conj { Scalar::conj(v) } else { v };
        let input: Vec<T> = (0..k)
            .flat_map(|j| (0..m).map(move |i| (i, j)))
            .map(|(i, j)| c(rhs[(i, j)]))
            .collect();
        let mut output = vec![T::zero(); m * k];
        let mut error = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if error.is_none()
            && let Err(e) = self.krylov.apply(self.system, &input, &mut output, k)
        {
            *error = Some(e);
        }
        let failed = error.is_some();
        for j in 0..k {
            for i in 0..m {
                out[(i, j)] = if failed {
                    T::zero()
                } else {
                    c(self.sign * output[j * m + i])
                };
            }
        }
    }
}

impl<T: ImplicitScalar> LinOp<T> for CgOperator<'_, T> {
    fn apply_scratch(&self, _rhs_ncols: usize, _par: Par) -> StackReq {
        StackReq::EMPTY
    }
    fn nrows(&self) -> usize {
        self.krylov.maps.num_unknowns()
    }
    fn ncols(&self) -> usize {
        self.krylov.maps.num_unknowns()
    }
    fn apply(&self, out: MatMut<'_, T>, rhs: MatRef<'_, T>, _par: Par, _stack: &mut MemStack) {
        self.apply_conj(out, rhs, false);
    }
    fn conj_apply(&self, out: MatMut<'_, T>, rhs: MatRef<'_, T>, _par: Par, _stack: &mut MemStack) {
        self.apply_conj(out, rhs, true);
    }
}
