//! Finite-difference conditions for implicit functions: a reference source of the linear
//! maps to test other sources against ([`FiniteDifferenceConditions`]). Never a production
//! source.

use adrules_core::implicit::{Conditions, DenseMaps, ImplicitScalar, LinearMaps, Point, Structure};
use adrules_core::scalar::{RealScalar, Scalar};
use adrules_core::{Error, HostTensor, Result};
use faer::Mat;

fn eps<T: ImplicitScalar>() -> f64 {
    <<T as Scalar>::Real as RealScalar>::EPS.to_f64()
}

/// **For tests only.** Dense Jacobians of the conditions by central finite differences:
/// `A[:, j] = (c(y + h_j e_j) − c(y − h_j e_j)) / 2h_j` and the same for every input element,
/// with `h_j = step · max(1, |v_j|)` and `step = ε^{1/3}` of the dtype by default.
///
/// Costs `2(m + n) + 1` evaluations of `c` and `m·(m + n)` elements of memory, and is
/// accurate to about `ε^{2/3}` relative (≈ 1e-10 for 64-bit, 5e-5 for 32-bit data) on
/// smooth conditions: a reference to test other sources against, never a production
/// source. For complex data the steps are real, which gives the complex derivative when
/// `c` is holomorphic. `c` returns the `m` conditions flattened in any fixed order.
/// The maps report `c` at the point ([`LinearMaps::conditions`]).
pub struct FiniteDifferenceConditions<F> {
    c: F,
    step: Option<f64>,
    structure: Structure,
    second_order: bool,
}

impl<F> FiniteDifferenceConditions<F> {
    /// Finite differences of the conditions `c`.
    pub fn new(c: F) -> Self {
        FiniteDifferenceConditions {
            c,
            step: None,
            structure: Structure::General,
            second_order: false,
        }
    }

    /// Relative step (default `ε^{1/3}` of the dtype).
    pub fn with_step(mut self, step: f64) -> Self {
        self.step = Some(step);
        self
    }

    /// Structure tag of the resulting `A`.
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }

    /// **For tests only.** Also the second derivatives of the conditions
    /// ([`LinearMaps::adjoint_tangent`], for implicit Hessian-vector products), as the dense
    /// tensor `T[i, p, q] = ∂²c_i/∂z_p∂z_q` over `z = (y, x)` by the four-point difference
    /// `(c(+p+q) − c(+p−q) − c(−p+q) + c(−p−q)) / 4h_p h_q` with `h = ε^{1/4}·max(1, |z|)`:
    /// `4(m + n)²` evaluations of `c` and `m(m + n)²` elements, accurate to about `ε^{1/2}`
    /// relative. For user closures that have no second-order map of their own.
    pub fn with_second_order(mut self) -> Self {
        self.second_order = true;
        self
    }
}

/// Dense maps with the dense second derivatives of the conditions (see
/// [`FiniteDifferenceConditions::with_second_order`]).
struct SecondOrderMaps<T: ImplicitScalar> {
    first: DenseMaps<T>,
    /// `T[i, p, q]`, row-major, `z = (y, x)` of length `m + n`
    second: Vec<T>,
}

