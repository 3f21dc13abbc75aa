"""Inspire commands for the named poses (solved back from landmarks) and over a real recording.

Prints the six-channel table for open / fist / point / victory / thumbs_up (poses → FK → IK →
``to_inspire``) and plots the six channels over the 621 frames of dex-retargeting's recording.

    PYTHONPATH=. python benchmarks/inspire_channels.py [--data PATH] [--out assets/figures/inspire_dexret.png]
"""

from __future__ import annotations

import argparse

import jax.numpy as jnp
import numpy as np

import wuji_jax as wj
from wuji_jax.retarget.inspire import MOTOR_NAMES


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/dexret_human_joint_right.npy")
    ap.add_argument("--out", default="assets/figures/inspire_dexret.png")
    args = ap.parse_args(argv)
    hand = wj.load_hand("right")
    names = ["open", "fist", "point", "victory", "thumbs_up"]
    q = np.stack([wj.named_pose(n) for n in names])
    y = np.asarray(wj.forward_keypoints(hand, jnp.asarray(q)))
    cmd = np.asarray(wj.inspire.to_inspire(wj.solve(hand, y).angles))
    print("| pose | " + " | ".join(MOTOR_NAMES) + " |")
    print("|---|" + "---:|" * 6)
    for n, c in zip(names, cmd):
        print(f"| {n} | " + " | ".join(f"{v:.3f}" for v in c) + " |")
    d = np.load(args.data)
    res = wj.solve(hand, d)
    ch = np.asarray(wj.inspire.to_inspire(res.angles))
    t = np.arange(len(d)) / 30.0
    wj.viz.plot_timeseries(t, ch, list(MOTOR_NAMES), path=args.out,
                           title=f"Inspire opening fractions over {len(d)} frames (dex-retargeting recording)",
                           ylabel="opening (1 = open)")
    print(f"median keypoint error {np.median(np.asarray(res.errors)) * 1e3:.2f} mm; plot: {args.out}")


if __name__ == "__main__":
    main()
