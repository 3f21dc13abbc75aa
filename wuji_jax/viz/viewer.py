"""An interactive view of the kinematic tree: one self-contained HTML file (no network, no CDN).

:func:`write_viewer` embeds the model's joint table (origins, axes, limits, coupling gains) and the
joint angles as JSON and a small script that evaluates the chain itself (the same composition as
:func:`wuji_jax.forward_kinematics`: ``R_child = R_parent · O · Rot(axis, θ)``, ``p_child = p_parent +
R_parent · t``, in float64) and draws it on a ``<canvas>`` with its own 3-D projection:

* links as lines between link origins, revolute joints as dots with their axes, keypoints 0–20,
  optional observed landmarks in a second colour, the wrist frame;
* drag to rotate (shift- or right-drag to pan), wheel to zoom, double-click to reset the view;
* click a joint (or its name) for its parent and child link, axis (joint, parent and wrist frame),
  limits, current angle and, for the coupled ``thumb_cmc_rot``, the screw-home coupling law;
* a slider per joint, within its limits, re-poses the hand live; a ``(T, n)`` sequence adds a time
  slider and a play button.

The page is testable headless: once loaded it lists the joints in ``<ul id="joint-list">``
(``<li data-joint="NAME">``), writes the keypoints and link origins it computed into
``<pre id="keypoints-json">`` / ``<pre id="links-json">`` and sets ``document.body.dataset.ready``.
A URL hash ``#select=NAME&q=A0,...,A19`` (radians, CSV or a JSON list; also ``frame=K`` and
``click=NAME``, a synthetic click at the joint's dot) selects and poses the hand through the same
code as a click and the sliders. From scripts: ``window.wujiViewer.keypoints()``, ``.setPose(q)``,
``.select(name)``.

Names are data, never markup: the title, robot, link and joint names (from a URDF, an argument or an
angle file's name) are HTML-escaped (``html.escape(..., quote=True)``) where the page shows them as
HTML (``<title>``, ``<h1>``); in the embedded JSON every ``<``, ``>``, ``&``, U+2028 and U+2029 is
written as ``\\u003c``, ``\\u003e``, ``\\u0026``, ``\\u2028``, ``\\u2029``, so no name can close the
``<script>`` block or open a comment in it; the template is filled in one pass, so text inserted for one
placeholder is never read as another; and the page's script puts names into the DOM only as
``textContent``, ``dataset`` values and properties (no ``innerHTML``).
"""

from __future__ import annotations

import functools
import html
import importlib.resources
import json
import math
import re

import numpy as np

from ..hand.landmarks import HAND_CONNECTIONS, LANDMARK_NAMES
from ..hand.model import ACTIVE, FIXED, HandModel

__all__ = ["write_viewer", "viewer_data"]

