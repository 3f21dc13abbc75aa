"""What the columns, arrays and keys of a landmark file mean, for every format's reader.

The wide table layout (CSV, Parquet) has one column a coordinate, ``x0, y0, z0, ..., x20, y20, z20``
(:data:`LANDMARK_COLUMNS`, or MediaPipe's names, :func:`landmark_spellings`), and optional columns
``timestamp`` (seconds), ``frame``, ``handedness``, ``score``. Arrays and keys (npz, HDF5, JSON) are named
as :data:`LANDMARK_KEYS`. Every problem is the one-line ``ValueError`` of :func:`~wuji_jax.data.limits.err`.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...hand.landmarks import NUM_LANDMARKS
from ..limits import err

__all__ = ["LANDMARK_COLUMNS", "LANDMARK_KEYS", "TIME_COLUMNS", "KEYS_SAID", "image_keys_hint", "check_shape",
           "landmark_array", "squeezed", "landmark_spellings", "check_unique_columns", "unique_keys",
           "landmark_role", "wide_columns", "optional_columns", "hand_label", "hand_labels"]

#: Column names of the wide table layout (CSV, Parquet): x0, y0, z0, ..., x20, y20, z20.
LANDMARK_COLUMNS: tuple[str, ...] = tuple(f"{a}{i}" for i in range(NUM_LANDMARKS) for a in "xyz")
#: Names of the time column (seconds), in order of preference.
TIME_COLUMNS: tuple[str, ...] = ("timestamp", "timestamps", "t", "time")
#: names of the landmark array (npz, HDF5) or key (JSONL), in order of preference: ours, and MediaPipe's
#: for world landmarks (metres)
LANDMARK_KEYS: tuple[str, ...] = ("landmarks", "world", "world_landmarks", "hand_world_landmarks")
#: :data:`LANDMARK_KEYS` as a message says them.
KEYS_SAID = "'landmarks' (or " + ", ".join(f"'{k}'" for k in LANDMARK_KEYS[1:]) + ")"


def image_keys_hint(keys) -> str:
    """A hint where ``keys`` hold MediaPipe's image landmarks but not its world landmarks."""
    if any(str(k).lower() in ("hand_landmarks", "image_landmarks", "normalized_landmarks") for k in keys):
        return (" ('hand_landmarks' are MediaPipe's normalised image coordinates; the fit needs its world "
                "landmarks in metres, 'hand_world_landmarks')")
    return ""


def check_shape(shape: tuple, path: Any, what: str) -> tuple:
    """The ``(N, 21, 3)`` shape an array of ``shape`` stands for (``(21, 3)`` is one frame), or a
    one-line error naming the likely fix."""
    shape = tuple(int(x) for x in shape)
    if shape == (NUM_LANDMARKS, 3):
        return (1, NUM_LANDMARKS, 3)
    if len(shape) == 2 and shape[1] == 3 * NUM_LANDMARKS:
        raise err(path, f"{what} has shape {shape}, expected (N, 21, 3); if each row is "
                        "x0, y0, z0, ..., x20, y20, z20 reshape it with a.reshape(-1, 21, 3)")
    if len(shape) == 3 and shape[1:] == (3, NUM_LANDMARKS):
        raise err(path, f"{what} has shape {shape}, expected (N, 21, 3); if its axes are frame, "
                        "coordinate, landmark, swap the last two with a.transpose(0, 2, 1)")
    if len(shape) != 3 or shape[1:] != (NUM_LANDMARKS, 3):
        raise err(path, f"{what} has shape {shape}, expected (N, 21, 3): N frames of MediaPipe's "
                        "21 hand landmarks (x, y, z)")
    return shape


def landmark_array(a: np.ndarray, path: Any, what: str = "array") -> np.ndarray:
    """``a`` reshaped to ``(N, 21, 3)``; refused unless it holds numbers of that shape."""
    if a.dtype.kind not in "fiu":
        raise err(path, f"{what} has dtype {a.dtype}, not numbers; store float landmarks in metres")
    return a.reshape(check_shape(a.shape, path, what))


def squeezed(name: str) -> str:
    """A column name without case and separators (``_``, ``.``, ``-``, spaces): ``WRIST.x`` → ``wristx``."""
    return re.sub(r"[\s_.\-]", "", name.lower())


def landmark_spellings() -> dict[str, str]:
    """Other spellings of the landmark columns (:func:`squeezed`) → ``x0`` … ``z20``: the landmark by
    its index or by MediaPipe's name (``wrist``, ``thumb_cmc``, ``index_finger_tip``, see
    :data:`wuji_jax.landmarks.LANDMARK_NAMES`), before or after the axis: ``x_0``, ``0_x``,
    ``WRIST_x``, ``wrist.x``, ``x_wrist``, ``Thumb CMC X``."""
    from ...hand.landmarks import LANDMARK_NAMES

    out = {}
    for i, name in enumerate(LANDMARK_NAMES):
        for a in "xyz":
            for who in (str(i), squeezed(name)):
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
                raise err(path, f"column {names[0]!r} appears {len(where)} times (columns "
                                f"{', '.join(str(i + 1) for i in where)}); keep one of them")
            raise err(path, f"columns {', '.join(map(repr, names))} name the same {r}; keep one of them")


