"""Frames per second of ``wuji_jax.pipeline.ray_cluster.solve_dataset_ray`` on a local Ray cluster (its default:
one worker holding the machine's CPUs; and one worker per CPU) against the single-process command line
on the same data.

1. The synthetic dataset of ``benchmarks/bench_batch.py`` (``--frames``, default 10⁶: random angles
   within the limits → FK → a random similarity + 1 mm noise, 0.5 % NaN frames), float32 ``.npy``,
   made in a child process and cached in ``--workdir``.
2. Warm-up, untimed: the command line and a one-worker Ray run on the first ``QUICK_JOB_FRAMES`` + 1
   frames (a big job: the kernel the timed runs use, not the small jobs' quick one), so that
   both programs are in the compilation cache (``<workdir>/xla``, used by every run below).
3. Timed, each in a fresh process, wall clock from outside (interpreter start, imports, cluster start
   and stop, reading, solving, writing the Parquet table and the summary; no plot):

   * ``cli``: ``python -m wuji_jax --cache-dir <workdir>/xla solve big.npy -o cli.parquet --no-plot
     --quiet`` (one process; the CLI gives JAX one CPU device per core and shards each batch);
   * ``ray_<layout>``: a driver that starts a local cluster (``ray.init(address="local")``) and calls
     ``solve_dataset_ray(big.npy, ray_<layout>.parquet)`` with the layout's ``workers`` and
     ``cpus_per_worker`` (``default``: neither given; ``WxC``: W workers of C CPUs); it also reports
     the cluster's start-up and the solve alone;
   * ``ray_running``: a cluster started before the clock starts (``ray start --head``, all CPUs),
     then ``python -m wuji_jax --cache-dir <workdir>/xla solve big.npy -o ray_running.parquet
     --no-plot --quiet --ray auto`` timed as the CLI is: the first job on a cluster that is up;
   * ``ray_running-again`` and ``ray_running-again-WxC``: further jobs, timed the same way, on that
     cluster (the default layout; W workers of C CPUs, ``--cpus-per-worker C``), after its first job:
     Ray Data starts its helper actors (statistics, autoscaling, actor locations, usage) on a
     cluster's first job and keeps them (detached), so these are what each job costs on a cluster
     in use. Then ``ray stop`` (which stops every Ray cluster of this machine).

   ``overhead_vs_cli`` = (cli frames/s) / (ray frames/s) - 1: positive when Ray is slower (medians
   over ``--repeats`` rounds, each round running every configuration once). The load average
   before and after each run is recorded: on a shared machine it says how much of the CPUs the
   runs had.

Writes ``benchmarks/results/ray_<device-kind>.json`` (``ray_<frames>_<device-kind>.json`` when
``--frames`` is not 10⁶).

    PYTHONPATH=. python benchmarks/bench_ray.py [--frames 1000000]
        [--layouts default,2x1,running,running-again,running-again-2x1] [--chunk-size 4096]
        [--iterations N] [--repeats 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

_DRIVER = r"""
import json, sys, time
t0 = time.perf_counter()
import ray
from wuji_jax.pipeline.ray_cluster import solve_dataset_ray
args = json.loads(sys.argv[1])
ray.init(address="local", include_dashboard=False, log_to_driver=False)
t1 = time.perf_counter()
s = solve_dataset_ray(args["data"], args["out"], workers=args["workers"], cpus_per_worker=args["cpus"],
                      chunk_size=args["chunk_size"],
                      iterations=args["iterations"], compilation_cache=args["cache"], plot=False,
                      progress=False, resume=False)
