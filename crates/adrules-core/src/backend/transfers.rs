//! Counters of the data a backend moves between its device and the host, so that tests (and
//! users profiling a GPU run) can check where copies happen: the candle and burn adapters'
//! [`to_host`](super::Backend::to_host), [`from_host`](super::Backend::from_host) and scalar
//! read-back ([`inner`](super::Backend::inner), [`scalar`](super::Backend::scalar)) record
//! here. Process-wide (atomic counters; a test that reads them should run alone in its test
//! binary, or compare differences it alone causes). The host backends (strided, reference,
//! dfdx on its CPU device) record nothing: their tensors are host memory.

use std::sync::atomic::{AtomicU64, Ordering};

static TO_HOST: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static FROM_HOST: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static SCALARS: AtomicU64 = AtomicU64::new(0);

/// What has been moved so far (since the process started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// tensors copied from a device to the host ([`Backend::to_host`](super::Backend::to_host))
    pub to_host: u64,
    /// bytes of those tensors
    pub to_host_bytes: u64,
    /// tensors copied from the host to a device ([`Backend::from_host`](super::Backend::from_host))
    pub from_host: u64,
    /// bytes of those tensors
    pub from_host_bytes: u64,
    /// single values read back (inner products, norms, scalars)
    pub scalars: u64,
}

impl Transfers {
    /// The counts now.
    pub fn now() -> Self {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Transfers {
            to_host: get(&TO_HOST[0]),
            to_host_bytes: get(&TO_HOST[1]),
            from_host: get(&FROM_HOST[0]),
            from_host_bytes: get(&FROM_HOST[1]),
            scalars: get(&SCALARS),
        }
    }

    /// What moved between `earlier` and `self`.
    pub fn since(&self, earlier: &Transfers) -> Transfers {
        Transfers {
            to_host: self.to_host - earlier.to_host,
            to_host_bytes: self.to_host_bytes - earlier.to_host_bytes,
            from_host: self.from_host - earlier.from_host,
            from_host_bytes: self.from_host_bytes - earlier.from_host_bytes,
            scalars: self.scalars - earlier.scalars,
        }
    }
}

/// Records a tensor of `bytes` copied to the host.
pub fn record_to_host(bytes: usize) {
    TO_HOST[0].fetch_add(1, Ordering::Relaxed);
    TO_HOST[1].fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Records a tensor of `bytes` copied from the host.
pub fn record_from_host(bytes: usize) {
    FROM_HOST[0].fetch_add(1, Ordering::Relaxed);
    FROM_HOST[1].fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Records one value read back.
pub fn record_scalar() {
    SCALARS.fetch_add(1, Ordering::Relaxed);
}
