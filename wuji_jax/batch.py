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
  CPU devices), a kernel without a loop over chunks, which compiles in less time (``wuji-jax solve``
  on the bundled sample with an empty cache, chunks of 256 frames: 11.6 s with batches of 1024 rows,
  two chunks per device). On a big job the loop costs less than the kernel calls it saves (``default_batch``).
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
* Measured end to end (``benchmarks/bench_batch.py``, 10⁶ synthetic frames, the solver of that time:
  20 LM iterations from a neutral start, float32,
  Parquet out, compilation excluded): 3.6k frames/s on 2 shared CPU cores with a peak RSS of
  0.93 GiB (anonymous memory +0.1 GiB over the run, the same for 2·10⁵ frames); 122k frames/s on
  one H200 with ``chunk_size=65536``.

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
import fnmatch
import glob
import hashlib
import json
import math
import os
import queue
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from . import io as wio
from .cache import cached_program, quick_compile_options
from .geometry import matrix_to_quaternion
from .solver.config import FLAG_NAMES

__all__ = ["solve_dataset", "sample_landmarks_path", "output_columns", "DEFAULT_CHUNK_SIZE", "QUICK_JOB_FRAMES"]

DEFAULT_CHUNK_SIZE = 4096
#: a job on CPU devices of at most this many frames (bounded before the start: counted from the files'
#: headers, a CSV's or JSONL's size over the fewest bytes a frame takes, a video's stated frame count,
#: see ``most_frames``) compiles its kernel
#: with :func:`wuji_jax.cache.quick_compile_options`: about 3.5 s less to compile on a 2-core CPU, at
#: most ~7 % longer to run (0.1 s at this size and ~40k frames/s). ``wuji-jax solve`` on the bundled
#: sample with an empty cache: 13.3 s → 9.6 s wall, peak RSS 839 → 438 MB. Larger jobs keep XLA's
#: defaults, and so does a job whose size is not known ahead (a camera, a folder of images).
QUICK_JOB_FRAMES = 65536


def quick_job(frames: int | None) -> bool:
    """Whether a job of at most ``frames`` frames (:func:`most_frames`, before the start; None:
    unbounded) is small enough to compile quickly (:data:`QUICK_JOB_FRAMES`)."""
    return frames is not None and frames <= QUICK_JOB_FRAMES


def kernel_compile_options(platform: str, quick: bool) -> dict | None:
    """The dataset kernel's compile options on ``platform``: a small job's
    (:func:`wuji_jax.cache.quick_compile_options`, see :func:`quick_job`), else XLA's defaults (None).
    Also part of a run's identity (they change float rounding)."""
    return quick_compile_options(platform) if quick else None


def default_batch(chunk_size: int, platform: str, devices: int, frames: int | None = None) -> int:
    """Rows per kernel call when not given: the whole chunk of ``chunk_size`` frames, except for a
    small job on CPU (``frames``, bounded before the start, at most :data:`QUICK_JOB_FRAMES`): one
    solver chunk (``chunk_frames("cpu")``) per device, so that its kernel is the solver on one chunk
    per device, without the loop over chunks, which compiles sooner (see the module docstring). On a
    big job the loop costs less than the calls it saves: ``solve_dataset`` on 300,000 frames on 2 CPU
    devices (cache warm, no plot) took 5.06 s with batches of 4096 rows, 5.27 s with 2048 and 5.78 s
    with 512 (medians of 4 alternating rounds)."""
    from .solver import chunk_frames

    return min(chunk_size, chunk_frames("cpu") * devices) if platform == "cpu" and quick_job(frames) else chunk_size


_MANIFEST_VERSION = 1
#: at most this many frames are drawn (evenly strided): two per pixel column of the plot's panels
#: (900 px wide). 5,000 drew the plot of a 300,000-frame job in 0.48 s, 1,800 in 0.36 s (2-core CPU).
_PLOT_POINTS = 1_800
_FINGERS = ("thumb", "index", "middle", "ring", "pinky")
SAMPLE_NAME = "human_hand_video_landmarks.npz"


def sample_landmarks_path() -> Path:
    """The bundled sample recording (621 frames of a right hand, MediaPipe world landmarks, metres)."""
    from .model import asset_path

    return asset_path("samples", SAMPLE_NAME)


def output_columns(hand=None, inspire: bool = True) -> list[str]:
    """The output table's column names, in order (see the module docstring for units)."""
    from .inspire import MOTOR_NAMES
    from .model import load_hand

    hand = hand or load_hand("right")
    cols = ["frame", "timestamp", "source", "side", *hand.joint_names, *hand.mimic_names,
            "wrist_qw", "wrist_qx", "wrist_qy", "wrist_qz", "wrist_x", "wrist_y", "wrist_z",
            "scale", "residual_mm", "valid", "converged", "fit_flags"]
    if inspire:
        cols += [f"inspire_{m}" for m in MOTOR_NAMES]
    return cols


# ------------------------------------------------------------------------------------ small parts


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


def count_frames(path: Any) -> int | None:
    """Frames in a file without reading its data, where the format allows (else None)."""
    try:
        p = Path(path)
        ext = p.suffix.lower()
        if not p.is_file():  # a FIFO would block here; the reader reports it
            return None
        if ext == ".npy":
            return int(np.load(p, mmap_mode="r", allow_pickle=False).shape[0])
        if ext == ".npz":
            import zipfile

            with zipfile.ZipFile(p) as z:
                names = z.namelist()
                for key in (f"{k}.npy" for k in wio.LANDMARK_KEYS):
                    if key in names:
                        break
                else:
                    key = names[0] if len(names) == 1 else None
                if key is None:
                    return None
                with z.open(key) as f:
                    version = np.lib.format.read_magic(f)
                    shape = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                             else np.lib.format.read_array_header_2_0(f))[0]
                return int(shape[0]) if len(shape) == 3 else 1
        if ext in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(p).metadata.num_rows)
        if ext in (".h5", ".hdf5"):
            import h5py

            with h5py.File(p, "r") as f:
                key = next((k for k in wio.LANDMARK_KEYS if k in f), None)
                return int(f[key].shape[0]) if key else None
    except Exception:  # only a progress hint: any trouble is reported by the reader itself
        return None
    return None


def total_frames(counts: Sequence[int | None]) -> int | None:
    """The frames of all files from their counts (:func:`count_frames`), or None where one is unknown."""
    return sum(counts) if all(c is not None for c in counts) else None


#: the fewest bytes a frame takes in a file whose frames are not counted before reading it: a CSV
#: row has the header's 63 or more fields (62 separators and a line end), a JSONL line is at least
#: ``{"world":null}`` and its line end, a ``.json`` frame at least ``null`` and a comma; an ``.npy``
#: whose header cannot be read (it fails when its turn comes) holds raw values, a byte or more each
_MIN_FRAME_BYTES = {".csv": 63, ".tsv": 63, ".jsonl": 15, ".ndjson": 15, ".json": 5, ".npy": 63}


