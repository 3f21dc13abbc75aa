"""Landmark-fitting IK: 21 MediaPipe landmarks → 20 joint angles, wrist pose and hand scale.

Model of an observation (frame of the input, metres)::

    y_k ≈ s · R · m_k(q) + t,        k = 0..20

with ``m_k(q)`` the model keypoints in the wrist frame (:func:`wuji_jax.forward_keypoints`), ``R, t``
the wrist pose and ``s`` the hand scale. The solver

1. initialises ``(s, R, t)`` in closed form from the six palm landmarks (wrist, thumb CMC, four MCPs),
   which do not move with ``q`` (weighted Horn/Umeyama: the rotation is the dominant eigenvector of
   Horn's 4×4 matrix, found by repeated squaring, so it is always a proper rotation);
2. computes the angles in closed form from the bone directions, all fingers at once (Paden–Kahan
   subproblem 2 for the two intersecting MCP/CMC axes, subproblem 1 for each hinge, the coupled thumb
   rotation by a three-round fixed point), and starts from them unless ``q0`` fits better; on
   noise-free data this start is already within 0.05° (p99);
3. runs a fixed number of Levenberg–Marquardt iterations over ``(q, φ, δt, σ)`` with a Huber loss
   (IRLS weights), per-landmark confidences, joint-limit and prior penalties and the thumb coupling
   (hard: the rotation follows the law; soft: free but penalised towards it), accepting a step only
   where it lowers the cost, frame by frame;
4. projects the angles onto the limits.

The Gauss–Newton matrix has an arrow structure: each finger's keypoints depend only on its own joints
and on the wrist pose. The solver forms it from the analytic (geometric) Jacobian and eliminates the
finger blocks by a Schur complement, so each iteration solves five tiny systems and one 7×7, all
unrolled component-wise over the batch (no dense 27×27 factorisation, no autodiff Jacobian).

Everything is a pure JAX function of ``(hand, landmarks, weights, config)``: batched over any leading
axes, jit-compiled, and differentiable by unrolling the fixed iteration budget (reverse mode through
the loop). :func:`landmark_loss` exposes the same objective for optax (:func:`solve_optax`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .devices import split_over_devices
from .kinematics import _check_q, _coupled_rows
from .landmarks import check_landmarks, detect_side
from .model import _ACTIVE, _MIMIC, HandModel

__all__ = [
    "SolverConfig",
    "IKResult",
    "solve",
    "solve_optax",
    "landmark_loss",
    "pose_from_palm",
    "FLAG_TOO_FEW_LANDMARKS",
    "FLAG_BAD_SCALE",
    "FLAG_HIGH_RESIDUAL",
    "FLAG_MIRRORED",
]

FLAG_TOO_FEW_LANDMARKS = 1  #: fewer than ``config.min_landmarks`` usable landmarks, or < 3 palm points
FLAG_BAD_SCALE = 2  #: estimated hand scale outside [0.3, 3] × the model (units? wrong data?)
FLAG_HIGH_RESIDUAL = 4  #: RMS residual above ``config.flag_residual``
FLAG_MIRRORED = 8  #: the palm's chirality is that of the other hand


@dataclasses.dataclass(frozen=True)
class SolverConfig:
    """Settings of :func:`solve`. Counts and modes are static (part of the jit key); weights are traced.

    Attributes:
        iterations: LM iterations after the closed-form start (fixed budget; static). On noise-free
            data the start alone is within 0.05° (p99) and 2 iterations reach p99 < 0.005°; on
            dex-retargeting's real recording the median keypoint error is 4.98 / 4.55 / 4.45 / 4.32 mm
            after 2 / 3 / 5 / 20 (``benchmarks/bench_ik.py``); 3 run at about 146,000 frames/s on 2 CPU
            cores at batch 1024, 5 at 102,000.
        coupling: ``"hard"`` (thumb rotation = the law) or ``"soft"`` (free, penalised towards it).
        estimate_scale: fit the hand scale ``s`` (else ``s = 1``).
        huber_delta: metres; landmark errors beyond it count linearly (robust to outliers). 5 mm: on
            dex-retargeting's real recording the median keypoint error is 4.33 mm (5.14 mm with
            20 mm); on synthetic data with 3 mm Gaussian noise the median joint error is 3.82° (3.75°).
        limit_weight: penalty per rad² of limit violation, relative to (1 cm)² of landmark error.
        prior_weight: pull towards the initial angles per rad², relative to (1 cm)²; keeps joints of
            masked fingers defined.
        coupling_weight: soft-coupling penalty per rad² of deviation from the law.
        damping: initial LM damping λ (relative to the diagonal). 1e-2: after 3 iterations the real
            recording's median keypoint error is 4.55 mm (5.44 mm with 1e-3).
        min_landmarks: frames with fewer usable landmarks are flagged and return the neutral pose.
        flag_residual: metres; frames with a larger RMS residual get :data:`FLAG_HIGH_RESIDUAL`.
    """

    iterations: int = 3
    coupling: str = "hard"
    estimate_scale: bool = True
    huber_delta: float = 0.005
    limit_weight: float = 100.0
    prior_weight: float = 1e-4
    coupling_weight: float = 10.0
    damping: float = 1e-2
    min_landmarks: int = 8
    flag_residual: float = 0.02

    def __post_init__(self):
        if self.coupling not in ("hard", "soft"):
            raise ValueError(f"coupling must be 'hard' or 'soft', got {self.coupling!r}")
        if int(self.iterations) < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")

    def _static(self):
        return (int(self.iterations), self.coupling, bool(self.estimate_scale), int(self.min_landmarks))

    def _traced(self):
        return dict(
            huber_delta=self.huber_delta, limit_weight=self.limit_weight, prior_weight=self.prior_weight,
            coupling_weight=self.coupling_weight, damping=self.damping, flag_residual=self.flag_residual,
        )


class IKResult(NamedTuple):
    """Output of :func:`solve` (a pytree; every field has the input's leading batch shape).

    Attributes:
        angles: ``(*batch, 20)`` joint angles, radians, within limits (seed ID order).
        coupled: ``(*batch, M)`` coupled joint angles (``thumb_cmc_rot``), radians.
        rotation: ``(*batch, 3, 3)`` wrist rotation, model wrist frame → input frame.
        translation: ``(*batch, 3)`` wrist position in the input frame, metres.
        scale: ``(*batch,)`` hand size relative to the model (1 = WG110v12 default).
        keypoints: ``(*batch, 21, 3)`` fitted model keypoints in the input frame, metres.
        residual: ``(*batch,)`` RMS distance between fitted and usable landmarks, metres.
        errors: ``(*batch, 21)`` per-landmark distance, metres (0 where a landmark was masked).
        valid: ``(*batch,)`` bool, frame had enough usable landmarks.
        converged: ``(*batch,)`` bool, last step changed the cost by < 1e-9 relative.
        iterations: ``(*batch,)`` accepted LM steps.
        flags: ``(*batch,)`` int32 bit set of ``FLAG_*``.
    """

    angles: jax.Array
    coupled: jax.Array
    rotation: jax.Array
    translation: jax.Array
    scale: jax.Array
    keypoints: jax.Array
    residual: jax.Array
    errors: jax.Array
    valid: jax.Array
    converged: jax.Array
    iterations: jax.Array
    flags: jax.Array


# ------------------------------------------------------------------------------ structure (static)

_REF = 0.01  # residuals are measured in units of 1 cm inside the solver


def _ancestors(hand: HandModel, link: int) -> list[int]:
    out = []
    while link > 0:
        out.append(link)
        link = hand.parents[link]
    return out[::-1]


@dataclasses.dataclass(frozen=True)
class _Chains:
    """The model as G padded serial chains (one per finger) of depth D, K keypoints, V variables.

    Index arrays are numpy (static). Link index ``L`` (one past the last) is a padding link: no
    offset, identity rotation, zero axis. Angle/variable index ``n + M`` is a constant zero.
    """

    G: int
    D: int
    K: int
    V: int
    link: np.ndarray  # (G, D) link index or L (pad)
    angle: np.ndarray  # (G, D) index into [q (n), coupled (M), 0]
    kp_depth: np.ndarray  # (G, K) depth whose link origin is the keypoint
    kp_id: np.ndarray  # (G, K) keypoint index 0..20, or -1 (pad)
    var: np.ndarray  # (G, V) index into [q (n), coupled (M)] or n + M (pad)
    var_pos: np.ndarray  # (n + M, 2) (g, v) of each variable
    root_kps: tuple  # keypoints on the root link (the wrist)
    palm_kps: tuple  # keypoints with no joint before them (palm)
    bones: tuple  # ((i_a, i_b, joint depths), ...) bones solvable in closed form in every lane at once
    var_depth: np.ndarray  # (G, V) depth of each variable's joint, or -1
    mimic_pos: tuple  # ((g, d), ...) of each coupled joint
    has_joint: np.ndarray  # (D,) some chain has a joint (active or coupled) at this depth


def _align(paths, kp_links, kinds, L):
    """Pad the chains to a common depth with identity links (index ``L``) so that, where possible,
    every chain has its keypoints at the same depths and its joint kinds in the same places (then one
    array op serves all fingers). Returns the padded link sequences and whether keypoints line up."""
    D = max(len(p) for p in paths)
    ref = max(range(len(paths)), key=lambda g: len(paths[g]))
    ref_depth = [paths[ref].index(l) for l in kp_links[ref]]
    kind = lambda l: kinds[l] if l < L else -1  # noqa: E731
    out, uniform = [], True
    for path, kl in zip(paths, kp_links):
        best = None
        for pads in itertools.combinations(range(D), D - len(path)):
            it = iter(path)
            seq = [L if d in pads else next(it) for d in range(D)]
            score = ([seq.index(l) for l in kl] == ref_depth,
                     sum(kind(a) == kind(b) for a, b in zip(seq, paths[ref])))
            if best is None or score > best[0]:
                best = (score, seq)
        uniform &= best[0][0]
        out.append(best[1])
    return out, uniform


@functools.lru_cache(maxsize=64)
def _chains_cached(parents, kinds, q_index, mimic_index, mimic_sources, keypoint_links, n, soft):
    L = len(parents)
    M = len(mimic_sources)

    def anc(link):
        out = []
        while link > 0:
            out.append(link)
            link = parents[link]
        return out[::-1]

    def joints_of(links):
        js = set()
        for l in links:
            if kinds[l] == _ACTIVE:
                js.add(q_index[l])
            elif kinds[l] == _MIMIC:
                js.update(mimic_sources[mimic_index[l]])
        return js

    # group keypoints by the first link below the root on their path (the finger's metacarpal)
    groups: dict[int, list[int]] = {}
    root_kps = []
    for k, l in enumerate(keypoint_links):
        path = anc(l)
        if not path:
            root_kps.append(k)
        else:
            groups.setdefault(path[0], []).append(k)
    glist = list(groups.values())
    G = len(glist)
    paths, kds = [], []
    for kps in glist:
        deepest = max(kps, key=lambda k: len(anc(keypoint_links[k])))
        path = anc(keypoint_links[deepest])
        for k in kps:
            if keypoint_links[k] not in path:
                raise ValueError(
                    "the solver needs each finger's keypoints on one serial chain; keypoint "
                    f"{k} branches off")
        paths.append(path)
    kp_links = [[keypoint_links[k] for k in kps] for kps in glist]
    seqs, uniform = _align(paths, kp_links, kinds, L)
    D = len(seqs[0])
    K = max(len(k) for k in glist)
    uniform &= all(len(k) == K for k in glist)
    link = np.full((G, D), L)
    angle = np.full((G, D), n + M)
    kp_depth = np.zeros((G, K), int)
    kp_id = np.full((G, K), -1)
    gvars = []
    for g, (kps, path) in enumerate(zip(glist, paths)):
        for d, l in enumerate(seqs[g]):
            link[g, d] = l
            if l < L and kinds[l] == _ACTIVE:
                angle[g, d] = q_index[l]
            elif l < L and kinds[l] == _MIMIC:
                angle[g, d] = n + mimic_index[l]
        for i, k in enumerate(kps):
            kp_depth[g, i] = seqs[g].index(keypoint_links[k])
            kp_id[g, i] = k
        vs = sorted(joints_of(path))
        if soft:
            vs += [n + mimic_index[l] for l in path if kinds[l] == _MIMIC]
        gvars.append(vs)
    seen = [v for vs in gvars for v in vs]
    if len(seen) != len(set(seen)):
        raise ValueError("the solver needs fingers that share no joint")
    V = max(len(v) for v in gvars)
    var = np.full((G, V), n + M)
    var_pos = np.zeros((n + M, 2), int)
    for g, vs in enumerate(gvars):
        for v, j in enumerate(vs):
            var[g, v] = j
            var_pos[j] = (g, v)
    palm = tuple(sorted(root_kps + [int(kp_id[g, i]) for g in range(G) for i in range(K)
                                    if kp_id[g, i] >= 0 and not (angle[g, : kp_depth[g, i]] < n + M).any()]))
    # bones for the closed-form start: consecutive keypoints (the same depths in every lane) turned
    # by one joint, or two adjacent ones, at the same depths in every lane
    bones = []
    if uniform:
        kd = kp_depth[0]
        for i in range(K - 1):
            act = [d for d in range(kd[i], kd[i + 1]) if (angle[:, d] < n).any()]
            if (1 <= len(act) <= 2 and all((angle[:, d] < n).all() for d in act)
                    and act[-1] - act[0] == len(act) - 1):
                bones.append((i, i + 1, tuple(act)))
    var_depth = np.array([[list(angle[g]).index(var[g, v]) if var[g, v] < n + M else -1 for v in range(V)]
                          for g in range(G)])
    mimic_pos = tuple(tuple(int(i) for i in np.argwhere(angle == n + m)[0]) for m in range(M))
    return _Chains(G, D, K, V, link, angle, kp_depth, kp_id, var, var_pos, tuple(root_kps), palm, tuple(bones),
                   var_depth, mimic_pos, (angle < n + M).any(0))


def _chains(hand: HandModel, soft: bool) -> _Chains:
    if len(hand.keypoint_links) != 21:
        raise ValueError("the solver needs a model with a 21-keypoint MediaPipe map (e.g. wj.load_hand())")
    c = _chains_cached(hand.parents, hand.kinds, hand.q_index, hand.mimic_index, hand.mimic_sources,
                       hand.keypoint_links, hand.num_joints, soft)
    if len(c.palm_kps) < 3:
        raise ValueError("the solver needs >= 3 keypoints fixed to the root (palm) to initialise the pose")
    return c


# ------------------------------------------------------------------- batch-last array helpers
# Arrays carry the batch as their LAST axis, so every op is a contiguous, vectorised loop over frames.


def _sum(x, axis):
    """Sum over small axes by explicit adds of slices.

    XLA:CPU (jaxlib 0.10) mis-compiled ``jnp.sum`` over a middle axis of a broadcast product at
    batch ≥ ~4096 (a wrong Jacobian; tests/test_solver.py pins the batch-size invariance), and the
    axes summed here have 3–21 entries, so unrolled adds cost nothing.
    """
    axes = sorted((axis,) if isinstance(axis, int) else tuple(axis), reverse=True)
    for ax in axes:
        ax = ax % x.ndim
        parts = [jax.lax.index_in_dim(x, i, ax, keepdims=False) for i in range(x.shape[ax])]
        acc = parts[0]
        for p in parts[1:]:
            acc = acc + p
        x = acc
    return x


def _mm(a, b):
    """(..., i, j, B) @ (..., j, k, B) → (..., i, k, B): a sum of broadcast products of slices, which
    XLA fuses into one loop (a product over all of i, j, k would be materialised first)."""
    return _add([a[..., :, j : j + 1, :] * b[..., j : j + 1, :, :] for j in range(a.shape[-2])])


def _mv(a, v):
    """(..., i, j, B) @ (..., j, B) → (..., i, B)."""
    return _add([a[..., :, j, :] * v[..., j : j + 1, :] for j in range(a.shape[-2])])


def _stored(x):
    """``x``, computed once and written to memory. XLA:CPU fuses cheap producers (adds, compares,
    selects) into every element of each consumer's loop, so a value that many outputs share is
    recomputed per output element: the LM step-acceptance test (two costs, ~100 adds) was evaluated
    once per angle, rotation entry and translation entry of the selected state. A reduction is a
    fusion root, so its result is stored once: one core, batch 2048, 10.6 → 9.5 µs/frame. (A sum
    with zeros, exact; XLA removes an optimisation barrier before fusion, so that does not do it.)"""
    return jnp.sum(jnp.stack([x, jnp.zeros_like(x)]), axis=0).astype(x.dtype)


def _add(xs):
    acc = xs[0]
    for x in xs[1:]:
        acc = acc + x
    return acc


def _cross(a, b, sum_over=()):
    """Cross product over axis −2 of (..., 3, B) arrays; summed over the leading axes ``sum_over``
    before its components are stacked (at batch 1 each stacked product is a kernel of its own)."""
    a0, a1, a2 = a[..., 0, :], a[..., 1, :], a[..., 2, :]
    b0, b1, b2 = b[..., 0, :], b[..., 1, :], b[..., 2, :]
    parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    return jnp.stack([_sum(p, sum_over) if sum_over else p for p in parts], axis=-2)


def _sincos(x):
    """``(sin x, cos x)``. float32: quadrant reduction and Cephes' sinf/cosf polynomials in plain
    vector arithmetic. XLA:CPU's sin and cos cost 3–9 ns per element (three times more at 1.5 rad than
    at 0.3 rad) and keep the fusions around them from vectorising: this made the solver 22.6 → 14.2
    µs/frame on one core at batch 1024. Error ≤ 1e-7 for |x| ≤ π, ≤ 4e-6 for |x| ≤ 100 (float32's own
    spacing there is 8e-6). Other dtypes: ``jnp.sin``/``jnp.cos``."""
    if x.dtype != jnp.float32:
        return jnp.sin(x), jnp.cos(x)
    k = jnp.round(x * np.float32(2 / np.pi))
    r = (x - k * np.float32(1.5707963705062866)) - k * np.float32(-4.371139000186243e-08)
    z = r * r
    s = r + r * z * (np.float32(-1.6666654611e-1) + z * (np.float32(8.3321608736e-3)
                                                       + z * np.float32(-1.9515295891e-4)))
    c = 1.0 - 0.5 * z + z * z * (np.float32(4.166664568298827e-2) + z * (np.float32(-1.388731625493765e-3)
                                                                      + z * np.float32(2.443315711809948e-5)))
    q = jnp.bitwise_and(k.astype(jnp.int32), 3)  # quadrant: x = k·π/2 + r
    sin = jnp.where(q == 0, s, jnp.where(q == 1, c, jnp.where(q == 2, -s, -c)))
    cos = jnp.where(q == 0, c, jnp.where(q == 1, -s, jnp.where(q == 2, -c, s)))
    return sin, cos


def _rot(axis, s, c):
    """Rotation matrices (..., 3, 3, B) about unit axes (..., 3, 1) or (..., 3, B) by angles with sin
    ``s`` and cos ``c`` (..., B)."""
    x, y, z = axis[..., 0, :], axis[..., 1, :], axis[..., 2, :]
    t = 1.0 - c
    rows = [
        [c + x * x * t, x * y * t - z * s, x * z * t + y * s],
        [y * x * t + z * s, c + y * y * t, y * z * t - x * s],
        [z * x * t - y * s, z * y * t + x * s, c + z * z * t],
    ]
    return jnp.stack([jnp.stack(r, axis=-2) for r in rows], axis=-3)


def _so3_exp(phi):
    """Rotation matrices ``(3, 3, B)`` of rotation vectors ``phi (3, B)``; safe and smooth at 0."""
    th2 = _sum(phi * phi, axis=0)
    small = th2 < 1e-8
    th2s = jnp.where(small, 1.0, th2)
    th = jnp.sqrt(th2s)
    a = jnp.where(small, 1.0 - th2 / 6.0, jnp.sin(th) / th)
    b = jnp.where(small, 0.5 - th2 / 24.0, (1.0 - jnp.cos(th)) / th2s)
    x, y, z = phi[0], phi[1], phi[2]
    rows = [
        [1 - b * (y * y + z * z), -a * z + b * x * y, a * y + b * x * z],
        [a * z + b * x * y, 1 - b * (x * x + z * z), -a * x + b * y * z],
        [-a * y + b * x * z, a * x + b * y * z, 1 - b * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(r, 0) for r in rows], 0)


def _chol_rows(A, rhs):
    """Solve ``A X = rhs`` for SPD ``A (..., n, n, B)`` by an unrolled Cholesky factorisation (n is
    small and static), vectorised over ``...`` and ``B``; ``rhs`` and the result are lists over the
    n rows of ``(..., r, B)`` arrays (kept apart: see :class:`_Params` on buffer sizes)."""
    n = A.shape[-3]
    L = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = A[..., i, j, :]
            for k in range(j):
                s = s - L[i][k] * L[j][k]
            if i == j:
                L[i][i] = jnp.sqrt(jnp.maximum(s, 1e-12))
            else:
                L[i][j] = s / L[j][j]
    y = []
    for i in range(n):
        s = rhs[i]
        for k in range(i):
            s = s - L[i][k][..., None, :] * y[k]
        y.append(s / L[i][i][..., None, :])
    x = [None] * n
    for i in reversed(range(n)):
        s = y[i]
        for k in range(i + 1, n):
            s = s - L[k][i][..., None, :] * x[k]
        x[i] = s / L[i][i][..., None, :]
    return x


def _chol_solve(A, rhs):
    """:func:`_chol_rows` with ``rhs (..., n, r, B)`` and the result as arrays."""
    return jnp.stack(_chol_rows(A, [rhs[..., i, :, :] for i in range(A.shape[-3])]), axis=-3)


def _huber(r2, delta):
    """Huber ρ of the distance r (given r²), quadratic part r²/2; and the IRLS weight ρ'(r)/r."""
    r = jnp.sqrt(jnp.maximum(r2, 1e-30))
    quad = r <= delta
    rho = jnp.where(quad, 0.5 * r2, delta * (r - 0.5 * delta))
    w = jnp.where(quad, 1.0, delta / r)
    return rho, w


