//! The process-wide buffer cache: large buffers that nothing refers to any more, kept for the
//! next allocation of the same size instead of going back to the operating system.
//!
//! # Why
//! A large buffer (tens of MiB and up) is mapped fresh from the operating system on every
//! allocation and unmapped when freed, so every new output pays one page fault per 4 KiB page
//! on first touch: a permutation of a 64⁴ f64 tensor (128 MiB) into a fresh output measured
//! about 5× the same permutation into an existing one on the development machine. The cache
//! keeps such buffers mapped: a [`Tensor`](crate::Tensor) whose buffer it solely owns gives
//! the buffer here when it is dropped, and so does the scratch space of a contraction; the
//! next allocation of a buffer of the same element type and a length between the request and
//! twice the request takes it back. A [`BufferPool`](crate::BufferPool) scope takes
//! precedence (its buffers stay in the pool).
//!
//! # What it holds
//! Only buffers of at least [`MIN_BYTES`] (smaller ones are served well by the system
//! allocator) and at most [`limit`] bytes in all (1 GiB by default, or the value of the
//! environment variable `ADRULES_CACHE_BYTES`, a byte count, read at first use; `0` turns
//! the cache off; a value that is not a non-negative integer is ignored and the default applies).
//! When a buffer would exceed the limit, the oldest held buffers go back to the system
//! first. [`trim`] empties the cache, [`set_limit`] changes the bound.
//!
//! # AD safety
//! A buffer enters the cache only when its handle is the **sole owner** (`Arc` strong count
//! one, no weak reference): a tensor that a pullback, a clone or a user's `Arc` still shares
//! is never cached, so storage a live handle refers to is never handed out again. A cached
//! buffer has the values of its last use (initialised memory, never uninitialised); an
//! allocation that promises zeros fills it with zeros.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use adrules_core::DType;

use crate::hook::Recycler;
use crate::storage::Storage;

/// Smallest buffer (in bytes) the cache holds: 1 MiB.
pub const MIN_BYTES: usize = 1 << 20;

/// Default bound on the bytes held: 1 GiB.
pub const DEFAULT_LIMIT: usize = 1 << 30;

/// Counters of the process-wide cache, for tests and tuning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// allocations served by a cached buffer
    pub hits: u64,
    /// allocations of at least [`MIN_BYTES`] the cache could not serve
    pub misses: u64,
    /// buffers taken in
    pub stored: u64,
    /// buffers returned to the system to stay within the limit
    pub evicted: u64,
    /// buffers held now
    pub buffers: usize,
    /// bytes held now
    pub bytes: usize,
    /// the bound on `bytes`
    pub limit: usize,
}

struct State {
    free: VecDeque<Storage>,
    stats: CacheStats,
}

/// The cache's side of the allocation hook.
pub(crate) struct Cache(Mutex<State>);

fn bytes_of(s: &Storage) -> usize {
    s.len() * s.dtype().size_of()
}

fn default_limit() -> usize {
    std::env::var("ADRULES_CACHE_BYTES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_LIMIT)
}

/// The process-wide cache.
pub(crate) fn global() -> &'static Arc<Cache> {
    static CACHE: OnceLock<Arc<Cache>> = OnceLock::new();
    CACHE.get_or_init(|| {
        Arc::new(Cache(Mutex::new(State {
            free: VecDeque::new(),
            stats: CacheStats {
                limit: default_limit(),
                ..CacheStats::default()
            },
        })))
    })
}

impl Cache {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every statement leaves the state consistent: recover from poisoning.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Recycler for Cache {
    /// The shortest held buffer of `dtype` whose length is between `len` and `2·len`, the
    /// most recently given among equals (its pages are the likeliest to be in cache).
    fn recycle(&self, dtype: DType, len: usize) -> Option<Storage> {
        if len.saturating_mul(dtype.size_of()) < MIN_BYTES {
            return None;
        }
        let mut st = self.lock();
        let max = len.saturating_mul(2);
        let best = st
            .free
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, s)| s.dtype() == dtype && (len..=max).contains(&s.len()))
            .min_by_key(|(_, s)| s.len())
            .map(|(i, _)| i);
        match best.and_then(|i| st.free.remove(i)) {
            Some(s) => {
                st.stats.hits += 1;
                st.stats.bytes -= bytes_of(&s);
                st.stats.buffers = st.free.len();
                Some(s)
            }
            None => {
                st.stats.misses += 1;
                None
            }
        }
    }

    /// Keeps `s` when it is uniquely owned, large enough and within the limit (evicting the
    /// oldest buffers to make room); otherwise drops it.
    fn give(&self, s: Storage) {
        let size = bytes_of(&s);
        if size < MIN_BYTES || !s.is_unique() {
            return;
        }
        let evicted = {
            let mut st = self.lock();
            let Some(room) = st.stats.limit.checked_sub(size) else {
                return;
            };
            let evicted = st.evict_to(room);
            st.stats.bytes += size;
            st.stats.stored += 1;
            st.free.push_back(s);
            st.stats.buffers = st.free.len();
            evicted
        };
        // the evicted buffers are freed here, outside the lock
        drop(evicted);
    }
}

impl State {
    /// Removes the oldest held buffers until at most `bytes` are held, and returns them (for
    /// the caller to free outside the lock).
    fn evict_to(&mut self, bytes: usize) -> Vec<Storage> {
        let mut evicted = Vec::new();
        while self.stats.bytes > bytes {
            let Some(old) = self.free.pop_front() else {
                break;
            };
            self.stats.bytes -= bytes_of(&old);
            self.stats.evicted += 1;
            evicted.push(old);
        }
        self.stats.buffers = self.free.len();
        evicted
    }
}

/// Current counters of the process-wide cache.
pub fn stats() -> CacheStats {
    let st = global().lock();
    let mut s = st.stats;
    s.buffers = st.free.len();
    s
}

/// The bound on the bytes the cache holds.
pub fn limit() -> usize {
    global().lock().stats.limit
}

/// Sets the bound on the bytes the cache holds (`0` turns it off) and returns the previous
/// one; buffers beyond the new bound go back to the system, oldest first.
pub fn set_limit(bytes: usize) -> usize {
    let (previous, evicted) = {
        let mut st = global().lock();
        let previous = std::mem::replace(&mut st.stats.limit, bytes);
        (previous, st.evict_to(bytes))
    };
    drop(evicted);
    previous
}

/// Returns every cached buffer to the system.
pub fn trim() {
    let freed = global().lock().evict_to(0);
    drop(freed);
}
