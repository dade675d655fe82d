//! QR decomposition, reduced and complete, for tall, square and wide matrices, with pullback
//! and pushforward.

use std::sync::Arc;

use faer::linalg::triangular_solve::{
    solve_lower_triangular_in_place, solve_upper_triangular_in_place,
};
use faer::{Mat, MatRef};

use super::batch::{
    abs, by_dtype, cj, cols, eps, hcat, host_arg, join, matrix_dims, max_abs, mm, mm_add,
    pow2_scale, re, real, scaled, split, unscaled,
};
use super::fold_complement;
use super::svd::complement_tangent;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::implicit::ImplicitScalar;
use crate::scalar::DType;

/// Which `Q` [`qr`] returns, for `A: [batch…, m, n]` and `k = min(m, n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum QrMode {
    /// `Q: [batch…, m, k]`, `R: [batch…, k, n]`.
    #[default]
    Reduced,
    /// `Q: [batch…, m, m]`, `R: [batch…, m, n]` (rows below `k` zero). The columns of `Q`
    /// beyond `k` are a basis of the complement, not a function of `A`: the rules accept a
    /// cotangent on them only when it does not depend on that basis.
    Complete,
}

/// The factors `A = Q·R`, `Q` with orthonormal columns and `R` upper triangular (upper
/// trapezoidal when wide) with a **real, non-negative diagonal**. That fixes the gauge
/// (`Q → Q·D`, `R → Dᴴ·R` for a diagonal unitary `D`): for `A` whose leading `k` columns
/// are independent this QR is unique and smooth in `A`, so the factors and their
/// derivatives are functions of `A`. LAPACK's `geqrf` (PyTorch, NumPy) gives `Rᵢᵢ` the sign
/// opposite to its Householder pivot's real part instead: its factors differ from these by
/// the sign of some columns of `Q` (rows of `R`), and jump where a pivot's real part
/// changes sign. Or the tangents, from [`qr_frule`].
#[derive(Clone, Debug)]
pub struct Qr<B: Backend> {
    /// `Q`
    pub q: B::Tensor,
    /// `R`
    pub r: B::Tensor,
}

/// The pullback of [`qr_rrule`].
#[derive(Clone, Debug)]
pub struct QrPullback<B: Backend> {
    be: B,
    mode: QrMode,
    dims: Vec<usize>,
    dtype: DType,
    factors: Arc<[HostTensor; 2]>,
}

/// `A = Q·R` by the backend's [`Backend::qr`] (faer on the host unless the backend has its
/// own).
///
/// # Errors
/// [`Error::RankMismatch`] for a rank below 2, [`Error::InvalidArgument`] for a non-finite
/// entry.
pub fn qr<B: Backend>(be: &B, a: &B::Tensor, mode: QrMode) -> Result<Qr<B>> {
    let [q, r] = be.qr(a, mode)?;
    Ok(Qr { q, r })
}

/// The QR decomposition on host data, by faer's Householder QR, with the diagonal of `R`
/// made real and non-negative (see [`Qr`]): the default of [`Backend::qr`].
///
/// # Errors
/// As [`qr`].
pub fn host_qr(a: &HostTensor, mode: QrMode) -> Result<[HostTensor; 2]> {
    by_dtype!(a.dtype(), host_qr_t(a, mode))
}

fn host_qr_t<T: ImplicitScalar>(a: &HostTensor, mode: QrMode) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(a.dims(), "a")?;
    let k = m.min(n);
    let complete = mode == QrMode::Complete;
    let (mut qs, mut rs) = (Vec::new(), Vec::new());
    for x in &split::<T>(a, "a", true)? {
        let (q, r) = qr_matrix(x.as_ref(), complete);
        qs.push(q);
        rs.push(r);
    }
    let (kq, kr) = if complete { (m, m) } else { (k, k) };
    Ok([
        join("q", &batch, m, kq, &qs)?,
        join("r", &batch, kr, n, &rs)?,
    ])
}

