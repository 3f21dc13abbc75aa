"""Delimited text (``.csv``, ``.tsv``): a header line, then one row a frame.

Fields are separated by ``,``, or where the header has no comma by ``;`` (then with decimal commas, as
spreadsheets of many locales write them) or a tab; empty cells read as NaN; blank rows are skipped.
pyarrow (the ``formats`` extra) parses the rows in C (:func:`read_csv`); Python's ``csv`` module is
the reference (:func:`read_csv_python`): the reader without pyarrow, and the one that takes over from
the first block of rows pyarrow refuses or might read otherwise (a cell that is not a number, a row of
another width, a line over the limit, a blank row, more rows than ``max_frames``), so that every
file reads the same frames, and fails with the same message naming its line and column, either way.
"""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ...hand.landmarks import NUM_LANDMARKS
from ..limits import Limits, Lines, err, too_many, why
from .base import rechunk, skip_rows
from .columns import LANDMARK_COLUMNS, hand_label, hand_labels, wide_columns

__all__ = ["read_csv", "read_csv_python", "cell"]

_NUMBERS = ("timestamps", "frame", "score")
#: Bytes pyarrow parses at a time (a record batch: ~500 frames of ~2 kB).
_BLOCK = 1 << 20


def read_csv(path: Path, chunk: int, limits: Limits) -> Iterator[dict]:
    """Chunks of ``chunk`` frames of a landmark CSV (``world`` ``(n, 21, 3)`` and the optional
    ``timestamps``, ``frame``, ``score``, ``handedness`` columns it has). The rows are parsed by
    pyarrow where it is installed, from the first block it refuses by :func:`read_csv_python`."""
    done = 0
    try:
        arrow = _arrow_chunks(path, chunk, limits)
    except MemoryError:
        raise
    except Exception:  # a header pyarrow cannot take: the reference reader reads it, or says what is wrong
        arrow = None
    while arrow is not None:
        try:
            c = next(arrow)
        except StopIteration:
            return
        except MemoryError:
            raise
        except Exception:  # refused, or might differ: the reference reader says where and why
            break
        done += len(c["world"])
        yield c
    yield from skip_rows(read_csv_python(path, chunk, limits), done, chunk)


