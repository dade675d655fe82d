//! Matrix-free solvers on the host: restarted GMRES and conjugate gradients, the workspace's
//! one implementations (`gmres.rs`, `cg.rs`; faer has no GMRES), run over this file's
//! `HostSpace`. Both solve one right-hand side at a time, so that the tolerance is a
//! relative residual per right-hand side.

use std::sync::Arc;

use faer::{Accum, Par};

use super::ImplicitScalar;
use super::cg::{CgLimits, cg};
use super::gmres::{GmresLimits, gmres};
use super::maps::{LinearMaps, block, block_mut};
use super::solver::{Factorization, SolveStats, System, norm};
use super::space::KrylovSpace;
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

    /// GMRES or CG (the workspace's one implementations, [`gmres`] and [`cg`], over the host
    /// space [`HostSpace`]) on one right-hand side; returns the iterations used and the true
    /// relative residual reached. `x` holds the initial guess when `warm`, else zeros.
    fn solve_one(&self, system: System, b: &[T], x: &mut [T], warm: bool) -> Result<(usize, f64)> {
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
        let space = HostSpace {
            krylov: self,
            system,
            m: b.len(),
        };
        let b = b.to_vec();
        let (r, beta) = if warm {
            space.residual(&b, &x.to_vec())?
        } else {
            (b.clone(), b_norm)
        };
        let (solution, iterations, residual) = if self.cg {
            let limits = CgLimits {
                tolerance: self.tolerance,
                max_iterations: self.max_iterations,
                negate: self.negate,
            };
            cg(&space, limits, &b, b_norm, x.to_vec(), &r, beta)?
        } else {
            let limits = GmresLimits {
                tolerance: self.tolerance,
                max_iterations: self.max_iterations,
                restart: self.restart,
            };
            gmres(&space, limits, &b, b_norm, x.to_vec(), r, beta)?
        };
        x.copy_from_slice(&solution);
        Ok((iterations, residual))
    }
}

/// The host's vectors as a [`KrylovSpace`]: slices of length `m`, the basis one contiguous
/// column-major `m×(p+1)` block, so that a Gram–Schmidt pass is two GEMVs (faer).
struct HostSpace<'a, T: ImplicitScalar> {
    krylov: &'a Krylov<T>,
    system: System,
    m: usize,
}

/// The host basis: `len` columns of length `m` at the start of `data`.
struct HostBasis<T> {
    data: Vec<T>,
    len: usize,
}

impl<T: ImplicitScalar> HostSpace<'_, T> {
    /// `op(A + λI)·v`, the entries checked finite.
    fn apply_slice(&self, v: &[T]) -> Result<Vec<T>> {
        let mut w = vec![T::zero(); self.m];
        self.krylov.apply(self.system, v, &mut w, 1)?;
        Ok(w)
    }

    fn push(&self, basis: &mut HostBasis<T>, v: &[T], alpha: T) {
        let m = self.m;
        basis.data[basis.len * m..(basis.len + 1) * m]
            .iter_mut()
            .zip(v)
            .for_each(|(d, &v)| *d = v * alpha);
        basis.len += 1;
    }
}

impl<T: ImplicitScalar> KrylovSpace<T> for HostSpace<'_, T> {
    type Vector = Vec<T>;
    type Basis = HostBasis<T>;

    fn basis(&self, capacity: usize) -> HostBasis<T> {
        HostBasis {
            data: vec![T::zero(); self.m * capacity],
            len: 0,
        }
    }
    fn clear(&self, basis: &mut HostBasis<T>) {
        basis.len = 0;
    }
    fn push_scaled(&self, basis: &mut HostBasis<T>, v: &Vec<T>, alpha: T) -> Result<()> {
        self.push(basis, v, alpha);
        Ok(())
    }
    fn push_normalized(&self, basis: &mut HostBasis<T>, w: Vec<T>, alpha: T) -> Result<()> {
        self.push(basis, &w, alpha);
        Ok(())
    }
    fn apply(&self, basis: &HostBasis<T>, j: usize) -> Result<Vec<T>> {
        let m = self.m;
        self.apply_slice(&basis.data[j * m..(j + 1) * m])
    }
    fn apply_vector(&self, v: &Vec<T>) -> Result<Vec<T>> {
        self.apply_slice(v)
    }
    fn scaled(&self, v: &Vec<T>, alpha: T) -> Result<Vec<T>> {
        Ok(v.iter().map(|&v| alpha * v).collect())
    }
    fn update(&self, y: &mut Vec<T>, x: &Vec<T>, alpha: T, beta: T) -> Result<()> {
        y.iter_mut()
            .zip(x)
            .for_each(|(y, &x)| *y = beta * *y + alpha * x);
        Ok(())
    }
    fn norm(&self, x: &Vec<T>) -> Result<f64> {
        Ok(norm(x))
    }
    fn real_inner(&self, x: &Vec<T>, y: &Vec<T>) -> Result<f64> {
        // Σ Re(conj(x_i)·y_i) = Σ (Re x_i·Re y_i + Im x_i·Im y_i), in f64
        let f = |v: T| (Scalar::re(v).to_f64(), Scalar::im(v).to_f64());
        Ok(x.iter()
            .zip(y)
            .map(|(&x, &y)| {
                let ((xr, xi), (yr, yi)) = (f(x), f(y));
                xr * yr + xi * yi
            })
            .sum())
    }
    fn project(&self, basis: &HostBasis<T>, w: &mut Vec<T>, d: &mut [T]) -> Result<()> {
        let (m, len) = (self.m, basis.len);
        let v = block(&basis.data[..len * m], m, len);
        faer::linalg::matmul::matmul(
            block_mut(d, len, 1),
            Accum::Replace,
            v.adjoint(),
            block(w, m, 1),
            T::one(),
            Par::Seq,
        );
        faer::linalg::matmul::matmul(
            block_mut(w, m, 1),
            Accum::Add,
            v,
            block(d, len, 1),
            -T::one(),
            Par::Seq,
        );
        Ok(())
    }
    fn combine(&self, x: &mut Vec<T>, basis: &HostBasis<T>, y: &[T]) -> Result<()> {
        let (m, used) = (self.m, y.len());
        faer::linalg::matmul::matmul(
            block_mut(x, m, 1),
            Accum::Add,
            block(&basis.data[..used * m], m, used),
            block(y, used, 1),
            T::one(),
            Par::Seq,
        );
        Ok(())
    }
    fn residual(&self, b: &Vec<T>, x: &Vec<T>) -> Result<(Vec<T>, f64)> {
        let mut r = vec![T::zero(); self.m];
        self.krylov.residual(self.system, b, x, &mut r)?;
        let beta = norm(&r);
        Ok((r, beta))
    }
    fn non_finite(&self, what: &str, value: f64) -> Error {
        Error::invalid(
            "A = ∂c/∂y",
            format!("the linear map returned a non-finite entry ({what} = {value})"),
        )
    }
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
        let mut residuals = Vec::with_capacity(k);
        for j in 0..k {
            let (b, xj) = (&rhs[j * m..(j + 1) * m], &mut x[j * m..(j + 1) * m]);
            let (used, residual) = self.solve_one(system, b, xj, warm_start)?;
            iterations = iterations.max(used);
            residuals.push(residual);
        }
        Ok(SolveStats {
            solver: if self.cg { "cg" } else { "gmres" },
            iterations,
            residuals,
            failure: None,
        })
    }
}
