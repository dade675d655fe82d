//! The eigendecomposition of a general square matrix, with its pullback and pushforward.

use std::sync::Arc;

use faer::linalg::solvers::Solve;
use faer::{Mat, MatRef};

use super::{Cotangents, Outputs, WithTangents, dense_rule, square_dims};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::linalg::batch::{join, split};
use crate::linalg::common::{abs, cj, cplx, gauge_error, im, mm, re};
use crate::linalg::driver::per_matrix;
use crate::rule::{Primal, Rule, SyncBackend};
use crate::scalar::{Complex32, Complex64, DType, ImplicitScalar, RealScalar, eps};

/// The eigendecomposition `A·V = V·diag(λ)` of a general square matrix as a rule: one input
/// `A: [batch…, n, n]` (any of the four dtypes), two outputs, always complex (`Complex32`
/// for `f32`/`Complex32` input, `Complex64` for `f64`/`Complex64`): the eigenvalues
/// `λ: [batch…, n]` in the order faer's QR algorithm gives them (not sorted), and the
/// eigenvectors `V: [batch…, n, n]` as columns of unit 2-norm (NumPy's and PyTorch's
/// normalisation); each column's phase is arbitrary (the gauge), so only losses invariant
/// under `vᵢ → e^{iφ}·vᵢ` (`|V|`, `λ`, `V·diag(λ)·V⁻¹`, …) have a gradient. On a backend
/// without complex dtypes (burn, candle) it is an
/// [`Error::Unsupported`](crate::Error::Unsupported).
///
/// **Pullback** (Giles 2008, §3.1; PyTorch's `linalg_eig_backward`): with
/// `G = Vᴴ·V̄ − Vᴴ·V·diag(Re diag(Vᴴ·V̄))`, `Fᵢⱼ = Gᵢⱼ/conj(λⱼ − λᵢ)` (`i ≠ j`) and
/// `Fᵢᵢ = λ̄ᵢ`: `Ā = V⁻ᴴ·F·Vᴴ` (its real part for a real `A`). A cotangent whose
/// `Im diag(Vᴴ·V̄)` is not zero depends on the phases, and a nonzero `Gᵢⱼ` between equal
/// eigenvalues on the basis of their eigenspace: both are
/// [`Error::GaugeIllDefined`](crate::Error::GaugeIllDefined).
///
/// **Pushforward**: `Ṗ = V⁻¹·Ȧ·V`, `λ̇ = diag(Ṗ)`, `Xᵢⱼ = Ṗᵢⱼ/(λⱼ − λᵢ)` (`i ≠ j`, zero on
/// the diagonal) and `V̇ = V·X − V·diag(Re diag(Vᴴ·V·X))` (unit norms kept; PyTorch's
/// `linalg_eig_jvp`); [`Error::GaugeIllDefined`](crate::Error::GaugeIllDefined) where a
/// degenerate pair has a nonzero `Ṗᵢⱼ`. First order only.
///
/// Two eigenvalues are equal when `|λᵢ − λⱼ| ≤ 16·√n·ε·max|λ|`.
///
/// # Errors
/// [`Error::RankMismatch`](crate::Error::RankMismatch), a non-square `A`
/// ([`Error::ShapeMismatch`](crate::Error::ShapeMismatch)), a non-finite entry
/// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)); faer's failure to converge
/// ([`Error::Backend`](crate::Error::Backend)); a defective `A` (its eigenvectors
/// not a basis: `V` singular) in the rules ([`Error::Singular`](crate::Error::Singular)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EigRule;

impl Rule for EigRule {
    dense_rule!("eig", 1, 2);

    fn check<B: Backend>(&self, be: &B, x: &[&B::Tensor]) -> Result<()> {
        square_dims(&be.dims(x[0]), "a")?;
        let complex = be.dtype(x[0]).complex();
        if !be.dtypes().contains(&complex) {
            return Err(Error::Unsupported {
                backend: be.name().into(),
                what: format!("eig: its outputs are {complex}, which this backend does not store"),
            });
        }
        Ok(())
    }

    fn rrule<B: SyncBackend>(&self, be: &B, x: &[&B::Tensor], _: &[bool]) -> Result<Outputs<B>> {
        match be.dtype(x[0]) {
            DType::F32 | DType::C32 => rrule_t::<B, Complex32>(be, x[0]),
            DType::F64 | DType::C64 => rrule_t::<B, Complex64>(be, x[0]),
        }
    }

    fn frule<B: SyncBackend>(
        &self,
        be: &B,
        x: &[&B::Tensor],
        dx: &[Option<&B::Tensor>],
    ) -> Result<WithTangents<B>> {
        match be.dtype(x[0]) {
            DType::F32 | DType::C32 => frule_t::<B, Complex32>(be, x[0], dx[0]),
            DType::F64 | DType::C64 => frule_t::<B, Complex64>(be, x[0], dx[0]),
        }
    }
}

