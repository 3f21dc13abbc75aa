"""Shared helpers for the benchmark scripts: machine/software description, timing, JSON results,
IK test data (synthetic round trips, recordings, chunked solving) and headless figures.

Run the scripts from the repository root, e.g. ``PYTHONPATH=. python benchmarks/bench_fk.py``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions(*dists: str) -> dict[str, str | None]:
    """Installed versions of the named distributions (None where absent)."""
    return {d: _version(d) for d in dists}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    """The SIMD extensions that matter for XLA:CPU code generation (Linux only)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    simd = ("avx", "avx2", "fma", "avx512f", "avx512vl", "amx_tile")
                    return sorted(f for f in flags if f in simd)
    except OSError:
        pass
    return []


REPO = Path(__file__).resolve().parent.parent


def git_state() -> dict[str, Any]:
    """The code a result describes: ``git_commit`` (``git rev-parse --short HEAD``) and ``git_dirty``
    (True when tracked files of ``wuji_jax/``, the measured package, differ from that commit: modified
    or staged; an untracked new file that no tracked one imports changes nothing). ``$WUJI_JAX_GIT_COMMIT``,
    where set, names the commit instead (a copy of the tree on another machine, whose ``.git`` may be
    stale), with ``git_dirty`` None; outside a git checkout without it both are None."""

    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    if os.environ.get("WUJI_JAX_GIT_COMMIT"):  # named by whoever copied the tree (a device machine's copy)
        return {"git_commit": os.environ["WUJI_JAX_GIT_COMMIT"], "git_dirty": None}
    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no", "--", "wuji_jax")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def hardware_info() -> dict[str, Any]:
    """CPU, core counts, library versions, JAX backend and device, Python, date, load average, and the
    git commit of the code measured (:func:`git_state`)."""
    dev = jax.devices()[0]
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_count": os.cpu_count(),
        "cpu_count_usable": usable,
        "load_average_1_5_15min": load,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "jax": _version("jax"),
        "jaxlib": _version("jaxlib"),
        "numpy": _version("numpy"),
        "optax": _version("optax"),
        "jax_backend": jax.default_backend(),
        "device_kind": dev.device_kind,
        "device_count": jax.device_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),  # e.g. glibc.malloc.hugetlb=1 (huge pages)
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **git_state(),
    }


class Timing(NamedTuple):
    """Seconds per call: median and minimum over the repeats, every repeat, and process CPU time."""

    median: float
    min: float
    times: list[float]
    cpu_median: float  # process CPU seconds per call (all threads); > median when XLA runs in parallel


def ready(result):
    """``result`` once its JAX arrays are computed; numpy leaves (already on the host) pass as they are.

    ``jax.block_until_ready`` tries a method on every leaf and catches the error numpy arrays raise:
    18.7 µs for a ``FrameSolver`` result of 12 numpy arrays, a tenth of the call it would time.
    """
    jax.block_until_ready([x for x in jax.tree_util.tree_leaves(result) if isinstance(x, jax.Array)])
    return result


def time_fn(fn: Callable, *args, repeats: int = 5, warmup: int = 1) -> Timing:
    """Time ``fn(*args)`` after ``warmup`` untimed calls, waiting for the result every call."""
    for _ in range(warmup):
        ready(fn(*args))
    times, cpu = [], []
    for _ in range(max(repeats, 1)):
        t0, c0 = time.perf_counter(), time.process_time()
        ready(fn(*args))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return Timing(statistics.median(times), min(times), times, statistics.median(cpu))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def write_json(name: str, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``benchmarks/results/<name>_<device-kind-slug>.json``; returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}_{slug(jax.devices()[0].device_kind)}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------- IK test data

DEXRET_RECORDING = Path("/work/shared/data/dexret_human_joint_right.npy")  # outside the repo; may be absent


def bundled_recording() -> Path:
    """The bundled MediaPipe landmarks of dex-retargeting's sample video (621 frames, MIT)."""
    from wuji_jax.hand.model import asset_path

    return asset_path("samples", "human_hand_video_landmarks.npz")


def load_recording(path) -> np.ndarray:
    """``(T, 21, 3)`` float32 metres: the frames of a landmark file (any format ``wj.io`` reads)
    that hold a hand."""
    import wuji_jax as wj

    rec = wj.io.load_landmarks(path)
    return np.asarray(rec.world[rec.detected], np.float32)


def random_rotations(rng: np.random.Generator, n: int) -> np.ndarray:
    """``(n, 3, 3)`` rotations, uniform on SO(3): QR of Gaussian matrices with the sign fix of
    Mezzadri (2007), then one column negated where the determinant is −1."""
    q, r = np.linalg.qr(rng.normal(size=(n, 3, 3)))
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    q[:, :, 0] *= np.linalg.det(q)[:, None]
    return q


def round_trip_data(hand, n: int, *, seed: int = 0, noise: float = 0.0):
    """Synthetic IK inputs with known answers: ``(angles (n, J) float64, landmarks (n, 21, 3) float64)``.

    Angles uniform within the joint limits → ``wj.forward_keypoints`` (in the model's dtype) → a
    uniformly random rotation, a translation ~ N(0, (0.3 m)²) per axis and a scale uniform in
    0.8–1.2 → Gaussian noise of ``noise`` metres per coordinate.
    """
    import wuji_jax as wj

    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
    q = rng.uniform(lo, hi, size=(n, hand.num_joints))
    kp = np.asarray(wj.forward_keypoints(hand, jnp.asarray(q, hand.lower.dtype)), np.float64)
    scale = rng.uniform(0.8, 1.2, size=(n, 1, 1))
    shift = rng.normal(scale=0.3, size=(n, 1, 3))
    y = scale * np.einsum("nij,nkj->nki", random_rotations(rng, n), kp) + shift
    return q, y + rng.normal(scale=noise, size=y.shape)


def jit_solver(config=None) -> Callable:
    """``(hand, landmarks) → IKResult``: ``wj.solve`` under ``jax.jit`` with ``config``.

    The landmarks stay on the device and skip the host-side input checks, so this times the
    solver itself; ``hand`` is an argument, so a calibrated model reuses the compilation.
    """
    import wuji_jax as wj

    return jax.jit(lambda hand, y: wj.solve(hand, y, config=config, check_units=False))


def solve_in_chunks(solver: Callable, hand, landmarks, chunk: int = 1024):
    """``solver(hand, ·)`` over ``landmarks (N, 21, 3)`` in calls of exactly ``chunk`` frames (the last
    padded with copies of its final frame), so one compilation serves any ``N``; an ``IKResult`` of
    numpy arrays."""
    y = np.asarray(landmarks)
    parts = []
    for s in range(0, len(y), chunk):
        part = y[s:s + chunk]
        pad = chunk - len(part)
        if pad:
            part = np.concatenate([part, np.repeat(part[-1:], pad, axis=0)])
        r = solver(hand, jnp.asarray(part))
        parts.append([np.asarray(f)[:chunk - pad] for f in r])
    return type(r)(*(np.concatenate(f) for f in zip(*parts)))


# --------------------------------------------------------------------------------------- figures


def figure(rows: int = 1, cols: int = 1, size: tuple[float, float] = (8.0, 4.2)):
    """A headless matplotlib figure (``Figure`` on an Agg canvas, as in ``wuji_jax.viz``) and its
    ``rows × cols`` axes (a 2-D array)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=120)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def save_figure(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    return path
