//! Conformance of the decompositions and their rules ([`adrules_core::linalg`]) on a
//! backend: thin, full and truncated SVD, reduced and complete QR, eigh, batched, tall and
//! wide, every dtype of the config. For each, on the backend under test:
//! - the factors reconstruct the input (in double precision on the host), with orthonormal
//!   columns;
//! - gauge-invariant results agree with the [`ReferenceBackend`]'s: singular values,
//!   eigenvalues and every `Ā` of a gauge-invariant loss (its cotangents built from each
//!   backend's own factors, so a backend with its own decomposition and another gauge
//!   passes), and QR's `Ā` (QR's gauge is fixed);
//! - the pushforward and the pullback satisfy the adjoint identity for gauge-invariant
//!   cotangents;
//! - the second-order rules (`pullback_tangent`: Hessian-vector products of the same
//!   losses, the cotangents moving with each backend's own factors) agree with the
//!   reference's;
//! - a phase-dependent cotangent of a complex SVD is refused with
//!   [`Error::GaugeIllDefined`];
//! - the clustered eigendecomposition ([`eigh_clustered`](adrules_core::linalg::eigh_clustered))
//!   on a batch with a 2-fold near-degenerate cluster: `W` and `C'` against the reference,
//!   the adjoint identity, (double precision) central differences of `W` and `C'`, and the
//!   second order (the Hessian-vector product of a fixed linear loss against the reference's,
//!   and the symmetry of its Hessian);
//! - normalization `x/‖x‖` ([`normalize`](adrules_core::linalg::normalize)): primal, tangent
//!   and cotangent against the reference's, and the adjoint identity.

use std::sync::Arc;

use adrules_core::linalg::{
    ClusterOptions, QrMode, RuleOptions, SvdCotangents, SvdMode, Truncation, eigh_clustered,
    eigh_clustered_frule, eigh_clustered_rrule, eigh_frule, eigh_rrule, qr_frule, qr_rrule,
    svd_frule, svd_rrule, svd_truncated_frule, svd_truncated_rrule,
};
use adrules_core::{Backend, Complex64, DType, Error, HostData, HostTensor, Result};
use faer::Mat;

use super::Config;
use super::case::report;
use crate::{ReferenceBackend, Rng};

type C = Complex64;

fn arc(h: &HostTensor) -> Arc<HostTensor> {
    Arc::new(h.clone())
}

fn mats(h: &HostTensor) -> Vec<Mat<C>> {
    let d = h.dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    let v = h.data().to_c64_vec();
    let count: usize = d[..d.len() - 2].iter().product();
    (0..count)
        .map(|b| Mat::from_fn(m, n, |i, j| v[b * m * n + i * n + j]))
        .collect()
}

fn unmats(batch: &[usize], m: usize, n: usize, xs: &[Mat<C>], dtype: DType) -> Result<HostTensor> {
    let v: Vec<C> = xs
        .iter()
        .flat_map(|x| (0..m).flat_map(move |i| (0..n).map(move |j| x[(i, j)])))
        .collect();
    let mut dims = batch.to_vec();
    dims.extend([m, n]);
    HostTensor::new(&dims, HostData::from_c64_projected(&v, dtype))
}

fn dot(x: &HostTensor, y: &HostTensor) -> f64 {
    let (a, b) = (x.data().to_c64_vec(), y.data().to_c64_vec());
    a.iter().zip(&b).map(|(p, q)| (p.conj() * q).re).sum()
}

fn norm(x: &HostTensor) -> f64 {
    dot(x, x).sqrt()
}

/// `‖x − y‖ / max(‖y‖, 1)`, in double precision.
fn rel(x: &HostTensor, y: &HostTensor) -> f64 {
    let (a, b) = (x.data().to_c64_vec(), y.data().to_c64_vec());
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let d: f64 = a.iter().zip(&b).map(|(p, q)| (p - q).norm_sqr()).sum();
    d.sqrt() / norm(y).max(1.0)
}

fn tol(dtype: DType) -> f64 {
    if dtype.is_double() { 1e-10 } else { 1e-4 }
}

/// `f(x, y)` matrix by matrix, each result `rows × cols`.
fn each(
    a: &HostTensor,
    b: &HostTensor,
    rows: usize,
    cols: usize,
    f: impl Fn(&Mat<C>, &Mat<C>) -> Mat<C>,
) -> Result<HostTensor> {
    let zs: Vec<Mat<C>> = mats(a).iter().zip(&mats(b)).map(|(x, y)| f(x, y)).collect();
    unmats(&a.dims()[..a.dims().len() - 2], rows, cols, &zs, a.dtype())
}

