"""Pictures of the hand: three orthographic views, landmark fits, channels over time.

matplotlib is an optional extra (``pip install wuji-jax[viz]``); it is imported only when a function
here is called. Figures are built without pyplot (``matplotlib.figure.Figure`` on an Agg canvas), so
they work headless, do not pile up in pyplot's figure registry, and still display in Jupyter.

The three views follow seed 000 and look at the wrist frame (REP-155) without mirroring:

* **Front (X-Y)**: X to the right, Y up; seen from +Z, i.e. from the elbow along the fingers.
* **Top (X-Z)**: X to the right, Z up, so the fingers hang down (−Z); seen from −Y, the back of a
  right hand.
* **Side (Y-Z)**: Y to the right, Z up; seen from +X, the thumb side.

Inputs are metres in the wrist frame; the pictures are labelled in millimetres.

The subpackage (floor 4) also holds :mod:`.overlay` (the input video with the fit, as MP4) and
:mod:`.viewer` (the interactive HTML kinematic tree; its page is the package data ``viewer.html``).
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from ..hand.landmarks import HAND_CONNECTIONS, NUM_LANDMARKS

__all__ = ["draw_hand", "plot_landmarks_vs_fit", "plot_timeseries"]

_MM = 1000.0
_DPI = 120
_AXIS_COLORS = ("#d62728", "#2ca02c", "#1f77b4")  # joint axis X, Y, Z: the usual RGB
_TREE_COLOR = "#3b3b3b"
_OBSERVED_COLOR = "#9b30d9"
_ERROR_COLOR = "#e8590c"
_ARROW_MM = 11.0  # drawn length of a joint axis, mm
_PAD_MM = 14.0  # margin around the drawing (arrows and labels), mm
_LABEL_PT = 6.5  # font size of joint names and keypoint numbers
_MM_PER_PT = 0.5  # a little over the usual drawing scale, to reserve room for joint names before the layout exists
_MIN_SPAN_MM = 70.0  # smallest range of a view axis, so a thin view still has room for labels

_FINGER_ABBR = {"thumb": "T", "index_finger": "I", "middle_finger": "M", "ring_finger": "R", "pinky": "P"}

# (title, horizontal axis, vertical axis) of each view; axes are 0 X, 1 Y, 2 Z.
_VIEWS = {"top": ("Top (X-Z)", 0, 2), "side": ("Side (Y-Z)", 1, 2), "front": ("Front (X-Y)", 0, 1)}


def agg_figure_classes():
    """Import matplotlib lazily; a clear ``ImportError`` if the viz extra is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "wuji_jax.viz needs matplotlib: install wuji-jax[viz] (pip install 'wuji-jax[viz]')"
        ) from e
    return Figure, FigureCanvasAgg


