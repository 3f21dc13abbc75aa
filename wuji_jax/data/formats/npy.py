"""NumPy's files: ``.npy`` (memory-mapped) and ``.npz`` (zip members, their ``.npy`` headers read first).

Only public NumPy API: ``np.load(..., mmap_mode="r")`` for ``.npy``, and for ``.npz`` members
``numpy.lib.format.read_magic`` / ``read_array_header_1_0`` / ``read_array_header_2_0`` (a version 3.0
header is version 2.0's layout in UTF-8; read as 2.0 its shape and dtype kind are the same) and
``read_array``.
"""

from __future__ import annotations

import contextlib
import math
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..limits import Limits, check_declared, err, why
from .columns import KEYS_SAID, LANDMARK_KEYS, check_shape, image_keys_hint, landmark_array

__all__ = ["read_npy", "read_npz", "open_npz", "npz_entries", "npz_header", "npy_header", "ZIP_ERRORS"]

#: What a damaged zip raises.
ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError)

_NPZ_FIELDS = ("timestamps", "t", "frame", "frame_index", "handedness", "score", "detected", "image")
_FIELD_NAMES = {"t": "timestamps", "frame_index": "frame"}


def read_npy(path: Path, chunk: int, limits: Limits, skip: int = 0) -> Iterator[dict]:
    """Chunks of an ``.npy`` array ``(N, 21, 3)`` (or ``(21, 3)``), memory-mapped, from frame ``skip``."""
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e) or "Object arrays" in str(e) or "Python objects" in str(e):
            raise err(path, "holds Python objects (pickled), not a numeric array; save a float "
                            "array of shape (N, 21, 3)") from e
        raise err(path, f"truncated or corrupt .npy file ({e}); export it again") from e
    except (OSError, EOFError) as e:
        raise err(path, f"truncated or corrupt .npy file ({e}); export it again") from e
    a = landmark_array(a, path)
    # memory-mapped: the file's size already backs the declared count (np.load checks it)
    check_declared(path, "the array", a.shape[0], 0, None, limits)
    for s in range(skip, a.shape[0], chunk):
        yield {"world": np.array(a[s:s + chunk], dtype=np.float64)}


def npy_header(f) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an ``.npy`` stream's header, without reading its data."""
    fmt = np.lib.format
    version = fmt.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = fmt.read_array_header_1_0(f)
    else:  # 2.0, and 3.0: 2.0's layout with a UTF-8 header (only structured field names differ)
        shape, _, dtype = fmt.read_array_header_2_0(f)
    return tuple(int(x) for x in shape), np.dtype(dtype)


