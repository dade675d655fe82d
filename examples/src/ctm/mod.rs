//! The square-lattice Ising model (J = 1, k_B = 1) on the infinite lattice by the
//! corner-transfer-matrix renormalization group (CTMRG), differentiated through its fixed
//! point by the implicit function theorem.
//!
//! # Model
//! The partition function is the contraction of the infinite square network of the site
//! tensor `a[i, j, k, l] = Σ_s W[s, i] W[s, j] W[s, k] W[s, l]`, where `W = √Q` is the
//! symmetric square root of the bond weight `Q[s, s'] = exp(β σ_s σ_s')` (σ = 1 − 2s):
//! `W = ½[[p + q, p − q], [p − q, p + q]]` with `p = √(2 cosh β)`, `q = √(2 sinh β)`.
//! `a` is symmetric under every permutation of its four legs, so the lattice has the full
//! symmetry of the square (C4v) and one corner `C[χ, χ]` and one edge `T[χ, 2, χ]`
//! (`T[α, k, β]`: environment legs α, β, `k` facing the bulk) describe the environment
//! (Nishino and Okunishi, J. Phys. Soc. Jpn. 65, 891 (1996); Orús and Vidal, PRB 80, 094403
//! (2009), §III.A for the C4v-symmetric step). The impurity `b` (the same with a factor
//! `σ_s`) measures the spin.
//!
//! # The step
//! `step(β, C, T) = (C', T')`:
//! 1. enlarged corner `E[(α,i), (β,j)] = Σ T[α,k,γ] C[γ,δ] T[δ,l,β] a[k,l,i,j]` (symmetric);
//! 2. `E = U·diag(λ)·Uᵀ` (eigh, the backend's); the eigenvalues sorted by `|λ|` are grouped
//!    into clusters (multiplets: consecutive `|λ|` within a relative `δ`, same sign); keep
//!    whole clusters, at most χ states, above `cutoff·max|λ|`. The Ising CTM spectrum has
//!    exact degeneracies in the χ → ∞ limit (free-fermion levels: at T = 2.5, levels 8 = 1+7 =
//!    3+5 in units of the level spacing), nearly exact at finite χ; their eigenvectors are
//!    ill-conditioned, their subspaces are not;
//! 3. gauge fixing, so that the converged environment is a fixed point element by element
//!    (the condition of Francuz, Schuch and Vanhecke, PRR 7, 013237 (2025), §III, for an
//!    implicit derivative). Inside a cluster of size `g` the basis is the eigenbasis of the
//!    secondary operator `Vᵀ (I_χ ⊗ M) V` (`M` a fixed generic symmetric 2×2 matrix on the
//!    bond index), which fixes the multiplet's continuous `O(g)` gauge; then each column
//!    `w` gets the sign that makes `w[(0,0)] + w[(0,1)]/2` positive. A gauge change `O` of
//!    the input's environment index (block-orthogonal over its clusters, `±1` on the
//!    simple leading index 0) maps `E → (O⊗I)ᵀ E (O⊗I)`, commutes with `I ⊗ M`, multiplies
//!    the rows `(0, ·)` by the common sign `o_00`, so the canonical basis `W` moves with the
//!    input, `T'` (bilinear in `W`) and `C'` are unchanged, and the step is a function of
//!    the input's gauge orbit with one deterministic output gauge (see
//!    [`linalg::eigh_clustered`] for the rules). No reference environment is needed;
//! 4. `C' = Wᵀ E W` (block-diagonal over the clusters), `T'[x, s, y] = Σ W[(α,i), x]
//!    T[α,k,β] a[k,i,s,j] W[(β,j), y]`;
//! 5. `C'/‖C'‖`, `T'/‖T'‖` (Frobenius norms; the observables below are scale-free).
//!
//! # Observables
//! With `Z_a` the 3×3 patch (four `C`, four `T`, `a` in the middle), `Z_C = Tr C⁴` and
//! `Z_T` the 2×3 patch (four `C`, two `T` contracted leg to leg), the partition function per
//! site is `κ = Z_a Z_C / Z_T²`, so `βf = −ln κ`; the magnetization is `M = Z_b / Z_a`.
//!
//! # Derivatives
//! - `u = ∂(βf)/∂β = −dL/dβ` with `L(β, y) = ln Z_a + ln Z_C − 2 ln Z_T` and the
//!   environment `y = (C, T)` the fixed point of the step: reverse mode, `ȳ = ∂L/∂y` from
//!   the network pullbacks, then the implicit pullback (`(∂step/∂y − I)ᵀ w = −ȳ`,
//!   `β̄ = (∂step/∂β)ᵀ w`) whose linear maps are the step's JVP and VJP, composed of the
//!   network rules, the cluster rules of the eigendecomposition ([`linalg::eigh_clustered`]) and the
//!   normalization's chain rule; solved by GMRES. No iteration is
//!   unrolled: the memory is that of one step, whatever the number of CTM iterations.
//! - `u_E = −Z_{a'}/Z_a` (`a' = ∂a/∂β`, the energy as an expectation value) must equal `u`
//!   up to the truncation error; the specific heat `c = −β² du_E/dβ` is its total
//!   derivative: `dy/dβ` from the implicit pushforward, `Z_a`, `Z_{a'}` pushed forward along
//!   `(dy/dβ, a', a'')` by the network rules.

