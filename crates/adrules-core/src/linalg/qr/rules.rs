//! The QR's rules on one matrix: the pullback, the pushforward, and the check of `R₁`'s
//! pivots they share.

use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};

use super::*;

/// The pivots of `R₁` must be nonzero: `|rᵢᵢ| > k·ε·max|rⱼⱼ|`.
fn check_pivots<T: ImplicitScalar>(r1: MatRef<'_, T>) -> Result<()> {
    let k = r1.nrows();
    let big = (0..k).map(|i| abs(r1[(i, i)])).fold(0.0, f64::max);
    let tol = k as f64 * eps::<T>() * big;
    for i in 0..k {
        let p = abs(r1[(i, i)]);
        if p <= tol {
            return Err(Error::Singular {
                arg: "qr: R".into(),
                // relative to the largest pivot: the rules pass R in units of a power of two
                reason: format!(
                    "pivot {i} of {k} is {:e}·max|Rᵢᵢ|, at most k·ε = {:e}: A is rank \
                     deficient and Q is not differentiable there",
                    if big > 0.0 { p / big } else { 0.0 },
                    k as f64 * eps::<T>()
                ),
            });
        }
    }
    Ok(())
}

/// One matrix: `Ā` for `Q: m×k`, `R: k×n` (the formula of [`QrPullback::pullback`]).
pub(super) fn qr_pullback<T: ImplicitScalar>(
    q: MatRef<'_, T>,
    r: MatRef<'_, T>,
    qbar: Option<Mat<T>>,
    rbar: Option<Mat<T>>,
) -> Result<Mat<T>> {
    let (m, k) = q.shape();
    let n = r.ncols();
    if k == 0 {
        return Ok(Mat::zeros(m, n));
    }
    let r1 = r.subcols(0, k);
    let r2 = r.subcols(k, n - k);
    check_pivots(r1)?;
    let mut qbar = qbar.unwrap_or_else(|| Mat::zeros(m, k));
    let (rbar1, y_bar) = match &rbar {
        Some(rb) => {
            let rb2 = rb.as_ref().subcols(k, n - k);
            if n > k {
                let t = mm(rb2, r2.adjoint());
                mm_add(&mut qbar, -T::one(), q, t.as_ref());
            }
            (cols(rb.as_ref(), 0, k), mm(q, rb2))
        }
        None => (Mat::zeros(k, k), Mat::zeros(m, n - k)),
    };
    let mut mmat = mm(rbar1.as_ref(), r1.adjoint());
    mm_add(&mut mmat, -T::one(), q.adjoint(), qbar.as_ref());
    let mt = Mat::from_fn(k, k, |i, j| {
        if i < j {
            mmat[(i, j)]
        } else if i > j {
            cj(mmat[(j, i)])
        } else {
            real::<T>(re(mmat[(i, i)]))
        }
    });
    let mut bmat = qbar;
    mm_add(&mut bmat, T::one(), q, mt.as_ref());
    // X̄ = B·R₁⁻ᴴ  ⇔  R₁·X̄ᴴ = Bᴴ
    let mut rhs = bmat.adjoint().to_owned();
    solve_upper_triangular_in_place(r1, rhs.as_mut(), faer::get_global_parallelism());
    let x_bar = rhs.adjoint().to_owned();
    Ok(hcat(x_bar.as_ref(), y_bar.as_ref()))
}

/// One matrix: the tangents `(Q̇: m×k, Ṙ: k×n)` for `Ȧ`.
pub(super) fn qr_pushforward<T: ImplicitScalar>(
    q: MatRef<'_, T>,
    r: MatRef<'_, T>,
    a_dot: MatRef<'_, T>,
) -> Result<(Mat<T>, Mat<T>)> {
    let (m, k) = q.shape();
    let n = r.ncols();
    if k == 0 {
        return Ok((Mat::zeros(m, 0), Mat::zeros(0, n)));
    }
    let r1 = r.subcols(0, k);
    let r2 = r.subcols(k, n - k);
    check_pivots(r1)?;
    // Z = Ẋ·R₁⁻¹  ⇔  R₁ᴴ·Zᴴ = Ẋᴴ
    let mut zh = a_dot.subcols(0, k).adjoint().to_owned();
    solve_lower_triangular_in_place(r1.adjoint(), zh.as_mut(), faer::get_global_parallelism());
    let z = zh.adjoint().to_owned();
    let c = mm(q.adjoint(), z.as_ref());
    let t = Mat::from_fn(k, k, |i, j| {
        if i < j {
            c[(i, j)] + cj(c[(j, i)])
        } else if i == j {
            real::<T>(re(c[(i, i)]))
        } else {
            T::zero()
        }
    });
    let mut dq = z;
    mm_add(&mut dq, -T::one(), q, t.as_ref());
    let dr1 = mm(t.as_ref(), r1);
    let dr = if n > k {
        let mut w = a_dot.subcols(k, n - k).to_owned();
        mm_add(&mut w, -T::one(), dq.as_ref(), r2);
        let dr2 = mm(q.adjoint(), w.as_ref());
        hcat(dr1.as_ref(), dr2.as_ref())
    } else {
        dr1
    };
    Ok((dq, dr))
}
