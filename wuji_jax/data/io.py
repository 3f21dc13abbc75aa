"""Landmark datasets in and result tables out. Reading and writing only: no fitting, no filtering.

Inputs (:func:`load_landmarks`, :func:`iter_chunks`) hold MediaPipe's 21 hand landmarks per frame,
``(N, 21, 3)`` in metres:

=========================  ====================================================================
``.npy``                   one array ``(N, 21, 3)`` (or ``(21, 3)``, one frame); no timestamps
``.npz``                   array ``landmarks`` (or ``world``, MediaPipe's ``world_landmarks`` or
                           ``hand_world_landmarks``, or the only array); optional
                           ``timestamps`` ``(N,)`` seconds, ``handedness``, ``score``, ``detected``,
                           ``image`` (as :meth:`LandmarkRecording.save` writes them)
``.csv``                   header line, then one row a frame: ``x0,y0,z0,...,x20,y20,z20`` (or
                           MediaPipe's names, ``wrist_x`` ... ``pinky_tip_z``, in any case) and
                           optional ``timestamp`` (seconds), ``frame``, ``handedness``, ``score``;
                           empty cells read as NaN; ``;`` (with decimal commas) or tab separators
                           where the header has no comma (``.tsv``: the same)
``.jsonl``                 one JSON object a line: ``{"t": seconds, "landmarks": [[x, y, z]] * 21}``
                           (``"landmarks": null`` for a frame without a hand; the key may be one of
                           the npz's names, a landmark ``{"x": .., "y": .., "z": ..}``)
``.json``                  a list of the JSONL's objects (or of bare ``[[x, y, z]] * 21`` / ``null``),
                           or ``{"frames": [...]}``; read whole (at most :data:`MAX_JSON_BYTES`)
``.parquet``               the CSV's columns, or one column of lists named as the npz's array (each
                           row 21 ``[x, y, z]`` or 63 numbers, null: no hand) (needs ``pyarrow``:
                           ``pip install wuji-jax[formats]``)
``.h5`` / ``.hdf5``        dataset ``landmarks`` (or one of the npz's names, or the only dataset)
                           and optional ``timestamps`` (needs ``h5py``: ``pip install
                           wuji-jax[formats]``)
videos, image folders      MediaPipe world landmarks via :func:`wuji_jax.video.extract_landmarks`,
                           cached (needs ``pip install wuji-jax[video]``)
=========================  ====================================================================

Several files, globs (``"data/*.csv"``) and folders load into one :class:`LandmarkRecording`
with per-frame provenance (``source_index``, ``frame_index``). Frames with NaN/inf or without a
detected hand are kept and flagged (``detected`` False), never dropped. Anything that makes a file
unusable raises ``ValueError("<path>: <problem>; <what to do>")`` on one line; with
``on_error="skip"`` that line goes to ``notes`` and the other files still load. That includes
malformed content that trips a library (``csv.Error``, ``RecursionError``, ``UnicodeDecodeError``,
``zlib.error``, h5py's / pyarrow's ``OSError``, ...): every failure reading a data file is that
one-line ``ValueError``, naming the line or frame where known.

Limits on hostile or broken files (a small file must not cause unbounded work):

* at most :data:`MAX_FRAMES` frames per file (``max_frames=`` of :func:`load_landmarks` /
  :func:`iter_chunks` raises or lifts it); a count the file declares up front (``.npy``, ``.npz``,
  Parquet, HDF5) is checked before any frame is read;
* a compressed or sparse container (``.npz``, Parquet, HDF5) whose landmark data would expand to more
  than :data:`MAX_EXPANSION` times the bytes it stores (and to more than
  :data:`EXPANSION_MIN_BYTES`) is refused: a decompression bomb, a never-written sparse HDF5 dataset,
  or one frame repeated. Real landmarks compress about 1.1-fold; only a recording with a hand in
  under ~1 % of its frames comes near 100-fold;
* HDF5 data stored in other files (external storage, virtual datasets, external or soft links) is
  refused, never followed;
* CSV and JSONL lines longer than :data:`MAX_LINE_CHARS` characters are refused (a frame is ~2 kB);
* Parquet is read by row batches with no pre-buffering, only the needed columns.

Frames whose 21 landmarks all sit at one point (:func:`degenerate_frames`, e.g. all zeros) are not
hands: they are kept and flagged (``detected`` False) and noted.

Each format is one module of :mod:`wuji_jax.data.formats` (the registry: suffix → reader; pyarrow,
h5py, NumPy and Python's ``json`` parse), and every reader is held to the limits above by one wrapper,
:mod:`wuji_jax.data.limits` (:func:`current_limits` reads them from this module at call time).

Outputs (:func:`write_results`): a dict of ``(N, ...)`` arrays as ``.parquet``, ``.csv`` (both
open with ``pandas.read_parquet`` / ``pandas.read_csv`` as they are) or ``.npz``.
"""

