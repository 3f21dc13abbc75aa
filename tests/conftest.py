import jax
import pytest

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
