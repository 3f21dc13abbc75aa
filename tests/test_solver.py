"""IK: round trips IK(FK(q)) = q under random similarity transforms, limits, coupling modes, masking,
robustness, handedness, input errors and gradients (by finite differences)."""

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wuji_jax as wj
from wuji_jax.ik import FLAG_MIRRORED, FLAG_TOO_FEW_LANDMARKS
from seed_table import LOWER, UPPER, reference_keypoints

B = 48  # one batch shape for most tests: one compilation


def random_similarity(rng, n):
    A = rng.normal(size=(n, 3, 3))
    Q, _ = np.linalg.qr(A)
    Q *= np.sign(np.linalg.det(Q))[:, None, None]
    return Q, rng.uniform(0.8, 1.2, n), rng.normal(size=(n, 3)) * 0.3


def synthetic(n, seed=0, margin=0.02):
    """Random angles within limits → independent FK (seed table) → random similarity."""
    rng = np.random.default_rng(seed)
    q = rng.uniform(LOWER + margin, UPPER - margin, size=(n, 20))
    kp = np.stack([reference_keypoints(x) for x in q])
    R, s, t = random_similarity(rng, n)
    y = s[:, None, None] * np.einsum("bij,bkj->bki", R, kp) + t[:, None, :]
    return q, y, R, s, t


@pytest.fixture(scope="module")
def round_trip(right):
    q, y, R, s, t = synthetic(B, seed=1)
    return q, y, R, s, t, wj.solve(right, y)


def test_round_trip_recovers_angles_pose_and_scale(round_trip):
    q, y, R, s, t, res = round_trip
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    assert np.median(err) < 0.01 and np.percentile(err, 99) < 0.5, (np.median(err), np.percentile(err, 99))
    assert np.percentile(np.asarray(res.residual), 99) < 5e-5  # metres
    np.testing.assert_allclose(np.asarray(res.scale), s, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(res.rotation), R, atol=1e-4)
    np.testing.assert_allclose(np.asarray(res.translation), t, atol=1e-5)
    np.testing.assert_allclose(np.asarray(res.keypoints), y, atol=1e-4)
    np.testing.assert_allclose(np.asarray(res.coupled)[:, 0], 0.22 * np.asarray(res.angles)[:, 0], atol=1e-12)
    assert np.all(np.asarray(res.valid)) and np.all(np.asarray(res.flags) == 0)


def test_closed_form_start_is_exact_on_noise_free_data(right, left):
    """iterations=0: the palm similarity and the Paden–Kahan angles alone, on both hands (the left is
    the right mirrored in Y, the same angles); a masked fingertip leaves that finger's DIP at q0."""
    q, y, *_ = synthetic(B, seed=3)
    for hand, data in ((right, y), (left, y * np.array([1.0, -1.0, 1.0]))):
        res = wj.solve(hand, data, iterations=0)
        err = np.degrees(np.abs(np.asarray(res.angles) - q))
        assert np.median(err) < 1e-3 and np.percentile(err, 99) < 0.2, (hand.side, np.median(err), err.max())
    masked = y.copy()
    masked[:, 8] = np.nan  # index tip: the DIP cannot be seen
    q0 = np.full((B, 20), 0.3)
    res = wj.solve(right, masked, iterations=0, q0=q0)
    dip = right.joint_index("index_finger_dip")
    np.testing.assert_allclose(np.asarray(res.angles)[:, dip], np.clip(0.3, LOWER[dip], UPPER[dip]), atol=1e-6)
    others = [j for j in range(20) if j != dip]
    assert np.percentile(np.degrees(np.abs(np.asarray(res.angles)[:, others] - q[:, others])), 99) < 0.2


def test_angles_always_within_limits(right):
    rng = np.random.default_rng(2)
    # angles beyond the limits: the solution must stay inside
    q = rng.uniform(LOWER - 0.4, UPPER + 0.4, size=(B, 20))
    y = np.stack([reference_keypoints(x) for x in q]) + rng.normal(0, 0.002, (B, 21, 3))
    res = wj.solve(right, y)
    a = np.asarray(res.angles)
    assert np.all(a >= LOWER - 1e-7) and np.all(a <= UPPER + 1e-7)
    assert np.all(np.isfinite(np.asarray(res.residual)))


