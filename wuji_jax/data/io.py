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

Outputs (:func:`write_results`): a dict of ``(N, ...)`` arrays as ``.parquet``, ``.csv`` (both
open with ``pandas.read_parquet`` / ``pandas.read_csv`` as they are) or ``.npz``.
"""

from __future__ import annotations

import csv
import glob as _glob
import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..hand.landmarks import NUM_LANDMARKS
from .recording import DATA_EXTENSIONS, IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, LandmarkRecording

__all__ = [
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

#: Column names of the wide table layout (CSV, Parquet): x0, y0, z0, ..., x20, y20, z20.
LANDMARK_COLUMNS: tuple[str, ...] = tuple(f"{a}{i}" for i in range(NUM_LANDMARKS) for a in "xyz")
_RESULT_EXTENSIONS = (".parquet", ".pq", ".npz", ".csv")

_TIME_COLUMNS = ("timestamp", "timestamps", "t", "time")
#: names of the landmark array (npz, HDF5) or key (JSONL), in order of preference: ours, and MediaPipe's
#: for world landmarks (metres)
LANDMARK_KEYS: tuple[str, ...] = ("landmarks", "world", "world_landmarks", "hand_world_landmarks")
_KEYS_SAID = "'landmarks' (or " + ", ".join(f"'{k}'" for k in LANDMARK_KEYS[1:]) + ")"


def _image_keys_hint(keys) -> str:
    """A hint where ``keys`` hold MediaPipe's image landmarks but not its world landmarks."""
    if any(str(k).lower() in ("hand_landmarks", "image_landmarks", "normalized_landmarks") for k in keys):
        return (" ('hand_landmarks' are MediaPipe's normalised image coordinates; the fit needs its world "
                "landmarks in metres, 'hand_world_landmarks')")
    return ""

#: Most frames one data file may hold (10 million frames are 5 GB of float64 landmarks in memory):
#: the default of ``max_frames=`` of :func:`load_landmarks` / :func:`iter_chunks`, which set it per
#: call.
MAX_FRAMES = 10_000_000

#: A compressed or sparse container (``.npz``, Parquet, HDF5) may expand its landmark data to at most
#: this many times the bytes it stores ...
MAX_EXPANSION = 100
#: ... once the expanded data exceeds this many bytes (smaller files are never refused for it).
#: Both are read at call time: set ``wuji_jax.io.MAX_EXPANSION`` to accept an exceptional file.
EXPANSION_MIN_BYTES = 64 << 20

#: Longest CSV / JSONL line read, in characters (a frame's line is ~1-2 kB).
MAX_LINE_CHARS = 1 << 20

#: Largest ``.json`` file read: it is parsed whole (~10 times its size in memory); JSONL is streamed.
MAX_JSON_BYTES = 256 << 20

#: A frame is degenerate when its 21 finite landmarks fit in a box of this side, in the landmarks'
#: own unit (1 micrometre for metres; a hand spans 5-40 cm, and even normalised image coordinates
#: span ~0.01).
DEGENERATE_EXTENT = 1e-6
_FORMATS_HINT = "install the formats extra: pip install 'wuji-jax[formats]'"


def _empty_fields(n: int) -> dict[str, np.ndarray]:
    return {"timestamps": np.full(n, np.nan), "handedness": np.full(n, "", dtype="<U5"),
            "score": np.full(n, np.nan)}


# ------------------------------------------------------------------------------------------------
# Finding files
# ------------------------------------------------------------------------------------------------


def _err(path: Any, problem: str) -> ValueError:
    # One line, always: multi-line reasons from libraries are folded.
    return ValueError(f"{path}: {' '.join(problem.split())}")


def _why(e: BaseException) -> str:
    """A library's exception as short text for a one-line message: its type and its first words."""
    text = " ".join(str(e).split())
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _ours(e: BaseException, path: Any) -> bool:
    """True for this module's one-line error about ``path``."""
    return isinstance(e, ValueError) and str(e).startswith(f"{path}: ")


def _size(n: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{int(n)} B"


def _check_declared(path: Any, what: str, frames: int, declared: float, stored: float | None,
                    max_frames: int | None) -> None:
    """Refuse a declared frame count the file cannot back or that exceeds ``max_frames``.

    ``declared``: bytes the data expands to; ``stored``: bytes the file really holds for it (None for
    uncompressed data, whose size the reader checks against the file itself).
    """
    if stored is not None and declared > EXPANSION_MIN_BYTES and declared > MAX_EXPANSION * stored:
        raise _err(path, f"{what} declares {frames:,} frames ({_size(declared)}) but stores "
                         f"{_size(stored)}: over {MAX_EXPANSION}-fold expansion, a decompression bomb, "
                         "never-written (sparse) storage or one frame repeated; export the real data "
                         "again (limit: wuji_jax.io.MAX_EXPANSION)")
    if max_frames is not None and frames > max_frames:
        raise _err(path, f"{what} declares {frames:,} frames, more than the limit of {max_frames:,}; if "
                         f"the file is genuine raise it to {frames} or more (--max-frames at the command "
                         "line, max_frames= in Python)")


def _too_many(path: Any, max_frames: int, where: str) -> ValueError:
    return _err(path, f"holds more than the limit of {max_frames:,} frames ({where}); if the file is "
                      "genuine raise it (--max-frames at the command line, max_frames= in Python)")


class _Lines:
    """A text file's lines of at most :data:`MAX_LINE_CHARS` characters, counted (``.num``)."""

    def __init__(self, f, path: Any):
        self.f, self.path, self.num = f, path, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        limit = MAX_LINE_CHARS
        try:
            line = self.f.readline(limit + 1)
        except UnicodeDecodeError as e:
            raise _err(self.path, f"not UTF-8 text at or after line {self.num + 1} ({_why(e)}); "
                                  "save the file as UTF-8") from None
        if not line:
            raise StopIteration
        self.num += 1
        if len(line) > limit:
            raise _err(self.path, f"line {self.num} is longer than {limit:,} characters; not a landmark "
                                  "file (a frame's line is ~2 kB)")
        return line


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
                raise _err(s, "the pattern matches no files; check the path and the quoting of '*'")
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
                raise _err(p, "the folder holds no landmark files, videos or images; expected one of "
                              + ", ".join(e for e in DATA_EXTENSIONS + VIDEO_EXTENSIONS if e != ".json")
                              + " (a .json file is read when named, not from a folder)")
        else:
            out.append(p)
    return out


# ------------------------------------------------------------------------------------------------
# Per-format chunk readers. Each yields dicts with "world" (n, 21, 3) and optionally
# "timestamps", "frame", "handedness", "score", "detected", "image" (n, ...) and "meta".
# ------------------------------------------------------------------------------------------------


def _check_shape(shape: tuple, path: Any, what: str) -> tuple:
    """The ``(N, 21, 3)`` shape an array of ``shape`` stands for, or a one-line error."""
    shape = tuple(int(x) for x in shape)
    if shape == (NUM_LANDMARKS, 3):
        return (1, NUM_LANDMARKS, 3)
    if len(shape) == 2 and shape[1] == 3 * NUM_LANDMARKS:
        raise _err(path, f"{what} has shape {shape}, expected (N, 21, 3); if each row is "
                         "x0, y0, z0, ..., x20, y20, z20 reshape it with a.reshape(-1, 21, 3)")
    if len(shape) == 3 and shape[1:] == (3, NUM_LANDMARKS):
        raise _err(path, f"{what} has shape {shape}, expected (N, 21, 3); if its axes are frame, "
                         "coordinate, landmark, swap the last two with a.transpose(0, 2, 1)")
    if len(shape) != 3 or shape[1:] != (NUM_LANDMARKS, 3):
        raise _err(path, f"{what} has shape {shape}, expected (N, 21, 3): N frames of MediaPipe's "
                         "21 hand landmarks (x, y, z)")
    return shape


def _landmark_array(a: np.ndarray, path: Path, what: str = "array") -> np.ndarray:
    if a.dtype.kind not in "fiu":
        raise _err(path, f"{what} has dtype {a.dtype}, not numbers; store float landmarks in metres")
    return a.reshape(_check_shape(a.shape, path, what))


def _read_npy(path: Path, chunk: int, max_frames: int | None, skip: int = 0) -> Iterator[dict]:
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e) or "Object arrays" in str(e) or "Python objects" in str(e):
            raise _err(path, "holds Python objects (pickled), not a numeric array; save a float "
                             "array of shape (N, 21, 3)") from e
        raise _err(path, f"truncated or corrupt .npy file ({e}); export it again") from e
    except (OSError, EOFError) as e:
        raise _err(path, f"truncated or corrupt .npy file ({e}); export it again") from e
    a = _landmark_array(a, path)
    # memory-mapped: the file's size already backs the declared count (np.load checks it)
    _check_declared(path, "the array", a.shape[0], 0, None, max_frames)
    for s in range(skip, a.shape[0], chunk):
        yield {"world": np.array(a[s:s + chunk], dtype=np.float64)}


