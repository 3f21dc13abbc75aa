"""Temporal filters shared by the solver's sequences and the Inspire streams."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["one_euro", "one_euro_step"]


def _alpha(dt, cutoff):
    r = 2.0 * jnp.pi * cutoff * dt
    return r / (r + 1.0)


def one_euro_step(y, dy, x, dt, min_cutoff, beta, d_cutoff):
    """One step of the One-Euro filter (Casiez et al., CHI 2012): the cutoff (Hz) rises with the
    signal's speed, so the filter smooths at rest and lags little in motion. ``dt`` seconds; a step
    with ``dt <= 0`` leaves the state unchanged. Returns ``(y, dy)``."""
    ok = dt > 0
    dt_safe = jnp.where(ok, dt, 1.0)
    dx = jnp.where(ok, (x - y) / dt_safe, 0.0)
    dy = dy + jnp.where(ok, _alpha(dt_safe, d_cutoff), 0.0) * (dx - dy)
    a = jnp.where(ok, _alpha(dt_safe, min_cutoff + beta * jnp.abs(dy)), 0.0)
    return y + a * (x - y), dy


@jax.jit
def _one_euro_scan(x, dt, min_cutoff, beta, d_cutoff):
    def step(state, inp):
        y, dy = one_euro_step(*state, *inp, min_cutoff, beta, d_cutoff)
        return (y, dy), y

    _, ys = jax.lax.scan(step, (x[0], jnp.zeros_like(x[0])), (x[1:], dt))
    return jnp.concatenate([x[:1], ys], 0)


def one_euro(x, timestamps, min_cutoff: float = 1.0, beta: float = 0.5, d_cutoff: float = 1.0):
    """One-Euro filter along axis 0 of ``x (T, ...)`` with ``timestamps (T,)`` seconds (non-decreasing).

    Each output is a convex combination of inputs, so bounds (joint limits, [0, 1]) are preserved.
    """
    x = jnp.asarray(x)
    t = np.asarray(timestamps, np.float64)
    if t.shape != x.shape[:1]:
        raise ValueError(f"timestamps must have shape ({x.shape[0]},); got {t.shape}")
    if np.any(np.diff(t) < 0) or not np.all(np.isfinite(t)):
        raise ValueError("timestamps must be finite and non-decreasing (seconds)")
    if x.shape[0] < 2:
        return x
    dt = jnp.asarray(np.diff(t), x.dtype).reshape((-1,) + (1,) * (x.ndim - 1))
    return _one_euro_scan(x, dt, min_cutoff, beta, d_cutoff)
