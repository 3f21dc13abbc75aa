"""wuji_jax.tiered: jaxprs evaluated in numpy (each primitive against JAX's own result), and the
solver's first answers in numpy against its compiled program."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wuji_jax import tiered

RNG = np.random.default_rng(7)
X = RNG.normal(size=(4, 5)).astype(np.float32)
Y = RNG.normal(size=(4, 5)).astype(np.float32)
I = np.array([[7, -7, 3], [-3, 5, 0]], np.int32)
J = np.array([[2, 2, -3], [3, -2, 4]], np.int32)


def _same(f, *args, atol=1e-6):
    """f's jaxpr evaluated in numpy equals f under JAX (values, dtypes, shapes, tree)."""
    closed = jax.make_jaxpr(f)(*args)
    got = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(f(*args)), tiered.evaluate(closed, *args))
    want = f(*args)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        w = np.asarray(w)
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape, (g, w)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, atol=atol, rtol=1e-5, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


CASES = {
    "elementwise": (lambda x, y: [jnp.sin(x) * jnp.cos(y) + jnp.exp(x / 4) - jnp.log(jnp.abs(y) + 1),
                                  jnp.sqrt(jnp.abs(x)), jax.lax.rsqrt(jnp.abs(x) + 1), jnp.arctan2(x, y),
                                  x ** 3, jnp.power(jnp.abs(x), y), jnp.sign(y), jnp.floor(x), jnp.ceil(x),
                                  jnp.tanh(x), jnp.maximum(x, jnp.nan), jnp.minimum(x, y), -x,
                                  jnp.isfinite(x / jnp.zeros_like(x)), jnp.square(y)], (X, Y)),
    "rounding": (lambda x: [jnp.round(x * 2.5), jax.lax.round(x * 2.5, jax.lax.RoundingMethod.AWAY_FROM_ZERO),
                            jax.lax.round(np.float32([0.5, 1.5, -0.5, -2.5]), jax.lax.RoundingMethod.AWAY_FROM_ZERO)],
                 (X,)),
    "integers": (lambda i, j: [jax.lax.div(i, j), jax.lax.rem(i, j), i // j, i % j, i * j - i,
                               jnp.maximum(i, j), (i > j) & (i != 0) | ~(j < 0), i.astype(np.float32) / 2],
                 (I, J)),
    "selection": (lambda x, y, i: [jnp.where(x > y, x, y), jax.lax.select_n(jnp.abs(i) % 3, x[:2, :3], y[:2, :3],
                                                                            -x[:2, :3]),
                                   jax.lax.clamp(np.float32(-0.5), x, np.float32(0.5)), jnp.clip(y, -1, 1)], (X, Y, I)),
    "shapes": (lambda x, y: [jnp.broadcast_to(x[:, None, :], (4, 3, 5)), x.reshape(5, 4), x.T, x[None, :, None],
                             jnp.squeeze(x[:, :1]), jnp.flip(x, 1), jnp.concatenate([x, y], 1), jnp.stack([x, y], 2),
                             x[1:4:2, ::2], jnp.pad(x, ((1, 2), (0, 1)), constant_values=3.0),
                             jnp.split(y, [1, 3], axis=1), jax.lax.iota(np.int32, 6),
                             jax.lax.broadcasted_iota(np.float32, (2, 3), 1)], (X, Y)),
    "dynamic": (lambda x, k: [jax.lax.dynamic_slice(x, (k, k + np.int32(3)), (2, 3)),  # starts clamped into the array
                              jax.lax.dynamic_update_slice(x, jnp.ones((2, 2), x.dtype), (k - np.int32(9), k)),
                              jax.lax.dynamic_slice_in_dim(x, k, 2, 1)], (X, np.int32(2))),
    "reductions": (lambda x, b: [jnp.sum(x, 0), jnp.max(x, 1), jnp.min(x), jnp.prod(x, (0, 1)), jnp.all(b, 0),
                                 jnp.any(b), jnp.argmax(x, 1), jnp.argmin(x, 0), jnp.mean(x, 1)], (X, X > 0)),
    "dot_general": (lambda x, y: [x @ y.T, jnp.einsum("ij,ij->i", x, y),
                                  jnp.einsum("bij,bjk->bik", x.reshape(2, 2, 5), y.reshape(2, 5, 2)),
                                  jax.lax.dot_general(x.reshape(2, 2, 5), y.reshape(2, 2, 5), (((1, 2), (1, 2)), ((0,), (0,))))],
                    (X, Y)),
    "gather": (lambda x, i: [x[np.array([3, -1, 0])], x[:, np.array([4, 0, 0])], x[i % 4, i % 5],
                             jnp.take_along_axis(x, (x[:, :2] > 0).astype(np.int32) + 1, 1),
                             jnp.take(x, np.array([1, 9, -1]), axis=0, mode="fill", fill_value=-5.0),
                             jnp.take(x, np.array([1, 9]), axis=1, mode="clip"), x[2], x[i[0, 0] % 4, 1:3]],
               (X, I)),
    "scatter": (lambda x, y: [(x := jnp.asarray(x)).at[np.array([0, 2])].set(y[:2]), x.at[np.array([1, 1, 3])].add(y[:3]),
                              x.at[:, 1].set(7.0), x.at[np.array([0, 5])].set(y[:2], mode="drop"),
                              x.at[np.array([2, 2])].min(y[:2]), x.at[np.array([2])].max(y[1:2]),
                              x.at[np.array([3, 3])].multiply(y[:2]), x.at[1, 2].add(1.0)], (X, Y)),
    "control": (lambda x, n: [jax.lax.fori_loop(0, 3, lambda i, a: a * 2 + i, x),
                              jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))[1],
                              jax.lax.scan(lambda c, r: (c + r, c * r), x[0], x, reverse=True),
                              jax.lax.switch(n % 3, [lambda v: v, lambda v: -v, lambda v: v * 2], x),
                              jax.lax.cond(n > 2, lambda: jnp.sum(x), lambda: jnp.max(x)),
                              jax.jit(lambda v: jnp.cos(v) + 1)(x)], (X, np.int32(4))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_primitive_is_evaluated_as_jax_evaluates_it(name):
    f, args = CASES[name]
    _same(f, *args)


