"""Where the solver's time goes, stage by stage, at the default settings (one CPU device).

1. **Batch** (``--frames``, default 16,384 frames of dex-retargeting's recording, tiled; else the
   bundled sample): µs per frame of the two stages ``wj.solve`` runs in its chunks of
   ``CHUNK_FRAMES`` (:func:`wuji_jax.ik.api.start_chunked`, the closed-form start, and
   :func:`~wuji_jax.ik.api.fit_chunked`, LM and the results), the fit at ``iterations`` = 0, 1,
   …, the default (so the cost of one LM iteration is the step between two rows, taken between the
   fastest of the repeats: on a shared machine a median can hold a burst of others' work), and the default
   settings' histogram of iterations per frame (a chunk's loop runs until its slowest frame stops).
2. **One frame** (:class:`wuji_jax.FrameSolver`): the warm median, the number of XLA kernels its
   program holds, and the number it executes per frame (from a ``jax.profiler`` trace of the
   calls, read with the public ``jax.profiler.ProfileData``: the events of XLA's CPU threads that
   are kernels, not the executor's bookkeeping nor loops and conditionals), so the time per executed
   kernel follows. The timings come from calls without the profiler.

    PYTHONPATH=. python benchmarks/bench_stages.py [--frames 16384] [--repeats 7] [--no-json]

Writes ``benchmarks/results/stages_<device-kind>.json``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from _util import DEXRET_RECORDING, bundled_recording, hardware_info, load_recording, time_fn, write_json  # noqa: E402

# executor bookkeeping and control flow in a trace of XLA:CPU's threads (not kernels)
_NOT_KERNELS = re.compile(r"^(ThunkExecutor|end: |while|cond|conditional|call)\b")


def _frames(n: int) -> tuple[np.ndarray, str]:
    path = DEXRET_RECORDING if DEXRET_RECORDING.exists() else bundled_recording()
    y = load_recording(path)
    return np.ascontiguousarray(np.resize(y, (n,) + y.shape[1:])), path.name


def batch_stages(hand, y: np.ndarray, repeats: int) -> dict:
    """µs per frame of the start and of the fit at 0 … default iterations (one CPU device)."""
    import wuji_jax as wj
    from wuji_jax.ik import api

    h = hand.astype(jnp.float32)
    Y = jnp.asarray(y)
    W, Q0 = api.default_inputs(h, Y, None, None, jnp)
    Q0 = jnp.asarray(Q0)
    default = wj.SolverConfig().iterations
    start = jax.jit(lambda h, y, w, q, c: api.start_chunked(h, y, w, q, c))
    fit = jax.jit(lambda h, y, w, q, c, s: api.fit_chunked(h, y, w, q, c, s))
    cfg = api.config_arrays(wj.SolverConfig(), np.float32)  # traced numbers: one program for every count
    t_start = time_fn(start, h, Y, W, Q0, cfg, repeats=repeats)
    s = start(h, Y, W, Q0, cfg)
    us = lambda seconds: round(seconds / len(y) * 1e6, 3)  # noqa: E731 (µs a frame)
    fits = []
    for k in range(default + 1):
        ck = api.config_arrays(wj.SolverConfig(iterations=k), np.float32)
        t = time_fn(fit, h, Y, W, Q0, ck, s, repeats=repeats)
        fits.append({"iterations": k, "us_per_frame": us(t.median), "us_per_frame_min": us(t.min)})
        print(f"  fit, at most {k} LM iteration{'' if k == 1 else 's'}: {us(t.median):6.2f} us/frame "
              f"(min {us(t.min):.2f})", flush=True)
    its = np.asarray(fit(h, Y, W, Q0, cfg, s)["iterations"])
    # an iteration's cost from the fastest calls (the medians of a shared machine take bursts of others' work)
    steps = [b["us_per_frame_min"] - a["us_per_frame_min"] for a, b in zip(fits, fits[1:])]
    out = {
        "frames": len(y), "chunk_frames": api.CHUNK_FRAMES,
        "start_us_per_frame": us(t_start.median), "start_us_per_frame_min": us(t_start.min),
        "fit": fits,
        "lm_iteration_us_per_frame_median": round(float(np.median(steps)), 3) if steps else None,
        "fit_without_iterations_us_per_frame": fits[0]["us_per_frame"],
        "default_total_us_per_frame": us(t_start.median + t.median),
        "iterations_histogram": np.bincount(its, minlength=default + 1).tolist(),
    }
    print(f"  start {out['start_us_per_frame']:.2f} us/frame (min {out['start_us_per_frame_min']:.2f}); fit without iterations "
          f"{out['fit_without_iterations_us_per_frame']:.2f}; one LM iteration "
          f"{out['lm_iteration_us_per_frame_median']:.2f}; total {out['default_total_us_per_frame']:.2f} "
          f"(iterations per frame: {out['iterations_histogram']})", flush=True)
    return out


def _program_kernels(hlo: str) -> dict:
    """Kernels (fusions and copies) per computation of an optimised HLO module, for the entry and the
    computations that loops and conditionals run (fusion bodies left out)."""
    counts = {}
    for comp in re.split(r"\n(?=\S)", hlo):
        m = re.match(r"(ENTRY )?%?([\w.\-]+)", comp)
        if not m or m.group(2).startswith("fused_") or "fusion" in m.group(2) or "HloModule" in comp[:20]:
            continue
        n = len(re.findall(r"= \S+ (?:fusion|copy|custom-call|sort|dot)\(", comp))
        if n:
            counts["entry" if m.group(1) else m.group(2)] = n
    return counts


def one_frame(hand, y: np.ndarray, calls: int) -> dict:
    """The warm FrameSolver frame: median time, kernels in its program, kernels executed per frame."""
    import wuji_jax as wj

    solver = wj.FrameSolver(hand)
    solver(y[0])
    kernel = solver._kernels[(False, False)]  # the compiled program
    frames = y[:calls]
    for f in frames[:50]:
        solver(f)
    times = []
    for _ in range(3):
        for f in frames:
            t0 = time.perf_counter()
            solver(f)
            times.append(time.perf_counter() - t0)
    med = float(np.median(times))
    traced = min(200, len(frames))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            for f in frames[:traced]:
                solver(f)
        path = sorted(glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True))[-1]
        data = jax.profiler.ProfileData.from_file(path)
    executed = collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            if line.name.startswith("tf_XLA"):  # XLA:CPU's executor and intra-op threads
                for e in line.events:
                    if not _NOT_KERNELS.match(e.name):
                        executed[e.name] += 1
    per_frame = sum(executed.values()) / traced
    program = _program_kernels(kernel.as_text())
    out = {"median_ms": round(med * 1e3, 4), "kernels_in_program": sum(program.values()),
           "kernels_by_computation": program, "kernels_executed_per_frame": round(per_frame, 1),
           "us_per_executed_kernel": round(med * 1e6 / per_frame, 3) if per_frame else None,
           "frames_timed": len(times)}
    print(f"  FrameSolver: {out['median_ms']:.3f} ms a frame; {out['kernels_in_program']} kernels in its program, "
          f"{out['kernels_executed_per_frame']:.0f} executed a frame ({out['us_per_executed_kernel']} us each)",
          flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)
    import wuji_jax as wj

    hand = wj.load_hand("right")
    y, source = _frames(args.frames)
    print(f"batch of {len(y)} frames ({source}), one CPU device:", flush=True)
    batch = batch_stages(hand, y, args.repeats)
    print("one frame:", flush=True)
    frame = one_frame(hand, y, 621)
    payload = {"benchmark": "where the solver's time goes (default settings, one CPU device)",
               "data": source, "batch": batch, "frame_solver": frame, "hardware": hardware_info()}
    if not args.no_json:
        print("wrote", write_json("stages", payload))


if __name__ == "__main__":
    main()
