"""The safety limits on data files, and the one wrapper that holds every format reader to them.

A small file must not cause unbounded work, and every failure reading a data file is one line,
``ValueError("<path>: <problem>; <what to do>")``. The readers of :mod:`wuji_jax.data.formats` parse;
this module decides what they may read:

* :class:`Limits`: the numbers in force for one read (frames per file, expansion of compressed or
  sparse data, line length, size of a ``.json`` read whole). :func:`wuji_jax.data.io.current_limits`
  builds it from ``wuji_jax.io``'s constants at call time, so setting ``wuji_jax.io.MAX_EXPANSION``
  takes effect on the next read;
* :func:`check_declared`: a frame count a file declares up front, refused before any frame is read
  when it exceeds ``max_frames`` or expands too far over the bytes stored;
* :class:`Lines`: a text file's lines, each at most ``max_line_chars`` long, UTF-8;
* :func:`open_source`: the checks before a file is opened (exists, a regular file, not empty);
* :func:`checked` and :func:`guard`: the wrapper around a reader's chunks: shapes, non-finite
  values (inf → NaN), flags for frames without a hand, timestamps that must not go backwards,
  ``max_frames``, at least one frame; any library error (``csv.Error``, ``zlib.error``, h5py's or
  pyarrow's ``OSError`` ...) becomes the one-line ``ValueError`` with the frames read before it.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..hand.landmarks import NUM_LANDMARKS

__all__ = ["Limits", "MAX_FRAMES", "MAX_EXPANSION", "EXPANSION_MIN_BYTES", "MAX_LINE_CHARS", "MAX_JSON_BYTES",
           "DEGENERATE_EXTENT", "FORMATS_HINT", "err", "why", "is_ours", "size_text", "check_declared",
           "too_many", "Lines", "open_source", "checked", "guard", "check_max_frames", "check_fps",
           "degenerate_frames"]

#: Most frames one data file may hold (10 million frames are 5 GB of float64 landmarks in memory):
#: the default of ``max_frames=`` of :func:`~wuji_jax.data.io.load_landmarks` /
#: :func:`~wuji_jax.data.io.iter_chunks`, which set it per call.
MAX_FRAMES = 10_000_000

#: A compressed or sparse container (``.npz``, Parquet, HDF5) may expand its landmark data to at most
#: this many times the bytes it stores ...
MAX_EXPANSION = 100
#: ... once the expanded data exceeds this many bytes (smaller files are never refused for it).
EXPANSION_MIN_BYTES = 64 << 20

#: Longest CSV / JSONL line read, in characters (a frame's line is ~1-2 kB).
MAX_LINE_CHARS = 1 << 20

#: Largest ``.json`` file read: it is parsed whole (~10 times its size in memory); JSONL is streamed.
MAX_JSON_BYTES = 256 << 20

#: A frame is degenerate when its 21 finite landmarks fit in a box of this side, in the landmarks'
#: own unit (1 micrometre for metres; a hand spans 5-40 cm, and even normalised image coordinates
#: span ~0.01).
DEGENERATE_EXTENT = 1e-6

#: What to do when an optional parser (pyarrow, h5py) is missing.
FORMATS_HINT = "install the formats extra: pip install 'wuji-jax[formats]'"


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits of one read.

    Attributes:
        max_frames: most frames one file may hold, or None for no limit.
        max_expansion: most times compressed or sparse landmark data may expand over its stored bytes ...
        expansion_min_bytes: ... once it expands to more than this many bytes.
        max_line_chars: longest line of a text file (CSV, JSONL), in characters.
        max_json_bytes: largest ``.json`` file, which is parsed whole.
    """

    max_frames: int | None = MAX_FRAMES
    max_expansion: float = MAX_EXPANSION
    expansion_min_bytes: int = EXPANSION_MIN_BYTES
    max_line_chars: int = MAX_LINE_CHARS
    max_json_bytes: int = MAX_JSON_BYTES


def err(path: Any, problem: str) -> ValueError:
    """The one-line ``ValueError("<path>: <problem>")``; multi-line reasons from libraries are folded."""
    return ValueError(f"{path}: {' '.join(str(problem).split())}")


def why(e: BaseException) -> str:
    """A library's exception as short text for a one-line message: its type and its first words."""
    text = " ".join(str(e).split())
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def is_ours(e: BaseException, path: Any) -> bool:
    """True for a one-line error of :func:`err` about ``path``."""
    return isinstance(e, ValueError) and str(e).startswith(f"{path}: ")


