//! The four linear maps of the conditions at a solution (`A·v`, `Aᴴ·u`, `B·v`, `Bᴴ·u`), the
//! one trait every source implements ([`LinearMaps`]), and two sources: dense Jacobians
//! ([`DenseMaps`]) and user closures ([`FnMaps`]).

use std::sync::Arc;

use faer::{Accum, Mat, MatMut, MatRef};

use super::ImplicitScalar;
use crate::error::{Error, Result};
use crate::host::HostTensor;

/// Structure of `A = ∂c/∂y` declared by a source. The tag picks the linear solver under
/// [`Method::Auto`](super::Method::Auto) (Optimistix-style) and is a promise of the
/// source: a definite tag on a matrix that is not definite makes Cholesky or CG fail with
/// [`Error::Singular`]; dense Cholesky also checks that `A` is Hermitian.
///
/// "Hermitian" means `Aᴴ = A`, which for real data is "symmetric". A complex-symmetric
/// (`Aᵀ = A`) matrix is [`Structure::General`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Structure {
    /// no known structure: LU (dense) or GMRES (matrix-free)
    #[default]
    General,
    /// `Aᴴ = A`, indefinite: LU or GMRES
    Hermitian,
    /// `Aᴴ = A` and positive definite (the Hessian at a strict minimum): Cholesky or CG
    PositiveDefinite,
    /// `Aᴴ = A` and negative definite (`∂T/∂y − I` of a fixed point whose map has a
    /// symmetric contractive Jacobian): Cholesky or CG on `−A`
    NegativeDefinite,
}

impl Structure {
    /// `true` for every tag but [`Structure::General`].
    pub fn is_hermitian(self) -> bool {
        self != Structure::General
    }

    /// `true` for the positive- and negative-definite tags.
    pub fn is_definite(self) -> bool {
        matches!(
            self,
            Structure::PositiveDefinite | Structure::NegativeDefinite
        )
    }
}

/// The linear maps of the conditions `c(x, y, z, args)` at a solution `y(x)`:
/// `A = ∂c/∂y` (`m×m`) and `B = ∂c/∂x` (`m×n`), where `m` is the number of unknowns (the
/// length of the flattened `y`, equal to the number of conditions) and `n` the total
/// number of input elements (every `x` input flattened row-major, inputs concatenated in
/// order; see the [module documentation](super)).
///
/// This is the one interface between the implicit-differentiation rule and whatever knows
/// the derivatives of the conditions: user closures ([`FnMaps`]), dense Jacobians
/// ([`DenseMaps`]), finite differences (tests only, in `adrules-testing`), a tensor network
/// differentiated by the contraction rules (its pushforward gives `A·v` and `B·v`, its
/// pullback `Aᴴ·u` and `Bᴴ·u`), or an engine's own autodiff ([`VjpMaps`](super::VjpMaps):
/// VJPs of `c`; the adapter copies the vectors to and from the host).
///
/// # Blocks
/// Every map acts on a *block* of `k ≥ 0` vectors stored one after the other: vector `j`
/// of a block of vectors of length `len` is `block[j·len .. (j+1)·len]` (a column-major
/// `len×k` matrix). `out` has the output length times `k` elements; its previous content
/// is not read (it may hold anything, NaN included). The rule guarantees these lengths and
/// calls the maps with `k ≥ 1` and `m, n ≥ 1` only.
///
/// # Complex data
/// The conditions must be holomorphic in `y` and `x`, so that `A` and `B` are complex-linear;
/// `Aᴴ` and `Bᴴ` are the conjugate transposes (the cotangent convention of the crate:
/// the pullback of `y = M·x` is `x̄ = Mᴴ·ȳ`).
///
/// The maps are evaluated at one point and must own what they read: the rule keeps them
/// (inside [`Linearization`](super::Linearization)) for as long as the pullback lives.
pub trait LinearMaps<T: ImplicitScalar>: Send + Sync {
    /// `m`: the number of unknowns (elements of `y`) and of conditions.
    fn num_unknowns(&self) -> usize;

