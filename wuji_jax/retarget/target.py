"""A robot hand, as the pipelines see it: a :class:`Target` turns WG110v12 joint angles into that hand's
commands, in the solver's program (batch jobs) or one frame at a time (live streams).

The runners under ``pipeline/`` take a target (a :class:`LiveTarget` for live streams) and import no robot hand: a new hand is a new module (or
folder) under ``retarget/`` with a ``choose_target`` function, and one line in :data:`TARGETS`. The
Inspire hand (:mod:`wuji_jax.retarget.inspire_target`) is the first.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Target", "LiveTarget", "TARGETS", "choose_target"]

#: target name → the module whose ``choose_target(method, model, sides)`` makes it (imported on first use)
TARGETS: dict[str, str] = {"inspire": "wuji_jax.retarget.inspire_target"}


@runtime_checkable
class Target(Protocol):
    """What a robot hand gives the pipelines. Immutable and hashable: it names compiled programs.

    Attributes:
        name: the hand's word (``"inspire"``): the output table's columns are ``<name>_<channel>``.
        method: how commands are made (``"joint_map"``, ``"retarget"``, ...); with ``name`` it names
            the programs, so :meth:`commands` must depend on nothing else of the target but its model.
        channels: the ``C`` command channels' names, in command order.
    """

    name: str
    method: str
    channels: tuple[str, ...]

    def model(self, side: str, dtype: Any = np.float32) -> Any:
        """The robot model of ``side`` as a pytree of arrays in ``dtype`` (an argument of the compiled
        programs, not a constant), or None where :meth:`commands` needs none. Both sides' models share
        one pytree structure (static data free of the side), so that one program can take either."""

    def commands(self, hand: Any, angles: Any, model: Any, previous: Any = None, *, left: bool = False) -> Any:
        """``(*batch, C)`` commands of ``angles (*batch, 20)`` (radians, the human ``hand``'s joint
        order); ``previous (*batch, C)``: the last commands (a warm start; NaN rows: none); ``left``:
        a left hand (a bool, or a traced one: live streams compile one program for both sides, the
        side's hand, model and ``left`` its arguments). Pure JAX: jit, vmap and grad."""

    def describe(self) -> dict[str, Any]:
        """The run summary's fields: ``command_map`` (the method) and where the model came from."""

    def identity(self) -> dict[str, Any]:
        """What of this target names a run's output: :meth:`describe`, with the models' content hashes."""



@runtime_checkable
class LiveTarget(Target, Protocol):
    """A :class:`Target` that live streams send commands to (:class:`wuji_jax.live.Live`): its stream
    settings, speed limit, rest command, messages and register units."""

    def check_stream(self, speed_ratio: Any, smoothing: str | None, tau: float, min_cutoff: float, beta: float,
                     d_cutoff: float, names: Sequence[str] | None) -> None:
        """Raise a one-line ``ValueError`` for stream settings this hand cannot take."""

    def max_rate(self, speed_ratio: Any) -> np.ndarray:
        """``(C,)`` the largest command change per second each channel makes at ``speed_ratio``."""

    def rest(self) -> np.ndarray:
        """``(C,)`` the command a stream moves towards while the hand is lost (``on_lost="open"``)."""

    def message(self, command: np.ndarray, side: str, stamp: float, frame_id: str = "",
                names: Sequence[str] | None = None) -> dict[str, Any]:
        """The command's message envelope ``{"topic", "type", "msg"}`` (plain, JSON-serialisable): the topic
        it goes on, the message type, the message."""

    def device_units(self, command: np.ndarray) -> np.ndarray:
        """``(C,)`` int: the command in the hand's own register units."""


def choose_target(name: str = "inspire", method: str = "auto", model: Any = None,
                  sides: Sequence[str] = ("right",)) -> tuple[Target, str | None]:
    """The target ``name`` (:data:`TARGETS`) making commands by ``method`` for ``sides``, and a
    one-line note on the choice (why ``"auto"`` fell back, or None).

    ``model``: the robot model's source (a path; default: what the target finds installed).
    Raises ``ValueError`` for an unknown name or method, or the target's own error where ``method``
    needs a model that is not found."""
    if name not in TARGETS:
        raise ValueError(f"unknown robot hand {name!r}; known: {', '.join(sorted(TARGETS))}")
    return importlib.import_module(TARGETS[name]).choose_target(method, model, tuple(sides))
