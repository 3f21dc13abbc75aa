"""Solve whole datasets on a Ray cluster: the table :func:`wuji_jax.batch.solve_dataset` writes, from
many workers (extra ``ray``: ``pip install 'wuji-jax[ray]'``)::

    from wuji_jax.ray_cluster import solve_dataset_ray
    summary = solve_dataset_ray("/shared/takes/*.npy", "/shared/out/angles.parquet", address="auto")

or ``wuji-jax solve INPUT... -o OUT --ray [ADDRESS]`` (no ADDRESS: a local cluster on this machine;
``auto``: the cluster ``ray start`` made on this machine; ``HOST:PORT`` or ``ray://HOST:10001``: that
one).

How a run is laid out
---------------------
* The files are cut into *blocks*: a file whose frame count its header gives (``.npy``, ``.npz``,
  Parquet, HDF5) is split into blocks of ``block_size`` frames (default 16 chunks), any other file
  (CSV, JSONL, a video) is one block. The blocks form a :class:`ray.data.Dataset` of one row each,
  ``map_batches``'d by an actor pool of :class:`_BlockSolver` (two blocks at a time per worker, see
  :func:`_actor_pool`): on CPUs one worker per node by default,
  holding the node's CPUs (``cpus_per_worker``, default the smallest node's CPU count) as that many
  JAX CPU devices, exactly as ``wuji-jax solve`` uses a machine; on GPUs one worker per GPU. A
  worker turns on the persistent compilation cache and compiles the solver once when it starts;
  workers on one machine share the cache folder: the first compiles while the others wait (a file
  lock), then they all load its program from the cache.
* A worker reads its block with the readers of :func:`wuji_jax.io.iter_chunks` (every format
  ``wuji-jax solve`` reads), in chunks of ``chunk_size`` counted from the file's start: a block in
  the middle of a file decides the side (``side="auto"``) and the unit check from the file's first
  chunks, exactly as the single-machine run, then starts reading one chunk before the block (the
  timestamps' order is checked across its start): ``.npy``, ``.npz`` and HDF5 at that frame,
  Parquet at the row group holding it; CSV and JSONL (one block per file anyway) from the start.
  Each chunk is solved by :class:`wuji_jax.runner.kernel.Kernel` with the same ``batch_size``, compile
  options (a small job's quick ones), solver settings and dtype as
  :func:`~wuji_jax.batch.solve_dataset` (padded with NaN rows to whole batches), so every frame's
  values equal the single-machine run's on as many devices of the same type
  (``solve_dataset(devices=cpus_per_worker)`` on CPU, bit for bit: a frame's result does not depend
  on the frames solved beside it).
* The finished block comes back to the driver as one row (the part, as bytes) and the driver writes
  it to ``<out>.parts/chunk_<file>_<start>.npz`` (a temporary name, then renamed); so only the
  driver writes the output, and the inputs must be readable at the same path on every node (a shared
  file system). ``<out>.parts/manifest.json`` records the inputs' identity (as
  :func:`~wuji_jax.batch.solve_dataset`'s, plus the block size) and every finished block, its frames,
  notes or error.
* Rerunning the same call after a failure (a killed driver, a lost cluster) solves only the blocks
  without a part; the output is the same, byte for byte. A worker that dies is restarted by Ray and
  its block solved again (Ray Data's actor fault tolerance: ``max_restarts`` and
  ``max_task_retries`` unlimited).
* The driver writes ``out`` in input order (``.parquet``, ``.npz`` or ``.csv``: the layout and
  columns of :func:`~wuji_jax.batch.solve_dataset`, one row group per block), with
  ``<stem>_summary.json`` (the same fields, plus ``ray``) and ``<stem>_plot.png``. A fresh run whose
  inputs' frame counts are known writes it as the blocks arrive (a block that comes before its
  predecessors waits in its part file); otherwise (a resumed run, a failed block, inputs of unknown
  length) the parts are concatenated at the end.

A bad file (unreadable, wrong shape, wrong units) is that file's one-line error: with
``on_error="skip"`` (the default here) it goes to the summary's ``errors``, its rows are left out
and the other files are solved; ``on_error="raise"`` stops the job at the first error that comes
back (the finished parts are kept).

Progress is Ray Data's own progress bar (blocks done).

Costs
-----
Ray costs a few seconds to start a local cluster and a few more to start the workers (a process
each: Python, Ray, JAX, the program from the cache), and its own processes (the Ray Data executor in
the driver, the raylet) take a share of the CPUs while the workers solve. The first Ray Data job on a
cluster also starts Ray Data's helper actors (statistics, autoscaling, actor locations, usage
reports: a process each, kept for the cluster's later jobs). On one machine a Ray job takes
longer than ``wuji-jax solve`` by Ray's and its worker's start (``docs/performance.md``, "Ray"). Ray is for more machines than one.

(The module is ``ray_cluster``, not ``ray``: ``from wuji_jax import ray`` would shadow the ``ray``
package in the caller's namespace, and a script run from inside the package folder would import it
for ``import ray``.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import io as _bytes_io
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..data import io as wio
from .job import DEFAULT_CHUNK_SIZE, Assembly, JobRun, JobSpec, blocks_of, job_target
from .kernel import Kernel, kernel_compile_options
from .reading import FileError, Prefetch, read_file, side_of_file
from .store import OutputLock, part_arrays, part_ok, read_part

__all__ = ["solve_dataset_ray", "require_ray", "connect", "DEFAULT_BLOCK_CHUNKS"]

#: frames per block, in chunks: big enough that a block's start-up (reading the file up to it) is
#: small next to solving it, small enough that the blocks of one big file keep every worker busy
DEFAULT_BLOCK_CHUNKS = 16
#: blocks a worker solves side by side (where Ray Data allows it, see :func:`_actor_pool`)
BLOCKS_PER_WORKER = 2
_RUNNER = "ray"
_INSTALL = "pip install 'wuji-jax[ray]'"
#: the test hook, read by :func:`solve_dataset_ray` only: where this environment variable names a path that
#: does not exist, the first worker to solve a chunk creates it and exits at once (``os._exit``), so that a
#: test sees Ray restart a worker mid-block and the job's output unchanged. Unset in normal use.
CRASH_ONCE_ENV = "WUJI_JAX_RAY_CRASH_ONCE"


def require_ray():
    """``ray``, with ``ray.data`` imported, or a one-line ImportError saying how to install them."""
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise ImportError(f"solving on a Ray cluster needs Ray with Ray Data ({_INSTALL}); "
                          f"{type(e).__name__}: {e}") from None
    return ray


# ------------------------------------------------------------------------------------ the worker


@dataclasses.dataclass(frozen=True)
class _Workers:
    """What the driver decided about the workers, sent to each with the job's spec.

    Attributes:
        gpu: one GPU per worker (else CPUs).
        cpus: JAX devices per worker: its CPUs (``cpus_per_worker``), or 1 on a GPU.
        count: the actors asked for.
        batch_size: rows per kernel call (a multiple of ``cpus``).
        quick: a small job, compiled with quick options (as ``solve_dataset`` compiles it).
        block_size: frames per block (a multiple of the spec's ``chunk_size``).
        cache: ``(folder or None, explicit)`` of the workers' compilation cache, or None (off).
        address: the cluster's address as the caller gave it.
        crash_once: :data:`CRASH_ONCE_ENV`'s path (tests), or None.
    """

    gpu: bool
    cpus: int
    count: int
    batch_size: int
    quick: bool
    block_size: int
    cache: tuple | None
    address: str | None
    crash_once: str | None = None


class _BlockSolver:
    """Ray Data's stateful callable: one per worker. ``__init__`` sets up JAX (``workers.cpus`` CPU
    devices or one GPU), the compilation cache, the hand and the compiled kernel for ``spec`` (a
    :class:`~wuji_jax.pipeline.job.JobSpec`; ``digest``: the run's, written into every part);
    ``__call__`` solves a batch of block rows (``unit``, ``file``, ``path``, ``name``, ``start``,
    ``stop``) into rows of ``unit``, ``meta`` (JSON: frames, side, notes, error, worker) and ``part``
    (the part file's bytes)."""

    def __init__(self, *, spec: JobSpec, workers: _Workers, digest: str):
        import jax

        from ..runtime.devices import jax_started

        gpu = workers.gpu
        k = 1 if gpu else int(workers.cpus)
        if not jax_started():
            if not gpu:
                jax.config.update("jax_platforms", "cpu")
            jax.config.update("jax_num_cpu_devices", k)
        jax.config.update("jax_enable_x64", np.dtype(spec.dtype).name == "float64")
        folder = None
        cache = workers.cache
        if cache is not None:
            from ..runtime.cache import ENV_OFF, enable_compilation_cache

            where, explicit = cache
            if explicit:  # a folder named by the caller beats an inherited WUJI_JAX_NO_CACHE
                os.environ.pop(ENV_OFF, None)
            folder = enable_compilation_cache(where)
        devices = jax.devices()[:k]
        device = devices[0]
        if gpu and device.platform == "cpu":
            raise RuntimeError("a GPU worker's JAX finds no GPU: install JAX with GPU support on the "
                               "workers (pip install 'jax[cuda12]') or run on CPUs (use_gpu=False)")
        if len(devices) < k:
            raise RuntimeError(f"a worker's JAX has {len(devices)} CPU device(s), not cpus_per_worker={k}: "
                               "it was started before the worker could set jax_num_cpu_devices")
        self.spec, self.workers, self.digest = spec, workers, digest
        self.config = spec.config
        self.dtype = np.dtype(spec.dtype)
        self.kernel = Kernel(self.config, devices, workers.batch_size, self.dtype, quick=workers.quick,
                             target=spec.commands)
        self.worker = f"{socket.gethostname()}:{os.getpid()} " + ",".join(map(str, devices))
        self.crash_once = workers.crash_once
        self._warm_up(folder, device, len(devices))

    def _warm_up(self, folder: str | None, device, n_devices: int) -> None:
        """Compile the kernel (or load it from the cache) before the first block. Where the cache is
        on, the first worker of a machine to start compiles while the others wait (a file lock in the
        cache folder), then marks the program compiled; the others, and every later worker, find the
        mark and load the program from the cache at once, side by side."""
        import jax

        s, w = self.spec, self.workers
        side = s.side if s.side != "auto" else "right"

        def run():
            outs = self.kernel.dispatch(side, np.full((1, 21, 3), np.nan, self.dtype), s.commands is not None)
            self.kernel.collect(outs, 1)

        try:
            import fcntl
        except ImportError:  # Windows: no lock; every worker may compile
            fcntl = None
        if folder is None or fcntl is None:
            run()
            return
        from .. import __version__

        key = hashlib.sha256(repr((__version__, jax.__version__, device.platform, device.device_kind, n_devices,
                                   w.batch_size, w.quick,
                                   self.dtype.name, side, s.inspire, self.config.static(),
                                   os.environ.get("XLA_FLAGS", ""))).encode()).hexdigest()[:16]
        mark = Path(folder) / f".wuji_jax_ray_{key}.compiled"
        if not mark.exists():
            with open(Path(folder) / ".wuji_jax_ray.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    if not mark.exists():
                        run()
                        mark.touch()
                        return
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        run()

    def __call__(self, table):
        import pyarrow as pa

        units, metas, parts = [], [], []
        for row in table.to_pylist():
            meta, blob = self.solve_block(row)
            units.append(row["unit"])
            metas.append(json.dumps(meta))
            parts.append(blob)
        return pa.table({"unit": pa.array(units, pa.int64()), "meta": pa.array(metas, pa.string()),
                         "part": pa.array(parts, pa.large_binary())})

    def solve_block(self, row: dict) -> tuple[dict, bytes]:
        """One block: ``(meta, part bytes)``; a bad file gives its error and no part."""
        s = self.spec
        name, path = row["name"], row["path"]
        start, stop = int(row["start"]), row["stop"]
        meta = {"unit": int(row["unit"]), "file": int(row["file"]), "start": start, "frames": 0,
                "side": None, "notes": [], "error": None, "worker": self.worker}
        got: dict[str, list] = {}
        pending: list = []
        frame_parts: list = []
        time_parts: list = []
        side = None

        def collect():
            while pending:
                outs, n = pending.pop(0)
                for k, v in self.kernel.collect(outs, n).items():
                    got.setdefault(k, []).append(v)
                if self.crash_once and not os.path.exists(self.crash_once):
                    Path(self.crash_once).touch()  # tests: this worker dies once, mid-block
                    os._exit(1)

        checked = not s.check_units

        def decide(world):  # the side and the unit check, from the file's first chunks
            nonlocal side, checked
            if side is None:
                side = side_of_file(s.side, world, name, meta["notes"])
            if not checked and np.isfinite(world).all(axis=(1, 2)).any():
                from ..hand.landmarks import unit_problem

                problem = unit_problem(world)
                if problem:
                    raise FileError(f"{name}: {problem} (or pass check_units=False)")
                checked = True

        try:
            # a block further in: its file's head decides, then reading starts one chunk before the block
            # (which checks the timestamps' order across the block's start); formats that cannot start
            # there are read from the start (io._reader)
            skip = max(start - s.chunk_size, 0)
            if skip:
                head = read_file(path, path, s.chunk_size, s.fps, s.max_frames)
                for local, world, _ in head:
                    if local >= skip:
                        break
                    decide(world)
                    if side is not None and checked:
                        break
                head.close()
            with Prefetch(read_file(path, path, s.chunk_size, s.fps, s.max_frames, skip)) as chunks:
                for local, world, t in chunks:
                    decide(world)
                    m = world.shape[0]
                    if local + m <= start:  # before this block: read for the side and unit check only
                        continue
                    if stop is not None and local >= stop:
                        break
                    outs = self.kernel.dispatch(side, world, s.commands is not None)  # asynchronous
                    collect()  # the previous chunk, while this one is solved
                    pending.append((outs, m))
                    frame_parts.append(local + np.arange(m, dtype=np.int64))
                    time_parts.append(np.asarray(t, np.float64))
                    meta["frames"] += m
            collect()
        except FileError as e:
            msg = str(e)
            if path != name and msg.startswith(path):  # name the file as the caller did
                msg = name + msg[len(path):]
            meta.update(error=msg, frames=0, notes=[])
            return meta, b""
        meta["side"] = side
        if not meta["frames"]:
            return meta, b""
        frames = np.concatenate(frame_parts)
        arrays = {"source": np.full(frames.shape[0], int(row["file"]), np.int32), "frame": frames,
                  "timestamp": np.concatenate(time_parts), "side": np.asarray(side),
                  "run": np.asarray(self.digest), **{k: np.concatenate(v) for k, v in got.items()}}
        buf = _bytes_io.BytesIO()
        np.savez(buf, **arrays)
        return meta, buf.getvalue()


# ------------------------------------------------------------------------------------ the driver


def _cache_setting(compilation_cache: Any) -> tuple | None:
    """``(folder or None, explicit)`` for the workers' compilation cache, or None for no cache."""
    from ..runtime.cache import compilation_cache_dir

    if compilation_cache is False:
        return None
    if compilation_cache not in (None, True):
        return (str(Path(compilation_cache).expanduser().absolute()), True)
    # the driver's folder, else each worker's default; a worker's WUJI_JAX_NO_CACHE=1 turns it off there
    return (compilation_cache_dir(), False)


def _cpus_per_worker(ray, asked: int | None) -> int:
    """The CPUs (JAX CPU devices) of a CPU worker: ``asked``, or those of the smallest node."""
    sizes = [int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    sizes = [c for c in sizes if c > 0] or [1]
    if asked is None:
        return min(sizes)
    if isinstance(asked, bool) or int(asked) < 1:
        raise ValueError(f"cpus_per_worker must be >= 1, got {asked!r}")
    if int(asked) > max(sizes):
        raise ValueError(f"cpus_per_worker={asked}: no node of the cluster has that many CPUs (the largest has "
                         f"{max(sizes)}); a worker's CPUs must be on one node")
    return int(asked)


def connect(ray, address: str | None, progress: bool) -> bool:
    """Join or start a cluster; True when this call started Ray (and so shuts it down). ``"local"``
    starts one bound to 127.0.0.1 (no port of it reachable from another machine), without dashboard."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"log_to_driver": progress}
    if not progress:  # quiet: no "Connecting to existing Ray cluster" and the like
        import logging

        kwargs["logging_level"] = logging.WARNING
    if address in (None, "local"):
        kwargs["include_dashboard"] = False
    if address != "local":
        ray.init(address=address, **kwargs)
        return True
    # the new cluster serves this machine only: its node address is the loopback one, so that its servers
    # listen there and on no other interface (ray.init turns a loopback _node_ip_address into the
    # machine's address unless its constant ENABLE_RAY_CLUSTER is off, as it is on macOS and Windows)
    kwargs.update(dashboard_host="127.0.0.1", _node_ip_address="127.0.0.1")
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if saved is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(address=address, **kwargs)
    finally:
        if saved is not None:
            constants.ENABLE_RAY_CLUSTER = saved
    return True


def _write_bytes(path: Path, blob: bytes) -> None:
    """A part, atomically (a temporary name, fsync, rename): whole or absent."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def solve_dataset_ray(
    source: Any,
    out: str | os.PathLike,
    side: str = "right",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    resume: bool = True,
    progress: bool = True,
    inspire: bool = True,
    iterations: int | None = None,
    *,
    address: str | None = None,
    workers: int | None = None,
    cpus_per_worker: int | None = None,
    use_gpu: bool | None = None,
    block_size: int | None = None,
    on_error: str = "skip",
    config=None,
    batch_size: int | None = None,
    check_units: bool = True,
    fps: float | None = None,
    plot: bool = True,
    keep_parts: bool = False,
    max_frames: int | None = wio.MAX_FRAMES,
    compilation_cache: str | os.PathLike | bool | None = None,
) -> dict[str, Any]:
    """Solve every frame of landmark files on a Ray cluster into one table (see the module docstring).

    The arguments shared with :func:`wuji_jax.batch.solve_dataset` mean the same; the table, its
    row order and every frame's values are the same as that function's with ``devices=1`` on the
    workers' device type. Inputs must be readable at the same path by the driver and every worker.

    Args:
        address: the cluster: None joins the one this process is connected to, else what
            :func:`ray.init` finds (``$RAY_ADDRESS``, a ``ray start`` on this machine) or a new local
            one; ``"local"`` starts a new local cluster; ``"auto"``, ``"HOST:PORT"`` or
            ``"ray://HOST:10001"`` joins that cluster. A cluster this call started is shut down at
            the end.
        workers: actors solving blocks (default: the cluster's CPUs divided by ``cpus_per_worker``, or
            one per GPU; more than the cluster holds wait for nodes to join, e.g. from an autoscaler).
        cpus_per_worker: CPU workers: the CPUs each worker holds, given to its JAX as that many CPU
            devices over which every kernel batch is split, as ``wuji-jax solve`` does on one machine
            (the table then equals :func:`~wuji_jax.batch.solve_dataset`'s with
            ``devices=cpus_per_worker``). Default: the CPUs of the cluster's smallest node, so a worker
            on a machine solves as the command line does there (one process per node: one JAX
            runtime, one program in memory). 1: a worker per CPU.
        use_gpu: one GPU per worker (default: when the cluster has GPUs; JAX with GPU support
            must be installed on the workers).
        block_size: frames per block, the unit of work, of progress and of resumption (rounded up
            to a multiple of ``chunk_size``; default ``DEFAULT_BLOCK_CHUNKS`` chunks).
        on_error: ``"skip"`` (default) reports a bad file in ``errors`` and solves the rest;
            ``"raise"`` stops at the first one that comes back.
        compilation_cache: the workers' persistent compilation cache folder (used even where a
            worker's environment has ``WUJI_JAX_NO_CACHE=1``). Default: the driver's folder
            (:func:`wuji_jax.cache.compilation_cache_dir`) if it has one, else each worker's own
            (``$WUJI_JAX_CACHE_DIR`` or the per-user folder), off on a worker whose environment has
            ``WUJI_JAX_NO_CACHE=1`` (a local cluster inherits the driver's environment). False: off.

    Returns:
        the summary dict of :func:`~wuji_jax.batch.solve_dataset` (also written to
        ``<stem>_summary.json``), whose ``devices`` lists the workers that solved blocks, plus
        ``ray``: ``{"address", "nodes", "workers", "cpus_per_worker", "use_gpu", "blocks", "block_size"}``.

    Raises:
        ImportError: Ray (with Ray Data) is not installed.
        ValueError: bad arguments, or (``on_error="raise"``) a bad file.
    """
    ray = require_ray()
    t_start = time.perf_counter()
    spec = JobSpec(source, out, side=side, chunk_size=chunk_size, resume=resume, progress=progress, inspire=inspire,
                   on_error=on_error, config=config, batch_size=batch_size, check_units=check_units, fps=fps,
                   plot=plot, keep_parts=keep_parts, max_frames=max_frames, iterations=iterations)
    block_size = DEFAULT_BLOCK_CHUNKS * spec.chunk_size if block_size is None else int(block_size)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    block_size = -(-block_size // spec.chunk_size) * spec.chunk_size
    if workers is not None and int(workers) < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    spec = dataclasses.replace(spec, max_frames=wio.check_max_frames(max_frames))
    cache = _cache_setting(compilation_cache)
    spec = spec.with_inputs()
    # Ray's workers use the joint map (the CLI refuses --command-map retarget with --ray)
    spec = dataclasses.replace(spec, target=job_target(inspire, "joint_map", None, side)[0])
    spec.out.parent.mkdir(parents=True, exist_ok=True)
    started = connect(ray, address, progress)
    try:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        gpu = gpus > 0 if use_gpu is None else bool(use_gpu)
        if gpu and not gpus:
            raise ValueError("use_gpu=True but the Ray cluster has no GPUs")
        k = 1 if gpu else _cpus_per_worker(ray, cpus_per_worker)
        if workers is None:
            workers = gpus if gpu else max(int(ray.cluster_resources().get("CPU", 1)) // k, 1)
        team = _Workers(gpu=gpu, cpus=k, count=int(workers), batch_size=spec.batch_rows("gpu" if gpu else "cpu", k),
                        quick=spec.quick, block_size=block_size, cache=cache, address=address,
                        crash_once=os.environ.get(CRASH_ONCE_ENV) or None)
        with OutputLock(spec.out):
            return RayExecutor(ray, spec, team).run(t_start)
    finally:
        if started:
            ray.shutdown()


class RayExecutor:
    """The Ray executor: a :class:`~wuji_jax.pipeline.job.JobSpec` (with its inputs) solved in blocks by an
    actor pool on the cluster of ``ray`` (connected), ``team`` saying which workers and how they solve
    (the module docstring says how a run is laid out)."""

    def __init__(self, ray, spec: JobSpec, team: _Workers):
        self.ray, self.spec, self.team = ray, spec, team

    def run(self, t_start: float) -> dict[str, Any]:
        """Solve the job once the caller holds the output's lock (``t_start``: when the call began).
        Returns the summary of :func:`solve_dataset_ray`; raises what it documents."""
        ray, spec, team = self.ray, self.spec, self.team
        platform = "gpu" if team.gpu else "cpu"  # the workers' devices and compile options (their Kernel)
        identity = spec.identity(platform, team.cpus, team.batch_size, kernel_compile_options(platform, team.quick))
        identity.update(runner=_RUNNER, block_size=team.block_size, max_frames=spec.max_frames)
        job = JobRun(spec, identity, "units", t_start, " (or it was not a Ray run)")
        recorded: dict[int, dict] = {int(u["unit"]): u for u in job.recorded}
        blocks = blocks_of(spec.counts, team.block_size, spec.max_frames)

        def part_path(b: dict) -> Path:
            return job.parts_dir / f"chunk_{b['file']:06d}_{b['start']:012d}.npz"

        done: dict[int, dict] = {}
        for u, rec in recorded.items():
            if u >= len(blocks):
                continue
            if rec.get("error") or not rec.get("frames") or part_ok(part_path(blocks[u]), job.digest):
                done[u] = rec
        keep = {part_path(blocks[u]) for u, r in done.items() if r.get("frames") and not r.get("error")}
        for p in job.parts_dir.glob("chunk_*.npz"):
            if p not in keep:  # cut short, or not recorded: solved again
                p.unlink()

        def save_manifest():
            job.save_manifest([done[u] for u in sorted(done)])

        save_manifest()
        failed_files = {r["file"] for r in done.values() if r.get("error")}
        todo = [b for b in blocks if b["unit"] not in done and b["file"] not in failed_files]
        job.resumed = sum(r.get("frames", 0) for r in done.values() if not r.get("error"))
        workers_seen: set[str] = set()
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        try:
            address = ray.get_runtime_context().gcs_address
        except Exception:  # not in every Ray version: the address as given
            address = team.address
        n_workers = min(team.count, len(todo)) if todo else 0
        # a fresh run of known size writes its table while the workers solve, block by block in input order
        # (a block that comes early waits in its part file); a failed block sends it back to the parts
        if todo and not done and spec.total is not None:
            job.stream_table()
        arrived: set[int] = set()
        streamed = 0  # the blocks 0 .. streamed - 1 are in the table

        try:
            if todo:
                for meta in _run_blocks(spec, todo, n_workers, team, job.digest):
                    u = meta["unit"]
                    blob = meta.pop("part")
                    if meta["error"]:
                        if spec.on_error == "raise":
                            raise ValueError(meta["error"])
                        job.drop_stream()
                    elif meta["frames"]:
                        _write_bytes(part_path(blocks[u]), blob)
                        job.solved += meta["frames"]
                        workers_seen.add(meta["worker"])
                    done[u] = {k: meta[k] for k in ("unit", "file", "start", "frames", "side", "notes", "error")}
                    save_manifest()
                    arrived.add(u)
                    while job.stream is not None and streamed in arrived:
                        if done[streamed]["frames"]:
                            job.stream.add(part_arrays(_bytes_io.BytesIO(blob)) if streamed == u
                                           else read_part(part_path(blocks[streamed])))
                        streamed += 1
        except BaseException as e:
            hint = job.kept_parts("block")
            if hint is not None and isinstance(e, ValueError):
                raise ValueError(f"{e} ({hint})") from None
            if hint is not None and isinstance(e, Exception):
                raise RuntimeError(f"the Ray job failed ({type(e).__name__}: {' '.join(str(e).split())[:500]}); "
                                   f"{hint}") from e
            raise

        # a file's error is the first one in reading order: that of its first block that failed
        errors_by_file: dict[int, str] = {}
        for u in sorted(done):
            r = done[u]
            if r.get("error") and r["file"] not in errors_by_file:
                errors_by_file[r["file"]] = r["error"]
        failed = set(errors_by_file)
        job.errors = [errors_by_file[f] for f in sorted(errors_by_file)]
        good = [b for b in blocks if b["file"] not in failed and done[b["unit"]]["frames"] > 0]
        for b in good:  # notes of the good files, in input order (a file's notes come with its first block)
            if b["start"] == 0:
                job.notes.extend(done[b["unit"]].get("notes") or [])
        return job.finish(
            Assembly([part_path(b) for b in good], failed, sum(done[b["unit"]]["frames"] for b in good),
                     len({b["file"] for b in good}), complete=streamed == len(blocks)),
            sorted(workers_seen), team.batch_size,
            **spec.command_fields(),
            ray={"address": address, "nodes": nodes, "workers": n_workers,
                 "cpus_per_worker": None if team.gpu else team.cpus, "use_gpu": team.gpu,
                 "blocks": len(blocks), "block_size": team.block_size})


def _actor_pool(rd, n_workers: int):
    """The workers: ``n_workers`` actors, each solving :data:`BLOCKS_PER_WORKER` blocks at a time where
    Ray Data can run a callable class's calls side by side (its ``ActorPoolStrategy`` takes
    ``max_concurrent_calls_per_actor`` and ``enable_true_multi_threading``, as Ray 2.60's does), else
    one. Two blocks on one worker queue their chunks on the same devices: the next block's reading and
    first chunks fill the gap where a block ends (the last chunk's wait, its part's packing, Ray's
    hand-over), which left the worker's devices idle between blocks. A block's frames are solved
    exactly as alone (a frame's result does not depend on its neighbours)."""
    import inspect

    params = inspect.signature(rd.ActorPoolStrategy).parameters
    if BLOCKS_PER_WORKER > 1 and {"max_concurrent_calls_per_actor", "enable_true_multi_threading"} <= set(params):
        return rd.ActorPoolStrategy(size=n_workers, max_tasks_in_flight_per_actor=BLOCKS_PER_WORKER,
                                    max_concurrent_calls_per_actor=BLOCKS_PER_WORKER,
                                    enable_true_multi_threading=True)
    # one block at a time per worker: a queue in front of a busy worker would only leave another idle
    return rd.ActorPoolStrategy(size=n_workers, max_tasks_in_flight_per_actor=1)


def _run_blocks(spec: JobSpec, todo: list[dict], n_workers: int, team: _Workers, digest: str):
    """Yield each block's meta (with its ``part`` bytes) as ``n_workers`` workers finish it, in any order."""
    import ray.data as rd

    files, progress, gpu = spec.files, spec.progress, team.gpu
    rows = [{"unit": b["unit"], "file": b["file"], "path": str(Path(files[b["file"]]).absolute()),
             "name": str(files[b["file"]]), "start": b["start"], "stop": b["stop"]} for b in todo]
    import logging

    ctx = rd.DataContext.get_current()
    was = ctx.enable_progress_bars, getattr(ctx, "print_on_execution_start", None)
    ctx.enable_progress_bars = bool(progress)
    # quiet: Ray Data's start and end lines and its "Progress bars disabled" hint go too (warnings stay)
    loggers = {name: logging.getLogger(name) for name in ("ray.data._internal.execution.streaming_executor",
                                                          "ray.data._internal.progress")}
    levels = {name: lg.level for name, lg in loggers.items()}
    if not progress:
        if was[1] is not None:
            ctx.print_on_execution_start = False
        loggers["ray.data._internal.execution.streaming_executor"].setLevel(logging.WARNING)
        loggers["ray.data._internal.progress"].setLevel(logging.ERROR)
    try:
        ds = rd.from_items(rows, override_num_blocks=len(rows))
        ds = ds.map_batches(
            _BlockSolver, batch_size=1, batch_format="pyarrow", compute=_actor_pool(rd, n_workers),
            num_cpus=1 if gpu else team.cpus, num_gpus=1 if gpu else None,
            # the workers' spec holds the expanded files, not the caller's source (which may not pickle)
            fn_constructor_kwargs={"spec": dataclasses.replace(spec, source=spec.files), "workers": team,
                                   "digest": digest})
        for row in ds.iter_rows():
            meta = json.loads(row["meta"])
            meta["part"] = row["part"]
            yield meta
    finally:
        ctx.enable_progress_bars = was[0]
        if was[1] is not None:
            ctx.print_on_execution_start = was[1]
        for name, lg in loggers.items():
            lg.setLevel(levels[name])