_NPZ_FIELDS = ("timestamps", "t", "frame", "frame_index", "handedness", "score", "detected", "image")


def _npy_header(zf, info) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of an ``.npz`` member from its ``.npy`` header, without reading its data."""
    from numpy.lib import format as fmt

    with zf.open(info) as m:
        version = fmt.read_magic(m)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(m)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(m)
        else:
            shape, _, dtype = fmt._read_array_header(m, version)
    return tuple(int(x) for x in shape), np.dtype(dtype)


def _read_npz(path: Path, chunk: int, max_frames: int | None, skip: int = 0) -> Iterator[dict]:
    # npz members are zip entries: loaded whole (use .npy, Parquet, CSV or HDF5 for huge files), after
    # their .npy headers are checked against max_frames and against the bytes the zip stores.
    import zipfile
    import zlib

    from numpy.lib import format as fmt

    broken = (zipfile.BadZipFile, zlib.error, EOFError, OSError)
    with open(path, "rb") as fh:
        try:
            zf = zipfile.ZipFile(fh)
        except broken as e:
            raise _err(path, f"truncated or corrupt .npz file ({_why(e)}); export it again") from e
        with zf:
            members = {}
            for info in zf.infolist():
                name = info.filename
                members[name[:-4] if name.endswith(".npy") else name] = info
            keys = list(members)
            key = next((k for k in LANDMARK_KEYS if k in keys), None)
            if key is None and len(keys) == 1:
                key = keys[0]
            elif key is None and not keys:
                raise _err(path, "the .npz holds no arrays; save the landmarks as np.savez(path, "
                                 "landmarks=a)")
            elif key is None:
                raise _err(path, f"the .npz holds arrays {keys} but none named {_KEYS_SAID}"
                                 f"{_image_keys_hint(keys)}; save the (N, 21, 3) array as landmarks=...")

            def header(k: str) -> tuple[tuple[int, ...], np.dtype]:
                info = members[k]
                if not info.filename.endswith(".npy"):
                    raise _err(path, f"member '{info.filename}' is not an .npy array; save the arrays "
                                     "with np.savez")
                try:
                    shape, dtype = _npy_header(zf, info)
                except broken as e:
                    raise _err(path, f"truncated or corrupt .npz file ({_why(e)}); export it "
                                     "again") from e
                except Exception as e:
                    raise _err(path, f"member '{info.filename}' is not a readable .npy array "
                                     f"({_why(e)}); save plain numeric arrays") from e
                if dtype.hasobject:
                    raise _err(path, f"array '{k}' holds Python objects (pickled), not numbers; save "
                                     "plain numeric arrays")
                return shape, dtype

            shape, dtype = header(key)
            if dtype.kind not in "fiu":
                raise _err(path, f"array '{key}' has dtype {dtype}, not numbers; store float landmarks "
                                 "in metres")
            shape = _check_shape(shape, path, f"array '{key}'")
            n = shape[0]
            load = {key: (shape, dtype)}
            for k in _NPZ_FIELDS:
                if k not in keys:
                    continue
                kshape, kdtype = header(k)
                name = {"t": "timestamps", "frame_index": "frame"}.get(k, k)
                expect = shape if name == "image" else (n,)
                if kshape != expect and not (name == "image" and n == 1 and kshape == shape[1:]):
                    raise _err(path, f"array '{k}' has shape {kshape}, expected {expect} to match "
                                     f"'{key}'")
                kinds = "US" if name == "handedness" else "fiub"
                if kdtype.kind not in kinds:
                    raise _err(path, f"array '{k}' has dtype {kdtype}, expected "
                                     + ("strings" if name == "handedness" else "numbers"))
                load[k] = (kshape, kdtype)
            for k, ok in (("fps", lambda sh, dt: sh == () and dt.kind in "fiu"),
                          ("notes", lambda sh, dt: len(sh) == 1 and dt.kind in "US")):
                if k in keys:
                    ksh, kdt = header(k)
                    if ok(ksh, kdt):
                        load[k] = (ksh, kdt)
            declared = sum(math.prod(sh) * dt.itemsize for sh, dt in load.values())
            stored = min(sum(members[k].compress_size for k in load), os.path.getsize(path))
            _check_declared(path, f"array '{key}'", n, declared, stored, max_frames)
            arrays = {}
            for k in load:
                try:
                    with zf.open(members[k]) as m:
                        arrays[k] = fmt.read_array(m, allow_pickle=False)
                except broken as e:
                    raise _err(path, f"truncated or corrupt .npz file ({_why(e)}); export it "
                                     "again") from e
                except ValueError as e:
                    raise _err(path, f"truncated or corrupt .npz member '{members[k].filename}' "
                                     f"({_why(e)}); export it again") from e
    world = arrays.pop(key).reshape(shape)
    extra: dict[str, np.ndarray] = {}
    for k, v in arrays.items():
        if k in ("fps", "notes"):
            continue
        name = {"t": "timestamps", "frame_index": "frame"}.get(k, k)
        if name == "handedness":
            extra[name] = v.astype(str)
        elif name == "detected":
            extra[name] = v.astype(bool)
        else:
            extra[name] = np.asarray(v, np.float64).reshape(shape if name == "image" else (n,))
    meta = {}
    if "fps" in arrays and np.isfinite(arrays["fps"]):
        meta["fps"] = float(arrays["fps"])
    if "notes" in arrays:
        meta["notes"] = tuple(str(s) for s in arrays["notes"].tolist())
    for s in range(skip, max(n, 1), chunk):
        out = {"world": np.asarray(world[s:s + chunk], np.float64)}
        for k, v in extra.items():
            out[k] = v[s:s + chunk]
        if s == 0:
            out["meta"] = meta
        yield out


def _squeezed(name: str) -> str:
    """A column name without case and separators (``_``, ``.``, ``-``, spaces): ``WRIST.x`` → ``wristx``."""
    return re.sub(r"[\s_.\-]", "", name.lower())


def _landmark_spellings() -> dict[str, str]:
    """Other spellings of the landmark columns (:func:`_squeezed`) → ``x0`` … ``z20``: the landmark by
    its index or by MediaPipe's name (``wrist``, ``thumb_cmc``, ``index_finger_tip``, see
    :data:`wuji_jax.landmarks.LANDMARK_NAMES`), before or after the axis: ``x_0``, ``0_x``,
    ``WRIST_x``, ``wrist.x``, ``x_wrist``, ``Thumb CMC X``."""
    from ..hand.landmarks import LANDMARK_NAMES

    out = {}
    for i, name in enumerate(LANDMARK_NAMES):
        for a in "xyz":
            for who in (str(i), _squeezed(name)):
                out[who + a] = out[a + who] = f"{a}{i}"
    return out


def check_unique_columns(header: Sequence[str], path: Any, role: Callable[[str], str | None]) -> None:
    """Refuse a table whose columns are ambiguous: two columns (the same name twice, or two spellings)
    that ``role`` maps to one meaning (``role(name)``: what a column of that name stands for, e.g.
    ``"landmark coordinate (x8)"``, or None for a column the reader does not use). Raises a one-line
    ``ValueError`` naming the file and the columns: a reader that kept the first or the last copy
    would give a silently wrong answer."""
    by_role: dict[str, list[int]] = {}
    for i, h in enumerate(header):
        r = role(str(h))
        if r is not None:
            by_role.setdefault(r, []).append(i)
    for r, where in by_role.items():
        if len(where) > 1:
            names = [str(header[i]).strip() for i in where]
            if len(set(names)) == 1:
                raise _err(path, f"column {names[0]!r} appears {len(where)} times (columns "
                                 f"{', '.join(str(i + 1) for i in where)}); keep one of them")
            raise _err(path, f"columns {', '.join(map(repr, names))} name the same {r}; keep one of them")


def unique_keys(path: Any, where: str = "") -> Callable[[list], dict]:
    """A ``json.load`` ``object_pairs_hook`` that refuses an object holding one key twice (JSON keeps the
    last copy silently): a one-line ``ValueError`` naming ``path`` (and ``where``, e.g. ``"line 3"``)."""
    def hook(pairs: list) -> dict:
        d = dict(pairs)
        if len(d) != len(pairs):
            seen: set = set()
            twice = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise _err(path, f"{where + ': ' if where else ''}key {twice!r} appears twice in one JSON object; "
                             "keep one of them")
        return d
    return hook


def _landmark_role(spellings: Mapping[str, str]) -> Callable[[str], str | None]:
    """What a column of a landmark table stands for (:func:`check_unique_columns`)."""
    optional = {name: what for names, what in ((_TIME_COLUMNS, "time"), (("frame", "frame_index"), "frame"),
                                              (("handedness",), "handedness"), (("score",), "score"),
                                              (LANDMARK_KEYS, "landmarks"))
                for name in names}

    def role(name: str) -> str | None:
        h = name.strip().lower()
        if h in optional:
            return optional[h]
        c = h if h in LANDMARK_COLUMNS else spellings.get(_squeezed(h))
        return None if c is None else f"landmark coordinate ({c})"
    return role


def _wide_columns(header: Sequence[str], path: Path) -> dict[str, int]:
    """Column name → index for the landmark and optional columns of a CSV / Parquet table. The
    landmark columns are ``x0`` … ``z20``, or where a table has none of a landmark's column under that
    name, the one column that spells it otherwise (:func:`_landmark_spellings`). Two columns for one
    of them (a name twice, or two spellings) are refused (:func:`check_unique_columns`)."""
    check_unique_columns(header, path, _landmark_role(_landmark_spellings()))
    lower = [h.strip().lower() for h in header]
    pos = {h: i for i, h in enumerate(lower)}
    spelled: dict[str, list[int]] = {}
    spellings = _landmark_spellings()
    for i, h in enumerate(lower):
        c = spellings.get(_squeezed(h))
        if c is not None and h != c:
            spelled.setdefault(c, []).append(i)
    for c, where in spelled.items():
        if c in pos:
            continue
        if len(where) > 1:
            raise _err(path, f"columns {', '.join(repr(header[i].strip()) for i in where)} name the same "
                             f"landmark coordinate ({c}); keep one of them")
        pos[c] = where[0]
    missing = [c for c in LANDMARK_COLUMNS if c not in pos]
    if missing:
        if "residual_mm" in pos and "thumb_cmc_flex" in pos:
            raise _err(path, "a table of solved joint angles (what wuji-jax solve writes), not landmarks; "
                             "give it to wuji-jax inspire --angles, view or pose --angles-file")
        if len(missing) == len(LANDMARK_COLUMNS):
            try:
                [float(h) for h in header if h.strip()]
                numeric = len(header) > 0
            except ValueError:
                numeric = False
            if numeric:
                raise _err(path, "the first line is numbers, not a header; add the header line "
                                 "x0,y0,z0,...,x20,y20,z20 (optionally timestamp,frame)")
            squeezed = {_squeezed(h): h.strip() for h in header}
            which = next((squeezed[k] for k in ("landmarkindex", "landmark", "landmarkid", "keypoint", "point")
                          if k in squeezed), None)
            if which is not None and {"x", "y", "z"} <= set(squeezed):
                frame = next((squeezed[k] for k in ("frame", "frameindex", "timestamp", "t") if k in squeezed),
                             "frame")
                raise _err(path, f"one row a landmark (columns x, y, z and '{which}'); pivot it to one row a "
                                 f"frame with columns x0 ... z20, e.g. with pandas: w = df.pivot(index='{frame}', "
                                 f"columns='{which}', values=['x', 'y', 'z']); w.columns = [f'{{a}}{{i}}' for a, i "
                                 "in w.columns]; w.reset_index().to_csv('wide.csv', index=False)")
        shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
        raise _err(path, f"missing landmark columns {shown} ({len(missing)} of 63); expected "
                         "x0,y0,z0,...,x20,y20,z20 (or MediaPipe's landmark names: wrist_x, thumb_cmc_x, ..., "
                         "pinky_tip_z) and optional timestamp, frame, handedness, score")
    return {**{c: pos[c] for c in LANDMARK_COLUMNS}, **_optional_columns(pos)}


def _optional_columns(pos: Mapping[str, int]) -> dict[str, int]:
    """``timestamps``, ``frame``, ``handedness``, ``score`` → their column's index, where a table has
    them (``pos``: lower-case column name → index)."""
    cols = {}
    for name in _TIME_COLUMNS:
        if name in pos:
            cols["timestamps"] = pos[name]
            break
    for name, key in (("frame", "frame"), ("frame_index", "frame"), ("handedness", "handedness"),
                      ("score", "score")):
        if name in pos and key not in cols:
            cols[key] = pos[name]
    return cols


def _read_csv(path: Path, chunk: int, max_frames: int | None) -> Iterator[dict]:
    """A CSV file, its fields separated by ``,``, or where its header has no comma by ``;`` (then a
    decimal comma is read too, as spreadsheets of many locales write it) or a tab."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        lines = _Lines(f, path)
        first = next(lines, "")
        sep = next((d for d in (",", ";", "\t") if d in first), ",")
        reader = csv.reader(itertools.chain([first] if first else [], lines), delimiter=sep)
        try:
            yield from _csv_rows(path, reader, chunk, max_frames, sep)
        except csv.Error as e:
            # e.g. "field larger than field limit (131072)", a NUL byte, an unterminated quote
            raise _err(path, f"line {max(lines.num, 1)}: not a readable CSV row ({_why(e)}); a "
                             f"landmark CSV holds short numeric fields separated by {sep!r}") from None


