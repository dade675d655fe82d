//! The square-lattice Ising model (J = 1) on an infinite strip of periodic width `W`, as a
//! differentiable tensor network (Liao, Liu, Wang, Xiang, "Differentiable Programming Tensor
//! Networks", Phys. Rev. X 9, 031041 (2019)).
//!
//! # Model
//! The symmetric row-to-row transfer matrix
//! `T[s, s'] = exp(K_v Σᵢ σᵢσ'ᵢ + (K_h/2) Σᵢ (σᵢσᵢ₊₁ + σ'ᵢσ'ᵢ₊₁))` (σ = 1 − 2s, periodic in
//! `i`) is applied to a row vector `v` (a rank-`W` tensor of dimension 2 per site) as a
//! periodic matrix-product operator: `W` copies of the site tensor
//! `O[(t,t'), (u,u'), s, s'] = δ(u,s) δ(u',s') exp(K_v σσ' + (K_h/2)(σ_tσ + σ_t'σ'))`
//! (bond dimension 4 carries the spins of the left neighbour), contracted with our ncon plans.
//! The 2^W × 2^W matrix is never formed.
//!
//! # Derivatives
//! - The leading eigenvector `v*(K)` comes from normalized power iteration (never
//!   differentiated) and is an implicit function of the site tensor `O`, defined by the
//!   conditions `c(O, v) = T(O)·v − ⟨v, T(O)·v⟩·v` written as two tensor networks
//!   ([`NetworkConditions`]): their linear maps come from the network rules alone.
//!   The two largest eigenvalues are nearly degenerate below `T_c` (the spin-flip-even and
//!   -odd sectors); `v*` and `dv*/dβ` live in the even sector, so the linear maps are
//!   restricted to it ([`EvenSector`]) and every solve reports its residual.
//! - `e_h = −∂(ln λ/W)/∂K_h`, `e_v = −∂(ln λ/W)/∂K_v` by reverse mode: the pullback of the
//!   network `⟨v, T v⟩` (and `⟨v, v⟩`), the cotangent of `v` through the implicit pullback,
//!   and the chain rule of the Boltzmann weights `O(K_h, K_v)` (elementwise, closed form).
//! - The specific heat `c = −β² du/dβ` with `u = e_h + e_v` written as expectation values in
//!   `v*(β)`: `e_h = −⟨v, Z v⟩/⟨v, v⟩` (`Z = σ₀σ₁`) and `e_v = −Σᵢ⟨v, T⁽ⁱ⁾ v⟩/(W⟨v, T v⟩)`
//!   (`T⁽ⁱ⁾` with site `i` replaced by `∂O/∂K_v`); their β-derivative by the networks'
//!   pushforwards, with `dv*/dβ` from the implicit pushforward.
//! - The specific heat a second way, `c = (β²/W)·∂²ln λ/∂β²`: second order of
//!   `L(O) = ln⟨v*, T v*⟩ − ln⟨v*, v*⟩` along `dO/dβ` by forward-over-reverse, the networks'
//!   second-order rule ([`NetworkPlan::second_order`]) and the implicit HVP
//!   ([`Linearization::hvp_with`], with a cotangent that depends on `v`); the two values
//!   must agree to the solves' accuracy.

#![allow(dead_code)] // the example and its acceptance test use different subsets

use std::time::{Duration, Instant};

use adrules::implicit::{
    ImplicitFunction, ImplicitScalar, LinearMaps, Linearization, Method, NetworkConditions,
    SolverOptions, Structure, TermOperand,
};
use adrules::network::{Label, Network, NetworkPlan, Order, SecondOrder};
use adrules::{Backend, DType, Error, HeapAllocator, HostElement, HostTensor, Result};

/// A real element type the example runs in (`f32` or `f64`).
pub trait Real: ImplicitScalar + HostElement + Copy {
    /// From `f64`, rounding.
    fn of(x: f64) -> Self;
    /// To `f64`.
    fn f(self) -> f64;
}
impl Real for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn f(self) -> f64 {
        self
    }
}
impl Real for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f(self) -> f64 {
        self as f64
    }
}

