"""MediaPipe's 21 hand landmarks: names, indices, finger chains, and the WG110v12 keypoint map."""

from __future__ import annotations

__all__ = [
    "LANDMARK_NAMES",
    "NUM_LANDMARKS",
    "FINGER_NAMES",
    "FINGER_LANDMARKS",
    "PALM_LANDMARKS",
    "KEYPOINT_LINKS",
    "HAND_CONNECTIONS",
    "check_landmarks",
    "unit_problem",
    "hand_extent",
    "chirality",
    "detect_side",
]

NUM_LANDMARKS = 21

#: MediaPipe hand landmark names, index order 0..20.
LANDMARK_NAMES: tuple[str, ...] = (
    "WRIST",
    "THUMB_CMC", "THUMB_MCP", "THUMB_IP", "THUMB_TIP",
    "INDEX_FINGER_MCP", "INDEX_FINGER_PIP", "INDEX_FINGER_DIP", "INDEX_FINGER_TIP",
    "MIDDLE_FINGER_MCP", "MIDDLE_FINGER_PIP", "MIDDLE_FINGER_DIP", "MIDDLE_FINGER_TIP",
    "RING_FINGER_MCP", "RING_FINGER_PIP", "RING_FINGER_DIP", "RING_FINGER_TIP",
    "PINKY_MCP", "PINKY_PIP", "PINKY_DIP", "PINKY_TIP",
)

FINGER_NAMES: tuple[str, ...] = ("thumb", "index", "middle", "ring", "pinky")

#: Landmark indices of each finger's 4 points, base to tip; ``FINGER_LANDMARKS[f]`` for finger ``f``.
FINGER_LANDMARKS: tuple[tuple[int, int, int, int], ...] = tuple(
    (1 + 4 * f, 2 + 4 * f, 3 + 4 * f, 4 + 4 * f) for f in range(5)
)

#: Landmarks fixed to the palm in the WG110v12 model (wrist, thumb CMC, the four finger MCPs).
PALM_LANDMARKS: tuple[int, ...] = (0, 1, 5, 9, 13, 17)

#: WG110v12 link whose origin is each MediaPipe keypoint (DESIGN.md's keypoint map).
KEYPOINT_LINKS: tuple[str, ...] = (
    "wrist",
    "thumb_metacarpal", "thumb_middle", "thumb_distal", "thumb_tip",
    "index_finger_metacarpal", "index_finger_middle", "index_finger_distal", "index_finger_tip",
    "middle_finger_metacarpal", "middle_finger_middle", "middle_finger_distal", "middle_finger_tip",
    "ring_finger_metacarpal", "ring_finger_middle", "ring_finger_distal", "ring_finger_tip",
    "pinky_metacarpal", "pinky_middle", "pinky_distal", "pinky_tip",
)

#: Skeleton edges between landmarks (as MediaPipe draws them).
HAND_CONNECTIONS: tuple[tuple[int, int], ...] = (
    (0, 1), (1, 2), (2, 3), (3, 4),
    (0, 5), (5, 6), (6, 7), (7, 8),
    (5, 9), (9, 10), (10, 11), (11, 12),
    (9, 13), (13, 14), (14, 15), (15, 16),
    (13, 17), (0, 17), (17, 18), (18, 19), (19, 20),
)


# ------------------------------------------------------------------------------- validation (numpy)

import math  # noqa: E402

import numpy as _np  # noqa: E402  (kept below the constants: this module is mostly data)


def hand_extent(landmarks) -> _np.ndarray:
    """Diagonal of each frame's bounding box over its finite landmarks, ``(*batch,)`` (input units)."""
    lm = _np.asarray(landmarks, _np.float64)
    if _np.isfinite(lm).all():  # the common case, without the masking copies
        d = lm.max(-2) - lm.min(-2)
        return _np.sqrt((d * d).sum(-1))
    finite = _np.isfinite(lm).all(-1, keepdims=True)
    hi = _np.where(finite, lm, -_np.inf).max(-2)
    lo = _np.where(finite, lm, _np.inf).min(-2)
    ext = _np.linalg.norm(hi - lo, axis=-1)
    return _np.where(_np.isfinite(ext), ext, _np.nan)


_UNIT_SAMPLE = 256  # frames the unit check looks at


