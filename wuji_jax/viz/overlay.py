"""Videos with the fit drawn on them: MediaPipe landmarks, the fitted skeleton, Inspire channels.

Needs OpenCV (``pip install wuji-jax[video]``); it is imported only when a function here is called.

:func:`render_overlay` writes an MP4 (``mp4v``, the input's frame rate and size) in which every
frame shows

* MediaPipe's 21 image landmarks (``recording.image``) as red dots joined by MediaPipe's skeleton
  (``wuji_jax.landmarks.HAND_CONNECTIONS``) in thin white lines;
* the fitted WG110v12 keypoints (``result.keypoints``) as a thick cyan skeleton, reprojected into
  the image as described below;
* the six Inspire opening fractions (``inspire``, or ``wj.inspire.to_inspire(result.angles)``) as
  labelled bars in a panel at the top left (1 = open; its place: :func:`panel_rect`), and a status
  line (frame, time, fit residual, projection error) at the bottom left;
* ``no hand`` where the recording holds no landmarks for the frame.

Reprojection. The fitted keypoints live in the frame of ``recording.world`` (MediaPipe world
landmarks: metres, origin near the hand's centre) and there is no camera model to put them into the
image. MediaPipe gives each frame's landmarks twice, though: in that metric frame and in the image.
Per frame, :func:`fit_projection` fits the affine camera (weak perspective plus aspect ratio and
shear) that maps one to the other, ``image_xy ≈ A @ world_xyz + b`` with ``A`` 2×3 and ``b`` 2, by
linear least squares over the landmarks finite in both (at least 4; 8 unknowns from 2 equations a
landmark), and :func:`project_keypoints` applies it to the fitted keypoints. A weak-perspective
camera ``s·R[:2]`` is a special case, so the map is exact up to perspective and MediaPipe's own
disagreement between its two outputs; the RMS distance between the projected world landmarks and
the image landmarks is printed on each frame (``2-D fit … px``, typically a few pixels on the
bundled sample at 1280×720). The distance between the drawn skeletons is therefore the IK residual
seen through that camera, plus that projection error.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..hand.landmarks import HAND_CONNECTIONS, NUM_LANDMARKS

__all__ = ["render_overlay", "render_overlay_frame", "fit_projection", "project_keypoints", "panel_rect",
           "LANDMARK_COLOR", "FIT_COLOR", "BAR_COLOR", "TRACK_COLOR", "NO_HAND_COLOR"]

#: BGR colour of MediaPipe's landmark dots (the centre pixels of each dot have exactly this colour).
LANDMARK_COLOR: tuple[int, int, int] = (40, 30, 230)
#: BGR colour of the fitted skeleton.
FIT_COLOR: tuple[int, int, int] = (255, 210, 0)
#: BGR colour of the filled part of each channel's bar in the panel (:func:`panel_rect`): every pixel
#: of it has exactly this colour, from the track's left end to ``value`` of its length.
BAR_COLOR: tuple[int, int, int] = (0, 150, 255)
#: BGR colour of each bar's track, the unfilled rest of the bar (a NaN channel: the whole track).
TRACK_COLOR: tuple[int, int, int] = (90, 90, 90)
#: BGR colour of the ``no hand`` label written at the top centre of a frame without landmarks (its
#: inner pixels have exactly this colour; no other drawing uses it).
NO_HAND_COLOR: tuple[int, int, int] = (0, 215, 255)
_EDGE_COLOR = (235, 235, 235)  # MediaPipe's skeleton lines
_TEXT_COLOR = (255, 255, 255)
_SHIFT = 4  # sub-pixel bits for cv2 drawing
_MIN_POINTS = 4  # landmarks needed to fit the 8 unknowns of the affine camera


def _import_cv2():
    try:
        import cv2
    except ImportError as e:
        raise ImportError(f"video overlays need OpenCV ({e}); install it with "
                          "pip install 'wuji-jax[video]'") from None
    return cv2


# ------------------------------------------------------------------------------------------------
# Projection
# ------------------------------------------------------------------------------------------------


def fit_projection(world, image_xy) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares affine camera ``image_xy ≈ A @ world + b`` from corresponding points.

    Args:
        world: ``(K, 3)`` points (e.g. MediaPipe world landmarks, metres).
        image_xy: ``(K, 2)`` (or ``(K, >=2)``; only x, y are used) the same points in the image, in
            any 2-D unit (normalised coordinates or pixels); ``A`` and ``b`` come out in that unit.

    Rows with a NaN/inf in either array are ignored. The points are centred before solving, so the
    fit is well conditioned whatever the offsets.

    Returns:
        ``(A, b)``: ``(2, 3)`` and ``(2,)`` float64.

    Raises:
        ValueError: mismatched shapes, or fewer than 4 usable points.
    """
    X = np.asarray(world, np.float64)
    Y = np.asarray(image_xy, np.float64)
    if X.ndim != 2 or X.shape[1] != 3 or Y.ndim != 2 or Y.shape[1] < 2 or Y.shape[0] != X.shape[0]:
        raise ValueError(f"world must be (K, 3) and image_xy (K, 2) with the same K; got {X.shape} "
                         f"and {Y.shape}")
    Y = Y[:, :2]
    ok = np.isfinite(X).all(1) & np.isfinite(Y).all(1)
    if ok.sum() < _MIN_POINTS:
        raise ValueError(f"an affine camera needs at least {_MIN_POINTS} points finite in both "
                         f"arrays; got {int(ok.sum())}")
    X, Y = X[ok], Y[ok]
    mx, my = X.mean(0), Y.mean(0)
    At, *_ = np.linalg.lstsq(X - mx, Y - my, rcond=None)
    A = At.T
    return A, my - A @ mx


