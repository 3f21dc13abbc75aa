"""Several devices: wj.use_cpu_cores, big batches split over the local devices and solved in chunks."""

import os
import subprocess
import sys
import textwrap

import jax
import pytest

import wuji_jax as wj

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_use_cpu_cores_after_start_says_what_to_do():
    have = len(jax.devices("cpu"))  # starts the backend
    assert wj.use_cpu_cores(have) == have  # the count it already has: harmless
    with pytest.raises(RuntimeError, match=r"already runs with \d+ CPU device.*JAX_NUM_CPU_DEVICES=%d" % (have + 1)):
        wj.use_cpu_cores(have + 1)
    with pytest.raises(ValueError, match="n must be >= 1"):
        wj.use_cpu_cores(0)
    assert wj.devices.cpu_core_count() >= 1


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import jax, jax.numpy as jnp
    import wuji_jax as wj

    assert wj.use_cpu_cores(2) == 2
    assert len(jax.local_devices()) == 2

    hand = wj.load_hand("right")
    rng = np.random.default_rng(3)
    lo, hi = np.asarray(hand.lower), np.asarray(hand.upper)
    q = rng.uniform(lo, hi, size=(21, 20))
    y = np.asarray(wj.forward_keypoints(hand, jnp.asarray(q, jnp.float32))) + [0.1, -0.2, 0.4]
    y = y.reshape(3, 7, 21, 3)  # 21 frames: padded to 22 for two devices
    y[1, 2, 8] = np.nan  # a masked fingertip
    from wuji_jax import programs
    programs.SPLIT_MIN_FRAMES = 4
    programs.CHUNK_FRAMES = 4  # 11 frames per device: 3 chunks of 4 (one padded)
    split = wj.solve(hand, y)
    # another batch size whose chunks per device round up alike (17 frames: 9 a device, 3 chunks of 4,
    # padded): the same program, nothing compiled
    import logging
    compiled = []
    handler = logging.Handler()
    handler.emit = lambda r: compiled.append(r.getMessage())
    logging.getLogger("jax").addHandler(handler)
    with jax.log_compiles():
        other = wj.solve(hand, y.reshape(21, 21, 3)[:17])
    logging.getLogger("jax").removeHandler(handler)
    other_programs = [m for m in compiled if "Compiling" in m and "per_device" in m]
    programs.SPLIT_MIN_FRAMES = 10**9
    programs.CHUNK_FRAMES = 8
    chunked = wj.solve(hand, y)  # one device: 24 frames (3 padded), 3 chunks of 8
    # the same frames in other groups, each solved on its own (one program of 8 frames for both)
    flat = y.reshape(21, 21, 3)
    parts = [wj.solve(hand, flat[a:b]) for a, b in [(0, 5), (5, 13), (13, 21)]]
    one = wj.IKResult(*[np.concatenate([np.asarray(f) for f in fs]).reshape((3, 7) + np.shape(fs[0])[1:])
                        for fs in zip(*parts)])
    print(json.dumps(dict(
        split_devices=len(split.angles.sharding.device_set), one_devices=len(chunked.angles.sharding.device_set),
        shape=list(split.angles.shape), kp_shape=list(split.keypoints.shape),
        max_angle_diff=float(np.abs(np.asarray(split.angles) - np.asarray(one.angles)).max()),
        max_kp_diff=float(np.abs(np.asarray(split.keypoints) - np.asarray(one.keypoints)).max()),
        max_angle_err=float(np.delete(np.abs(np.asarray(split.angles).reshape(21, 20) - q), 9, 0).max()),
        same_flags=bool((np.asarray(split.flags) == np.asarray(one.flags)).all()),
        chunked_angle_diff=float(np.abs(np.asarray(chunked.angles) - np.asarray(one.angles)).max()),
        chunked_same_flags=bool((np.asarray(chunked.flags) == np.asarray(one.flags)).all()),
        other_programs=len(other_programs), other_shape=list(other.angles.shape),
        other_angle_diff=float(np.abs(np.asarray(other.angles) - np.asarray(one.angles).reshape(21, 20)[:17]).max()),
    )))
""")


def test_big_batches_split_over_devices_and_chunks_give_the_same_answer():
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["split_devices"] == 2 and r["one_devices"] == 1
    assert r["shape"] == [3, 7, 20] and r["kp_shape"] == [3, 7, 21, 3]
    assert r["max_angle_diff"] < 1e-5 and r["max_kp_diff"] < 1e-6 and r["same_flags"]
    assert r["chunked_angle_diff"] < 1e-5 and r["chunked_same_flags"]
    assert r["other_programs"] == 0 and r["other_shape"] == [17, 20] and r["other_angle_diff"] < 1e-5
    assert r["max_angle_err"] < 0.02  # noise-free, float32 (the frame with a masked tip aside): the answer itself


def test_chunk_sizes_per_platform():
    """CPU solves chunks of CHUNK_FRAMES (the LM state stays in cache); accelerators chunks of
    ACCELERATOR_CHUNK_FRAMES; the solver's names are the policy's (wuji_jax.runtime.programs)."""
    from wuji_jax.runtime import programs
    from wuji_jax.ik import api

    assert api.chunk_frames("cpu") == api.CHUNK_FRAMES == programs.CHUNK_FRAMES == 128
    assert api.chunk_frames("gpu") == api.chunk_frames("tpu") == api.ACCELERATOR_CHUNK_FRAMES == 65536
    assert [programs.padded_frames(n, 65536) for n in (1, 64, 65, 300, 65_536, 65_537, 10**6)] == \
        [1, 64, 128, 512, 65_536, 131_072, 16 * 65_536]
