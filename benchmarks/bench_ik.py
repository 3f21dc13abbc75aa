"""IK benchmark: accuracy and speed of ``wuji_jax.solve``.

Accuracy (the default ``SolverConfig``: closed-form start + 3 LM iterations):

* synthetic round trip: angles uniform within the limits → ``wj.forward_keypoints`` → uniformly
  random rotation, translation ~ 0.3 m, scale 0.8–1.2 → ``wj.solve``, with 0 / 1 / 3 mm Gaussian noise
  per coordinate (``--frames`` frames each): median and p99 joint error (degrees), median and p99
  RMS residual (mm), fraction converged;
* real recordings (``--real``; default the bundled sample and, where present, dex-retargeting's
  ``dexret_human_joint_right.npy``): median per-keypoint error (mm) with the default model and after
  ``wj.calibrate`` on the same recording (in-sample).

Speed:

* frames/s over batch sizes 1, 10, 100, 1024, 10⁴, 10⁵ (10⁶, 10⁷ up to ``--max-batch``; default 10⁵
  on CPU, 10⁷ on an accelerator) of ``wj.solve`` under ``jax.jit`` with the input on the device(s):
  the first call (trace + compile + run) and the median of warm calls (at least ``--repeats``
  calls and about one second of them; large batches get fewer: about 20 s at most, at least one). The run starts with
  ``wj.use_cpu_cores(--devices)`` (one CPU device per core by default) and places each batch as
  ``wj.solve`` would (split over the devices from ``wj.devices.SPLIT_MIN_FRAMES`` frames per device);
  batches 1024 … 10⁴ are also timed on one device, batches from 1024 on also on the real
  recording (tiled) instead of the 1 mm synthetic frames;
* latency of one warm frame: the public call ``wj.solve(hand, frame)`` (numpy in, input checks
  included) and the jitted solver, median of ``--latency-calls`` calls; ``compile_s`` is the
  public call's first run minus its warm median;
* float32 vs float64 (the latter in a child process with ``JAX_ENABLE_X64=1``): compile, frames/s at
  batch 1024, noise-free accuracy;
* iterations vs accuracy: ``SolverConfig(iterations=k)``, k = 0 … 20: joint error without noise and
  with 1 mm, real-recording keypoint error, fraction converged, frames/s at batch 1024.

Writes ``benchmarks/results/ik_<device-kind>.json`` (``ik-quick_…`` with ``--quick``: a smoke run of
every stage with batches 1 and 1024, 1024 frames, iterations 1 and the default, one recording and a short
calibration; about 100 s of CPU time on 2 cores, nearly all of it XLA compilation).

    PYTHONPATH=. python benchmarks/bench_ik.py [--quick] [--max-batch 1e5] [--frames 10000]
        [--repeats 5] [--latency-calls 200] [--devices N] [--real PATH ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from wuji_jax.ik import CHUNK_FRAMES  # noqa: E402

from _util import (  # noqa: E402
    DEXRET_RECORDING, bundled_recording, hardware_info, jit_solver, load_recording, round_trip_data,
    ready, solve_in_chunks, time_fn, write_json,
)

BATCHES = (1, 10, 100, 1024, 10_000, 100_000, 1_000_000, 10_000_000)
ITERATIONS = (0, 1, 2, 3, 5, 8, 10, 20)
NOISE_MM = (0, 1, 3)
CHUNK = 1024  # accuracy runs and the per-config speed figures use this one batch shape
TIMED_SECONDS = 20.0  # at most about this much timed warm calls per batch size


def first_call(fn, *args) -> float:
    t0 = time.perf_counter()
    ready(fn(*args))
    return time.perf_counter() - t0


def accuracy(q_true: np.ndarray, r) -> dict:
    """Joint error (degrees), RMS residual (mm) and convergence of a solve against known angles."""
    err = np.degrees(np.abs(np.asarray(r.angles, np.float64) - q_true))
    res = np.asarray(r.residual, np.float64) * 1e3
    return dict(joint_error_median_deg=float(np.median(err)), joint_error_p99_deg=float(np.percentile(err, 99)),
                residual_median_mm=float(np.median(res)), residual_p99_mm=float(np.percentile(res, 99)),
                converged_fraction=float(np.mean(r.converged)))


def split_kernel(config, hand, yb: np.ndarray, rows):
    """``(hand, landmarks) → dict``: the kernel that ``wj.solve`` runs for the batch ``yb`` when it
    splits it over the devices of ``rows`` (each device solves its rows, in chunks), with weights and
    the start pose already on the devices; the landmarks must be placed with ``rows``."""
    from wuji_jax.ik import api

    kernel = api.split_kernel(rows.mesh)
    w, q0 = jax.device_put(api.default_inputs(hand, yb, None, None, np), rows)
    cfg = api.config_arrays(config, yb.dtype)
    return lambda h, y: kernel(h, y, w, q0, cfg)


def speed_row(solver, hand, y, batch: int, repeats: int, split: bool = True, config=None) -> dict:
    """First call and warm timing of ``solver`` on the first ``batch`` frames of ``y`` (tiled), placed
    as ``wj.solve`` places them: where it would split them over the local devices (``split``), its
    split kernel (:func:`split_kernel` for ``config``) is timed instead of ``solver``."""
    import wuji_jax as wj
    from wuji_jax.runtime.devices import split_over_devices

    yb = np.resize(y, (batch,) + y.shape[1:])
    yb = yb.astype(np.float64 if yb.dtype == np.float64 and jax.config.jax_enable_x64 else np.float32)
    rows = split_over_devices(batch) if split else None
    if rows:
        solver = split_kernel(config or wj.SolverConfig(), hand, yb, rows)
    yb = jax.device_put(yb, rows or jax.devices()[0])
    first = first_call(solver, hand, yb)
    t = time_fn(solver, hand, yb, repeats=1, warmup=0)
    # at least `repeats` calls and about a second of them (short calls are noisy), at most ~20 s
    reps = int(max(1, min(max(repeats, 1.0 / max(t.median, 1e-9)), TIMED_SECONDS // max(t.median, 1e-9))))
    if reps > 1:
        t = time_fn(solver, hand, yb, repeats=reps, warmup=0)
    return dict(batch=batch, devices=len(yb.sharding.device_set), first_call_s=first, median_s=t.median,
                min_s=t.min, cpu_median_s=t.cpu_median, times_s=t.times, frames_per_s=batch / t.median,
                frames_per_s_best=batch / t.min)


def float64_child(frames: int, repeats: int) -> dict:
    """The float64 figures; runs in a child process started with ``JAX_ENABLE_X64=1``."""
    import wuji_jax as wj

    hand = wj.load_hand("right").astype(jnp.float64)
    q, y = round_trip_data(hand, frames, seed=0)  # the parent's noise-free set, FK in float64
    solver = jit_solver()
    row = speed_row(solver, hand, y, CHUNK, repeats)
    acc = accuracy(q, solve_in_chunks(solver, hand, y, CHUNK))
    return dict(dtype=str(jnp.asarray(y).dtype), batch=CHUNK, first_call_s=row["first_call_s"],
                frames_per_s=row["frames_per_s"], **acc)


def run_float64(frames: int, repeats: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--float64-child", "--frames", str(frames),
           "--repeats", str(repeats)]
    done = subprocess.run(cmd, env=dict(os.environ, JAX_ENABLE_X64="1"), capture_output=True, text=True)
    if done.returncode:
        return dict(dtype="float64", error=(done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def real_recording(path, solver, hand, quick: bool) -> dict:
    import wuji_jax as wj

    y = load_recording(path)
    r = solve_in_chunks(solver, hand, y, CHUNK)
    t0 = time.perf_counter()
    calibrated = wj.calibrate(hand, y, **(dict(rounds=1, steps=50) if quick else {}))
    cal_s = time.perf_counter() - t0
    rc = solve_in_chunks(solver, calibrated, y, CHUNK)
    return dict(file=os.path.basename(str(path)), frames=len(y),
                median_keypoint_error_mm=float(np.median(r.errors) * 1e3),
                median_rms_residual_mm=float(np.median(r.residual) * 1e3),
                median_keypoint_error_mm_calibrated=float(np.median(rc.errors) * 1e3),
                median_rms_residual_mm_calibrated=float(np.median(rc.residual) * 1e3),
                calibration_s=cal_s, calibration="wj.calibrate on the same frames (in-sample)"
                + (", rounds=1, steps=50 (--quick)" if quick else ", default settings"))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run of every stage with small sizes")
    ap.add_argument("--max-batch", type=float, default=None,
                    help="largest batch (default 1e5 on CPU, 1e7 on an accelerator)")
    ap.add_argument("--frames", type=int, default=10_000, help="synthetic frames per accuracy set")
    ap.add_argument("--repeats", type=int, default=5, help="timed warm calls per batch size (median)")
    ap.add_argument("--latency-calls", type=int, default=200, help="calls timed for the one-frame latency")
    ap.add_argument("--real", nargs="*", default=None,
                    help="landmark recordings (metres) for the real-data figures; default the bundled "
                         "sample and dexret_human_joint_right.npy where present")
    ap.add_argument("--devices", type=int, default=None,
                    help="CPU devices to split big batches over (default: one per core, wj.use_cpu_cores)")
    ap.add_argument("--no-json", action="store_true", help="print only")
    ap.add_argument("--float64-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    import wuji_jax as wj

    cpu_devices = wj.use_cpu_cores(args.devices)  # before JAX computes anything
    if args.float64_child:  # internal: the float64 run in a fresh process, JSON on stdout
        print(json.dumps(float64_child(args.frames, args.repeats)))
        return {}

    start = time.perf_counter()
    k_default = wj.SolverConfig().iterations
    on_cpu = jax.default_backend() == "cpu"
    max_batch = int(args.max_batch or (1e5 if on_cpu else 1e7))
    batches = [b for b in BATCHES if b <= max_batch]
    iterations = tuple(sorted(set(ITERATIONS) | {k_default}))
    frames = args.frames
    real = args.real if args.real is not None else [
        p for p in (bundled_recording(), DEXRET_RECORDING) if os.path.exists(p)]
    if args.quick:
        batches = [b for b in batches if b in (1, CHUNK)]
        iterations, frames, real = (1, k_default), CHUNK, real[:1]

    hand = wj.load_hand("right")
    info = hardware_info()
    print(f"{info['cpu_model']} ({info['cpu_count_usable']} usable cores), {info['jax_backend']}/"
          f"{info['device_kind']}, jax {info['jax']}, load {info['load_average_1_5_15min']}", flush=True)
    sets = {}  # noise mm -> (true angles, float32 landmarks)
    for mm in NOISE_MM:
        q, y = round_trip_data(hand, frames, seed=mm, noise=mm * 1e-3)
        sets[mm] = q, y.astype(np.float32)
    solvers = {k: jit_solver(wj.SolverConfig(iterations=k)) for k in iterations}
    default = solvers[k_default]

    def timed(y, b, split=True, note=""):
        row = speed_row(default, hand, y, b, args.repeats, split=split)
        print(f"{b:>9} {row['devices']:>7} {row['first_call_s']:>12.2f} {row['median_s'] * 1e3:>11.3f} "
              f"{row['frames_per_s']:>11.4g}{note}", flush=True)
        return row

    print(f"{'batch':>9} {'devices':>7} {'first call s':>12} {'median ms':>11} {'frames/s':>11}", flush=True)
    speed = [timed(sets[1][1], b) for b in batches]
    # the same batches on one device, for comparison
    one_device = [timed(sets[1][1], b, split=False) for b in batches
                  if len(jax.local_devices()) > 1 and CHUNK <= b <= 10_000]
    # the same batches of the real recording (dex-retargeting's, where present), tiled
    speed_real = []
    if real:
        name = os.path.basename(str(real[-1]))
        rec = load_recording(real[-1])
        speed_real = [dict(timed(rec, b, note=f"  ({name})"), file=name) for b in batches if b >= CHUNK]

    # one warm frame, public call (its first call is the compile time a user sees) and jitted
    frame = sets[1][1][0]
    public = lambda f: wj.solve(hand, f)  # noqa: E731
    first = first_call(public, frame)
    t_pub = time_fn(public, frame, repeats=args.latency_calls, warmup=3)
    t_jit = time_fn(default, hand, jnp.asarray(frame[None]), repeats=args.latency_calls, warmup=3)
    streamer = wj.FrameSolver(hand)  # the same fit, one frame at a time, numpy results
    first_stream = first_call(streamer, frame)
    t_stream = time_fn(streamer, frame, repeats=args.latency_calls, warmup=3)
    latency = dict(calls=args.latency_calls, public_first_call_s=first, public_median_ms=t_pub.median * 1e3,
                   public_min_ms=t_pub.min * 1e3, public_p90_ms=float(np.percentile(t_pub.times, 90) * 1e3),
                   jit_median_ms=t_jit.median * 1e3, jit_min_ms=t_jit.min * 1e3,
                   jit_p90_ms=float(np.percentile(t_jit.times, 90) * 1e3),
                   frame_solver_first_call_s=first_stream, frame_solver_median_ms=t_stream.median * 1e3,
                   frame_solver_min_ms=t_stream.min * 1e3,
                   frame_solver_p90_ms=float(np.percentile(t_stream.times, 90) * 1e3))
    print(f"one frame: wj.solve first call {first:.2f} s, warm median {latency['public_median_ms']:.3f} ms "
          f"(jitted {latency['jit_median_ms']:.3f} ms); wj.FrameSolver warm median "
          f"{latency['frame_solver_median_ms']:.3f} ms (p90 {latency['frame_solver_p90_ms']:.3f} ms)", flush=True)

    sweep_rec = load_recording(real[-1]) if real else None  # dex-retargeting's recording where present
    print(f"{'iters':>5} {'median ° (0 mm)':>15} {'p99 ° (0 mm)':>13} {'p99 ° (1 mm)':>13} {'converged':>9} "
          f"{'frames/s @1024':>14} {'real kp mm':>10}")
    acc, sweep = {}, []  # acc: (iterations, noise mm) -> accuracy
    for k in iterations:
        row = speed_row(solvers[k], hand, sets[1][1], CHUNK, args.repeats,  # first: compiles this config
                        config=wj.SolverConfig(iterations=k))
        for mm in NOISE_MM if k == k_default else (0, 1):
            q, y = sets[mm]
            acc[k, mm] = accuracy(q, solve_in_chunks(solvers[k], hand, y, CHUNK))
        real_mm = (float(np.median(solve_in_chunks(solvers[k], hand, sweep_rec, CHUNK).errors) * 1e3)
                   if sweep_rec is not None else None)
        sweep.append(dict(iterations=k, batch=CHUNK, frames_per_s=row["frames_per_s"], first_call_s=row["first_call_s"],
                          noise_free=acc[k, 0], noise_1mm=acc[k, 1], real_file=os.path.basename(str(real[-1])) if real else None,
                          real_median_keypoint_error_mm=real_mm))
        print(f"{k:>5} {acc[k, 0]['joint_error_median_deg']:>15.3g} {acc[k, 0]['joint_error_p99_deg']:>13.3g} "
              f"{acc[k, 1]['joint_error_p99_deg']:>13.3g} {acc[k, 0]['converged_fraction']:>9.3f} "
              f"{row['frames_per_s']:>14.4g} {real_mm if real_mm is not None else float('nan'):>10.3f}", flush=True)

    synthetic = [dict(noise_mm=mm, frames=frames, **acc[k_default, mm]) for mm in NOISE_MM]
    print(f"{'noise mm':>8} {'median °':>10} {'p99 °':>10} {'resid p99 mm':>13} {'converged':>9}")
    for s in synthetic:
        print(f"{s['noise_mm']:>8} {s['joint_error_median_deg']:>10.3g} {s['joint_error_p99_deg']:>10.3g} "
              f"{s['residual_p99_mm']:>13.3g} {s['converged_fraction']:>9.3f}", flush=True)

    recordings = []
    for p in real:
        recordings.append(real_recording(p, default, hand, args.quick))
        r = recordings[-1]
        print(f"{r['file']}: median keypoint error {r['median_keypoint_error_mm']:.2f} mm, calibrated "
              f"{r['median_keypoint_error_mm_calibrated']:.2f} mm ({r['calibration_s']:.0f} s)", flush=True)

    at_chunk = next(r for r in speed + sweep if r["batch"] == CHUNK)  # first use of that shape: compiles
    precision = [dict(dtype="float32", batch=CHUNK, first_call_s=at_chunk["first_call_s"],
                      frames_per_s=sweep[iterations.index(k_default)]["frames_per_s"],
                      **acc[k_default, 0]),
                 run_float64(frames, args.repeats)]
    for p in precision:
        print("precision", p, flush=True)

    payload = dict(
        benchmark="wuji_jax.solve: accuracy (synthetic round trip, real recordings) and speed",
        function="wuji_jax.solve",
        model="WG110v12 right",
        dtype="float32",
        config=dataclasses.asdict(wj.SolverConfig()),
        quick=args.quick,
        notes=("speed: wj.solve under jax.jit, landmarks already on the device(s) (no host-side checks), split over "
               "the local devices as wj.solve splits them, by its split kernel (shard_map, chunks of <= "
               f"{CHUNK_FRAMES} frames per device; wj.use_cpu_cores: one CPU device per core; "
               "speed_one_device: the same on one device), 1 mm noisy "
               "synthetic frames tiled to the batch; first_call_s = trace + compile + first run for that shape; "
               "latency.public_* = wj.solve(hand, frame) with a numpy (21, 3) frame (input checks, transfers); "
               "latency.frame_solver_* = wj.FrameSolver(hand)(frame), the same fit with numpy results (input "
               "checks included); "
               "compile_s = latency.public_first_call_s - latency.public_median_ms; iterations[].first_call_s includes "
               "compilation except for the default iterations when the speed table already compiled batch 1024; joint errors over all 20 "
               "angles of every frame; precision: the noise-free set at batch 1024, float32 in this process, "
               "float64 in a child process with JAX_ENABLE_X64=1 (data from float64 FK); first_call_s = compile; load_average_after: system load when the run ended"),
        hardware=info,
        load_average_after=hardware_info()["load_average_1_5_15min"],
        compile_s=first - t_pub.median,
        latency=latency,
        cpu_devices=cpu_devices,
        speed=speed,
        speed_one_device=one_device,
        speed_real_recording=speed_real,
        accuracy=dict(synthetic=synthetic, real=recordings),
        iterations=sweep,
        precision=precision,
        wall_s=time.perf_counter() - start,
    )
    print(f"wall {payload['wall_s']:.0f} s")
    if not args.no_json:
        print("wrote", write_json("ik-quick" if args.quick else "ik", payload))
    return payload


if __name__ == "__main__":
    main()
