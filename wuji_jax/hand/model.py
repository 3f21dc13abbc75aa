"""URDF → :class:`HandModel`, the pytree every other module computes with.

A ``HandModel`` splits a kinematic tree into

* **static topology** (hashable, part of the jit cache key): link and joint names, parent indices,
  which joint each link hangs from, which entry of ``q`` drives it, the 21-keypoint map;
* **array leaves** (traced, differentiable): joint origins, axes, limits and coupling gains, so a
  learning pipeline can differentiate through bone lengths and coupling gains.

Supported URDF joints: ``fixed``, ``revolute`` (and ``continuous``, as an unlimited revolute), and
revolute ``<mimic>`` joints. A mimic joint may carry the WG110 screw-home extension
``<wuji_coupling abd_joint=".." k_abd=".." k_cross=".."/>``, making its angle

    θ_mimic = K_FLEX·θ_src + K_ABD·θ_abd + K_CROSS·θ_src·θ_abd + offset,

with ``K_FLEX`` the mimic multiplier. Anything else (prismatic, floating, planar joints, missing
parents, cycles, inverted limits, mimics of unknown joints) raises a ``ValueError`` naming the element.

Frames follow REP-155 (seed 001): wrist X radial, Z proximal (fingers extend along −Z), Y palmar on
the right hand and dorsal on the left. The left hand is the right mirrored in Y, with joint axes
arranged so that a positive angle means the same anatomy (flexion) on both hands.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .geometry import rpy_to_matrix
from .landmarks import KEYPOINT_LINKS

__all__ = ["HandModel", "load_hand", "load_urdf", "parse_urdf", "mirror_urdf", "urdf_path"]

FIXED, ACTIVE, MIMIC = 0, 1, 2  #: HandModel.kinds values


@dataclasses.dataclass(frozen=True)
class HandModel:
    """A kinematic tree of revolute, fixed and coupled joints (a JAX pytree).

    ``L`` links, link 0 the root; each other link ``i`` hangs from joint ``i`` whose parent link is
    ``parents[i] < i``. ``n`` active joints, ordered as in the URDF (seed ID order for WG110v12).

    Static fields (hashable):
        name: robot name from the URDF.
        side: ``"right"``, ``"left"`` or ``""`` for a model without handedness.
        link_names: ``(L,)`` link names, topological order.
        joint_of_link: ``(L,)`` name of the joint each link hangs from (``""`` for the root).
        parents: ``(L,)`` parent link index (``-1`` for the root).
        kinds: ``(L,)`` 0 fixed, 1 active revolute, 2 mimic (coupled) revolute.
        q_index: ``(L,)`` index into ``q`` for active joints, ``-1`` otherwise.
        mimic_index: ``(L,)`` row of the coupling arrays for mimic joints, ``-1`` otherwise.
        mimic_sources: ``(M, 2)`` active indices (source, secondary) of each mimic law.
        joint_names: ``(n,)`` active joint names.
        keypoint_links: ``(21,)`` link index of each MediaPipe keypoint, or ``()`` if unknown.

    Array leaves:
        origin_xyz: ``(L, 3)`` joint origin translation in the parent link frame, metres.
        origin_rot: ``(L, 3, 3)`` joint origin rotation (from URDF rpy).
        axis: ``(L, 3)`` unit joint axis in the joint frame (zeros for fixed joints).
        lower, upper: ``(n,)`` active joint limits, radians.
        coupling: ``(M, 3)`` gains ``(K_FLEX, K_ABD, K_CROSS)`` of each mimic law.
        coupling_offset: ``(M,)`` constant offset of each mimic law, radians.
        mimic_lower, mimic_upper: ``(M,)`` limits of the coupled joints, radians.
    """

    origin_xyz: jax.Array
    origin_rot: jax.Array
    axis: jax.Array
    lower: jax.Array
    upper: jax.Array
    coupling: jax.Array
    coupling_offset: jax.Array
    mimic_lower: jax.Array
    mimic_upper: jax.Array
    name: str = dataclasses.field(metadata=dict(static=True))
    side: str = dataclasses.field(metadata=dict(static=True))
    link_names: tuple[str, ...] = dataclasses.field(metadata=dict(static=True))
    joint_of_link: tuple[str, ...] = dataclasses.field(metadata=dict(static=True))
    parents: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    kinds: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    q_index: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    mimic_index: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))
    mimic_sources: tuple[tuple[int, int], ...] = dataclasses.field(metadata=dict(static=True))
    joint_names: tuple[str, ...] = dataclasses.field(metadata=dict(static=True))
    keypoint_links: tuple[int, ...] = dataclasses.field(metadata=dict(static=True))

    @property
    def num_joints(self) -> int:
        """Number of active joints ``n`` (20 for WG110v12)."""
        return len(self.joint_names)

    @property
    def num_links(self) -> int:
        return len(self.link_names)

    @property
    def mimic_names(self) -> tuple[str, ...]:
        """Names of the coupled joints, in coupling-row order (``("thumb_cmc_rot",)``)."""
        out = [""] * len(self.mimic_sources)
        for link, row in enumerate(self.mimic_index):
            if row >= 0:
                out[row] = self.joint_of_link[link]
        return tuple(out)

    def joint_index(self, name: str) -> int:
        """Index of an active joint in ``q``; ``ValueError`` if unknown."""
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise ValueError(f"unknown joint {name!r}; known joints: {', '.join(self.joint_names)}") from None

    def link_index(self, name: str) -> int:
        try:
            return self.link_names.index(name)
        except ValueError:
            raise ValueError(f"unknown link {name!r}; known links: {', '.join(self.link_names)}") from None

    def replace(self, **changes) -> "HandModel":
        """A copy with some fields replaced (e.g. ``hand.replace(coupling=...)``)."""
        return dataclasses.replace(self, **changes)

    def with_coupling(self, k_flex=None, k_abd=None, k_cross=None, row: int = 0) -> "HandModel":
        """A copy with the thumb screw-home gains ``K_FLEX, K_ABD, K_CROSS`` of coupling ``row`` set."""
        gains = self.coupling
        for col, value in enumerate((k_flex, k_abd, k_cross)):
            if value is not None:
                gains = gains.at[row, col].set(value)
        return self.replace(coupling=gains)

    def astype(self, dtype) -> "HandModel":
        """The model with every array leaf cast to ``dtype``."""
        return jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), self)


jax.tree_util.register_dataclass(HandModel)


# ----------------------------------------------------------------------------------------- parsing


def _floats(text: str | None, n: int, where: str, default: Sequence[float]) -> np.ndarray:
    if text is None:
        return np.asarray(default, np.float64)
    try:
        vals = [float(v) for v in text.split()]
    except ValueError:
        raise ValueError(f"{where}: expected {n} numbers, got {text!r}") from None
    if len(vals) != n or not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{where}: expected {n} finite numbers, got {text!r}")
    return np.asarray(vals, np.float64)


def _attr_float(el: ET.Element, key: str, where: str, default: float | None = None) -> float:
    text = el.get(key)
    if text is None:
        if default is None:
            raise ValueError(f"{where}: missing attribute {key!r}")
        return default
    return float(_floats(text, 1, f"{where} {key}", ())[0])


def parse_urdf(text: str, side: str = "", keypoints: Sequence[str] | None = None) -> HandModel:
    """Build a :class:`HandModel` from URDF text.

    Args:
        text: the URDF document.
        side: ``"right"``, ``"left"`` or ``""``; stored on the model.
        keypoints: 21 link names giving the MediaPipe keypoints in landmark order, or ``None`` to use
            the WG110v12 map when every one of its links exists (else the model has no keypoints).

    Raises:
        ValueError: naming the offending element for malformed or unsupported URDFs.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"URDF is not valid XML: {e}") from None
    if root.tag != "robot":
        raise ValueError(f"URDF root element is <{root.tag}>, expected <robot>")
    robot = root.get("name", "")
    links = [el.get("name") for el in root.findall("link")]
    if any(not n for n in links):
        raise ValueError("URDF <link> without a name")
    if len(set(links)) != len(links):
        dup = sorted({n for n in links if links.count(n) > 1})
        raise ValueError(f"URDF link names repeated: {', '.join(dup)}")

    joints = {}
    child_of = {}
    for el in root.findall("joint"):
        name = el.get("name")
        if not name:
            raise ValueError("URDF <joint> without a name")
        if name in joints:
            raise ValueError(f"joint {name!r}: name repeated")
        jtype = el.get("type")
        if jtype not in ("fixed", "revolute", "continuous"):
            raise ValueError(
                f"joint {name!r}: unsupported type {jtype!r} (supported: fixed, revolute, continuous)"
            )
        p, c = el.find("parent"), el.find("child")
        if p is None or c is None or not p.get("link") or not c.get("link"):
            raise ValueError(f"joint {name!r}: needs <parent link=..> and <child link=..>")
        parent, child = p.get("link"), c.get("link")
        for role, ln in (("parent", parent), ("child", child)):
            if ln not in links:
                raise ValueError(f"joint {name!r}: {role} link {ln!r} is not defined")
        if child in child_of:
            raise ValueError(f"joint {name!r}: link {child!r} already has parent joint {child_of[child]!r}")
        child_of[child] = name
        origin = el.find("origin")
        xyz = _floats(origin.get("xyz") if origin is not None else None, 3, f"joint {name!r} origin xyz", (0, 0, 0))
        rpy = _floats(origin.get("rpy") if origin is not None else None, 3, f"joint {name!r} origin rpy", (0, 0, 0))
        axis = np.zeros(3)
        lo, hi = -np.inf, np.inf
        mimic = None
        if jtype != "fixed":
            ax = el.find("axis")
            axis = _floats(ax.get("xyz") if ax is not None else None, 3, f"joint {name!r} axis", (1, 0, 0))
            norm = np.linalg.norm(axis)
            if norm < 1e-9:
                raise ValueError(f"joint {name!r}: axis has zero length")
            axis = axis / norm
            if jtype == "revolute":
                lim = el.find("limit")
                if lim is None:
                    raise ValueError(f"joint {name!r}: revolute joint needs a <limit lower=.. upper=..>")
                lo = _attr_float(lim, "lower", f"joint {name!r} limit", 0.0)
                hi = _attr_float(lim, "upper", f"joint {name!r} limit", 0.0)
                if lo > hi:
                    raise ValueError(f"joint {name!r}: limit lower {lo} > upper {hi}")
            m = el.find("mimic")
            if m is not None:
                src = m.get("joint")
                if not src:
                    raise ValueError(f"joint {name!r}: <mimic> without joint=")
                mimic = dict(
                    source=src,
                    multiplier=_attr_float(m, "multiplier", f"joint {name!r} mimic", 1.0),
                    offset=_attr_float(m, "offset", f"joint {name!r} mimic", 0.0),
                    secondary=None,
                    k_abd=0.0,
                    k_cross=0.0,
                )
                w = el.find("wuji_coupling")
                if w is not None:
                    mimic["secondary"] = w.get("abd_joint")
                    mimic["k_abd"] = _attr_float(w, "k_abd", f"joint {name!r} wuji_coupling", 0.0)
                    mimic["k_cross"] = _attr_float(w, "k_cross", f"joint {name!r} wuji_coupling", 0.0)
        joints[name] = dict(
            type=jtype, parent=parent, child=child, xyz=xyz, rot=rpy_to_matrix(rpy), axis=axis,
            lower=lo, upper=hi, mimic=mimic,
        )

    roots = [ln for ln in links if ln not in child_of]
    if len(roots) != 1:
        if not roots:
            raise ValueError("URDF has a cycle: every link has a parent joint, so there is no root link")
        raise ValueError(f"URDF has {len(roots)} root links ({', '.join(roots)}); a tree needs exactly one")

    # Topological order: breadth-first from the root, siblings in document order, so the active joints
    # keep the URDF's order when it is itself topological (true for WG110v12: seed ID order).
    children: dict[str, list[str]] = {ln: [] for ln in links}
    for jn, j in joints.items():
        children[j["parent"]].append(jn)
    order_links = [roots[0]]
    order_joints = [""]
    stack = [roots[0]]
    while stack:
        ln = stack.pop(0)
        for jn in children[ln]:
            order_links.append(joints[jn]["child"])
            order_joints.append(jn)
            stack.append(joints[jn]["child"])
    if len(order_links) != len(links):
        unreached = [ln for ln in links if ln not in order_links]
        raise ValueError(f"URDF has a cycle through link(s) {', '.join(unreached)}")

    # Active joints in URDF document order.
    active = [jn for jn in (el.get("name") for el in root.findall("joint"))
              if joints[jn]["type"] != "fixed" and joints[jn]["mimic"] is None]
    for jn, j in joints.items():
        m = j["mimic"]
        if m is None:
            continue
        for role in ("source", "secondary"):
            src = m[role]
            if src is None:
                continue
            if src not in joints:
                raise ValueError(f"joint {jn!r}: mimics unknown joint {src!r}")
            if src not in active:
                raise ValueError(f"joint {jn!r}: mimics {src!r}, which is not an active revolute joint")

    link_pos = {ln: i for i, ln in enumerate(order_links)}
    L = len(order_links)
    xyz = np.zeros((L, 3))
    rot = np.tile(np.eye(3), (L, 1, 1))
    axis = np.zeros((L, 3))
    parents, kinds, q_index, mimic_index = [-1], [FIXED], [-1], [-1]
    mimic_sources, gains, offsets, mlo, mhi = [], [], [], [], []
    for i, jn in enumerate(order_joints[1:], start=1):
        j = joints[jn]
        xyz[i], rot[i], axis[i] = j["xyz"], j["rot"], j["axis"]
        parents.append(link_pos[j["parent"]])
        if j["type"] == "fixed":
            kinds.append(FIXED); q_index.append(-1); mimic_index.append(-1)
        elif j["mimic"] is None:
            kinds.append(ACTIVE); q_index.append(active.index(jn)); mimic_index.append(-1)
        else:
            m = j["mimic"]
            kinds.append(MIMIC); q_index.append(-1); mimic_index.append(len(mimic_sources))
            src = active.index(m["source"])
            sec = active.index(m["secondary"]) if m["secondary"] else src
            mimic_sources.append((src, sec))
            gains.append((m["multiplier"], m["k_abd"], m["k_cross"]))
            offsets.append(m["offset"])
            mlo.append(j["lower"]); mhi.append(j["upper"])

    if keypoints is None:
        keypoints = KEYPOINT_LINKS if all(k in link_pos for k in KEYPOINT_LINKS) else ()
    else:
        if len(keypoints) != 21:
            raise ValueError(f"keypoints: expected 21 link names, got {len(keypoints)}")
        for k in keypoints:
            if k not in link_pos:
                raise ValueError(f"keypoints: link {k!r} is not defined in the URDF")

    def f(a):  # float64 when jax_enable_x64 is on, else float32 (JAX's canonical dtype), converted in
        # numpy (JAX compiles a conversion program per shape); concrete even when the first load runs
        # inside a trace (the model is cached and shared)
        with jax.ensure_compile_time_eval():
            return jax.device_put(np.asarray(a, jax.dtypes.canonicalize_dtype(np.float64)))

    return HandModel(
        origin_xyz=f(xyz), origin_rot=f(rot), axis=f(axis),
        lower=f(np.array([joints[j]["lower"] for j in active]).reshape(-1)),
        upper=f(np.array([joints[j]["upper"] for j in active]).reshape(-1)),
        coupling=f(np.array(gains).reshape(-1, 3)), coupling_offset=f(np.array(offsets).reshape(-1)),
        mimic_lower=f(np.array(mlo).reshape(-1)), mimic_upper=f(np.array(mhi).reshape(-1)),
        name=robot, side=side, link_names=tuple(order_links), joint_of_link=tuple(order_joints),
        parents=tuple(parents), kinds=tuple(kinds), q_index=tuple(q_index),
        mimic_index=tuple(mimic_index), mimic_sources=tuple(mimic_sources),
        joint_names=tuple(active), keypoint_links=tuple(link_pos[k] for k in keypoints),
    )