def project_keypoints(world, image_xy, points) -> tuple[np.ndarray, float]:
    """Fit :func:`fit_projection` on ``(world, image_xy)`` and apply it to ``points``.

    Args:
        world: ``(21, 3)`` landmarks in the metric frame (``recording.world[i]``).
        image_xy: ``(21, >=2)`` the same landmarks in the image (``recording.image[i]``).
        points: ``(..., 3)`` points in ``world``'s frame (``result.keypoints[i]``).

    Returns:
        ``(points_xy, rms)``: ``(..., 2)`` the points in ``image_xy``'s unit, and the RMS distance
        between the projected ``world`` landmarks and ``image_xy`` (the camera's own error).
    """
    A, b = fit_projection(world, image_xy)
    X = np.asarray(world, np.float64)
    Y = np.asarray(image_xy, np.float64)[:, :2]
    d = X @ A.T + b - Y
    d = d[np.isfinite(d).all(1)]
    rms = float(np.sqrt(np.mean(np.sum(d * d, 1))))
    return np.asarray(points, np.float64) @ A.T + b, rms


# ------------------------------------------------------------------------------------------------
# One frame
# ------------------------------------------------------------------------------------------------


def _fix(p: np.ndarray) -> tuple[int, int]:
    return int(round(p[0] * (1 << _SHIFT))), int(round(p[1] * (1 << _SHIFT)))


def _xy(a, what: str, n: int = NUM_LANDMARKS) -> np.ndarray | None:
    """``a`` as ``(n, 2)`` float64 (extra columns dropped), or None for None / nothing finite."""
    if a is None:
        return None
    a = np.asarray(a, np.float64)
    if a.ndim != 2 or a.shape[0] != n or a.shape[1] < 2:
        raise ValueError(f"{what} must have shape ({n}, 2) or ({n}, 3); got {a.shape}")
    a = a[:, :2]
    return a if np.isfinite(a).all(1).any() else None


def _text(cv2, img, s: str, org: tuple[int, int], fs: float, color, th: int) -> None:
    """Text with a dark outline, readable on any background.

    The outline is the text drawn in black, shifted by one pixel each way: a thicker black stroke
    would advance wider than the text (OpenCV's glyph advance grows with the thickness).
    """
    font = cv2.FONT_HERSHEY_SIMPLEX
    x, y = org
    for dx, dy in ((-1, -1), (1, -1), (-1, 1), (1, 1)):
        cv2.putText(img, s, (x + dx, y + dy), font, fs, (0, 0, 0), th, cv2.LINE_AA)
    cv2.putText(img, s, org, font, fs, color, th, cv2.LINE_AA)


