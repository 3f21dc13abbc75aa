"""Two XLA:CPU behaviours the solver's kernels are written around, measured (so the workarounds can go
when a jaxlib no longer needs them).

1. ``jnp.sum`` over a leading (non-minor) axis against the same sum written as adds of slices
   (``wuji_jax.hand.geometry.total``).
2. A chain of dependent cheap steps (a Cholesky factorisation of 4 × 4 blocks, vectorised over
   frames): plain, each step's result forced through a reduction, and each divided by a runtime 1.0
   (``wuji_jax.ik.lm._stored``: XLA does not duplicate a division into its consumers).

    PYTHONPATH=. python benchmarks/bench_xla_cpu.py [--frames 2048]

Prints µs per frame (median of 20 calls after a warm-up); writes nothing.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from _util import time_fn  # noqa: E402
from wuji_jax import geometry as geo  # noqa: E402
from wuji_jax.ik import lm  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=2048)
    B = ap.parse_args(argv).frames

    def report(name, fn, *args):
        t = time_fn(jax.jit(fn), *args, repeats=20, warmup=1)
        print(f"{name:48s} {t.median * 1e6 / B:8.3f} us/frame", flush=True)

    y = jnp.ones((4, 8, 5, B))
    report("jnp.sum over axis 0 of (4, 8, 5, B)", lambda y: jnp.sum(y, 0), y)
    report("geometry.total (adds of slices)", lambda y: geo.total(y, 0), y)
    A = jnp.ones((4, 4, 5, B)) + 10 * jnp.eye(4)[:, :, None, None]
    b = jnp.ones((4, 8, 5, B))
    one = jnp.ones(())
    report("Cholesky 4x4 + 8 right-hand sides, plain", _chol_with(lambda x: x), A, b)
    reduce_store = lambda x: jnp.sum(jnp.stack([x, jnp.zeros_like(x)]), 0)  # noqa: E731
    report("  each step stored through a reduction", _chol_with(reduce_store), A, b)
    report("  each step divided by a runtime 1.0 (lm)", lambda A, b, one: lm.chol_solve(A, b, one), A, b, one)


def _chol_with(store):
    """lm.chol_solve with another way of storing each step (for the comparison above)."""
    def solve(A, b):
        n = A.shape[0]
        cols = []
        for _ in range(n):
            l = store(A[:, 0] / jnp.sqrt(jnp.maximum(A[0, 0], 1e-30)))
            cols.append(l)
            A = A[1:, 1:] - l[1:, None] * l[None, 1:]
        ys = []
        for j in range(n):
            yj = store(b[0] / cols[j][0][None])
            ys.append(yj)
            b = b[1:] - cols[j][1:, None] * yj[None]
        xs = [None] * n
        for j in reversed(range(n)):
            s = ys[j]
            if j < n - 1:
                s = s - geo.total(cols[j][1:, None] * jnp.stack(xs[j + 1:]), 0)
            xs[j] = store(s / cols[j][0][None])
        return jnp.stack(xs)
    return solve


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
