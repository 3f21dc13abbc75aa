"""The dataset job, whichever executor runs it: its settings (:class:`JobSpec`), its identity on disk and
the run's store (:class:`JobRun`: ``<out>.parts/`` and its manifest, resumed or started over), the plan's
geometry (a stream of chunks, :func:`align`/:func:`chunks_of`; blocks of files, :func:`blocks_of`) and the
assembly of the final outputs (:meth:`JobRun.finish`: the table, ``<stem>_plot.png``,
``<stem>_summary.json``).

Two executors run a job: :func:`wuji_jax.pipeline.batch.solve_dataset` on this machine's devices, and
:func:`wuji_jax.pipeline.ray_cluster.solve_dataset_ray` on a Ray cluster's workers. Each decides only
what is its own (devices and batch size, or workers and blocks), solves the parts, and hands them to
:meth:`JobRun.finish`, so that both write the same table, manifest layout and summary fields.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..data import io as wio
from ..data.outputs import strict_json
from .kernel import default_batch, quick_job
from .reading import count_frames, most_frames, total_frames
from .store import (MANIFEST_VERSION, atomic_json, check_outputs, open_parts, out_path, remove_stale_temporaries,
                    run_identity)
from .table import Assembler, finish_table, plot_angles

__all__ = ["DEFAULT_CHUNK_SIZE", "JobSpec", "job_target", "JobRun", "Assembly", "identity_digest", "align", "chunks_of",
           "blocks_of"]

#: frames per part (the unit of resumption and of memory use) unless the caller says otherwise
DEFAULT_CHUNK_SIZE = 4096


# ------------------------------------------------------------------------------------------ the spec


def job_target(inspire: bool, method: str, model, side: str) -> tuple[Any, str | None]:
    """The robot hand whose commands a job's table holds (the Inspire hand, by ``method`` with ``model``
    its URDF: :func:`wuji_jax.retarget.target.choose_target` for the job's ``side``, both hands for
    ``"auto"``; ``inspire`` False: ``method`` is only checked), and the note on the choice."""
    from ..retarget.target import choose_target

    sides = ("right", "left") if side == "auto" else (side,)
    return choose_target("inspire", method, model, sides if inspire else ())


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """The settings of one dataset job that every executor takes, checked and normalised on creation.

    Fields mean what :func:`wuji_jax.pipeline.batch.solve_dataset`'s arguments of the same names mean.
    ``iterations`` (init only) overrides ``config``'s iteration count; ``config`` defaults to
    :class:`~wuji_jax.ik.SolverConfig` ``()``, ``dtype`` to float64 where ``jax_enable_x64`` is on, else
    float32. ``target`` (a :class:`~wuji_jax.retarget.target.Target`) makes the command columns where
    ``inspire`` is set; without one there are none. ``files`` and ``counts`` (the expanded inputs and
    their frame counts as their headers give them, None where unknown) are empty until :meth:`with_inputs`.

    Raises:
        ValueError: a bad ``side``, ``on_error``, ``fps``, ``chunk_size`` or ``iterations`` (checked in
            that order), or an ``out`` that is a folder or has an unsupported extension.
        ImportError: a Parquet ``out`` without pyarrow.
    """

    source: Any
    out: Path
    side: str = "right"
    chunk_size: int = DEFAULT_CHUNK_SIZE
    resume: bool = True
    progress: bool = True
    inspire: bool = True
    on_error: str = "raise"
    config: Any = None
    batch_size: int | None = None  # as asked; each executor rounds it to its devices
    check_units: bool = True
    fps: float | None = None
    plot: bool = True
    keep_parts: bool = False
    max_frames: int | None = wio.MAX_FRAMES
    dtype: Any = None
    target: Any = None
    files: tuple = ()
    counts: tuple = ()
    iterations: dataclasses.InitVar[int | None] = None

    def __post_init__(self, iterations):
        from ..ik import SolverConfig

        if self.side not in ("right", "left", "auto"):
            raise ValueError(f"side must be 'right', 'left' or 'auto', got {self.side!r}")
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        fps = wio.check_fps(self.fps)
        chunk_size = int(self.chunk_size)
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        config = self.config or SolverConfig()
        if iterations is not None:
            if int(iterations) < 1:
                raise ValueError(f"iterations must be >= 1, got {iterations}")
            config = dataclasses.replace(config, iterations=int(iterations))
        dtype = self.dtype
        if dtype is None:
            import jax

            dtype = np.float64 if jax.config.jax_enable_x64 else np.float32
        for name, value in (("fps", fps), ("chunk_size", chunk_size), ("config", config), ("dtype", dtype),
                            ("out", out_path(self.out))):
            object.__setattr__(self, name, value)

    def with_inputs(self) -> JobSpec:
        """This spec with its ``files`` (``source`` expanded) and their frame ``counts`` (headers read
        once). Raises ``ValueError`` where no input is found or an output would overwrite an input
        (:func:`wuji_jax.pipeline.store.check_outputs`)."""
        files = wio.expand_sources(self.source)
        check_outputs(self.source, files, self.out)
        counts = [count_frames(f) for f in files]
        return dataclasses.replace(self, files=tuple(files), counts=tuple(counts))

    @property
    def commands(self) -> Any:
        """The target whose commands this job computes (``inspire`` and a ``target``), else None."""
        return self.target if self.inspire else None

    @property
    def command_columns(self) -> tuple[str, ...]:
        """The output table's command columns, ``<target>_<channel>`` (none without :attr:`commands`)."""
        t = self.commands
        return () if t is None else tuple(f"{t.name}_{c}" for c in t.channels)

    def command_fields(self, note: str | None = None) -> dict[str, Any]:
        """The summary's fields on the commands: ``command_map`` and the target's others
        (:meth:`~wuji_jax.retarget.target.Target.describe`), all None without :attr:`commands`, and
        ``command_map_note`` (why ``"auto"`` chose the map)."""
        fields = {} if self.target is None else self.target.describe()
        if self.commands is None:
            fields = dict.fromkeys(fields, None)
        return {"command_map": None, **fields, "command_map_note": note}

    @property
    def total(self) -> int | None:
        """All inputs' frames as their headers give them, or None where one is unknown."""
        return total_frames(list(self.counts))

    @property
    def most(self) -> int | None:
        """An upper bound on the inputs' frames (:func:`~wuji_jax.pipeline.reading.most_frames`)."""
        return most_frames(list(self.files), list(self.counts))

    @property
    def quick(self) -> bool:
        """A small job, compiled with quick options (:func:`~wuji_jax.pipeline.kernel.quick_job`)."""
        return quick_job(self.most)

    def batch_rows(self, platform: str, n_devices: int) -> int:
        """Rows per kernel call on ``n_devices`` devices of ``platform``: the spec's ``batch_size`` (else
        :func:`~wuji_jax.pipeline.kernel.default_batch`'s for these inputs), rounded up to a multiple of
        ``n_devices``."""
        batch_size = self.batch_size
        if batch_size is None:
            batch_size = default_batch(self.chunk_size, platform, n_devices, self.most)
        return -(-max(int(batch_size), 1) // n_devices) * n_devices

    @property
    def parts_dir(self) -> Path:
        """``<out>.parts/``: the finished parts and the manifest while the job runs."""
        return Path(str(self.out) + ".parts")

    def identity(self, platform: str, n_devices: int, batch_size: int, compile_options: dict | None) -> dict:
        """:func:`~wuji_jax.pipeline.store.run_identity` of this job solved on ``n_devices`` devices of
        ``platform`` in batches of ``batch_size`` with ``compile_options``: what a resumed run must
        share with the interrupted one."""
        return run_identity(list(self.files), self.chunk_size, self.side, self.config, self.inspire,
                            self.check_units, self.fps, self.dtype, [_Platform(platform)] * n_devices, batch_size,
                            compile_options, self.target)


@dataclasses.dataclass(frozen=True)
class _Platform:
    """What :func:`~wuji_jax.pipeline.store.run_identity` reads of a device: its platform."""

    platform: str


def identity_digest(identity: dict) -> str:
    """16 hex digits of the SHA-256 of ``identity``'s canonical JSON: written into every part file, so
    that a part of another run is never used."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------ the plan


def chunks_of(a: int, b: int, chunk_size: int) -> range:
    """The starts of the chunks (stream positions, multiples of ``chunk_size``) that frames ``[a, b)`` of
    the stream touch; empty where ``b <= a``."""
    return range(a // chunk_size * chunk_size, b, chunk_size) if b > a else range(0)


def align(pos: int, cur_side: str | None, side: str, chunk_size: int) -> int:
    """Where a file of ``side`` starts in the stream: at ``pos``, or at the next chunk where the chunk
    holding ``pos`` (of ``cur_side``) is of the other side (a chunk is solved with one hand model)."""
    if cur_side is None or cur_side == side or pos % chunk_size == 0:
        return pos
    return -(-pos // chunk_size) * chunk_size


def blocks_of(counts: Sequence[int | None], block_size: int, max_frames: int | None) -> list[dict]:
    """The blocks of files with ``counts`` frames (None: unknown), in input order, each a dict of
    ``unit`` (its index), ``file``, ``start`` and ``stop`` (None: to the end of the file). A file of
    unknown length, of at most ``block_size`` frames or of more than ``max_frames`` (refused by the
    reader anyway) is one block."""
    out = []
    limit = wio.MAX_FRAMES if max_frames is None else max_frames
    for fi, n in enumerate(counts):
        if n is None or n <= block_size or n > limit:
            out.append({"file": fi, "start": 0, "stop": None})
            continue
        for s in range(0, n, block_size):
            out.append({"file": fi, "start": s, "stop": s + block_size if s + block_size < n else None})
    for u, b in enumerate(out):
        b["unit"] = u
    return out


# ------------------------------------------------------------------------------------------ the run


@dataclasses.dataclass(frozen=True)
class Assembly:
    """What an executor hands to :meth:`JobRun.finish` once every part is solved.

    Attributes:
        parts: the part files to assemble, in input order.
        failed: indices (into ``JobSpec.files``) of the files that failed; their rows are left out.
        rows: the rows the table will hold.
        sources: how many files gave rows (0: nothing was solved; 1: the plot names no sources).
        complete: whether the streamed table (if any) was given every part.
        missing: the name of a part that should exist and does not (the run is refused), else None.
    """

    parts: list
    failed: set
    rows: int
    sources: int
    complete: bool = True
    missing: str | None = None


class JobRun:
    """One run of a :class:`JobSpec` (with its inputs) by an executor that holds the output's lock.

    On creation it removes a killed run's temporaries and opens ``<out>.parts/``: an interrupted run's
    manifest with the same ``identity`` is kept for resumption (``recorded``: its records under
    ``key``, ``"files"`` or ``"units"``), else the folder is emptied with a note (``what`` ends that
    note). The executor adds its ``notes`` and ``errors``, counts ``solved`` and ``resumed`` frames,
    records what it finished with :meth:`save_manifest`, may write the table while it solves
    (:meth:`stream_table`) and ends with :meth:`finish`, or, on failure, :meth:`kept_parts`.
    """

    def __init__(self, spec: JobSpec, identity: dict, key: str, t_start: float, what: str = ""):
        self.spec, self.identity, self.t_start = spec, identity, t_start
        self.digest = identity_digest(identity)
        remove_stale_temporaries(spec.out)
        self.notes: list[str] = []
        self.parts_dir, self.manifest_path, old = open_parts(spec.out, identity, spec.resume, self.notes, what)
        self.recorded: list[dict] = old.get(key, []) if old else []
        self.manifest = {"version": MANIFEST_VERSION, "identity": identity, key: []}
        self.key = key
        self.errors: list[str] = []
        self.solved = 0
        self.resumed = 0
        self.stream: Assembler | None = None

    def save_manifest(self, records: list[dict]) -> None:
        """Write the manifest with ``records`` (every finished file or block, in order)."""
        self.manifest[self.key] = records
        atomic_json(self.manifest_path, self.manifest)

    def stream_table(self) -> None:
        """Write the table while solving (a fresh run whose inputs' frame counts are known): the parts
        go to :attr:`stream` in input order."""
        self.stream = Assembler(self.spec.out, [str(f) for f in self.spec.files], self.spec.command_columns,
                                self.spec.total)

    def drop_stream(self) -> None:
        """Abandon the streamed table (its temporary file removed); the parts are assembled at the end."""
        if self.stream is not None:
            self.stream.abort()
            self.stream = None

    def kept_parts(self, unit: str) -> str | None:
        """After a failure: the streamed table dropped and, where no part was finished, the parts folder
        removed (None); else ``"N finished <unit>s kept in <folder>: the same command resumes from
        them"``, for the executor's error."""
        self.drop_stream()
        kept = len(list(self.parts_dir.glob("chunk_*.npz")))
        if not kept:  # nothing worth resuming: leave no folder behind
            shutil.rmtree(self.parts_dir, ignore_errors=True)
            return None
        return (f"{kept} finished {unit}{'s' if kept != 1 else ''} kept in {self.parts_dir}: the same command "
                "resumes from them")

    def _check_manifest(self) -> None:
        """The lock keeps other runs out; this catches anything else that touched the folder."""
        try:
            on_disk = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            on_disk = None
        if on_disk != json.loads(json.dumps(strict_json(self.manifest))):
            raise RuntimeError(f"{self.manifest_path}: changed while this run was writing (another program?); "
                               "run again")

    def finish(self, assembly: Assembly, devices: list[str], batch_size: int, **fields) -> dict[str, Any]:
        """Write the outputs: the table (the streamed one where it is whole, else the parts assembled),
        the plot (with ``plot``; a note without matplotlib), ``<stem>_summary.json``; then remove the
        parts folder (unless ``keep_parts``). Returns the summary (see
        :func:`wuji_jax.pipeline.batch.solve_dataset`), whose ``devices`` and ``batch_size`` are the
        executor's; ``fields`` (``command_map_note``, executor-specific keys) are set at the end.

        Raises:
            ValueError: nothing was solved (``"nothing solved: <the errors>"``; the parts folder removed).
            RuntimeError: a part is missing or damaged, or the manifest changed under the run.
        """
        spec = self.spec
        try:
            if not assembly.sources:
                what = "; ".join(self.errors) if self.errors else "the inputs hold no frames"
                shutil.rmtree(self.parts_dir, ignore_errors=True)
                raise ValueError(f"nothing solved: {what}")
            if assembly.missing is not None:  # cannot happen unless parts were deleted while running
                raise RuntimeError(f"{self.parts_dir}: part {assembly.missing} is missing; run again")
            self._check_manifest()
            assembled = finish_table(self.stream, assembly.complete, spec.out, list(assembly.parts),
                                     set(assembly.failed), list(spec.files), spec.command_columns, assembly.rows,
                                     self.digest)
        except BaseException:
            self.drop_stream()
            raise
        wall = time.perf_counter() - self.t_start

        out = spec.out
        plot_path = None
        if spec.plot:
            try:
                plot_path = plot_angles(out.with_name(out.stem + "_plot.png"), assembled["sample"],
                                        assembly.sources == 1)
            except ImportError:
                self.notes.append("plot skipped: matplotlib is not installed (pip install 'wuji-jax[viz]')")
        res = assembled["residual_valid"]
        summary = {
            "frames": assembled["frames"], "flagged": assembled["flagged"], "valid": assembled["valid"],
            "flag_counts": assembled["flag_counts"],
            "residual_mm_mean": float(np.mean(res)) if res.size else None,
            "residual_mm_median": float(np.median(res)) if res.size else None,
            "frames_per_second": self.solved / wall if wall > 0 else None,
            "wall_seconds": wall, "solved_frames": self.solved, "resumed_frames": self.resumed,
            "files": len(spec.files) - len(assembly.failed), "errors": self.errors, "notes": self.notes,
            "devices": devices, "batch_size": batch_size, "chunk_size": spec.chunk_size,
            "iterations": int(spec.config.iterations), "output": str(out),
            "plot": None if plot_path is None else str(plot_path),
            "summary": str(out.with_name(out.stem + "_summary.json")),
            **spec.command_fields(),
        }
        summary.update(fields)
        atomic_json(Path(summary["summary"]), summary)
        if not spec.keep_parts:
            shutil.rmtree(self.parts_dir, ignore_errors=True)
        return summary
