"""Peer timings for the second-order benches (`benches/second_order.rs`), run by hand, never
by test-all.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install "jax[cpu]"
    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
        /tmp/venv/bin/python benches/jax_hvp.py

Prints the median wall time (ms, one thread, float64, jitted, after warm-up) of, for
`phi(a, b, c) = <cbar, einsum("abc,bde,cdf->aef", a, b, c)>` with all dimensions 64:
- the gradient of every operand (`jax.grad`);
- the Hessian-vector product along a direction of every operand, forward-over-reverse
  (`jax.jvp(jax.grad(phi), x, v)`), the same work as adrules' `NetworkPlan::hvp`;
and their ratio. Compare with the `hvp` rows of `cargo xtask bench` measured the same day
(goal: adrules' HVP <= 1.0x JAX's).
"""

import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402


def median_ms(f, repeats=20, warmup=3):
    for _ in range(warmup):
        jax.block_until_ready(f())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f())
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    d = 64
    keys = jax.random.split(jax.random.PRNGKey(0), 7)
    x = tuple(jax.random.uniform(k, (d, d, d), dtype=jnp.float64) - 0.5 for k in keys[:3])
    v = tuple(jax.random.uniform(k, (d, d, d), dtype=jnp.float64) - 0.5 for k in keys[3:6])
    cbar = jax.random.uniform(keys[6], (d, d, d), dtype=jnp.float64) - 0.5

    def phi(a, b, c):
        return jnp.vdot(cbar, jnp.einsum("abc,bde,cdf->aef", a, b, c, optimize="optimal"))

    grad = jax.jit(jax.grad(phi, argnums=(0, 1, 2)))
    hvp = jax.jit(lambda x, v: jax.jvp(lambda *x: grad(*x), x, v)[1])
    tg = median_ms(lambda: grad(*x))
    th = median_ms(lambda: hvp(x, v))
    print(f"JAX {jax.__version__}, abc,bde,cdf->aef d=64 f64 1 thread")
    print(f"gradient {tg:.2f} ms, hvp {th:.2f} ms, hvp/gradient {th / tg:.2f}")


if __name__ == "__main__":
    main()