/// `(λ, V)` of every matrix, in the complex type `C`.
struct Eig<C> {
    values: Vec<Vec<C>>,
    vectors: Vec<Mat<C>>,
}

/// `A` as complex matrices `C` (real inputs promoted), checked finite.
fn complex_mats<B: Backend, C: ImplicitScalar>(be: &B, a: &B::Tensor) -> Result<Vec<Mat<C>>> {
    // one host copy: promoting a real `A` to complex is exact, so its finiteness is `A`'s
    split::<C>(&be.to_host(a)?.to_dtype_projected(C::DTYPE), "a", true)
}

/// The eigendecomposition of one complex matrix, columns normalised.
fn eig_one<C: ImplicitScalar>(a: MatRef<'_, C>, b: usize) -> Result<(Vec<C>, Mat<C>)> {
    let n = a.nrows();
    if n == 0 {
        return Ok((Vec::new(), Mat::zeros(0, 0)));
    }
    let dec = a.eigen().map_err(|e| Error::Backend {
        backend: "faer".into(),
        message: format!("eig of matrix {b} of the batch did not converge: {e:?}"),
    })?;
    let to_c = |z: num_complex::Complex<<C as crate::scalar::Scalar>::Real>| {
        cplx::<C>(RealScalar::to_f64(z.re), RealScalar::to_f64(z.im))
    };
    let values: Vec<C> = (0..n).map(|i| to_c(dec.S().column_vector()[i])).collect();
    let u = dec.U();
    let mut v = Mat::from_fn(n, n, |i, j| to_c(u[(i, j)]));
    for j in 0..n {
        let norm = (0..n).map(|i| abs(v[(i, j)]).powi(2)).sum::<f64>().sqrt();
        if norm > 0.0 {
            for i in 0..n {
                v[(i, j)] *= cplx::<C>(1.0 / norm, 0.0);
            }
        }
    }
    Ok((values, v))
}

/// The outputs `[λ, V]` and the per-matrix decompositions.
#[allow(clippy::type_complexity)]
fn forward<B: Backend, C: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
) -> Result<(Vec<B::Tensor>, Arc<Eig<C>>, Vec<usize>, usize)> {
    EigRule.check(be, &[a])?;
    let (batch, n) = square_dims(&be.dims(a), "a")?;
    let mats = complex_mats::<B, C>(be, a)?;
    let mut values = Vec::with_capacity(mats.len());
    let mut vectors = Vec::with_capacity(mats.len());
    for (b, m) in mats.iter().enumerate() {
        let (l, v) = eig_one(m.as_ref(), b)?;
        values.push(l);
        vectors.push(v);
    }
    let flat: Vec<C> = values.iter().flatten().copied().collect();
    let mut dims = batch.clone();
    dims.push(n);
    let lam = super::gather_scalars("values", &dims, &flat, C::DTYPE)?;
    let vec_h = join("vectors", &batch, n, n, &vectors)?;
    let outs = vec![be.from_host(lam)?, be.from_host(vec_h)?];
    Ok((outs, Arc::new(Eig { values, vectors }), batch, n))
}

/// `|x − y| ≤ tol`: equal eigenvalues.
fn tol<C: ImplicitScalar>(values: &[C]) -> f64 {
    let big = values.iter().map(|&x| abs(x)).fold(0.0, f64::max);
    16.0 * (values.len().max(1) as f64).sqrt() * eps::<C>() * big
}

