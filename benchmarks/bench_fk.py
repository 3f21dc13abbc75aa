"""Forward-kinematics throughput: keypoint sets per second of ``wuji_jax.forward_keypoints``.

For batch sizes 1, 10, …, 10⁶ (up to ``--max-batch``) it times the first call (trace + compile +
run) and then the median of ``--repeats`` warm calls, prints a table and writes
``benchmarks/results/fk_<device-kind>.json`` (``fk-float64_<device-kind>.json`` for float64) with the
machine and library versions.

    PYTHONPATH=. python benchmarks/bench_fk.py [--max-batch 1000000] [--dtype float32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from _util import hardware_info, time_fn, write_json  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-batch", type=float, default=1e6, help="largest batch (default 1e6)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--repeats", type=int, default=5, help="timed warm calls per batch size (median)")
    ap.add_argument("--side", choices=("right", "left"), default="right")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-json", action="store_true", help="print only")
    args = ap.parse_args(argv)

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import wuji_jax as wj

    dtype = jnp.dtype(args.dtype)
    hand = wj.load_hand(args.side).astype(dtype)
    lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
    rng = np.random.default_rng(args.seed)
    batches = [b for b in (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000) if b <= int(args.max_batch)]

    info = hardware_info()
    print(f"{info['cpu_model']} ({info['cpu_count_usable']} usable cores), {info['jax_backend']}/"
          f"{info['device_kind']}, jax {info['jax']}, {args.dtype}, load {info['load_average_1_5_15min']}")
    print(f"{'batch':>9} {'first call s':>12} {'median ms':>10} {'min ms':>9} {'cpu ms':>9} {'sets/s':>12}")
    rows = []
    for b in batches:
        q = jnp.asarray(rng.uniform(lo, hi, size=(b, hand.num_joints)), dtype)
        t0 = time.perf_counter()
        jax.block_until_ready(wj.forward_keypoints(hand, q))
        first = time.perf_counter() - t0
        t = time_fn(wj.forward_keypoints, hand, q, repeats=args.repeats)
        rate = b / t.median
        rows.append(dict(batch=b, first_call_s=first, median_s=t.median, min_s=t.min,
                         cpu_median_s=t.cpu_median, times_s=t.times, sets_per_s=rate,
                         sets_per_s_best=b / t.min))
        print(f"{b:>9} {first:>12.2f} {t.median * 1e3:>10.3f} {t.min * 1e3:>9.3f} {t.cpu_median * 1e3:>9.2f} "
              f"{rate:>12.4g}", flush=True)
    info_after = hardware_info()["load_average_1_5_15min"]
    payload = dict(
        benchmark="forward_keypoints throughput (keypoint sets per second, 21 keypoints x 3)",
        function="wuji_jax.forward_keypoints",
        model=f"WG110v12 {args.side}",
        dtype=args.dtype,
        repeats=args.repeats,
        notes=("first_call_s = trace + compile + first run for that batch shape; median/min over warm calls; "
               "cpu_median_s = process CPU time per call (all threads); load_average_after: system load when "
               "the run ended (other processes compete for the cores)"),
        hardware=info,
        load_average_after=info_after,
        results=rows,
    )
    if not args.no_json:
        name = "fk" if args.dtype == "float32" else f"fk-{args.dtype}"
        print("wrote", write_json(name, payload))
    return payload


if __name__ == "__main__":
    main()
