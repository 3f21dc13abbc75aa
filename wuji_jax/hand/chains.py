"""The hand as serial chains, and the one forward kinematics with Jacobian.

Every MediaPipe keypoint but the wrist lies on one finger's serial chain. :class:`Chains` is the
static table of those chains (one ancestor walk, cached per model topology): ``G`` chains padded to a
common depth ``D`` with identity links, ``K`` keypoints and ``V`` solver variables per chain.
:class:`ChainParams` holds the per-link numbers gathered from the model's array leaves (so everything
stays differentiable in them), and :func:`fk` walks all chains at once: one 3×3 product per depth,
fingers as an array axis, frames as the last axis.

Layout (components first, see :mod:`wuji_jax.geometry`): link angles ``(D, G, B)``; positions
``(3, D, G, B)``; keypoints ``(3, K, G, B)``; Jacobians ``(3, K, D, G, B)``.

:func:`wuji_jax.forward_keypoints`, :func:`wuji_jax.solve`, :class:`wuji_jax.FrameSolver` and the
landmark loss all call :func:`fk`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import geometry as geo
from .model import ACTIVE, MIMIC, HandModel

__all__ = ["Chains", "ChainParams", "chains_of", "chain_params", "link_angles", "coupled_rows", "fk",
           "fk_variables", "keypoints21", "map_chunks", "cpu_chunk"]


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: one object per topology (cached)
class Chains:
    """The model as ``G`` serial chains (one per finger) of depth ``D``: static numpy tables.

    Link index ``L`` (one past the last) is a padding link: no offset, identity rotation, zero axis.
    Angle index ``n + M`` is a constant zero; variable index ``n + M`` a padding variable.
    """

    G: int
    D: int
    K: int
    V: int
    n: int
    M: int
    link: np.ndarray  # (G, D) link index, or L (padding)
    angle: np.ndarray  # (G, D) index into [q (n), coupled (M), 0]
    kp_depth: np.ndarray  # (G, K) depth whose link origin is the keypoint
    kp_id: np.ndarray  # (G, K) keypoint index 0..20, or -1 (padding)
    var: np.ndarray  # (G, V) index into [q (n), coupled (M)], or n + M (padding)
    var_pos: np.ndarray  # (n + M, 2) chain and slot (g, v) of each variable
    var_depth: np.ndarray  # (G, V) depth of each variable's joint, or -1
    root_kps: tuple  # keypoints on the root link (the wrist)
    palm_kps: tuple  # keypoints no joint moves (the palm)
    bones: tuple  # ((i_a, i_b, joint depths), ...) solvable in closed form in every chain at once
    mimic_pos: tuple  # ((g, d), ...) of each coupled joint
    has_joint: np.ndarray  # (D,) some chain has a joint at this depth

    # derived gather indices for the components-first layout
    @functools.cached_property
    def kp_flat(self) -> np.ndarray:
        """``(K·G,)`` row of each chain keypoint (k-major) in positions reshaped ``(3, D·G, B)``."""
        return (self.kp_depth.T * self.G + np.arange(self.G)).reshape(-1)

    @functools.cached_property
    def kp_slot(self) -> np.ndarray:
        """``(21,)`` slot of each keypoint in the ``(K·G + 1)`` chain rows (the last one: the root)."""
        slot = np.full(21, self.K * self.G)
        for g, k in zip(*np.nonzero(self.kp_id >= 0)):
            slot[self.kp_id[g, k]] = k * self.G + g
        return slot

    @functools.cached_property
    def kp_of_slot(self) -> np.ndarray:
        """``(K·G,)`` keypoint index of each chain slot (0 for padding; weight it with :attr:`slot_used`)."""
        return np.maximum(self.kp_id.T.reshape(-1), 0)

    @functools.cached_property
    def slot_used(self) -> np.ndarray:
        """``(K, G)`` whether a chain slot holds a keypoint."""
        return self.kp_id.T >= 0

    @functools.cached_property
    def before(self) -> np.ndarray:
        """``(K, D, G)`` 1 where the joint at depth ``d`` moves keypoint ``k`` of chain ``g``."""
        d = np.arange(self.D)[None, :, None]
        return (d < self.kp_depth.T[:, None, :]).astype(np.float64)

    @functools.cached_property
    def var_before(self) -> np.ndarray:
        """``(K, V, G)`` 1 where variable ``v``'s joint moves keypoint ``k`` of chain ``g`` (0 for
        padding variables): :attr:`before` read at the variables' depths."""
        vd = self.var_depth.T[None]  # (1, V, G)
        return ((vd < self.kp_depth.T[:, None]) & (vd >= 0)).astype(np.float64)

    @functools.cached_property
    def var_flat(self) -> np.ndarray:
        """``(V·G,)`` column of each variable slot (v-major) in Jacobians reshaped ``(3, K, D·G + 1, B)``
        (the last column: zero, for padding variables)."""
        col = np.where(self.var_depth >= 0, self.var_depth * self.G + np.arange(self.G)[:, None], self.D * self.G)
        return col.T.reshape(-1)

    @functools.cached_property
    def var_slot(self) -> np.ndarray:
        """``(n + M,)`` slot ``v·G + g`` of each variable in ``(V·G)`` rows."""
        return self.var_pos[:, 1] * self.G + self.var_pos[:, 0]