def _csv_rows(path: Path, reader, chunk: int, max_frames: int | None, sep: str = ",") -> Iterator[dict]:
    try:
        header = next(reader)
    except StopIteration:
        raise _err(path, "the file has no lines; expected a header and one row a frame") from None
    cols = _wide_columns(header, path)
    lm_idx = [cols[c] for c in LANDMARK_COLUMNS]
    num_keys = [k for k in ("timestamps", "frame", "score") if k in cols]
    width = len(header)
    rows: list[list[float]] = []
    extra: dict[str, list] = {k: [] for k in num_keys + (["handedness"] if "handedness" in cols else [])}
    total = 0

    def flush():
        out = {"world": np.asarray(rows, np.float64).reshape(-1, NUM_LANDMARKS, 3)}
        for k, v in extra.items():
            out[k] = np.asarray(v, dtype=str if k == "handedness" else np.float64)
            v.clear()
        rows.clear()
        return out

    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        line = reader.line_num
        if len(row) != width:
            raise _err(path, f"line {line} has {len(row)} fields, the header {width}; the file may "
                             f"be truncated or use another delimiter (the header's is {sep!r})")
        total += 1
        if max_frames is not None and total > max_frames:
            raise _too_many(path, max_frames, f"line {line}")
        if sep == ";":  # decimal commas
            row = [c.replace(",", ".") for c in row]
        vals = []
        for i in lm_idx:
            vals.append(_cell(row[i], path, line, header[i]))
        rows.append(vals)
        for k in num_keys:
            extra[k].append(_cell(row[cols[k]], path, line, header[cols[k]]))
        if "handedness" in cols:
            extra["handedness"].append(_hand_label(row[cols["handedness"]]))
        if len(rows) >= chunk:
            yield flush()
    if rows:
        yield flush()


