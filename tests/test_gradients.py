"""Derivatives through :func:`wuji_jax.solve`: the exact implicit-function derivative of the fit
(:mod:`wuji_jax.ik.adjoint`), checked against central differences of a tightly converged float64
solve on noisy real frames (two recordings, frames with joints held at a limit among them), jvp
against vjp, and a model leaf."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wuji_jax as wj
from seed_table import reference_keypoints

ROOT = Path(__file__).resolve().parents[1]
DEXRET = "/work/shared/data/dexret_human_joint_right.npy"  # as tests/test_sequence_calibration.py
TIGHT = wj.SolverConfig(tolerance=1e-15, iterations=400)  # the reference: LM run to its end
H = 1e-6  # metres, the central differences' step


def _real_frames(count_each: int, seed: int = 0) -> np.ndarray:
    """Frames of dex-retargeting's recording and of the bundled video's, with 2 mm of noise."""
    rng = np.random.default_rng(seed)
    a = np.load(DEXRET)
    b = np.load(ROOT / "assets" / "samples" / "human_hand_video_landmarks.npz")["world"]
    frames = np.concatenate([a[rng.choice(len(a), count_each, replace=False)],
                             b[rng.choice(len(b), count_each, replace=False)]])
    return frames + rng.normal(0, 0.002, frames.shape)


@pytest.fixture(scope="module")
def frames():
    return _real_frames(4)


def test_derivative_is_the_fits_on_noisy_real_frames(right, frames):
    """jvp along random landmark directions (the solve under vmap, a frame at a time) against central
    differences (h = 1 µm) of the fit LM converged to 1e-15 (float64); the vjp (the jvp's transpose)
    against the jvp (⟨c, J·d⟩ = ⟨Jᵀc, d⟩); the forward values under differentiation are the
    converged fit's, none flagged without a derivative; joints held at a limit are among the frames."""
    rng = np.random.default_rng(1)
    d, c = rng.normal(size=frames.shape), rng.normal(size=frames.shape[:1] + (20,))

    def both(y, d, c):  # one linearisation: jvp and vjp of the same derivative (one program, not three)
        solve = jax.vmap(lambda y1: wj.solve(right, y1, check_units=False))  # frame by frame, under vmap
        q, jvp, flags = jax.linearize(lambda y: (lambda r: (r.angles, r.flags))(solve(y)), y, has_aux=True)
        return q, jvp(d), jax.linear_transpose(jvp, y)(c)[0], flags

    q, jd, jc, flags = (np.asarray(a) for a in jax.jit(both)(frames, d, c))
    ref = wj.solve(right, frames, config=TIGHT, check_units=False)
    assert np.asarray(ref.converged).all()
    np.testing.assert_allclose(q, np.asarray(ref.angles), atol=1e-6)
    # the references: central differences at two steps; a held joint whose multiplier is small lets
    # the set of joints at a limit change within a 1 µm step (one of these frames: 10 % off at
    # h = 1e-6, 1e-6 at 1e-7), where the solution is not smooth over the difference's interval
    rel = np.full(len(frames), np.inf)
    for h in (H, H / 10):
        fd = (np.asarray(wj.solve(right, frames + h * d, config=TIGHT, check_units=False).angles)
              - np.asarray(wj.solve(right, frames - h * d, config=TIGHT, check_units=False).angles)) / (2 * h)
        rel = np.minimum(rel, np.linalg.norm(jd - fd, axis=-1) / np.linalg.norm(fd, axis=-1))
    assert np.median(rel) < 1e-4 and rel.max() < 1e-2, rel
    np.testing.assert_allclose(np.sum(c * jd), np.sum(jc * d), rtol=1e-8)
    assert not (flags & wj.solver.FLAG_NO_DERIVATIVE).any()
    lower, upper = np.asarray(right.lower), np.asarray(right.upper)
    held = (q <= lower + 1e-12) | (q >= upper - 1e-12)
    assert held.any(axis=-1).all()  # every frame has joints at a limit: their derivative is 0
    np.testing.assert_array_equal(jd[held], 0.0)


def test_derivative_in_a_model_leaf_and_a_setting(right):
    """The derivative in a bone offset and in the prior's weight (both leaves of the pytrees the
    solver takes) against central differences of the converged float64 solve."""
    q = np.asarray(wj.named_pose("victory")) * 0.6 + 0.1
    y = jnp.asarray(reference_keypoints(q)) + 0.003 * jnp.asarray(np.random.default_rng(2).normal(size=(21, 3)))
    i = right.link_index("index_finger_middle")

    def angles(z, pw, config=wj.SolverConfig()):
        h = right.replace(origin_xyz=right.origin_xyz.at[i, 2].set(z))
        return wj.solve(h, y, config=config.replace(prior_weight=pw), check_units=False).angles[4:12]

    z0, pw0 = right.origin_xyz[i, 2], 1e-4
    jz, jw = jax.jit(jax.jacfwd(angles, argnums=(0, 1)))(z0, pw0)
    fz = (angles(z0 + H, pw0, TIGHT) - angles(z0 - H, pw0, TIGHT)) / (2 * H)
    fw = (angles(z0, pw0 + 1e-7, TIGHT) - angles(z0, pw0 - 1e-7, TIGHT)) / 2e-7
    rel = lambda a, b: np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b))  # noqa: E731
    assert rel(jz, fz) < 1e-5 and rel(jw, fw) < 1e-4, (rel(jz, fz), rel(jw, fw))
    assert np.abs(np.asarray(jz)).max() > 1.0


