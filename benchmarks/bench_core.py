"""The solver core's figures, each printed on a line of its own and written to JSON.

* **Time to first answer**, each in a fresh process with an empty compilation cache: ``import
  wuji_jax``; the first ``wj.solve`` on 64 frames; the first ``wj.FrameSolver`` frame; ``wuji-jax
  solve`` on the bundled sample with a fresh cache folder (cold) and again (warm); the first gradient
  through ``wj.solve`` (``jax.jit(jax.value_and_grad(...))`` of an Inspire command with respect to
  one frame's landmarks, float32, default settings: what a learning pipeline pays before its first
  step); and the first and the second call, in one fresh process, of the other entry points a
  notebook meets: ``wj.solve_optax`` (8 frames, default optimizer and steps), ``wj.landmark_loss``
  (8 frames), ``wj.calibrate`` (default settings, the recording), ``wj.viz.draw_hand`` (a PNG); and
  ``wuji-jax pose pinch`` without a cache (wall clock).
* **Accuracy at the default settings** on dex-retargeting's recording and on the bundled sample:
  per-frame RMS residual (median, p95, max, frames above 15 mm), median per-keypoint error
  uncalibrated and after ``wj.calibrate``, converged frames, iterations; the fist frames' Inspire
  thumb rotation.
* **Round trip**: noise-free synthetic frames (seed-table-independent FK through ``forward_keypoints``
  under random similarities): joint error median / p99, residual p99, converged fraction.
* **Hostile input**: random, degenerate, huge, tiny and NaN-laced frames, all finite and within limits.
* **Speed** at the default settings: ``solve`` + ``to_inspire`` at batch 16384 (frames/s, median of
  repeats after a warm-up) and one warm ``FrameSolver`` frame (median ms). Side by side with dexi-rs:
  ``benchmarks/bench_vs_dexi.py``.

    PYTHONPATH=. python benchmarks/bench_core.py [--quick] [--no-json]

Writes ``benchmarks/results/core_<device-kind>.json``.
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

import jax  # noqa: E402
import numpy as np  # noqa: E402

from _util import (  # noqa: E402
    DEXRET_RECORDING, bundled_recording, hardware_info, load_recording, round_trip_data, slug, time_fn, versions,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
FIST = slice(258, 281)  # the recording's fist frames


def child(code: str, env: dict | None = None) -> dict:
    """Run ``code`` in a fresh Python (it prints one JSON line last) and return that line."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


FIRST_SOLVE = """
import time, json
t0 = time.perf_counter()
import numpy as np, jax, wuji_jax as wj
t1 = time.perf_counter()
hand = wj.load_hand("right")
y = np.load({data!r}).astype(np.float32)[:64]
jax.block_until_ready(wj.solve(hand, y))  # compiles, then answers
t2 = time.perf_counter()
solver = wj.FrameSolver(hand)
solver(y[0])
t3 = time.perf_counter()
print(json.dumps(dict(import_s=t1 - t0, first_solve_64_s=t2 - t1, first_frame_solver_s=t3 - t2)))
"""

FRAME_SOLVER_ONLY = """
import time, json
import numpy as np, wuji_jax as wj
y = np.load({data!r}).astype(np.float32)
t0 = time.perf_counter()
solver = wj.FrameSolver(wj.load_hand("right"))
solver(y[0])
t1 = time.perf_counter()
print(json.dumps(dict(first_frame_solver_s=t1 - t0)))
"""


FIRST_GRADIENT = """
import time, json
import numpy as np, jax, wuji_jax as wj
hand = wj.load_hand("right")
y = np.load({data!r}).astype(np.float32)[100]
t0 = time.perf_counter()
f = jax.jit(jax.value_and_grad(lambda lm: wj.inspire.to_inspire(wj.solve(hand, lm).angles)[3]))
jax.block_until_ready(f(y))
print(json.dumps(dict(first_gradient_s=time.perf_counter() - t0)))
"""


OTHER_CALLS = """
import time, json, tempfile
import numpy as np, jax, wuji_jax as wj
hand = wj.load_hand("right")
y = np.load({data!r}).astype(np.float32)
out = {{}}
def twice(name, f):
    t0 = time.perf_counter(); jax.block_until_ready(f()); t1 = time.perf_counter()
    jax.block_until_ready(f()); t2 = time.perf_counter()
    out[name] = [t1 - t0, t2 - t1]
twice("solve_optax", lambda: wj.solve_optax(hand, y[:8]).angles)
r = wj.solve(hand, y[:8])
ls = np.log(np.asarray(r.scale))
twice("landmark_loss", lambda: wj.landmark_loss(hand, r.angles, r.rotation, r.translation, ls, y[:8]))
twice("calibrate", lambda: wj.calibrate(hand, y).origin_xyz)
png = tempfile.mkdtemp() + "/hand.png"
twice("draw_hand", lambda: (wj.viz.draw_hand(hand, wj.named_pose("pinch"), png), np.zeros(0))[1])
print(json.dumps(out))
"""