def test_custom_derivative_rules_are_evaluated_by_their_primal():
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x) * 2

    f.defjvp(lambda p, t: (f(p[0]), t[0]))

    @jax.custom_vjp
    def g(x):
        return x * 3 + 1

    g.defvjp(lambda x: (g(x), None), lambda r, ct: (ct,))
    _same(lambda x: [f(x), g(x), jax.lax.stop_gradient(x) + 1], X)


def test_an_unknown_primitive_is_named_and_waits_for_the_compiled_program():
    def f(x):
        return jnp.sort(x, 1) * 2

    with pytest.raises(tiered.Unsupported, match="sort"):
        tiered.evaluate(jax.make_jaxpr(f)(X), X)
    made = tiered.Tiered(f, X)
    out = made(X)  # no numpy answer: the compiled program's
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(np.asarray(out), np.sort(X, 1) * 2)


def test_a_fault_of_the_evaluator_is_warned_about_once_and_the_compiled_program_answers(monkeypatch):
    def broken(*a, **k):
        raise ValueError("broken on purpose")

    monkeypatch.setitem(tiered._IMPL, "select_n", broken)
    made = tiered.Tiered(lambda x: jnp.cos(jnp.where(x > 0, x, -x)) + 1, X)
    with pytest.warns(RuntimeWarning, match="numpy tier failed.*broken on purpose"):
        assert made.numpy(X) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = made(X)  # said once; the compiled program answers
    np.testing.assert_allclose(np.asarray(out), np.cos(X) + 1, rtol=1e-6)


def test_without_the_numpy_tier_the_program_is_compiled_at_once(monkeypatch):
    monkeypatch.setenv(tiered.ENV_TIERED, "0")
    made = tiered.Tiered(lambda x: x * 2, X)
    assert made.ready and made.numpy(X) is None
    assert isinstance(made(X), jax.Array)


