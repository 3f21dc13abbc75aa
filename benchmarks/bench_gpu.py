"""One-shot accelerator run: the solver's accuracy and speed on a lent GPU, at the default settings.

Meant for a device lease of a few minutes: every stage is timed and skipped (and named in
``skipped``) once less than its need is left of ``--budget`` seconds; a failing stage is recorded and
the run goes on. Stages:

* **accuracy**: ``wj.solve`` on dex-retargeting's recording (``--dexret``) and the bundled sample:
  per-frame RMS residual median / p95 / max, median keypoint error, converged frames, the fist frames'
  Inspire thumb rotation; with ``--expected`` (an ``.npz`` of the CPU's angles for the same frames),
  the largest angle difference GPU − CPU. A noise-free round trip (one chunk of synthetic frames).
* **variants**: frames/s of the solver kernel (inputs already on the device) at batch ``--frames``
  (the real recording tiled), for the chunk sizes in ``--chunks``, each with its compile time.
* **public**: ``wj.solve`` + ``wj.inspire.to_inspire`` on numpy landmarks (transfers included), the
  user's call, at batch ``--frames``: real frames tiled, and synthetic frames with 1 mm noise; where
  its time goes (host checks, transfer, chunk calls against one program).
* **FrameSolver**: first and warm frames (it runs on the host's CPU on every machine).
* **profile** (``--profile``): a ``jax.profiler`` trace of one kernel call (Perfetto JSON) and the
  compiled program's HLO, for reading which kernels take the time.
* **fk**: ``wj.forward_keypoints`` at batch ``--frames``.
* **cli**: ``wuji-jax solve`` on ``--frames`` frames in a ``.npy``, cold and warm compilation cache.

    PYTHONPATH=. python benchmarks/bench_gpu.py --out-dir $OUT --dexret .gpudata/dexret_human_joint_right.npy

Writes ``gpu_<device>.json`` (into ``--out-dir``, default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import _util  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Run:
    """Stages under a time budget: each is recorded, skipped when too little time is left, or its
    error noted."""

    def __init__(self, budget: float):
        self.start = time.perf_counter()
        self.budget = budget
        self.out: dict = {"skipped": [], "errors": {}}

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def stage(self, name: str, need: float, fn, *args, **kw):
        if self.left() < need:
            self.out["skipped"].append(f"{name} (needs ~{need:.0f} s, {self.left():.0f} s left)")
            print(f"[skip] {name}", flush=True)
            return None
        t0 = time.perf_counter()
        print(f"[stage] {name} ({self.left():.0f} s left)", flush=True)
        try:
            res = fn(*args, **kw)
        except Exception as e:  # a lease is short: note the failure, run the other stages
            self.out["errors"][name] = f"{type(e).__name__}: {e}"[:2000]
            traceback.print_exc()
            return None
        print(f"[done] {name} in {time.perf_counter() - t0:.1f} s: {json.dumps(res)[:600]}", flush=True)
        return res


def nvidia_smi() -> str | None:
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return p.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def timed(fn, *args, repeats: int = 3):
    """(first call s, median of ``repeats`` later calls s, last result)."""
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return first, float(np.median(ts)), r


def accuracy(hand, y, name, expected=None, fist=slice(258, 281)):
    import wuji_jax as wj

    t0 = time.perf_counter()
    r = jax.block_until_ready(wj.solve(hand, y))
    first = time.perf_counter() - t0
    res = np.asarray(r.residual) * 1e3
    err = np.asarray(r.errors) * 1e3
    out = dict(recording=name, frames=len(y), first_call_s=first, residual_median_mm=float(np.median(res)),
               residual_p95_mm=float(np.percentile(res, 95)), residual_max_mm=float(res.max()),
               frames_above_12mm=int((res > 12).sum()), keypoint_error_median_mm=float(np.median(err[err > 0])),
               converged_fraction=float(np.mean(r.converged)), iterations_mean=float(np.mean(r.iterations)))
    if len(y) > fist.stop:
        rot = np.asarray(wj.inspire.to_inspire(r.angles))[fist, 5]
        out.update(fist_thumb_rotation_mean=float(rot.mean()), fist_thumb_rotation_max=float(rot.max()))
    if expected is not None:
        d = np.degrees(np.abs(np.asarray(r.angles, np.float64) - expected["angles"]))
        out.update(vs_cpu_angle_diff_max_deg=float(d.max()), vs_cpu_angle_diff_p99_deg=float(np.percentile(d, 99)),
                   vs_cpu_residual_diff_max_mm=float(np.abs(res - expected["residual"] * 1e3).max()))
    return out


def round_trip(hand, n):
    import wuji_jax as wj

    q, y = _util.round_trip_data(hand, n, seed=0)
    r = wj.solve(hand, y.astype(np.float32))
    err = np.degrees(np.abs(np.asarray(r.angles, np.float64) - q))
    return dict(frames=n, joint_error_median_deg=float(np.median(err)), joint_error_p99_deg=float(np.percentile(err, 99)),
                residual_p99_mm=float(np.percentile(np.asarray(r.residual) * 1e3, 99)),
                converged_fraction=float(np.mean(r.converged)))


@functools.lru_cache(maxsize=None)
def kernel(chunk: int):
    """The solver on device-resident inputs, chunks of ``chunk`` frames (one jit per chunk size)."""
    from wuji_jax.ik import api

    def f(hand, lm, cfg):
        w, q0 = api.default_inputs(hand, lm, None, None, jnp)
        return api.solve_chunked(hand, lm, w, q0, cfg, False, chunk=chunk)

    return jax.jit(f)


_COMPILED: dict = {}


def compiled(chunk: int, hand, lm, cfg):
    """:func:`kernel` compiled ahead of time for these arguments, once per chunk size and shape (the
    variants and the profile share it)."""
    key = (chunk, lm.shape)
    if key not in _COMPILED:
        _COMPILED[key] = kernel(chunk).lower(hand, lm, cfg).compile()
    return _COMPILED[key]


def variants(hand, y, chunks, run):
    from wuji_jax.ik import api

    cfg = api.config_arrays(api.DEFAULT_CONFIG, np.float32)
    lm = jax.device_put(jnp.asarray(y))
    rows = []
    for chunk in chunks:
        if run.left() < 40:
            run.out["skipped"].append(f"variant chunk {chunk}")
            continue
        t0 = time.perf_counter()
        f = compiled(chunk, hand, lm, cfg)
        jax.block_until_ready(f(hand, lm, cfg))
        first = time.perf_counter() - t0
        _, med, r = timed(f, hand, lm, cfg)
        row = dict(chunk=chunk, frames=len(y), compile_and_first_s=first, median_s=med, frames_per_s=len(y) / med,
                   iterations_mean=float(jnp.mean(r["iterations"])),
                   residual_p95_mm=float(jnp.percentile(r["residual"], 95) * 1e3))
        rows.append(row)
        print("  variant", row, flush=True)
    return rows


def public(hand, y, name):
    import wuji_jax as wj

    run = lambda: wj.inspire.to_inspire(wj.solve(hand, y).angles)  # noqa: E731
    first, med, _ = timed(run, repeats=3)
    solve_only = timed(lambda: wj.solve(hand, y), repeats=3)[1]
    return dict(data=name, frames=len(y), first_call_s=first, solve_inspire_median_s=med,
                solve_inspire_frames_per_s=len(y) / med, solve_median_s=solve_only, solve_frames_per_s=len(y) / solve_only)


def parts(hand, y):
    """Where ``wj.solve``'s time goes on numpy input: the host-side checks, the transfer, the solver's
    program on inputs already on the device, the whole call (s)."""
    import wuji_jax as wj
    from wuji_jax.ik import api

    med = lambda fn: timed(fn)[1]  # noqa: E731 (warm median)
    cfg = api.config_arrays(api.DEFAULT_CONFIG, np.float32)
    h = hand.replace(name="", side="")
    dev = jax.device_put(y)
    whole = jax.jit(lambda h, lm, c: api.solve_batch(h, lm, None, None, c, False))
    return dict(frames=len(y), check_input_s=med(lambda: api.check_solver_input(hand, y, None, None, True)),
                device_put_s=med(lambda: jax.device_put(y)),
                one_program_s=med(lambda: whole(h, dev, cfg)), solve_numpy_s=med(lambda: wj.solve(hand, y)))


def frame_solver(hand, frames):
    """``wj.FrameSolver`` on this machine (it runs on the host's CPU): first frame and warm median."""
    import wuji_jax as wj

    fs = wj.FrameSolver(hand)
    t0 = time.perf_counter()
    fs(frames[0])
    first = time.perf_counter() - t0  # compiles, then answers
    lat = []
    for f in frames:
        t0 = time.perf_counter()
        fs(f)
        lat.append(time.perf_counter() - t0)
    return dict(frames=len(frames), first_frame_s=first, median_ms=float(np.median(lat) * 1e3),
                p90_ms=float(np.percentile(lat, 90) * 1e3))


def profile(hand, y, chunk, out_dir: Path):
    from wuji_jax.ik import api

    cfg = api.config_arrays(api.DEFAULT_CONFIG, np.float32)
    lm = jax.device_put(jnp.asarray(y))
    f = compiled(chunk, hand, lm, cfg)
    jax.block_until_ready(f(hand, lm, cfg))
    hlo = f.as_text()
    with gzip.open(out_dir / "gpu_hlo.txt.gz", "wt") as fh:
        fh.write(hlo)
    tmp = Path(tempfile.mkdtemp())
    with jax.profiler.trace(str(tmp), create_perfetto_trace=True):
        jax.block_until_ready(f(hand, lm, cfg))
    traces = sorted(tmp.rglob("*.json.gz"))
    if traces:
        shutil.copy(traces[0], out_dir / "gpu_trace.json.gz")
    return dict(frames=len(y), chunk=chunk, hlo_chars=len(hlo), trace=[str(p.relative_to(tmp)) for p in traces])


def fk(hand, n):
    import wuji_jax as wj

    q = jax.random.uniform(jax.random.PRNGKey(0), (n, hand.num_joints), jnp.float32,
                           jnp.asarray(hand.lower), jnp.asarray(hand.upper))
    first, med, _ = timed(lambda q: wj.forward_keypoints(hand, q), q)
    return dict(batch=n, first_call_s=first, median_s=med, sets_per_s=n / med)


def cli(y):
    tmp = Path(tempfile.mkdtemp())
    np.save(tmp / "big.npy", y)
    # the CLI as its own process: this one holds most of the GPU's memory (JAX preallocates 75 %), so
    # the child allocates as it goes instead
    env = dict(os.environ, WUJI_JAX_CACHE_DIR=str(tmp / "cache"), PYTHONPATH=str(ROOT),
               XLA_PYTHON_CLIENT_PREALLOCATE="false")
    runs = []
    for label in ("cold", "warm"):
        out = tmp / f"out_{label}.parquet"
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "wuji_jax", "solve", str(tmp / "big.npy"), "-o", str(out), "--quiet"],
                           capture_output=True, text=True, env=env, timeout=300)
        wall = time.perf_counter() - t0
        runs.append(dict(cache=label, wall_s=wall, frames_per_s=len(y) / wall, rc=p.returncode,
                         tail=(p.stdout + p.stderr)[-600:]))
        print("  cli", runs[-1], flush=True)
    return runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=330.0, help="seconds before the remaining stages are skipped")
    ap.add_argument("--out-dir", default=None, help="folder for the JSON (and the profile files)")
    ap.add_argument("--frames", type=int, default=1 << 20, help="batch of the speed stages")
    ap.add_argument("--chunks", default="65536,16384,262144,1048576", help="chunk sizes of the variants stage")
    ap.add_argument("--dexret", default=str(_util.DEXRET_RECORDING), help="dex-retargeting's recording (.npy)")
    ap.add_argument("--expected", default=None, help=".npz with the CPU's 'angles' and 'residual' on --dexret")
    ap.add_argument("--round-trip", type=int, default=65536, help="frames of the noise-free round trip")
    ap.add_argument("--profile", action="store_true", help="write a profiler trace and the compiled HLO")
    ap.add_argument("--no-cli", action="store_true")
    args = ap.parse_args(argv)

    import wuji_jax as wj

    run = Run(args.budget)
    out_dir = Path(args.out_dir) if args.out_dir else _util.RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    hand = wj.load_hand("right")
    out = run.out
    out["hardware"] = _util.hardware_info()
    out["nvidia_smi"] = nvidia_smi()
    out["config"] = {k: (v.item() if hasattr(v, "item") else v) for k, v in wj.SolverConfig().numbers().items()}
    out["accelerator_chunk_frames"] = wj.solver.ACCELERATOR_CHUNK_FRAMES
    print("device:", jax.devices()[0], out["nvidia_smi"], flush=True)

    dexret = Path(args.dexret)
    real = _util.load_recording(_util.bundled_recording())
    recordings = {"bundled sample": real}
    if dexret.exists():
        recordings = {"dexret_human_joint_right": np.load(dexret).astype(np.float32), **recordings}
    expected = dict(np.load(args.expected)) if args.expected else None
    out["accuracy"] = [run.stage(f"accuracy {k}", 30, accuracy, hand, v, k, expected if k.startswith("dexret") else None)
                       for k, v in recordings.items()]
    out["round_trip"] = run.stage("round trip", 30, round_trip, hand, args.round_trip)

    base = next(iter(recordings.values()))
    tiled = np.resize(base, (args.frames, 21, 3)).astype(np.float32)
    chunks = [int(c) for c in args.chunks.split(",") if c]
    out["variants"] = run.stage("variants", 40, variants, hand, tiled, chunks, run)
    out["public"] = [run.stage("public real", 40, public, hand, tiled, "real frames tiled")]
    _, noisy = _util.round_trip_data(hand, args.frames, seed=3, noise=0.001)
    out["public"].append(run.stage("public synthetic", 40, public, hand, noisy.astype(np.float32), "synthetic, 1 mm noise"))
    out["parts"] = run.stage("parts of wj.solve", 40, parts, hand, tiled)
    out["frame_solver"] = run.stage("FrameSolver", 20, frame_solver, hand, base[:300])
    if args.profile:
        out["profile"] = run.stage("profile", 20, profile, hand, tiled, wj.solver.ACCELERATOR_CHUNK_FRAMES, out_dir)
    out["fk"] = run.stage("fk", 15, fk, hand, args.frames)
    if not args.no_cli:
        out["cli"] = run.stage("cli", 90, cli, tiled)
    out["wall_s"] = time.perf_counter() - run.start
    name = f"gpu_{_util.slug(jax.devices()[0].device_kind)}.json"
    (out_dir / name).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")

    print("\n== summary ==")
    for a in out["accuracy"] or []:
        if a:
            print(f"accuracy {a['recording']}: residual p95 {a['residual_p95_mm']:.2f} max {a['residual_max_mm']:.2f} mm, "
                  f"keypoint median {a['keypoint_error_median_mm']:.2f}, vs CPU {a.get('vs_cpu_angle_diff_max_deg')}")
    for v in out["variants"] or []:
        print(f"kernel chunk {v['chunk']:>8}: {v['frames_per_s'] / 1e6:7.2f} M frames/s, compile+first "
              f"{v['compile_and_first_s']:.1f} s, iterations {v['iterations_mean']:.1f}")
    for p in out["public"]:
        if p:
            print(f"public {p['data']}: solve+to_inspire {p['solve_inspire_frames_per_s'] / 1e6:.2f} M frames/s, "
                  f"solve {p['solve_frames_per_s'] / 1e6:.2f} M/s")
    print("skipped:", out["skipped"], "errors:", list(out["errors"]))
    return out


if __name__ == "__main__":
    main()
