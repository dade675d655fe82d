//! Allocators for temporaries (`tensoralloc` / `tensorfree` in TensorOperations.jl's terms),
//! and the rule that keeps them safe under automatic differentiation.
//!
//! A network contraction creates intermediates that live only until the next pairwise step
//! consumes them. An [`Allocator`] lets a backend recycle their storage (a pool, an arena)
//! instead of going through the system allocator for every step. The default,
//! [`HeapAllocator`], allocates with [`Backend::zeros`] and frees by dropping the handle.
//!
//! # The AD-safety rule
//! A recorded pullback reads what the forward pass produced: the pairwise pullback of
//! `C = A·B` reads A (for ΔB) and B (for ΔA), and in a network A and B are often
//! intermediates that the forward pass considers dead as soon as C exists. With a pooling,
//! slab or bump allocator, freeing such an intermediate in the forward pass lets the pool hand
//! its memory to the next allocation, so the backward pass reads overwritten data: a
//! use-after-free, or silently wrong gradients.
//!
//! This is [TensorOperations.jl issue 169]. [PR 170] fixed the main path by allocating
//! non-temporaries under AD and turning `tensorfree!` into a no-op inside the differentiated
//! code, but it missed other entry points: the two-argument `tensorfree!`, the allocation
//! wrappers emitted by the `@tensor` macro, and allocator checkpoint resets (Bumper's
//! `@no_escape`), which reclaim a whole region regardless of who still reads it. AD with a
//! non-default allocator therefore remains unprotected there.
//!
//! adrules makes the mistake impossible by construction instead of by convention:
//! - **Ownership**: whatever a pullback will read is owned by that pullback through a
//!   reference-counted tensor handle (`B::Tensor` is a cheap, shared handle, see
//!   [`Backend`]). The network rules in [`crate::network`] clone every intermediate a step
//!   pullback needs into that pullback before the forward pass frees its own handle.
//! - **Deferred free**: [`Allocator::free`] gives back *a handle*, not the storage. An
//!   implementation may reuse the storage only once no other handle refers to it (for
//!   `Arc`-backed storage: the allocator is the sole owner). A free while a pullback holds a
//!   clone is therefore deferred until that pullback is dropped.
//! - **Resets**: [`Allocator::reset`] releases the allocator's claim on what was allocated
//!   since a [`Checkpoint`], under the same rule: storage that a live handle still reaches
//!   stays alive with that handle and is never recycled behind its back.
//!
//! Every entry point (allocate, free, checkpoint, reset, and every executor that calls them)
//! goes through this one rule, so there is no path on which a pullback's data can be
//! recycled. Implementations must keep it: it is part of the trait's contract.
//!
//! [TensorOperations.jl issue 169]: https://github.com/QuantumKitHub/TensorOperations.jl/issues/169
//! [PR 170]: https://github.com/QuantumKitHub/TensorOperations.jl/pull/170

use crate::backend::Backend;
use crate::error::Result;
use crate::scalar::DType;

/// How long an allocation is expected to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lifetime {
    /// An intermediate that the caller gives back with [`Allocator::free`] (or that a
    /// [`Allocator::reset`] releases) once it is consumed.
    Temporary,
    /// A result that escapes to the caller.
    Persistent,
}

/// A position in an allocator's history, returned by [`Allocator::checkpoint`] and consumed by
/// [`Allocator::reset`]. The number is opaque to callers; allocators give it meaning (for
/// example a count of allocations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Checkpoint(u64);

impl Checkpoint {
    /// Wraps an allocator-defined position.
    pub fn new(position: u64) -> Self {
        Checkpoint(position)
    }

    /// The allocator-defined position.
    pub fn position(self) -> u64 {
        self.0
    }
}

/// Source of tensor storage for intermediates (`tensoralloc` / `tensorfree`).
///
/// Methods take `&self`: an allocator is shared (by the executor, by pullbacks) and keeps
/// its state behind interior mutability.
///
/// # Contract (AD safety, see the module docs)
/// Storage that some live handle still refers to is never handed out again, whatever the
/// sequence of [`free`](Allocator::free) and [`reset`](Allocator::reset) calls.
pub trait Allocator<B: Backend> {
    /// A tensor of shape `dims` and element type `dtype`.
    ///
    /// The elements are unspecified (zeros, or values of an earlier use of the storage, but
    /// never uninitialised memory): write it with `β = 0`, which the primitives treat as a
    /// strong zero.
    ///
    /// # Errors
    /// As [`Backend::zeros`] (a dtype the backend does not store).
    fn allocate(
        &self,
        be: &B,
        dims: &[usize],
        dtype: DType,
        lifetime: Lifetime,
    ) -> Result<B::Tensor>;

    /// Gives a handle back. The storage becomes reusable once no other handle refers to it;
    /// while a pullback (or anyone else) holds a clone, the free is deferred.
    fn free(&self, t: B::Tensor);

    /// The current position, for a later [`reset`](Allocator::reset).
    fn checkpoint(&self) -> Checkpoint;

    /// Releases the allocator's claim on every temporary allocated since `checkpoint`.
    /// Storage still reachable from a live handle is not reclaimed: it stays alive with that
    /// handle (AD safety).
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] (argument `"checkpoint"`) for a checkpoint this
    /// allocator cannot return to (one taken after a later reset, or by another allocator).
    fn reset(&self, checkpoint: Checkpoint) -> Result<()>;

    /// Runs `f` with this allocator as the source of the buffers a backend creates by itself
    /// (new tensors, copy-on-write copies, scratch space of its kernels), for backends that
    /// support it; the executors of [`crate::network`] run every plan inside it. The default
    /// just runs `f`.
    fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// The default allocator: every allocation is a fresh [`Backend::zeros`], a free drops the
/// handle, checkpoints and resets do nothing. Safe under AD trivially, since storage lives
/// exactly as long as its last handle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapAllocator;

impl<B: Backend> Allocator<B> for HeapAllocator {
    fn allocate(
        &self,
        be: &B,
        dims: &[usize],
        dtype: DType,
        _lifetime: Lifetime,
    ) -> Result<B::Tensor> {
        be.empty(dims, dtype)
    }

    fn free(&self, t: B::Tensor) {
        drop(t);
    }

    fn checkpoint(&self) -> Checkpoint {
        Checkpoint(0)
    }

    fn reset(&self, _checkpoint: Checkpoint) -> Result<()> {
        Ok(())
    }
}