def _cell(text: str, path: Path, line: int, column: str) -> float:
    text = text.strip()
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise _err(path, f"line {line}, column '{column}': {text[:20]!r} is not a number; landmark "
                         "columns must hold numbers (empty cells read as missing)") from None


def _hand_label(v: Any) -> str:
    s = str(v).strip().capitalize() if v is not None else ""
    return s if s in ("Right", "Left") else ""


class _Records:
    """Frames gathered from JSON records (:func:`_add_record`) until a chunk is full."""

    def __init__(self):
        self.world: list = []
        self.extra: dict[str, list] = {"timestamps": [], "handedness": [], "score": []}
        self.have: set = set()

    def __len__(self) -> int:
        return len(self.world)

    def flush(self) -> dict:
        out = {"world": np.asarray(self.world, np.float64).reshape(-1, NUM_LANDMARKS, 3)}
        for k in self.have:
            out[k] = np.asarray(self.extra[k], dtype=str if k == "handedness" else np.float64)
        for v in self.extra.values():
            v.clear()
        self.world.clear()
        return out


def _read_jsonl(path: Path, chunk: int, max_frames: int | None) -> Iterator[dict]:
    frames = _Records()
    total = 0

    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(_Lines(f, path), 1):
            if not line.strip():
                continue
            total += 1
            if max_frames is not None and total > max_frames:
                raise _too_many(path, max_frames, f"line {line_no}")
            try:
                _jsonl_record(path, line_no, line, frames)
            except ValueError as e:
                if _ours(e, path):
                    raise
                raise _err(path, f"line {line_no}: unreadable record ({_why(e)})") from None
            except RecursionError:
                raise _err(path, f"line {line_no}: JSON nested too deeply; each line must be one "
                                 '{"t": seconds, "landmarks": [[x, y, z], ...21]} object') from None
            except Exception as e:  # TypeError, OverflowError, ... from odd values
                raise _err(path, f"line {line_no}: unreadable record ({_why(e)}); expected "
                                 '{"t": seconds, "landmarks": [[x, y, z], ...21]}') from None
            if len(frames) >= chunk:
                yield frames.flush()
    if len(frames):
        yield frames.flush()