# ------------------------------------------------------------------------------------------ FK + J


class _Params(NamedTuple):
    """Per-depth link constants of the chains (tuples over depth ``d`` of arrays over the G chains):
    offsets ``xyz (G, 3)``, fixed rotations ``O (G, 3, 3)``, axes ``ax (G, 3)``, ``C1 = O·[a]×`` and
    ``C2 = O·[a]×²`` (so that ``O·Rot(a, θ) = O + sin θ·C1 + (1 − cos θ)·C2``), ``Oa = O·a (G, 3)``;
    and ``rest (21, 3, 1)``: the keypoints at zero angles, in the wrist frame.

    Stored as two small arrays per depth, ``frame (G, 6, 3)`` (rows of O, then xyz, ax, Oa) and
    ``turn (G, 2, 3, 3)`` (C1, C2), rather than ``(G, D, ...)`` arrays: at batch 1 every buffer of
    the kernel then holds at most 512 bytes, and XLA:CPU runs such a kernel's thunks in sequence on
    the calling thread instead of scheduling them as a graph (``ThunkExecutor``'s small-buffer
    rule); few arrays, as each argument of a jitted call costs ~0.4 µs to pass."""

    frame: tuple
    turn: tuple
    rest: jax.Array

    O = property(lambda self: tuple(f[:, :3] for f in self.frame))
    xyz = property(lambda self: tuple(f[:, 3] for f in self.frame))
    ax = property(lambda self: tuple(f[:, 4] for f in self.frame))
    Oa = property(lambda self: tuple(f[:, 5] for f in self.frame))
    C1 = property(lambda self: tuple(t[:, 0] for t in self.turn))
    C2 = property(lambda self: tuple(t[:, 1] for t in self.turn))


