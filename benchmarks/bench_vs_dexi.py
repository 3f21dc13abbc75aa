"""Inspire commands from MediaPipe landmarks: wuji_jax against dexi-rs, in one run on the same frames.

* dexi-rs (``pip install dexi-rs``), the Rust port of dex-retargeting: vector retargeting for the
  right Inspire hand, configured as dex-retargeting's ``teleop/inspire_hand_right.yml``: the six
  actuated joints as ``target_joint_names`` (the mimic joints follow them), the five fingertip
  vectors ``hand_base_link`` → ``{thumb,index,middle,ring,pinky}_tip`` against the human vectors
  wrist (0) → tips (4, 8, 12, 16, 20), ``scaling_factor`` 1.15, with the URDF dexi-rs ships. The yml
  names the origin and wrist link ``base``; ``hand_base_link`` sits at the same point (the fixed
  joint between them only rotates) and the vectors are taken in the URDF root frame, so the
  results are identical. The low-pass filter is off by default (``--lowpass-alpha 1``; the yml uses
  0.2), as in ``vs_dex_retargeting.py``, because wuji_jax's output is unfiltered too. Its input per
  frame is the flattened ``(5 × 3)`` ``landmarks[tips] - landmarks[wrist]``. Timed one frame at a
  time, each warm-started from the previous one (``SeqRetargeting.retarget``), ``--passes`` passes
  over the frames (``reset()`` before each): frames/s of one core (it runs on one thread; the
  JSON keeps its CPU time per wall second) and the median latency of one frame. The per-machine
  rate is the per-core rate × the usable cores (``os.sched_getaffinity``): an upper bound, one
  independent stream per core.
* wuji_jax: ``wj.inspire.to_inspire(wj.solve(hand, y).angles)``, the public calls on numpy input,
  at each ``--batch`` (the recording tiled to that many frames), after ``wj.use_cpu_cores()`` (one
  CPU device per core; ``wj.solve`` splits big batches over them): the first call (compile + run)
  and the median of ``--repeats`` warm calls. One frame at a time: ``wj.FrameSolver(hand)(frame)``
  on numpy ``(21, 3)`` float32 frames, with its default start and warm-started (``q0=`` the
  previous frame's angles), median latency over the frames after one warm-up call.

Both give the six Inspire channels as opening fractions (1 = open; order little, ring, middle, fore,
thumb bend, thumb rotation); dexi-rs's joint angles are mapped linearly onto their URDF range (lower
limit = open), as ``vs_dex_retargeting.py`` maps dex-retargeting's. As a check that both did the same
job, the per-channel correlation over time of the two sets of commands is printed and saved (the
four finger channels are comparable; the thumb channels less so).

Input (``--data``): a landmark recording in metres, by default dex-retargeting's
``dexret_human_joint_right.npy`` from ``../shared/data`` next to the repository where present, else the
bundled MediaPipe landmarks of dex-retargeting's sample video. Both solvers get the same frames, put
into dex-retargeting's MANO-style wrist frame first (a no-op for ``dexret_human_joint_right.npy``);
wuji_jax fits the wrist pose itself.

Writes ``benchmarks/results/vs_dexi_<device-kind>.json`` with the machine and library versions.
Without dexi-rs it prints one line saying how to install it and exits 0. Run from the repository
root::

    PYTHONPATH=. python benchmarks/bench_vs_dexi.py [--quick] [--data PATH] [--batch 16384 65536]
        [--repeats 5] [--passes 5] [--lowpass-alpha 1] [--scaling 1.15] [--no-json]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from _util import (  # noqa: E402
    bundled_recording, hardware_info, load_recording, time_fn, versions, write_json,
)
from vs_dex_retargeting import DEXRET_JOINTS, FINGERS, INSPIRE_URDF, agreement, dexret_frame  # noqa: E402

SHARED_RECORDING = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dexret_human_joint_right.npy"
TASK_LINKS = ("thumb_tip", "index_tip", "middle_tip", "ring_tip", "pinky_tip")
HUMAN_ORIGIN, HUMAN_TASK = (0, 0, 0, 0, 0), (4, 8, 12, 16, 20)  # MediaPipe wrist, fingertips


def dexi_config(urdf: Path, alpha: float, scaling: float) -> dict:
    """Keyword arguments of ``dexi_rs.RetargetingConfig``: dex-retargeting's ``inspire_hand_right.yml``."""
    return dict(type="vector", urdf_path=str(urdf), wrist_link_name="hand_base_link",
                target_joint_names=list(DEXRET_JOINTS),
                target_origin_link_names=["hand_base_link"] * len(TASK_LINKS),
                target_task_link_names=list(TASK_LINKS),
                target_link_human_indices=[list(HUMAN_ORIGIN), list(HUMAN_TASK)],
                scaling_factor=scaling, low_pass_alpha=alpha)


def joint_limits(urdf: Path, names) -> np.ndarray:
    """``(len(names), 2)`` lower and upper limits of the named joints, read from the URDF."""
    joints = {j.get("name"): j for j in ET.parse(urdf).getroot().iter("joint")}
    return np.array([[float(joints[n].find("limit").get(k)) for k in ("lower", "upper")] for n in names])