t2 = time.perf_counter()
ray.shutdown()
print(json.dumps({"cluster_start_s": t1 - t0, "solve_s": t2 - t1, "summary": s}))
"""


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))  # a local cluster, this machine only
    env.pop("WUJI_JAX_NO_CACHE", None)
    return env


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _run(cmd: list[str], what: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{what} failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return wall, r.stdout


def _cli_cmd(data: Path, out: Path, cache: Path, args, *extra: str) -> list[str]:
    """``python -m wuji_jax --cache-dir CACHE solve DATA -o OUT --no-plot --quiet ...`` (+ ``extra``)."""
    cmd = [sys.executable, "-m", "wuji_jax", "--cache-dir", str(cache), "solve", str(data), "-o", str(out),
           "--no-plot", "--quiet", "--no-resume", "--chunk-size", str(args.chunk_size), *extra]
    return cmd + (["--iterations", str(args.iterations)] if args.iterations else [])


def _cli(data: Path, out: Path, cache: Path, args) -> dict:
    cmd = _cli_cmd(data, out, cache, args)
    before = _load()
    wall, _ = _run(cmd, "the CLI")
    s = json.loads(out.with_name(out.stem + "_summary.json").read_text())
    return {"command": " ".join(cmd[1:]), "wall_s": wall, "frames": s["frames"], "frames_per_s": s["frames"] / wall,
            "solve_dataset_wall_s": s["wall_seconds"], "devices": s["devices"], "batch_size": s["batch_size"],
            "load_before": before, "load_after": _load()}


def _layout(text: str) -> tuple[int | None, int | None]:
    """``default`` → (None, None); ``WxC`` → (W workers, C CPUs each)."""
    if text == "default":
        return None, None
    w, c = text.lower().split("x")
    return int(w), int(c)


def _running(layout: str) -> bool:
    return layout == "running" or layout.startswith("running-again")


def _ray_running(data: Path, work: Path, cache: Path, layouts: list[str], args) -> dict[str, dict]:
    """The ``running*`` layouts on one cluster: ``ray start --head`` (not timed), then for each layout
    in ``layouts`` (``running`` first if asked, then ``running-again[-WxC]``) the command line's
    ``wuji-jax solve ... --ray auto [--cpus-per-worker C]`` timed from outside, then ``ray stop``
    (not timed). A ``running-again`` layout without ``running`` before it gets an untimed first job."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    t0 = time.perf_counter()
    subprocess.run([ray_bin, "start", "--head", f"--num-cpus={os.cpu_count()}", "--include-dashboard=false",
                    "--disable-usage-stats"], env=_env(), check=True, capture_output=True)
    start = time.perf_counter() - t0
    got: dict[str, dict] = {}
    try:
        order = sorted(layouts, key=lambda k: k != "running")
        if "running" not in order:  # the cluster's first job, not timed
            _run(_cli_cmd(data, work / "ray_first.parquet", cache, args, "--ray", "auto"), "the CLI with --ray auto")
        for k in order:
            out = work / f"ray_{k}.parquet"
            # running-again-WxC: W workers of C CPUs (--cpus-per-worker C); running, running-again: the default
            cpus = _layout(k.removeprefix("running-again-"))[1] if k.startswith("running-again-") else None
            cmd = _cli_cmd(data, out, cache, args, "--ray", "auto",
                           *(["--cpus-per-worker", str(cpus)] if cpus else []))
            before = _load()
            wall, _ = _run(cmd, f"the CLI with --ray auto (layout {k})")
            s = json.loads(out.with_name(out.stem + "_summary.json").read_text())
            got[k] = {"layout": k, "workers": s["ray"]["workers"], "cpus_per_worker": s["ray"].get("cpus_per_worker"),
                      "wall_s": wall, "frames": s["frames"], "frames_per_s": s["frames"] / wall,
                      "cluster_start_s": start, "cluster_start_timed": False, "cluster_jobs_before": order.index(k)
                      + ("running" not in order), "solve_s": s["wall_seconds"],
                      "solve_frames_per_s": s["frames"] / s["wall_seconds"], "blocks": s["ray"]["blocks"],
                      "block_size": s["ray"]["block_size"], "batch_size": s["batch_size"], "devices": s["devices"],
                      "command": " ".join(cmd[1:]), "load_before": before, "load_after": _load()}
    finally:
        subprocess.run([ray_bin, "stop"], env=_env(), capture_output=True)
    return got


