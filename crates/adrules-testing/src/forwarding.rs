//! [`Forwarding`]: a [`Backend`] that delegates every primitive to an inner backend and calls a
//! [`Hook`] around each call, for tests that count what the rules ask of a backend or inject a
//! defect into one primitive.
//!
//! Writing such a test backend by hand means forwarding every method of the trait, and
//! touching it again whenever a primitive is added. Here the forwarding is written once: a test
//! implements only the [`Hook`] methods it needs.
//!
//! ```
//! use adrules_core::{Backend, DType, DynScalar, HostTensor};
//! use adrules_testing::forwarding::{Call, Counter, Forwarding, Hook, Primitive};
//! use adrules_testing::ReferenceBackend;
//!
//! // Count calls: `Counter` is a ready-made hook.
//! let be = Forwarding::new(ReferenceBackend, Counter::default());
//! let t = be.from_host(HostTensor::from_vec(&[2], vec![1.0f64, 2.0]).unwrap()).unwrap();
//! assert_eq!(be.inner(&t, &t).unwrap().re(), 5.0);
//! assert_eq!(be.hook.count(Primitive::Inner), 1);
//! assert_eq!(be.hook.count(Primitive::FromHost), 1);
//!
//! // Inject a defect: every α of `add` doubled.
//! #[derive(Clone, Debug)]
//! struct DoubledAlpha;
//! impl Hook for DoubledAlpha {
//!     fn before(&self, call: &mut Call) -> adrules_core::Result<()> {
//!         if call.primitive == Primitive::Add {
//!             call.alpha = call.alpha.map(|a| a * DynScalar::from(2.0));
//!         }
//!         Ok(())
//!     }
//! }
//! let be = Forwarding::new(ReferenceBackend, DoubledAlpha);
//! let mut c = be.zeros(&[2], DType::F64).unwrap();
//! let p = adrules_core::Permutation::identity(1);
//! be.add(&mut c, &t, &p, adrules_core::Conj::No, 1.0.into(), 0.0.into()).unwrap();
//! assert_eq!(be.to_host(&c).unwrap().as_slice::<f64>().unwrap(), &[2.0, 4.0]);
//! ```

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use adrules_core::linalg::{QrMode, SvdMode};
use adrules_core::{
    Backend, Conj, ContractSpec, DType, Dims, DynScalar, HostTensor, Permutation, Result, TraceSpec,
};

/// The methods of [`Backend`] that [`Forwarding`] reports to its [`Hook`] (the shape and dtype
/// queries `name`, `dtypes`, `dims`, `dtype`, `rank` are forwarded silently).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// [`Backend::zeros`]
    Zeros,
    /// [`Backend::empty`]
    Empty,
    /// [`Backend::to_host`]
    ToHost,
    /// [`Backend::from_host`]
    FromHost,
    /// [`Backend::add`]
    Add,
    /// [`Backend::add_projected`]
    AddProjected,
    /// [`Backend::trace`]
    Trace,
    /// [`Backend::add_to_diagonal`]
    AddToDiagonal,
    /// [`Backend::contract`]
    Contract,
    /// [`Backend::inner`]
    Inner,
    /// [`Backend::scale`]
    Scale,
    /// [`Backend::scalar`]
    Scalar,
    /// [`Backend::svd`]
    Svd,
    /// [`Backend::qr`]
    Qr,
    /// [`Backend::eigh`]
    Eigh,
}

impl Primitive {
    /// Every reported method, in declaration order.
    pub const ALL: [Primitive; 15] = [
        Primitive::Zeros,
        Primitive::Empty,
        Primitive::ToHost,
        Primitive::FromHost,
        Primitive::Add,
        Primitive::AddProjected,
        Primitive::Trace,
        Primitive::AddToDiagonal,
        Primitive::Contract,
        Primitive::Inner,
        Primitive::Scale,
        Primitive::Scalar,
        Primitive::Svd,
        Primitive::Qr,
        Primitive::Eigh,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// One call as the hook sees it before it reaches the inner backend: the method and the
/// arguments a defect may change. A field the method does not take is `None` (`alpha`,
/// `beta`: the coefficients of the BLAS-style updates, and `s` of [`Backend::scale`] as
/// `alpha`) or `Conj::No` (`conj[0]` is the flag of A, `conj[1]` that of B in a contraction).
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// the method called
    pub primitive: Primitive,
    /// conjugation flags: `[conj]` of add, add_projected, trace, add_to_diagonal in slot 0;
    /// `[conj_a, conj_b]` of contract
    pub conj: [Conj; 2],
    /// α of the updates, `s` of `scale`
    pub alpha: Option<DynScalar>,
    /// β of the updates
    pub beta: Option<DynScalar>,
}

impl Call {
    fn new(primitive: Primitive) -> Self {
        Call {
            primitive,
            conj: [Conj::No; 2],
            alpha: None,
            beta: None,
        }
    }