    /// `n`: the total number of input elements (all `x` inputs together).
    fn num_inputs(&self) -> usize;

    /// The structure of `A` (default [`Structure::General`]).
    fn structure(&self) -> Structure {
        Structure::General
    }

    /// `out = A·v` for a block of `k` vectors of length `m`.
    ///
    /// # Errors
    /// Whatever the source reports (an engine failure, for example).
    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()>;

    /// `out = Aᴴ·u` for a block of `k` vectors of length `m`.
    ///
    /// # Errors
    /// Whatever the source reports.
    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()>;

    /// `out = B·v` for a block of `k` vectors of length `n`; `out` is `m×k`.
    ///
    /// # Errors
    /// Whatever the source reports.
    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()>;

    /// `out = Bᴴ·u` for a block of `k` vectors of length `m`; `out` is `n×k`.
    ///
    /// # Errors
    /// Whatever the source reports.
    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()>;

    /// A dense copy of `A` (`m×m`, `A[(i, j)] = ∂c_i/∂y_j`) when the source holds one.
    /// When `None` (the default) and a dense solver is used, the rule builds `A` from one
    /// application of [`apply_a`](LinearMaps::apply_a) to the `m` unit vectors.
    fn dense_a(&self) -> Option<Mat<T>> {
        None
    }

    /// Second derivatives of the conditions: the tangent of the adjoint maps along a primal
    /// tangent. For `u` (length `m`), `dx` (length `n`) and `dy` (length `m`), writes
    /// - `wy = d/dε [A(x + ε·dx, y + ε·dy)ᴴ·u]` (length `m`),
    /// - `wx = d/dε [B(x + ε·dx, y + ε·dy)ᴴ·u]` (length `n`),
    ///
    /// that is `(wy, wx) = ∇²g·(dy, dx)` for the real function `g = Re⟨u, c(x, y)⟩`, in the
    /// crate's cotangent convention (`∂/∂re + i·∂/∂im`). One vector at a time (`k = 1`);
    /// `wy` and `wx` are overwritten. Used by the second-order rule
    /// ([`Linearization::hvp`](super::Linearization::hvp)).
    ///
    /// The default returns [`Error::Unsupported`]: [`NetworkConditions`](super::NetworkConditions)
    /// derive it from the network rules, [`FnMaps::with_second_order`] takes it as a closure,
    /// and `adrules-testing` has a finite-difference source for tests.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the source has no second derivatives; whatever the source
    /// reports.
    fn adjoint_tangent(
        &self,
        u: &[T],
        dx: &[T],
        dy: &[T],
        wy: &mut [T],
        wx: &mut [T],
    ) -> Result<()> {
        let _ = (u, dx, dy, wy, wx);
        Err(Error::Unsupported {
            backend: "these linear maps".into(),
            what: "second derivatives of the conditions (LinearMaps::adjoint_tangent: \
                   use NetworkConditions, FnMaps::with_second_order, or implement it)"
                .into(),
        })
    }

    /// The values `c(x, y, z, args)` (length `m`) at the point, when the source evaluated
    /// the conditions there. The rule reports their norm
    /// ([`Linearization::conditions_norm`](super::Linearization::conditions_norm)): implicit
    /// derivatives are those of an exact root, and a solver stopped early gives wrong
    /// derivatives.
    fn conditions(&self) -> Option<&[T]> {
        None
    }
}

