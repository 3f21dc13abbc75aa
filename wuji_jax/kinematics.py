"""Forward kinematics: joint angles → link frames → MediaPipe's 21 keypoints.

Every function takes ``q`` of shape ``(*batch, n)`` (radians, active joints in model order) with any
leading batch shape (none included), is jit-compiled, and is differentiable in ``q`` and in the
model's array leaves. The result dtype follows ``q`` (float32 or float64); the model's leaves are cast
to it.

:func:`forward_kinematics` walks the tree with one fused 3×3 product per link and joint.
:func:`forward_keypoints`, the hot path, uses a Horner form per
keypoint, ``p = t₁ + R₁(t₂ + R₂(… + R_{k−1} t_k))``, evaluated in each joint's axis frame on
batch-minor arrays, in cache-sized chunks, with matrix products doing the layout changes (see the
comment above :func:`_sincos32`); in float32 its sines and cosines come from a polynomial accurate to
~1e-7 for ``|θ| < 10⁵`` rad, much cheaper than XLA:CPU's.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

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


def _matvec(a: _Mat, v: _Vec) -> _Vec:
    return [a[i][0] * v[0] + a[i][1] * v[1] + a[i][2] * v[2] for i in range(3)]


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


def _mm3(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a @ b`` for ``(..., 3, 3)`` stacks, as products and a 3-term sum (XLA fuses it; a batched
    ``dot`` of 3×3 blocks is slower to compile and to run on the CPU)."""
    return jnp.sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)


def _rodrigues_mat(axis: jax.Array, theta: jax.Array) -> jax.Array:
    """``(*batch, 3, 3)`` rotations by ``theta (*batch,)`` about ``axis (3,)``:
    ``c I + s [a]× + (1 − c) a aᵀ`` (for a unit axis, Rodrigues' formula; used as is for any axis)."""
    x, y, z = axis[0], axis[1], axis[2]
    zero = jnp.zeros_like(x)
    cross = jnp.stack([jnp.stack([zero, -z, y]), jnp.stack([z, zero, -x]), jnp.stack([-y, x, zero])])
    c, s = jnp.cos(theta)[..., None, None], jnp.sin(theta)[..., None, None]
    return c * jnp.eye(3, dtype=theta.dtype) + s * cross + (1.0 - c) * (axis[:, None] * axis[None, :])


@jax.jit
def forward_kinematics(hand: HandModel, q: jax.Array) -> LinkFrames:
    """All link frames in the wrist (root) frame.

    Args:
        hand: the model.
        q: ``(*batch, n)`` active joint angles, radians.

    Returns:
        :class:`LinkFrames` with ``rotations (*batch, L, 3, 3)`` and ``positions (*batch, L, 3)`` (metres).
    """
    # one 3×3 product per link and joint: a few hundred array ops, compiled in about a second (the
    # same tree written entry by entry took 10–30 s)
    q = _check_q(hand, q)
    dtype = q.dtype
    hand = hand.astype(dtype)
    batch = q.shape[:-1]
    angles = _link_angles(hand, jnp.moveaxis(q, -1, 0))
    rots = [jnp.broadcast_to(jnp.eye(3, dtype=dtype), batch + (3, 3))]
    poss = [jnp.zeros(batch + (3,), dtype)]
    for i in range(1, hand.num_links):
        par = hand.parents[i]
        rp = rots[par]
        poss.append(poss[par] + jnp.sum(rp * hand.origin_xyz[i], axis=-1))
        r = _mm3(rp, hand.origin_rot[i])
        if angles[i] is not None:
            r = _mm3(r, _rodrigues_mat(hand.axis[i], angles[i]))
        rots.append(r)
    return LinkFrames(rotations=jnp.stack(rots, -3), positions=jnp.stack(poss, -2))


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


