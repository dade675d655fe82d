//! Shared by the benches: paired, interleaved measurement of our kernel and its reference.

use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId};

/// Registers two benchmarks, `ours` and `reference`, each timing its own calls interleaved
/// with untimed calls of the other.
pub fn paired<'f>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    pool: &rayon::ThreadPool,
    id: &str,
    ours: (&str, &'f mut (dyn FnMut() + Send)),
    reference: (&str, &'f mut (dyn FnMut() + Send)),
) {
    let (names, mut fs) = ([ours.0, reference.0], [ours.1, reference.1]);
    for timed in 0..2 {
        group.bench_function(BenchmarkId::new(names[timed], id), |bch| {
            pool.install(|| {
                bch.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        (fs[1 - timed])();
                        let start = Instant::now();
                        (fs[timed])();
                        total += start.elapsed();
                    }
                    total
                })
            })
        });
    }
}