def _chain_params(hand: HandModel, ch: _Chains, dtype) -> _Params:
    """:class:`_Params` gathered from the model's leaves (padding link: zero offset and axis, identity)."""
    xyz = jnp.concatenate([hand.origin_xyz, jnp.zeros((1, 3), dtype)])[ch.link]  # (G, D, 3)
    O = jnp.concatenate([hand.origin_rot, jnp.eye(3, dtype=dtype)[None]])[ch.link]  # (G, D, 3, 3)
    ax = jnp.concatenate([hand.axis, jnp.zeros((1, 3), dtype)])[ch.link]  # (G, D, 3)
    x, y, z = ax[..., 0], ax[..., 1], ax[..., 2]
    zero = jnp.zeros_like(x)
    K = jnp.stack([jnp.stack([zero, -z, y], -1), jnp.stack([z, zero, -x], -1), jnp.stack([-y, x, zero], -1)], -2)
    C1 = jnp.einsum("gdij,gdjk->gdik", O, K)
    C2 = jnp.einsum("gdij,gdjk->gdik", C1, K)
    Oa = jnp.einsum("gdij,gdj->gdi", O, ax)
    frame = jnp.concatenate([O, xyz[:, :, None], ax[:, :, None], Oa[:, :, None]], 2)  # (G, D, 6, 3)
    turn = jnp.stack([C1, C2], 2)  # (G, D, 2, 3, 3)
    params = _Params(tuple(frame[:, d] for d in range(ch.D)), tuple(turn[:, d] for d in range(ch.D)), None)
    return params._replace(rest=_model_keypoints(hand, ch, params, jnp.zeros((hand.num_joints, 1), dtype)))


def _link_rot(params: _Params, d, sin, cos):
    """``O_d · Rot(a_d, θ) (G, 3, 3, B)`` at depth ``d`` from the precomputed terms; ``sin, cos (G, B)``."""
    return (params.O[d][..., None] + sin[:, None, None] * params.C1[d][..., None]
            + (1.0 - cos[:, None, None]) * params.C2[d][..., None])


def _fk(hand, ch, params: _Params, ang, want_jac):
    """Chains' keypoints ``(G, K, 3, B)`` and joint Jacobians: a list over depth ``d`` of
    ``(G, K, 3, B)`` (d keypoint / d link angle at depth ``d``; ``None`` where no chain has a joint).

    ang: ``(G, D, B)`` link angles.
    """
    G, D = ch.G, ch.D
    B = ang.shape[-1]
    dtype = ang.dtype
    sin, cos = _sincos(ang)
    axes_w, pos = [], []
    for d in range(D):
        if d == 0:  # the chain starts at the root: no product with an identity (cheaper, and XLA:CPU
            # float32 mis-evaluated the broadcast-identity product at batch >= 128)
            p = jnp.broadcast_to(params.xyz[0][..., None], (G, 3, B))
        else:
            p = p + _mv(R, params.xyz[d][..., None])
        pos.append(p)
        if ch.has_joint[d]:
            Md = _link_rot(params, d, sin[:, d], cos[:, d])
            if want_jac:
                Oa = params.Oa[d][..., None]
                axes_w.append(jnp.broadcast_to(Oa, (G, 3, B)) if d == 0 else _mv(R, Oa))
        else:
            Md = params.O[d][..., None]
            if want_jac:
                axes_w.append(None)
        if d < D - 1:
            R = jnp.broadcast_to(Md, (G, 3, 3, B)) if d == 0 else _mm(R, Md)
    P = jnp.stack(pos, axis=1)  # (G, D, 3, B)
    kp = P[np.arange(G)[:, None], ch.kp_depth]  # (G, K, 3, B), one gather
    if not want_jac:
        return kp, None
    # one (G, K, 3, B) array per depth with a joint (a single (G, K, depths, 3, B) array would exceed
    # the small-buffer size at batch 1, see _Params)
    Jd = [None] * D
    for d in range(D):
        if ch.has_joint[d]:
            before = (d < ch.kp_depth).astype(np.float64)  # (G, K): joint before the keypoint
            Jd[d] = (_cross(axes_w[d][:, None], kp - pos[d][:, None])
                     * jnp.asarray(before, dtype)[..., None, None])
    return kp, Jd


def _link_angles_ch(hand, ch, q, rot):
    """Link angles ``(G, D, B)`` from ``q (n, B)`` and coupled ``rot (M, B)``."""
    ext = jnp.concatenate([q, rot, jnp.zeros((1,) + q.shape[1:], q.dtype)])
    return ext[ch.angle]


def _jac_vars(hand, ch, q, Jd, soft):
    """d keypoint / d variable: a list over the V variable slots of ``(G, K, 3, B)``, from the
    per-depth joint Jacobians ``Jd`` (list over depth of ``(G, K, 3, B)``, :func:`_fk`): each
    variable slot reads its joint's depth; under hard coupling a coupled joint's column is added to its sources' with the law's derivatives."""
    n, M = hand.num_joints, len(hand.mimic_sources)
    some = next(j for j in Jd if j is not None)
    dtype = some.dtype
    cols = []
    for v in range(ch.V):
        col = None
        for d in sorted(set(ch.var_depth[:, v]) - {-1}):
            lanes = ch.var_depth[:, v] == d
            part = Jd[d]
            if not lanes.all():
                part = part * jnp.asarray(lanes.astype(np.float64), dtype)[:, None, None, None]
            col = part if col is None else col + part
        cols.append(jnp.zeros_like(some) if col is None else col)
    if not soft:
        for m in range(M):
            g, dm = ch.mimic_pos[m]
            src, sec = hand.mimic_sources[m]
            k = hand.coupling[m]
            lane = jnp.asarray((np.arange(ch.G) == g).astype(np.float64), dtype)[:, None, None, None]
            for j, dj in ((src, k[0] + k[2] * q[sec]), (sec, k[1] + k[2] * q[src])):
                v = int(ch.var_pos[j][1])
                cols[v] = cols[v] + lane * dj * Jd[dm]
    return cols


