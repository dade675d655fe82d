//! The [`Backend`] trait: exactly the primitives the rules need.
//!
//! Every pullback and pushforward in [`crate::rules`] is written as calls of these methods,
//! so a backend that implements them gets every rule. The three tensor primitives are
//! BLAS-style in-place updates `C ← β·C + α·op(…)`:
//!
//! | method | update |
//! |---|---|
//! | [`add`](Backend::add) | `C ← β·C + α·P_p(op(A))` |
//! | [`trace`](Backend::trace) | `C ← β·C + α·Σ_summed diag_kept(op(A))` (diagonals, traces, sums) |
//! | [`add_to_diagonal`](Backend::add_to_diagonal) | `A ← A + α·op(C)` broadcast onto the diagonal (the trace's adjoint) |
//! | [`contract`](Backend::contract) | `C ← β·C + α·P_{pAB}(op(A)·op(B))`, with batch axes |
//!
//! with the index conventions of [`crate::spec`] and `op(X) = conj(X)` when the
//! conjugation flag is [`Conj::Yes`].
//!
//! # Contract every implementation keeps
//! - **Strong zero**: when `β` is zero, C is not read, so NaN or garbage in C cannot leak.
//! - **Dtypes**: inputs must promote losslessly to C's dtype ([`DType::promotes_to`]); α and β
//!   are cast to C's dtype (rounding precision is allowed; a complex α or β with a real C is
//!   [`Error::DTypeMismatch`]). [`add_projected`](Backend::add_projected) is the one
//!   primitive that narrows (reverse-mode projection).
//! - **Handles are values**: `Tensor` is a cheap, reference-counted handle. Updating `c`
//!   must never change what another handle that shared storage with `c` sees (copy-on-write,
//!   or replacing the handle as candle and burn do). Pullbacks keep clones of their inputs and
//!   rely on this for AD safety.
//! - **Errors, not panics**: every shape, rank, dtype, device and aliasing problem is a typed
//!   [`Error`] naming the argument.
//!
//!
//! The argument checks of this contract are written once, in [`check`]; every backend calls
//! them, so a mistake gets the same typed error on every engine.
//!
//! [`Error`]: crate::Error
//! [`Error::DTypeMismatch`]: crate::Error::DTypeMismatch

pub mod check;
pub mod transfers;

use std::fmt::Debug;

use crate::error::{Error, Result};
use crate::host::HostTensor;
use crate::linalg::{self, QrMode, SvdMode};
use crate::scalar::{DType, DynScalar};
use crate::spec::{Conj, ContractSpec, Dims, Permutation, TraceSpec};

/// A tensor engine on which the shared rules run.
///
/// The backend value itself (a device, an allocator handle) is cheap to clone: pullbacks keep
/// a clone so that they can be applied later without being handed the backend again.
pub trait Backend: Clone + Debug {
    /// A tensor handle: cheap to clone (no data copy), see the module docs for the
    /// value semantics it must keep.
    type Tensor: Clone + Debug;

    /// A short name for error messages (`"strided"`, `"candle"`, …).
    fn name(&self) -> &'static str;

    /// Element types this backend stores.
    fn dtypes(&self) -> &'static [DType];

    /// The shape of `t`.
    fn dims(&self, t: &Self::Tensor) -> Dims;

    /// The element type of `t`.
    fn dtype(&self, t: &Self::Tensor) -> DType;

    /// The rank of `t`.
    fn rank(&self, t: &Self::Tensor) -> usize {
        self.dims(t).len()
    }