/// Boxed and shared maps are maps (a closure may return `Box<dyn LinearMaps<T>>`, or an
/// `Arc` of maps it also keeps).
macro_rules! forward_maps {
    ($ptr:ident) => {
        impl<T: ImplicitScalar, M: LinearMaps<T> + ?Sized> LinearMaps<T> for $ptr<M> {
            fn num_unknowns(&self) -> usize {
                (**self).num_unknowns()
            }
            fn num_inputs(&self) -> usize {
                (**self).num_inputs()
            }
            fn structure(&self) -> Structure {
                (**self).structure()
            }
            fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
                (**self).apply_a(v, out, k)
            }
            fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
                (**self).apply_a_adjoint(u, out, k)
            }
            fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
                (**self).apply_b(v, out, k)
            }
            fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
                (**self).apply_b_adjoint(u, out, k)
            }
            fn dense_a(&self) -> Option<Mat<T>> {
                (**self).dense_a()
            }
            fn conditions(&self) -> Option<&[T]> {
                (**self).conditions()
            }
            fn adjoint_tangent(
                &self,
                u: &[T],
                dx: &[T],
                dy: &[T],
                wy: &mut [T],
                wx: &mut [T],
            ) -> Result<()> {
                (**self).adjoint_tangent(u, dx, dy, wy, wx)
            }
        }
    };
}
forward_maps!(Box);
forward_maps!(Arc);

/// Views a block of `k` vectors of length `len` as a column-major `len×k` matrix.
pub(crate) fn block<T: ImplicitScalar>(data: &[T], len: usize, k: usize) -> MatRef<'_, T> {
    MatRef::from_column_major_slice(data, len, k)
}

/// Mutable version of [`block`].
pub(crate) fn block_mut<T: ImplicitScalar>(data: &mut [T], len: usize, k: usize) -> MatMut<'_, T> {
    MatMut::from_column_major_slice_mut(data, len, k)
}

/// Dense Jacobians as a source of the linear maps: `A` (`m×m`) and `B` (`m×n`), with
/// `A[(i, j)] = ∂c_i/∂y_j` and `B[(i, j)] = ∂c_i/∂x_j` in the flattening order of the
/// [module documentation](super). The maps are faer matrix products.
#[derive(Clone, Debug)]
pub struct DenseMaps<T: ImplicitScalar> {
    a: Mat<T>,
    b: Mat<T>,
    structure: Structure,
    conditions: Option<Vec<T>>,
}

impl<T: ImplicitScalar> DenseMaps<T> {
    /// From faer matrices.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `a` is not square or `b` has not `a.nrows()` rows.
    pub fn new(a: Mat<T>, b: Mat<T>) -> Result<Self> {
        let m = a.nrows();
        if a.ncols() != m {
            return Err(Error::shape("A = ∂c/∂y", &[m, m], &[m, a.ncols()]));
        }
        if b.nrows() != m {
            return Err(Error::shape(
                "B = ∂c/∂x",
                &[m, b.ncols()],
                &[b.nrows(), b.ncols()],
            ));
        }
        Ok(DenseMaps {
            a,
            b,
            structure: Structure::General,
            conditions: None,
        })
    }

    /// From row-major host tensors: `a` of shape `[m, m]`, `b` of shape `[m, n]`.
    ///
    /// # Errors
    /// [`Error::RankMismatch`] or [`Error::ShapeMismatch`] for wrong shapes,
    /// [`Error::DTypeMismatch`] when a dtype is not `T`.
    pub fn from_host(a: &HostTensor, b: &HostTensor) -> Result<Self> {
        let a = matrix_from_host(a, "A = ∂c/∂y")?;
        let b = matrix_from_host(b, "B = ∂c/∂x")?;
        Self::new(a, b)
    }

    /// Declares the structure of `A`.
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }

    /// Records the values `c(x, y, z, args)` at the point (see [`LinearMaps::conditions`]).
    pub fn with_conditions(mut self, values: Vec<T>) -> Self {
        self.conditions = Some(values);
        self
    }

    /// `A`.
    pub fn a(&self) -> MatRef<'_, T> {
        self.a.as_ref()
    }

    /// `B`.
    pub fn b(&self) -> MatRef<'_, T> {
        self.b.as_ref()
    }
}