def _coupled(hand, q):
    rows = _coupled_rows(hand, q)
    return jnp.stack(rows) if rows else jnp.zeros((0,) + q.shape[1:], q.dtype)


def _model_keypoints(hand, ch, params, q, rot=None):
    """All 21 keypoints ``(21, 3, B)`` in the wrist frame; ``rot=None``: coupled angles by the law."""
    if rot is None:
        rot = _coupled(hand, q)
    kp, _ = _fk(hand, ch, params, _link_angles_ch(hand, ch, q, rot), want_jac=False)
    flat = jnp.concatenate([kp.reshape((ch.G * ch.K,) + kp.shape[2:]), jnp.zeros_like(kp[0, :1])])
    return flat[_kp_order(ch)]  # one gather (a stack of 21 slices is 21 copies)


def _kp_order(ch: _Chains) -> np.ndarray:
    """``(21,)`` row of each keypoint in the chains' ``(G·K + 1)`` rows (the last one: the root)."""
    order = np.full(21, ch.G * ch.K)
    for g in range(ch.G):
        for i in range(ch.K):
            if ch.kp_id[g, i] >= 0:
                order[ch.kp_id[g, i]] = g * ch.K + i
    return order


# ---------------------------------------------------------------------------------------- the cost


def _penalty(hand, q, rot, soft, cfg, q_prior):
    """Limit + prior (+ soft coupling) penalty per frame ``(B,)``."""
    lo, hi = hand.lower[:, None], hand.upper[:, None]
    viol = jnp.maximum(q - hi, 0.0) + jnp.minimum(q - lo, 0.0)
    d = q - q_prior
    pen = 0.5 * cfg["limit_weight"] * _sum(viol * viol, 0) + 0.5 * cfg["prior_weight"] * _sum(d * d, 0)
    if soft and rot.shape[0]:
        dc = rot - _coupled(hand, q)
        pen = pen + 0.5 * cfg["coupling_weight"] * _sum(dc * dc, 0)
    return pen


def _fit(hand, ch, params, q, rot, R, t, logs):
    kp = _model_keypoints(hand, ch, params, q, rot)  # (21, 3, B)
    return jnp.exp(logs) * _mv(R[None], kp) + t[None]


def _residuals(kp, R, t, logs, yg, y_roots):
    """Residuals in the wrist frame, in units of ``_REF``: ``u = s·kp``, ``z = Rᵀ(y − t)``, ``e = u − z``
    for the chains' keypoints ``kp (G, K, 3, B)`` against ``yg (G, K, 3, B)``, and ``e0 = −z0`` for
    the root keypoints ``y_roots (r, 3, B)`` (at the wrist origin)."""
    RT = jnp.swapaxes(R, 0, 1)
    u = kp * (jnp.exp(logs) / _REF)
    z = _mv(RT[None, None], yg - t[None, None]) / _REF
    e0 = -_mv(RT[None], y_roots - t[None]) / _REF
    return u, u - z, e0


def _data_cost(e, e0, wg, w_roots, delta):
    """Σ w·Huber over the chains' and the root keypoints, with the IRLS weights ``(G, K, B), (r, B)``."""
    rho, hw = _huber(_sum(e * e, 2), delta)
    rho0, hw0 = _huber(_sum(e0 * e0, 1), delta)
    return _sum(wg * rho, (0, 1)) + _sum(w_roots * rho0, 0), hw, hw0


# -------------------------------------------------------------------------------- initialisation


def _palm_similarity(m, y, w, estimate_scale: bool):
    """Weighted similarity ``y ≈ s R m + t`` from palm points ``m, y (P, 3, B)``, weights ``w (P, B)``
    (Horn 1987, quaternion form; the dominant eigenvector by repeated squaring, so R is always a proper
    rotation). Returns R ``(3, 3, B)``, t ``(3, B)``, log-scale ``(B,)``, det-sign of the covariance."""
    wsum = jnp.maximum(_sum(w, 0), 1e-12)
    cm = _sum(w[:, None] * m, 0) / wsum
    cy = _sum(w[:, None] * y, 0) / wsum
    a, b = m - cm, y - cy
    Mc = _sum(w[:, None, None] * a[:, :, None] * b[:, None, :], 0)  # (3, 3, B)
    var_m = _sum(w * _sum(a * a, 1), 0)
    (sxx, sxy, sxz), (syx, syy, syz), (szx, szy, szz) = [[Mc[i, j] for j in range(3)] for i in range(3)]
    N = jnp.stack([
        jnp.stack([sxx + syy + szz, syz - szy, szx - sxz, sxy - syx]),
        jnp.stack([syz - szy, sxx - syy - szz, sxy + syx, szx + sxz]),
        jnp.stack([szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy]),
        jnp.stack([sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz]),
    ])  # (4, 4, B)
    fro = jnp.sqrt(_sum(N * N, (0, 1))) + 1e-30
    P = (N + fro * jnp.eye(4, dtype=N.dtype)[..., None]) / (2 * fro)
    for i in range(12):  # P^(2^12); eigenvalues of P lie in [0, 1], the largest >= 1/2 after each
        P = _mm(P, P)  # normalisation, so four squarings between them keep it above 2^-16 (float32-safe)
        if i % 4 == 3:
            P = P / (jnp.sqrt(_sum(P * P, (0, 1))) + 1e-30)
    norms = _sum(P * P, 0)  # column norms (4, B)
    best = jnp.argmax(norms, 0)
    col = jnp.take_along_axis(P, best[None, None, :], axis=1)[:, 0]  # (4, B)
    qw, qx, qy, qz = col / (jnp.sqrt(_sum(col * col, 0)) + 1e-30)
    R = jnp.stack([
        jnp.stack([1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw)]),
        jnp.stack([2 * (qx * qy + qz * qw), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw)]),
        jnp.stack([2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx * qx + qy * qy)]),
    ])
    if estimate_scale:
        num = _sum(R * jnp.swapaxes(Mc, 0, 1), (0, 1))  # trace(R Mcᵀ)... = Σ b·R a
        logs = jnp.log(jnp.clip(num / jnp.maximum(var_m, 1e-12), 0.1, 10.0))
    else:
        logs = jnp.zeros_like(wsum)
    t = cy - jnp.exp(logs) * _mv(R, cm)
    det = (sxx * (syy * szz - syz * szy) - sxy * (syx * szz - syz * szx) + sxz * (syx * szy - syy * szx))
    return R, t, logs, jnp.sign(det)


def _dot(a, b):
    """Dot product over axis −2 of ``(..., 3, B)`` arrays → ``(..., B)``."""
    return a[..., 0, :] * b[..., 0, :] + a[..., 1, :] * b[..., 1, :] + a[..., 2, :] * b[..., 2, :]


def _unit(v):
    return v * jax.lax.rsqrt(jnp.maximum(_dot(v, v), 1e-20))[..., None, :]


def _atan2(y, x):
    """``arctan2(y, x)``. float32: one division and Cephes' atanf polynomial in plain vector
    arithmetic, the result stored once (:func:`_stored`); XLA:CPU's atan2 cost 10–25 ns per element.
    Other dtypes: ``jnp.arctan2``."""
    if y.dtype != jnp.float32:
        return jnp.arctan2(y, x)
    ax, ay = jnp.abs(x), jnp.abs(y)
    mx, mn = jnp.maximum(ax, ay), jnp.minimum(ax, ay)
    big = mn > np.float32(0.41421356) * mx  # reduce by π/4: atan(r) = π/4 + atan((r − 1)/(r + 1))
    z = jnp.where(big, mn - mx, mn) / jnp.maximum(jnp.where(big, mn + mx, mx), np.float32(1e-30))
    zz = z * z
    a = (((np.float32(8.05374449538e-2) * zz - np.float32(1.38776856032e-1)) * zz + np.float32(1.99777106478e-1))
         * zz - np.float32(3.33329491539e-1)) * zz * z + z
    a = jnp.where(big, a + np.float32(np.pi / 4), a)
    a = jnp.where(ay > ax, np.float32(np.pi / 2) - a, a)
    a = jnp.where(x < 0, np.float32(np.pi) - a, a)
    return _stored(jnp.where(y < 0, -a, a))


def _sp1(a, b, o):
    """The angle about unit ``a`` that turns ``b`` towards ``o`` (Paden–Kahan subproblem 1; the parts
    along ``a`` are ignored, so for a noisy ``o`` it is the least-squares angle). Vectors ``(..., 3, B)``."""
    return _atan2(_triple(a, b, o), _dot(b, o) - _dot(a, b) * _dot(a, o))


def _triple(a, b, c):
    """``a · (b × c)`` over axis −2 of ``(..., 3, B)`` arrays → ``(..., B)`` (no stacked cross product:
    a stack is materialised, one more kernel per call at batch 1)."""
    a0, a1, a2 = a[..., 0, :], a[..., 1, :], a[..., 2, :]
    b0, b1, b2 = b[..., 0, :], b[..., 1, :], b[..., 2, :]
    c0, c1, c2 = c[..., 0, :], c[..., 1, :], c[..., 2, :]
    return a0 * (b1 * c2 - b2 * c1) + a1 * (b2 * c0 - b0 * c2) + a2 * (b0 * c1 - b1 * c0)


