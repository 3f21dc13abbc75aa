"""The dataset pipeline against the solver alone: ``wuji-jax solve big.npy -o out.parquet`` as a whole
process (start-up, compilation or cache load, reading, solving, writing, plot and summary included)
next to ``wj.solve`` on the same frames in a warm process.

1. Makes ``--frames`` frames (default 300,000) from dex-retargeting's real recording
   (``../shared/data/dexret_human_joint_right.npy``, else the bundled sample): frames drawn at random
   with 2 mm Gaussian noise per coordinate, float32, one ``.npy``.
2. Runs the CLI in fresh processes with a fresh compilation cache folder: once cold (empty cache),
   then ``--repeats`` times warm (the second run of the day); wall clock and peak RSS of each child
   (``os.wait4``: that child's own ``ru_maxrss``, Linux kB).
3. Times ``wj.solve`` + ``wj.inspire.to_inspire`` on the same frames in this process, warm (compiled
   first), with the CLI's devices (one JAX CPU device per core), at batch 16,384.

Writes ``benchmarks/results/pipeline_<device>.json``::

    PYTHONPATH=. python benchmarks/bench_pipeline.py [--frames 300000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "dexret_human_joint_right.npy"


def make_frames(path: Path, frames: int, seed: int = 0) -> None:
    if REAL.exists():
        src = np.load(REAL).astype(np.float32)
    else:
        with np.load(ROOT / "assets" / "samples" / "human_hand_video_landmarks.npz") as z:
            src = np.asarray(z["world"], np.float32)
    rng = np.random.default_rng(seed)
    out = src[rng.integers(0, len(src), frames)] + rng.normal(0, 0.002, (frames, 21, 3)).astype(np.float32)
    np.save(path, out.astype(np.float32))


def run_cli(data: Path, out: Path, cache: Path) -> dict:
    """One whole ``wuji-jax solve`` process: wall seconds, its own peak RSS (MiB, from ``os.wait4``'s
    resource usage of that child alone)."""
    import tempfile

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WUJI_JAX_NO_CACHE", None)
    cmd = [sys.executable, "-m", "wuji_jax", "solve", str(data), "-o", str(out), "--quiet", "--no-resume",
           "--cache-dir", str(cache)]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            raise SystemExit(f"wuji-jax solve failed ({p.returncode}): {err.read().decode(errors='replace')[-2000:]}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024.0}


def solver_alone(data: Path, batch: int = 16384, repeats: int = 3) -> dict:
    """``wj.solve`` + ``to_inspire`` on the same frames, warm, in a child with the CLI's devices."""
    code = f"""
import json, time, numpy as np
from wuji_jax.runtime.devices import use_cpu_cores
use_cpu_cores()
import jax, wuji_jax as wj
lm = np.load({str(data)!r})
hand = wj.load_hand("right")
B = {batch}
def run():
    for s in range(0, len(lm), B):
        x = lm[s:s + B]
        if len(x) < B:
            x = np.concatenate([x, np.repeat(x[-1:], B - len(x), 0)])
        r = wj.solve(hand, x)
        c = wj.inspire.to_inspire(r.angles)
        jax.block_until_ready(c)
run()  # compile
ts = []
for _ in range({repeats}):
    t0 = time.perf_counter(); run(); ts.append(time.perf_counter() - t0)
print(json.dumps({{"median_s": float(np.median(ts)), "devices": len(jax.devices())}}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"solver-alone run failed: {p.stderr.strip()[-2000:]}")
    import json

    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=3, help="warm CLI runs (median reported)")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="wuji_bench_pipeline_"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"frames_{args.frames}.npy"
    if not data.exists():
        make_frames(data, args.frames)
    cache = work / "xla-cache"
    if cache.exists():  # the cold run must start with an empty cache
        import shutil

        shutil.rmtree(cache)
    cold = run_cli(data, work / "out.parquet", cache)
    print(f"cold cache: {cold['wall_s']:.1f} s ({args.frames / cold['wall_s']:,.0f} frames/s)")
    warm = [run_cli(data, work / "out.parquet", cache) for _ in range(args.repeats)]
    wall = statistics.median(w["wall_s"] for w in warm)
    print(f"warm cache: {wall:.1f} s median of {len(warm)} ({args.frames / wall:,.0f} frames/s), "
          f"peak RSS {max(w['peak_rss_mib'] for w in warm):.0f} MiB")
    alone = solver_alone(data)
    rate_alone = args.frames / alone["median_s"]
    print(f"wj.solve + to_inspire alone, warm: {alone['median_s']:.1f} s ({rate_alone:,.0f} frames/s)")

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _util import hardware_info, write_json

    result = {
        "benchmark": "wuji-jax solve big.npy -o out.parquet, whole process, vs wj.solve + to_inspire alone",
        "frames": args.frames, "data": "dexret recording resampled with 2 mm noise, float32 .npy",
        "cli_cold": {**cold, "frames_per_s": args.frames / cold["wall_s"]},
        "cli_warm_runs": warm, "cli_warm_wall_s_median": wall, "cli_warm_frames_per_s": args.frames / wall,
        "cli_warm_peak_rss_mib": max(w["peak_rss_mib"] for w in warm),
        "solver_alone": {**alone, "batch": 16384, "frames_per_s": rate_alone},
        "cli_warm_over_solver_alone": (args.frames / wall) / rate_alone,
        "hardware": hardware_info(),
    }
    path = write_json("pipeline", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
