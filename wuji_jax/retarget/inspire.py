"""WG110v12 joint angles → Inspire dexterous-hand commands and seed 003's ROS-shaped payloads.

The Inspire hand (seed 003; the RH56 family) has six motors, each commanded by an **opening
fraction** in ``[0, 1]``: 1.0 = fully open, 0.0 = fully closed. Motor order, everywhere in this
module, is seed 003's ID order::

    index 0    1     2       3     4           5
    ID    1    2     3       4     5           6
          little ring middle fore  thumb_bend  thumb_rotation

Mapping (``closure_measures``): each channel gets a *closure measure*, a weighted mean of joint
angles in radians that grows with flexion (all weights are non-negative, so more flexion never
opens the hand):

* fingers (little, ring, middle, fore): ``0.4·mcp_flex + 0.4·pip + 0.2·dip``. MCP and PIP carry most
  of a curl; the DIP largely follows the PIP in a human finger (and the Inspire finger's distal
  link is driven by the same linkage), so it adds little independent information. MCP abduction is
  ignored: the Inspire fingers cannot spread.
* thumb bend: ``0.2·cmc_flex + 0.4·mcp + 0.4·ip``: the Inspire bend motor curls the thumb's
  distal segments; CMC flexion contributes a little because it also moves the tip towards the palm.
* thumb rotation: ``0.5·cmc_abd + 0.5·θ_rot`` with ``θ_rot`` the coupled screw-home rotation
  (``kinematics.coupled_angles``; default ``0.22·cmc_flex``): both swing the thumb across the palm
  into opposition, which is what the Inspire rotation motor does. It is monotone in flexion as long
  as the coupling gains keep ``K_FLEX + K_CROSS·cmc_abd ≥ 0`` (true for the URDF's defaults).

A calibration (:class:`InspireCalibration`) holds, per channel, the measure at which the robot is
fully open and fully closed; the command is the linear interpolation between them, clamped::

    opening = clip((closed − measure) / (closed − open), 0, 1)

:func:`default_calibration` uses the flat hand (all angles zero) as open, but for thumb rotation a
relaxed open thumb (its CMC flexion and abduction at their lower limits: where fitted open hands put
it, below the flat hand's plane), and a typical full closure as closed (fingers at 90 % and thumb
joints at 75 % of their upper limits: a relaxed full fist reaches about that). :func:`calibrate` fits
one user's range from recorded reference poses.

Task space (:func:`retarget`): the same six openings chosen so that the Inspire hand's fingertips
make the human's grasp (pinches meet), with the joint map as a prior; it needs the Inspire URDF at
run time (:func:`find_inspire_urdf`, :mod:`wuji_jax.retarget`).

Decisions where seed 003 is unclear:

* ``name[]`` in the ctrl message / ``set_angle_flexible`` request: seed 003 says "id=1 is the little
  finger, id=6 the thumb rotation", so the default names are the motor IDs as strings ``"1".."6"``;
  pass ``names=MOTOR_NAMES`` (or any six strings) if a driver expects words.
* Stamps are ROS 2 ``builtin_interfaces/Time``: ``{"sec": int, "nanosec": int}``, kept inside what
  both ROS 2 (``int32 sec``, ``uint32 nanosec``) and ROS 1 (``uint32 secs, nsecs``) can hold:
  ``0 <= sec <= MAX_STAMP_SECONDS`` (2**31 − 1, i.e. before 2038-01-19T03:14:08Z) and
  ``0 <= nanosec < 1e9``. Anything else (negative, later, non-finite) is a ``ValueError``, never a
  wrapped or clipped stamp.
* Payload builders return an envelope ``{"topic"|"service": ..., "type": ..., "msg"|"request": ...}``
  (plain dicts, JSON-serialisable), so no ROS install is needed to produce or inspect them.

Out-of-range and non-finite angles: :func:`to_inspire` clamps every command to ``[0, 1]``, so an
angle far beyond its joint limit (100 rad, or degrees read as radians) still gives a plausible
command; :func:`joint_limit_violations` finds such angles (beyond the limits by more than
``ANGLE_LIMIT_TOLERANCE`` = 0.5 rad, or non-finite) and the ``wuji-jax inspire`` CLI refuses them.
Concrete non-finite angles are a ``ValueError``; under ``jit``/``vmap``/``grad`` (no concrete values
to check) a NaN or infinite angle makes the affected channels NaN, never a number in ``[0, 1]``.

Streams: :func:`smooth` (exponential or one-euro) then :func:`limit_rate` (no command moves a motor
faster than ``speed_ratio`` lets it: full travel takes ``0.8 s / speed_ratio``), both carrying the
timestamps; :class:`InspireStream` does the same one sample at a time for live use.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
from typing import IO, Any, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..ik.filters import one_euro_step
from ..hand.kinematics import coupled_angles, forward_keypoints
from ..hand.model import HandModel, load_hand
from .inspire_hand import InspireHand, InspireModelNotFound, find_inspire_urdf, inspire_model_hint, load_inspire_hand
from .task_space import RetargetConfig, retarget_rows

__all__ = [
    "MOTOR_IDS",
    "MOTOR_NAMES",
    "NUM_MOTORS",
    "FULL_TRAVEL_SECONDS",
    "MAX_FORCE_GRAMS",
    "RH56_MAX",
    "ANGLE_LIMIT_TOLERANCE",
    "MAX_STAMP_SECONDS",
    "FINGER_WEIGHTS",
    "THUMB_BEND_WEIGHTS",
    "THUMB_ROTATION_WEIGHTS",
    "RELAXED_THUMB_JOINTS",
    "InspireCalibration",
    "CommandStream",
    "closure_measures",
    "joint_limit_violations",
    "default_calibration",
    "calibrate",
    "check_calibration",
    "calibration_to_dict",
    "calibration_from_dict",
    "to_inspire",
    "from_glove_angles",
    "retarget",
    "retarget_kernel",
    "RetargetConfig",
    "InspireHand",
    "InspireModelNotFound",
    "find_inspire_urdf",
    "inspire_model_hint",
    "load_inspire_hand",
    "COMMAND_MAPS",
    "choose_command_map",
    "to_rh56",
    "from_rh56",
    "ctrl_topic",
    "state_topic",
    "service_name",
    "ctrl_message",
    "set_angle_flexible_request",
    "set_speed_request",
    "set_force_request",
    "clear_error_request",
    "speed_ratio_to_full_travel_seconds",
    "full_travel_seconds_to_speed_ratio",
    "max_rate",
    "limit_rate",
    "smooth",
    "InspireStream",
    "InspirePublisher",
    "publisher",
    "write_command_stream",
]

NUM_MOTORS = 6
#: Seed 003 motor IDs in command order.
MOTOR_IDS: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
#: Human-readable motor names in command order (seed 003's MotorName enum, lower-cased).
MOTOR_NAMES: tuple[str, ...] = ("little", "ring", "middle", "fore", "thumb_bend", "thumb_rotation")
#: Seconds for a full open↔closed travel at speed ratio 1 (seed 003 ``set_speed``).
FULL_TRAVEL_SECONDS = 0.8
#: Grams of force at force ratio 1 (seed 003 ``set_force``).
MAX_FORCE_GRAMS = 1000.0
#: RH56 native angle register at fully open (0 = closed).
RH56_MAX = 1000
#: Radians an angle may lie beyond its joint limit before :func:`joint_limit_violations` flags it:
#: measured or solved angles overshoot a little (and are clamped anyway); 0.5 rad (~29°) does not
#: happen by noise, but does by wrong units (degrees read as radians) or a wrong joint order.
ANGLE_LIMIT_TOLERANCE = 0.5
#: Largest ``sec`` of a stamp: ROS 2 ``builtin_interfaces/Time.sec`` is int32 (ROS 1's is uint32).
MAX_STAMP_SECONDS = 2**31 - 1

#: Closure weights ``(mcp_flex, pip, dip)`` of each finger; they sum to 1 (a weighted mean, radians).
FINGER_WEIGHTS: tuple[float, float, float] = (0.4, 0.4, 0.2)
#: Closure weights ``(cmc_flex, mcp, ip)`` of the thumb bend channel.
THUMB_BEND_WEIGHTS: tuple[float, float, float] = (0.2, 0.4, 0.4)
#: Closure weights ``(cmc_abd, coupled thumb_cmc_rot)`` of the thumb rotation channel.
THUMB_ROTATION_WEIGHTS: tuple[float, float] = (0.5, 0.5)
#: Joints at their lower limits in the relaxed open thumb, thumb rotation's open point in
#: :func:`default_calibration` (the rest at zero).
RELAXED_THUMB_JOINTS: tuple[str, ...] = ("thumb_cmc_flex", "thumb_cmc_abd")

# Finger joint-name prefixes in motor order (little = pinky, fore = index).
_FINGER_PREFIXES = ("pinky", "ring_finger", "middle_finger", "index_finger")
_SIDES = ("left", "right")
_SERVICES = ("set_angle_flexible", "set_force", "set_speed", "set_clear_error")
_SERVICE_TYPES = {s: f"bodyctrl_msgs/srv/{s}" for s in _SERVICES}
_JOINT_STATE = "sensor_msgs/msg/JointState"
_CAL_MIN_RANGE = 0.1  # rad: a reference range narrower than ~6° cannot be told from noise


# ------------------------------------------------------------------------------------- calibration


class InspireCalibration(NamedTuple):
    """Per-channel closure measures (radians, see :func:`closure_measures`) of the robot's end stops.

    A pytree of two ``(6,)`` arrays in motor order, so it jits and differentiates like any other
    input. ``closed > open`` on every channel (checked by :func:`check_calibration`).

    Attributes:
        open: ``(6,)`` measure mapped to opening 1.0 (and anything below it, clamped).
        closed: ``(6,)`` measure mapped to opening 0.0 (and anything above it, clamped).
    """

    open: jax.Array
    closed: jax.Array


class CommandStream(NamedTuple):
    """Commands with their timestamps.

    Attributes:
        commands: ``(T, 6)`` opening fractions in motor order.
        timestamps: ``(T,)`` seconds, non-decreasing (float64 NumPy, as given).
    """

    commands: jax.Array
    timestamps: jax.Array


@functools.lru_cache(maxsize=None)
def _default_hand() -> HandModel:
    # Left and right share limits and coupling, so one model serves both sides. Built eagerly even when
    # the first call comes from inside jit: a traced model would be cached and leak its tracers.
    with jax.ensure_compile_time_eval():
        return load_hand("right")


def _hand(hand: HandModel | None) -> HandModel:
    return _default_hand() if hand is None else hand


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _check_angles(hand: HandModel, angles, name: str = "angles", *, on_host: bool = False) -> jax.Array:
    """``(*batch, n)`` float array; ``ValueError`` naming the problem (shape, non-finite values). With
    ``on_host``, numpy arrays and lists stay numpy (JAX's dtype; no eager JAX op: a live stream's push)."""
    if on_host and isinstance(angles, (np.ndarray, list, tuple)):
        a = np.asarray(angles)
        a = a.astype(jax.dtypes.canonicalize_dtype(a.dtype if np.issubdtype(a.dtype, np.floating) else float),
                     copy=False)
    else:
        a = jnp.asarray(angles)
        if not jnp.issubdtype(a.dtype, jnp.floating):
            a = a.astype(jnp.result_type(float))
    n = hand.num_joints
    if a.ndim == 0 or a.shape[-1] != n:
        raise ValueError(
            f"{name} must have shape (*batch, {n}) (radians, order hand.joint_names); got shape {tuple(a.shape)}"
        )
    if not _is_tracer(a):
        bad = _non_finite(a)
        if bad:
            raise ValueError(f"{name} contain {bad} non-finite value(s) (NaN or inf)")
    return a


def _non_finite(a: jax.Array) -> int:
    """The number of NaN/inf entries of a concrete array, counted where it lives: on an accelerator
    only the count comes back to the host, not a copy of the angles."""
    if isinstance(a, jax.Array) and any(d.platform != "cpu" for d in a.devices()):
        return int(a.size - jnp.count_nonzero(jnp.isfinite(a)))
    return int(np.size(a) - np.count_nonzero(np.isfinite(np.asarray(a))))


def _closure_kernel(hand: HandModel, q: jax.Array) -> jax.Array:
    idx = hand.joint_index
    cols = []
    w_mcp, w_pip, w_dip = FINGER_WEIGHTS
    for f in _FINGER_PREFIXES:
        mcp = f"{f}_mcp_flex"
        cols.append(w_mcp * q[..., idx(mcp)] + w_pip * q[..., idx(f"{f}_pip")] + w_dip * q[..., idx(f"{f}_dip")])
    w_cmc, w_tmcp, w_ip = THUMB_BEND_WEIGHTS
    cols.append(
        w_cmc * q[..., idx("thumb_cmc_flex")] + w_tmcp * q[..., idx("thumb_mcp")] + w_ip * q[..., idx("thumb_ip")]
    )
    if "thumb_cmc_rot" in hand.mimic_names:
        rot = coupled_angles(hand, q)[..., hand.mimic_names.index("thumb_cmc_rot")]
    else:  # a model without the screw-home coupling: abduction alone
        rot = jnp.zeros_like(q[..., 0])
    w_abd, w_rot = THUMB_ROTATION_WEIGHTS
    cols.append(w_abd * q[..., idx("thumb_cmc_abd")] + w_rot * rot)
    return jnp.stack(cols, -1)


def closure_measures(angles, hand: HandModel | None = None) -> jax.Array:
    """Raw closure measure of each Inspire channel (see the module docstring for the weights).

    Args:
        angles: ``(*batch, 20)`` WG110v12 joint angles, radians, seed ID order.
        hand: the model whose coupling gives the thumb's screw-home rotation (default: right hand).

    Returns:
        ``(*batch, 6)`` radians, motor order; larger = more closed.
    """
    hand = _hand(hand)
    q = _check_angles(hand, angles)
    return _closure_jit(hand, q)


def joint_limit_violations(angles, hand: HandModel | None = None, *,
                           tolerance: float = ANGLE_LIMIT_TOLERANCE) -> np.ndarray:
    """Which angles are non-finite or beyond their joint limits by more than ``tolerance`` radians.

    :func:`to_inspire` clamps its commands, so it turns an angle of 100 rad (or 90 meant as degrees)
    into a plausible full closure; check recorded angles here before converting them. Angles slightly
    outside the limits (within ``tolerance``) are normal solver or sensor overshoot and not flagged.

    Args:
        angles: ``(*batch, 20)`` joint angles, radians, seed ID order; concrete (not traced).
        hand: the model whose ``lower``/``upper`` limits apply (default: right hand; the left's
            limits are the same).
        tolerance: radians allowed beyond each limit, ``>= 0`` (default ``ANGLE_LIMIT_TOLERANCE``).

    Returns:
        ``(*batch, 20)`` bool NumPy array, True where the angle is NaN, infinite, below
        ``lower − tolerance`` or above ``upper + tolerance``. ``mask.any(-1)`` flags whole frames.
    """
    hand = _hand(hand)
    tol = float(tolerance)
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tolerance must be finite radians >= 0; got {tolerance!r}")
    a = np.asarray(angles, dtype=np.float64)
    n = hand.num_joints
    if a.ndim == 0 or a.shape[-1] != n:
        raise ValueError(f"angles must have shape (*batch, {n}) (radians, order hand.joint_names); got shape {a.shape}")
    lo = np.asarray(hand.lower, np.float64) - tol
    hi = np.asarray(hand.upper, np.float64) + tol
    with np.errstate(invalid="ignore"):
        return ~(np.isfinite(a) & (a >= lo) & (a <= hi))


@jax.jit
def _closure_jit(hand: HandModel, q: jax.Array) -> jax.Array:
    return _closure_kernel(hand.astype(q.dtype), q)


def default_calibration(
    hand: HandModel | None = None, *, finger_rom: float = 0.9, thumb_rom: float = 0.75
) -> InspireCalibration:
    """Calibration from the joint limits: open = the flat hand (thumb rotation: the relaxed thumb),
    closed = a typical full closure.

    Thumb rotation's open point is the measure of a relaxed open thumb, its CMC flexion and abduction
    at their lower limits: a fitted open hand holds its thumb there, below the flat hand's plane, and
    with the flat hand as open every such frame was clamped to fully open (a dead zone).

    The closed pose has every finger flexion joint (MCP flex, PIP, DIP) at ``finger_rom`` of its
    upper limit and every thumb joint (CMC flex and abduction, MCP, IP) at ``thumb_rom`` of its upper
    limit; finger abduction stays at zero.

    Args:
        hand: the model (default: right hand; limits and coupling are the same for the left).
        finger_rom: fraction of the finger joints' upper limits reached by a full fist.
        thumb_rom: fraction of the thumb joints' upper limits reached at full thumb closure.

    Returns:
        :class:`InspireCalibration` with ``(6,)`` leaves.
    """
    hand = _hand(hand)
    for nm, v in (("finger_rom", finger_rom), ("thumb_rom", thumb_rom)):
        if not (0.0 < float(v) <= 1.0):
            raise ValueError(f"{nm} must be in (0, 1]; got {v}")
    return _default_calibration_kernel(hand, float(finger_rom), float(thumb_rom))


@jax.jit
def _default_calibration_kernel(hand: HandModel, finger_rom, thumb_rom) -> InspireCalibration:
    upper = jnp.asarray(hand.upper)
    thumb = np.array([n.startswith("thumb_") for n in hand.joint_names])
    flex = np.array([not n.startswith("thumb_") and not n.endswith("_mcp_abd") for n in hand.joint_names])
    frac = jnp.where(thumb, thumb_rom, jnp.where(flex, finger_rom, 0.0)).astype(upper.dtype)
    relaxed = np.array([n in RELAXED_THUMB_JOINTS for n in hand.joint_names])
    m = _closure_kernel(hand, jnp.stack([jnp.zeros_like(upper), frac * upper,
                                         jnp.where(relaxed, jnp.asarray(hand.lower), 0.0)]))
    return InspireCalibration(open=m[0].at[5].set(m[2, 5]), closed=m[1])


def check_calibration(calibration: InspireCalibration) -> InspireCalibration:
    """``ValueError`` unless both leaves are finite ``(6,)`` arrays with ``closed > open``.

    Traced calibrations (inside ``jit``) are only shape-checked.
    """
    if not isinstance(calibration, InspireCalibration):
        raise ValueError(f"calibration must be an InspireCalibration; got {type(calibration).__name__}")
    lo, hi = jnp.asarray(calibration.open), jnp.asarray(calibration.closed)
    if lo.shape != (NUM_MOTORS,) or hi.shape != (NUM_MOTORS,):
        raise ValueError(
            f"calibration.open and .closed must have shape (6,); got {tuple(lo.shape)} and {tuple(hi.shape)}"
        )
    if _is_tracer(lo) or _is_tracer(hi):
        return InspireCalibration(lo, hi)
    lo_np, hi_np = np.asarray(lo), np.asarray(hi)
    if not (np.all(np.isfinite(lo_np)) and np.all(np.isfinite(hi_np))):
        raise ValueError("calibration contains non-finite values")
    bad = [MOTOR_NAMES[i] for i in range(NUM_MOTORS) if not hi_np[i] > lo_np[i]]
    if bad:
        raise ValueError(f"calibration must have closed > open on every channel; not on: {', '.join(bad)}")
    return InspireCalibration(lo, hi)


_REFERENCE_NAMES = ("open", "fist", "thumb_opposed")


def _mean_measure(hand: HandModel, name: str, angles) -> np.ndarray:
    a = np.asarray(angles, dtype=np.float64)
    if a.ndim not in (1, 2) or a.shape[-1] != hand.num_joints or a.shape[0] == 0:
        raise ValueError(
            f"reference pose {name!r} must have shape ({hand.num_joints},) or (T, {hand.num_joints}) "
            f"with T >= 1; got shape {a.shape}"
        )
    if not np.all(np.isfinite(a)):
        raise ValueError(f"reference pose {name!r} contains non-finite values")
    # Average the measures, not the angles: the coupled rotation is not linear in the angles.
    m = np.asarray(closure_measures(jnp.asarray(a), hand), np.float64)
    return m.reshape(-1, NUM_MOTORS).mean(0)


def calibrate(
    reference_angles: Mapping[str, Any] | Sequence[Any],
    hand: HandModel | None = None,
    *,
    min_range: float = _CAL_MIN_RANGE,
) -> InspireCalibration:
    """Fit the open/closed references to one user's recorded reference poses.

    The user's open hand maps to 1.0 on every channel, their fist to 0.0 on every channel, and — when
    given — their thumb-opposed pose to 0.0 on thumb rotation (instead of the fist's thumb rotation).

    Args:
        reference_angles: ``{"open": A, "fist": B}`` with optional ``"thumb_opposed": C``, or a
            sequence ``(A, B)`` / ``(A, B, C)`` in that order. Each is ``(20,)`` radians or a
            ``(T, 20)`` recording of the held pose (its measures are averaged).
        hand: the model (default: right hand).
        min_range: smallest accepted open→closed difference of a channel's measure, radians; a
            narrower range would amplify sensor noise into full-travel motor commands.

    Returns:
        :class:`InspireCalibration` (float64 if x64 is enabled).

    Raises:
        ValueError: fewer than two poses, unknown names, bad shapes or values, or a channel whose
            closed reference is not at least ``min_range`` beyond its open reference.
    """
    hand = _hand(hand)
    if isinstance(reference_angles, Mapping):
        refs = dict(reference_angles)
        unknown = sorted(set(refs) - set(_REFERENCE_NAMES))
        if unknown:
            raise ValueError(f"unknown reference pose(s) {unknown}; use {', '.join(_REFERENCE_NAMES)}")
    elif isinstance(reference_angles, (str, bytes)):
        raise ValueError("reference_angles must be a dict of poses or a sequence of poses")
    else:
        seq = list(reference_angles)
        if len(seq) > len(_REFERENCE_NAMES):
            raise ValueError(
                f"at most {len(_REFERENCE_NAMES)} reference poses ({', '.join(_REFERENCE_NAMES)}); got {len(seq)}"
            )
        refs = dict(zip(_REFERENCE_NAMES, seq))
    if len(refs) < 2 or "open" not in refs or "fist" not in refs:
        raise ValueError(
            f"calibration needs at least the 'open' and 'fist' reference poses; got {sorted(refs) or 'none'}"
        )
    m = {k: _mean_measure(hand, k, v) for k, v in refs.items()}
    lo, hi = m["open"].copy(), m["fist"].copy()
    if "thumb_opposed" in m:
        hi[5] = m["thumb_opposed"][5]
    narrow = [f"{MOTOR_NAMES[i]} ({hi[i] - lo[i]:+.3f} rad)" for i in range(NUM_MOTORS) if not hi[i] - lo[i] >= min_range]
    if narrow:
        hint = "" if "thumb_opposed" in m else "; for thumb_rotation a 'thumb_opposed' pose may help"
        raise ValueError(
            f"degenerate reference poses: the closed pose must exceed the open pose by at least {min_range} rad "
            f"of closure on every channel; too narrow: {', '.join(narrow)}{hint}"
        )
    dtype = jnp.result_type(float)
    return InspireCalibration(open=jnp.asarray(lo, dtype), closed=jnp.asarray(hi, dtype))


def calibration_to_dict(calibration: InspireCalibration) -> dict[str, Any]:
    """JSON-ready ``{"motors": [...], "open": [6 floats], "closed": [6 floats]}``."""
    cal = check_calibration(calibration)
    return {
        "motors": list(MOTOR_NAMES),
        "open": [float(v) for v in np.asarray(cal.open)],
        "closed": [float(v) for v in np.asarray(cal.closed)],
    }


def calibration_from_dict(d: Mapping[str, Any]) -> InspireCalibration:
    """Inverse of :func:`calibration_to_dict` (validated)."""
    try:
        lo, hi = d["open"], d["closed"]
    except (KeyError, TypeError):
        raise ValueError("a calibration dict needs 'open' and 'closed' lists of 6 numbers") from None
    dtype = jnp.result_type(float)
    return check_calibration(InspireCalibration(jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)))


# ---------------------------------------------------------------------------------------- commands


@jax.jit
def to_inspire_kernel(hand: HandModel, q: jax.Array, calibration: InspireCalibration | None) -> jax.Array:
    hand = hand.astype(q.dtype)
    if calibration is None:
        calibration = default_calibration(hand)
    lo = jnp.asarray(calibration.open, q.dtype)
    hi = jnp.asarray(calibration.closed, q.dtype)
    # check_calibration guarantees hi > lo for concrete input; the floor keeps a traced, degenerate
    # calibration from producing inf/NaN gradients.
    span = jnp.maximum(hi - lo, 1e-9)
    m = _closure_kernel(hand, q)
    # A non-finite angle (only reachable under jit: concrete input is checked) must not clamp to a
    # plausible 0 or 1: the channels it feeds are NaN.
    return jnp.where(jnp.isfinite(m), jnp.clip((hi - m) / span, 0.0, 1.0), jnp.nan)


def to_inspire(angles, calibration: InspireCalibration | None = None, hand: HandModel | None = None) -> jax.Array:
    """Inspire opening fractions from WG110v12 joint angles.

    Monotone (flexing any joint never raises an opening), clamped, any batch shape, jit-able and
    differentiable in ``angles`` and ``calibration``.

    Angles outside the joint limits are accepted and their commands clamped, however far out: check
    recorded input with :func:`joint_limit_violations` first (the CLI does). Concrete NaN/inf
    angles raise; traced ones (inside ``jit``, ``vmap``, ``grad``) cannot be checked and give NaN on
    every channel they feed (never a value in ``[0, 1]``), so test traced results with
    ``jnp.isfinite`` before sending them (:func:`to_rh56` and the message builders refuse NaN).

    Args:
        angles: ``(*batch, 20)`` joint angles, radians, seed ID order (e.g. ``wj.solve(...).angles``).
        calibration: end-stop references (default: :func:`default_calibration` of ``hand``).
        hand: the model (default: right hand; left and right map identically).

    Returns:
        ``(*batch, 6)`` in ``[0, 1]``, motor order little, ring, middle, fore, thumb bend, thumb
        rotation; 1.0 = fully open.

    Raises:
        ValueError: wrong last dimension, non-finite (concrete) angles, or an invalid calibration.
    """
    hand = _hand(hand)
    q = _check_angles(hand, angles)
    if calibration is not None:
        calibration = check_calibration(calibration)
    return to_inspire_kernel(hand, q, calibration)


def from_glove_angles(
    hand_joint_angles,
    *,
    degrees: bool = False,
    names: Sequence[str] | None = None,
    calibration: InspireCalibration | None = None,
    hand: HandModel | None = None,
) -> jax.Array:
    """Glove-native path: the glove's ``hand_joint_angles`` straight to Inspire commands, no IK.

    Args:
        hand_joint_angles: ``(*batch, 20)`` angles in seed ID order (the glove's own order).
        degrees: the angles are in degrees (converted to radians here).
        names: the joint names of the last axis when it is not in seed ID order; reordered by name.
        calibration, hand: as for :func:`to_inspire`.

    Returns:
        ``(*batch, 6)`` opening fractions, as :func:`to_inspire`.
    """
    hand = _hand(hand)
    a = _check_angles(hand, hand_joint_angles, "hand_joint_angles")
    if names is not None:
        names = list(names)
        if sorted(names) != sorted(hand.joint_names):
            missing = sorted(set(hand.joint_names) - set(names))
            extra = sorted(set(names) - set(hand.joint_names))
            raise ValueError(f"names must be a permutation of hand.joint_names; missing {missing}, unknown {extra}")
        a = a[..., jnp.asarray([names.index(n) for n in hand.joint_names])]
    if degrees:
        a = jnp.deg2rad(a)
    return to_inspire(a, calibration, hand)


def _inspire(model) -> InspireHand:
    if isinstance(model, InspireHand):
        return model
    if model is None or isinstance(model, (str, os.PathLike)):
        return load_inspire_hand(model)
    raise ValueError(f"model must be an InspireHand, a URDF path or None; got {type(model).__name__}")


@jax.jit
def retarget_kernel(hand: HandModel, model: InspireHand, q: jax.Array, q0: jax.Array | None,
                    calibration: InspireCalibration | None, config: RetargetConfig, left=False) -> jax.Array:
    """:func:`retarget` without its checks: ``q (*batch, 20)``, ``q0 (*batch, 6)`` or ``None`` →
    ``(*batch, 6)``; ``left`` (a bool, traced: one program serves both hands) mirrors the human's palm
    frame. Pure JAX (jit, vmap, grad)."""
    batch = q.shape[:-1]
    rows = q.reshape(-1, q.shape[-1])
    kp = jnp.transpose(forward_keypoints(hand, rows), (2, 1, 0))  # (3, 21, B)
    prior = to_inspire_kernel(hand, rows, calibration).T  # (6, B)
    prev = None if q0 is None else jnp.clip(jnp.asarray(q0, q.dtype).reshape(-1, NUM_MOTORS).T, 0.0, 1.0)
    kp_open = forward_keypoints(hand, jnp.zeros((1, q.shape[-1]), q.dtype))[0].T if config.open_anchor else None
    out = retarget_rows(model, kp, prior, config, prev, left, kp_open)
    return out.T.reshape(batch + (NUM_MOTORS,))


def retarget(angles, model: InspireHand | str | os.PathLike | None = None, *, q0=None,
             config: RetargetConfig | None = None, calibration: InspireCalibration | None = None,
             hand: HandModel | None = None) -> jax.Array:
    """Inspire opening fractions by task-space retargeting: the robot's fingertips make the human's grasp.

    The angles go through the hand's forward kinematics to keypoints (so glove-native angles work
    too); the six openings are then chosen so that the Inspire hand's thumb → finger vectors and
    wrist → tip directions match the human's (scaled by the two hands' sizes), a human pinch drives
    the robot's pads to contact, and :func:`to_inspire` serves as a weak prior (finger curl stays
    where the joint map puts it). Limits are kept by projection. See :mod:`wuji_jax.retarget.task_space`.

    Batched over any leading axes; works under ``jit``, ``vmap`` and ``grad``; float32 on CPU and GPU.
    Over a sequence pass the previous frame's command as ``q0``: it is one more start, and with
    ``config.w_previous > 0`` a pull towards it.

    Args:
        angles: ``(*batch, 20)`` WG110v12 joint angles, radians, seed ID order.
        model: the Inspire hand: an :class:`InspireHand`, a URDF path, or ``None`` for the copy inside
            an installed ``dexi-rs`` (:func:`find_inspire_urdf`).
        q0: ``(*batch, 6)`` previous openings (warm start), motor order.
        config: weights and iterations (:class:`RetargetConfig`; default its defaults).
        calibration: of the joint-map prior (default :func:`default_calibration`).
        hand: the human model (default right; a left model's mirrored keypoints are handled).

    Returns:
        ``(*batch, 6)`` in ``[0, 1]``, motor order little, ring, middle, fore, thumb bend, thumb
        rotation; 1.0 = fully open.

    Raises:
        InspireModelNotFound: no model given and none installed (one line: how to get one).
        ValueError: wrong shapes, non-finite (concrete) angles, an invalid calibration.
    """
    hand = _hand(hand)
    q = _check_angles(hand, angles)
    robot = _inspire(model)
    if calibration is not None:
        calibration = check_calibration(calibration)
    if q0 is not None:
        q0 = jnp.asarray(q0, q.dtype)
        if q0.shape != q.shape[:-1] + (NUM_MOTORS,):
            raise ValueError(f"q0 must have shape {q.shape[:-1] + (NUM_MOTORS,)} (previous openings); "
                             f"got {tuple(q0.shape)}")
    return retarget_kernel(hand, robot, q, q0, calibration, config or RetargetConfig(), left=hand.side == "left")


#: The command maps a run can use: :func:`to_inspire` (``"joint_map"``) or :func:`retarget`.
COMMAND_MAPS: tuple[str, ...] = ("joint_map", "retarget")


def choose_command_map(method: str = "auto", urdf: str | os.PathLike | None = None,
                       side: str = "right") -> tuple[str, Any, str | None]:
    """The command map a run uses, the Inspire URDF behind it, and a one-line note on the choice.

    Args:
        method: ``"retarget"`` (an :class:`InspireModelNotFound` without a model), ``"joint_map"``, or
            ``"auto"``: the retarget where :func:`find_inspire_urdf` finds a model, else the joint map.
        urdf: an Inspire URDF path (default: the copy inside an installed ``dexi-rs``).
        side: which ``dexi-rs`` copy to look for.

    Returns:
        ``(map, path, note)``: ``map`` one of :data:`COMMAND_MAPS`; ``path`` the URDF
        (:class:`pathlib.Path`) for ``"retarget"``, else None; ``note`` a line saying why the joint map
        was used where ``"auto"`` found no model, else None.
    """
    if method not in ("auto",) + COMMAND_MAPS:
        raise ValueError(f"method must be 'auto', 'joint_map' or 'retarget'; got {method!r}")
    if method == "joint_map":
        return "joint_map", None, None
    path = find_inspire_urdf(urdf, side)
    if path is None:
        why = f"Inspire URDF {str(urdf)!r} does not exist" if urdf is not None else inspire_model_hint()
        if method == "retarget":
            raise InspireModelNotFound(why)
        return "joint_map", None, f"{why}; using the joint map (wuji_jax.inspire.to_inspire)"
    return "retarget", path.resolve(), None


def _check_cmd(cmd, name: str = "cmd", *, batch: bool = True) -> np.ndarray:
    c = np.asarray(cmd, dtype=np.float64)
    if c.ndim == 0 or c.shape[-1] != NUM_MOTORS or (not batch and c.ndim != 1):
        want = "(*batch, 6)" if batch else "(6,)"
        raise ValueError(f"{name} must have shape {want} (motor order {', '.join(MOTOR_NAMES)}); got {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"{name} contains non-finite values")
    if np.any(c < -1e-9) or np.any(c > 1 + 1e-9):
        raise ValueError(f"{name} must be opening fractions in [0, 1]; got range [{c.min():.4g}, {c.max():.4g}]")
    return np.clip(c, 0.0, 1.0)


def to_rh56(cmd) -> jax.Array:
    """RH56 native angle register values: ``round(1000 · opening)``, int32 in ``[0, 1000]``.

    Same order and direction as the opening fractions (1000 = open). Jit-able; finite values outside
    ``[0, 1]`` are clamped. NaN has no register value: concrete NaN/inf input is a ``ValueError``;
    traced NaN (inside ``jit``) gives ``-1``, outside the register's range, instead of the
    platform-dependent integer a float→int cast of NaN would give (often 0: "fully closed").
    """
    c = jnp.asarray(cmd)
    if c.ndim == 0 or c.shape[-1] != NUM_MOTORS:
        raise ValueError(f"cmd must have shape (*batch, 6); got {tuple(c.shape)}")
    if not _is_tracer(c):
        bad = int(np.size(c) - np.count_nonzero(np.isfinite(np.asarray(c))))
        if bad:
            raise ValueError(f"cmd contains {bad} non-finite value(s) (NaN or inf); they have no RH56 register value")
    return _to_rh56_kernel(c)


def _rh56(xp, c):
    v = xp.round(xp.clip(c, 0.0, 1.0) * RH56_MAX)
    return xp.where(xp.isnan(c), -1, v).astype(xp.int32)


_to_rh56_kernel = jax.jit(functools.partial(_rh56, jnp))


def rh56_host(cmd: np.ndarray) -> np.ndarray:
    """:func:`to_rh56` of a host array in numpy (no dispatch: for one command a frame), int32."""
    return _rh56(np, np.asarray(cmd))


def from_rh56(values) -> jax.Array:
    """Opening fractions from RH56 register values ``(*batch, 6)`` in ``[0, 1000]``."""
    v = jnp.asarray(values)
    if v.ndim == 0 or v.shape[-1] != NUM_MOTORS:
        raise ValueError(f"RH56 values must have shape (*batch, 6); got {tuple(v.shape)}")
    return jnp.clip(v / RH56_MAX, 0.0, 1.0)


# ---------------------------------------------------------------------------------------- payloads


def _side(side: str) -> str:
    if side not in _SIDES:
        raise ValueError(f"side must be 'left' or 'right'; got {side!r}")
    return side


def ctrl_topic(side: str) -> str:
    """``/inspire_hand/ctrl/{left,right}_hand`` (JointState, position = opening fraction)."""
    return f"/inspire_hand/ctrl/{_side(side)}_hand"


def state_topic(side: str) -> str:
    """``/inspire_hand/state/{left,right}_hand`` (JointState; position, velocity, effort as fractions)."""
    return f"/inspire_hand/state/{_side(side)}_hand"


def service_name(service: str, side: str) -> str:
    """``/inspire_hand/{service}/{side}_hand`` for ``set_angle_flexible``, ``set_force``, ``set_speed``,
    ``set_clear_error``."""
    if service not in _SERVICES:
        raise ValueError(f"unknown Inspire service {service!r}; choose one of: {', '.join(_SERVICES)}")
    return f"/inspire_hand/{service}/{_side(side)}_hand"


def _names(names: Sequence[str] | None) -> list[str]:
    if names is None:
        return [str(i) for i in MOTOR_IDS]
    out = [str(n) for n in names]
    if len(out) != NUM_MOTORS:
        raise ValueError(f"names must list 6 motors; got {len(out)}")
    return out


_STAMP_RANGE = "0 <= t < 2**31 s (ROS 2 sec is int32, ROS 1 secs unsigned)"


def _stamp_int(v, what: str) -> int:
    f = float(v)
    if not (math.isfinite(f) and f == math.floor(f)):
        raise ValueError(f"stamp {what} must be an integer; got {v!r}")
    return int(v) if isinstance(v, (int, np.integer)) else int(f)


def _stamp(stamp) -> dict[str, int]:
    """``{"sec", "nanosec"}`` that fits ROS 2 ``builtin_interfaces/Time`` and ROS 1 ``time``, or ``ValueError``."""
    if isinstance(stamp, Mapping):
        sec, nsec = _stamp_int(stamp["sec"], "sec"), _stamp_int(stamp["nanosec"], "nanosec")
    elif isinstance(stamp, (tuple, list)):
        sec, nsec = _stamp_int(stamp[0], "sec"), _stamp_int(stamp[1], "nanosec")
    else:
        t = float(stamp)
        if not math.isfinite(t) or t < 0 or t >= MAX_STAMP_SECONDS + 1:
            raise ValueError(f"stamp must be finite seconds with {_STAMP_RANGE}; got {stamp!r}")
        sec = math.floor(t)
        nsec = int(round((t - sec) * 1e9))
        if nsec >= 1_000_000_000:  # e.g. 1.9999999999 s: the fraction rounds up to a whole second
            sec, nsec = sec + 1, nsec - 1_000_000_000
    if not 0 <= sec <= MAX_STAMP_SECONDS or not 0 <= nsec < 1_000_000_000:
        raise ValueError(
            f"stamp must have 0 <= sec <= {MAX_STAMP_SECONDS} and 0 <= nanosec < 1e9; got sec={sec}, nanosec={nsec}"
        )
    return {"sec": sec, "nanosec": nsec}


def _check_stamps(t: np.ndarray, name: str = "timestamps") -> None:
    """``ValueError`` naming the first of ``t`` (float64 seconds) that no ROS stamp can hold."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(t) & (t >= 0) & (t < MAX_STAMP_SECONDS + 1))
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(f"{name}[{i}] = {float(t[i])!r} s does not fit a ROS time stamp ({_STAMP_RANGE})")


def _floats6(c: np.ndarray, ndigits: int | None = None) -> list[float]:
    return [float(v) if ndigits is None else round(float(v), ndigits) for v in c]


def ctrl_message(
    cmd, side: str, stamp, frame_id: str = "", *, names: Sequence[str] | None = None
) -> dict[str, Any]:
    """The ctrl-topic message (``sensor_msgs/msg/JointState``) commanding six opening fractions.

    Args:
        cmd: ``(6,)`` opening fractions in ``[0, 1]``, motor order.
        side: ``"left"`` or ``"right"``.
        stamp: seconds (float) in ``[0, 2**31)``, or ``(sec, nanosec)`` / ``{"sec", "nanosec"}``
            integers with ``0 <= sec <= MAX_STAMP_SECONDS``, ``0 <= nanosec < 1e9``.
        frame_id: header frame (seed 003 does not name one).
        names: six motor names for ``name[]`` (default the IDs ``"1".."6"``).

    Returns:
        ``{"topic": "/inspire_hand/ctrl/<side>_hand", "type": "sensor_msgs/msg/JointState",
        "msg": {"header": {"stamp": {"sec", "nanosec"}, "frame_id"}, "name": [6], "position": [6]}}``.
    """
    c = _check_cmd(cmd, batch=False)
    return {
        "topic": ctrl_topic(side),
        "type": _JOINT_STATE,
        "msg": {
            "header": {"stamp": _stamp(stamp), "frame_id": str(frame_id)},
            "name": _names(names),
            "position": _floats6(c),
        },
    }


def set_angle_flexible_request(cmd, side: str, *, names: Sequence[str] | None = None) -> dict[str, Any]:
    """``set_angle_flexible`` service request: ``{"name": [6], "angle_ratio": [6]}`` (opening fractions)."""
    c = _check_cmd(cmd, batch=False)
    return {
        "service": service_name("set_angle_flexible", side),
        "type": _SERVICE_TYPES["set_angle_flexible"],
        "request": {"name": _names(names), "angle_ratio": _floats6(c)},
    }


def _per_motor(values, name: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 0:
        v = np.full(NUM_MOTORS, float(v))
    if v.shape != (NUM_MOTORS,):
        raise ValueError(f"{name} must be a scalar or shape (6,) in motor order; got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains non-finite values")
    return v


def _check_speed_ratio(ratios, name: str = "speed ratio") -> np.ndarray:
    r = _per_motor(ratios, name)
    if np.any(r <= 0) or np.any(r > 1):
        raise ValueError(f"{name} must be in (0, 1] (1 = {FULL_TRAVEL_SECONDS * 1000:.0f} ms full travel); got {r}")
    return r


def speed_ratio_to_full_travel_seconds(ratio):
    """Seconds for a full open↔closed travel at a speed ratio (1 → 0.8 s, 0.5 → 1.6 s, 0.25 → 3.2 s)."""
    r = np.asarray(ratio, dtype=np.float64)
    if np.any(~np.isfinite(r)) or np.any(r <= 0) or np.any(r > 1):
        raise ValueError(f"speed ratio must be in (0, 1]; got {ratio}")
    out = FULL_TRAVEL_SECONDS / r
    return float(out) if out.ndim == 0 else out


def full_travel_seconds_to_speed_ratio(seconds):
    """Inverse of :func:`speed_ratio_to_full_travel_seconds`; ``seconds >= 0.8``."""
    s = np.asarray(seconds, dtype=np.float64)
    if np.any(~np.isfinite(s)) or np.any(s < FULL_TRAVEL_SECONDS):
        raise ValueError(f"full travel takes at least {FULL_TRAVEL_SECONDS} s; got {seconds}")
    out = FULL_TRAVEL_SECONDS / s
    return float(out) if out.ndim == 0 else out


def max_rate(speed_ratio) -> np.ndarray:
    """Largest opening change per second a motor makes at ``speed_ratio``: ``ratio / 0.8 s``, ``(6,)``."""
    return _check_speed_ratio(speed_ratio) / FULL_TRAVEL_SECONDS


def set_speed_request(ratios, side: str) -> dict[str, Any]:
    """``set_speed`` request: ``speed0_Ratio`` … ``speed5_Ratio`` (motor order), each in ``(0, 1]``."""
    r = _check_speed_ratio(ratios)
    return {
        "service": service_name("set_speed", side),
        "type": _SERVICE_TYPES["set_speed"],
        "request": {f"speed{i}_Ratio": float(r[i]) for i in range(NUM_MOTORS)},
    }


def set_force_request(values, side: str, *, unit: str = "ratio") -> dict[str, Any]:
    """``set_force`` request: ``force0_Ratio`` … ``force5_Ratio`` (motor order), 1 = 1000 g.

    Args:
        values: scalar or ``(6,)``; ratios in ``[0, 1]`` (``unit="ratio"``) or grams in ``[0, 1000]``
            (``unit="grams"``).
        side: ``"left"`` or ``"right"``.
    """
    if unit not in ("ratio", "grams"):
        raise ValueError(f"unit must be 'ratio' or 'grams'; got {unit!r}")
    v = _per_motor(values, "force")
    r = v / MAX_FORCE_GRAMS if unit == "grams" else v
    if np.any(r < 0) or np.any(r > 1):
        rng = "[0, 1000] g" if unit == "grams" else "[0, 1]"
        raise ValueError(f"force must be in {rng}; got {v}")
    return {
        "service": service_name("set_force", side),
        "type": _SERVICE_TYPES["set_force"],
        "request": {f"force{i}_Ratio": float(r[i]) for i in range(NUM_MOTORS)},
    }


def clear_error_request(side: str) -> dict[str, Any]:
    """``set_clear_error`` request (empty)."""
    return {
        "service": service_name("set_clear_error", side),
        "type": _SERVICE_TYPES["set_clear_error"],
        "request": {},
    }


# ----------------------------------------------------------------------------------------- streams


def _rate_step(y, x, dt, rate):
    """Move ``y`` towards ``x`` by at most ``rate · dt`` per channel."""
    s = rate * jnp.maximum(dt, 0.0)
    return y + jnp.clip(x - y, -s, s)


def _ema_step(y, x, dt, tau):
    """Exponential smoothing with time constant ``tau`` (s), exact for irregular ``dt``."""
    a = -jnp.expm1(-jnp.maximum(dt, 0.0) / tau)
    return y + a * (x - y)


def _check_stream(cmds, timestamps) -> tuple[jax.Array, np.ndarray, jax.Array]:
    """``(cmds (T, 6), timestamps (T,) float64 NumPy, dt (T − 1,))``.

    Time differences are taken in float64 before any cast: epoch timestamps (~1.7e9 s) in float32
    would lose everything below two minutes.
    """
    c = _check_cmd(cmds, "cmds")
    if c.ndim != 2 or c.shape[0] == 0:
        raise ValueError(f"cmds must have shape (T, 6) with T >= 1; got {c.shape}")
    t = np.asarray(timestamps, dtype=np.float64)
    if t.shape != (c.shape[0],):
        raise ValueError(f"timestamps must have shape ({c.shape[0]},) to match cmds; got {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("timestamps contain non-finite values")
    if np.any(np.diff(t) < 0):
        raise ValueError("timestamps must be non-decreasing (seconds)")
    dtype = jnp.result_type(float)
    return jnp.asarray(c, dtype), t, jnp.asarray(np.diff(t), dtype)


@jax.jit
def _limit_rate_kernel(c, dt, rate, y0):
    def step(y, inp):
        x, dt = inp
        y = _rate_step(y, x, dt, rate)
        return y, y

    _, ys = jax.lax.scan(step, y0, (c[1:], dt))
    return jnp.concatenate([y0[None], ys], 0)


def limit_rate(cmds, timestamps, speed_ratio=1.0, *, initial=None) -> CommandStream:
    """Limit each channel's change to what the motors do at ``speed_ratio`` (full travel 0.8 s / ratio).

    After limiting, ``|cmd[t] − cmd[t−1]| ≤ speed_ratio / 0.8 · (time[t] − time[t−1])`` on every
    channel, so no command asks for faster travel than the hand performs at that speed setting.

    Args:
        cmds: ``(T, 6)`` opening fractions.
        timestamps: ``(T,)`` seconds, non-decreasing.
        speed_ratio: scalar or ``(6,)`` in ``(0, 1]``, the ratio sent with :func:`set_speed_request`.
        initial: ``(6,)`` the hand's opening at ``timestamps[0]`` (the first output equals it);
            default: the first command.

    Returns:
        :class:`CommandStream` with the limited ``(T, 6)`` commands and the same timestamps.
    """
    c, t, dt = _check_stream(cmds, timestamps)
    rate = jnp.asarray(max_rate(speed_ratio), c.dtype)
    y0 = c[0] if initial is None else jnp.asarray(_check_cmd(initial, "initial", batch=False), c.dtype)
    return CommandStream(_limit_rate_kernel(c, dt, rate, y0), t)


@functools.partial(jax.jit, static_argnames=("method",))
def _smooth_kernel(c, dt, method, tau, min_cutoff, beta, d_cutoff):
    def step(state, inp):
        y, dy = state
        x, dt = inp
        if method == "exponential":
            y = _ema_step(y, x, dt, tau)
        else:
            y, dy = one_euro_step(y, dy, x, dt, min_cutoff, beta, d_cutoff)
        return (y, dy), y

    _, ys = jax.lax.scan(step, (c[0], jnp.zeros_like(c[0])), (c[1:], dt))
    return jnp.concatenate([c[:1], ys], 0)


def _check_smoothing(method: str, tau: float, min_cutoff: float, beta: float, d_cutoff: float) -> None:
    if method not in ("exponential", "one_euro"):
        raise ValueError(f"smoothing method must be 'exponential' or 'one_euro'; got {method!r}")
    for nm, v, strict in (("tau", tau, True), ("min_cutoff", min_cutoff, True), ("beta", beta, False),
                          ("d_cutoff", d_cutoff, True)):
        v = float(v)
        if not math.isfinite(v) or v < 0 or (strict and v == 0):
            raise ValueError(f"{nm} must be {'> 0' if strict else '>= 0'}; got {v}")


def smooth(
    cmds,
    timestamps,
    method: str = "exponential",
    *,
    tau: float = 0.05,
    min_cutoff: float = 1.0,
    beta: float = 0.5,
    d_cutoff: float = 1.0,
) -> CommandStream:
    """Smooth a command stream over time; results stay in ``[0, 1]`` (convex combinations).

    Args:
        cmds: ``(T, 6)`` opening fractions.
        timestamps: ``(T,)`` seconds, non-decreasing (irregular spacing is handled exactly).
        method: ``"exponential"`` (time constant ``tau``, seconds) or ``"one_euro"`` (``min_cutoff``
            Hz at rest, rising by ``beta`` Hz per unit/s of speed; ``d_cutoff`` Hz for the speed).

    Returns:
        :class:`CommandStream`; the first command is passed through.
    """
    _check_smoothing(method, tau, min_cutoff, beta, d_cutoff)
    c, t, dt = _check_stream(cmds, timestamps)
    return CommandStream(_smooth_kernel(c, dt, method, tau, min_cutoff, beta, d_cutoff), t)


@functools.partial(jax.jit, static_argnames=("method",))
def _stream_step(hand, calibration, q, state, dt, rate, method, tau, min_cutoff, beta, d_cutoff):
    x = to_inspire_kernel(hand, q, calibration)
    y, dy, out = state
    if method == "exponential":
        y = _ema_step(y, x, dt, tau)
    elif method == "one_euro":
        y, dy = one_euro_step(y, dy, x, dt, min_cutoff, beta, d_cutoff)
    else:
        y = x
    out = _rate_step(out, y, dt, rate)
    return x, (y, dy, out)


class InspireStream:
    """Live conversion: push one frame of angles at a time, get a ctrl-topic message back.

    Equivalent to :func:`to_inspire`, then :func:`smooth` (if ``smoothing``), then
    :func:`limit_rate` over the whole sequence, but one sample at a time.

    Example::

        stream = InspireStream("right", speed_ratio=0.5, smoothing="one_euro")
        for t, q in frames:
            publish(stream.push(q, t))       # {"topic", "type", "msg"}; stream.command is the (6,)

    Args:
        side: ``"left"`` or ``"right"``.
        calibration, hand: as for :func:`to_inspire`.
        speed_ratio: scalar or ``(6,)`` in ``(0, 1]``; the rate limit follows it.
        smoothing: ``None``, ``"exponential"`` or ``"one_euro"`` (parameters as :func:`smooth`).
        degrees: pushed angles are in degrees (the glove-native path).
        frame_id, names: passed to :func:`ctrl_message`.
        initial: ``(6,)`` the hand's opening before the first push (default: the first command).
    """

    def __init__(
        self,
        side: str = "right",
        calibration: InspireCalibration | None = None,
        hand: HandModel | None = None,
        *,
        speed_ratio=1.0,
        smoothing: str | None = None,
        tau: float = 0.05,
        min_cutoff: float = 1.0,
        beta: float = 0.5,
        d_cutoff: float = 1.0,
        degrees: bool = False,
        frame_id: str = "",
        names: Sequence[str] | None = None,
        initial=None,
    ):
        self.side = _side(side)
        self.hand = _hand(hand)
        self.calibration = None if calibration is None else check_calibration(calibration)
        self.rate = max_rate(speed_ratio)
        if smoothing is not None:
            _check_smoothing(smoothing, tau, min_cutoff, beta, d_cutoff)
        self.smoothing = smoothing
        self._params = (float(tau), float(min_cutoff), float(beta), float(d_cutoff))
        self.degrees = bool(degrees)
        self.frame_id = frame_id
        self.names = _names(names)
        self._initial = None if initial is None else _check_cmd(initial, "initial", batch=False)
        self.reset()

    def reset(self) -> None:
        """Forget the filter state; the next push starts a new stream."""
        self._state = None
        self._t: float | None = None
        self.command: np.ndarray | None = None  #: last sent ``(6,)`` opening fractions
        self.raw_command: np.ndarray | None = None  #: last unfiltered ``(6,)`` command

    def push(self, angles, t: float) -> dict[str, Any]:
        """Convert one frame.

        Args:
            angles: ``(20,)`` joint angles (radians, or degrees if ``degrees``), seed ID order.
            t: timestamp, seconds in ``[0, 2**31)`` (a ROS stamp), not before the previous push.

        Returns:
            :func:`ctrl_message` of the filtered, rate-limited command, stamped ``t``.
        """
        q = _check_angles(self.hand, angles, on_host=True)
        if q.ndim != 1:
            raise ValueError(f"push takes one frame of shape ({self.hand.num_joints},); got {tuple(q.shape)}")
        if self.degrees:
            q = np.deg2rad(q) if isinstance(q, np.ndarray) else jnp.deg2rad(q)
        t = float(t)
        if not math.isfinite(t):
            raise ValueError(f"t must be finite seconds; got {t}")
        _stamp(t)  # a t no ROS stamp holds fails here, before the filter state moves
        if self._t is not None and t < self._t:
            raise ValueError(f"timestamps must not go backwards: {t} after {self._t}")
        dtype = q.dtype
        if self._state is None:
            x = to_inspire_kernel(self.hand, q, self.calibration)
            out = x if self._initial is None else jnp.asarray(self._initial, dtype)
            self._state = (x, jnp.zeros_like(x), out)
        else:
            x, self._state = _stream_step(
                self.hand, self.calibration, q, self._state, np.asarray(t - self._t, dtype),
                np.asarray(self.rate, dtype), self.smoothing or "none", *self._params,
            )
        self._t = t
        self.raw_command = np.asarray(x, np.float64)
        self.command = np.clip(np.asarray(self._state[2], np.float64), 0.0, 1.0)
        return ctrl_message(self.command, self.side, t, self.frame_id, names=self.names)


# --------------------------------------------------------------------------------------------- ROS


class InspirePublisher:
    """Publishes opening fractions as ``sensor_msgs/JointState`` on the ctrl topic (made by :func:`publisher`)."""

    def __init__(self, node, pub, side: str, msg_type, names: Sequence[str] | None = None, frame_id: str = ""):
        self.node, self.pub, self.side, self._msg_type = node, pub, side, msg_type
        self.names, self.frame_id = _names(names), frame_id
        self.topic = ctrl_topic(side)

    def publish(self, cmd, stamp=None):
        """Publish ``(6,)`` opening fractions; ``stamp`` in seconds (default: the node's clock now)."""
        c = _check_cmd(cmd, batch=False)
        msg = self._msg_type()
        if stamp is None:
            msg.header.stamp = self.node.get_clock().now().to_msg()
        else:
            s = _stamp(stamp)
            msg.header.stamp.sec, msg.header.stamp.nanosec = s["sec"], s["nanosec"]
        msg.header.frame_id = self.frame_id
        msg.name = list(self.names)
        msg.position = _floats6(c)
        self.pub.publish(msg)
        return msg


def publisher(
    side: str,
    node=None,
    *,
    node_name: str = "wuji_inspire",
    qos_depth: int = 10,
    names: Sequence[str] | None = None,
    frame_id: str = "",
) -> InspirePublisher:
    """A ROS 2 publisher on ``/inspire_hand/ctrl/<side>_hand`` (needs ``rclpy`` and ``sensor_msgs``).

    Without ROS this raises ``ImportError`` when called; nothing else in this module needs ROS.

    Args:
        side: ``"left"`` or ``"right"``.
        node: an existing ``rclpy`` node; default: a new node ``node_name`` (``rclpy.init()`` if needed).
    """
    side = _side(side)
    try:
        import rclpy
        from sensor_msgs.msg import JointState
    except ImportError as e:
        raise ImportError(
            "wuji_jax.inspire.publisher needs ROS 2 (rclpy and sensor_msgs); source a ROS 2 environment, "
            "or build plain-dict messages with wuji_jax.inspire.ctrl_message() instead"
        ) from e
    if node is None:
        if not rclpy.ok():
            rclpy.init()
        node = rclpy.create_node(node_name)
    pub = node.create_publisher(JointState, ctrl_topic(side), qos_depth)
    return InspirePublisher(node, pub, side, JointState, names=names, frame_id=frame_id)


# ---------------------------------------------------------------------------------------------- io


_CSV_FLOAT_DIGITS = 6  # 1e-6 ≪ the RH56's 1e-3 resolution


def write_command_stream(
    path: str | os.PathLike | IO[str],
    cmds,
    timestamps,
    side: str,
    fmt: str = "jsonl",
    *,
    frame_id: str = "",
    names: Sequence[str] | None = None,
) -> int:
    """Write a timestamped command stream.

    * ``jsonl``: one line per command, ``{"t": s, "side", "topic", "msg": <JointState dict as in
      ctrl_message>, "rh56": [6 ints]}``.
    * ``csv``: header ``t,side,little,ring,middle,fore,thumb_bend,thumb_rotation,rh56_little,…``.

    Args:
        path: file path (written to a temporary name and renamed when complete: whole or not at all)
            or an open text file (e.g. ``sys.stdout``).
        cmds: ``(T, 6)`` opening fractions; timestamps ``(T,)`` seconds, non-decreasing, in
            ``[0, 2**31)`` so that every one is a valid ROS stamp (checked for both formats).
        side: ``"left"`` or ``"right"``.
        fmt: ``"jsonl"`` or ``"csv"``.

    Returns:
        The number of commands written.
    """
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"fmt must be 'jsonl' or 'csv'; got {fmt!r}")
    side = _side(side)
    c, t, _ = _check_stream(cmds, timestamps)
    _check_stamps(t)
    c = np.asarray(c, np.float64)
    rh = np.asarray(to_rh56(c))
    buf = io.StringIO()
    if fmt == "jsonl":
        topic = ctrl_topic(side)
        for ci, ti, ri in zip(c, t, rh):
            msg = ctrl_message(ci, side, float(ti), frame_id, names=names)["msg"]
            msg["position"] = _floats6(ci, _CSV_FLOAT_DIGITS)
            line = {"t": float(ti), "side": side, "topic": topic, "msg": msg, "rh56": [int(v) for v in ri]}
            buf.write(json.dumps(line, separators=(",", ":")) + "\n")
    else:
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["t", "side", *MOTOR_NAMES, *(f"rh56_{n}" for n in MOTOR_NAMES)])
        for ci, ti, ri in zip(c, t, rh):
            w.writerow([repr(float(ti)), side, *_floats6(ci, _CSV_FLOAT_DIGITS), *(int(v) for v in ri)])
    if hasattr(path, "write"):
        path.write(buf.getvalue())
    else:
        from ..data.outputs import write_text

        write_text(path, buf.getvalue())
    return int(c.shape[0])