/// σ of a spin index: 0 → +1, 1 → −1.
fn sigma(s: usize) -> f64 {
    1.0 - 2.0 * s as f64
}

/// `h^p · v^q · O(K_h, K_v)` with `h = (σ_tσ + σ_t'σ')/2` and `v = σσ'`: the site tensor
/// (`p = q = 0`) and its derivatives `∂^{p+q} O / ∂K_h^p ∂K_v^q`, shape `[4, 4, 2, 2]`.
pub fn site_tensor(kh: f64, kv: f64, p: i32, q: i32) -> Vec<f64> {
    let mut o = vec![0.0; 64];
    for t in 0..2 {
        for tp in 0..2 {
            for s in 0..2 {
                for sp in 0..2 {
                    let h = 0.5 * (sigma(t) * sigma(s) + sigma(tp) * sigma(sp));
                    let v = sigma(s) * sigma(sp);
                    let w = (kv * v + kh * h).exp() * h.powi(p) * v.powi(q);
                    let (a, b) = (t * 2 + tp, s * 2 + sp);
                    o[((a * 4 + b) * 2 + s) * 2 + sp] = w;
                }
            }
        }
    }
    o
}

/// The even (spin-flip-symmetric) part of a row vector: `(v + flip v)/2`, where
/// flipping every spin reverses the row-major index.
pub fn even<T: Real>(v: &mut [T]) {
    let n = v.len();
    for i in 0..n / 2 {
        let a = (v[i].f() + v[n - 1 - i].f()) / 2.0;
        v[i] = T::of(a);
        v[n - 1 - i] = T::of(a);
    }
}

/// Accumulated wall time per kind of work.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// power iterations and primal network evaluations
    pub primal: Duration,
    /// network pullbacks and pushforwards (the rules)
    pub rules: Duration,
    /// linearization and linear solves of the implicit rule
    pub implicit: Duration,
    /// the specific heat's second way: network and implicit second order (HVPs)
    pub second_order: Duration,
}

/// What the power iteration reports (the solver's byproduct).
#[derive(Clone, Copy, Debug)]
pub struct PowerStats {
    /// iterations performed
    pub iterations: usize,
    /// `‖T v − λ v‖ / λ` at exit
    pub residual: f64,
}

