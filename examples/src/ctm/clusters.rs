//! The enlarged corner's clustered eigendecomposition: clusters of (near-)degenerate
//! eigenvalues, the canonical basis of each from a covariant secondary operator, and the
//! rules of the kept subspace and of that basis.

use super::*;

/// The type check the example needs: its CTMRG runs in `f64`.
pub fn dtype() -> DType {
    DType::F64
}

/// The generic symmetric 2×2 matrix of the secondary operator `G = I_χ ⊗ M`: any fixed
/// matrix that acts on the bond index alone is covariant under the gauge group (which acts
/// on the environment index), and a generic one splits the multiplets.
const M2: [[f64; 2]; 2] = [[1.0, 0.37], [0.37, -0.61]];

/// `Xᵀ·Y` for row-major `X: n×a`, `Y: n×b` (faer), row-major `a×b`.
fn xt_y(x: &[f64], y: &[f64], n: usize, a: usize, b: usize) -> Vec<f64> {
    let x = faer::MatRef::from_row_major_slice(x, n, a);
    let y = faer::MatRef::from_row_major_slice(y, n, b);
    let p = x.transpose() * y;
    (0..a * b).map(|k| p[(k / b, k % b)]).collect()
}

/// `A·B` for row-major `A: n×n`, `B: n×k` (faer), row-major `n×k`.
fn mat_mul(a: &[f64], b: &[f64], n: usize, k: usize) -> Vec<f64> {
    let a = faer::MatRef::from_row_major_slice(a, n, n);
    let b = faer::MatRef::from_row_major_slice(b, n, k);
    let p = a * b;
    (0..n * k).map(|i| p[(i / k, i % k)]).collect()
}

/// `G·v` for `v` of length `n = 2χ`, indexed `(α, i)` row-major.
fn g_apply(v: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; v.len()];
    for (o, x) in out.chunks_exact_mut(D).zip(v.chunks_exact(D)) {
        for i in 0..D {
            o[i] = (0..D).map(|j| M2[i][j] * x[j]).sum();
        }
    }
    out
}

/// The enlarged corner's eigendecomposition grouped into clusters of (near-)degenerate
/// eigenvalues, truncated at a cluster boundary, with one canonical orthonormal basis `W`
/// of the kept subspace and the rules of `(W, C' = Wᵀ E W)` as functions of `E`.
///
/// # Canonical basis
/// Eigenvalues are sorted by `|λ|`, largest first; a new cluster starts at a sign change or
/// where `|λ|` drops by more than `δ` relative (`δ = CtmOptions::cluster`). Inside a
/// cluster the eigenvectors are ill-conditioned (exactly degenerate: any rotation is an
/// eigenbasis); its *subspace* is not. The basis of a cluster of size `g` is the eigenbasis
/// `W = V·R` of the secondary operator `X = Vᵀ G V` (`G = I_χ ⊗ M`, `M` a fixed generic
/// symmetric 2×2 matrix on the bond index), eigenvalues `μ` ascending, then the sign rule of
/// the module docs per column. `G` commutes with every gauge transformation `O ⊗ I` of the
/// input's environment index, so `W` is covariant (`W → (O⊗I)ᵀ W`), and the step is again
/// a function of the gauge orbit: the multiplets' continuous gauge is fixed too.
///
/// # Rules
/// With `K = Uᵀ·sym(dE)·U`, for cluster `c` with members `I`:
/// - subspace: `dW⊥ = U_{∉I}·A·(R D)` with `A_{ji} = K_{ji}/(λ_i − λ_j)` (`j ∉ I`, `i ∈ I`):
///   the tangent of the projector `Π = V Vᵀ` applied to `W`, `(1 − Π)·dΠ·W` (Kato; the
///   standard rule of an isolated eigenvalue cluster);
/// - rotation: `dW = dW⊥ + W Ω`, `Ω_{ij} = −S_{ij}/(μ_i − μ_j)` (`i ≠ j`), `S = dW⊥ᵀ G W +
///   Wᵀ G dW⊥`, from `d(Wᵀ G W)` staying diagonal and `WᵀW = I`;
/// - corner: `dC' = dWᵀ (E W) + Wᵀ sym(dE) W + (E W)ᵀ dW`.
///
/// The pullback is their transpose ([`Clusters::cotangent`]); a singleton cluster reduces
/// to the eigh rule of one eigenvector (`Ω` is empty).
pub(super) struct Clusters {
    pub(super) n: usize,
    pub(super) lam: Vec<f64>,
    /// eigenvectors, `n×n` row-major, column `k` for `lam[k]`
    pub(super) u: Vec<f64>,
    /// per kept cluster: its eigen indices, `R·D` (`g×g` row-major) and `μ`
    pub(super) members: Vec<Vec<usize>>,
    pub(super) rot: Vec<Vec<f64>>,
    pub(super) mu: Vec<Vec<f64>>,
    /// the canonical basis `W` (`n×χ'` row-major), and `E·W`
    pub(super) w: Vec<f64>,
    pub(super) ew: Vec<f64>,
    pub(super) gap: f64,
    pub(super) weight: f64,
    pub(super) kept_gap: f64,
}