fn qr_matrix<T: ImplicitScalar>(a: MatRef<'_, T>, complete: bool) -> (Mat<T>, Mat<T>) {
    let (m, n) = a.shape();
    let k = m.min(n);
    if k == 0 {
        let kq = if complete { m } else { 0 };
        return (Mat::identity(m, kq), Mat::zeros(kq, n));
    }
    // R scales with A, Q does not: decompose A/c (c a power of two near max|A|), scale R back
    let c = pow2_scale(max_abs(a));
    let a = unscaled(a, c);
    let dec = faer::linalg::solvers::Qr::new(a.as_ref());
    let mut q = if complete {
        dec.compute_Q()
    } else {
        dec.compute_thin_Q()
    };
    let thin_r = dec.thin_R();
    let rows = if complete { m } else { k };
    let mut r = Mat::from_fn(rows, n, |i, j| {
        if i < k && j >= i {
            thin_r[(i, j)]
        } else {
            T::zero()
        }
    });
    // The gauge: rotate row i of R by dᵢ = conj(rᵢᵢ)/|rᵢᵢ| and column i of Q by conj(dᵢ),
    // which makes the diagonal of R real and positive.
    for i in 0..k {
        let rii = r[(i, i)];
        let a = abs(rii);
        if a == 0.0 {
            continue;
        }
        let d = cj(rii) * real::<T>(1.0 / a);
        for j in i + 1..n {
            r[(i, j)] = d * r[(i, j)];
        }
        r[(i, i)] = real::<T>(a);
        for row in 0..m {
            q[(row, i)] *= cj(d);
        }
    }
    (q, scaled(r.as_ref(), c))
}

/// The QR decomposition and its pullback.
///
/// # Errors
/// As [`qr`].
pub fn qr_rrule<B: Backend>(be: &B, a: &B::Tensor, mode: QrMode) -> Result<(Qr<B>, QrPullback<B>)> {
    let out = qr(be, a, mode)?;
    let factors = [be.to_host(&out.q)?, be.to_host(&out.r)?];
    let pb = QrPullback {
        be: be.clone(),
        mode,
        dims: be.dims(a).to_vec(),
        dtype: be.dtype(a),
        factors: Arc::new(factors),
    };
    Ok((out, pb))
}

impl<B: Backend> QrPullback<B> {
    /// `Ā` from `Q̄` and `R̄` (an absent one is zero).
    ///
    /// For `m ≥ n` (`R` square, `k = n`): with `M = R̄·Rᴴ − Qᴴ·Q̄` and
    /// `M̃ = triu(M, 1) + triu(M, 1)ᴴ + Re diag(M)`,
    /// `Ā = (Q̄ + Q·M̃)·R⁻ᴴ` (Walter & Lehmann, "Algorithmic differentiation of linear
    /// algebra functions with application in optimum experimental design" (2018); Liao et
    /// al., PRX 9, 031041 (2019); PyTorch's `linalg_qr_backward`; the real diagonal is the
    /// gauge of [`Qr`]). For `m < n`, `A = [X, Y]` with `X = Q·R₁` square and `R₂ = Qᴴ·Y`:
    /// `Ȳ = Q·R̄₂` and `X̄` is the square formula for `Q̄ − Q·R̄₂·R₂ᴴ` and `R̄₁`. Derivation in
    /// [`crate::math`].
    ///
    /// In complete mode with `m > n`, the complement columns `Q⊥` may carry a cotangent only
    /// when `Q⊥ᴴ·Q̄⊥` is Hermitian; it contributes `Q̄ ← Q̄ − Q⊥·Q̄⊥ᴴ·Q`. The zero rows of `R`
    /// are constants: their cotangent is ignored.
    ///
    /// # Errors
    /// Shapes and dtypes of the cotangents; [`Error::Singular`] when `R₁` has a zero pivot
    /// (a rank-deficient `A`, whose `Q` is not differentiable); [`Error::GaugeIllDefined`]
    /// for a complement cotangent as above.
    pub fn pullback(
        &self,
        q_bar: Option<&B::Tensor>,
        r_bar: Option<&B::Tensor>,
    ) -> Result<B::Tensor> {
        let h = by_dtype!(self.dtype, qr_pullback_host::<B>(self, q_bar, r_bar))?;
        self.be.from_host(h)
    }

