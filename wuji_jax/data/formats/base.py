"""What every format's reader shares: its optional parser (:func:`need`) and dropping the frames before
the one a read starts at (:func:`skip_rows`)."""

from __future__ import annotations

import importlib
from typing import Any, Iterator

import numpy as np

from ..limits import FORMATS_HINT, err

__all__ = ["need", "skip_rows", "rechunk"]


def need(module: str, path: Any):
    """``module`` imported, or the one-line error about ``path`` saying which extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise err(path, f"reading this format needs {module.split('.')[0]}, which is not installed "
                        f"({e}); {FORMATS_HINT}") from None


def skip_rows(chunks: Iterator[dict], drop: int, chunk: int) -> Iterator[dict]:
    """``chunks`` (dicts of arrays, one row per frame) without their first ``drop`` rows, cut again
    into pieces of ``chunk`` rows counted from the first row kept (non-row entries such as ``meta``
    are dropped with the rows)."""
    if drop == 0:
        yield from chunks
        return
    yield from rechunk(_dropped(chunks, drop), chunk)


def _dropped(chunks: Iterator[dict], drop: int) -> Iterator[dict]:
    for c in chunks:
        c = {k: v for k, v in c.items() if k != "meta"}
        n = len(c["world"])
        if drop >= n:
            drop -= n
            continue
        if drop:
            c = {k: v[drop:] for k, v in c.items()}
            drop = 0
        yield c


def rechunk(chunks: Iterator[dict], chunk: int) -> Iterator[dict]:
    """``chunks`` (dicts of arrays with the same keys, one row per frame) as pieces of ``chunk`` rows
    (the last one shorter)."""
    pending: list[dict] = []
    have = 0
    for c in chunks:
        pending.append(c)
        have += len(c["world"])
        while have >= chunk:
            merged = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
            yield {k: v[:chunk] for k, v in merged.items()}
            pending = [{k: v[chunk:] for k, v in merged.items()}]
            have -= chunk
    if have:
        yield {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