/// Every quantity at one temperature.
#[derive(Clone, Debug)]
pub struct Point {
    /// temperature `T = 1/β`
    pub temperature: f64,
    /// free energy per site `−ln λ/(βW)`
    pub f: f64,
    /// horizontal bond energy by reverse mode
    pub e_h: f64,
    /// vertical bond energy by reverse mode
    pub e_v: f64,
    /// internal energy `e_h + e_v`
    pub u: f64,
    /// horizontal correlation read off the eigenvector (must equal `−e_h`)
    pub g_h: f64,
    /// vertical energy as an expectation value (must equal `e_v`)
    pub e_v_expectation: f64,
    /// specific heat `−β² du/dβ` (forward mode: the implicit pushforward of `u`)
    pub c: f64,
    /// specific heat `(β²/W)·∂²ln λ/∂β²` (second order: the network and implicit HVPs)
    pub c_hvp: f64,
    /// power-iteration statistics
    pub power: PowerStats,
    /// `‖c(O, v*)‖/λ`: the conditions at the solution, relative to the eigenvalue
    pub conditions_norm: f64,
    /// relative residual of the implicit pullback's solve (energies)
    pub vjp_residual: f64,
    /// relative residual of the implicit pushforward's solve (specific heat)
    pub jvp_residual: f64,
    /// largest relative residual of the second-order solves (specific heat by HVP)
    pub hvp_residual: f64,
    /// which linear solver ran, and its iterations (pullback, pushforward)
    pub solver: (&'static str, usize, usize),
}

/// The strip widths [`Strip::new`] accepts: the transfer matrix acts on `2^W` states.
pub const WIDTHS: std::ops::RangeInclusive<usize> = 3..=20;

/// The loosest power-iteration tolerance accepted: beyond it the eigenvector, and every
/// derivative read off it, would be meaningless.
pub const MAX_TOL: f64 = 1e-3;

/// The strip of width `W` and the plans of its networks, on a backend.
pub struct Strip<B: Backend> {
    be: B,
    width: usize,
    dtype: DType,
    /// `T·v`: operands `O ×W, v`
    tv: NetworkPlan,
    /// `⟨v, T v⟩`: operands `O ×W, ket, bra`
    vtv: NetworkPlan,
    /// `⟨v, T v⟩ v`: operands `O ×W, ket, bra, v`
    vtvv: NetworkPlan,
    /// `⟨v, Z v⟩`: operands `ket, Z, bra`
    vzv: NetworkPlan,
    /// `⟨v, v⟩`
    vv: NetworkPlan,
    z: B::Tensor,
}

fn ncon_plan(
    indices: &[Vec<i64>],
    dims: &[Vec<usize>],
    order: Option<Vec<i64>>,
) -> Result<NetworkPlan> {
    let net = Network::ncon(indices, None)?;
    let order = match order {
        Some(o) => Order::Labels(o.into_iter().map(Label::Int).collect()),
        None => Order::Default,
    };
    NetworkPlan::new(&net, dims, &order)
}

impl<B> Strip<B>
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    /// Builds the plans for width `width` (in [`WIDTHS`]) in dtype `T`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a width outside [`WIDTHS`].
    pub fn new<T: Real>(be: B, width: usize) -> Result<Self> {
        if !WIDTHS.contains(&width) {
            return Err(Error::invalid(
                "width",
                format!(
                    "must be in {}..={}, got {width}",
                    WIDTHS.start(),
                    WIDTHS.end()
                ),
            ));
        }
        let w = width as i64;
        let site = |i: i64, out: i64| vec![if i == 1 { w } else { i - 1 }, i, out, w + i];
        let o_dims = vec![4usize, 4, 2, 2];
        let v_dims = vec![2usize; width];
        let ket: Vec<i64> = (1..=w).map(|i| w + i).collect();
        let bra: Vec<i64> = (1..=w).map(|i| 2 * w + i).collect();
        // Chain order: ket·O₁, then O₂ … O_W along the ring (each merge contracts the bond
        // and the next ket leg), then the bra.
        let mut chain: Vec<i64> = vec![w + 1];
        chain.extend(1..=w);
        chain.extend((2..=w).map(|i| w + i));
        let mut t_idx: Vec<Vec<i64>> = (1..=w).map(|i| site(i, -i)).collect();
        t_idx.push(ket.clone());
        let mut dims: Vec<Vec<usize>> = vec![o_dims.clone(); width];
        dims.push(v_dims.clone());
        let tv = ncon_plan(&t_idx, &dims, Some(chain.clone()))?;
        let mut s_idx: Vec<Vec<i64>> = (1..=w).map(|i| site(i, 2 * w + i)).collect();
        s_idx.push(ket.clone());
        s_idx.push(bra.clone());
        dims.push(v_dims.clone());
        let mut s_order = chain.clone();
        s_order.extend(bra.iter().copied());
        let vtv = ncon_plan(&s_idx, &dims, Some(s_order.clone()))?;
        s_idx.push((1..=w).map(|i| -i).collect());
        dims.push(v_dims.clone());
        let vtvv = ncon_plan(&s_idx, &dims, Some(s_order))?;
        // ⟨v, Z v⟩: ket legs 1, 2 into Z, Z out to bra legs 3, 4; other sites ket = bra.
        let mut k: Vec<i64> = vec![1, 2];
        k.extend(5..=w + 2);
        let mut b: Vec<i64> = vec![3, 4];
        b.extend(5..=w + 2);
        let vzv = ncon_plan(
            &[k, vec![1, 2, 3, 4], b],
            &[v_dims.clone(), vec![2, 2, 2, 2], v_dims.clone()],
            None,
        )?;
        let all: Vec<i64> = (1..=w).collect();
        let vv = ncon_plan(&[all.clone(), all], &[v_dims.clone(), v_dims], None)?;
        let mut z = vec![0.0; 16];
        for s0 in 0..2 {
            for s1 in 0..2 {
                z[((s0 * 2 + s1) * 2 + s0) * 2 + s1] = sigma(s0) * sigma(s1);
            }
        }
        let z = be.from_host(HostTensor::from_vec(
            &[2, 2, 2, 2],
            z.into_iter().map(T::of).collect::<Vec<T>>(),
        )?)?;
        Ok(Strip {
            be,
            width,
            dtype: T::DTYPE,
            tv,
            vtv,
            vtvv,
            vzv,
            vv,
            z,
        })
    }