def _ray(data: Path, out: Path, cache: Path, layout: str, args) -> dict:
    """Layout ``default`` or ``WxC`` on a cluster the driver starts (timed with it)."""
    workers, cpus = _layout(layout)
    spec = {"data": str(data), "out": str(out), "workers": workers, "cpus": cpus, "chunk_size": args.chunk_size,
            "iterations": args.iterations, "cache": str(cache)}
    before = _load()
    wall, stdout = _run([sys.executable, "-c", _DRIVER, json.dumps(spec)], f"Ray, layout {layout}")
    got = json.loads(stdout.strip().splitlines()[-1])
    s = got["summary"]
    return {"layout": layout, "workers": s["ray"]["workers"], "cpus_per_worker": s["ray"].get("cpus_per_worker"),
            "wall_s": wall, "frames": s["frames"], "frames_per_s": s["frames"] / wall,
            "cluster_start_s": got["cluster_start_s"], "solve_s": got["solve_s"],
            "solve_frames_per_s": s["frames"] / got["solve_s"], "blocks": s["ray"]["blocks"],
            "block_size": s["ray"]["block_size"], "batch_size": s["batch_size"], "devices": s["devices"],
            "load_before": before, "load_after": _load()}


def _max_diff(a: Path, b: Path) -> dict:
    """How far two tables' angles are apart: bit for bit where a Ray worker holds as many CPU devices
    as the CLI uses (the default on one machine), float rounding otherwise (one device per worker)."""
    import pyarrow.parquet as pq

    from wuji_jax.hand.model import load_hand

    cols = list(load_hand("right").joint_names)
    ta, tb = pq.read_table(a, columns=cols + ["valid"]), pq.read_table(b, columns=cols + ["valid"])
    x = np.stack([ta[c].to_numpy() for c in cols], 1)
    y = np.stack([tb[c].to_numpy() for c in cols], 1)
    return {"rows_equal": ta.num_rows == tb.num_rows, "bitwise_equal": bool(np.array_equal(x, y)),
            "max_abs_angle_diff_rad": float(np.max(np.abs(x - y))),
            "valid_equal": bool(np.array_equal(ta["valid"].to_numpy(), tb["valid"].to_numpy()))}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=float, default=1e6, help="frames in the synthetic dataset (default 1e6)")
    ap.add_argument("--layouts", default="default,2x1,running,running-again,running-again-2x1",
                    help="Ray layouts to time: 'default' (solve_dataset_ray's: one worker per node holding its CPUs), "
                         "WxC (W workers of C CPUs), both on a cluster the driver starts (timed); 'running': the "
                         "default layout through 'wuji-jax solve --ray auto', the first job on a cluster started "
                         "before (not timed); 'running-again' and 'running-again-WxC': later jobs on that cluster "
                         "(it runs 'ray stop' after); default: default,2x1,running,running-again,running-again-2x1")
    ap.add_argument("--chunk-size", type=int, default=4096)
    ap.add_argument("--iterations", type=int, default=None, help="LM iterations (default: the solver's)")
    ap.add_argument("--workdir", default=None, help="dataset, outputs and the compilation cache (default: temp)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1, help="times to run the whole comparison (median)")
    ap.add_argument("--name", default=None, help="results file stem (default: ray, or ray_<frames> when "
                    "--frames is not 10^6)")
    ap.add_argument("--no-json", action="store_true")
    args = ap.parse_args(argv)
    frames = int(args.frames)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_ray_"))
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "xla"
    data = work / f"synthetic_{frames}_{args.seed}.npy"
    if not data.exists():
        print(f"generating {frames:,} frames -> {data}", flush=True)
        subprocess.run([sys.executable, "-c", "import sys, bench_batch; bench_batch.generate(sys.argv[1], "
                        "int(sys.argv[2]), int(sys.argv[3]))", str(data), str(frames), str(args.seed)],
                       check=True, cwd=HERE, env=_env())
    small = work / "warmup.npy"
    from wuji_jax.pipeline.batch import QUICK_JOB_FRAMES

    np.save(small, np.load(data, mmap_mode="r")[:QUICK_JOB_FRAMES + 1])

    print("warm-up (compiles into the cache) ...", flush=True)
    t = time.perf_counter()
    _cli(small, work / "warm_cli.parquet", cache, args)
    counts = [x.strip() for x in args.layouts.split(",")]
    started = [k for k in counts if not _running(k)]
    running = [k for k in counts if _running(k)]
    for k in started:
        _ray(small, work / "warm_ray.parquet", cache, k, args)
    if running:
        _ray_running(small, work / "warm", cache, running, args)
    warm = time.perf_counter() - t

    clis: list[dict] = []
    rays: dict[str, list[dict]] = {k: [] for k in counts}
    for rep in range(args.repeats):  # interleaved, so that a change of the machine's load hits all alike
        print(f"[{rep + 1}/{args.repeats}] cli on {frames:,} frames ...", flush=True)
        c = _cli(data, work / "cli.parquet", cache, args)
        clis.append(c)
        print(f"  {c['frames_per_s']:,.0f} frames/s ({c['wall_s']:.1f} s)", flush=True)
        got = {}
        for k in started:
            print(f"[{rep + 1}/{args.repeats}] ray, layout {k} ...", flush=True)
            got[k] = _ray(data, work / f"ray_{k}.parquet", cache, k, args)
        if running:
            print(f"[{rep + 1}/{args.repeats}] ray, layouts {', '.join(running)} on one cluster ...", flush=True)
            got.update(_ray_running(data, work, cache, running, args))
        for k in counts:
            r = got[k]
            rays[k].append(r)
            print(f"  {k}: {r['frames_per_s']:,.0f} frames/s ({r['wall_s']:.1f} s; cluster start "
                  f"{r['cluster_start_s']:.1f} s{'' if r.get('cluster_start_timed', True) else ', not timed'})",
                  flush=True)
    cli_fps = statistics.median(c["frames_per_s"] for c in clis)
    runs = []
    for k in counts:
        fps = statistics.median(r["frames_per_s"] for r in rays[k])
        runs.append({"layout": k, "workers": rays[k][0]["workers"], "cpus_per_worker": rays[k][0]["cpus_per_worker"],
                     "frames_per_s": fps, "overhead_vs_cli": cli_fps / fps - 1, "runs": rays[k]})
        print(f"ray, layout {k} ({rays[k][0]['workers']} worker(s) x {rays[k][0]['cpus_per_worker']} CPU(s)): "
              f"{fps:,.0f} frames/s, overhead vs the CLI's {cli_fps:,.0f} frames/s: "
              f"{100 * (cli_fps / fps - 1):+.1f} %", flush=True)
    cli = {"frames_per_s": cli_fps, "runs": clis}

    from _util import hardware_info, versions, write_json

    import wuji_jax

    result = {
        "benchmark": "solve_dataset_ray on a local Ray cluster vs the single-process CLI (wall clock, fresh "
                     "processes, warm compilation cache, Parquet out, no plot)",
        "frames": frames, "chunk_size": args.chunk_size, "iterations": args.iterations,
        "warmup_s": warm, "cli": cli, "ray": runs,
        "ray_vs_cli_table": {k: _max_diff(work / "cli.parquet", work / f"ray_{k}.parquet") for k in counts},
        "hardware": hardware_info(), "versions": versions("ray", "pyarrow", "jax", "jaxlib", "numpy"),
        "wuji_jax": wuji_jax.__version__,
    }
    if not args.no_json:
        name = args.name or ("ray" if frames == 1_000_000 else f"ray_{frames}")
        print(f"wrote {write_json(name, result)}")
    return result


if __name__ == "__main__":
    main()
