"""Forward kinematics: joint angles → link frames → MediaPipe's 21 keypoints.

Every function takes ``q`` of shape ``(*batch, n)`` (radians, active joints in model order) with any
leading batch shape (none included), is jit-compiled, and is differentiable in ``q`` and in the
model's array leaves. The result dtype follows ``q`` (float32 or float64); the model's leaves are cast
to it.

:func:`forward_keypoints` is the chains' forward kinematics (:func:`wuji_jax.chains.fk`, the one the
solver uses); :func:`forward_kinematics` walks the whole tree (every link, also those no keypoint
sits on) with the same per-link rotation (:func:`wuji_jax.geometry.rodrigues`), one tree level at a time.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import geometry as geo
from .chains import chain_params, chains_of, coupled_rows, cpu_chunk, fk, keypoints21, link_angles, map_chunks
from .model import ACTIVE, MIMIC, HandModel
from ..runtime.programs import FK_CHUNK_FRAMES, LINK_CHUNK_FRAMES  # noqa: F401 (re-exported: the rules live in wuji_jax.programs)

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
    batch, L = q.shape[:-1], hand.num_links
    rows = q.reshape(-1, hand.num_joints)
    frames = map_chunks(lambda qs: _link_frames(hand, qs), (rows,), cpu_chunk(rows.shape[0], LINK_CHUNK_FRAMES))
    return LinkFrames(rotations=frames.rotations.reshape(batch + (L, 3, 3)),
                      positions=frames.positions.reshape(batch + (L, 3)))


def _link_frames(hand: HandModel, rows) -> LinkFrames:
    """:func:`forward_kinematics` of ``rows (B, n)``: ``rotations (B, L, 3, 3)``, ``positions (B, L, 3)``."""
    qT = rows.T  # (n, B)
    B, L = qT.shape[1], hand.num_links
    # each link's angle in [q, coupled, 0] (fixed links: 0, which makes Rodrigues' factor the identity)
    ext = jnp.concatenate([qT, coupled_rows(hand, qT), jnp.zeros((1, B), rows.dtype)])
    n, M = hand.num_joints, len(hand.mimic_sources)
    angle = np.array([hand.q_index[i] if k == ACTIVE else n + hand.mimic_index[i] if k == MIMIC else n + M
                      for i, k in enumerate(hand.kinds)])
    s, c = geo.sincos(ext[angle])  # (L, B)
    local = geo.matmul(jnp.moveaxis(hand.origin_rot, (1, 2), (0, 1))[..., None],
                       geo.rodrigues(hand.axis.T[..., None], s, c))  # (3, 3, L, B): O · Rot(axis, θ)
    xyz = hand.origin_xyz.T[..., None]  # (3, L, 1)
    # the tree walked level by level: every link of one depth below the root in one array step
    R = jnp.broadcast_to(jnp.eye(3, dtype=rows.dtype)[:, :, None, None], (3, 3, L, B))
    P = jnp.zeros((3, L, B), rows.dtype)
    for idx in _levels(hand.parents):
        par = np.asarray(hand.parents)[idx]
        Rp = R[:, :, par]
        P = P.at[:, idx].set(P[:, par] + geo.matvec(Rp, xyz[:, idx]))
        R = R.at[:, :, idx].set(geo.matmul(Rp, local[:, :, idx]))
    return LinkFrames(rotations=jnp.transpose(R, (3, 2, 0, 1)), positions=jnp.transpose(P, (2, 1, 0)))


def _levels(parents) -> list[np.ndarray]:
    """Link indices by depth below the root (the root, depth 0, left out): ``[(k_1,), (k_2,), …]``."""
    depth = [0] * len(parents)
    for i in range(1, len(parents)):  # parents[i] < i
        depth[i] = depth[parents[i]] + 1
    return [np.array([i for i in range(len(parents)) if depth[i] == d]) for d in range(1, max(depth, default=0) + 1)]


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
    ch = chains_of(hand)
    params = chain_params(hand, ch)

    def rows(qs):  # (C, n) -> (C, 21, 3)
        qT = qs.T
        kp, _ = fk(params, ch, link_angles(ch, qT, coupled_rows(hand, qT)), jacobian=False)
        return jnp.transpose(keypoints21(ch, kp), (2, 1, 0))

    flat = q.reshape(-1, hand.num_joints)
    return map_chunks(rows, (flat,), cpu_chunk(flat.shape[0], FK_CHUNK_FRAMES)).reshape(batch + (21, 3))


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
