"""Shared helpers for the benchmark scripts: machine/software description, timing, JSON results.

Run the scripts from the repository root, e.g. ``PYTHONPATH=. python benchmarks/bench_fk.py``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax

RESULTS = Path(__file__).resolve().parent / "results"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


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


def hardware_info() -> dict[str, Any]:
    """CPU, core counts, library versions, JAX backend and device, Python, date, load average."""
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
    }


class Timing(NamedTuple):
    """Seconds per call: median and minimum over the repeats, every repeat, and process CPU time."""

    median: float
    min: float
    times: list[float]
    cpu_median: float  # process CPU seconds per call (all threads); > median when XLA runs in parallel


def time_fn(fn: Callable, *args, repeats: int = 5, warmup: int = 1) -> Timing:
    """Time ``fn(*args)`` after ``warmup`` untimed calls, blocking on the result every call."""
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times, cpu = [], []
    for _ in range(max(repeats, 1)):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
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
