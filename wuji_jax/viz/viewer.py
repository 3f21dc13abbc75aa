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

import html
import json
import math
import re

import numpy as np

from ..hand.landmarks import HAND_CONNECTIONS, LANDMARK_NAMES
from ..hand.model import ACTIVE, FIXED, HandModel

__all__ = ["write_viewer", "viewer_data"]

_KINDS = {FIXED: "fixed", ACTIVE: "active"}  # anything else: "coupled" (mimic)
_FPS = 30.0
_PLACEHOLDER = re.compile(r"__(TITLE|SCRIPT|DATA)__")
# Characters that could end the <script> block, open a comment in it (``</script>``, ``<!--``) or an
# entity, or end a line in older JavaScript parsers; JSON only has them inside strings, where the
# ``\uXXXX`` escapes read back as the same characters.
_JSON_IN_SCRIPT = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                 "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _script_json(data) -> str:
    """``data`` as compact JSON that is safe as the text of a ``<script type="application/json">``."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False).translate(_JSON_IN_SCRIPT)


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
    page = _fill(_TEMPLATE, dict(TITLE=html.escape(str(data["title"]), quote=True), SCRIPT=_SCRIPT,
                                 DATA=_script_json(data)))
    if path is not None:
        from ..data.outputs import write_text

        write_text(path, page)
    return page


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
:root { --fg: #1d2330; --muted: #5d6677; --line: #d9dee7; --accent: #d9480f; --bg: #f7f8fb; }
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; font: 13px/1.35 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--fg); background: #fff; }
#app { display: flex; height: 100vh; }
#stage { position: relative; flex: 1 1 auto; min-width: 0; background: var(--bg); }
#view { position: absolute; inset: 0; width: 100%; height: 100%; cursor: grab; touch-action: none; }
#view.dragging { cursor: grabbing; }
#view.over-joint { cursor: pointer; }
#hud { position: absolute; left: 10px; bottom: 8px; color: var(--muted); font-size: 12px; pointer-events: none; }
#timebar { position: absolute; left: 10px; right: 10px; bottom: 28px; display: flex; gap: 8px; align-items: center; }
#timebar[hidden] { display: none; }
#timebar input { flex: 1; }
#side { flex: 0 0 370px; display: flex; flex-direction: column; border-left: 1px solid var(--line); min-height: 0; }
#side h1 { font-size: 15px; margin: 10px 12px 6px; }
#toolbar { display: flex; flex-wrap: wrap; gap: 6px 10px; align-items: center; padding: 0 12px 8px;
  border-bottom: 1px solid var(--line); }
button, select { font: inherit; }
#joint-panel { flex: 0 0 auto; padding: 8px 12px; border-bottom: 1px solid var(--line); min-height: 64px; }
#joint-panel h2 { font-size: 14px; margin: 0 0 4px; color: var(--accent); font-family: ui-monospace, monospace; }
#joint-panel .hint { color: var(--muted); margin: 4px 0; }
#joint-info { border-collapse: collapse; width: 100%; }
#joint-info th { text-align: left; font-weight: 500; color: var(--muted); padding: 1px 8px 1px 0;
  white-space: nowrap; vertical-align: top; }
#joint-info td { font-family: ui-monospace, monospace; font-size: 12px; padding: 1px 0; }
#joint-list { list-style: none; margin: 0; padding: 4px 0; overflow-y: auto; flex: 1 1 auto; min-height: 0; }
#joint-list li { display: grid; grid-template-columns: 170px 1fr 50px; gap: 6px; align-items: center;
  padding: 1px 12px; }
#joint-list li.selected { background: #fff0e6; }
#joint-list .jname { font-family: ui-monospace, monospace; font-size: 11.5px; cursor: pointer;
  overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
#joint-list li.coupled .jname { font-style: italic; color: #9c4a00; }
#joint-list input { width: 100%; margin: 0; }
#joint-list output { text-align: right; font-family: ui-monospace, monospace; font-size: 11.5px; }
.dbg { display: none; }
</style>
</head>
<body>
<div id="app">
  <div id="stage">
    <canvas id="view" aria-label="3-D view of the kinematic tree"></canvas>
    <div id="timebar" hidden><button id="play" type="button">&#9654;</button>
      <input id="frame" type="range" min="0" max="0" step="1" value="0"><span id="frame-label"></span></div>
    <div id="hud">drag: rotate &middot; shift/right-drag: pan &middot; wheel: zoom &middot; click a joint
      &middot; double-click: reset view</div>
  </div>
  <aside id="side">
    <h1 id="title">__TITLE__</h1>
    <div id="toolbar">
      <select id="pose-select" title="named poses"></select>
      <button id="reset-view" type="button">reset view</button>
      <label><input id="show-numbers" type="checkbox" checked> keypoint numbers</label>
      <label><input id="show-axes" type="checkbox" checked> joint axes</label>
    </div>
    <section id="joint-panel"><p class="hint">Click a joint (a dot) or a joint name below.</p></section>
    <ul id="joint-list"></ul>
  </aside>
</div>
<pre id="keypoints-json" class="dbg"></pre>
<pre id="links-json" class="dbg"></pre>
<script type="application/json" id="wuji-data">__DATA__</script>
<script>
__SCRIPT__
</script>
</body>
</html>
"""

