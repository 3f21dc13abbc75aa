"""Sequences: solve ``(*batch, T, 21, 3)`` landmark recordings frame by frame with a warm start,
a smoothness prior towards the previous frame, and an optional One-Euro filter.

The frames are solved in time order by one compiled program, a ``lax.scan`` over
:data:`SEQUENCE_CHUNK` frames whose step is :func:`wuji_jax.solver.solve_chunked` on the batch's
frames at that time, called once per chunk with the last angles carried from call to call: one
program for any length (the last chunk padded with missing frames, which keep the previous angles and
are dropped). It is compiled with :func:`wuji_jax.programs.compile_options` (quick: a small program)
and kept with the compilation cache: one program call per chunk instead of one per frame.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime.cache import cached_program
from ..runtime.programs import compile_options
from .filters import one_euro
from ..hand.landmarks import check_landmarks
from ..hand.model import HandModel
from .api import config_arrays, neutral_angles, pick_side, solve_chunked
from .config import IKResult, SolverConfig

__all__ = ["solve_sequence", "SEQUENCE_CHUNK"]

#: frames of a sequence solved by one call of its program (one program for any length)
SEQUENCE_CHUNK = 64


def solve_sequence(
    hand: HandModel,
    landmarks,
    weights=None,
    config: SolverConfig | None = None,
    *,
    timestamps=None,
    smooth_weight: float = 0.1,
    warm_iterations: int | None = None,
    filter: str | None = None,
    min_cutoff: float = 1.0,
    beta: float = 0.5,
    side: str | None = None,
    check_units: bool = True,
    **overrides,
) -> IKResult:
    """Solve a recording (or a batch of recordings) in time order.

    Frame ``t`` starts from frame ``t−1``'s angles and is pulled towards them with weight
    ``smooth_weight`` (per rad², relative to (1 cm)² of landmark error: 0.1 makes a 0.1 rad jump cost
    as much as 1 mm of landmark error). Frames without enough landmarks keep the previous angles.
    Frame 0 is :func:`wuji_jax.solve` with ``config`` and the neutral pose as ``q0``; frame ``t > 0`` is
    :func:`wuji_jax.solve` with ``q0`` = the last valid angles, ``prior_weight=smooth_weight`` and
    ``iterations=warm_iterations``. All frames run in one compiled program (see the module), on JAX's
    default device.

    Args:
        landmarks: ``(*batch, T, 21, 3)`` metres (NaN = missing).
        weights: ``(*batch, T, 21)`` confidences, or ``None``.
        timestamps: ``(T,)`` seconds for the filter (default 30 fps).
        warm_iterations: LM iterations for warm-started frames (default: the config's).
        filter: ``None`` or ``"one_euro"`` (applied to the angles over time; stays within limits).
        side: as in :func:`wuji_jax.solve`, decided once for the whole recording.

    Returns:
        :class:`IKResult` with fields shaped ``(*batch, T, ...)``.
    """
    config = dataclasses.replace(config or SolverConfig(), **overrides)
    lm = check_landmarks(landmarks, check_units=check_units)
    if lm.ndim < 3:
        raise ValueError(f"a sequence needs shape (*batch, T, 21, 3); got {lm.shape}")
    if side is not None:
        hand = pick_side(hand, lm, side)
    T = lm.shape[-3]
    batch = lm.shape[:-3]
    flat = int(np.prod(batch, dtype=np.int64))
    dtype = np.dtype(np.float64) if (lm.dtype == np.float64 and jax.config.jax_enable_x64) else np.dtype(np.float32)
    seq = np.moveaxis(lm, -3, 0).reshape(T, flat, 21, 3)  # (T, B, 21, 3)
    if weights is None:
        w = np.ones((T, flat, 21), dtype)
    else:
        try:
            w = np.broadcast_to(np.asarray(weights, dtype), batch + (T, 21))
        except ValueError:
            raise ValueError(f"weights must have shape (*batch, T, 21) = {batch + (T, 21)}; "
                             f"got {np.shape(weights)}") from None
        w = np.moveaxis(w, -2, 0).reshape(T, flat, 21)
    warm = dataclasses.replace(
        config, iterations=warm_iterations or config.iterations, prior_weight=smooth_weight)
    C = SEQUENCE_CHUNK
    padded = -(-T // C) * C
    y = np.full((padded, flat, 21, 3), np.nan, dtype)
    y[:T] = seq
    wp = np.zeros((padded, flat, 21), dtype)
    wp[:T] = w
    first = np.zeros(padded, bool)
    first[0] = True
    q = np.broadcast_to(np.asarray(neutral_angles(hand), dtype), (flat, hand.num_joints))
    kernel_hand = hand.replace(name="", side="")  # static fields the kernel never reads (as wj.solve)
    cfgs = (config_arrays(config, dtype), config_arrays(warm, dtype))
    program = cached_program(_sequence_chunk, "solve_sequence", kernel_hand, y[:C], wp[:C], q, first[:C], *cfgs,
                             compiler_options=compile_options(C, jax.default_backend()))
    pieces = []
    for s in range(0, padded, C):
        q, out = program(kernel_hand, y[s:s + C], wp[s:s + C], q, first[s:s + C], *cfgs)
        q = np.asarray(q)  # on the host, as the first chunk's (a device array would be another program's input)
        pieces.append(out)
    # on the host: (T, B, ...) → (*batch, T, ...)
    axis = lm.ndim - 3
    fields = []
    for name in IKResult._fields:
        a = np.concatenate([np.asarray(p[name]) for p in pieces])[:T]
        fields.append(jnp.asarray(np.moveaxis(a.reshape((T,) + batch + a.shape[2:]), 0, axis)))
    stacked = IKResult(*fields)
    if filter is None:
        return stacked
    if filter != "one_euro":
        raise ValueError(f"filter must be None or 'one_euro', got {filter!r}")
    ts = np.arange(T) / 30.0 if timestamps is None else np.asarray(timestamps, np.float64)
    axis = lm.ndim - 3
    ang = jnp.moveaxis(stacked.angles, axis, 0)
    ang = jnp.clip(one_euro(ang, ts, min_cutoff, beta), hand.lower, hand.upper)
    from ..hand.kinematics import coupled_angles

    ang = jnp.moveaxis(ang, 0, axis)
    return stacked._replace(angles=ang, coupled=coupled_angles(hand, ang))


def _sequence_chunk(hand, landmarks, weights, q, first, config, warm):
    """One chunk of a sequence: ``landmarks (C, B, 21, 3)``, ``weights (C, B, 21)``, ``q (B, n)`` the
    last valid angles, ``first (C,)`` whether a step is the sequence's frame 0 (solved with
    ``config``; the others with ``warm``) → ``(q, fields)``: the angles carried on and the
    :class:`IKResult` fields ``(C, B, ...)``."""

    def step(prev, xs):
        y, w, is_first = xs
        cfg = jax.tree_util.tree_map(lambda a, b: jnp.where(is_first, a, b), config, warm)
        r = solve_chunked(hand, y, w, prev, cfg, True)
        keep = r["valid"] | is_first  # frame 0's angles start the chain even where it is not valid
        return jnp.where(keep[:, None], r["angles"], prev), r

    return jax.lax.scan(step, q, (landmarks, weights, first))
