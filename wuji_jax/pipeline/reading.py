"""The dataset runner's reading: frame counts from the files' headers before a job starts
(:func:`count_frames`, :func:`most_frames`), a file's chunks with its errors as :class:`FileError`
(:func:`read_file`), read a chunk ahead in a thread (:class:`Prefetch`), and a file's side
(:func:`side_of_file`). Used by :func:`wuji_jax.batch.solve_dataset` and :mod:`wuji_jax.ray_cluster`."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..data import io as wio

__all__ = ["count_frames", "total_frames", "most_frames", "Prefetch", "FileError", "read_file", "side_of_file"]


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

            from ..data.formats.npy import npz_entries, npz_header

            with zipfile.ZipFile(p) as z:
                members = npz_entries(z)
                key = next((k for k in wio.LANDMARK_KEYS if k in members), None)
                if key is None and len(members) == 1:
                    key = next(iter(members))
                if key is None:
                    return None
                shape = npz_header(z, members[key])[0]
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
    """At most how many frames ``files`` hold, to decide whether a job is small
    (:func:`~wuji_jax.runner.kernel.quick_job`):
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


def side_of_file(side: str, world: np.ndarray, path: str, notes: list) -> str:
    from ..hand.landmarks import detect_side

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


class Prefetch:
    """Iterate ``items`` (a generator) in a background thread, at most ``ahead`` items in advance:
    the next chunk is read while the current one is solved. An exception of the generator is raised
    where its item would have come. Use it as ``with Prefetch(items) as chunks: for ... in chunks``:
    leaving the block, the loop finished or not, stops the thread and joins it."""

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
        while True:
            kind, value = self._q.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value

    def close(self) -> None:
        """Stop the reading thread and join it (it sees the stop within its 0.1 s put timeout)."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> "Prefetch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