def test_fist_frames_converge_in_two_iterations(right):
    """Real fist frames (fingers pressed against their flexion limits): the first Gauss–Newton steps
    are taken, not rejected. Holding a joint that a step would push past its limit (and projecting
    the rest) gets each frame within 0.5 mm of its 40-iteration residual in two iterations (measured
    0.26 mm). With the limit only as a penalty the first three steps were rejected (20 mm after two
    iterations against 9.5 mm); with projection alone frames stalled at up to 13 mm."""
    rec = wj.io.load_landmarks(wj.model.asset_path("samples", "human_hand_video_landmarks.npz"))
    y = np.asarray(rec.world, np.float32)[250:250 + B]
    two, many = (np.asarray(wj.solve(right, y, config=wj.SolverConfig(iterations=k, tolerance=1e-6)).residual)
                 for k in (2, 40))
    assert np.all(two - many < 0.5e-3), np.max(two - many)
    assert np.max(many) < 0.012


def test_float32_default_dtype_round_trip(right):
    q, y, *_ = synthetic(B, seed=3)
    res = wj.solve(right, y.astype(np.float32))
    assert res.angles.dtype == jnp.float32
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    assert np.median(err) < 0.05 and np.percentile(err, 95) < 0.5


def test_batch_size_invariance(right):
    """Each frame is solved independently: a frame's answer must not depend on its batch."""
    q, y, *_ = synthetic(B, seed=4)
    alone = np.asarray(wj.solve(right, y[:5]).angles)
    inside = np.asarray(wj.solve(right, y).angles)[:5]
    np.testing.assert_allclose(alone, inside, atol=1e-9)
    single = np.asarray(wj.solve(right, y[0]).angles)
    np.testing.assert_allclose(single, inside[0], atol=1e-9)


def test_noise_keeps_errors_bounded(right):
    q, y, *_ = synthetic(B, seed=5)
    rng = np.random.default_rng(5)
    res = wj.solve(right, y + rng.normal(0, 0.001, y.shape))
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    assert np.median(err) < 3.0
    assert 0.5e-3 < np.median(np.asarray(res.residual)) < 2e-3  # ≈ the 1 mm noise


def test_soft_coupling_follows_the_law_on_exact_data(right):
    q, y, *_ = synthetic(B, seed=6)
    res = wj.solve(right, y, coupling="soft")
    np.testing.assert_allclose(np.asarray(res.coupled)[:, 0], 0.22 * q[:, 0], atol=2e-3)
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    assert np.median(err) < 0.05


def test_coupling_gains_are_used(right):
    hand = right.with_coupling(k_flex=0.4, k_abd=0.2)
    rng = np.random.default_rng(7)
    q = rng.uniform(LOWER + 0.02, UPPER - 0.02, size=(B, 20))
    y = np.stack([reference_keypoints(x, 0.4, 0.2) for x in q])
    res = wj.solve(hand, y)
    assert np.median(np.degrees(np.abs(np.asarray(res.angles) - q))) < 0.01
    # the default model cannot explain the thumb as well
    worse = wj.solve(right, y)
    assert np.median(np.asarray(worse.errors)[:, 2:5]) > 10 * np.median(np.asarray(res.errors)[:, 2:5])


def test_masked_landmarks_nan_and_weights(right):
    q, y, *_ = synthetic(B, seed=8)
    y = y.copy()
    y[:, 8] = np.nan  # index tip missing
    w = np.ones((B, 21))
    w[:, 20] = 0.0  # pinky tip ignored
    res = wj.solve(right, y, weights=w)
    e = np.asarray(res.errors)
    assert np.all(e[:, 8] == 0) and np.all(e[:, 20] == 0)
    assert np.all(np.isfinite(np.asarray(res.angles)))
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    # joints still determined by other points stay exact (middle, ring fingers, thumb)
    assert np.median(err[:, 8:16]) < 0.01


