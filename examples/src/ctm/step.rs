//! The CTM step's linear maps at a point (`∂step/∂y`, `∂step/∂β`) and the step's tangent
//! and cotangent, for the implicit function of the fixed point.

use super::*;

/// The linear maps of the step at a point: `∂step/∂y` (the `A` of [`FixedPoint`], which
/// subtracts the identity) and `∂step/∂β`.
pub(super) struct StepMaps<B: Backend> {
    step: Step<B>,
    values: Vec<f64>,
}

impl<B: Backend> StepMaps<B> {
    pub(super) fn new(step: Step<B>) -> Result<Self> {
        let values = step.values();
        Ok(StepMaps { step, values })
    }
}

impl<B: Backend> Step<B> {
    fn up(&self, dims: &[usize], v: &[f64]) -> Result<B::Tensor> {
        self.be.from_host(HostTensor::from_vec(dims, v.to_vec())?)
    }

    fn down(&self, t: &B::Tensor) -> Result<Vec<f64>> {
        Ok(self.be.to_host(t)?.as_slice::<f64>()?.to_vec())
    }

    /// The sizes of the kept clusters (multiplets have size > 1).
    pub fn cluster_sizes(&self) -> Vec<usize> {
        self.sizes.clone()
    }

    /// The step's output `[C'/‖C'‖, T'/‖T'‖]`, flattened.
    pub fn values(&self) -> Vec<f64> {
        let mut v = self.c_unit.clone();
        v.extend(self.t_unit.iter().copied());
        v
    }

    pub fn m(&self) -> usize {
        self.chi_in * self.chi_in * (1 + D)
    }

    /// The pushforward of the step along `(dC, dT, dβ)` (`dy = [dC, dT]` flattened).
    pub fn jvp(&self, dy: Option<&[f64]>, dbeta: f64) -> Result<Vec<f64>> {
        let be = &self.be;
        let (ci, co) = (self.chi_in, self.chi_out);
        let (dc, dt) = match dy {
            Some(dy) => {
                let (dc, dt) = dy.split_at(ci * ci);
                (
                    Some(self.up(&[ci, ci], dc)?),
                    Some(self.up(&[ci, D, ci], dt)?),
                )
            }
            None => (None, None),
        };
        let da = if dbeta != 0.0 {
            let mut da = self.da.clone();
            be.scale(&mut da, adrules::DynScalar::F64(dbeta))?;
            Some(da)
        } else {
            None
        };
        let (_, de) = self.e_plan.frule(
            be,
            &[&self.t, &self.c, &self.t, &self.a],
            &[dt.as_ref(), dc.as_ref(), dt.as_ref(), da.as_ref()],
        )?;
        let n = self.n;
        let tan = self
            .clusters
            .tangent(&self.up(&[n, n], &self.down(&de)?)?)?;
        let dut = self.up(&[ci, D, co], &self.down(&tan.basis)?)?;
        let (_, dt1) = self.t_plan.frule(
            be,
            &[&self.ut, &self.t, &self.a, &self.ut],
            &[Some(&dut), dt.as_ref(), da.as_ref(), Some(&dut)],
        )?;
        let mut out = self.down(&self.c_normalize.tangent(&tan.corner)?.0)?;
        out.extend(self.down(&self.t_normalize.tangent(&dt1)?.0)?);
        Ok(out)
    }

    /// The pullback of the step: `(ȳ, β̄)` for the output cotangent `w = [C̄', T̄']`.
    pub fn vjp(&self, w: &[f64]) -> Result<(Vec<f64>, f64)> {
        let (ci, co) = (self.chi_in, self.chi_out);
        let (wc, wt) = w.split_at(co * co);
        let c1_bar = self
            .c_normalize
            .pullback(Some(&self.up(&[co, co], wc)?), 0.0)?;
        let t1_bar = self
            .t_normalize
            .pullback(Some(&self.up(&[co, D, co], wt)?), 0.0)?;
        let g = self.t_pb.pullback(&t1_bar)?;
        let part = |i: usize| -> Result<Vec<f64>> {
            match &g[i] {
                Some(x) => self.down(x),
                None => Err(Error::invalid("step", "missing cotangent")),
            }
        };
        let (p1, mut t_bar, a_bar, p2) = (part(0)?, part(1)?, part(2)?, part(3)?);
        let w_bar: Vec<f64> = p1.iter().zip(&p2).map(|(a, b)| a + b).collect();
        let n = self.n;
        let e_bar = self
            .clusters
            .pullback(Some(&self.up(&[n, co], &w_bar)?), Some(&c1_bar))?;
        let e_bar = self.up(&[ci, D, ci, D], &self.down(&e_bar)?)?;

        let h = self.e_pb.pullback(&e_bar)?;
        let get = |i: usize| -> Result<Vec<f64>> {
            match &h[i] {
                Some(x) => self.down(x),
                None => Err(Error::invalid("step", "missing cotangent")),
            }
        };
        let (t1, c_bar, t2, a2) = (get(0)?, get(1)?, get(2)?, get(3)?);
        t_bar
            .iter_mut()
            .zip(t1.iter().zip(&t2))
            .for_each(|(o, (x, y))| *o += x + y);
        let da = self.down(&self.da)?;
        let beta_bar = dot(&da, &a_bar) + dot(&da, &a2);
        let mut y_bar = c_bar;
        y_bar.extend(t_bar);
        Ok((y_bar, beta_bar))
    }
}

fn columns(
    k: usize,
    len_in: usize,
    len_out: usize,
    v: &[f64],
    out: &mut [f64],
    mut f: impl FnMut(&[f64]) -> Result<Vec<f64>>,
) -> Result<()> {
    for j in 0..k {
        let r = f(&v[j * len_in..(j + 1) * len_in])?;
        out[j * len_out..(j + 1) * len_out].copy_from_slice(&r);
    }
    Ok(())
}

impl<B> LinearMaps<f64> for StepMaps<B>
where
    B: Backend + Send + Sync,
    B::Tensor: Send + Sync,
{
    fn num_unknowns(&self) -> usize {
        self.step.m()
    }
    fn num_inputs(&self) -> usize {
        1
    }
    fn apply_a(&self, v: &[f64], out: &mut [f64], k: usize) -> Result<()> {
        let m = self.step.m();
        columns(k, m, m, v, out, |v| self.step.jvp(Some(v), 0.0))
    }
    fn apply_a_adjoint(&self, u: &[f64], out: &mut [f64], k: usize) -> Result<()> {
        let m = self.step.m();
        columns(k, m, m, u, out, |u| Ok(self.step.vjp(u)?.0))
    }
    fn apply_b(&self, v: &[f64], out: &mut [f64], k: usize) -> Result<()> {
        let m = self.step.m();
        columns(k, 1, m, v, out, |v| self.step.jvp(None, v[0]))
    }
    fn apply_b_adjoint(&self, u: &[f64], out: &mut [f64], k: usize) -> Result<()> {
        let m = self.step.m();
        columns(k, m, 1, u, out, |u| Ok(vec![self.step.vjp(u)?.1]))
    }
    fn conditions(&self) -> Option<&[f64]> {
        Some(&self.values)
    }
}
