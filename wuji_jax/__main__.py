"""``python -m wuji_jax``: the ``wuji-jax`` command line."""

from .cli import run

run()
