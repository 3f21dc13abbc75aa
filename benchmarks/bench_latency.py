"""One-frame latency: ``wj.solve(hand, frame)`` against ``wj.FrameSolver(hand)(frame)``, alternated.

On a shared machine the speed of one process drifts by ±30 % within minutes, so timings taken one
after the other compare the machine's moods as much as the code. Here the ways of solving one frame
run in the same process, in alternating rounds of ``--calls`` calls each (``--rounds`` rounds, the
order rotated every round), on the bundled real recording's frames in turn:

* ``solve``: ``wj.solve(hand, frame)``, the public call (input checks, JAX arrays out);
* ``frame_solver``: ``wj.FrameSolver(hand)(frame)``, the same fit with numpy results;
* ``frame_solver_warm``: the same with ``q0=`` the previous frame's angles (a live stream);
* ``trivial_jit``: a jitted ``x + 1`` on the frame, the floor of any compiled call (how busy the
  machine was: 7–17 µs median in the runs of one day on this 2-core machine).

Every call is timed on its own, waiting for its JAX arrays (``_util.ready``; ``FrameSolver``'s numpy
results are on the host when it returns); the figures are
the min / p10 / median / p90 over all calls, in milliseconds, with the machine's description, in
``benchmarks/results/latency_<device>.json``. Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_latency.py
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from _util import bundled_recording, hardware_info, load_recording, ready, write_json


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30, help="alternated rounds")
    ap.add_argument("--calls", type=int, default=30, help="calls per way per round")
    ap.add_argument("--no-json", action="store_true", help="print only")
    args = ap.parse_args(argv)

    import wuji_jax as wj

    hand = wj.load_hand("right")
    frames = load_recording(bundled_recording())  # (T, 21, 3) float32 metres
    info = hardware_info()
    print(f"{info['cpu_model']} ({info['cpu_count_usable']} usable cores), {info['jax_backend']}/"
          f"{info['device_kind']}, jax {info['jax']}, load {info['load_average_1_5_15min']}", flush=True)
    streamer = wj.FrameSolver(hand)
    prev = {"q": np.asarray(wj.neutral_angles(hand), np.float32)}  # a live stream's previous angles

    def warm(frame):
        res = streamer(frame, q0=prev["q"])
        prev["q"] = res.angles
        return res

    trivial = jax.jit(lambda x: x + 1)
    ways = {"solve": lambda f: wj.solve(hand, f), "frame_solver": streamer, "frame_solver_warm": warm,
            "trivial_jit": trivial}
    first = {}
    for name, fn in ways.items():
        t0 = time.perf_counter()
        ready(fn(frames[0]))
        first[name] = time.perf_counter() - t0
        for f in frames[:20]:
            ready(fn(f))
    times = {name: [] for name in ways}
    order = list(ways)
    i = 0
    for r in range(args.rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:
            fn = ways[name]
            for _ in range(args.calls):
                f = frames[i % len(frames)]
                i += 1
                t0 = time.perf_counter()
                ready(fn(f))
                times[name].append(time.perf_counter() - t0)
    rows = {}
    for name, ts in times.items():
        ms = np.asarray(ts) * 1e3
        rows[name] = dict(first_call_s=first[name], calls=len(ms), min_ms=float(ms.min()),
                          p10_ms=float(np.percentile(ms, 10)), median_ms=float(np.median(ms)),
                          p90_ms=float(np.percentile(ms, 90)))
        print(f"{name:18s} min {rows[name]['min_ms']:.3f}  p10 {rows[name]['p10_ms']:.3f}  "
              f"median {rows[name]['median_ms']:.3f}  p90 {rows[name]['p90_ms']:.3f} ms", flush=True)
    payload = dict(hardware=info, rounds=args.rounds, calls_per_round=args.calls, latency=rows,
                   data="bundled recording (human_hand_video_landmarks.npz), float32, frames in turn",
                   notes="one process; the ways alternate in rounds, order rotated per round; each call "
                         "timed alone, waiting for its JAX arrays; first_call_s includes compilation")
    if not args.no_json:
        print("wrote", write_json("latency", payload))
    return payload


if __name__ == "__main__":
    main()