from __future__ import annotations

import csv
import hashlib
import glob as _glob
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..hand.landmarks import NUM_LANDMARKS
from . import formats
from .formats.base import need
from .formats.columns import (LANDMARK_COLUMNS, LANDMARK_KEYS, check_unique_columns, hand_labels,
                              unique_keys)
from .formats.parquet import arrow_table, dictionary_columns
from .limits import (DEGENERATE_EXTENT, EXPANSION_MIN_BYTES, MAX_EXPANSION, MAX_FRAMES, MAX_JSON_BYTES,
                     MAX_LINE_CHARS, Limits, check_fps, check_max_frames, checked, degenerate_frames, err, guard,
                     open_source)
from .recording import DATA_EXTENSIONS, IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, LandmarkRecording

__all__ = [
    "content_hash",
    "LandmarkRecording",
    "load_landmarks",
    "iter_chunks",
    "write_landmarks",
    "write_results",
    "read_results",
    "check_units",
    "degenerate_frames",
    "check_fps",
    "check_unique_columns",
    "unique_keys",
    "current_limits",
    "MAX_FRAMES",
    "MAX_JSON_BYTES",
    "MAX_EXPANSION",
    "EXPANSION_MIN_BYTES",
    "MAX_LINE_CHARS",
    "DEGENERATE_EXTENT",
    "LANDMARK_COLUMNS",
    "LANDMARK_KEYS",
    "DATA_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "IMAGE_EXTENSIONS",
]

# The limits (MAX_FRAMES ... MAX_JSON_BYTES) are defined in wuji_jax.data.limits and read from this
# module at call time (current_limits): setting wuji_jax.io.MAX_EXPANSION accepts an exceptional file.
_RESULT_EXTENSIONS = (".parquet", ".pq", ".npz", ".csv")


def current_limits(max_frames: int | None = MAX_FRAMES) -> Limits:
    """The :class:`~wuji_jax.data.limits.Limits` in force now: this module's :data:`MAX_EXPANSION`,
    :data:`EXPANSION_MIN_BYTES`, :data:`MAX_LINE_CHARS` and :data:`MAX_JSON_BYTES` as they are set at
    the call, with ``max_frames`` (None: no limit)."""
    return Limits(max_frames=max_frames, max_expansion=MAX_EXPANSION, expansion_min_bytes=EXPANSION_MIN_BYTES,
                  max_line_chars=MAX_LINE_CHARS, max_json_bytes=MAX_JSON_BYTES)


def _empty_fields(n: int) -> dict[str, np.ndarray]:
    return {"timestamps": np.full(n, np.nan), "handedness": np.full(n, "", dtype="<U5"),
            "score": np.full(n, np.nan)}


# ------------------------------------------------------------------------------------------------
# Finding files
# ------------------------------------------------------------------------------------------------


def is_glob(s: str) -> bool:
    return any(c in s for c in "*?[")


def expand_sources(sources: Any) -> list[Any]:
    """Paths / globs / folders / camera indices → list of concrete sources, in order."""
    if isinstance(sources, (str, os.PathLike, int)) and not isinstance(sources, bool):
        sources = [sources]
    out: list[Any] = []
    for s in sources:
        if isinstance(s, int) and not isinstance(s, bool):
            out.append(s)
            continue
        p = Path(s)
        if isinstance(s, str) and is_glob(s) and not p.exists():
            hits = sorted(_glob.glob(s, recursive=True))
            if not hits:
                raise err(s, "the pattern matches no files; check the path and the quoting of '*'")
            out.extend(expand_sources(hits))
        elif p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            # a folder's .json files are mostly other things (run summaries, settings): read when named
            data = [f for f in files if f.suffix.lower() in DATA_EXTENSIONS + VIDEO_EXTENSIONS
                    and f.suffix.lower() != ".json"]
            images = [f for f in files if f.suffix.lower() in IMAGE_EXTENSIONS]
            if data:
                out.extend(data)
            elif images:
                out.append(p)  # a folder of frames: one source
            else:
                raise err(p, "the folder holds no landmark files, videos or images; expected one of "
                             + ", ".join(e for e in DATA_EXTENSIONS + VIDEO_EXTENSIONS if e != ".json")
                             + " (a .json file is read when named, not from a folder)")
        else:
            out.append(p)
    return out


