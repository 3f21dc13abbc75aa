"""Gradients through the solver: compile time and run time of ``jax.jit(jax.value_and_grad(loss))``
where ``loss`` is a scalar of :func:`wuji_jax.solve`'s angles, as a learning pipeline calls it.

For each ``--batch`` (the bundled recording, or ``--data``, tiled to that many frames, float32,
default :class:`~wuji_jax.SolverConfig`), in a fresh process with the persistent compilation cache
off: the time to trace, lower and compile the gradient program (``.lower(...).compile()``), then
the median of ``--repeats`` warm calls (after one warm-up), per call and per frame. The loss is
``Σ sin(angles)``: every angle's derivative is asked for. For comparison the same process times the
forward program alone (``jax.jit(loss)``). Both use JAX's default device (one CPU device here).

Writes ``benchmarks/results/gradient_<device-kind>.json`` with the machine and library versions.
Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_gradient.py [--batch 1 64 256] [--repeats 7] [--data PATH]
        [--no-json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, statistics, time
import numpy as np, jax, jax.numpy as jnp
import wuji_jax as wj
B, repeats = {batch}, {repeats}
hand = wj.load_hand("right")
y = jnp.asarray(np.resize(np.load({frames!r}), (B, 21, 3)))
def loss(lm):
    return jnp.sum(jnp.sin(wj.solve(hand, lm).angles))
def timed(program):
    t0 = time.perf_counter()
    compiled = jax.jit(program).lower(y).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(y))
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(y))
        runs.append(time.perf_counter() - t0)
    run = statistics.median(runs)
    return dict(compile_s=compile_s, run_ms=1e3 * run, us_per_frame=1e6 * run / B)
out = dict(batch=B, gradient=timed(jax.value_and_grad(loss)), forward=timed(loss))
print(json.dumps(out))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64, 256],
                    help="frames per call (default: around the solver's REDUCE_DERIVATIVE_FRAMES = 64)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--data", default=None, help="landmarks (N, 21, 3) in metres; default the bundled recording")
    ap.add_argument("--no-json", action="store_true", help="print only, write no results JSON")
    args = ap.parse_args(argv)

    import numpy as np

    from _util import bundled_recording, hardware_info, load_recording, write_json

    data = Path(args.data) if args.data else bundled_recording()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "WUJI_JAX_NO_CACHE": "1", "JAX_ENABLE_COMPILATION_CACHE": "false"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        frames = Path(tmp) / "frames.npy"
        np.save(frames, np.asarray(load_recording(data), np.float32))
        for batch in args.batch:
            code = CHILD.format(batch=batch, repeats=args.repeats, frames=str(frames))
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                print(p.stderr[-3000:], file=sys.stderr)
                return 1
            row = json.loads(p.stdout.strip().splitlines()[-1])
            g, f = row["gradient"], row["forward"]
            print(f"batch {batch:5d}: gradient compile {g['compile_s']:.1f} s, {g['us_per_frame']:.1f} us a frame "
                  f"({g['run_ms']:.2f} ms a call) | forward alone compile {f['compile_s']:.1f} s, "
                  f"{f['us_per_frame']:.1f} us a frame", flush=True)
            rows.append(row)
    if not args.no_json:
        path = write_json("gradient", {"data": str(data), "loss": "sum(sin(wj.solve(hand, y).angles))",
                                       "dtype": "float32", "config": "default", "runs": rows,
                                       "hardware": hardware_info()})
        print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