    fn host<T: Real>(&self, dims: &[usize], v: &[f64]) -> Result<HostTensor> {
        HostTensor::from_vec(dims, v.iter().map(|&x| T::of(x)).collect::<Vec<T>>())
    }

    fn up(&self, h: HostTensor) -> Result<B::Tensor> {
        self.be.from_host(h)
    }

    fn scalar(&self, t: &B::Tensor) -> Result<f64> {
        Ok(self.be.scalar(t)?.re())
    }

    /// Normalized power iteration `v ← P_even T v / ‖T v‖` from `start` until
    /// `‖T v − λ v‖/λ ≤ tol` (the solver of the implicit function; never differentiated);
    /// `o` is the site tensor at `temperature`.
    fn power<T: Real>(
        &self,
        o: &B::Tensor,
        temperature: f64,
        start: &HostTensor,
        tol: f64,
        max_iter: usize,
    ) -> Result<(HostTensor, PowerStats)> {
        let dims = vec![2usize; self.width];
        let mut v: Vec<T> = start.as_slice::<T>()?.to_vec();
        even(&mut v);
        let norm = |x: &[T]| x.iter().map(|a| a.f() * a.f()).sum::<f64>().sqrt();
        let nv = norm(&v);
        v.iter_mut().for_each(|a| *a = T::of(a.f() / nv));
        let mut last = f64::NAN;
        let overflow = |lambda: String, it: usize| {
            // Only a single-precision run can be rescued by more range.
            let remedy = if T::DTYPE.is_double() {
                "raise the temperature"
            } else {
                "raise the temperature or use f64"
            };
            Error::invalid(
                "temperature",
                format!(
                    "the Boltzmann weights overflow {} at T = {temperature} (λ = {lambda} after \
                     {it} iterations): {remedy}",
                    T::DTYPE
                ),
            )
        };
        for it in 1..=max_iter {
            let vt = self.up(HostTensor::from_vec(&dims, v.clone())?)?;
            let mut ops: Vec<&B::Tensor> = vec![o; self.width];
            ops.push(&vt);
            let tv = match self.tv.execute(&self.be, &ops) {
                Err(Error::NonFinite { .. }) => return Err(overflow("inf".into(), it)),
                r => r?,
            };
            let tvh = self.be.to_host(&tv)?;
            let mut tv: Vec<T> = tvh.as_slice::<T>()?.to_vec();
            even(&mut tv);
            let lambda: f64 = tv.iter().zip(&v).map(|(a, b)| a.f() * b.f()).sum();
            let residual = tv
                .iter()
                .zip(&v)
                .map(|(a, b)| (a.f() - lambda * b.f()).powi(2))
                .sum::<f64>()
                .sqrt()
                / lambda.abs();
            let n = norm(&tv);
            if !(residual.is_finite() && n.is_finite() && n > 0.0) {
                return Err(overflow(format!("{lambda:e}"), it));
            }
            last = residual;
            v = tv.iter().map(|a| T::of(a.f() / n)).collect();
            if residual <= tol {
                return Ok((
                    HostTensor::from_vec(&dims, v)?,
                    PowerStats {
                        iterations: it,
                        residual,
                    },
                ));
            }
        }
        Err(Error::NotConverged {
            arg: "power iteration".into(),
            iterations: max_iter,
            residual: last,
            tolerance: tol,
        })
    }