# ------------------------------------------------------------------------------------------------
# Reading: one source's chunks through the format registry, held to the limits
# ------------------------------------------------------------------------------------------------


def _read_video(path: Path, chunk: int, video_options: Mapping[str, Any]) -> Iterator[dict]:
    from . import video

    rec = video.extract_landmarks(path, **video_options)
    n = len(rec)
    if n and not rec.detected.any():
        raise err(path, f"no hand detected in any of its {n} frames; check that the video shows a "
                        "hand, or lower min_confidence")
    meta = {"fps": rec.fps, "notes": rec.notes}
    for s in range(0, n, chunk):
        sl = slice(s, s + chunk)
        out = {"world": rec.world[sl], "timestamps": rec.timestamps[sl], "detected": rec.detected[sl],
               "handedness": rec.handedness[sl], "score": rec.score[sl], "frame": rec.frame_index[sl]}
        if rec.image is not None:
            out["image"] = rec.image[sl]
        if s == 0:
            out["meta"] = meta
        yield out


def _reader(path: Any, chunk: int, video_options: Mapping[str, Any],
            max_frames: int | None = None, skip: int = 0) -> Iterator[dict]:
    """The raw chunks of one source from frame ``skip`` on (a multiple of ``chunk``): data files
    through the format registry (:func:`wuji_jax.data.formats.read`, whose seeking formats start
    there), videos and image folders through :mod:`wuji_jax.data.video` (read from the start and the
    frames before ``skip`` dropped)."""
    if skip and (isinstance(path, int) or Path(path).is_dir()
                 or Path(path).suffix.lower() in VIDEO_EXTENSIONS + IMAGE_EXTENSIONS):
        return formats.skip_rows(_reader(path, chunk, video_options, max_frames), skip, chunk)
    if max_frames is not None and max_frames != MAX_FRAMES and "max_frames" not in video_options:
        # videos: a max_frames the caller set stops the extraction there, as it always did when it
        # reached wuji_jax.video.extract_landmarks through **video_options (the default is not
        # passed on: it would change the extraction cache's keys)
        video_options = {**video_options, "max_frames": max_frames}
    if isinstance(path, int):
        return _read_video(path, chunk, video_options)
    path = Path(path)
    if path.is_dir():
        return _read_video(path, chunk, video_options)
    open_source(path, DATA_EXTENSIONS + VIDEO_EXTENSIONS + IMAGE_EXTENSIONS,
                ", ".join(DATA_EXTENSIONS + VIDEO_EXTENSIONS) + " or a folder of images")
    if path.suffix.lower() in VIDEO_EXTENSIONS + IMAGE_EXTENSIONS:
        return _read_video(path, chunk, video_options)
    return formats.read(path, chunk, current_limits(max_frames), skip)


def _frames(src: Any, chunk: int, video_options: Mapping[str, Any], fps: float | None,
            max_frames: int | None, skip: int = 0) -> Iterator[dict]:
    """One source's checked chunks (from frame ``skip`` on, see :func:`_reader`); for data files every
    failure is the one-line ``ValueError``."""
    chunks = checked(src, _reader(src, chunk, video_options, max_frames, skip), fps, max_frames, skip)
    if isinstance(src, int) or Path(src).suffix.lower() not in DATA_EXTENSIONS:
        return chunks  # videos and image folders: wuji_jax.video's own errors
    return guard(src, chunks)


