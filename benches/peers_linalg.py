"""Peer timings for the decomposition benches (`benches/linalg.rs`) and the dense
linear-algebra benches (`benches/linalg_more.rs`), run by hand, never by test-all.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install "jax[cpu]" torch
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
        /tmp/venv/bin/python benches/peers_linalg.py

Prints the median wall time (ms, one thread, jitted, after warm-up) of the forward and
backward pass of the same losses as `benches/linalg.rs`, at n = 256, f32 and f64, standard
normal data: losses linear in the factors with fixed random cotangents,
- SVD: `L(A) = sum(Ub * U) + sum(Sb * S) + sum(Vhb * Vh)`, thin SVD `A = U diag(S) Vh`;
- eigh: `L(A) = sum(lb * lam) + sum(Vb * V)` for the symmetric `A = (X + X^T) / 2`;
so the backward pass is the decomposition's pullback for exactly those cotangents. The value
and gradient (`jax.value_and_grad`) are timed together: one decomposition and one pullback,
the same work as one forward + backward through adrules. The forward alone is timed too. Compare with the `linalg` rows of `cargo xtask bench`
measured the same day with `RAYON_NUM_THREADS=1` (goal: adrules' strided rule <= 1.0x JAX).

The dense rules (`linalg_more`): with the same inputs as `benches/linalg_more.rs` (a
symmetric positive-definite `S = X X^T / n + I` for Cholesky, `A = X + 4 sqrt(n) I` for the
others, `B`, `Yb` standard normal `n x n`, `sb` a scalar), the losses
`sum(Yb * cholesky(S))`, `sum(Yb * solve(A, B))` (gradients in `A` and `B`),
`sb * det(A / (4 sqrt(n)))` (in range), `sb * slogdet(A)[1]`, `sum(Yb * inv(A))`,
`Re sum(conj(lb) * eigvals(A))` and `sum(Yb * expm(A / (4 sqrt(n))))`, forward + backward and the forward
alone, by JAX (`value_and_grad`, jitted) and by PyTorch when it is installed (eager
autograd, `torch.set_num_threads(1)`).
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


def svd_loss(a, c):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    return jnp.sum(c[0] * u) + jnp.sum(c[1] * s) + jnp.sum(c[2] * vh)


def eigh_loss(a, c):
    lam, v = jnp.linalg.eigh(a)
    return jnp.sum(c[0] * lam) + jnp.sum(c[1] * v)


def main():
    n = 256
    print(f"JAX {jax.__version__}, n = {n}, 1 thread, value_and_grad (forward + backward)")
    for dtype in (jnp.float32, jnp.float64):
        k = jax.random.split(jax.random.PRNGKey(0), 7)
        normal = lambda key, shape: jax.random.normal(key, shape, dtype=dtype)  # noqa: E731
        a = normal(k[0], (n, n))
        x = normal(k[1], (n, n))
        sym = (x + x.T) / 2
        svd_c = (normal(k[2], (n, n)), normal(k[3], (n,)), normal(k[4], (n, n)))
        eigh_c = (normal(k[5], (n,)), normal(k[6], (n, n)))
        svd = jax.jit(jax.value_and_grad(svd_loss))
        eigh = jax.jit(jax.value_and_grad(eigh_loss))
        svd_fwd = jax.jit(lambda a: jnp.linalg.svd(a, full_matrices=False))
        eigh_fwd = jax.jit(jnp.linalg.eigh)
        ts = median_ms(lambda: svd(a, svd_c))
        te = median_ms(lambda: eigh(sym, eigh_c))
        fs = median_ms(lambda: svd_fwd(a))
        fe = median_ms(lambda: eigh_fwd(sym))
        name = jnp.dtype(dtype).name
        print(
            f"{name}: svd fwd+bwd {ts:.2f} ms (forward alone {fs:.2f}), "
            f"eigh fwd+bwd {te:.2f} ms (forward alone {fe:.2f})"
        )


def dense_inputs(n, dtype, key):
    k = jax.random.split(key, 5)
    normal = lambda kk, shape: jax.random.normal(kk, shape, dtype=dtype)  # noqa: E731
    x = normal(k[0], (n, n))
    spd = x @ x.T / n + jnp.eye(n, dtype=dtype)
    a = normal(k[1], (n, n)) + 4.0 * n**0.5 * jnp.eye(n, dtype=dtype)
    return spd, a, normal(k[2], (n, n)), normal(k[3], (n, n)), normal(k[4], ())


def dense_jax(n):
    losses = {
        "cholesky": (lambda s, a, b, yb, sb: jnp.sum(yb * jnp.linalg.cholesky(s)), (0,)),
        "solve": (lambda s, a, b, yb, sb: jnp.sum(yb * jnp.linalg.solve(a, b)), (1, 2)),
        "det": (lambda s, a, b, yb, sb: sb * jnp.linalg.det(a / (4.0 * n**0.5)), (1,)),
        "slogdet": (lambda s, a, b, yb, sb: sb * jnp.linalg.slogdet(a)[1], (1,)),
        "inv": (lambda s, a, b, yb, sb: jnp.sum(yb * jnp.linalg.inv(a)), (1,)),
        "eig": (lambda s, a, b, yb, sb: jnp.real(jnp.sum(jnp.conj(lb) * jnp.linalg.eigvals(a))), (1,)),
        "matrix_exp": (
            lambda s, a, b, yb, sb: jnp.sum(yb * jax.scipy.linalg.expm(a / (4.0 * n**0.5))),
            (1,),
        ),
    }
    import jax.scipy.linalg  # noqa: F401

    for dtype in (jnp.float32, jnp.float64):
        x = dense_inputs(n, dtype, jax.random.PRNGKey(1))
        ctype = jnp.complex64 if dtype == jnp.float32 else jnp.complex128
        lb = jax.random.normal(jax.random.PRNGKey(2), (n,), dtype=ctype)
        name = jnp.dtype(dtype).name
        for op, (loss, argnums) in losses.items():
            vg = jax.jit(jax.value_and_grad(loss, argnums=argnums))
            fwd = jax.jit(loss)
            t = median_ms(lambda: vg(*x))
            f = median_ms(lambda: fwd(*x))
            print(f"JAX {name} {op}: fwd+bwd {t:.2f} ms (forward alone {f:.2f})")


def dense_torch(n):
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: no torch rows")
        return
    torch.set_num_threads(1)

    def med(f, repeats=20, warmup=3):
        for _ in range(warmup):
            f()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    losses = {
        "cholesky": (lambda s, a, b, yb, sb: (yb * torch.linalg.cholesky(s)).sum(), (0,)),
        "solve": (lambda s, a, b, yb, sb: (yb * torch.linalg.solve(a, b)).sum(), (1, 2)),
        "det": (lambda s, a, b, yb, sb: sb * torch.linalg.det(a / (4.0 * n**0.5)), (1,)),
        "slogdet": (lambda s, a, b, yb, sb: sb * torch.linalg.slogdet(a)[1], (1,)),
        "inv": (lambda s, a, b, yb, sb: (yb * torch.linalg.inv(a)).sum(), (1,)),
        "eig": (lambda s, a, b, yb, sb: (lb.conj() * torch.linalg.eigvals(a)).real.sum(), (1,)),
        "matrix_exp": (
            lambda s, a, b, yb, sb: (yb * torch.linalg.matrix_exp(a / (4.0 * n**0.5))).sum(),
            (1,),
        ),
    }
    for dtype in (torch.float32, torch.float64):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(n, n, generator=g, dtype=dtype)
        spd = x @ x.T / n + torch.eye(n, dtype=dtype)
        a = torch.randn(n, n, generator=g, dtype=dtype) + 4.0 * n**0.5 * torch.eye(n, dtype=dtype)
        b, yb = (torch.randn(n, n, generator=g, dtype=dtype) for _ in range(2))
        sb = torch.randn((), generator=g, dtype=dtype)
        ctype = torch.complex64 if dtype == torch.float32 else torch.complex128
        lb = torch.randn(n, generator=g, dtype=ctype)
        name = str(dtype).removeprefix("torch.")
        for op, (loss, argnums) in losses.items():
            def fb():
                xs = [t.detach().requires_grad_(i in argnums) for i, t in enumerate((spd, a, b, yb, sb))]
                loss(*xs).backward()

            def fwd():
                with torch.no_grad():
                    loss(spd, a, b, yb, sb)

            print(f"torch {name} {op}: fwd+bwd {med(fb):.2f} ms (forward alone {med(fwd):.2f})")


if __name__ == "__main__":
    main()
    dense_jax(256)
    dense_torch(256)