def _arrow_chunks(path: Path, chunk: int, limits: Limits) -> Iterator[dict] | None:
    """The frames pyarrow parses, in chunks of ``chunk``, or None where it cannot take the file (not
    installed, a header that is not one plain line). An exception from the iterator means: the frames
    from the chunk it would have given on are for :func:`read_csv_python`."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        return None
    with open(path, newline="", encoding="utf-8-sig") as f:
        first = next(Lines(f, path, limits.max_line_chars), "")
    sep = next((d for d in (",", ";", "\t") if d in first), ",")
    if not first.strip() or '"' in first:  # no header, or one a quoted newline may continue
        return None
    try:
        header = next(csv.reader([first], delimiter=sep))
    except csv.Error:
        return None
    cols = wide_columns(header, path)
    if not _plain(path, min(limits.max_line_chars, csv.field_size_limit())):
        return None
    numeric = {cols[c] for c in LANDMARK_COLUMNS} | {cols[k] for k in _NUMBERS if k in cols}
    names = [f"c{i}" for i in range(len(header))]
    # Every column is read, the others as text: pyarrow then checks their UTF-8 as Python does.
    reader = pacsv.open_csv(
        path, read_options=pacsv.ReadOptions(skip_rows=1, column_names=names, block_size=_BLOCK, use_threads=False),
        parse_options=pacsv.ParseOptions(delimiter=sep, newlines_in_values=True, ignore_empty_lines=True),
        convert_options=pacsv.ConvertOptions(
            column_types={n: pa.float64() if i in numeric else pa.string() for i, n in enumerate(names)},
            null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=True,
            decimal_point="," if sep == ";" else "."))
    return rechunk(_arrow_frames(reader, cols, names, numeric, limits.max_frames, pa), chunk)


def _arrow_frames(reader, cols: dict, names: list, numeric: set, max_frames: int | None, pa) -> Iterator[dict]:
    """Each record batch of ``reader`` as a chunk; raises where the reference reader must take over."""
    import pyarrow.compute as pc

    from .parquet import arrow_values

    lm = [names[cols[c]] for c in LANDMARK_COLUMNS]
    extra = {k: names[cols[k]] for k in (*_NUMBERS, "handedness") if k in cols}
    text = [n for i, n in enumerate(names) if i not in numeric]
    total = 0
    for batch in reader:
        m = batch.num_rows
        total += m
        if max_frames is not None and total > max_frames:
            raise OverflowError("more rows than max_frames: the reference reader names the line")
        floats = {n: arrow_values(batch.column(n), pa.float64(), np.float64, math.nan)
                  for n in lm + [extra[k] for k in _NUMBERS if k in extra]}
        blank = np.ones(m, bool)
        for n in floats:
            blank &= _nulls(batch.column(n))
        for n in text:
            col = batch.column(n)
            if pc.any(pc.match_substring(col, "\x00")).as_py():
                raise ValueError("a NUL character, which Python's csv module refuses before 3.11")
            if blank.any():
                blank &= np.asarray(pc.equal(pc.utf8_trim_whitespace(col), "").to_pylist(), bool)
        if blank.any():  # a row of empty cells, which the reference reader skips
            raise ValueError("a blank row")
        out = {"world": np.stack([floats[n] for n in lm], axis=1).reshape(m, NUM_LANDMARKS, 3)}
        for k, n in extra.items():
            out[k] = hand_labels(batch.column(n).to_pylist()) if k == "handedness" else floats[n]
        yield out


def _plain(path: Path, limit: int) -> bool:
    """Whether pyarrow reads ``path`` as Python would: no line (its end included) longer than ``limit``
    bytes (pyarrow has no line or field limit) and no ``(`` (pyarrow reads ``nan(1)`` as NaN, Python
    refuses it). Scanned by NumPy in blocks of 4 MiB before pyarrow parses any row."""
    run = 0  # bytes since the last line end
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            if b"(" in block:
                return False
            ends = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
            if ends.size == 0:
                run += len(block)
            elif run + ends[0] + 1 > limit or (ends.size > 1 and np.diff(ends).max() > limit):
                return False
            else:
                run = len(block) - int(ends[-1]) - 1
            if run > limit:
                return False
    return True


def _nulls(col) -> np.ndarray:
    """``(n,)`` bool: the null entries of an Arrow array."""
    if not col.null_count:
        return np.zeros(len(col), bool)
    bits = np.unpackbits(np.frombuffer(col.buffers()[0], np.uint8), bitorder="little")
    return bits[col.offset:col.offset + len(col)] == 0


def read_csv_python(path: Path, chunk: int, limits: Limits) -> Iterator[dict]:
    """:func:`read_csv` by Python's ``csv`` module, a row at a time: the reference reader, and the
    one that names the line and column of every problem."""
    max_frames = limits.max_frames
    with open(path, newline="", encoding="utf-8-sig") as f:
        lines = Lines(f, path, limits.max_line_chars)
        first = next(lines, "")
        sep = next((d for d in (",", ";", "\t") if d in first), ",")
        reader = csv.reader(itertools.chain([first] if first else [], lines), delimiter=sep)
        try:
            yield from _csv_rows(path, reader, chunk, max_frames, sep)
        except csv.Error as e:
            # e.g. "field larger than field limit (131072)", a NUL byte, an unterminated quote
            raise err(path, f"line {max(lines.num, 1)}: not a readable CSV row ({why(e)}); a "
                            f"landmark CSV holds short numeric fields separated by {sep!r}") from None


def _csv_rows(path: Path, reader, chunk: int, max_frames: int | None, sep: str = ",") -> Iterator[dict]:
    try:
        header = next(reader)
    except StopIteration:
        raise err(path, "the file has no lines; expected a header and one row a frame") from None
    cols = wide_columns(header, path)
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
            raise err(path, f"line {line} has {len(row)} fields, the header {width}; the file may "
                             f"be truncated or use another delimiter (the header's is {sep!r})")
        total += 1
        if max_frames is not None and total > max_frames:
            raise too_many(path, max_frames, f"line {line}")
        if sep == ";":  # decimal commas
            row = [c.replace(",", ".") for c in row]
        vals = []
        for i in lm_idx:
            vals.append(cell(row[i], path, line, header[i]))
        rows.append(vals)
        for k in num_keys:
            extra[k].append(cell(row[cols[k]], path, line, header[cols[k]]))
        if "handedness" in cols:
            extra["handedness"].append(hand_label(row[cols["handedness"]]))
        if len(rows) >= chunk:
            yield flush()
    if rows:
        yield flush()


def cell(text: str, path: Any, line: int, column: str) -> float:
    """A landmark cell as a number (empty: NaN), or the one-line error naming its line and column."""
    text = text.strip()
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise err(path, f"line {line}, column '{column}': {text[:20]!r} is not a number; landmark "
                         "columns must hold numbers (empty cells read as missing)") from None