/// The cotangents `(Ū, V̄h)` of `Re⟨W, U_k·Vh_k⟩` (`k` leading columns; zero on a full
/// SVD's complement), a gauge-invariant loss.
fn uvh_cotangents(
    w: &HostTensor,
    u: &HostTensor,
    vh: &HostTensor,
    k: usize,
) -> Result<(HostTensor, HostTensor)> {
    let (du, dv) = (u.dims(), vh.dims());
    let (m, ku) = (du[du.len() - 2], du[du.len() - 1]);
    let (kv, n) = (dv[dv.len() - 2], dv[dv.len() - 1]);
    let zero = C::new(0.0, 0.0);
    let ubar = each(w, vh, m, ku, |w, vh| {
        let x = w * vh.subrows(0, k).adjoint();
        Mat::from_fn(m, ku, |i, j| if j < k { x[(i, j)] } else { zero })
    })?;
    let vhbar = each(u, w, kv, n, |u, w| {
        let x = u.subcols(0, k).adjoint() * w;
        Mat::from_fn(kv, n, |i, j| if i < k { x[(i, j)] } else { zero })
    })?;
    Ok((ubar, vhbar))
}

/// The cotangent `W·V/|V|` of `Re⟨W, |V|⟩` (a phase-invariant loss), `W` real.
fn abs_cotangent(v: &HostTensor, w: &HostTensor) -> Result<HostTensor> {
    let (vv, ww) = (v.data().to_c64_vec(), w.data().to_c64_vec());
    let x: Vec<C> = vv
        .iter()
        .zip(&ww)
        .map(|(v, w)| v * (w.re / v.norm()))
        .collect();
    HostTensor::new(v.dims(), HostData::from_c64_projected(&x, v.dtype()))
}

struct Ctx<'a, B: Backend> {
    be: &'a B,
    failures: Vec<String>,
    ran: usize,
}

impl<B: Backend> Ctx<'_, B> {
    fn dev(&self, h: &HostTensor) -> Result<B::Tensor> {
        self.be.from_host(h.clone())
    }
    fn host(&self, t: &B::Tensor) -> Result<HostTensor> {
        self.be.to_host(t)
    }
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.failures.push(what());
        }
    }
}

/// The SVD (thin, full, truncated), QR (reduced, complete) and eigh rules on `be`, against
/// the reference backend and the adjoint identity (see the module documentation). Panics
/// with the failing cases.
pub fn decomposition_rules<B: Backend>(be: &B, cfg: &Config) {
    let mut ctx = Ctx {
        be,
        failures: Vec::new(),
        ran: 0,
    };
    let mut rng = Rng::seed(16);
    for &dtype in &cfg.dtypes {
        if !cfg.supports(&[dtype], &[4]) {
            continue;
        }
        for dims in [vec![5, 3], vec![3, 5], vec![2, 4, 4]] {
            let name = format!("{dtype} {dims:?}");
            if let Err(e) = one_shape(&mut ctx, &mut rng, &dims, dtype) {
                ctx.failures.push(format!("{name}: {e}"));
            }
            ctx.ran += 1;
        }
        if let Err(e) = clustered(&mut ctx, &mut rng, dtype) {
            ctx.failures.push(format!("{dtype} clustered eigh: {e}"));
        }
        ctx.ran += 1;
        // its own stream, so that the cases above see the same data as before
        match super::normalize::failures(be, &mut Rng::seed(17), dtype) {
            Ok(f) => ctx.failures.extend(f),
            Err(e) => ctx.failures.push(format!("{dtype} normalize: {e}")),
        }
        ctx.ran += 1;
    }
    report(ctx.ran, ctx.failures);
}

