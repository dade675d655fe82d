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
//! environment variable `ADRULES_CACHE_BYTES`, read at first use: a size as [`parse_size`]
//! reads it, such as `268435456`, `256MiB` or `1.5 GiB`; `0` turns the cache off). A value
//! that is not a size is reported on standard error at first use, and by [`env_limit`] as a
//! typed error; the default bound then applies.
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

/// The environment variable that bounds the cache.
pub const ENV_VAR: &str = "ADRULES_CACHE_BYTES";

/// Parses a size in bytes: a whole number of bytes (`268435456`, `268435456 B`), or a number
/// with a binary unit `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024) or a decimal one `kB`,
/// `MB`, `GB`, `TB` (powers of 1000); units in any case, spaces allowed around the number,
/// a decimal fraction allowed with a unit (`1.5GiB`; rounded down to whole bytes). `what`
/// names the value in the error.
///
/// # Errors
/// [`Error::InvalidArgument`](adrules_core::Error::InvalidArgument) naming `what` for
/// anything else: a sign, an exponent (`1e9`), hexadecimal, a bare `K`/`M`/`G` (ambiguous
/// between 1000 and 1024), an unknown unit, or a size beyond `usize::MAX`.
pub fn parse_size(what: &str, text: &str) -> adrules_core::Result<usize> {
    let invalid = |why: &str| {
        adrules_core::Error::invalid(
            what,
            format!(
                "{text:?} is not a size: {why} (expected bytes, e.g. `268435456`, or a number \
                 with KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ),
        )
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || number.ends_with('.') {
        return Err(invalid("no number of the form 123 or 1.5"));
    }
    let multiplier: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "m" | "g" | "t" => {
            return Err(invalid("a bare K, M, G or T is ambiguous, write KiB or kB"));
        }
        _ => return Err(invalid(&format!("unknown unit {unit:?}"))),
    };
    if !fraction.is_empty() && multiplier == 1 {
        return Err(invalid("a fraction of a byte"));
    }
    let too_large = || invalid(&format!("larger than {} bytes", usize::MAX));
    let whole: u128 = whole.parse().map_err(|_| too_large())?;
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        // 12 digits resolve a byte of a TiB
        let digits = &fraction[..fraction.len().min(12)];
        let numerator: u128 = digits.parse().map_err(|_| invalid("a bad fraction"))?;
        bytes = bytes
            .checked_add(numerator * multiplier / 10u128.pow(digits.len() as u32))
            .ok_or_else(too_large)?;
    }
    usize::try_from(bytes).map_err(|_| too_large())
}

/// The bound that [`ENV_VAR`] asks for: `Ok(None)` when it is not set or empty.
///
/// # Errors
/// [`Error::InvalidArgument`](adrules_core::Error::InvalidArgument) when the variable's
/// value is not a size ([`parse_size`]) or not Unicode.
pub fn env_limit() -> adrules_core::Result<Option<usize>> {
    match std::env::var(ENV_VAR) {
        // set but empty (`ADRULES_CACHE_BYTES= cmd`): as if unset
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => parse_size(ENV_VAR, &v).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(adrules_core::Error::invalid(
            ENV_VAR,
            format!("{v:?} is not Unicode"),
        )),
    }
}

fn default_limit() -> usize {
    match env_limit() {
        Ok(limit) => limit.unwrap_or(DEFAULT_LIMIT),
        Err(e) => {
            // Read at the first large allocation, which has no error channel: said once.
            eprintln!("adrules-strided: {e}; the buffer cache keeps its default bound of 1 GiB");
            DEFAULT_LIMIT
        }
    }
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