#![allow(dead_code)] // the example and its acceptance test use different subsets

use std::sync::Arc;

use adrules::implicit::{
    FixedPoint, ImplicitFunction, LinearMaps, Linearization, Method, SolverOptions,
};
use adrules::linalg;
use adrules::network::{NetworkPlan, NetworkPullback, PlanCache};
use adrules::{Backend, Error, HostTensor, Result};

/// The physical dimension of a bond (one Ising spin).
pub const D: usize = 2;

/// `[W, W', W'']`: the bond factor `W(β)` (`W[s][i]`) and its first two β-derivatives.
fn bond_factor(beta: f64) -> [[[f64; 2]; 2]; 3] {
    let (ch, sh) = (beta.cosh(), beta.sinh());
    let (p, q) = ((2.0 * ch).sqrt(), (2.0 * sh).sqrt());
    let (p1, q1) = (sh / p, ch / q);
    let (p2, q2) = (ch / p - sh * sh / p.powi(3), sh / q - ch * ch / q.powi(3));
    let w = |p: f64, q: f64| {
        [
            [(p + q) / 2.0, (p - q) / 2.0],
            [(p - q) / 2.0, (p + q) / 2.0],
        ]
    };
    [w(p, q), w(p1, q1), w(p2, q2)]
}

/// The site tensor `∂ⁿa/∂βⁿ` (`n = order ≤ 2`), with the spin factor `σ_s` when `magnetic`
/// (the impurity `b`), shape `[2, 2, 2, 2]`, row-major. By Leibniz's rule on the four
/// factors `W[s, ·]`.
#[allow(clippy::needless_range_loop)] // `s` indexes the inner dimension of `[W, W', W'']`
pub fn site_tensor(beta: f64, order: usize, magnetic: bool) -> Vec<f64> {
    assert!(order <= 2, "site_tensor: order {order} > 2");
    let w = bond_factor(beta);
    let fact = |n: usize| [1.0, 1.0, 2.0][n];
    let mut out = vec![0.0; 16];
    for s in 0..2 {
        let sigma = if magnetic { 1.0 - 2.0 * s as f64 } else { 1.0 };
        for (idx, out) in out.iter_mut().enumerate() {
            let legs = [idx >> 3 & 1, idx >> 2 & 1, idx >> 1 & 1, idx & 1];
            let mut v = 0.0;
            // every split of the derivative order over the four factors
            for split in 0..81usize {
                let o = [split / 27 % 3, split / 9 % 3, split / 3 % 3, split % 3];
                if o.iter().sum::<usize>() != order {
                    continue;
                }
                let coef = fact(order) / o.iter().map(|&k| fact(k)).product::<f64>();
                v += coef * (0..4).map(|m| w[o[m]][s][legs[m]]).product::<f64>();
            }
            *out += sigma * v;
        }
    }
    out
}

/// The starting environment (χ = 2): corner and edge of a boundary with spins weighted by
/// `p` (`[1, 0]`: all up, which selects the up state below `T_c`; `[1, 1]`: free).
pub fn initial_environment(beta: f64, up: bool) -> (Vec<f64>, Vec<f64>) {
    let w = bond_factor(beta)[0];
    let p = if up { [1.0, 0.0] } else { [1.0, 1.0] };
    let mut c = vec![0.0; 4];
    let mut t = vec![0.0; 8];
    for s in 0..2 {
        for i in 0..2 {
            for j in 0..2 {
                c[i * 2 + j] += p[s] * w[s][i] * w[s][j];
                for k in 0..2 {
                    t[(i * 2 + k) * 2 + j] += p[s] * w[s][i] * w[s][k] * w[s][j];
                }
            }
        }
    }
    (c, t)
}