    /// Second order (forward-over-reverse): `(Ā, Ā̇)`, the cotangent of
    /// [`pullback`](QrPullback::pullback) and its tangent along the direction `Ȧ` of `A` and
    /// the tangents `Q̄̇`, `R̄̇` of the cotangents (an absent one is zero): the
    /// Hessian-vector product `H_φ·Ȧ` of `φ(A) = Re⟨Q̄, Q⟩ + Re⟨R̄, R⟩`, with `Q̄̇`, `R̄̇` the
    /// cotangents' tangents along the path when they depend on `A`.
    ///
    /// With `Q̇`, `Ṙ` from [`qr_frule`] and the pullback's intermediates (`Q̄' = Q̄ − Q·R̄₂·R₂ᴴ`,
    /// `M = R̄₁·R₁ᴴ − Qᴴ·Q̄'`, `B = Q̄' + Q·M̃`, `X̄ = B·R₁⁻ᴴ`, `Ȳ = Q·R̄₂`), by the product
    /// rule: `Q̄̇' = Q̄̇ − Q̇·R̄₂·R₂ᴴ − Q·R̄̇₂·R₂ᴴ − Q·R̄₂·Ṙ₂ᴴ`,
    /// `Ṁ = R̄̇₁·R₁ᴴ + R̄₁·Ṙ₁ᴴ − Q̇ᴴ·Q̄' − Qᴴ·Q̄̇'`, `Ṁ̃` (the same symmetrisation, linear),
    /// `Ḃ = Q̄̇' + Q̇·M̃ + Q·Ṁ̃`, `X̄̇ = (Ḃ − X̄·Ṙ₁ᴴ)·R₁⁻ᴴ` (from `X̄·R₁ᴴ = B`) and
    /// `Ȳ̇ = Q̇·R̄₂ + Q·R̄̇₂` (Pearlmutter's `R{·}` operator on the pullback, as JAX's `jvp` of
    /// `vjp`). Complete mode differentiates the complement fold with `Q̇⊥ = −Q·Q̇ᴴ·Q⊥`.
    /// Derivation in [`crate::math`], "Second order of the SVD and QR".
    ///
    /// # Errors
    /// Those of [`pullback`](QrPullback::pullback); shapes and dtypes of `a_dot`,
    /// `q_bar_dot` and `r_bar_dot`.
    pub fn pullback_tangent(
        &self,
        q_bar: Option<&B::Tensor>,
        r_bar: Option<&B::Tensor>,
        a_dot: &B::Tensor,
        q_bar_dot: Option<&B::Tensor>,
        r_bar_dot: Option<&B::Tensor>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let [bar, dot] = by_dtype!(
            self.dtype,
            qr_pullback_tangent_t::<B>(self, [q_bar, r_bar], a_dot, [q_bar_dot, r_bar_dot])
        )?;
        Ok((self.be.from_host(bar)?, self.be.from_host(dot)?))
    }
}

/// `[Q̄, R̄]` (or their tangents: `suffix` `"_dot"` names them so in errors) on the host,
/// one matrix per entry of the batch, shapes checked (`[batch…, m, kq]`, `[batch…, kq, n]`).
fn qr_cotangents<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    [q, r]: [Option<&B::Tensor>; 2],
    suffix: &str,
) -> Result<[Option<Vec<Mat<T>>>; 2]> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let kq = if pb.mode == QrMode::Complete {
        m
    } else {
        m.min(n)
    };
    let arg = |t: Option<&B::Tensor>, d: [usize; 2], name: &str| -> Result<Option<Vec<Mat<T>>>> {
        let name = format!("{name}{suffix}");
        let dims: Vec<usize> = batch.iter().copied().chain(d).collect();
        t.map(|t| {
            host_arg(&pb.be, t, &dims, T::DTYPE, &name).and_then(|h| split::<T>(&h, &name, false))
        })
        .transpose()
    };
    Ok([arg(q, [m, kq], "q_bar")?, arg(r, [kq, n], "r_bar")?])
}

fn qr_pullback_host<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    q_bar: Option<&B::Tensor>,
    r_bar: Option<&B::Tensor>,
) -> Result<HostTensor> {
    qr_pullback_t::<B, T>(pb, &qr_cotangents::<B, T>(pb, [q_bar, r_bar], "")?)
}