def _read_json(path: Path, chunk: int, max_frames: int | None) -> Iterator[dict]:
    """A ``.json`` file, parsed whole (at most :data:`MAX_JSON_BYTES`): a list of frames, or an object
    whose ``"frames"`` is that list; a frame is a JSONL line's object, or just its landmarks
    (``[[x, y, z]] * 21``, ``null`` for no hand)."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise _err(path, f"{size / 2**20:,.0f} MB of JSON, which is read whole (at most "
                         f"{MAX_JSON_BYTES >> 20} MB: wuji_jax.io.MAX_JSON_BYTES); write one frame a line "
                         "instead (.jsonl), which is streamed")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f, object_pairs_hook=unique_keys(path))
    except json.JSONDecodeError as e:
        raise _err(path, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); export it "
                         "again") from None
    except RecursionError:
        raise _err(path, "JSON nested too deeply; expected a list of frames") from None
    what = '[{"t": seconds, "landmarks": [[x, y, z], ...21]}, ...] or {"frames": [...]}'
    if isinstance(doc, dict):
        if "frames" not in doc:
            keys = ", ".join(list(map(str, doc))[:6]) or "none"
            raise _err(path, f"a JSON object without 'frames' (keys: {keys}); expected {what}")
        doc = doc["frames"]
    if not isinstance(doc, list):
        raise _err(path, f"a JSON {type(doc).__name__}, expected {what}")
    if max_frames is not None and len(doc) > max_frames:
        raise _too_many(path, max_frames, "its list of frames")
    frames = _Records()
    for i, rec in enumerate(doc):
        _add_record(path, f"frame {i}", rec if isinstance(rec, dict) else {"landmarks": rec}, frames)
        if len(frames) >= chunk:
            yield frames.flush()
    if len(frames):
        yield frames.flush()


def _jsonl_record(path: Path, line_no: int, line: str, frames: _Records) -> None:
    """Parse one JSONL line and add its frame to ``frames``."""
    try:
        rec = json.loads(line, object_pairs_hook=unique_keys(path, f"line {line_no}"))
    except json.JSONDecodeError as e:
        last = not line.endswith("\n")
        hint = "the file looks truncated" if last else "each line must be one JSON object"
        raise _err(path, f"line {line_no} is not valid JSON ({e.msg}); {hint}") from None
    if not isinstance(rec, dict):
        raise _err(path, f"line {line_no} is a JSON {type(rec).__name__}, expected an object "
                         '{"t": seconds, "landmarks": [[x, y, z], ...21]}')
    _add_record(path, f"line {line_no}", rec, frames)


def _add_record(path: Path, where: str, rec: dict, frames: _Records) -> None:
    """Add the frame of one JSON object (``where``: its line or frame, for errors) to ``frames``."""
    name = next((k for k in LANDMARK_KEYS if k in rec), None)
    if name is None:  # another schema, not a frame without a hand
        keys = ", ".join(list(map(str, rec))[:6]) or "none"
        raise _err(path, f"{where} has no {_KEYS_SAID} key (keys: {keys}){_image_keys_hint(rec)}; expected "
                         '{"t": seconds, "landmarks": [[x, y, z], ...21]}, with "landmarks": null for no hand')
    lm = rec[name]
    if lm is None:
        a = np.full((NUM_LANDMARKS, 3), np.nan)
    else:
        if isinstance(lm, list) and lm and all(isinstance(p, dict) for p in lm):  # [{"x": .., "y": .., "z": ..}]
            lm = [[p.get("x"), p.get("y"), p.get("z")] for p in lm]
        try:
            a = np.asarray(lm, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            raise _err(path, f"{where}: '{name}' is not a list of numbers; expected "
                             '21 [x, y, z] triples (or {"x": .., "y": .., "z": ..} objects)') from None
        if a.shape == (3 * NUM_LANDMARKS,):
            a = a.reshape(NUM_LANDMARKS, 3)
        if a.shape != (NUM_LANDMARKS, 3):
            raise _err(path, f"{where}: '{name}' has shape {a.shape}, expected (21, 3)")
    t = rec.get("t", rec.get("timestamp"))
    try:
        t = math.nan if t is None else float(t)
    except (TypeError, ValueError, OverflowError):
        raise _err(path, f"{where}: timestamp {str(t)[:20]!r} is not a number of "
                         "seconds") from None
    sc = rec.get("score")
    try:
        sc = math.nan if sc is None else float(sc)
    except (TypeError, ValueError, OverflowError):
        raise _err(path, f"{where}: score {str(sc)[:20]!r} is not a number") from None
    # appended together, once the whole record is known to be good
    frames.world.append(a)
    if rec.get("t", rec.get("timestamp")) is not None:
        frames.have.add("timestamps")
    frames.extra["timestamps"].append(t)
    if "handedness" in rec:
        frames.have.add("handedness")
    frames.extra["handedness"].append(_hand_label(rec.get("handedness")))
    if rec.get("score") is not None:
        frames.have.add("score")
    frames.extra["score"].append(sc)


def _need(module: str, path: Path):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise _err(path, f"reading this format needs {module.split('.')[0]}, which is not installed "
                         f"({e}); {_FORMATS_HINT}") from None


#: Parquet read buffer per column: pages are streamed through it instead of whole column chunks.
_PARQUET_BUFFER = 1 << 16


def _read_parquet(path: Path, chunk: int, max_frames: int | None, skip: int = 0) -> Iterator[dict]:
    # Bounded memory: no pre-buffering (which reads whole row groups, ~1.2x the file for a file of
    # one or two row groups), no memory map, a small buffered stream per column, only the columns
    # used, one decoding thread (threads hold pages of several batches: ~10 MiB more on a 1 GB file),
    # and row batches of `chunk` rows converted to NumPy and dropped.
    pa = _need("pyarrow", path)
    pq = _need("pyarrow.parquet", path)
    opts = dict(pre_buffer=False, memory_map=False, buffer_size=_PARQUET_BUFFER)
    try:
        pf = pq.ParquetFile(path, **opts)
        names = list(pf.schema_arrow.names)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError for broken files
        raise _err(path, f"not a readable Parquet file ({_why(e)}); export it again") from e
    check_unique_columns(names, path, _landmark_role(_landmark_spellings()))
    lower = {h.strip().lower(): i for i, h in enumerate(names)}
    nested = next((names[lower[k]] for k in LANDMARK_KEYS if k in lower
                   and _is_list(pf.schema_arrow.field(names[lower[k]]).type, pa)), None)
    if nested is not None and not set(LANDMARK_COLUMNS) <= set(lower):
        # one column of lists: each row's 21 [x, y, z] (or 63 numbers), as list-valued datasets store it
        cols = _optional_columns(lower)
        wanted = [nested]
    else:
        cols = _wide_columns(names, path)
        wanted = [names[cols[c]] for c in LANDMARK_COLUMNS]
    opt = {k: names[cols[k]] for k in ("timestamps", "frame", "handedness", "score") if k in cols}
    used = wanted + list(opt.values())
    md = pf.metadata
    n = int(md.num_rows)
    hand = opt.get("handedness")
    # Run-length / dictionary encoding and compression let a few kB declare millions of rows:
    # the rows' numbers (8 bytes each) and the handedness strings' uncompressed pages are compared
    # with the bytes on disk.
    declared = n * 8 * (3 * NUM_LANDMARKS + len(opt) - (hand is not None))
    if len(wanted) == 1:  # a column of lists: its values, as the metadata counts them, are at most 63 a row
        leaves = [j for j in range(md.num_columns) if md.schema.column(j).path.split(".")[0] == wanted[0]]
        values = sum(md.row_group(g).column(j).num_values for g in range(md.num_row_groups) for j in leaves)
        if values > n * (3 * NUM_LANDMARKS + 1):  # (+1: a null row's entry)
            raise _err(path, f"column '{wanted[0]}' declares {values:,} values for {n:,} rows, more than "
                             "21 × 3 a row; not a landmark file")
    if hand is not None:
        j = [i for i in range(md.num_columns) if md.schema.column(i).path == hand]
        declared += sum(md.row_group(g).column(j[0]).total_uncompressed_size
                        for g in range(md.num_row_groups)) if j else 0
    _check_declared(path, "the table", n, declared, os.path.getsize(path), max_frames)
    if hand is not None and (pa.types.is_string(pf.schema_arrow.field(hand).type)
                             or pa.types.is_large_string(pf.schema_arrow.field(hand).type)):
        # read as dictionary: a repeated long label stays one string instead of one per row
        pf = pq.ParquetFile(path, read_dictionary=[hand], **opts)
    # from the row group holding frame `skip` (the rows before it in that group are dropped below)
    first, start = 0, 0
    while first < md.num_row_groups and start + md.row_group(first).num_rows <= skip:
        start += md.row_group(first).num_rows
        first += 1
    if first == md.num_row_groups:
        return
    yield from _skip_rows(_parquet_batches(pf, path, chunk, used, wanted, opt, pa, first, start, max_frames),
                          skip - start, chunk)


def _skip_rows(chunks: Iterator[dict], drop: int, chunk: int) -> Iterator[dict]:
    """``chunks`` (dicts of arrays, one row per frame) without their first ``drop`` rows, cut again
    into pieces of ``chunk`` rows counted from the first row kept (non-row entries such as ``meta``
    are dropped with the rows)."""
    if drop == 0:
        yield from chunks
        return
    pending: list[dict] = []
    have = 0
    for c in chunks:
        c = {k: v for k, v in c.items() if k != "meta"}
        n = len(c["world"])
        if drop >= n:
            drop -= n
            continue
        if drop:
            c = {k: v[drop:] for k, v in c.items()}
            drop = 0
        pending.append(c)
        have += len(c["world"])
        while have >= chunk:
            merged = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
            yield {k: v[:chunk] for k, v in merged.items()}
            pending = [{k: v[chunk:] for k, v in merged.items()}]
            have -= chunk
    if have:
        yield {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}


def _parquet_batches(pf, path: Path, chunk: int, used: list, wanted: list, opt: dict, pa, first: int, start: int,
                     max_frames: int | None) -> Iterator[dict]:
    groups = list(range(first, pf.metadata.num_row_groups))
    for batch in pf.iter_batches(batch_size=chunk, row_groups=groups, columns=used, use_threads=False):
        m = batch.num_rows
        if max_frames is not None and start + m > max_frames:  # the metadata said otherwise
            raise _too_many(path, max_frames, f"row {start + m}")
        if len(wanted) == 1:  # a column of lists
            out = {"world": _arrow_nested(batch.column(wanted[0]), path, wanted[0], start, pa)}
        else:
            lm = np.empty((m, 3 * NUM_LANDMARKS), np.float64)
            for j, c in enumerate(wanted):
                lm[:, j] = _arrow_float(batch.column(c), path, c)
            out = {"world": lm.reshape(-1, NUM_LANDMARKS, 3)}
        for k, c in opt.items():
            col = batch.column(c)
            if k == "handedness":
                out[k] = _arrow_hands(col, pa)
            else:
                out[k] = _arrow_float(col, path, c)
        del batch
        start += m
        yield out


def _is_list(t, pa) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _arrow_nested(col, path: Path, name: str, row0: int, pa) -> np.ndarray:
    """A column of lists (row ``row0`` first) as ``(n, 21, 3)``: each row 21 lists of [x, y, z], or 63
    numbers; a null row is a frame without a hand (NaN)."""
    import pyarrow.compute as pc

    def lengths(a, size: int) -> np.ndarray:  # per row: its length (a null row: -1); others are refused
        got = _arrow_values(pc.list_value_length(a), pa.int64(), np.int64, -1)
        bad = np.flatnonzero((got != size) & (got != -1))
        if bad.size:
            raise _err(path, f"row {row0 + int(bad[0])}: column '{name}' holds {int(got[bad[0]])} "
                             f"{'landmarks' if size == NUM_LANDMARKS else 'values'}, expected "
                             f"{'21 [x, y, z]' if size == NUM_LANDMARKS else size}")
        return got

    out = np.full((len(col), NUM_LANDMARKS, 3), np.nan)
    if _is_list(col.type.value_type, pa):
        rows = lengths(col, NUM_LANDMARKS) >= 0
        points = col.flatten()  # the rows' landmarks, null rows left out
        if (lengths(points, 3) < 0).any():
            raise _err(path, f"column '{name}' has a null landmark; write NaN coordinates for a missing one")
        values = points.flatten()
    else:
        rows = lengths(col, 3 * NUM_LANDMARKS) >= 0
        values = col.flatten()
    out[rows] = _arrow_float(values, path, name).reshape(-1, NUM_LANDMARKS, 3)
    return out


def _arrow_hands(col, pa) -> np.ndarray:
    if pa.types.is_dictionary(col.type):
        labels = [_hand_label(v) if isinstance(v, str) and len(v) < 16 else ""
                  for v in col.dictionary.to_pylist()] + [""]
        ix = _arrow_values(col.indices, pa.int64(), np.int64, len(labels) - 1)
        return np.asarray(labels, dtype="<U5")[ix]
    return np.asarray([_hand_label(v) for v in col.to_pylist()], dtype="<U5")


def _arrow_float(col, path: Path, name: str) -> np.ndarray:
    import pyarrow as pa

    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise _err(path, f"column '{name}' has type {col.type}, not numbers; landmark columns must "
                         "hold numbers")
    return _arrow_values(col, pa.float64(), np.float64, float("nan"))


def _arrow_values(col, arrow_type, dtype, fill) -> np.ndarray:
    """``col`` as a NumPy array of ``dtype`` (nulls → ``fill``), read from its values buffer:
    ``Array.to_numpy`` imports pandas where it is installed (~50 MiB of RSS for a streaming read)."""
    import pyarrow.compute as pc

    col = pc.cast(col, arrow_type, safe=False)
    validity, values = col.buffers()[:2]
    out = np.frombuffer(values, dtype, count=len(col), offset=col.offset * np.dtype(dtype).itemsize).copy()
    if col.null_count:  # (fill_null would import pandas too, through pa.scalar)
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        out[bits[col.offset:col.offset + len(col)] == 0] = fill
    return out


def arrow_table(cols: Mapping[str, np.ndarray], pa):
    """1-D NumPy columns (numbers, bools or ``U`` strings) as an Arrow table, each column built from
    its buffers: ``pa.array`` imports pandas where it is installed (seconds and memory of every CLI run
    that writes Parquet)."""
    return pa.table({k: _arrow_array(np.asarray(v), pa) for k, v in cols.items()})


_ARROW_NUMBERS = ("f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8")


def dictionary_columns(schema, pa) -> list[str]:
    """The columns worth Parquet's dictionary encoding: strings (file names, sides, labels) and
    ``*flags`` bit sets, which take few distinct values. Tried on every column (pyarrow's default),
    it builds a dictionary for each float column of unique values and then falls back to plain
    pages, several times slower (``docs/performance.md``)."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or (pa.types.is_integer(f.type) and f.name.endswith("flags"))]


def _arrow_array(v: np.ndarray, pa):
    n = len(v)
    if v.dtype.kind == "U":  # few distinct values (file names, sides, labels): each encoded once
        if n and (v == v[0]).all():  # one value (a part's side or file): no sort
            uniq, inv = v[:1], np.zeros(n, np.intp)
        else:
            uniq, inv = np.unique(v, return_inverse=True)
            inv = inv.reshape(-1)
        words = [u.encode("utf-8") for u in uniq.tolist()]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, words), np.int64, len(words))[inv], out=offsets[1:])
        if offsets[-1] >= 2**31:  # beyond a string array's 32-bit offsets
            return pa.array(v.tolist())
        data = words[0] * n if len(words) == 1 else b"".join(words[i] for i in inv.tolist())
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))
    if v.dtype == bool:
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(v, bitorder="little"))])
    native = v.dtype.newbyteorder("=")
    if native.str[1:] not in _ARROW_NUMBERS:
        return pa.array(v)
    return pa.Array.from_buffers(pa.from_numpy_dtype(native), n, [None, pa.py_buffer(np.ascontiguousarray(v, native))])


