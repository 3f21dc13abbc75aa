import os

# XLA's LLVM backend at -O0 for the tests (read when JAX starts below; CLI and notebook subprocesses
# inherit it): the solver's kernels compile 35-40 % faster (batch 1: 10.6 -> 6.8 s, batch 64:
# 13.5 -> 8.1 s), and compilation is most of the suite's time. The arithmetic is IEEE at every level
# (no fast-math); speed is measured by benchmarks/, which use the default -O3.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.devices()  # start JAX here (one CPU device), so that no in-process CLI call changes the device count


@pytest.fixture(scope="session")
def right():
    import wuji_jax as wj

    return wj.load_hand("right")


@pytest.fixture(scope="session")
def left():
    import wuji_jax as wj

    return wj.load_hand("left")