def iter_chunks(source: Any, chunk_size: int = 4096, *, fps: float | None = None,
                max_frames: int | None = MAX_FRAMES,
                **video_options: Any) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Stream landmarks in chunks with bounded memory.

    Yields ``(start, landmarks, timestamps)``: ``start`` the global index of the chunk's first frame,
    ``landmarks`` ``(n, 21, 3)`` float64 metres (NaN for missing or non-finite values), ``timestamps``
    ``(n,)`` float64 seconds (NaN where unknown, ``i / fps`` when ``fps`` is given). ``.npy`` files
    are memory-mapped, Parquet is read by row batches, CSV and JSONL are streamed; ``.npz`` members,
    ``.json`` files and videos are loaded whole. Several files / globs / folders are chained in order.

    ``max_frames`` (default :data:`MAX_FRAMES`, None for no limit) caps each file's frames: a file
    declaring more is refused before any frame is read, one found holding more when it is reached
    (a one-line ``ValueError``). For videos and image folders a ``max_frames`` you set is passed to
    :func:`wuji_jax.video.extract_landmarks`, which stops after that many frames. Every failure
    reading a data file is a one-line ``ValueError`` naming it.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    max_frames = check_max_frames(max_frames)
    fps = check_fps(fps)
    offset = 0
    for src in expand_sources(source):
        for start, world, t in source_chunks(src, chunk_size, fps, max_frames, video_options):
            yield offset + start, world, t
        offset = offset + start + world.shape[0]


def source_chunks(src: Any, chunk_size: int, fps: float | None, max_frames: int | None,
                   video_options: Mapping[str, Any], skip: int = 0) -> Iterator[tuple]:
    """:func:`iter_chunks` of one source from its frame ``skip`` on (a multiple of ``chunk_size``;
    the formats that can, start reading there: see :func:`_reader`)."""
    for c in _frames(src, chunk_size, video_options, fps, max_frames, skip):
        n = c["world"].shape[0]
        t = c.get("timestamps")
        yield c["start"], c["world"], (np.full(n, np.nan) if t is None else t)