def _skeleton(cv2, img, pts: np.ndarray, color, thickness: int, radius: int) -> None:
    ok = np.isfinite(pts).all(1)
    for a, b in HAND_CONNECTIONS:
        if ok[a] and ok[b]:
            cv2.line(img, _fix(pts[a]), _fix(pts[b]), color, thickness, cv2.LINE_AA, _SHIFT)
    if radius:
        for k in np.flatnonzero(ok):
            cv2.circle(img, _fix(pts[k]), radius << _SHIFT, color, -1, cv2.LINE_AA, _SHIFT)


def _unit(h: int) -> float:
    """Drawing unit in pixels: 1 at 720 rows, floored so that small frames keep legible text."""
    return max(h / 720.0, 0.65)


def panel_rect(shape: Sequence[int], n_channels: int = 6) -> tuple[int, int, int, int]:
    """Where :func:`render_overlay_frame` (and so :func:`render_overlay`) draws the channel panel.

    Args:
        shape: the frame's shape ``(H, W, ...)`` (``frame.shape``), H rows and W columns of pixels.
        n_channels: how many channel bars the panel holds (6: the Inspire hand's channels).

    Returns:
        ``(x0, y0, x1, y1)`` in pixels (ints): the panel is ``frame[y0:y1, x0:x1]``, at the top left,
        inside the frame (``x1 ≤ W − 1``, ``y1 ≤ H − 1``). Its height holds ``n_channels + 3`` rows of
        ``row = (y1 − y0) // (n_channels + 3)`` pixels: the title, then channel ``r`` (1 … ``n_channels``,
        in order) in row ``r`` (its bar's track spans pixel rows ``y0 + row·r + row // 4`` to
        ``y0 + row·(r + 1) − row // 4``, its filled part starts at the track's left end), then the
        legend. Margins and sizes scale with the frame's height: with ``u = max(H / 720, 0.65)``, a
        margin of ``round(12·u)`` pixels, a width of ``max(120, round(360·u))`` and rows of
        ``max(10, round(26·u))``, cut at the frame's edges.

    Raises:
        ValueError: ``shape`` has fewer than two axes or an empty one, or ``n_channels`` < 0.
    """
    if len(shape) < 2 or int(shape[0]) < 1 or int(shape[1]) < 1 or n_channels < 0:
        raise ValueError(f"panel_rect: shape must be (H, W, ...) with H, W >= 1 and n_channels >= 0; "
                         f"got shape {tuple(shape)}, n_channels {n_channels}")
    h, w = int(shape[0]), int(shape[1])
    u = _unit(h)
    m, row = round(12 * u), max(10, round(26 * u))
    return m, m, min(w - 1, m + max(120, round(360 * u))), min(h - 1, m + row * (n_channels + 3))


