"""Sequences (warm start, smoothness, One-Euro) and per-subject calibration on real data."""

import jax
import numpy as np
import pytest

import wuji_jax as wj
from seed_table import LOWER, UPPER, reference_keypoints
from compile_log import compiles

DATA = "/work/shared/data/dexret_human_joint_right.npy"


def trajectory(T=24, n=2, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(LOWER + 0.05, UPPER - 0.05, (2, n, 20))
    s = np.linspace(0, 1, T)[None, :, None]
    q = a[:, None] * (1 - s) + b[:, None] * s  # (n, T, 20)
    y = np.stack([[reference_keypoints(x) for x in seq] for seq in q])
    return q, y


def test_sequence_matches_truth_and_keeps_shapes(right):
    q, y = trajectory()
    res = wj.solve_sequence(right, y, smooth_weight=1e-3)
    assert res.angles.shape == (2, 24, 20) and res.residual.shape == (2, 24)
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    assert np.median(err) < 0.05 and np.percentile(err, 99) < 1.0


def test_sequence_equals_solving_frame_by_frame(right):
    """The one-program sequence against its definition, frame by frame through wj.solve: frame 0 from
    the neutral pose, then q0 = the last valid angles with the smoothness prior and warm iterations.
    Two recordings of 70 real frames (two chunks of the program, the angles carried across), one
    frame without landmarks (it keeps the previous angles)."""
    real = np.load(DATA)
    y = np.stack([real[:70], real[300:370]])
    y[1, 40] = np.nan
    kw = dict(smooth_weight=0.05, warm_iterations=3)
    res = wj.solve_sequence(right, y, **kw)
    for b in range(2):
        prev = np.asarray(wj.neutral_angles(right))
        for t in range(70):
            if not np.isfinite(y[b, t]).any():  # nothing to fit (wj.solve refuses it): the start pose, not valid
                np.testing.assert_allclose(np.asarray(res.angles[b, t]), prev, rtol=0, atol=1e-6)
                assert not bool(res.valid[b, t])
                continue
            over = {} if t == 0 else dict(prior_weight=kw["smooth_weight"], iterations=kw["warm_iterations"])
            r = wj.solve(right, y[b, t], q0=prev, check_units=False, **over)
            if t == 0 or bool(r.valid):
                prev = np.asarray(r.angles)
            np.testing.assert_allclose(np.asarray(res.angles[b, t]), np.asarray(r.angles), atol=2e-5, err_msg=f"{b} {t}")
            assert bool(res.valid[b, t]) == bool(r.valid)
    assert not bool(res.valid[1, 40]) and np.array_equal(res.angles[1, 40], res.angles[1, 39])


def test_sequence_filter_smooths_noise_and_stays_in_limits(right):
    q, y = trajectory(seed=1)
    rng = np.random.default_rng(1)
    noisy = y + rng.normal(0, 0.003, y.shape)
    raw = wj.solve_sequence(right, noisy, smooth_weight=0.0)
    filt = wj.solve_sequence(right, noisy, filter="one_euro", min_cutoff=1.0, beta=0.0)
    jitter = lambda a: np.mean(np.abs(np.diff(np.asarray(a), 2, axis=1)))
    assert jitter(filt.angles) < 0.5 * jitter(raw.angles)
    a = np.asarray(filt.angles)
    assert np.all(a >= LOWER - 1e-6) and np.all(a <= UPPER + 1e-6)
    with pytest.raises(ValueError, match="filter must be"):
        wj.solve_sequence(right, y, filter="kalman")


def test_missing_frame_holds_previous_angles(right):
    q, y = trajectory(n=2, seed=2)  # two sequences, as the tests above: their compiled program
    y = y.copy()
    y[0, 10] = np.nan
    res = wj.solve_sequence(right, y)
    assert not bool(res.valid[0, 10])
    np.testing.assert_allclose(np.asarray(res.angles)[0, 10], np.asarray(res.angles)[0, 9], atol=1e-7)
    assert np.all(np.asarray(res.valid)[1])  # the other sequence: every frame solved


def test_calibration_lowers_the_residual_on_real_data(right):
    d = np.load(DATA)[::6]  # 104 frames of a real recording: calibrate on 52, solve the other 52
    before = np.median(np.asarray(wj.solve(right, d[1::2]).errors))
    with compiles() as compiled:
        hand = wj.calibrate(right, d[::2], rounds=2, steps=200)
    assert sum("jit(_fit)" in m for m in compiled) == 1, compiled  # one program for both rounds
    # not tied to a device: usable where the frames are split over several (jax.Array.committed)
    assert not any(getattr(a, "committed", False) for a in jax.tree_util.tree_leaves(hand))
    after = np.median(np.asarray(wj.solve(hand, d[1::2]).errors))
    assert after < 0.65 * before, (before, after)  # 4.5 -> 2.6 mm measured
    # lengths stay near the default (regularised), topology unchanged
    ratio = np.linalg.norm(np.asarray(hand.origin_xyz), axis=1) / np.maximum(
        np.linalg.norm(np.asarray(right.origin_xyz), axis=1), 1e-9)
    assert np.all(ratio[np.linalg.norm(np.asarray(right.origin_xyz), axis=1) > 0] < 2.0)
    assert hand.joint_names == right.joint_names
    with pytest.raises(ValueError, match=">= 5 frames"):
        wj.calibrate(right, d[:3])


def _turned(hand, link, axis, angle):
    """``hand`` with link ``link``'s joint frame turned by ``angle`` rad about ``axis`` (its own frame)."""
    i = hand.link_names.index(link)
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    R = np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K  # Rodrigues
    rot = np.asarray(hand.origin_rot).copy()
    rot[i] = rot[i] @ R
    return hand.replace(origin_rot=rot.astype(np.asarray(hand.origin_rot).dtype))


def test_calibration_learns_a_hyperextended_thumb_and_tilted_finger(right):
    # a "person" whose thumb IP rests 0.5 rad hyperextended (the default model's limit clips it), whose
    # middle finger's proximal frame is tilted by 0.15 rad and whose index middle phalanx is 15 % longer
    i_ip = right.link_names.index("thumb_distal")
    person = _turned(right, "thumb_distal", np.asarray(right.axis)[i_ip], -0.5)
    person = _turned(person, "middle_finger_proximal", [1.0, 0.0, 0.0], 0.15)
    xyz = np.asarray(person.origin_xyz).copy()
    xyz[right.link_names.index("index_finger_distal")] *= 1.15
    person = person.replace(origin_xyz=xyz)
    rng = np.random.default_rng(3)
    q = rng.uniform(LOWER + 0.05, UPPER - 0.05, (48, 20)).astype(np.float32)
    q[:, 3] = rng.uniform(0.0, 0.4, 48)  # thumb IP: the default model would need -0.5 .. -0.1 rad
    y = np.asarray(wj.forward_keypoints(person, q))
    worst = lambda h: np.max(np.mean(np.asarray(wj.solve(h, y).errors), 0))
    before = worst(right)
    hand = wj.calibrate(right, y, rounds=3, steps=200)
    after = worst(hand)
    assert before > 3e-3 and after < 1e-3, (before, after)
