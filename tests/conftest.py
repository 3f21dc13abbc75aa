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


# The order in which pytest-xdist hands out the test files (pyproject.toml: --dist loadfile with
# --no-loadscope-reorder gives them out in this order as the two workers free up): longest first, so
# that the two workers finish together, with moves for the compilation cache the workers share (a
# program one worker is still compiling is compiled again by the other). Seconds of test time per file
# in a 2-worker run of the suite on a 2-core CPU (junit, 592 s in all, 304 s wall): ray 130, notebooks
# 61, solver 48, kinematics 46, tiered 40, batch 39, core 38, gradients 34, sequence_calibration 30,
# devices 25, inspire 25, cache 22, chain 18, viewer 12, realtime 9, video 6, the rest under 3 each.
# * batch goes second: its first test compiles the dataset runner's small-job program (float64, one
#   device, 64 rows), which test_ray's fresh-run test (a minute into ray on the other worker) reads.
# * solver before notebooks: 03_learning's kernel (float64) reads the 64-frame solver programs.
# * realtime, then inspire, then chain, each handed out well after the one before: they compile the
#   same FrameSolver, to_inspire and solve_sequence programs (inspire 10 s and chain 5 s after
#   realtime on one worker; inspire 25 s and chain 18 s when inspire and chain ran side by side).
# The short files come last; the last ones leave no compilation running when they end (a worker waits
# for those before it exits).
_LONGEST_FIRST = ("ray", "batch", "solver", "notebooks", "kinematics", "gradients", "core", "devices",
                  "realtime", "sequence_calibration", "inspire", "cache", "viewer", "video", "chain", "overlay",
                  "data_safety", "cli_pose", "io", "viz", "model")


def pytest_collection_modifyitems(config, items):
    rank = {f"test_{name}.py": i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0].rsplit("/", 1)[-1], len(rank)))


def pytest_unconfigure(config):
    if _OWN_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ["WUJI_JAX_TEST_XLA_CACHE"], ignore_errors=True)
