"""The recording: ``N`` frames of MediaPipe hand landmarks with their times, flags and provenance
(:class:`LandmarkRecording`), and the file extensions that hold recordings. NumPy only: what
:mod:`wuji_jax.io` reads into and :mod:`wuji_jax.video` extracts into."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..hand.landmarks import NUM_LANDMARKS

__all__ = ["LandmarkRecording", "DATA_EXTENSIONS", "VIDEO_EXTENSIONS", "IMAGE_EXTENSIONS"]

#: landmark files :func:`wuji_jax.io.load_landmarks` reads
DATA_EXTENSIONS: tuple[str, ...] = (".npy", ".npz", ".csv", ".tsv", ".jsonl", ".ndjson", ".json", ".parquet", ".pq",
                                    ".h5", ".hdf5")
#: videos, read through :func:`wuji_jax.video.extract_landmarks`
VIDEO_EXTENSIONS: tuple[str, ...] = (".mp4", ".mov", ".avi", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg")
#: images (a folder of them is a recording), read through :func:`wuji_jax.video.extract_landmarks`
IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


@dataclasses.dataclass(frozen=True, eq=False)
class LandmarkRecording:
    """``N`` frames of 21 hand landmarks with their times, flags and provenance (NumPy arrays).

    Attributes:
        world: ``(N, 21, 3)`` float64 landmarks in metres (for videos: MediaPipe world landmarks,
            origin near the hand's centre, x right / y down / z away from the camera). NaN rows
            where no hand was found.
        timestamps: ``(N,)`` float64 seconds; NaN where the source has no times.
        detected: ``(N,)`` bool, True where the frame holds a hand with all 63 numbers finite
            (and not all 21 landmarks at one point: :func:`wuji_jax.io.degenerate_frames`).
        handedness: ``(N,)`` str, ``"Right"``, ``"Left"`` or ``""`` (unknown or no hand). For videos
            this is MediaPipe's label of the hand as it appears in the frames given (see
            :mod:`wuji_jax.video` for the mirrored-camera convention).
        score: ``(N,)`` float64 handedness confidence in [0, 1]; NaN where unknown.
        image: ``(N, 21, 3)`` normalised image landmarks (x, y in [0, 1] of the frame width/height,
            z relative to the wrist in about the same scale as x), or None when the source has none.
        fps: frames per second of the source, when known.
        sources: the files (or camera) the frames came from.
        source_index: ``(N,)`` int index into ``sources`` for each frame.
        frame_index: ``(N,)`` int frame number within its source.
        notes: one-line remarks about flagged frames or skipped files, each naming the file.
    """

    world: np.ndarray
    timestamps: np.ndarray
    detected: np.ndarray
    handedness: np.ndarray
    score: np.ndarray
    image: np.ndarray | None = None
    fps: float | None = None
    sources: tuple[str, ...] = ()
    source_index: np.ndarray | None = None
    frame_index: np.ndarray | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self):
        n = self.world.shape[0]
        assert self.world.shape == (n, NUM_LANDMARKS, 3), self.world.shape
        for name in ("timestamps", "detected", "handedness", "score"):
            assert getattr(self, name).shape == (n,), (name, getattr(self, name).shape)
        assert self.image is None or self.image.shape == (n, NUM_LANDMARKS, 3), self.image.shape
        if self.source_index is None:
            object.__setattr__(self, "source_index", np.zeros(n, np.int64))
        if self.frame_index is None:
            object.__setattr__(self, "frame_index", np.arange(n, dtype=np.int64))
        assert self.source_index.shape == (n,) and self.frame_index.shape == (n,)

    def __len__(self) -> int:
        return int(self.world.shape[0])

    @property
    def source(self) -> str:
        """The single source's path, or a summary such as ``"3 sources"``."""
        if len(self.sources) == 1:
            return self.sources[0]
        return f"{len(self.sources)} sources"

    @property
    def num_detected(self) -> int:
        return int(np.count_nonzero(self.detected))

    def segments(self) -> list[tuple[str, slice]]:
        """``(source, slice)`` for each source's run of frames (timestamps restart per source)."""
        out = []
        idx = self.source_index
        starts = [0] + [int(i) for i in np.flatnonzero(idx[1:] != idx[:-1]) + 1] + [len(self)]
        for a, b in zip(starts[:-1], starts[1:]):
            if b > a:
                out.append((self.sources[int(idx[a])] if self.sources else "", slice(a, b)))
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-frame arrays as a dict (``image`` only when present)."""
        out = {"world": self.world, "timestamps": self.timestamps, "detected": self.detected,
               "handedness": self.handedness, "score": self.score,
               "source_index": self.source_index, "frame_index": self.frame_index}
        if self.image is not None:
            out["image"] = self.image
        return out

    def save(self, path: str | os.PathLike, *, dtype: Any = np.float64) -> Path:
        """Write everything to a compressed ``.npz`` that :func:`wuji_jax.io.load_landmarks` reads back.

        ``dtype=np.float32`` halves the file (landmarks to ~1e-7 relative precision).
        """
        path = Path(path)
        arrays = self.arrays()
        for k in ("world", "image"):
            if k in arrays:
                arrays[k] = arrays[k].astype(dtype)
        arrays["timestamps"] = arrays["timestamps"].astype(np.float64)
        arrays["score"] = arrays["score"].astype(dtype)
        arrays["handedness"] = arrays["handedness"].astype(str)
        arrays["sources"] = np.asarray(self.sources, dtype=str)
        arrays["notes"] = np.asarray(self.notes, dtype=str)
        arrays["fps"] = np.float64(np.nan if self.fps is None else self.fps)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp.npz")
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path)
        return path
