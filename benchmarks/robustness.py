"""10^5 random and adversarial landmark sets through the solver: count non-finite outputs and angles
outside the limits (both must be 0).

    PYTHONPATH=. python benchmarks/robustness.py [--frames 100000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util  # noqa: E402

import wuji_jax as wj  # noqa: E402

KINDS = ("gaussian", "all_equal", "collinear", "coplanar", "huge", "tiny", "nan_laced", "all_nan_frame",
         "one_landmark", "inf_laced", "mirrored_scaled")


def adversarial(n, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.normal(0, 0.05, (n, 21, 3))
    kind = rng.integers(0, len(KINDS), n)
    for k, name in enumerate(KINDS):
        m = kind == k
        c = int(m.sum())
        if name == "all_equal":
            y[m] = rng.normal(size=(c, 1, 3))
        elif name == "collinear":
            y[m] = np.linspace(-1, 1, 21)[None, :, None] * rng.normal(0, 0.1, (c, 1, 3))
        elif name == "coplanar":
            y[m, :, 2] = 0.0
        elif name == "huge":
            y[m] *= 1e6
        elif name == "tiny":
            y[m] *= 1e-9
        elif name == "nan_laced":
            sub = y[m]
            sub[rng.random(sub.shape[:2]) < 0.4] = np.nan
            y[m] = sub
        elif name == "all_nan_frame":
            y[m] = np.nan
        elif name == "one_landmark":
            sub = np.full((c, 21, 3), np.nan)
            sub[:, 0] = 0.0
            y[m] = sub
        elif name == "inf_laced":
            sub = y[m]
            sub[rng.random(sub.shape[:2]) < 0.2] = np.inf
            y[m] = sub
        elif name == "mirrored_scaled":
            y[m] *= np.array([1, -1, 1]) * rng.uniform(0.1, 10, (c, 1, 1))
    return y.astype(np.float32), kind


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=10_000)
    args = ap.parse_args(argv)
    hand = wj.load_hand("right")
    y, kind = adversarial(args.frames)
    lo, hi = np.asarray(hand.lower), np.asarray(hand.upper)
    nonfinite = outside = flagged = 0
    for s in range(0, len(y), args.chunk):
        r = wj.solve(hand, y[s:s + args.chunk], check_units=False)
        fields = [np.asarray(f, np.float64) for f in r]
        nonfinite += int(sum((~np.isfinite(f)).reshape(len(fields[0]), -1).any(1).sum() for f in fields))
        a = np.asarray(r.angles)
        outside += int(((a < lo - 1e-6) | (a > hi + 1e-6)).any(1).sum())
        flagged += int((np.asarray(r.flags) != 0).sum())
    out = {"frames": len(y), "kinds": {k: int((kind == i).sum()) for i, k in enumerate(KINDS)},
           "frames_with_nonfinite_output": nonfinite, "frames_with_angles_outside_limits": outside,
           "frames_flagged": flagged, "hardware": _util.hardware_info()}
    print({k: v for k, v in out.items() if k != "hardware"})
    print("written", _util.write_json("robustness", out))


if __name__ == "__main__":
    main()
