"""Inspire commands judged on the Inspire hand: wuji_jax's joint map and task-space retarget against
dex-retargeting (vector, dexpilot) and dexi-rs, side by side on the same frames; and their speed.

Every method gives the six Inspire openings (1 = open; order little, ring, middle, fore, thumb bend,
thumb rotation) for the same recording, put into dex-retargeting's MANO-style wrist frame:

* ``to_inspire``: ``wj.inspire.to_inspire(wj.solve(hand, y).angles)`` (the joint map);
* ``retarget``: ``wj.inspire.retarget(wj.solve(hand, y).angles, robot)`` (task space, default
  :class:`~wuji_jax.inspire.RetargetConfig`);
* ``dexret_vector`` / ``dexret_dexpilot``: dex-retargeting 0.5 with its own
  ``teleop/inspire_hand_right{,_dexpilot}.yml``, its URDF folder pointed at the copy dexi-rs ships,
  low-pass filter off (``low_pass_alpha`` 1), one frame at a time, warm-started from the previous one;
* ``dexi_rs``: dexi-rs's vector retargeting configured as that yml (``bench_vs_dexi.dexi_config``).

dex-retargeting's and dexi-rs's joint angles become openings linearly over their URDF range (lower
limit = open). Then every set of openings is played on the same Inspire model
(``wuji_jax.retarget.inspire_tips`` of the dexi-rs URDF, checked against a numpy FK in
``tests/test_retarget.py``) and judged by issue 49's metrics:

* tight pinches: frames where the human's thumb–index tip distance (landmarks 4–8) is ≤ 30 mm; the
  robot's thumb–index distance (``thumb_tip``–``index_tip`` frames) there: median, and how many ≤ 15 mm;
* thumb–index distance correlation over all frames, each distance divided by its hand's size (human
  wrist → middle MCP, landmarks 0–9; robot root → ``middle_proximal`` origin);
* finger curl correlation: per finger, the human's summed bend angles along its landmark chain
  against the robot's closure (1 − opening) of its motor: the four fingers' mean, and the thumb
  (chain 1–2–3–4 against the thumb bend channel).

Speed (frames/s of the public calls on numpy float32 input, median of warm calls): after
``wj.use_cpu_cores()`` (one CPU device per core; ``wj.solve`` splits big batches over them and
``retarget`` follows its input's sharding), ``solve`` + ``to_inspire`` and ``solve`` + ``retarget``
on ``--batch`` frames (the recording tiled; the metrics use its first 621 rows), against dexi-rs's
frames/s of one core × the usable cores (``bench_vs_dexi.run_dexi``). One live frame:
``wuji_jax.live``'s one compiled call a frame (the FrameSolver's fit warm-started from the previous
frame, and the retarget of it warm-started from the previous command, smoothed and rate-limited; the
robot and settings constants of the program), median and p90 over the recording after a warm-up pass,
and the same as two calls (FrameSolver, then a jitted retarget). dex-retargeting: ms per frame of its ``retarget``.

Writes ``benchmarks/results/retarget_<device-kind>.json``. Needs dexi-rs (the Inspire URDF) and, for
the dex-retargeting rows, ``pip install dex-retargeting==0.5.0`` (and torch's CPU wheel); missing
ones are skipped with a line saying so. Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_retarget.py [--data PATH] [--batch 16384] [--repeats 5] [--no-json]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from _util import bundled_recording, hardware_info, load_recording, time_fn, versions, write_json  # noqa: E402
from bench_vs_dexi import SHARED_RECORDING, dexi_config, per_frame_ms, run_dexi  # noqa: E402
from vs_dex_retargeting import dexret_frame, run_dexret  # noqa: E402

TIGHT_M, CONTACT_M = 0.030, 0.015
#: motor channel → MediaPipe chain whose bend angles are that channel's human curl (thumb: bend).
CURL_CHAINS = {0: (0, 17, 18, 19, 20), 1: (0, 13, 14, 15, 16), 2: (0, 9, 10, 11, 12), 3: (0, 5, 6, 7, 8),
               4: (1, 2, 3, 4)}


def _angle(a, b):
    c = np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-12)
    return np.arccos(np.clip(c, -1.0, 1.0))


def human_curl(lm: np.ndarray) -> np.ndarray:
    """``(T, 5)`` summed bend angles (radians) along each chain of :data:`CURL_CHAINS`, channel order."""
    out = []
    for ch in range(5):
        c = CURL_CHAINS[ch]
        seg = [lm[:, c[i + 1]] - lm[:, c[i]] for i in range(len(c) - 1)]
        out.append(sum(_angle(seg[i], seg[i + 1]) for i in range(len(seg) - 1)))
    return np.stack(out, -1)


def _corr(a, b) -> float | None:
    return None if np.std(a) == 0 or np.std(b) == 0 else float(np.corrcoef(a, b)[0, 1])


def judge(lm: np.ndarray, robot, openings: np.ndarray) -> dict:
    """Issue 49's metrics of ``openings (T, 6)`` for human landmarks ``lm (T, 21, 3)``, played on ``robot``."""
    import jax.numpy as jnp

    from wuji_jax.retarget import inspire_points, inspire_tips

    tips = np.asarray(inspire_tips(robot, jnp.asarray(openings, jnp.float32)), np.float64)
    knuckles = np.asarray(inspire_points(robot, jnp.ones(6, jnp.float32), robot.base_links), np.float64)
    robot_size = float(np.linalg.norm(knuckles[2]))  # root → middle knuckle
    h_d = np.linalg.norm(lm[:, 4] - lm[:, 8], axis=-1)
    h_size = np.linalg.norm(lm[:, 9] - lm[:, 0], axis=-1)
    r_d = np.linalg.norm(tips[:, 0] - tips[:, 1], axis=-1)
    tight = h_d <= TIGHT_M
    curl, closure = human_curl(lm), 1 - openings
    fingers = [_corr(curl[:, c], closure[:, c]) for c in range(4)]
    return dict(
        tight_pinches=int(tight.sum()),
        tight_robot_thumb_index_median_mm=float(np.median(r_d[tight]) * 1e3) if tight.any() else None,
        tight_le_15mm=int((r_d[tight] <= CONTACT_M).sum()),
        tight_le_15mm_share=float((r_d[tight] <= CONTACT_M).mean()) if tight.any() else None,
        thumb_index_distance_r=_corr(h_d / h_size, r_d / robot_size),
        finger_curl_r=dict(zip(("little", "ring", "middle", "fore"), fingers)),
        finger_curl_r_mean=float(np.mean([f for f in fingers if f is not None])),
        thumb_curl_r=_corr(curl[:, 4], closure[:, 4]),
        thumb_rotation_clamped_open_share=float(np.mean(openings[:, 5] >= 0.999)))