def _align(paths, kp_links, kinds, L):
    """Pad the chains to a common depth with identity links (index ``L``) so that, where possible,
    every chain has its keypoints at the same depths and its joint kinds in the same places (then one
    array op serves all fingers). Returns the padded link sequences and whether keypoints line up."""
    D = max(len(p) for p in paths)
    ref = max(range(len(paths)), key=lambda g: len(paths[g]))
    ref_depth = [paths[ref].index(l) for l in kp_links[ref]]
    kind = lambda l: kinds[l] if l < L else -1  # noqa: E731
    out, uniform = [], True
    for path, kl in zip(paths, kp_links):
        best = None
        for pads in itertools.combinations(range(D), D - len(path)):
            it = iter(path)
            seq = [L if d in pads else next(it) for d in range(D)]
            score = ([seq.index(l) for l in kl] == ref_depth,
                     sum(kind(a) == kind(b) for a, b in zip(seq, paths[ref])))
            if best is None or score > best[0]:
                best = (score, seq)
        uniform &= best[0][0]
        out.append(best[1])
    return out, uniform


def ancestors(parents, link: int) -> list[int]:
    """Links from the root's child down to ``link`` (empty for the root)."""
    out = []
    while link > 0:
        out.append(link)
        link = parents[link]
    return out[::-1]


