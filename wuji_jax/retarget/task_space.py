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

Solver: projected Levenberg–Marquardt on the six openings (Jacobian by forward-mode derivatives,
``6 × 6`` normal equations solved per frame), a fixed number of iterations, limits kept by clipping
each step to ``[0, 1]``. The thumb's problem has local minima, so every frame is solved from several
thumb starts (``thumb_starts``, the joint map's thumb, and the previous command when given) at once,
and the start with the lowest final cost wins. Everything is elementwise over the frames (the minor
axis), so it batches, jits, vmaps and differentiates (through the unrolled iterations).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..hand import geometry as geo
from ..hand.model import FIXED
from .inspire_hand import InspireHand, chain_points, openings_to_angles, palm_frame, point_stages, stage_point

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

    iterations: int = dataclasses.field(default=6, metadata=dict(static=True))
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
    if left:  # a mirrored hand: its palmar axis comes out of the cross product reversed
        R = R * jnp.asarray([1, -1, 1], R.dtype).reshape((3, 1) + (1,) * (R.ndim - 2))
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


# motor index of each fingertip's finger (thumb, index, middle, ring, pinky): fingers drive one motor
# each (little 0, ring 1, middle 2, fore 3); the thumb two (bend 4, rotation 5)
_TIP_MOTORS = ((4, 5), (3,), (2,), (1,), (0,))
_FINGERS, _THUMB = (0, 1, 2, 3), (4, 5)


def _arrow_solve(A, g):
    """``A⁻¹ g`` for the block-arrow normal matrix of this problem: each finger couples only with the
    two thumb channels, so the fingers are eliminated first (a ``2 × 2`` Schur complement remains).

    Args:
        A: ``{(i, j): (*rest)}`` entries, ``i <= j``, of a symmetric positive definite ``6 × 6`` matrix
            whose finger–finger entries off the diagonal are zero.
        g: ``[6 × (*rest)]``.

    Returns:
        ``[6 × (*rest)]``.
    """
    a, b = _THUMB
    saa, sab, sbb = A[a, a], A[a, b], A[b, b]
    ra, rb = g[a], g[b]
    for f in _FINGERS:
        inv = 1 / A[f, f]
        saa = saa - A[f, a] * A[f, a] * inv
        sab = sab - A[f, a] * A[f, b] * inv
        sbb = sbb - A[f, b] * A[f, b] * inv
        ra = ra - A[f, a] * g[f] * inv
        rb = rb - A[f, b] * g[f] * inv
    det = saa * sbb - sab * sab
    da = (sbb * ra - sab * rb) / det
    db = (saa * rb - sab * ra) / det
    out = [(g[f] - A[f, a] * da - A[f, b] * db) / A[f, f] for f in _FINGERS]
    return out + [da, db]


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
    target = (e_thumb * target_len[None])[:, :, None]  # (3, 4, 1, B)
    w_pair = jnp.sqrt(cfg.w_vector + cfg.w_pinch * (1 - g))[:, None]  # (4, 1, B)
    dirs = dirs[:, :, None]  # (3, 5, 1, B)
    w_dir = jnp.sqrt(cfg.w_direction)
    w_prior = [cfg.w_prior_finger] * 4 + [cfg.w_prior_thumb] * 2

    # starts (6, S, B): fingers from the prior; thumbs from the prior, q0 and the fixed starts
    starts = [prior]
    if previous is not None:
        starts.append(previous)
    for bend, rot in config.thumb_starts:
        starts.append(prior.at[4].set(jnp.full((B,), bend, dtype)).at[5].set(jnp.full((B,), rot, dtype)))
    o0 = jnp.clip(jnp.stack(starts, 1), 0.0, 1.0)
    anchor = [(prior[:, None], w_prior)]
    if previous is not None:
        anchor.append((previous[:, None], [cfg.w_previous] * 6))

    # each pad centre as a program of joint rotations, in the palm frame (constants folded once)
    frame = (Rr, wrist_r)
    programs = [point_stages(hand, carriers[k], offsets[k], frame) for k in range(5)]
    joint_of = [hand.motor_q[m] for m in range(6)]  # motor → active joint (joint-name order)
    slope = hand.lower - hand.upper  # dq/do per motor

    def tip(k, o, motors):  # tip k's pad centre and its derivatives along its own motors (the others do not move it)
        qT = openings_to_angles_T(hand, o)
        p, d = stage_point(hand, programs[k], qT, tuple(joint_of[m] for m in motors))
        return p, {m: slope[m] * d[joint_of[m]] for m in motors}

    def linearise(o):
        """Normal equations at ``o``: ``({(i, j): A_ij}, [g_i], cost)``, each ``(S, B)``."""
        pts, cols = [], []
        for k, motors in enumerate(_TIP_MOTORS):
            p, ds = tip(k, o, motors)
            pts.append(p)
            cols.append(ds)
        blocks = []  # (residual (3, S, B), {motor: column (3, S, B)})
        for k in range(5):
            p = pts[k]
            inv = jax.lax.rsqrt(jnp.maximum(geo.dot(p, p), 1e-20))[None]
            u = p * inv
            jac = {m: w_dir * (d - u * geo.dot(u, d)[None]) * inv for m, d in cols[k].items()}
            blocks.append((w_dir * (u - dirs[:, k]), jac))
        for f in range(4):
            w = w_pair[f]
            jac = {m: -w * d for m, d in cols[0].items()}
            jac.update({m: w * d for m, d in cols[f + 1].items()})
            blocks.append((w * ((pts[f + 1] - pts[0]) - target[:, f]), jac))
        A, grad, cost = {}, [0.0] * 6, 0.0
        for r, jac in blocks:
            cost = cost + geo.dot(r, r)
            ms = sorted(jac)
            for x, i in enumerate(ms):
                grad[i] = grad[i] + geo.dot(jac[i], r)
                for j in ms[x:]:
                    A[i, j] = A.get((i, j), 0.0) + geo.dot(jac[i], jac[j])
        for target_o, weights in anchor:
            for i in range(6):
                d = o[i] - target_o[i]
                cost = cost + weights[i] * d * d
                grad[i] = grad[i] + weights[i] * d
                A[i, i] = A[i, i] + weights[i]
        return A, grad, cost

    def step(_, state):
        # linearise at the trial point; keep it if it lowered the cost, then step from the best point
        o, A, grad, cost, lam, o_try = state
        A_try, grad_try, cost_try = linearise(o_try)
        better = cost_try < cost
        pick = lambda a, b: jax.tree_util.tree_map(lambda x, y: jnp.where(better, x, y), a, b)  # noqa: E731
        o, A, grad, cost = pick((o_try, A_try, grad_try, cost_try), (o, A, grad, cost))
        lam = jnp.where(better, lam * 0.3, lam * 4.0)
        damped = dict(A)
        for i in range(6):
            damped[i, i] = A[i, i] * (1 + lam) + 1e-9
        full = {**damped, **{(j, i): v for (i, j), v in damped.items()}}
        o_try = jnp.clip(o - jnp.stack(_arrow_solve(full, grad)), 0.0, 1.0)
        return o, A, grad, cost, lam, o_try

    # the first iteration linearises at the starts (infinite cost before: always kept)
    zeros = jnp.zeros(o0.shape[1:], dtype)
    A0 = {(i, j): zeros for i in range(6) for j in range(i, 6)
          if i == j or (i in _THUMB or j in _THUMB)}
    state = (o0, A0, [zeros] * 6, jnp.full(zeros.shape, jnp.inf, dtype), jnp.full(zeros.shape, cfg.damping / 0.3, dtype), o0)
    o, _, _, cost, _, o_try = jax.lax.fori_loop(0, config.iterations + 1, step, state)
    best = jnp.argmin(cost, 0)  # (B,)
    return jnp.take_along_axis(o, best[None, None], 1)[:, 0]


def openings_to_angles_T(hand: InspireHand, o: jax.Array) -> jax.Array:
    """:func:`~.inspire_hand.openings_to_angles`, components first: ``(6, *rest)`` motor order →
    ``(6, *rest)`` in ``hand.model.joint_names`` order."""
    rest = (1,) * (o.ndim - 1)
    lo, hi = hand.lower.reshape((6,) + rest), hand.upper.reshape((6,) + rest)
    q = (1 - o) * hi + o * lo
    return q[np.argsort(np.asarray(hand.motor_q))]