impl<T: ImplicitScalar> LinearMaps<T> for SecondOrderMaps<T> {
    fn num_unknowns(&self) -> usize {
        self.first.num_unknowns()
    }
    fn num_inputs(&self) -> usize {
        self.first.num_inputs()
    }
    fn structure(&self) -> Structure {
        self.first.structure()
    }
    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.first.apply_a(v, out, k)
    }
    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.first.apply_a_adjoint(u, out, k)
    }
    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.first.apply_b(v, out, k)
    }
    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.first.apply_b_adjoint(u, out, k)
    }
    fn dense_a(&self) -> Option<Mat<T>> {
        self.first.dense_a()
    }
    fn conditions(&self) -> Option<&[T]> {
        self.first.conditions()
    }
    /// `w_p = Σ_i u_i·conj(Σ_q T[i, p, q]·dz_q)` (holomorphic conditions: `d(Aᴴ·u) = dAᴴ·u`).
    fn adjoint_tangent(
        &self,
        u: &[T],
        dx: &[T],
        dy: &[T],
        wy: &mut [T],
        wx: &mut [T],
    ) -> Result<()> {
        let (m, n) = (self.num_unknowns(), self.num_inputs());
        let nz = m + n;
        let dz: Vec<T> = dy.iter().chain(dx).copied().collect();
        for p in 0..nz {
            let mut w = T::zero();
            for (i, &ui) in u.iter().enumerate() {
                let row = &self.second[(i * nz + p) * nz..(i * nz + p + 1) * nz];
                let d: T = row.iter().zip(&dz).map(|(&t, &z)| t * z).sum();
                w += ui * d.conj();
            }
            if p < m {
                wy[p] = w;
            } else {
                wx[p - m] = w;
            }
        }
        Ok(())
    }
}