def _sp2(a1, a2, b, o):
    """Angles ``θ1, θ2`` with ``Rot(a1, θ1) Rot(a2, θ2) b = o`` for unit directions (Paden–Kahan
    subproblem 2): of the two solutions the one on the side of ``b`` (continuous with zero angles);
    the nearest one where none exists (noisy ``o``)."""
    k = _dot(a1, a2)
    det = jnp.maximum(1.0 - k * k, 1e-6)
    a1o, a2b = _dot(a1, o), _dot(a2, b)
    al = (a1o - k * a2b) / det
    be = (a2b - k * a1o) / det
    cr = _cross(a1, a2)
    g2 = (1.0 - al * al - be * be - 2.0 * al * be * k) / det
    ga = jnp.where(_triple(b, a1, a2) < 0, -1.0, 1.0) * jnp.sqrt(jnp.maximum(g2, 0.0))
    c = al[..., None, :] * a1 + be[..., None, :] * a2 + ga[..., None, :] * cr
    return _sp1(a1, c, o), _sp1(a2, b, c)


def _analytic_angles(hand, ch, params, q0, R, t, logs, y, w, fixed_point=3):
    """Closed-form starting angles ``(n, B)`` from the bone directions, the wrist pose given.

    All fingers at once, from the palm outwards: the one or two joints that turn a bone follow from
    its direction in the frame before them (Paden–Kahan subproblem 1 or 2); coupled joints before
    them take the law of the current estimate (``fixed_point`` rounds). Exact on noise-free data when
    those joints sit at the bone's first keypoint, as on WG110v12; a start for LM in any case. Bones
    with a masked end keep ``q0``; results are clipped to the limits."""
    xyz, O, ax, Oa = (tuple(a[..., None] for a in v) for v in (params.xyz, params.O, params.ax, params.Oa))
    n, M = hand.num_joints, len(hand.mimic_sources)
    kid = np.where(ch.kp_id >= 0, ch.kp_id, 0)
    RT = jnp.swapaxes(R, 0, 1)
    z = _mv(RT[None, None], y[kid] - t[None, None]) / jnp.exp(logs)  # (G, K, 3, B) in the wrist frame
    wk = w[kid] * (ch.kp_id >= 0)[..., None]  # (G, K, B)
    ang = _link_angles_ch(hand, ch, q0, _coupled(hand, q0))
    angs = [ang[:, d] for d in range(ch.D)]  # (G, B) per depth

    def link(d):  # O_d · Rot(a_d, θ_d): (G, 3, 3, B); built from Rot here, not by _link_rot (which made
        # this start 3.8 -> 4.9 µs/frame at batch 1024 while it speeds up _fk)
        if not ch.has_joint[d]:
            return O[d]
        return _mm(O[d], _rot(ax[d], *_sincos(angs[d])))

    def walk(F, d0, d1):  # the frame after depth d0 − 1 carried to the frame after depth d1 − 1
        for d in range(d0, d1):
            F = link(d) if F is None else _mm(F, link(d))
        return F

    F, done = None, 0
    for ia, ib, free in ch.bones:
        da, db = int(ch.kp_depth[0, ia]), int(ch.kp_depth[0, ib])
        F = walk(F, done, da)
        done = da
        ok = (wk[:, ia] > 0) & (wk[:, ib] > 0)
        dz = z[:, ib] - z[:, ia]
        mimics = [(m, g, d) for m in range(M) for g in range(ch.G) for d in range(da, free[0])
                  if ch.angle[g, d] == n + m]
        Rb = None  # fixed transform from the last free joint to the bone's end
        for d in range(free[-1] + 1, db):
            Rb = link(d) if Rb is None else _mm(Rb, link(d))
        b = xyz[db] if Rb is None else _mv(Rb, xyz[db])
        b = _unit(b)
        O1, a1 = O[free[0]], Oa[free[0]]
        for _ in range(fixed_point if mimics else 1):
            Fj = walk(F, da, free[0])
            o = _unit(dz if Fj is None else _mv(jnp.swapaxes(Fj, 1, 2), dz))
            if len(free) == 1:
                th = [_sp1(a1, _mv(O1, b), o)]
            else:  # O1·Rot(α1, θ1)·O2·Rot(α2, θ2)·b = Rot(O1α1, θ1)·Rot(O1O2α2, θ2)·O1O2·b
                O12 = _mm(O1, O[free[1]])
                th = list(_sp2(a1, _mv(O1, Oa[free[1]]), _mv(O12, b), o))
            for d, val in zip(free, th):
                idx = ch.angle[:, d]
                val = jnp.clip(val, hand.lower[idx][:, None], hand.upper[idx][:, None])
                angs[d] = jnp.where(ok, val, angs[d])
            if mimics:
                law = _coupled_rows(hand, _LaneView(ch, q0, angs))
                for m, g, d in mimics:
                    angs[d] = angs[d].at[g].set(law[m])
    return _gather_lanes(ch, q0, angs, n)


def _gather_lanes(ch, q, angs, n):
    """``(n, B)`` joint angles read back from the per-depth lane angles ``angs[d] (G, B)``, where a
    lane holds the joint, else from ``q (n, B)`` (one gather; a stack of n rows is n copies)."""
    rows = np.arange(n)
    g, d = np.nonzero(ch.angle < n)
    rows[ch.angle[g, d]] = n + d * ch.G + g
    return jnp.concatenate([q, jnp.stack(angs).reshape((ch.D * ch.G,) + q.shape[1:])])[rows]


class _LaneView:
    """Joint ``j``'s angles ``(B,)`` as :func:`_gather_lanes` would give them, one row at a time."""

    def __init__(self, ch, q, angs):
        self.ch, self.q, self.angs = ch, q, angs

    def __getitem__(self, j):
        at = np.argwhere(self.ch.angle == j)
        return self.angs[at[0, 1]][at[0, 0]] if len(at) else self.q[j]


# ------------------------------------------------------------------------------------- LM kernel


