"""The one policy for the solver's compiled programs: how a batch is sized, placed and compiled.

Every rule that decides which XLA program answers a call lives here, once; the measurements behind
each are in ``docs/performance.md`` (made by the scripts in ``benchmarks/``):

* **chunks** (:func:`chunk_frames`): a device solves its frames ``chunk`` at a time inside one
  program: 128 on a CPU (the solver's state stays in the caches; each chunk's loop stops when its own
  frames have converged), 65,536 on an accelerator (enough to fill it). ``benchmarks/bench_ik.py``,
  ``benchmarks/bench_gpu.py``.
* **sizes** (:func:`padded_frames`): a batch is padded to the next power of two below one chunk, and
  to a multiple of the chunk above: never by more than one chunk (per device), so a program computes
  at most one chunk of padding, and a few programs serve every batch size (as ``jax.jit``, a new size
  compiles a new program; padding makes that one per power of two, then one per chunk).
* **devices** (:func:`split_sharding`): batches of at least :data:`SPLIT_MIN_FRAMES` frames per device
  are split over ``jax.local_devices()`` (each device solves its rows; no communication): XLA:CPU runs a
  program on about one core but several CPU devices' programs in parallel
  (:func:`wuji_jax.use_cpu_cores`). Below that, the split's transfer and second dispatch cost more than
  the second device gains.
* **compile options** (:func:`compile_options`): programs of at most :data:`QUICK_FRAMES` frames on a
  CPU, whose compilation far outweighs their run, get XLA:CPU's older fusion emitters
  (:func:`wuji_jax.cache.quick_compile_options`: about 60 % of the compile time); larger ones XLA's
  defaults, which run them faster. A ``wuji-jax solve`` job of at most :data:`QUICK_JOB_FRAMES` frames
  (bounded before it starts) is compiled quickly too. ``benchmarks/bench_core.py``.
* **FK chunks** (:data:`FK_CHUNK_FRAMES`, :data:`LINK_CHUNK_FRAMES`): forward kinematics on a CPU
  loops over chunks inside its program (the arrays stay in the caches), which also keeps clear of an
  XLA:CPU fault (``jax.grad`` outside ``jax.jit`` wrong over larger float32 arrays;
  ``tests/test_kinematics.py``).

Programs are plain ``jax.jit`` functions: the first call for a size compiles and blocks, later calls run
the compiled program, nothing runs in the background. :func:`wuji_jax.enable_compilation_cache` keeps
them across processes (``wuji-jax warmup`` fills it).
"""

from __future__ import annotations

import functools

__all__ = ["CHUNK_FRAMES", "ACCELERATOR_CHUNK_FRAMES", "SPLIT_MIN_FRAMES", "QUICK_FRAMES", "QUICK_JOB_FRAMES",
           "FK_CHUNK_FRAMES", "LINK_CHUNK_FRAMES", "chunk_frames",
           "padded_frames", "split_sharding", "compile_options", "STANDARD_SIZES"]

#: frames a CPU device solves at a time (the fastest of five sizes)
CHUNK_FRAMES = 128
#: frames an accelerator solves at a time (the fastest of five sizes on an accelerator)
ACCELERATOR_CHUNK_FRAMES = 65536
#: frames per device below which a batch is not split over the devices
SPLIT_MIN_FRAMES = 256
#: programs of at most this many frames (per device) on a CPU are compiled with the quick options
QUICK_FRAMES = 64
#: a ``wuji-jax solve`` job of at most this many frames compiles its kernel quickly
QUICK_JOB_FRAMES = 65536
#: frames :func:`wuji_jax.forward_keypoints` and :func:`wuji_jax.landmark_loss` compute at a time on a CPU
FK_CHUNK_FRAMES = 2048
#: the same for :func:`wuji_jax.forward_kinematics`, whose arrays hold all 21 links
LINK_CHUNK_FRAMES = 256
#: the batch sizes ``wuji-jax warmup`` compiles :func:`wuji_jax.solve` for (one frame, a typical
#: small batch, one CPU chunk)
STANDARD_SIZES = (1, 64, CHUNK_FRAMES)


def chunk_frames(platform: str) -> int:
    """Frames solved at a time on one device of ``platform`` (``"cpu"``, ``"gpu"``, …)."""
    return CHUNK_FRAMES if platform == "cpu" else ACCELERATOR_CHUNK_FRAMES


def padded_frames(frames: int, chunk: int) -> int:
    """The size a batch of ``frames`` frames is solved at on one device: the next power of two below
    ``chunk``, else the next multiple of ``chunk`` (at most one chunk of padding)."""
    if frames <= 0:
        return 0
    if frames < chunk:
        return min(1 << (frames - 1).bit_length(), chunk)
    return -(-frames // chunk) * chunk


def split_sharding(frames: int):
    """The sharding that splits ``frames`` rows over the local devices, or ``None`` where one device
    will do (a single device, or fewer than :data:`SPLIT_MIN_FRAMES` frames per device)."""
    import jax

    devices = tuple(jax.local_devices())
    if len(devices) < 2 or frames < SPLIT_MIN_FRAMES * len(devices):
        return None
    return _frame_sharding(devices)


@functools.lru_cache(maxsize=8)
def _frame_sharding(devices: tuple):
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.asarray(devices, dtype=object), ("frames",)), PartitionSpec("frames"))


def compile_options(frames: int, platform: str) -> dict | None:
    """XLA compiler options for a program of ``frames`` frames per device on ``platform``: the quick
    options for small CPU programs (:data:`QUICK_FRAMES`), else None (XLA's defaults)."""
    from .cache import quick_compile_options

    return (quick_compile_options(platform) or None) if frames <= QUICK_FRAMES else None
