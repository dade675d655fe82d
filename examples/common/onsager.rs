//! Onsager's exact solution of the square-lattice Ising model (J = 1, k_B = 1, infinite
//! lattice), per site, as functions of the inverse temperature β. Formulas as in K. Huang,
//! *Statistical Mechanics*, 2nd ed., §15.5 (L. Onsager, Phys. Rev. 65, 117 (1944)), with
//! κ = 2 sinh 2β / cosh² 2β and the complete elliptic integrals K(κ), E(κ) of modulus κ
//! (the `ellip` crate takes the parameter m = κ²).

/// Critical temperature `T_c = 2 / ln(1 + √2) ≈ 2.269185`.
pub fn critical_temperature() -> f64 {
    2.0 / (1.0 + 2f64.sqrt()).ln()
}

fn elliptic(beta: f64) -> (f64, f64, f64, f64) {
    let (s, c) = ((2.0 * beta).sinh(), (2.0 * beta).cosh());
    let kappa = 2.0 * s / (c * c);
    let m = (kappa * kappa).min(1.0);
    let k = ellip::ellipk(m).unwrap_or(f64::INFINITY);
    let e = ellip::ellipe(m).unwrap_or(1.0);
    let t = (2.0 * beta).tanh();
    (k, e, t, 1.0 / t)
}

/// Internal energy per site, `u = −coth 2β [1 + (2/π)(2 tanh² 2β − 1) K(κ)]`.
pub fn internal_energy(beta: f64) -> f64 {
    let (k, _, t, coth) = elliptic(beta);
    -coth * (1.0 + 2.0 / std::f64::consts::PI * (2.0 * t * t - 1.0) * k)
}

/// Specific heat per site,
/// `c = (2/π)(β coth 2β)² {2K(κ) − 2E(κ) − (1 − tanh² 2β)[π/2 + (2 tanh² 2β − 1) K(κ)]}`
/// (logarithmically divergent at `T_c`).
pub fn specific_heat(beta: f64) -> f64 {
    use std::f64::consts::PI;
    let (k, e, t, coth) = elliptic(beta);
    let pre = 2.0 / PI * (beta * coth).powi(2);
    pre * (2.0 * k - 2.0 * e - (1.0 - t * t) * (PI / 2.0 + (2.0 * t * t - 1.0) * k))
}
