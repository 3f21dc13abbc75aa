"""The exact derivative of the fit: the implicit function theorem at a converged solution.

At a solution ``x*`` of ``min_x f(x; θ)`` (``θ``: the landmarks, weights, model leaves and settings),
the gradient in the free variables is zero, ``∇_x f(x*(θ); θ) = 0``, so

    dx* = −H⁻¹ · (∂∇_x f / ∂θ) · dθ,        H = ∇²_x f(x*; θ),

with ``H`` the exact per-frame Hessian of the objective (:func:`wuji_jax.solver.lm.cost`: Huber loss,
limit, prior and soft-coupling terms), not Gauss–Newton's approximation of it. Joints held at a
limit (the gradient pushes them out) leave the system: their derivative is 0, as the solution's.
This is optimistix's ``ImplicitAdjoint`` for a bound-constrained minimum.

The identity only holds where ``x*`` is the optimum, so where a derivative is taken the forward pass
first reaches it (:func:`refine`): projected Newton steps with that same Hessian, from the
Levenberg–Marquardt solution, until the Newton decrement is below rounding
(:func:`decrement_tolerance`); they converge quadratically. The derivative's forward values are those
of the refined solution.

A frame whose refinement did not converge, whose reduced Hessian is not positive definite, or with a
joint at a limit whose multiplier is zero (the solution is not differentiable there) gets a zero
derivative and is reported (``exact`` False → :data:`~wuji_jax.solver.config.FLAG_NO_DERIVATIVE`).

Variables (per frame, ``nz = n + M_soft + 7``): the angles ``q``, under soft coupling the coupled
angles, then a rotation increment ``φ`` (``R exp(φ)``), a translation increment ``δ``
(``t + R·δ·REF``) and ``σ`` (``log s``): the layout of :func:`wuji_jax.solver.lm.step`'s increments.
Layout: components first, frames last.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..hand import geometry as geo
from ..hand.chains import ChainParams, coupled_rows
from ..hand.model import HandModel
from .config import SolverConfig
from .lm import REF, Problem, Structure, Variables, residuals, cost, evaluate, huber, keypoints, loop

__all__ = ["NEWTON_STEPS", "DERIVATIVE_LM_ITERATIONS", "DERIVATIVE_LM_TOLERANCE", "minimise", "Refined", "retract", "objective", "gradient_and_hessian", "refine", "tangent",
           "decrement_tolerance"]

#: most projected Newton steps :func:`refine` takes from the Levenberg–Marquardt solution
NEWTON_STEPS = 24
#: where a derivative is taken, Levenberg–Marquardt first runs up to this many iterations, to this
#: tolerance (:class:`~wuji_jax.SolverConfig`'s ``tolerance``), before :func:`refine`'s Newton steps
DERIVATIVE_LM_ITERATIONS = 40
DERIVATIVE_LM_TOLERANCE = 1e-8
_LAM0 = 1e-9  # the damping of a plain Newton step (relative to the Hessian's mean diagonal)
_LOG_S = (float(np.log(0.1)), float(np.log(10.0)))  # the log scale's bounds (lm._apply)


def _sizes(st: Structure, x: Variables) -> tuple[int, int]:
    n = x.q.shape[0]
    m = x.rot.shape[0] if st.soft else 0
    return n, m


def retract(st: Structure, x: Variables, z) -> Variables:
    """``x`` moved by the increments ``z (nz, B)`` (angles, soft coupled angles, ``φ``, ``δ``, ``σ``)."""
    n, m = _sizes(st, x)
    phi, delta, sigma = z[n + m:n + m + 3], z[n + m + 3:n + m + 6], z[n + m + 6]
    return Variables(q=x.q + z[:n], rot=x.rot + z[n:n + m] if m else x.rot,
                     R=geo.matmul(x.R, geo.so3_exp(phi)), t=x.t + geo.matvec(x.R, delta) * REF,
                     logs=x.logs + sigma)


def objective(theta, st: Structure, x: Variables, z):
    """The solver's objective ``(B,)`` at ``retract(x, z)``; ``theta = (hand, params, prob, cfg)``."""
    hand, params, prob, cfg = theta
    xz = retract(st, x, z)
    return cost(hand, xz, keypoints(hand, st, params, xz), prob, cfg, st.soft)


