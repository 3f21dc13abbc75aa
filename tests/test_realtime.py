"""FrameSolver: one frame at a time. Round trips against the seed-table FK, the same fit as wj.solve
(field by field, types and shapes), masks and warm starts, and each input error.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wuji_jax as wj
from seed_table import LOWER, UPPER, reference_keypoints
from test_solver import synthetic


@pytest.fixture(scope="module")
def solver(right):
    return wj.FrameSolver(right)


def test_round_trip_one_frame_at_a_time(solver):
    q, y, R, s, t = synthetic(12, seed=21)
    res = [solver(frame) for frame in y.astype(np.float32)]
    err = np.degrees(np.abs(np.stack([r.angles for r in res]) - q))
    assert np.median(err) < 0.01 and np.percentile(err, 99) < 0.5, (np.median(err), err.max())
    assert max(float(r.residual) for r in res) < 5e-5  # metres
    np.testing.assert_allclose([r.scale for r in res], s, rtol=1e-4)
    np.testing.assert_allclose(np.stack([r.rotation for r in res]), R, atol=1e-4)
    np.testing.assert_allclose(np.stack([r.translation for r in res]), t, atol=2e-5)
    assert all(bool(r.valid) and int(r.flags) == 0 for r in res)


def test_same_fit_as_solve_field_by_field(right, solver):
    """Numpy fields without a batch axis, each equal to wj.solve's (same kernel, float32)."""
    from wuji_jax.pipeline.batch import sample_landmarks_path

    with np.load(sample_landmarks_path()) as z:  # the bundled real recording
        y = np.asarray(z["world"][::200], np.float32)
    for frame in y:
        ref, res = wj.solve(right, frame), solver(frame)
        assert isinstance(res, wj.IKResult)
        for f in wj.IKResult._fields:
            a, b = np.asarray(getattr(ref, f)), getattr(res, f)
            assert isinstance(b, np.ndarray) and b.shape == a.shape and b.dtype == a.dtype, (f, b.shape, b.dtype)
            np.testing.assert_allclose(b.astype(float), a.astype(float), atol=1e-5, err_msg=f)


def test_weights_nan_and_warm_start(right, solver):
    q, y, *_ = synthetic(2, seed=22)
    frame = y[0].astype(np.float32)
    # a masked landmark (NaN), a zero weight and a warm start (q0) in one call: the rest still fits
    # exactly; the masked errors are 0, and the joints they hide keep q0 (their bones' ends unseen)
    holed = frame.copy()
    holed[8] = np.nan
    w = np.ones(21, np.float32)
    w[12] = 0.0
    q0 = np.clip(q[0] + 0.05, LOWER, UPPER).astype(np.float32)
    res = solver(holed, w, q0=q0)
    assert np.all(np.isfinite(res.angles)) and bool(res.valid)
    assert res.errors[8] == 0 and res.errors[12] == 0 and res.residual < 5e-5
    unseen = [right.joint_index("index_finger_dip"), right.joint_index("middle_finger_dip")]
    others = [j for j in range(20) if j not in unseen]
    assert np.degrees(np.abs(res.angles[others] - q[0, others])).max() < 0.5
    np.testing.assert_allclose(res.angles[unseen], q0[unseen], atol=0.02)  # only the weak prior moves them
    # the same as wj.solve with the same inputs
    ref = wj.solve(right, holed, w, q0=q0)
    np.testing.assert_allclose(res.angles, np.asarray(ref.angles), atol=1e-5)


def test_limits_and_degenerate_frames(solver):
    rng = np.random.default_rng(23)
    q = rng.uniform(LOWER - 0.4, UPPER + 0.4, size=20)
    y = (reference_keypoints(q) + rng.normal(0, 0.003, (21, 3))).astype(np.float32)
    res = solver(y)
    assert np.all(res.angles >= LOWER - 1e-6) and np.all(res.angles <= UPPER + 1e-6)
    few = np.full((21, 3), np.nan, np.float32)
    few[:4] = y[:4]  # four landmarks: flagged, neutral pose, no NaN
    res = solver(few)
    assert not bool(res.valid) and int(res.flags) & wj.solver.FLAG_TOO_FEW_LANDMARKS
    assert np.all(np.isfinite(res.angles)) and np.all(np.isfinite(res.keypoints))


def test_input_errors(right, solver):
    y = synthetic(3, seed=24)[1].astype(np.float32)
    with pytest.raises(ValueError, match=r"one frame of shape \(21, 3\).*\(3, 21, 3\).*wj.solve"):
        solver(y)
    with pytest.raises(ValueError, match=r"\(21, 2\)"):
        solver(y[0, :, :2])
    with pytest.raises(ValueError, match="millimetres"):
        solver(y[0] * 1000)
    with pytest.raises(ValueError, match="no finite value"):
        solver(np.full((21, 3), np.nan))
    # float32 (21, 3) arrays take the fast path (checked after the kernel from the extent it returns)
    pixels = y[0].astype(np.float32)
    pixels[:, :2] = pixels[:, :2] * 3000 + 400
    with pytest.raises(ValueError, match="pixel coordinates"):
        solver(pixels)
    normalised = y[0].astype(np.float32)  # hand-sized, but x, y in [0, 1] and flat z
    normalised[:, :2] = (normalised[:, :2] - normalised[:, :2].min(0)) * 2 + 0.3
    normalised[:, 2] *= 0.05
    with pytest.raises(ValueError, match="normalised image coordinates"):
        solver(normalised)
    assert np.isfinite(solver(normalised, check_units=False).angles).all()
    with pytest.raises(ValueError, match="weights must have shape"):
        solver(y[0], np.ones(20))
    with pytest.raises(ValueError, match="inside jax.jit"):
        jax.jit(lambda x: solver(x).angles)(jnp.asarray(y[0]))
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        wj.FrameSolver(right, dtype=np.int32)
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match="jax_enable_x64"):
            wj.FrameSolver(right, dtype=np.float64)
    with pytest.raises(ValueError, match="coupling must be"):
        wj.FrameSolver(right, coupling="loose")


def test_float64(right):
    """dtype=float64 (x64 is on in the tests): float64 results, the round trip (the weak prior towards
    the start pose keeps the optimum ~1e-5 rad off the truth)."""
    q, y, *_ = synthetic(1, seed=25)
    res = wj.FrameSolver(right, dtype=np.float64)(y[0])
    assert res.angles.dtype == np.float64 and res.keypoints.dtype == np.float64
    np.testing.assert_allclose(res.angles, q[0], atol=2e-4)
    assert res.residual < 2e-6


def test_a_frame_compiles_once_and_blocks(solver):
    """A JAX function's semantics: the first frame of a kernel compiles it (and waits for it); later
    frames compile nothing and leave no thread running."""
    import threading

    from compile_log import compiles

    q, y, *_ = synthetic(4, seed=21)
    frames = y.astype(np.float32)
    solver(frames[0])
    threads = threading.active_count()
    with compiles() as compiled:
        res = [solver(frame) for frame in frames]
    assert compiled == [] and threading.active_count() == threads
    np.testing.assert_allclose(np.stack([r.angles for r in res]), q, atol=2e-4)