def test_too_few_landmarks_are_flagged_not_crashed(right):
    q, y, *_ = synthetic(B, seed=9)
    y = y.copy()
    y[:3, 4:] = np.nan  # frames 0–2: only 4 landmarks left
    y[3, [0, 1, 5, 9, 13, 17]] = np.nan  # frame 3: no palm
    res = wj.solve(right, y)
    flags = np.asarray(res.flags)
    assert np.all(flags[:4] & FLAG_TOO_FEW_LANDMARKS) and not np.any(flags[4:] & FLAG_TOO_FEW_LANDMARKS)
    assert not np.any(np.asarray(res.valid)[:4])
    for field in res:
        assert np.all(np.isfinite(np.asarray(field, np.float64)))


def test_adversarial_inputs_never_give_nan_or_leave_limits(right):
    rng = np.random.default_rng(10)
    n = B
    y = rng.normal(0, 0.1, (n, 21, 3))
    y[0:6] = 0.0  # all points equal
    y[6:12] = np.linspace(0, 1, 21)[None, :, None] * rng.normal(size=(6, 1, 3))  # collinear
    y[12:18] *= 1e4  # huge
    y[18:24] *= 1e-6  # tiny
    nanmask = rng.random((n, 21)) < 0.3
    y[24:36][nanmask[24:36]] = np.nan  # NaN-laced
    y[36:40, :, 2] = 0.0  # coplanar
    res = wj.solve(right, y, check_units=False)
    for field in res:
        assert np.all(np.isfinite(np.asarray(field, np.float64))), field
    a = np.asarray(res.angles)
    assert np.all(a >= LOWER - 1e-7) and np.all(a <= UPPER + 1e-7)


def test_handedness_auto_and_mirror_warning(right, left):
    q, y, *_ = synthetic(B, seed=11)
    mirrored = y * np.array([1, -1, 1])  # a left hand
    assert wj.detect_side(y) == "right" and wj.detect_side(mirrored) == "left"
    res = wj.solve(right, mirrored, side="auto")
    assert np.median(np.degrees(np.abs(np.asarray(res.angles) - q))) < 0.01
    with pytest.warns(UserWarning, match="looks like a left hand"):
        bad = wj.solve(right, mirrored, side="right")
    assert np.all(np.asarray(bad.flags) & FLAG_MIRRORED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wj.solve(left, mirrored, side="left")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda y: y[..., :20, :], r"shape \(\*batch, 21, 3\).*20 points per frame"),
        (lambda y: y.reshape(-1, 63), "flat rows of 63; reshape"),
        (lambda y: np.swapaxes(y, -1, -2), "coordinates before landmarks; swap the last two axes"),
        (lambda y: y[..., :2], "2-D image points"),
        (lambda y: np.full_like(y, np.nan), "no finite value"),
        (lambda y: y * 1000.0, "millimetres.*divide by 1000"),
        (lambda y: np.concatenate([640 + 2000 * (y[..., :2] - y[..., :1, :2]), 0.01 * y[..., 2:]], -1),
         "pixel coordinates"),
        (lambda y: np.abs(y) * 0.1 + 0.5 * np.array([1, 1, 0]), "centimetres|normalised image"),
        (lambda y: y.astype(str), "numeric"),
    ],
)
def test_bad_inputs_raise_clear_errors(right, make, message):
    q, y, *_ = synthetic(4, seed=12)
    with pytest.raises(ValueError, match=message):
        wj.solve(right, make(y))


def test_normalised_image_coordinates_are_recognised(right):
    q, y, *_ = synthetic(4, seed=13)
    img = 0.5 + 0.8 * y[..., :2]  # x, y in [0, 1]
    lm = np.concatenate([img, 0.01 * y[..., 2:]], -1)
    with pytest.raises(ValueError, match="normalised image coordinates"):
        wj.solve(right, lm)