def test_numpy_only_starts_no_compilation_until_a_call_outside_needs_it():
    """Inside numpy_only a program answers in numpy and compiles nothing; its first call after the
    block starts the compilation (answering in numpy meanwhile), and later calls run the compiled
    program; ``compiled`` inside the block compiles at once."""
    f = lambda x: jnp.cos(x) * 2 + x  # noqa: E731
    want = np.cos(X) * 2 + X
    before = tiered.compiling()  # (a compilation an earlier test started may end meanwhile: <=)
    with tiered.numpy_only():
        made = tiered.Tiered(f, X)
        for _ in range(3):
            out = made(X)
            assert isinstance(out, np.ndarray)
            np.testing.assert_allclose(out, want, rtol=1e-6)
        assert not made.ready and tiered.compiling() <= before and not made._thread.is_alive()
    out = made(X)  # outside: the compilation starts now; this answer is numpy's or the compiled one's
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)
    made.compiled  # noqa: B018 (waits)
    assert made.ready and isinstance(made(X), jax.Array)
    with tiered.numpy_only():
        other = tiered.Tiered(lambda x: jnp.sin(x) - x, X)
        program = other.compiled  # asked for: compiled now, inside the block too
        np.testing.assert_allclose(np.asarray(program(X)), np.sin(X) - X, rtol=1e-6)
        assert other.ready and isinstance(other(X), jax.Array)


def test_a_held_program_needed_by_several_threads_at_once_compiles_once():
    """A program first called inside numpy_only, then called by four threads at once after it (and
    asked for ``compiled``): its compilation starts once (a thread started twice raised, and the
    process aborted), every answer is right."""
    import threading

    f = lambda x: jnp.tanh(x) * 3 - x  # noqa: E731
    want = np.tanh(X) * 3 - X
    with tiered.numpy_only():
        made = tiered.Tiered(f, X)
        made(X)
    start, outs = threading.Barrier(4), []

    def call():
        start.wait()
        outs.append(np.asarray(made(X)))
        outs.append(np.asarray(made.compiled(X)))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outs) == 8
    for out in outs:
        np.testing.assert_allclose(out, want, rtol=1e-6)


def test_numpy_only_compiles_what_numpy_cannot_run():
    with tiered.numpy_only():
        made = tiered.Tiered(lambda x: jnp.sort(x, 1) * 2, X)
        out = made(X)  # sort: no numpy tier, so the compiled program, compiled and waited for here
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(np.asarray(out), np.sort(X, 1) * 2)


def test_numpy_only_keeps_solve_and_frame_solver_from_compiling(right):
    """wj.solve and FrameSolver inside the block: numpy answers, nothing compiling in the background
    (the answers themselves are held against the compiled programs by the tests above and below)."""
    import wuji_jax as wj

    y = _sample(3)
    before = tiered.compiling()
    with tiered.numpy_only():
        res = wj.solve(right.astype(jnp.float32), y)
        frame = wj.FrameSolver(right)(y[0])
        assert tiered.compiling() <= before
    assert res.angles.shape == (3, 20)
    np.testing.assert_allclose(frame.angles, np.asarray(res.angles[0]), atol=1e-5)


def _sample(frames):
    from wuji_jax import batch

    world = np.load(batch.sample_landmarks_path())["world"].astype(np.float32)
    # fist frames (the hardest for the thumb) and frames spread over the recording
    idx = np.concatenate([np.arange(258, 282), np.linspace(0, len(world) - 1, max(frames - 24, 0)).astype(int)])[:frames]
    return world[idx]


