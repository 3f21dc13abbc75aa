"""What the command line's verb modules share (:mod:`wuji_jax.cli`, :mod:`wuji_jax.inspire_cli`):
the program's name and the error that means a bad command line or input value."""

from __future__ import annotations

__all__ = ["PROG", "UsageError"]

PROG = "wuji-jax"


class UsageError(ValueError):
    """A bad command line or input value: reported as one line, exit status 2."""
