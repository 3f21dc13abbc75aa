"""End-to-end dataset throughput: frames per second and peak memory of ``wuji_jax.pipeline.batch.solve_dataset``.

1. Makes a synthetic dataset of ``--frames`` frames (default 10⁶) as a memory-mapped ``.npy``
   (float32, ``(N, 21, 3)`` metres), in a child process and in chunks, never holding it in RAM:
   uniform random angles within the limits → ``wj.forward_keypoints`` → a random similarity
   (uniform rotation, scale 0.85–1.15, translation ~ 20 cm) + 1 mm landmark noise; 0.5 % of the
   frames are NaN (no hand) to exercise the flagged path. It is cached next to the output
   (``--data`` picks the file; ``--regenerate`` rebuilds it).
2. Compiles the solver on a small file with the same chunk settings (timed separately), then times
   ``solve_dataset(dataset, out)`` end to end: reading, solving, writing parts, assembling the table,
   the plot and the summary.
3. Peak memory: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (includes the clean, reclaimable
   file-backed pages of the memory-mapped input that the reader touched) and the peak of
   ``RssAnon`` (heap/anonymous memory only) sampled every 50 ms during the run.

Writes ``benchmarks/results/batch_<device-kind>.json``.

    PYTHONPATH=. python benchmarks/bench_batch.py [--frames 1000000] [--chunk-size 4096]
        [--iterations N] [--format parquet|npz|csv] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_GEN_CHUNK = 32_768


def _rotations(rng, n: int) -> np.ndarray:
    """``(n, 3, 3)`` uniformly random rotations (normalised Gaussian quaternions)."""
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def generate(path: str, frames: int, seed: int) -> None:
    """Write the synthetic dataset to ``path`` chunk by chunk through ``open_memmap``."""
    import jax
    import jax.numpy as jnp

    import wuji_jax as wj

    hand = wj.load_hand("right")
    lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
    fk = jax.jit(lambda q: wj.forward_keypoints(hand, q))
    rng = np.random.default_rng(seed)
    tmp = path + ".tmp.npy"
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(frames, 21, 3))
    for s in range(0, frames, _GEN_CHUNK):
        n = min(_GEN_CHUNK, frames - s)
        q = np.zeros((_GEN_CHUNK, hand.num_joints), np.float32)
        q[:n] = rng.uniform(lo, hi, size=(n, hand.num_joints))
        kp = np.asarray(fk(jnp.asarray(q)), np.float64)[:n]  # fixed shape: compiles once
        R = _rotations(rng, n)
        scale = rng.uniform(0.85, 1.15, size=(n, 1, 1))
        t = rng.normal(scale=0.2, size=(n, 1, 3))
        y = scale * np.einsum("nij,nkj->nki", R, kp) + t + rng.normal(scale=1e-3, size=kp.shape)
        y[rng.random(n) < 0.005] = np.nan
        out[s:s + n] = y
        out.flush()
    del out
    os.replace(tmp, path)


class _AnonPeak:
    """Peak ``RssAnon`` (kB) of this process, sampled in a thread (Linux; None elsewhere)."""

    def __init__(self, period: float = 0.05):
        self.period, self.peak, self._stop = period, None, threading.Event()

    @staticmethod
    def read() -> int | None:
        try:
            with open("/proc/self/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def __enter__(self):
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            v = self.read()
            if v is not None:
                self.peak = v if self.peak is None else max(self.peak, v)
            time.sleep(self.period)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports kB


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=float, default=1e6, help="frames in the synthetic dataset (default 1e6)")
    ap.add_argument("--chunk-size", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=None, help="rows per kernel call (default: solve_dataset's)")
    ap.add_argument("--iterations", type=int, default=None, help="LM iterations (default: the solver's)")
    ap.add_argument("--format", choices=("parquet", "npz", "csv"), default="parquet")
    ap.add_argument("--workdir", default=None, help="where the dataset and the output go (default: a temp dir)")
    ap.add_argument("--data", default=None, help="dataset file (default: <workdir>/synthetic_<N>_<seed>.npy)")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)
    frames = int(args.frames)

    work = Path(args.workdir or Path(tempfile.gettempdir()) / "wuji_bench_batch")
    work.mkdir(parents=True, exist_ok=True)
    data = Path(args.data or work / f"synthetic_{frames}_{args.seed}.npy")
    gen_s = None
    if args.regenerate or not data.exists():
        t0 = time.perf_counter()
        ctx = mp.get_context("spawn")  # the child's memory does not count towards ours
        p = ctx.Process(target=generate, args=(str(data), frames, args.seed))
        p.start()
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"generating {data} failed (exit {p.exitcode})")
        gen_s = time.perf_counter() - t0
        print(f"generated {data} ({data.stat().st_size / 2**20:.0f} MiB) in {gen_s:.1f} s")

    import jax

    import wuji_jax as wj
    from wuji_jax import batch

    try:
        from _util import hardware_info, write_json
    except ImportError:  # older checkouts: a minimal description and writer
        import platform

        def hardware_info():
            return {"platform": platform.platform(), "python": sys.version.split()[0], "jax": jax.__version__,
                    "numpy": np.__version__, "cpu_count": os.cpu_count(), "jax_backend": jax.default_backend(),
                    "device_kind": jax.devices()[0].device_kind, "device_count": jax.device_count()}

        def write_json(name, payload):
            d = Path(__file__).resolve().parent / "results"
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"{name}_{jax.devices()[0].device_kind.lower().replace(' ', '-')}.json"
            path.write_text(json.dumps(payload, indent=2) + "\n")
            return path

    opts = dict(chunk_size=args.chunk_size, iterations=args.iterations, batch_size=args.batch_size)
    # compile on a small file with the same kernel shape (timed apart from the run)
    warm = work / "warmup.npy"
    np.save(warm, np.load(data, mmap_mode="r")[:min(frames, args.chunk_size)])
    t0 = time.perf_counter()
    batch.solve_dataset(str(warm), work / "warmup.npz", progress=False, plot=False, resume=False, **opts)
    compile_s = time.perf_counter() - t0

    out = work / f"synthetic_{frames}_angles.{args.format}"
    rss_before = _maxrss_mb()
    anon_before = _AnonPeak.read()
    with _AnonPeak() as anon:
        t0 = time.perf_counter()
        s = batch.solve_dataset(str(data), out, resume=False, progress=True, **opts)
        wall = time.perf_counter() - t0
    rss_peak = _maxrss_mb()

    info = hardware_info()
    result = {
        "benchmark": "solve_dataset end to end (read .npy memmap -> solve -> parts -> table + plot + summary)",
        "frames": frames, "chunk_size": args.chunk_size, "batch_size": s["batch_size"],
        "iterations": s["iterations"], "format": args.format, "devices": s["devices"],
        "dtype": "float64" if jax.config.jax_enable_x64 else "float32",
        "dataset_mib": data.stat().st_size / 2**20, "output_mib": out.stat().st_size / 2**20,
        "generate_s": gen_s, "warmup_compile_s": compile_s,
        "wall_s": wall, "frames_per_s": frames / wall,
        "peak_rss_mib": rss_peak, "rss_before_run_mib": rss_before,
        "peak_rss_anon_mib": None if anon.peak is None else anon.peak / 1024.0,
        "rss_anon_before_run_mib": None if anon_before is None else anon_before / 1024.0,
        "flagged": s["flagged"], "valid": s["valid"], "residual_mm_mean": s["residual_mm_mean"],
        "residual_mm_median": s["residual_mm_median"], "notes": s["notes"],
        "hardware": info, "wuji_jax": wj.__version__,
    }
    print(f"{frames:,} frames in {wall:.1f} s = {frames / wall:,.0f} frames/s end to end "
          f"(compile {compile_s:.1f} s done before); peak RSS {rss_peak:,.0f} MiB "
          f"(anonymous {result['peak_rss_anon_mib'] or float('nan'):,.0f} MiB; before the run "
          f"{rss_before:,.0f} MiB); {s['flagged']:,} flagged, residual median {s['residual_mm_median']:.3f} mm")
    if not args.no_json:
        name = "batch" if frames == 1_000_000 else f"batch-{frames}"
        print(f"wrote {write_json(name, result)}")
    return result


if __name__ == "__main__":
    main()