/// The operands of the 3×3 patch: four corners, four edges and `centre`.
fn patch<'a, X>(c: &'a X, t: &'a X, centre: &'a X) -> Vec<&'a X> {
    vec![c, t, c, t, c, t, c, t, centre]
}

/// Tangents of the patch's operands.
fn patch_tangents<'a, X>(dc: &'a X, dt: &'a X, centre: &'a X) -> Vec<Option<&'a X>> {
    patch(dc, dt, centre).into_iter().map(Some).collect()
}

/// The iteration's start at `β`: the up boundary below `T_c` (it selects the up state), the
/// free one above.
fn start(beta: f64) -> (Vec<f64>, Vec<f64>) {
    let tc = 2.0 / (1.0 + 2f64.sqrt()).ln();
    initial_environment(beta, 1.0 / beta < tc)
}

/// A temperature must be positive and finite.
fn checked(temperature: f64) -> Result<()> {
    if temperature.is_finite() && temperature > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            "temperature",
            format!("must be positive and finite, got {temperature}"),
        ))
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The generic symmetric 2×2 matrix `M` of the secondary operator `G = I_χ ⊗ M`: any fixed
/// matrix that acts on the bond index alone commutes with the gauge group (which acts on
/// the environment index), and a generic one splits the multiplets.
const M2: [[f64; 2]; 2] = [[1.0, 0.37], [0.37, -0.61]];

/// `G = I_χ ⊗ M` on the index `(α, i)` (row-major `α·D + i`), `n×n` row-major.
fn secondary(chi: usize) -> Vec<f64> {
    let n = chi * D;
    let mut g = vec![0.0; n * n];
    for r in 0..n {
        for s in 0..n {
            if r / D == s / D {
                g[r * n + s] = M2[r % D][s % D];
            }
        }
    }
    g
}

/// Options of a CTMRG run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CtmOptions {
    /// bond dimension χ of the environment (≥ 2)
    pub chi: usize,
    /// the iteration stops when `max |y_{n+1} − y_n| ≤ tol` (the gauge-fixed environment
    /// converges element by element)
    pub tol: f64,
    /// iterations allowed
    pub max_iter: usize,
    /// relative tolerance of the implicit rule's GMRES solves
    pub solve_tol: f64,
    /// relative drop of `|λ|` that separates two clusters of the enlarged corner's
    /// spectrum (see [`linalg::ClusterOptions::delta`]): eigenvalues closer than this share one subspace, whose
    /// basis the gauge fixing chooses canonically
    pub cluster: f64,
    /// eigenpairs with `|λ| ≤ cutoff·max|λ|` are discarded even below χ: their eigenvectors
    /// are rounding noise (accurate only to `ε·max|λ|/gap`), they would keep the
    /// environment from converging element by element, and their weight is below the
    /// truncation error
    pub cutoff: f64,
}

impl Default for CtmOptions {
    fn default() -> Self {
        CtmOptions {
            chi: 32,
            tol: 1e-11,
            max_iter: 5_000,
            solve_tol: 1e-9,
            cluster: 1e-3,
            cutoff: 1e-10,
        }
    }
}

impl CtmOptions {
    /// Checks every field.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the field.
    pub fn validate(&self) -> Result<()> {
        if !(2..=256).contains(&self.chi) {
            return Err(Error::invalid(
                "chi",
                format!("must be in 2..=256, got {}", self.chi),
            ));
        }
        if !(self.tol > 0.0 && self.tol < 1e-2) {
            return Err(Error::invalid(
                "tol",
                format!("must be in (0, 1e-2), got {:e}", self.tol),
            ));
        }
        if self.max_iter == 0 {
            return Err(Error::invalid("max_iter", "must be at least 1"));
        }
        if !(self.solve_tol > 0.0 && self.solve_tol < 1e-2) {
            return Err(Error::invalid(
                "solve_tol",
                format!("must be in (0, 1e-2), got {:e}", self.solve_tol),
            ));
        }
        if !(self.cutoff >= 0.0 && self.cutoff < 1.0) {
            return Err(Error::invalid(
                "cutoff",
                format!("must be in [0, 1), got {}", self.cutoff),
            ));
        }
        if !(self.cluster >= 0.0 && self.cluster < 0.5) {
            return Err(Error::invalid(
                "cluster",
                format!("must be in [0, 0.5), got {}", self.cluster),
            ));
        }
        Ok(())
    }
}