def _solve_T(hand: HandModel, y, w, q0, static, cfg, warm=False, params=None):
    """The kernel on batch-last arrays: ``y (21, 3, B)``, ``w (21, B)``, ``q0 (n, B)``; ``warm``
    (static): ``q0`` is a warm start, used where it fits better than the closed-form start;
    ``params``: the model's :class:`_Params` if already made (:func:`_params_of`), else made here."""
    iterations, coupling, estimate_scale, min_landmarks = static
    soft = coupling == "soft"
    ch = _chains(hand, soft)
    dtype = y.dtype
    hand = hand.astype(dtype)
    n, M = hand.num_joints, len(hand.mimic_sources)
    B = y.shape[-1]
    G, K, V = ch.G, ch.K, ch.V
    npose = 7 if estimate_scale else 6
    if params is None:
        params = _chain_params(hand, ch, dtype)
    kid = np.where(ch.kp_id >= 0, ch.kp_id, 0)
    kmask = jnp.asarray((ch.kp_id >= 0).astype(np.float64), dtype)[..., None]  # (G, K, 1)
    yg = y[kid]  # (G, K, 3, B)
    wg = w[kid] * kmask  # (G, K, B)
    roots = np.asarray(ch.root_kps, int)

    # --- validity and the palm similarity
    n_valid = _sum((w > 0).astype(jnp.int32), 0)
    palm = np.asarray(ch.palm_kps, int)
    valid = (n_valid >= min_landmarks) & (_sum((w[palm] > 0).astype(jnp.int32), 0) >= 3)
    # the palm does not move with q
    R, t, logs, det = _palm_similarity(params.rest[palm], y[palm], w[palm], estimate_scale)
    mirrored = det < 0

    q_prior = q0
    rot0 = _coupled(hand, q0) if soft else jnp.zeros((0, B), dtype)

    delta = cfg["huber_delta"] / _REF

    def fk(q, rot, want_jac):  # the chains' keypoints (and per-depth Jacobians) at (q, rot)
        return _fk(hand, ch, params, _link_angles_ch(hand, ch, q, rot if soft else _coupled(hand, q)), want_jac)

    def cost_at(kp, q, rot, R, t, logs):  # the objective, given the chains' keypoints kp at (q, rot)
        _, e, e0 = _residuals(kp, R, t, logs, yg, y[roots])
        data, _, _ = _data_cost(e, e0, wg, w[roots], delta)
        return data + _penalty(hand, q, rot if soft else None, soft, cfg, q_prior)

    def cost_fn(q, rot, R, t, logs):
        return cost_at(fk(q, rot, False)[0], q, rot, R, t, logs)

    # start from the closed-form angles
    qa = _analytic_angles(hand, ch, params, q0, R, t, logs, y, w)
    rota = _coupled(hand, qa) if soft else rot0
    if warm:  # a warm start: keep q0 where it fits better than the closed-form angles
        use_a = ~(cost_fn(q0, rot0, R, t, logs) < cost_fn(qa, rota, R, t, logs))
        qa, rota = jnp.where(use_a, qa, q0), jnp.where(use_a, rota, rot0)

    lo_ext = jnp.concatenate([hand.lower, hand.mimic_lower, jnp.zeros(1, dtype)])
    hi_ext = jnp.concatenate([hand.upper, hand.mimic_upper, jnp.zeros(1, dtype)])
    is_joint = jnp.asarray((ch.var < n).astype(np.float64), dtype)[..., None]  # (G, V, 1)
    is_pad = jnp.asarray((ch.var >= n + M).astype(np.float64), dtype)[..., None]

    def step(_, carry):
        # the state comes with its keypoints, Jacobians and cost: each step evaluates its trial point
        # with the Jacobian, which the next step uses where the trial is accepted (one forward pass
        # per step instead of two: 4-7 % more frames/s at batch 1024-4096 on one device)
        (q, rot, R, t, logs), (kp, Jd), cost, lam, n_acc, conv = carry
        s = jnp.exp(logs)
        J = [Jv * (s / _REF) for Jv in _jac_vars(hand, ch, q, Jd, soft)]  # V × (G, K, 3, B)
        u, e, e0 = _residuals(kp, R, t, logs, yg, y[roots])  # wrist (root) keypoints: u = 0, pose (δt) only
        _, hw, hw0 = _data_cost(e, e0, wg, w[roots], delta)
        ww = wg * hw  # (G, K, B)
        w0 = w[roots] * hw0  # (r, B)

        # pose block C (npose × npose) and gradient gp
        uu = _sum(u * u, 2)  # (G, K, B)
        GK = [(g, k) for g in range(G) for k in range(K)]
        eye3 = jnp.eye(3, dtype=dtype)[..., None]
        Cpp = _add([ww[g, k] * (uu[g, k] * eye3 - u[g, k, :, None] * u[g, k, None, :]) for g, k in GK])
        Cts = _add([ww[g, k] * u[g, k] for g, k in GK])  # Σ w u (3, B)
        zero = jnp.zeros_like(Cts[0])
        Cpt = jnp.stack([jnp.stack([zero, -Cts[2], Cts[1]]), jnp.stack([Cts[2], zero, -Cts[0]]),
                         jnp.stack([-Cts[1], Cts[0], zero])])  # Σ w [u]×
        wsum = _sum(ww, (0, 1)) + _sum(w0, 0)
        Ctt = wsum * eye3
        gphi = _cross(u, ww[:, :, None] * e, sum_over=(0, 1))
        gt = _add([ww[g, k] * e[g, k] for g, k in GK]) + _add([w0[i] * e0[i] for i in range(len(roots))])
        top = jnp.concatenate([Cpp, Cpt], 1)
        mid = jnp.concatenate([jnp.swapaxes(Cpt, 0, 1), Ctt], 1)
        C = jnp.concatenate([top, mid], 0)  # (6, 6, B)
        gp = jnp.concatenate([gphi, gt], 0)
        if estimate_scale:
            Css = _sum(ww * uu, (0, 1))
            col = jnp.concatenate([jnp.zeros((3, B), dtype), Cts], 0)
            C = jnp.concatenate([jnp.concatenate([C, col[:, None]], 1),
                                 jnp.concatenate([col, Css[None]], 0)[None]], 0)
            gp = jnp.concatenate([gp, _sum(ww * _sum(u * e, 2), (0, 1))[None]], 0)

        # finger blocks, one (G, ...) array per variable slot v (see _Params on buffer sizes)
        wJ = [ww[:, :, None] * Jv for Jv in J]  # V × (G, K, 3, B)
        Ae = {(a, b): _sum(wJ[a] * J[b], (1, 2)) for a in range(V) for b in range(a + 1)}  # (G, B)
        A = jnp.stack([jnp.stack([Ae[max(a, b), min(a, b)] for b in range(V)], 1) for a in range(V)], 1)
        ga = jnp.stack([_sum(wJv * e, (1, 2)) for wJv in wJ], 1)  # (G, V, B)
        Bm = []  # V × (G, npose, B): d (pose gradient) / d variable
        for v in range(V):
            Bphi = _cross(u, wJ[v], sum_over=1)  # (G, 3, B)
            Bt = _sum(wJ[v], 1)  # (G, 3, B)
            parts = [Bphi, Bt] + ([_sum(wJ[v] * u, (1, 2))[:, None]] if estimate_scale else [])
            Bm.append(jnp.concatenate(parts, 1))

        # penalties on the variables (limits, prior, soft coupling); padding variables get identity
        ext_q = jnp.concatenate([q, rot, jnp.zeros((1, B), dtype)])
        xv = ext_q[ch.var]  # (G, V, B)
        viol = jnp.maximum(xv - hi_ext[ch.var][..., None], 0) + jnp.minimum(xv - lo_ext[ch.var][..., None], 0)
        prior = jnp.concatenate([q_prior, rot0 if soft else jnp.zeros((0, B), dtype), jnp.zeros((1, B), dtype)])
        dprior = xv - prior[ch.var]
        gpen = is_joint * (cfg["limit_weight"] * viol + cfg["prior_weight"] * dprior)
        hpen = is_joint * (jnp.where(viol != 0, cfg["limit_weight"], 0.0) + cfg["prior_weight"]) + is_pad
        ga = ga + gpen
        A = A + hpen[:, :, None] * jnp.eye(V, dtype=dtype)[None, :, :, None]
        if soft:
            law = _coupled(hand, q)
            for m in range(M):
                src, sec = hand.mimic_sources[m]
                k = hand.coupling[m]
                g, vr = ch.var_pos[n + m]
                dl = {}
                dl[src] = k[0] + k[2] * q[sec]
                dl[sec] = dl.get(sec, 0.0) + k[1] + k[2] * q[src]
                res = rot[m] - law[m]
                c = cfg["coupling_weight"]
                A = A.at[g, vr, vr].add(c)
                ga = ga.at[g, vr].add(c * res)
                for j, dj in dl.items():
                    _, vj = ch.var_pos[j]
                    A = A.at[g, vr, vj].add(-c * dj).at[g, vj, vr].add(-c * dj)
                    A = A.at[g, vj, vj].add(c * dj * dj)
                    ga = ga.at[g, vj].add(-c * dj * res)

        # Levenberg–Marquardt damping and the Schur complement over the finger blocks
        eyeV = jnp.eye(V, dtype=dtype)[None, :, :, None]
        A = A + eyeV * (A * lam + 1e-9)
        X = _chol_rows(A, [jnp.concatenate([Bm[v], ga[:, v, None]], 1) for v in range(V)])  # V × (G, npose + 1, B)
        GV = [(g, v) for g in range(G) for v in range(V)]
        S = C - _add([Bm[v][g, :, None] * X[v][g, None, :npose] for g, v in GV])
        rp = gp - _add([Bm[v][g] * X[v][g, npose] for g, v in GV])
        eyeP = jnp.eye(npose, dtype=dtype)[..., None]
        S = S + eyeP * (S * lam + 1e-9)
        dp = _chol_solve(S, -rp[:, None])[:, 0]  # (npose, B)
        dv = -jnp.stack([X[v][:, npose] + _add([X[v][:, i] * dp[i] for i in range(npose)]) for v in range(V)], 1)
        dx = dv[ch.var_pos[:, 0], ch.var_pos[:, 1]]  # (n + M, B)
        new_q = q + dx[:n]
        new_rot = rot + dx[n:] if soft else rot
        new_R = _mm(R, _so3_exp(dp[:3]))
        new_t = t + _mv(R, dp[3:6] * _REF)
        new_logs = jnp.clip(logs + dp[6], math.log(0.1), math.log(10.0)) if estimate_scale else logs
        new_fk = fk(new_q, new_rot, True)
        new_cost = cost_at(new_fk[0], new_q, new_rot, new_R, new_t, new_logs)
        ok = _stored(jnp.isfinite(new_cost) & (new_cost <= cost))
        state, kept_fk, kept_cost = jax.tree_util.tree_map(
            lambda a, b: jnp.where(ok, a, b), ((new_q, new_rot, new_R, new_t, new_logs), new_fk, new_cost),
            ((q, rot, R, t, logs), (kp, Jd), cost))
        rel = jnp.abs(cost - new_cost) / jnp.maximum(cost, 1e-30)
        conv = (ok & (rel < 1e-10)) | (cost < 1e-16)
        lam = jnp.clip(jnp.where(ok, lam * 0.3, lam * 4.0), 1e-12, 1e8)
        return state, kept_fk, kept_cost, lam, n_acc + ok.astype(jnp.int32), conv

    fk0 = fk(qa, rota, True)
    carry = ((qa, rota, R, t, logs), fk0, cost_at(fk0[0], qa, rota, R, t, logs),
             jnp.full((B,), cfg["damping"], dtype), jnp.zeros((B,), jnp.int32), jnp.zeros((B,), bool))
    (q, rot, R, t, logs), _, _, lam, n_acc, conv = jax.lax.fori_loop(0, iterations, step, carry)

    # --- projection onto the limits; frames without enough landmarks keep the start pose
    q = jnp.clip(q, hand.lower[:, None], hand.upper[:, None])
    q = jnp.where(valid, q, jnp.clip(q0, hand.lower[:, None], hand.upper[:, None]))
    if soft:
        rot = jnp.clip(rot, hand.mimic_lower[:, None], hand.mimic_upper[:, None])
    else:
        rot = _coupled(hand, q)
    fit = _fit(hand, ch, params, q, rot, R, t, logs)
    d = fit - y
    used = w > 0
    errs = jnp.where(used, jnp.sqrt(_sum(d * d, 1)), 0.0)  # (21, B)
    resid = jnp.sqrt(_sum(errs * errs, 0) / jnp.maximum(n_valid, 1).astype(dtype))
    s = jnp.exp(logs)
    flags = (jnp.where(valid, 0, FLAG_TOO_FEW_LANDMARKS)
             | jnp.where((s < 0.3) | (s > 3.0), FLAG_BAD_SCALE, 0)
             | jnp.where(resid > cfg["flag_residual"], FLAG_HIGH_RESIDUAL, 0)
             | jnp.where(mirrored, FLAG_MIRRORED, 0)).astype(jnp.int32)
    return dict(q=q, rot=rot, R=R, t=t, s=s, kp=fit, resid=resid, errs=errs, valid=valid,
                conv=conv & valid, n_acc=n_acc, flags=flags)


