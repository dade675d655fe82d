"""Peer timings for the overheads bench (`benches/overheads.rs`), run by hand, never by test-all.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /tmp/venv/bin/python benches/numpy_elementwise.py

Prints the median wall time on one thread of:
- `np.einsum("ij,ij->ij")` and `a * b` (a Hadamard product, 1000 x 1000 float64, fresh output);
- `np.einsum("bi,bi->b")` (row-wise dots, 1000 x 1000 float64);
- `a @ b` and `np.einsum("ij,jk->ik")` with n = 8 (float64): the fixed cost of a small call.
Compare with the `elementwise` and `small_call` rows of `cargo xtask bench`, measured the same
day on the same machine.
"""

import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def median_s(f, repeats, warmup=10):
    for _ in range(warmup):
        f()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    rng = np.random.default_rng(0)
    a = rng.uniform(-0.5, 0.5, (1000, 1000))
    b = rng.uniform(-0.5, 0.5, (1000, 1000))
    print(f"numpy {np.__version__}, 1 thread")
    t = median_s(lambda: np.einsum("ij,ij->ij", a, b), 200)
    print(f"einsum ij,ij->ij n=1000 f64: {t * 1e3:.3f} ms")
    t = median_s(lambda: a * b, 200)
    print(f"a * b n=1000 f64: {t * 1e3:.3f} ms")
    t = median_s(lambda: np.einsum("bi,bi->b", a, b), 200)
    print(f"einsum bi,bi->b n=1000 f64: {t * 1e3:.3f} ms")
    x = rng.uniform(-0.5, 0.5, (8, 8))
    y = rng.uniform(-0.5, 0.5, (8, 8))

    def many(f, n=1000):
        def run():
            for _ in range(n):
                f()

        return median_s(run, 50) / n

    print(f"a @ b n=8 f64: {many(lambda: x @ y) * 1e6:.2f} us")
    print(f"einsum ij,jk->ik n=8 f64: {many(lambda: np.einsum('ij,jk->ik', x, y)) * 1e6:.2f} us")


if __name__ == "__main__":
    main()
