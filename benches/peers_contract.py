"""Peer timings for the contraction-gradient benches (`benches/rules.rs`, the `rules` table of
`cargo xtask bench`), run by hand, never by test-all.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch "jax[cpu]" opt_einsum
    OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_NUM_THREADS=1 \
    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
        taskset -c 0 /tmp/venv/bin/python benches/peers_contract.py

For `C = einsum("abcd,cdef->abef", A, B)`, all dimensions 32 (three 1024^3 GEMMs per
gradient), float64, complex128 and float32, one thread, prints the best of 7 samples (ms)
of:
- `primal`: the einsum alone;
- `primal + gradient`: the einsum and the cotangents of both operands for a given C-bar:
  torch `einsum` + `backward(cbar)`; JAX `jax.vjp` (the pair (C, vjp)) then `vjp(cbar)`,
  jitted; a hand-written opt_einsum gradient (`Abar = einsum("abef,cdef->abcd", cbar,
  conj(B))`, `Bbar = einsum("abcd,abef->cdef", conj(A), cbar)`).
The peers are measured interleaved, sample by sample (one call of each in turn), so that
they see the same load. Compare with the `rrule` and `primal` rows of the `rules` table
measured right beside it (the same run of the machine).
"""

import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402

    torch.set_num_threads(1)
except ImportError:
    torch = None
try:
    import jax  # noqa: E402

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp  # noqa: E402
except ImportError:
    jax = None
try:
    import opt_einsum  # noqa: E402
except ImportError:
    opt_einsum = None

D = 32
SPEC = "abcd,cdef->abef"


def data(dtype, seed):
    rng = np.random.default_rng(seed)
    shape = (D, D, D, D)
    x = [rng.uniform(-1, 1, shape) for _ in range(3)]
    if np.dtype(dtype).kind == "c":
        x = [v + 1j * rng.uniform(-1, 1, shape) for v in x]
    return [v.astype(dtype) for v in x]


def cases(dtype):
    a, b, cbar = data(dtype, 1)
    out = {}
    if torch is not None:
        ta, tb, tc = (torch.from_numpy(v) for v in (a, b, cbar))
        ga, gb = ta.clone().requires_grad_(), tb.clone().requires_grad_()

        def torch_grad():
            ga.grad = None
            gb.grad = None
            # torch's backward gives conj cotangents for complex inputs: the same convention
            # (Abar = Cbar . B^H) as adrules and JAX's vjp up to conjugation, same work
            torch.einsum(SPEC, ga, gb).backward(tc)
            return ga.grad, gb.grad

        out["torch primal"] = lambda: torch.einsum(SPEC, ta, tb)
        out["torch primal + gradient"] = torch_grad
    if jax is not None:
        ja, jb, jc = (jnp.asarray(v) for v in (a, b, cbar))
        primal = jax.jit(lambda x, y: jnp.einsum(SPEC, x, y))

        @jax.jit
        def vjp(x, y, c):
            value, pullback = jax.vjp(lambda x, y: jnp.einsum(SPEC, x, y), x, y)
            return value, pullback(c)

        out["jax primal"] = lambda: jax.block_until_ready(primal(ja, jb))
        out["jax (C, vjp) + vjp"] = lambda: jax.block_until_ready(vjp(ja, jb, jc))
    if opt_einsum is not None:
        contract = opt_einsum.contract

        def oe_grad():
            c = contract(SPEC, a, b)
            abar = contract("abef,cdef->abcd", cbar, np.conj(b))
            bbar = contract("abcd,abef->cdef", np.conj(a), cbar)
            return c, abar, bbar

        out["opt_einsum primal"] = lambda: contract(SPEC, a, b)
        out["opt_einsum primal + gradient"] = oe_grad
    return out


def interleaved(fs, samples=7, warmup=2):
    for f in fs.values():
        for _ in range(warmup):
            f()
    best = {k: float("inf") for k in fs}
    for _ in range(samples):
        for k, f in fs.items():
            t0 = time.perf_counter()
            f()
            best[k] = min(best[k], (time.perf_counter() - t0) * 1e3)
    return best


def main():
    versions = [f"numpy {np.__version__}"]
    if torch is not None:
        versions.append(f"torch {torch.__version__}")
    if jax is not None:
        versions.append(f"jax {jax.__version__}")
    if opt_einsum is not None:
        versions.append(f"opt_einsum {opt_einsum.__version__}")
    print(", ".join(versions) + "; one thread; best of 7, interleaved")
    print(f"{SPEC}, d = {D}")
    for dtype in ["float64", "complex128", "float32"]:
        for name, ms in interleaved(cases(dtype)).items():
            print(f"{dtype:10} {name:32} {ms:9.1f} ms")


if __name__ == "__main__":
    main()