@functools.lru_cache(maxsize=64)
def _chains_cached(parents, kinds, q_index, mimic_index, mimic_sources, keypoint_links, n, soft):
    L, M = len(parents), len(mimic_sources)

    def joints_of(links):
        js = set()
        for l in links:
            if kinds[l] == ACTIVE:
                js.add(q_index[l])
            elif kinds[l] == MIMIC:
                js.update(mimic_sources[mimic_index[l]])
        return js

    groups: dict[int, list[int]] = {}  # keypoints by the first link below the root (the metacarpal)
    root_kps = []
    for k, l in enumerate(keypoint_links):
        path = ancestors(parents, l)
        if path:
            groups.setdefault(path[0], []).append(k)
        else:
            root_kps.append(k)
    glist = list(groups.values())
    G = len(glist)
    paths = []
    for kps in glist:
        path = ancestors(parents, keypoint_links[max(kps, key=lambda k: len(ancestors(parents, keypoint_links[k])))])
        for k in kps:
            if keypoint_links[k] not in path:
                raise ValueError(f"the solver needs each finger's keypoints on one serial chain; keypoint {k} "
                                 "branches off")
        paths.append(path)
    seqs, uniform = _align(paths, [[keypoint_links[k] for k in kps] for kps in glist], kinds, L)
    D, K = len(seqs[0]), max(len(k) for k in glist)
    uniform &= all(len(k) == K for k in glist)
    link = np.array(seqs)
    angle = np.full((G, D), n + M)
    kp_depth = np.zeros((G, K), int)
    kp_id = np.full((G, K), -1)
    gvars = []
    for g, (kps, path) in enumerate(zip(glist, paths)):
        for d, l in enumerate(seqs[g]):
            if l < L and kinds[l] == ACTIVE:
                angle[g, d] = q_index[l]
            elif l < L and kinds[l] == MIMIC:
                angle[g, d] = n + mimic_index[l]
        for i, k in enumerate(kps):
            kp_depth[g, i] = seqs[g].index(keypoint_links[k])
            kp_id[g, i] = k
        vs = sorted(joints_of(path)) + ([n + mimic_index[l] for l in path if kinds[l] == MIMIC] if soft else [])
        gvars.append(vs)
    seen = [v for vs in gvars for v in vs]
    if len(seen) != len(set(seen)):
        raise ValueError("the solver needs fingers that share no joint")
    V = max(len(v) for v in gvars)
    var = np.full((G, V), n + M)
    var_pos = np.zeros((n + M, 2), int)
    for g, vs in enumerate(gvars):
        for v, j in enumerate(vs):
            var[g, v] = j
            var_pos[j] = (g, v)
    palm = tuple(sorted(root_kps + [int(kp_id[g, i]) for g in range(G) for i in range(K)
                                    if kp_id[g, i] >= 0 and not (angle[g, : kp_depth[g, i]] < n + M).any()]))
    # bones for the closed-form start: consecutive keypoints (at the same depths in every chain) turned
    # by one joint or two adjacent ones, at the same depths in every chain
    bones = []
    if uniform:
        kd = kp_depth[0]
        for i in range(K - 1):
            act = [d for d in range(kd[i], kd[i + 1]) if (angle[:, d] < n).any()]
            if (1 <= len(act) <= 2 and all((angle[:, d] < n).all() for d in act)
                    and act[-1] - act[0] == len(act) - 1):
                bones.append((i, i + 1, tuple(act)))
    var_depth = np.array([[list(angle[g]).index(var[g, v]) if var[g, v] < n + M else -1 for v in range(V)]
                          for g in range(G)])
    mimic_pos = tuple(tuple(int(i) for i in np.argwhere(angle == n + m)[0]) for m in range(M))
    return Chains(G, D, K, V, n, M, link, angle, kp_depth, kp_id, var, var_pos, var_depth, tuple(root_kps), palm,
                  tuple(bones), mimic_pos, (angle < n + M).any(0))


def chains_of(hand: HandModel, soft: bool = False) -> Chains:
    """The :class:`Chains` of a model with a 21-keypoint map (``soft``: the coupled joints are solver
    variables of their own)."""
    if len(hand.keypoint_links) != 21:
        raise ValueError("this needs a model with a 21-keypoint MediaPipe map (e.g. wj.load_hand())")
    c = _chains_cached(hand.parents, hand.kinds, hand.q_index, hand.mimic_index, hand.mimic_sources,
                       hand.keypoint_links, hand.num_joints, bool(soft))
    if len(c.palm_kps) < 3:
        raise ValueError("the solver needs >= 3 keypoints fixed to the root (palm) to place the hand")
    return c


class ChainParams(NamedTuple):
    """Per-link numbers of the chains (components first, ``(…, D, G)``), gathered from the model's
    leaves: offsets ``xyz (3, D, G)``, fixed rotations ``O (3, 3, D, G)``, axes ``axis (3, D, G)``,
    ``Oa = O·a (3, D, G)``, and ``C1 = O·[a]×``, ``C2 = O·[a]×²`` so that
    ``O·Rot(a, θ) = O + sin θ·C1 + (1 − cos θ)·C2`` (Rodrigues' formula, one product per link)."""

    xyz: jax.Array
    O: jax.Array
    axis: jax.Array
    Oa: jax.Array
    C1: jax.Array
    C2: jax.Array


def chain_params(hand: HandModel, ch: Chains) -> ChainParams:
    """:class:`ChainParams` of ``hand`` (the padding link: zero offset and axis, identity rotation)."""
    dtype = hand.origin_xyz.dtype
    xyz = geo.take(jnp.concatenate([hand.origin_xyz, jnp.zeros((1, 3), dtype)]), ch.link.T, 0)  # (D, G, 3)
    O = geo.take(jnp.concatenate([hand.origin_rot, jnp.eye(3, dtype=dtype)[None]]), ch.link.T, 0)  # (D, G, 3, 3)
    ax = geo.take(jnp.concatenate([hand.axis, jnp.zeros((1, 3), dtype)]), ch.link.T, 0)
    xyz, ax = jnp.moveaxis(xyz, -1, 0), jnp.moveaxis(ax, -1, 0)
    O = jnp.moveaxis(O, (-2, -1), (0, 1))
    K = geo.skew(ax)
    C1 = geo.matmul(O, K)
    return ChainParams(xyz, O, ax, geo.matvec(O, ax), C1, geo.matmul(C1, K))