def run_dexi(landmarks: np.ndarray, config: dict, passes: int):
    """dexi-rs frame by frame: ``(openings (T, 6), timing dict)``."""
    import dexi_rs

    t0 = time.perf_counter()
    retargeting = dexi_rs.RetargetingConfig(**config).build()
    setup = time.perf_counter() - t0
    refs = (landmarks[:, HUMAN_TASK] - landmarks[:, HUMAN_ORIGIN]).reshape(len(landmarks), -1)
    retargeting.retarget(refs[0])  # warm-up
    rates, cpu_per_wall, times = [], [], []
    for _ in range(max(passes, 1)):
        retargeting.reset()  # each pass starts the sequence afresh
        qpos, pass_times = [], []
        c0, w0 = time.process_time(), time.perf_counter()
        for ref in refs:
            t0 = time.perf_counter()
            qpos.append(retargeting.retarget(ref))
            pass_times.append(time.perf_counter() - t0)
        cpu_per_wall.append((time.process_time() - c0) / (time.perf_counter() - w0))
        rates.append(len(refs) / sum(pass_times))
        times += pass_times
    idx = [retargeting.joint_names.index(n) for n in DEXRET_JOINTS]
    lo, hi = joint_limits(Path(config["urdf_path"]), DEXRET_JOINTS).T
    openings = np.clip((hi - np.asarray(qpos)[:, idx]) / (hi - lo), 0.0, 1.0)
    cores = len(os.sched_getaffinity(0))
    per_core = float(np.median(rates))
    return openings, dict(
        setup_s=setup, passes=len(rates), frames_per_pass=len(refs), per_core_frames_per_s=per_core,
        per_core_frames_per_s_each_pass=rates, usable_cores=cores, per_machine_frames_per_s=per_core * cores,
        median_frame_ms=float(np.median(times) * 1e3), p90_frame_ms=float(np.percentile(times, 90) * 1e3),
        cpu_s_per_wall_s=float(np.median(cpu_per_wall)), joints=list(DEXRET_JOINTS),
        joint_ranges_rad=[[float(a), float(b)] for a, b in zip(lo, hi)],
        mode="one frame at a time, warm-started from the previous frame (SeqRetargeting.retarget)")


def per_frame_ms(fn, frames) -> np.ndarray:
    """Milliseconds of each ``fn(frame)`` call over ``frames`` (numpy results: on the host on return)."""
    times = []
    for frame in frames:
        t0 = time.perf_counter()
        fn(frame)
        times.append(time.perf_counter() - t0)
    return np.asarray(times) * 1e3


