"""HDF5 landmark files (``.h5`` / ``.hdf5``), read with h5py (the ``formats`` extra).

Data stored in other files (external storage, virtual datasets, external or soft links) is refused,
never followed; a dataset that declares more than it stores (compression, never-written chunks) is
held to the expansion limit (:func:`~wuji_jax.data.limits.check_declared`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np

from ...hand.landmarks import NUM_LANDMARKS
from ..limits import Limits, check_declared, err, why
from .columns import KEYS_SAID, LANDMARK_KEYS, check_shape, image_keys_hint
from .base import need

__all__ = ["read_h5", "dataset"]


def dataset(f, key: str, path: Path, h5py):
    """The dataset ``key`` of ``f``, refusing data that lives in other files (never opened)."""
    link = f.get(key, getlink=True)
    if isinstance(link, h5py.ExternalLink):
        raise err(path, f"dataset '{key}' is an external link to '{link.path}' in {link.filename}; "
                        "refused: other files are not read, store the array in this file")
    if isinstance(link, h5py.SoftLink):
        raise err(path, f"dataset '{key}' is a soft link to '{link.path}'; refused: store the array "
                        "itself under this name")
    if not isinstance(link, h5py.HardLink):
        raise err(path, f"'{key}' is a {type(link).__name__}, not a dataset")
    d = f.get(key)
    if not isinstance(d, h5py.Dataset):
        raise err(path, f"'{key}' is a {type(d).__name__}, not a dataset; store the (N, 21, 3) array "
                        f"as dataset '{key}'")
    if d.is_virtual:
        raise err(path, f"dataset '{key}' is a virtual dataset (its data lives in other files); "
                        "refused: store the array itself in this file")
    dcpl = d.id.get_create_plist()
    if dcpl.get_external_count():  # (Dataset.external is newer than the h5py floor)
        files = ", ".join(os.fsdecode(dcpl.get_external(i)[0])
                          for i in range(min(dcpl.get_external_count(), 2)))
        raise err(path, f"dataset '{key}' has external storage (raw data in {files}); refused: other "
                        "files are not read, store the array in this file")
    return d


def read_h5(path: Path, chunk: int, limits: Limits, skip: int = 0) -> Iterator[dict]:
    """Chunks of an HDF5 file's landmark dataset (:data:`~.columns.LANDMARK_KEYS`, or the only dataset)
    and its ``timestamps``, from frame ``skip``; whole HDF5 chunks are read at a time."""
    h5py = need("h5py", path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise err(path, f"not a readable HDF5 file ({why(e)}); export it again") from e
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
            raise err(path, f"datasets {sorted(links)} but none named {KEYS_SAID}{image_keys_hint(links)}; "
                            "store the (N, 21, 3) array as dataset 'landmarks'")
        d = dataset(f, key, path, h5py)
        if d.dtype.kind not in "fiu":
            raise err(path, f"dataset '{key}' has dtype {d.dtype}, not numbers")
        shape = check_shape(d.shape, path, f"dataset '{key}'")
        n = shape[0]
        t = dataset(f, "timestamps", path, h5py) if "timestamps" in links else None
        if t is not None:
            if t.shape != (n,):
                raise err(path, f"dataset 'timestamps' has shape {t.shape}, expected ({n},)")
            if t.dtype.kind not in "fiu":
                raise err(path, f"dataset 'timestamps' has dtype {t.dtype}, not numbers of seconds")
        parts = [d] + ([t] if t is not None else [])
        declared = sum(x.size * x.dtype.itemsize for x in parts)
        stored = sum(x.id.get_storage_size() for x in parts)  # 0 for never-written chunks
        check_declared(path, f"dataset '{key}'", n, declared, stored, limits)
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
                raise err(path, f"truncated or corrupt HDF5 data at frame {s0} or after ({why(e)}); "
                                "export it again") from e
            for s in range(0, len(w), chunk):
                out = {"world": w[s:s + chunk]}
                if ts is not None:
                    out["timestamps"] = ts[s:s + chunk]
                yield out
