"""Sequences: solve ``(*batch, T, 21, 3)`` landmark recordings frame by frame with a warm start,
a smoothness prior towards the previous frame, and an optional One-Euro filter."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from .filters import one_euro
from .landmarks import check_landmarks
from .model import HandModel
from .solver import IKResult, SolverConfig, neutral_angles, pick_side, solve_checked

__all__ = ["solve_sequence"]


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
    seq = np.moveaxis(lm, -3, 0)  # (T, *batch, 21, 3)
    w = None if weights is None else np.moveaxis(np.asarray(weights, lm.dtype), -2, 0)
    warm = dataclasses.replace(
        config, iterations=warm_iterations or config.iterations, prior_weight=smooth_weight)
    frames = []
    prev = None
    batch = seq.shape[1:-2]
    ones = np.ones(batch + (21,), lm.dtype)
    for t in range(T):
        wt = ones if w is None else w[t]
        if prev is None:
            q0 = np.broadcast_to(np.asarray(neutral_angles(hand), lm.dtype), batch + (hand.num_joints,))
            r = solve_checked(hand, seq[t], wt, q0, config, warm=True)  # one program for every frame
        else:  # an invalid frame returns its start pose: the previous angles
            r = solve_checked(hand, seq[t], wt, prev, warm, warm=True)
        frames.append(r)
        prev = np.where(np.asarray(r.valid)[..., None], np.asarray(r.angles), prev if prev is not None
                        else np.asarray(r.angles))
    # stacked on the host: jnp.stack of T arrays compiles a T-operand program per field and length
    stacked = IKResult(*[jnp.asarray(np.stack([np.asarray(x) for x in f], axis=lm.ndim - 3)) for f in zip(*frames)])
    if filter is None:
        return stacked
    if filter != "one_euro":
        raise ValueError(f"filter must be None or 'one_euro', got {filter!r}")
    ts = np.arange(T) / 30.0 if timestamps is None else np.asarray(timestamps, np.float64)
    axis = lm.ndim - 3
    ang = jnp.moveaxis(stacked.angles, axis, 0)
    ang = jnp.clip(one_euro(ang, ts, min_cutoff, beta), hand.lower, hand.upper)
    from .kinematics import coupled_angles

    ang = jnp.moveaxis(ang, 0, axis)
    return stacked._replace(angles=ang, coupled=coupled_angles(hand, ang))
