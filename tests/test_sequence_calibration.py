"""Sequences (warm start, smoothness, One-Euro) and per-subject calibration on real data."""

import numpy as np
import pytest

import wuji_jax as wj
from seed_table import LOWER, UPPER, reference_keypoints

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
    q, y = trajectory(n=1, seed=2)
    y = y.copy()
    y[0, 10] = np.nan
    res = wj.solve_sequence(right, y)
    assert not bool(res.valid[0, 10])
    np.testing.assert_allclose(np.asarray(res.angles)[0, 10], np.asarray(res.angles)[0, 9], atol=1e-7)


def test_calibration_lowers_the_residual_on_real_data(right):
    d = np.load(DATA)[::6]  # 104 frames of a real recording
    before = np.median(np.asarray(wj.solve(right, d).errors))
    hand = wj.calibrate(right, d, rounds=2, steps=200, max_frames=104)
    after = np.median(np.asarray(wj.solve(hand, d).errors))
    assert after < 0.95 * before, (before, after)
    # lengths stay near the default (regularised), topology unchanged
    ratio = np.linalg.norm(np.asarray(hand.origin_xyz), axis=1) / np.maximum(
        np.linalg.norm(np.asarray(right.origin_xyz), axis=1), 1e-9)
    assert np.all(ratio[np.linalg.norm(np.asarray(right.origin_xyz), axis=1) > 0] < 2.0)
    assert hand.joint_names == right.joint_names
    with pytest.raises(ValueError, match=">= 5 frames"):
        wj.calibrate(right, d[:3])