def test_optax_solves_the_same_problem(right):
    import optax

    q, y, *_ = synthetic(4, seed=14)
    opt = optax.adam(0.01)
    res = wj.solve_optax(right, y, optimizer=opt, steps=600)
    assert np.median(np.asarray(res.residual)) < 2e-3
    assert np.all(np.asarray(res.angles) >= LOWER - 1e-9) and np.all(np.asarray(res.angles) <= UPPER + 1e-9)
    # the same optimizer object again: the compiled program is reused, and landmark_loss (eager, here)
    # is one compiled program, not an op-by-op dispatch
    from compile_log import compiles

    with compiles() as compiled:
        again = wj.solve_optax(right, y, optimizer=opt, steps=600)
    assert compiled == [], compiled
    log_scale = np.log(np.asarray(res.scale))
    with compiles() as compiled:
        loss = wj.landmark_loss(right, res.angles, res.rotation, res.translation, log_scale, y)
    assert len(compiled) <= 1, compiled
    np.testing.assert_array_equal(np.asarray(again.angles), np.asarray(res.angles))
    np.testing.assert_allclose(np.asarray(loss), np.asarray(res.cost), rtol=1e-9)


def test_chunks_and_the_start_between_two_programs(right):
    """map_chunks (shared by the one-program kernel and its two stages) gives every frame its own rows
    back, with chunks of 4 frames out of 10 (padded); start_spec announces the shapes of the start
    that the two programs pass on (hard coupling: no coupled angles carried; soft: M of them). That
    the two programs answer as the one: test_solve_inside_jit_then_eager_same_answer."""
    from wuji_jax.ik import api

    a = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    b = {"x": np.arange(10, dtype=np.float32), "none": None}
    seen = []

    def fn(a, b):
        seen.append(a.shape[0])
        return {"s": a.sum(1) * 2 + b["x"], "a": a[:, ::-1]}

    out = api.map_chunks(fn, (a, b), 4)
    assert seen == [4]  # one chunk traced, mapped over three
    np.testing.assert_array_equal(np.asarray(out["s"]), a.sum(1) * 2 + b["x"])
    np.testing.assert_array_equal(np.asarray(out["a"]), a[:, ::-1])

    lm = np.zeros((10, 21, 3), np.float32)
    w, q0 = np.ones((10, 21), np.float32), np.zeros((10, 20), np.float32)
    for coupling in ("hard", "soft"):
        cfg = api.config_arrays(wj.SolverConfig(coupling=coupling), np.float32)
        spec = api.start_spec(right, lm, cfg)
        got = jax.eval_shape(lambda *x: api.start_rows(*x, cfg), right, lm, w, q0)
        assert (spec.rot is None) == (got.rot is None) == (coupling == "hard")
        assert [(s.shape, s.dtype) for s in spec if s is not None] == [(g.shape, g.dtype) for g in got if g is not None]
    assert spec.rot.shape == (10, right.mimic_lower.shape[0]) and spec.q.shape == (10, 20)


def test_solve_inside_jit_then_eager_same_answer(right):
    """wj.solve traced by an outer jax.jit at two batch sizes, then called eagerly, gives one answer
    (a cached jax-array config once made jaxlib run an executable with the wrong argument count)."""
    y = np.asarray(wj.forward_keypoints(right, wj.named_pose("point")))
    f = jax.jit(lambda h, lm: wj.solve(h, lm, check_units=False, iterations=2).angles)
    a1 = f(right, jnp.asarray(y[None]))
    y3 = jnp.asarray(np.broadcast_to(y, (3, 21, 3)))
    f(right, y3)
    a3 = f(right, y3)  # the second call of a shape takes jax's fast path
    eager = wj.solve(right, y[None], iterations=2).angles
    np.testing.assert_allclose(np.asarray(a3), np.broadcast_to(np.asarray(a1), (3, 20)), atol=1e-9)
    np.testing.assert_allclose(np.asarray(eager), np.asarray(a1), atol=1e-9)


