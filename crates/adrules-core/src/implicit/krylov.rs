//! Matrix-free solvers on the host: restarted GMRES (the workspace's one GMRES,
//! `gmres.rs`, over this file's `HostSpace`; faer has none) and conjugate gradients
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
use super::gmres::{GmresLimits, KrylovSpace, gmres};
use super::maps::{LinearMaps, block, block_mut};
use super::solver::{Factorization, SolveStats, System, norm, relative_residuals};
use crate::error::{Error, Result};
use crate::scalar::Scalar;

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

    /// Restarted GMRES on one right-hand side (the workspace's one GMRES,
    /// [`gmres`](super::gmres::gmres), over the host space [`HostSpace`]); returns the
    /// iterations used and the true relative residual reached. `x` holds the initial guess
    /// when `warm`, else zeros.
    fn gmres(&self, system: System, b: &[T], x: &mut [T], warm: bool) -> Result<(usize, f64)> {
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
        let limits = GmresLimits {
            tolerance: self.tolerance,
            max_iterations: self.max_iterations,
            restart: self.restart,
        };
        let (solution, iterations, residual) =
            gmres(&space, limits, &b, b_norm, x.to_vec(), r, beta)?;
        x.copy_from_slice(&solution);
        Ok((iterations, residual))
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
        let mut w = vec![T::zero(); m];
        self.krylov
            .apply(self.system, &basis.data[j * m..(j + 1) * m], &mut w, 1)?;
        Ok(w)
    }
    fn norm(&self, x: &Vec<T>) -> Result<f64> {
        Ok(norm(x))
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