def _h5_get(f, key: str, path: Path, h5py):
    """The dataset ``key`` of ``f``, refusing data that lives in other files (never opened)."""
    link = f.get(key, getlink=True)
    if isinstance(link, h5py.ExternalLink):
        raise _err(path, f"dataset '{key}' is an external link to '{link.path}' in {link.filename}; "
                         "refused: other files are not read, store the array in this file")
    if isinstance(link, h5py.SoftLink):
        raise _err(path, f"dataset '{key}' is a soft link to '{link.path}'; refused: store the array "
                         "itself under this name")
    if not isinstance(link, h5py.HardLink):
        raise _err(path, f"'{key}' is a {type(link).__name__}, not a dataset")
    d = f.get(key)
    if not isinstance(d, h5py.Dataset):
        raise _err(path, f"'{key}' is a {type(d).__name__}, not a dataset; store the (N, 21, 3) array "
                         f"as dataset '{key}'")
    if d.is_virtual:
        raise _err(path, f"dataset '{key}' is a virtual dataset (its data lives in other files); "
                         "refused: store the array itself in this file")
    dcpl = d.id.get_create_plist()
    if dcpl.get_external_count():  # (Dataset.external is newer than the h5py floor)
        files = ", ".join(os.fsdecode(dcpl.get_external(i)[0])
                          for i in range(min(dcpl.get_external_count(), 2)))
        raise _err(path, f"dataset '{key}' has external storage (raw data in {files}); refused: other "
                         "files are not read, store the array in this file")
    return d