fn one_shape<B: Backend>(
    ctx: &mut Ctx<'_, B>,
    rng: &mut Rng,
    dims: &[usize],
    dtype: DType,
) -> Result<()> {
    let r = dims.len();
    let (m, n) = (dims[r - 2], dims[r - 1]);
    let batch = &dims[..r - 2];
    let k = m.min(n);
    let reference = ReferenceBackend;
    let a = rng.tensor(dims, dtype);
    let a_dot = rng.tensor(dims, dtype);
    let w = rng.tensor(dims, dtype);
    let (da, dd) = (ctx.dev(&a)?, ctx.dev(&a_dot)?);
    let t = tol(dtype);

    for mode in [SvdMode::Thin, SvdMode::Full] {
        let (out, tan) = svd_frule(ctx.be, &da, &dd, mode, RuleOptions::default())?;
        let (_, pb) = svd_rrule(ctx.be, &da, mode, RuleOptions::default())?;
        let (u, s, vh) = (ctx.host(&out.u)?, ctx.host(&out.s)?, ctx.host(&out.vh)?);
        let ku = if mode == SvdMode::Full { m } else { k };
        // reconstruction and orthonormality
        let sv = s.data().to_c64_vec();
        let rec: Vec<Mat<C>> = mats(&u)
            .iter()
            .zip(mats(&vh))
            .enumerate()
            .map(|(b, (u, vh))| {
                let d = Mat::from_fn(k, k, |i, j| {
                    if i == j {
                        sv[b * k + i]
                    } else {
                        C::new(0.0, 0.0)
                    }
                });
                u.subcols(0, k) * d * vh.subrows(0, k)
            })
            .collect();
        let rec = unmats(batch, m, n, &rec, dtype)?;
        let e = rel(&rec, &a);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} {mode:?}: ‖U·S·Vh − A‖ rel {e:e}")
        });
        let gram = each(&u, &u, ku, ku, |u, _| {
            u.adjoint() * u - Mat::<C>::identity(ku, ku)
        })?;
        ctx.expect(norm(&gram) < 10.0 * t, || {
            format!("{dtype} {dims:?} {mode:?}: UᴴU ≠ I")
        });
        // a gauge-invariant cotangent: that of Re⟨W, U·Vh⟩ + Re⟨S̄, S⟩
        let (ubar, vhbar) = uvh_cotangents(&w, &u, &vh, k)?;
        let sbar = rng.tensor(s.dims(), dtype.real());
        let (ub, vb, sb) = (ctx.dev(&ubar)?, ctx.dev(&vhbar)?, ctx.dev(&sbar)?);
        let cot = SvdCotangents {
            u: Some(&ub),
            s: Some(&sb),
            vh: Some(&vb),
            discarded: None,
        };
        let a_bar = ctx.host(&pb.pullback(cot)?)?;
        let lhs = dot(&ubar, &ctx.host(&tan.u)?)
            + dot(&sbar, &ctx.host(&tan.s)?)
            + dot(&vhbar, &ctx.host(&tan.vh)?);
        let rhs = dot(&a_bar, &a_dot);
        ctx.expect(
            (lhs - rhs).abs() <= t * (lhs.abs() + rhs.abs()).max(1.0),
            || format!("{dtype} {dims:?} {mode:?}: adjoint identity {lhs} vs {rhs}"),
        );
        // the same on the reference backend
        // (cotangents of the same loss, built from the reference's own factors)
        let (r_out, r_pb) = svd_rrule(&reference, &arc(&a), mode, RuleOptions::default())?;
        let (r_ubar, r_vhbar) = uvh_cotangents(&w, &r_out.u, &r_out.vh, k)?;
        let r_bar = r_pb.pullback(SvdCotangents {
            u: Some(&arc(&r_ubar)),
            s: Some(&arc(&sbar)),
            vh: Some(&arc(&r_vhbar)),
            discarded: None,
        })?;
        let e = rel(&s, &r_out.s);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} {mode:?}: S differs from the reference ({e:e})")
        });
        let e = rel(&a_bar, &r_bar);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} {mode:?}: Ā differs from the reference ({e:e})")
        });
        // second order: the HVP of the same loss, the cotangents moving with the factors
        // (`W·V̇hᴴ`, `U̇ᴴ·W`), each backend in its own gauge
        let (ubar_dot, vhbar_dot) = uvh_cotangents(&w, &ctx.host(&tan.u)?, &ctx.host(&tan.vh)?, k)?;
        let (ubd, vbd) = (ctx.dev(&ubar_dot)?, ctx.dev(&vhbar_dot)?);
        let cot_dot = SvdCotangents {
            u: Some(&ubd),
            vh: Some(&vbd),
            ..Default::default()
        };
        let (_, hvp) = pb.pullback_tangent(cot, &dd, cot_dot)?;
        let (_, r_tan) = svd_frule(
            &reference,
            &arc(&a),
            &arc(&a_dot),
            mode,
            RuleOptions::default(),
        )?;
        let (r_ubd, r_vbd) = uvh_cotangents(&w, &r_tan.u, &r_tan.vh, k)?;
        let (_, r_hvp) = r_pb.pullback_tangent(
            SvdCotangents {
                u: Some(&arc(&r_ubar)),
                s: Some(&arc(&sbar)),
                vh: Some(&arc(&r_vhbar)),
                discarded: None,
            },
            &arc(&a_dot),
            SvdCotangents {
                u: Some(&arc(&r_ubd)),
                vh: Some(&arc(&r_vbd)),
                ..Default::default()
            },
        )?;
        let e = rel(&ctx.host(&hvp)?, &r_hvp);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} {mode:?}: the HVP differs from the reference ({e:e})")
        });
        if dtype.is_complex() && k > 0 {
            // a cotangent on U alone along i·U: the loss depends on the phases
            let phase = each(&u, &u, m, ku, |u, _| {
                Mat::from_fn(m, ku, |i, j| {
                    if j < k {
                        u[(i, j)] * C::new(0.0, 1.0)
                    } else {
                        C::new(0.0, 0.0)
                    }
                })
            })?;
            let pd = ctx.dev(&phase)?;
            let got = pb.pullback(SvdCotangents {
                u: Some(&pd),
                ..Default::default()
            });
            ctx.expect(matches!(got, Err(Error::GaugeIllDefined { .. })), || {
                format!("{dtype} {dims:?} {mode:?}: a phase-dependent cotangent gave {got:?}")
            });
        }
    }

    // truncated SVD to rank k − 1
    let rank = k.saturating_sub(1);
    let tr = Truncation::rank(rank);
    let (out, pb) = svd_truncated_rrule(ctx.be, &da, tr, RuleOptions::default())?;
    let (_, tan) = svd_truncated_frule(ctx.be, &da, &dd, tr, RuleOptions::default())?;
    ctx.expect(out.rank == rank, || {
        format!("{dtype} {dims:?}: truncated rank {}", out.rank)
    });
    let sbar = rng.tensor(ctx.be.dims(&out.svd.s).as_slice(), dtype.real());
    let dbar = rng.tensor(ctx.be.dims(&out.discarded).as_slice(), dtype.real());
    let (sb, db) = (ctx.dev(&sbar)?, ctx.dev(&dbar)?);
    let a_bar = ctx.host(&pb.pullback(SvdCotangents {
        s: Some(&sb),
        discarded: Some(&db),
        ..Default::default()
    })?)?;
    let lhs = dot(&sbar, &ctx.host(&tan.svd.s)?) + dot(&dbar, &ctx.host(&tan.discarded)?);
    let rhs = dot(&a_bar, &a_dot);
    ctx.expect(
        (lhs - rhs).abs() <= t * (lhs.abs() + rhs.abs()).max(1.0),
        || format!("{dtype} {dims:?} truncated: adjoint identity {lhs} vs {rhs}"),
    );

    for mode in [QrMode::Reduced, QrMode::Complete] {
        let (out, tan) = qr_frule(ctx.be, &da, &dd, mode)?;
        let (_, pb) = qr_rrule(ctx.be, &da, mode)?;
        let (q, rr) = (ctx.host(&out.q)?, ctx.host(&out.r)?);
        let kq = if mode == QrMode::Complete { m } else { k };
        let e = rel(&each(&q, &rr, m, n, |q, r| q * r)?, &a);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} {mode:?}: ‖Q·R − A‖ rel {e:e}")
        });
        // Q̄ on the leading columns only (the complement's basis is a gauge)
        let qbar = each(&rng.tensor(q.dims(), dtype), &q, m, kq, |x, _| {
            Mat::from_fn(
                m,
                kq,
                |i, j| if j < k { x[(i, j)] } else { C::new(0.0, 0.0) },
            )
        })?;
        let rbar = each(&rng.tensor(rr.dims(), dtype), &rr, kq, n, |x, _| {
            Mat::from_fn(
                kq,
                n,
                |i, j| if i < k { x[(i, j)] } else { C::new(0.0, 0.0) },
            )
        })?;
        let (qb, rb) = (ctx.dev(&qbar)?, ctx.dev(&rbar)?);
        let a_bar = ctx.host(&pb.pullback(Some(&qb), Some(&rb))?)?;
        let lhs = dot(&qbar, &ctx.host(&tan.q)?) + dot(&rbar, &ctx.host(&tan.r)?);
        let rhs = dot(&a_bar, &a_dot);
        ctx.expect(
            (lhs - rhs).abs() <= t * (lhs.abs() + rhs.abs()).max(1.0),
            || format!("{dtype} {dims:?} {mode:?}: adjoint identity {lhs} vs {rhs}"),
        );
        let (_, r_pb) = qr_rrule(&reference, &arc(&a), mode)?;
        let e = rel(
            &a_bar,
            &*r_pb.pullback(Some(&arc(&qbar)), Some(&arc(&rbar)))?,
        );
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} {mode:?}: Ā differs from the reference ({e:e})")
        });
        // second order with constant cotangents
        let (_, hvp) = pb.pullback_tangent(Some(&qb), Some(&rb), &dd, None, None)?;
        let (_, r_hvp) = r_pb.pullback_tangent(
            Some(&arc(&qbar)),
            Some(&arc(&rbar)),
            &arc(&a_dot),
            None,
            None,
        )?;
        let e = rel(&ctx.host(&hvp)?, &r_hvp);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} {mode:?}: the HVP differs from the reference ({e:e})")
        });
    }

    if m == n {
        let h = each(&a, &a, n, n, |x, _| x + x.adjoint())?;
        let dh = ctx.dev(&h)?;
        let (out, tan) = eigh_frule(ctx.be, &dh, &dd, RuleOptions::default())?;
        let (_, pb) = eigh_rrule(ctx.be, &dh, RuleOptions::default())?;
        let (l, v) = (ctx.host(&out.values)?, ctx.host(&out.vectors)?);
        let lv = l.data().to_c64_vec();
        let rec: Vec<Mat<C>> = mats(&v)
            .iter()
            .enumerate()
            .map(|(b, v)| {
                let d = Mat::from_fn(n, n, |i, j| {
                    if i == j {
                        lv[b * n + i]
                    } else {
                        C::new(0.0, 0.0)
                    }
                });
                v * d * v.adjoint()
            })
            .collect();
        let e = rel(&unmats(batch, n, n, &rec, dtype)?, &h);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?}: ‖V·Λ·Vᴴ − A‖ rel {e:e}")
        });
        // the cotangent of Re⟨W, |V|⟩ + Re⟨λ̄, λ⟩ (phase-invariant)
        let wr = rng.tensor(v.dims(), dtype.real());
        let vbar = abs_cotangent(&v, &wr)?;
        let lbar = rng.tensor(l.dims(), dtype.real());
        let (vb, lb) = (ctx.dev(&vbar)?, ctx.dev(&lbar)?);
        let a_bar = ctx.host(&pb.pullback(Some(&lb), Some(&vb))?)?;
        let lhs = dot(&lbar, &ctx.host(&tan.values)?) + dot(&vbar, &ctx.host(&tan.vectors)?);
        let rhs = dot(&a_bar, &a_dot);
        ctx.expect(
            (lhs - rhs).abs() <= t * (lhs.abs() + rhs.abs()).max(1.0),
            || format!("{dtype} {dims:?} eigh: adjoint identity {lhs} vs {rhs}"),
        );
        let (r_out, r_pb) = eigh_rrule(&reference, &arc(&h), RuleOptions::default())?;
        let e = rel(&l, &r_out.values);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} eigh: λ differs from the reference ({e:e})")
        });
        let r_vbar = abs_cotangent(&r_out.vectors, &wr)?;
        let e = rel(
            &a_bar,
            &*r_pb.pullback(Some(&arc(&lbar)), Some(&arc(&r_vbar)))?,
        );
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} eigh: Ā differs from the reference ({e:e})")
        });
        // second order of ⟨λ̄, λ⟩ (a gauge-invariant loss with a constant cotangent)
        let (_, hvp) = pb.pullback_tangent(Some(&lb), None, &dd, None, None)?;
        let (_, r_hvp) =
            r_pb.pullback_tangent(Some(&arc(&lbar)), None, &arc(&a_dot), None, None)?;
        let e = rel(&ctx.host(&hvp)?, &r_hvp);
        ctx.expect(e < t, || {
            format!("{dtype} {dims:?} eigh: the HVP differs from the reference ({e:e})")
        });
    }
    Ok(())
}

