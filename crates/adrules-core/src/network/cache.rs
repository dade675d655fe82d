//! [`PlanCache`]: plans of Einstein strings reused across calls with the same shapes.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::plan::NetworkPlan;
use super::structure::Network;
use super::tree::Order;
use crate::error::{Error, Result};
use crate::spec::Dims;

/// One cached plan and the key it was planned for.
struct Entry {
    subscripts: Box<str>,
    dims: Vec<Dims>,
    plan: Arc<NetworkPlan>,
}

#[derive(Default)]
struct Inner {
    /// entries by the hash of their key (collisions share a bucket)
    buckets: HashMap<u64, Vec<Entry>>,
    /// hashes in insertion order, for eviction
    order: VecDeque<u64>,
    len: usize,
}

/// A bounded, thread-safe cache of [`NetworkPlan`]s of Einstein strings, keyed by the string
/// and the operand shapes (plans do not depend on dtypes: intermediates take the joined dtype
/// of what they contract at execution time). A hit costs one hash of the string and shapes,
/// one lock and no allocation; the plan is shared as an [`Arc`].
///
/// Eviction is first-in first-out once [`capacity`](Self::capacity) plans are held. Errors
/// (parse, label and shape errors) are returned every time and never cached.
///
/// [`einsum`](super::einsum) and every adapter's `einsum` use [`PlanCache::global`].
pub struct PlanCache {
    capacity: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .field("hits", &self.hits())
            .field("misses", &self.misses())
            .finish()
    }
}

fn key_hash<D: AsRef<[usize]>>(subscripts: &str, dims: &[D]) -> u64 {
    let mut h = DefaultHasher::new();
    subscripts.hash(&mut h);
    dims.len().hash(&mut h);
    for d in dims {
        d.as_ref().hash(&mut h);
    }
    h.finish()
}

impl PlanCache {
    /// Capacity of [`PlanCache::global`].
    pub const GLOBAL_CAPACITY: usize = 256;

    /// An empty cache holding at most `capacity` plans (`0` disables caching).
    pub fn new(capacity: usize) -> Self {
        PlanCache {
            capacity,
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The process-wide cache ([`GLOBAL_CAPACITY`](Self::GLOBAL_CAPACITY) plans).
    pub fn global() -> &'static PlanCache {
        static GLOBAL: OnceLock<PlanCache> = OnceLock::new();
        GLOBAL.get_or_init(|| PlanCache::new(Self::GLOBAL_CAPACITY))
    }

    /// The plan of `subscripts` ([`Network::einsum`]) for operands of shapes `dims` in the
    /// default order ([`Order::Default`]), planned on the first call and shared afterwards.
    ///
    /// # Errors
    /// Those of [`Network::einsum`]; [`Error::CountMismatch`] (argument `"operands"`) when
    /// `dims` has not one shape per operand of the string; those of [`NetworkPlan::new`].
    pub fn einsum<D: AsRef<[usize]>>(
        &self,
        subscripts: &str,
        dims: &[D],
    ) -> Result<Arc<NetworkPlan>> {
        let hash = key_hash(subscripts, dims);
        let same = |e: &Entry| {
            &*e.subscripts == subscripts
                && e.dims.len() == dims.len()
                && e.dims
                    .iter()
                    .zip(dims)
                    .all(|(a, b)| a.as_slice() == b.as_ref())
        };
        {
            let inner = self.lock();
            if let Some(e) = inner
                .buckets
                .get(&hash)
                .and_then(|b| b.iter().find(|e| same(e)))
            {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(e.plan.clone());
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let network = Network::einsum(subscripts)?;
        if network.num_operands() != dims.len() {
            return Err(Error::CountMismatch {
                arg: "operands".into(),
                expected: network.num_operands(),
                actual: dims.len(),
            });
        }
        let plan = Arc::new(NetworkPlan::new(&network, dims, &Order::Default)?);
        if self.capacity == 0 {
            return Ok(plan);
        }
        let mut inner = self.lock();
        if inner.buckets.get(&hash).is_some_and(|b| b.iter().any(same)) {
            return Ok(plan); // planned concurrently by another thread
        }
        while inner.len >= self.capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(bucket) = inner.buckets.get_mut(&old) {
                bucket.remove(0);
                if bucket.is_empty() {
                    inner.buckets.remove(&old);
                }
                inner.len -= 1;
            }
        }
        inner.buckets.entry(hash).or_default().push(Entry {
            subscripts: subscripts.into(),
            dims: dims
                .iter()
                .map(|d| d.as_ref().iter().copied().collect())
                .collect(),
            plan: plan.clone(),
        });
        inner.order.push_back(hash);
        inner.len += 1;
        Ok(plan)
    }

    /// Most plans held at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Plans held now.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    /// `true` when no plan is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Lookups that had to plan so far (errors included).
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Drops every plan (the counters are kept).
    pub fn clear(&self) {
        *self.lock() = Inner::default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps inconsistent (no user code runs
        // under it), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_misses_eviction_and_errors() {
        let cache = PlanCache::new(2);
        let a = cache.einsum("ij,jk->ik", &[[2, 3], [3, 4]]).unwrap();
        let b = cache.einsum("ij,jk->ik", &[[2, 3], [3, 4]]).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((cache.hits(), cache.misses(), cache.len()), (1, 1, 1));
        // other shapes, another string: new plans; the third evicts the first
        cache.einsum("ij,jk->ik", &[[2, 3], [3, 5]]).unwrap();
        cache.einsum("ij,jk", &[[2, 3], [3, 4]]).unwrap();
        assert_eq!(cache.len(), 2);
        let c = cache.einsum("ij,jk->ik", &[[2, 3], [3, 4]]).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(cache.misses(), 4);
        // errors are typed and not cached
        assert!(cache.einsum("ij,jk->ik", &[[2, 3], [4, 4]]).is_err());
        assert!(cache.einsum("ij,jk->iz", &[[2, 3], [3, 4]]).is_err());
        assert_eq!(cache.len(), 2);
        cache.clear();
        assert!(cache.is_empty());
        let off = PlanCache::new(0);
        off.einsum("i->", &[[3]]).unwrap();
        assert!(off.is_empty());
    }

    #[test]
    fn shared_across_threads() {
        let cache = Arc::new(PlanCache::new(8));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        cache
                            .einsum("bij,bjk->bik", &[[2, 3, 4], [2, 4, 5]])
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.hits() + cache.misses(), 200);
    }
}