def _points(x, shape: tuple[int, ...], what: str) -> np.ndarray:
    """``x`` as a finite float64 array of ``shape``; ``ValueError`` naming ``what`` otherwise."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a numeric array of shape {shape}") from None
    if a.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what} contains NaN or infinite values")
    return a


def _save(fig, path) -> None:
    """``fig`` at ``path`` (format by its suffix, parent folders created), whole or not at all
    (:func:`wuji_jax.outputs.replacing`)."""
    if path is None:
        return
    from ..data.outputs import replacing

    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or None
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=_DPI, format=fmt)


def _spans(clouds: Sequence[np.ndarray]) -> np.ndarray:
    """``(3, 2)`` plotting range per axis (mm) covering every ``(N, 3)`` cloud, with margins."""
    pts = np.concatenate([c.reshape(-1, 3) for c in clouds], 0)
    lo, hi = pts.min(0) - _PAD_MM, pts.max(0) + _PAD_MM
    mid, half = (lo + hi) / 2, np.maximum((hi - lo) / 2, _MIN_SPAN_MM / 2)
    return np.stack([mid - half, mid + half], 1)


def _three_views(spans: np.ndarray, axis_names: Sequence[str], title: str | None, width_in: float = 8.4,
                 max_height_in: float = 11.0):
    """A figure with the top, side and front views laid out as an orthographic projection.

    Top (X-Z) upper left, side (Y-Z) to its right sharing Z, front (X-Y) below the top view sharing X;
    the lower right cell is returned for a legend. Cells are sized in proportion to the data ranges, so
    every view has the same scale (mm per inch) and equal aspect.
    """
    Figure, FigureCanvasAgg = agg_figure_classes()
    xr, yr, zr = (float(s[1] - s[0]) for s in spans)
    left, right, bottom, top, gap = 0.75, 0.2, 0.55, 0.75, 0.75  # inches
    scale = (width_in - left - right - gap) / (xr + yr)  # inches per mm
    scale = min(scale, (max_height_in - top - bottom - gap) / (zr + yr))
    width_in = left + right + gap + scale * (xr + yr)
    height_in = top + bottom + gap + scale * (zr + yr)
    fig = Figure(figsize=(width_in, height_in), dpi=_DPI)
    FigureCanvasAgg(fig)
    gs = fig.add_gridspec(
        2, 2, width_ratios=[xr, yr], height_ratios=[zr, yr],
        left=left / width_in, right=1 - right / width_in, bottom=bottom / height_in, top=1 - top / height_in,
        wspace=gap / (scale * (xr + yr) / 2), hspace=gap / (scale * (zr + yr) / 2),
    )
    axes = {}
    for name, cell in (("top", gs[0, 0]), ("side", gs[0, 1]), ("front", gs[1, 0])):
        label, h, v = _VIEWS[name]
        ax = fig.add_subplot(cell)
        ax.set_title(label, fontsize=10)
        ax.set_xlim(*spans[h])
        ax.set_ylim(*spans[v])
        ax.set_aspect("equal", adjustable="box")
        ax.set_xlabel(f"{axis_names[h]} (mm)", fontsize=8)
        ax.set_ylabel(f"{axis_names[v]} (mm)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.set_axisbelow(True)
        axes[name] = ax
    legend_ax = fig.add_subplot(gs[1, 1])
    legend_ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=12, y=1 - 0.25 / height_in, va="top")
    return fig, axes, legend_ax


def _skeleton(ax, pts: np.ndarray, h: int, v: int, edges, **kw) -> None:
    """Line segments ``pts[a] → pts[b]`` for each edge, projected on axes ``(h, v)``."""
    from matplotlib.collections import LineCollection

    segs = [[(pts[a, h], pts[a, v]), (pts[b, h], pts[b, v])] for a, b in edges]
    ax.add_collection(LineCollection(segs, **kw))


def _short_joint_labels(hand, positions: np.ndarray) -> list[tuple[int, str]]:
    """One label per joint site: ``(link index, "I.mcp flex/abd")``; co-located joints share a label."""
    groups: dict[tuple, list[int]] = {}
    for i, kind in enumerate(hand.kinds):
        if kind == 0:
            continue
        key = (hand.link_names[i].split("_")[0], tuple(np.round(positions[i], 4)))
        groups.setdefault(key, []).append(i)
    out = []
    for members in groups.values():
        heads: dict[str, list[str]] = {}
        abbr = ""
        for i in members:
            name = hand.joint_of_link[i]
            for prefix, a in _FINGER_ABBR.items():
                if name.startswith(prefix + "_"):
                    abbr, name = a, name[len(prefix) + 1:]
                    break
            head, _, tail = name.partition("_")
            heads.setdefault(head, [])
            if tail:
                heads[head].append(tail)
        parts = [h + (" " + "/".join(t) if t else "") for h, t in heads.items()]
        out.append((members[0], (abbr + "." if abbr else "") + ", ".join(parts)))
    return out


def _label_pts(text: str) -> float:
    """Rough width in points of a joint name drawn at ``_LABEL_PT``, plus its offset from the joint."""
    return 5 + 0.56 * _LABEL_PT * len(text)


def _halo():
    from matplotlib import patheffects

    return [patheffects.withStroke(linewidth=2.2, foreground="white")]


def _number(ax, x: np.ndarray, y: np.ndarray) -> None:
    """MediaPipe keypoint numbers, up and left of each point."""
    for k in range(x.shape[0]):
        ax.annotate(str(k), (x[k], y[k]), xytext=(-4, 2), textcoords="offset points", fontsize=_LABEL_PT,
                    ha="right", va="bottom", color="#0b5394", fontweight="bold", zorder=8, path_effects=_halo())


def draw_hand(hand, q, path=None, title: str | None = None, landmarks=None):
    """Draw the hand at joint angles ``q`` in three orthographic views (front, top, side).

    Shows the kinematic tree (link origins joined parent → child), each revolute joint with its axis
    as a short arrow coloured by the joint's own axis (X red, Y green, Z blue), short joint names
    (``I.mcp flex/abd`` = index MCP flexion and abduction; the coupled ``thumb_cmc_rot`` appears as
    ``rot`` in ``T.cmc rot/flex/abd``) and the 21 keypoints numbered in MediaPipe order.

    Args:
        hand: a :class:`~wuji_jax.HandModel` (e.g. ``wj.load_hand("right")``).
        q: ``(n,)`` active joint angles, radians, order ``hand.joint_names``.
        path: if given, the figure is also saved there (PNG at 120 dpi; the suffix picks the format).
        title: figure title; default names the model and side.
        landmarks: optional ``(21, 3)`` points in the wrist frame, metres (e.g. observed landmarks),
            drawn over the model as a second skeleton.

    Returns:
        The ``matplotlib.figure.Figure``.
    """
    from ..hand.kinematics import forward_kinematics

    q = _points(q, (hand.num_joints,), "joint angles q")
    # the compiled FK (one program; op by op, ~140 one-op programs compile for far longer)
    frames = forward_kinematics(hand, q)
    rot = np.asarray(frames.rotations, np.float64)
    pos = np.asarray(frames.positions, np.float64) * _MM
    # Keypoints are link origins (DESIGN.md's keypoint map), so they come with the frames.
    kp = pos[list(hand.keypoint_links)] if hand.keypoint_links else None
    obs = None
    if landmarks is not None:
        obs = _points(landmarks, (NUM_LANDMARKS, 3), "landmarks") * _MM

    axis_local = np.asarray(hand.axis, np.float64)
    joints = [i for i, k in enumerate(hand.kinds) if k != 0]
    joint_axes = np.einsum("lij,lj->li", rot, axis_local)
    axis_id = np.argmax(np.abs(axis_local), 1)

    palm = {"right": "palmar", "left": "dorsal"}.get(hand.side)
    names = ("X radial", f"Y {palm}" if palm else "Y", "Z proximal")
    side = f"{hand.side} hand" if hand.side else "hand"
    title = title if title is not None else f"{hand.name} — {side}"
    labels = _short_joint_labels(hand, pos)
    spans = _spans([pos] + ([obs] if obs is not None else []))
    # Joint names sit right of their joints in the top view: widen X so that they stay in the frame.
    ends = [pos[i, 0] + _label_pts(text) * _MM_PER_PT for i, text in labels]
    spans[0, 1] = max(spans[0, 1], max(ends, default=-np.inf) + 2.0)
    fig, axes, legend_ax = _three_views(spans, names, title)

    tree_edges = [(p, i) for i, p in enumerate(hand.parents) if p >= 0]
    for view, ax in axes.items():
        _, h, v = _VIEWS[view]
        _skeleton(ax, pos, h, v, tree_edges, colors=_TREE_COLOR, linewidths=2.0, zorder=2, capstyle="round")
        ax.scatter(pos[joints, h], pos[joints, v], s=22, facecolor="#ffd43b", edgecolor="black",
                   linewidth=0.6, zorder=3)
        vec = joint_axes[joints] * _ARROW_MM
        cols = [_AXIS_COLORS[axis_id[i]] for i in joints]
        ax.quiver(pos[joints, h], pos[joints, v], vec[:, h], vec[:, v], color=cols, angles="xy",
                  scale_units="xy", scale=1, units="inches", width=0.014, headwidth=3.5, headlength=4,
                  headaxislength=3.5, minlength=0, zorder=5)
        # An axis along the line of sight would vanish: ring the joint in the axis colour instead.
        flat = np.hypot(vec[:, h], vec[:, v]) < 0.3 * _ARROW_MM
        if np.any(flat):
            ax.scatter(pos[joints, h][flat], pos[joints, v][flat], s=70, facecolor="none",
                       edgecolor=np.asarray(cols)[flat], linewidth=1.2, zorder=4)
        if kp is not None:
            ax.scatter(kp[:, h], kp[:, v], s=9, color=_TREE_COLOR, zorder=4)
        if obs is not None:
            _skeleton(ax, obs, h, v, HAND_CONNECTIONS, colors=_OBSERVED_COLOR, linewidths=1.2,
                      linestyles="--", zorder=6)
            ax.scatter(obs[:, h], obs[:, v], s=16, marker="x", color=_OBSERVED_COLOR, linewidth=1.0, zorder=6)

    # Names and numbers only in the top view: it is the one where the fingers do not overlap.
    top = axes["top"]
    for i, text in labels:
        top.annotate(text, (pos[i, 0], pos[i, 2]), xytext=(5, -2), textcoords="offset points",
                     fontsize=_LABEL_PT, ha="left", va="top", color="#1a1a1a", zorder=7, path_effects=_halo())
    if kp is not None:
        _number(top, kp[:, 0], kp[:, 2])

    _legend(legend_ax, observed=obs is not None)
    _save(fig, path)
    return fig


def _legend(ax, observed: bool = False, fit: bool = False) -> None:
    from matplotlib.lines import Line2D

    if fit:
        handles = [
            Line2D([], [], color=_OBSERVED_COLOR, marker="x", linestyle="--", label="observed"),
            Line2D([], [], color=_TREE_COLOR, marker="o", markersize=3, label="fitted"),
            Line2D([], [], color=_ERROR_COLOR, label="error"),
        ]
    else:
        handles = [
            Line2D([], [], color=_TREE_COLOR, linewidth=2, label="kinematic tree"),
            Line2D([], [], color="none", marker="o", markerfacecolor="#ffd43b", markeredgecolor="black",
                   label="revolute joint"),
            Line2D([], [], color=_TREE_COLOR, marker="o", markersize=3, linestyle="none",
                   label="keypoint (MediaPipe #)"),
        ]
        handles += [Line2D([], [], color=c, label=f"joint axis {a}") for a, c in zip("XYZ", _AXIS_COLORS)]
        if observed:
            handles.append(Line2D([], [], color=_OBSERVED_COLOR, marker="x", linestyle="--", label="landmarks"))
    ax.legend(handles=handles, loc="center", fontsize=7, frameon=False, handlelength=1.8)
    if not fit:
        ax.text(0.5, 0.0, "T/I/M/R/P = thumb…pinky\nring = axis along line of sight", transform=ax.transAxes,
                ha="center", va="bottom", fontsize=6, color="0.35")


def plot_landmarks_vs_fit(landmarks, fitted, path=None, title: str | None = None):
    """Observed landmarks against a fitted skeleton, with a line from each observed point to its fit.

    Args:
        landmarks: ``(21, 3)`` observed landmarks, metres, MediaPipe order.
        fitted: ``(21, 3)`` fitted keypoints in the same frame, metres (e.g. ``wj.solve(...).keypoints``).
        path: if given, the figure is also saved there.
        title: figure title; default states the RMS and largest keypoint error.

    Returns:
        The ``matplotlib.figure.Figure`` with the top, side and front views.
    """
    obs = _points(landmarks, (NUM_LANDMARKS, 3), "landmarks") * _MM
    fit = _points(fitted, (NUM_LANDMARKS, 3), "fitted keypoints") * _MM
    err = np.linalg.norm(obs - fit, axis=1)
    if title is None:
        worst = int(np.argmax(err))
        title = (f"Landmarks vs fit — RMS {np.sqrt(np.mean(err ** 2)):.1f} mm, "
                 f"max {err[worst]:.1f} mm at #{worst}")
    fig, axes, legend_ax = _three_views(_spans([obs, fit]), ("X", "Y", "Z"), title)
    for view, ax in axes.items():
        _, h, v = _VIEWS[view]
        _skeleton(ax, fit, h, v, HAND_CONNECTIONS, colors=_TREE_COLOR, linewidths=1.8, zorder=2)
        ax.scatter(fit[:, h], fit[:, v], s=10, color=_TREE_COLOR, zorder=3)
        _skeleton(ax, obs, h, v, HAND_CONNECTIONS, colors=_OBSERVED_COLOR, linewidths=1.2, linestyles="--",
                  zorder=4)
        ax.scatter(obs[:, h], obs[:, v], s=18, marker="x", color=_OBSERVED_COLOR, linewidth=1.0, zorder=4)
        pairs = np.stack([obs[:, [h, v]], fit[:, [h, v]]], 1)
        from matplotlib.collections import LineCollection

        ax.add_collection(LineCollection(pairs, colors=_ERROR_COLOR, linewidths=1.4, zorder=5))
    _number(axes["top"], fit[:, 0], fit[:, 2])
    _legend(legend_ax, fit=True)
    _save(fig, path)
    return fig


def plot_timeseries(t, values, labels: Sequence[str], path=None, title: str | None = None,
                    ylabel: str | None = None):
    """Channels over time, one line each (joint angles, Inspire commands, residuals, ...).

    Args:
        t: ``(T,)`` sample times (any unit; the x axis is labelled "time").
        values: ``(T, C)`` samples, or ``(T,)`` for one channel; NaN leaves a gap.
        labels: ``C`` channel names for the legend.
        path: if given, the figure is also saved there.
        title, ylabel: optional text.

    Returns:
        The ``matplotlib.figure.Figure``.
    """
    Figure, FigureCanvasAgg = agg_figure_classes()
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if t.ndim != 1:
        raise ValueError(f"t must have shape (T,), got {t.shape}")
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != t.shape[0]:
        raise ValueError(f"values must have shape (T, C) with T = len(t) = {t.shape[0]}, got {y.shape}")
    labels = [str(s) for s in labels]
    if len(labels) != y.shape[1]:
        raise ValueError(f"got {len(labels)} labels for {y.shape[1]} channels")

    many = y.shape[1] > 10
    fig = Figure(figsize=(10.0 if many else 8.0, 4.2), dpi=_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if many:
        from matplotlib import colormaps

        cmap = colormaps["tab20"]
        ax.set_prop_cycle(color=[cmap(i % 20) for i in range(y.shape[1])],
                          linestyle=["-" if i < 20 else "--" for i in range(y.shape[1])])
    for c in range(y.shape[1]):
        ax.plot(t, y[:, c], linewidth=1.2, label=labels[c])
    ax.set_xlabel("time", fontsize=9)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=9)
    if title:
        ax.set_title(title, fontsize=11)
    ax.grid(True, color="0.9", linewidth=0.6)
    ax.tick_params(labelsize=8)
    if t.size:
        ax.set_xlim(t.min(), t.max() if t.max() > t.min() else t.min() + 1)
    if many:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, ncol=1 + y.shape[1] // 21,
                  frameon=False)
        fig.subplots_adjust(left=0.07, right=0.78, bottom=0.12, top=0.9)
    else:
        ax.legend(fontsize=8, frameon=False)
        fig.subplots_adjust(left=0.09, right=0.97, bottom=0.12, top=0.9)
    _save(fig, path)
    return fig