    fn update(primitive: Primitive, conj: [Conj; 2], alpha: DynScalar, beta: DynScalar) -> Self {
        Call {
            primitive,
            conj,
            alpha: Some(alpha),
            beta: Some(beta),
        }
    }
}

/// What a test does around each primitive of [`Forwarding`]. Every method has a default that
/// changes nothing.
pub trait Hook: Clone + Debug {
    /// Called before the inner backend's method, with the arguments it will get; may change
    /// them (a hook may not remove a coefficient: a `None` set where a method takes one is
    /// ignored), or refuse the call with an error, which the method returns unchanged.
    ///
    /// # Errors
    /// Whatever the hook returns.
    fn before(&self, call: &mut Call) -> Result<()> {
        let _ = call;
        Ok(())
    }

    /// Called with the value that [`Backend::inner`] or [`Backend::scalar`] returned; what it
    /// returns is the method's result.
    fn scalar_result(&self, primitive: Primitive, value: DynScalar) -> DynScalar {
        let _ = primitive;
        value
    }
}

/// A hook that changes nothing: [`Forwarding`] with it is its inner backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHook;

impl Hook for NoHook {}

/// A hook that counts the calls of each [`Primitive`] (shared by clones: a backend and the
/// pullbacks that keep a clone of it count into the same counters). Thread-safe.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<[AtomicUsize; 15]>);

impl Counter {
    /// Calls of `p` since creation or the last [`reset`](Counter::reset).
    pub fn count(&self, p: Primitive) -> usize {
        self.0[p.index()].load(Ordering::SeqCst)
    }

    /// `(to_host, from_host)` calls: the tensors copied between the host and the backend.
    pub fn transfers(&self) -> (usize, usize) {
        (
            self.count(Primitive::ToHost),
            self.count(Primitive::FromHost),
        )
    }

