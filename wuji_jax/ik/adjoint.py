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
from ..hand.chains import ChainParams
from ..hand.model import HandModel
from .config import SolverConfig
from .lm import REF, Problem, Structure, Variables, cost, keypoints, loop

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


def gradient_and_hessian(theta, st: Structure, x: Variables):
    """The objective ``(B,)``, its gradient ``g (nz, B)`` and exact Hessian ``H (nz, nz, B)`` in the
    increments at ``x`` (forward over reverse, one direction per variable for every frame at once)."""
    n, m = _sizes(st, x)
    nz, B = n + m + 7, x.logs.shape[-1]
    z = jnp.zeros((nz, B), x.logs.dtype)
    c = objective(theta, st, x, z)
    g, hvp = jax.linearize(lambda z: _gradient(theta, st, x, z), z)
    basis = jnp.broadcast_to(jnp.eye(nz, dtype=z.dtype)[:, :, None], (nz, nz, B))
    return c, g, jax.vmap(hvp)(basis)


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
    cost (or meets a Hessian that is not positive definite) is damped (``H + λ·mean(diag H)·I``, λ
    ×10) and tried again; an accepted one lowers λ tenfold. Iteration 0 evaluates the start, so the
    program holds one Hessian evaluation."""
    hand, _, _, cfg = theta
    dtype = x.logs.dtype
    B = x.logs.shape[-1]
    n, m = _sizes(st, x)
    nz = n + m + 7
    eps = jnp.finfo(dtype).eps

    def project(x):
        return x._replace(q=jnp.clip(x.q, hand.lower[:, None], hand.upper[:, None]),
                          logs=jnp.clip(x.logs, *_LOG_S))

    def body(s: _State) -> _State:
        first = s.i == 0
        lo, hi = _bounds(hand, st, s.x, cfg)
        free = _free(lo, hi, s.g)
        gf = jnp.where(free, s.g, 0.0)
        Hr = _reduced(s.H, free)
        scale = jnp.maximum(jnp.mean(jnp.abs(jnp.diagonal(Hr, 0, 1, 2)), -1), eps)  # (B,)
        eye = jnp.eye(nz, dtype=dtype)

        def newton(lam):  # the step (H + λ·scale·I)⁻¹(−g) in the free increments; PD or not
            L = jnp.linalg.cholesky(Hr + (lam * scale)[:, None, None] * eye)
            pd = jnp.all(jnp.isfinite(L), (1, 2))
            dz = -_solve(jnp.where(pd[:, None, None], L, eye), gf)
            return jnp.where(free & pd, dz, 0.0), pd

        # converged: the Newton decrement gᵀH⁻¹g (undamped: a damped step understates it along flat
        # directions) below rounding
        dz0, pd0 = newton(jnp.full_like(s.lam, _LAM0))
        done = ~first & pd0 & (-geo.total(gf * dz0, 0) <= decrement_tolerance(s.cost, dtype))
        dz, pd = newton(s.lam)
        dec = -geo.total(gf * dz, 0)
        move = ~first & s.active & ~done & pd
        trial = project(retract(st, s.x, jnp.where(move, dz, 0.0)))
        c, g, H = gradient_and_hessian(theta, st, trial)
        ok = first | (move & jnp.isfinite(c) & (c <= s.cost + 4 * eps * jnp.abs(s.cost)))
        # Nielsen's rule on the gain ratio ρ (actual over predicted decrease of the quadratic model)
        Hdz = geo.total(jnp.moveaxis(Hr, 0, -1) * dz[None], 1)  # (nz, B)
        pred = dec - 0.5 * geo.total(dz * Hdz, 0)
        gain = (s.cost - c) / jnp.maximum(pred, jnp.finfo(dtype).tiny)
        # (a model that predicts well, ρ > 0.75, drops λ tenfold: Newton's quadratic convergence back soon)
        up = jnp.where(ok, jnp.where(gain > 0.75, 0.1, jnp.maximum(1 / 3, 1 - (2 * gain - 1) ** 3)), s.nu)
        lam = jnp.where(first, _LAM0, jnp.maximum(s.lam * up, jnp.where(ok, _LAM0, 1e-3)))
        sel = lambda new, old: jnp.where(ok, new, old)  # noqa: E731 (frames on the last axis)
        counted = s.active & ~first & ~done
        return _State(x=jax.tree_util.tree_map(sel, trial, s.x), cost=sel(c, s.cost), g=sel(g, s.g),
                      H=sel(H, s.H), lam=jnp.where(s.active | first, lam, s.lam),
                      nu=jnp.where(ok, 2.0, s.nu * 2), steps=s.steps + counted.astype(jnp.int32),
                      converged=s.converged | (s.active & done), active=s.active & ~done & (lam < 1e12), i=s.i + 1)

    s = _State(x=project(x), cost=jnp.full((B,), jnp.inf, dtype), g=jnp.zeros((nz, B), dtype),
               H=jnp.zeros((nz, nz, B), dtype), lam=jnp.zeros((B,), dtype), nu=jnp.full((B,), 2.0, dtype), steps=jnp.zeros((B,), jnp.int32),
               converged=~active, active=active, i=jnp.zeros((), jnp.int32))
    # NEWTON_STEPS steps and one more pass to test the last step's result
    s = jax.lax.while_loop(lambda s: (s.i == 0) | ((s.i <= NEWTON_STEPS + 1) & jnp.any(s.active)), body, s)
    lo, hi = _bounds(hand, st, s.x, cfg)
    free = _free(lo, hi, s.g)
    # a joint at a limit with no force holding it there: the solution is not differentiable
    kink = jnp.any((lo | hi) & ~(lo & hi) & (jnp.abs(s.g) <= jnp.sqrt(eps) * (1 + jnp.abs(s.cost))), 0)
    L = jnp.linalg.cholesky(_reduced(s.H, free))
    pd = jnp.all(jnp.isfinite(L), (1, 2))
    exact = ~active | (s.converged & pd & ~kink)
    L = jnp.where((exact & pd)[:, None, None], L, jnp.eye(nz, dtype=dtype))
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
    return x, iterations, converged, jnp.ones_like(converged)


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