fn rrule_t<B: SyncBackend, C: ImplicitScalar>(be: &B, a: &B::Tensor) -> Result<Outputs<B>> {
    let (outs, eig, batch, n) = forward::<B, C>(be, a)?;
    let in_dtype = be.dtype(a);
    let pullback = move |be: &B, _: &Primal<B>, y: &[Option<B::Tensor>]| -> Cotangents<B> {
        let mut dims = batch.clone();
        dims.push(n);
        let l_bar = y[0]
            .as_ref()
            .map(|t| crate::linalg::host_arg(be, t, &dims, C::DTYPE, "values_bar"))
            .transpose()?;
        let l_bar: Option<Vec<C>> = l_bar.map(|h| {
            h.data()
                .to_c64_vec()
                .into_iter()
                .map(|z| cplx::<C>(z.re, z.im))
                .collect()
        });
        let v_bar = y[1]
            .as_ref()
            .map(|t| crate::linalg::driver::host_mats::<B, C>(be, t, &batch, [n, n], "vectors_bar"))
            .transpose()?;
        let h = per_matrix::<C, Mat<C>>(&batch, ("a_bar", n, n), |b| {
            let (lam, v) = (&eig.values[b], eig.vectors[b].as_ref());
            let mut f = Mat::<C>::zeros(n, n);
            if let Some(vb) = &v_bar {
                let g0 = mm(v.adjoint(), vb[b].as_ref());
                let t = tol(lam);
                for i in 0..n {
                    let col = (0..n)
                        .map(|r| abs(vb[b][(r, i)]).powi(2))
                        .sum::<f64>()
                        .sqrt();
                    if im(g0[(i, i)]).abs() > eps::<C>().sqrt() * col.max(f64::MIN_POSITIVE) {
                        return Err(gauge_error(
                            "eig",
                            format!(
                                "the cotangent of eigenvector {i} depends on its phase \
                                 (Im(vᵢᴴ·v̄ᵢ) = {:e}): the loss is not gauge invariant",
                                im(g0[(i, i)])
                            ),
                        ));
                    }
                }
                let vhv = mm(v.adjoint(), v);
                let g = Mat::from_fn(n, n, |i, j| {
                    g0[(i, j)] - vhv[(i, j)] * cplx::<C>(re(g0[(j, j)]), 0.0)
                });
                for i in 0..n {
                    for j in 0..n {
                        if i == j {
                            continue;
                        }
                        let d = lam[j] - lam[i];
                        if abs(d) <= t {
                            if abs(g[(i, j)]) > eps::<C>().sqrt() * (1.0 + abs(g0[(i, i)])) {
                                return Err(gauge_error(
                                    "eig",
                                    format!(
                                        "eigenvalues {i} and {j} are degenerate and the loss \
                                         depends on the basis of their eigenspace"
                                    ),
                                ));
                            }
                        } else {
                            f[(i, j)] = g[(i, j)] / cj(d);
                        }
                    }
                }
            }
            if let Some(lb) = &l_bar {
                for i in 0..n {
                    f[(i, i)] = lb[b * n + i];
                }
            }
            // Ā = V⁻ᴴ·F·Vᴴ: Vᴴ·X = F·Vᴴ
            let rhs = mm(f.as_ref(), v.adjoint());
            let lu = v.adjoint().to_owned().partial_piv_lu();
            super::check_pivots(lu.U(), "eig: V (a defective matrix)", b)?;
            Ok(lu.solve(rhs.as_ref()))
        })?;
        Ok(vec![Some(be.from_host(h.to_dtype_projected(in_dtype))?)])
    };
    Ok((outs, Box::new(pullback)))
}

fn frule_t<B: SyncBackend, C: ImplicitScalar>(
    be: &B,
    a: &B::Tensor,
    a_dot: Option<&B::Tensor>,
) -> Result<WithTangents<B>> {
    let (outs, eig, batch, n) = forward::<B, C>(be, a)?;
    let Some(a_dot) = a_dot else {
        return Ok((outs, vec![None, None]));
    };
    let dot_h = be.to_host(a_dot)?.to_dtype_projected(C::DTYPE);
    let dots = split::<C>(&dot_h, "a_dot", true)?;
    let mut lam_dots: Vec<C> = Vec::with_capacity(dots.len() * n);
    let v_dots = per_matrix::<C, Mat<C>>(&batch, ("vectors_dot", n, n), |b| {
        let (lam, v) = (&eig.values[b], eig.vectors[b].as_ref());
        let lu = v.to_owned().partial_piv_lu();
        super::check_pivots(lu.U(), "eig: V (a defective matrix)", b)?;
        let p = lu.solve(mm(dots[b].as_ref(), v).as_ref());
        let t = tol(lam);
        let mut x = Mat::<C>::zeros(n, n);
        for i in 0..n {
            lam_dots.push(p[(i, i)]);
            for j in 0..n {
                if i == j {
                    continue;
                }
                let d = lam[j] - lam[i];
                if abs(d) <= t {
                    if abs(p[(i, j)]) > eps::<C>().sqrt() * (1.0 + abs(p[(i, i)])) {
                        return Err(gauge_error(
                            "eig",
                            format!("eigenvalues {i} and {j} are degenerate: V has no tangent"),
                        ));
                    }
                } else {
                    x[(i, j)] = p[(i, j)] / d;
                }
            }
        }
        let vx = mm(v, x.as_ref());
        let vhvx = mm(v.adjoint(), vx.as_ref());
        Ok(Mat::from_fn(n, n, |i, j| {
            vx[(i, j)] - v[(i, j)] * cplx::<C>(re(vhvx[(j, j)]), 0.0)
        }))
    })?;
    let mut dims = batch.clone();
    dims.push(n);
    let lam_dot = super::gather_scalars("values_dot", &dims, &lam_dots, C::DTYPE)?;
    Ok((
        outs,
        vec![Some(be.from_host(lam_dot)?), Some(be.from_host(v_dots)?)],
    ))
}