    /// Everything at one temperature (`tol` in `(0, MAX_TOL]`); `start` is the power iteration's starting vector
    /// (the previous temperature's eigenvector in a sweep); returns the point and `v*`.
    pub fn point<T: Real>(
        &self,
        temperature: f64,
        start: &HostTensor,
        tol: f64,
        timings: &mut Timings,
    ) -> Result<(Point, HostTensor)> {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(Error::invalid(
                "temperature",
                format!("must be positive, got {temperature}"),
            ));
        }
        if !(tol > 0.0 && tol <= MAX_TOL) {
            return Err(Error::invalid(
                "tol",
                format!(
                    "the power iteration's relative residual must be in (0, {MAX_TOL:e}], got {tol:e}"
                ),
            ));
        }
        let beta = 1.0 / temperature;
        let w = self.width;
        let wf = w as f64;
        let o_dims = [4usize, 4, 2, 2];
        let o_host = self.host::<T>(&o_dims, &site_tensor(beta, beta, 0, 0))?;

        // The implicit function O ↦ v*(O).
        let t0 = Instant::now();
        let max_iter = 200_000;
        let solve = |x: &[HostTensor], start: &HostTensor| {
            let o = self.up(x[0].clone())?;
            let (v, stats) = self.power::<T>(&o, temperature, start, tol, max_iter)?;
            Ok((v, stats))
        };
        let mut conditions = NetworkConditions::new(self.be.clone());
        let mut slots = vec![TermOperand::Input(0); w];
        slots.push(TermOperand::Unknown);
        conditions = conditions.term(1.0, self.tv.clone(), &slots)?;
        slots.extend([TermOperand::Unknown, TermOperand::Unknown]);
        conditions = conditions.term(-1.0, self.vtvv.clone(), &slots)?;
        let linear = SolverOptions {
            tolerance: Some(if T::DTYPE == DType::F64 { 1e-12 } else { 1e-5 }),
            ..SolverOptions::from(Method::Auto)
        };
        let conditions = move |p: &adrules::implicit::Point<'_, PowerStats, HostTensor>| {
            let inner = adrules::implicit::Conditions::<T, _, _>::linearize(&conditions, p)?;
            // λ at the point sets the scale of the odd block (A ≈ −λ·I there, see EvenSector).
            let (o, v) = (self.up(p.x[0].clone())?, self.up(p.y.clone())?);
            let mut ops: Vec<&B::Tensor> = vec![&o; w];
            ops.extend([&v, &v]);
            let s = self.scalar(&self.vtv.execute(&self.be, &ops)?)?;
            let n = self.scalar(&self.vv.execute(&self.be, &[&v, &v])?)?;
            Ok(EvenSector {
                inner,
                scale: s / n,
            })
        };
        let f = ImplicitFunction::new(solve, conditions).with_linear_solver(linear);
        let x = [o_host.clone()];
        let (v_host, stats, lin): (HostTensor, PowerStats, Linearization<T>) = f.vjp(&x, start)?;
        timings.primal += t0.elapsed();

        // Primal networks at the solution.
        let t1 = Instant::now();
        let o = self.up(o_host)?;
        let v = self.up(v_host.clone())?;
        let mut ops: Vec<&B::Tensor> = vec![&o; w];
        ops.extend([&v, &v]);
        let (s_t, s_pb) = self.vtv.rrule(&self.be, &ops, &vec![true; w + 2])?;
        let (n_t, n_pb) = self.vv.rrule(&self.be, &[&v, &v], &[true, true])?;
        let (s, n) = (self.scalar(&s_t)?, self.scalar(&n_t)?);
        let lambda = s / n;
        let zn = self.scalar(&self.vzv.execute(&self.be, &[&v, &self.z, &v])?)?;
        timings.primal += t1.elapsed();

        // Reverse mode: L = ln⟨v,Tv⟩ − ln⟨v,v⟩; Ō from the network pullback, v̄ through the
        // implicit pullback, then K̄ by the chain rule of O(K_h, K_v).
        let t2 = Instant::now();
        let one =
            |x: f64| -> Result<B::Tensor> { self.up(HostTensor::from_vec(&[], vec![T::of(x)])?) };
        let gs = s_pb.pullback(&one(1.0 / s)?)?;
        let gn = n_pb.pullback(&one(-1.0 / n)?)?;
        let mut o_bar = vec![0.0; 64];
        let mut v_bar = vec![0.0; 1 << w];
        let add = |acc: &mut [f64], t: &Option<B::Tensor>| -> Result<()> {
            if let Some(t) = t {
                for (a, b) in acc.iter_mut().zip(self.be.to_host(t)?.as_slice::<T>()?) {
                    *a += b.f();
                }
            }
            Ok(())
        };
        for g in &gs[..w] {
            add(&mut o_bar, g)?;
        }
        for g in gs[w..].iter().chain(&gn) {
            add(&mut v_bar, g)?;
        }
        timings.rules += t2.elapsed();
        let t3 = Instant::now();
        let vb = self.host::<T>(&vec![2; w], &v_bar)?;
        let vjp = lin.vjp_many(std::slice::from_ref(&vb), None)?;
        timings.implicit += t3.elapsed();
        for (a, b) in o_bar.iter_mut().zip(vjp.dx[0][0].as_slice::<T>()?) {
            *a += b.f();
        }
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let e_h = -dot(&o_bar, &site_tensor(beta, beta, 1, 0)) / wf;
        let e_v = -dot(&o_bar, &site_tensor(beta, beta, 0, 1)) / wf;

        // Forward mode for du/dβ: dv*/dβ from the implicit pushforward along dO/dβ.
        let t4 = Instant::now();
        let d_o: Vec<f64> = site_tensor(beta, beta, 1, 0)
            .iter()
            .zip(site_tensor(beta, beta, 0, 1))
            .map(|(a, b)| a + b)
            .collect();
        let jvp = lin.jvp_many(&[vec![self.host::<T>(&o_dims, &d_o)?]], None)?;
        timings.implicit += t4.elapsed();
        let t5 = Instant::now();
        let dv = self.up(jvp.dy[0].clone())?;
        let d_o_t = self.up(self.host::<T>(&o_dims, &d_o)?)?;
        // e_h = −⟨v, Z v⟩/⟨v, v⟩
        let (_, dzn) =
            self.vzv
                .frule(&self.be, &[&v, &self.z, &v], &[Some(&dv), None, Some(&dv)])?;
        let (_, dn) = self
            .vv
            .frule(&self.be, &[&v, &v], &[Some(&dv), Some(&dv)])?;
        let (dzn, dn) = (self.scalar(&dzn)?, self.scalar(&dn)?);
        let de_h = -(dzn / n - zn * dn / (n * n));
        // e_v = −Σᵢ⟨v, T⁽ⁱ⁾ v⟩/(W⟨v, T v⟩)
        let mut tan: Vec<Option<&B::Tensor>> = vec![Some(&d_o_t); w];
        tan.extend([Some(&dv), Some(&dv)]);
        let (_, ds) = self.vtv.frule(&self.be, &ops, &tan)?;
        let ds = self.scalar(&ds)?;
        let ov = self.up(self.host::<T>(&o_dims, &site_tensor(beta, beta, 0, 1))?)?;
        let d_ov = self.up(self.host::<T>(
            &o_dims,
            &site_tensor(beta, beta, 1, 1)
                .iter()
                .zip(site_tensor(beta, beta, 0, 2))
                .map(|(a, b)| a + b)
                .collect::<Vec<_>>(),
        )?)?;
        let (mut nv, mut dnv) = (0.0, 0.0);
        for i in 0..w {
            let mut ops_i = ops.clone();
            ops_i[i] = &ov;
            let mut tan_i = tan.clone();
            tan_i[i] = Some(&d_ov);
            let (p, dp) = self.vtv.frule(&self.be, &ops_i, &tan_i)?;
            nv += self.scalar(&p)?;
            dnv += self.scalar(&dp)?;
        }
        let e_v_expectation = -nv / (wf * s);
        let de_v = -(dnv / (wf * s) - nv * ds / (wf * s * s));
        timings.rules += t5.elapsed();

        // Second way: c = (β²/W)·d²L/dβ² with L(O) = ln⟨v, T v⟩ − ln⟨v, v⟩ at v = v*(O), by
        // second order (forward-over-reverse): d²L/dβ² = ⟨∇L, Ö⟩ + ⟨Ȯ, H·Ȯ⟩ with Ȯ = dO/dβ,
        // Ö = d²O/dβ². H·Ȯ = d(∂_O ℓ) + d(J_vᴴ·∂_v ℓ): the first term from the networks'
        // second-order rule, the second from the implicit HVP in its general form, whose
        // cotangent ȳ = ∂_v ℓ depends on (O, v): ȳ̇ is the networks' second order along
        // (Ȯ, v̇) with the cotangent tangents −ṡ/s² and ṅ/n² of 1/s and −1/n.
        let t6 = Instant::now();
        let o_part = std::cell::RefCell::new(vec![0.0; 64]);
        let ybar_dot = |dy: &HostTensor| -> Result<HostTensor> {
            let dyt = self.up(dy.clone())?;
            let mut tan: Vec<Option<&B::Tensor>> = vec![Some(&d_o_t); w];
            tan.extend([Some(&dyt), Some(&dyt)]);
            let (_, ds) = self.vtv.frule(&self.be, &ops, &tan)?;
            let vtan = [Some(&dyt), Some(&dyt)];
            let (_, dn) = self.vv.frule(&self.be, &[&v, &v], &vtan)?;
            let (ds, dn) = (self.scalar(&ds)?, self.scalar(&dn)?);
            let (cs, cds) = (one(1.0 / s)?, one(-ds / (s * s))?);
            let hs = self.vtv.second_order(
                &self.be,
                &HeapAllocator,
                &ops,
                &SecondOrder {
                    c_bar: &cs,
                    c_bar_dot: Some(&cds),
                    tangents: &tan,
                    active: &vec![true; w + 2],
                    gradient: false,
                },
            )?;
            let (cn, cdn) = (one(-1.0 / n)?, one(dn / (n * n))?);
            let hn = self.vv.second_order(
                &self.be,
                &HeapAllocator,
                &[&v, &v],
                &SecondOrder {
                    c_bar: &cn,
                    c_bar_dot: Some(&cdn),
                    tangents: &vtan,
                    active: &[true, true],
                    gradient: false,
                },
            )?;
            let mut op = o_part.borrow_mut();
            op.iter_mut().for_each(|x| *x = 0.0);
            for h in &hs.hvp[..w] {
                add(&mut op, h)?;
            }
            let mut yd = vec![0.0; 1 << w];
            for h in hs.hvp[w..].iter().chain(&hn.hvp) {
                add(&mut yd, h)?;
            }
            self.host::<T>(&vec![2; w], &yd)
        };
        let dx = [self.host::<T>(&o_dims, &d_o)?];
        let second = lin.hvp_with(&vb, &dx, Some(&ybar_dot))?;
        let mut h_o = o_part.take();
        for (a, b) in h_o.iter_mut().zip(second.hvp[0].as_slice::<T>()?) {
            *a += b.f();
        }
        let d2o: Vec<f64> = (0..64)
            .map(|i| {
                site_tensor(beta, beta, 2, 0)[i]
                    + 2.0 * site_tensor(beta, beta, 1, 1)[i]
                    + site_tensor(beta, beta, 0, 2)[i]
            })
            .collect();
        let c_hvp = beta * beta * (dot(&o_bar, &d2o) + dot(&d_o, &h_o)) / wf;
        let hvp_residual = second
            .stats
            .iter()
            .map(|s| s.max_residual())
            .fold(0.0, f64::max);
        timings.second_order += t6.elapsed();

        let point = Point {
            temperature,
            f: -lambda.ln() / (beta * wf),
            e_h,
            e_v,
            u: e_h + e_v,
            g_h: zn / n,
            e_v_expectation,
            c: -beta * beta * (de_h + de_v),
            c_hvp,
            power: stats,
            conditions_norm: lin.conditions_norm().unwrap_or(f64::NAN) / lambda,
            vjp_residual: vjp.stats.max_residual(),
            jvp_residual: jvp.stats.max_residual(),
            hvp_residual,
            solver: (jvp.stats.solver, vjp.stats.iterations, jvp.stats.iterations),
        };
        Ok((point, v_host))
    }

    /// A spin-flip-symmetric starting vector (all ones, normalized).
    pub fn start<T: Real>(&self) -> Result<HostTensor> {
        let n = 1usize << self.width;
        self.host::<T>(&vec![2; self.width], &vec![1.0 / (n as f64).sqrt(); n])
    }
}