def plainly_metres(extent: float, xy_min: float) -> bool:
    """The common case of :func:`unit_problem`, from the bounding-box diagonal ``extent`` and the lowest
    x or y of the landmarks: hand-sized in metres (5–40 cm) and not normalised image coordinates
    (those have x, y ≥ 0). False for NaN (a missing landmark): then the full test decides."""
    return 0.05 <= extent <= 0.40 and xy_min <= 0.005


def unit_problem(landmarks) -> str | None:
    """Describe why ``(*batch, 21, 3)`` landmarks do not look like metres, or ``None`` if they do.

    A human hand spans 5–40 cm (bounding-box diagonal). Judged on the median over frames (over
    ``_UNIT_SAMPLE`` evenly spaced frames of longer batches, so the check costs the same for 10^3 or
    10^7 frames), so single bad frames are left to the solver's flags.
    """
    with _np.errstate(over="ignore", invalid="ignore"):  # huge coordinates: judged, not warned about
        return _unit_problem(landmarks)


def _unit_problem(landmarks) -> str | None:
    lm = _np.asarray(landmarks).reshape(-1, 21, 3)
    if lm.shape[0] > _UNIT_SAMPLE:
        lm = lm[_np.linspace(0, lm.shape[0] - 1, _UNIT_SAMPLE).astype(_np.int64)]
    # the common case first, in a few numpy calls: every landmark finite, hand-sized in metres
    if not lm.shape[0]:
        return None
    lo = lm.min(1)
    d = lm.max(1) - lo  # NaN in frames with a missing landmark: then the full test below
    ext = _np.sqrt((d * d).sum(-1))
    e = float(ext[0]) if ext.size == 1 else float(_np.median(ext))
    if plainly_metres(e, float(lo[:, :2].min())):
        return None
    lm = lm.astype(_np.float64)
    ext = hand_extent(lm)
    fin_ext = _np.isfinite(ext)
    ok = fin_ext & (ext > 1e-9)
    if not ok.any():
        if fin_ext.any():  # landmarks, but every frame a single point
            return ("every frame's landmarks are one point (zero extent): not a hand; check the file's "
                    "columns or how it was written")
        return None
    e = float(ext[0]) if ext.size == 1 else float(_np.median(ext[ok]))
    good = lm if ok.all() else lm[ok]
    xy, z = good[..., :2], good[..., 2]
    xy_min = float(xy.min()) if _np.isfinite(xy).all() else float(_np.nanmin(xy))  # nanmin: ~4x slower
    if 0.05 <= e <= 0.40 and not xy_min > 0.005:  # metres, and not normalised image coordinates
        return None
    fin = _np.isfinite(xy).all(-1)
    xy_span = _np.nanmedian(_np.linalg.norm(_np.nanmax(xy, 1) - _np.nanmin(xy, 1), axis=-1))
    z_span = _np.nanmedian(_np.nanmax(z, 1) - _np.nanmin(z, 1))
    flat_z = z_span < 0.15 * max(xy_span, 1e-12)
    if e > 0.40:
        if flat_z and _np.nanmin(xy[fin]) >= 0 and e > 20:
            return (f"landmarks look like pixel coordinates (hand spans {e:.0f} units, flat z); pass "
                    "MediaPipe world landmarks in metres (HandLandmarkerResult.hand_world_landmarks)")
        if 50 <= e <= 400:
            return f"landmarks look like millimetres (hand spans {e:.0f} units); divide by 1000 to pass metres"
        return (f"hand spans {e:.3g} units, far above a human hand's 5–40 cm; pass metres "
                "(MediaPipe world landmarks)")
    in_unit = fin.all() and xy_min >= 0 and _np.nanmax(xy) <= 1
    wrist_at_origin = _np.nanmedian(_np.linalg.norm(good[:, 0], axis=-1)) < 1e-6
    # MediaPipe's normalised landmarks: x, y in [0, 1] and depth relative to the wrist (z = 0 there)
    wrist_depth_zero = bool(_np.all(good[:, 0, 2] == 0))
    image_like = flat_z and _np.nanmax(_np.abs(z)) < 0.3 or wrist_depth_zero
    if in_unit and not wrist_at_origin and xy_min > 0.005 and image_like:
        return ("landmarks look like normalised image coordinates (x, y in [0, 1], flat z); pass "
                "MediaPipe world landmarks in metres (HandLandmarkerResult.hand_world_landmarks)")
    if e < 0.05:
        if e >= 0.005:
            return (f"hand spans {e * 100:.2g} units, far below 5–40 cm: centimetres or decimetres? "
                    "pass metres")
        return f"hand spans {e:.3g} units, far below a human hand's 5–40 cm; pass metres"
    return None


