"""Peak RSS of reading a ~1 GB landmark Parquet file through wuji_jax.data.io.iter_chunks (issue 19).

    PYTHONPATH=. python benchmarks/bench_parquet_rss.py [--frames 2000000] [--keep] [--path FILE]

Writes the file with wuji_jax.data.io.write_landmarks (the layout the reader accepts: timestamp, x0..z20
float64 columns, pyarrow's default row groups) in a subprocess, then reads it fully in a fresh
subprocess and prints that subprocess's peak RSS (resource.getrusage(RUSAGE_SELF).ru_maxrss) next to
its RSS right after ``import wuji_jax.data.io`` (which does not load JAX). The file is deleted afterwards
unless --keep. Results: ``benchmarks/results/parquet_rss_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WRITE = r"""
import sys, numpy as np
from wuji_jax import io
path, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
w = rng.normal(scale=0.05, size=(n, 21, 3))
io.write_landmarks(path, w, np.arange(n) / 30.0)
"""

READ = r"""
import json, resource, sys, time
import numpy as np
import wuji_jax.data.io as wio
import pyarrow.parquet  # imported up front so its own size counts in the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
n = 0
s = 0.0
last = -1.0
for start, lm, t in wio.iter_chunks(sys.argv[1]):
    assert start == n
    n += len(lm)
    s += float(lm[:, 0, 0].sum())
    last = float(t[-1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"frames": n, "seconds": time.perf_counter() - t0, "rss_after_import_mib": base / 1024,
                  "peak_rss_mib": peak / 1024, "checksum": s, "last_t": last}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=2_000_000)  # 2e6 x 64 float64 columns ~ 1.02 GB
    ap.add_argument("--path", default=None, help="default: a temporary file")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    import tempfile

    tmp = None
    if args.path is None:
        tmp = tempfile.mkdtemp(prefix="wuji_rss_")
        args.path = os.path.join(tmp, "big_landmarks.parquet")
    try:
        if not os.path.exists(args.path):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", WRITE, args.path, str(args.frames)], check=True)
            print(f"wrote {args.path} in {time.perf_counter() - t0:.1f} s", flush=True)
        size = os.path.getsize(args.path)
        import pyarrow.parquet as pq
        md = pq.ParquetFile(args.path).metadata
        print(f"file: {size / 2**20:.0f} MiB ({size / 1e9:.2f} GB), {md.num_rows} rows, "
              f"{md.num_row_groups} row groups, {md.num_columns} columns", flush=True)
        out = subprocess.run([sys.executable, "-c", READ, args.path], check=True, capture_output=True,
                             text=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(res, indent=1))
        print(f"peak RSS {res['peak_rss_mib']:.0f} MiB ({res['peak_rss_mib'] * 2**20 / 1e6:.0f} MB), "
              f"{res['peak_rss_mib'] - res['rss_after_import_mib']:.0f} MiB above the import baseline")
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from _util import hardware_info, versions, write_json

        res.update(file_mib=size / 2**20, rows=md.num_rows, row_groups=md.num_row_groups, columns=md.num_columns,
                   peak_rss_mb=res["peak_rss_mib"] * 2**20 / 1e6, target_mb=300,
                   reader="wuji_jax.data.io.iter_chunks (pyarrow iter_batches, pre_buffer=False, one thread, 64 KiB buffers, values read from the Arrow buffers: no pandas import)")
        print(write_json("parquet_rss", {"benchmark": "parquet_rss", "result": res, "hardware": hardware_info(),
                                         "versions": versions("pyarrow")}))
    finally:
        if not args.keep and os.path.exists(args.path):
            os.remove(args.path)
        if tmp is not None and not args.keep:
            os.rmdir(tmp)


if __name__ == "__main__":
    main()