/// What the CTM iteration reports (the solver's byproduct).
#[derive(Clone, Copy, Debug, Default)]
pub struct CtmStats {
    /// iterations performed
    pub iterations: usize,
    /// `max |y_{n+1} − y_n|` at exit
    pub change: f64,
    /// the gap `(|λ_last kept| − |λ_first discarded|)/|λ_1|` at the truncation, last step
    pub truncation_gap: f64,
    /// `|λ_first discarded|/|λ_1|`: the weight of the first discarded eigenvalue, last step
    pub truncation_weight: f64,
    /// the smallest relative gap of the secondary operator's eigenvalues `μ` inside a
    /// cluster (`∞` without multiplets), last step: the conditioning of the multiplet gauge
    pub kept_gap: f64,
}

/// Every quantity at one temperature.
#[derive(Clone, Copy, Debug)]
pub struct CtmPoint {
    /// temperature `T = 1/β`
    pub temperature: f64,
    /// free energy per site `f = −ln κ/β`
    pub f: f64,
    /// internal energy per site `∂(βf)/∂β`, reverse mode through the implicit fixed point
    pub u: f64,
    /// internal energy as the expectation value `−Z_{a'}/Z_a` (must agree with `u`)
    pub u_expectation: f64,
    /// specific heat per site `−β² du/dβ` (the implicit pushforward)
    pub c: f64,
    /// magnetization per site `Z_b/Z_a` (≥ 0: the up state is selected below `T_c`)
    pub m: f64,
    /// the iteration's statistics
    pub ctm: CtmStats,
    /// `‖step(y) − y‖` at the fixed point (the conditions' norm)
    pub conditions_norm: f64,
    /// relative residual of the implicit pullback's solve
    pub vjp_residual: f64,
    /// relative residual of the implicit pushforward's solve
    pub jvp_residual: f64,
}

/// The CTMRG of the Ising model on a backend.
pub struct Ctm<B: Backend> {
    be: B,
    opts: CtmOptions,
}

/// One step linearized at its input: the primal values and the recorded pullbacks.
pub struct Step<B: Backend> {
    be: B,
    chi_in: usize,
    chi_out: usize,
    n: usize,
    c: B::Tensor,
    t: B::Tensor,
    a: B::Tensor,
    da: B::Tensor,
    clusters: linalg::ClusteredEighPullback<B>,
    sizes: Vec<usize>,
    ut: B::Tensor,
    c_unit: Vec<f64>,
    t_unit: Vec<f64>,
    /// the rules of `C'/‖C'‖` and `T'/‖T'‖`
    c_normalize: linalg::NormalizePullback<B>,
    t_normalize: linalg::NormalizePullback<B>,
    e_plan: Arc<NetworkPlan>,
    t_plan: Arc<NetworkPlan>,
    e_pb: NetworkPullback<B>,
    t_pb: NetworkPullback<B>,
    gap: f64,
    weight: f64,
    kept_gap: f64,
}

const E_NET: &str = "akc,cd,dlb,klij->aibj";
const T_NET: &str = "aix,akb,kisj,bjy->xsy";
const ZA_NET: &str = "ab,bkc,cd,dle,ef,fmg,gh,hna,klmn->";
const ZC_NET: &str = "ab,bc,cd,da->";
const ZT_NET: &str = "ab,bkc,cd,de,ekf,fa->";