def run_wuji(landmarks: np.ndarray, batches, repeats: int):
    """wuji_jax: ``(openings (T, 6) of the recording's own frames, timing dict)``."""
    import wuji_jax as wj

    hand = wj.load_hand("right")

    def commands(y):
        return wj.inspire.to_inspire(wj.solve(hand, y).angles)

    y = landmarks.astype(np.float32)
    rows, openings = [], None
    for b in batches:
        yb = np.resize(y, (b, *y.shape[1:]))  # the recording repeated to b frames
        t0 = time.perf_counter()
        out = np.asarray(commands(yb))  # warm-up: compile + run
        first = time.perf_counter() - t0
        if openings is None and b >= len(y):
            openings = out[:len(y)]  # the recording's own frames come first
        t = time_fn(commands, yb, repeats=repeats, warmup=0)
        rows.append(dict(batch=b, first_call_s=first, median_s=t.median, min_s=t.min, repeats=len(t.times),
                         cpu_s_per_call=t.cpu_median, frames_per_s=b / t.median))
        print(f"  wuji_jax batch {b:>7}: {b / t.median:>10.0f} frames/s (median {t.median * 1e3:.1f} ms of "
              f"{len(t.times)}, first call {first:.1f} s)", flush=True)
    if openings is None:  # every batch shorter than the recording
        openings = np.asarray(commands(y))

    solver = wj.FrameSolver(hand)
    t0 = time.perf_counter()
    prev = {"q": solver(y[0]).angles}  # warm-up: compile + run
    first = time.perf_counter() - t0  # compiles, then answers
    plain = per_frame_ms(solver, y)

    def warm(frame):
        prev["q"] = solver(frame, q0=prev["q"]).angles

    warm(y[0])  # the q0 variant compiles on first use
    warm_ms = per_frame_ms(warm, y)
    return openings, dict(
        function="wj.inspire.to_inspire(wj.solve(hand, y).angles), numpy float32 input",
        batches=rows,
        frame_solver=dict(function="wj.FrameSolver(hand)(frame) (angles only)", frames=len(y), first_call_s=first,
                          median_ms=float(np.median(plain)), p90_ms=float(np.percentile(plain, 90)),
                          warm_median_ms=float(np.median(warm_ms)), warm_p90_ms=float(np.percentile(warm_ms, 90))))


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None,
                    help=f"landmark recording (metres); default {SHARED_RECORDING} if present, else the bundled sample")
    ap.add_argument("--batch", type=int, nargs="+", default=[16384, 65536], help="wuji_jax batch sizes")
    ap.add_argument("--repeats", type=int, default=None, help="timed warm wuji_jax calls per batch (default 5; 3 --quick)")
    ap.add_argument("--passes", type=int, default=None, help="timed dexi-rs passes over the frames (default 5; 1 --quick)")
    ap.add_argument("--lowpass-alpha", type=float, default=1.0,
                    help="dexi-rs's low-pass filter (1 = off, the default; dex-retargeting's yml uses 0.2)")
    ap.add_argument("--scaling", type=float, default=1.15, help="dexi-rs scaling_factor (the yml's 1.15)")
    ap.add_argument("--quick", action="store_true", help="fewer repeats and passes")
    ap.add_argument("--no-json", action="store_true", help="print only")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    passes = args.passes or (1 if args.quick else 5)

    if importlib.util.find_spec("dexi_rs") is None:
        print("bench_vs_dexi: skipped: dexi-rs is not installed: pip install dexi-rs")
        return None
    import dexi_rs
    import wuji_jax as wj

    cpu_devices = wj.use_cpu_cores()  # before JAX computes anything: one CPU device per core
    info = hardware_info()
    data = Path(args.data) if args.data else (SHARED_RECORDING if SHARED_RECORDING.is_file() else bundled_recording())
    y = dexret_frame(load_recording(data).astype(np.float64))
    urdf = dexi_rs.asset_path("robots/hands") / INSPIRE_URDF
    config = dexi_config(urdf, args.lowpass_alpha, args.scaling)
    print(f"{data.name}: {len(y)} frames; {info['cpu_model']} ({info['cpu_count_usable']} usable cores), "
          f"{info['jax_backend']}/{info['device_kind']}, load {info['load_average_1_5_15min']}", flush=True)

    dexi, dexi_timing = run_dexi(y, config, passes)
    print(f"  dexi-rs: {dexi_timing['per_core_frames_per_s']:.0f} frames/s per core (median "
          f"{dexi_timing['median_frame_ms']:.3f} ms per frame)", flush=True)
    wuji, wuji_timing = run_wuji(y, args.batch, repeats)

    machine = dexi_timing["per_machine_frames_per_s"]
    fs = wuji_timing["frame_solver"]
    print(f"\n{'':<34} {'frames/s':>11} {'ms/frame':>9} {'÷ dexi-rs machine':>18}")
    print(f"{'dexi-rs, 1 core, 1 frame a call':<34} {dexi_timing['per_core_frames_per_s']:>11.0f} "
          f"{dexi_timing['median_frame_ms']:>9.3f}")
    print(f"{'dexi-rs, × ' + str(dexi_timing['usable_cores']) + ' cores':<34} {machine:>11.0f}")
    for row in wuji_timing["batches"]:
        row["ratio_to_dexi_machine"] = row["frames_per_s"] / machine
        print(f"{'wuji_jax batch ' + str(row['batch']):<34} {row['frames_per_s']:>11.0f} {'':>9} "
              f"{row['ratio_to_dexi_machine']:>17.3g}×")
    print(f"{'wuji_jax FrameSolver':<34} {1e3 / fs['median_ms']:>11.0f} {fs['median_ms']:>9.3f}")
    print(f"{'wuji_jax FrameSolver, q0=previous':<34} {1e3 / fs['warm_median_ms']:>11.0f} {fs['warm_median_ms']:>9.3f}")

    rows = agreement(wuji, dexi)
    print("\nagreement of the commands on the recording (Pearson r, mean |Δ|):")
    for r in rows:
        corr = "n/a" if r["correlation"] is None else f"{r['correlation']:+.3f}"
        print(f"  {r['channel']:<15} r {corr}  mean |Δ| {r['mean_abs_difference']:.3f}"
              + ("" if r["comparable"] else "  (thumb: less comparable)"))
    finger_r = [r["correlation"] for r in rows[:FINGERS] if r["correlation"] is not None]

    payload = dict(
        benchmark="wuji_jax vs dexi-rs: Inspire commands from MediaPipe landmarks on the same frames, frames/s",
        data=dict(file=data.name, frames=int(len(y)), frame="dex-retargeting's MANO-style wrist frame"),
        dexi_rs=dict(config=config, config_source="dex-retargeting teleop/inspire_hand_right.yml", **dexi_timing),
        wuji_jax=dict(cpu_devices=cpu_devices, **wuji_timing),
        agreement=rows,
        mean_finger_correlation=float(np.mean(finger_r)) if finger_r else None,
        quick=args.quick,
        notes=("dexi-rs per_machine = per_core × usable cores (independent streams, an upper bound); "
               "wuji_jax frames/s = batch / median warm call of the public calls on numpy input; "
               "ratio_to_dexi_machine = wuji_jax frames/s / dexi-rs per_machine; openings 1 = open"),
        hardware=info,
        versions=versions("dexi-rs", "wuji-jax"),
    )
    if not args.no_json:
        print("wrote", write_json("vs_dexi", payload))
    return payload


if __name__ == "__main__":
    main()
