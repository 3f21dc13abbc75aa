"""FK against an independent transform chain typed from seed 000's table (tests/seed_table.py).

Batches of random poses are 16 frames wherever their size is not what a test checks: one compiled
forward_keypoints / forward_kinematics program per dtype serves them all (test_batch_shapes and
test_large_batch_gradients_match_single_frames choose their own shapes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wuji_jax as wj
from seed_table import FINGERS, LOWER, UPPER, reference_keypoints


def random_q(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(LOWER, UPPER, size=(n, 20))


def test_zero_pose_equals_table_offsets(right):
    kp = np.asarray(wj.forward_keypoints(right, jnp.zeros(20)))
    for f, (name, (xyz, _, joints, tip)) in enumerate(FINGERS.items()):
        base = np.array(xyz)
        np.testing.assert_allclose(kp[1 + 4 * f], base, atol=1e-7)
        if name == "index":
            # straight finger: PIP, DIP, TIP lie on −Z below the MCP by the table's lengths
            np.testing.assert_allclose(kp[6], base + [0, 0, -0.0387], atol=1e-7)
            np.testing.assert_allclose(kp[7], base + [0, 0, -0.0387 - 0.026], atol=1e-7)
            np.testing.assert_allclose(kp[8], base + [0, 0, -0.0387 - 0.026 - 0.0241], atol=1e-7)
    # thumb: tilted by pitch -0.4301 about Y, so its tip leaves along (sin .4301, 0, -cos .4301)
    d = np.array([np.sin(0.4301), 0, -np.cos(0.4301)])
    np.testing.assert_allclose(kp[4], np.array(FINGERS["thumb"][0]) + d * (0.0407 + 0.0346 + 0.0332), atol=1e-7)
    np.testing.assert_allclose(kp[0], 0, atol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fk_matches_independent_chain(right, seed):
    q = random_q(16, seed)
    got = np.asarray(wj.forward_keypoints(right, jnp.asarray(q)))
    want = np.stack([reference_keypoints(qi) for qi in q])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_flexion_bends_towards_palm(right, left):
    q = np.zeros(20)
    q[4] = 0.5  # index MCP flex
    tip_r = np.asarray(wj.forward_keypoints(right, jnp.asarray(q)))[8]
    tip_l = np.asarray(wj.forward_keypoints(left, jnp.asarray(q)))[8]
    assert tip_r[1] > 0.02  # right palm is +Y
    assert tip_l[1] < -0.02  # left palm is −Y (Y dorsal)


def test_left_is_right_mirrored(right, left):
    q = random_q(16, 3)
    r = np.asarray(wj.forward_keypoints(right, jnp.asarray(q)))
    l = np.asarray(wj.forward_keypoints(left, jnp.asarray(q)))
    np.testing.assert_allclose(l, r * np.array([1, -1, 1]), atol=1e-12)
    np.testing.assert_allclose(l, np.stack([reference_keypoints(x, mirror=True) for x in q]), atol=1e-12)


def test_coupling_gains_change_the_thumb(right):
    q = random_q(16, 4)
    hand = right.with_coupling(k_flex=0.3, k_abd=0.1, k_cross=-0.2)
    got = np.asarray(wj.forward_keypoints(hand, jnp.asarray(q)))
    want = np.stack([reference_keypoints(x, 0.3, 0.1, -0.2) for x in q])
    np.testing.assert_allclose(got, want, atol=1e-12)
    rot = np.asarray(wj.coupled_angles(hand, jnp.asarray(q)))[..., 0]
    np.testing.assert_allclose(rot, 0.3 * q[:, 0] + 0.1 * q[:, 1] - 0.2 * q[:, 0] * q[:, 1], atol=1e-12)
    # the default law is the URDF mimic: 0.22 × flex
    np.testing.assert_allclose(np.asarray(wj.coupled_angles(right, jnp.asarray(q)))[..., 0], 0.22 * q[:, 0])


@pytest.mark.parametrize("shape", [(), (1,), (16,), (2, 3)])
def test_batch_shapes(right, shape):
    q = random_q(int(np.prod(shape)) if shape else 1, 5).reshape(shape + (20,))
    kp = np.asarray(wj.forward_keypoints(right, jnp.asarray(q)))
    assert kp.shape == shape + (21, 3)
    flat = q.reshape(-1, 20)
    np.testing.assert_allclose(kp.reshape(-1, 21, 3), np.stack([reference_keypoints(x) for x in flat]), atol=1e-12)
    frames = wj.forward_kinematics(right, jnp.asarray(q))
    assert frames.rotations.shape == shape + (right.num_links, 3, 3)
    # the keypoint links' positions agree between the two entry points
    np.testing.assert_allclose(np.asarray(frames.positions)[..., right.keypoint_links, :], kp, atol=1e-12)


def test_link_rotations_are_orthonormal(right):
    frames = wj.forward_kinematics(right, jnp.asarray(random_q(16, 6)))
    R = np.asarray(frames.rotations)
    np.testing.assert_allclose(R @ np.swapaxes(R, -1, -2), np.broadcast_to(np.eye(3), R.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(R), 1.0, atol=1e-12)


def test_dtypes(right):
    q = random_q(16, 7)
    k32 = wj.forward_keypoints(right, jnp.asarray(q, jnp.float32))
    k64 = wj.forward_keypoints(right, jnp.asarray(q, jnp.float64))
    assert k32.dtype == jnp.float32 and k64.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(k32), np.asarray(k64), atol=2e-6)


def test_jacobians_three_ways(right):
    q = jnp.asarray(random_q(1, 8)[0])
    f = lambda x: wj.forward_keypoints(right, x).reshape(-1)
    jf = np.asarray(jax.jacfwd(f)(q))
    jr = np.asarray(jax.jacrev(f)(q))
    eps = 1e-6
    fd = np.stack([(np.asarray(f(q.at[i].add(eps))) - np.asarray(f(q.at[i].add(-eps)))) / (2 * eps)
                   for i in range(20)], -1)
    np.testing.assert_allclose(jf, jr, atol=1e-12)
    np.testing.assert_allclose(jf, fd, atol=1e-7)
    # structure: a finger's keypoints depend only on its own 4 joints
    block = np.abs(jf.reshape(21, 3, 20)).sum(1)
    assert np.all(block[5:9, :4] == 0) and np.all(block[5:9, 8:] == 0)
    assert np.all(block[0] == 0)


def test_gradient_through_model_leaves(right):
    q = jnp.asarray(random_q(16, 9))

    def loss(hand):
        return jnp.sum(wj.forward_keypoints(hand, q)[..., 8, :] ** 2)  # index tips

    g = jax.grad(loss)(right.astype(jnp.float64))
    # finite difference on the index PIP bone length (origin z of the index middle link)
    i = right.link_index("index_finger_middle")
    eps = 1e-6
    h64 = right.astype(jnp.float64)
    up = h64.replace(origin_xyz=h64.origin_xyz.at[i, 2].add(eps))
    dn = h64.replace(origin_xyz=h64.origin_xyz.at[i, 2].add(-eps))
    fd = (loss(up) - loss(dn)) / (2 * eps)
    np.testing.assert_allclose(float(g.origin_xyz[i, 2]), float(fd), rtol=1e-6)
    # coupling gains get a gradient through the thumb
    gk = jax.grad(lambda k: jnp.sum(wj.forward_keypoints(h64.replace(coupling=k), q)[..., 4, :]))(h64.coupling)
    assert np.all(np.isfinite(np.asarray(gk))) and abs(float(gk[0, 0])) > 1e-4



def _link_loss(frames):
    return jnp.sum(frames.positions ** 2) + jnp.sum(frames.rotations)


def test_large_batch_gradients_match_single_frames(right):
    """jax.grad, outside jax.jit, of forward_keypoints over 4,096 float32 frames and of
    forward_kinematics over 512 equals each frame's own gradient: XLA:CPU of jaxlib 0.10.2 computed
    them wrong over such batches in one program (about 3e-2 off for the keypoints, 4 for the link
    frames; right with jaxlib 0.6.1); both now compute them in chunks (FK_CHUNK_FRAMES,
    LINK_CHUNK_FRAMES)."""
    q = random_q(4096, 11).astype(np.float32)
    for f, frames in ((lambda x: jnp.sum(wj.forward_keypoints(right, x) ** 2), 4096),
                      (lambda x: _link_loss(wj.forward_kinematics(right, x)), 512)):
        idx = [0, frames // 2, frames - 1]
        g = np.asarray(jax.grad(f)(jnp.asarray(q[:frames])))[idx]
        one = np.stack([np.asarray(jax.grad(f)(jnp.asarray(q[i:i + 1])))[0] for i in idx])
        np.testing.assert_allclose(g, one, atol=2e-6)

def test_no_recompile_on_second_call(right):
    q = jnp.asarray(random_q(16, 10))
    from compile_log import compiles

    wj.forward_keypoints(right, q).block_until_ready()
    q2 = (q + 0.01).block_until_ready()
    with compiles() as log:
        wj.forward_keypoints(right, q2).block_until_ready()
        wj.forward_keypoints(wj.load_hand("right"), q).block_until_ready()
    assert not log, log


def test_bad_q_shape(right):
    with pytest.raises(ValueError, match=r"shape \(\*batch, 20\).*got shape \(19,\)"):
        wj.forward_keypoints(right, jnp.zeros(19))