def size_text(n: float) -> str:
    """Bytes as short text: ``"1.5 MB"``."""
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{int(n)} B"


def check_declared(path: Any, what: str, frames: int, declared: float, stored: float | None,
                   limits: Limits) -> None:
    """Refuse a declared frame count the file cannot back or that exceeds ``limits.max_frames``.

    ``declared``: bytes the data expands to; ``stored``: bytes the file really holds for it (None for
    uncompressed data, whose size the reader checks against the file itself).
    """
    if (stored is not None and declared > limits.expansion_min_bytes
            and declared > limits.max_expansion * stored):
        raise err(path, f"{what} declares {frames:,} frames ({size_text(declared)}) but stores "
                        f"{size_text(stored)}: over {limits.max_expansion}-fold expansion, a decompression "
                        "bomb, never-written (sparse) storage or one frame repeated; export the real data "
                        "again (limit: wuji_jax.io.MAX_EXPANSION)")
    if limits.max_frames is not None and frames > limits.max_frames:
        raise err(path, f"{what} declares {frames:,} frames, more than the limit of {limits.max_frames:,}; "
                        f"if the file is genuine raise it to {frames} or more (--max-frames at the command "
                        "line, max_frames= in Python)")


def too_many(path: Any, max_frames: int, where: str) -> ValueError:
    """The error for a file found holding more than ``max_frames`` frames at ``where``."""
    return err(path, f"holds more than the limit of {max_frames:,} frames ({where}); if the file is "
                     "genuine raise it (--max-frames at the command line, max_frames= in Python)")


class Lines:
    """A text file's lines of at most ``max_line_chars`` characters, counted (``.num``); a line that is
    longer or not UTF-8 is the one-line error."""

    def __init__(self, f, path: Any, max_line_chars: int = MAX_LINE_CHARS):
        self.f, self.path, self.num, self.limit = f, path, 0, max_line_chars

    def __iter__(self):
        return self

    def __next__(self) -> str:
        limit = self.limit
        try:
            line = self.f.readline(limit + 1)
        except UnicodeDecodeError as e:
            raise err(self.path, f"not UTF-8 text at or after line {self.num + 1} ({why(e)}); "
                                 "save the file as UTF-8") from None
        if not line:
            raise StopIteration
        self.num += 1
        if len(line) > limit:
            raise err(self.path, f"line {self.num} is longer than {limit:,} characters; not a landmark "
                                 "file (a frame's line is ~2 kB)")
        return line


def open_source(path: Path, suffixes: tuple[str, ...], use: str) -> None:
    """Refuse a path that is no readable data file before any reader opens it: missing, a pipe or a
    device (which would block or never end), a suffix not among ``suffixes`` (the message says "use
    one of ``use``"), or empty."""
    if not path.exists():
        raise err(path, "no such file")
    if not path.is_file():
        raise err(path, "not a regular file (a pipe, socket or device); save the data to a file first")
    if path.suffix.lower() not in suffixes:
        raise err(path, f"unsupported extension '{path.suffix}'; use one of {use}")
    if path.stat().st_size == 0:
        raise err(path, "the file is empty (0 bytes); export it again")


def check_max_frames(max_frames: Any) -> int | None:
    """``max_frames`` as an int, or None; a ``ValueError`` unless it is a positive integer."""
    if max_frames is None:
        return None
    if isinstance(max_frames, bool) or not isinstance(max_frames, (int, np.integer)) or max_frames < 1:
        raise ValueError(f"max_frames must be a positive integer (or None for no limit), got "
                         f"{max_frames!r}")
    return int(max_frames)


def check_fps(fps: Any) -> float | None:
    """``fps`` (frames per second) as a float, or None; ``ValueError`` (one line) unless it is a finite
    number > 0: an infinite or negative rate would give every frame the same or a backward time."""
    if fps is None:
        return None
    try:
        value = float(fps)
    except (TypeError, ValueError):
        raise ValueError(f"fps must be a number > 0, got {fps!r}") from None
    if isinstance(fps, bool) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"fps must be a finite number > 0, got {fps!r}")
    return value