    /// Sets every count to zero.
    pub fn reset(&self) {
        for c in self.0.iter() {
            c.store(0, Ordering::SeqCst);
        }
    }
}

impl Hook for Counter {
    fn before(&self, call: &mut Call) -> Result<()> {
        self.0[call.primitive.index()].fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A backend that forwards every method to `inner` (decompositions included, so an inner
/// backend's own SVD, QR or eigh is used) and calls `hook` around each primitive. Its tensors
/// are the inner backend's.
#[derive(Clone, Debug, Default)]
pub struct Forwarding<B, H> {
    /// the backend that does the work
    pub inner: B,
    /// what runs around each primitive
    pub hook: H,
}

impl<B: Backend, H: Hook> Forwarding<B, H> {
    /// `inner` with `hook` around each primitive.
    pub fn new(inner: B, hook: H) -> Self {
        Forwarding { inner, hook }
    }

    /// Runs the hook on a call without coefficients.
    fn plain(&self, primitive: Primitive) -> Result<()> {
        self.hook.before(&mut Call::new(primitive))
    }

    /// Runs the hook on an update and returns its (possibly changed) flags and coefficients.
    fn update(
        &self,
        primitive: Primitive,
        conj: [Conj; 2],
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<([Conj; 2], DynScalar, DynScalar)> {
        let mut call = Call::update(primitive, conj, alpha, beta);
        self.hook.before(&mut call)?;
        Ok((
            call.conj,
            call.alpha.unwrap_or(alpha),
            call.beta.unwrap_or(beta),
        ))
    }
}

impl<B: Backend, H: Hook> Backend for Forwarding<B, H> {
    type Tensor = B::Tensor;

    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn dtypes(&self) -> &'static [DType] {
        self.inner.dtypes()
    }
    fn dims(&self, t: &Self::Tensor) -> Dims {
        self.inner.dims(t)
    }
    fn dtype(&self, t: &Self::Tensor) -> DType {
        self.inner.dtype(t)
    }
    fn rank(&self, t: &Self::Tensor) -> usize {
        self.inner.rank(t)
    }
    fn zeros(&self, dims: &[usize], dtype: DType) -> Result<Self::Tensor> {
        self.plain(Primitive::Zeros)?;
        self.inner.zeros(dims, dtype)
    }
    fn empty(&self, dims: &[usize], dtype: DType) -> Result<Self::Tensor> {
        self.plain(Primitive::Empty)?;
        self.inner.empty(dims, dtype)
    }
    fn to_host(&self, t: &Self::Tensor) -> Result<HostTensor> {
        self.plain(Primitive::ToHost)?;
        self.inner.to_host(t)
    }
    fn from_host(&self, h: HostTensor) -> Result<Self::Tensor> {
        self.plain(Primitive::FromHost)?;
        self.inner.from_host(h)
    }
    fn add(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let ([conj, _], alpha, beta) =
            self.update(Primitive::Add, [conj, Conj::No], alpha, beta)?;
        self.inner.add(c, a, p, conj, alpha, beta)
    }
    fn add_projected(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        p: &Permutation,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let ([conj, _], alpha, beta) =
            self.update(Primitive::AddProjected, [conj, Conj::No], alpha, beta)?;
        self.inner.add_projected(c, a, p, conj, alpha, beta)
    }
    fn trace(
        &self,
        c: &mut Self::Tensor,
        a: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
        beta: DynScalar,
    ) -> Result<()> {
        let ([conj, _], alpha, beta) =
            self.update(Primitive::Trace, [conj, Conj::No], alpha, beta)?;
        self.inner.trace(c, a, spec, conj, alpha, beta)
    }
    fn add_to_diagonal(
        &self,
        a: &mut Self::Tensor,
        c: &Self::Tensor,
        spec: &TraceSpec,
        conj: Conj,
        alpha: DynScalar,
    ) -> Result<()> {
        let mut call = Call {
            alpha: Some(alpha),
            conj: [conj, Conj::No],
            ..Call::new(Primitive::AddToDiagonal)
        };
        self.hook.before(&mut call)?;
        let alpha = call.alpha.unwrap_or(alpha);
        self.inner.add_to_diagonal(a, c, spec, call.conj[0], alpha)
    }
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
    ) -> Result<()> {
        let ([conj_a, conj_b], alpha, beta) =
            self.update(Primitive::Contract, [conj_a, conj_b], alpha, beta)?;
        self.inner
            .contract(c, a, b, spec, conj_a, conj_b, alpha, beta)
    }
    fn inner(&self, x: &Self::Tensor, y: &Self::Tensor) -> Result<DynScalar> {
        self.plain(Primitive::Inner)?;
        let v = self.inner.inner(x, y)?;
        Ok(self.hook.scalar_result(Primitive::Inner, v))
    }
    fn scale(&self, t: &mut Self::Tensor, s: DynScalar) -> Result<()> {
        let mut call = Call {
            alpha: Some(s),
            ..Call::new(Primitive::Scale)
        };
        self.hook.before(&mut call)?;
        self.inner.scale(t, call.alpha.unwrap_or(s))
    }
    fn scalar(&self, t: &Self::Tensor) -> Result<DynScalar> {
        self.plain(Primitive::Scalar)?;
        let v = self.inner.scalar(t)?;
        Ok(self.hook.scalar_result(Primitive::Scalar, v))
    }
    /// Forwarded uncounted and unhooked: the finite-output check is a query of the rules,
    /// not a primitive call.
    fn all_finite(&self, t: &Self::Tensor) -> Result<bool> {
        self.inner.all_finite(t)
    }
    fn svd(&self, a: &Self::Tensor, mode: SvdMode) -> Result<[Self::Tensor; 3]> {
        self.plain(Primitive::Svd)?;
        self.inner.svd(a, mode)
    }
    fn qr(&self, a: &Self::Tensor, mode: QrMode) -> Result<[Self::Tensor; 2]> {
        self.plain(Primitive::Qr)?;
        self.inner.qr(a, mode)
    }
    fn eigh(&self, a: &Self::Tensor) -> Result<[Self::Tensor; 2]> {
        self.plain(Primitive::Eigh)?;
        self.inner.eigh(a)
    }
}
