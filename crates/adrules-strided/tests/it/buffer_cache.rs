//! The process-wide buffer cache (`adrules_strided::cache`): what it takes, what it hands
//! out, and that it never hands out storage a live handle refers to. The test runs in a child
//! process of its own (`rusty_fork_test!`), so that no other test of this binary touches the
//! cache concurrently.

use std::sync::Arc;

use adrules_core::{Backend, Conj, DType, DynScalar, Permutation};
use adrules_strided::{BufferPool, Strided, Tensor, cache};

fn address(t: &Tensor) -> *const f64 {
    t.view::<f64>().unwrap().as_ptr()
}

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]
    #[test]
    fn the_cache_recycles_only_sole_owned_large_buffers() {
        if std::env::var_os("ADRULES_CACHE_BYTES").is_none() {
            assert_eq!(cache::limit(), cache::DEFAULT_LIMIT);
        }
        cache::trim();
        let big = [512, 512]; // 2 MiB of f64
        let be = Strided;

        // a dropped, uniquely owned large buffer is taken and handed out again, without zeros
        let mut t = Tensor::zeros(&big, DType::F64).unwrap();
        be.add(
            &mut t,
            &Tensor::from_vec(&big, vec![3.0f64; 512 * 512]).unwrap(),
            &Permutation::identity(2),
            Conj::No,
            DynScalar::F64(1.0),
            DynScalar::F64(0.0),
        )
        .unwrap();
        let at = address(&t);
        let before = cache::stats();
        drop(t);
        let after = cache::stats();
        assert_eq!(after.stored, before.stored + 1, "{after:?}");
        assert!(after.bytes >= 512 * 512 * 8);
        let e = Tensor::empty(&big, DType::F64).unwrap();
        assert_eq!(address(&e), at, "the cached buffer was not reused");
        assert_eq!(cache::stats().hits, after.hits + 1);
        assert_eq!(
            e.to_vec::<f64>().unwrap()[0],
            3.0,
            "empty() zero-filled a recycled buffer"
        );
        drop(e);

        // zeros() from a recycled buffer are zeros
        let z = Tensor::zeros(&big, DType::F64).unwrap();
        assert_eq!(address(&z), at);
        assert!(z.to_vec::<f64>().unwrap().iter().all(|&x| x == 0.0));

        // a buffer another handle shares is not taken, and its values survive
        let keep = z.clone();
        let stored = cache::stats().stored;
        drop(z);
        assert_eq!(cache::stats().stored, stored, "a shared buffer was cached");
        let other = Tensor::empty(&big, DType::F64).unwrap();
        assert_ne!(address(&other), address(&keep));
        drop(other);

        // a user's Arc keeps its buffer out of the cache
        let user = Arc::new(vec![5.0f64; 512 * 512]);
        let shared = Tensor::from_parts(user.clone(), &big, &[512, 1], 0).unwrap();
        let stored = cache::stats().stored;
        drop(shared);
        assert_eq!(cache::stats().stored, stored);
        assert!(user.iter().all(|&x| x == 5.0));

        // small buffers are left to the system allocator; other dtypes are not mixed up
        let stored = cache::stats().stored;
        drop(Tensor::zeros(&[16, 16], DType::F64).unwrap());
        assert_eq!(cache::stats().stored, stored);
        let c = Tensor::empty(&[256, 512], DType::C64).unwrap(); // same bytes as the f64 buffers
        assert_eq!(c.dtype(), DType::C64);
        drop(c);

        // a pool scope takes precedence over the cache
        let pool = BufferPool::new();
        let hits = cache::stats().hits;
        pool.scope(|| Tensor::empty(&big, DType::F64).unwrap());
        assert_eq!(
            cache::stats().hits,
            hits,
            "a pool scope allocated from the cache"
        );

        // the limit bounds the cache; 0 turns it off
        assert!(cache::stats().bytes <= cache::limit());
        let previous = cache::set_limit(0);
        assert_eq!(cache::stats().bytes, 0);
        let stored = cache::stats().stored;
        drop(Tensor::zeros(&big, DType::F64).unwrap());
        assert_eq!(
            cache::stats().stored,
            stored,
            "a disabled cache took a buffer"
        );
        cache::set_limit(3 << 20);
        drop(Tensor::zeros(&big, DType::F64).unwrap());
        drop(Tensor::zeros(&[600, 512], DType::F64).unwrap());
        let s = cache::stats();
        assert!(s.bytes <= 3 << 20 && s.evicted >= 1, "{s:?}");
        cache::set_limit(previous);
        cache::trim();
        assert_eq!(cache::stats().buffers, 0);
        drop(keep);
    }
}

#[test]
fn cache_sizes_are_read_in_the_usual_forms() {
    let ok: &[(&str, usize)] = &[
        ("0", 0),
        ("268435456", 268_435_456),
        (" 4096 B ", 4096),
        ("1GiB", 1 << 30),
        ("256 MiB", 256 << 20),
        ("64kib", 64 << 10),
        ("1.5GiB", 3 << 29),
        ("2 TiB", 2 << 40),
        ("10MB", 10_000_000),
        ("1kB", 1000),
        ("0.5 KiB", 512),
        ("18446744073709551615", usize::MAX),
    ];
    for &(text, bytes) in ok {
        assert_eq!(cache::parse_size("size", text).unwrap(), bytes, "{text:?}");
    }
    let bad: &[(&str, &str)] = &[
        ("", "no number"),
        ("-1", "no number"),
        ("1e9", "unknown unit"),
        ("0x100000", "unknown unit"),
        ("18446744073709551616", "larger than"),
        ("16777216 TiB", "larger than"),
        ("1G", "ambiguous"),
        ("1.5", "a fraction of a byte"),
        ("1.", "no number"),
        ("1.2.3 MiB", "no number"),
        ("one GiB", "no number"),
        ("5 parsecs", "unknown unit"),
    ];
    for &(text, says) in bad {
        match cache::parse_size("size", text) {
            Err(adrules_core::Error::InvalidArgument { arg, reason }) => {
                assert_eq!(arg, "size");
                assert!(reason.contains(says), "{text:?}: {reason}");
            }
            other => panic!("{text:?} gave {other:?}"),
        }
    }
}

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]
    #[test]
    fn a_size_in_the_environment_bounds_the_cache() {
        // SAFETY: this child process runs this one test; nothing reads the environment
        // concurrently.
        unsafe { std::env::set_var(cache::ENV_VAR, "64 MiB") };
        assert_eq!(cache::env_limit().unwrap(), Some(64 << 20));
        assert_eq!(cache::limit(), 64 << 20);
    }

    #[test]
    fn a_value_that_is_not_a_size_is_an_error_not_a_silent_default() {
        // SAFETY: as above.
        unsafe { std::env::set_var(cache::ENV_VAR, "1e9") };
        match cache::env_limit() {
            Err(adrules_core::Error::InvalidArgument { arg, reason }) => {
                assert_eq!(arg, cache::ENV_VAR);
                assert!(reason.contains("\"1e9\""), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // the cache itself keeps working, with the default bound
        assert_eq!(cache::limit(), cache::DEFAULT_LIMIT);
    }
}

rusty_fork::rusty_fork_test! {
    #![rusty_fork(timeout_ms = 300_000)]
    #[test]
    fn an_empty_value_counts_as_unset() {
        // SAFETY: this child process runs this one test.
        unsafe { std::env::set_var(cache::ENV_VAR, " ") };
        assert_eq!(cache::env_limit().unwrap(), None);
        assert_eq!(cache::limit(), cache::DEFAULT_LIMIT);
    }
}