/// The clustered eigendecomposition on a batch of two `6×6` matrices with spectrum
/// `(5, 3, 3·(1 − 10⁻⁴), −2, 1, 0.1)` (random unitary eigenvectors), a generic Hermitian
/// `G` and `keep = 4` (clusters `1, 2, 1`).
fn clustered<B: Backend>(ctx: &mut Ctx<'_, B>, rng: &mut Rng, dtype: DType) -> Result<()> {
    let n = 6;
    let reference = ReferenceBackend;
    let t = tol(dtype);
    let wide = if dtype.is_complex() {
        DType::C64
    } else {
        DType::F64
    };
    let lam = [5.0, 3.0, 3.0 * (1.0 - 1e-4), -2.0, 1.0, 0.1];
    let mut items = Vec::new();
    for _ in 0..2 {
        let q = adrules_core::linalg::qr(
            &reference,
            &arc(&rng.tensor(&[n, n], wide)),
            QrMode::Reduced,
        )?
        .q;
        let u = mats(&q).remove(0);
        let d = Mat::from_fn(n, n, |i, j| {
            if i == j {
                C::new(lam[i], 0.0)
            } else {
                C::new(0.0, 0.0)
            }
        });
        let x = &u * d * u.adjoint();
        items.push(Mat::from_fn(n, n, |i, j| {
            (x[(i, j)] + x[(j, i)].conj()) * 0.5
        }));
    }
    let a = unmats(&[2], n, n, &items, dtype)?;
    let g0 = mats(&rng.tensor(&[n, n], dtype)).remove(0);
    let g = unmats(&[], n, n, &[&g0 + g0.adjoint()], dtype)?;
    let opts = ClusterOptions::new(4, 1e-3);
    let (da, dg) = (ctx.dev(&a)?, ctx.dev(&g)?);
    // a Hermitian direction (finite differences stay on Hermitian matrices)
    let raw = rng.tensor(&[2, n, n], dtype);
    let a_dot = each(&raw, &raw, n, n, |x, _| x + x.adjoint())?;
    let dd = ctx.dev(&a_dot)?;
    let rule = RuleOptions::default();
    let (out, tan) = eigh_clustered_frule(ctx.be, &da, &dd, &dg, &opts, rule)?;
    let (_, pb) = eigh_clustered_rrule(ctx.be, &da, &dg, &opts, rule)?;
    ctx.expect(out.info.iter().all(|i| i.sizes == [1, 2, 1]), || {
        format!("{dtype} clustered eigh: cluster sizes {:?}", out.info)
    });
    let (w, c) = (ctx.host(&out.basis)?, ctx.host(&out.corner)?);
    let r_out = eigh_clustered(&reference, &arc(&a), &arc(&g), &opts)?;
    for (what, x, y) in [("W", &w, &*r_out.basis), ("C'", &c, &*r_out.corner)] {
        let e = rel(x, y);
        ctx.expect(e < t, || {
            format!("{dtype} clustered eigh: {what} differs from the reference ({e:e})")
        });
    }
    let wbar = rng.tensor(w.dims(), dtype);
    let cbar = rng.tensor(c.dims(), dtype);
    let a_bar = ctx.host(&pb.pullback(Some(&ctx.dev(&wbar)?), Some(&ctx.dev(&cbar)?))?)?;
    let (tw, tc) = (ctx.host(&tan.basis)?, ctx.host(&tan.corner)?);
    let lhs = dot(&wbar, &tw) + dot(&cbar, &tc);
    let rhs = dot(&a_bar, &a_dot);
    let scale = norm(&wbar) * norm(&tw) + norm(&cbar) * norm(&tc) + norm(&a_bar) * norm(&a_dot);
    ctx.expect((lhs - rhs).abs() <= t * scale, || {
        format!("{dtype} clustered eigh: adjoint identity {lhs} vs {rhs}")
    });
    // second order: the HVP of the fixed loss Re⟨W̄, W⟩ + Re⟨C̄', C'⟩ (constant cotangents)
    // against the reference's, and the symmetry of its Hessian along a second direction
    // (its own stream, so that the cases after this one see the same data as before)
    let (wb, cb) = (ctx.dev(&wbar)?, ctx.dev(&cbar)?);
    let hvp = ctx.host(
        &pb.pullback_tangent(Some(&wb), Some(&cb), &dd, None, None)?
            .1,
    )?;
    let (_, r_pb) = eigh_clustered_rrule(&reference, &arc(&a), &arc(&g), &opts, rule)?;
    let (_, r_hvp) = r_pb.pullback_tangent(
        Some(&arc(&wbar)),
        Some(&arc(&cbar)),
        &arc(&a_dot),
        None,
        None,
    )?;
    let e = rel(&hvp, &r_hvp);
    ctx.expect(e < t, || {
        format!("{dtype} clustered eigh: the HVP differs from the reference ({e:e})")
    });
    let a_dot2 = Rng::seed(18).tensor(&[2, n, n], dtype);
    let hvp2 = pb.pullback_tangent(Some(&wb), Some(&cb), &ctx.dev(&a_dot2)?, None, None)?;
    let hvp2 = ctx.host(&hvp2.1)?;
    let (l, r) = (dot(&a_dot2, &hvp), dot(&a_dot, &hvp2));
    let size = norm(&a_dot2) * norm(&hvp) + norm(&a_dot) * norm(&hvp2);
    ctx.expect((l - r).abs() <= t * size, || {
        format!("{dtype} clustered eigh: the Hessian is not symmetric ({l} vs {r})")
    });
    if dtype.is_double() {
        let (err, size) = clustered_tangent_vs_fd(ctx.be, &a, &a_dot, &dg, &opts, [&tw, &tc])?;
        ctx.expect(err <= 1e-6 * size, || {
            format!("{dtype} clustered eigh: tangent vs finite differences {err:e} (|fd| {size:e})")
        });
    }
    Ok(())
}