def load_landmarks(sources: Any, *, fps: float | None = None, on_error: str = "raise",
                   max_frames: int | None = MAX_FRAMES, **video_options: Any) -> LandmarkRecording:
    """Load one or several landmark files, globs, folders, videos or image folders.

    Args:
        sources: a path, a glob string, a folder, a camera index, or a list of these.
        fps: frames per second to assume for sources without timestamps (else their timestamps are
            NaN).
        on_error: ``"raise"`` (default) raises the first file's one-line ``ValueError``;
            ``"skip"`` records it in ``notes`` and loads the remaining files.
        max_frames: the most frames one data file may hold (default :data:`MAX_FRAMES`; None: no
            limit); a file with more is that file's ``ValueError``. For videos and image folders a
            value you set is passed to :func:`wuji_jax.video.extract_landmarks` (stop after that many
            frames).
        **video_options: passed to :func:`wuji_jax.video.extract_landmarks` for videos and image
            folders (``model``, ``hand``, ``mirrored``, ``min_confidence``, ``progress``, ``cache``).

    Returns:
        a :class:`LandmarkRecording`; each frame's file is ``sources[source_index[i]]``. Timestamps
        restart with each source (see :meth:`LandmarkRecording.segments`).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    fps = check_fps(fps)
    max_frames = check_max_frames(max_frames)
    parts: list[dict] = []
    names: list[str] = []
    notes: list[str] = []
    fps_seen: list[float] = []
    for src in expand_sources(sources):
        try:
            chunks = list(_frames(src, 1 << 20, video_options, fps, max_frames))
        except ValueError as e:
            if on_error == "raise":
                raise
            notes.append(f"skipped {e}")
            continue
        meta = chunks[0].get("meta", {})
        name = f"camera {src}" if isinstance(src, int) else str(src)
        k = len(names)
        names.append(name)
        notes.extend(meta.get("notes", ()))
        if meta.get("fps"):
            fps_seen.append(float(meta["fps"]))
        elif fps is not None:
            fps_seen.append(float(fps))
        part = _concat_chunks(chunks)
        part["source_index"] = np.full(len(part["world"]), k, np.int64)
        parts.append(part)
        notes.extend(_file_notes(name, part))
    if not parts:
        raise ValueError(" ".join(("nothing loaded: " + "; ".join(notes)).split()))
    has_image = all("image" in p for p in parts)
    merged = {k: np.concatenate([p[k] for p in parts]) for k in
              ("world", "timestamps", "detected", "handedness", "score", "source_index", "frame")}
    sides = {names[i]: _majority(p["handedness"]) for i, p in enumerate(parts)}
    distinct = {s for s in sides.values() if s}
    if len(distinct) > 1:
        notes.append("mixed handedness across sources: "
                     + ", ".join(f"{s} in {n}" for n, s in sides.items() if s))
    uniq_fps = sorted(set(fps_seen))
    return LandmarkRecording(
        world=merged["world"], timestamps=merged["timestamps"], detected=merged["detected"],
        handedness=merged["handedness"].astype("<U5"), score=merged["score"],
        image=np.concatenate([p["image"] for p in parts]) if has_image else None,
        fps=uniq_fps[0] if len(uniq_fps) == 1 else None, sources=tuple(names),
        source_index=merged["source_index"], frame_index=merged["frame"].astype(np.int64),
        notes=tuple(notes))


def _concat_chunks(chunks: list[dict]) -> dict[str, np.ndarray]:
    n_total = sum(len(c["world"]) for c in chunks)
    out = {"world": np.concatenate([c["world"] for c in chunks]),
           "detected": np.concatenate([c["detected"] for c in chunks])}
    fill = _empty_fields(n_total)
    fill["frame"] = np.arange(n_total, dtype=np.float64)
    for k, default in fill.items():
        if any(k in c for c in chunks):
            vals = []
            for c in chunks:
                m = len(c["world"])
                vals.append(c[k] if k in c else default[:m])
            v = np.concatenate(vals)
            if k == "handedness":
                v = hand_labels(v.tolist())
            elif k == "frame":
                bad = ~np.isfinite(v.astype(np.float64))
                v = np.where(bad, np.arange(n_total), v).astype(np.int64)
            out[k] = v
        else:
            out[k] = default if k != "frame" else default.astype(np.int64)
    if all("image" in c for c in chunks):
        out["image"] = np.concatenate([np.asarray(c["image"], np.float64) for c in chunks])
    return out


def _majority(h: np.ndarray) -> str:
    right, left = int(np.count_nonzero(h == "Right")), int(np.count_nonzero(h == "Left"))
    return "" if right == left == 0 else ("Right" if right >= left else "Left")


def _file_notes(name: str, part: dict[str, np.ndarray]) -> list[str]:
    notes = []
    n = len(part["world"])
    missing = np.flatnonzero(~part["detected"])
    if missing.size:
        notes.append(f"{name}: {missing.size} of {n} frames have no hand, non-finite values or all "
                     f"landmarks at one point (first at frame {int(part['frame'][missing[0]])}); kept "
                     "and flagged")
    h = part["handedness"]
    right, left = int(np.count_nonzero(h == "Right")), int(np.count_nonzero(h == "Left"))
    if right and left:
        notes.append(f"{name}: mixed handedness, {right} frames Right and {left} Left")
    units = check_units(part["world"])
    if units:
        notes.append(f"{name}: {units}")
    return notes


# ------------------------------------------------------------------------------------------------
# Unit check
# ------------------------------------------------------------------------------------------------


def check_units(landmarks: Any) -> str | None:
    """Describe a suspected unit problem in ``(*, 21, 3)`` landmarks meant to be metres, or None.

    Judged on the median over finite frames of the hand size (wrist → middle-finger MCP, typically
    6–12 cm) and extent (bounding-box diagonal, typically 5–40 cm). Recognises millimetres,
    centimetres, pixels and MediaPipe's normalised image coordinates. Frames whose 21 landmarks sit
    at one point (:func:`degenerate_frames`) are never fine: the units are judged without them and
    the description says how many there are. None when nothing looks wrong, or when no frame is
    finite.
    """
    a = np.asarray(landmarks, dtype=np.float64)
    if a.shape[-2:] != (NUM_LANDMARKS, 3):
        raise ValueError(f"check_units: landmarks have shape {a.shape}, expected (*, 21, 3)")
    a = a.reshape(-1, NUM_LANDMARKS, 3)
    a = a[np.isfinite(a).all(axis=(1, 2))]
    if a.shape[0] == 0:
        return None
    deg = degenerate_frames(a)
    if deg.all():
        return (f"all {a.shape[0]} finite frames have their 21 landmarks at one point (zero extent): "
                "not hand landmarks; check the export")
    flat = None
    if deg.any():
        first = int(np.flatnonzero(degenerate_frames(np.asarray(landmarks, np.float64)
                                                     .reshape(-1, NUM_LANDMARKS, 3)))[0])
        flat = (f"{int(deg.sum())} of {a.shape[0]} finite frames have their 21 landmarks at one point "
                f"(zero extent, first at frame {first}): not hands")
        a = a[~deg]
    units = _unit_problem(a)
    if flat is None:
        return units
    return flat if units is None else f"{units}; {flat}"


def _unit_problem(a: np.ndarray) -> str | None:
    size = float(np.median(np.linalg.norm(a[:, 9] - a[:, 0], axis=-1)))
    extent = float(np.median(np.linalg.norm(a.max(axis=1) - a.min(axis=1), axis=-1)))
    what = f"hand size (wrist to middle-finger MCP, median of {a.shape[0]} frames) is {size:.4g}"
    if size > 200:
        return f"{what}: looks like pixels; use MediaPipe's world landmarks, which are in metres"
    if size >= 30:
        return (f"{what}: looks like millimetres (or pixels); divide millimetres by 1000, or use "
                "MediaPipe's world landmarks instead of pixel coordinates")
    if size >= 3:
        return f"{what}: looks like centimetres; divide by 100 to get metres"
    xy = a[..., :2]
    normalised = (xy.min() >= -0.05 and xy.max() <= 1.05
                  and float(np.median(np.abs(a[:, 0, 2]))) < 1e-4
                  and float(np.median(np.linalg.norm(a[:, 0, :2], axis=-1))) > 0.05)
    if normalised:
        return ("values look like MediaPipe normalised image coordinates (x, y in [0, 1], wrist z = 0), "
                "not metres; use the world landmarks (hand_world_landmarks)")
    if not 0.03 <= size <= 0.25:
        return f"{what}, expected 0.06–0.12 m for metres; check the units"
    if not 0.05 <= extent <= 0.40:
        return (f"hand extent (bounding-box diagonal, median) is {extent:.4g}, expected 0.05–0.40 m; "
                "the landmarks may be scrambled or in mixed units")
    return None


# ------------------------------------------------------------------------------------------------
# Writers
# ------------------------------------------------------------------------------------------------


def write_landmarks(path: str | os.PathLike, landmarks: Any, timestamps: Any = None, *,
                    handedness: Any = None, score: Any = None) -> Path:
    """Write ``(N, 21, 3)`` landmarks (or a :class:`LandmarkRecording`) in any input format.

    The format follows the extension: ``.npy`` (landmarks only), ``.npz``, ``.csv``, ``.jsonl``,
    ``.parquet``, ``.h5``/``.hdf5``. :func:`load_landmarks` reads every one back.
    """
    path = Path(path)
    if isinstance(landmarks, LandmarkRecording):
        if path.suffix.lower() == ".npz":
            return landmarks.save(path)
        rec = landmarks
        landmarks, timestamps = rec.world, rec.timestamps if timestamps is None else timestamps
        handedness = rec.handedness if handedness is None else handedness
        score = rec.score if score is None else score
    w = np.asarray(landmarks, dtype=np.float64)
    if w.ndim != 3 or w.shape[1:] != (NUM_LANDMARKS, 3):
        raise err(path, f"landmarks have shape {w.shape}, expected (N, 21, 3)")
    n = w.shape[0]
    cols: dict[str, np.ndarray] = {}
    if timestamps is not None:
        cols["timestamp"] = np.asarray(timestamps, np.float64).reshape(n)
    if handedness is not None:
        cols["handedness"] = np.asarray(handedness, dtype=str).reshape(n)
    if score is not None:
        cols["score"] = np.asarray(score, np.float64).reshape(n)
    ext = path.suffix.lower()
    if ext == ".npy":
        np.save(path, w)
    elif ext == ".npz":
        extra = {("timestamps" if k == "timestamp" else k): v for k, v in cols.items()}
        np.savez_compressed(path, landmarks=w, **extra)
    elif ext in (".csv", ".parquet", ".pq"):
        table = {**cols}
        flat = w.reshape(n, 3 * NUM_LANDMARKS)
        for j, c in enumerate(LANDMARK_COLUMNS):
            table[c] = flat[:, j]
        write_results(path, table)
    elif ext in (".jsonl", ".ndjson"):
        with open(path, "w", encoding="utf-8") as f:
            for i in range(n):
                rec: dict[str, Any] = {}
                if "timestamp" in cols:
                    rec["t"] = _json_num(cols["timestamp"][i])
                if np.isfinite(w[i]).all():
                    rec["landmarks"] = w[i].tolist()
                else:
                    rec["landmarks"] = [[_json_num(x) for x in p] for p in w[i]] if np.isfinite(
                        w[i]).any() else None
                if "handedness" in cols:
                    rec["handedness"] = str(cols["handedness"][i])
                if "score" in cols:
                    rec["score"] = _json_num(cols["score"][i])
                f.write(json.dumps(rec) + "\n")
    elif ext in (".h5", ".hdf5"):
        h5py = need("h5py", path)
        with h5py.File(path, "w") as f:
            f.create_dataset("landmarks", data=w, chunks=(min(max(n, 1), 4096), NUM_LANDMARKS, 3))
            if "timestamp" in cols:
                f.create_dataset("timestamps", data=cols["timestamp"])
    else:
        raise err(path, f"unsupported extension '{path.suffix}'; use .npy, .npz, .csv, .jsonl, "
                        ".parquet or .h5")
    return path


def _json_num(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _columns(table: Mapping[str, Any], names: Mapping[str, Sequence[str]] | None,
             path: Path) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    """Flatten ``(N, ...)`` arrays into 1-D columns; remember trailing shapes."""
    names = dict(names or {})
    cols: dict[str, np.ndarray] = {}
    shapes: dict[str, list[int]] = {}
    n = None
    for key, value in table.items():
        a = np.asarray(value)
        if a.ndim == 0:
            raise err(path, f"'{key}' is a scalar; every entry must be an (N, ...) array")
        if a.dtype.kind == "O":
            raise err(path, f"'{key}' holds Python objects; pass numbers, bools or strings")
        if n is None:
            n = a.shape[0]
        elif a.shape[0] != n:
            raise err(path, f"'{key}' has {a.shape[0]} rows, the others {n}; all arrays need the "
                            "same first dimension")
        shapes[key] = list(a.shape[1:])
        if a.ndim == 1:
            cols[key] = a
            continue
        flat = a.reshape(a.shape[0], -1)
        if key in names:
            labels = list(names[key])
            if len(labels) != flat.shape[1]:
                raise err(path, f"{len(labels)} names for '{key}', which has {flat.shape[1]} columns")
            labels = [f"{key}_{lab}" if lab in table else str(lab) for lab in labels]
        else:
            idx = np.stack(np.unravel_index(np.arange(flat.shape[1]), a.shape[1:]), axis=-1)
            labels = [key + "_" + "_".join(str(int(i)) for i in row) for row in idx]
        for j, lab in enumerate(labels):
            if lab in cols:
                raise err(path, f"column name '{lab}' occurs twice; rename '{key}' or its names")
            cols[lab] = flat[:, j]
    return cols, shapes


def write_results(path: str | os.PathLike, table: Mapping[str, Any], *,
                  names: Mapping[str, Sequence[str]] | None = None) -> Path:
    """Write a dict of ``(N, ...)`` arrays as ``.parquet``, ``.csv`` or ``.npz``.

    In Parquet and CSV each 1-D array is one column and an ``(N, k)`` array becomes columns
    ``name_0 .. name_{k-1}`` (``(N, a, b)``: ``name_i_j``), or the labels in ``names[name]``, e.g.
    ``names={"angles": hand.joint_names}``; ``pandas.read_parquet`` / ``pandas.read_csv`` open the
    files as they are. ``.npz`` keeps the arrays with their shapes. Floats keep full precision.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in _RESULT_EXTENSIONS:
        raise err(path, f"unsupported extension '{path.suffix}' for results; use .parquet, .csv or "
                        ".npz")
    if ext == ".npz":
        arrays = {}
        for k, v in table.items():
            a = np.asarray(v)
            if a.dtype.kind == "O":
                raise err(path, f"'{k}' holds Python objects; pass numbers, bools or strings")
            arrays[k] = a
        _columns(table, names, path)  # same row-count checks as the other formats
        np.savez_compressed(path, **arrays)
        return path
    cols, shapes = _columns(table, names, path)
    if ext in (".parquet", ".pq"):
        pa = need("pyarrow", path)
        pq = need("pyarrow.parquet", path)
        t = arrow_table(cols, pa)
        meta = {b"wuji_jax.shapes": json.dumps(shapes).encode(),
                b"wuji_jax.names": json.dumps({k: list(v) for k, v in (names or {}).items()}).encode()}
        t = t.replace_schema_metadata({**(t.schema.metadata or {}), **meta})
        pq.write_table(t, path, use_dictionary=dictionary_columns(t.schema, pa))
        return path
    keys = list(cols)
    texts = [_csv_texts(cols[k]) for k in keys]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(keys)
        w.writerows(zip(*texts))
    return path


