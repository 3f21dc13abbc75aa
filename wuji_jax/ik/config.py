"""The solver's settings (:class:`SolverConfig`), its result (:class:`IKResult`) and the frame flags."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.export  # a submodule: not an attribute of jax until imported (jax 0.6)
import numpy as np

__all__ = [
    "SolverConfig", "IKResult", "FLAG_TOO_FEW_LANDMARKS", "FLAG_BAD_SCALE", "FLAG_HIGH_RESIDUAL",
    "FLAG_MIRRORED", "FLAG_NOT_FINITE", "FLAG_DEGENERATE", "FLAG_NO_DERIVATIVE", "FLAG_UNSEEN_FINGER", "DISTAL_LANDMARKS", "DEGENERATE_SPREAD", "FLAG_NAMES",
]

FLAG_TOO_FEW_LANDMARKS = 1  #: fewer than ``config.min_landmarks`` usable landmarks, or < 3 palm points
FLAG_BAD_SCALE = 2  #: estimated hand scale outside [0.3, 3] × the model (units? wrong data?); ``valid`` is False
FLAG_HIGH_RESIDUAL = 4  #: RMS residual above ``config.flag_residual``; ``valid`` is False
FLAG_MIRRORED = 8  #: the palm's chirality is that of the other hand
FLAG_NOT_FINITE = 16  #: the fit is not finite (e.g. coordinates near float overflow); ``valid`` is False
#: the landmarks have no extent (RMS distance from their centroid below :data:`DEGENERATE_SPREAD`): not a
#: hand; not solved (the start pose is returned) and ``valid`` is False
FLAG_DEGENERATE = 32
DEGENERATE_SPREAD = 1e-6  #: metres
#: set only where a derivative of the fit is taken (``jax.grad``/``jvp`` through :func:`~wuji_jax.solve`):
#: the frame's derivative is not exact, and is 0 (its fit did not converge, its Hessian is not positive
#: definite, or a joint sits at a limit with no force holding it there: :mod:`wuji_jax.solver.adjoint`)
FLAG_NO_DERIVATIVE = 64
#: a finger none of whose three distal landmarks (thumb MCP, IP, tip; a finger's PIP, DIP, tip) was
#: observed: its joints are the prior's (the start pose), not a fit; ``valid`` is False
FLAG_UNSEEN_FINGER = 128
#: MediaPipe indices of each finger's distal landmarks (thumb, index, middle, ring, pinky)
DISTAL_LANDMARKS = ((2, 3, 4), (6, 7, 8), (10, 11, 12), (14, 15, 16), (18, 19, 20))
FLAG_NAMES = {FLAG_TOO_FEW_LANDMARKS: "too_few_landmarks", FLAG_BAD_SCALE: "bad_scale",
              FLAG_HIGH_RESIDUAL: "high_residual", FLAG_MIRRORED: "mirrored", FLAG_NOT_FINITE: "not_finite",
              FLAG_DEGENERATE: "degenerate", FLAG_NO_DERIVATIVE: "no_derivative",
              FLAG_UNSEEN_FINGER: "unseen_finger"}

_STATIC = ("coupling",)
#: (field, lower bound, bound excluded, integer) of the numeric settings (:meth:`SolverConfig.__post_init__`)
_CHECKS = (("iterations", 0, False, True), ("min_landmarks", 3, False, True), ("huber_delta", 0, True, False),
           ("limit_weight", 0, False, False), ("prior_weight", 0, False, False), ("coupling_weight", 0, False, False),
           ("damping", 0, True, False), ("damping_min", 0, True, False), ("damping_max", 0, True, False),
           ("tolerance", 0, False, False), ("flag_residual", 0, True, False))
_INTEGER = ("iterations", "min_landmarks")


@dataclasses.dataclass(frozen=True)
class SolverConfig:
    """Settings of :func:`~wuji_jax.solve` (a pytree: ``coupling`` is static, part of the jit key; every
    other field is traced, so changing it does not recompile).

    Residuals are measured in units of 1 cm inside the solver; weights below are relative to (1 cm)²
    of landmark error.

    Attributes:
        iterations: most Levenberg–Marquardt iterations after the closed-form start. A frame stops
            earlier once converged (see ``tolerance``); a batch stops when all its frames have. 0: the
            closed-form start only. 5 meets the accuracy figures on the bundled recordings' worst frames
            (per-frame RMS residual p95 9.6 mm, max 11.7 mm; 3: 9.6 / 11.9 mm; 40: 9.5 / 11.5 mm),
            ``benchmarks/bench_core.py``; about 3/4 of those frames converge within it. The iterations keep the angles within their limits: a step
            is projected onto them, and a joint at a limit that the step would push past it is held
            there for that step (projected Newton, Bertsekas 1982).
        coupling: ``"hard"`` (the thumb rotation is the screw-home law of flex and abduction) or
            ``"soft"`` (a variable of its own, penalised towards the law by ``coupling_weight``).
        estimate_scale: fit the hand scale ``s`` (else ``s = 1``).
        min_landmarks: frames with fewer usable landmarks are flagged and return the start pose.
        huber_delta: metres; landmark errors beyond it count linearly (robust to outliers).
        limit_weight: penalty per rad² of joint-limit violation in the objective (the angles LM visits
            stay within the limits; the penalty prices angles outside them, e.g. in
            :func:`~wuji_jax.landmark_loss`).
        prior_weight: pull towards the start angles (``q0``, default the neutral pose) per rad²; keeps
            the joints of unseen fingers defined.
        coupling_weight: soft coupling's penalty per rad² of deviation from the law.
        damping: initial LM damping λ, relative to the diagonal of the Gauss–Newton matrix.
        damping_min, damping_max: bounds of λ. After a step the gain ratio ρ (actual over predicted
            cost decrease) scales λ by ``max(1/3, 1 − (2ρ − 1)³)`` when the cost fell, else by a factor
            that doubles with each rejection in a row (Nielsen's rule); a frame whose λ would pass
            ``damping_max`` has stalled and stops (not converged).
        tolerance: a frame has converged when the step's predicted cost decrease is below
            ``tolerance × cost`` (or the cost is below the dtype's ε): further steps would lower the cost by
            less than that (1e-3: the RMS residual by about 0.05 %).
        flag_residual: metres; frames with a larger RMS residual get :data:`FLAG_HIGH_RESIDUAL`.
    """

    iterations: int = 5
    coupling: str = "hard"
    estimate_scale: bool = True
    min_landmarks: int = 8
    huber_delta: float = 0.005
    limit_weight: float = 100.0
    prior_weight: float = 1e-4
    coupling_weight: float = 10.0
    damping: float = 1e-3
    damping_min: float = 1e-9
    damping_max: float = 1e6
    tolerance: float = 1e-3
    flag_residual: float = 0.02

    def __post_init__(self):
        if self.coupling not in ("hard", "soft"):
            raise ValueError(f"coupling must be 'hard' or 'soft', got {self.coupling!r}")
        # Python numbers are checked here; arrays (as_arrays, traced values) are the caller's
        for name, low, strict, integer in _CHECKS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if integer and not isinstance(v, int):
                raise ValueError(f"SolverConfig.{name} must be an integer, got {v!r}")
            if not (v > low if strict else v >= low) or (v != v) or (name != "flag_residual" and v == float("inf")):
                raise ValueError(f"SolverConfig.{name} must be {'>' if strict else '>='} {low:g}"
                                 f"{'' if name == 'flag_residual' else ' and finite'}, got {v!r}")
        if isinstance(self.min_landmarks, int) and not isinstance(self.min_landmarks, bool) and self.min_landmarks > 21:
            raise ValueError(f"SolverConfig.min_landmarks must be <= 21, got {self.min_landmarks}")
        if all(isinstance(getattr(self, k), (int, float)) for k in ("damping_min", "damping", "damping_max")) \
                and not self.damping_min <= self.damping <= self.damping_max:
            raise ValueError(f"SolverConfig needs damping_min <= damping <= damping_max, got {self.damping_min!r}, "
                             f"{self.damping!r}, {self.damping_max!r}")

    def replace(self, **changes) -> "SolverConfig":
        """A copy with some fields replaced; unknown names raise ``TypeError`` naming them."""
        return dataclasses.replace(self, **changes)

    def static(self) -> tuple:
        """The static fields, ``(coupling,)``."""
        return tuple(getattr(self, f) for f in _STATIC)

    def numbers(self) -> dict:
        """The traced fields by name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _STATIC}

    def as_arrays(self, dtype) -> "SolverConfig":
        """This config with numpy scalars as its traced fields: ``dtype`` for the real numbers, int32 for
        the counts, bool for ``estimate_scale`` (one jit cache entry for any values)."""
        conv = {k: np.asarray(v, np.int32 if k in _INTEGER else bool if k == "estimate_scale" else dtype)
                for k, v in self.numbers().items()}
        return dataclasses.replace(self, **conv)


jax.tree_util.register_dataclass(
    SolverConfig, data_fields=[f.name for f in dataclasses.fields(SolverConfig) if f.name not in _STATIC],
    meta_fields=list(_STATIC))


class IKResult(NamedTuple):
    """Output of :func:`~wuji_jax.solve` (a pytree; every field has the input's leading batch shape).

    Attributes:
        angles: ``(*batch, 20)`` joint angles, radians, within limits (seed ID order).
        coupled: ``(*batch, M)`` coupled joint angles (``thumb_cmc_rot``), radians.
        rotation: ``(*batch, 3, 3)`` wrist rotation, model wrist frame → input frame.
        translation: ``(*batch, 3)`` wrist position in the input frame, metres.
        scale: ``(*batch,)`` hand size relative to the model (1 = WG110v12 default).
        keypoints: ``(*batch, 21, 3)`` fitted model keypoints in the input frame, metres.
        residual: ``(*batch,)`` RMS distance between fitted and usable landmarks, metres.
        errors: ``(*batch, 21)`` per-landmark distance, metres (0 where a landmark was masked).
        valid: ``(*batch,)`` bool: every finger observed and fitted within ``config.flag_residual``:
            none of ``FLAG_TOO_FEW_LANDMARKS``, ``FLAG_DEGENERATE``, ``FLAG_NOT_FINITE``,
            ``FLAG_BAD_SCALE``, ``FLAG_HIGH_RESIDUAL``, ``FLAG_UNSEEN_FINGER``. A mirrored palm
            (``FLAG_MIRRORED``) or a derivative that is not exact (``FLAG_NO_DERIVATIVE``) leave it True.
        converged: ``(*batch,)`` bool: LM stopped because no further step could lower the cost
            (``SolverConfig.tolerance``), rather than at the iteration limit or stalled.
        iterations: ``(*batch,)`` int32, LM iterations the frame ran (accepted or not).
        flags: ``(*batch,)`` int32 bit set of ``FLAG_*``.
        cost: ``(*batch,)`` the objective at the solution (:func:`~wuji_jax.landmark_loss`'s value).
    """

    angles: jax.Array
    coupled: jax.Array
    rotation: jax.Array
    translation: jax.Array
    scale: jax.Array
    keypoints: jax.Array
    residual: jax.Array
    errors: jax.Array
    valid: jax.Array
    converged: jax.Array
    iterations: jax.Array
    flags: jax.Array
    cost: jax.Array


# jax.export keeps programs returning an IKResult (wuji_jax.cache.cached_program)
jax.export.register_namedtuple_serialization(IKResult, serialized_name="wuji_jax.IKResult")
