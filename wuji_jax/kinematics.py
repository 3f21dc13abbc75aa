"""Forward kinematics: joint angles → link frames → MediaPipe's 21 keypoints.

Every function takes ``q`` of shape ``(*batch, n)`` (radians, active joints in model order) with any
leading batch shape (none included), is jit-compiled, and is differentiable in ``q`` and in the
model's array leaves. The result dtype follows ``q`` (float32 or float64); the model's leaves are cast
to it.

:func:`forward_keypoints` is the chains' forward kinematics (:func:`wuji_jax.chains.fk`, the one the
solver uses); :func:`forward_kinematics` walks the whole tree (every link, also those no keypoint
sits on) with the same per-link rotation (:func:`wuji_jax.geometry.rodrigues`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import geometry as geo
from .chains import chain_params, chains_of, coupled_rows, fk, keypoints21, link_angles
from .model import ACTIVE, FIXED, HandModel

__all__ = ["LinkFrames", "forward_kinematics", "forward_keypoints", "coupled_angles", "full_angles",
           "check_angles"]


class LinkFrames(NamedTuple):
    """Pose of every link in the root (wrist) frame.

    Attributes:
        rotations: ``(*batch, L, 3, 3)`` rotation matrices, link frame → root frame.
        positions: ``(*batch, L, 3)`` link origins in the root frame, metres.
    """

    rotations: jax.Array
    positions: jax.Array


def check_angles(hand: HandModel, q) -> jax.Array:
    """``q`` as a floating JAX array of shape ``(*batch, n)``; ``ValueError`` naming the shape otherwise."""
    q = jnp.asarray(q)
    if not jnp.issubdtype(q.dtype, jnp.floating):
        q = q.astype(jnp.float32)
    if q.ndim == 0 or q.shape[-1] != hand.num_joints:
        raise ValueError(
            f"joint angles must have shape (*batch, {hand.num_joints}) (radians, order hand.joint_names); "
            f"got shape {tuple(q.shape)}"
        )
    return q


@jax.jit
def forward_kinematics(hand: HandModel, q: jax.Array) -> LinkFrames:
    """All link frames in the wrist (root) frame.

    Args:
        hand: the model.
        q: ``(*batch, n)`` active joint angles, radians.

    Returns:
        :class:`LinkFrames` with ``rotations (*batch, L, 3, 3)`` and ``positions (*batch, L, 3)`` (metres).
    """
    q = check_angles(hand, q)
    hand = hand.astype(q.dtype)
    batch = q.shape[:-1]
    qT = jnp.moveaxis(q, -1, 0)  # (n, *batch)
    rot = coupled_rows(hand, qT)
    origin_rot = jnp.moveaxis(hand.origin_rot, (1, 2), (0, 1))  # (3, 3, L)
    eye = jnp.broadcast_to(jnp.eye(3, dtype=q.dtype).reshape((3, 3) + (1,) * len(batch)), (3, 3) + batch)
    rots, poss = [eye], [jnp.zeros((3,) + batch, q.dtype)]
    for i in range(1, hand.num_links):
        par = hand.parents[i]
        poss.append(poss[par] + geo.matvec(rots[par], hand.origin_xyz[i].reshape((3,) + (1,) * len(batch))))
        r = geo.matmul(rots[par], origin_rot[:, :, i].reshape((3, 3) + (1,) * len(batch)))
        if hand.kinds[i] != FIXED:
            theta = qT[hand.q_index[i]] if hand.kinds[i] == ACTIVE else rot[hand.mimic_index[i]]
            s, c = geo.sincos(theta)
            r = geo.matmul(r, geo.rodrigues(hand.axis[i].reshape((3,) + (1,) * len(batch)), s, c))
        rots.append(r)
    return LinkFrames(rotations=jnp.moveaxis(jnp.stack(rots), (0, 1, 2), (-3, -2, -1)),
                      positions=jnp.moveaxis(jnp.stack(poss), (0, 1), (-2, -1)))


@jax.jit
def forward_keypoints(hand: HandModel, q: jax.Array) -> jax.Array:
    """The 21 MediaPipe keypoints of the hand at joint angles ``q``.

    Args:
        hand: the model (must have a keypoint map, as WG110v12 does).
        q: ``(*batch, n)`` active joint angles, radians.

    Returns:
        ``(*batch, 21, 3)`` keypoints in the wrist frame (REP-155), metres, MediaPipe landmark order.
    """
    if not hand.keypoint_links:
        raise ValueError("this model has no MediaPipe keypoint map; load it with keypoints=[21 link names]")
    q = check_angles(hand, q)
    hand = hand.astype(q.dtype)
    batch = q.shape[:-1]
    qT = q.reshape(-1, hand.num_joints).T  # (n, B)
    ch = chains_of(hand)
    kp, _ = fk(chain_params(hand, ch), ch, link_angles(ch, qT, coupled_rows(hand, qT)), jacobian=False)
    return jnp.transpose(keypoints21(ch, kp), (2, 1, 0)).reshape(batch + (21, 3))


@jax.jit
def coupled_angles(hand: HandModel, q: jax.Array) -> jax.Array:
    """Angles of the coupled joints (``hand.mimic_names``, e.g. ``thumb_cmc_rot``).

    ``θ_rot = K_FLEX·θ_flex + K_ABD·θ_abd + K_CROSS·θ_flex·θ_abd + offset``.

    Args:
        q: ``(*batch, n)`` active joint angles, radians.

    Returns:
        ``(*batch, M)`` radians.
    """
    q = check_angles(hand, q)
    return jnp.moveaxis(coupled_rows(hand.astype(q.dtype), jnp.moveaxis(q, -1, 0)), 0, -1)


def full_angles(hand: HandModel, q: jax.Array) -> dict[str, jax.Array]:
    """Every revolute joint's angle by name (active and coupled): ``{name: (*batch,)}``, radians."""
    q = check_angles(hand, q)
    out = {n: q[..., i] for i, n in enumerate(hand.joint_names)}
    c = coupled_angles(hand, q)
    for m, n in enumerate(hand.mimic_names):
        out[n] = c[..., m]
    return out