/// `Ā` for parsed cotangents `[Q̄, R̄]` (the checks of [`QrPullback::pullback`] included).
fn qr_pullback_t<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    [qb, rb]: &[Option<Vec<Mat<T>>>; 2],
) -> Result<HostTensor> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let complete = pb.mode == QrMode::Complete;
    let [q_h, r_h] = &*pb.factors;
    let qs = split::<T>(q_h, "q", false)?;
    let rs = split::<T>(r_h, "r", false)?;
    let mut out = Vec::with_capacity(qs.len());
    for b in 0..qs.len() {
        let q_all = qs[b].as_ref();
        let q = q_all.subcols(0, k);
        let r = rs[b].as_ref().subrows(0, k);
        let qbar = qb
            .as_ref()
            .map(|x| {
                let x = x[b].as_ref();
                if complete && m > k {
                    fold_complement(
                        q,
                        q_all.subcols(k, m - k),
                        cols(x, 0, k),
                        x.subcols(k, m - k),
                        "qr",
                        "Q",
                    )
                } else {
                    Ok(x.to_owned())
                }
            })
            .transpose()?;
        let rbar = rb.as_ref().map(|x| x[b].as_ref().subrows(0, k).to_owned());
        // In units of c (a power of two near max|R|), R' = R/c: the pullback is linear in
        // the cotangents, its R̄ part homogeneous of degree 0 in the scale of A and its Q̄
        // part of degree −1, Ā = Ā(0, R̄; R') + Ā(Q̄, 0; R')/c, so that no product in the
        // triangular solves leaves the range when R is tiny or huge.
        let c = pow2_scale(max_abs(r));
        let r1 = unscaled(r, c);
        let mut a_bar = match rbar {
            Some(rbar) => qr_pullback(q, r1.as_ref(), None, Some(rbar))?,
            None => Mat::zeros(m, n),
        };
        if let Some(qbar) = qbar {
            let part = qr_pullback(q, r1.as_ref(), Some(qbar), None)?;
            a_bar += unscaled(part.as_ref(), c);
        }
        out.push(a_bar);
    }
    join("a_bar", &batch, m, n, &out)
}

fn qr_pullback_tangent_t<B: Backend, T: ImplicitScalar>(
    pb: &QrPullback<B>,
    [q_bar, r_bar]: [Option<&B::Tensor>; 2],
    a_dot: &B::Tensor,
    [q_dot, r_dot]: [Option<&B::Tensor>; 2],
) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(&pb.dims, "a")?;
    let k = m.min(n);
    let complete = pb.mode == QrMode::Complete;
    let kq = if complete { m } else { k };
    let cots = qr_cotangents::<B, T>(pb, [q_bar, r_bar], "")?;
    // the first order, with its checks (which the tangent below relies on)
    let bar = qr_pullback_t::<B, T>(pb, &cots)?;
    let [qb, rb] = cots;
    let [qbd, rbd] = qr_cotangents::<B, T>(pb, [q_dot, r_dot], "_dot")?;
    let ad = host_arg(&pb.be, a_dot, &pb.dims, T::DTYPE, "a_dot")?;
    let ads = split::<T>(&ad, "a_dot", false)?;
    let [q_h, r_h] = &*pb.factors;
    let qs = split::<T>(q_h, "q", false)?;
    let rs = split::<T>(r_h, "r", false)?;
    let get = |x: &Option<Vec<Mat<T>>>, b: usize, rows: usize, cols: usize| {
        x.as_ref()
            .map_or_else(|| Mat::zeros(rows, cols), |x| x[b].clone())
    };
    let mut out = Vec::with_capacity(qs.len());
    for b in 0..qs.len() {
        let q_all = qs[b].as_ref();
        let q = q_all.subcols(0, k);
        let r = rs[b].as_ref().subrows(0, k);
        let (dq, dr) = qr_pushforward(q, r, ads[b].as_ref())?;
        let (qbar, qbar_dot) = (get(&qb, b, m, kq), get(&qbd, b, m, kq));
        let (qbar, qbar_dot) = if complete && m > k {
            let perp = q_all.subcols(k, m - k);
            let dperp = complement_tangent(q, dq.as_ref(), perp);
            let folded = fold_complement(
                q,
                perp,
                cols(qbar.as_ref(), 0, k),
                qbar.as_ref().subcols(k, m - k),
                "qr",
                "Q",
            )?;
            let folded_dot = super::fold_complement_tangent(
                q,
                dq.as_ref(),
                perp,
                dperp.as_ref(),
                qbar.as_ref().subcols(k, m - k),
                qbar_dot.as_ref().subcols(k, m - k),
                cols(qbar_dot.as_ref(), 0, k),
            );
            (folded, folded_dot)
        } else {
            (qbar, qbar_dot)
        };
        let rbar = get(&rb, b, kq, n).as_ref().subrows(0, k).to_owned();
        let rbar_dot = get(&rbd, b, kq, n).as_ref().subrows(0, k).to_owned();
        out.push(qr_pullback_tangent(
            [q, r],
            [dq.as_ref(), dr.as_ref()],
            [qbar.as_ref(), rbar.as_ref()],
            [qbar_dot.as_ref(), rbar_dot.as_ref()],
        ));
    }
    Ok([bar, join("a_bar_dot", &batch, m, n, &out)?])
}