def _solve_rows(hand, landmarks, weights, q0, static, cfg, warm=False, params=None):
    """``landmarks (B, 21, 3)``, ``weights (B, 21)``, ``q0 (B, n)`` → dict of ``(B, ...)`` arrays;
    ``warm``: ``q0`` is a warm start (else the neutral pose: the closed-form start is used as is);
    ``params``: see :func:`_solve_T`."""
    finite = jnp.all(jnp.isfinite(landmarks), axis=-1)
    w = jnp.where(finite & jnp.isfinite(weights), jnp.maximum(weights, 0.0), 0.0)
    y = jnp.where(finite[..., None], landmarks, 0.0)
    out = _solve_T(hand, jnp.transpose(y, (1, 2, 0)), w.T, q0.T, static, cfg, warm, params)
    return dict(
        angles=out["q"].T, coupled=out["rot"].T, rotation=jnp.transpose(out["R"], (2, 0, 1)),
        translation=out["t"].T, scale=out["s"], keypoints=jnp.transpose(out["kp"], (2, 0, 1)),
        residual=out["resid"], errors=out["errs"].T, valid=out["valid"], converged=out["conv"],
        iterations=out["n_acc"], flags=out["flags"],
    )


_solve_flat = jax.jit(_solve_rows, static_argnames=("static", "warm"))

#: frames solved at a time on one device; bigger batches loop over chunks of this size (the kernel's
#: arrays then stay in the caches: at 10^5 frames on 2 CPU devices 46,000 frames/s in one piece)
CHUNK_FRAMES = 2048


def _solve_chunked(hand, landmarks, weights, q0, static, cfg, warm=False, params=None):
    """:func:`_solve_rows` over equal chunks of at most :data:`CHUNK_FRAMES` frames (``lax.map``; the
    batch is padded with copies of its final frame to a multiple of the chunk)."""
    B = landmarks.shape[0]
    if B <= CHUNK_FRAMES:
        return _solve_rows(hand, landmarks, weights, q0, static, cfg, warm, params)
    n = -(-B // CHUNK_FRAMES)
    size = -(-B // n)  # n equal chunks of at most CHUNK_FRAMES
    pad = n * size - B
    args = [jnp.concatenate([a, jnp.broadcast_to(a[-1:], (pad,) + a.shape[1:])]) if pad else a
            for a in (landmarks, weights, q0)]
    # chunk j holds frames j, j + n, j + 2n, …: where the frames are split over devices (a sharded
    # input under the caller's jax.jit), every chunk is split over them too and the devices work on
    # each chunk in parallel
    args = [jnp.swapaxes(a.reshape((size, n) + a.shape[1:]), 0, 1) for a in args]
    out = jax.lax.map(lambda a: _solve_rows(hand, *a, static, cfg, warm, params), args)
    return {k: jnp.swapaxes(v, 0, 1).reshape((n * size,) + v.shape[2:])[:B] for k, v in out.items()}


# ------------------------------------------------------------------------------------ public API


def neutral_angles(hand: HandModel) -> jax.Array:
    """The solver's default starting pose ``(n,)``: a slight, mid-range flexion (0.25 rad on every
    joint but the abductions), within limits."""
    if _is_traced(hand.lower, hand.upper):
        return jnp.clip(jnp.asarray(_flexion(hand), hand.lower.dtype), hand.lower, hand.upper)
    return jnp.asarray(_neutral_np(hand), hand.lower.dtype)


def _flexion(hand: HandModel) -> np.ndarray:
    return np.array([0.0 if nme.endswith("_abd") else 0.25 for nme in hand.joint_names])


def _neutral_np(hand: HandModel) -> np.ndarray:
    """:func:`neutral_angles` of a concrete model as a numpy array (no device round trip per call)."""
    return np.clip(_flexion(hand), np.asarray(hand.lower), np.asarray(hand.upper))


def _is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


# _top_level(): no JAX transformation (jit, grad, vmap …) is tracing the caller
try:
    from jax._src.core import trace_state_clean as _top_level
except ImportError:  # other jax versions: an array made now is a tracer inside a trace

    def _top_level() -> bool:
        return not isinstance(jnp.zeros(()), jax.core.Tracer)


def _validate(hand, landmarks, weights, q0, check_units=True):
    """Checked ``(landmarks, weights, q0)`` with matching batch shapes; weights and ``q0`` not given
    stay ``None`` (:func:`_defaults` makes them, inside the compiled call for :func:`solve`: each
    fresh host array costs a transfer, 40-90 µs for one frame).

    Concrete inputs get the full numpy checks (shape, finiteness, units); traced inputs (inside
    ``jax.jit``/``grad``) only the static shape checks, so :func:`solve` stays a pure JAX function.
    """
    if _is_traced(landmarks, weights, q0):
        lm = jnp.asarray(landmarks)
        if lm.ndim < 2 or lm.shape[-2:] != (21, 3):
            raise ValueError(f"landmarks must have shape (*batch, 21, 3); got {lm.shape}")
        xp = jnp
    else:
        lm = check_landmarks(landmarks, check_units=check_units)
        xp = np
    batch = lm.shape[:-2]
    if weights is not None:
        weights = xp.asarray(weights, lm.dtype)
        if weights.shape != batch + (21,):
            try:
                weights = xp.broadcast_to(weights, batch + (21,))
            except ValueError:
                raise ValueError(
                    f"weights must have shape (*batch, 21) = {batch + (21,)}; got {weights.shape}"
                ) from None
    if q0 is not None:
        q0 = xp.broadcast_to(xp.asarray(q0, lm.dtype), batch + (hand.num_joints,))
    return lm, weights, q0


def solve(
    hand: HandModel,
    landmarks,
    weights=None,
    config: SolverConfig | None = None,
    *,
    side: str | None = None,
    q0=None,
    check_units: bool = True,
    **overrides,
) -> IKResult:
    """Fit the hand to MediaPipe landmarks: angles within limits, wrist pose and scale.

    Args:
        hand: the model (``wj.load_hand("right")``); with ``side`` given, it is reloaded for that side.
        landmarks: ``(*batch, 21, 3)`` metres, in any frame (camera, world, wrist). NaN marks a
            missing landmark.
        weights: ``(*batch, 21)`` per-landmark confidence ≥ 0 (0 = ignore); default all ones.
        config: :class:`SolverConfig`; keyword ``overrides`` replace its fields
            (e.g. ``iterations=20, coupling="soft"``).
        side: ``"right"``, ``"left"`` or ``"auto"`` (decide from the landmarks' chirality); ``None``
            uses ``hand`` as given. A side contradicting the geometry issues a warning.
        q0: ``(*batch, 20)`` starting angles (warm start); default :func:`neutral_angles`.
        check_units: raise if the hands look like pixels, normalised image coordinates or millimetres.

    Returns:
        :class:`IKResult` with the input's batch shape.

    Raises:
        ValueError: wrong shape, no finite landmark at all, or implausible units (message says what
            was found and what to pass instead).

    For a live stream, one frame at a time, :class:`~wuji_jax.FrameSolver` computes the same fit with
    less overhead per call (numpy results).
    """
    config = config or _DEFAULT_CONFIG
    if overrides:
        config = dataclasses.replace(config, **overrides)
    lm, weights, q0a = _validate(hand, landmarks, weights, q0, check_units)
    if side is not None:
        if _is_traced(lm):
            raise ValueError("side= needs concrete landmarks; pick the hand model outside jit")
        hand = _pick_side(hand, lm, side)
    return _solve_checked(hand, lm, weights, q0a, config, warm=q0 is not None)


def _defaults(hand, lm, weights, q0a, xp):
    """``weights`` and ``q0a`` for ``lm (*batch, 21, 3)`` where they are ``None`` (all ones; the
    neutral pose), with numpy (``xp=np``) or in a traced computation (``xp=jnp``)."""
    batch = lm.shape[:-2]
    if weights is None:
        weights = xp.ones(batch + (21,), lm.dtype)
    if q0a is None:
        q0 = _neutral_np(hand) if xp is np else neutral_angles(hand)
        q0a = xp.broadcast_to(xp.asarray(q0, lm.dtype), batch + (hand.num_joints,))
    return weights, q0a


def _solve_any(hand, lm, weights, q0a, static, cfg, warm=False, params=None):
    """:func:`_solve_rows` for any batch shape → :class:`IKResult`; the reshapes (and defaults for
    ``weights``/``q0a`` given as ``None``) happen inside the compiled call (:func:`_solve_shaped`,
    :class:`~wuji_jax.FrameSolver`)."""
    weights, q0a = _defaults(hand, lm, weights, q0a, jnp)
    batch = lm.shape[:-2]
    flat = int(np.prod(batch)) if batch else 1
    out = _solve_chunked(hand, lm.reshape(flat, 21, 3), weights.reshape(flat, 21),
                         q0a.reshape(flat, hand.num_joints), static, cfg, warm, params)
    return IKResult(**{k: v.reshape(batch + v.shape[1:]) for k, v in out.items()})


_solve_shaped = jax.jit(_solve_any, static_argnames=("static", "warm"))

_DEFAULT_CONFIG = SolverConfig()


@functools.lru_cache(maxsize=64)
def _device_config(config: SolverConfig, dtype) -> dict:
    """:func:`_traced_config` as arrays on the default device (for calls outside any trace: numpy
    scalars would be copied to the device on every call)."""
    return {k: jnp.asarray(v) for k, v in _traced_config(config, dtype).items()}


@functools.lru_cache(maxsize=64)
def _traced_config(config: SolverConfig, dtype) -> dict:
    # numpy, not jax arrays: a cached jax array captured by an outer jax.jit becomes a hoisted constant,
    # and jaxlib 0.10.2 then ran a cached executable with the wrong argument count
    return {k: np.asarray(v, dtype) for k, v in config._traced().items()}


def _solve_checked(hand: HandModel, lm, weights, q0a, config: SolverConfig, warm: bool = False) -> IKResult:
    """:func:`solve` after validation: ``lm (*b, 21, 3)``, ``weights (*b, 21)``, ``q0a (*b, n)``;
    ``warm``: ``q0a`` is a warm start rather than the neutral pose."""
    dtype = _F64 if (lm.dtype == _F64 and jax.config.jax_enable_x64) else _F32
    traced = _is_traced(lm, weights, q0a)
    xp = jnp if traced else np  # numpy inputs go straight into the jitted call
    lm, weights, q0a = (None if a is None else xp.asarray(a, dtype) for a in (lm, weights, q0a))
    params = None if traced or not _top_level() else _params_of(hand, dtype)
    if params is None:
        # inside a trace: nothing cached on the device (it would be captured as a constant)
        return _solve_shaped(hand, lm, weights, q0a, config._static(), _traced_config(config, dtype), warm)
    rows = split_over_devices(math.prod(lm.shape[:-2]))
    if rows is not None:
        weights, q0a = _defaults(hand, lm, weights, q0a, np)
        return _solve_split(hand, lm, weights, q0a, config._static(), _traced_config(config, dtype), rows, warm,
                            params)
    return _solve_shaped(hand, lm, weights, q0a, config._static(), _device_config(config, dtype), warm, params)


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)  # numpy dtypes: cheap to hash as cache keys


_PARAMS: dict = {}  # (id(hand), dtype) -> (hand, its _Params): the last few concrete models


def _params_of(hand: HandModel, dtype) -> _Params | None:
    """The :class:`_Params` of a concrete model, made once per model object and kept for the next
    calls (made inside the kernel, they cost ~20 gathers and products per call, and their
    ``(G, D, 3, 3)`` arrays would keep the single-frame kernel off XLA:CPU's sequential path);
    ``None`` for a model with traced leaves (the kernel makes its params then)."""
    key = (id(hand), dtype)
    hit = _PARAMS.get(key)
    if hit is not None and hit[0] is hand:  # a cached model is a concrete one: no scan of its leaves
        return hit[1]
    if _is_traced(*jax.tree_util.tree_leaves(hand)):
        return None
    # the chains' links (all _Params depends on) are the same under either coupling
    params = _chain_params(hand.astype(jnp.dtype(dtype)), _chains(hand, soft=False), dtype)
    if len(_PARAMS) >= 16:
        _PARAMS.pop(next(iter(_PARAMS)))
    _PARAMS[key] = (hand, params)
    return params


def _solve_split(hand, lm, weights, q0a, static, cfg, rows, warm, params=None) -> IKResult:
    """:func:`_solve_flat` with the frames split over the devices of the sharding ``rows`` (numpy
    inputs; the batch is padded with copies of its last frame to a multiple of the device count)."""
    batch = lm.shape[:-2]
    flat = int(np.prod(batch))
    pad = -flat % rows.mesh.size
    args = [a.reshape((flat,) + a.shape[len(batch):]) for a in (lm, weights, q0a)]
    if pad:
        args = [np.concatenate([a, np.repeat(a[-1:], pad, 0)]) for a in args]
    out = _split_kernel(rows.mesh, static, warm)(hand, *jax.device_put(args, rows), cfg, params)
    return _unsplit(out, flat, batch)


@functools.lru_cache(maxsize=16)
def _split_kernel(mesh, static, warm):
    """The jitted solver with every device solving its own rows (``shard_map``: no communication)."""
    from jax.sharding import PartitionSpec as P

    def local(hand, lm, weights, q0, cfg, params):
        return _solve_chunked(hand, lm, weights, q0, static, cfg, warm, params)

    rows = P(mesh.axis_names[0])
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), rows, rows, rows, P(), P()), out_specs=rows,
                                 check_vma=False))


