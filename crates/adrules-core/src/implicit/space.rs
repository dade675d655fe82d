//! The vector space the matrix-free solvers run over ([`KrylovSpace`]): GMRES (`gmres.rs`)
//! and CG (`cg.rs`) are written once over it, and the host's slices (`krylov.rs`, over
//! [`LinearMaps`](super::LinearMaps)) and a backend's tensors (`device.rs`, over
//! [`AdjointMaps`](super::device::AdjointMaps)) implement it, as KrylovKit.jl's solvers are
//! written once over VectorInterface.jl.

use super::ImplicitScalar;
use crate::error::{Error, Result};

/// The vector operations GMRES and CG need, on vectors of one length `m` and element type
/// `T`, with the operator `op` of the system (shifts included).
///
/// The basis of GMRES is the space's own storage (contiguous on the host, so that a
/// Gram–Schmidt pass is two GEMVs; a list of tensors on a device). The scalars that come
/// back (norms, the real inner products of CG) are `f64`; the coefficients that go in are
/// `T`. Every method may fail (an engine's error, a product with a non-finite entry); the
/// solvers return the error unchanged.
pub(crate) trait KrylovSpace<T: ImplicitScalar> {
    /// A vector of length `m` (a clone is a copy, or storage shared until written).
    type Vector: Clone;
    /// Up to `p + 1` orthonormal vectors, in the order pushed.
    type Basis;

    /// An empty basis with room for `capacity` vectors.
    fn basis(&self, capacity: usize) -> Self::Basis;
    /// Empties `basis` (its storage is reused by the next cycle).
    fn clear(&self, basis: &mut Self::Basis);
    /// Appends `α·v` to `basis`, `v` left as it was (the start of a cycle).
    fn push_scaled(&self, basis: &mut Self::Basis, v: &Self::Vector, alpha: T) -> Result<()>;
    /// Appends `α·w` to `basis`, consuming `w` (an Arnoldi vector).
    fn push_normalized(&self, basis: &mut Self::Basis, w: Self::Vector, alpha: T) -> Result<()>;
    /// `op·v_j` for basis vector `j`.
    fn apply(&self, basis: &Self::Basis, j: usize) -> Result<Self::Vector>;
    /// `op·v`.
    fn apply_vector(&self, v: &Self::Vector) -> Result<Self::Vector>;
    /// A new vector `α·v`.
    fn scaled(&self, v: &Self::Vector, alpha: T) -> Result<Self::Vector>;
    /// `y ← β·y + α·x`.
    fn update(&self, y: &mut Self::Vector, x: &Self::Vector, alpha: T, beta: T) -> Result<()>;
    /// `‖x‖₂`; non-finite when `x` has a non-finite entry.
    fn norm(&self, x: &Self::Vector) -> Result<f64>;
    /// `Re(xᴴ·y)`; NaN when `xᴴ·y` has a non-finite imaginary part.
    fn real_inner(&self, x: &Self::Vector, y: &Self::Vector) -> Result<f64>;
    /// One classical Gram–Schmidt pass against every vector of `basis`: `d = Vᴴ·w`, then
    /// `w ← w − V·d` (`d.len()` = the basis's length).
    fn project(&self, basis: &Self::Basis, w: &mut Self::Vector, d: &mut [T]) -> Result<()>;
    /// `x ← x + V[.., ..y.len()]·y`.
    fn combine(&self, x: &mut Self::Vector, basis: &Self::Basis, y: &[T]) -> Result<()>;
    /// `r = b − op·x` and `‖r‖₂`.
    fn residual(&self, b: &Self::Vector, x: &Self::Vector) -> Result<(Self::Vector, f64)>;
    /// The error of an operator product `what` with a non-finite value.
    fn non_finite(&self, what: &str, value: f64) -> Error;
}
