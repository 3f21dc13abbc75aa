import os
import shutil
import tempfile

# No compilation cache in the user's folder: the CLI subprocesses (they inherit this) do not turn on
# their per-user cache. tests/test_cache.py clears these variables for its own checks.
os.environ.setdefault("WUJI_JAX_NO_CACHE", "1")
# One fresh persistent compilation cache for this run, shared by the pytest workers, the CLI and
# notebook subprocesses (JAX reads these variables at start-up): a program compiled by one process is
# loaded by the others. Every run starts empty, so the suite compiles the same on every run.
if "WUJI_JAX_TEST_XLA_CACHE" not in os.environ:  # the controller; pytest-xdist workers inherit it
    os.environ["WUJI_JAX_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="wuji-jax-test-xla-")
    _OWN_CACHE = True
else:
    _OWN_CACHE = False
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["WUJI_JAX_TEST_XLA_CACHE"]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.5"

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


# The test files that take longest (seconds, summed per file in a 2-worker run of the suite on a 2-core
# CPU: ray 129, solver 81, notebooks 66, batch 45, sequence_calibration 34, kinematics 29, core 29,
# realtime 29, gradients 27, inspire 27, devices 23, cache 20), run first and the short ones last, so
# that the two pytest-xdist workers finish together (pyproject.toml: --dist loadfile with
# --no-loadscope-reorder, which hands out the files in this order as workers free up). In collection
# order (files with the most tests first, xdist's default) one worker ended 63 s after the other.
_LONGEST_FIRST = ("ray", "solver", "notebooks", "batch", "sequence_calibration", "kinematics", "core", "realtime",
                  "gradients", "inspire", "devices", "cache")


def pytest_collection_modifyitems(config, items):
    rank = {f"test_{name}.py": i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0].rsplit("/", 1)[-1], len(rank)))


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ["WUJI_JAX_TEST_XLA_CACHE"], ignore_errors=True)