def check_landmarks(landmarks, check_units: bool = True) -> _np.ndarray:
    """Validate ``(*batch, 21, 3)`` landmarks (metres) and return them as a float array.

    NaN/inf entries are allowed (they mark missing landmarks), but not everywhere.

    Raises:
        ValueError: saying what was found and what to pass instead.
    """
    try:
        lm = _np.asarray(landmarks)
    except Exception as e:  # ragged lists and the like
        raise ValueError(f"landmarks could not be read as an array: {e}") from None
    kind = lm.dtype.kind  # f float, i/u integers, b bool, c complex; anything else is not numbers
    if kind not in "fiubc":
        raise ValueError(f"landmarks must be numeric, got dtype {lm.dtype}")
    if kind != "f":
        lm = lm.astype(_np.float64)
    if lm.ndim >= 1 and lm.shape[-1] == 63:
        raise ValueError(f"landmarks have shape {lm.shape}: flat rows of 63; reshape to (..., 21, 3) first")
    if lm.ndim < 2 or lm.shape[-2:] != (21, 3):
        hint = ""
        if lm.ndim >= 2 and lm.shape[-2:] == (21, 2):
            hint = " (2-D image points; pass 3-D world landmarks in metres)"
        elif lm.ndim >= 2 and lm.shape[-2:] == (3, 21):
            hint = " (coordinates before landmarks; swap the last two axes: np.swapaxes(landmarks, -1, -2))"
        elif lm.ndim >= 2 and lm.shape[-1] == 3:
            hint = f" ({lm.shape[-2]} points per frame; MediaPipe hands have 21)"
        raise ValueError(f"landmarks must have shape (*batch, 21, 3); got {lm.shape}{hint}")
    with _np.errstate(over="ignore", invalid="ignore"):  # a sum of huge values is just not finite
        total = lm.sum()
    if lm.size and not math.isfinite(total) and not _np.isfinite(lm).any():
        raise ValueError("landmarks contain no finite value (all NaN/inf); nothing to fit")
    if check_units:
        problem = unit_problem(lm)
        if problem:
            raise ValueError(problem + " (or pass check_units=False)")
    return lm


def chirality(landmarks) -> _np.ndarray:
    """Per-frame chirality ``(*batch,)``: +1 right-hand geometry, −1 left, 0 undecided.

    The palm normal ``(index MCP − wrist) × (pinky MCP − wrist)`` points palmar on a right hand
    (towards the thumb's CMC and MCP) and dorsal on a left one; mirroring flips the sign.
    """
    with _np.errstate(over="ignore", invalid="ignore"):  # huge coordinates: undecided, not warned about
        return _chirality(_np.asarray(landmarks, _np.float64))


def _chirality(lm: _np.ndarray) -> _np.ndarray:
    w = lm[..., 0, :]
    n = _np.cross(lm[..., 5, :] - w, lm[..., 17, :] - w)
    nn = _np.linalg.norm(n, axis=-1)
    side = ((lm[..., 1, :] - w) + (lm[..., 2, :] - w))
    c = (n * side).sum(-1) / _np.maximum(nn, 1e-300)
    scale = _np.linalg.norm(lm[..., 9, :] - w, axis=-1)
    decided = _np.isfinite(c) & (nn > 1e-12) & (_np.abs(c) > 0.05 * _np.maximum(scale, 1e-300))
    return _np.where(decided, _np.sign(c), 0).astype(_np.int8)


def detect_side(landmarks) -> str | None:
    """``"right"``/``"left"`` by majority chirality over frames, ``None`` if undecided."""
    c = chirality(landmarks).reshape(-1)
    votes = int((c > 0).sum()) - int((c < 0).sum())
    decided = int((c != 0).sum())
    if decided == 0 or abs(votes) < 0.5 * decided:
        return None
    return "right" if votes > 0 else "left"