@functools.partial(jax.jit, static_argnames=("flat", "batch"))
def _unsplit(out, flat, batch):
    return IKResult(**{k: v[:flat].reshape(batch + v.shape[1:]) for k, v in out.items()})


def _pick_side(hand: HandModel, lm: np.ndarray, side: str) -> HandModel:
    from .model import load_hand

    if side not in ("right", "left", "auto"):
        raise ValueError(f"side must be 'right', 'left' or 'auto', got {side!r}")
    detected = detect_side(lm)
    if side == "auto":
        if detected is None:
            raise ValueError("side='auto': the landmarks' chirality is undecided (degenerate palms); pass side=")
        side = detected
    elif detected is not None and detected != side:
        warnings.warn(
            f"side={side!r} but the landmarks' geometry looks like a {detected} hand "
            "(mirrored images swap MediaPipe's handedness label); solving as given",
            stacklevel=3,
        )
    if hand.side == side:
        return hand
    return load_hand(side)


# ---------------------------------------------------------------------------------- optax / loss


def landmark_loss(hand: HandModel, q, rotation, translation, log_scale, landmarks, weights=None,
                  config: SolverConfig | None = None):
    """The solver's objective for one set of parameters (differentiable; for optax or custom terms).

    Args:
        q: ``(*batch, n)`` angles; rotation ``(*batch, 3, 3)``; translation ``(*batch, 3)`` metres;
        log_scale ``(*batch,)``; landmarks ``(*batch, 21, 3)`` metres; weights ``(*batch, 21)``.

    Returns:
        ``(*batch,)`` cost: Σ_k w_k·Huber(|fit_k − y_k| / 1 cm) + limit and prior penalties.
    """
    from .kinematics import forward_keypoints

    config = config or SolverConfig()
    q = _check_q(hand, q)
    kp = forward_keypoints(hand, q)
    s = jnp.exp(log_scale)[..., None, None]
    fit = s * jnp.einsum("...ij,...kj->...ki", rotation, kp) + translation[..., None, :]
    finite = jnp.all(jnp.isfinite(landmarks), -1)
    y = jnp.where(finite[..., None], landmarks, 0.0)
    w = jnp.ones(landmarks.shape[:-1], q.dtype) if weights is None else weights
    w = jnp.where(finite, w, 0.0)
    r2 = jnp.sum((fit - y) ** 2, -1) / _REF**2
    rho, _ = _huber(r2, config.huber_delta / _REF)
    h = hand.astype(q.dtype)
    viol = jnp.maximum(q - h.upper, 0) + jnp.minimum(q - h.lower, 0)
    return jnp.sum(w * rho, -1) + 0.5 * config.limit_weight * jnp.sum(viol**2, -1)


def solve_optax(hand: HandModel, landmarks, optimizer=None, steps: int = 300, weights=None,
                config: SolverConfig | None = None, extra_loss=None):
    """Minimise :func:`landmark_loss` (+ ``extra_loss(q)`` if given) with an optax optimizer.

    The wrist pose is initialised from the palm as in :func:`solve`; the rotation is parametrised by a
    rotation vector composed on the right. Default optimizer: ``optax.adam(0.02)``. Returns an
    :class:`IKResult` (``iterations`` = ``steps``).
    """
    import optax

    config = config or SolverConfig()
    lm, weights, _ = _validate(hand, landmarks, weights, None)
    batch = lm.shape[:-2]
    lm = jnp.asarray(lm)
    weights, q0 = _defaults(hand, lm, None if weights is None else jnp.asarray(weights), None, jnp)
    init = solve(hand, lm, weights, config, iterations=0, check_units=False)
    optimizer = optimizer or optax.adam(0.02)
    params = dict(q=jnp.asarray(q0), phi=jnp.zeros(batch + (3,), lm.dtype),
                  t=init.translation, logs=jnp.log(init.scale))
    R0 = init.rotation

    def rot(phi):
        R = jnp.transpose(_so3_exp(phi.reshape(-1, 3).T), (2, 0, 1))
        return R0 @ R.reshape(phi.shape[:-1] + (3, 3))

    def loss(p):
        val = landmark_loss(hand, p["q"], rot(p["phi"]), p["t"], p["logs"], lm, weights, config)
        if extra_loss is not None:
            val = val + extra_loss(p["q"])
        return jnp.sum(val)

    @jax.jit
    def run(params):
        state = optimizer.init(params)

        def body(carry, _):
            p, s = carry
            val, g = jax.value_and_grad(loss)(p)
            upd, s = optimizer.update(g, s, p, value=val, grad=g, value_fn=loss)
            return (optax.apply_updates(p, upd), s), val

        (p, _), hist = jax.lax.scan(body, (params, state), None, length=steps)
        return p, hist

    p, _ = run(params)
    q = jnp.clip(p["q"], hand.lower, hand.upper)
    final = solve(hand, lm, weights, config, iterations=0, q0=q, check_units=False)
    # iterations=0 keeps q0 (clipped) and the palm pose; refit the pose we optimised:
    from .kinematics import coupled_angles, forward_keypoints

    R = rot(p["phi"])
    s = jnp.exp(p["logs"])
    kp = s[..., None, None] * jnp.einsum("...ij,...kj->...ki", R, forward_keypoints(hand, q)) + p["t"][..., None, :]
    finite = jnp.all(jnp.isfinite(lm), -1) & (weights > 0)
    err = jnp.where(finite, jnp.linalg.norm(kp - jnp.where(finite[..., None], lm, 0.0), axis=-1), 0.0)
    resid = jnp.sqrt(jnp.sum(err**2, -1) / jnp.maximum(jnp.sum(finite, -1), 1))
    return final._replace(angles=q, coupled=coupled_angles(hand, q), rotation=R, translation=p["t"], scale=s,
                          keypoints=kp, residual=resid, errors=err,
                          iterations=jnp.full(batch, steps, jnp.int32))


def pose_from_palm(hand: HandModel, landmarks, weights=None, estimate_scale: bool = True):
    """Closed-form wrist similarity from the palm landmarks: ``(rotation, translation, scale)``."""
    r = solve(hand, landmarks, weights, iterations=0, estimate_scale=estimate_scale, check_units=False)
    return r.rotation, r.translation, r.scale