/// The conditions' linear maps restricted to the spin-flip-even sector: with `P` the
/// projector onto even vectors, `A' = P·A·P − λ·(I − P)` and `B' = P·B`. `v*` and every
/// right-hand side (`B·dO`, and `ȳ` of an even loss) are even, and `A` commutes with the
/// spin flip, so the even block of the solution is unchanged; the odd block, where
/// `A = T − λI − 2λ·v vᵀ` has the nearly vanishing eigenvalue `λ₁ − λ₀` below `T_c`, is
/// replaced by `−λ·I` (the scale of `A`'s other eigenvalues, so the Krylov solver sees a
/// well-conditioned operator).
pub struct EvenSector<T: ImplicitScalar> {
    /// the maps of the conditions on the whole space
    pub inner: Box<dyn LinearMaps<T>>,
    /// λ, the leading eigenvalue at the point
    pub scale: f64,
}

impl<T: Real> EvenSector<T> {
    fn project(v: &mut [T], k: usize) {
        let m = v.len() / k.max(1);
        for j in 0..k {
            even(&mut v[j * m..(j + 1) * m]);
        }
    }

    fn deflated(&self, v: &[T], out: &mut [T], k: usize, adjoint: bool) -> Result<()> {
        let mut pv = v.to_vec();
        Self::project(&mut pv, k);
        if adjoint {
            self.inner.apply_a_adjoint(&pv, out, k)?;
        } else {
            self.inner.apply_a(&pv, out, k)?;
        }
        Self::project(out, k);
        // − λ (I − P) v = λ (P v − v)
        for ((o, p), x) in out.iter_mut().zip(&pv).zip(v) {
            *o = T::of(o.f() + self.scale * (p.f() - x.f()));
        }
        Ok(())
    }
}

