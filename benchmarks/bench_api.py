"""``wuji_jax`` as a JAX function, timed the way users time it: issue 47's figures in one run.

Each part runs in a fresh Python process with an empty home folder and, unless said, no compilation
cache (``WUJI_JAX_NO_CACHE=1``), at the default settings, float32 unless said:

* **warm loops**: one warm-up call, then 100 calls each waited for (``jax.block_until_ready``):
  ``wj.solve`` on 1 frame and on 64 frames, ``FrameSolver`` on one frame; median and slowest call;
  then the time from the process's last answer to its exit (the parent's clock);
* **first answers**: the first ``wj.solve`` of 64 frames and the first ``FrameSolver`` frame, with an
  empty compilation cache folder, then again in a second process with that folder filled;
* **gradients**: ``jax.jit(jax.value_and_grad(loss))``, ``loss = Σ sin(wj.solve(hand, y).angles)``:
  the first call at 8 frames, the first call at a second shape (64 frames), the warm gradient against
  the warm forward (``jax.jit(loss)``) at 64 frames;
* **derivative accuracy** (float64): ``jax.jvp`` of ``wj.solve(...).angles`` along random landmark
  directions on noisy real frames (dex-retargeting's recording and the bundled video's, 2 mm noise),
  against central differences (h = 1e-6 m) of the fit Levenberg–Marquardt converged to 1e-15; relative
  error ``|J·d − fd| / |fd|`` per frame and direction; jvp against vjp (⟨c, J·d⟩ = ⟨Jᵀc, d⟩).

Writes ``benchmarks/results/api_<device-kind>.json`` with the machine and library versions. Run from
the repository root::

    PYTHONPATH=. python benchmarks/bench_api.py [--frames-per-recording 20] [--no-json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _util import DEXRET_RECORDING, bundled_recording, hardware_info, versions, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

WARM = """
import json, time
import numpy as np, jax, wuji_jax as wj
hand = wj.load_hand("right")
y = np.load({data!r}).astype(np.float32)
fs = wj.FrameSolver(hand)
out = {{}}
for name, fn in [("solve_1_frame", lambda: wj.solve(hand, y[0])), ("solve_64_frames", lambda: wj.solve(hand, y[:64])),
                 ("frame_solver", lambda: fs(y[0]))]:
    jax.block_until_ready(fn())
    times = []
    for _ in range(100):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    out[name] = dict(median_ms=1e3 * float(np.median(times)), slowest_ms=1e3 * max(times))
out["last_answer_unix_s"] = time.time()
print(json.dumps(out), flush=True)
"""

FIRST = """
import json, time
t0 = time.perf_counter()
import numpy as np, jax, wuji_jax as wj
wj.enable_compilation_cache({cache!r})
t1 = time.perf_counter()
hand = wj.load_hand("right")
y = np.load({data!r}).astype(np.float32)
jax.block_until_ready(wj.solve(hand, y[:64]))
t2 = time.perf_counter()
solver = wj.FrameSolver(hand)
solver(y[0])
t3 = time.perf_counter()
print(json.dumps(dict(import_s=t1 - t0, first_solve_64_s=t2 - t1, first_frame_solver_s=t3 - t2)), flush=True)
"""

GRADIENT = """
import json, time
import numpy as np, jax, jax.numpy as jnp, wuji_jax as wj
hand = wj.load_hand("right")
frames = np.load({data!r}).astype(np.float32)
def loss(y):
    return jnp.sum(jnp.sin(wj.solve(hand, y).angles))
grad, fwd = jax.jit(jax.value_and_grad(loss)), jax.jit(loss)
out = {{}}
for B in (8, 64):
    y = jnp.asarray(frames[:B])
    t0 = time.perf_counter()
    jax.block_until_ready(grad(y))
    out[f"first_gradient_{{B}}_s"] = time.perf_counter() - t0
y = jnp.asarray(frames[:64])
jax.block_until_ready(fwd(y))
for name, fn in (("gradient", grad), ("forward", fwd)):
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(y))
        times.append(time.perf_counter() - t0)
    out[f"warm_{{name}}_64_ms"] = 1e3 * float(np.median(times))
out["gradient_over_forward_64"] = out["warm_gradient_64_ms"] / out["warm_forward_64_ms"]
print(json.dumps(out), flush=True)
"""

ACCURACY = """
import json
import numpy as np, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import wuji_jax as wj
hand = wj.load_hand("right")
rng = np.random.default_rng(0)
recs = [np.load(p) for p in {recordings!r}]
frames = np.concatenate([r[rng.choice(len(r), {count}, replace=False)] for r in recs])
frames = frames + rng.normal(0, 0.002, frames.shape)
tight = wj.SolverConfig(tolerance=1e-15, iterations=400)
def angles(y):
    return wj.solve(hand, y, check_units=False).angles