_KINDS = {FIXED: "fixed", ACTIVE: "active"}  # anything else: "coupled" (mimic)
_FPS = 30.0
_PLACEHOLDER = re.compile(r"__(TITLE|DATA)__")
# Characters that could end the <script> block, open a comment in it (``</script>``, ``<!--``) or an
# entity, or end a line in older JavaScript parsers; JSON only has them inside strings, where the
# ``\uXXXX`` escapes read back as the same characters.
_JSON_IN_SCRIPT = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                 "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _script_json(data) -> str:
    """``data`` as compact JSON that is safe as the text of a ``<script type="application/json">``."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False).translate(_JSON_IN_SCRIPT)


@functools.lru_cache(maxsize=1)
def _page() -> str:
    """The page: package data ``viewer.html`` (markup, style and script; no external resources), with
    the placeholders ``__TITLE__`` and ``__DATA__`` that :func:`_fill` replaces."""
    return importlib.resources.files(__package__).joinpath("viewer.html").read_text(encoding="utf-8")


def _fill(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``__NAME__`` replaced by ``values[NAME]`` in one pass: the inserted text is
    never scanned again, so a value holding ``__DATA__`` stays text."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _finite_or_none(x: float):
    x = float(x)
    return x if math.isfinite(x) else None


def _rpy(rot: np.ndarray) -> list[float]:
    """Rotation matrix → URDF roll, pitch, yaw (inverse of ``model.rpy_to_matrix``), for display."""
    pitch = math.asin(max(-1.0, min(1.0, -float(rot[2, 0]))))
    if abs(rot[2, 0]) < 1 - 1e-12:
        return [math.atan2(rot[2, 1], rot[2, 2]), pitch, math.atan2(rot[1, 0], rot[0, 0])]
    return [0.0, pitch, math.atan2(-rot[0, 1], rot[1, 1])]  # gimbal lock: roll folded into yaw


def _angles(hand: HandModel, q) -> np.ndarray:
    """``q`` as float64 ``(T, n)`` frames; ``None`` is the zero pose (clipped into the limits)."""
    n = hand.num_joints
    if q is None:
        lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
        return np.clip(np.zeros(n), lo, hi)[None]
    try:
        a = np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"q must be numeric joint angles of shape ({n},) or (T, {n}), radians") from None
    if a.ndim not in (1, 2) or a.shape[-1] != n or (a.ndim == 2 and a.shape[0] == 0):
        raise ValueError(f"q must have shape ({n},) or (T, {n}) with T >= 1 (radians, order "
                         f"hand.joint_names); got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("q contains NaN or infinite values")
    return a.reshape(-1, n)


def _landmark_frames(landmarks, k: int) -> np.ndarray | None:
    """Observed landmarks as ``(T, k, 3)`` (missing values NaN), or ``None``."""
    if landmarks is None:
        return None
    try:
        a = np.asarray(landmarks, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"landmarks must be a numeric array of shape ({k}, 3) or (T, {k}, 3)") from None
    if a.ndim not in (2, 3) or a.shape[-2:] != (k, 3) or (a.ndim == 3 and a.shape[0] == 0):
        raise ValueError(f"landmarks must have shape ({k}, 3) or (T, {k}, 3) with T >= 1 (metres, wrist "
                         f"frame); got {a.shape}")
    return a.reshape(-1, k, 3)


def _decimal(leaf) -> np.ndarray:
    """A model leaf as float64; float32 leaves (x64 off) as the shortest decimal that reads back as the
    same float32, so the page shows the URDF's ``0.0329`` rather than ``0.03290000185``."""
    a = np.asarray(leaf)
    return a.astype(str).astype(np.float64) if a.dtype == np.float32 else a.astype(np.float64)


def _nested(a: np.ndarray):
    """float64 array → nested lists, non-finite values as ``None`` (JSON ``null``)."""
    if a.ndim == 0:
        return _finite_or_none(a)
    return [_nested(x) for x in a]