fn matrix_from_host<T: ImplicitScalar>(t: &HostTensor, arg: &str) -> Result<Mat<T>> {
    let &[r, c] = t.dims() else {
        return Err(Error::rank(arg, 2, t.dims().len()));
    };
    let data = t.as_slice::<T>().map_err(|_| Error::DTypeMismatch {
        arg: arg.into(),
        expected: T::DTYPE.to_string(),
        actual: t.dtype(),
    })?;
    Ok(Mat::from_fn(r, c, |i, j| data[i * c + j]))
}

/// `out = mat·v` for a block of `k` vectors (`mat` may be a conjugated view).
pub(crate) fn product<T, L>(mat: MatRef<'_, L>, v: &[T], out: &mut [T], k: usize)
where
    T: ImplicitScalar,
    L: faer::traits::Conjugate<Canonical = T>,
{
    faer::linalg::matmul::matmul(
        block_mut(out, mat.nrows(), k),
        Accum::Replace,
        mat,
        block(v, mat.ncols(), k),
        T::one(),
        faer::get_global_parallelism(),
    );
}

impl<T: ImplicitScalar> LinearMaps<T> for DenseMaps<T> {
    fn num_unknowns(&self) -> usize {
        self.a.nrows()
    }
    fn num_inputs(&self) -> usize {
        self.b.ncols()
    }
    fn structure(&self) -> Structure {
        self.structure
    }
    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        product(self.a.as_ref(), v, out, k);
        Ok(())
    }
    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        product(self.a.adjoint(), u, out, k);
        Ok(())
    }
    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        product(self.b.as_ref(), v, out, k);
        Ok(())
    }
    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        product(self.b.adjoint(), u, out, k);
        Ok(())
    }
    fn dense_a(&self) -> Option<Mat<T>> {
        Some(self.a.clone())
    }
    fn conditions(&self) -> Option<&[T]> {
        self.conditions.as_deref()
    }
}

/// A map of one vector: `f(input, output)` writes the whole output.
type VectorMap<T> = Box<dyn Fn(&[T], &mut [T]) + Send + Sync>;

/// User closures as a source of the linear maps, one vector at a time: each closure
/// receives one input vector and writes the whole output vector (`a`: `v` of length `m` to
/// `A·v` of length `m`; `a_adjoint`: `u` (m) to `Aᴴ·u` (m); `b`: `v` (n) to `B·v` (m);
/// `b_adjoint`: `u` (m) to `Bᴴ·u` (n)). Blocks are applied column by column; a source that
/// has a faster block product implements [`LinearMaps`] itself.
///
/// The closures must own what they read (move copies of `x`, `y` into them): they live as
/// long as the pullback.
pub struct FnMaps<T: ImplicitScalar> {
    m: usize,
    n: usize,
    a: VectorMap<T>,
    a_adjoint: Option<VectorMap<T>>,
    b: VectorMap<T>,
    b_adjoint: VectorMap<T>,
    second_order: Option<SecondOrderMap<T>>,
    structure: Structure,
    conditions: Option<Vec<T>>,
}

/// `(u, dx, dy, wy, wx)`: see [`LinearMaps::adjoint_tangent`].
type SecondOrderMap<T> = Box<dyn Fn(&[T], &[T], &[T], &mut [T], &mut [T]) + Send + Sync>;

impl<T: ImplicitScalar> FnMaps<T> {
    /// The four maps of a general `A`, with `m` unknowns and `n` input elements.
    pub fn new(
        m: usize,
        n: usize,
        a: impl Fn(&[T], &mut [T]) + Send + Sync + 'static,
        a_adjoint: impl Fn(&[T], &mut [T]) + Send + Sync + 'static,
        b: impl Fn(&[T], &mut [T]) + Send + Sync + 'static,
        b_adjoint: impl Fn(&[T], &mut [T]) + Send + Sync + 'static,
    ) -> Self {
        FnMaps {
            m,
            n,
            a: Box::new(a),
            a_adjoint: Some(Box::new(a_adjoint)),
            b: Box::new(b),
            b_adjoint: Box::new(b_adjoint),
            second_order: None,
            structure: Structure::General,
            conditions: None,
        }
    }