def coupled_rows(hand: HandModel, q):
    """Coupled joint angles ``(M, *rest)`` from active angles ``q (n, *rest)`` by the screw-home law
    ``K_FLEX·θ_src + K_ABD·θ_sec + K_CROSS·θ_src·θ_sec + offset``."""
    if not hand.mimic_sources:
        return jnp.zeros((0,) + q.shape[1:], q.dtype)
    src, sec = (np.array(i) for i in zip(*hand.mimic_sources))
    k = hand.coupling.astype(q.dtype).reshape((-1, 3) + (1,) * (q.ndim - 1))
    off = hand.coupling_offset.astype(q.dtype).reshape((-1,) + (1,) * (q.ndim - 1))
    a, b = geo.take(q, src, 0), geo.take(q, sec, 0)
    return k[:, 0] * a + k[:, 1] * b + k[:, 2] * a * b + off


def link_angles(ch: Chains, q, rot):
    """Link angles ``(D, G, B)`` from active ``q (n, B)`` and coupled ``rot (M, B)`` angles."""
    ext = jnp.concatenate([q, rot, jnp.zeros((1,) + q.shape[1:], q.dtype)])
    return geo.take(ext, ch.angle.T, 0)


def _walk(params: ChainParams, ch: Chains, ang, axes: bool):
    """Link origins ``[(3, G, B)] * D`` in the wrist frame, and with ``axes`` the joint axes there
    (zero at links without a joint), from link angles ``ang (D, G, B)``."""
    B = ang.shape[-1]
    s, c = geo.sincos(ang)
    pos, axs = [], []
    R = None
    for d in range(ch.D):
        xyz = params.xyz[:, d, :, None]
        p = xyz if R is None else p + geo.matvec(R, xyz)
        pos.append(jnp.broadcast_to(p, (3, ch.G, B)))
        O, Oa = params.O[:, :, d, :, None], params.Oa[:, d, :, None]
        if ch.has_joint[d]:
            M = O + s[d] * params.C1[:, :, d, :, None] + (1 - c[d]) * params.C2[:, :, d, :, None]
            if axes:
                axs.append(jnp.broadcast_to(Oa if R is None else geo.matvec(R, Oa), (3, ch.G, B)))
        else:
            M = O
            if axes:
                axs.append(jnp.zeros((3, ch.G, B), ang.dtype))
        R = M if R is None else geo.matmul(R, M)  # no product with the identity at the root
    return pos, axs


def _keypoints(ch: Chains, pos):
    B = pos[0].shape[-1]
    return geo.take(jnp.stack(pos, axis=1).reshape(3, ch.D * ch.G, B), ch.kp_flat, 1).reshape(3, ch.K, ch.G, B)


def fk(params: ChainParams, ch: Chains, ang, jacobian: bool = True):
    """Forward kinematics of all chains at link angles ``ang (D, G, B)``.

    Returns:
        ``kp (3, K, G, B)``: the chains' keypoints in the wrist frame, metres; and, with
        ``jacobian``, ``J (3, K, D, G, B)``: d keypoint / d link angle (geometric: the joint's world
        axis × the lever arm; zero for links after the keypoint and for links without a joint),
        else ``None``.
    """
    pos, axs = _walk(params, ch, ang, jacobian)
    kp = _keypoints(ch, pos)
    if not jacobian:
        return kp, None
    P, A = jnp.stack(pos, axis=1), jnp.stack(axs, axis=1)  # (3, D, G, B): origins and joint axes
    J = geo.cross(A[:, None], kp[:, :, None] - P[:, None])  # (3, K, D, G, B)
    return kp, J * jnp.asarray(ch.before, ang.dtype)[..., None]