def most_frames(files: Sequence[Any], counts: Sequence[int | None]) -> int | None:
    """At most how many frames ``files`` hold, to decide whether a job is small (:func:`quick_job`):
    their ``counts`` (:func:`count_frames`) where known; a CSV's, JSONL's or unreadable ``.npy``'s size
    over the fewest bytes a frame takes (:data:`_MIN_FRAME_BYTES`; a 70-frame CSV of 79 kB is at most
    1,254 frames: so a corrupt file among small ones leaves the job small); a
    video's frame count as its container states it (:func:`_stated_video_frames`; a container may
    miscount, and then only the compile options are those of the other size); 0 for a path that does
    not exist (it fails when its turn comes, solving nothing); None where a file gives no figure (a
    camera, a folder of images, a video without a stated count)."""
    most = 0
    for f, c in zip(files, counts):
        if c is None and isinstance(f, (str, os.PathLike)):
            if not os.path.lexists(f):
                c = 0
            elif Path(f).is_file():
                ext = Path(f).suffix.lower()
                per = _MIN_FRAME_BYTES.get(ext)
                try:
                    c = os.stat(f).st_size // per if per else (_stated_video_frames(f) if ext in wio.VIDEO_EXTENSIONS
                                                               else None)
                except OSError:
                    c = None
        if c is None:
            return None
        most += c
    return most


def _stated_video_frames(path: Any) -> int | None:
    """The frame count a video's container states (OpenCV's ``CAP_PROP_FRAME_COUNT``), or None: no
    OpenCV, an unreadable file, no count stated."""
    try:
        import cv2
    except ImportError:
        return None
    cap = cv2.VideoCapture(str(path))
    try:
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else 0
    finally:
        cap.release()
    return n if n > 0 else None


def _strict(obj: Any) -> Any:
    """``obj`` with every non-finite float as ``None``: strict JSON (no NaN or Infinity)."""
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def atomic_json(path: Path, obj: Any):
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_strict(obj), indent=1, sort_keys=True, allow_nan=False))
    os.replace(tmp, path)