/// The engine adapters' clustered-eigh case ([`clustered_problem`]): the input, the options,
/// the cotangents of a loss `L = Re⟨W̄, W⟩ + Re⟨C̄, C'⟩`, and the tolerance to hold an
/// engine's gradient to.
#[derive(Clone, Debug)]
pub struct ClusteredProblem {
    /// `A: [2, 6, 6]`
    pub a: HostTensor,
    /// the secondary operator `G: [6, 6]`
    pub g: HostTensor,
    /// keep 4, `δ = 10⁻³`: the clusters `[1, 2, 1]`
    pub opts: ClusterOptions,
    /// `W̄: [2, 6, 4]`
    pub w_bar: HostTensor,
    /// `C̄: [2, 4, 4]`
    pub c_bar: HostTensor,
    /// `10⁻¹⁰` in double precision, `10⁻⁴` in single (absolute and relative)
    pub tol: crate::Tolerance,
}

impl ClusteredProblem {
    /// On the [`ReferenceBackend`]: `Ā` for the cotangents, the basis `W` and the kept
    /// eigenvalues `[2, 4]`.
    ///
    /// # Errors
    /// A rule error of the reference backend (none for this data).
    pub fn expected(&self) -> Result<[HostTensor; 3]> {
        let rule = RuleOptions::default();
        let (a, g) = (arc(&self.a), arc(&self.g));
        let (out, pb) = eigh_clustered_rrule(&ReferenceBackend, &a, &g, &self.opts, rule)?;
        let a_bar = pb.pullback(Some(&arc(&self.w_bar)), Some(&arc(&self.c_bar)))?;
        Ok([
            (*a_bar).clone(),
            (*out.basis).clone(),
            (*out.values).clone(),
        ])
    }