def viewer_data(hand: HandModel, q=None, *, landmarks=None, title: str | None = None) -> dict:
    """The JSON document :func:`write_viewer` embeds: joint table, keypoint map, frames, landmarks.

    Numbers are the model's float64 values (JSON keeps them exactly); infinite limits (continuous
    joints) and missing landmark values are ``null``.
    """
    from ..hand.poses import POSES

    frames = _angles(hand, q)
    lm = _landmark_frames(landmarks, len(hand.keypoint_links) or 21)
    if lm is not None and frames.shape[0] != lm.shape[0]:
        if frames.shape[0] == 1:
            frames = np.repeat(frames, lm.shape[0], 0)
        elif lm.shape[0] != 1:
            raise ValueError(f"q has {frames.shape[0]} frames but landmarks have {lm.shape[0]}")
    if lm is not None and lm.shape[0] == 1 and frames.shape[0] > 1:
        lm = np.repeat(lm, frames.shape[0], 0)

    xyz, rot, axis = _decimal(hand.origin_xyz), _decimal(hand.origin_rot), _decimal(hand.axis)
    links = []
    for i, name in enumerate(hand.link_names):
        kind = "root" if i == 0 else _KINDS.get(hand.kinds[i], "coupled")
        links.append(dict(
            name=name, joint=hand.joint_of_link[i], parent=hand.parents[i], kind=kind,
            xyz=_nested(xyz[i]), rot=_nested(rot[i]), rpy=_rpy(rot[i]), axis=_nested(axis[i]),
            q=hand.q_index[i], m=hand.mimic_index[i],
        ))
    q_link = {qi: i for i, qi in enumerate(hand.q_index) if qi >= 0}
    lower, upper = _decimal(hand.lower), _decimal(hand.upper)
    joints = [dict(name=n, link=q_link[k], lower=_finite_or_none(lower[k]), upper=_finite_or_none(upper[k]))
              for k, n in enumerate(hand.joint_names)]
    gains, offsets = _decimal(hand.coupling), _decimal(hand.coupling_offset)
    mlo, mhi = _decimal(hand.mimic_lower), _decimal(hand.mimic_upper)
    m_link = {m: i for i, m in enumerate(hand.mimic_index) if m >= 0}
    couplings = [dict(name=n, link=m_link[m], source=hand.mimic_sources[m][0],
                      secondary=hand.mimic_sources[m][1], k=_nested(gains[m]),
                      offset=float(offsets[m]), lower=_finite_or_none(mlo[m]), upper=_finite_or_none(mhi[m]))
                 for m, n in enumerate(hand.mimic_names)]
    nk = len(hand.keypoint_links)
    within = lambda p: p.shape == lower.shape and bool(np.all((p >= lower - 1e-9) & (p <= upper + 1e-9)))
    side = f"{hand.side.capitalize()} hand — " if hand.side else ""
    return dict(
        format="wuji-viewer/1",
        title=title if title is not None else f"{side}kinematic tree ({hand.name or 'URDF'})",
        name=hand.name, side=hand.side, links=links, joints=joints, couplings=couplings,
        keypoint_links=list(hand.keypoint_links),
        keypoint_names=list(LANDMARK_NAMES) if nk == 21 else [str(i) for i in range(nk)],
        connections=[list(c) for c in HAND_CONNECTIONS] if nk == 21 else [],
        poses={k: v.tolist() for k, v in POSES.items() if within(v)},
        frames=frames.tolist(), fps=_FPS,
        landmarks=None if lm is None else _nested(lm),
    )


def write_viewer(hand: HandModel, q=None, path=None, *, landmarks=None, title: str | None = None) -> str:
    """A self-contained interactive HTML page of the hand's kinematic tree (see the module docstring).

    Args:
        hand: a :class:`~wuji_jax.HandModel` (e.g. ``wj.load_hand("right")``).
        q: ``(n,)`` joint angles (radians, order ``hand.joint_names``), or ``(T, n)`` frames animated by
            a time slider and a play button; default the zero pose.
        path: if given, the page is also written there (parent folders created; written to a temporary
            name and renamed, so the path holds the whole page or what it held before).
        landmarks: optional observed landmarks ``(21, 3)`` or ``(T, 21, 3)`` in the wrist frame, metres,
            drawn in a second colour (NaN = missing). A single pose or landmark set is held over the
            other's frames.
        title: page title; default names the model and side.

    Returns:
        The HTML text (UTF-8, no external resources). Names never become markup: the title is
        HTML-escaped in ``<title>`` and ``<h1>``; the embedded JSON writes ``<``, ``>``, ``&``, U+2028
        and U+2029 as ``\\uXXXX`` escapes (it parses back to the same strings); the template is filled
        in one pass (a name holding ``__DATA__`` or ``__SCRIPT__`` stays text).
    """
    data = viewer_data(hand, q, landmarks=landmarks, title=title)
    page = _fill(_page(), dict(TITLE=html.escape(str(data["title"]), quote=True), DATA=_script_json(data)))
    if path is not None:
        from ..data.outputs import write_text

        write_text(path, page)
    return page