    /// A new tensor of zeros.
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] for a dtype outside [`dtypes`](Backend::dtypes).
    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Self::Tensor>;

    /// A new tensor whose elements are unspecified (zeros, or values of an earlier use of
    /// recycled storage; never uninitialised memory), for an output written with `β = 0`,
    /// which every primitive treats as a strong zero. A backend that can skip the zero-fill
    /// (the strided backend recycles large buffers) overrides this; the default is
    /// [`zeros`](Backend::zeros).
    ///
    /// # Errors
    /// As [`zeros`](Backend::zeros).
    fn empty(&self, dims: &[usize], dtype: DType) -> Result<Self::Tensor> {
        self.zeros(dims, dtype)
    }

    /// Copies `t` to host memory, row-major.
    ///
    /// # Errors
    /// Engine errors only.
    fn to_host(&self, t: &Self::Tensor) -> Result<HostTensor>;

    /// Builds a tensor from host data (the data may be moved in without copying).
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] for a dtype outside [`dtypes`](Backend::dtypes).
    #[allow(clippy::wrong_self_convention)] // the backend value is a device handle
    fn from_host(&self, h: HostTensor) -> Result<Self::Tensor>;

    /// Permuted add: `C ← β·C + α·P_p(op(A))`, `dims(C)[m] = dims(A)[p[m]]`.
    ///
    /// # Errors
    /// Rank or shape mismatch (`"a"`, `"c"`), dtype (`"a"`, `"alpha"`, `"beta"`), aliasing.
    fn add(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()>;

    /// Projected permuted add: `C ← β·C + proj(α·P_p(op(A)))` where `proj` takes the real
    /// part when C is real and rounds to C's precision (ChainRules' `ProjectTo`). Any input
    /// dtype and any α are accepted; β must cast to C's dtype. Used to accumulate cotangents
    /// into primals of a narrower dtype.
    ///
    /// # Errors
    /// As [`add`](Backend::add), except that A's and α's dtypes are unconstrained.
    fn add_projected(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()>;

    /// Generalized partial trace: `C[i] ← β·C[i] + α·Σ_t op(A[J(i, t)])` (see
    /// [`TraceSpec`]): kept groups of A's axes are read on their diagonal and become C's axes,
    /// summed groups are summed over their diagonal. Covers the partial trace (`iij->j`),
    /// diagonals (`ii->i`, `bii->bi`, `iii->i`) and sums over single axes (`ij->i`).
    ///
    /// # Errors
    /// As [`add`](Backend::add), plus unequal dimensions within one group.
    fn trace(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()>;

    /// Adjoint of the trace: adds `α·op(C)` onto the diagonal of A,
    /// `A[J(i, t)] += proj(α·op(C)[i])` for every output multi-index `i` and every index `t`
    /// of the summed groups (C is broadcast over them; see [`TraceSpec`]); entries of A off
    /// the diagonal of any group are unchanged. `proj` is the projection of [`add_projected`](Backend::add_projected)
    /// (real part for a real A, rounding to A's precision). This is the trace pullback written
    /// directly onto the diagonal, without the dense identity tensor that TensorOperations.jl
    /// contracts with ([`crate::math`]).
    ///
    /// # Errors
    /// Shapes as [`trace`](Backend::trace) with the roles of A and C; aliasing.
    fn add_to_diagonal(
        &self,
        a: &mut Self::Tensor,
        c: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
    ) -> Result<()>;

    /// Pairwise contraction: `C ← β·C + α·P_{pAB}(op(A)·op(B))` (see [`ContractSpec`]),
    /// one product per index of the batch axes (labels in A, B and C).
    ///
    /// # Errors
    /// Rank or shape mismatch (`"a"`, `"b"`, `"c"`), dtype, aliasing of C with A or B.
    #[allow(clippy::too_many_arguments)]
    fn contract(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        b: &Self::Tensor,
        spec: &ContractSpec,
        conj_a: Conj,
        conj_b: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()>;

    /// Inner product `⟨X, Y⟩ = Σ conj(X)·Y` (conjugate-linear in X), in the joined dtype of
    /// X and Y.
    ///
    /// # Errors
    /// [`crate::Error::ShapeMismatch`] naming `"y"` when the shapes differ.
    fn inner(&self, x: &Self::Tensor, y: &Self::Tensor) -> Result<DynScalar>;

    /// In-place scaling `T ← s·T` (a zero `s` is a strong zero: NaN in T does not leak).
    ///
    /// # Errors
    /// [`crate::Error::DTypeMismatch`] for a complex `s` and a real T.
    fn scale(&self, t: &mut Self::Tensor, s: DynScalar) -> Result<()>;

    /// The single value of a rank-0 tensor.
    ///
    /// # Errors
    /// [`crate::Error::RankMismatch`] naming `"tensor"` when the rank is not 0.
    fn scalar(&self, t: &Self::Tensor) -> Result<DynScalar>;

    /// `true` when every element of `t` is finite (no NaN, no ±∞): the test behind the
    /// finite-output policy of the rules ([`crate::finite`]). The default needs nothing but
    /// the primitives, so it runs on the backend's device: `D = T − T` by two
    /// [`add`](Backend::add)s (an exact 0 for a finite element, NaN otherwise, so nothing
    /// overflows), then `⟨D, D⟩ = 0`. Backends override it with a direct scan.
    ///
    /// # Errors
    /// The errors of the primitives it calls (a dtype the backend does not store).
    fn all_finite(&self, t: &Self::Tensor) -> Result<bool> {
        let (dims, dtype) = (self.dims(t), self.dtype(t));
        let id = Permutation::identity(dims.len());
        let mut d = self.empty(&dims, dtype)?;
        let (one, zero) = (DynScalar::one(dtype), DynScalar::zero(dtype));
        self.add(&mut d, t, &id, Conj::No, one, zero)?;
        self.add(&mut d, t, &id, Conj::No, DynScalar::F64(-1.0), one)?;
        Ok(self.inner(&d, &d)?.is_zero())
    }

    /// Singular value decomposition `[U, S, Vh]` of `a: [batch…, m, n]` (shapes in
    /// [`SvdMode`]); `S` real, non-increasing. The default copies `a` to the host and calls
    /// faer ([`linalg::host_svd`]); a backend with a device SVD overrides it, keeping those
    /// conventions. The rules are in [`crate::linalg`].
    ///
    /// # Errors
    /// As [`linalg::svd`].
    fn svd(&self, a: &Self::Tensor, mode: SvdMode) -> Result<[Self::Tensor; 3]> {
        via_host(self, a, |h| linalg::host_svd(h, mode))
    }

    /// QR decomposition `[Q, R]` of `a: [batch…, m, n]` (shapes in [`QrMode`]), the diagonal
    /// of `R` real and non-negative ([`linalg::Qr`]). Default: faer on the host
    /// ([`linalg::host_qr`]).
    ///
    /// # Errors
    /// As [`linalg::qr`].
    fn qr(&self, a: &Self::Tensor, mode: QrMode) -> Result<[Self::Tensor; 2]> {
        via_host(self, a, |h| linalg::host_qr(h, mode))
    }

    /// Hermitian eigendecomposition `[λ, V]` of `a: [batch…, n, n]`, eigenvalues real and
    /// non-decreasing, eigenvectors as columns. Default: faer on the host
    /// ([`linalg::host_eigh`]).
    ///
    /// # Errors
    /// As [`linalg::eigh`].
    fn eigh(&self, a: &Self::Tensor) -> Result<[Self::Tensor; 2]> {
        via_host(self, a, linalg::host_eigh)
    }

    /// The lower Cholesky factor `L` of the Hermitian part `(A + Aᴴ)/2` of
    /// `a: [batch…, n, n]` (real, positive diagonal; zeros above it). Default: faer on the
    /// host ([`linalg::host_cholesky`]).
    ///
    /// # Errors
    /// As [`linalg::cholesky`].
    fn cholesky(&self, a: &Self::Tensor) -> Result<Self::Tensor> {
        via_host(self, a, |h| linalg::host_cholesky(h).map(|l| [l])).map(|[l]| l)
    }

    /// LU with partial pivoting `[P, L, U]`, `A = P·L·U`, of `a: [batch…, m, n]` (shapes in
    /// [`linalg::host_lu`], PyTorch's `linalg.lu`). Default: faer on the host
    /// ([`linalg::host_lu`]); an override must return a `P` that is a permutation matrix.
    ///
    /// # Errors
    /// As [`linalg::host_lu`].
    fn lu(&self, a: &Self::Tensor) -> Result<[Self::Tensor; 3]> {
        via_host(self, a, linalg::host_lu)
    }
}

/// The `Backend` trait's default decompositions, on the host.
fn via_host<B: Backend, const N: usize>(
    be: &B,
    a: &B::Tensor,
    f: impl FnOnce(&HostTensor) -> Result<[HostTensor; N]>,
) -> Result<[B::Tensor; N]> {
    let outs = f(&be.to_host(a)?)?;
    let mut res = Vec::with_capacity(N);
    for h in outs {
        res.push(be.from_host(h)?);
    }
    res.try_into()
        .map_err(|_| Error::invalid("decomposition", "wrong number of factors"))
}