@pytest.mark.parametrize("coupling, frames, warm", [("soft", 8, True)])  # (hard: the test below)
def test_the_solver_answers_in_numpy_as_its_compiled_program(right, coupling, frames, warm):
    """The first answers, in numpy while the solver compiles, against the compiled program's: the
    same flags, iterations, validity; angles and fit to float32 rounding."""
    from wuji_jax.cache import quick_compile_options
    from wuji_jax.solver import api

    lm = _sample(frames)
    lm[3, 8] = np.nan  # a missing landmark
    w = np.ones((frames, 21), np.float32)
    q0 = np.tile(np.asarray(api.neutral_angles(right), np.float32), (frames, 1))
    q0[1:, 0] += 0.1
    cfg = api.config_arrays(api.DEFAULT_CONFIG.replace(coupling=coupling), np.float32)
    made = tiered.Tiered(lambda lm, w, q0: api.solve_rows(right, lm, w, q0, cfg, warm), lm, w, q0,
                         compiler_options=quick_compile_options("cpu"))
    first = made(lm, w, q0)
    assert not made.ready  # (seconds of compilation against a fraction of a second in numpy)
    assert all(isinstance(v, np.ndarray) for v in first.values())
    want = {k: np.asarray(v) for k, v in made.compiled(lm, w, q0).items()}
    assert sorted(first) == sorted(want)
    for k in ("flags", "valid", "converged", "iterations"):
        np.testing.assert_array_equal(first[k], want[k], err_msg=k)
    np.testing.assert_allclose(first["angles"], want["angles"], atol=5e-5)
    np.testing.assert_allclose(first["coupled"], want["coupled"], atol=5e-5)
    np.testing.assert_allclose(first["keypoints"], want["keypoints"], atol=2e-6)
    np.testing.assert_allclose(first["residual"], want["residual"], atol=1e-7)
    np.testing.assert_allclose(first["scale"], want["scale"], rtol=1e-5)
    assert want["valid"].sum() == frames and want["residual"].max() < 0.02


def test_a_process_that_exits_while_compiling_waits_for_the_compilation():
    """The first wj.solve answers in numpy and the process ends at once after it: the compilation in
    its thread is waited for at exit (XLA is not torn down under it), and the exit is clean."""
    code = ("import numpy as np, wuji_jax as wj; from wuji_jax import batch; "
            "y = np.load(batch.sample_landmarks_path())['world'][:4].astype(np.float32); "
            "r = wj.solve(wj.load_hand('right'), y); "
            "from wuji_jax.tiered import _pending; print(len(_pending) > 0, float(np.asarray(r.residual).max()) < 0.02)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "WUJI_JAX_NO_CACHE": "1", tiered.ENV_TIERED: "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "True"]


def test_the_first_solve_of_a_few_chunks_answers_in_numpy_and_later_ones_compiled(right, monkeypatch):
    """wj.solve on 200 frames (two 128-frame chunks) in a process that has not compiled them: the first
    call answers in numpy (JAX arrays out, the padding dropped), the call after the compilation runs
    the compiled program, with the same fit to float32 rounding."""
    import wuji_jax as wj
    from wuji_jax.solver import api

    monkeypatch.setattr(api, "_STAGES", {})
    lm = _sample(200)  # the fist frames among them
    lm[3, 8] = np.nan  # a missing landmark
    first = wj.solve(right, lm)
    made = [p for p in api._STAGES.values() if isinstance(p, tiered.Tiered)]
    assert len(made) == 1 and not made[0].ready
    assert isinstance(first.angles, jax.Array) and first.angles.shape == (200, 20) and first.errors.shape == (200, 21)
    tiered.wait()
    later = wj.solve(right, lm)
    for k in ("flags", "valid", "converged", "iterations"):
        np.testing.assert_array_equal(np.asarray(getattr(first, k)), np.asarray(getattr(later, k)), err_msg=k)
    np.testing.assert_allclose(np.asarray(first.angles), np.asarray(later.angles), atol=5e-5)
    np.testing.assert_allclose(np.asarray(first.keypoints), np.asarray(later.keypoints), atol=2e-6)
    np.testing.assert_allclose(np.asarray(first.residual), np.asarray(later.residual), atol=1e-7)
    assert np.asarray(later.valid).all() and float(np.max(np.asarray(later.residual))) < 0.02
