"""wuji_jax.data.formats: one registry of landmark formats, held to wuji_jax.data.limits.

The CSV reader parses with pyarrow and hands over to Python's csv module (the reference) wherever
pyarrow refuses a block or might read it otherwise: both give the same frames and the same one-line
errors. npz headers are read with public NumPy API only.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from wuji_jax import io
from wuji_jax.data import formats
from wuji_jax.data.formats import delimited
from wuji_jax.data.formats.npy import npz_entries, npz_header
from wuji_jax.data.limits import Limits

PACKAGE = Path(__file__).resolve().parents[1] / "wuji_jax"
HEADER = ["timestamp", "handedness", "score", *io.LANDMARK_COLUMNS, "note"]


def _rows(n: int, sep: str = ",", seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        row = [repr(i / 30), ("Right", "left", "", "x")[i % 4], "0.9"]
        row += [repr(float(v)) for v in 0.05 + 0.05 * rng.random(63)] + ["n"]
        out.append([c.replace(".", ",") for c in row] if sep == ";" else row)
    return out


def _write(path: Path, rows: list[list[str]], sep: str = ",") -> Path:
    path.write_text("\n".join(sep.join(r) for r in [HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def _read(reader, path: Path, chunk: int, limits: Limits = Limits()):
    """The chunks of ``reader``, or the one-line message it raises."""
    try:
        return [dict(c) for c in reader(path, chunk, limits)]
    except ValueError as e:
        return str(e)


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return len(a) == len(b) and all(
        c.keys() == d.keys() and all(np.array_equal(c[k], d[k], equal_nan=c[k].dtype.kind == "f") for k in c)
        for c, d in zip(a, b))


def test_the_registry_covers_every_data_extension():
    """One :class:`Format` a suffix, the suffixes those :data:`wuji_jax.io.DATA_EXTENSIONS` names."""
    assert formats.SUFFIXES == io.DATA_EXTENSIONS
    assert all(s in f.suffixes for s, f in formats.FORMATS.items())
    assert {f.extra for f in formats.FORMATS.values()} == {None, "pyarrow", "h5py"}


def test_no_private_numpy_names_in_the_package():
    """The readers use NumPy's public API only (no ``numpy.lib.format._read_array_header``)."""
    hits = [f"{p.relative_to(PACKAGE)}:{i}" for p in PACKAGE.rglob("*.py")
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"(np|numpy|fmt|format)\.(lib\.)?(format\.)?_[a-z]", line)]
    assert not hits, hits


@pytest.mark.parametrize("sep", [",", ";", "\t"])
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_csv_pyarrow_reads_what_python_reads(tmp_path, sep, chunk):
    """pyarrow's frames equal the reference reader's, chunk for chunk: separators, decimal commas,
    handedness labels, NaN for empty cells, blank lines skipped."""
    pytest.importorskip("pyarrow")
    rows = _rows(40, sep)
    rows[3][10] = ""
    rows[5][20] = "nan"
    path = _write(tmp_path / "a.csv", rows[:20] + [[]] + rows[20:], sep)
    assert _same(_read(delimited.read_csv, path, chunk), _read(delimited.read_csv_python, path, chunk))


@pytest.mark.parametrize("change,words", [
    (lambda rows: rows[33].__setitem__(12, "NA"), "line 35, column 'x3': 'NA' is not a number"),
    (lambda rows: rows[33].__setitem__(12, "nan(1)"), "line 35, column 'x3': 'nan(1)' is not a number"),
    (lambda rows: rows[33].pop(), "line 35 has 66 fields, the header 67"),
    (lambda rows: rows[33].__setitem__(66, "y" * 140_000), "line 35: not a readable CSV row"),
])
def test_csv_errors_name_the_line_after_the_frames_before_it(tmp_path, change, words):
    """A problem deep in a file: the chunks before it come first, then the reference reader's one-line
    error naming its line (pyarrow's own message never reaches the user)."""
    pytest.importorskip("pyarrow")
    rows = _rows(40)
    change(rows)
    path = _write(tmp_path / "b.csv", rows)
    got, chunks = [], delimited.read_csv(path, 10, Limits())
    with pytest.raises(ValueError, match=re.escape(f"{path}: {words}")):
        for c in chunks:
            got.append(c)
    assert [len(c["world"]) for c in got] == [10, 10, 10]


def test_csv_blank_row_and_max_frames_as_python_reads_them(tmp_path):
    """A row of empty cells is skipped, not a frame of NaN; more rows than ``max_frames`` is the error
    naming the line."""
    pytest.importorskip("pyarrow")
    rows = _rows(12)
    path = _write(tmp_path / "c.csv", rows[:5] + [[""] * len(HEADER)] + rows[5:])
    got = _read(delimited.read_csv, path, 4)
    assert sum(len(c["world"]) for c in got) == 12
    assert _same(got, _read(delimited.read_csv_python, path, 4))
    with pytest.raises(ValueError, match=r"more than the limit of 10 frames \(line 13\)"):
        list(delimited.read_csv(path, 4, Limits(max_frames=10)))


def test_csv_without_pyarrow_is_the_reference_reader(tmp_path, monkeypatch):
    """The base install (no pyarrow) reads CSV with Python's csv module: the same frames."""
    path = _write(tmp_path / "d.csv", _rows(9))
    want = _read(delimited.read_csv_python, path, 4)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.csv", None)
    assert _same(_read(delimited.read_csv, path, 4), want)
    rec = io.load_landmarks(path)
    assert rec.world.shape == (9, 21, 3) and list(rec.handedness[:3]) == ["Right", "Left", ""]


def test_npz_header_of_every_format_version(tmp_path):
    """``.npy`` headers of versions 1.0, 2.0 and 3.0 inside an ``.npz``: shape and dtype without reading
    the data, and the file loads."""
    a = np.arange(2 * 21 * 3, dtype=np.float32).reshape(2, 21, 3) / 1000
    path = tmp_path / "v.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name, version in (("landmarks", (3, 0)), ("timestamps", (2, 0)), ("score", (1, 0))):
            with z.open(f"{name}.npy", "w") as f:
                arr = a if name == "landmarks" else np.array([0.0, 0.5])
                np.lib.format.write_array(f, arr, version=version)
    with zipfile.ZipFile(path) as z:
        heads = {k: npz_header(z, info) for k, info in npz_entries(z).items()}
    assert heads == {"landmarks": ((2, 21, 3), np.dtype(np.float32)), "timestamps": ((2,), np.dtype(np.float64)),
                     "score": ((2,), np.dtype(np.float64))}
    rec = io.load_landmarks(path)
    np.testing.assert_array_equal(rec.world, a.astype(np.float64))
    np.testing.assert_array_equal(rec.timestamps, [0.0, 0.5])


def test_limits_are_read_from_wuji_jax_io_at_call_time(tmp_path, monkeypatch):
    """``wuji_jax.io``'s constants set after import are the limits of the next read (here the line
    length of a CSV, for both parsers)."""
    path = _write(tmp_path / "e.csv", _rows(3))
    assert io.current_limits() == Limits()
    monkeypatch.setattr(io, "MAX_LINE_CHARS", 500)
    assert io.current_limits(7) == Limits(max_frames=7, max_line_chars=500)
    with pytest.raises(ValueError, match=r"line 2 is longer than 500 characters"):
        io.load_landmarks(path)
