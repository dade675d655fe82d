//! Conformance of normalization `x/‖x‖` ([`adrules_core::linalg::normalize`]) on a backend,
//! part of [`decomposition_rules`](super::linalg::decomposition_rules): `x̂` and `‖x‖`
//! against the [`ReferenceBackend`]'s, the pushforward and the pullback (with the norm's
//! cotangent) against the reference's, and the adjoint identity
//! `Re⟨x̂̄, (d/dt)x̂⟩ + n̄·ṅ = Re⟨x̄, ẋ⟩`.

use std::sync::Arc;

use adrules_core::linalg::normalize_rrule;
use adrules_core::{Backend, DType, HostTensor, Result};

use crate::{ReferenceBackend, Rng};

fn dot(x: &HostTensor, y: &HostTensor) -> f64 {
    let (a, b) = (x.data().to_c64_vec(), y.data().to_c64_vec());
    a.iter().zip(&b).map(|(p, q)| (p.conj() * q).re).sum()
}

/// `‖x − y‖ / max(‖y‖, 1)`, in double precision.
fn rel(x: &HostTensor, y: &HostTensor) -> f64 {
    let (a, b) = (x.data().to_c64_vec(), y.data().to_c64_vec());
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let d: f64 = a.iter().zip(&b).map(|(p, q)| (p - q).norm_sqr()).sum();
    d.sqrt() / dot(y, y).sqrt().max(1.0)
}

/// The failures of normalization on `be` in `dtype` (an empty list when it conforms).
///
/// # Errors
/// A rule or backend error (a failure of the backend, not of a check).
pub(super) fn failures<B: Backend>(be: &B, rng: &mut Rng, dtype: DType) -> Result<Vec<String>> {
    let tol = if dtype.is_double() { 1e-12 } else { 1e-5 };
    let dims = [3, 1, 4];
    let (x, x_dot, unit_bar) = (
        rng.tensor(&dims, dtype),
        rng.tensor(&dims, dtype),
        rng.tensor(&dims, dtype),
    );
    let norm_bar = -0.3;
    let reference = ReferenceBackend;
    let (out, pb) = normalize_rrule(be, &be.from_host(x.clone())?)?;
    let (r_out, r_pb) = normalize_rrule(&reference, &Arc::new(x))?;
    let (unit_dot, norm_dot) = pb.tangent(&be.from_host(x_dot.clone())?)?;
    let (r_unit_dot, r_norm_dot) = r_pb.tangent(&Arc::new(x_dot.clone()))?;
    let x_bar = be.to_host(&pb.pullback(Some(&be.from_host(unit_bar.clone())?), norm_bar)?)?;
    let r_x_bar = r_pb.pullback(Some(&Arc::new(unit_bar.clone())), norm_bar)?;
    let unit_dot = be.to_host(&unit_dot)?;
    let mut failures = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            failures.push(format!("{dtype} normalize: {what}"));
        }
    };
    let e = rel(&be.to_host(&out.unit)?, &r_out.unit);
    expect(e < tol, format!("x̂ differs from the reference ({e:e})"));
    let e = (out.norm - r_out.norm).abs() / r_out.norm;
    expect(e < tol, format!("‖x‖ differs from the reference ({e:e})"));
    let e = rel(&unit_dot, &r_unit_dot) + (norm_dot - r_norm_dot).abs();
    expect(
        e < tol,
        format!("the tangent differs from the reference ({e:e})"),
    );
    let e = rel(&x_bar, &r_x_bar);
    expect(e < tol, format!("x̄ differs from the reference ({e:e})"));
    let lhs = dot(&unit_bar, &unit_dot) + norm_bar * norm_dot;
    let rhs = dot(&x_bar, &x_dot);
    expect(
        (lhs - rhs).abs() <= tol * (lhs.abs() + 1.0),
        format!("adjoint identity {lhs} vs {rhs}"),
    );
    Ok(failures)
}