def first_answer(data: Path, repeats: int) -> dict:
    env = {"WUJI_JAX_NO_CACHE": "1"}
    runs = [child(FIRST_SOLVE.format(data=str(data)), env) for _ in range(repeats)]
    fs = [child(FRAME_SOLVER_ONLY.format(data=str(data)), env) for _ in range(repeats)]
    out = {k: float(np.median([r[k] for r in runs])) for k in ("import_s", "first_solve_64_s")}
    # in a process of its own (no solve before it)
    out.update({k: float(np.median([r[k] for r in fs if r[k] is not None] or [np.nan]))
                for k in ("first_frame_solver_s",)})
    out["first_gradient_s"] = float(np.median([child(FIRST_GRADIENT.format(data=str(data)), env)["first_gradient_s"]
                                               for _ in range(repeats)]))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "wuji_jax", "solve", "-o", f"{tmp}/out.parquet", "--quiet",
               "--cache-dir", f"{tmp}/cache"]
        walls = []
        for _ in range(2):
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
                           capture_output=True)
            walls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "wuji_jax", "pose", "pinch", "-o", f"{tmp}/pinch.png"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env}, check=True, capture_output=True)
        pose_s = time.perf_counter() - t0
    out.update(cli_cold_s=walls[0], cli_warm_s=walls[1], cli_pose_s=pose_s)
    out["first_second_call_s"] = child(OTHER_CALLS.format(data=str(data)), env)
    return out


def accuracy(hand, y: np.ndarray, name: str, calibrate: bool) -> dict:
    import wuji_jax as wj

    r = wj.solve(hand, y.astype(np.float32))
    res = np.asarray(r.residual) * 1e3
    err = np.asarray(r.errors) * 1e3
    out = dict(recording=name, frames=len(y), residual_median_mm=float(np.median(res)),
               residual_p95_mm=float(np.percentile(res, 95)), residual_max_mm=float(res.max()),
               frames_above_15mm=int((res > 15).sum()), keypoint_error_median_mm=float(np.median(err[err > 0])),
               converged_fraction=float(np.mean(r.converged)), iterations_mean=float(np.mean(r.iterations)),
               iterations_max=int(np.max(r.iterations)))
    if calibrate:
        cal = wj.calibrate(hand, y)
        rc = wj.solve(cal, y.astype(np.float32))
        ec = np.asarray(rc.errors) * 1e3
        out["keypoint_error_median_calibrated_mm"] = float(np.median(ec[ec > 0]))
    if len(y) > FIST.stop:
        rot = np.asarray(wj.inspire.to_inspire(r.angles))[FIST, 5]
        out.update(fist_thumb_rotation_mean=float(rot.mean()), fist_thumb_rotation_max=float(rot.max()))
    return out


def round_trip(hand, n: int) -> dict:
    import wuji_jax as wj

    q, y = round_trip_data(hand, n, seed=0)
    r = wj.solve(hand, y.astype(np.float32))
    err = np.degrees(np.abs(np.asarray(r.angles, np.float64) - q))
    return dict(frames=n, joint_error_median_deg=float(np.median(err)), joint_error_p99_deg=float(np.percentile(err, 99)),
                residual_p99_mm=float(np.percentile(np.asarray(r.residual) * 1e3, 99)),
                converged_fraction=float(np.mean(r.converged)))


def hostile(hand, n: int) -> dict:
    import wuji_jax as wj

    rng = np.random.default_rng(0)
    y = rng.normal(0, 0.1, (n, 21, 3))
    k = n // 8
    y[:k] = 0.0  # all equal
    y[k:2 * k] = np.linspace(0, 1, 21)[None, :, None] * rng.normal(size=(k, 1, 3))  # collinear
    y[2 * k:3 * k] *= 1e4  # huge
    y[3 * k:4 * k] *= 1e-6  # tiny
    y[4 * k:5 * k][rng.random((k, 21)) < 0.3] = np.nan  # NaN-laced
    y[5 * k:6 * k, :, 2] = 0.0  # coplanar
    y[6 * k:6 * k + 10] *= 1e30  # near float32 overflow
    r = wj.solve(hand, y.astype(np.float32), check_units=False)
    a = np.asarray(r.angles)
    finite = all(np.isfinite(np.asarray(f, np.float64)).all() for f in (r.angles, r.coupled, r.rotation, r.scale))
    inside = bool(np.all(a >= np.asarray(hand.lower) - 1e-6) and np.all(a <= np.asarray(hand.upper) + 1e-6))
    bad_valid = int(np.sum(np.asarray(r.valid) & ~np.isfinite(np.asarray(r.residual))))
    return dict(frames=n, all_finite=bool(finite), within_limits=inside, flagged=int(np.sum(np.asarray(r.flags) != 0)),
                non_finite_reported_valid=bad_valid)


