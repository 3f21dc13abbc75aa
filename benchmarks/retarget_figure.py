"""The picture of task-space retargeting: the human hand (WG110v12 forward kinematics of the fitted
angles) and the Inspire hand (its URDF's forward kinematics) side by side, on a pinch, a fist and a
point frame of a recording.

The frames are picked from the recording's landmarks: the pinch is the frame of the smallest thumb–index
tip distance (÷ wrist → middle MCP), the fist the one of the largest mean curl of the four fingers, the
point the one where the index is straightest against the other three's curl (curl: summed bend angles
along each finger's landmark chain, ``bench_retarget.human_curl``). The human hand is drawn from
``wj.forward_keypoints`` of ``wj.solve``'s angles; the Inspire hand from its link frames at
``wj.inspire.retarget``'s openings (solid), with the joint map ``wj.inspire.to_inspire`` in grey
behind it. Each hand is drawn in its own palm frame (``wuji_jax.retarget.palm_frame``: the same
construction for both), from the same viewpoint. Headless (matplotlib's Agg backend).

    PYTHONPATH=. python benchmarks/retarget_figure.py [--data PATH] [--out assets/figures/retarget.png]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from _util import REPO, bundled_recording, load_recording  # noqa: E402
from bench_retarget import human_curl  # noqa: E402
from bench_vs_dexi import SHARED_RECORDING  # noqa: E402
from vs_dex_retargeting import dexret_frame  # noqa: E402

HUMAN, ROBOT, GHOST = "#1f77b4", "#d62728", "#b0b0b0"


def pick_frames(lm: np.ndarray) -> dict[str, int]:
    """``{"pinch": i, "fist": j, "point": k}``: frame indices of ``lm (T, 21, 3)`` (see the module docstring)."""
    size = np.linalg.norm(lm[:, 9] - lm[:, 0], axis=-1)
    gap = np.linalg.norm(lm[:, 4] - lm[:, 8], axis=-1) / size
    curl = human_curl(lm)  # little, ring, middle, fore, thumb
    return {"pinch": int(np.argmin(gap)), "fist": int(np.argmax(curl[:, :4].mean(1))),
            "point": int(np.argmax(curl[:, :3].mean(1) - curl[:, 3]))}


def _in_palm(points: np.ndarray, wrist: np.ndarray, knuckles: np.ndarray) -> np.ndarray:
    """``points (N, 3)`` in the palm frame of ``wrist (3,)`` and ``knuckles (3, 3)`` (index, middle, pinky)."""
    from wuji_jax.retarget import palm_frame

    R = np.asarray(palm_frame(wrist, knuckles.T))  # components first: (3,) and (3, 3)
    return (points - wrist) @ R.T


def robot_segments(robot, openings: np.ndarray) -> list[np.ndarray]:
    """The Inspire hand at ``openings (6,)`` as line segments ``(2, 3)`` between each link's origin and its
    parent's, in its palm frame."""
    from wuji_jax.retarget import inspire_link_frames

    pos = np.asarray(inspire_link_frames(robot, np.asarray(openings, np.float32)).positions, np.float64)
    base = np.asarray(robot.base_links)
    pos = _in_palm(pos, np.zeros(3), pos[base[[1, 2, 4]]])
    parents = robot.model.parents
    return [pos[[parents[i], i]] for i in range(1, len(parents))]


def human_segments(kp: np.ndarray) -> list[np.ndarray]:
    """The human keypoints ``(21, 3)`` as MediaPipe's line segments, in the palm frame."""
    from wuji_jax.landmarks import HAND_CONNECTIONS

    p = _in_palm(kp, kp[0], kp[[5, 9, 17]])
    return [p[[a, b]] for a, b in HAND_CONNECTIONS]


def _draw(ax, segments, color, width, alpha=1.0):
    for s in segments:
        ax.plot(s[:, 0], s[:, 1], s[:, 2], color=color, linewidth=width, alpha=alpha, solid_capstyle="round")


def _frame_axes(ax, extent: float):
    ax.set_xlim(-extent / 2, extent / 2)
    ax.set_ylim(-extent / 2, extent / 2)
    ax.set_zlim(0.0, extent)
    ax.set_box_aspect((1, 1, 1), zoom=1.5)
    ax.view_init(elev=20, azim=40, vertical_axis="z")  # from the palm's radial side
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_zticks([])
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        axis.pane.set_alpha(0.0)
        axis.line.set_alpha(0.2)


def make_figure(data: Path, out: Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import jax.numpy as jnp
    import matplotlib.pyplot as plt

    import wuji_jax as wj
    from wuji_jax.retarget import inspire_tips, load_inspire_hand

    robot = load_inspire_hand()
    hand = wj.load_hand("right")
    lm = dexret_frame(load_recording(data).astype(np.float64))
    frames = pick_frames(lm)
    idx = np.asarray(list(frames.values()))
    angles = np.asarray(wj.solve(hand, lm[idx].astype(np.float32)).angles)
    kp = np.asarray(wj.forward_keypoints(hand, angles), np.float64)
    cmd = np.asarray(wj.inspire.retarget(angles, robot))
    joint = np.asarray(wj.inspire.to_inspire(angles))
    tips = np.asarray(inspire_tips(robot, jnp.asarray(np.concatenate([cmd, joint]), jnp.float32)))
    gap = np.linalg.norm(tips[:, 0] - tips[:, 1], axis=-1) * 1e3
    human_gap = np.linalg.norm(kp[:, 4] - kp[:, 8], axis=-1) * 1e3

    fig = plt.figure(figsize=(9.0, 6.4))
    info = {}
    for c, (name, i) in enumerate(frames.items()):
        h = fig.add_subplot(2, 3, c + 1, projection="3d")
        _draw(h, human_segments(kp[c]), HUMAN, 2.2)
        _frame_axes(h, 0.19)
        h.set_title(f"{name} (frame {i})\nhuman: thumb–index {human_gap[c]:.0f} mm", fontsize=9)
        r = fig.add_subplot(2, 3, c + 4, projection="3d")
        _draw(r, robot_segments(robot, joint[c]), GHOST, 1.6, 0.9)
        _draw(r, robot_segments(robot, cmd[c]), ROBOT, 2.2)
        _frame_axes(r, 0.23)
        r.set_title(f"Inspire: thumb–index {gap[c]:.0f} mm\n(joint map, grey: {gap[c + 3]:.0f} mm)", fontsize=9)
        info[name] = dict(frame=i, openings=cmd[c].round(3).tolist(), joint_map=joint[c].round(3).tolist(),
                          human_thumb_index_mm=float(human_gap[c]), robot_thumb_index_mm=float(gap[c]),
                          joint_map_thumb_index_mm=float(gap[c + 3]))
    fig.text(0.01, 0.75, "human\n(WG110v12 FK)", color=HUMAN, fontsize=10, va="center")
    fig.text(0.01, 0.27, "Inspire\n(URDF FK)", color=ROBOT, fontsize=10, va="center")
    fig.subplots_adjust(left=0.08, right=0.99, top=0.93, bottom=0.01, wspace=0.02, hspace=0.12)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return info


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None,
                    help=f"landmark recording (metres); default {SHARED_RECORDING} if present, else the bundled sample")
    ap.add_argument("--out", default=str(REPO / "assets" / "figures" / "retarget.png"))
    args = ap.parse_args(argv)
    data = Path(args.data) if args.data else (SHARED_RECORDING if SHARED_RECORDING.is_file() else bundled_recording())
    info = make_figure(data, Path(args.out))
    for name, row in info.items():
        print(name, row)
    print("wrote", args.out)
    return info


if __name__ == "__main__":
    main()
