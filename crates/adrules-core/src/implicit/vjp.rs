//! The linear maps of conditions written in a reverse-mode engine (candle, burn, …), built
//! once here from what such an engine offers: the values of `c` and one vector–Jacobian
//! product ([`ConditionsVjp`], implemented by each adapter), turned into the four maps by
//! [`VjpMaps`].
//!
//! # Where each map comes from
//! - `Aᴴ·u` and `Bᴴ·u` (the pullback's maps) are exact VJPs: one reverse pass of
//!   `⟨c(x, y), u⟩` gives both cotangents, `∂/∂y = Aᴴ·u` and `∂/∂x = Bᴴ·u` (in the crate's
//!   cotangent convention). A block of `k` vectors costs `k` passes.
//! - `A·v` and `B·v` (the pushforward, and a dense `A` for the dense solvers) need forward
//!   mode, which these engines lack, and the transpose trick (differentiating the VJP once
//!   more) needs a backward pass through the backward pass, which they do not record. They
//!   come instead from the dense Jacobians assembled exactly from `m` VJPs with the unit
//!   cotangents `e_i` (row `i` of `[A B]` is `conj` of the VJP of `e_i`), built once, on
//!   first use, and cached.
//!
//! # The `dense_a` policy
//! [`LinearMaps::dense_a`] reports `A` only once something else assembled it: it never
//! assembles. So a matrix-free solver (GMRES, CG; what [`Method::Auto`](super::Method::Auto)
//! picks for `m >` [`AUTO_DENSE_LIMIT`](super::AUTO_DENSE_LIMIT)) costs one reverse pass per
//! Krylov iteration and never `m`; a dense solver builds `A` through
//! [`apply_a`](LinearMaps::apply_a), which assembles it (m passes, once).
//! [`VjpMaps::reverse_passes`] and [`VjpMaps::assemblies`] count both, for tests and for
//! users who want to see the cost.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use faer::Mat;

use super::ImplicitScalar;
use super::maps::{LinearMaps, Structure, product};
use crate::error::Result;
use crate::scalar::Scalar;

/// What a reverse-mode engine supplies about conditions `c(x, y)` at one point: their values
/// and one vector–Jacobian product. [`VjpMaps`] turns it into the four [`LinearMaps`].
///
/// Flattening as in the [module documentation](super): `y` row-major (`m` unknowns), the
/// inputs `x` row-major and concatenated in call order (`n` elements), the `m` conditions
/// in any fixed order.
pub trait ConditionsVjp<T: ImplicitScalar>: Send + Sync {
    /// `m`: the number of unknowns and of conditions.
    fn num_unknowns(&self) -> usize;

    /// `n`: the total number of input elements.
    fn num_inputs(&self) -> usize;

    /// `c(x, y)` at the point (`m` values).
    fn values(&self) -> &[T];

    /// One reverse pass of `⟨c(x, y), u⟩` for the output cotangent `u` (length `m`): writes
    /// the cotangent of `y`, `Aᴴ·u` (length `m`), into `y_bar` and that of the inputs,
    /// `Bᴴ·u` (length `n`), into `x_bar`, each only when given (a part of `c` independent of
    /// a leaf gives zeros). For real data `Aᴴ = Aᵀ`.
    ///
    /// # Errors
    /// Whatever the engine reports.
    fn vjp(&self, u: &[T], y_bar: Option<&mut [T]>, x_bar: Option<&mut [T]>) -> Result<()>;
}

/// The four linear maps from a [`ConditionsVjp`] (see the [`implicit`](crate::implicit) module):
/// adjoint maps by one reverse pass per vector, forward maps from Jacobians assembled once
/// from `m` reverse passes, `dense_a` only once assembled.
pub struct VjpMaps<T: ImplicitScalar, V> {
    vjp: V,
    structure: Structure,
    /// `(A, B)`, assembled on first use
    dense: OnceLock<Result<(Mat<T>, Mat<T>)>>,
    passes: AtomicUsize,
    assemblies: AtomicUsize,
}

impl<T: ImplicitScalar, V: ConditionsVjp<T>> VjpMaps<T, V> {
    /// The maps of `vjp`, with `A` of unknown structure.
    pub fn new(vjp: V) -> Self {
        VjpMaps {
            vjp,
            structure: Structure::General,
            dense: OnceLock::new(),
            passes: AtomicUsize::new(0),
            assemblies: AtomicUsize::new(0),
        }
    }

    /// Declares the structure of `A = ∂c/∂y`.
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }

    /// The engine's conditions.
    pub fn source(&self) -> &V {
        &self.vjp
    }

    /// Reverse passes run so far (one per VJP, the `m` of an assembly included).
    pub fn reverse_passes(&self) -> usize {
        self.passes.load(Ordering::Relaxed)
    }

    /// Jacobian assemblies run so far (0 or 1: the result is cached).
    pub fn assemblies(&self) -> usize {
        self.assemblies.load(Ordering::Relaxed)
    }

    fn pass(&self, u: &[T], y_bar: Option<&mut [T]>, x_bar: Option<&mut [T]>) -> Result<()> {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.vjp.vjp(u, y_bar, x_bar)
    }

    /// `A` and `B`, row `i` the conjugate of the VJP of the unit vector `e_i`.
    fn dense(&self) -> Result<&(Mat<T>, Mat<T>)> {
        self.dense
            .get_or_init(|| {
                self.assemblies.fetch_add(1, Ordering::Relaxed);
                let (m, n) = (self.num_unknowns(), self.num_inputs());
                let (mut a, mut b) = (Mat::<T>::zeros(m, m), Mat::<T>::zeros(m, n));
                let (mut ra, mut rb) = (vec![T::zero(); m], vec![T::zero(); n]);
                let mut e = vec![T::zero(); m];
                for i in 0..m {
                    e[i] = T::one();
                    self.pass(&e, Some(&mut ra), Some(&mut rb))?;
                    e[i] = T::zero();
                    ra.iter()
                        .enumerate()
                        .for_each(|(j, &v)| a[(i, j)] = Scalar::conj(v));
                    rb.iter()
                        .enumerate()
                        .for_each(|(j, &v)| b[(i, j)] = Scalar::conj(v));
                }
                Ok((a, b))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl<T: ImplicitScalar, V: ConditionsVjp<T>> LinearMaps<T> for VjpMaps<T, V> {
    fn num_unknowns(&self) -> usize {
        self.vjp.num_unknowns()
    }

    fn num_inputs(&self) -> usize {
        self.vjp.num_inputs()
    }

    fn structure(&self) -> Structure {
        self.structure
    }

    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        product(self.dense()?.0.as_ref(), v, out, k);
        Ok(())
    }

    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        let m = self.num_unknowns();
        for j in 0..k {
            let out = &mut out[j * m..(j + 1) * m];
            self.pass(&u[j * m..(j + 1) * m], Some(out), None)?;
        }
        Ok(())
    }

    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        product(self.dense()?.1.as_ref(), v, out, k);
        Ok(())
    }

    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        let (m, n) = (self.num_unknowns(), self.num_inputs());
        for j in 0..k {
            let out = &mut out[j * n..(j + 1) * n];
            self.pass(&u[j * m..(j + 1) * m], None, Some(out))?;
        }
        Ok(())
    }

    /// `A` once a forward product has assembled it, `None` before: choosing a matrix-free
    /// solver never pays for an assembly.
    fn dense_a(&self) -> Option<Mat<T>> {
        match self.dense.get() {
            Some(Ok((a, _))) => Some(a.clone()),
            _ => None,
        }
    }

    fn conditions(&self) -> Option<&[T]> {
        Some(self.vjp.values())
    }
}
