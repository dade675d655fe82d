//! Steady state of the pooling allocator: executing the same network plan again makes no
//! heap allocation at all after the first run. The counting global allocator is this test
//! binary's; the test runs in a child process of its own (`rusty_fork_test!`), on a single
//! rayon thread, so that nothing else allocates concurrently.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use adrules_core::network::{Network, NetworkPlan, Order};
use adrules_core::{Allocator, Backend, Conj, DType, DynScalar};
use adrules_strided::{BufferPool, Strided, Tensor};
use adrules_testing::Rng;

/// Counts every allocation (including reallocations) made through the global allocator, and
/// the live bytes with their peak (read by `network_sliced_memory`).
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    let now = LIVE.fetch_add(bytes, Ordering::SeqCst) + bytes;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

// SAFETY: every method forwards to `System` with the caller's arguments; the counters are
// plain atomics and never affect the allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
            grew(new_size);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

/// The allocator of the whole test binary (it only counts; only forked tests read the
/// counts).
#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Peak live heap bytes above the level at the call while `f` runs, its result dropped
/// inside. Meaningful only in a forked test on one thread.
pub fn peak_bytes<T>(f: impl FnOnce() -> T) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    drop(std::hint::black_box(f()));
    PEAK.load(Ordering::SeqCst) - base
}

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]
    #[test]
    fn a_plan_executed_again_with_the_pool_allocates_nothing() {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build_global()
            .expect("the global rayon pool is configured once, here");
        let be = Strided;
        let mut rng = Rng::seed(1);
        // complex, with a partial trace, conjugated operands, an outer product and GEMMs large
        // enough for faer's packed kernels
        let network = Network::einsum("abcc,bdef,egh,dgi,fhj,k->aijk")
            .unwrap()
            .with_conj(&[
                Conj::Yes,
                Conj::No,
                Conj::Yes,
                Conj::No,
                Conj::Yes,
                Conj::No,
            ])
            .unwrap();
        let dims: [&[usize]; 6] = [
            &[24, 16, 5, 5],
            &[16, 12, 10, 14],
            &[10, 9, 13],
            &[12, 9, 7],
            &[14, 13, 6],
            &[3],
        ];
        let plan = NetworkPlan::new(&network, &dims, &Order::Default).unwrap();
        let xs: Vec<Tensor> = dims
            .iter()
            .map(|d| be.from_host(rng.tensor(d, DType::C64)).unwrap())
            .collect();
        let refs: Vec<&Tensor> = xs.iter().collect();
        let pool = BufferPool::new();

        // warm-up: the pool fills, rayon and faer set up their thread-local state
        let first = plan.execute_with(&be, &pool, &refs).unwrap();
        let expected = first.to_host().unwrap();
        pool.free(first);
        let mut c = be.zeros(plan.output_dims(), DType::C64).unwrap();
        plan.execute_into(
            &be,
            &pool,
            &mut c,
            &refs,
            DynScalar::F64(1.0),
            DynScalar::F64(0.0),
        )
        .unwrap();

        let before = allocations();
        for _ in 0..100 {
            let out = plan.execute_with(&be, &pool, &refs).unwrap();
            pool.free(out);
            plan.execute_into(
                &be,
                &pool,
                &mut c,
                &refs,
                DynScalar::F64(1.0),
                DynScalar::F64(0.0),
            )
            .unwrap();
        }
        let during = allocations() - before;

        let stats = pool.stats();
        let out = plan.execute_with(&be, &pool, &refs).unwrap();
        assert_eq!(
            out.to_host().unwrap(),
            expected,
            "recycled buffers changed the result"
        );
        assert_eq!(c.to_host().unwrap(), expected);
        assert!(
            stats.reused >= 200 * (plan.steps().len() as u64 - 1),
            "{stats:?}"
        );
        assert_eq!(
            during, 0,
            "heap allocations in 200 steady-state executions ({stats:?})"
        );
    }
}
