"""One-shot accelerator run: FK and IK throughput over batch sizes, IK accuracy, real-data residual.

Meant for a lent GPU with a short time budget: every stage is timed and skipped once ``--budget``
seconds are spent. Writes ``benchmarks/results/gpu_<device>.json`` (or ``--out``).

    PYTHONPATH=. python benchmarks/bench_gpu.py --out $OUT/gpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util  # noqa: E402

import wuji_jax as wj  # noqa: E402


def synthetic(hand, n, seed=0, noise=0.0):
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(hand.lower), np.asarray(hand.upper)
    q = rng.uniform(lo + 0.02, hi - 0.02, (n, 20)).astype(np.float32)
    kp = np.asarray(wj.forward_keypoints(hand, jnp.asarray(q)))
    A = rng.normal(size=(n, 3, 3))
    R, _ = np.linalg.qr(A)
    R *= np.sign(np.linalg.det(R))[:, None, None]
    s = rng.uniform(0.8, 1.2, n)
    t = rng.normal(size=(n, 3)) * 0.3
    y = s[:, None, None] * np.einsum("bij,bkj->bki", R, kp) + t[:, None] + rng.normal(0, noise, (n, 21, 3))
    return q, y.astype(np.float32)


def timed(fn, *args, repeats=3):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return first, float(np.median(ts))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=420.0, help="seconds before remaining stages are skipped")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    start = time.perf_counter()
    left = lambda: args.budget - (time.perf_counter() - start)
    hand = wj.load_hand("right")
    info = _util.hardware_info()
    out = {"hardware": info, "fk": [], "ik": [], "accuracy": {}, "real_data": {}, "skipped": []}
    print("device:", jax.devices()[0], flush=True)

    for B in [10**4, 10**5, 10**6, 10**7]:
        if left() < 30:
            out["skipped"].append(f"fk batch {B}")
            continue
        q = jax.random.uniform(jax.random.PRNGKey(0), (B, 20), jnp.float32)
        first, med = timed(wj.forward_keypoints, hand, q)
        row = {"batch": B, "median_s": med, "first_call_s": first, "sets_per_s": B / med}
        out["fk"].append(row)
        print("FK", row, flush=True)

    q_acc, y_acc = synthetic(hand, 100_000, seed=1)
    for B in [10**4, 10**5, 10**6, 10**7]:
        if left() < 60:
            out["skipped"].append(f"ik batch {B}")
            continue
        reps = int(np.ceil(B / len(y_acc)))
        y = jnp.asarray(np.tile(y_acc, (reps, 1, 1))[:B])
        try:
            first, med = timed(lambda y: wj.solve(hand, y, check_units=False), y, repeats=2)
        except Exception as e:  # out of memory at the largest batch: record and go on
            out["skipped"].append(f"ik batch {B}: {type(e).__name__}: {str(e)[:200]}")
            print("IK", B, "failed", e, flush=True)
            continue
        row = {"batch": B, "median_s": med, "first_call_s": first, "frames_per_s": B / med, "iterations": 20}
        out["ik"].append(row)
        print("IK", row, flush=True)

    for noise in [0.0, 0.001, 0.003]:
        if left() < 20:
            out["skipped"].append(f"accuracy noise {noise}")
            continue
        q, y = synthetic(hand, 100_000, seed=2, noise=noise)
        r = wj.solve(hand, y, check_units=False)
        err = np.degrees(np.abs(np.asarray(r.angles) - q))
        acc = {"median_deg": float(np.median(err)), "p99_deg": float(np.percentile(err, 99)),
               "residual_p99_mm": float(np.percentile(np.asarray(r.residual), 99) * 1e3)}
        out["accuracy"][f"noise_{noise * 1e3:g}mm"] = acc
        print("accuracy", noise, acc, flush=True)

    data = Path("/work/shared/data/dexret_human_joint_right.npy")
    local = Path(".gpudata/dexret_human_joint_right.npy")  # a copy carried to the GPU machine
    for p in (data, local):
        if p.exists() and left() > 10:
            d = np.load(p).astype(np.float32)
            r = wj.solve(hand, d)
            out["real_data"] = {"file": p.name, "frames": int(len(d)),
                                "median_keypoint_error_mm": float(np.median(np.asarray(r.errors)) * 1e3),
                                "median_rms_residual_mm": float(np.median(np.asarray(r.residual)) * 1e3)}
            print("real", out["real_data"], flush=True)
            break
    out["wall_s"] = time.perf_counter() - start
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    else:
        _util.write_json("gpu", out)
    return out


if __name__ == "__main__":
    main()