def run_wuji(y: np.ndarray, robot, batch: int, repeats: int):
    """The two wuji_jax pipelines on ``batch`` tiled frames and the one-frame latency:
    ``({name: openings (T, 6)}, timing dict)``."""
    import jax

    import wuji_jax as wj
    from wuji_jax.inspire import RetargetConfig, retarget_kernel

    hand = wj.load_hand("right")
    pipelines = {
        "to_inspire": lambda x: wj.inspire.to_inspire(wj.solve(hand, x).angles),
        "retarget": lambda x: wj.inspire.retarget(wj.solve(hand, x).angles, robot),
    }
    yb = np.resize(y.astype(np.float32), (max(batch, len(y)), 21, 3))
    openings, rows = {}, {}
    for name, fn in pipelines.items():
        t0 = time.perf_counter()
        out = np.asarray(fn(yb))
        first = time.perf_counter() - t0
        openings[name] = out[:len(y)]
        t = time_fn(fn, yb, repeats=repeats, warmup=0)
        rows[name] = dict(batch=len(yb), first_call_s=first, median_s=t.median, frames_per_s=len(yb) / t.median,
                          cpu_s_per_call=t.cpu_median)
        print(f"  {name:<10} solve + map, batch {len(yb)}: {len(yb) / t.median:>9.0f} frames/s "
              f"(first call {first:.1f} s)", flush=True)
    angles = wj.solve(hand, yb).angles
    t = time_fn(lambda a: wj.inspire.retarget(a, robot), angles, repeats=repeats)
    rows["retarget_only"] = dict(batch=len(yb), median_s=t.median, frames_per_s=len(yb) / t.median,
                                 input="wj.solve's angles, already on the devices")

    # one live frame as wuji-jax live runs it: the FrameSolver's fit warm-started from the previous frame
    # and the retarget (warm-started from the previous command, smoothed, rate-limited) in one compiled
    # call (wuji_jax.live.command_map(...).fit); and, for reference, the two as separate calls
    from wuji_jax.live import command_map

    solver, config = wj.FrameSolver(hand), RetargetConfig()
    t0 = time.perf_counter()
    cmap = command_map("right", "retarget")[0]
    cmap.compile(solver, push=False)
    state = {"q": solver(y[0]).angles, "t": 0.0}
    first = time.perf_counter() - t0

    def fused(f):
        state["t"] += 1 / 30
        res, send = cmap.fit(solver, f, state["q"], state["t"])
        send()
        state["q"] = res.angles

    step = jax.jit(lambda q, o: retarget_kernel(hand, robot, q, o, None, config))
    state["o"] = np.asarray(wj.inspire.to_inspire(state["q"]), np.float32)

    def two_calls(f):
        state["q"] = solver(f, q0=state["q"]).angles
        state["o"] = np.asarray(step(state["q"], state["o"]))

    def solve_only(f):
        state["q"] = solver(f, q0=state["q"]).angles

    per_frame_ms(fused, y)  # warm-up passes
    per_frame_ms(two_calls, y)
    both, split, alone = per_frame_ms(fused, y), per_frame_ms(two_calls, y), per_frame_ms(solve_only, y)
    rows["live_frame"] = dict(
        function="wuji_jax.live.command_map('right', 'retarget')[0].fit(FrameSolver(hand), frame, previous angles, "
                 "stamp), then send(): the fit and the retarget (with smoothing and the rate limit) in one call",
        first_call_s=first, median_ms=float(np.median(both)), p90_ms=float(np.percentile(both, 90)),
        two_calls_median_ms=float(np.median(split)),
        frame_solver_median_ms=float(np.median(alone)))
    print(f"  live frame: {np.median(both):.3f} ms median, p90 {np.percentile(both, 90):.3f} (as two calls "
          f"{np.median(split):.3f}; FrameSolver alone {np.median(alone):.3f} ms)", flush=True)
    return openings, rows


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None,
                    help=f"landmark recording (metres); default {SHARED_RECORDING} if present, else the bundled sample")
    ap.add_argument("--batch", type=int, default=16384, help="frames per wuji_jax batch call (the recording tiled)")
    ap.add_argument("--repeats", type=int, default=5, help="timed warm batch calls (median)")
    ap.add_argument("--passes", type=int, default=3, help="timed dexi-rs passes over the frames")
    ap.add_argument("--no-json", action="store_true", help="print only")
    args = ap.parse_args(argv)

    import wuji_jax as wj

    cpu_devices = wj.use_cpu_cores()  # before JAX computes anything
    from wuji_jax.retarget import find_inspire_urdf, inspire_model_hint, load_inspire_hand

    urdf = find_inspire_urdf()
    if urdf is None:
        print(f"bench_retarget: skipped: {inspire_model_hint()}")
        return None
    robot = load_inspire_hand(urdf)
    info = hardware_info()
    data = Path(args.data) if args.data else (SHARED_RECORDING if SHARED_RECORDING.is_file() else bundled_recording())
    y = dexret_frame(load_recording(data).astype(np.float64))
    lm = y  # the human side of every metric: the recording's landmarks
    print(f"{data.name}: {len(y)} frames; {info['cpu_model']} ({info['cpu_count_usable']} usable cores, "
          f"{cpu_devices} CPU devices), load {info['load_average_1_5_15min']}; Inspire model {urdf}", flush=True)

    openings, speed = run_wuji(y, robot, args.batch, args.repeats)
    skipped = {}
    import dexi_rs

    dexi, dexi_timing = run_dexi(y, dexi_config(urdf, 1.0, 1.15), args.passes)
    openings["dexi_rs"] = dexi
    speed["dexi_rs"] = dexi_timing
    print(f"  dexi-rs: {dexi_timing['per_core_frames_per_s']:.0f} frames/s per core × {dexi_timing['usable_cores']}",
          flush=True)
    have_dexret = all(importlib.util.find_spec(m) for m in ("dex_retargeting", "torch", "six"))
    for kind in ("vector", "dexpilot"):
        if not have_dexret:
            skipped[f"dexret_{kind}"] = "pip install dex-retargeting==0.5.0 torch six"
            continue
        o, times, setup, dinfo = run_dexret(y, urdf.parent.parent, 1.0, kind)
        openings[f"dexret_{kind}"] = o
        speed[f"dexret_{kind}"] = dict(config=dinfo["config"], setup_s=setup, low_pass_alpha=1.0,
                                       frames_per_s=len(y) / times.sum(),
                                       median_frame_ms=float(np.median(times) * 1e3))
        print(f"  dex-retargeting {kind}: {np.median(times) * 1e3:.2f} ms per frame", flush=True)

    machine = dexi_timing["per_machine_frames_per_s"]
    for name in ("to_inspire", "retarget"):
        speed[name]["ratio_to_dexi_machine"] = speed[name]["frames_per_s"] / machine
    metrics = {name: judge(lm, robot, o) for name, o in openings.items()}

    print(f"\n{'':<16} {'pinch med mm':>12} {'≤15 mm':>8} {'dist r':>7} {'curl r':>7} {'thumb r':>8}")
    for name, m in metrics.items():
        print(f"{name:<16} {m['tight_robot_thumb_index_median_mm']:>12.1f} "
              f"{m['tight_le_15mm']:>3}/{m['tight_pinches']:<4} {m['thumb_index_distance_r']:>7.3f} "
              f"{m['finger_curl_r_mean']:>7.3f} {m['thumb_curl_r'] or float('nan'):>8.3f}")
    print(f"\nsolve + to_inspire {speed['to_inspire']['frames_per_s']:.0f} frames/s "
          f"({speed['to_inspire']['ratio_to_dexi_machine']:.2f}× dexi-rs {machine:.0f}), solve + retarget "
          f"{speed['retarget']['frames_per_s']:.0f} ({speed['retarget']['ratio_to_dexi_machine']:.2f}×); "
          f"live frame {speed['live_frame']['median_ms']:.3f} ms")

    payload = dict(
        benchmark="Inspire commands judged on the Inspire hand's kinematics (issue 49's metrics), and speed",
        data=dict(file=data.name, frames=int(len(y)), frame="dex-retargeting's MANO-style wrist frame"),
        inspire_urdf=str(urdf), metrics=metrics, speed=speed, skipped=skipped, cpu_devices=cpu_devices,
        targets=dict(tight_median_mm_max=15, tight_share_min=0.8, thumb_index_distance_r_min=0.85,
                     finger_curl_r_mean_min=0.95, thumb_curl_r_min=0.5, ratio_to_dexi_machine_min=5,
                     live_frame_ms_max=0.5),
        notes=("robot distances between the thumb_tip and index_tip frames of the URDF (not the pad surfaces); "
               "openings 1 = open; dex-retargeting / dexi-rs joint angles mapped linearly onto their URDF range; "
               "wuji_jax frames/s = batch / median warm call of the public calls on numpy input; dexi-rs per "
               "machine = per core × usable cores (independent streams, an upper bound)"),
        hardware=info,
        versions=versions("wuji-jax", "dex-retargeting", "dexi-rs", "torch", "pin", "nlopt"),
    )
    if not args.no_json:
        print("wrote", write_json("retarget", payload))
    return payload


if __name__ == "__main__":
    main()
