"""Task-space retargeting onto the Inspire hand: six openings whose fingertips make the human's grasp.

The joint map (``wuji_jax.inspire.to_inspire``) gives each motor a blend of the human's joint angles.
That keeps finger curl, but the Inspire thumb's base, axes and size differ from a human's, so no
blend of angles makes its tip meet a finger in a pinch. Here the six openings ``o`` of each frame
minimise, as dex-retargeting's DexPilot optimizer does (``dex_retargeting/optimizer.py``)::

    Σ_k w_dir ‖û_robot,k − û_human,k‖²                      wrist → tip directions, five fingers
  + Σ_f w_f   ‖v_robot,f − L_f ê_human,f‖²                   thumb → finger vectors, four fingers
  + w_prior   ‖o − o_map‖²  (+ w_previous ‖o − o_prev‖²)     the joint map as a weak prior

in a palm frame built the same way on both hands (:func:`~.inspire_hand.palm_frame`). The target
length ``L_f`` of a thumb → finger vector follows a pinch map of the human's distance ``d_f``
normalised by the human's middle-finger length: the robot's scaled distance ``s·d_f`` above
``pinch_far``, contact below ``pinch_near``, a smooth blend between; and ``w_f`` grows from
``w_vector`` to ``w_vector + w_pinch`` as the human pinches. *Contact* is measured between the
fingertip pads, not the tip frames: each tip is a sphere of ``pad_radius`` set back from its tip
frame along the last link, and contact is its centres ``2·pad_radius`` apart (surfaces touching).

Solver: projected Levenberg–Marquardt on the six openings, a fixed number of iterations, limits
kept by clipping each step to ``[0, 1]``; a motor at a limit whose gradient pushes it outwards leaves
the step's system (projected Newton), so the others converge as if it were fixed (on the shared
recording, 4 iterations end within 6.5e-4 of a 40-iteration fit at p95, 0.003 at most). The five pads move together: their chains are
:func:`~.inspire_hand.point_stages` programs stacked into arrays (a planar rotation and a ``3 × 4``
map per joint), evaluated with their exact derivatives along each pad's own motors. Each finger
motor couples only with the two thumb motors, so the ``6 × 6`` normal equations are solved per frame
by eliminating the fingers (a ``2 × 2`` Schur complement remains). The thumb's problem has local
minima, so every frame is solved from several thumb starts (``thumb_starts``, the joint map's thumb,
and the previous command when given) at once, and the start with the lowest final cost wins.
Everything is elementwise over the frames (the minor axis), so it batches, jits, vmaps and
differentiates (through the unrolled iterations).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..hand import geometry as geo
from ..hand.model import ACTIVE, FIXED
from .inspire_hand import TIP_LINKS as TIP_NAMES
from .inspire_hand import InspireHand, chain_points, openings_to_angles, palm_frame, point_stages

__all__ = ["RetargetConfig", "retarget_rows", "human_targets", "pad_points", "HUMAN_TIPS", "HUMAN_KNUCKLES"]

#: MediaPipe indices of the five fingertips (thumb, index, middle, ring, pinky).
HUMAN_TIPS = (4, 8, 12, 16, 20)
#: MediaPipe indices of the index, middle and pinky knuckles (the palm frame's points).
HUMAN_KNUCKLES = (5, 9, 17)
_MIDDLE = (9, 10, 11, 12)  # middle finger MCP → tip: the length the human's distances are scaled by


@dataclasses.dataclass(frozen=True)
class RetargetConfig:
    """Weights and settings of :func:`wuji_jax.inspire.retarget` (a pytree: numbers traced, counts static).

    Attributes:
        iterations: Levenberg–Marquardt iterations per start (static).
        thumb_starts: ``((bend, rotation), ...)`` thumb openings the extra starts begin from (static);
            the joint map's thumb (and ``q0`` when given) are always starts too.
        w_direction: weight of each wrist → tip unit-direction mismatch (dimensionless²).
        w_vector: weight of each thumb → finger vector mismatch, 1/m².
        w_pinch: added to ``w_vector`` on a pair as the human pinches it, 1/m²: pinches win over
            directions and priors.
        w_prior_finger: pull of each finger opening towards the joint map (``to_inspire``): keeps curl.
        w_prior_thumb: the same for the two thumb channels (weaker: the thumb is what the task space
            fixes).
        w_previous: pull towards ``q0`` when given (smoothness over a sequence); 0 = start only.
        pinch_near: normalised human thumb–finger distance (÷ middle-finger length) at and below
            which the target is contact.
        pinch_far: the same above which the target is the human's scaled vector.
        pad_radius: radius of a fingertip pad sphere, metres; contact = pad centres ``2·pad_radius``
            apart.
        scale: robot / human length ratio for the thumb → finger vectors; ``0`` = the ratio of the
            two middle fingers' lengths (robot straight, human bones).
        damping: initial Levenberg–Marquardt damping (relative to the normal matrix's diagonal).
        open_anchor: map the human's open-hand thumb → finger distances onto the robot's open-hand
            ones (an open human hand then asks for the open robot thumb) instead of scaling them
            (static; off by default: on the shared recording it lowered the thumb–index distance
            correlation from 0.87 to 0.80).
    """

    iterations: int = dataclasses.field(default=4, metadata=dict(static=True))
    thumb_starts: tuple[tuple[float, float], ...] = dataclasses.field(default=((0.5, 0.1),),
                                                                     metadata=dict(static=True))
    w_direction: float = 0.1
    w_vector: float = 20.0
    w_pinch: float = 4000.0
    w_prior_finger: float = 2.0
    w_prior_thumb: float = 0.4
    w_previous: float = 0.0
    pinch_near: float = 0.25
    pinch_far: float = 0.5
    pad_radius: float = 0.004
    scale: float = 0.0
    open_anchor: bool = dataclasses.field(default=False, metadata=dict(static=True))
    damping: float = 1e-3


jax.tree_util.register_dataclass(RetargetConfig)


def pad_points(hand: InspireHand, radius) -> tuple[tuple[int, ...], jax.Array]:
    """The fingertip pad-sphere centres: ``(carriers (5,), offsets (5, 3))``, each centre a point of
    link ``carriers[k]`` (the link of the last revolute joint before tip ``k``), at the tip frame's
    origin moved ``radius`` back towards that joint."""
    m = hand.model
    carriers, rows = [], []
    for chain in hand.chains:
        off = jnp.zeros((3,), m.origin_xyz.dtype)
        for i in reversed(chain):  # the fixed joints between the carrying link and the tip
            if m.kinds[i] != FIXED:
                carriers.append(i)
                break
            off = m.origin_rot[i] @ off + m.origin_xyz[i]
        rows.append(off * (1 - radius * jax.lax.rsqrt(jnp.maximum(off @ off, 1e-20))))
    return tuple(carriers), jnp.stack(rows)


def human_targets(kp: jax.Array, left: bool = False):
    """The human's side of the cost from keypoints ``kp (3, 21, *rest)`` (components first).

    Returns:
        ``(dirs (3, 5, *rest), thumb_dirs (3, 4, *rest), dist (4, *rest), length (*rest))``: wrist →
        tip unit directions and thumb → finger unit directions in the palm frame, the thumb → finger
        distances (metres) and the middle finger's length (metres).
    """
    wrist = kp[:, 0]
    R = palm_frame(wrist, kp[:, np.asarray(HUMAN_KNUCKLES)])
    # a mirrored hand (``left``, a bool or a traced one): its palmar axis comes out of the cross product reversed
    flip = jnp.where(jnp.asarray(left), -1.0, 1.0).astype(R.dtype)
    R = R * jnp.stack([jnp.ones_like(flip), flip, jnp.ones_like(flip)]).reshape((3, 1) + (1,) * (R.ndim - 2))
    tips = kp[:, np.asarray(HUMAN_TIPS)] - wrist[:, None]
    tips = geo.matvec(R[:, :, None], tips)  # (3, 5, *rest) in the palm frame
    between = tips[:, 1:] - tips[:, :1]
    dist = jnp.sqrt(jnp.maximum(geo.dot(between, between), 1e-20))
    bones = kp[:, np.asarray(_MIDDLE[1:])] - kp[:, np.asarray(_MIDDLE[:-1])]
    length = jnp.sqrt(jnp.maximum(geo.dot(bones, bones), 1e-20)).sum(0)
    return geo.unit(tips), between / dist[None], dist, length


def _robot_constants(hand: InspireHand, dtype):
    """Robot palm frame ``(3, 3)``, wrist ``(3,)`` and straight middle-finger length (all constants
    of the model: the knuckles do not move)."""
    q0 = openings_to_angles(hand, jnp.ones((6,), dtype))
    pts = chain_points(hand, q0, hand.base_links + (hand.tip_links[2],))  # (3, 6)
    wrist = jnp.zeros((3,), dtype)
    R = palm_frame(wrist, pts[:, np.asarray([1, 2, 4])])
    length = jnp.linalg.norm(pts[:, 5] - pts[:, 2])
    return R, wrist, length


def _smoothstep(x):
    x = jnp.clip(x, 0.0, 1.0)
    return x * x * (3 - 2 * x)


# The five pads in the kernel's order: the thumb, then the fingers in motor order (little, ring,
# middle, fore), so that pad 1 + m is moved by finger motor m.
_PADS = (0, 4, 3, 2, 1)
_FINGER_ORDER = np.asarray(_PADS[1:]) - 1  # human thumb → finger pairs (index … pinky) in motor order
_BEND, _ROT = 4, 5


def _pad_table(hand: InspireHand, carriers, offsets, frame):
    """The five pad centres' :func:`~.inspire_hand.point_stages` programs stacked into arrays, so the
    kernel moves all five at once (shorter chains padded with identity stages at the root end).

    Each stage's joint angle is ``g0·q_a + g1·q_b + off`` of the pad's two motor angles (``a`` its
    finger motor or the thumb bend, ``b`` the thumb rotation; ``g1 = 0`` on the fingers).

    Returns:
        ``(p0 (3, 5), A (S, 3, 3, 5), b (S, 3, 5), g0 (S, 5), g1 (S, 5), off (S, 5))``.
    """
    m = hand.model
    dtype = m.origin_xyz.dtype
    motor_of = {j: k for k, j in enumerate(hand.motor_q)}
    progs = [point_stages(hand, carriers[k], offsets[k], frame) for k in _PADS]
    depth = max(len(st) for _, st in progs)
    zero, eye = jnp.zeros((), dtype), jnp.eye(3, dtype=dtype)
    cols = []
    for pad, (p0, stages) in enumerate(progs):
        slot_a = _BEND if pad == 0 else pad - 1
        rows = []
        for i, A, b in stages:
            if m.kinds[i] == ACTIVE:
                src, gain, off = m.q_index[i], jnp.ones((), dtype), zero
            else:  # a <mimic>: one leader, linear (load_inspire_hand refuses anything else)
                row = m.mimic_index[i]
                src, gain, off = m.mimic_sources[row][0], m.coupling[row, 0], m.coupling_offset[row]
            motor = motor_of[src]
            if motor not in (slot_a, _ROT):
                raise ValueError(f"{TIP_NAMES[_PADS[pad]]}: joint {i} follows motor {motor}, not the pad's own")
            rows.append((A, b, gain if motor == slot_a else zero, gain if motor == _ROT else zero, off))
        rows += [(eye, jnp.zeros((3,), dtype), zero, zero, zero)] * (depth - len(rows))
        cols.append((p0, rows))
    p0 = jnp.stack([c[0] for c in cols], 1)
    field = lambda f: jnp.stack([jnp.stack([c[1][s][f] for c in cols], -1) for s in range(depth)])  # noqa: E731
    return p0, field(0), field(1), field(2), field(3), field(4)


def _pads(table, qa, qb, slope_a, slope_b):
    """Pad centres ``(3, 5, *rest)`` and their derivatives along the openings of motor ``a`` and
    ``b`` (each ``(3, 5, *rest)``), from the pads' motor angles ``qa (5, *rest)``, ``qb (1, *rest)``
    and ``dq/do`` ``slope_a (5, 1, ...)``, ``slope_b`` (scalar)."""
    p0, As, bs, g0, g1, off = table
    rest = qa.ndim - 1
    ex = lambda v: v.reshape(v.shape + (1,) * rest)  # noqa: E731
    x = jnp.broadcast_to(ex(p0), (3,) + qa.shape)
    da = db = None
    for k in range(As.shape[0]):
        theta = ex(g0[k]) * qa + ex(g1[k]) * qb + ex(off[k])
        s, c = geo.sincos(theta)
        turn = lambda v: (c * v[0] - s * v[1], s * v[0] + c * v[1], v[2])  # noqa: E731
        xr = turn(x)
        perp = (-xr[1], xr[0], jnp.zeros_like(xr[2]))
        ta, tb = ex(g0[k]) * slope_a, ex(g1[k]) * slope_b
        da_r = [t * pp for t, pp in zip([ta] * 3, perp)] if da is None else [
            r + ta * pp for r, pp in zip(turn(da), perp)]
        db_r = [tb * pp for pp in perp] if db is None else [r + tb * pp for r, pp in zip(turn(db), perp)]
        A, b = ex(As[k]), ex(bs[k])
        x = geo.matvec(A, jnp.stack(xr)) + b
        da, db = geo.matvec(A, jnp.stack(da_r)), geo.matvec(A, jnp.stack(db_r))
    return x, da, db


def _arrow_solve(F, FB, FR, T, gF, gB, gR):
    """Solve the block-arrow system of this problem: each finger motor couples only with the two
    thumb motors, so the fingers are eliminated first and a ``2 × 2`` Schur complement remains.

    Args:
        F, FB, FR: ``(4, *rest)`` finger diagonal and finger–bend, finger–rotation entries.
        T: ``(bend², bend·rotation, rotation²)`` entries, each ``(*rest)``.
        gF ``(4, *rest)``, gB, gR ``(*rest)``: right-hand side.

    Returns:
        ``(6, *rest)`` in motor order.
    """
    inv = 1 / F
    saa = T[0] - (FB * FB * inv).sum(0)
    sab = T[1] - (FB * FR * inv).sum(0)
    sbb = T[2] - (FR * FR * inv).sum(0)
    ra = gB - (FB * gF * inv).sum(0)
    rb = gR - (FR * gF * inv).sum(0)
    det = saa * sbb - sab * sab
    da = (sbb * ra - sab * rb) / det
    db = (saa * rb - sab * ra) / det
    return jnp.concatenate([(gF - FB * da - FR * db) * inv, da[None], db[None]])


def retarget_rows(hand: InspireHand, kp: jax.Array, prior: jax.Array, config: RetargetConfig,
                  previous: jax.Array | None = None, left: bool = False, kp_open: jax.Array | None = None
                  ) -> jax.Array:
    """The retargeting kernel, components first: ``kp (3, 21, B)`` human keypoints (metres, wrist
    frame of the human model), ``prior (6, B)`` joint-map openings, ``previous (6, B)`` or ``None``,
    ``kp_open (3, 21)`` the human model's open flat hand or ``None`` → ``(6, B)`` openings in
    ``[0, 1]``, motor order. Pure JAX; see the module docstring.

    With ``kp_open`` the thumb → finger target lengths above the pinch map the human's open-hand
    distances onto the robot's open-hand distances (linearly from contact at ``pinch_near``), so
    that an open human hand asks for the open robot hand; without it they are the human's scaled."""
    dtype = kp.dtype
    cfg = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), config)
    hand = hand.astype(dtype)
    B = kp.shape[-1]
    dirs, e_thumb, dist, length = human_targets(kp, left)
    Rr, wrist_r, length_r = _robot_constants(hand, dtype)
    scale = jnp.where(cfg.scale > 0, cfg.scale, length_r / length)  # (B,)
    contact = 2 * cfg.pad_radius
    g = _smoothstep((dist / length[None] - cfg.pinch_near) / jnp.maximum(cfg.pinch_far - cfg.pinch_near, 1e-6))
    carriers, offsets = pad_points(hand, cfg.pad_radius)
    if kp_open is None:
        far = scale[None] * dist
    else:  # contact at pinch_near, the robot's open gap at the human's open gap, linear between
        _, _, d_open, l_open = human_targets(kp_open[..., None], left)
        pads = chain_points(hand, openings_to_angles_T(hand, jnp.ones((6, 1), dtype)), carriers, offsets)
        r_open = jnp.sqrt(geo.dot(pads[:, 1:] - pads[:, :1], pads[:, 1:] - pads[:, :1]))  # (4, 1)
        n_open = d_open / l_open[None]
        t = (dist / length[None] - cfg.pinch_near) / jnp.maximum(n_open - cfg.pinch_near, 1e-3)
        far = contact + t * (r_open - contact)
    target_len = (1 - g) * contact + g * jnp.maximum(far, contact)  # (4, B)

    # the human's side in the kernel's pad order
    dirs = dirs[:, np.asarray(_PADS)][:, :, None]  # (3, 5, 1, B)
    target = (e_thumb * target_len[None])[:, _FINGER_ORDER, None]  # (3, 4, 1, B)
    w2 = (cfg.w_vector + cfg.w_pinch * (1 - g))[_FINGER_ORDER, None]  # (4, 1, B): pair weights
    w_dir = jnp.sqrt(cfg.w_direction)

    # starts (6, S, B): fingers from the prior; thumbs from the prior, q0 and the fixed starts
    starts = [prior]
    if previous is not None:
        starts.append(previous)
    for bend, rot in config.thumb_starts:
        starts.append(prior.at[4].set(jnp.full((B,), bend, dtype)).at[5].set(jnp.full((B,), rot, dtype)))
    o0 = jnp.clip(jnp.stack(starts, 1), 0.0, 1.0)
    w_prior = jnp.stack([cfg.w_prior_finger] * 4 + [cfg.w_prior_thumb] * 2).reshape(6, 1, 1)
    anchors = [(prior[:, None], w_prior)]
    if previous is not None:
        anchors.append((previous[:, None], jnp.broadcast_to(cfg.w_previous, (6, 1, 1))))

    table = _pad_table(hand, carriers, offsets, (Rr, wrist_r))
    lo, hi = hand.lower.reshape(6, 1, 1), hand.upper.reshape(6, 1, 1)
    slope = lo - hi  # dq/do per motor
    slope_a = jnp.concatenate([slope[_BEND:_BEND + 1], slope[:4]])  # (5, 1, 1): each pad's own motor

    def linearise(o):
        """Normal equations at ``o (6, S, B)``: ``((F, FB, FR, T), (gF, gB, gR), cost)``."""
        q = hi + o * slope
        qa = jnp.concatenate([q[_BEND:_BEND + 1], q[:4]])
        x, da, db = _pads(table, qa, q[_ROT:], slope_a, slope[_ROT])
        # wrist → pad directions, all five pads
        inv = jax.lax.rsqrt(jnp.maximum(geo.dot(x, x), 1e-20))[None]
        u = x * inv
        r_dir = w_dir * (u - dirs)
        ja = w_dir * (da - u * geo.dot(u, da)[None]) * inv
        jb = w_dir * (db[:, 0] - u[:, 0] * geo.dot(u[:, 0], db[:, 0])[None]) * inv[:, 0]  # thumb only
        # thumb → finger vectors (weighted by w_pair; its square is folded into the products)
        v = x[:, 1:] - x[:, :1] - target  # (3, 4, S, B)
        df, dbend, drot = da[:, 1:], da[:, :1], db[:, :1]
        F = geo.dot(ja[:, 1:], ja[:, 1:]) + w2 * geo.dot(df, df)
        FB = -w2 * geo.dot(df, dbend)
        FR = -w2 * geo.dot(df, drot)
        T = (geo.dot(ja[:, 0], ja[:, 0]) + (w2 * geo.dot(dbend, dbend)).sum(0),
             geo.dot(ja[:, 0], jb) + (w2 * geo.dot(dbend, drot)).sum(0),
             geo.dot(jb, jb) + (w2 * geo.dot(drot, drot)).sum(0))
        gF = geo.dot(ja[:, 1:], r_dir[:, 1:]) + w2 * geo.dot(df, v)
        gB = geo.dot(ja[:, 0], r_dir[:, 0]) - (w2 * geo.dot(dbend, v)).sum(0)
        gR = geo.dot(jb, r_dir[:, 0]) - (w2 * geo.dot(drot, v)).sum(0)
        cost = geo.dot(r_dir, r_dir).sum(0) + (w2 * geo.dot(v, v)).sum(0)
        for target_o, w in anchors:  # the priors: diagonal
            d = o - target_o
            cost = cost + (w * d * d).sum(0)
            F = F + w[:4]
            T = (T[0] + w[4], T[1], T[2] + w[5])
            gF, gB, gR = gF + w[:4] * d[:4], gB + w[4] * d[4], gR + w[5] * d[5]
        return (F, FB, FR, T), (gF, gB, gR), cost

    def step(_, state):
        # linearise at the trial point; keep it if it lowered the cost, then step from the best point
        o, normal, grad, cost, lam, o_try = state
        normal_try, grad_try, cost_try = linearise(o_try)
        better = cost_try < cost
        pick = lambda a, b: jax.tree_util.tree_map(lambda x, y: jnp.where(better, x, y), a, b)  # noqa: E731
        o, normal, grad, cost = pick((o_try, normal_try, grad_try, cost_try), (o, normal, grad, cost))
        lam = jnp.where(better, lam * 0.3, lam * 4.0)
        F, FB, FR, T = normal
        gF, gB, gR = grad
        damp = 1 + lam
        # projected Newton: a motor at a bound whose gradient pushes it out stays there (its row and
        # column leave the system), so the clipping does not spoil the step of the others
        g6 = jnp.concatenate([gF, gB[None], gR[None]])
        held = ((o <= 0) & (g6 > 0)) | ((o >= 1) & (g6 < 0))
        free = 1 - held.astype(o.dtype)
        fF, fb, fr = free[:4], free[4], free[5]
        F, FB, FR = F * fF + (1 - fF), FB * fF * fb, FR * fF * fr
        T = (T[0] * fb + (1 - fb), T[1] * fb * fr, T[2] * fr + (1 - fr))
        gF, gB, gR = gF * fF, gB * fb, gR * fr
        delta = _arrow_solve(F * damp + 1e-9, FB, FR, (T[0] * damp + 1e-9, T[1], T[2] * damp + 1e-9), gF, gB, gR)
        return o, normal, grad, cost, lam, jnp.clip(o - delta, 0.0, 1.0)

    # the first iteration linearises at the starts (infinite cost before: always kept)
    zeros = jnp.zeros(o0.shape[1:], dtype)
    z4 = jnp.zeros((4,) + zeros.shape, dtype)
    state = (o0, (z4, z4, z4, (zeros,) * 3), (z4, zeros, zeros), jnp.full(zeros.shape, jnp.inf, dtype),
             jnp.full(zeros.shape, cfg.damping / 0.3, dtype), o0)
    o, _, _, cost, _, _ = jax.lax.fori_loop(0, config.iterations + 1, step, state)
    best = jnp.argmin(cost, 0)  # (B,)
    return jnp.take_along_axis(o, best[None, None], 1)[:, 0]


def openings_to_angles_T(hand: InspireHand, o: jax.Array) -> jax.Array:
    """:func:`~.inspire_hand.openings_to_angles`, components first: ``(6, *rest)`` motor order →
    ``(6, *rest)`` in ``hand.model.joint_names`` order."""
    rest = (1,) * (o.ndim - 1)
    lo, hi = hand.lower.reshape((6,) + rest), hand.upper.reshape((6,) + rest)
    q = (1 - o) * hi + o * lo
    return q[np.argsort(np.asarray(hand.motor_q))]
