"""Solve whole datasets: landmark files in, one table of joint angles out — resumable, sharded.

:func:`solve_dataset` streams landmarks with :func:`wuji_jax.io.iter_chunks`, so memory stays bounded
by the chunk size whatever the number of frames, and calls the jitted solver kernel
(:func:`wuji_jax.solver.solve`'s ``_solve_flat``) on fixed-shape batches, so it compiles once::

    from wuji_jax.batch import solve_dataset
    summary = solve_dataset("takes/*.npy", "out/angles.parquet", side="auto")

How a run is laid out
---------------------
* The files, in order, form one stream of frames cut into chunks of ``chunk_size`` frames; a chunk
  may hold the end of one file and the start of the next (no padding per file). With
  ``side="auto"`` each file's side is decided from its first chunk, and a file whose side differs
  from the chunk it would continue starts a new chunk (a chunk is solved with one hand model).
* Each chunk is solved in kernel batches of ``batch_size`` rows (a multiple of the device count).
  The last batch is padded with NaN rows, which the solver flags (too few landmarks) and which are
  dropped. Each device solves its rows of a batch in chunks of ``wuji_jax.solver.CHUNK_FRAMES``
  frames, as :func:`wuji_jax.solve` does. ``batch_size`` defaults to the whole chunk, except for a
  small job on CPU (at most ``QUICK_JOB_FRAMES`` frames): one solver chunk per device (256 rows on 2
  CPU devices), a kernel without a loop over chunks, which compiles sooner. On a big job the loop costs less than the kernel calls it saves (``runner.kernel.default_batch``).
* Every finished chunk goes to ``<out>.parts/chunk_<start>.npz`` (written to a temporary name,
  then renamed, so a part is whole or absent). ``<out>.parts/manifest.json`` records the input's
  identity (paths, sizes, modification times, chunk size, side, solver configuration, dtype) and
  where each finished file lies in the stream. A run killed at any point and started again with the
  same arguments skips the finished chunks (and does not even read files whose chunks are all
  done); if anything in the identity differs, it starts over. The output is the same, byte for
  byte for Parquet and CSV, as that of an uninterrupted run.
* The table ``out`` is written in input order (``.parquet`` by row groups and ``.csv`` by rows, both
  in :func:`wuji_jax.io.write_results`' layout, under a temporary name until it is complete; ``.npz``
  is written whole by :func:`~wuji_jax.io.write_results`, so it needs memory for the whole table). A
  fresh run whose inputs' frame counts are known (npy, npz, parquet, HDF5) writes it while it solves,
  chunk by chunk, beside the parts; a resumed run, inputs of unknown length, or a file that failed
  after some of its rows went in, concatenate the parts at the end instead. Then a plot
  ``<stem>_plot.png`` and a summary ``<stem>_summary.json`` are written next to it and the parts
  are deleted (``keep_parts=True`` keeps them).
* Throughput and memory: ``benchmarks/bench_batch.py`` (``docs/performance.md``).

Columns of the output (one row per input frame, in input order)
---------------------------------------------------------------
``frame`` (index within its file), ``timestamp`` (s; NaN where the file has none), ``source``
(the file), ``side``; the 20 joint angles named by joint (``thumb_cmc_flex`` … ``pinky_dip``,
radians, seed ID order) and ``thumb_cmc_rot`` (the coupled thumb rotation, radians); the wrist
pose, model wrist frame → input frame: ``wrist_qw, wrist_qx, wrist_qy, wrist_qz`` (unit
quaternion, w ≥ 0) and ``wrist_x, wrist_y, wrist_z`` (metres); ``scale`` (hand size relative to
the model); ``residual_mm`` (RMS landmark distance); ``valid``, ``converged``, ``fit_flags``
(bit set of ``wuji_jax.solver.FLAG_*``; called ``flags`` in 0.1, which pandas' ``DataFrame.flags``
hides); and, with ``inspire=True``, the six Inspire channels
``inspire_little`` … ``inspire_thumb_rotation`` (opening fraction, 1 = open).

``valid`` says the angles can be used (enough landmarks, a finite fit, a plausible scale);
``converged`` says more: Levenberg–Marquardt stopped because its predicted decrease fell below
``tolerance``·cost, not because it reached ``iterations``. A valid frame that did not converge is
still a good fit where its residual is low (on the bundled recording about 3/4 of the frames
converge within the default 5 iterations, and the residual p95 is under 10 mm).

Bad frames (NaN, no hand, too few landmarks, implausible fits) are solved anyway, flagged, and kept.
A bad file (unreadable, wrong shape, wrong units) raises a one-line ``ValueError`` naming it; with
``on_error="skip"`` the message goes to the summary's ``errors`` and the other files go on (rows of a
file that failed part-way are dropped from the output).

Several devices
---------------
Each kernel batch is placed on a 1-D :class:`jax.sharding.Mesh` over ``devices`` (default
``jax.local_devices()``) with ``NamedSharding(mesh, PartitionSpec("frames"))``; the jitted solver
then runs SPMD, each device solving its slice of the frames (the hand model and settings are
replicated). Results equal the one-device results to float rounding.

Several hosts: start one process per host, call :func:`jax.distributed.initialize` first, and let
each process solve its own share of the files into its own output (the frames are independent, so
no cross-host communication is needed)::

    import glob, jax
    from wuji_jax.batch import solve_dataset
    jax.distributed.initialize()          # coordinator address etc. from the environment / args
    files = sorted(glob.glob("/data/takes/*.parquet"))
    mine = files[jax.process_index()::jax.process_count()]
    solve_dataset(mine, f"/out/angles_{jax.process_index():03d}.parquet", devices=jax.local_devices())

then concatenate the per-process tables (``pandas.concat``); each process resumes independently.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..data import io as wio
from .interrupts import DeferredInterrupt
from .job import DEFAULT_CHUNK_SIZE, Assembly, JobRun, JobSpec, align, chunks_of, job_target
from .kernel import QUICK_JOB_FRAMES, Kernel, default_batch, quick_job  # noqa: F401 (re-exported)
from .reading import FileError, Prefetch, read_file, side_of_file
from .reading import count_frames, most_frames  # noqa: F401 (re-exported: wuji_jax.batch.count_frames, ...)
from .store import OutputLock, part_ok, write_part
from .table import import_writers

__all__ = ["solve_dataset", "sample_landmarks_path", "output_columns", "DEFAULT_CHUNK_SIZE", "QUICK_JOB_FRAMES"]

SAMPLE_NAME = "human_hand_video_landmarks.npz"


def sample_landmarks_path() -> Path:
    """The bundled sample recording (621 frames of a right hand, MediaPipe world landmarks, metres)."""
    from ..hand.model import asset_path

    return asset_path("samples", SAMPLE_NAME)


def output_columns(hand=None, inspire: bool = True, target=None) -> list[str]:
    """The output table's column names, in order (see the module docstring for units); with ``inspire``
    the command columns ``<name>_<channel>`` of ``target`` (a :class:`~wuji_jax.retarget.target.Target`;
    default the Inspire hand's)."""
    from ..hand.model import load_hand
    from ..retarget.target import choose_target

    hand = hand or load_hand("right")
    cols = ["frame", "timestamp", "source", "side", *hand.joint_names, *hand.mimic_names,
            "wrist_qw", "wrist_qx", "wrist_qy", "wrist_qz", "wrist_x", "wrist_y", "wrist_z",
            "scale", "residual_mm", "valid", "converged", "fit_flags"]
    if inspire:
        target = target or choose_target("inspire", "joint_map")[0]
        cols += [f"{target.name}_{c}" for c in target.channels]
    return cols


# --------------------------------------------------------------------------------------- progress


class _Progress:
    """``frames done/total, %, frames/s, ETA`` on stderr; in place on a terminal, else every ~10 s.

    Until the first chunk is solved the line says the solver is being compiled (tens of seconds the
    first time on a machine, a second or two from the compilation cache); the rate counts from the
    first solved chunk on, so it is the solving rate, not diluted by the compilation."""

    def __init__(self, total: int | None, enabled: bool, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.last = -math.inf if self.tty else self.t0  # logs: a first line after 10 s, not at once
        self.done = 0
        self.solved = 0  # frames solved by this run (resumed ones are not counted in the rate)
        self.closed = False
        self.shown: tuple | None = None
        self.first: tuple | None = None  # (time, solved) when the first chunk was solved

    def compiling(self):
        """Say that the solver is being compiled (before the first chunk's results)."""
        if self.enabled:
            line = ("compiling the solver (first use on this machine: ~5-20 s; later runs load it from "
                    "the cache)...")
            self.stream.write(("\r" + line.ljust(78)) if self.tty else line + "\n")
            self.stream.flush()

    def update(self, done: int, solved: int, force: bool = False):
        self.done, self.solved = done, solved
        now = time.perf_counter()
        if not self.enabled or (not force and now - self.last < (0.25 if self.tty else 10.0)):
            return
        if force and self.shown == (done, solved):
            return
        self.last, self.shown = now, (done, solved)
        el = now - self.t0
        if self.first is None and solved:
            self.first = (now, solved)
        if self.first is not None and now > self.first[0] and solved > self.first[1]:
            rate = (solved - self.first[1]) / (now - self.first[0])
        else:
            rate = solved / el if el > 0 else 0.0
        parts = [f"solve {done:,}" + (f"/{self.total:,} frames {100 * done / max(self.total, 1):5.1f}%"
                                      if self.total else " frames")]
        parts.append(f"{rate:,.0f} frames/s")
        if self.total and rate > 0 and done < self.total:
            parts.append(f"ETA {_hms((self.total - done) / rate)}")
        parts.append(f"elapsed {_hms(el)}")
        line = "  ".join(parts)
        if self.tty:
            self.stream.write("\r" + line.ljust(78))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self, ok: bool = True):
        """The final line (``ok``), or just end the line in place when stopping on an error."""
        if self.enabled and not self.closed:
            self.closed = True
            if ok:
                self.update(self.done, self.solved, force=True)
            if self.tty and self.shown is not None:
                self.stream.write("\n")
                self.stream.flush()


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# ------------------------------------------------------------------------------------ the chunks


@dataclasses.dataclass
class _Chunk:
    """Frames gathered for the part that starts at stream position ``start``."""

    start: int
    side: str
    source: list = dataclasses.field(default_factory=list)  # (m,) file index arrays
    frame: list = dataclasses.field(default_factory=list)  # (m,) frame-in-file arrays
    time: list = dataclasses.field(default_factory=list)
    world: list = dataclasses.field(default_factory=list)
    n: int = 0

    def add(self, src: int, frame0: int, world: np.ndarray, t: np.ndarray):
        m = world.shape[0]
        self.source.append(np.full(m, src, np.int32))
        self.frame.append(frame0 + np.arange(m, dtype=np.int64))
        self.time.append(np.asarray(t, np.float64))
        self.world.append(world)
        self.n += m


# ----------------------------------------------------------------------------------- the dataset


def solve_dataset(
    source: Any,
    out: str | os.PathLike,
    side: str = "right",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    resume: bool = True,
    progress: bool = True,
    devices: Sequence[Any] | int | None = None,
    inspire: bool = True,
    iterations: int | None = None,
    *,
    on_error: str = "raise",
    config=None,
    batch_size: int | None = None,
    check_units: bool = True,
    fps: float | None = None,
    plot: bool = True,
    keep_parts: bool = False,
    max_frames: int | None = wio.MAX_FRAMES,
    command_map: str = "joint_map",
    inspire_urdf: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Solve every frame of one or several landmark files into one table (see the module docstring).

    Args:
        source: a path, glob, folder or a list of these (any format :func:`wuji_jax.io.iter_chunks`
            reads; landmarks ``(N, 21, 3)`` in metres).
        out: the table to write: ``.parquet``, ``.npz`` or ``.csv``. Also written: ``<stem>_plot.png``
            and ``<stem>_summary.json`` next to it; ``<out>.parts/`` while running.
        side: ``"right"``, ``"left"`` or ``"auto"`` (decided per file from its first chunk).
        chunk_size: frames per part (the unit of resumption and of memory use).
        resume: reuse finished parts of an interrupted run with the same inputs and settings;
            False starts over.
        progress: a progress line on stderr.
        devices: the devices to shard each batch over (default ``jax.local_devices()``), or a count
            (the first that many local devices).
        inspire: add the six Inspire channels.
        iterations: LM iterations (default: :class:`~wuji_jax.solver.SolverConfig`'s).
        on_error: ``"raise"`` stops at the first bad file; ``"skip"`` records it and goes on.
        config: a :class:`~wuji_jax.solver.SolverConfig` (``iterations`` overrides its count).
        batch_size: rows per kernel call (rounded up to a multiple of the device count); default
            the whole chunk, or ``CHUNK_FRAMES`` (128) per device for a job of at most
            :data:`QUICK_JOB_FRAMES` frames on CPU.
        check_units: reject a file whose first frames do not look like metres.
        fps: frame rate for files without timestamps (else their timestamps are NaN).
        plot: draw the angles and residual over time (skipped with a note without matplotlib).
        keep_parts: keep ``<out>.parts/`` after writing ``out``.
        command_map: how the Inspire channels are made from the angles: ``"joint_map"``
            (:func:`wuji_jax.inspire.to_inspire`, the default), ``"retarget"``
            (:func:`wuji_jax.inspire.retarget`, computed in the solver's program; an
            :class:`~wuji_jax.inspire.InspireModelNotFound` without a model), or ``"auto"``: the retarget
            where an Inspire model is found, else the joint map (the summary's ``command_map_note`` says
            why).
        inspire_urdf: the Inspire URDF for the retarget (default: the copies inside an installed
            ``dexi-rs``, one per side).
        max_frames: the most frames one file may hold (:data:`wuji_jax.io.MAX_FRAMES`, ten million,
            by default; ``None``: no limit): a file declaring more is that file's error, so that a
            tiny hostile file cannot start unbounded work.

    Returns:
        a summary dict (written as strict JSON: ``null`` for a missing number): ``frames`` (rows
        written), ``flagged`` (nonzero flags), ``flag_counts`` (rows per flag name), ``valid``,
        ``residual_mm_mean`` / ``residual_mm_median`` (over valid frames), ``frames_per_second``
        (frames solved by this call / wall time, compilation included), ``wall_seconds``,
        ``solved_frames``, ``resumed_frames``, ``files``, ``errors``, ``notes``, ``devices``,
        ``output``, ``plot``, ``summary``; ``command_map`` (``"retarget"``, ``"joint_map"``, or None
        without the Inspire channels), ``command_map_note`` and ``inspire_urdf`` (``{side: path}`` of the
        retarget's models, else None).

    Raises:
        ValueError: bad arguments, or (``on_error="raise"``) a bad file — one line naming it.
        ImportError: Parquet output without pyarrow.
    """
    import jax

    t_start = time.perf_counter()
    spec = JobSpec(source, out, side=side, chunk_size=chunk_size, resume=resume, progress=progress, inspire=inspire,
                   on_error=on_error, config=config, batch_size=batch_size, check_units=check_units, fps=fps,
                   plot=plot, keep_parts=keep_parts, max_frames=max_frames, iterations=iterations)
    devices = _local_devices(devices, jax)
    spec = spec.with_inputs()
    batch_size = spec.batch_rows(devices[0].platform, len(devices))
    target, map_note = job_target(inspire, command_map, inspire_urdf, side)
    spec = dataclasses.replace(spec, target=target)
    spec.out.parent.mkdir(parents=True, exist_ok=True)
    with OutputLock(spec.out), DeferredInterrupt() as stop:
        return LocalExecutor(spec, devices, batch_size, map_note).run(stop, t_start)


def _local_devices(devices, jax) -> list:
    """``devices`` as a non-empty list: all local devices (None), the first ``devices`` of them (an int)
    or the devices given; ``ValueError`` otherwise."""
    if devices is None:
        devices = jax.local_devices()
    elif isinstance(devices, int) and not isinstance(devices, bool):
        local = jax.local_devices()
        if not 1 <= devices <= len(local):
            raise ValueError(f"devices={devices}: this process has {len(local)} local device(s)")
        devices = local[:devices]
    devices = list(devices)
    if not devices:
        raise ValueError("devices is empty")
    return devices


class LocalExecutor:
    """The local executor: a :class:`~wuji_jax.pipeline.job.JobSpec` (with its inputs and target) solved on
    this process's ``devices`` as one stream of chunks (the module docstring says how), in kernel batches
    of ``batch_size`` rows (a multiple of the device count); ``map_note``: why ``"auto"`` chose the
    target's command map."""

    def __init__(self, spec: JobSpec, devices: Sequence[Any], batch_size: int, map_note: str | None = None):
        self.spec, self.devices, self.batch_size = spec, list(devices), int(batch_size)
        self.map_note = map_note

    def run(self, stop: DeferredInterrupt, t_start: float) -> dict[str, Any]:
        """Solve the job once the caller holds the output's lock (``stop``: Ctrl-C, raised between
        chunks, never while the solver compiles; ``t_start``: when the call began). Returns the
        summary of :func:`solve_dataset`; raises what it documents."""
        spec = self.spec
        out, commands, total = spec.out, spec.commands is not None, spec.total
        # matplotlib and pyarrow load while the solver compiles and the frames are read, not after
        parquet = out.suffix.lower() in (".parquet", ".pq")
        imports = threading.Thread(target=import_writers, args=(spec.plot, parquet), name="wuji_jax-import")
        kernel = Kernel(spec.config, self.devices, self.batch_size, spec.dtype, quick=spec.quick,
                        target=spec.commands)
        if total and not (spec.resume and spec.parts_dir.exists()):
            # a fresh run whose inputs' headers promise frames: the program is compiled (or read from the
            # cache) while they are hashed and read
            kernel.preload(commands, imports.start if (spec.plot or parquet) else None,
                           "left" if spec.side == "left" else "right")
        elif spec.plot or parquet:
            imports.start()
        try:
            return self._solve(stop, t_start, kernel)
        finally:  # the answer, a summary or an error, comes after every thread of the run has ended
            kernel.settle()
            if imports.ident is not None:
                imports.join()

    def _solve(self, stop: DeferredInterrupt, t_start: float, kernel: Kernel) -> dict[str, Any]:
        spec, devices = self.spec, self.devices
        chunk_size, commands, total = spec.chunk_size, spec.commands is not None, spec.total
        job = JobRun(spec, spec.identity(devices[0].platform, len(devices), self.batch_size, kernel.options),
                     "files", t_start)
        entries: dict[int, dict] = {int(e["index"]): e for e in job.recorded}
        done = set()
        for part in sorted(job.parts_dir.glob("chunk_*.npz")):
            if part_ok(part, job.digest):
                done.add(int(part.stem.split("_")[1]))
            else:  # cut short (a full disk, a copy) or from another run: solved again
                job.notes.append(f"{part}: damaged or not from this run's inputs; solved again")
                part.unlink()

        def save_manifest():
            job.save_manifest([entries[i] for i in sorted(entries)])

        save_manifest()

        def part_path(start: int) -> Path:
            return job.parts_dir / f"chunk_{start:012d}.npz"

        # a fresh run of known size writes its table while it solves (no assembly from the part files at
        # the end, unless a failed file's rows went in: then the parts are assembled without them)
        if not (done or entries or total is None):
            job.stream_table()
        stream = job.stream

        def save(path: Path, arrays: dict[str, np.ndarray]):
            write_part(path, arrays)
            if stream is not None:
                stream.add(arrays)

        bar = _Progress(total, spec.progress)
        stats = {"done": 0, "dispatched": 0}
        pending: list = []  # at most one dispatched chunk whose results are not written yet
        writer = _Background(ahead=2)  # part files are written while the next chunks are solved

        def finish_pending():
            while pending:
                chunk, outs = pending.pop(0)
                res = kernel.collect(outs, chunk.n)
                arrays = {"source": np.concatenate(chunk.source), "frame": np.concatenate(chunk.frame),
                          "timestamp": np.concatenate(chunk.time), "side": np.asarray(chunk.side),
                          "run": np.asarray(job.digest), **res}
                writer.submit(save, part_path(chunk.start), arrays)
                done.add(chunk.start)
                stats["done"] += chunk.n
                job.solved += chunk.n
                bar.update(stats["done"], job.solved)

        def flush(chunk: _Chunk | None):
            if chunk is None or chunk.n == 0:
                return
            world = np.concatenate(chunk.world)
            if not stats["dispatched"] and kernel.first_use(chunk.side):
                bar.compiling()
            stats["dispatched"] += 1
            outs = kernel.dispatch(chunk.side, world, commands)  # asynchronous: solves while we write the previous one
            chunk.world = []
            finish_pending()
            pending.append((chunk, outs))

        def resumed(frames: int):
            stats["done"] += frames
            job.resumed += frames

        pos = 0  # position in the stream (chunk k covers [k * chunk_size, (k + 1) * chunk_size))
        cur: _Chunk | None = None
        cur_side: str | None = None  # side of the chunk containing pos
        try:
            for fi, src in enumerate(spec.files):
                stop.check()
                name = str(src)
                e = entries.get(fi)
                if e is not None and e["start"] == align(pos, cur_side, e["side"], chunk_size) and all(
                        k in done for k in chunks_of(e["start"], e["end"], chunk_size)):
                    # finished by an earlier run: skip without reading
                    pos, cur_side = e["end"], e["side"]
                    if e.get("error"):
                        job.errors.append(e["error"])
                    else:
                        resumed(e["frames"])
                        job.notes.extend(e.get("notes", []))
                    bar.update(stats["done"], job.solved)
                    continue
                file_notes: list[str] = []
                file_side = None
                start = pos
                frames = 0
                try:
                    checked = not spec.check_units
                    with Prefetch(read_file(src, name, chunk_size, spec.fps, spec.max_frames)) as chunks:
                        for local, world, t in chunks:
                            stop.check()
                            if file_side is None:
                                file_side = side_of_file(spec.side, world, name, file_notes)
                                pos = align(pos, cur_side, file_side, chunk_size)
                                if cur is not None and cur.start != pos // chunk_size * chunk_size:
                                    flush(cur)  # a side change moved us to the next chunk
                                    cur = None
                                start, cur_side = pos, file_side
                            if not checked and np.isfinite(world).all(axis=(1, 2)).any():
                                from ..hand.landmarks import unit_problem

                                problem = unit_problem(world)
                                if problem:
                                    raise FileError(f"{name}: {problem} (if they are metres after all: --no-unit-check "
                                                    "at the command line, check_units=False in Python)")
                                checked = True
                            i = 0
                            m = world.shape[0]
                            while i < m:
                                k0 = pos // chunk_size * chunk_size
                                take = min(k0 + chunk_size - pos, m - i)
                                if k0 in done:
                                    resumed(take)
                                else:
                                    if cur is None or cur.start != k0:
                                        flush(cur)
                                        cur = _Chunk(k0, file_side)
                                    cur.add(fi, local + i, world[i:i + take], t[i:i + take])
                                pos += take
                                i += take
                                frames += take
                                if pos % chunk_size == 0 and cur is not None and cur.start == k0:
                                    flush(cur)
                                    cur = None
                            bar.update(stats["done"], job.solved)
                except FileError as err:
                    msg = str(err)
                    if spec.on_error == "raise":
                        raise ValueError(msg) from None
                    job.errors.append(msg)
                    entries[fi] = {"index": fi, "path": name, "start": start, "end": pos, "frames": frames,
                                   "side": cur_side, "error": msg}
                    save_manifest()
                    continue
                job.notes.extend(file_notes)
                entries[fi] = {"index": fi, "path": name, "start": start, "end": pos, "frames": frames,
                               "side": file_side, "error": None, "notes": file_notes}
                save_manifest()
            flush(cur)
            finish_pending()
            writer.wait()
            stop.check()
        except BaseException as e:
            writer.abandon()
            bar.close(ok=False)
            hint = job.kept_parts("chunk")
            if hint is not None and isinstance(e, (ValueError, KeyboardInterrupt)):
                what = "interrupted" if isinstance(e, KeyboardInterrupt) else str(e)
                raise type(e)(f"{what} ({hint})") from None
            raise
        bar.close()

        failed = {i for i, e in entries.items() if e.get("error")}
        good = [e for i, e in sorted(entries.items()) if i not in failed and e["frames"] > 0]
        needed = sorted({k for e in entries.values() for k in chunks_of(e["start"], e["end"], chunk_size)})
        missing = [k for k in needed if k not in done]
        summary = job.finish(
            Assembly([part_path(k) for k in needed], failed, sum(e["frames"] for e in good), len(good),
                     missing=f"chunk_{missing[0]:012d}.npz" if missing else None),
            [str(d) for d in devices], self.batch_size, **spec.command_fields(self.map_note))
        return summary


class _Background:
    """One worker thread for writes, at most ``ahead`` of them outstanding (the caller waits for the
    oldest beyond that, so memory stays bounded); a failed write is raised at the next call."""

    def __init__(self, ahead: int = 2):
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="wuji_jax-write")
        self._futures: list = []
        self._ahead = ahead

    def submit(self, fn, *args):
        self._futures = [f for f in self._futures if not (f.done() and f.result() is None)]
        while len(self._futures) >= self._ahead:
            self._futures.pop(0).result()
        self._futures.append(self._pool.submit(fn, *args))

    def wait(self):
        for f in self._futures:
            f.result()
        self._futures = []
        self._pool.shutdown()

    def abandon(self):
        """Stop after the write in progress (the run failed)."""
        for f in self._futures:
            f.cancel()
        self._pool.shutdown(wait=True)
