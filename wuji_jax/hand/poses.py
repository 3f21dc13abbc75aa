"""Named hand poses as WG110v12 joint angles ``(20,)``, radians, seed ID order.

Used for pictures, tests and examples. Every pose lies within the joint limits.
Finger blocks are ``(mcp_flex, mcp_abd, pip, dip)``; the thumb block is ``(cmc_flex, cmc_abd, mcp, ip)``.
Positive flexion bends towards the palm; positive MCP abduction moves a finger towards the pinky side.
"""

from __future__ import annotations

import numpy as np

__all__ = ["POSES", "named_pose", "pose_names"]

_CURL = (1.45, 0.0, 1.60, 1.00)
_STRAIGHT = (0.0, 0.0, 0.0, 0.0)
# thumb and index of the pinch: fitted (thumb-tip to index-tip distance 6 mm, near the old pose) on WG110v12
_PINCH_THUMB = (0.32, 0.07, 0.25, 0.31)
_PINCH_INDEX = (0.57, 0.01, 0.77, 0.42)


def _pose(thumb, index, middle, ring, pinky) -> np.ndarray:
    return np.asarray((*thumb, *index, *middle, *ring, *pinky), np.float64)


#: name → ``(20,)`` joint angles in radians.
POSES: dict[str, np.ndarray] = {
    "open": _pose((0.0, 0.0, 0.0, 0.0), _STRAIGHT, _STRAIGHT, _STRAIGHT, _STRAIGHT),
    "spread": _pose((-0.2, -0.15, 0.0, 0.0), (0.0, -0.30, 0, 0), (0, -0.05, 0, 0), (0, 0.2, 0, 0), (0, 0.40, 0, 0)),
    "fist": _pose((0.65, 0.35, 0.90, 0.70), _CURL, _CURL, _CURL, _CURL),
    "point": _pose((0.65, 0.35, 0.90, 0.70), _STRAIGHT, _CURL, _CURL, _CURL),
    "victory": _pose((0.65, 0.35, 0.90, 0.70), (0.0, -0.20, 0, 0), (0.0, 0.15, 0, 0), _CURL, _CURL),
    "thumbs_up": _pose((-0.2, 0.0, 0.0, 0.0), _CURL, _CURL, _CURL, _CURL),
    # thumb and index tips 6 mm apart (keypoints 4 and 8; tests/test_cli_pose.py checks < 10 mm)
    "pinch": _pose(_PINCH_THUMB, _PINCH_INDEX, (0.2, 0, 0.2, 0.1), (0.2, 0, 0.2, 0.1), (0.2, 0, 0.2, 0.1)),
    "ok": _pose(_PINCH_THUMB, _PINCH_INDEX, (0.0, 0.05, 0, 0), (0.0, 0.15, 0, 0), (0.0, 0.3, 0, 0)),
}


def pose_names() -> tuple[str, ...]:
    return tuple(POSES)


def named_pose(name: str) -> np.ndarray:
    """Joint angles ``(20,)`` (radians) of a named pose; ``ValueError`` listing the names if unknown."""
    try:
        return POSES[name].copy()
    except KeyError:
        raise ValueError(f"unknown pose {name!r}; choose one of: {', '.join(POSES)}") from None