def load_urdf(path: str | os.PathLike, side: str = "", keypoints: Sequence[str] | None = None) -> HandModel:
    """Read a URDF file and build a :class:`HandModel` (see :func:`parse_urdf`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"URDF file {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"URDF file {str(p)!r} cannot be read: {e}") from None
    try:
        return parse_urdf(text, side=side, keypoints=keypoints)
    except ValueError as e:
        raise ValueError(f"{p.name}: {e}") from None


# ------------------------------------------------------------------------------------------ assets


def asset_path(*parts: str) -> Path:
    """Path of a bundled asset (``asset_path("urdf", "wg110v12_right.urdf")``): the installed wheel's
    ``wuji_jax.assets`` first, then a source checkout's ``assets/``."""
    try:  # installed wheel: assets/ is packaged as wuji_jax.assets
        res = importlib.resources.files("wuji_jax.assets").joinpath(*parts)
        if res.is_file():
            return Path(str(res))
    except (ModuleNotFoundError, FileNotFoundError):
        pass
    here = Path(__file__).resolve().parents[2].joinpath("assets", *parts)  # source checkout
    if here.is_file():
        return here
    raise FileNotFoundError(f"bundled asset {'/'.join(parts)} not found; reinstall wuji-jax")


def urdf_path(side: str = "right") -> Path:
    """Path of the bundled WG110v12 URDF for ``side`` (``"right"`` or ``"left"``)."""
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    return asset_path("urdf", f"wg110v12_{side}.urdf")