def test_float32_sincos_matches_numpy():
    """The solver's own float32 sin/cos (polynomials instead of XLA's libm calls) against float64 numpy."""
    from wuji_jax.hand.geometry import sincos as _sincos

    x = np.concatenate([np.linspace(-3.5, 3.5, 70_001), [0.0, 1e-30, np.pi / 2, -np.pi, 7.0, -12.5]]).astype(np.float32)
    s, c = _sincos(jnp.asarray(x))
    assert s.dtype == jnp.float32
    xs = x.astype(np.float64)
    assert np.abs(np.asarray(s, np.float64) - np.sin(xs)).max() < 2e-7
    assert np.abs(np.asarray(c, np.float64) - np.cos(xs)).max() < 2e-7
    s, c = _sincos(jnp.asarray([np.nan, np.inf], np.float32))
    assert np.isnan(np.asarray(s)).all() and np.isnan(np.asarray(c)).all()
    s64, _ = _sincos(jnp.asarray(xs))  # float64 (x64 on in the tests): numpy's accuracy
    assert np.abs(np.asarray(s64) - np.sin(xs)).max() < 1e-15


def test_contract_and_products_match_einsum():
    """geometry.contract (sums of products of slices) against numpy's einsum, with broadcasting along
    summed and kept axes and ranks that differ; matmul/matvec/matTvec/dot (built on it) likewise."""
    from wuji_jax import geometry as geo

    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 7, 1, 5, 6))
    b = rng.normal(size=(4, 1, 7, 5, 6))
    np.testing.assert_allclose(np.asarray(geo.contract(jnp.asarray(a), jnp.asarray(b), (0, 3))),
                               np.einsum("ipqgb,ipqgb->pqb", np.broadcast_to(a, (4, 7, 7, 5, 6)),
                                         np.broadcast_to(b, (4, 7, 7, 5, 6))), rtol=1e-12)
    c = rng.normal(size=(3, 1, 6))  # a summed axis of size 1 broadcast against 5, lower rank
    d = rng.normal(size=(2, 3, 5, 6))
    np.testing.assert_allclose(np.asarray(geo.contract(jnp.asarray(c), jnp.asarray(d), (-3, -2))),
                               np.einsum("kjb,akjb->ab", np.broadcast_to(c, (3, 5, 6)), d), rtol=1e-12)
    A, B, v = rng.normal(size=(3, 3, 5)), rng.normal(size=(3, 3, 5)), rng.normal(size=(3, 5))
    np.testing.assert_allclose(np.asarray(geo.matmul(A, B)), np.einsum("ikb,kjb->ijb", A, B), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(geo.matvec(A, v)), np.einsum("ikb,kb->ib", A, v), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(geo.matTvec(A, v)), np.einsum("kib,kb->ib", A, v), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(geo.dot(v, v[::-1])), np.einsum("kb,kb->b", v, v[::-1]), rtol=1e-12)



def test_take_matches_numpy_indexing():
    """geometry.take against numpy's fancy indexing: index arrays of one and two axes with runs,
    repeats, reversals and single entries, along leading, middle and negative axes; one of few runs
    as slices (no gather in the traced program), one of more than TAKE_MAX_RUNS runs as the gather."""
    from wuji_jax import geometry as geo

    x = np.arange(7 * 5 * 4, dtype=np.float64).reshape(7, 5, 4)
    for idx, axis in [([3], 0), ([0, 1, 2, 6, 5, 5, 4], 0), ([[4, 0, 1], [2, 3, 3]], 1), (np.arange(4)[::-1], -1),
                      (np.array([[6, 6], [0, 1]]), 0)]:
        want = np.take(x, np.asarray(idx), axis=axis)
        got = geo.take(jnp.asarray(x), idx, axis)
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), want)
    jaxpr = str(jax.make_jaxpr(lambda v: geo.take(v, [[4, 0, 1], [2, 3, 3]], 1))(jnp.asarray(x)))
    assert "gather" not in jaxpr
    many = np.arange(geo.TAKE_MAX_RUNS + 1)[::-1] % 7  # every index a run of its own
    np.testing.assert_array_equal(np.asarray(geo.take(jnp.asarray(x), many, 0)), x[many])
    assert "gather" in str(jax.make_jaxpr(lambda v: geo.take(v, many, 0))(jnp.asarray(x)))
    np.testing.assert_array_equal(np.asarray(geo.take(jnp.asarray(x), [-1, 0], 0)), x[[-1, 0]])
    assert geo.take(jnp.asarray(x), np.zeros((0,), int), 1).shape == (7, 0, 4)
    with pytest.raises(IndexError, match="index 5 out of range for axis 1 of size 5"):
        geo.take(jnp.asarray(x), [0, 5], 1)


