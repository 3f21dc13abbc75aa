"""The Inspire hand as a pipeline :class:`~wuji_jax.retarget.target.Target`: six opening fractions by the
joint map (:func:`wuji_jax.inspire.to_inspire`) or the task-space retarget (:func:`wuji_jax.inspire.retarget`,
its URDF read at run time), seed 003's ctrl messages, rate limit and RH56 units."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from . import inspire

__all__ = ["InspireTarget", "choose_target"]


@dataclasses.dataclass(frozen=True)
class InspireTarget:
    """The Inspire hand's commands (:class:`~wuji_jax.retarget.target.Target`).

    Attributes:
        method: ``"joint_map"`` (no model) or ``"retarget"``.
        urdfs: ``((side, path), ...)``: the retarget's Inspire URDF per side (empty for the joint map).
    """

    method: str = "joint_map"
    urdfs: tuple[tuple[str, str], ...] = ()
    name: ClassVar[str] = "inspire"
    channels: ClassVar[tuple[str, ...]] = inspire.MOTOR_NAMES

    def __post_init__(self):
        if self.method not in inspire.COMMAND_MAPS:
            raise ValueError(f"method must be one of {', '.join(inspire.COMMAND_MAPS)}; got {self.method!r}")
        if self.method == "retarget" and not self.urdfs:
            raise ValueError("the retarget needs an Inspire URDF for at least one side")

    def model(self, side: str, dtype: Any = np.float32):
        """None for the joint map; the retarget's :class:`~wuji_jax.inspire.InspireHand` of ``side``, its
        static fields free of the side (no source path, no model name or side), so that both sides' models
        are one pytree structure and one program serves both."""
        if self.method == "joint_map":
            return None
        paths = dict(self.urdfs)
        if side not in paths:
            raise ValueError(f"no Inspire URDF for a {side} hand in this run (it has {', '.join(paths)})")
        return inspire.load_inspire_hand(paths[side], side).astype(dtype).plain()

    def commands(self, hand, angles, model, previous=None, *, left: bool = False):
        """``(*batch, 6)`` opening fractions (1 = open), seed 003's motor order."""
        if self.method == "joint_map":
            return inspire.to_inspire_kernel(hand, angles, None)
        import jax.numpy as jnp

        q0 = None if previous is None else \
            jnp.where(jnp.isnan(previous), inspire.to_inspire_kernel(hand, angles, None), previous)
        return inspire.retarget_kernel(hand, model, angles, q0, None, inspire.RetargetConfig(), left=left)

    def describe(self) -> dict[str, Any]:
        return {"command_map": self.method, "inspire_urdf": {s: p for s, p in self.urdfs} or None}

    def identity(self) -> dict[str, Any]:
        from ..data.io import content_hash

        return {"command_map": self.method,
                "inspire_urdf": {s: {"path": os.path.realpath(p), "sha256": content_hash(Path(p))}
                                 for s, p in sorted(self.urdfs)} or None}

    def check_stream(self, speed_ratio, smoothing, tau, min_cutoff, beta, d_cutoff, names) -> None:
        inspire.InspireStream("right", speed_ratio=speed_ratio, smoothing=smoothing, tau=tau, min_cutoff=min_cutoff,
                              beta=beta, d_cutoff=d_cutoff, names=names)

    def max_rate(self, speed_ratio) -> np.ndarray:
        return inspire.max_rate(speed_ratio)

    def rest(self) -> np.ndarray:
        return np.ones(inspire.NUM_MOTORS, np.float32)  # fully open

    def message(self, command, side: str, stamp, frame_id: str = "", names: Sequence[str] | None = None) -> dict:
        return inspire.ctrl_message(command, side, stamp, frame_id, names=names)

    def device_units(self, command) -> np.ndarray:
        return inspire.rh56_host(command)


def choose_target(method: str = "auto", model: str | os.PathLike | None = None,
                  sides: Sequence[str] = ("right",)) -> tuple[InspireTarget, str | None]:
    """The Inspire target by ``method`` (``"auto"``: the retarget where a URDF is found for every side in
    ``sides``, else the joint map; ``"retarget"``: an :class:`~wuji_jax.inspire.InspireModelNotFound`
    without one) with ``model`` the URDF (default: the copies inside an installed ``dexi-rs``), and a
    one-line note on the choice (see :func:`wuji_jax.inspire.choose_command_map`). With no ``sides``
    only ``method`` is checked: the joint map, no note."""
    if method not in ("auto",) + inspire.COMMAND_MAPS:
        raise ValueError(f"command_map must be 'auto', 'joint_map' or 'retarget'; got {method!r}")
    if not sides:
        return InspireTarget(), None
    found = []
    for side in sides:
        chosen, path, note = inspire.choose_command_map(method, model, side)
        if chosen != "retarget":
            return InspireTarget(), note
        found.append((side, str(path)))
    return InspireTarget("retarget", tuple(found)), None
