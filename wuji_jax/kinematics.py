"""Forward kinematics: joint angles → link frames → MediaPipe's 21 keypoints.

Every function takes ``q`` of shape ``(*batch, n)`` (radians, active joints in model order) with any
leading batch shape (none included), is jit-compiled, and is differentiable in ``q`` and in the
model's array leaves. The result dtype follows ``q`` (float32 or float64); the model's leaves are cast
to it.

Inside, the chain is evaluated component-wise: every rotation entry and coordinate is its own
``(*batch,)`` array, so XLA fuses the tree into vectorised loops over the batch instead of many tiny
3×3 matrix products. Keypoints use a Horner form, ``p = t₁ + R₁(t₂ + R₂(… + R_{k−1} t_k))`` with
``R_j = O_j·Rot(a_j, θ_j)``, which rotates vectors instead of accumulating matrices; the sines and
cosines of all joint angles are computed once and shared.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .model import _ACTIVE, _FIXED, HandModel

__all__ = ["LinkFrames", "forward_kinematics", "forward_keypoints", "coupled_angles", "full_angles"]

_Mat = list  # 3×3 nested lists of (*batch,) arrays (or scalars)
_Vec = list  # 3 (*batch,) arrays (or scalars)


class LinkFrames(NamedTuple):
    """Pose of every link in the root (wrist) frame.

    Attributes:
        rotations: ``(*batch, L, 3, 3)`` rotation matrices, link frame → root frame.
        positions: ``(*batch, L, 3)`` link origins in the root frame, metres.
    """

    rotations: jax.Array
    positions: jax.Array


def _check_q(hand: HandModel, q) -> jax.Array:
    q = jnp.asarray(q)
    if not jnp.issubdtype(q.dtype, jnp.floating):
        q = q.astype(jnp.float32)
    if q.ndim == 0 or q.shape[-1] != hand.num_joints:
        raise ValueError(
            f"joint angles must have shape (*batch, {hand.num_joints}) (radians, order hand.joint_names); "
            f"got shape {tuple(q.shape)}"
        )
    return q


def _matmul(a: _Mat, b: _Mat) -> _Mat:
    return [[a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j] for j in range(3)] for i in range(3)]


def _matvec(a: _Mat, v: _Vec) -> _Vec:
    return [a[i][0] * v[0] + a[i][1] * v[1] + a[i][2] * v[2] for i in range(3)]


def _rodrigues(axis: _Vec, theta: jax.Array) -> _Mat:
    """Rotation by ``theta`` about unit ``axis``: ``c I + s [a]× + (1 − c) a aᵀ``."""
    c, s = jnp.cos(theta), jnp.sin(theta)
    t = 1.0 - c
    x, y, z = axis
    return [
        [c + x * x * t, x * y * t - z * s, x * z * t + y * s],
        [y * x * t + z * s, c + y * y * t, y * z * t - x * s],
        [z * x * t - y * s, z * y * t + x * s, c + z * z * t],
    ]


def _coupled_rows(hand: HandModel, qT: jax.Array) -> list[jax.Array]:
    """Angles of the coupled (mimic) joints from ``qT`` ``(n, *batch)``: a list of ``(*batch,)``."""
    out = []
    for m, (src, sec) in enumerate(hand.mimic_sources):
        k = hand.coupling[m]
        a, b = qT[src], qT[sec]
        out.append(k[0] * a + k[1] * b + k[2] * a * b + hand.coupling_offset[m])
    return out


def _link_angles(hand: HandModel, qT: jax.Array) -> list:
    coupled = _coupled_rows(hand, qT)
    angles = []
    for kind, qi, mi in zip(hand.kinds, hand.q_index, hand.mimic_index):
        angles.append(None if kind == _FIXED else (qT[qi] if kind == _ACTIVE else coupled[mi]))
    return angles


def _chain(hand: HandModel, qT: jax.Array) -> tuple[list, list]:
    """Component-wise FK over the tree. Returns per-link rotation (``_Mat``) and position (``_Vec``)."""
    dtype = qT.dtype
    hand = hand.astype(dtype)
    angles = _link_angles(hand, qT)
    zero = jnp.zeros(qT.shape[1:], dtype)
    one = jnp.ones(qT.shape[1:], dtype)
    eye = [[one if i == j else zero for j in range(3)] for i in range(3)]
    rots: list = [eye]
    poss: list = [[zero, zero, zero]]
    for i in range(1, hand.num_links):
        par = hand.parents[i]
        rp, pp = rots[par], poss[par]
        t = hand.origin_xyz[i]
        p = [pp[k] + d for k, d in enumerate(_matvec(rp, [t[0], t[1], t[2]]))]
        poss.append(p)
        o = hand.origin_rot[i]
        r = _matmul(rp, [[o[a, b] for b in range(3)] for a in range(3)])
        if angles[i] is not None:
            ax = hand.axis[i]
            r = _matmul(r, _rodrigues([ax[0], ax[1], ax[2]], angles[i]))
        rots.append(r)
    return rots, poss


def _stack_vec(vs: list, batch_shape) -> jax.Array:
    """List of 3-vectors of ``(*batch,)`` arrays → ``(*batch, len, 3)``.

    The barrier makes XLA compute all components in one multi-output loop before the (cheap) stack
    and transpose; fused into the concatenation instead, XLA:CPU recomputes the shared chain for
    every output and runs up to 50× slower.
    """
    flat = [jnp.broadcast_to(c, batch_shape) for v in vs for c in v]
    flat = jax.lax.optimization_barrier(flat)
    arr = jnp.stack(flat, -1)
    return arr.reshape(batch_shape + (len(vs), 3))


@jax.jit
def forward_kinematics(hand: HandModel, q: jax.Array) -> LinkFrames:
    """All link frames in the wrist (root) frame.

    Args:
        hand: the model.
        q: ``(*batch, n)`` active joint angles, radians.

    Returns:
        :class:`LinkFrames` with ``rotations (*batch, L, 3, 3)`` and ``positions (*batch, L, 3)`` (metres).
    """
    q = _check_q(hand, q)
    qT = jnp.moveaxis(q, -1, 0)
    batch = q.shape[:-1]
    rots, poss = _chain(hand, qT)
    positions = _stack_vec(poss, batch)
    rot = jnp.stack(
        [jnp.stack([jnp.stack([jnp.broadcast_to(r[i][j], batch) for j in range(3)], 0) for i in range(3)], 0)
         for r in rots], 0)
    rotations = jnp.moveaxis(rot, (0, 1, 2), (-3, -2, -1))
    return LinkFrames(rotations=rotations, positions=positions)


def _rotate(axis: _Vec, s, c, v: _Vec) -> _Vec:
    """``Rot(axis, θ) v = c v + s (a × v) + (1 − c)(a·v) a`` with ``s, c = sin θ, cos θ``."""
    ax, ay, az = axis
    x, y, z = v
    d = (ax * x + ay * y + az * z) * (1.0 - c)
    return [
        c * x + s * (ay * z - az * y) + d * ax,
        c * y + s * (az * x - ax * z) + d * ay,
        c * z + s * (ax * y - ay * x) + d * az,
    ]


def _keypoints_T(hand: HandModel, qT: jax.Array) -> list:
    """Keypoint positions from ``qT (n, *batch)``: a list of 21 three-lists of ``(*batch,)`` arrays."""
    hand = hand.astype(qT.dtype)
    angles = _link_angles(hand, qT)
    moving = [i for i, a in enumerate(angles) if a is not None]
    ang = jnp.stack([angles[i] for i in moving])
    sin, cos = jnp.sin(ang), jnp.cos(ang)
    sc = {i: (sin[k], cos[k]) for k, i in enumerate(moving)}
    zero = jnp.zeros(qT.shape[1:], qT.dtype)
    out = []
    for k in hand.keypoint_links:
        path = []
        while k > 0:
            path.append(k)
            k = hand.parents[k]
        if not path:  # the root itself
            out.append([zero, zero, zero])
            continue
        t = hand.origin_xyz[path[0]]
        v = [t[0], t[1], t[2]]
        for j in path[1:]:
            if j in sc:
                a = hand.axis[j]
                v = _rotate([a[0], a[1], a[2]], *sc[j], v)
            o = hand.origin_rot[j]
            v = _matvec([[o[r, c] for c in range(3)] for r in range(3)], v)
            t = hand.origin_xyz[j]
            v = [v[0] + t[0], v[1] + t[1], v[2] + t[2]]
        out.append([jnp.broadcast_to(c, qT.shape[1:]) for c in v])
    return out


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
        raise ValueError(
            "this model has no MediaPipe keypoint map; load it with keypoints=[21 link names]"
        )
    q = _check_q(hand, q)
    return _stack_vec(_keypoints_T(hand, jnp.moveaxis(q, -1, 0)), q.shape[:-1])


@jax.jit
def coupled_angles(hand: HandModel, q: jax.Array) -> jax.Array:
    """Angles of the coupled joints (``hand.mimic_names``, e.g. ``thumb_cmc_rot``).

    ``θ_rot = K_FLEX·θ_flex + K_ABD·θ_abd + K_CROSS·θ_flex·θ_abd + offset``.

    Args:
        q: ``(*batch, n)`` active joint angles, radians.

    Returns:
        ``(*batch, M)`` radians.
    """
    q = _check_q(hand, q)
    hand = hand.astype(q.dtype)
    rows = _coupled_rows(hand, jnp.moveaxis(q, -1, 0))
    if not rows:
        return jnp.zeros(q.shape[:-1] + (0,), q.dtype)
    return jnp.stack(rows, -1)


def full_angles(hand: HandModel, q: jax.Array) -> dict[str, jax.Array]:
    """Every revolute joint's angle by name (active and coupled): ``{name: (*batch,)}``, radians."""
    q = _check_q(hand, q)
    out = {n: q[..., i] for i, n in enumerate(hand.joint_names)}
    c = coupled_angles(hand, q)
    for m, n in enumerate(hand.mimic_names):
        out[n] = c[..., m]
    return out