    /// Asserts an engine's `Ā` (for the problem's cotangents), basis `W` and kept
    /// eigenvalues (any shape with the same elements as `[2, 4]`) against [`expected`]
    /// within the problem's tolerance.
    ///
    /// [`expected`]: ClusteredProblem::expected
    ///
    /// # Panics
    /// When a value is off, naming it; when the reference fails.
    pub fn assert_matches(&self, a_bar: &HostTensor, w: &HostTensor, values: &HostTensor) {
        let [want_a_bar, want_w, want_values] = self.expected().expect("the reference rule");
        let dtype = self.a.dtype();
        crate::oracle::assert_close(self.tol, a_bar, &want_a_bar, &format!("{dtype} Ā"));
        crate::oracle::assert_close(self.tol, w, &want_w, &format!("{dtype} W"));
        let values = HostTensor::new(want_values.dims(), values.data().clone())
            .expect("as many eigenvalues as the reference");
        crate::oracle::assert_close(self.tol, &values, &want_values, &format!("{dtype} λ"));
    }
}

/// The engine adapters' clustered-eigh problem in `dtype`: `A: [2, 6, 6]`, real symmetric
/// with the eigenvalues `5, 3, 3(1 − 10⁻⁴), −2, 1, 0.1` in random orthogonal bases (a
/// near-degenerate 2-cluster, as in [`decomposition_rules`]), a random symmetric `G: [6, 6]`
/// (both built in `f64`, then rounded), options that keep the clusters `[1, 2, 1]`
/// (`keep = 4`, `δ = 10⁻³`) and random cotangents. The same data on every call.
///
/// # Errors
/// A decomposition error of the reference backend (none for this data).
pub fn clustered_problem(dtype: DType) -> Result<ClusteredProblem> {
    let n = 6;
    let lam = [5.0, 3.0, 3.0 * (1.0 - 1e-4), -2.0, 1.0, 0.1];
    let mut rng = Rng::seed(11);
    let mut a = Vec::new();
    for _ in 0..2 {
        let x = arc(&rng.tensor(&[n, n], DType::F64));
        let q = adrules_core::linalg::qr(&ReferenceBackend, &x, QrMode::Reduced)?.q;
        let q = q.as_slice::<f64>()?;
        for i in 0..n {
            for j in 0..n {
                a.push(
                    (0..n)
                        .map(|l| q[i * n + l] * lam[l] * q[j * n + l])
                        .sum::<f64>(),
                );
            }
        }
    }
    let g = rng.tensor(&[n, n], DType::F64);
    let g = g.as_slice::<f64>()?;
    let g: Vec<f64> = (0..n * n).map(|p| g[p] + g[(p % n) * n + p / n]).collect();
    let a = HostTensor::from_vec(&[2, n, n], a)?;
    let g = HostTensor::from_vec(&[n, n], g)?;
    let mut rng = Rng::seed(12);
    let t = if dtype.is_double() { 1e-10 } else { 1e-4 };
    Ok(ClusteredProblem {
        a: a.to_dtype_projected(dtype),
        g: g.to_dtype_projected(dtype),
        opts: ClusterOptions::new(4, 1e-3),
        w_bar: rng.tensor(&[2, n, 4], dtype),
        c_bar: rng.tensor(&[2, 4, 4], dtype),
        tol: crate::Tolerance { atol: t, rtol: t },
    })
}

