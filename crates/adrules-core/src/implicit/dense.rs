//! Dense factorizations through faer: LU with partial pivoting and Cholesky. One
//! factorization serves the direct and the adjoint solves.

use faer::linalg::solvers::{Llt, PartialPivLu, Solve};
use faer::{Mat, Side};

use super::maps::{block_mut, product};
use super::solver::{Factorization, SolveStats, System, relative_residuals};
use super::{ImplicitScalar, eps};
use crate::error::{Error, Result};
use crate::scalar::{RealScalar, Scalar};

enum Kind<T: ImplicitScalar> {
    Lu(PartialPivLu<T>),
    /// the Cholesky factor of `A`, or of `−A` when `negate`
    Cholesky {
        llt: Llt<T>,
        negate: bool,
    },
}

/// A dense factorization, with the matrix kept for the residuals.
pub(crate) struct Dense<T: ImplicitScalar> {
    a: Mat<T>,
    kind: Kind<T>,
}

const ARG: &str = "A = ∂c/∂y";

fn max_abs<T: ImplicitScalar>(a: &Mat<T>) -> Result<f64> {
    let mut max = 0.0f64;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            let v = a[(i, j)];
            if !Scalar::is_finite(v) {
                return Err(Error::invalid(
                    ARG,
                    format!("entry ({i}, {j}) is not finite ({v:?})"),
                ));
            }
            max = max.max(v.modulus().to_f64());
        }
    }
    Ok(max)
}

impl<T: ImplicitScalar> Dense<T> {
    /// LU with partial pivoting. `A` is declared singular when a pivot is at most
    /// `m·ε·max|A|` in modulus.
    pub(crate) fn lu(a: Mat<T>) -> Result<Self> {
        let m = a.nrows();
        let threshold = m as f64 * eps::<T>() * max_abs(&a)?;
        let lu = PartialPivLu::new(a.as_ref());
        let u = lu.U();
        for i in 0..m {
            let pivot = u[(i, i)].modulus().to_f64();
            if pivot <= threshold {
                return Err(Error::Singular {
                    arg: ARG.into(),
                    reason: format!(
                        "LU pivot {i} of {m} is {pivot:e}, at most m·ε·max|A| = {threshold:e}"
                    ),
                });
            }
        }
        Ok(Dense {
            a,
            kind: Kind::Lu(lu),
        })
    }

    /// Cholesky of `A` (or of `−A` when `negate`), which must be Hermitian up to
    /// `√ε·max|A|` and definite. The factorization, the solves and the residuals use the
    /// Hermitian part `(A + Aᴴ)/2` (which differs from `A` only by rounding or by the noise
    /// of a finite-difference Jacobian).
    pub(crate) fn cholesky(a: Mat<T>, negate: bool) -> Result<Self> {
        let m = a.nrows();
        let tol = eps::<T>().sqrt() * max_abs(&a)?;
        for j in 0..m {
            for i in j..m {
                let gap = (a[(i, j)] - Scalar::conj(a[(j, i)])).modulus().to_f64();
                if gap > tol {
                    return Err(Error::invalid(
                        "structure",
                        format!(
                            "A = ∂c/∂y is tagged definite (Cholesky) but not Hermitian: |A[{i},{j}] − \
                             conj(A[{j},{i}])| = {gap:e} > √ε·max|A| = {tol:e}"
                        ),
                    ));
                }
            }
        }
        let half = T::from_f64(0.5);
        let a = Mat::from_fn(m, m, |i, j| half * (a[(i, j)] + Scalar::conj(a[(j, i)])));
        let signed = if negate {
            Mat::from_fn(m, m, |i, j| -a[(i, j)])
        } else {
            a.clone()
        };
        let llt = Llt::new(signed.as_ref(), Side::Lower).map_err(|e| Error::Singular {
            arg: ARG.into(),
            reason: format!(
                "Cholesky of {}A failed ({e}): not {} definite",
                if negate { "−" } else { "" },
                if negate { "negative" } else { "positive" }
            ),
        })?;
        Ok(Dense {
            a,
            kind: Kind::Cholesky { llt, negate },
        })
    }
}

impl<T: ImplicitScalar> Factorization<T> for Dense<T> {
    fn solve(
        &self,
        system: System,
        rhs: &[T],
        x: &mut [T],
        k: usize,
        _warm_start: bool,
    ) -> Result<SolveStats> {
        let m = self.a.nrows();
        x.copy_from_slice(rhs);
        let mut xm = block_mut(x, m, k);
        let solver = match &self.kind {
            Kind::Lu(lu) => {
                match system {
                    System::Direct => lu.solve_in_place(xm.as_mut()),
                    System::Adjoint => lu.solve_adjoint_in_place(xm.as_mut()),
                }
                "lu"
            }
            Kind::Cholesky { llt, negate } => {
                // A is Hermitian: the adjoint system is the direct one.
                llt.solve_in_place(xm.as_mut());
                if *negate {
                    x.iter_mut().for_each(|v| *v = -*v);
                }
                "cholesky"
            }
        };
        let mut ax = vec![T::zero(); m * k];
        match system {
            System::Direct => product(self.a.as_ref(), x, &mut ax, k),
            System::Adjoint => product(self.a.adjoint(), x, &mut ax, k),
        }
        Ok(SolveStats {
            solver,
            iterations: 0,
            residuals: relative_residuals(rhs, &ax, m, k),
            failure: None,
        })
    }
}