def test_float32_atan2_matches_numpy():
    """The solver's own float32 atan2 (one division + a polynomial) against float64 numpy: every
    quadrant, the axes, the origin, the reduction boundary |y| = tan(π/8)·|x| and wide magnitudes."""
    from wuji_jax.hand.geometry import atan2 as _atan2

    rng = np.random.default_rng(0)
    n = 200_000
    y = rng.normal(size=n) * 10.0 ** rng.uniform(-4, 4, n)
    x = rng.normal(size=n) * 10.0 ** rng.uniform(-4, 4, n)
    t = np.tan(np.pi / 8)
    edge = np.array([[0, 0], [0, -1], [1, 0], [-1, 0], [0, 1], [-0.0, -1], [1, 1], [-1, -1],
                     [t, 1], [t * (1 + 1e-7), 1], [-t, -1], [1, t], [1e-30, 1], [1, 1e-30]], np.float64)
    y, x = np.concatenate([y, edge[:, 0]]).astype(np.float32), np.concatenate([x, edge[:, 1]]).astype(np.float32)
    a = _atan2(jnp.asarray(y), jnp.asarray(x))
    assert a.dtype == jnp.float32
    ref = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    err = np.abs(np.asarray(a, np.float64) - ref)
    err = np.minimum(err, 2 * np.pi - err)  # ±π for y = −0
    assert err.max() < 4e-7, (err.max(), y[err.argmax()], x[err.argmax()])
    assert np.isnan(np.asarray(_atan2(jnp.asarray([np.nan, 1.0], np.float32), jnp.asarray([1.0, np.nan], np.float32)))).all()


def test_batches_are_padded_by_at_most_one_chunk(right):
    """programs.padded_frames: powers of two below a chunk, multiples of the chunk above (never more
    than one chunk of padding); the padding does not change a frame's answer: 3 frames (padded to 4)
    give what the same frames give inside a batch of 64, and a single frame (no batch axis) too."""
    from wuji_jax.runtime import programs

    assert [programs.padded_frames(n, 128) for n in (0, 1, 2, 3, 5, 64, 65, 128, 129, 10_000)] == \
        [0, 1, 2, 4, 8, 64, 128, 128, 256, 10_112]
    assert all(programs.padded_frames(n, c) - n < c for n in range(1, 1000, 7) for c in (1, 8, 128, 65536))
    _, y, *_ = synthetic(64, seed=9)
    whole = wj.solve(right, y)
    part = wj.solve(right, y[5:8])
    one = wj.solve(right, y[5])
    assert part.angles.shape == (3, 20) and one.angles.shape == (20,) and one.residual.shape == ()
    np.testing.assert_allclose(np.asarray(part.angles), np.asarray(whole.angles)[5:8], atol=1e-9)
    np.testing.assert_allclose(np.asarray(one.angles), np.asarray(whole.angles)[5], atol=1e-9)
    empty = wj.solve(right, np.zeros((0, 21, 3)))
    assert empty.angles.shape == (0, 20) and empty.flags.shape == (0,)


def test_a_warm_loop_compiles_nothing_and_leaves_no_thread(right):
    """A JAX function's semantics, as users time it: after one warm-up call, a loop of calls compiles
    nothing (JAX's public compile log) and no thread is left running after an answer."""
    import threading

    from compile_log import compiles

    _, y, *_ = synthetic(64, seed=10)
    jax.block_until_ready(wj.solve(right, y))
    threads = threading.active_count()
    with compiles() as compiled:
        for _ in range(3):
            jax.block_until_ready(wj.solve(right, y))
    assert compiled == [] and threading.active_count() == threads


