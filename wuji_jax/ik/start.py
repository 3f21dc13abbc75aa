"""The closed-form start: wrist pose from the palm, then the angles from the bone directions.

1. :func:`palm_similarity`: the similarity ``y ≈ s R m + t`` from the palm landmarks (wrist, thumb
   CMC, four MCPs), which do not move with the angles (weighted Horn 1987, quaternion form; the
   dominant eigenvector by repeated squaring, so ``R`` is always a proper rotation).
2. :func:`analytic_angles`: all fingers at once, from the palm outwards, the one or two joints that
   turn a bone follow from its direction in the frame before them (Paden–Kahan subproblem 2 for the
   intersecting MCP/CMC axes, subproblem 1 for each hinge); coupled joints before them take the law
   of the current estimate (a three-round fixed point). Exact on noise-free data for WG110v12.

Layout: components first, frames last (see :mod:`wuji_jax.chains`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..hand import geometry as geo
from ..hand.chains import ChainParams, Chains, coupled_rows, link_angles

__all__ = ["palm_similarity", "analytic_angles", "gather_joints"]


def palm_similarity(m, y, w, estimate_scale):
    """Weighted similarity ``y ≈ s R m + t`` from points ``m, y (3, P, B)`` with weights ``w (P, B)``.

    Returns:
        ``R (3, 3, B)``, ``t (3, B)`` metres, ``log s (B,)`` (clipped to [0.1, 10]), and the sign of
        the covariance's determinant ``(B,)`` (negative: the points are mirrored).
    """
    wsum = jnp.maximum(geo.total(w, 0), 1e-12)
    cm = geo.total(w * m, 1) / wsum
    cy = geo.total(w * y, 1) / wsum
    a, b = m - cm[:, None], y - cy[:, None]
    S = geo.total(w * a[:, None] * b[None], 2)  # (3, 3, B): Σ w a bᵀ
    (sxx, sxy, sxz), (syx, syy, syz), (szx, szy, szz) = S[0], S[1], S[2]
    N = jnp.stack([
        jnp.stack([sxx + syy + szz, syz - szy, szx - sxz, sxy - syx]),
        jnp.stack([syz - szy, sxx - syy - szz, sxy + syx, szx + sxz]),
        jnp.stack([szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy]),
        jnp.stack([sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz]),
    ])  # (4, 4, B), Horn's matrix; its top eigenvector is the rotation's quaternion
    fro = jnp.sqrt(geo.total(N * N, (0, 1))) + 1e-30
    P = (N + fro * jnp.eye(4, dtype=N.dtype)[..., None]) / (2 * fro)  # eigenvalues in [0, 1]

    def square4(_, P):  # P^16, renormalised (the top eigenvalue stays >= 2^-16: float32-safe)
        for _ in range(4):
            P = geo.matmul(P, P)
        return P / (jnp.sqrt(geo.total(P * P, (0, 1))) + 1e-30)

    P = jax.lax.fori_loop(0, 3, square4, P)  # P^(2^12): rank one along the top eigenvector
    best = jnp.argmax(geo.total(P * P, 0), 0)  # the largest column
    col = jnp.take_along_axis(P, best[None, None], axis=1)[:, 0]  # (4, B)
    qw, qx, qy, qz = col / (jnp.sqrt(geo.total(col * col, 0)) + 1e-30)
    R = jnp.stack([
        jnp.stack([1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw)]),
        jnp.stack([2 * (qx * qy + qz * qw), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw)]),
        jnp.stack([2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx * qx + qy * qy)]),
    ])
    var_m = geo.total(w * geo.dot(a, a), 0)
    num = geo.total(R * jnp.swapaxes(S, 0, 1), (0, 1))  # Σ w b·R a
    logs = jnp.where(estimate_scale, jnp.log(jnp.clip(num / jnp.maximum(var_m, 1e-12), 0.1, 10.0)), 0.0)
    t = cy - jnp.exp(logs) * geo.matvec(R, cm)
    det = geo.total(S[0] * geo.cross(S[1], S[2]), 0)
    return R, t, logs, jnp.sign(det)


def _sp1(a, b, o):
    """The angle about unit ``a`` that turns ``b`` towards ``o`` (Paden–Kahan subproblem 1; the parts
    along ``a`` are ignored, so for a noisy ``o`` it is the least-squares angle)."""
    return geo.atan2(geo.triple(a, b, o), geo.dot(b, o) - geo.dot(a, b) * geo.dot(a, o))


def _sp2(a1, a2, b, o):
    """``θ1, θ2`` with ``Rot(a1, θ1) Rot(a2, θ2) b = o`` for unit directions (subproblem 2): of the two
    solutions the one on the side of ``b`` (continuous with zero angles); the nearest where none exists."""
    k = geo.dot(a1, a2)
    det = jnp.maximum(1.0 - k * k, 1e-6)
    a1o, a2b = geo.dot(a1, o), geo.dot(a2, b)
    al = (a1o - k * a2b) / det
    be = (a2b - k * a1o) / det
    g2 = (1.0 - al * al - be * be - 2.0 * al * be * k) / det
    ga = jnp.where(geo.triple(b, a1, a2) < 0, -1.0, 1.0) * jnp.sqrt(jnp.maximum(g2, 0.0))
    c = al * a1 + be * a2 + ga * geo.cross(a1, a2)
    return _sp1(a1, c, o), _sp1(a2, b, c)


def gather_joints(ch: Chains, q, angs):
    """``(n, B)`` joint angles read from per-depth link angles ``angs`` (list over depth of ``(G, B)``)
    where a link holds the joint, else from ``q (n, B)`` (one gather)."""
    rows = np.arange(ch.n)
    g, d = np.nonzero(ch.angle < ch.n)
    rows[ch.angle[g, d]] = ch.n + d * ch.G + g
    return geo.take(jnp.concatenate([q, jnp.stack(angs).reshape((ch.D * ch.G,) + q.shape[1:])]), rows, 0)


def analytic_angles(hand, ch: Chains, params: ChainParams, q0, R, t, logs, y, w, fixed_point: int = 3):
    """Closed-form angles ``(n, B)`` for landmarks ``y (3, 21, B)`` with weights ``w (21, B)``, the
    wrist pose ``R, t, logs`` given. Bones with a masked end keep ``q0 (n, B)``; results are clipped
    to the limits."""
    B = y.shape[-1]
    z = geo.matTvec(R, geo.take(y, ch.kp_of_slot, 1) - t[:, None]) / jnp.exp(logs)  # wrist frame, (3, K·G, B)
    z = z.reshape(3, ch.K, ch.G, B)
    wk = geo.take(w, ch.kp_of_slot, 0).reshape(ch.K, ch.G, B) * ch.slot_used[..., None]
    ang = link_angles(ch, q0, coupled_rows(hand, q0))
    angs = [ang[d] for d in range(ch.D)]
    xyz, O, ax, Oa = (lambda d: params.xyz[:, d, :, None], lambda d: params.O[:, :, d, :, None],
                      lambda d: params.axis[:, d, :, None], lambda d: params.Oa[:, d, :, None])

    def link(angs, d):  # O_d · Rot(a_d, θ_d) (3, 3, G, B)
        return geo.matmul(O(d), geo.rodrigues(ax(d), *geo.sincos(angs[d]))) if ch.has_joint[d] else O(d)

    def walk(angs, F, d0, d1):  # the frame after depth d0 − 1 carried to the frame after depth d1 − 1
        for d in range(d0, d1):
            F = link(angs, d) if F is None else geo.matmul(F, link(angs, d))
        return F

    F, done = None, 0
    for ia, ib, free in ch.bones:
        da, db = int(ch.kp_depth[0, ia]), int(ch.kp_depth[0, ib])
        F = walk(angs, F, done, da)
        done = da
        ok = (wk[ia] > 0) & (wk[ib] > 0)
        dz = z[:, ib] - z[:, ia]
        mimics = [(m, g, d) for m in range(ch.M) for g in range(ch.G) for d in range(da, free[0])
                  if ch.angle[g, d] == ch.n + m]
        Rb = walk(angs, None, free[-1] + 1, db)  # fixed links from the last free joint to the bone's end
        b = geo.unit(xyz(db) if Rb is None else geo.matvec(Rb, xyz(db)))
        O1, a1 = O(free[0]), Oa(free[0])

        def solve_bone(angs, F=F, da=da, free=free, ok=ok, dz=dz, mimics=mimics, b=b, O1=O1, a1=a1):
            angs = list(angs)
            Fj = walk(angs, F, da, free[0])
            o = geo.unit(dz if Fj is None else geo.matTvec(Fj, dz))
            if len(free) == 1:
                th = [_sp1(a1, geo.matvec(O1, b), o)]
            else:  # O1·Rot(α1, θ1)·O2·Rot(α2, θ2)·b = Rot(O1α1, θ1)·Rot(O1O2α2, θ2)·O1O2·b
                th = _sp2(a1, geo.matvec(O1, Oa(free[1])), geo.matvec(geo.matmul(O1, O(free[1])), b), o)
            for d, val in zip(free, th):
                idx = ch.angle[:, d]
                lo, hi = geo.take(hand.lower, idx, 0), geo.take(hand.upper, idx, 0)
                val = jnp.clip(val, lo[:, None], hi[:, None])
                angs[d] = jnp.where(ok, val, angs[d])
            if mimics:
                law = coupled_rows(hand, gather_joints(ch, q0, angs))
                for m, g, d in mimics:
                    angs[d] = angs[d].at[g].set(law[m])
            return tuple(angs)

        if mimics:  # a fixed point: the coupled joint before the bone follows the angles it turns
            angs = list(jax.lax.fori_loop(0, fixed_point, lambda _, a: solve_bone(a), tuple(angs)))
        else:
            angs = list(solve_bone(tuple(angs)))
    return gather_joints(ch, q0, angs)
