//! [`BufferPool`]: a pooling [`Allocator`] for the strided backend that recycles buffers and
//! stays safe under automatic differentiation.
//!
//! # What it recycles
//! - **Tensors** allocated through [`Allocator::allocate`] (the intermediates of a network
//!   plan, its result) and, inside [`Allocator::scope`], every buffer the backend creates
//!   itself: [`Backend::zeros`](adrules_core::Backend::zeros), copy-on-write copies and the
//!   scratch buffers of a contraction (the packed operands and the GEMM output of TTGT). The
//!   pool hands out whole `Arc<Vec<T>>` buffers, reference count included, so a steady-state
//!   loop (the same plan executed again) makes no heap allocation at all.
//! - A request is served by a held buffer of the same element type whose length is between
//!   the request and twice the request (a larger buffer is not wasted on a small tensor);
//!   otherwise a fresh zeroed buffer comes from the system allocator. A recycled buffer is
//!   zero-filled only where zeros are promised (`Backend::zeros`); allocations and scratch
//!   space have unspecified (but initialised) contents, written with `β = 0`.
//!
//! # AD safety (see [`adrules_core::alloc`])
//! The pool reuses a buffer only when it is the buffer's **sole owner**: its `Arc` strong
//! count is one and no weak reference exists. [`free`](Allocator::free) takes a tensor
//! handle; when another handle still shares the buffer (a network pullback that kept the
//! intermediate, a clone the caller kept), the free is **deferred**: the pool keeps its
//! handle aside and reclaims the buffer only once every other handle is gone. A deferred
//! buffer is never written by the pool, and writers of the other handles see a shared buffer
//! and copy on write, so nobody observes a change. [`reset`](Allocator::reset) sweeps the
//! deferred buffers under the same test, and nothing else reclaims storage: there is no arena
//! to rewind and no "free by position", which is how bump allocators recycle memory that a
//! pullback still reads (TensorOperations.jl issue 169 and the entry points PR 170 missed).
//!
//! # Memory
//! The pool keeps every buffer given back to it until [`BufferPool::trim`] or until the last
//! handle of the pool is dropped. A tensor dropped (instead of freed) inside the pool's
//! [`scope`](BufferPool::scope) on the same thread gives its buffer to the pool too, when no
//! other handle shares it; dropped elsewhere, its memory goes to the process-wide
//! [`cache`](crate::cache) or back to the system.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use adrules_core::alloc::Checkpoint;
use adrules_core::{Allocator, DType, Error, Result};

use crate::backend::Strided;
use crate::dispatch::with_type;
use crate::element::private::Sealed;
use crate::hook::{self, Recycler};
use crate::layout;
use crate::storage::Storage;
use crate::tensor::Tensor;

/// Counters of a [`BufferPool`], for tests and tuning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// buffers obtained from the system allocator
    pub fresh: u64,
    /// requests served by a recycled buffer
    pub reused: u64,
    /// frees deferred because another handle still shared the buffer
    pub deferred_frees: u64,
    /// buffers held for reuse
    pub free_buffers: usize,
    /// bytes held for reuse
    pub free_bytes: usize,
    /// buffers freed while shared, waiting for their other handles to be dropped
    pub deferred_buffers: usize,
}

#[derive(Default)]
struct State {
    free: Vec<Storage>,
    deferred: Vec<Storage>,
    stats: PoolStats,
    /// allocations made through [`Allocator::allocate`], the position of a checkpoint
    allocations: u64,
}

impl State {
    /// Moves the deferred buffers whose other handles are gone to the free list.
    fn sweep(&mut self) {
        let mut i = 0;
        while i < self.deferred.len() {
            if self.deferred[i].is_unique() {
                let s = self.deferred.swap_remove(i);
                self.free.push(s);
            } else {
                i += 1;
            }
        }
    }
}

/// A pool of reusable buffers for the strided backend; a cheap handle (clones share the
/// pool). Thread-safe. See the [module docs](self) for what it recycles and why it is safe
/// under AD.
#[derive(Clone, Default)]
pub struct BufferPool {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("stats", &self.stats())
            .finish()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state stays consistent between statements, so a panic elsewhere cannot have left
    // it half-updated: recover from poisoning.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pool's side of the allocation hook: [`BufferPool::scope`] installs the shared state
/// itself (no new allocation per scope).
impl Recycler for Mutex<State> {
    /// The shortest held buffer of `dtype` whose length is between `len` and `2·len` (a
    /// larger buffer is not wasted on a small tensor).
    fn recycle(&self, dtype: DType, len: usize) -> Option<Storage> {
        let mut st = lock(self);
        st.sweep();
        let max = len.saturating_mul(2);
        let best = st
            .free
            .iter()
            .enumerate()
            .filter(|(_, s)| s.dtype() == dtype)
            .map(|(i, s)| (i, s.len()))
            .filter(|&(_, n)| n >= len && n <= max)
            .min_by_key(|&(_, n)| n)
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                st.stats.reused += 1;
                Some(st.free.swap_remove(i))
            }
            None => {
                st.stats.fresh += 1;
                None
            }
        }
    }

    /// Into the free list when the pool is now the buffer's sole owner, else into the
    /// deferred list (see the module docs).
    fn give(&self, s: Storage) {
        let mut st = lock(self);
        if s.is_unique() {
            st.free.push(s);
        } else {
            st.stats.deferred_frees += 1;
            st.deferred.push(s);
        }
    }
}