impl<B> Ctm<B>
where
    B: Backend + Send + Sync + 'static,
    B::Tensor: Send + Sync,
{
    /// A CTMRG with options `opts` on `be`.
    ///
    /// # Errors
    /// [`CtmOptions::validate`].
    pub fn new(be: B, opts: CtmOptions) -> Result<Self> {
        opts.validate()?;
        Ok(Ctm { be, opts })
    }

    fn up(&self, dims: &[usize], v: &[f64]) -> Result<B::Tensor> {
        self.be.from_host(HostTensor::from_vec(dims, v.to_vec())?)
    }

    fn down(&self, t: &B::Tensor) -> Result<Vec<f64>> {
        Ok(self.be.to_host(t)?.as_slice::<f64>()?.to_vec())
    }

    /// The clustered eigendecomposition's options: keep χ, clusters at `δ`, the cutoff, and
    /// the phase reference `r = e_(0,0) + e_(0,1)/2` (each column `w` gets the sign that
    /// makes `w[(0,0)] + w[(0,1)]/2` positive; `r` is invariant under the gauge group up to
    /// the common sign `o_00`). A column with no weight on the rows `(0, ·)` (at low
    /// temperature, `rᴴw` of order ε) falls back to the sign of its largest entry
    /// ([`linalg::ClusterOptions::fallback`]): a discrete choice that the iteration keeps
    /// from step to step.
    fn cluster_options(&self, n: usize) -> Result<linalg::ClusterOptions> {
        let mut r = vec![0.0; n];
        r[0] = 1.0;
        r[1] = 0.5;
        Ok(
            linalg::ClusterOptions::new(self.opts.chi, self.opts.cluster)
                .with_cutoff(self.opts.cutoff)
                .with_reference(HostTensor::from_vec(&[n], r)?)
                .with_fallback(),
        )
    }

    fn plan(&self, net: &str, dims: &[&[usize]]) -> Result<Arc<NetworkPlan>> {
        PlanCache::global().einsum(net, dims)
    }

    /// The step linearized at `(β, C, T)` (`C: [χ, χ]`, `T: [χ, 2, χ]`), truncating to
    /// `min(χ_opts, 2χ)`.
    pub fn linearize_step(&self, beta: f64, c: &[f64], t: &[f64]) -> Result<Step<B>> {
        let be = &self.be;
        let chi_in = (c.len() as f64).sqrt().round() as usize;
        let n = chi_in * D;
        let (cd, td, ad) = ([chi_in, chi_in], [chi_in, D, chi_in], [D, D, D, D]);
        let c = self.up(&cd, c)?;
        let t = self.up(&td, t)?;
        let a = self.up(&ad, &site_tensor(beta, 0, false))?;
        let da = self.up(&ad, &site_tensor(beta, 1, false))?;
        let e_plan = self.plan(E_NET, &[&td, &cd, &td, &ad])?;
        let (e, e_pb) = e_plan.rrule(be, &[&t, &c, &t, &a], &[true, true, true, true])?;
        let e_host = self.down(&e)?;
        let e_mat = self.up(&[n, n], &e_host)?;
        let (eig, clusters) = linalg::eigh_clustered_rrule(
            be,
            &e_mat,
            &self.up(&[n, n], &secondary(chi_in))?,
            &self.cluster_options(n)?,
            linalg::RuleOptions::default(),
        )
        .map_err(|e| match e {
            Error::InvalidArgument { arg, reason } if arg == "keep" => Error::invalid(
                "temperature",
                format!("the enlarged corner's leading cluster does not fit χ: {reason}"),
            ),
            e => e,
        })?;
        let info = &eig.info[0];
        if info.sizes[0] > 1 {
            return Err(Error::invalid(
                "temperature",
                "the enlarged corner's largest eigenvalue is degenerate: the gauge fixing \
                 needs a simple leading eigenvalue",
            ));
        }
        let chi_out = clusters.kept();
        let (gap, weight, kept_gap) = (info.gap, info.weight, info.kept_gap);
        let sizes = info.sizes.clone();
        let p = self.down(&eig.basis)?;
        let ud = [chi_in, D, chi_out];
        let ut = self.up(&ud, &p)?;
        let t_plan = self.plan(T_NET, &[&ud, &td, &ad, &ud])?;
        let (t1, t_pb) = t_plan.rrule(be, &[&ut, &t, &a, &ut], &[true, true, true, true])?;
        let normalized = |x: &B::Tensor| {
            linalg::normalize_rrule(be, x).map_err(|e| match e {
                Error::InvalidArgument { reason, .. } => Error::invalid(
                    "temperature",
                    format!(
                        "the CTM step at β = {beta} gave a zero or non-finite environment: {reason}"
                    ),
                ),
                e => e,
            })
        };
        let (c1, c_normalize) = normalized(&eig.corner)?;
        let (t1, t_normalize) = normalized(&t1)?;
        Ok(Step {
            be: be.clone(),
            chi_in,
            chi_out,
            n,
            c,
            t,
            a,
            da,
            clusters,
            sizes,
            ut,
            c_unit: self.down(&c1.unit)?,
            t_unit: self.down(&t1.unit)?,
            c_normalize,
            t_normalize,
            e_plan,
            t_plan,
            e_pb,
            t_pb,
            gap,
            weight,
            kept_gap,
        })
    }

    /// The CTM iteration from the boundary state (up below `T_c`), growing χ by 2 per step
    /// until `opts.chi`, then until the environment changes by at most `opts.tol` per step.
    ///
    /// # Errors
    /// [`Error::NotConverged`] at `opts.max_iter`; [`Error::InvalidArgument`] for a
    /// non-positive temperature; backend errors.
    pub fn fixed_point(&self, beta: f64) -> Result<(Vec<f64>, Vec<f64>, CtmStats)> {
        let (mut c, mut t) = start(beta);
        let mut stats = CtmStats::default();
        for it in 1..=self.opts.max_iter {
            let s = self.linearize_step(beta, &c, &t)?;
            let (c1, t1) = (s.c_unit.clone(), s.t_unit.clone());
            stats.iterations = it;
            stats.truncation_gap = s.gap;
            stats.truncation_weight = s.weight;
            stats.kept_gap = s.kept_gap;
            if c1.len() == c.len() {
                let change = c1
                    .iter()
                    .zip(&c)
                    .chain(t1.iter().zip(&t))
                    .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
                stats.change = change;
                if !change.is_finite() {
                    return Err(Error::invalid(
                        "temperature",
                        format!("the CTM iteration at β = {beta} produced non-finite values"),
                    ));
                }
                let spectrum = c1
                    .iter()
                    .zip(&c)
                    .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
                if change <= self.opts.tol && spectrum <= self.opts.tol {
                    return Ok((c1, t1, stats));
                }
            } else {
                stats.change = f64::INFINITY;
            }
            (c, t) = (c1, t1);
        }
        Err(Error::NotConverged {
            arg: "CTM iteration".into(),
            iterations: self.opts.max_iter,
            residual: stats.change,
            tolerance: self.opts.tol,
        })
    }

    /// The observables' plans for environment bond dimension `chi`.
    fn observable_plans(
        &self,
        chi: usize,
    ) -> Result<(Arc<NetworkPlan>, Arc<NetworkPlan>, Arc<NetworkPlan>)> {
        let (cd, td, ad) = ([chi, chi], [chi, D, chi], [D, D, D, D]);
        let za = self.plan(ZA_NET, &[&cd, &td, &cd, &td, &cd, &td, &cd, &td, &ad])?;
        let zc = self.plan(ZC_NET, &[&cd, &cd, &cd, &cd])?;
        let zt = self.plan(ZT_NET, &[&cd, &td, &cd, &cd, &td, &cd])?;
        Ok((za, zc, zt))
    }

    fn scalar(&self, t: &B::Tensor) -> Result<f64> {
        Ok(self.be.scalar(t)?.re())
    }

    /// `(L, ∂L/∂y, Z_a, Z_{a'})` at `(β, C, T)`: `L = ln κ = ln Z_a + ln Z_C − 2 ln Z_T` and
    /// its environment cotangent `ȳ = [C̄, T̄]` by the networks' pullbacks (the explicit
    /// β-derivative is `∂L/∂β = Z_{a'}/Z_a`).
    fn ln_kappa(&self, beta: f64, c: &[f64], t: &[f64]) -> Result<(f64, Vec<f64>, f64, f64)> {
        let be = &self.be;
        let chi = (c.len() as f64).sqrt().round() as usize;
        let (cd, td, ad) = ([chi, chi], [chi, D, chi], [D, D, D, D]);
        let c = self.up(&cd, c)?;
        let t = self.up(&td, t)?;
        let a = self.up(&ad, &site_tensor(beta, 0, false))?;
        let a1 = self.up(&ad, &site_tensor(beta, 1, false))?;
        let (za_plan, zc_plan, zt_plan) = self.observable_plans(chi)?;
        let mut active = vec![true; 9];
        active[8] = false;
        let (za, za_pb) = za_plan.rrule(be, &patch(&c, &t, &a), &active)?;
        let (zc, zc_pb) = zc_plan.rrule(be, &[&c, &c, &c, &c], &[true; 4])?;
        let (zt, zt_pb) = zt_plan.rrule(be, &[&c, &t, &c, &c, &t, &c], &[true; 6])?;
        let (za, zc, zt) = (self.scalar(&za)?, self.scalar(&zc)?, self.scalar(&zt)?);
        for (name, z) in [("Z_a", za), ("Z_C", zc), ("Z_T", zt)] {
            if !(z.is_finite() && z > 0.0) {
                return Err(Error::invalid(
                    "temperature",
                    format!("the environment at β = {beta} gives {name} = {z:e} (must be > 0)"),
                ));
            }
        }
        let za1 = self.scalar(&za_plan.execute(be, &patch(&c, &t, &a1))?)?;
        let mut c_bar = vec![0.0; chi * chi];
        let mut t_bar = vec![0.0; chi * D * chi];
        let mut accumulate = |grads: Vec<Option<B::Tensor>>, slots: &[usize]| -> Result<()> {
            for (g, &slot) in grads.iter().zip(slots) {
                let Some(g) = g else { continue };
                let g = self.down(g)?;
                let target = if slot == 0 { &mut c_bar } else { &mut t_bar };
                target.iter_mut().zip(&g).for_each(|(o, v)| *o += v);
            }
            Ok(())
        };
        let one = |s: f64| self.up(&[], &[s]);
        accumulate(
            za_pb.pullback(&one(1.0 / za)?)?,
            &[0, 1, 0, 1, 0, 1, 0, 1, 2],
        )?;
        accumulate(zc_pb.pullback(&one(1.0 / zc)?)?, &[0, 0, 0, 0])?;
        accumulate(zt_pb.pullback(&one(-2.0 / zt)?)?, &[0, 1, 0, 0, 1, 0])?;
        let mut y_bar = c_bar;
        y_bar.extend(t_bar);
        Ok((za.ln() + zc.ln() - 2.0 * zt.ln(), y_bar, za, za1))
    }

    /// `u = −dL/dβ` by reverse mode through `iterations` unrolled CTM steps from the
    /// boundary state, every step's pullback (its intermediates, eigendecomposition and
    /// network records) kept for the backward sweep: the comparison of the implicit rule,
    /// whose memory does not grow with the iterations. The starting environment is held
    /// constant (its influence decays like the iteration's convergence).
    ///
    /// # Errors
    /// As [`Ctm::point`]; [`Error::InvalidArgument`] for zero iterations.
    pub fn unrolled_energy(&self, temperature: f64, iterations: usize) -> Result<f64> {
        checked(temperature)?;
        if iterations == 0 {
            return Err(Error::invalid("iterations", "must be at least 1"));
        }
        let beta = 1.0 / temperature;
        let (mut c, mut t) = start(beta);
        let mut tape = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let s = self.linearize_step(beta, &c, &t)?;
            (c, t) = (s.c_unit.clone(), s.t_unit.clone());
            tape.push(s);
        }
        let (_, mut w, za, za1) = self.ln_kappa(beta, &c, &t)?;
        let mut beta_bar = za1 / za;
        for s in tape.iter().rev() {
            let (wy, wb) = s.vjp(&w)?;
            beta_bar += wb;
            w = wy;
        }
        Ok(-beta_bar)
    }

    /// The implicit function `β ↦ y*(β)` linearized at its solution: the CTM iteration to
    /// convergence (`iterations = None`) or exactly `iterations` steps (to compare with
    /// unrolling), then the step's linear maps at the result.
    fn implicit(
        &self,
        beta: f64,
        iterations: Option<usize>,
    ) -> Result<(Linearization<f64>, CtmStats)> {
        let solve = |x: &[HostTensor], _: &()| {
            let beta = x[0].as_slice::<f64>()?[0];
            let (c, t, stats) = match iterations {
                None => self.fixed_point(beta)?,
                Some(n) => self.iterate(beta, n)?,
            };
            let mut y = c;
            y.extend(t);
            Ok((HostTensor::from_vec(&[y.len()], y)?, stats))
        };
        let conditions = |p: &adrules::implicit::Point<'_, CtmStats, ()>| {
            let beta = p.x_data::<f64>(0)?[0];
            let y = p.y_data::<f64>()?;
            let chi = ((y.len() / (1 + D)) as f64).sqrt().round() as usize;
            let (c, t) = y.split_at(chi * chi);
            let step = self.linearize_step(beta, c, t)?;
            if step.chi_out != chi {
                return Err(Error::invalid(
                    "chi",
                    format!(
                        "the fixed point has χ = {chi} but the step keeps {}",
                        step.chi_out
                    ),
                ));
            }
            StepMaps::new(step)
        };
        let linear = SolverOptions {
            method: Method::Gmres,
            tolerance: Some(self.opts.solve_tol),
            restart: 60,
            max_iterations: Some(3000),
            ..SolverOptions::default()
        };
        let f = ImplicitFunction::<f64, _, _, _, _>::new(solve, FixedPoint::new(conditions))
            .with_linear_solver(linear);
        let x = [HostTensor::from_vec(&[1], vec![beta])?];
        f.linearize(&x, &())
    }

    /// `u = −dL/dβ` by the implicit pullback after exactly `iterations` CTM steps (the
    /// counterpart of [`Ctm::unrolled_energy`]; with enough steps both are `u`).
    ///
    /// # Errors
    /// As [`Ctm::unrolled_energy`].
    pub fn implicit_energy(&self, temperature: f64, iterations: usize) -> Result<f64> {
        checked(temperature)?;
        if iterations == 0 {
            return Err(Error::invalid("iterations", "must be at least 1"));
        }
        let beta = 1.0 / temperature;
        let (lin, _) = self.implicit(beta, Some(iterations)).map_err(|e| match e {
            // the environment is still growing (χ doubles per step from 2): no fixed point yet
            Error::InvalidArgument { arg, reason } if arg == "chi" => Error::invalid(
                "iterations",
                format!(
                    "{iterations} CTM steps leave the environment still growing ({reason}); \
                     the implicit gradient needs a fixed point of the full-size step: give more \
                     iterations"
                ),
            ),
            e => e,
        })?;
        let y = lin.y().as_slice::<f64>()?;
        let chi = ((y.len() / (1 + D)) as f64).sqrt().round() as usize;
        let (_, y_bar, za, za1) = self.ln_kappa(beta, &y[..chi * chi], &y[chi * chi..])?;
        let implicit = lin.vjp_many(&[HostTensor::from_vec(&[y.len()], y_bar)?], None)?;
        Ok(-(za1 / za + implicit.dx[0][0].as_slice::<f64>()?[0]))
    }

    /// Exactly `n` CTM steps from the boundary state.
    fn iterate(&self, beta: f64, n: usize) -> Result<(Vec<f64>, Vec<f64>, CtmStats)> {
        let (mut c, mut t) = start(beta);
        let mut stats = CtmStats::default();
        for it in 1..=n {
            let s = self.linearize_step(beta, &c, &t)?;
            stats.iterations = it;
            stats.truncation_gap = s.gap;
            stats.truncation_weight = s.weight;
            stats.kept_gap = s.kept_gap;
            stats.change = if s.c_unit.len() == c.len() {
                s.c_unit
                    .iter()
                    .zip(&c)
                    .chain(s.t_unit.iter().zip(&t))
                    .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()))
            } else {
                f64::INFINITY
            };
            (c, t) = (s.c_unit, s.t_unit);
        }
        Ok((c, t, stats))
    }

    /// Everything at `temperature`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a temperature that is not positive and finite; those of
    /// [`Ctm::fixed_point`] and of the implicit rule's solves.
    pub fn point(&self, temperature: f64) -> Result<CtmPoint> {
        checked(temperature)?;
        let beta = 1.0 / temperature;
        let be = &self.be;
        let (lin, stats) = self.implicit(beta, None)?;
        let y = lin.y().as_slice::<f64>()?.to_vec();
        let chi = ((y.len() / (1 + D)) as f64).sqrt().round() as usize;
        let (cd, td, ad) = ([chi, chi], [chi, D, chi], [D, D, D, D]);
        let c = self.up(&cd, &y[..chi * chi])?;
        let t = self.up(&td, &y[chi * chi..])?;
        let a = self.up(&ad, &site_tensor(beta, 0, false))?;
        let a1 = self.up(&ad, &site_tensor(beta, 1, false))?;
        let a2 = self.up(&ad, &site_tensor(beta, 2, false))?;
        let b = self.up(&ad, &site_tensor(beta, 0, true))?;
        let (za_plan, _, _) = self.observable_plans(chi)?;
        let (ln_kappa, y_bar, za, za1) = self.ln_kappa(beta, &y[..chi * chi], &y[chi * chi..])?;
        let implicit = lin.vjp_many(&[HostTensor::from_vec(&[y.len()], y_bar)?], None)?;
        let beta_bar_implicit = implicit.dx[0][0].as_slice::<f64>()?[0];
        let u = -(za1 / za + beta_bar_implicit);
        let u_expectation = -za1 / za;
        // c = −β² d(−Z_{a'}/Z_a)/dβ along (dy/dβ, a', a'').
        let dy = lin.jvp_many(&[[HostTensor::from_vec(&[1], vec![1.0])?]], None)?;
        let dy_data = dy.dy[0].as_slice::<f64>()?;
        let dc = self.up(&cd, &dy_data[..chi * chi])?;
        let dt = self.up(&td, &dy_data[chi * chi..])?;
        let (_, dza) = za_plan.frule(be, &patch(&c, &t, &a), &patch_tangents(&dc, &dt, &a1))?;
        let (_, dza1) = za_plan.frule(be, &patch(&c, &t, &a1), &patch_tangents(&dc, &dt, &a2))?;
        let (dza, dza1) = (self.scalar(&dza)?, self.scalar(&dza1)?);
        let du = -(dza1 / za - za1 * dza / (za * za));
        let c_heat = -beta * beta * du;
        let zb = self.scalar(&za_plan.execute(be, &patch(&c, &t, &b))?)?;
        Ok(CtmPoint {
            temperature,
            f: -ln_kappa / beta,
            u,
            u_expectation,
            c: c_heat,
            m: zb / za,
            ctm: stats,
            conditions_norm: lin.conditions_norm().unwrap_or(f64::NAN),
            vjp_residual: implicit.stats.max_residual(),
            jvp_residual: dy.stats.max_residual(),
        })
    }
}

mod step;

use step::StepMaps;
