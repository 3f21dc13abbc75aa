"""Gradients of a loss on the solved angles, through :func:`wuji_jax.solve`: the solver's derivative
is that of its solution (one implicit Gauss–Newton step at the optimum), checked against central
differences of the converged float64 solve."""

import jax
import jax.numpy as jnp
import numpy as np

import wuji_jax as wj
from seed_table import reference_keypoints

TIGHT = wj.SolverConfig(tolerance=1e-13, iterations=60)  # converged far enough for a finite difference


def test_gradients_through_the_solver_match_finite_differences(right):
    """Reverse-mode gradients of a loss on solved angles w.r.t. landmarks and a model leaf (one
    gradient compilation for both), against central differences."""
    q = np.asarray(wj.named_pose("victory")) * 0.6 + 0.1
    y = jnp.asarray(reference_keypoints(q))
    hand = right
    i = hand.link_index("index_finger_middle")

    def loss(y, z):
        h = hand.replace(origin_xyz=hand.origin_xyz.at[i, 2].set(z))
        return jnp.sum(jnp.sin(wj.solve(h, y, config=TIGHT).angles[4:12]))

    z0 = hand.origin_xyz[i, 2]
    gy, gz = jax.jit(jax.grad(loss, argnums=(0, 1)))(y, z0)  # jitted: one program, as a training step is
    gy, gz = np.asarray(gy), float(gz)
    eps = 1e-6  # central differences of the eager solve (float64: the 64-frame programs other tests use too)
    for k, c in [(8, 1), (12, 0), (6, 2)]:
        d = jnp.zeros_like(y).at[k, c].set(eps)
        fd = (loss(y + d, z0) - loss(y - d, z0)) / (2 * eps)
        np.testing.assert_allclose(gy[k, c], float(fd), rtol=1e-4, atol=1e-7)
    fd = float((loss(y, z0 + eps) - loss(y, z0 - eps)) / (2 * eps))
    np.testing.assert_allclose(gz, fd, rtol=1e-4, atol=1e-7)
    assert abs(gz) > 1e-3


def test_small_batches_trace_the_derivative_with_reductions(right):
    """The derivative's steps are traced with reductions for chunks of at most REDUCE_DERIVATIVE_FRAMES
    frames (a smaller program) and as the solver's own CPU kernels (adds of slices) above: the JVP
    program of one frame holds hundreds fewer slices than that of 65 frames, whose forward solve is
    the same code (tracing only, nothing compiled)."""
    from wuji_jax.solver import lm

    assert lm.REDUCE_DERIVATIVE_FRAMES == 64
    y = np.asarray(reference_keypoints(np.asarray(wj.named_pose("victory")) * 0.6 + 0.1), np.float32)

    def slices(frames):
        lm_ = jnp.asarray(np.broadcast_to(y, (frames, 21, 3)))
        f = lambda a: wj.solve(right, a, check_units=False).angles  # noqa: E731
        return str(jax.make_jaxpr(lambda a: jax.jvp(f, (a,), (a,)))(lm_)).count(" slice[")

    small, large = slices(1), slices(lm.REDUCE_DERIVATIVE_FRAMES + 1)
    assert small + 300 < large, (small, large)
