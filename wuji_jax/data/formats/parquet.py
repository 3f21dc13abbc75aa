"""Parquet landmark tables, read with pyarrow (the ``formats`` extra), and the Arrow helpers the
writers share (:func:`arrow_table`, :func:`dictionary_columns`).

Bounded memory: a table is read by row batches with no pre-buffering, no memory map, a small buffered
stream per column and only the columns used; its declared rows are held to the frame and expansion
limits (:func:`~wuji_jax.data.limits.check_declared`) before a row is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from ...hand.landmarks import NUM_LANDMARKS
from ..limits import Limits, check_declared, err, too_many, why
from .base import need, skip_rows
from .columns import (LANDMARK_COLUMNS, LANDMARK_KEYS, check_unique_columns, hand_label, landmark_role,
                      landmark_spellings, optional_columns, wide_columns)

__all__ = ["read_parquet", "open_parquet", "arrow_table", "arrow_array", "dictionary_columns", "arrow_float",
           "arrow_values"]


def open_parquet(path: Any, name: Any = None, **options: Any):
    """``pyarrow.parquet.ParquetFile(path, **options)``; a file that is not Parquet is the one-line error
    naming ``name`` (default: ``path``), pyarrow missing too (:func:`~.base.need`)."""
    name = path if name is None else name
    pq = need("pyarrow.parquet", name)
    try:
        return pq.ParquetFile(path, **options)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError for broken files
        raise err(name, f"not a readable Parquet file ({why(e)}); export it again") from e


#: Parquet read buffer per column: pages are streamed through it instead of whole column chunks.
_PARQUET_BUFFER = 1 << 16


def read_parquet(path: Path, chunk: int, limits: Limits, skip: int = 0) -> Iterator[dict]:
    """Chunks of a Parquet table in the wide layout (:func:`~.columns.wide_columns`) or with one column
    of lists (21 ``[x, y, z]`` or 63 numbers a row), from frame ``skip``, read by row batches."""
    # Bounded memory: no pre-buffering (which reads whole row groups, ~1.2x the file for a file of
    # one or two row groups), no memory map, a small buffered stream per column, only the columns
    # used, one decoding thread (threads hold pages of several batches: ~10 MiB more on a 1 GB file),
    # and row batches of `chunk` rows converted to NumPy and dropped.
    pa = need("pyarrow", path)
    opts = dict(pre_buffer=False, memory_map=False, buffer_size=_PARQUET_BUFFER)
    pf = open_parquet(path, **opts)
    names = list(pf.schema_arrow.names)
    check_unique_columns(names, path, landmark_role(landmark_spellings()))
    lower = {h.strip().lower(): i for i, h in enumerate(names)}
    nested = next((names[lower[k]] for k in LANDMARK_KEYS if k in lower
                   and _is_list(pf.schema_arrow.field(names[lower[k]]).type, pa)), None)
    if nested is not None and not set(LANDMARK_COLUMNS) <= set(lower):
        # one column of lists: each row's 21 [x, y, z] (or 63 numbers), as list-valued datasets store it
        cols = optional_columns(lower)
        wanted = [nested]
    else:
        cols = wide_columns(names, path)
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
            raise err(path, f"column '{wanted[0]}' declares {values:,} values for {n:,} rows, more than "
                            "21 × 3 a row; not a landmark file")
    if hand is not None:
        j = [i for i in range(md.num_columns) if md.schema.column(i).path == hand]
        declared += sum(md.row_group(g).column(j[0]).total_uncompressed_size
                        for g in range(md.num_row_groups)) if j else 0
    check_declared(path, "the table", n, declared, os.path.getsize(path), limits)
    if hand is not None and (pa.types.is_string(pf.schema_arrow.field(hand).type)
                             or pa.types.is_large_string(pf.schema_arrow.field(hand).type)):
        # read as dictionary: a repeated long label stays one string instead of one per row
        pf = open_parquet(path, read_dictionary=[hand], **opts)
    # from the row group holding frame `skip` (the rows before it in that group are dropped below)
    first, start = 0, 0
    while first < md.num_row_groups and start + md.row_group(first).num_rows <= skip:
        start += md.row_group(first).num_rows
        first += 1
    if first == md.num_row_groups:
        return
    yield from skip_rows(_parquet_batches(pf, path, chunk, used, wanted, opt, pa, first, start, limits.max_frames),
                          skip - start, chunk)


def _parquet_batches(pf, path: Path, chunk: int, used: list, wanted: list, opt: dict, pa, first: int, start: int,
                     max_frames: int | None) -> Iterator[dict]:
    groups = list(range(first, pf.metadata.num_row_groups))
    for batch in pf.iter_batches(batch_size=chunk, row_groups=groups, columns=used, use_threads=False):
        m = batch.num_rows
        if max_frames is not None and start + m > max_frames:  # the metadata said otherwise
            raise too_many(path, max_frames, f"row {start + m}")
        if len(wanted) == 1:  # a column of lists
            out = {"world": _arrow_nested(batch.column(wanted[0]), path, wanted[0], start, pa)}
        else:
            lm = np.empty((m, 3 * NUM_LANDMARKS), np.float64)
            for j, c in enumerate(wanted):
                lm[:, j] = arrow_float(batch.column(c), path, c)
            out = {"world": lm.reshape(-1, NUM_LANDMARKS, 3)}
        for k, c in opt.items():
            col = batch.column(c)
            if k == "handedness":
                out[k] = _arrow_hands(col, pa)
            else:
                out[k] = arrow_float(col, path, c)
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
        got = arrow_values(pc.list_value_length(a), pa.int64(), np.int64, -1)
        bad = np.flatnonzero((got != size) & (got != -1))
        if bad.size:
            raise err(path, f"row {row0 + int(bad[0])}: column '{name}' holds {int(got[bad[0]])} "
                            f"{'landmarks' if size == NUM_LANDMARKS else 'values'}, expected "
                            f"{'21 [x, y, z]' if size == NUM_LANDMARKS else size}")
        return got

    out = np.full((len(col), NUM_LANDMARKS, 3), np.nan)
    if _is_list(col.type.value_type, pa):
        rows = lengths(col, NUM_LANDMARKS) >= 0
        points = col.flatten()  # the rows' landmarks, null rows left out
        if (lengths(points, 3) < 0).any():
            raise err(path, f"column '{name}' has a null landmark; write NaN coordinates for a missing one")
        values = points.flatten()
    else:
        rows = lengths(col, 3 * NUM_LANDMARKS) >= 0
        values = col.flatten()
    out[rows] = arrow_float(values, path, name).reshape(-1, NUM_LANDMARKS, 3)
    return out


def _arrow_hands(col, pa) -> np.ndarray:
    if pa.types.is_dictionary(col.type):
        labels = [hand_label(v) if isinstance(v, str) and len(v) < 16 else ""
                  for v in col.dictionary.to_pylist()] + [""]
        ix = arrow_values(col.indices, pa.int64(), np.int64, len(labels) - 1)
        return np.asarray(labels, dtype="<U5")[ix]
    return np.asarray([hand_label(v) for v in col.to_pylist()], dtype="<U5")


def arrow_float(col, path: Any, name: str) -> np.ndarray:
    """A numeric Arrow column ``name`` as float64 NumPy (nulls → NaN); any other type is the one-line
    error."""
    import pyarrow as pa

    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise err(path, f"column '{name}' has type {col.type}, not numbers; landmark columns must "
                        "hold numbers")
    return arrow_values(col, pa.float64(), np.float64, float("nan"))


def arrow_values(col, arrow_type, dtype, fill) -> np.ndarray:
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
    return pa.table({k: arrow_array(np.asarray(v), pa) for k, v in cols.items()})


_ARROW_NUMBERS = ("f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8")


def dictionary_columns(schema, pa) -> list[str]:
    """The columns worth Parquet's dictionary encoding: strings (file names, sides, labels) and
    ``*flags`` bit sets, which take few distinct values. Tried on every column (pyarrow's default),
    it builds a dictionary for each float column of unique values and then falls back to plain
    pages, several times slower (``docs/performance.md``)."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or (pa.types.is_integer(f.type) and f.name.endswith("flags"))]


def arrow_array(v: np.ndarray, pa):
    """A 1-D NumPy array as an Arrow array built from its buffers (strings dictionary-free, each
    distinct value encoded once; bools bit-packed; native numbers zero-copy); other dtypes through
    ``pa.array``."""
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