impl Clusters {
    pub(super) fn new(
        e: &[f64],
        lam: Vec<f64>,
        u: Vec<f64>,
        chi: usize,
        cutoff: f64,
        delta: f64,
    ) -> Result<Self> {
        let n = lam.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| lam[j].abs().total_cmp(&lam[i].abs()));
        let top = lam[order[0]].abs();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &k in &order {
            if lam[k].abs() <= cutoff * top {
                break;
            }
            match groups.last_mut() {
                Some(g) => {
                    let prev = lam[*g.last().unwrap()];
                    if prev.signum() == lam[k].signum()
                        && prev.abs() - lam[k].abs() <= delta * prev.abs()
                    {
                        g.push(k);
                    } else {
                        groups.push(vec![k]);
                    }
                }
                None => groups.push(vec![k]),
            }
        }
        if groups.is_empty() || groups[0].len() > 1 {
            return Err(Error::invalid(
                "temperature",
                "the enlarged corner's largest eigenvalue is degenerate: the gauge fixing \
                 needs a simple leading eigenvalue",
            ));
        }
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut kept = 0;
        for g in groups {
            if kept + g.len() > chi {
                break;
            }
            kept += g.len();
            members.push(g);
        }
        let next = order.get(kept).map(|&k| lam[k].abs());
        let last = lam[*members.last().unwrap().last().unwrap()].abs();
        let (gap, weight) = match next {
            Some(d) => ((last - d) / top, d / top),
            None => (1.0, 0.0),
        };
        let mut rot = Vec::new();
        let mut mu = Vec::new();
        let mut w = vec![0.0; n * kept];
        let mut col = 0;
        let mut kept_gap = f64::INFINITY;
        for m in &members {
            let g = m.len();
            let v: Vec<Vec<f64>> = m
                .iter()
                .map(|&k| (0..n).map(|r| u[r * n + k]).collect())
                .collect();
            let (mus, r) = if g == 1 {
                (vec![0.0], vec![1.0])
            } else {
                let gv: Vec<Vec<f64>> = v.iter().map(|x| g_apply(x)).collect();
                let x = faer::Mat::from_fn(g, g, |i, j| dot(&v[i], &gv[j]));
                let x = faer::Mat::from_fn(g, g, |i, j| 0.5 * (x[(i, j)] + x[(j, i)]));
                let dec = x
                    .self_adjoint_eigen(faer::Side::Lower)
                    .map_err(|e| Error::Backend {
                        backend: "faer".into(),
                        message: format!("eigh of a {g}×{g} cluster operator: {e:?}"),
                    })?;
                let mus: Vec<f64> = (0..g).map(|i| dec.S()[i]).collect();
                let scale = mus.iter().fold(0.0f64, |a, x| a.max(x.abs()));
                for pair in mus.windows(2) {
                    kept_gap = kept_gap.min((pair[1] - pair[0]) / scale.max(f64::MIN_POSITIVE));
                }
                let r: Vec<f64> = (0..g * g).map(|k| dec.U()[(k / g, k % g)]).collect();
                (mus, r)
            };
            // canonical columns W = V R, then the sign rule (rows (0,0), (0,1))
            let mut rd = r.clone();
            for q in 0..g {
                let col_q: Vec<f64> = (0..n)
                    .map(|row| (0..g).map(|p| v[p][row] * r[p * g + q]).sum())
                    .collect();
                let sign = if col_q[0] + 0.5 * col_q[1] < 0.0 {
                    -1.0
                } else {
                    1.0
                };
                for p in 0..g {
                    rd[p * g + q] *= sign;
                }
                for row in 0..n {
                    w[row * kept + col + q] = col_q[row] * sign;
                }
            }
            rot.push(rd);
            mu.push(mus);
            col += g;
        }
        let ew = mat_mul(e, &w, n, kept);
        Ok(Clusters {
            n,
            lam,
            u,
            members,
            rot,
            mu,
            w,
            ew,
            gap,
            weight,
            kept_gap,
        })
    }

    /// χ': the number of kept columns.
    pub(super) fn kept(&self) -> usize {
        self.members.iter().map(Vec::len).sum()
    }

    /// `Xᵀ·Y` for `n×k` row-major `X`, `Y` (`k×k` result).
    pub(super) fn at_b(&self, x: &[f64], y: &[f64], k: usize) -> Vec<f64> {
        xt_y(x, y, self.n, k, k)
    }

    /// `C' = Wᵀ E W` (`χ'×χ'` row-major).
    pub(super) fn corner(&self) -> Vec<f64> {
        self.at_b(&self.w, &self.ew, self.kept())
    }

    pub(super) fn sym(&self, m: &[f64]) -> Vec<f64> {
        let n = self.n;
        (0..n * n)
            .map(|k| 0.5 * (m[k] + m[(k % n) * n + k / n]))
            .collect()
    }

    /// `u_j` as a vector.
    pub(super) fn vector(&self, j: usize) -> Vec<f64> {
        (0..self.n).map(|r| self.u[r * self.n + j]).collect()
    }

    /// The tangents `(dW, dC')` for `dE` (`n×n` row-major).
    pub(super) fn tangent(&self, de: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (n, k) = (self.n, self.kept());
        let des = self.sym(de);
        let mut dw = vec![0.0; n * k];
        let mut col = 0;
        for (c, m) in self.members.iter().enumerate() {
            let g = m.len();
            let rd = &self.rot[c];
            // A[j][p] = u_jᵀ dE u_{m_p} / (λ_{m_p} − λ_j), j outside the cluster
            let mut dwp = vec![vec![0.0; n]; g]; // per member p: Σ_j u_j A_jp
            for (p, &i) in m.iter().enumerate() {
                let ui = self.vector(i);
                let m1: Vec<f64> = (0..n)
                    .map(|r| (0..n).map(|b| des[r * n + b] * ui[b]).sum())
                    .collect();
                for j in 0..n {
                    if m.contains(&j) {
                        continue;
                    }
                    let uj = self.vector(j);
                    let a = dot(&uj, &m1) / (self.lam[i] - self.lam[j]);
                    dwp[p].iter_mut().zip(&uj).for_each(|(o, x)| *o += a * x);
                }
            }
            // dW⊥ columns: Σ_p dwp_p (R D)[p, q]
            let perp: Vec<Vec<f64>> = (0..g)
                .map(|q| {
                    (0..n)
                        .map(|r| (0..g).map(|p| dwp[p][r] * rd[p * g + q]).sum())
                        .collect()
                })
                .collect();
            let wc: Vec<Vec<f64>> = (0..g)
                .map(|q| (0..n).map(|r| self.w[r * k + col + q]).collect())
                .collect();
            let gw: Vec<Vec<f64>> = wc.iter().map(|x| g_apply(x)).collect();
            for q in 0..g {
                let mut d = perp[q].clone();
                for p in 0..g {
                    if p == q {
                        continue;
                    }
                    // (W Ω)[:, q] = Σ_p W_p Ω_pq, Ω_pq = −S_pq/(μ_p − μ_q)
                    let s_pq = dot(&perp[p], &gw[q]) + dot(&gw[p], &perp[q]);
                    let omega = -s_pq / (self.mu[c][p] - self.mu[c][q]);
                    d.iter_mut().zip(&wc[p]).for_each(|(o, x)| *o += omega * x);
                }
                for r in 0..n {
                    dw[r * k + col + q] = d[r];
                }
            }
            col += g;
        }
        // dC' = dWᵀ EW + Wᵀ dE W + EWᵀ dW
        let dew = mat_mul(&des, &self.w, n, k);
        let a1 = self.at_b(&dw, &self.ew, k);
        let a2 = self.at_b(&self.w, &dew, k);
        let a3 = self.at_b(&self.ew, &dw, k);
        let dc = (0..k * k).map(|i| a1[i] + a2[i] + a3[i]).collect();
        (dw, dc)
    }

    /// The cotangent `Ē` (`n×n` row-major, symmetric) for `(W̄, C̄')`: the transpose of
    /// [`Clusters::tangent`].
    pub(super) fn cotangent(&self, w_bar: &[f64], c_bar: &[f64]) -> Vec<f64> {
        let (n, k) = (self.n, self.kept());
        // W̄ += EW (C̄ + C̄ᵀ); Ē = W C̄ Wᵀ (faer)
        let ew = faer::MatRef::from_row_major_slice(&self.ew, n, k);
        let w = faer::MatRef::from_row_major_slice(&self.w, n, k);
        let cb = faer::MatRef::from_row_major_slice(c_bar, k, k);
        let cs = faer::Mat::from_fn(k, k, |i, j| cb[(i, j)] + cb[(j, i)]);
        let extra = ew * &cs;
        let wb: Vec<f64> = (0..n * k)
            .map(|i| w_bar[i] + extra[(i / k, i % k)])
            .collect();
        let e_cw = w * cb * w.transpose();
        let mut eb: Vec<f64> = (0..n * n).map(|i| e_cw[(i / n, i % n)]).collect();
        let mut col = 0;
        for (c, m) in self.members.iter().enumerate() {
            let g = m.len();
            let rd = &self.rot[c];
            let wc: Vec<Vec<f64>> = (0..g)
                .map(|q| (0..n).map(|r| self.w[r * k + col + q]).collect())
                .collect();
            let wbc: Vec<Vec<f64>> = (0..g)
                .map(|q| (0..n).map(|r| wb[r * k + col + q]).collect())
                .collect();
            // W̄⊥ = W̄_c − G W_c (Z + Zᵀ), Z_pq = (W_pᵀ W̄_q)/(μ_p − μ_q)
            let mut z = vec![0.0; g * g];
            for p in 0..g {
                for q in 0..g {
                    if p != q {
                        z[p * g + q] = dot(&wc[p], &wbc[q]) / (self.mu[c][p] - self.mu[c][q]);
                    }
                }
            }
            let gw: Vec<Vec<f64>> = wc.iter().map(|x| g_apply(x)).collect();
            let wbp: Vec<Vec<f64>> = (0..g)
                .map(|q| {
                    let mut v = wbc[q].clone();
                    for p in 0..g {
                        let zz = z[p * g + q] + z[q * g + p];
                        if zz != 0.0 {
                            v.iter_mut().zip(&gw[p]).for_each(|(o, x)| *o -= zz * x);
                        }
                    }
                    v
                })
                .collect();
            // per member p: (W̄⊥ (R D)ᵀ)[:, p] = Σ_q W̄⊥_q (R D)[p, q]
            for (p, &i) in m.iter().enumerate() {
                let bp: Vec<f64> = (0..n)
                    .map(|r| (0..g).map(|q| wbp[q][r] * rd[p * g + q]).sum())
                    .collect();
                let ui = self.vector(i);
                let mut v = vec![0.0; n];
                for j in 0..n {
                    if m.contains(&j) {
                        continue;
                    }
                    let uj = self.vector(j);
                    let kb = dot(&uj, &bp) / (self.lam[i] - self.lam[j]);
                    v.iter_mut().zip(&uj).for_each(|(o, x)| *o += kb * x);
                }
                for r in 0..n {
                    for s in 0..n {
                        eb[r * n + s] += v[r] * ui[s];
                    }
                }
            }
            col += g;
        }
        self.sym(&eb)
    }
}