# ------------------------------------------------------------------------------ fast keypoint path
#
# ``forward_keypoints`` is the hot path (millions of frames per second on CPU). Every keypoint is a
# Horner chain over the moving joints on its path, evaluated in each joint's *axis frame*: with
# ``Q = [e1 e2 â]`` a rotation taking z to the joint axis ``a`` (``|a| = ρ``), the Rodrigues matrix
# is ``Rot(a, θ) = Q·D(θ)·Qᵀ`` with ``D = [[c, −ρs, 0], [ρs, c, 0], [0, 0, ρ² + (1 − ρ²)c]]``:
# exactly the formula :func:`_rodrigues_mat` uses, non-unit axes included. A chain step is then
# ``x ← τ + G·D(θ)·x`` (4 products for the rotation, 9 for the affine map), and the per-step 3×3
# matrices ``G`` and offsets ``τ`` (joint origins, origin rotations and the ``Q``'s of consecutive
# joints, composed once per call from the model's leaves, so everything stays differentiable) carry
# the whole model.
#
# Layout and XLA:CPU: each intermediate is a batch-minor array (frames on the last axis) so fusions
# vectorise over frames; keypoint chains that share their outer joints (a finger) form a group and
# the chains of all groups advance together, outer joints last, so one sine/cosine row per (step,
# group) is broadcast over the group's chains instead of gathered. Two matrix products do the layout
# changes that elementwise code does badly: ``q (C, n) → angle rows (R, C)`` in, and
# ``rotated vectors (3K+1, C) → keypoints (C, 63)`` out, the latter also applying the last affine
# step. Large batches go through a loop over chunks of ``_CHUNK`` frames so that every
# intermediate stays in cache; each chunk's keypoints are written into the output in place.

_CHUNK = {4: 4000, 8: 2000}  # frames per chunk by itemsize: intermediates ~1–2 MB, cache-resident

# π/2 in three parts for Cody–Waite reduction: _PIO2_1 has 8 significant bits, _PIO2_2 has 12, so
# k·_PIO2_1 and k·_PIO2_2 are exact in float32 for |k| < 2¹⁶ (|θ| ≲ 10⁵ rad).
_PIO2_1 = 1.5703125
_PIO2_2 = 4.837512969970703125e-4
_PIO2_3 = (math.pi / 2 - _PIO2_1) - _PIO2_2