def speed(hand, y: np.ndarray, batch: int, repeats: int) -> dict:
    import wuji_jax as wj

    yb = np.resize(y.astype(np.float32), (batch, 21, 3))
    run = lambda: wj.inspire.to_inspire(wj.solve(hand, yb).angles)  # noqa: E731
    t = time_fn(run, repeats=repeats, warmup=1)
    solver = wj.FrameSolver(hand)
    frames = y.astype(np.float32)
    solver(frames[0])
    lat = []
    for f in frames:
        t0 = time.perf_counter()
        solver(f)
        lat.append(time.perf_counter() - t0)
    return dict(batch=batch, devices=len(jax.local_devices()), solve_inspire_frames_per_s=batch / t.median,
                solve_inspire_median_s=t.median, frame_solver_median_ms=float(np.median(lat) * 1e3),
                frame_solver_p90_ms=float(np.percentile(lat, 90) * 1e3))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one fresh process per figure, fewer frames")
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)
    import wuji_jax as wj

    wj.use_cpu_cores()
    hand = wj.load_hand("right")
    dexret = load_recording(DEXRET_RECORDING) if Path(DEXRET_RECORDING).exists() else None
    sample = load_recording(bundled_recording())
    data_file = DEXRET_RECORDING if dexret is not None else bundled_recording()
    payload: dict = {}

    payload["first_answer"] = fa = first_answer(Path(data_file), 1 if args.quick else 3)
    print(f"import wuji_jax {fa['import_s']:.2f} s | first wj.solve (64 frames) {fa['first_solve_64_s']:.2f} s | "
          f"first FrameSolver frame {fa['first_frame_solver_s']:.2f} s | wuji-jax solve cold {fa['cli_cold_s']:.2f} s, "
          f"warm {fa['cli_warm_s']:.2f} s | first gradient through wj.solve {fa['first_gradient_s']:.2f} s | "
          f"wuji-jax pose pinch {fa['cli_pose_s']:.2f} s", flush=True)
    print("first / second call: " + " | ".join(f"{k} {a:.2f} / {b:.3f} s" for k, (a, b) in
                                              fa["first_second_call_s"].items()), flush=True)
    payload["accuracy"] = []
    for name, y in (("dexret_human_joint_right", dexret), ("bundled_sample", sample)):
        if y is None:
            continue
        a = accuracy(hand, y, name, calibrate=True)
        payload["accuracy"].append(a)
        line = (f"{name}: residual median {a['residual_median_mm']:.2f} p95 {a['residual_p95_mm']:.2f} max "
                f"{a['residual_max_mm']:.2f} mm, {a['frames_above_15mm']} frames > 15 mm | keypoint error median "
                f"{a['keypoint_error_median_mm']:.2f} mm, calibrated {a['keypoint_error_median_calibrated_mm']:.2f} mm | "
                f"converged {a['converged_fraction']:.3f}, iterations mean {a['iterations_mean']:.1f} max "
                f"{a['iterations_max']}")
        if "fist_thumb_rotation_mean" in a:
            line += (f" | fist frames' Inspire thumb rotation mean {a['fist_thumb_rotation_mean']:.2f} max "
                     f"{a['fist_thumb_rotation_max']:.2f}")
        print(line, flush=True)
    payload["round_trip"] = rt = round_trip(hand, 2000 if args.quick else 20000)
    print(f"round trip ({rt['frames']} noise-free frames): joint error median {rt['joint_error_median_deg']:.5f} deg, "
          f"p99 {rt['joint_error_p99_deg']:.4f} deg, residual p99 {rt['residual_p99_mm']:.4f} mm, converged "
          f"{rt['converged_fraction']:.4f}", flush=True)
    payload["hostile"] = h = hostile(hand, 10_000 if args.quick else 100_000)
    print(f"hostile ({h['frames']} frames): all finite {h['all_finite']}, within limits {h['within_limits']}, "
          f"flagged {h['flagged']}, non-finite reported valid {h['non_finite_reported_valid']}", flush=True)
    payload["speed"] = s = speed(hand, dexret if dexret is not None else sample, 16384, 3 if args.quick else 7)
    print(f"speed: solve + to_inspire at batch {s['batch']} on {s['devices']} devices "
          f"{s['solve_inspire_frames_per_s']:,.0f} frames/s | FrameSolver warm frame median "
          f"{s['frame_solver_median_ms']:.3f} ms (p90 {s['frame_solver_p90_ms']:.3f})", flush=True)
    payload.update(hardware=hardware_info(), versions=versions("jax", "jaxlib", "optax", "numpy"),
                   config=wj.SolverConfig().numbers() | {"coupling": wj.SolverConfig().coupling})
    if not args.no_json:
        kind = slug(jax.devices()[0].device_kind)
        print("wrote", write_json("core", payload))
    return payload


if __name__ == "__main__":
    main()
