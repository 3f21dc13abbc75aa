"""Ctrl-C during a dataset run, taken where the run can stop cleanly (:class:`DeferredInterrupt`).

A ``KeyboardInterrupt`` raised while XLA compiles the solver (a thread of its own, joined by the
main thread) left the compiling thread running into the interpreter's teardown, which aborted the
process ("terminate called ... FATAL: exception not rethrown", exit status 134) instead of keeping
the finished parts and exiting with 130. Used by :func:`wuji_jax.batch.solve_dataset`."""

from __future__ import annotations

import signal
import threading

__all__ = ["DeferredInterrupt"]


class DeferredInterrupt:
    """``with DeferredInterrupt() as stop: ... stop.check() ...``: inside the block the first SIGINT
    only sets :attr:`requested`, and :meth:`check` (called between chunks) raises the
    ``KeyboardInterrupt``; a second SIGINT raises at once. Outside the main thread, or where the
    program has its own SIGINT handler, nothing changes (Ctrl-C behaves as the program set it)."""

    def __init__(self):
        self.requested = False
        self._old = None

    def _handler(self, signum, frame):
        if self.requested:  # asked twice: now
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> "DeferredInterrupt":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a SIGINT came since the block began."""
        if self.requested:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> bool:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
        return False