def _write_part(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """One finished chunk, atomically: a part file is either complete or absent."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def part_ok(path: Path, digest: str) -> bool:
    """Whether a part file is whole (its zip directory reads) and was written for ``digest``."""
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            return "run" in z.files and str(z["run"]) == digest
    except Exception:  # any damage: the part is solved again
        return False


def read_part(path: Path) -> dict[str, np.ndarray]:
    with open(path, "rb") as fh:
        return part_arrays(fh)


def part_arrays(fh) -> dict[str, np.ndarray]:
    """The arrays of a part file's bytes (an open binary file)."""
    with np.load(fh, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# ------------------------------------------------------------------------------------ the solver


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


_USED: set = set()  # kernels run in this process (see Kernel.first_use)


def _solve_with_inspire(hand, landmarks, weights, q0, config, chunk: int | None = None) -> dict:
    """:func:`wuji_jax.solver.solve_chunked` and the Inspire commands of its angles, in one program:
    a second call, on the solver's outputs split over several devices, waited for the solver before
    it returned (8 ms per 512-row batch on 2 CPU devices), where one device's call returns at once."""
    from .solver import solve_chunked

    return _with_inspire(hand, solve_chunked(hand, landmarks, weights, q0, config, chunk=chunk))


def _fit_with_inspire(hand, landmarks, weights, q0, config, start, chunk: int | None = None) -> dict:
    """:func:`_solve_with_inspire`'s second stage (:func:`wuji_jax.solver.api.staged_program`)."""
    from .solver.api import fit_chunked

    return _with_inspire(hand, fit_chunked(hand, landmarks, weights, q0, config, start, chunk=chunk))


def _with_inspire(hand, out: dict) -> dict:
    """The solver's outputs with the Inspire commands of their angles."""
    from .inspire import to_inspire_kernel

    return {**out, "inspire": to_inspire_kernel(hand, out["angles"], None)}


_PROGRAMS: dict[tuple, Any] = {}  # the dataset runner's compiled solver programs, per configuration (Kernel.program)
#: one lock per program key: a run that asks for a program another thread of this process is still
#: making (a failed run's preload, which goes on after the run stopped) waits for it instead of making it too
_MAKING: dict[tuple, threading.Lock] = {}
_MAKING_LOCK = threading.Lock()


class Kernel:
    """The jitted solver on fixed ``(batch, 21, 3)`` shapes, inputs sharded over ``devices``."""

    def __init__(self, config, devices, batch_size: int, dtype, quick: bool = False):
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        self.jax = jax
        self.config = config
        self.devices = list(devices)
        self.batch = batch_size
        self.dtype = np.dtype(dtype)
        platforms = {d.platform for d in self.devices}
        # a small job: compiled quickly (its compilation outweighs its run, QUICK_JOB_FRAMES)
        self.options = kernel_compile_options(platforms.pop(), quick) if len(platforms) == 1 else None
        if self.devices == [jax.devices()[0]]:
            # the default device: uncommitted arrays, exactly as wj.solve passes them (same jit cache)
            self.rows = self.same = None
        else:
            mesh = Mesh(np.asarray(self.devices), ("frames",))
            self.rows = NamedSharding(mesh, PartitionSpec("frames"))
            self.same = NamedSharding(mesh, PartitionSpec())
        self.cfg = self.put(config.as_arrays(self.dtype), self.same)
        self.ones = self.put(np.ones((batch_size, 21), self.dtype), self.rows)
        self._hands: dict[str, tuple] = {}
        self._loading: tuple | None = None  # the thread making the program (preload) and its errors

    def _shape_key(self) -> tuple:
        """What the compiled program depends on besides the hand's values: rows, dtype, devices, the
        config's static fields and the compile options."""
        return (self.batch, self.dtype.name, tuple(self.devices), self.config.static(), repr(self.options))

    def first_use(self, side: str) -> bool:
        """Whether this process has not run the kernel for ``side`` at this shape yet (then the call
        compiles it, or loads it from the persistent cache)."""
        key = (side,) + self._shape_key()
        fresh = key not in _USED
        _USED.add(key)
        return fresh

    def put(self, x, sharding):
        if sharding is None:
            return self.jax.tree_util.tree_map(self.jax.numpy.asarray, x)
        return self.jax.device_put(x, sharding)

    def hand(self, side: str):
        if side not in self._hands:
            from .model import load_hand
            from .solver import neutral_angles

            hand = load_hand(side)
            q0 = np.broadcast_to(np.asarray(neutral_angles(hand), self.dtype), (self.batch, hand.num_joints))
            # the kernel's copy without the static fields it never reads (as wj.solve): one program
            # for both sides
            kernel_hand = hand.replace(name="", side="")
            self._hands[side] = (hand, kernel_hand if self.same is None else self.put(kernel_hand, self.same),
                                 self.put(np.ascontiguousarray(q0), self.rows))
        return self._hands[side]

    def kernel(self, inspire: bool):
        """The solver as :func:`wuji_jax.solve` runs it: on one device :func:`~wuji_jax.solver.solve_chunked`
        (chunks of ``CHUNK_FRAMES`` frames, each chunk's loop stopping on its own), on several the same
        per device (``shard_map``: every device solves its own rows, no communication). A frame's
        result does not depend on the frames solved beside it. (``jit`` of the plain rows over sharded
        inputs ran one loop over all devices' rows, waiting for the slowest frame of the batch:
        41.9k against 52.2k frames/s at batch 1024 on 2 CPU devices.) With ``inspire`` the Inspire
        commands are computed in the same program (:func:`_solve_with_inspire`)."""
        from .solver import solve_chunked, split_kernel

        fn = _solve_with_inspire if inspire else solve_chunked
        if self.rows is None:
            return fn
        return split_kernel(self.rows.mesh, kernel=fn)

    def staged(self, inspire: bool, name: str, args: tuple):
        """A quick job's solver (``self.options``): :meth:`kernel`'s program as its two stages, compiled
        side by side (:func:`wuji_jax.solver.api.staged_program`)."""
        from .solver.api import fit_chunked, split_kernel, staged_program, start_cold

        first, second = start_cold, (_fit_with_inspire if inspire else fit_chunked)
        if self.rows is not None:  # every device its own rows, as kernel()
            mesh = self.rows.mesh
            first, second = split_kernel(mesh, kernel=first), split_kernel(mesh, kernel=second, extra=1)
        return staged_program(first, second, name, args, self.options, self.rows)

    def program(self, inspire: bool, args: tuple, lowered_hook=None):
        """The compiled solver for arguments shaped like ``args`` (the batch's shapes never change: made
        once per process and configuration), compiled or read from the persistent compilation cache.
        ``lowered_hook`` is called once its Python part (tracing, lowering) is done."""
        key = (inspire,) + self._shape_key()
        program = _PROGRAMS.get(key)
        if program is None:
            with _MAKING_LOCK:
                making = _MAKING.setdefault(key, threading.Lock())
            with making:  # made once per process, however many runs ask for it at the same time
                program = _PROGRAMS.get(key)
                if program is None:
                    program = _PROGRAMS[key] = self._make(inspire, args, lowered_hook)
                    return program
        if lowered_hook is not None:
            lowered_hook()
        return program

    def _make(self, inspire: bool, args: tuple, lowered_hook):
        """:meth:`program`'s compilation (or reading from the cache), done once per key."""
        name = "solve_inspire" if inspire else "solve_chunked"
        if self.options:  # a quick job: its two stages, each lowered and compiled in threads of their own
            if lowered_hook is not None:
                lowered_hook()
            return self.staged(inspire, name, args)
        lowered = cached_program(self.kernel(inspire), name, *args).lower(*args)
        if lowered_hook is not None:
            lowered_hook()
        return lowered.compile()

    def preload(self, inspire: bool, lowered_hook=None) -> None:
        """Start making :meth:`program` in a thread of its own, so that its compilation, or its
        reading from the compilation cache, overlaps the inputs' hashing and first reads; :meth:`dispatch`
        waits for it. ``lowered_hook`` is called in that thread once the program is lowered: the
        writers' imports start then, so that their Python does not hold up the lowering's (with a warm
        cache, ``wuji-jax solve`` on 300,000 frames had its program 0.7 s after the start of the run
        made one after the other; in parallel to the hashing, and the imports started beside it,
        1.0–1.2 s; the imports started when the program is lowered, 0.8 s: its reading, 0.45 s, is
        XLA loading 383 kernels, outside Python). The program is the same for both hands (their models
        differ in array values only), so the right hand's shapes stand for either."""
        if self._loading is not None:
            return
        _, hand, q0 = self.hand("right")
        xs = self.put(np.zeros((self.batch, 21, 3), self.dtype), self.rows)
        args = (hand, xs, self.ones, q0, self.cfg)
        errors: list = []

        def make():
            try:
                self.program(inspire, args, lowered_hook)
            except BaseException as e:  # raised by dispatch, in the caller's thread
                errors.append(e)

        # not a daemon: a job that fails while XLA compiles waits for it at exit (a daemon thread stopped
        # inside C++ by the interpreter's teardown aborted the process: "FATAL: exception not rethrown")
        thread = threading.Thread(target=make, name="wuji_jax-program")
        thread.start()
        self._loading = (thread, errors)

    def wait(self) -> None:
        """Wait for the program :meth:`preload` is making; raises its error, if any."""
        if self._loading is not None:
            (thread, errors), self._loading = self._loading, None
            thread.join()
            if errors:
                raise errors[0]

    def dispatch(self, side: str, world: np.ndarray, inspire: bool) -> list:
        """Start solving ``world (n, 21, 3)``; returns the outputs, still being computed.

        Everything here is queued on the devices without waiting (``to_inspire``'s kernel included:
        its public wrapper would wait to check the angles), so the caller writes the previous chunk
        while this one is solved.
        """
        self.wait()
        plain, hand, q0 = self.hand(side)
        n = world.shape[0]
        padded = -(-n // self.batch) * self.batch
        x = np.full((padded, 21, 3), np.nan, self.dtype)
        with np.errstate(over="ignore"):  # beyond float32: inf, a missing landmark to the solver
            x[:n] = world
        outs = []
        for s in range(0, padded, self.batch):
            xs = self.put(x[s:s + self.batch], self.rows)
            args = (hand, xs, self.ones, q0, self.cfg)
            outs.append(self.program(inspire, args)(*args))
        return outs

    def collect(self, outs: list, n: int) -> dict[str, np.ndarray]:
        """Wait for ``outs`` and return the first ``n`` rows (padding dropped), output-ready."""
        with np.errstate(over="ignore", invalid="ignore"):  # frames of huge coordinates: flagged, not warned
            return self._collect(outs, n)

    def _collect(self, outs: list, n: int) -> dict[str, np.ndarray]:
        keys = ("angles", "coupled", "rotation", "translation", "scale", "residual", "valid",
                "converged", "flags") + (("inspire",) if "inspire" in outs[0] else ())
        got = {k: np.concatenate([np.asarray(o[k]) for o in outs])[:n] for k in keys}
        res = {"angles": got["angles"], "coupled": got["coupled"],
               "quaternion": matrix_to_quaternion(got["rotation"]).astype(got["angles"].dtype),
               "translation": got["translation"], "scale": got["scale"],
               "residual_mm": got["residual"] * 1000.0, "valid": got["valid"],
               "converged": got["converged"], "flags": got["flags"].astype(np.int32)}
        if "inspire" in got:
            res["inspire"] = got["inspire"].astype(got["angles"].dtype)
        return res


# ----------------------------------------------------------------------------------- the dataset


def _content_hash(path: Path) -> str:
    """SHA-256 of a file's bytes (about 1.5 GB/s here: small next to solving the frames it holds).

    Read in 16 MiB blocks: hashing releases the GIL, but every block takes it back, and while
    another thread holds it (the writers' imports run beside this) each return waited up to the
    switch interval: 1 MiB blocks took 0.35 s for 76 MB, against 0.05 s alone."""
    h = hashlib.sha256()
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def run_identity(files: Sequence[Any], chunk_size: int, side: str, config, inspire: bool,
              check_units: bool, fps: float | None, dtype, devices: Sequence[Any], batch_size: int,
              compile_options: dict | None = None) -> dict:
    """What a resumed run must share with the interrupted one for its parts to be reused: every
    input's bytes (a full SHA-256, so an input rewritten in place with the same size and time is
    noticed), the settings, the device kind and count, the batch size and the compile options (all
    three change float rounding)."""
    from . import __version__

    inputs = []
    for f in files:
        if isinstance(f, int) and not isinstance(f, bool):
            raise ValueError(f"camera {f}: solve_dataset reads recordings; record the camera to a file "
                             "first (wuji_jax.video.extract_landmarks)")
        p = Path(f)
        try:
            st = p.stat()
            digest = _content_hash(p) if p.is_file() else None  # a folder of images: path, size, time
            inputs.append({"path": os.path.realpath(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                           "sha256": digest})
        except OSError:
            inputs.append({"path": os.path.realpath(p), "size": None, "mtime_ns": None, "sha256": None})
    return {"inputs": inputs, "chunk_size": int(chunk_size), "side": side, "inspire": bool(inspire),
            "check_units": bool(check_units), "fps": fps, "dtype": np.dtype(dtype).name,
            "solver": {"static": list(config.static()),
                       "traced": {k: float(v) for k, v in config.numbers().items()}},
            "devices": [devices[0].platform, len(devices)], "batch_size": int(batch_size),
            "compile_options": sorted([k, repr(v)] for k, v in (compile_options or {}).items()),
            "wuji_jax": __version__}


def side_of_file(side: str, world: np.ndarray, path: str, notes: list) -> str:
    from .landmarks import detect_side

    detected = detect_side(world)
    if side == "auto":
        if detected is None:
            notes.append(f"{path}: side='auto' but the first frames' chirality is undecided; "
                         "solved as a right hand")
            return "right"
        return detected
    if detected is not None and detected != side:
        notes.append(f"{path}: side={side!r} but the landmarks' geometry looks like a {detected} hand "
                     "(mirrored images swap MediaPipe's handedness label); solved as given")
    return side


def out_path(out: Any) -> Path:
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"{out}: is a folder; name the table to write inside it, e.g. {out / 'angles.parquet'}")
    ext = out.suffix.lower()
    if ext not in (".parquet", ".pq", ".npz", ".csv"):
        raise ValueError(f"{out}: unsupported output extension {out.suffix!r}; use .parquet, .npz or .csv")
    if ext in (".parquet", ".pq"):
        import importlib.util

        if importlib.util.find_spec("pyarrow") is None:
            raise ImportError(f"{out}: writing Parquet needs pyarrow (pip install 'wuji-jax[formats]'); "
                              "or write .npz / .csv")
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _outputs_of(out: Path) -> list[Path]:
    """Every path a run writes: the table, its summary, plot, parts folder and lock."""
    return [out, out.with_name(out.stem + "_summary.json"), out.with_name(out.stem + "_plot.png"),
            Path(str(out) + ".parts"), _lock_path(out)]


def check_outputs(source: Any, files: Sequence[Any], out: Path) -> None:
    """Refuse, before any work, a run whose outputs would overwrite or later be read as its inputs."""
    real = lambda p: Path(os.path.realpath(p))  # noqa: E731 (never raises, even on a symlink loop)
    written = [real(w) for w in _outputs_of(out)]
    for f in files:
        if isinstance(f, int):
            continue
        p = Path(f)
        if real(p) in written or any(_same_file(p, w) for w in written):
            raise ValueError(f"{p}: is both an input and an output of this run; write the output elsewhere (-o)")
        if any(real(p).is_relative_to(w) for w in written[3:4]):
            raise ValueError(f"{p}: lies in this run's parts folder {written[3]}; write the output elsewhere (-o)")
    # an input folder or glob that would pick up the table on the next run
    sources = [source] if isinstance(source, (str, os.PathLike, int)) else list(source)
    readable = out.suffix.lower() in wio.DATA_EXTENSIONS
    for s in sources:
        if isinstance(s, int) and not isinstance(s, bool) or not readable:
            continue
        p = Path(s)
        if p.is_dir() and real(out).parent == real(p):
            raise ValueError(f"{out}: lies in the input folder {p}, so a later run would read it as input; "
                             "write the output elsewhere (-o)")
        if isinstance(s, str) and wio.is_glob(s) and not p.exists() and (
                fnmatch.fnmatch(str(out), s) or fnmatch.fnmatch(str(real(out)), s)):
            raise ValueError(f"{out}: matches the input pattern {s!r}, so a later run would read it as input; "
                             "write the output elsewhere (-o)")


def remove_stale_temporaries(out: Path) -> None:
    """Temporary files a killed run left next to ``out`` (the caller holds the lock: nobody else
    writes them)."""
    for stem in (out.name, out.stem + "_summary.json"):
        for tmp in out.parent.glob(f".{glob.escape(stem)}.*.tmp*"):
            tmp.unlink(missing_ok=True)
        for tmp in out.parent.glob(f"{glob.escape(stem)}.*.tmp"):
            tmp.unlink(missing_ok=True)


def _lock_path(out: Path) -> Path:
    return out.with_name(out.name + ".lock")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's process) or cannot tell: assume alive
    return True


class OutputLock:
    """``<out>.lock``, created exclusively, holding the PID, host and start time of the run that writes
    ``out``. A second run on the same output refuses, naming the first; a lock left by a dead process
    on this host is taken over."""

    def __init__(self, out: Path):
        self.path = _lock_path(out)
        self.out = out
        self.mine = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                "started": time.strftime("%Y-%m-%d %H:%M:%S")})

    def __enter__(self):
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    other = json.loads(self.path.read_text())
                    pid, host = int(other["pid"]), str(other["host"])
                except (OSError, ValueError, KeyError, TypeError):
                    other, pid, host = {}, None, None
                if pid is not None and host == socket.gethostname() and not _alive(pid):
                    self.path.unlink(missing_ok=True)  # left by a run that was killed
                    continue
                who = (f"PID {pid} on {host}, started {other.get('started', '?')}" if pid is not None
                       else "a run whose lock file is unreadable")
                raise ValueError(f"{self.out}: another run ({who}) is writing this output; wait for it or "
                                 f"choose another -o (if that run is gone, delete {self.path})") from None
            with os.fdopen(fd, "w") as f:
                f.write(self.mine)
            return self
        raise ValueError(f"{self.out}: could not take the lock {self.path}; delete it if no run is writing")

    def __exit__(self, *exc):
        try:
            if self.path.read_text() == self.mine:
                self.path.unlink()
        except OSError:
            pass
        return False


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
        max_frames: the most frames one file may hold (:data:`wuji_jax.io.MAX_FRAMES`, ten million,
            by default; ``None``: no limit): a file declaring more is that file's error, so that a
            tiny hostile file cannot start unbounded work.

    Returns:
        a summary dict (written as strict JSON: ``null`` for a missing number): ``frames`` (rows
        written), ``flagged`` (nonzero flags), ``flag_counts`` (rows per flag name), ``valid``,
        ``residual_mm_mean`` / ``residual_mm_median`` (over valid frames), ``frames_per_second``
        (frames solved by this call / wall time, compilation included), ``wall_seconds``,
        ``solved_frames``, ``resumed_frames``, ``files``, ``errors``, ``notes``, ``devices``,
        ``output``, ``plot``, ``summary``.

    Raises:
        ValueError: bad arguments, or (``on_error="raise"``) a bad file — one line naming it.
        ImportError: Parquet output without pyarrow.
    """
    import jax

    from .solver import SolverConfig

    t_start = time.perf_counter()
    if side not in ("right", "left", "auto"):
        raise ValueError(f"side must be 'right', 'left' or 'auto', got {side!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    chunk_size = int(chunk_size)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    config = config or SolverConfig()
    if iterations is not None:
        if int(iterations) < 1:
            raise ValueError(f"iterations must be >= 1, got {iterations}")
        config = dataclasses.replace(config, iterations=int(iterations))
    out = out_path(out)

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
    nd = len(devices)
    dtype = np.float64 if jax.config.jax_enable_x64 else np.float32

    files = wio.expand_sources(source)
    check_outputs(source, files, out)
    counts = [count_frames(f) for f in files]  # the headers, read once
    total, most = total_frames(counts), most_frames(files, counts)
    if batch_size is None:
        batch_size = default_batch(chunk_size, devices[0].platform, nd, most)
    batch_size = -(-max(int(batch_size), 1) // nd) * nd
    out.parent.mkdir(parents=True, exist_ok=True)
    with OutputLock(out):
        return _solve_locked(files, out, side, chunk_size, resume, progress, devices, inspire, on_error, config,
                             batch_size, check_units, fps, plot, keep_parts, max_frames, dtype, t_start, total,
                             quick_job(most))


def open_parts(out: Path, identity: dict, resume: bool, notes: list, what: str = "") -> tuple:
    """``<out>.parts/`` ready for this run: refused if it holds other files; an interrupted run's
    manifest with the same version and ``identity`` is returned for reuse (``resume``), else the
    folder is emptied (with a note). Returns ``(parts_dir, manifest_path, old manifest or None)``."""
    parts_dir = Path(str(out) + ".parts")
    manifest_path = parts_dir / "manifest.json"
    reuse = None
    if parts_dir.exists():
        foreign = [] if not parts_dir.is_dir() else [p.name for p in parts_dir.iterdir() if not (
            p.name == "manifest.json" or p.name.endswith(".tmp") or (p.name.startswith("chunk_")
                                                                     and p.suffix == ".npz"))]
        if foreign or not parts_dir.is_dir():
            raise ValueError(f"{parts_dir}: exists and holds other files ({', '.join(foreign[:3]) or 'not a folder'}); "
                             "it is not a folder of solve_dataset parts: move it or write elsewhere")
        old = None
        try:
            old = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            pass
        if resume and old and old.get("version") == _MANIFEST_VERSION and old.get("identity") == identity:
            reuse = old
        else:
            if resume and old is not None:
                notes.append(f"{parts_dir}: the inputs or settings changed since the interrupted run{what}; "
                             "started over")
            shutil.rmtree(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    for stale in parts_dir.glob("*.tmp"):
        stale.unlink()
    return parts_dir, manifest_path, reuse


def _solve_locked(files, out, side, chunk_size, resume, progress, devices, inspire, on_error, config, batch_size,
                  check_units, fps, plot, keep_parts, max_frames, dtype, t_start, total, quick) -> dict[str, Any]:
    """:func:`solve_dataset` once its arguments are checked and it holds the output's lock (``total``:
    the inputs' frames as their headers give them, or None; ``quick``: a small job, :func:`quick_job`)."""
    # matplotlib (~0.6 s) and pyarrow (~0.25 s) load while the solver compiles and the frames are read,
    # not after
    parquet = Path(out).suffix.lower() in (".parquet", ".pq")
    # (not a daemon, as Kernel.preload's thread: a job that fails at once waits for the imports at exit)
    imports = threading.Thread(target=_import_writers, args=(plot, parquet), name="wuji_jax-import")
    kernel = Kernel(config, devices, batch_size, dtype, quick=quick)
    if total and not (resume and Path(str(out) + ".parts").exists()):
        # a fresh run whose inputs' headers promise frames: the program is compiled (or read from the
        # cache) while they are hashed and read
        kernel.preload(inspire, imports.start if (plot or parquet) else None)
    elif plot or parquet:
        imports.start()
    identity = run_identity(files, chunk_size, side, config, inspire, check_units, fps, dtype, devices, batch_size,
                         kernel.options)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    remove_stale_temporaries(out)

    notes: list[str] = []
    parts_dir, manifest_path, old = open_parts(out, identity, resume, notes)
    entries: dict[int, dict] = {int(e["index"]): e for e in old.get("files", [])} if old else {}
    done = set()
    for part in sorted(parts_dir.glob("chunk_*.npz")):
        if part_ok(part, digest):
            done.add(int(part.stem.split("_")[1]))
        else:  # cut short (a full disk, a copy) or from another run: solved again
            notes.append(f"{part}: damaged or not from this run's inputs; solved again")
            part.unlink()
    manifest = {"version": _MANIFEST_VERSION, "identity": identity, "files": []}

    def save_manifest():
        manifest["files"] = [entries[i] for i in sorted(entries)]
        atomic_json(manifest_path, manifest)

    save_manifest()

    def part_path(start: int) -> Path:
        return parts_dir / f"chunk_{start:012d}.npz"

    def chunks_of(a: int, b: int) -> range:
        return range(a // chunk_size * chunk_size, b, chunk_size) if b > a else range(0)

    # a fresh run of known size writes its table while it solves (no assembly from the part files at
    # the end, unless a failed file's rows went in: then the parts are assembled without them)
    stream = Assembler(out, [str(f) for f in files], inspire, total) if not (done or entries or total is None) \
        else None

    def save(path: Path, arrays: dict[str, np.ndarray]):
        _write_part(path, arrays)
        if stream is not None:
            stream.add(arrays)

    bar = _Progress(total, progress)
    stats = {"done": 0, "solved": 0, "resumed": 0, "dispatched": 0}
    pending: list = []  # at most one dispatched chunk whose results are not written yet
    writer = _Background(ahead=2)  # part files are written while the next chunks are solved

    def finish_pending():
        while pending:
            chunk, outs = pending.pop(0)
            res = kernel.collect(outs, chunk.n)
            arrays = {"source": np.concatenate(chunk.source), "frame": np.concatenate(chunk.frame),
                      "timestamp": np.concatenate(chunk.time), "side": np.asarray(chunk.side),
                      "run": np.asarray(digest), **res}
            writer.submit(save, part_path(chunk.start), arrays)
            done.add(chunk.start)
            stats["done"] += chunk.n
            stats["solved"] += chunk.n
            bar.update(stats["done"], stats["solved"])

    def flush(chunk: _Chunk | None):
        if chunk is None or chunk.n == 0:
            return
        world = np.concatenate(chunk.world)
        if not stats["dispatched"] and kernel.first_use(chunk.side):
            bar.compiling()
        stats["dispatched"] += 1
        outs = kernel.dispatch(chunk.side, world, inspire)  # asynchronous: solves while we write the previous one
        chunk.world = []
        finish_pending()
        pending.append((chunk, outs))

    pos = 0  # position in the stream (chunk k covers [k * chunk_size, (k + 1) * chunk_size))
    cur: _Chunk | None = None
    cur_side: str | None = None  # side of the chunk containing pos
    errors: list[str] = []
    try:
        for fi, src in enumerate(files):
            name = str(src)
            e = entries.get(fi)
            if e is not None and e["start"] == _align(pos, cur_side, e["side"], chunk_size) and all(
                    k in done for k in chunks_of(e["start"], e["end"])):
                # finished by an earlier run: skip without reading
                pos, cur_side = e["end"], e["side"]
                if e.get("error"):
                    errors.append(e["error"])
                else:
                    stats["done"] += e["frames"]
                    stats["resumed"] += e["frames"]
                    notes.extend(e.get("notes", []))
                bar.update(stats["done"], stats["solved"])
                continue
            file_notes: list[str] = []
            file_side = None
            start = pos
            frames = 0
            try:
                checked = not check_units
                for local, world, t in Prefetch(read_file(src, name, chunk_size, fps, max_frames)):
                    if file_side is None:
                        file_side = side_of_file(side, world, name, file_notes)
                        pos = _align(pos, cur_side, file_side, chunk_size)
                        if cur is not None and cur.start != pos // chunk_size * chunk_size:
                            flush(cur)  # a side change moved us to the next chunk
                            cur = None
                        start, cur_side = pos, file_side
                    if not checked and np.isfinite(world).all(axis=(1, 2)).any():
                        from .landmarks import unit_problem

                        problem = unit_problem(world)
                        if problem:
                            raise FileError(f"{name}: {problem} (if they are metres after all: --no-unit-check at the "
                                             "command line, check_units=False in Python)")
                        checked = True
                    i = 0
                    m = world.shape[0]
                    while i < m:
                        k0 = pos // chunk_size * chunk_size
                        take = min(k0 + chunk_size - pos, m - i)
                        if k0 in done:
                            stats["done"] += take
                            stats["resumed"] += take
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
                    bar.update(stats["done"], stats["solved"])
            except FileError as err:
                msg = str(err)
                if on_error == "raise":
                    raise ValueError(msg) from None
                errors.append(msg)
                entries[fi] = {"index": fi, "path": name, "start": start, "end": pos, "frames": frames,
                               "side": cur_side, "error": msg}
                save_manifest()
                continue
            notes.extend(file_notes)
            entries[fi] = {"index": fi, "path": name, "start": start, "end": pos, "frames": frames,
                           "side": file_side, "error": None, "notes": file_notes}
            save_manifest()
        flush(cur)
        finish_pending()
        writer.wait()
    except BaseException as e:
        writer.abandon()
        if stream is not None:
            stream.abort()
        bar.close(ok=False)
        kept = len(list(parts_dir.glob("chunk_*.npz")))
        if not kept:  # nothing worth resuming: leave no folder behind
            shutil.rmtree(parts_dir, ignore_errors=True)
        elif isinstance(e, ValueError):
            raise ValueError(f"{e} ({kept} finished chunk{'s' if kept != 1 else ''} kept in {parts_dir}: "
                             "the same command resumes from them)") from None
        raise
    bar.close()

    try:
        failed = {i for i, e in entries.items() if e.get("error")}
        good = [e for i, e in sorted(entries.items()) if i not in failed and e["frames"] > 0]
        if not good:
            what = "; ".join(errors) if errors else "the inputs hold no frames"
            shutil.rmtree(parts_dir, ignore_errors=True)
            raise ValueError(f"nothing solved: {what}")
        needed = sorted({k for e in entries.values() for k in chunks_of(e["start"], e["end"])})
        missing = [k for k in needed if k not in done]
        if missing:  # cannot happen unless parts were deleted while running
            raise RuntimeError(f"{parts_dir}: part chunk_{missing[0]:012d}.npz is missing; run again")

        n_rows = sum(e["frames"] for e in good)
        try:  # the lock keeps other runs out; this catches anything else that touched the folder
            on_disk = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            on_disk = None
        if on_disk != manifest:
            raise RuntimeError(f"{manifest_path}: changed while this run was writing (another program?); run again")
        assembled = finish_table(stream, True, out, [part_path(k) for k in needed], failed, files, inspire,
                                  n_rows, digest)
    except BaseException:
        if stream is not None:
            stream.abort()
        raise
    wall = time.perf_counter() - t_start

    plot_path = None
    if plot:
        try:
            plot_path = plot_angles(out.with_name(out.stem + "_plot.png"), assembled["sample"], len(good) == 1)
        except ImportError:
            notes.append("plot skipped: matplotlib is not installed (pip install 'wuji-jax[viz]')")
    res = assembled["residual_valid"]
    summary = {
        "frames": assembled["frames"], "flagged": assembled["flagged"], "valid": assembled["valid"],
        "flag_counts": assembled["flag_counts"],
        "residual_mm_mean": float(np.mean(res)) if res.size else None,
        "residual_mm_median": float(np.median(res)) if res.size else None,
        "frames_per_second": stats["solved"] / wall if wall > 0 else None,
        "wall_seconds": wall, "solved_frames": stats["solved"], "resumed_frames": stats["resumed"],
        "files": len(files) - len(failed), "errors": errors, "notes": notes,
        "devices": [str(d) for d in devices], "batch_size": batch_size, "chunk_size": chunk_size,
        "iterations": int(config.iterations), "output": str(out),
        "plot": None if plot_path is None else str(plot_path),
        "summary": str(out.with_name(out.stem + "_summary.json")),
    }
    atomic_json(Path(summary["summary"]), summary)
    if not keep_parts:
        shutil.rmtree(parts_dir, ignore_errors=True)
    return summary


class Prefetch:
    """Iterate ``items`` (a generator) in a background thread, at most ``ahead`` items in advance:
    the next chunk is read while the current one is solved. An exception of the generator is raised
    where its item would have come; leaving the loop early stops the thread."""

    def __init__(self, items: Iterator, ahead: int = 2):
        self._q: queue.Queue = queue.Queue(ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(items,), name="wuji_jax-read", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, items: Iterator):
        try:
            for item in items:
                if not self._put(("item", item)):
                    return
            self._put(("end", None))
        except BaseException as e:  # handed to the consumer
            self._put(("error", e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def __iter__(self):
        try:
            while True:
                kind, value = self._q.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            self._stop.set()


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


class FileError(Exception):
    """A file that cannot be solved (unreadable, wrong shape, wrong units): one line naming it."""


def read_file(src: Any, name: str, chunk_size: int, fps: float | None,
               max_frames: int | None = wio.MAX_FRAMES, skip: int = 0) -> Iterator[tuple]:
    """:func:`wuji_jax.io.iter_chunks` of one file (from its frame ``skip`` on, a multiple of
    ``chunk_size``), its reading errors turned into :class:`FileError`."""
    if skip:
        it = wio.source_chunks(src, chunk_size, fps, wio.check_max_frames(max_frames), {}, skip)
    else:
        it = wio.iter_chunks(src, chunk_size, fps=fps, max_frames=max_frames)
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as e:  # any failure of one file's reading is that file's error
            msg = " ".join(str(e).split()) or type(e).__name__
            if not isinstance(e, (ValueError, OSError)):
                msg = f"{type(e).__name__}: {msg}"
            raise FileError(msg if msg.startswith(name) else f"{name}: {msg}") from None
        yield item


def _align(pos: int, cur_side: str | None, side: str, chunk_size: int) -> int:
    """Where a file of ``side`` starts: at ``pos``, or at the next chunk if the current one differs."""
    if cur_side is None or cur_side == side or pos % chunk_size == 0:
        return pos
    return -(-pos // chunk_size) * chunk_size


def _table(part: dict[str, np.ndarray], names: list[str], inspire: bool,
           hands: dict[str, Any]) -> dict[str, np.ndarray]:
    from .inspire import MOTOR_NAMES
    from .model import load_hand

    side = str(part["side"])
    if side not in hands:
        hands[side] = load_hand(side)
    hand = hands[side]
    m = part["frame"].shape[0]
    t: dict[str, np.ndarray] = {
        "frame": part["frame"], "timestamp": part["timestamp"],
        "source": np.asarray(names, dtype=str)[part["source"]] if m else np.zeros(0, "<U1"),
        "side": np.full(m, side),
    }
    for j, jn in enumerate(hand.joint_names):
        t[jn] = part["angles"][:, j]
    for j, mn in enumerate(hand.mimic_names):
        t[mn] = part["coupled"][:, j]
    for j, c in enumerate("wxyz"):
        t[f"wrist_q{c}"] = part["quaternion"][:, j]
    for j, c in enumerate("xyz"):
        t[f"wrist_{c}"] = part["translation"][:, j]
    for k in ("scale", "residual_mm", "valid", "converged"):
        t[k] = part[k]
    t["fit_flags"] = part["flags"]  # not "flags": pandas' DataFrame.flags would hide it
    if inspire:
        for j, mn in enumerate(MOTOR_NAMES):
            t[f"inspire_{mn}"] = part["inspire"][:, j]
    return t


class _Writer:
    """Appends tables to ``out`` in :func:`wuji_jax.io.write_results`' layout; streams Parquet/CSV."""

    def __init__(self, out: Path):
        self.out = out
        self.ext = out.suffix.lower()
        self.tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp{out.suffix}")
        self.pq_writer = None
        self.csv = None
        self.tables: list[dict] = []

    def write(self, table: dict[str, np.ndarray]):
        if self.ext in (".parquet", ".pq"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            t = wio.arrow_table(table, pa)
            if self.pq_writer is None:
                meta = {b"wuji_jax.shapes": json.dumps({k: [] for k in table}).encode(),
                        b"wuji_jax.names": json.dumps({}).encode()}
                self.schema = t.schema.with_metadata({**(t.schema.metadata or {}), **meta})
                self.pq_writer = pq.ParquetWriter(self.tmp, self.schema,
                                                  use_dictionary=wio.dictionary_columns(self.schema, pa))
            self.pq_writer.write_table(t.cast(self.schema))
        elif self.ext == ".csv":
            part = self.tmp.with_name(self.tmp.name + ".part.csv")
            wio.write_results(part, table)
            with open(part, encoding="utf-8", newline="") as f:
                header = f.readline()
                if self.csv is None:
                    self.csv = open(self.tmp, "w", encoding="utf-8", newline="")
                    self.csv.write(header)
                shutil.copyfileobj(f, self.csv)
            part.unlink()
        else:
            self.tables.append(table)

    def close(self):
        if self.pq_writer is not None:
            self.pq_writer.close()
        elif self.csv is not None:
            self.csv.close()
        elif self.tables:
            wio.write_results(self.tmp, {k: np.concatenate([t[k] for t in self.tables]) for k in self.tables[0]})
        os.replace(self.tmp, self.out)

    def abort(self):
        for h in (self.pq_writer, self.csv):
            try:
                if h is not None:
                    h.close()
            except Exception:  # best effort: the temporary file is removed next
                pass
        self.tmp.unlink(missing_ok=True)


class Assembler:
    """Appends solved parts, in stream order, to ``out`` (:class:`_Writer`) and keeps what the summary
    and the plot need: flag and valid counts, the valid frames' residuals, and a sample of every
    ``stride``-th row (``stride`` from ``n_rows``, the rows expected, so that at most
    ``_PLOT_POINTS`` are drawn). :meth:`close` renames the table into place."""

    def __init__(self, out: Path, names: list[str], inspire: bool, n_rows: int):
        self.out, self.names, self.inspire, self.n_rows = out, names, inspire, n_rows
        self.stride = max(1, -(-n_rows // _PLOT_POINTS))
        self.writer = _Writer(out)
        self.hands: dict[str, Any] = {}
        self.residual: list[np.ndarray] = []
        self.sample: list[dict] = []
        self.sources: set[int] = set()  # the files whose rows were written
        self.frames = self.flagged = self.valid = 0
        self.flag_counts = dict.fromkeys(FLAG_NAMES, 0)
        self.closed = False

    def add(self, part: dict[str, np.ndarray]) -> None:
        m = part["frame"].shape[0]
        if m == 0:
            return
        self.writer.write(_table(part, self.names, self.inspire, self.hands))
        self.sources.update(np.unique(part["source"]).tolist())
        flags, valid, residual = part["flags"], part["valid"], part["residual_mm"]
        self.flagged += int(np.count_nonzero(flags))
        for bit in self.flag_counts:
            self.flag_counts[bit] += int(np.count_nonzero(flags & bit))
        self.valid += int(np.count_nonzero(valid))
        self.residual.append(residual[valid & np.isfinite(residual)].astype(np.float64))
        rows = np.arange(self.frames, self.frames + m)
        pick = rows % self.stride == 0
        bad = ~valid[pick]  # drawn as gaps: their angles are only the start pose
        self.sample.append({"row": rows[pick], "t": part["timestamp"][pick],
                            "angles": np.where(bad[:, None], np.nan, part["angles"][pick]),
                            "residual_mm": np.where(bad, np.nan, residual[pick]),
                            "joint_names": self.hands[str(part["side"])].joint_names})
        self.frames += m

    def close(self) -> dict[str, Any]:
        """Finish the table (``out`` appears now) and return the statistics; a row count other than
        ``n_rows`` removes it and raises (the manifest and the parts disagree: never a silently wrong
        table)."""
        if self.frames != self.n_rows:
            self.abort()
            raise RuntimeError(f"{self.out}: assembled {self.frames} rows but the inputs hold {self.n_rows}; "
                               "run again with resume=False")
        self.writer.close()
        self.closed = True
        return {"frames": self.frames, "flagged": self.flagged, "valid": self.valid,
                "flag_counts": {FLAG_NAMES[b]: c for b, c in self.flag_counts.items()},
                "residual_valid": np.concatenate(self.residual) if self.residual else np.zeros(0),
                "sample": self.sample}

    def abort(self) -> None:
        """Remove the unfinished table (nothing once :meth:`close` has put it in place)."""
        if not self.closed:
            self.closed = True
            self.writer.abort()


def finish_table(stream: Assembler | None, complete: bool, out: Path, part_files: list[Path], failed: set[int],
                  files: Sequence[Any], inspire: bool, n_rows: int, digest: str) -> dict[str, Any]:
    """The table in place and its statistics: ``stream``'s where it was given every part
    (``complete``), holds the ``n_rows`` rows wanted (as many as it expected) and none of a ``failed``
    file; else it is dropped and the part files are assembled (:func:`_assemble`)."""
    if stream is not None and complete and stream.frames == n_rows == stream.n_rows and \
            not stream.sources & failed:
        return stream.close()
    if stream is not None:
        stream.abort()
    return _assemble(out, part_files, failed, files, inspire, n_rows, digest)


def _assemble(out: Path, part_files: list[Path], failed: set[int], files: Sequence[Any],
              inspire: bool, n_rows: int, digest: str) -> dict[str, Any]:
    """Concatenate the part files in order into ``out`` (the rows of ``failed`` files left out);
    :meth:`Assembler.close`'s statistics and plot sample."""
    asm = Assembler(out, [str(f) for f in files], inspire, n_rows)
    drop = np.fromiter(failed, np.int32, len(failed))
    try:
        for pf in part_files:
            try:
                part = read_part(pf)
            except Exception as e:  # a damaged part: removed, so that the next run solves it again
                pf.unlink(missing_ok=True)
                raise RuntimeError(f"{pf}: damaged part ({type(e).__name__}: {e}); removed: run the same "
                                   "command again to solve its frames anew") from None
            if str(part.get("run")) != digest:
                raise RuntimeError(f"{pf}: written by another run (different inputs or settings); run again "
                                   "with --no-resume (resume=False)")
            keep = ~np.isin(part["source"], drop)
            if not keep.all():
                part = {k: (v if v.ndim == 0 else v[keep]) for k, v in part.items()}
            asm.add(part)
    except BaseException:
        asm.abort()
        raise
    return asm.close()


def _import_writers(plot: bool, parquet: bool) -> None:
    """Import what writes the plot and the Parquet table (in a thread of its own, ahead of use)."""
    if parquet:
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:  # the writer says so
            pass
    if plot:
        try:
            from .viz import agg_figure_classes

            agg_figure_classes()
        except ImportError:  # said by plot_angles, in the run's notes
            pass


def plot_angles(path: Path, sample: list[dict], one_source: bool) -> Path:
    """Angles over time (five finger panels, degrees) and the residual, from the strided sample."""
    from .viz import agg_figure_classes

    Figure, FigureCanvasAgg = agg_figure_classes()
    rows = np.concatenate([s["row"] for s in sample])
    t = np.concatenate([s["t"] for s in sample])
    ang = np.degrees(np.concatenate([s["angles"] for s in sample]).astype(np.float64))
    res = np.concatenate([s["residual_mm"] for s in sample]).astype(np.float64)
    names = sample[0]["joint_names"]
    use_t = one_source and t.size > 0 and np.isfinite(t).all()
    x = t if use_t else rows
    fig = Figure(figsize=(10.0, 12.0), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(6, 1, sharex=True)
    for f, (ax, finger) in enumerate(zip(axes, _FINGERS)):
        for j in range(4 * f, 4 * f + 4):
            label = names[j].replace("_finger", "").split("_", 1)[1] if "_" in names[j] else names[j]
            ax.plot(x, ang[:, j], linewidth=1.0, label=label)
        ax.set_ylabel(f"{finger} (deg)", fontsize=9)
        ax.legend(fontsize=7, loc="upper right", ncol=4)
        ax.grid(alpha=0.3)
    axes[5].plot(x, res, color="k", linewidth=0.8)
    axes[5].set_ylabel("residual (mm)", fontsize=9)
    axes[5].grid(alpha=0.3)
    axes[5].set_xlabel("time (s)" if use_t else "frame (output row)", fontsize=9)
    fig.suptitle(f"joint angles and fit residual, {rows.size:,} frames shown", fontsize=11)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.045, top=0.955, hspace=0.12)  # tight_layout: +0.36 s
    fig.savefig(path, pil_kwargs={"compress_level": 1})  # PNG level 6: +0.2 s for a few % of size
    return path