impl<T, Z, A, F> Conditions<T, Z, A> for FiniteDifferenceConditions<F>
where
    T: ImplicitScalar,
    A: ?Sized,
    F: Fn(&Point<'_, Z, A>) -> Result<Vec<T>>,
{
    fn linearize(&self, at: &Point<'_, Z, A>) -> Result<Box<dyn LinearMaps<T>>> {
        let step = self.step.unwrap_or_else(|| eps::<T>().cbrt());
        if !(step > 0.0 && step.is_finite()) {
            return Err(Error::invalid(
                "step",
                format!("{step} is not a positive finite number"),
            ));
        }
        let m = at.y.len();
        let c0 = (self.c)(at)?;
        if c0.len() != m {
            return Err(Error::shape("conditions c(x, y)", &[m], &[c0.len()]));
        }
        let eval = |x: &[HostTensor], y: &HostTensor| -> Result<Vec<T>> {
            let c = (self.c)(&Point { x, y, ..*at })?;
            if c.len() != m {
                return Err(Error::shape("conditions c(x, y)", &[m], &[c.len()]));
            }
            Ok(c)
        };
        let mut y = [at.y.clone()];
        let mut a = Mat::<T>::zeros(m, m);
        for j in 0..m {
            let col = central_difference(&mut y, 0, j, step, &|y| eval(at.x, &y[0]))?;
            a.col_mut(j).iter_mut().zip(col).for_each(|(d, s)| *d = s);
        }
        let n: usize = at.x.iter().map(HostTensor::len).sum();
        let mut b = Mat::<T>::zeros(m, n);
        let mut x = at.x.to_vec();
        let mut offset = 0;
        for i in 0..x.len() {
            for j in 0..x[i].len() {
                let col = central_difference(&mut x, i, j, step, &|x| eval(x, at.y))?;
                b.col_mut(offset + j)
                    .iter_mut()
                    .zip(col)
                    .for_each(|(d, s)| *d = s);
            }
            offset += x[i].len();
        }
        let first = DenseMaps::new(a, b)?
            .with_structure(self.structure)
            .with_conditions(c0);
        if !self.second_order {
            return Ok(Box::new(first));
        }
        // second derivatives over z = (y, x): perturb two coordinates at a time
        let h2 = self.step.map_or_else(|| eps::<T>().powf(0.25), f64::sqrt);
        let nz = m + n;
        let mut z: Vec<HostTensor> = std::iter::once(at.y.clone())
            .chain(at.x.iter().cloned())
            .collect();
        let locate = |p: usize| -> (usize, usize) {
            if p < m {
                return (0, p);
            }
            let mut off = p - m;
            for (i, t) in at.x.iter().enumerate() {
                if off < t.len() {
                    return (i + 1, off);
                }
                off -= t.len();
            }
            (0, 0)
        };
        let eval_z = |z: &[HostTensor]| eval(&z[1..], &z[0]);
        let mut second = vec![T::zero(); m * nz * nz];
        for p in 0..nz {
            for q in 0..nz {
                let mut acc = vec![T::zero(); m];
                let (tp, ep) = locate(p);
                let (tq, eq) = locate(q);
                let (vp, vq) = (value::<T>(&z[tp], ep)?, value::<T>(&z[tq], eq)?);
                let hp = h2 * vp.modulus().to_f64().max(1.0);
                let hq = h2 * vq.modulus().to_f64().max(1.0);
                let same = (tp, ep) == (tq, eq);
                for (sp, sq, sign) in [
                    (1.0, 1.0, 1.0),
                    (1.0, -1.0, -1.0),
                    (-1.0, 1.0, -1.0),
                    (-1.0, -1.0, 1.0),
                ] {
                    let (dp, dq) = (T::from_f64(sp * hp), T::from_f64(sq * hq));
                    if same {
                        set::<T>(&mut z[tp], ep, vp + dp + dq)?;
                    } else {
                        set::<T>(&mut z[tp], ep, vp + dp)?;
                        set::<T>(&mut z[tq], eq, vq + dq)?;
                    }
                    let c = eval_z(&z);
                    set::<T>(&mut z[tp], ep, vp)?;
                    set::<T>(&mut z[tq], eq, vq)?;
                    for (a, c) in acc.iter_mut().zip(c?) {
                        *a += c * T::from_f64(sign);
                    }
                }
                let inv = T::from_f64(0.25 / (hp * hq));
                for (i, a) in acc.into_iter().enumerate() {
                    second[(i * nz + p) * nz + q] = a * inv;
                }
            }
        }
        Ok(Box::new(SecondOrderMaps { first, second }))
    }
}

/// Element `j` of `t`.
fn value<T: ImplicitScalar>(t: &HostTensor, j: usize) -> Result<T> {
    let d = t.dtype();
    t.as_slice::<T>()
        .map_err(|_| Error::DTypeMismatch {
            arg: "point".into(),
            expected: T::DTYPE.to_string(),
            actual: d,
        })
        .map(|s| s[j])
}

/// Sets element `j` of `t`.
fn set<T: ImplicitScalar>(t: &mut HostTensor, j: usize, v: T) -> Result<()> {
    let dtype = t.dtype();
    let data = T::slice_mut(t.data_mut()).ok_or_else(|| Error::DTypeMismatch {
        arg: "point".into(),
        expected: T::DTYPE.to_string(),
        actual: dtype,
    })?;
    data[j] = v;
    Ok(())
}

/// `(f(t + h e) − f(t − h e)) / 2h` for the element `j` of `tensors[i]`, restored afterwards.
fn central_difference<T: ImplicitScalar>(
    tensors: &mut [HostTensor],
    i: usize,
    j: usize,
    step: f64,
    f: &dyn Fn(&[HostTensor]) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let set = |tensors: &mut [HostTensor], value: T| -> Result<T> {
        let t = &mut tensors[i];
        let dtype = t.dtype();
        let data = T::slice_mut(t.data_mut()).ok_or_else(|| Error::DTypeMismatch {
            arg: "point".into(),
            expected: T::DTYPE.to_string(),
            actual: dtype,
        })?;
        Ok(std::mem::replace(&mut data[j], value))
    };
    let v = set(tensors, T::zero())?;
    let h = step * v.modulus().to_f64().max(1.0);
    set(tensors, v + T::from_f64(h))?;
    let plus = f(tensors);
    set(tensors, v - T::from_f64(h))?;
    let minus = f(tensors);
    set(tensors, v)?;
    let (plus, minus) = (plus?, minus?);
    let inv = T::from_f64(0.5 / h);
    Ok(plus
        .iter()
        .zip(&minus)
        .map(|(&p, &q)| (p - q) * inv)
        .collect())
}
