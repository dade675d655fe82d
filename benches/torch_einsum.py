"""Peer timings for the einsum benches (`benches/einsum.rs`), run by hand, never by test-all.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch
    /tmp/venv/bin/python benches/torch_einsum.py

Prints the median wall time (ms) on one thread of:
- attention scores `bhqd,bhkd->bhqk`, b = h = 8, q = k = 128, d = 64, float32: the primal
  (`torch.einsum`), and primal + gradients of both operands (`einsum` then
  `backward(cotangent)`, the same work as adrules' `rrule` + pullback);
- batched matmul `bij,bjk->bik`, b = 64, 128^3, float64 (primal).
Compare with the `attention` and `bmm` rows of `cargo xtask bench`, measured the same day.
"""

import statistics
import time

import torch

torch.set_num_threads(1)


def median_ms(f, repeats=60, warmup=10):
    for _ in range(warmup):
        f()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def attention():
    g = torch.Generator().manual_seed(0)
    q = torch.rand(8, 8, 128, 64, generator=g, dtype=torch.float32) * 2 - 1
    k = torch.rand(8, 8, 128, 64, generator=g, dtype=torch.float32) * 2 - 1
    cbar = torch.rand(8, 8, 128, 128, generator=g, dtype=torch.float32) * 2 - 1
    primal = median_ms(lambda: torch.einsum("bhqd,bhkd->bhqk", q, k))
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()

    def grad():
        qg.grad = None
        kg.grad = None
        torch.einsum("bhqd,bhkd->bhqk", qg, kg).backward(cbar)

    return primal, median_ms(grad)


def bmm():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(64, 128, 128, generator=g, dtype=torch.float64)
    b = torch.rand(64, 128, 128, generator=g, dtype=torch.float64)
    return median_ms(lambda: torch.einsum("bij,bjk->bik", a, b))


if __name__ == "__main__":
    p, g = attention()
    print(f"torch {torch.__version__}, 1 thread")
    print(f"attention bhqd,bhkd->bhqk f32: primal {p:.3f} ms, primal + gradient {g:.3f} ms")
    print(f"bmm bij,bjk->bik f64 b=64 n=128: primal {bmm():.3f} ms")