def test_sums_are_written_for_the_platform_compiled_for():
    """geometry.total/contract: adds of slices when traced for the CPU (XLA:CPU runs reductions over
    non-minor axes slowly), reductions for an accelerator (smaller programs there) and for REDUCE
    (the solver's derivative of small batches, on any device); equal values."""
    from wuji_jax import geometry as geo

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4, 5)), rng.normal(size=(4, 1))
    ops = {}
    contexts = {p: geo.summing(p) for p in ("cpu", "gpu", geo.REDUCE, None)} | {"outside": contextlib.nullcontext()}
    for platform, context in contexts.items():
        with context:
            jaxpr = str(jax.make_jaxpr(lambda a, b: (geo.total(a, (0, 2)), geo.contract(a, b, 1)))(a, b))
            t, c = geo.total(jnp.asarray(a), (0, 2)), geo.contract(jnp.asarray(a), jnp.asarray(b), 1)
        ops[platform] = jaxpr.count("reduce_sum")
        np.testing.assert_allclose(np.asarray(t), a.sum((0, 2)), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(c), (a * b).sum(1), rtol=1e-12)
    # None and outside any context: JAX's default backend (this machine's CPU: adds of slices)
    default = 0 if jax.default_backend() == "cpu" else 2
    assert ops == {"cpu": 0, "gpu": 2, geo.REDUCE: 2, None: default, "outside": default}


def test_settings_and_start_poses_are_checked(right):
    """Bad SolverConfig values and absurd start poses are one-line ValueErrors naming what is wrong
    (before anything compiles)."""
    for bad, word in [(dict(flag_residual=float("nan")), "flag_residual"), (dict(iterations=-1), "iterations"),
                      (dict(huber_delta=0.0), "huber_delta"), (dict(tolerance=float("inf")), "tolerance"),
                      (dict(damping=1e7), "damping"), (dict(min_landmarks=30), "min_landmarks")]:
        with pytest.raises(ValueError, match=word) as e:
            wj.SolverConfig(**bad)
        assert "\n" not in str(e.value)
    _, y, *_ = synthetic(2, seed=11)
    q0 = np.zeros((2, 20))
    q0[1, 4] = 1e6
    with pytest.raises(ValueError, match=r"q0\[1, 4\] \(index_finger_mcp_flex\).*radians, not degrees"):
        wj.solve(right, y, q0=q0)
    with pytest.raises(ValueError, match="thumb_cmc_flex"):
        wj.FrameSolver(right)(y[0].astype(np.float32), q0=np.full(20, np.nan, np.float32))


def test_unseen_fingers_and_high_residuals_are_flagged_and_not_valid(right):
    """A finger with none of its distal landmarks observed gets FLAG_UNSEEN_FINGER; it and a fit beyond
    flag_residual are not valid (valid: every finger observed and fitted within flag_residual)."""
    from wuji_jax.ik import FLAG_HIGH_RESIDUAL, FLAG_NAMES, FLAG_UNSEEN_FINGER

    _, y, *_ = synthetic(64, seed=12)
    y = y.copy()
    y[0, [6, 7, 8]] = np.nan  # index finger unseen
    y[1, [2, 3, 4, 14, 15, 16, 18, 19, 20]] = np.nan  # thumb, ring and pinky unseen
    y[2, [8, 12]] = np.nan  # two tips missing: every finger still seen
    y[3] = y[3] + np.random.default_rng(0).normal(0, 0.03, (21, 3))  # 3 cm noise: a poor fit
    res = wj.solve(right, y)
    flags, valid = np.asarray(res.flags), np.asarray(res.valid)
    assert flags[0] & FLAG_UNSEEN_FINGER and flags[1] & FLAG_UNSEEN_FINGER and not valid[0] and not valid[1]
    assert not flags[2] & FLAG_UNSEEN_FINGER and valid[2]
    assert flags[3] & FLAG_HIGH_RESIDUAL and not valid[3]
    assert valid[4:].all() and FLAG_NAMES[FLAG_UNSEEN_FINGER] == "unseen_finger"