impl BufferPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Current counters.
    pub fn stats(&self) -> PoolStats {
        let mut st = self.lock();
        st.sweep();
        let mut s = st.stats;
        s.free_buffers = st.free.len();
        s.free_bytes = st.free.iter().map(|b| b.len() * b.dtype().size_of()).sum();
        s.deferred_buffers = st.deferred.len();
        s
    }

    /// Returns every free buffer to the system allocator (deferred buffers stay until their
    /// other handles are dropped).
    pub fn trim(&self) {
        let mut st = self.lock();
        st.sweep();
        st.free.clear();
        st.free.shrink_to_fit();
    }

    /// Runs `f` with this pool installed on the current thread: the strided backend then
    /// takes its own buffers (new tensors, copy-on-write copies, contraction scratch space)
    /// from the pool. Scopes nest; the previous pool is restored when `f` returns or unwinds.
    /// Work that `f` hands to other threads (rayon tasks) allocates normally.
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        hook::scope(self.state.clone(), f)
    }
}

impl Allocator<Strided> for BufferPool {
    fn allocate(
        &self,
        _be: &Strided,
        dims: &[usize],
        dtype: DType,
        _lifetime: adrules_core::alloc::Lifetime,
    ) -> Result<Tensor> {
        let n = layout::numel(dims)?;
        self.lock().allocations += 1;
        let strides = layout::row_major_strides(dims);
        with_type!(dtype, T => {
            let buf = hook::take::<T>(&*self.state, n, false)?;
            Tensor::from_storage(T::into_storage(buf), dims, &strides, 0)
        })
    }

    fn free(&self, t: Tensor) {
        self.state.give(t.into_storage());
    }

    fn checkpoint(&self) -> Checkpoint {
        Checkpoint::new(self.lock().allocations)
    }

    fn reset(&self, checkpoint: Checkpoint) -> Result<()> {
        let mut st = self.lock();
        if checkpoint.position() > st.allocations {
            return Err(Error::invalid(
                "checkpoint",
                format!(
                    "position {} is ahead of this pool ({} allocations so far)",
                    checkpoint.position(),
                    st.allocations
                ),
            ));
        }
        st.sweep();
        Ok(())
    }

    fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        BufferPool::scope(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::Scratch;
    use adrules_core::Backend;
    use adrules_core::alloc::Lifetime;

    #[test]
    fn recycles_only_what_it_solely_owns() {
        let (be, pool) = (Strided, BufferPool::new());
        let t = pool
            .allocate(&be, &[4, 5], DType::F64, Lifetime::Temporary)
            .unwrap();
        let ptr = t.view::<f64>().unwrap().as_ptr();
        let kept = t.clone(); // e.g. a pullback's handle
        pool.free(t);
        assert_eq!(pool.stats().deferred_buffers, 1);
        let u = pool
            .allocate(&be, &[4, 5], DType::F64, Lifetime::Temporary)
            .unwrap();
        assert_ne!(
            u.view::<f64>().unwrap().as_ptr(),
            ptr,
            "a shared buffer was recycled"
        );
        drop(kept);
        pool.reset(pool.checkpoint()).unwrap();
        let s = pool.stats();
        assert_eq!((s.deferred_buffers, s.free_buffers), (0, 1));
        let w = pool
            .allocate(&be, &[20], DType::F64, Lifetime::Temporary)
            .unwrap();
        assert_eq!(
            w.view::<f64>().unwrap().as_ptr(),
            ptr,
            "a free buffer was not recycled"
        );
        assert!(pool.reset(Checkpoint::new(99)).is_err());
        drop((u, w));
    }

    #[test]
    fn scope_routes_zeros_and_scratch_and_zero_fills() {
        let (be, pool) = (Strided, BufferPool::new());
        let mut t = pool
            .allocate(&be, &[3, 3], DType::C32, Lifetime::Temporary)
            .unwrap();
        let ones =
            Tensor::from_vec(&[3, 3], vec![adrules_core::Complex32::new(1.0, 1.0); 9]).unwrap();
        let id = adrules_core::Permutation::identity(2);
        be.add(
            &mut t,
            &ones,
            &id,
            adrules_core::Conj::No,
            1.0f32.into(),
            0.0f32.into(),
        )
        .unwrap();
        pool.free(t);
        let z = pool.scope(|| be.zeros(&[9], DType::C32)).unwrap();
        assert_eq!(pool.stats().reused, 1);
        assert!(
            z.to_vec::<adrules_core::Complex32>()
                .unwrap()
                .iter()
                .all(|x| x.norm() == 0.0)
        );
        let s = pool.scope(|| Scratch::<f64>::new(100)).unwrap();
        drop(s);
        assert_eq!(pool.stats().free_buffers, 1);
        assert!(hook::current().is_none(), "the scope was not restored");
        let s2 = pool.scope(|| Scratch::<f64>::new(100)).unwrap();
        drop(s2);
        assert_eq!(pool.stats().reused, 2);
    }
}
