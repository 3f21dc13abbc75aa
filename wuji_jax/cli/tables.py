"""One reader of joint-angle tables and one of landmark tables, shared by every ``wuji-jax`` verb.

``wuji-jax inspire``, ``view`` and ``pose`` read angles with :func:`read_angles`, and ``inspire
--landmarks`` reads landmarks with :func:`read_landmarks` (which is :func:`wuji_jax.io.load_landmarks`,
the reader of ``wuji-jax solve``), so that each verb reads what the others write::

    from wuji_jax.tables import read_angles, read_landmarks
    t = read_angles("wuji_out/take_angles.parquet")     # what `wuji-jax solve` wrote
    t.angles            # (N, 20) radians, in hand.joint_names order
    t.timestamps        # (N,) seconds, or None when the file has none
    t.valid, t.flags    # the solver's per-frame verdicts, or None for a plain array

Angle files :func:`read_angles` accepts:

=========================  ====================================================================
``.parquet`` / ``.pq``     a table with one column per joint, named as ``hand.joint_names``
``.npz``                   (``thumb_cmc_flex`` ... ``pinky_dip``): what ``wuji-jax solve`` /
``.csv``                   :func:`wuji_jax.batch.solve_dataset` write (:func:`wuji_jax.io.write_results`'
                           layout), and any table with those columns (a pandas export). Optional
                           columns: ``timestamp`` (or ``timestamps`` / ``t`` / ``time``, seconds),
                           ``valid``, ``flags`` (or ``fit_flags``), ``side``, ``frame``, ``source``.
                           Other columns are ignored.
``.npy``                   a numeric array ``(20,)`` (one pose) or ``(N, 20)``
``.npz``                   an array ``angles`` (or ``q``, or the only array), optional ``timestamps``
                           (or ``t``)
``.csv``, ``.txt``, other  numbers, one frame a row (``,``-separated in ``.csv``, else whitespace);
                           ``(20,)`` values on one row or one a line make one pose. A header line
                           of joint names makes it a table (above).
``.json`` / ``.jsonl``     a list of 20 numbers or of rows; ``{"angles": ..., "timestamps": ...}``;
                           records ``[{"thumb_cmc_flex": ..., ...}, ...]`` (JSONL: one a line)
=========================  ====================================================================

Angles are radians unless ``degrees=True`` (refused for ``wuji-jax solve`` output, which is always
radians). Nothing here checks the values (finite, within the joint limits): each verb does, with its
own rules. Every problem with a file's content is a one-line ``ValueError``
``"<path>: <problem>; <what to do>"``; a file that cannot be opened at all raises ``OSError``
(``"<path>: cannot read (...)"``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..data.formats.columns import check_unique_columns, unique_keys
from ..data.formats.npy import ZIP_ERRORS, npz_entries, npz_header, open_npz
from ..data.formats.parquet import open_parquet
from ..data.limits import err, why

__all__ = ["AngleTable", "LandmarkTable", "read_angles", "read_landmarks", "table_side", "TABLE_SUFFIXES",
           "ANGLE_SUFFIXES", "FLAG_COLUMNS", "TIME_COLUMNS"]

#: Suffixes of tables that ``wuji-jax solve`` writes.
TABLE_SUFFIXES: tuple[str, ...] = (".parquet", ".pq", ".npz", ".csv")
#: Every suffix :func:`read_angles` knows by name (others are read as whitespace-separated text).
ANGLE_SUFFIXES: tuple[str, ...] = (".parquet", ".pq", ".npz", ".npy", ".csv", ".tsv", ".txt", ".json",
                                   ".jsonl", ".ndjson")
#: Names of the per-frame solver flag column, newest first (``flags`` collides with pandas'
#: ``DataFrame.flags``, hence ``fit_flags``).
FLAG_COLUMNS: tuple[str, ...] = ("fit_flags", "flags")
#: Names of the time column (seconds), in order of preference.
TIME_COLUMNS: tuple[str, ...] = ("timestamp", "timestamps", "t", "time")
_ARRAY_KEYS = ("angles", "q")
_LANDMARK_KEYS = ("world", "landmarks")
_SOLVE_MARKERS = ("residual_mm", "wrist_qw", "scale")  # columns only `wuji-jax solve` tables have
_META_COLUMNS = (*TIME_COLUMNS, *FLAG_COLUMNS, "valid", "side", "frame", "source")


# ----------------------------------------------------------------------------------------- angles


@dataclasses.dataclass(frozen=True, eq=False)
class AngleTable:
    """Joint angles read by :func:`read_angles` (NumPy arrays; ``N`` frames).

    Attributes:
        angles: ``(N, 20)`` float64 radians, in the hand's ``joint_names`` order.
        timestamps: ``(N,)`` float64 seconds, or None when the file has no times (a time column of
            only NaN, as ``wuji-jax solve`` writes for inputs without times, counts as none).
        valid: ``(N,)`` bool (the solver's verdict), or None when the file has no ``valid`` column.
        flags: ``(N,)`` int64 bit set of ``wuji_jax.solver.FLAG_*`` (column ``flags`` or
            ``fit_flags``), or None.
        side: ``"left"`` / ``"right"`` when the file's ``side`` column holds one side, else None.
        sides: ``(N,)`` str, the ``side`` column as read, or None.
        frame: ``(N,)`` int64 frame index within its source, or None.
        source: ``(N,)`` str, the landmark file each row was solved from, or None.
        path: the file read.
        kind: ``"table"`` (columns named by joint) or ``"array"`` (a plain numeric array).
        solved: True for ``wuji-jax solve`` output (it has the solver's ``residual_mm`` ... columns).
        ndim: 1 when the file held one pose as a flat ``(20,)`` array, else 2.
        row: ``(N,)`` int64 row numbers in the file (0 = the first frame); :meth:`rows` keeps them.
    """

    angles: np.ndarray
    timestamps: np.ndarray | None = None
    valid: np.ndarray | None = None
    flags: np.ndarray | None = None
    side: str | None = None
    sides: np.ndarray | None = None
    frame: np.ndarray | None = None
    source: np.ndarray | None = None
    path: str = ""
    kind: str = "array"
    solved: bool = False
    ndim: int = 2
    row: np.ndarray | None = None

    def __post_init__(self):
        if self.row is None:
            object.__setattr__(self, "row", np.arange(len(self), dtype=np.int64))

    def __len__(self) -> int:
        return int(self.angles.shape[0])

    @property
    def sources(self) -> list[str]:
        """The distinct sources, in order of first appearance (empty without a ``source`` column)."""
        if self.source is None:
            return []
        _, first = np.unique(self.source, return_index=True)
        return [str(self.source[i]) for i in sorted(first)]

    def rows(self, index) -> "AngleTable":
        """The table restricted to ``index`` (a boolean mask or integer indices), in that order."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        take = (lambda a: None if a is None else a[idx])  # noqa: E731
        sides = take(self.sides)
        return dataclasses.replace(
            self, angles=self.angles[idx], timestamps=take(self.timestamps), valid=take(self.valid),
            flags=take(self.flags), sides=sides, frame=take(self.frame), source=take(self.source),
            side=_one_side(sides) if sides is not None else self.side, ndim=2, row=self.row[idx])

    def invalid(self) -> np.ndarray:
        """``(N,)`` bool: frames the solver marked invalid (all False without a ``valid`` column)."""
        if self.valid is None:
            return np.zeros(len(self), bool)
        return ~self.valid

    def describe_flags(self, i: int) -> str:
        """The flag names of frame ``i`` (``"bad_scale, high_residual"``), or ``""``."""
        if self.flags is None:
            return ""
        from ..ik.config import FLAG_NAMES

        f = int(self.flags[i])
        return ", ".join(name for bit, name in FLAG_NAMES.items() if f & bit)


def _hand_model(hand):
    from ..hand.model import HandModel, load_hand

    if hand is None:
        return load_hand("right")
    if isinstance(hand, str):
        return load_hand(hand)
    if isinstance(hand, HandModel) or hasattr(hand, "joint_names"):
        return hand
    raise TypeError(f"hand must be a HandModel, 'left', 'right' or None; got {type(hand).__name__}")


def _one_side(sides: np.ndarray | None) -> str | None:
    if sides is None or sides.size == 0:
        return None
    vals = {str(s).strip().lower() for s in np.unique(sides)}
    vals.discard("")
    if len(vals) == 1:
        v = vals.pop()
        return v if v in ("left", "right") else None
    return None


def read_angles(path: str | os.PathLike, hand=None, *, degrees: bool = False) -> AngleTable:
    """Read joint angles from any file a ``wuji-jax`` verb writes or accepts (see the module docstring).

    Args:
        path: the file.
        hand: a :class:`~wuji_jax.HandModel`, ``"left"`` / ``"right"``, or None (the right hand; both
            hands have the same joint names). Gives the joint names of the columns and their order.
        degrees: the file holds degrees (converted to radians); refused for ``wuji-jax solve``
            output, which is radians.

    Returns:
        an :class:`AngleTable` with ``angles (N, 20)`` radians (a flat ``(20,)`` pose reads as
        ``N = 1``, with ``ndim == 1``).

    Raises:
        ValueError: one line ``"<path>: <problem>; <what to do>"``: not numbers, wrong shape, a joint
            column missing, a file of landmarks, no frames, columns of different lengths ...
        OSError: the file cannot be opened (missing, a folder, no permission).
    """
    hand = _hand_model(hand)
    names = tuple(hand.joint_names)
    p = Path(path)
    label = str(path)
    if p.is_dir():
        raise OSError(f"{label}: cannot read (it is a folder); give an angle file")
    try:
        size = p.stat().st_size
    except OSError as e:
        raise OSError(f"{label}: cannot read ({e.strerror or e}); check the path") from None
    ext = p.suffix.lower()
    try:
        if ext in (".parquet", ".pq"):
            cols = _parquet_columns(p, label, names)
        elif ext == ".npz":
            cols = _npz_columns(p, label, names, size)
        elif ext == ".npy":
            cols = {"angles": _npy_array(p, label)}
        elif ext in (".json", ".jsonl", ".ndjson"):
            cols = _json_columns(p, label, names, lines=ext != ".json")
        else:
            cols = _text_columns(p, label, names, ext)
    except (ValueError, OSError):
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError, csv.Error, RecursionError,
            KeyError, TypeError, IndexError, MemoryError) as e:
        raise err(label, f"cannot read it as an angle file ({why(e)})") from None
    return _table(cols, label, names, degrees)


def _table(cols: dict[str, Any], label: str, names: Sequence[str], degrees: bool) -> AngleTable:
    """An :class:`AngleTable` from ``{"angles": array}`` or ``{joint name: column, ...}`` + extras."""
    n_j = len(names)
    kind = "array" if "angles" in cols else "table"
    solved = bool(cols.pop("__solved__", False))
    if kind == "array":
        a = _numeric(cols["angles"], label, "the angles")
        ndim = a.ndim
        if a.ndim == 1 and a.shape[0] == n_j:
            a = a[None]
        if a.ndim != 2 or a.shape[-1] != n_j:
            hint = ""
            if a.shape[-2:] == (21, 3) or a.shape[-1:] == (63,):
                hint = ("; these look like hand landmarks (21 x 3): solve them first (wuji-jax solve), or "
                        "pass them where landmarks are expected (inspire --landmarks)")
            raise err(label, f"expected joint angles of shape (T, {n_j}) or ({n_j},) (T frames of the hand's "
                             f"{n_j} joint angles, order as `wuji-jax pose --list` prints); got {a.shape}"
                       + (hint or "; check the file and its delimiter"))
    else:
        missing = [j for j in names if j not in cols]
        if missing:
            have = sum(j in cols for j in names)
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise err(label, f"no column '{missing[0]}'{more} ({have} of the {n_j} joint-angle columns found); "
                             f"a table needs one column per joint, named as `wuji-jax pose --list` prints "
                             f"({names[0]} ... {names[-1]}), as `wuji-jax solve` writes them")
        a = np.stack([_numeric(cols[j], label, f"column '{j}'").reshape(-1) for j in names], axis=1)
        ndim = 2
    a = np.asarray(a, np.float64)
    n = a.shape[0]
    if n == 0:
        raise err(label, "holds no frames; give a file with at least one frame of angles")
    if degrees:
        if solved:
            raise err(label, "was written by `wuji-jax solve`, whose angles are radians; drop --degrees "
                             "(degrees=True)")
        a = np.deg2rad(a)

    def col(key, what):
        v = cols.get(key)
        if v is None:
            return None
        v = np.asarray(v)
        if v.size == n:
            v = v.reshape(n)
        if v.shape != (n,):
            raise err(label, f"{what} has {v.size} values for {n} frames; every column needs one value a "
                             "frame")
        return v

    ts = col("timestamps", "the time column")
    if ts is not None:
        ts = _numeric(ts, label, "the time column").astype(np.float64)
        if np.isnan(ts).all():
            ts = None
    valid = col("valid", "column 'valid'")
    if valid is not None:
        if valid.dtype.kind in "US":
            low = np.char.lower(np.char.strip(valid.astype(str)))
            if not np.isin(low, ("true", "false", "1", "0", "1.0", "0.0")).all():
                raise err(label, "column 'valid' is not True/False; fix or drop the column")
            valid = np.isin(low, ("true", "1", "1.0"))
        else:
            valid = _numeric(valid, label, "column 'valid'")
            if not np.isin(valid, (0, 1)).all():
                raise err(label, "column 'valid' is not True/False (0/1); fix or drop the column")
            valid = valid.astype(bool)
    flags = col("flags", "the flags column")
    if flags is not None:
        flags = _numeric(flags, label, "the flags column")
        if not (np.isfinite(flags).all() and np.all(flags == np.round(flags)) and np.all(flags >= 0)):
            raise err(label, "the flags column holds values that are not bit sets (non-negative integers)")
        flags = flags.astype(np.int64)
    frame = col("frame", "column 'frame'")
    if frame is not None:
        frame = _numeric(frame, label, "column 'frame'")
        frame = frame.astype(np.int64) if np.isfinite(frame).all() else None
    sides = col("side", "column 'side'")
    if sides is not None:
        sides = np.char.lower(np.char.strip(np.asarray(sides).astype(str)))
    source = col("source", "column 'source'")
    if source is not None:
        source = np.asarray(source).astype(str)
    return AngleTable(angles=a, timestamps=ts, valid=valid, flags=flags, side=_one_side(sides), sides=sides,
                      frame=frame, source=source, path=label, kind=kind, solved=solved, ndim=ndim)


def _numeric(v, label: str, what: str) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype.kind == "b":
        return v.astype(np.float64)
    if v.dtype.kind in "US" or v.dtype.kind == "O":
        try:
            return np.asarray([float(x) if str(x).strip() not in ("", "None", "null") else math.nan
                               for x in v.reshape(-1)], np.float64).reshape(v.shape)
        except (TypeError, ValueError):
            bad = next(x for x in v.reshape(-1) if not _is_number(x))
            raise err(label, f"{what} is not numeric (holds {str(bad)[:40]!r}); angle files hold numbers "
                             "(radians unless --degrees)") from None
    if not np.issubdtype(v.dtype, np.number):
        raise err(label, f"{what} is not a numeric array (dtype {v.dtype}); angle files hold numbers")
    return v


def _is_number(x) -> bool:
    try:
        float(x)
        return True
    except (TypeError, ValueError):
        return False


def _meta_key(name: str) -> str | None:
    """The :class:`AngleTable` field a column ``name`` fills (``timestamps``, ``flags``, ...), or None."""
    if name in TIME_COLUMNS:
        return "timestamps"
    if name in FLAG_COLUMNS:
        return "flags"
    if name in ("valid", "side", "frame", "source"):
        return name
    return None


_META_MEANING = {"timestamps": "time", "flags": "solver flags", "valid": "valid column", "side": "side",
                 "frame": "frame", "source": "source"}


def _angle_role(names: Sequence[str]):
    """What a column of an angle table stands for (:func:`wuji_jax.io.check_unique_columns`): a joint
    angle, one of the extra columns (every name of the time, e.g. ``timestamp`` and ``t``, means one
    thing), or None (ignored)."""
    joints = set(names)

    def role(name: str) -> str | None:
        h = name.strip()
        if h in joints:
            return f"joint angle ({h})"
        k = _meta_key(h)
        return None if k is None else _META_MEANING[k]
    return role


def _pick(available: Iterable[str], names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Joint columns present, and ``{field: column}`` for the extra columns to read (first name wins)."""
    available = list(available)
    joints = [j for j in names if j in available]
    extra: dict[str, str] = {}
    for c in _META_COLUMNS:  # preference order: timestamp before t, fit_flags before flags
        k = _meta_key(c)
        if c in available and k not in extra:
            extra[k] = c
    return joints, extra


def _limits():
    """The data limits in force (:func:`wuji_jax.data.io.current_limits`), ``max_frames`` the default."""
    from ..data import io as wio

    return wio.current_limits(wio.MAX_FRAMES)


def _check_rows(label: str, n: int) -> None:
    limit = _limits().max_frames
    if n > limit:
        raise err(label, f"declares {n:,} frames, more than the {limit:,} one file may hold "
                         "(wuji_jax.io.MAX_FRAMES); split the file")


def _parquet_columns(p: Path, label: str, names: Sequence[str]) -> dict[str, Any]:
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ImportError(f"{label}: reading Parquet needs pyarrow; install the formats extra: "
                          "pip install 'wuji-jax[formats]' (or write the table as .npz / .csv)") from None
    with open_parquet(p, label, pre_buffer=False) as f:
        _check_rows(label, f.metadata.num_rows)
        available = list(f.schema_arrow.names)
        check_unique_columns(available, label, _angle_role(names))
        joints, extra = _pick(available, names)
        solved = any(c in available for c in _SOLVE_MARKERS)
        try:
            if joints:
                want = joints + list(extra.values())
                t = f.read(columns=want)
                cols: dict[str, Any] = {c: t.column(c).to_numpy(zero_copy_only=False) for c in joints}
                for k, c in extra.items():
                    cols[k] = t.column(c).to_numpy(zero_copy_only=False)
                cols["__solved__"] = solved
                return cols
        except Exception as e:
            raise err(label, f"cannot read its columns ({why(e)}); export it again") from None
    # no joint columns: a write_results table of an (N, 20) array ('angles_0' ...), or an error
    from ..data.io import read_results

    d = read_results(p)
    return _array_from_dict(d, label, names, available)


def _array_from_dict(d: Mapping[str, Any], label: str, names: Sequence[str], keys: Sequence[str]) -> dict:
    """``{"angles": array, "timestamps": ...}`` from a dict of arrays holding ``angles`` / ``q``."""
    key = next((k for k in _ARRAY_KEYS if k in d), None)
    if key is None:
        data = [k for k in d if _meta_key(k) is None]
        if len(data) == 1 and data[0] not in _LANDMARK_KEYS and np.asarray(d[data[0]]).dtype.kind not in "USO":
            key = data[0]
    if key is None:
        keys = list(keys)
        shown = ", ".join(keys[:8]) + (f", ... ({len(keys)} in all)" if len(keys) > 8 else "")
        if any(k in keys for k in _LANDMARK_KEYS):
            hint = ("it holds hand landmarks, not joint angles: solve them first (wuji-jax solve), or pass "
                    "them where landmarks are expected (inspire --landmarks)")
        else:
            hint = (f"expected the joint-angle columns `wuji-jax solve` writes ({names[0]} ... {names[-1]}) "
                    "or an array named 'angles' or 'q'")
        raise err(label, f"no joint angles (has {shown or 'nothing'}); {hint}")
    out: dict[str, Any] = {"angles": d[key]}
    for c in _META_COLUMNS:
        k = _meta_key(c)
        if c in d and k not in out:
            out[k] = d[c]
    return out


def _npz_members(p: Path, label: str, size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Declared ``(shape, dtype)`` of each member, read from the .npy headers; refuses bombs."""
    out = {}
    total = 0
    with open_npz(p, label) as zf:
        for name, info in npz_entries(zf).items():
            try:
                shape, dtype = npz_header(zf, info)
            except (ValueError, *ZIP_ERRORS) as e:
                raise err(label, f"member {name!r} is not a .npy array ({why(e)}); export it again") from None
            if shape:
                _check_rows(label, shape[0])
            total += int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
            out[name] = (shape, dtype)
    limits = _limits()
    if total > max(limits.expansion_min_bytes, limits.max_expansion * size):
        raise err(label, f"its arrays would expand to {total / 1e6:,.0f} MB from a {size / 1e6:,.1f} MB file, more "
                         "than wuji_jax.io.MAX_EXPANSION allows; the file is damaged or hostile")
    return out


def _npz_columns(p: Path, label: str, names: Sequence[str], size: int) -> dict[str, Any]:
    members = _npz_members(p, label, size)
    keys = list(members)
    joints, extra = _pick(keys, names)
    try:
        with open(p, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            if joints:
                cols: dict[str, Any] = {j: z[j] for j in joints}
                for k, c in extra.items():
                    cols[k] = z[c]
                cols["__solved__"] = any(c in keys for c in _SOLVE_MARKERS)
                return cols
            wanted = [k for k in keys if members[k][1].kind not in "USO" or _meta_key(k)]
            # read only the arrays that can matter: the angle array and the extras
            key = next((k for k in _ARRAY_KEYS if k in keys), None)
            if key is None:
                data = [k for k in wanted if _meta_key(k) is None]
                key = data[0] if len(data) == 1 and data[0] not in _LANDMARK_KEYS else None
            d = {} if key is None else {key: z[key]}
            for c in extra.values():
                d[c] = z[c]
    except ValueError as e:  # object arrays (pickles) and damaged members
        raise err(label, f"cannot read its arrays ({why(e)}); save plain numeric arrays "
                         "(np.savez(path, angles=..., timestamps=...))") from None
    return _array_from_dict(d, label, names, keys)


def _npy_array(p: Path, label: str) -> np.ndarray:
    try:
        a = np.load(p, allow_pickle=False, mmap_mode="r")
    except ValueError as e:
        raise err(label, f"not a numeric array ({why(e)}); save it with numpy.save") from None
    if a.ndim:
        _check_rows(label, a.shape[0])
    if a.dtype.kind in "USO" or not (np.issubdtype(a.dtype, np.number) or a.dtype.kind == "b"):
        raise err(label, f"not a numeric array (dtype {a.dtype}); angle files hold numbers")
    return np.array(a)


def _json_columns(p: Path, label: str, names: Sequence[str], lines: bool) -> dict[str, Any]:
    try:
        with open(p, encoding="utf-8") as f:
            if lines:
                data = []
                for i, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            data.append(json.loads(line, object_pairs_hook=unique_keys(label, f"line {i}")))
                        except json.JSONDecodeError as e:
                            raise err(label, f"line {i}: not JSON ({e.msg}); one JSON value a line") from None
            else:
                try:
                    data = json.load(f, object_pairs_hook=unique_keys(label))
                except json.JSONDecodeError as e:
                    raise err(label, f"not JSON ({e.msg} at line {e.lineno}); check the file") from None
    except UnicodeDecodeError as e:
        raise err(label, f"not UTF-8 text ({why(e)})") from None
    if isinstance(data, list) and data and all(isinstance(r, Mapping) for r in data):
        keys = list(dict.fromkeys(k for r in data for k in r))  # records
        if any(j in keys for j in names):
            return _record_columns(data, keys, names)
        if any(k in keys for k in _ARRAY_KEYS):
            key = next(k for k in _ARRAY_KEYS if k in keys)
            out = {"angles": _json_array([r.get(key) for r in data], label, key)}
            for k, c in _pick(keys, names)[1].items():
                out[k] = _json_array([r.get(c) for r in data], label, c) if k not in ("side", "source") else \
                    np.asarray([str(r.get(c, "")) for r in data])
            return out
        raise err(label, f"its records have no joint angles (keys {', '.join(keys[:8])}); expected keys "
                         f"{names[0]} ... {names[-1]}, or 'angles'")
    if isinstance(data, Mapping):
        keys = list(data)
        if any(j in keys for j in names):  # columns: {"thumb_cmc_flex": [...], ...}
            cols: dict[str, Any] = {j: _json_array(data[j], label, j) for j in names if j in data}
            for k, c in _pick(keys, names)[1].items():
                cols[k] = np.asarray(data[c]) if k in ("side", "source") else _json_array(data[c], label, c)
            return cols
        d = {k: (np.asarray(v) if _meta_key(k) in ("side", "source") else _json_array(v, label, k))
             for k, v in data.items() if k in _ARRAY_KEYS or _meta_key(k)}
        return _array_from_dict(d, label, names, keys)
    return {"angles": _json_array(data, label, "the angles")}


def _record_columns(data: list, keys: list, names: Sequence[str]) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    for j in names:
        if j in keys:
            cols[j] = np.asarray([_num_or_nan(r.get(j)) for r in data], dtype=object)
    for k, c in _pick(keys, names)[1].items():
        vals = [r.get(c) for r in data]
        cols[k] = np.asarray([("" if v is None else str(v)) for v in vals]) if k in ("side", "source") else \
            np.asarray([_num_or_nan(v) for v in vals], dtype=object)
    return cols


def _num_or_nan(v):
    return math.nan if v is None else v


def _json_array(v, label: str, what: str) -> np.ndarray:
    try:
        a = np.asarray(v, dtype=np.float64) if v is not None else np.asarray(math.nan)
    except (TypeError, ValueError):
        raise err(label, f"'{what}' is not a list of numbers (or of equal-length rows of numbers)") from None
    return a


def _text_columns(p: Path, label: str, names: Sequence[str], ext: str) -> dict[str, Any]:
    delim = "," if ext == ".csv" else ("\t" if ext == ".tsv" else None)
    first = _first_line(p, label)
    tokens = _split(first, delim)
    if first and not all(_is_number(t) for t in tokens if t != ""):
        return _header_columns(p, label, names, delim)
    try:
        a = np.loadtxt(p, delimiter=delim, ndmin=1)
    except ValueError as e:
        raise err(label, f"not a numeric array ({why(e)}); one frame of angles a row"
                         + (", comma-separated" if delim == "," else "")) from None
    if a.ndim:
        _check_rows(label, a.shape[0])
    return {"angles": a}


def _first_line(p: Path, label: str) -> str:
    limit = _limits().max_line_chars
    try:
        with open(p, encoding="utf-8-sig") as f:
            for line in f:
                if len(line) > limit:
                    raise err(label, f"a line is longer than {limit:,} characters; not an angle table")
                if line.strip() and not line.lstrip().startswith("#"):
                    return line.strip()
    except UnicodeDecodeError as e:
        raise err(label, f"not UTF-8 text ({why(e)}); angle text files hold numbers") from None
    return ""


def _split(line: str, delim: str | None) -> list[str]:
    if delim is None:
        return line.split()
    return [t.strip() for t in next(csv.reader([line], delimiter=delim))]


def _header_columns(p: Path, label: str, names: Sequence[str], delim: str | None) -> dict[str, Any]:
    """A text table with a header line: the joint columns and the extras, by name."""
    limits = _limits()
    limit, max_rows = limits.max_line_chars, limits.max_frames
    with open(p, encoding="utf-8-sig", newline="") as f:
        lines = (ln for ln in f if ln.strip() and not ln.lstrip().startswith("#"))
        rows = csv.reader(lines, delimiter=delim) if delim else (ln.split() for ln in lines)
        header = [h.strip() for h in next(rows)]
        check_unique_columns(header, label, _angle_role(names))
        joints, extra = _pick(header, names)
        if not joints:
            keys = header
            if delim == "," and any(h.startswith(("angles_", "q_")) for h in header):
                from ..data.io import read_results  # write_results' layout of an (N, 20) array

                d = read_results(p)
                return _array_from_dict(d, label, names, list(d))
            if any(h in ("x0", "world_0_0", "landmarks_0_0") for h in header):
                keys = header + ["landmarks"]
            return _array_from_dict({}, label, names, keys)
        where = {h: i for i, h in reversed(list(enumerate(header)))}
        want = joints + list(extra.values())
        vals: dict[str, list] = {c: [] for c in want}
        for n, row in enumerate(rows):
            if n >= max_rows:
                _check_rows(label, n + 1)
            if len(row) != len(header):
                raise err(label, f"data row {n + 1} has {len(row)} fields, the header {len(header)}; every row "
                                 "needs one value for each column")
            for c in want:
                cell = row[where[c]]
                if len(cell) > limit:
                    raise err(label, f"data row {n + 1}: a field is longer than {limit:,} characters")
                vals[c].append(cell)
    cols: dict[str, Any] = {}
    for j in joints:
        cols[j] = _cells(vals[j], label, j)
    for k, c in extra.items():
        cols[k] = np.asarray(vals[c]) if k in ("side", "source", "valid") else _cells(vals[c], label, c)
    cols["__solved__"] = any(c in header for c in _SOLVE_MARKERS)
    return cols


_MISSING = ("", "nan", "NaN", "NA", "null", "None")


def _cells(texts: list[str], label: str, column: str) -> np.ndarray:
    """A text column as float64, converted by NumPy: ``""``, ``nan``, ``NA``, ``null``, ``None`` → NaN,
    ``True`` / ``False`` → 1 / 0; a cell that is no number is the one-line error naming its data row."""
    t = np.char.strip(np.asarray(texts, dtype=str))
    out = np.full(t.shape, math.nan)
    true, false = np.isin(t, ("True", "true")), np.isin(t, ("False", "false"))
    out[true], out[false] = 1.0, 0.0
    num = np.flatnonzero(~(np.isin(t, _MISSING) | true | false))
    try:
        out[num] = t[num].astype(np.float64)
    except ValueError:
        for i in num:  # the first cell Python's float() refuses too
            try:
                out[i] = float(t[i])
            except ValueError:
                raise err(label, f"data row {i + 1}, column '{column}': {str(t[i])[:40]!r} is not a number; "
                                 "angle tables hold numbers (radians unless --degrees)") from None
    return out


# ------------------------------------------------------------------------------------------ landmarks


@dataclasses.dataclass(frozen=True, eq=False)
class LandmarkTable:
    """Landmarks read by :func:`read_landmarks`.

    Attributes:
        world: ``(N, 21, 3)`` float64 metres (NaN rows where no hand was found).
        timestamps: ``(N,)`` float64 seconds, or None when the file has no times.
        detected: ``(N,)`` bool, False for frames without a usable hand.
        side: ``"left"`` / ``"right"`` from the file's handedness labels (majority), or None. For
            videos this is MediaPipe's label, which depends on mirroring (see :mod:`wuji_jax.video`);
            the CLI does not choose the hand model from it.
        path: the file read.
        notes: :func:`wuji_jax.io.load_landmarks`' remarks (flagged frames ...).
        recording: the full :class:`wuji_jax.io.LandmarkRecording`.
    """

    world: np.ndarray
    timestamps: np.ndarray | None
    detected: np.ndarray
    side: str | None
    path: str
    notes: tuple[str, ...] = ()
    recording: Any = None

    def __len__(self) -> int:
        return int(self.world.shape[0])


def read_landmarks(path: str | os.PathLike, *, fps: float | None = None, **options: Any) -> LandmarkTable:
    """Read one landmark recording with :func:`wuji_jax.io.load_landmarks`, the reader of ``wuji-jax solve``.

    Accepts what ``solve`` accepts (``.npy``, ``.npz`` with ``landmarks`` or ``world``, ``.csv``,
    ``.jsonl``, ``.parquet``, ``.h5``, a video). ``fps`` gives times to a file without any;
    ``options`` go to ``load_landmarks`` (``max_frames=`` ...). One file (or video) only: the frames
    of several would restart their times.

    Raises:
        ValueError: one line naming the file (``load_landmarks``' errors, or several files given).
        OSError: the file cannot be opened.
    """
    from ..data.io import load_landmarks

    label = str(path)
    p = Path(path)
    if not p.exists() and not any(c in label for c in "*?["):
        raise OSError(f"{label}: cannot read (No such file or directory); check the path")
    rec = load_landmarks(path, fps=fps, **options)
    if len(rec.sources) > 1:
        raise err(label, f"holds {len(rec.sources)} recordings ({', '.join(rec.sources[:3])}"
                         f"{', ...' if len(rec.sources) > 3 else ''}); give one file")
    ts = np.asarray(rec.timestamps, np.float64)
    hand = {"Right": "right", "Left": "left"}.get(_majority(rec.handedness))
    return LandmarkTable(world=np.asarray(rec.world, np.float64), timestamps=None if np.isnan(ts).all() else ts,
                         detected=np.asarray(rec.detected, bool), side=hand, path=label,
                         notes=tuple(rec.notes), recording=rec)


def _majority(h: np.ndarray) -> str:
    right, left = int(np.count_nonzero(h == "Right")), int(np.count_nonzero(h == "Left"))
    return "" if right == left == 0 else ("Right" if right >= left else "Left")


# ------------------------------------------------------------------------------------- for the CLI


def table_side(table: AngleTable, given: str | None, default: str = "right") -> tuple[str, str | None]:
    """The hand side to use for ``table``: ``(side, note)``.

    ``given`` (an explicit ``--side``) wins; a note says so when the table's ``side`` column names the
    other hand. Without ``given``: the table's side, else ``default``. A table of both hands without
    ``given`` is a ``ValueError``.
    """
    sides = set() if table.sides is None else {s for s in np.unique(table.sides).tolist() if s}
    if given is not None:
        other = sorted(sides - {given})
        note = None
        if other:
            note = (f"{table.path} holds {' and '.join(other)}-hand frames; using them as {given}-hand "
                    "angles, as --side says")
        return given, note
    if len(sides) > 1:
        raise err(table.path, f"holds frames of both hands ({', '.join(sorted(sides))}); give --side, or "
                               "one recording's frames")
    return table.side or default, None