def _read_h5(path: Path, chunk: int, max_frames: int | None, skip: int = 0) -> Iterator[dict]:
    h5py = _need("h5py", path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise _err(path, f"not a readable HDF5 file ({_why(e)}); export it again") from e
    with f:
        links = {k: f.get(k, getlink=True) for k in f}
        # datasets stored in this file; links are not followed to find out what they point at
        dsets = [k for k, v in links.items()
                 if isinstance(v, h5py.HardLink) and isinstance(f.get(k), h5py.Dataset)]
        key = next((k for k in LANDMARK_KEYS if k in links), None)
        if key is None and len(links) == 1:
            key = next(iter(links))
        elif key is None and len(dsets) == 1 and not any(isinstance(v, (h5py.SoftLink, h5py.ExternalLink))
                                                         for v in links.values()):
            key = dsets[0]
        elif key is None:
            raise _err(path, f"datasets {sorted(links)} but none named {_KEYS_SAID}{_image_keys_hint(links)}; "
                             "store the (N, 21, 3) array as dataset 'landmarks'")
        d = _h5_get(f, key, path, h5py)
        if d.dtype.kind not in "fiu":
            raise _err(path, f"dataset '{key}' has dtype {d.dtype}, not numbers")
        shape = _check_shape(d.shape, path, f"dataset '{key}'")
        n = shape[0]
        t = _h5_get(f, "timestamps", path, h5py) if "timestamps" in links else None
        if t is not None:
            if t.shape != (n,):
                raise _err(path, f"dataset 'timestamps' has shape {t.shape}, expected ({n},)")
            if t.dtype.kind not in "fiu":
                raise _err(path, f"dataset 'timestamps' has dtype {t.dtype}, not numbers of seconds")
        parts = [d] + ([t] if t is not None else [])
        declared = sum(x.size * x.dtype.itemsize for x in parts)
        stored = sum(x.id.get_storage_size() for x in parts)  # 0 for never-written chunks
        _check_declared(path, f"dataset '{key}'", n, declared, stored, max_frames)
        # read whole HDF5 chunks (a compressed chunk is decompressed once, not once per slice of it)
        span = chunk
        if d.chunks is not None and d.ndim == 3 and d.chunks[0] > chunk:
            span = -(-d.chunks[0] // chunk) * chunk
        for s0 in range(skip, n, span):
            try:
                w = np.asarray(d[s0:s0 + span] if d.ndim == 3 else d[()],
                               np.float64).reshape(-1, NUM_LANDMARKS, 3)
                ts = None if t is None else np.asarray(t[s0:s0 + span], np.float64)
            except OSError as e:
                raise _err(path, f"truncated or corrupt HDF5 data at frame {s0} or after ({_why(e)}); "
                                 "export it again") from e
            for s in range(0, len(w), chunk):
                out = {"world": w[s:s + chunk]}
                if ts is not None:
                    out["timestamps"] = ts[s:s + chunk]
                yield out


def _read_video(path: Path, chunk: int, video_options: Mapping[str, Any]) -> Iterator[dict]:
    from . import video

    rec = video.extract_landmarks(path, **video_options)
    n = len(rec)
    if n and not rec.detected.any():
        raise _err(path, f"no hand detected in any of its {n} frames; check that the video shows a "
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
    """The raw chunks of one source from frame ``skip`` on (a multiple of ``chunk``): the formats
    whose readers can start there (``.npy``, ``.npz``, Parquet from the row group holding it, HDF5)
    do; the others are read from the start and the frames before it dropped."""
    if skip and (isinstance(path, int) or Path(path).is_dir()
                 or Path(path).suffix.lower() in VIDEO_EXTENSIONS + IMAGE_EXTENSIONS):
        return _skip_rows(_reader(path, chunk, video_options, max_frames), skip, chunk)
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
    ext = path.suffix.lower()
    if not path.exists():
        raise _err(path, "no such file")
    if not path.is_file():  # a FIFO or a device would block or never end
        raise _err(path, "not a regular file (a pipe, socket or device); save the data to a file first")
    if ext not in DATA_EXTENSIONS + VIDEO_EXTENSIONS + IMAGE_EXTENSIONS:
        raise _err(path, f"unsupported extension '{path.suffix}'; use one of "
                         + ", ".join(DATA_EXTENSIONS + VIDEO_EXTENSIONS) + " or a folder of images")
    if path.stat().st_size == 0:
        raise _err(path, "the file is empty (0 bytes); export it again")
    if ext in VIDEO_EXTENSIONS or ext in IMAGE_EXTENSIONS:
        return _read_video(path, chunk, video_options)
    seek = {".npy": _read_npy, ".npz": _read_npz, ".parquet": _read_parquet, ".pq": _read_parquet, ".h5": _read_h5,
            ".hdf5": _read_h5}
    if ext in seek:
        return seek[ext](path, chunk, max_frames, skip)
    fn = {".csv": _read_csv, ".tsv": _read_csv, ".jsonl": _read_jsonl, ".ndjson": _read_jsonl, ".json": _read_json}[ext]
    return _skip_rows(fn(path, chunk, max_frames), skip, chunk)


def _guard(path: Any, chunks: Iterator[dict]) -> Iterator[dict]:
    """Any failure while reading a data file → this module's one-line ``ValueError`` naming it.

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
        if _ours(e, path):
            raise
        raise _err(path, _unreadable(path, n, e)) from e
    except MemoryError:
        raise
    except Exception as e:
        raise _err(path, _unreadable(path, n, e)) from e


def _unreadable(path: Any, n: int, e: BaseException) -> str:
    where = f" after {n:,} frames" if n else ""
    kind = Path(path).suffix.lower().lstrip(".") or "data"
    return (f"cannot read this {kind} file{where} ({_why(e)}); it may be truncated or corrupt: export "
            "it again")


def _frames(src: Any, chunk: int, video_options: Mapping[str, Any], fps: float | None,
            max_frames: int | None, skip: int = 0) -> Iterator[dict]:
    """One source's checked chunks (from frame ``skip`` on, see :func:`_reader`); for data files every
    failure is the one-line ``ValueError``."""
    chunks = _checked(src, _reader(src, chunk, video_options, max_frames, skip), fps, max_frames, skip)
    if isinstance(src, int) or Path(src).suffix.lower() not in DATA_EXTENSIONS:
        return chunks  # videos and image folders: wuji_jax.video's own errors
    return _guard(src, chunks)


def check_max_frames(max_frames: Any) -> int | None:
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
    missing anyway). :func:`load_landmarks` flags degenerate frames ``detected`` False and notes
    them; :func:`iter_chunks` yields them as they are.
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


def _checked(path: Any, chunks: Iterator[dict], fps: float | None,
             max_frames: int | None = None, first: int = 0) -> Iterator[dict]:
    """Shape checks, inf → NaN, flags (missing, degenerate), timestamps that must not go backwards,
    at least one frame, at most ``max_frames``; the chunks start at frame ``first`` of the source."""
    start = first
    last_t = -math.inf
    for c in chunks:
        w = np.array(c["world"], dtype=np.float64)  # a private copy: never a view of a memmap
        n = w.shape[0]
        assert w.shape == (n, NUM_LANDMARKS, 3), w.shape
        if max_frames is not None and start + n > max_frames:
            raise _too_many(path, max_frames, f"frame {max_frames:,} and on")
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
                    raise _err(path, f"timestamps go backwards at frame {frame} ({seq[j]:.6g} s → "
                                     f"{seq[j + 1]:.6g} s); sort the frames by time or fix the times")
                last_t = float(ok[-1])
            c["timestamps"] = t
        c["start"] = start
        start += n
        yield c
    if start == 0:
        raise _err(path, "contains no frames; expected at least one row of 21 landmarks")


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
                v = np.asarray([_hand_label(x) for x in v.tolist()], dtype="<U5")
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
        raise _err(path, f"landmarks have shape {w.shape}, expected (N, 21, 3)")
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
        h5py = _need("h5py", path)
        with h5py.File(path, "w") as f:
            f.create_dataset("landmarks", data=w, chunks=(min(max(n, 1), 4096), NUM_LANDMARKS, 3))
            if "timestamp" in cols:
                f.create_dataset("timestamps", data=cols["timestamp"])
    else:
        raise _err(path, f"unsupported extension '{path.suffix}'; use .npy, .npz, .csv, .jsonl, "
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
            raise _err(path, f"'{key}' is a scalar; every entry must be an (N, ...) array")
        if a.dtype.kind == "O":
            raise _err(path, f"'{key}' holds Python objects; pass numbers, bools or strings")
        if n is None:
            n = a.shape[0]
        elif a.shape[0] != n:
            raise _err(path, f"'{key}' has {a.shape[0]} rows, the others {n}; all arrays need the "
                             "same first dimension")
        shapes[key] = list(a.shape[1:])
        if a.ndim == 1:
            cols[key] = a
            continue
        flat = a.reshape(a.shape[0], -1)
        if key in names:
            labels = list(names[key])
            if len(labels) != flat.shape[1]:
                raise _err(path, f"{len(labels)} names for '{key}', which has {flat.shape[1]} columns")
            labels = [f"{key}_{lab}" if lab in table else str(lab) for lab in labels]
        else:
            idx = np.stack(np.unravel_index(np.arange(flat.shape[1]), a.shape[1:]), axis=-1)
            labels = [key + "_" + "_".join(str(int(i)) for i in row) for row in idx]
        for j, lab in enumerate(labels):
            if lab in cols:
                raise _err(path, f"column name '{lab}' occurs twice; rename '{key}' or its names")
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
        raise _err(path, f"unsupported extension '{path.suffix}' for results; use .parquet, .csv or "
                         ".npz")
    if ext == ".npz":
        arrays = {}
        for k, v in table.items():
            a = np.asarray(v)
            if a.dtype.kind == "O":
                raise _err(path, f"'{k}' holds Python objects; pass numbers, bools or strings")
            arrays[k] = a
        _columns(table, names, path)  # same row-count checks as the other formats
        np.savez_compressed(path, **arrays)
        return path
    cols, shapes = _columns(table, names, path)
    if ext in (".parquet", ".pq"):
        pa = _need("pyarrow", path)
        pq = _need("pyarrow.parquet", path)
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
        raise _err(path, "no such file")
    if ext == ".npz":
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    if ext in (".parquet", ".pq"):
        pq = _need("pyarrow.parquet", path)
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
            raise _err(path, "the file is empty")
        header, body = rows[0], rows[1:]
        cols = {}
        for j, name in enumerate(header):
            texts = [r[j] for r in body]
            cols[name] = _parse_column(texts)
        return _regroup(cols)
    raise _err(path, f"unsupported extension '{path.suffix}' for results; use .parquet, .csv or .npz")


def _parse_column(texts: list[str]) -> np.ndarray:
    if texts and all(t in ("True", "False") for t in texts):
        return np.asarray([t == "True" for t in texts])
    try:
        return np.asarray([float(t) if t else math.nan for t in texts], np.float64)
    except ValueError:
        return np.asarray(texts, dtype=str)


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
