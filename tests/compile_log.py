"""Count what JAX compiles, with its public ``jax.log_compiles()`` (as optax's tests do)."""

import contextlib
import logging

import jax


@contextlib.contextmanager
def compiles():
    """Yields a list that receives the message of every program JAX compiles inside the block."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles():
            yield messages
    finally:
        logger.removeHandler(handler)
    messages[:] = [m for m in messages if "Compiling" in m]