def _csv_texts(a: np.ndarray) -> list[str]:
    if a.dtype.kind == "f":
        return [repr(float(x)) for x in a.tolist()]  # shortest text that round-trips exactly
    if a.dtype.kind == "b":
        return ["True" if x else "False" for x in a.tolist()]
    return [str(x) for x in a.tolist()]


def read_results(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a table written by :func:`write_results` back into arrays.

    ``.npz`` and ``.parquet`` restore the original shapes and keys; for ``.csv`` columns named
    ``name_0 .. name_{k-1}`` (``name_i_j`` ...) are stacked back into ``(N, k)`` (``(N, a, b)``)
    arrays; columns written under ``names`` labels stay separate.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if not path.exists():
        raise err(path, "no such file")
    if ext == ".npz":
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    if ext in (".parquet", ".pq"):
        pq = need("pyarrow.parquet", path)
        t = pq.read_table(path)
        meta = t.schema.metadata or {}
        cols = {name: np.asarray(t.column(name).to_numpy(zero_copy_only=False))
                for name in t.column_names}
        if b"wuji_jax.shapes" in meta:
            shapes = json.loads(meta[b"wuji_jax.shapes"])
            names = json.loads(meta.get(b"wuji_jax.names", b"{}"))
            out = {}
            for key, shape in shapes.items():
                if not shape:
                    out[key] = cols[key]
                    continue
                k = int(np.prod(shape))
                if key in names:
                    labels = [f"{key}_{lab}" if lab in shapes else str(lab) for lab in names[key]]
                else:
                    idx = np.stack(np.unravel_index(np.arange(k), shape), axis=-1)
                    labels = [key + "_" + "_".join(str(int(i)) for i in row) for row in idx]
                out[key] = np.stack([cols[lab] for lab in labels], axis=1).reshape(-1, *shape)
            return out
        return _regroup(cols)
    if ext == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        if not rows:
            raise err(path, "the file is empty")
        header, body = rows[0], rows[1:]
        cols = {}
        for j, name in enumerate(header):
            texts = [r[j] for r in body]
            cols[name] = _parse_column(texts)
        return _regroup(cols)
    raise err(path, f"unsupported extension '{path.suffix}' for results; use .parquet, .csv or .npz")


def _parse_column(texts: list[str]) -> np.ndarray:
    """A CSV column's texts as bools (all ``True`` / ``False``), else float64 (empty: NaN), else strings;
    converted by NumPy a column at a time."""
    a = np.asarray(texts, dtype=str)
    if a.size and np.isin(a, ("True", "False")).all():
        return a == "True"
    try:
        return np.where(a == "", "nan", a).astype(np.float64)
    except ValueError:
        return a


def _regroup(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stack columns ``name_i`` / ``name_i_j`` that fill a full index grid from 0 into arrays."""
    groups: dict[tuple[str, int], dict[tuple[int, ...], str]] = {}
    for name in cols:
        m = re.fullmatch(r"(.+?)((?:_\d+)+)", name)
        if m:
            idx = tuple(int(x) for x in m.group(2).split("_")[1:])
            groups.setdefault((m.group(1), len(idx)), {})[idx] = name
    stacked: dict[str, tuple[str, np.ndarray]] = {}  # first column → (key, array)
    used: set[str] = set()
    for (base, _), members in groups.items():
        dims = tuple(max(i[d] for i in members) + 1 for d in range(len(next(iter(members)))))
        if base in cols or len(members) != int(np.prod(dims)):
            continue
        order = [members[i] for i in np.ndindex(*dims)]
        arr = np.stack([cols[c] for c in order], axis=1).reshape(-1, *dims)
        stacked[order[0]] = (base, arr)
        used.update(order)
    out: dict[str, np.ndarray] = {}
    for name, v in cols.items():
        if name in stacked:
            out[stacked[name][0]] = stacked[name][1]
        elif name not in used:
            out[name] = v
    return out


def content_hash(path: Path) -> str:
    """SHA-256 of a file's bytes (small next to solving the frames it holds).

    Read in 16 MiB blocks: hashing releases the GIL, but every block takes it back, and while
    another thread holds it (the writers' imports run beside this) each return waits up to the
    switch interval, so small blocks are slow."""
    h = hashlib.sha256()
    buf = bytearray(16 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
