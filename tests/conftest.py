import os

# No persistent compilation cache for the CLI subprocesses (they inherit this): the suite writes nothing
# into the user's cache folder and compiles the same on every run. tests/test_cache.py clears it.
os.environ.setdefault("WUJI_JAX_NO_CACHE", "1")

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