def fk_variables(hand: HandModel, params: ChainParams, ch: Chains, q, rot, soft: bool):
    """Forward kinematics with the Jacobian in the solver's variables: the keypoints
    ``kp (3, K, G, B)`` and ``J (3, K, V, G, B)`` = d keypoint / d variable at the angles
    ``q (n, B)``, ``rot (M, B)`` (under hard coupling ``rot`` must be the law's,
    :func:`coupled_rows`). Each variable's column is its joint's column of :func:`fk`'s link
    Jacobian, and only those are made (``V`` = 4 per chain against ``D`` = 7 links); under hard
    coupling (``soft=False``) the coupled joint's column is added to its sources' with the law's
    derivatives."""
    pos, axs = _walk(params, ch, link_angles(ch, q, rot), True)
    kp = _keypoints(ch, pos)
    B = kp.shape[-1]
    vd = ch.var_depth
    if (vd >= 0).all() and (vd == vd[0]).all():  # the same joint depths in every chain: no gather
        Pv = jnp.stack([pos[d] for d in vd[0]], axis=1)
        Av = jnp.stack([axs[d] for d in vd[0]], axis=1)  # (3, V, G, B)
    else:
        flat = lambda xs: geo.take(jnp.concatenate([jnp.stack(xs, 1).reshape(3, ch.D * ch.G, B),  # noqa: E731
                                                    jnp.zeros((3, 1, B), kp.dtype)], 1),
                                   ch.var_flat, 1).reshape(3, ch.V, ch.G, B)
        Pv, Av = flat(pos), flat(axs)  # padding variables: zero axis, zero column
    Jv = geo.cross(Av[:, None], kp[:, :, None] - Pv[:, None]) * jnp.asarray(ch.var_before, kp.dtype)[..., None]
    if soft:
        return kp, Jv
    k = hand.coupling.astype(q.dtype)
    for m, (src, sec) in enumerate(hand.mimic_sources):
        g, dm = ch.mimic_pos[m]
        col = geo.cross(axs[dm][:, g, None], kp[:, :, g] - pos[dm][:, g, None])  # (3, K, B)
        col = (col * jnp.asarray(ch.before[:, dm, g], kp.dtype)[:, None])[:, :, None, None]  # (3, K, 1, 1, B)
        for j, dj in ((src, k[m, 0] + k[m, 2] * q[sec]), (sec, k[m, 1] + k[m, 2] * q[src])):
            hot = np.zeros((ch.V, ch.G))
            hot[ch.var_pos[j][1], ch.var_pos[j][0]] = 1
            Jv = Jv + jnp.asarray(hot, kp.dtype)[..., None] * (dj * col)
    return kp, Jv


def keypoints21(ch: Chains, kp):
    """All 21 keypoints ``(3, 21, B)`` from the chains' ``kp (3, K, G, B)`` (the wrist at the origin)."""
    B = kp.shape[-1]
    rows = jnp.concatenate([kp.reshape(3, ch.K * ch.G, B), jnp.zeros((3, 1, B), kp.dtype)], 1)
    return geo.take(rows, ch.kp_slot, 1)


def map_chunks(fn, rows: tuple, chunk: int):
    """``fn(*rows)`` over equal chunks of at most ``chunk`` frames (``lax.map``): ``rows`` are pytrees
    whose leaves have a leading frame axis ``B`` (padded with copies of the last frame to a multiple
    of the chunk, the padding dropped from the result); chunk ``j`` holds frames ``j, j + n, …``:
    where the frames are split over devices, every chunk is too."""
    leaves, tree = jax.tree_util.tree_flatten(rows)
    B = leaves[0].shape[0]
    if B <= chunk:
        return fn(*rows)
    n = -(-B // chunk)
    size = -(-B // n)
    pad = n * size - B
    leaves = [jnp.concatenate([a, jnp.broadcast_to(a[-1:], (pad,) + a.shape[1:])]) if pad else a for a in leaves]
    leaves = [jnp.swapaxes(a.reshape((size, n) + a.shape[1:]), 0, 1) for a in leaves]
    out = jax.lax.map(lambda ls: fn(*jax.tree_util.tree_unflatten(tree, ls)), leaves)
    return jax.tree_util.tree_map(lambda v: jnp.swapaxes(v, 0, 1).reshape((n * size,) + v.shape[2:])[:B], out)


def cpu_chunk(frames: int, chunk: int) -> int:
    """The chunk :func:`map_chunks` takes for ``frames`` frames: ``chunk`` where JAX's default backend
    is the CPU (intermediates that stay in the caches), else all ``frames`` at once."""
    return chunk if jax.default_backend() == "cpu" else max(frames, 1)