def npz_entries(zf: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The members of an open ``.npz``: name (without ``.npy``) → zip entry, in the zip's order."""
    return {i.filename[:-4] if i.filename.endswith(".npy") else i.filename: i for i in zf.infolist()}


def npz_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of an ``.npz`` member from its ``.npy`` header, without reading its data. A
    damaged zip raises one of :data:`ZIP_ERRORS`, a malformed header ``ValueError`` (or another
    exception of NumPy's header parser)."""
    with zf.open(info) as m:
        return npy_header(m)


@contextlib.contextmanager
def open_npz(path: Any, name: Any = None) -> Iterator[zipfile.ZipFile]:
    """The ``.npz`` at ``path`` as an open zip; one that is no zip is the one-line error naming ``name``
    (default: ``path``)."""
    with open(path, "rb") as fh:
        try:
            zf = zipfile.ZipFile(fh)
        except ZIP_ERRORS as e:
            raise err(path if name is None else name,
                      f"truncated or corrupt .npz file ({why(e)}); export it again") from e
        with zf:
            yield zf


def read_npz(path: Path, chunk: int, limits: Limits, skip: int = 0) -> Iterator[dict]:
    """Chunks of an ``.npz``'s landmark array (:data:`LANDMARK_KEYS`, or the only array) and its
    per-frame fields, from frame ``skip``. Members are zip entries, loaded whole after their headers
    are checked against ``limits`` (frames, and expansion over the bytes the zip stores)."""
    with open_npz(path) as zf:
        try:
            key, shape, load = _npz_plan(zf, path)
        except ZIP_ERRORS as e:
            raise err(path, f"truncated or corrupt .npz file ({why(e)}); export it again") from e
        n = shape[0]
        declared = sum(math.prod(sh) * dt.itemsize for sh, dt in load.values())
        members = npz_entries(zf)
        stored = min(sum(members[k].compress_size for k in load), os.path.getsize(path))
        check_declared(path, f"array '{key}'", n, declared, stored, limits)
        arrays = {k: _npz_array(zf, members[k], path) for k in load}
    world = arrays.pop(key).reshape(shape)
    extra: dict[str, np.ndarray] = {}
    for k, v in arrays.items():
        if k in ("fps", "notes"):
            continue
        name = _FIELD_NAMES.get(k, k)
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


def _npz_plan(zf: zipfile.ZipFile, path: Path) -> tuple[str, tuple, dict]:
    """The landmark array's name and ``(N, 21, 3)`` shape, and ``{member: (shape, dtype)}`` of the
    members to load, from their headers; every problem with them is the one-line error."""
    members = npz_entries(zf)
    keys = list(members)
    key = next((k for k in LANDMARK_KEYS if k in keys), None)
    if key is None and len(keys) == 1:
        key = keys[0]
    elif key is None and not keys:
        raise err(path, "the .npz holds no arrays; save the landmarks as np.savez(path, landmarks=a)")
    elif key is None:
        raise err(path, f"the .npz holds arrays {keys} but none named {KEYS_SAID}"
                        f"{image_keys_hint(keys)}; save the (N, 21, 3) array as landmarks=...")

    def header(k: str) -> tuple[tuple[int, ...], np.dtype]:
        info = members[k]
        if not info.filename.endswith(".npy"):
            raise err(path, f"member '{info.filename}' is not an .npy array; save the arrays with np.savez")
        try:
            shape, dtype = npz_header(zf, info)
        except ZIP_ERRORS:
            raise
        except Exception as e:  # ValueError, SyntaxError ... from a malformed header
            raise err(path, f"member '{info.filename}' is not a readable .npy array ({why(e)}); save "
                            "plain numeric arrays") from e
        if dtype.hasobject:
            raise err(path, f"array '{k}' holds Python objects (pickled), not numbers; save plain numeric "
                            "arrays")
        return shape, dtype

    shape, dtype = header(key)
    if dtype.kind not in "fiu":
        raise err(path, f"array '{key}' has dtype {dtype}, not numbers; store float landmarks in metres")
    shape = check_shape(shape, path, f"array '{key}'")
    n = shape[0]
    load = {key: (shape, dtype)}
    for k in _NPZ_FIELDS:
        if k not in members:
            continue
        kshape, kdtype = header(k)
        name = _FIELD_NAMES.get(k, k)
        expect = shape if name == "image" else (n,)
        if kshape != expect and not (name == "image" and n == 1 and kshape == shape[1:]):
            raise err(path, f"array '{k}' has shape {kshape}, expected {expect} to match '{key}'")
        kinds = "US" if name == "handedness" else "fiub"
        if kdtype.kind not in kinds:
            raise err(path, f"array '{k}' has dtype {kdtype}, expected "
                            + ("strings" if name == "handedness" else "numbers"))
        load[k] = (kshape, kdtype)
    for k, ok in (("fps", lambda sh, dt: sh == () and dt.kind in "fiu"),
                  ("notes", lambda sh, dt: len(sh) == 1 and dt.kind in "US")):
        if k in members:
            ksh, kdt = header(k)
            if ok(ksh, kdt):
                load[k] = (ksh, kdt)
    return key, shape, load


def _npz_array(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> np.ndarray:
    try:
        with zf.open(info) as m:
            return np.lib.format.read_array(m, allow_pickle=False)
    except ZIP_ERRORS as e:
        raise err(path, f"truncated or corrupt .npz file ({why(e)}); export it again") from e
    except ValueError as e:
        raise err(path, f"truncated or corrupt .npz member '{info.filename}' ({why(e)}); export it again") from e