_SCRIPT = r"""
(function () {
"use strict";
const D = JSON.parse(document.getElementById("wuji-data").textContent);
const L = D.links, NL = L.length, DEG = 180 / Math.PI;
const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------------------ kinematics (float64)
function matmul(a, b) {
  const r = [[0, 0, 0], [0, 0, 0], [0, 0, 0]];
  for (let i = 0; i < 3; i++)
    for (let j = 0; j < 3; j++) r[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
  return r;
}
function matvec(a, v) {
  return [0, 1, 2].map((i) => a[i][0] * v[0] + a[i][1] * v[1] + a[i][2] * v[2]);
}
function rodrigues(ax, th) {  // c I + s [a]x + (1 - c) a a^T, as wuji_jax.kinematics._rodrigues_mat
  const c = Math.cos(th), s = Math.sin(th), t = 1 - c, x = ax[0], y = ax[1], z = ax[2];
  return [[c + x * x * t, x * y * t - z * s, x * z * t + y * s],
          [y * x * t + z * s, c + y * y * t, y * z * t - x * s],
          [z * x * t - y * s, z * y * t + x * s, c + z * z * t]];
}
function coupledAngles(q) {
  return D.couplings.map((c) => c.k[0] * q[c.source] + c.k[1] * q[c.secondary]
                               + c.k[2] * q[c.source] * q[c.secondary] + c.offset);
}
function linkAngle(i, q, cq) {
  const l = L[i];
  return l.kind === "active" ? q[l.q] : l.kind === "coupled" ? cq[l.m] : null;
}
function fk(q) {  // link frames in the wrist frame: {rot: [L][3][3], pos: [L][3]}
  const cq = coupledAngles(q), rot = [[[1, 0, 0], [0, 1, 0], [0, 0, 1]]], pos = [[0, 0, 0]];
  for (let i = 1; i < NL; i++) {
    const p = L[i].parent, d = matvec(rot[p], L[i].xyz);
    pos.push([pos[p][0] + d[0], pos[p][1] + d[1], pos[p][2] + d[2]]);
    let r = matmul(rot[p], L[i].rot);
    const a = linkAngle(i, q, cq);
    if (a !== null) r = matmul(r, rodrigues(L[i].axis, a));
    rot.push(r);
  }
  return { rot: rot, pos: pos, coupled: cq };
}

// ------------------------------------------------------------------------------------------- state
const revolute = [];  // link indices of the revolute joints: q order, each coupled joint before its source
D.joints.forEach((j, k) => {
  D.couplings.forEach((c) => { if (c.source === k) revolute.push(c.link); });
  revolute.push(j.link);
});
const byName = new Map();  // a Map: a joint named "__proto__" or "constructor" is just a name
revolute.forEach((i) => { byName.set(L[i].joint, i); });
const S = {
  q: D.frames[0].slice(), frame: 0, edited: false, F: null, selected: null, hover: null,
  view: null, zoom: 1, pan: [0, 0], playing: false, center: [0, 0, 0], radius: 0.1,
};
function limitsOf(i) {
  const l = L[i];
  if (l.kind === "active") return [D.joints[l.q].lower, D.joints[l.q].upper];
  const c = D.couplings[l.m];
  return [c.lower, c.upper];
}
function angleOf(i) {
  const l = L[i];
  return l.kind === "active" ? S.q[l.q] : S.F.coupled[l.m];
}
function keypoints() { return D.keypoint_links.map((k) => S.F.pos[k].slice()); }
function landmarksNow() { return D.landmarks ? D.landmarks[S.frame] : null; }

// ---------------------------------------------------------------------------------------- view math
function rotX(a) { const c = Math.cos(a), s = Math.sin(a); return [[1, 0, 0], [0, c, -s], [0, s, c]]; }
function rotY(a) { const c = Math.cos(a), s = Math.sin(a); return [[c, 0, s], [0, 1, 0], [-s, 0, c]]; }
function homeView() {
  // camera rows (x right, y up, z towards the viewer): fingers (-Z) up, palm facing the viewer
  const palm = D.side === "left" ? -1 : 1;
  const base = [[palm, 0, 0], [0, 0, -1], [0, palm, 0]];
  return matmul(rotX(-0.25), matmul(rotY(0.35), base));
}
const canvas = $("view"), ctx = canvas.getContext("2d");
let W = 0, H = 0, DPR = 1;
function resize() {
  DPR = window.devicePixelRatio || 1;
  W = canvas.clientWidth || 600; H = canvas.clientHeight || 400;
  canvas.width = Math.round(W * DPR); canvas.height = Math.round(H * DPR);
  draw();
}
function scale() { return S.zoom * 0.38 * Math.min(W, H) / S.radius; }
function project(p) {
  const d = [p[0] - S.center[0], p[1] - S.center[1], p[2] - S.center[2]];
  const c = matvec(S.view, d), s = scale();
  return [W / 2 + S.pan[0] + s * c[0], H / 2 + S.pan[1] - s * c[1], c[2]];
}

// ------------------------------------------------------------------------------------------ drawing
const FINGER_COLORS = { thumb: "#c2255c", index: "#1971c2", middle: "#2f9e44", ring: "#e8590c", pinky: "#7048e8" };
const AXIS_COLORS = ["#e03131", "#2b8a3e", "#1c7ed6"];
const OBSERVED = "#f08c00";
function fingerColor(name) {
  for (const f in FINGER_COLORS) if (name.indexOf(f) === 0) return FINGER_COLORS[f];
  return "#495057";
}
function axisColor(ax) {
  let k = 0;
  for (let j = 1; j < 3; j++) if (Math.abs(ax[j]) > Math.abs(ax[k])) k = j;
  return AXIS_COLORS[k];
}
function draw() {
  if (!S.F || !W) return;
  ctx.setTransform(DPR, 0, 0, DPR, 0, 0);
  ctx.clearRect(0, 0, W, H);
  const items = [], P = S.F.pos.map(project), s = scale();
  const seg = (a, b, color, width, dash) => items.push({ z: (a[2] + b[2]) / 2, f: () => {
    ctx.strokeStyle = color; ctx.lineWidth = width; ctx.setLineDash(dash || []);
    ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke(); ctx.setLineDash([]);
  } });
  const dot = (p, r, fill, stroke, z) => items.push({ z: z === undefined ? p[2] : z, f: () => {
    ctx.beginPath(); ctx.arc(p[0], p[1], r, 0, 2 * Math.PI);
    if (fill) { ctx.fillStyle = fill; ctx.fill(); }
    if (stroke) { ctx.strokeStyle = stroke; ctx.lineWidth = 1.5; ctx.stroke(); }
  } });
  const toward = (p, v, len) => project([p[0] + v[0] * len, p[1] + v[1] * len, p[2] + v[2] * len]);
  // wrist frame
  const O = project([0, 0, 0]);
  [[1, 0, 0], [0, 1, 0], [0, 0, 1]].forEach((e, k) => {
    const tip = toward([0, 0, 0], e, 0.03);
    seg(O, tip, AXIS_COLORS[k], 2);
    items.push({ z: tip[2], f: () => { ctx.fillStyle = AXIS_COLORS[k]; ctx.font = "bold 12px sans-serif";
      ctx.fillText("XYZ"[k], tip[0] + 3, tip[1] - 3); } });
  });
  // links: parent origin -> child origin
  for (let i = 1; i < NL; i++) {
    const a = P[L[i].parent], b = P[i];
    if (Math.hypot(a[0] - b[0], a[1] - b[1]) > 0.5) seg(a, b, fingerColor(L[i].name), 3.2);
  }
  // palm outline between the finger bases (MediaPipe connections 5-9-13-17)
  if (D.keypoint_links.length === 21)
    [[5, 9], [9, 13], [13, 17]].forEach((e) => seg(P[D.keypoint_links[e[0]]], P[D.keypoint_links[e[1]]], "#adb5bd", 1.5, [4, 3]));
  // observed landmarks
  const lm = landmarksNow();
  if (lm) {
    const Q = lm.map((p) => (p && p.every((x) => x !== null) ? project(p) : null));
    D.connections.forEach((e) => { if (Q[e[0]] && Q[e[1]]) seg(Q[e[0]], Q[e[1]], OBSERVED, 1.6, [5, 3]); });
    Q.forEach((p) => { if (p) dot(p, 3.2, OBSERVED, null); });
  }
  // keypoints
  const showNum = $("show-numbers").checked;
  D.keypoint_links.forEach((k, n) => {
    const p = P[k];
    items.push({ z: p[2] + 1e-6, f: () => {
      ctx.fillStyle = "#212529"; ctx.fillRect(p[0] - 2.5, p[1] - 2.5, 5, 5);
      if (showNum) { ctx.fillStyle = "#0b5394"; ctx.font = "bold 11px sans-serif"; ctx.fillText(String(n), p[0] + 5, p[1] - 5); }
    } });
  });
  // revolute joints: axis and dot
  const showAxes = $("show-axes").checked;
  revolute.forEach((i) => {
    const p = P[i], ax = matvec(S.F.rot[i], L[i].axis), sel = S.selected === i, hov = S.hover === i;
    if (showAxes || sel) {
      const len = sel ? 0.022 : 0.01;
      seg(toward(S.F.pos[i], ax, -len), toward(S.F.pos[i], ax, len), sel ? "#d9480f" : axisColor(L[i].axis), sel ? 3 : 1.8);
    }
    const coupled = L[i].kind === "coupled";
    dot(p, sel ? 7 : hov ? 6 : 4.5, sel ? "#d9480f" : coupled ? "#fff" : "#343a40",
        sel ? "#fff" : coupled ? "#9c4a00" : null, p[2] + 2e-6);
    if (hov && !sel) items.push({ z: p[2] + 3e-6, f: () => { ctx.fillStyle = "#000"; ctx.font = "12px sans-serif";
      ctx.fillText(L[i].joint, p[0] + 8, p[1] + 14); } });
  });
  items.sort((a, b) => a.z - b.z);
  items.forEach((it) => it.f());
  // legend and scale bar
  ctx.font = "12px sans-serif"; ctx.textBaseline = "middle";
  const legend = [["#343a40", "joint (click me)"], ["#9c4a00", "coupled joint"], ["#212529", "keypoint 0-20"]];
  if (lm) legend.push([OBSERVED, "observed landmarks"]);
  legend.forEach((e, k) => { ctx.fillStyle = e[0]; ctx.fillRect(12, 14 + 17 * k, 10, 10);
    ctx.fillStyle = "#343a40"; ctx.fillText(e[1], 28, 19 + 17 * k); });
  const bar = 0.02 * s;
  ctx.strokeStyle = "#343a40"; ctx.lineWidth = 2; ctx.beginPath();
  ctx.moveTo(W - 20 - bar, 20); ctx.lineTo(W - 20, 20); ctx.stroke();
  ctx.fillStyle = "#343a40"; ctx.textAlign = "right"; ctx.fillText("20 mm", W - 20, 32);
  ctx.textAlign = "start"; ctx.textBaseline = "alphabetic";
}
let pending = false;
function redraw() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; draw(); });
}

// ---------------------------------------------------------------------------------------- the panel
const f3 = (v, k) => "(" + v.map((x) => (x === null ? "?" : x.toFixed(k))).join(", ") + ")";
const num = (x) => String(Number(x.toPrecision(6)));
const deg = (x) => (x === null ? "none" : (x * DEG).toFixed(2) + "\u00b0");
function row(field, label, text, value) {
  const tr = document.createElement("tr");
  tr.dataset.field = field;
  if (value !== undefined) tr.dataset.value = String(value);
  const th = document.createElement("th"), td = document.createElement("td");
  th.textContent = label; td.textContent = text;
  tr.append(th, td);
  return tr;
}
const LAW = "\u03b8 = K_FLEX\u00b7\u03b8_flex + K_ABD\u00b7\u03b8_abd + K_CROSS\u00b7\u03b8_flex\u00b7\u03b8_abd + offset";
function couplingRows(c, q) {
  const a = D.joints[c.source].name, b = D.joints[c.secondary].name, k = c.k;
  return [row("coupling_law", "coupling", LAW, c.name),
    row("coupling_gains", "gains", "K_FLEX " + num(k[0]) + ", K_ABD " + num(k[1]) + ", K_CROSS " + num(k[2]) + ", offset " + num(c.offset),
        JSON.stringify({ k: k, offset: c.offset })),
    row("coupling_flex", "\u03b8_flex", a + " = " + deg(q[c.source]), a),
    row("coupling_abd", "\u03b8_abd", b + " = " + deg(q[c.secondary]), b)];
}
function renderPanel() {
  const panel = $("joint-panel"), i = S.selected;
  if (i === null) return;
  const l = L[i], lim = limitsOf(i), ang = angleOf(i);
  const h = document.createElement("h2");
  h.textContent = l.joint;
  const t = document.createElement("table");
  t.id = "joint-info";
  const kind = l.kind === "active" ? "active, q[" + l.q + "]" : "coupled (passive, follows " + D.joints[D.couplings[l.m].source].name + ")";
  t.append(row("kind", "kind", kind, l.kind),
    row("parent", "parent link", L[l.parent].name, L[l.parent].name),
    row("child", "child link", l.name, l.name),
    row("origin", "origin xyz mm", f3(l.xyz.map((x) => x * 1000), 1)),
    row("rpy", "origin rpy rad", f3(l.rpy, 4)),
    row("axis_joint", "axis (joint)", f3(l.axis, 3), JSON.stringify(l.axis)),
    row("axis_parent", "axis (parent)", f3(matvec(l.rot, l.axis), 3), JSON.stringify(matvec(l.rot, l.axis))),
    row("axis_wrist", "axis (wrist)", f3(matvec(S.F.rot[i], l.axis), 3), JSON.stringify(matvec(S.F.rot[i], l.axis))),
    row("lower_deg", "lower", deg(lim[0]), lim[0] === null ? "" : lim[0] * DEG),
    row("upper_deg", "upper", deg(lim[1]), lim[1] === null ? "" : lim[1] * DEG),
    row("angle_deg", "angle", deg(ang) + "  (" + ang.toFixed(4) + " rad)", ang * DEG));
  if (l.kind === "coupled") {
    t.append(...couplingRows(D.couplings[l.m], S.q));
  } else {
    const drives = D.couplings.filter((c) => c.source === l.q || c.secondary === l.q);
    if (drives.length) t.append(row("drives", "drives", drives.map((c) => c.name + " (coupled, " + deg(angleOf(c.link)) + ")").join(", "),
      drives.map((c) => c.name).join(",")));
  }
  panel.replaceChildren(h, t);
}
function select(name) {
  if (!byName.has(name)) throw new Error("unknown joint " + name);
  S.selected = byName.get(name);
  document.body.dataset.selected = name;
  document.querySelectorAll("#joint-list li").forEach((li) => li.classList.toggle("selected", li.dataset.joint === name));
  renderPanel();
  redraw();
}

// ------------------------------------------------------------------------------ joint list, sliders
const sliders = {};
function buildList() {
  const ul = $("joint-list");
  revolute.forEach((i) => {
    const l = L[i], li = document.createElement("li"), name = document.createElement("span");
    li.dataset.joint = l.joint;
    li.className = l.kind;
    name.className = "jname"; name.textContent = l.joint; name.title = l.joint;
    name.addEventListener("click", () => select(l.joint));
    const lim = limitsOf(i), input = document.createElement("input"), out = document.createElement("output");
    input.type = "range"; input.step = "0.1";
    input.min = String(lim[0] === null ? -180 : lim[0] * DEG);
    input.max = String(lim[1] === null ? 180 : lim[1] * DEG);
    if (l.kind === "active") {
      input.addEventListener("input", () => {
        const q = S.q.slice();
        q[l.q] = parseFloat(input.value) / DEG;
        S.edited = true;
        setPose(q);
        if (S.selected !== i) select(l.joint);
      });
    } else {
      input.disabled = true;
      input.title = "coupled: follows its source joints";
    }
    sliders[i] = [input, out];
    li.append(name, input, out);
    ul.append(li);
  });
}
function syncSliders() {
  revolute.forEach((i) => {
    const a = angleOf(i), s = sliders[i];
    if (document.activeElement !== s[0]) s[0].value = String(a * DEG);
    s[1].textContent = (a * DEG).toFixed(1) + "\u00b0";
  });
}

// ------------------------------------------------------------------------------------------ posing
function setPose(q) {
  if (!Array.isArray(q) || q.length !== D.joints.length || !q.every((x) => typeof x === "number" && isFinite(x)))
    throw new Error("setPose: expected " + D.joints.length + " finite angles (radians)");
  S.q = q.slice();
  S.F = fk(S.q);
  $("keypoints-json").textContent = JSON.stringify(keypoints());
  $("links-json").textContent = JSON.stringify(S.F.pos);
  syncSliders();
  renderPanel();
  updateFrameLabel();
  redraw();
}
function setFrame(k) {
  S.frame = Math.max(0, Math.min(D.frames.length - 1, k | 0));
  $("frame").value = String(S.frame);
  S.edited = false;
  setPose(D.frames[S.frame]);
}
function updateFrameLabel() {
  if (D.frames.length > 1)
    $("frame-label").textContent = "frame " + S.frame + " / " + (D.frames.length - 1) + (S.edited ? " (edited)" : "");
}
let lastTick = 0;
function tick(t) {
  if (!S.playing) return;
  if (t - lastTick >= 1000 / D.fps) { lastTick = t; setFrame((S.frame + 1) % D.frames.length); }
  requestAnimationFrame(tick);
}
function togglePlay() {
  S.playing = !S.playing;
  $("play").textContent = S.playing ? "\u275a\u275a" : "\u25b6";
  if (S.playing) requestAnimationFrame(tick);
}

// ------------------------------------------------------------------------------------ pointer input
function pick(x, y) {  // revolute joints whose dot is under (x, y), nearest first
  const hits = [];
  revolute.forEach((i) => { const p = project(S.F.pos[i]), d = Math.hypot(p[0] - x, p[1] - y); if (d <= 9) hits.push([d, i]); });
  hits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  return hits.filter((h) => h[0] - hits[0][0] < 1.5).map((h) => h[1]);  // coincident dots form a stack
}
function clickAt(x, y) {
  const stack = pick(x, y);
  if (!stack.length) return;
  const k = stack.indexOf(S.selected);  // clicking a stack again cycles through it (flex, abd, ...)
  select(L[stack[k < 0 ? 0 : (k + 1) % stack.length]].joint);
}
let drag = null;
function local(e) { const r = canvas.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; }
canvas.addEventListener("pointerdown", (e) => {
  const p = local(e);
  drag = { x: p[0], y: p[1], x0: p[0], y0: p[1], pan: e.shiftKey || e.button === 2, moved: false };
  try { canvas.setPointerCapture(e.pointerId); } catch (err) { /* synthetic events have no capture */ }
});
canvas.addEventListener("pointermove", (e) => {
  const p = local(e);
  if (!drag) {
    const stack = pick(p[0], p[1]), h = stack.length ? stack[0] : null;
    canvas.classList.toggle("over-joint", h !== null);
    if (h !== S.hover) { S.hover = h; redraw(); }
    return;
  }
  const dx = p[0] - drag.x, dy = p[1] - drag.y;
  drag.x = p[0]; drag.y = p[1];
  if (Math.hypot(p[0] - drag.x0, p[1] - drag.y0) > 3) drag.moved = true;
  if (!drag.moved) return;
  canvas.classList.add("dragging");
  if (drag.pan) { S.pan[0] += dx; S.pan[1] += dy; }
  else S.view = matmul(rotX(dy * 0.01), matmul(rotY(dx * 0.01), S.view));
  redraw();
});
canvas.addEventListener("pointerup", (e) => {
  if (drag && !drag.moved) { const p = local(e); clickAt(p[0], p[1]); }
  drag = null;
  canvas.classList.remove("dragging");
});
canvas.addEventListener("pointerleave", () => { if (!drag && S.hover !== null) { S.hover = null; redraw(); } });
canvas.addEventListener("contextmenu", (e) => e.preventDefault());
canvas.addEventListener("dblclick", resetView);
canvas.addEventListener("wheel", (e) => {
  e.preventDefault();
  S.zoom = Math.max(0.1, Math.min(40, S.zoom * Math.exp(-e.deltaY * 0.0015)));
  redraw();
}, { passive: false });
function resetView() { S.view = homeView(); S.zoom = 1; S.pan = [0, 0]; redraw(); }
function clickJoint(name) {  // a synthetic click on the joint's dot, through the pointer handlers
  if (!byName.has(name)) throw new Error("unknown joint " + name);
  const p = project(S.F.pos[byName.get(name)]), r = canvas.getBoundingClientRect();
  const o = { clientX: r.left + p[0], clientY: r.top + p[1], bubbles: true, button: 0, pointerId: 1, isPrimary: true };
  canvas.dispatchEvent(new PointerEvent("pointerdown", Object.assign({ buttons: 1 }, o)));
  canvas.dispatchEvent(new PointerEvent("pointerup", Object.assign({ buttons: 0 }, o)));
}

// --------------------------------------------------------------------------------------- URL hash
function parseAngles(text) {
  const t = text.trim();
  return t.charAt(0) === "[" ? JSON.parse(t) : t.split(/[\s,]+/).filter((s) => s).map(Number);
}
function applyHash() {
  const h = decodeURIComponent(location.hash.replace(/^#/, ""));
  if (!h) return;
  const args = {};
  h.split("&").forEach((kv) => { const k = kv.indexOf("="); if (k > 0) args[kv.slice(0, k)] = kv.slice(k + 1); });
  try {
    if (args.frame !== undefined) setFrame(parseInt(args.frame, 10));
    if (args.q !== undefined) { S.edited = true; setPose(parseAngles(args.q)); }
    if (args.select) select(args.select);
    if (args.click) clickJoint(args.click);
    delete document.body.dataset.error;
  } catch (err) {
    document.body.dataset.error = String(err.message || err);
  }
}

// ------------------------------------------------------------------------------------------ start
function init() {
  // rotation pivot and scale from the first frame, kept fixed while animating
  const F0 = fk(D.frames[0]), pts = F0.pos.slice();
  const n = pts.length;
  S.center = [0, 1, 2].map((k) => pts.reduce((s, p) => s + p[k], 0) / n);
  S.radius = Math.max(0.02, ...pts.map((p) => Math.hypot(p[0] - S.center[0], p[1] - S.center[1], p[2] - S.center[2])));
  S.view = homeView();
  const sel = $("pose-select");
  const first = document.createElement("option");
  first.textContent = "pose\u2026"; first.value = "";
  sel.append(first);
  Object.keys(D.poses).forEach((k) => { const o = document.createElement("option"); o.value = o.textContent = k; sel.append(o); });
  sel.hidden = Object.keys(D.poses).length === 0;
  sel.addEventListener("change", () => { if (sel.value) { S.edited = true; setPose(D.poses[sel.value]); } });
  $("reset-view").addEventListener("click", resetView);
  $("show-numbers").addEventListener("change", redraw);
  $("show-axes").addEventListener("change", redraw);
  if (D.frames.length > 1) {
    $("timebar").hidden = false;
    $("frame").max = String(D.frames.length - 1);
    $("frame").addEventListener("input", () => setFrame(parseInt($("frame").value, 10)));
    $("play").addEventListener("click", togglePlay);
  }
  buildList();
  setPose(D.frames[0]);
  resize();
  window.addEventListener("resize", resize);
  window.addEventListener("hashchange", applyHash);
  applyHash();
  draw();
  window.wujiViewer = { data: D, fk: fk, keypoints: keypoints, setPose: setPose, setFrame: setFrame,
    select: select, clickJoint: clickJoint, angles: () => S.q.slice() };
  document.body.dataset.ready = "1";
}
init();
})();
"""