def unique_keys(path: Any, where: str = "") -> Callable[[list], dict]:
    """A ``json.load`` ``object_pairs_hook`` that refuses an object holding one key twice (JSON keeps the
    last copy silently): a one-line ``ValueError`` naming ``path`` (and ``where``, e.g. ``"line 3"``)."""
    def hook(pairs: list) -> dict:
        d = dict(pairs)
        if len(d) != len(pairs):
            seen: set = set()
            twice = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise err(path, f"{where + ': ' if where else ''}key {twice!r} appears twice in one JSON object; "
                            "keep one of them")
        return d
    return hook


def landmark_role(spellings: Mapping[str, str]) -> Callable[[str], str | None]:
    """What a column of a landmark table stands for (:func:`check_unique_columns`)."""
    optional = {name: what for names, what in ((TIME_COLUMNS, "time"), (("frame", "frame_index"), "frame"),
                                              (("handedness",), "handedness"), (("score",), "score"),
                                              (LANDMARK_KEYS, "landmarks"))
                for name in names}

    def role(name: str) -> str | None:
        h = name.strip().lower()
        if h in optional:
            return optional[h]
        c = h if h in LANDMARK_COLUMNS else spellings.get(squeezed(h))
        return None if c is None else f"landmark coordinate ({c})"
    return role


def wide_columns(header: Sequence[str], path: Any) -> dict[str, int]:
    """Column name → index for the landmark and optional columns of a CSV / Parquet table. The
    landmark columns are ``x0`` … ``z20``, or where a table has none of a landmark's column under that
    name, the one column that spells it otherwise (:func:`landmark_spellings`). Two columns for one
    of them (a name twice, or two spellings) are refused (:func:`check_unique_columns`); a table of
    angles, a header of numbers or one row a landmark are refused with the way to fix them."""
    spellings = landmark_spellings()
    check_unique_columns(header, path, landmark_role(spellings))
    lower = [h.strip().lower() for h in header]
    pos = {h: i for i, h in enumerate(lower)}
    spelled: dict[str, list[int]] = {}
    for i, h in enumerate(lower):
        c = spellings.get(squeezed(h))
        if c is not None and h != c:
            spelled.setdefault(c, []).append(i)
    for c, where in spelled.items():
        if c in pos:
            continue
        if len(where) > 1:
            raise err(path, f"columns {', '.join(repr(header[i].strip()) for i in where)} name the same "
                            f"landmark coordinate ({c}); keep one of them")
        pos[c] = where[0]
    missing = [c for c in LANDMARK_COLUMNS if c not in pos]
    if missing:
        _refuse_missing(header, path, pos, missing)
    return {**{c: pos[c] for c in LANDMARK_COLUMNS}, **optional_columns(pos)}


def _refuse_missing(header: Sequence[str], path: Any, pos: Mapping[str, int], missing: list[str]) -> None:
    if "residual_mm" in pos and "thumb_cmc_flex" in pos:
        raise err(path, "a table of solved joint angles (what wuji-jax solve writes), not landmarks; "
                        "give it to wuji-jax inspire --angles, view or pose --angles-file")
    if len(missing) == len(LANDMARK_COLUMNS):
        try:
            [float(h) for h in header if h.strip()]
            numeric = len(header) > 0
        except ValueError:
            numeric = False
        if numeric:
            raise err(path, "the first line is numbers, not a header; add the header line "
                            "x0,y0,z0,...,x20,y20,z20 (optionally timestamp,frame)")
        names = {squeezed(h): h.strip() for h in header}
        which = next((names[k] for k in ("landmarkindex", "landmark", "landmarkid", "keypoint", "point")
                      if k in names), None)
        if which is not None and {"x", "y", "z"} <= set(names):
            frame = next((names[k] for k in ("frame", "frameindex", "timestamp", "t") if k in names), "frame")
            raise err(path, f"one row a landmark (columns x, y, z and '{which}'); pivot it to one row a "
                            f"frame with columns x0 ... z20, e.g. with pandas: w = df.pivot(index='{frame}', "
                            f"columns='{which}', values=['x', 'y', 'z']); w.columns = [f'{{a}}{{i}}' for a, i "
                            "in w.columns]; w.reset_index().to_csv('wide.csv', index=False)")
    shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
    raise err(path, f"missing landmark columns {shown} ({len(missing)} of 63); expected "
                    "x0,y0,z0,...,x20,y20,z20 (or MediaPipe's landmark names: wrist_x, thumb_cmc_x, ..., "
                    "pinky_tip_z) and optional timestamp, frame, handedness, score")


def optional_columns(pos: Mapping[str, int]) -> dict[str, int]:
    """``timestamps``, ``frame``, ``handedness``, ``score`` → their column's index, where a table has
    them (``pos``: lower-case column name → index)."""
    cols = {}
    for name in TIME_COLUMNS:
        if name in pos:
            cols["timestamps"] = pos[name]
            break
    for name, key in (("frame", "frame"), ("frame_index", "frame"), ("handedness", "handedness"),
                      ("score", "score")):
        if name in pos and key not in cols:
            cols[key] = pos[name]
    return cols


def hand_label(v: Any) -> str:
    """A handedness label as ``"Right"`` / ``"Left"``, anything else ``""``."""
    s = str(v).strip().capitalize() if v is not None else ""
    return s if s in ("Right", "Left") else ""


def hand_labels(values: Sequence[Any]) -> np.ndarray:
    """:func:`hand_label` of each value, ``(n,)`` ``<U5``: each distinct value is judged once."""
    seen: dict[Any, str] = {}
    return np.asarray([seen[v] if v in seen else seen.setdefault(v, hand_label(v)) for v in values],
                      dtype="<U5")