impl<T: Real> LinearMaps<T> for EvenSector<T> {
    fn num_unknowns(&self) -> usize {
        self.inner.num_unknowns()
    }
    fn num_inputs(&self) -> usize {
        self.inner.num_inputs()
    }
    fn structure(&self) -> Structure {
        Structure::General
    }
    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.deflated(v, out, k, false)
    }
    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.deflated(u, out, k, true)
    }
    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        self.inner.apply_b(v, out, k)?;
        Self::project(out, k);
        Ok(())
    }
    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        let mut pu = u.to_vec();
        Self::project(&mut pu, k);
        self.inner.apply_b_adjoint(&pu, out, k)
    }
    fn conditions(&self) -> Option<&[T]> {
        self.inner.conditions()
    }
    /// `A'ᴴ = P·Aᴴ·P − λ(I − P)` and `B'ᴴ = Bᴴ·P`: for an even `u` (every adjoint here) the
    /// odd block and λ's own derivative drop out, so `(wy', wx') = (P·wy(P·u), wx(P·u))`.
    fn adjoint_tangent(
        &self,
        u: &[T],
        dx: &[T],
        dy: &[T],
        wy: &mut [T],
        wx: &mut [T],
    ) -> Result<()> {
        let mut pu = u.to_vec();
        Self::project(&mut pu, 1);
        self.inner.adjoint_tangent(&pu, dx, dy, wy, wx)?;
        Self::project(wy, 1);
        Ok(())
    }
}