/// The pushforward of [`eigh_clustered`] against central differences: `(‖got − J·ȧ‖,
/// ‖J·ȧ‖)` for the tangents `got = [Ẇ, Ċ']` (host copies, row-major, concatenated) of
/// `eigh_clustered(be, a, g, opts)` at `a` along `a_dot`, with `J·ȧ` by fourth-order central
/// differences of step `10⁻⁴`, evaluated in double precision (`a` and `a_dot` are widened:
/// give `g` and `opts.reference` in a dtype that converts to the widened `a`'s).
///
/// # Errors
/// Those of [`eigh_clustered`] at the stencil's points and of the backend's transfers.
pub fn clustered_tangent_vs_fd<B: Backend>(
    be: &B,
    a: &HostTensor,
    a_dot: &HostTensor,
    g: &B::Tensor,
    opts: &ClusterOptions,
    [basis_dot, corner_dot]: [&HostTensor; 2],
) -> Result<(f64, f64)> {
    let wide = if a.dtype().is_complex() {
        DType::C64
    } else {
        DType::F64
    };
    let f = |x: &[crate::Value]| -> Result<crate::Value> {
        let o = eigh_clustered(be, &be.from_host(x[0].tensor("a")?.clone())?, g, opts)?;
        let mut v = be.to_host(&o.basis)?.data().to_c64_vec();
        v.extend(be.to_host(&o.corner)?.data().to_c64_vec());
        let len = v.len();
        Ok(crate::Value::Tensor(HostTensor::new(
            &[len],
            HostData::from_c64_projected(&v, wide),
        )?))
    };
    let fd = crate::FiniteDifference {
        stencil: crate::Stencil::Central4,
        step: 1e-4,
    };
    let want = fd
        .jvp(
            f,
            &[crate::Value::Tensor(a.clone())],
            &[crate::Value::Tensor(a_dot.clone())],
        )?
        .to_c64_vec();
    let mut got = basis_dot.data().to_c64_vec();
    got.extend(corner_dot.data().to_c64_vec());
    let err: f64 = got
        .iter()
        .zip(&want)
        .map(|(p, q)| (p - q).norm_sqr())
        .sum::<f64>()
        .sqrt();
    let size: f64 = want.iter().map(|q| q.norm_sqr()).sum::<f64>().sqrt();
    Ok((err, size))
}
