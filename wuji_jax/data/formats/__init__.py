"""The one registry of landmark file formats: suffix → :class:`Format` (:data:`FORMATS`).

Each format is one module of this package and parses with the library made for it: NumPy for
``.npy`` / ``.npz`` (:mod:`.npy`), pyarrow for CSV (:mod:`.delimited`, with Python's ``csv`` module as
the reference and the reader without pyarrow) and Parquet (:mod:`.parquet`), Python's ``json`` for JSON
and JSON lines (:mod:`.jsonl`), h5py for HDF5 (:mod:`.hdf5`). What the columns and arrays mean is
:mod:`.columns`. The safety limits are not the readers' business: :func:`read` gives the format a
:class:`~wuji_jax.data.limits.Limits`, and :mod:`wuji_jax.data.limits` wraps its chunks (shapes,
non-finite values, frame counts, one-line errors). A new input format is one module here and one
entry in :data:`FORMATS`.

A reader is ``read(path, chunk, limits, skip=0)`` → chunks (dicts) of at most ``chunk`` frames:
``"world"`` ``(n, 21, 3)`` and optionally ``"timestamps"``, ``"frame"``, ``"handedness"``, ``"score"``,
``"detected"``, ``"image"`` ``(n, ...)`` and (first chunk) ``"meta"``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Iterator

from ..limits import Limits
from .base import need, rechunk, skip_rows
from .delimited import read_csv
from .hdf5 import read_h5
from .jsonl import read_json, read_jsonl
from .npy import read_npy, read_npz
from .parquet import read_parquet

__all__ = ["Format", "FORMATS", "SUFFIXES", "read", "need", "skip_rows", "rechunk"]


@dataclasses.dataclass(frozen=True)
class Format:
    """One landmark file format.

    Attributes:
        name: what messages call it (``"CSV"``).
        suffixes: the file suffixes it is read for, lower case with the dot.
        reader: ``reader(path, chunk, limits[, skip])`` → chunks.
        seeks: the reader takes ``skip`` and starts there (else the frames before it are read and dropped).
        extra: the optional package it parses with (``pip install 'wuji-jax[formats]'``), or None.
    """

    name: str
    suffixes: tuple[str, ...]
    reader: Callable[..., Iterator[dict]]
    seeks: bool = False
    extra: str | None = None


_ALL = (Format("NumPy array", (".npy",), read_npy, seeks=True),
        Format("NumPy archive", (".npz",), read_npz, seeks=True),
        Format("CSV", (".csv", ".tsv"), read_csv),
        Format("JSON lines", (".jsonl", ".ndjson"), read_jsonl),
        Format("JSON", (".json",), read_json),
        Format("Parquet", (".parquet", ".pq"), read_parquet, seeks=True, extra="pyarrow"),
        Format("HDF5", (".h5", ".hdf5"), read_h5, seeks=True, extra="h5py"))

#: suffix (lower case, with the dot) → its :class:`Format`.
FORMATS: dict[str, Format] = {s: f for f in _ALL for s in f.suffixes}
#: Every suffix of :data:`FORMATS`, in the order of the table above.
SUFFIXES: tuple[str, ...] = tuple(FORMATS)


def read(path: Path, chunk: int, limits: Limits, skip: int = 0) -> Iterator[dict]:
    """The chunks of the data file ``path`` (a suffix of :data:`FORMATS`) from its frame ``skip`` on (a
    multiple of ``chunk``): formats that seek start there, the others are read from the start and the
    frames before it dropped. The caller wraps them in the limits (:func:`wuji_jax.data.limits.checked`
    and :func:`~wuji_jax.data.limits.guard`)."""
    fmt = FORMATS[path.suffix.lower()]
    if fmt.seeks:
        return fmt.reader(path, chunk, limits, skip)
    return skip_rows(fmt.reader(path, chunk, limits), skip, chunk)