def _gradient(theta, st, x, z):
    # frames are independent: the gradient of the sum holds each frame's own gradient
    return jax.grad(lambda z: jnp.sum(objective(theta, st, x, z)))(z)


def _layout(st: Structure, nz: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Static tables of the block-arrow Hessian in the increments: the finger ``(nz,)`` (−1: a pose
    increment) and slot of each increment, and the directions ``(V, nz)`` that set slot ``v`` of every
    finger at once."""
    ch = st.ch
    pose0 = nz - 7
    chain, slot = np.full(nz, -1), np.zeros(nz, int)
    for g in range(ch.G):
        for v in range(ch.V):
            j = int(ch.var[g, v])
            if j < pose0:
                chain[j], slot[j] = g, v
    dirs = np.zeros((ch.V, nz))
    dirs[slot[:pose0], np.arange(pose0)] = 1.0
    return chain, slot, dirs


def _blocks(theta, st: Structure, x: Variables):
    """The chains' keypoints ``kp (3, K, G, B)`` at ``x``, and the data term's gradient and exact Hessian
    in block-arrow form there (the increments at 0): per finger ``A (V, V, G, B)``, ``Bm (V, 7, G, B)``, ``gq (V, G, B)``; the pose ``C (7, 7, B)``,
    ``gp (7, B)``. With ``e = u − z`` (:func:`~.lm.cost`) and ``c = w·ρ'(|e|)·ê`` per keypoint,
    ``H = Σ Dᵀ M D + Σ c·∇²e``: ``D = de/d(variables) = (s/REF·J, −[z]×, I, u)``, ``M = w·∇²ρ`` (the
    Huber curvature, ``ρ'/|e|·(I − êêᵀ)`` on its linear part), and the second derivatives of ``e``:
    the model's (forward mode through :func:`~.lm.evaluate`'s analytic Jacobian, one direction per
    slot for every finger at once: the fingers share no variable), ``∂²u/∂x∂σ = s/REF·J``,
    ``∂²u/∂σ² = u`` and the rotation's (``z = exp(−φ)(z₀ − δ)``)."""
    hand, params, prob, cfg = theta
    dtype, B = x.logs.dtype, x.logs.shape[-1]
    n, m = _sizes(st, x)
    nz = n + m + 7
    _, _, dirs = _layout(st, nz)

    def jac(qr):
        return evaluate(hand, st, params, x._replace(q=qr[:n], rot=qr[n:] if m else x.rot))

    qr = jnp.concatenate([x.q, x.rot]) if m else x.q
    kp, J = jac(qr)

    def along(d):  # d J / d(slot v of every finger) ; (3, K, V, G, B)
        return jax.jvp(lambda a: jac(a)[1], (qr,), (jnp.broadcast_to(d[:, None], qr.shape),))[1]

    dJ = jax.vmap(along)(jnp.asarray(dirs[:, :n + m], dtype))  # (V, 3, K, V, G, B)
    sc = jnp.exp(x.logs) / REF
    u, z, z0 = residuals(x, kp, prob)
    delta = cfg.huber_delta / REF

    def per_point(e, w):  # c = w ρ'(r) ê·r/r = w W e, and M = w W (I − (1 − quad) ê êᵀ) as (W, k·ê)
        r2 = geo.dot(e, e)
        _, W = huber(r2, delta)
        lin = jnp.sqrt(jnp.maximum(r2, 1e-30)) > delta
        e_hat = e / jnp.sqrt(jnp.maximum(r2, 1e-30))
        return w * W, jnp.where(lin, 1.0, 0.0), e_hat

    e = u - z  # (3, K, G, B)
    Wk, lin, eh = per_point(e, prob.w)
    e0 = -z0  # (3, r, B)
    W0, lin0, eh0 = per_point(e0, prob.w_root)
    c, c0 = Wk * e, W0 * e0

    def metric(Wk, lin, eh, D):  # M D for columns D (3, P, ...) → (3, P, ...)
        return Wk[None, None] * (D - lin[None, None] * eh[:, None] * geo.dot(eh[:, None], D)[None])

    Jq = J * sc  # (3, K, V, G, B)
    MJ = jnp.moveaxis(metric(Wk, lin, eh, jnp.moveaxis(Jq, 2, 1)), 1, 2)  # (3, K, V, G, B)
    A = geo.total(Jq[:, :, :, None] * MJ[:, :, None], (0, 1))  # (V, V, G, B)
    A = A + sc * jnp.moveaxis(geo.total(c[None, :, :, None] * dJ, (1, 2)), 0, 1)  # Σ c·∂²u (rows v', cols v)
    gq = geo.total(Jq * c[:, :, None], (0, 1))  # (V, G, B)

    def pose_columns(z, u):  # D's pose columns (3, 7, ...): e_a × z, I, u
        eye = jnp.eye(3, dtype=dtype).reshape((3, 3) + (1,) * (z.ndim - 1))
        rot = jnp.stack([geo.cross(jnp.broadcast_to(eye[:, a], z.shape), z) for a in range(3)], 1)
        return jnp.concatenate([rot, jnp.broadcast_to(eye, (3, 3) + z.shape[1:]), u[:, None]], 1)

    Dp = pose_columns(z, u)  # (3, 7, K, G, B)
    Bm = geo.total(MJ[:, :, :, None] * jnp.moveaxis(Dp, 1, 2)[:, :, None], (0, 1))  # (V, 7, G, B)
    Bm = Bm.at[:, 6].add(gq)  # ∂²u/∂x∂σ = s/REF·J: Σ c·s/REF·J, the data gradient
    Dp0 = pose_columns(z0, jnp.zeros_like(z0))  # (3, 7, r, B)
    MDp, MDp0 = metric(Wk, lin, eh, Dp), metric(W0, lin0, eh0, Dp0)
    C = geo.total(Dp[:, :, None] * MDp[:, None], (0, 3, 4)) + geo.total(Dp0[:, :, None] * MDp0[:, None], (0, 3))
    gp = geo.total(Dp * c[:, None], (0, 2, 3)) + geo.total(Dp0 * c0[:, None], (0, 2))
    # the second derivatives in the pose: e = u − exp(−φ)(z₀ − δ): φφ: −(½(c_a z_b + c_b z_a) − c·z δ_ab),
    # φδ: [c]× (and its transpose), σσ: c·u
    cz = geo.total(c[:, None] * z[None], (2, 3)) + geo.total(c0[:, None] * z0[None], 2)  # (3, 3, B)
    eye3 = jnp.eye(3, dtype=dtype)[..., None]
    Cpp = -(0.5 * (cz + jnp.swapaxes(cz, 0, 1)) - jnp.trace(cz)[None, None] * eye3)
    Cpd = geo.skew(geo.total(c, (1, 2)) + geo.total(c0, 1))
    Css = geo.total(c * u, (0, 1, 2))
    zero31 = jnp.zeros((3, 1, B), dtype)
    C2 = jnp.concatenate([jnp.concatenate([Cpp, Cpd, zero31], 1),
                          jnp.concatenate([jnp.swapaxes(Cpd, 0, 1), jnp.zeros((3, 3, B), dtype), zero31], 1),
                          jnp.concatenate([jnp.zeros((1, 6, B), dtype), Css[None, None]], 1)], 0)
    return kp, A, Bm, gq, C + C2, gp


def _penalty_terms(hand, st: Structure, x: Variables, prob: Problem, cfg):
    """The penalties' gradient ``(n + m, B)`` and Hessian ``(n + m, n + m, B)`` in the angles (and soft
    coupled angles): limits and prior on the diagonal, soft coupling's residual
    ``r = rot − law(q)`` as ``c·(∇r ∇rᵀ + r·∇²r)`` (the law's cross term is its only curvature)."""
    n, m = _sizes(st, x)
    dtype, B = x.logs.dtype, x.logs.shape[-1]
    viol = jnp.maximum(x.q - hand.upper[:, None], 0.0) + jnp.minimum(x.q - hand.lower[:, None], 0.0)
    g = cfg.limit_weight * viol + cfg.prior_weight * (x.q - prob.q_prior)
    d = jnp.where(viol != 0, cfg.limit_weight, 0.0) + cfg.prior_weight
    if m:
        g = jnp.concatenate([g, jnp.zeros((m, B), dtype)])
        d = jnp.concatenate([d, jnp.zeros((m, B), dtype)])
    H = jnp.eye(n + m, dtype=dtype)[..., None] * d[None]
    if st.soft and m:
        k = hand.coupling.astype(dtype)
        r = x.rot - coupled_rows(hand, x.q)
        for i, (src, sec) in enumerate(hand.mimic_sources):
            row = jnp.zeros((n + m, B), dtype).at[n + i].set(1.0)
            row = row.at[src].add(-(k[i, 0] + k[i, 2] * x.q[sec])).at[sec].add(-(k[i, 1] + k[i, 2] * x.q[src]))
            g = g + cfg.coupling_weight * r[i] * row
            cross = cfg.coupling_weight * r[i] * -k[i, 2]
            H = H + cfg.coupling_weight * row[:, None] * row[None]
            H = H.at[src, sec].add(cross).at[sec, src].add(cross)
    return g, H


def gradient_and_hessian(theta, st: Structure, x: Variables):
    """The objective ``(B,)``, its gradient ``g (nz, B)`` and exact Hessian ``H (nz, nz, B)`` in the
    increments at ``x``: the data term's by :func:`_blocks` (fingers do not meet: the fingers' blocks
    on the diagonal, the pose's row and column), the penalties' by :func:`_penalty_terms`."""
    hand, params, prob, cfg = theta
    ch = st.ch
    n, m = _sizes(st, x)
    nz, B = n + m + 7, x.logs.shape[-1]
    dtype = x.logs.dtype
    G, V, P = ch.G, ch.V, ch.G * ch.V
    chain, slot, _ = _layout(st, nz)
    kp, A, Bm, gq, C, gp = _blocks(theta, st, x)
    # in finger-major slot order (g·V + v, then the pose), then taken to the increments' order
    eye = jnp.eye(G, dtype=dtype)
    Hff = (jnp.moveaxis(A, 2, 0)[:, :, None] * eye[:, None, :, None, None]).reshape(P, P, B)
    Bf = jnp.moveaxis(Bm, 2, 0).reshape(P, 7, B)
    Hs = jnp.concatenate([jnp.concatenate([Hff, Bf], 1), jnp.concatenate([jnp.swapaxes(Bf, 0, 1), C], 1)], 0)
    pose0 = nz - 7
    pos = np.concatenate([chain[:pose0] * V + slot[:pose0], P + np.arange(7)])
    H = geo.take(geo.take(Hs, pos, 0), pos, 1)
    g = geo.take(jnp.concatenate([jnp.moveaxis(gq, 1, 0).reshape(P, B), gp]), pos, 0)
    g_pen, H_pen = _penalty_terms(hand, st, x, prob, cfg)
    H = H.at[:pose0, :pose0].add(H_pen)
    g = g.at[:pose0].add(g_pen)
    c = cost(hand, x, kp, prob, cfg, st.soft)  # the objective at the increments' 0
    return c, g, H


def _bounds(hand, st: Structure, x: Variables, cfg):
    """Per increment ``(nz, B)``: at the lower bound, at the upper bound (angles: the joint limits;
    ``σ``: the scale's bounds, or fixed when the scale is not estimated)."""
    _, m = _sizes(st, x)
    no = jnp.zeros((m + 6, x.logs.shape[-1]), bool)
    fixed = ~jnp.asarray(cfg.estimate_scale, bool)
    lo = jnp.concatenate([x.q <= hand.lower[:, None], no, ((x.logs <= _LOG_S[0]) | fixed)[None]])
    hi = jnp.concatenate([x.q >= hand.upper[:, None], no, ((x.logs >= _LOG_S[1]) | fixed)[None]])
    return lo, hi


def _free(lo, hi, g):
    """Free increments: not at a bound that the descent direction −g pushes past."""
    return ~((lo & (g > 0)) | (hi & (g < 0)) | (lo & hi))


def _reduced(H, free):
    """``H`` with the rows and columns of held increments replaced by the identity, frames first
    ``(B, nz, nz)``."""
    Hb = jnp.moveaxis(H, -1, 0)
    fb = free.T
    both = fb[:, :, None] & fb[:, None, :]
    eye = jnp.eye(H.shape[0], dtype=H.dtype)
    return jnp.where(both, Hb, eye)


def _solve(L, r):
    """``(L Lᵀ)⁻¹ r`` for Cholesky factors ``L (B, nz, nz)`` and ``r (nz, B)`` → ``(nz, B)``."""
    y = jax.lax.linalg.triangular_solve(L, r.T[:, :, None], left_side=True, lower=True)
    x = jax.lax.linalg.triangular_solve(L, y, left_side=True, lower=True, transpose_a=True)
    return x[:, :, 0].T


def decrement_tolerance(cost, dtype):
    """The Newton decrement ``gᵀH⁻¹g`` below which a frame counts as converged: rounding's share of
    the cost (``100·ε·(1 + cost)``; the cost is in units of (1 cm)²)."""
    return 100 * jnp.finfo(dtype).eps * (1 + jnp.abs(cost))


class Refined(NamedTuple):
    """:func:`refine`'s result: the variables, their objective ``(B,)``, gradient ``(nz, B)``, the
    Cholesky factor of the Hessian reduced to the free increments ``L (B, nz, nz)`` (the identity on
    frames without an exact derivative), the free increments ``(nz, B)``, Newton steps taken ``(B,)``,
    converged ``(B,)`` and the frames whose solution has an exact derivative ``(B,)``."""

    x: Variables
    cost: jax.Array
    g: jax.Array
    L: jax.Array
    free: jax.Array
    steps: jax.Array
    converged: jax.Array
    exact: jax.Array


class _State(NamedTuple):
    x: Variables
    cost: jax.Array
    g: jax.Array
    H: jax.Array
    lam: jax.Array
    nu: jax.Array
    steps: jax.Array
    converged: jax.Array
    active: jax.Array
    i: jax.Array


def refine(theta, st: Structure, x: Variables, active) -> Refined:
    """Projected Newton from ``x`` (within the limits) on the frames where ``active (B,)``, with the
    exact Hessian, until the Newton decrement in the free increments is below
    :func:`decrement_tolerance`, at most :data:`NEWTON_STEPS` steps. A step that does not lower the
    cost (or meets a Hessian that is not positive definite) is damped (``H + λ·mean(diag H)·I``,
    Nielsen's rule) and tried again; one whose quadratic model predicted the decrease well returns to
    the plain Newton step. Pass 0 evaluates the start, so the program holds one Hessian evaluation;
    each pass tests the point it ends at, so a frame converged at the start costs that one pass."""
    hand, _, _, cfg = theta
    dtype = x.logs.dtype
    B = x.logs.shape[-1]
    n, m = _sizes(st, x)
    nz = n + m + 7
    eps = jnp.finfo(dtype).eps
    eye = jnp.eye(nz, dtype=dtype)

    def project(x):
        return x._replace(q=jnp.clip(x.q, hand.lower[:, None], hand.upper[:, None]),
                          logs=jnp.clip(x.logs, *_LOG_S))

    def system(x, g, H):  # the free increments, the gradient in them and the reduced Hessian
        lo, hi = _bounds(hand, st, x, cfg)
        free = _free(lo, hi, g)
        Hr = _reduced(H, free)
        scale = jnp.maximum(jnp.mean(jnp.abs(jnp.diagonal(Hr, 0, 1, 2)), -1), eps)  # (B,)
        return free, jnp.where(free, g, 0.0), Hr, scale

    def newton(free, gf, Hr, scale, lam):  # the step (H + λ·scale·I)⁻¹(−g) in the free increments; PD or not
        L = jnp.linalg.cholesky(Hr + (lam * scale)[:, None, None] * eye)
        pd = jnp.all(jnp.isfinite(L), (1, 2))
        dz = -_solve(jnp.where(pd[:, None, None], L, eye), gf)
        return jnp.where(free & pd, dz, 0.0), pd

    def body(s: _State) -> _State:
        first = s.i == 0
        free, gf, Hr, scale = system(s.x, s.g, s.H)
        dz, pd = newton(free, gf, Hr, scale, s.lam)
        dec = -geo.total(gf * dz, 0)
        move = ~first & s.active & pd
        trial = project(retract(st, s.x, jnp.where(move, dz, 0.0)))
        c, g, H = gradient_and_hessian(theta, st, trial)
        ok = first | (move & jnp.isfinite(c) & (c <= s.cost + 4 * eps * jnp.abs(s.cost)))
        # Nielsen's rule on the gain ratio ρ (actual over predicted decrease of the quadratic model);
        # ρ > 0.75: the plain Newton step again (its quadratic convergence)
        Hdz = geo.total(jnp.moveaxis(Hr, 0, -1) * dz[None], 1)  # (nz, B)
        pred = dec - 0.5 * geo.total(dz * Hdz, 0)
        gain = (s.cost - c) / jnp.maximum(pred, jnp.finfo(dtype).tiny)
        up = jnp.where(ok, jnp.maximum(1 / 3, 1 - (2 * gain - 1) ** 3), s.nu)
        lam = jnp.where(first | (ok & (gain > 0.75)), _LAM0, jnp.maximum(s.lam * up, jnp.where(ok, _LAM0, 1e-3)))
        sel = lambda new, old: jnp.where(ok, new, old)  # noqa: E731 (frames on the last axis)
        x1, c1, g1, H1 = jax.tree_util.tree_map(sel, trial, s.x), sel(c, s.cost), sel(g, s.g), sel(H, s.H)
        # converged where the point reached has a Newton decrement gᵀH⁻¹g (undamped: a damped step
        # understates it along flat directions) below rounding
        free1, gf1, Hr1, scale1 = system(x1, g1, H1)
        dz0, pd0 = newton(free1, gf1, Hr1, scale1, jnp.full_like(lam, _LAM0))
        done = pd0 & (-geo.total(gf1 * dz0, 0) <= decrement_tolerance(c1, dtype))
        counted = s.active & ~first
        return _State(x=x1, cost=c1, g=g1, H=H1, lam=jnp.where(s.active | first, lam, s.lam),
                      nu=jnp.where(ok, 2.0, s.nu * 2), steps=s.steps + counted.astype(jnp.int32),
                      converged=s.converged | (s.active & done), active=s.active & ~done & (lam < 1e12), i=s.i + 1)

    s = _State(x=project(x), cost=jnp.full((B,), jnp.inf, dtype), g=jnp.zeros((nz, B), dtype),
               H=jnp.zeros((nz, nz, B), dtype), lam=jnp.zeros((B,), dtype), nu=jnp.full((B,), 2.0, dtype),
               steps=jnp.zeros((B,), jnp.int32), converged=~active, active=active, i=jnp.zeros((), jnp.int32))
    s = jax.lax.while_loop(lambda s: (s.i == 0) | ((s.i <= NEWTON_STEPS) & jnp.any(s.active)), body, s)
    lo, hi = _bounds(hand, st, s.x, cfg)
    free = _free(lo, hi, s.g)
    # a joint at a limit with no force holding it there: the solution is not differentiable
    kink = jnp.any((lo | hi) & ~(lo & hi) & (jnp.abs(s.g) <= jnp.sqrt(eps) * (1 + jnp.abs(s.cost))), 0)
    L = jnp.linalg.cholesky(_reduced(s.H, free))
    pd = jnp.all(jnp.isfinite(L), (1, 2))
    exact = ~active | (s.converged & pd & ~kink)
    L = jnp.where((exact & pd)[:, None, None], L, eye)
    return Refined(s.x, s.cost, s.g, L, free, s.steps, s.converged & active, exact)


def tangent(theta, dtheta, st: Structure, r: Refined):
    """The derivative of the solution ``dx`` (a :class:`~.lm.Variables` of tangents) along ``dtheta``
    at the refined solution ``r``: ``dz = −H⁻¹·(∂g/∂θ·dθ)`` in the free increments (0 where held, and
    on frames without an exact derivative), mapped through :func:`retract`."""
    x = r.x
    n, m = _sizes(st, x)
    z = jnp.zeros((n + m + 7, x.logs.shape[-1]), x.logs.dtype)
    L, ok = jax.lax.stop_gradient(r.L), r.exact
    _, b = jax.jvp(lambda th: _gradient(th, st, x, z), (theta,), (dtheta,))  # ∂g/∂θ·dθ (nz, B)
    dz = -_solve(L, jnp.where(r.free & ok, b, 0.0))
    dz = jnp.where(r.free & ok, dz, 0.0)
    _, dx = jax.jvp(lambda z: retract(st, x, z), (z,), (dz,))
    return dx


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _minimise(st: Structure, theta, x0: Variables, active):
    x, iterations, converged = loop(st, theta, x0, active)
    # every frame's derivative is exact where none is taken; the flag is computed from ``converged``
    # so that under vmap it is batched as the rule's is (a constant would not be, and JAX then failed
    # to batch jvp(vmap(solve)) inside the jitted solver)
    return x, iterations, converged, converged | ~converged


@_minimise.defjvp
def _minimise_jvp(st, primals, tangents):
    theta, x0, active = primals
    # first Levenberg–Marquardt further on (the same loop, other traced settings): near the optimum,
    # where the Newton steps converge quadratically and the joints at limits have settled
    hand, params, prob, cfg = theta
    deeper = cfg.replace(iterations=jnp.maximum(cfg.iterations, DERIVATIVE_LM_ITERATIONS),
                         tolerance=jnp.minimum(cfg.tolerance, DERIVATIVE_LM_TOLERANCE))
    x, iterations, converged = loop(st, (hand, params, prob, deeper), x0, active)
    with geo.summing(geo.REDUCE):  # a smaller program (the derivative runs at most a few steps)
        r = refine(theta, st, x, active)
        dx = tangent(theta, tangents[0], st, r)
    zero = lambda a: np.zeros(a.shape, jax.dtypes.float0)  # noqa: E731
    out = (r.x, iterations + r.steps, converged | r.converged, r.exact)
    return out, (dx, zero(iterations), zero(converged), zero(r.exact))


def minimise(hand: HandModel, st: Structure, params: ChainParams, prob: Problem, cfg: SolverConfig, x0: Variables,
             active):
    """Levenberg–Marquardt (:func:`wuji_jax.solver.lm.loop`) from ``x0`` on the frames where
    ``active (B,)``: the variables, the iterations each frame ran, whether it converged and whether
    its derivative is exact ``(B,)`` (always True where no derivative is taken).

    Differentiable in ``hand``, ``params``, ``prob`` and ``cfg`` by the implicit function theorem
    (module docstring); where a derivative is taken the solution is first refined by
    :func:`refine`, whose Newton steps count as iterations; ``x0`` is only a start."""
    x0 = jax.lax.stop_gradient(x0)
    return _minimise(st, (hand, params, prob, cfg), x0, active)
