"""Levenberg–Marquardt over the joint angles, the wrist pose and the hand scale.

Model of an observation (input frame, metres): ``y_k ≈ s R m_k(q) + t``. Residuals are taken in the
wrist frame, in units of :data:`REF` (1 cm): ``e_k = s m_k(q)/REF − Rᵀ(y_k − t)/REF``, which has the
length of the landmark error and simple derivatives. The variables are the angles ``q`` (and under
soft coupling the coupled angle), a rotation increment ``φ`` (``R ← R exp(φ)``), a translation
increment ``δ`` (``t ← t + R δ·REF``) and ``σ = log s``.

The pieces, each a pure function of named pytrees:

* :class:`Problem`: the landmarks and weights of a batch in the chains' layout, the priors;
* :class:`Variables`, :class:`LMState`: what the loop carries;
* :func:`cost`: the objective, Σ w·Huber(|e|) + limit, prior and soft-coupling penalties (the one
  :func:`wuji_jax.landmark_loss` evaluates too);
* :func:`normal_equations`: the Gauss–Newton system. Each finger's keypoints depend only on its own
  joints and on the pose, so the matrix is block-arrow: ``G`` finger blocks ``(V, V)``, their
  couplings to the pose ``(V, 7)`` and the pose block ``(7, 7)``;
* :func:`gauss_newton_step`: the damped step, by a Schur complement over the finger blocks (``G``
  Cholesky factorisations of ``V × V`` and one of ``7 × 7`` per frame);
* :func:`step`: one LM iteration with Nielsen's damping rule and the stopping test. The angles stay
  within their limits: the trial point is projected onto them, and a joint at a limit that the step
  would push past it is held there for the step (its row and column leave the system: Bertsekas'
  projected Newton method, 1982). As a penalty alone, with no curvature at its edge, a limit made
  the first steps of frames with joints at it overshoot and be rejected;
* :func:`loop`: the loop (``lax.while_loop``: a batch stops as soon as every frame has
  converged or stalled, at the latest after ``iterations``). Its iteration 0 evaluates the start, so
  that the keypoints and Jacobian are written once in the program, inside the loop.

Derivatives: :func:`loop` is not differentiated; :func:`wuji_jax.solver.adjoint.minimise` runs it
and gives the exact implicit-function derivative of its solution.

Layout: components first, frames last (:mod:`wuji_jax.chains`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..hand import geometry as geo
from ..hand.chains import ChainParams, Chains, coupled_rows, fk, fk_variables, link_angles
from ..hand.model import HandModel
from .config import SolverConfig

__all__ = ["REF", "Structure", "Problem", "Variables", "LMState", "evaluate", "residuals", "penalty", "cost", "normal_equations",
           "gauss_newton_step", "step", "loop", "chol_solve", "huber"]

REF = 0.01  #: metres: residuals are measured in units of 1 cm inside the solver
_LOG_S = (float(np.log(0.1)), float(np.log(10.0)))  # bounds of the log scale


class Problem(NamedTuple):
    """One batch's data, in the chains' layout.

    Attributes:
        y: ``(3, K, G, B)`` landmarks of the chains' keypoints, input frame, metres (0 where missing).
        w: ``(K, G, B)`` their weights (0: missing or padding).
        y_root: ``(3, r, B)`` landmarks on the root link (the wrist).
        w_root: ``(r, B)`` their weights.
        q_prior: ``(n, B)`` angles the prior pulls towards.
        rot_prior: ``(M, B)`` coupled angles at ``q_prior`` (soft coupling's start).
        one: ``()`` 1.0 computed from the input, so that XLA cannot fold it (see :func:`_stored`).
    """

    y: jax.Array
    w: jax.Array
    y_root: jax.Array
    w_root: jax.Array
    q_prior: jax.Array
    rot_prior: jax.Array
    one: jax.Array


class Variables(NamedTuple):
    """What the solver fits: ``q (n, B)`` radians, ``rot (M, B)`` coupled angles (followed by the law
    under hard coupling), ``R (3, 3, B)``, ``t (3, B)`` metres, ``logs (B,)``."""

    q: jax.Array
    rot: jax.Array
    R: jax.Array
    t: jax.Array
    logs: jax.Array


class LMState(NamedTuple):
    """The loop's carry: the variables with their keypoints ``kp (3, K, G, B)``, Jacobian ``J``
    (d keypoint / d variable, ``(3, K, V, G, B)``, :func:`evaluate`) and ``cost (B,)``; damping
    ``lam (B,)`` and its rejection factor ``nu (B,)``; per frame the iterations run, whether it converged and whether it is still ``active``; the loop's count ``i``
    (0: the start's evaluation, then the LM iterations 1, 2, …; see :func:`step`)."""

    x: Variables
    kp: jax.Array
    J: jax.Array
    cost: jax.Array
    lam: jax.Array
    nu: jax.Array
    iterations: jax.Array
    converged: jax.Array
    active: jax.Array
    i: jax.Array


class Structure(NamedTuple):
    """What the kernel's structure depends on (hashable)."""

    ch: Chains
    soft: bool


def huber(r2, delta):
    """Huber ρ of the distance ``r`` given ``r²`` (quadratic part ``r²/2``) and the IRLS weight ρ'(r)/r."""
    r = jnp.sqrt(jnp.maximum(r2, 1e-30))
    quad = r <= delta
    return jnp.where(quad, 0.5 * r2, delta * (r - 0.5 * delta)), jnp.where(quad, 1.0, delta / r)


def _coupled(hand, x: Variables, soft: bool):
    return x.rot if soft else coupled_rows(hand, x.q)


def keypoints(hand, st: Structure, params: ChainParams, x: Variables):
    """The chains' keypoints ``kp (3, K, G, B)`` at ``x`` (with their Jacobian: :func:`evaluate`)."""
    return fk(params, st.ch, link_angles(st.ch, x.q, _coupled(hand, x, st.soft)), jacobian=False)[0]


def evaluate(hand, st: Structure, params: ChainParams, x: Variables):
    """The chains' keypoints ``kp (3, K, G, B)`` at ``x`` and their derivatives in the solver's
    variables ``J (3, K, V, G, B)`` (:func:`wuji_jax.chains.fk_variables`): what an LM step needs
    of the model. The loop carries this Jacobian rather than the link Jacobian ``(3, K, D, G, B)``:
    ``V`` = 4 variables per chain against ``D`` = 7 links."""
    return fk_variables(hand, params, st.ch, x.q, _coupled(hand, x, st.soft), st.soft)


def residuals(x: Variables, kp, prob: Problem):
    """``u = s·kp/REF``, ``z = Rᵀ(y − t)/REF`` ``(3, K, G, B)`` and the root's ``z0 (3, r, B)``."""
    u = kp * (jnp.exp(x.logs) / REF)
    z = geo.matTvec(x.R, prob.y - x.t[:, None, None]) / REF
    z0 = geo.matTvec(x.R, prob.y_root - x.t[:, None]) / REF
    return u, z, z0


def penalty(hand, x: Variables, prob: Problem, cfg: SolverConfig, soft: bool):
    viol = jnp.maximum(x.q - hand.upper[:, None], 0.0) + jnp.minimum(x.q - hand.lower[:, None], 0.0)
    d = x.q - prob.q_prior
    pen = 0.5 * cfg.limit_weight * geo.total(viol * viol, 0) + 0.5 * cfg.prior_weight * geo.total(d * d, 0)
    if soft and x.rot.shape[0]:
        dc = x.rot - coupled_rows(hand, x.q)
        pen = pen + 0.5 * cfg.coupling_weight * geo.total(dc * dc, 0)
    return pen


def cost(hand, x: Variables, kp, prob: Problem, cfg: SolverConfig, soft: bool):
    """The objective ``(B,)`` at ``x`` with the chains' keypoints ``kp`` there: Σ_k w_k·Huber(|e_k|)
    (``e`` in units of 1 cm, Huber's δ = ``huber_delta``) + ½·limit_weight·Σ violation² +
    ½·prior_weight·|q − q_prior|² (+ ½·coupling_weight·(rot − law)² under soft coupling)."""
    u, z, z0 = residuals(x, kp, prob)
    e = u - z
    delta = cfg.huber_delta / REF
    rho, _ = huber(geo.dot(e, e), delta)
    rho0, _ = huber(geo.dot(z0, z0), delta)
    data = geo.total(prob.w * rho, (0, 1)) + geo.total(prob.w_root * rho0, 0)
    return data + penalty(hand, x, prob, cfg, soft)


def _stored(x, one):
    """``x``, computed once and written to memory (``one``: a runtime 1.0, :attr:`Problem.one`).

    XLA:CPU fuses cheap producers (adds, products, compares, selects) into every consumer, so a chain
    of dependent steps (a Cholesky factorisation, the trial point's cost that selects the next state)
    is recomputed inside each later kernel. A division counts as expensive and is not duplicated, so
    the quotient is stored once (``docs/performance.md``, "Stored intermediates")."""
    return x / one


def chol_solve(A, b, one=None):
    """Solve ``A x = b`` for SPD ``A (n, n, *r)`` and ``b (n, m, *r)`` by a Cholesky factorisation,
    vectorised over ``r`` (``n`` small and static: one column per Python step); with ``one`` (a
    runtime 1.0) each column is stored once (:func:`_stored`)."""
    keep = (lambda x: x) if one is None else (lambda x: _stored(x, one))  # noqa: E731
    n = A.shape[0]
    cols = []  # column j of L from row j down: (n − j, *r)
    for j in range(n):
        l = keep(A[:, 0] / jnp.sqrt(jnp.maximum(A[0, 0], 1e-30)))
        cols.append(l)
        A = A[1:, 1:] - l[1:, None] * l[None, 1:]
    ys = []
    for j in range(n):  # forward: L y = b
        yj = keep(b[0] / cols[j][0][None])
        ys.append(yj)
        b = b[1:] - cols[j][1:, None] * yj[None]
    xs = [None] * n
    for j in reversed(range(n)):  # back: Lᵀ x = y
        s = ys[j]
        if j < n - 1:
            s = s - geo.total(cols[j][1:, None] * jnp.stack(xs[j + 1:]), 0)
        xs[j] = keep(s / cols[j][0][None])
    return jnp.stack(xs)


def normal_equations(hand, st: Structure, x: Variables, kp, J, prob: Problem, cfg: SolverConfig):
    """The Gauss–Newton system at ``x`` (keypoints ``kp`` and Jacobian ``J`` there: :func:`evaluate`),
    with IRLS weights for the Huber loss and the penalties.

    Returns:
        ``A (V, V, G, B)`` finger blocks, ``Bm (V, 7, G, B)`` their couplings to the pose
        ``(φ, δ, σ)``, ``C (7, 7, B)`` pose block, gradients ``gq (V, G, B)`` and ``gp (7, B)`` (without
        ``estimate_scale`` the σ row and column are those of the identity).
    """
    ch = st.ch
    B = kp.shape[-1]
    u, z, z0 = residuals(x, kp, prob)
    e = u - z
    delta = cfg.huber_delta / REF
    W = prob.w * huber(geo.dot(e, e), delta)[1]  # (K, G, B)
    W0 = prob.w_root * huber(geo.dot(z0, z0), delta)[1]  # (r, B)
    Jq = J * (jnp.exp(x.logs) / REF)  # (3, K, V, G, B)
    V, KG, r = ch.V, ch.K * ch.G, z0.shape[1]
    # d e / d(φ, δ, σ) = (−[z]×, I, u): the products with the pose columns in closed form
    WJ = W[:, None] * Jq
    A = geo.total(WJ[:, :, :, None] * Jq[:, :, None], (0, 1))  # (V, V, G, B)
    gq = geo.total(WJ * e[:, :, None], (0, 1))  # (V, G, B)
    est = jnp.asarray(cfg.estimate_scale, kp.dtype)  # 0: the scale is not a variable (its column masked)
    Bm = jnp.concatenate([jnp.moveaxis(geo.total(geo.cross(z[:, :, None], WJ), 1), 0, 1),  # Σ z × W J_v
                          jnp.moveaxis(geo.total(WJ, 1), 0, 1),  # Σ W J_v
                          est * geo.total(WJ * u[:, :, None], (0, 1))[:, None]], 1)  # Σ W u·J_v: (V, 7, G, B)
    # the pose block over all keypoints: the chains' and the root's (where u = 0)
    zf = jnp.concatenate([z.reshape(3, KG, B), z0], 1)
    uf = jnp.concatenate([u.reshape(3, KG, B), jnp.zeros((3, r, B), kp.dtype)], 1)
    ef, Wf = uf - zf, jnp.concatenate([W.reshape(KG, B), W0], 0)
    Wz = Wf * zf
    eye3 = jnp.eye(3, dtype=kp.dtype)[..., None]
    Cpp = geo.total(Wz * zf, (0, 1)) * eye3 - geo.total(Wz[:, None] * zf[None], 2)  # Σ W (|z|² I − z zᵀ)
    Cpt = geo.skew(geo.total(Wz, 1))  # Σ W [z]×
    Ctt = geo.total(Wf, 0) * eye3
    cs = est * jnp.concatenate([geo.total(geo.cross(Wz, uf), 1), geo.total(Wf * uf, 1)])  # (6, B)
    css = est * geo.total(Wf * geo.dot(uf, uf), 0) + (1 - est)
    C = jnp.concatenate([jnp.concatenate([Cpp, Cpt, cs[:3, None]], 1),
                         jnp.concatenate([jnp.swapaxes(Cpt, 0, 1), Ctt, cs[3:, None]], 1),
                         jnp.concatenate([cs, css[None]])[None]], 0)  # (7, 7, B)
    gp = jnp.concatenate([geo.total(geo.cross(Wz, ef), 1), geo.total(Wf * ef, 1),
                          est * geo.total(Wf * geo.dot(uf, ef), 0)[None]])  # (7, B)

    # penalties on the variables (limits and prior on active joints; padding variables: identity)
    n, M = ch.n, ch.M
    var = ch.var.T  # (V, G)
    is_joint = jnp.asarray(var < n, kp.dtype)[..., None]
    ext = lambda a, b: jnp.concatenate([a, b, jnp.zeros((1,) + a.shape[1:], a.dtype)])  # noqa: E731
    xv = geo.take(ext(x.q, x.rot if st.soft else jnp.zeros((M, B), kp.dtype)), var, 0)
    lo = geo.take(ext(hand.lower, hand.mimic_lower), var, 0)[..., None]
    hi = geo.take(ext(hand.upper, hand.mimic_upper), var, 0)[..., None]
    viol = jnp.maximum(xv - hi, 0.0) + jnp.minimum(xv - lo, 0.0)
    prior = geo.take(ext(prob.q_prior, prob.rot_prior if st.soft else jnp.zeros((M, B), kp.dtype)), var, 0)
    gq = gq + is_joint * (cfg.limit_weight * viol + cfg.prior_weight * (xv - prior))
    hdiag = is_joint * (jnp.where(viol != 0, cfg.limit_weight, 0.0) + cfg.prior_weight) + jnp.asarray(var >= n + M, kp.dtype)[..., None]
    A = A + jnp.eye(V, dtype=kp.dtype)[:, :, None, None] * hdiag[None]
    if st.soft and M:  # ½c·(rot − law(q))²: a residual on three variables of one chain
        law = coupled_rows(hand, x.q)
        k = hand.coupling
        for m, (src, sec) in enumerate(hand.mimic_sources):
            hot = lambda j: jnp.asarray(np.eye(V * ch.G)[ch.var_slot[j]].reshape(V, ch.G), kp.dtype)[..., None]  # noqa: E731
            row = hot(n + m) - (k[m, 0] + k[m, 2] * x.q[sec]) * hot(src) - (k[m, 1] + k[m, 2] * x.q[src]) * hot(sec)
            A = A + cfg.coupling_weight * row[:, None] * row[None]
            gq = gq + cfg.coupling_weight * row * (x.rot[m] - law[m])
    # a joint at a limit that the descent direction −g would push past it is held there for this step
    # (Bertsekas' projected Newton): its row and column leave the system, its step is 0
    gq = _stored(gq, prob.one)  # (its sums would be recomputed in every consumer of the mask below)
    held = (is_joint > 0) & (((xv >= hi) & (gq < 0)) | ((xv <= lo) & (gq > 0)))  # (V, G, B)
    # stored: fused into each of its consumers (A, Bm, gq), the mask and the gathers before it were
    # recomputed per element
    free = _stored(jnp.where(held, 0.0, 1.0).astype(kp.dtype), prob.one)
    A = A * free[:, None] * free[None] + jnp.eye(V, dtype=kp.dtype)[:, :, None, None] * (1 - free)[None]
    return A, Bm * free[:, None], C, gq * free, gp


def gauss_newton_step(A, Bm, C, gq, gp, lam, one=None):
    """The damped step ``(δq (V, G, B), δp (P, B))`` solving ``(H + λ·diag H) δ = −g`` for the
    block-arrow ``H`` of :func:`normal_equations`, and its predicted cost decrease ``(B,)``."""
    V, P = A.shape[0], C.shape[0]
    dA = jnp.diagonal(A, 0, 0, 1)  # (G, B, V)
    dC = jnp.diagonal(C, 0, 0, 1)  # (B, P)
    Ad = A + jnp.eye(V, dtype=A.dtype)[:, :, None, None] * (lam * jnp.moveaxis(dA, -1, 0) + 1e-9)
    Cd = C + jnp.eye(P, dtype=C.dtype)[:, :, None] * (lam * jnp.moveaxis(dC, -1, 0) + 1e-9)
    X = chol_solve(Ad, jnp.concatenate([Bm, gq[:, None]], 1), one)  # (V, P + 1, G, B): A⁻¹ [Bm, gq]
    XB, Xg = X[:, :P], X[:, P]
    S = Cd - geo.total(Bm[:, :, None] * XB[:, None], (0, 3))  # Schur complement (P, P, B)
    rhs = gp - geo.total(Bm * Xg[:, None], (0, 2))
    dp = -chol_solve(S, rhs[:, None], one)[:, 0]  # (P, B)
    dq = -(Xg + geo.total(XB * dp[None, :, None], 1))  # (V, G, B)
    # predicted decrease of the Gauss–Newton model: ½ δᵀ(λ·diag(H)·δ − g)
    pred = 0.5 * (geo.total(dq * (lam * jnp.moveaxis(dA, -1, 0) * dq - gq), (0, 1))
                  + geo.total(dp * (lam * jnp.moveaxis(dC, -1, 0) * dp - gp), 0))
    return dq, dp, pred


def _apply(ch: Chains, x: Variables, dq, dp, soft: bool, cfg: SolverConfig, hand=None) -> Variables:
    """``x`` moved by the step (``dq`` in the variable layout, ``dp = (φ, δ, σ)``); with ``hand`` the
    angles are projected onto its limits."""
    d = geo.take(dq.reshape((ch.V * ch.G,) + dq.shape[2:]), ch.var_slot, 0)  # (n + M, B)
    logs = jnp.where(cfg.estimate_scale, jnp.clip(x.logs + dp[6], *_LOG_S), x.logs)
    q = x.q + d[:ch.n]
    if hand is not None:
        q = jnp.clip(q, hand.lower[:, None], hand.upper[:, None])
    return Variables(q=q, rot=x.rot + d[ch.n:] if soft else x.rot,
                     R=geo.matmul(x.R, geo.so3_exp(dp[:3])), t=x.t + geo.matvec(x.R, dp[3:6]) * REF, logs=logs)


def step(hand, st: Structure, params: ChainParams, prob: Problem, cfg: SolverConfig, s: LMState) -> LMState:
    """One LM iteration on every active frame: solve the damped system, evaluate the trial point (with
    its Jacobian, which the next iteration uses where the trial is accepted), accept it where the cost
    fell, update the damping (Nielsen) and test for convergence.

    Iteration ``i = 0`` evaluates the start instead: its trial point is ``s.x`` itself, accepted on
    every frame, so that the loop holds the program's only keypoint-and-Jacobian evaluation (one more
    before the loop made the program slower to compile).
    That iteration skips the linear algebra (``lax.cond``), counts no iteration and leaves the
    damping as it is."""
    first = s.i == 0

    def move(_):
        A, Bm, C, gq, gp = normal_equations(hand, st, s.x, s.kp, s.J, prob, cfg)
        dq, dp, pred = gauss_newton_step(A, Bm, C, gq, gp, s.lam, prob.one)
        return _apply(st.ch, s.x, dq, dp, st.soft, cfg, hand), pred

    x_new, pred = jax.lax.cond(first, lambda _: (s.x, jnp.zeros_like(s.cost)), move, None)
    keep = lambda a: _stored(a, prob.one)  # noqa: E731 (each used by the cost and by the selection below)
    x_new = jax.tree_util.tree_map(keep, x_new)
    kp_new, J_new = map(keep, evaluate(hand, st, params, x_new))
    cost_new = _stored(cost(hand, x_new, kp_new, prob, cfg, st.soft), prob.one)
    gain = (s.cost - cost_new) / jnp.maximum(pred, 1e-30)
    ok = first | (s.active & jnp.isfinite(cost_new) & (cost_new < s.cost))
    floor = jnp.finfo(s.cost.dtype).eps  # a zero-residual fit at this precision
    done = ~first & ((pred <= cfg.tolerance * s.cost) | (jnp.where(ok, cost_new, s.cost) < floor))
    lam = jnp.where(ok, s.lam * jnp.maximum(1 / 3, 1 - (2 * gain - 1) ** 3), s.lam * s.nu)
    stalled = ~first & (lam > cfg.damping_max)
    select = lambda new, old: jnp.where(ok, new, old)  # noqa: E731 (per frame: (B,) broadcasts on the last axis)
    x = jax.tree_util.tree_map(select, x_new, s.x)
    counted = s.active & ~first
    return LMState(x=x, kp=select(kp_new, s.kp), J=select(J_new, s.J), cost=select(cost_new, s.cost),
                   lam=jnp.where(s.active & ~first, jnp.clip(lam, cfg.damping_min, cfg.damping_max), s.lam),
                   nu=jnp.where(first, s.nu, jnp.where(ok, 2.0, s.nu * 2)),
                   iterations=s.iterations + counted.astype(jnp.int32), converged=s.converged | (s.active & done),
                   active=s.active & ~done & ~stalled, i=s.i + 1)


def loop(st: Structure, theta, x0: Variables, active):
    """Run LM from ``x0`` on the frames where ``active (B,)``; ``theta = (hand, params, prob, cfg)``.
    Returns the variables, the iterations each frame ran and whether it converged."""
    hand, params, prob, cfg = theta
    x0 = x0._replace(q=jnp.clip(x0.q, hand.lower[:, None], hand.upper[:, None]))  # LM stays within the limits
    kp, J = jax.eval_shape(lambda: evaluate(hand, st, params, x0))  # evaluated by iteration 0 (step)
    B, dtype = x0.logs.shape[-1], x0.logs.dtype
    s = LMState(x=x0, kp=jnp.zeros(kp.shape, kp.dtype), J=jnp.zeros(J.shape, J.dtype),
                cost=jnp.full((B,), jnp.inf, dtype), lam=jnp.full((B,), cfg.damping, dtype),
                nu=jnp.full((B,), 2.0, dtype), iterations=jnp.zeros((B,), jnp.int32),
                converged=jnp.zeros((B,), bool), active=active, i=jnp.zeros((), jnp.int32))
    # iteration 0 evaluates the start; 1 … cfg.iterations are LM iterations. A loop, not unrolled: an
    # unrolled one ran a frame a little faster but compiled for twice as long (docs/performance.md),
    # and would run every step even where all its frames have stopped
    s = jax.lax.while_loop(lambda s: (s.i == 0) | ((s.i <= cfg.iterations) & jnp.any(s.active)),
                           lambda s: step(hand, st, params, prob, cfg, s), s)
    return s.x, s.iterations, s.converged
