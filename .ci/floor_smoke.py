"""Smoke test of wuji_jax on whatever jax/jaxlib/optax/numpy are installed: CI runs it on exactly the
lowest versions pyproject.toml declares (.ci/floor, called by .ci/run). Independent of tests/: plain
asserts, one line a check; exit status 1 if any check failed (the other checks still run).

It exercises the APIs that set the floors: jax.config "jax_num_cpu_devices" (use_cpu_cores), the
compilation cache options (enable_compilation_cache), jax.tree_util.register_dataclass (HandModel,
SolverConfig), custom_jvp with float0 tangents (jax.grad through solve), the top-level jax.shard_map
with check_vma (solve split over two CPU devices), ShapeDtypeStruct(sharding=) + Lowered.compile()
(FrameSolver), optax.adam's update(..., value=, grad=, value_fn=) (solve_optax), optax in calibrate,
and the command line (`python -m wuji_jax solve`, NamedSharding over the devices).

The time is XLA compiling, mostly on one core: the checks run in three processes at once (this one,
`--part optax`, and the command line), which fills two cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

T0 = time.perf_counter()
PART = sys.argv[2] if sys.argv[1:2] == ["--part"] else "main"
FAILED: list[str] = []
state: dict = {}


def check(name: str, fn):
    """Run one check and print one line; a failure is reported and the remaining checks still run."""
    t = time.perf_counter()
    try:
        detail = fn()
    except Exception as e:  # noqa: BLE001
        FAILED.append(name)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"FAIL {name:<34} {time.perf_counter() - t:6.1f} s  {type(e).__name__}: {first}", flush=True)
        if os.environ.get("FLOOR_SMOKE_TRACEBACK"):
            traceback.print_exc()
        return
    print(f"ok   {name:<34} {time.perf_counter() - t:6.1f} s  {detail or ''}", flush=True)


def child_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}


if PART == "main":
    TMP = Path(tempfile.mkdtemp(prefix="wuji-floor-"))
    # started before this process imports JAX, so that all three compile side by side
    state["optax"] = subprocess.Popen([sys.executable, __file__, "--part", "optax"], env=child_env())
    state["cli_out"] = TMP / "x.npz"
    state["cli"] = subprocess.Popen(
        [sys.executable, "-m", "wuji_jax", "solve", "-o", str(state["cli_out"]), "--no-cache", "--no-plot"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=TMP)

try:
    import jax
    import jax.numpy as jnp
    import optax

    import wuji_jax as wj
except BaseException:
    for p in (state.get("optax"), state.get("cli")):
        if p is not None:
            p.kill()
    raise


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


# ------------------------------------------------------------------------------------ the checks

def devices():
    n = wj.use_cpu_cores(2)  # jax_num_cpu_devices, before JAX starts
    assert len(jax.local_devices()) == 2 == n, jax.local_devices()
    return f"{n} CPU devices"


def cache():
    folder = wj.enable_compilation_cache(TMP / "xla")
    assert folder is not None and wj.cache.compilation_cache_dir() == folder, folder
    state["cache"] = Path(folder)
    return folder


def load():
    hand = wj.load_hand("right")
    leaves = jax.tree_util.tree_leaves(hand)  # register_dataclass
    assert leaves and hand.num_joints == 20, hand.num_joints
    state["hand"] = hand
    return f"{len(leaves)} leaves"


def synthetic(n, seed):
    """Random in-limit angles -> forward_keypoints -> random rotation, scale and translation."""
    hand = state["hand"]
    r = np.random.default_rng(seed)
    lo, hi = np.asarray(hand.lower), np.asarray(hand.upper)
    q = r.uniform(lo + 0.02, hi - 0.02, size=(n, 20)).astype(np.float32)
    kp = np.asarray(wj.forward_keypoints(hand, q), np.float64)
    Q, _ = np.linalg.qr(r.normal(size=(n, 3, 3)))
    Q *= np.sign(np.linalg.det(Q))[:, None, None]
    s, t = r.uniform(0.8, 1.2, n), r.normal(size=(n, 3)) * 0.3
    y = s[:, None, None] * np.einsum("bij,bkj->bki", Q, kp) + t[:, None, :]
    return q, y.astype(np.float32)


def fk():
    hand = state["hand"]
    lo, hi = np.asarray(hand.lower), np.asarray(hand.upper)
    q = np.random.default_rng(0).uniform(lo, hi, size=(4, 20))
    kp = wj.forward_keypoints(hand, jnp.asarray(q, jnp.float32))
    assert kp.shape == (4, 21, 3) and bool(jnp.all(jnp.isfinite(kp))), kp.shape
    return f"shape {kp.shape}"


def solve():
    q, y = synthetic(8, seed=1)
    res = wj.solve(state["hand"], y)
    state["first8"] = y, res
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    assert res.angles.shape == (8, 20) and np.median(err) < 0.05, (res.angles.shape, np.median(err))
    assert np.all(np.asarray(res.valid)), np.asarray(res.flags)
    return f"median error {np.median(err):.4f} deg, max {err.max():.3f} deg"


def second_call():
    """A JAX function's semantics: the second wj.solve of the same size compiles nothing (JAX's public
    compile log) and gives the same answer."""
    import logging

    y, first = state["first8"]
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles():
            again = wj.solve(state["hand"], y)
    finally:
        logging.getLogger("jax").removeHandler(handler)
    compiled = [m for m in seen if "Compiling" in m]
    diff = float(np.max(np.abs(np.asarray(again.angles) - np.asarray(first.angles))))
    assert not compiled and diff == 0.0, (compiled, diff)
    return "nothing compiled, the same angles"


def frame_solver():
    q, y = synthetic(1, seed=2)
    res = wj.FrameSolver(state["hand"])(y[0])
    err = np.degrees(np.abs(res.angles - q[0]))
    assert isinstance(res.angles, np.ndarray) and res.angles.shape == (20,), type(res.angles)
    assert np.median(err) < 0.05, np.median(err)
    return f"median error {np.median(err):.4f} deg"


def split():
    from wuji_jax.runtime.devices import split_over_devices

    q, y = synthetic(512, seed=3)  # >= SPLIT_MIN_FRAMES per device: jax.shard_map over the 2 devices
    assert split_over_devices(512) is not None
    res = wj.solve(state["hand"], y)
    err = np.degrees(np.abs(np.asarray(res.angles) - q))
    assert res.angles.shape == (512, 20) and np.median(err) < 0.05, np.median(err)
    return f"median error {np.median(err):.4f} deg over {len(res.angles.sharding.device_set)} devices"


def cache_written():
    files = [p for p in state["cache"].rglob("*") if p.is_file()]
    assert files, f"nothing written under {state['cache']}"
    return f"{len(files)} files"


def grad():
    _, y = synthetic(8, seed=1)
    hand, y = state["hand"], jnp.asarray(y)
    g = jax.grad(lambda y: jnp.sum(wj.solve(hand, y).angles))(y)
    assert g.shape == y.shape and bool(jnp.all(jnp.isfinite(g))) and bool(jnp.any(g != 0)), g
    return f"|grad| max {float(jnp.max(jnp.abs(g))):.3g}"


def solve_optax():
    _, y = synthetic(20, seed=4)  # the frames calibrate uses too: its solve reuses this one's compilation
    state["y20"] = y
    res = wj.solve_optax(state["hand"], y, steps=50)
    assert res.angles.shape == (20, 20) and np.all(np.isfinite(np.asarray(res.residual))), res.residual
    assert np.all(np.asarray(res.iterations) == 50)
    return f"median residual {np.median(np.asarray(res.residual)) * 1e3:.2f} mm"


def calibrate():
    hand = wj.calibrate(state["hand"], state["y20"], rounds=1, steps=20)
    leaves = jax.tree_util.tree_leaves(hand)
    moved = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                for a, b in zip(leaves, jax.tree_util.tree_leaves(state["hand"])))
    assert all(np.all(np.isfinite(np.asarray(x))) for x in leaves)
    return f"largest change {moved:.2e}"


def optax_part():
    rc = state["optax"].wait(timeout=900)
    assert rc == 0, f"exit {rc} (its FAIL lines are above)"


def cli():
    stdout, stderr = state["cli"].communicate(timeout=900)
    rc = state["cli"].returncode
    last = (stderr.strip().splitlines() or [""])[-1]
    assert rc == 0, f"exit {rc}: {last}\n{stdout}\n{stderr}"
    with np.load(state["cli_out"]) as z:
        n = len(z[z.files[0]])
    assert n > 0
    solved = [line for line in stdout.splitlines() if line.startswith("solved")]
    return f"exit 0, {n} rows" + (f"; {solved[0][:90]}" if solved else "")


PARTS = {
    "main": [("use_cpu_cores(2)", devices), ("enable_compilation_cache", cache), ("load_hand", load),
             ("forward_keypoints (4, 20)", fk), ("solve 8 frames", solve),
             ("second solve compiles nothing", second_call), ("FrameSolver 1 frame", frame_solver),
             ("solve 512 frames, shard_map", split), ("compilation cache written", cache_written),
             ("process: grad, optax", optax_part), ("process: CLI solve -o x.npz", cli)],
    "optax": [("load_hand (second process)", load), ("grad of solve", grad),
              ("solve_optax 50 steps", solve_optax), ("calibrate 20 frames", calibrate)],
}

if PART == "main":
    names = ("jax", "jaxlib", "optax", "numpy", "ml_dtypes", "chex")
    print("versions: " + ", ".join(f"{m} {_version(m)}" for m in names) + f", python {sys.version.split()[0]}",
          flush=True)
for name, fn in PARTS[PART]:
    check(name, fn)
if PART == "main":
    shutil.rmtree(TMP, ignore_errors=True)
if FAILED:
    sys.exit(f"floor smoke{'' if PART == 'main' else ' part ' + PART} FAILED ({len(FAILED)} of {len(PARTS[PART])} "
             f"checks: {', '.join(FAILED)}) in {time.perf_counter() - T0:.1f} s")
if PART == "main":
    print(f"floor smoke passed in {time.perf_counter() - T0:.1f} s")