def degenerate_frames(landmarks: Any) -> np.ndarray:
    """Frames whose 21 landmarks all sit at one point: ``(..., 21, 3)`` → bool ``(...)``.

    True where all 63 values are finite and the landmarks' bounding box is smaller than
    :data:`DEGENERATE_EXTENT` (1e-6, in the landmarks' own unit) along every axis, i.e. the
    largest of ``max - min`` over the 21 points in x, y and z is below it. Such a frame is no hand
    (all zeros, one point repeated, a placeholder export): 1e-6 is 1 µm for metres, while a real
    hand spans 5-40 cm in metres, 50-400 in millimetres, tens of pixels, ~0.01 and more in
    normalised image coordinates. Frames with a NaN/inf are False here (they are flagged as
    missing anyway). :func:`~wuji_jax.data.io.load_landmarks` flags degenerate frames ``detected``
    False and notes them; :func:`~wuji_jax.data.io.iter_chunks` yields them as they are.
    """
    a = np.asarray(landmarks, dtype=np.float64)
    if a.shape[-2:] != (NUM_LANDMARKS, 3):
        raise ValueError(f"degenerate_frames: landmarks have shape {a.shape}, expected (..., 21, 3)")
    x = a.reshape(-1, 3 * NUM_LANDMARKS)
    extent = np.zeros(x.shape[0])
    with np.errstate(invalid="ignore"):
        for k in range(3):  # per axis over rows of 63: fast reductions along the last axis
            c = x[:, k::3]
            extent = np.maximum(extent, c.max(axis=1) - c.min(axis=1))
    return (np.isfinite(x).all(axis=1) & (extent < DEGENERATE_EXTENT)).reshape(a.shape[:-2])


def checked(path: Any, chunks: Iterator[dict], fps: float | None,
            max_frames: int | None = None, first: int = 0) -> Iterator[dict]:
    """Shape checks, inf → NaN, flags (missing, degenerate), timestamps that must not go backwards,
    at least one frame, at most ``max_frames``; the chunks start at frame ``first`` of the source.

    Each chunk gets ``detected`` ``(n,)`` bool, ``start`` (its first frame's index) and, where the
    source has times or ``fps`` is given, ``timestamps`` ``(n,)`` float64 seconds.
    """
    start = first
    last_t = -math.inf
    for c in chunks:
        w = np.array(c["world"], dtype=np.float64)  # a private copy: never a view of a memmap
        n = w.shape[0]
        assert w.shape == (n, NUM_LANDMARKS, 3), w.shape
        if max_frames is not None and start + n > max_frames:
            raise too_many(path, max_frames, f"frame {max_frames:,} and on")
        w[np.isinf(w)] = np.nan
        finite = np.isfinite(w).all(axis=(1, 2))
        c["world"] = w
        c["detected"] = (finite & ~degenerate_frames(w)
                         & np.asarray(c.get("detected", True), dtype=bool))
        t = c.get("timestamps")
        if t is None and fps is not None:
            t = (start + np.arange(n)) / fps
        if t is not None:
            t = np.asarray(t, np.float64)
            ok = t[np.isfinite(t)]
            if ok.size:
                seq = np.concatenate([[last_t], ok])
                back = np.flatnonzero(np.diff(seq) < 0)
                if back.size:
                    j = int(back[0])
                    # index of the offending frame among this chunk's frames
                    frame = start + int(np.flatnonzero(np.isfinite(t))[j])
                    raise err(path, f"timestamps go backwards at frame {frame} ({seq[j]:.6g} s → "
                                    f"{seq[j + 1]:.6g} s); sort the frames by time or fix the times")
                last_t = float(ok[-1])
            c["timestamps"] = t
        c["start"] = start
        start += n
        yield c
    if start == 0:
        raise err(path, "contains no frames; expected at least one row of 21 landmarks")


def guard(path: Any, chunks: Iterator[dict]) -> Iterator[dict]:
    """Any failure while reading a data file → the one-line ``ValueError`` naming it.

    The readers name the line or frame where they know it; anything that still escapes them
    (``csv.Error``, ``RecursionError``, ``zlib.error``, ``struct.error``, h5py's and pyarrow's
    errors on damaged files, ...) is reported with the number of frames read before it.
    ``MemoryError`` and ``KeyboardInterrupt`` pass through.
    """
    n = 0
    try:
        for c in chunks:
            n += len(c["world"])
            yield c
    except ValueError as e:
        if is_ours(e, path):
            raise
        raise err(path, _unreadable(path, n, e)) from e
    except MemoryError:
        raise
    except Exception as e:
        raise err(path, _unreadable(path, n, e)) from e


def _unreadable(path: Any, n: int, e: BaseException) -> str:
    where = f" after {n:,} frames" if n else ""
    kind = Path(path).suffix.lower().lstrip(".") or "data"
    return (f"cannot read this {kind} file{where} ({why(e)}); it may be truncated or corrupt: export "
            "it again")