_CACHE: dict[tuple[str, str], HandModel] = {}


def load_hand(side: str = "right", urdf: str | os.PathLike | None = None) -> HandModel:
    """The WG110v12 hand model (``side`` ``"right"`` or ``"left"``), or one from your own ``urdf``.

    Leaves are float64 when ``jax_enable_x64`` is on, else float32; FK casts them to the dtype of ``q``.
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    path = str(urdf) if urdf is not None else str(urdf_path(side))
    key = (side, path, bool(jax.config.jax_enable_x64))
    if key not in _CACHE:
        _CACHE[key] = load_urdf(path, side=side)
    return _CACHE[key]


# ----------------------------------------------------------------------------------------- mirroring


def mirror_urdf(text: str, name: str | None = None) -> str:
    """Mirror a URDF in the Y axis (right hand → left hand), keeping joint semantics.

    With ``M = diag(1, -1, 1)`` every link frame ``T`` becomes ``M T M``: origin ``y`` is negated,
    origin roll and yaw are negated, and joint axes ``a`` become ``-M a`` (x and z negated), so that the
    same angle rotates the mirrored finger the mirrored way — positive flexion stays flexion.
    """
    root = ET.fromstring(text)
    if name is not None:
        root.set("name", name)

    def fmt(v):
        return " ".join("0" if x == 0 else repr(float(x)) for x in v)

    for el in root.iter("joint"):
        o = el.find("origin")
        if o is not None:
            if o.get("xyz"):
                x, y, z = _floats(o.get("xyz"), 3, "origin xyz", ())
                o.set("xyz", fmt((x, -y, z)))
            if o.get("rpy"):
                r, p, yw = _floats(o.get("rpy"), 3, "origin rpy", ())
                o.set("rpy", fmt((-r, p, -yw)))
        a = el.find("axis")
        if a is not None and a.get("xyz"):
            x, y, z = _floats(a.get("xyz"), 3, "axis", ())
            a.set("xyz", fmt((-x, y, -z)))
    ET.indent(root, "  ")
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