    /// The maps of a Hermitian `A` (`Aᴴ·u` is computed by `a`), tagged
    /// [`Structure::Hermitian`]; refine the tag with [`FnMaps::with_structure`].
    pub fn hermitian(
        m: usize,
        n: usize,
        a: impl Fn(&[T], &mut [T]) + Send + Sync + 'static,
        b: impl Fn(&[T], &mut [T]) + Send + Sync + 'static,
        b_adjoint: impl Fn(&[T], &mut [T]) + Send + Sync + 'static,
    ) -> Self {
        FnMaps {
            m,
            n,
            a: Box::new(a),
            a_adjoint: None,
            b: Box::new(b),
            b_adjoint: Box::new(b_adjoint),
            second_order: None,
            structure: Structure::Hermitian,
            conditions: None,
        }
    }

    /// Declares the structure of `A`. Declaring [`Structure::General`] on maps built with
    /// [`FnMaps::hermitian`] keeps `Aᴴ = A`.
    pub fn with_structure(mut self, structure: Structure) -> Self {
        self.structure = structure;
        self
    }

    /// Records the values `c(x, y, z, args)` at the point (see [`LinearMaps::conditions`]).
    pub fn with_conditions(mut self, values: Vec<T>) -> Self {
        self.conditions = Some(values);
        self
    }

    /// Adds the second derivatives of the conditions: `f(u, dx, dy, wy, wx)` writes
    /// `wy = d/dε[Aᴴ·u]` (length `m`) and `wx = d/dε[Bᴴ·u]` (length `n`) along the primal
    /// tangent `(dx, dy)` (see [`LinearMaps::adjoint_tangent`]); needed for implicit
    /// Hessian-vector products ([`Linearization::hvp`](super::Linearization::hvp)).
    pub fn with_second_order(
        mut self,
        f: impl Fn(&[T], &[T], &[T], &mut [T], &mut [T]) + Send + Sync + 'static,
    ) -> Self {
        self.second_order = Some(Box::new(f));
        self
    }
}

/// Applies a one-vector map to each of the `k` vectors of a block.
fn columns<T: ImplicitScalar>(
    f: &VectorMap<T>,
    v: &[T],
    len_in: usize,
    out: &mut [T],
    len_out: usize,
    k: usize,
) {
    for j in 0..k {
        f(
            &v[j * len_in..(j + 1) * len_in],
            &mut out[j * len_out..(j + 1) * len_out],
        );
    }
}

impl<T: ImplicitScalar> LinearMaps<T> for FnMaps<T> {
    fn num_unknowns(&self) -> usize {
        self.m
    }
    fn num_inputs(&self) -> usize {
        self.n
    }
    fn structure(&self) -> Structure {
        self.structure
    }
    fn apply_a(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        columns(&self.a, v, self.m, out, self.m, k);
        Ok(())
    }
    fn apply_a_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        columns(
            self.a_adjoint.as_ref().unwrap_or(&self.a),
            u,
            self.m,
            out,
            self.m,
            k,
        );
        Ok(())
    }
    fn apply_b(&self, v: &[T], out: &mut [T], k: usize) -> Result<()> {
        columns(&self.b, v, self.n, out, self.m, k);
        Ok(())
    }
    fn apply_b_adjoint(&self, u: &[T], out: &mut [T], k: usize) -> Result<()> {
        columns(&self.b_adjoint, u, self.m, out, self.n, k);
        Ok(())
    }
    fn conditions(&self) -> Option<&[T]> {
        self.conditions.as_deref()
    }
    fn adjoint_tangent(
        &self,
        u: &[T],
        dx: &[T],
        dy: &[T],
        wy: &mut [T],
        wx: &mut [T],
    ) -> Result<()> {
        match &self.second_order {
            Some(f) => {
                f(u, dx, dy, wy, wx);
                Ok(())
            }
            None => Err(Error::Unsupported {
                backend: "FnMaps".into(),
                what: "second derivatives without FnMaps::with_second_order".into(),
            }),
        }
    }
}