jvp = jax.jit(lambda y, d: jax.jvp(angles, (y,), (d,))[1])
vjp = jax.jit(lambda y, c: jax.vjp(angles, y)[1](c)[0])
flags_of = jax.jit(lambda y, d: jax.jvp(lambda y: wj.solve(hand, y, check_units=False).flags, (y,), (d,))[0])
rel, rel7, agree, flagged = [], [], [], 0
for k in range(2):
    d, c = rng.normal(size=frames.shape), rng.normal(size=frames.shape[:1] + (20,))
    jd, jc, flags = np.asarray(jvp(frames, d)), np.asarray(vjp(frames, c)), np.asarray(flags_of(frames, d))
    flagged += int(((flags & wj.solver.FLAG_NO_DERIVATIVE) != 0).sum())
    for h, into in ((1e-6, rel), (1e-7, rel7)):
        fd = (np.asarray(wj.solve(hand, frames + h * d, config=tight, check_units=False).angles)
              - np.asarray(wj.solve(hand, frames - h * d, config=tight, check_units=False).angles)) / (2 * h)
        into.extend((np.linalg.norm(jd - fd, axis=-1) / np.linalg.norm(fd, axis=-1)).tolist())
    agree.append(abs(float(np.sum(c * jd)) - float(np.sum(jc * d))) / abs(float(np.sum(jc * d))))
q = lambda a: dict(median=float(np.median(a)), p90=float(np.quantile(a, 0.9)), max=float(np.max(a)))  # noqa: E731
print(json.dumps(dict(frames=len(frames), directions=len(rel), relative_error_h1e6=q(rel),
                      relative_error_h1e7=q(rel7), jvp_vjp_relative_difference=max(agree),
                      no_derivative_flags=flagged)), flush=True)
"""


def _child(code: str, env: dict | None = None) -> tuple[dict, float]:
    """Run ``code`` in a fresh process with an empty home; its last line of JSON, and the parent's
    clock (Unix time) when the process had exited."""
    with tempfile.TemporaryDirectory(prefix="wuji-bench-home-") as home:
        full = {**os.environ, "HOME": home, "XDG_CACHE_HOME": f"{home}/.cache", "PYTHONPATH": str(ROOT),
                "WUJI_JAX_NO_CACHE": "1", **(env or {})}
        full.pop("JAX_COMPILATION_CACHE_DIR", None)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=full)
        ended = time.time()
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1]), ended


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames-per-recording", type=int, default=20, help="frames of each recording (accuracy)")
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)
    data = str(DEXRET_RECORDING if DEXRET_RECORDING.is_file() else bundled_recording())
    sample = str(ROOT / "benchmarks" / "_sample_world.npy")
    import numpy as np

    np.save(sample, np.load(ROOT / "assets" / "samples" / "human_hand_video_landmarks.npz")["world"])
    try:
        out: dict = {}
        warm, ended = _child(WARM.format(data=data))
        warm["exit_after_last_answer_s"] = ended - warm.pop("last_answer_unix_s")
        out["warm"] = warm
        print("warm loops:", json.dumps(warm), flush=True)
        with tempfile.TemporaryDirectory(prefix="wuji-bench-cache-") as cache:
            code = FIRST.format(data=data, cache=cache)
            empty, _ = _child(code, {"WUJI_JAX_NO_CACHE": ""})
            filled, _ = _child(code, {"WUJI_JAX_NO_CACHE": ""})
        out["first_answer"] = dict(empty_cache=empty, cache_filled=filled)
        print("first answers:", json.dumps(out["first_answer"]), flush=True)
        out["gradient"], _ = _child(GRADIENT.format(data=data))
        print("gradients:", json.dumps(out["gradient"]), flush=True)
        recordings = [p for p in (str(DEXRET_RECORDING), sample) if Path(p).is_file()]
        out["derivative"], _ = _child(ACCURACY.format(recordings=recordings, count=args.frames_per_recording))
        print("derivative:", json.dumps(out["derivative"]), flush=True)
    finally:
        os.unlink(sample)
    hw = hardware_info()
    payload = dict(benchmark="bench_api", hardware=hw, versions=versions("jax", "jaxlib", "numpy"), results=out)
    if not args.no_json:
        path = write_json("api", payload)
        print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