@pytest.mark.parametrize("coupling, estimate_scale", [("hard", True), ("soft", False)])
def test_exact_hessian_is_the_objectives(right, coupling, estimate_scale):
    """The block-arrow Hessian the derivative solves with (analytic Jacobian, forward-mode model
    curvature, closed-form pose terms) against central differences of the objective's gradient by
    automatic differentiation, float64: near a fit, with a landmark far enough off to be on Huber's
    linear part, joints beyond a limit, the scale estimated or not."""
    from wuji_jax.hand.chains import chain_params, chains_of, coupled_rows
    from wuji_jax.ik import adjoint
    from wuji_jax.ik.lm import Problem, Structure, Variables

    B = 4
    y = _real_frames(2, seed=3)
    y[0, 8] += 0.05
    rng = np.random.default_rng(4)
    cfg = wj.SolverConfig(coupling=coupling, estimate_scale=estimate_scale)
    res = wj.solve(right, y, check_units=False)  # a point near a fit (the default's: one solver program for both cases)
    ch = chains_of(right, coupling == "soft")
    st = Structure(ch, coupling == "soft")
    yc = jnp.moveaxis(jnp.asarray(y), 0, -1).transpose(1, 0, 2)  # (3, 21, B)
    q0 = jnp.asarray(rng.normal(0, 0.2, (20, B)))
    w = jnp.ones((21, B))
    roots = np.asarray(ch.root_kps, int)
    prob = Problem(y=yc[:, ch.kp_of_slot].reshape(3, ch.K, ch.G, B),
                   w=w[ch.kp_of_slot].reshape(ch.K, ch.G, B) * jnp.asarray(ch.slot_used[..., None], float),
                   y_root=yc[:, roots], w_root=w[roots], q_prior=q0,
                   rot_prior=coupled_rows(right, q0) if st.soft else jnp.zeros((0, B)), one=jnp.ones(()))
    q = jnp.clip(res.angles.T + 0.01, right.lower[:, None] - 0.02, right.upper[:, None] - 1e-6)
    x = Variables(q, res.coupled.T + 0.05 if st.soft else jnp.zeros((0, B)), jnp.moveaxis(res.rotation, 0, -1),
                  res.translation.T, jnp.log(res.scale))
    theta = (right, chain_params(right, ch), prob, cfg)
    _, g, H = jax.jit(lambda th, x: adjoint.gradient_and_hessian(th, st, x))(theta, x)
    # the reference: automatic differentiation of the objective for the gradient, and central
    # differences of that gradient (h = 1e-6) for the Hessian, one increment at a time
    grad = jax.jit(jax.grad(lambda z, th, x: jnp.sum(adjoint.objective(th, st, x, z))))
    z = jnp.zeros(g.shape)
    np.testing.assert_allclose(np.asarray(g), np.asarray(grad(z, theta, x)), rtol=1e-9, atol=1e-9)
    ref = np.stack([(np.asarray(grad(z.at[j].set(1e-6), theta, x)) - np.asarray(grad(z.at[j].set(-1e-6), theta, x))) / 2e-6
                    for j in range(g.shape[0])], 1)  # (nz, nz, B): column j
    np.testing.assert_allclose(np.asarray(H), ref, atol=1e-6 * np.abs(ref).max())


def test_eager_gradient_runs_compiled_programs(right):
    """``jax.grad`` of a loss on ``wj.solve`` outside any ``jax.jit`` (the README's line): the solver
    and its derivative are compiled programs in the gradient's jaxpr, not thousands of equations that
    an eager gradient dispatches one by one (a solver traced inline there took 7 s a call, against
    16-23 ms)."""
    y = np.load(ROOT / "assets" / "samples" / "human_hand_video_landmarks.npz")["world"][:8]
    loss = lambda y: jnp.sum(jnp.sin(wj.solve(right, y).angles))  # noqa: E731
    eqns = jax.make_jaxpr(jax.grad(loss))(jnp.asarray(y)).jaxpr.eqns
    assert len(eqns) < 20 and sum(e.primitive.name in ("jit", "pjit") for e in eqns) >= 2, [e.primitive.name for e in eqns]
