"""Devices: use every CPU core, and split big batches over the local devices.

XLA:CPU runs one computation on about one core, but it runs the computations of several CPU
*devices* in parallel. :func:`use_cpu_cores` asks JAX for one CPU device per core; :func:`wuji_jax.solve` and
:func:`wuji_jax.batch.solve_dataset` then split large batches over ``jax.local_devices()`` (GPUs
alike; the rule: :func:`wuji_jax.programs.split_sharding`; figures in ``docs/performance.md``)::

    import jax
    import wuji_jax as wj

    wj.use_cpu_cores()          # before any JAX computation; or JAX_NUM_CPU_DEVICES=2 in the environment
    wj.solve(hand, landmarks)   # (10_000, 21, 3): 5,000 frames on each core

The ``wuji-jax`` command line calls :func:`use_cpu_cores` itself.
"""

from __future__ import annotations

import os

from .programs import SPLIT_MIN_FRAMES as SPLIT_MIN_FRAMES  # noqa: F401 (the rules live in programs)
from .programs import split_sharding as split_over_devices  # noqa: F401

__all__ = ["use_cpu_cores", "cpu_core_count", "jax_started", "split_over_devices"]


def cpu_core_count() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # macOS, Windows
        return max(os.cpu_count() or 1, 1)


def jax_started() -> bool:
    """Whether JAX has started its backends (after which the CPU device count is fixed).

    JAX has no public query for this; it refuses a change of ``jax_num_cpu_devices`` once started,
    so this tries a change and puts the setting back (public configuration API only)."""
    import jax

    was = jax.config.jax_num_cpu_devices
    try:
        jax.config.update("jax_num_cpu_devices", 1 if was != 1 else 2)
    except RuntimeError:
        return True
    jax.config.update("jax_num_cpu_devices", was)
    return False


def use_cpu_cores(n: int | None = None) -> int:
    """Give JAX ``n`` CPU devices (default: one per core, :func:`cpu_core_count`); returns ``n``.

    Must run before JAX computes anything (right after the imports). Calling it again with the same
    count, or after the CPU devices were already set (``JAX_NUM_CPU_DEVICES``), is harmless.

    Raises:
        ValueError: ``n`` < 1.
        RuntimeError: JAX has already started with a different number of CPU devices.
    """
    import jax

    n = cpu_core_count() if n is None else int(n)
    if n < 1:
        raise ValueError(f"use_cpu_cores: n must be >= 1, got {n}")
    if jax.config.jax_num_cpu_devices == n:
        return n
    try:
        jax.config.update("jax_num_cpu_devices", n)  # JAX refuses once its backends have started
    except RuntimeError:
        have = len(jax.devices("cpu"))
        if have != n:
            raise RuntimeError(
                f"use_cpu_cores({n}): JAX already runs with {have} CPU device(s); call it right after "
                f"`import jax`, before any computation, or set JAX_NUM_CPU_DEVICES={n} in the environment") from None
    return n