def _panel(cv2, img, channels: np.ndarray, labels: Sequence[str]) -> None:
    h = img.shape[0]
    u = _unit(h)
    fs, th = 0.5 * u, max(1, round(u))
    x0, y0, x1, y1 = panel_rect(img.shape, len(channels))
    row = (y1 - y0) // (len(channels) + 3)
    roi = img[y0:y1, x0:x1]
    roi[:] = (roi.astype(np.uint16) * 2 // 5).astype(np.uint8)  # darken to 40 %
    pad = round(8 * u)
    base = lambda r: y0 + row * r + (row + cv2.getTextSize("Ag", 0, fs, th)[0][1]) // 2  # noqa: E731
    _text(cv2, img, "Inspire opening (1 = open)", (x0 + pad, base(0)), fs, _TEXT_COLOR, th)
    label_w = max(cv2.getTextSize(s, cv2.FONT_HERSHEY_SIMPLEX, fs, th)[0][0] for s in labels)
    value_w = cv2.getTextSize("0.00", cv2.FONT_HERSHEY_SIMPLEX, fs, th)[0][0]
    bx0 = x0 + 2 * pad + label_w
    bx1 = max(bx0 + 10, x1 - 2 * pad - value_w)
    for r, (name, v) in enumerate(zip(labels, channels), start=1):
        yb = base(r)
        _text(cv2, img, str(name), (x0 + pad, yb), fs, _TEXT_COLOR, th)
        top, bot = y0 + row * r + row // 4, y0 + row * (r + 1) - row // 4
        cv2.rectangle(img, (bx0, top), (bx1, bot), TRACK_COLOR, -1)
        if math.isfinite(v):
            v = min(max(float(v), 0.0), 1.0)
            xe = bx0 + round(v * (bx1 - bx0))
            if xe > bx0:
                cv2.rectangle(img, (bx0, top), (xe, bot), BAR_COLOR, -1)
            s = f"{v:.2f}"
        else:
            s = "n/a"
        _text(cv2, img, s, (bx1 + pad, yb), fs, _TEXT_COLOR, th)
    # legend
    yl = y0 + row * (len(channels) + 1) + row // 2
    xt = x0 + pad + round(28 * u)
    cv2.circle(img, (x0 + pad + round(9 * u), yl), max(2, round(5 * u)), LANDMARK_COLOR, -1,
               cv2.LINE_AA)
    _text(cv2, img, "MediaPipe landmarks", (xt, base(len(channels) + 1)), fs, _TEXT_COLOR, th)
    cv2.line(img, (x0 + pad, yl + row), (x0 + pad + round(18 * u), yl + row), FIT_COLOR,
             max(2, round(3 * u)), cv2.LINE_AA)
    _text(cv2, img, "fitted WG110v12 skeleton", (xt, base(len(channels) + 2)), fs, _TEXT_COLOR, th)


def render_overlay_frame(frame_bgr, image_landmarks, fitted_xy, channels, *, text: str | None = None,
                         labels: Sequence[str] | None = None) -> np.ndarray:
    """Draw one overlay frame (the drawing :func:`render_overlay` does per frame).

    Args:
        frame_bgr: ``(H, W, 3)`` uint8 BGR image; not modified.
        image_landmarks: ``(21, 2)`` or ``(21, 3)`` MediaPipe image landmarks in normalised
            coordinates (x / W, y / H; ``recording.image[i]``), or None / all NaN for a frame
            without a hand (then ``no hand`` is written on the frame). NaN rows are skipped.
        fitted_xy: ``(21, 2)`` fitted keypoints in the same normalised image coordinates (e.g. from
            :func:`project_keypoints`), or None.
        channels: ``(C,)`` Inspire opening fractions in [0, 1] (NaN draws ``n/a``), or None for no
            panel.
        text: a status line for the bottom left, or None.
        labels: ``C`` channel names; default ``wuji_jax.inspire.MOTOR_NAMES``.

    Returns:
        A new ``(H, W, 3)`` uint8 image. Drawing order: MediaPipe's skeleton lines, the fitted
        skeleton, MediaPipe's dots (so each dot's centre shows :data:`LANDMARK_COLOR`), then the
        panel and the text.
    """
    cv2 = _import_cv2()
    img = np.asarray(frame_bgr)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"frame_bgr must be an (H, W, 3) uint8 image; got {img.shape} {img.dtype}")
    img = np.ascontiguousarray(img).copy()
    h, w = img.shape[:2]
    u = _unit(h)
    wh = np.array([w, h], np.float64)
    lm = _xy(image_landmarks, "image_landmarks")
    fit = _xy(fitted_xy, "fitted_xy")
    if lm is not None:
        _skeleton(cv2, img, lm * wh, _EDGE_COLOR, max(1, round(1.5 * u)), 0)
    if fit is not None:
        _skeleton(cv2, img, fit * wh, FIT_COLOR, max(2, round(3 * u)), max(1, round(2.5 * u)))
    if lm is not None:
        p = lm * wh
        r = max(2, round(5 * u))
        for k in np.flatnonzero(np.isfinite(p).all(1)):  # white rim, then the dot
            cv2.circle(img, _fix(p[k]), (r + 1) << _SHIFT, (255, 255, 255), -1, cv2.LINE_AA, _SHIFT)
        for k in np.flatnonzero(np.isfinite(p).all(1)):
            cv2.circle(img, _fix(p[k]), r << _SHIFT, LANDMARK_COLOR, -1, cv2.LINE_AA, _SHIFT)
    if channels is not None:
        from ..retarget.inspire import MOTOR_NAMES

        ch = np.asarray(channels, np.float64).reshape(-1)
        names = list(MOTOR_NAMES if labels is None else labels)
        if len(names) != ch.size:
            raise ValueError(f"got {len(names)} labels for {ch.size} channels")
        _panel(cv2, img, ch, names)
    fs, th = 0.6 * u, max(1, round(u))
    if text:
        _text(cv2, img, text, (round(12 * u), h - round(14 * u)), fs, _TEXT_COLOR, th)
    if lm is None:
        s = "no hand"
        (tw, _), _ = cv2.getTextSize(s, cv2.FONT_HERSHEY_SIMPLEX, 2 * fs, 2 * th)
        _text(cv2, img, s, ((w - tw) // 2, round(60 * u)), 2 * fs, NO_HAND_COLOR, 2 * th)
    return img


# ------------------------------------------------------------------------------------------------
# A whole video
# ------------------------------------------------------------------------------------------------


def _channels(result, inspire, n: int) -> np.ndarray:
    if inspire is not None:
        ch = np.asarray(inspire, np.float64)
        if ch.shape != (n, 6):
            raise ValueError(f"inspire must have shape ({n}, 6) (one row per recording frame); "
                             f"got {ch.shape}")
        return ch
    from ..retarget.inspire import to_inspire

    q = np.asarray(result.angles, np.float64)
    ch = np.full((n, 6), np.nan)
    ok = np.isfinite(q).all(-1)
    if ok.any():
        ch[ok] = np.asarray(to_inspire(q[ok]), np.float64)
    return ch


def render_overlay(video: str | os.PathLike, recording, result, path: str | os.PathLike, *,
                   inspire=None, max_frames: int | None = None, progress: bool = True,
                   scale: float = 1.0) -> Path:
    """Write ``video`` with the landmarks, the fit and the Inspire channels drawn on it, as MP4.

    Args:
        video: the video the recording was extracted from.
        recording: its :class:`~wuji_jax.io.LandmarkRecording` (from
            :func:`wuji_jax.video.extract_landmarks`; ``image`` landmarks required). Row ``i``
            belongs to video frame ``recording.frame_index[i]``.
        result: the fit of ``recording.world`` (``wj.solve(hand, recording.world, side="auto")``):
            anything with ``keypoints`` ``(N, 21, 3)`` (in ``recording.world``'s frame) and
            ``residual`` ``(N,)`` metres; ``angles`` ``(N, 20)`` when ``inspire`` is None;
            ``valid`` ``(N,)`` if present (invalid fits are not drawn).
        path: the output ``.mp4``; parent folders are created. Written to a temporary name in
            the same folder and renamed when complete.
        inspire: ``(N, 6)`` Inspire opening fractions; default
            ``wj.inspire.to_inspire(result.angles)``.
        max_frames: stop after this many video frames. By default the video is rendered up to the
            recording's last frame (or the video's end, if that comes first).
        progress: print a progress line to stderr.
        scale: resize the frames by this factor first (e.g. 0.5 for a smaller file).

    Returns:
        ``path``. The MP4 has ``mp4v`` video at the input's frame rate (the recording's, or 30,
        when the container states none) and size times ``scale``; one output frame per input frame.

    Raises:
        ValueError: a ``path`` not ending in ``.mp4`` or that is ``video`` (by any spelling or
            link: :func:`wuji_jax.outputs.check_output`), a video OpenCV cannot open or read, a
            recording without image landmarks, or arrays whose lengths disagree (one line each).
        RuntimeError: OpenCV cannot open an ``mp4v`` writer (codec missing, folder not writable).
    """
    from ..data.outputs import check_output, output_format, temporary_name
    from ..data.video import Progress

    path = Path(path)
    output_format(path, {".mp4": "mp4"}, "the overlay", option="path")
    check_output(path, [video], option="path")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    if recording.image is None:
        raise ValueError(f"{recording.source}: the recording has no image landmarks; extract it from "
                         "the video with wuji_jax.video.extract_landmarks")
    if len(recording.sources) > 1:
        raise ValueError(f"the recording holds {len(recording.sources)} sources; render one video at "
                         "a time (extract_landmarks(video) gives one)")
    n = len(recording)
    kp = np.asarray(result.keypoints, np.float64)
    if kp.shape != (n, NUM_LANDMARKS, 3):
        raise ValueError(f"result.keypoints must have shape ({n}, 21, 3) (one row per recording "
                         f"frame); got {kp.shape}")
    residual_mm = np.asarray(getattr(result, "residual", np.full(n, np.nan)), np.float64) * 1000.0
    valid = np.asarray(getattr(result, "valid", np.ones(n, bool)), bool)
    channels = _channels(result, inspire, n)
    if residual_mm.shape != (n,) or valid.shape != (n,):
        raise ValueError(f"result.residual and result.valid must have shape ({n},)")
    row_of = {int(f): i for i, f in enumerate(recording.frame_index)}
    last = max(row_of) + 1 if row_of else 0
    total = min(last, max_frames) if max_frames else last

    cv2 = _import_cv2()
    video = Path(video)
    cap = cv2.VideoCapture(str(video))
    if not video.is_file() or not cap.isOpened():
        cap.release()
        raise ValueError(f"{video}: cannot be opened as a video (no such file, or OpenCV found no "
                         "decoder); check that the file plays, or convert it to H.264 .mp4")
    fps = cap.get(cv2.CAP_PROP_FPS)
    if not (fps and math.isfinite(fps) and fps > 0):
        fps = recording.fps or 30.0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    writer: Any = None
    bar = Progress(f"overlay {video.name}", total, progress)
    i = 0
    try:
        while i < total:
            ok, frame = cap.read()
            if not ok:
                break
            if scale != 1.0:
                size = (max(1, round(frame.shape[1] * scale)), max(1, round(frame.shape[0] * scale)))
                frame = cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
            if writer is None:
                h, w = frame.shape[:2]
                writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
                if not writer.isOpened():
                    raise RuntimeError(f"{path}: OpenCV could not open an mp4v MP4 writer (codec "
                                       "missing from this OpenCV build, or the folder is not "
                                       "writable); install opencv-contrib-python from PyPI")
            r = row_of.get(i)
            lm = None if r is None else recording.image[r, :, :2]
            fit, ch, text = None, np.full(6, np.nan), f"frame {i}"
            if lm is not None and np.isfinite(lm).all(1).any():
                ch = channels[r]
                t = recording.timestamps[r]
                text += f"  t {t:.2f} s" if math.isfinite(t) else ""
                wh = np.array([w, h], np.float64)
                try:  # fitted in pixels, so that the projection error reads in pixels
                    xy, rms = project_keypoints(recording.world[r], lm * wh, kp[r])
                except ValueError:  # fewer than 4 landmarks finite in both
                    xy, rms = None, math.nan
                if xy is not None and valid[r] and np.isfinite(xy).all():
                    fit = xy / wh
                    text += f"  residual {residual_mm[r]:.1f} mm"
                else:
                    text += "  fit flagged"
                text += f"  2-D fit {rms:.1f} px" if math.isfinite(rms) else ""
            else:
                lm = None
            writer.write(render_overlay_frame(frame, lm, fit, ch, text=text))
            bar.update(lm is not None)
            i += 1
    except BaseException:
        if writer is not None:
            writer.release()
        tmp.unlink(missing_ok=True)
        raise
    finally:
        cap.release()
    bar.close()
    if writer is None:
        raise ValueError(f"{video}: no frames could be read; the file may be empty or truncated")
    writer.release()
    os.replace(tmp, path)
    return path