def _sincos32(a: jax.Array) -> jax.Array:
    """float32 ``(R, C) → (2, R, C)`` [sin; cos] with one shared range reduction (≤ 1e-7 abs. error).

    XLA:CPU's own sine and cosine cost ~12 ns per value; this is a quadrant reduction plus Taylor
    polynomials on [−π/4, π/4] (degree 9 and 8), evaluated as one uniform loop over both rows: the
    cosine row is the sine shifted by one quadrant.
    """
    k = jnp.round(a * (2 / math.pi))
    r = ((a - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3
    r2 = r * r
    sin_r = r + r * r2 * (-1 / 6 + r2 * (1 / 120 + r2 * (-1 / 5040 + r2 * (1 / 362880))))
    cos_r = 1 + r2 * (-1 / 2 + r2 * (1 / 24 + r2 * (-1 / 720 + r2 * (1 / 40320))))
    quadrant = k.astype(jnp.int32)[None] + jnp.arange(2, dtype=jnp.int32)[:, None, None]
    out = jnp.where((quadrant & 1) == 1, cos_r[None], sin_r[None])
    return jnp.where((quadrant & 2) != 0, -out, out)


@jax.custom_jvp
def _sincos_rows(a: jax.Array) -> jax.Array:
    """``(R, C) → (2, R, C)``: sin and cos of every angle (fast polynomial in float32)."""
    if a.dtype == jnp.float32:
        return _sincos32(a)
    return jnp.stack([jnp.sin(a), jnp.cos(a)])


@_sincos_rows.defjvp
def _sincos_rows_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    sc = _sincos_rows(a)
    return sc, jnp.stack([sc[1], -sc[0]]) * da


class _KeypointPlan(NamedTuple):
    """Static structure of the keypoint chains of one model topology (built once per topology).

    Products of 4×4 matrices ("items") from a bank (identity, zero, every link's origin transform,
    every moving joint's axis frame and its transpose) give all per-call constants; item ``-1``
    (appended when evaluated) is zero.
    """

    moving: tuple              # links with a revolute (active or mimic) joint on some keypoint path
    items: np.ndarray          # (N, P) bank indices of each item's factors (identity-padded)
    steps: tuple               # per step: (F, m, pad_F, pad_m, first angle row, first chain in chain_*)
    rows: tuple                # per angle row: its moving link (step-major, one per active group)
    chain_item: np.ndarray     # (S,) per (step, chain): item of the step's affine map (-1: none)
    chain_x0: np.ndarray       # (S,) per (step, chain): item whose translation starts it here (-1: none)
    chain_row: np.ndarray      # (S,) per (step, chain): its angle row
    out_index: np.ndarray      # (3K + 1, 3·keypoints) flat index into the items' top 3×4 blocks
    num_keypoints: int


@functools.lru_cache(maxsize=None)
def _keypoint_plan(parents: tuple, kinds: tuple, keypoint_links: tuple) -> _KeypointPlan:
    moving = sorted({j for k in keypoint_links for j in _ancestors(parents, k)[1:] if kinds[j] != _FIXED})
    L, J = len(parents), len(moving)
    slot = {j: i for i, j in enumerate(moving)}
    # bank: 0 identity, 1 zero, 2+i link i's origin transform [[O, t], [0, 1]], then [[Q, 0], [0, 1]]
    # and its transpose for every moving link
    H = lambda i: 2 + i
    QH = lambda j: 2 + L + slot[j]
    QT = lambda j: 2 + L + J + slot[j]
    items: list[list[int]] = []

    def item(factors):
        items.append(list(factors))
        return len(items) - 1

    chains, const = [], []
    for kp, k in enumerate(keypoint_links):
        path = _ancestors(parents, k)
        if not path:
            const.append((kp, item([1])))  # the root: origin, zero
            continue
        mv = [i for i, j in enumerate(path) if i > 0 and kinds[j] != _FIXED]  # positions, inner → outer
        if not mv:
            const.append((kp, item([H(j) for j in reversed(path)])))
            continue
        j0 = path[mv[0]]
        x0 = item([QT(j0)] + [H(path[i]) for i in range(mv[0] - 1, -1, -1)])
        st = []
        for a, b in zip(mv, mv[1:]):
            ja, jb = path[a], path[b]
            st.append(item([QT(jb)] + [H(path[i]) for i in range(b - 1, a, -1)] + [H(ja), QH(ja)]))
        jd = path[mv[-1]]
        fin = item([H(path[i]) for i in range(len(path) - 1, mv[-1], -1)] + [H(jd), QH(jd)])
        chains.append(dict(kp=kp, d=len(mv), x0=x0, steps=st, final=fin,
                           outer=[path[i] for i in reversed(mv)]))

    chains.sort(key=lambda c: -c["d"])
    groups: list[list[dict]] = []  # chains whose outer joints nest share one angle row per step
    for c in chains:
        for g in groups:
            if g[0]["outer"][: c["d"]] == c["outer"]:
                g.append(c)
                break
        else:
            groups.append([c])
    D = groups[0][0]["d"] if groups else 0
    steps, rows = [], []
    prev = (0, 0)
    for g in range(D):
        depth = D - 1 - g  # steps run inner → outer; all chains end on their outermost joint
        act = [[c for c in grp if c["d"] > depth] for grp in groups]
        F = sum(1 for a in act if a)
        m = max(len(a) for a in act)
        row0 = len(rows)
        rows += [groups[f][0]["outer"][depth] for f in range(F)]
        gt = np.full((F, m), -1)  # item -1: zero (padding chains, chains not started, last step)
        new = np.full((F, m), -1)
        for f in range(F):
            for i, c in enumerate(act[f]):
                r = g - (D - c["d"])
                if r == 0:
                    new[f, i] = c["x0"]
                if r < c["d"] - 1:
                    gt[f, i] = c["steps"][r]
        steps.append((F, m, F - prev[0], m - prev[1], row0, gt, new))
        prev = (F, m)
    P = max(len(it) for it in items) if items else 1
    idx = np.zeros((len(items), P), np.int32)  # padded with the identity
    for r, it in enumerate(items):
        idx[r, : len(it)] = it
    zero = len(items)  # the appended zero item
    flat = lambda item, i, c: (zero if item < 0 else item) * 12 + i * 4 + c
    flat_steps = lambda parts: np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
    chain_item = flat_steps([st[5].reshape(-1) for st in steps])
    chain_x0 = flat_steps([st[6].reshape(-1) for st in steps])
    chain_row = flat_steps([np.repeat(st[4] + np.arange(st[0]), st[1]) for st in steps])
    offsets = np.cumsum([0] + [st[0] * st[1] for st in steps])
    steps = tuple((F_, m_, pF, pm, row0, int(o)) for (F_, m_, pF, pm, row0, _, _), o in zip(steps, offsets))
    # output matrix: row l·K + chain holds the chain's last affine map applied to component l of its
    # rotated vector, the last row the translations (and the keypoints without moving joints)
    F, m = prev
    K = F * m
    nk = len(keypoint_links)
    out = np.full((3 * K + 1, 3 * nk), flat(-1, 0, 0))
    for f in range(F):
        for i_, c in enumerate(groups[f]):
            for i in range(3):
                for l in range(3):
                    out[l * K + f * m + i_, 3 * c["kp"] + i] = flat(c["final"], i, l)
                out[3 * K, 3 * c["kp"] + i] = flat(c["final"], i, 3)
    for kp, it in const:
        for i in range(3):
            out[3 * K, 3 * kp + i] = flat(it, i, 3)
    return _KeypointPlan(tuple(moving), idx, steps, tuple(rows), chain_item, chain_x0, chain_row, out, nk)


def _ancestors(parents, k) -> list[int]:
    path = []
    while k > 0:
        path.append(k)
        k = parents[k]
    return path


def _axis_frames(axis: jax.Array):
    """``(J, 3)`` axes → ``Q (J, 3, 3)`` with columns ``e1, e2, â`` (a rotation), and ``ρ = |a|``.

    ``e1, e2`` complete ``â`` to a right-handed orthonormal basis without branches (any completion
    works: the chain maps only depend on ``Q·D·Qᵀ``).
    """
    rho = jnp.sqrt(jnp.sum(axis * axis, -1))
    x, y, z = (axis[:, i] / rho for i in range(3))
    sign = jnp.where(z >= 0, 1.0, -1.0).astype(axis.dtype)
    p = -1 / (sign + z)
    t = x * y * p
    e1 = jnp.stack([1 + sign * x * x * p, sign * t, -sign * x], -1)
    e2 = jnp.stack([t, sign + y * y * p, -y], -1)
    return jnp.stack([e1, e2, jnp.stack([x, y, z], -1)], -1), rho


def _keypoint_constants(hand: HandModel, plan: _KeypointPlan) -> dict:
    """Traced per-call constants (differentiable in the model leaves), in a handful of small ops."""
    dtype = hand.origin_xyz.dtype
    Q, rho = _axis_frames(hand.axis[np.asarray(plan.moving, np.int32)])
    H = jnp.concatenate([hand.origin_rot, hand.origin_xyz[:, :, None]], 2)   # (L, 3, 4)
    QH = jnp.concatenate([Q, jnp.zeros_like(Q[:, :, :1])], 2)
    QT = jnp.concatenate([jnp.swapaxes(Q, 1, 2), jnp.zeros_like(Q[:, :, :1])], 2)
    top = jnp.concatenate([jnp.eye(3, 4, dtype=dtype)[None], jnp.zeros((1, 3, 4), dtype), H, QH, QT])
    last = jnp.zeros(top.shape[:1] + (1, 4), dtype).at[:, 0, 3].set(1).at[1, 0, 3].set(0)
    bank = jnp.concatenate([top, last], 1)                                     # (banks, 4, 4)
    idx = plan.items
    prod = bank[idx[:, 0]]
    for p in range(1, idx.shape[1]):
        prod = jnp.einsum("nij,njk->nik", prod, bank[idx[:, p]], precision=jax.lax.Precision.HIGHEST)
    prod = jnp.concatenate([prod[:, :3], jnp.zeros((1, 3, 4), dtype)])       # item -1: zero

    # angle rows: linear in q (active joints and the mimic laws' linear parts), plus each mimic law's
    # cross term k·q_a·q_b through two helper rows carrying q_a and q_b
    R = len(plan.rows)
    laws = sorted({hand.mimic_index[j] for j in plan.rows if hand.kinds[j] != _ACTIVE})
    width = R + 2 * len(laws)
    lin = np.zeros((hand.num_joints, width))
    for r, j in enumerate(plan.rows):
        if hand.kinds[j] == _ACTIVE:
            lin[hand.q_index[j], r] = 1
    lin = jnp.asarray(lin, dtype)
    offset = jnp.zeros((R, 1), dtype)
    cross = []
    for t, law in enumerate(laws):
        a, b = hand.mimic_sources[law]
        use = np.array([hand.kinds[j] != _ACTIVE and hand.mimic_index[j] == law for j in plan.rows], float)
        k = hand.coupling[law]
        col = np.zeros((hand.num_joints, width))
        col[a, R + 2 * t] = 1
        col2 = np.zeros((hand.num_joints, width))
        col2[b, R + 2 * t + 1] = 1
        ua = np.zeros((hand.num_joints, width))
        ua[a, :R] = use
        ub = np.zeros((hand.num_joints, width))
        ub[b, :R] = use
        lin = (lin + jnp.asarray(col + col2, dtype) + k[0] * jnp.asarray(ua, dtype)
               + k[1] * jnp.asarray(ub, dtype))
        offset = offset + hand.coupling_offset[law] * jnp.asarray(use[:, None], dtype)
        cross.append(k[2] * jnp.asarray(use[:, None], dtype))
    row_rho = jnp.concatenate([jnp.ones((1,), dtype), rho])[
        np.array([1 + plan.moving.index(j) for j in plan.rows], np.int32)]

    # chain steps x ← τ + G·D(θ)·x with D's entries folded into G's columns: column 0 gets
    # c·G0 + ρs·G1, column 1 gets c·G1 − ρs·G0, column 2 gets (ρ² + (1 − ρ²)c)·G2
    Gt = prod[plan.chain_item]                                                 # (S, 3, 4)
    r = row_rho[plan.chain_row][:, None]
    cst = jnp.stack([Gt[:, :, 0], Gt[:, :, 1], r * Gt[:, :, 1], -r * Gt[:, :, 0], r * r * Gt[:, :, 2],
                     (1 - r * r) * Gt[:, :, 2], Gt[:, :, 3], prod[plan.chain_x0][:, :, 3]])
    cst = jnp.swapaxes(cst, 1, 2)                                              # (8, 3, S)
    M = prod.reshape(-1)[plan.out_index]
    return dict(lin=lin, offset=offset, cross=cross, cst=cst, row_rho=row_rho[:, None, None], M=M, R=R)


def _rotated_rows(kc: dict, P: jax.Array) -> jax.Array:
    """Angle rows ``P (R + 2·laws, C)`` → rotated chain vectors and a ones row ``(3K + 1, C)``."""
    R = kc["R"]
    C = P.shape[1]
    A = P[:R] + kc["offset"]
    for t, k in enumerate(kc["cross"]):
        A = A + k * (P[R + 2 * t] * P[R + 2 * t + 1])
    SC = _sincos_rows(A).reshape(2 * R, C)
    # An (identity) gather is something XLA:CPU will not re-evaluate inside each consumer: without it
    # every chain step would recompute the sines and cosines it broadcasts.
    SC = SC[np.arange(2 * R)]
    x = None
    steps = kc["steps"]
    for g, (F, m, pF, pm, r0, o) in enumerate(steps):
        c8 = kc["cst"][:, :, o:o + F * m].reshape(8, 3, F, m, 1)
        if x is None:
            x = c8[7]
        else:
            x = jnp.pad(x, ((0, 0), (0, pF), (0, pm), (0, 0))) + c8[7]
        sin = SC[r0:r0 + F][:, None]           # (F, 1, C), broadcast over the group's chains
        cos = SC[R + r0:R + r0 + F][:, None]
        if g < len(steps) - 1:
            x = (c8[6] + x[0] * (c8[0] * cos + c8[2] * sin) + x[1] * (c8[1] * cos + c8[3] * sin)
                 + x[2] * (c8[4] + c8[5] * cos))
        else:
            rho = kc["row_rho"][r0:r0 + F]
            s = sin * rho
            w0 = cos * x[0] - s * x[1]
            w1 = s * x[0] + cos * x[1]
            w2 = (rho * rho + cos * (1 - rho * rho)) * x[2]
    K = F * m
    w = [jnp.broadcast_to(v, (F, m, C)).reshape(K, C) for v in (w0, w1, w2)]
    return jnp.concatenate(w + [jnp.ones((1, C), P.dtype)])


def _keypoints_2d(hand: HandModel, q: jax.Array) -> jax.Array:
    """``q (B, n) → (B, 3·keypoints)``, in chunks of ``_CHUNK`` frames for large ``B``."""
    B, n = q.shape
    dtype = q.dtype
    hand = hand.astype(dtype)
    plan = _keypoint_plan(hand.parents, hand.kinds, hand.keypoint_links)
    nk = plan.num_keypoints
    if B == 0:
        return jnp.zeros((0, 3 * nk), dtype)
    kc = _keypoint_constants(hand, plan)
    kc["steps"] = plan.steps
    hi = jax.lax.Precision.HIGHEST
    if not plan.steps:  # no moving joint on any keypoint path
        return jnp.broadcast_to(kc["M"][-1], (B, 3 * nk))

    def chunk(qc):
        P = jax.lax.dot_general(kc["lin"], qc, (((0,), (1,)), ((), ())), precision=hi)  # (rows, C)
        W = _rotated_rows(kc, P)
        return jax.lax.dot_general(W, kc["M"], (((0,), (0,)), ((), ())), precision=hi)   # (C, 3·nk)

    C = _CHUNK.get(jnp.dtype(dtype).itemsize, 2000)
    if B <= C or jax.default_backend() != "cpu":  # accelerators: one pass, no chunk loop
        return chunk(q)

    def body(i, out):
        start = jnp.minimum(i * C, B - C)  # the last chunk overlaps its predecessor instead of padding
        qc = jax.lax.dynamic_slice(q, (start, 0), (C, n))
        return jax.lax.dynamic_update_slice(out, chunk(qc), (start, 0))

    return jax.lax.fori_loop(0, -(-B // C), body, jnp.zeros((B, 3 * nk), dtype))


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
    batch = q.shape[:-1]
    flat = _keypoints_2d(hand, q.reshape((-1, q.shape[-1])))
    return flat.reshape(batch + (len(hand.keypoint_links), 3))


forward_keypoints = jax.jit(forward_keypoints)


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