/// One matrix: `Ā̇`, the tangent of [`qr_pullback`]'s `Ā` for `[Q, R]` (`m×k`, `k×n`)
/// moving along `[Q̇, Ṙ]` and cotangents `[Q̄, R̄]` along `[Q̄̇, R̄̇]` (the formula of
/// [`QrPullback::pullback_tangent`]; the pivots were checked by the first order).
fn qr_pullback_tangent<T: ImplicitScalar>(
    [q, r]: [MatRef<'_, T>; 2],
    [dq, dr]: [MatRef<'_, T>; 2],
    [qbar, rbar]: [MatRef<'_, T>; 2],
    [qbar_dot, rbar_dot]: [MatRef<'_, T>; 2],
) -> Mat<T> {
    let (m, k) = q.shape();
    let n = r.ncols();
    if k == 0 {
        return Mat::zeros(m, n);
    }
    let one = T::one();
    let (r1, r2) = (r.subcols(0, k), r.subcols(k, n - k));
    let (dr1, dr2) = (dr.subcols(0, k), dr.subcols(k, n - k));
    let (rb1, rb2) = (rbar.subcols(0, k), rbar.subcols(k, n - k));
    let (rbd1, rbd2) = (rbar_dot.subcols(0, k), rbar_dot.subcols(k, n - k));
    let mut qb = qbar.to_owned();
    let mut qbd = qbar_dot.to_owned();
    if n > k {
        let t = mm(rb2, r2.adjoint());
        mm_add(&mut qb, -one, q, t.as_ref());
        mm_add(&mut qbd, -one, dq, t.as_ref());
        let t = mm(rbd2, r2.adjoint());
        mm_add(&mut qbd, -one, q, t.as_ref());
        let t = mm(rb2, dr2.adjoint());
        mm_add(&mut qbd, -one, q, t.as_ref());
    }
    let mut mmat = mm(rb1, r1.adjoint());
    mm_add(&mut mmat, -one, q.adjoint(), qb.as_ref());
    let mut mdot = mm(rbd1, r1.adjoint());
    mm_add(&mut mdot, one, rb1, dr1.adjoint());
    mm_add(&mut mdot, -one, dq.adjoint(), qb.as_ref());
    mm_add(&mut mdot, -one, q.adjoint(), qbd.as_ref());
    let sym = |x: &Mat<T>| {
        Mat::from_fn(k, k, |i, j| {
            if i < j {
                x[(i, j)]
            } else if i > j {
                cj(x[(j, i)])
            } else {
                real::<T>(re(x[(i, i)]))
            }
        })
    };
    let (mt, mtd) = (sym(&mmat), sym(&mdot));
    let mut bmat = qb;
    mm_add(&mut bmat, one, q, mt.as_ref());
    let mut bdot = qbd;
    mm_add(&mut bdot, one, dq, mt.as_ref());
    mm_add(&mut bdot, one, q, mtd.as_ref());
    // X̄ = B·R₁⁻ᴴ, X̄̇ = (Ḃ − X̄·Ṙ₁ᴴ)·R₁⁻ᴴ, each by R₁·Xᴴ = (…)ᴴ
    let par = faer::get_global_parallelism();
    let mut xh = bmat.adjoint().to_owned();
    solve_upper_triangular_in_place(r1, xh.as_mut(), par);
    let x_bar = xh.adjoint().to_owned();
    mm_add(&mut bdot, -one, x_bar.as_ref(), dr1.adjoint());
    let mut xdh = bdot.adjoint().to_owned();
    solve_upper_triangular_in_place(r1, xdh.as_mut(), par);
    let x_dot = xdh.adjoint().to_owned();
    let mut y_dot = mm(dq, rb2);
    mm_add(&mut y_dot, one, q, rbd2);
    hcat(x_dot.as_ref(), y_dot.as_ref())
}

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
fn qr_pullback<T: ImplicitScalar>(
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
fn qr_pushforward<T: ImplicitScalar>(
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

/// The QR decomposition and its tangent for `Ȧ`: with `Ẋ` the first `k` columns of `Ȧ`,
/// `C = Qᴴ·Ẋ·R₁⁻¹`, `T = triu(C, 1) + tril(C, −1)ᴴ + Re diag(C)`:
/// `Ṙ₁ = T·R₁`, `Q̇ = Ẋ·R₁⁻¹ − Q·T`, and for wide `A`, `Ṙ₂ = Qᴴ·(Ẏ − Q̇·R₂)`; in complete
/// mode `Q̇⊥ = −Q·Q̇ᴴ·Q⊥` (a gauge choice). The adjoint of [`QrPullback::pullback`].
///
/// # Errors
/// As [`qr`]; shape or dtype of `a_dot`; [`Error::Singular`] for a rank-deficient `A`.
pub fn qr_frule<B: Backend>(
    be: &B,
    a: &B::Tensor,
    a_dot: &B::Tensor,
    mode: QrMode,
) -> Result<(Qr<B>, Qr<B>)> {
    let out = qr(be, a, mode)?;
    let factors = [be.to_host(&out.q)?, be.to_host(&out.r)?];
    let dims = be.dims(a).to_vec();
    let dot = host_arg(be, a_dot, &dims, be.dtype(a), "a_dot")?;
    let [q, r] = by_dtype!(be.dtype(a), qr_frule_t(&factors, &dot, mode))?;
    Ok((
        out,
        Qr {
            q: be.from_host(q)?,
            r: be.from_host(r)?,
        },
    ))
}

fn qr_frule_t<T: ImplicitScalar>(
    factors: &[HostTensor; 2],
    a_dot: &HostTensor,
    mode: QrMode,
) -> Result<[HostTensor; 2]> {
    let (batch, m, n) = matrix_dims(a_dot.dims(), "a_dot")?;
    let k = m.min(n);
    let complete = mode == QrMode::Complete;
    let qs = split::<T>(&factors[0], "q", false)?;
    let rs = split::<T>(&factors[1], "r", false)?;
    let dots = split::<T>(a_dot, "a_dot", false)?;
    let (mut dqs, mut drs) = (Vec::new(), Vec::new());
    for b in 0..dots.len() {
        let q_all = qs[b].as_ref();
        let q = q_all.subcols(0, k);
        // in units of c, R' = R/c: Ṙ is homogeneous of degree 0 in the scale of A, Q̇ of −1
        let r = rs[b].as_ref().subrows(0, k);
        let c = pow2_scale(max_abs(r));
        let (dq1, mut dr) = qr_pushforward(q, unscaled(r, c).as_ref(), dots[b].as_ref())?;
        let mut dq = unscaled(dq1.as_ref(), c);
        if complete {
            let dq_p = complement_tangent(q, dq.as_ref(), q_all.subcols(k, m - k));
            dq = hcat(dq.as_ref(), dq_p.as_ref());
            dr = Mat::from_fn(m, n, |i, j| if i < k { dr[(i, j)] } else { T::zero() });
        }
        dqs.push(dq);
        drs.push(dr);
    }
    let (kq, kr) = if complete { (m, m) } else { (k, k) };
    Ok([
        join("q_dot", &batch, m, kq, &dqs)?,
        join("r_dot", &batch, kr, n, &drs)?,
    ])
}
