"""The public solver: :func:`solve`, :func:`landmark_loss`, :func:`solve_optax`, :func:`pose_from_palm`.

:func:`solve` checks its input (shape, finiteness, units), then runs the jit-compiled kernel:

1. the closed-form start (:mod:`.start`): wrist similarity from the palm, angles from the bones
   (:func:`start_rows`);
2. Levenberg–Marquardt (:mod:`.lm`) until every frame has converged, at most ``config.iterations``;
3. the fit, residuals and flags (2 and 3: :func:`fit_rows`).

The kernel is one program (:func:`solve_rows`), except where its compilation outweighs its run
(batches of up to 64 frames on the CPU, small ``wuji-jax solve`` jobs): there the start and the fit
are two programs compiled side by side on two cores (:func:`staged_program`), with the same results.

How a concrete batch is padded, split over the devices and compiled is the policy of
:mod:`wuji_jax.programs` (one program per padded size, compiled on its first call, nothing in the
background). Everything is a pure JAX function of ``(hand, landmarks, weights, q0, config)``: it runs
under ``jax.jit``, ``vmap`` and ``grad``, with the exact derivative of the fit
(:mod:`.adjoint`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.export  # a submodule: not an attribute of jax until imported (jax 0.6)
import jax.numpy as jnp
import numpy as np

from ..hand import geometry as geo
from ..runtime import programs
from ..runtime.cache import array_sharding, cached_program, compile_side_by_side
from ..hand.chains import chain_params, chains_of, coupled_rows, cpu_chunk, fk, keypoints21, link_angles, map_chunks
from ..hand.kinematics import FK_CHUNK_FRAMES, check_angles
from ..hand.landmarks import check_landmarks, detect_side
from ..hand.model import HandModel
from .config import (DEGENERATE_SPREAD, DISTAL_LANDMARKS, FLAG_BAD_SCALE, FLAG_DEGENERATE, FLAG_HIGH_RESIDUAL,
                     FLAG_NO_DERIVATIVE, FLAG_UNSEEN_FINGER, FLAG_MIRRORED, FLAG_NOT_FINITE, FLAG_TOO_FEW_LANDMARKS,
                     IKResult, SolverConfig)
from .adjoint import minimise
from .lm import Problem, Structure, Variables, cost, keypoints
from .start import analytic_angles, palm_similarity

__all__ = ["solve", "solve_rows", "solve_chunked", "Start", "start_rows", "fit_rows", "start_chunked", "fit_chunked",
           "start_cold", "start_warm", "start_spec", "staged_program", "map_chunks", "solve_batch", "split_kernel", "default_inputs", "config_arrays", "is_traced", "DEFAULT_CONFIG", "landmark_loss", "solve_optax", "pose_from_palm", "neutral_angles",
           "check_solver_input", "check_start", "Q0_LIMIT_TOLERANCE", "pick_side", "solve_checked", "clear_programs", "CHUNK_FRAMES", "ACCELERATOR_CHUNK_FRAMES",
           "chunk_frames"]

from ..runtime.programs import ACCELERATOR_CHUNK_FRAMES, CHUNK_FRAMES, chunk_frames  # noqa: E402,F401 (re-exported)

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def neutral_angles(hand: HandModel) -> jax.Array:
    """The solver's default starting pose ``(n,)``: a slight, mid-range flexion (0.25 rad on every
    joint but the abductions), within limits."""
    flex = np.array([0.0 if name.endswith("_abd") else 0.25 for name in hand.joint_names])
    if is_traced(hand.lower, hand.upper):
        return jnp.clip(jnp.asarray(flex, hand.lower.dtype), hand.lower, hand.upper)
    return jnp.asarray(np.clip(flex, np.asarray(hand.lower), np.asarray(hand.upper)), hand.lower.dtype)


def is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


# ------------------------------------------------------------------------------------ the kernel


def _problem(hand, ch, y, w, q0, soft):
    """:class:`~.lm.Problem` from ``y (3, 21, B)``, ``w (21, B)``, ``q0 (n, B)``."""
    B = y.shape[-1]
    roots = np.asarray(ch.root_kps, int)
    return Problem(y=geo.take(y, ch.kp_of_slot, 1).reshape(3, ch.K, ch.G, B),
                   w=geo.take(w, ch.kp_of_slot, 0).reshape(ch.K, ch.G, B)
                   * jnp.asarray(ch.slot_used[..., None], y.dtype),
                   y_root=geo.take(y, roots, 1), w_root=geo.take(w, roots, 0), q_prior=q0,
                   rot_prior=coupled_rows(hand, q0) if soft else jnp.zeros((0, B), y.dtype),
                   one=1 + 0 * y[0, 0, 0])


class Start(NamedTuple):
    """A batch after the closed-form start (:func:`start_rows`), frames first, so that chunks and
    devices split it as they split the landmarks.

    Attributes:
        q: ``(B, n)`` angles, radians (the warm start ``q0`` where it fits better, see :func:`solve_rows`).
        rot: ``(B, M)`` coupled angles under soft coupling; ``None`` under hard coupling (the law
            gives them).
        R: ``(B, 3, 3)`` wrist rotation, model wrist frame → input frame.
        t: ``(B, 3)`` wrist position, metres.
        logs: ``(B,)`` log of the hand scale.
        det: ``(B,)`` sign of the palm covariance's determinant (negative: mirrored).
    """

    q: jax.Array
    rot: jax.Array
    R: jax.Array
    t: jax.Array
    logs: jax.Array
    det: jax.Array


# jax.export keeps programs returning a Start (wuji_jax.cache.cached_program)
jax.export.register_namedtuple_serialization(Start, serialized_name="wuji_jax.Start")


class _Frames(NamedTuple):
    """A batch's landmarks in the solver's layout (frames last) and which frames can be solved."""

    y: jax.Array  # (3, 21, B) metres, 0 where missing
    w: jax.Array  # (21, B) weights, 0 where missing
    q0: jax.Array  # (n, B)
    used: jax.Array  # (21, B) bool
    n_valid: jax.Array  # (B,) usable landmarks
    enough: jax.Array  # (B,) enough landmarks (and palm points)
    degenerate: jax.Array  # (B,) landmarks without extent
    valid: jax.Array  # (B,) enough and not degenerate: solved


def _setup(hand: HandModel, landmarks, weights, q0, config: SolverConfig):
    """The model in the landmarks' dtype, its chains and what the stages share."""
    soft = config.coupling == "soft"
    dtype = landmarks.dtype
    hand = hand.astype(dtype)
    ch = chains_of(hand, soft)
    finite = jnp.all(jnp.isfinite(landmarks), -1)
    w = jnp.where(finite & jnp.isfinite(weights), jnp.maximum(weights, 0.0), 0.0).T  # (21, B)
    y = jnp.transpose(jnp.where(finite[..., None], landmarks, 0.0), (2, 1, 0))  # (3, 21, B)
    used = w > 0
    n_valid = geo.total(used.astype(jnp.int32), 0)
    palm = np.asarray(ch.palm_kps, int)
    enough = (n_valid >= config.min_landmarks) & (geo.total(geo.take(used, palm, 0).astype(jnp.int32), 0) >= 3)
    # landmarks without extent (all one point) are not a hand: not solved
    count = jnp.maximum(n_valid, 1).astype(dtype)
    dev = y - geo.total(jnp.where(used, y, 0.0), 1)[:, None] / count
    spread2 = geo.total(jnp.where(used, geo.dot(dev, dev), 0.0), 0) / count
    degenerate = enough & ~(spread2 >= DEGENERATE_SPREAD ** 2)
    frames = _Frames(y, w, q0.T, used, n_valid, enough, degenerate, enough & ~degenerate)
    return hand, ch, chain_params(hand, ch), Structure(ch, soft), frames


def start_rows(hand: HandModel, landmarks, weights, q0, config: SolverConfig, warm=False) -> Start:
    """The closed-form start of one flat batch (the first stage of :func:`solve_rows`): the wrist
    similarity from the palm, the angles from the bones; with ``warm``, ``q0`` where it fits better."""
    hand, ch, params, st, f = _setup(hand, landmarks, weights, q0, config)
    soft, n, B, dtype = st.soft, hand.num_joints, landmarks.shape[0], landmarks.dtype
    palm = np.asarray(ch.palm_kps, int)
    zeros = jnp.zeros((n, 1), dtype)
    rest, _ = fk(params, ch, link_angles(ch, zeros, coupled_rows(hand, zeros)), jacobian=False)
    R, t, logs, det = palm_similarity(geo.take(keypoints21(ch, rest), palm, 1), geo.take(f.y, palm, 1),
                                      geo.take(f.w, palm, 0), config.estimate_scale)
    qa = analytic_angles(hand, ch, params, f.q0, R, t, logs, f.y, f.w)
    x = Variables(qa, coupled_rows(hand, qa) if soft else jnp.zeros((0, B), dtype), R, t, logs)
    # a warm start: keep q0 where it fits better than the closed-form angles
    if warm is not False:  # static False (no warm start): nothing to compare, nothing compiled
        prob = _problem(hand, ch, f.y, f.w, f.q0, soft)
        x0 = x._replace(q=f.q0, rot=prob.rot_prior)
        c0, ca = (cost(hand, v, keypoints(hand, st, params, v), prob, config, soft) for v in (x0, x))
        x = jax.tree_util.tree_map(lambda a, b: jnp.where(warm & (c0 < ca), a, b), x0, x)
    return Start(q=x.q.T, rot=x.rot.T if soft else None, R=jnp.moveaxis(x.R, -1, 0), t=x.t.T, logs=x.logs, det=det)


def fit_rows(hand: HandModel, landmarks, weights, q0, config: SolverConfig, start: Start) -> dict:
    """Levenberg–Marquardt from ``start`` (its angles within the limits) and the results (the second
    stage of :func:`solve_rows`): the fit, residuals and flags."""
    hand, ch, params, st, f = _setup(hand, landmarks, weights, q0, config)
    soft, n, dtype = st.soft, hand.num_joints, landmarks.dtype
    y, w, q0, used, n_valid, enough, degenerate, valid = f
    prob = _problem(hand, ch, y, w, q0, soft)
    empty = jnp.zeros((0, y.shape[-1]), dtype)
    x = Variables(start.q.T, start.rot.T if soft else empty, jnp.moveaxis(start.R, 0, -1), start.t.T, start.logs)
    x, iters, converged, exact = minimise(hand, st, params, prob, config, x, valid)

    # LM keeps the angles within the limits (lm.step); frames without enough landmarks keep their start pose
    q_start = jnp.clip(q0, hand.lower[:, None], hand.upper[:, None])
    q = jnp.where(valid, x.q, q_start)
    # a fit that is not finite (coordinates near float overflow) is flagged and returns the start pose
    finite_fit = (geo.total(jnp.isfinite(q).astype(jnp.int32), 0) == n) & jnp.isfinite(x.logs) \
        & (geo.total(jnp.isfinite(x.R).astype(jnp.int32), (0, 1)) == 9) & (geo.total(jnp.isfinite(x.t).astype(jnp.int32), 0) == 3)
    eye = jnp.broadcast_to(jnp.eye(3, dtype=dtype)[..., None], x.R.shape)
    keep = lambda a, start: jnp.where(finite_fit, a, start)  # noqa: E731
    q = keep(q, q_start)
    rot = keep(jnp.clip(x.rot, hand.mimic_lower[:, None], hand.mimic_upper[:, None]), coupled_rows(hand, q)) \
        if soft else coupled_rows(hand, q)
    x = Variables(q, rot if soft else empty, keep(x.R, eye), keep(x.t, 0.0), keep(x.logs, 0.0))
    kp = keypoints(hand, st, params, x)
    c = cost(hand, x, kp, prob, config, soft)
    s = jnp.exp(x.logs)
    fit = s * geo.matvec(x.R, keypoints21(ch, kp)) + x.t[:, None]  # (3, 21, B)
    d = fit - y
    ss = geo.dot(d, d)
    errs = jnp.where(used, jnp.sqrt(jnp.where(used, ss, 1.0)), 0.0)  # (21, B)
    resid = jnp.sqrt(jnp.maximum(geo.total(errs * errs, 0) / jnp.maximum(n_valid, 1), 1e-30))
    finite_fit = finite_fit & jnp.isfinite(resid) & jnp.isfinite(c)
    bad_scale = ~((s >= 0.3) & (s <= 3.0))
    seen = [geo.total(geo.take(used, np.asarray(idx), 0).astype(jnp.int32), 0) > 0 for idx in DISTAL_LANDMARKS]
    unseen = valid & ~(seen[0] & seen[1] & seen[2] & seen[3] & seen[4])
    high = resid > config.flag_residual
    flags = (jnp.where(enough, 0, FLAG_TOO_FEW_LANDMARKS)
             | jnp.where(degenerate, FLAG_DEGENERATE, 0)
             | jnp.where(bad_scale, FLAG_BAD_SCALE, 0)
             | jnp.where(high, FLAG_HIGH_RESIDUAL, 0)
             | jnp.where(unseen, FLAG_UNSEEN_FINGER, 0)
             | jnp.where(start.det < 0, FLAG_MIRRORED, 0)
             | jnp.where(finite_fit, 0, FLAG_NOT_FINITE)
             | jnp.where(exact | ~valid, 0, FLAG_NO_DERIVATIVE)).astype(jnp.int32)
    return dict(angles=q.T, coupled=rot.T, rotation=jnp.transpose(x.R, (2, 0, 1)), translation=x.t.T, scale=s,
                keypoints=jnp.transpose(fit, (2, 1, 0)), residual=resid, errors=errs.T, valid=valid & finite_fit & ~bad_scale & ~high & ~unseen,
                converged=converged & valid & finite_fit & ~bad_scale, iterations=iters, flags=flags, cost=c)


def solve_rows(hand: HandModel, landmarks, weights, q0, config: SolverConfig, warm=False) -> dict:
    """The solver on one flat batch: ``landmarks (B, 21, 3)`` (NaN: missing), ``weights (B, 21)``,
    ``q0 (B, n)`` → a dict of :class:`IKResult` fields with leading axis ``B``. ``warm`` (a bool,
    traced, or a Python bool): ``q0`` is a warm start, used where it fits better than the closed-form
    start; a Python ``False`` leaves the comparison out of the program.

    Two stages, :func:`start_rows` then :func:`fit_rows`: one program here; :func:`solve` on concrete
    inputs may compile them as two programs side by side (:func:`staged_program`)."""
    # the fit's derivative does not depend on where it started (ik.adjoint): no tangents through the start
    start = start_rows(*jax.lax.stop_gradient((hand, landmarks, weights, q0, config)), warm)
    return fit_rows(hand, landmarks, weights, q0, config, start)


def _chunk(chunk):
    return chunk_frames(jax.default_backend()) if chunk is None else int(chunk)


def solve_chunked(hand, landmarks, weights, q0, config, warm=False, chunk: int | None = None) -> dict:
    """:func:`solve_rows` over equal chunks of at most ``chunk`` frames (:func:`map_chunks`; each
    chunk's loop stops on its own). ``chunk`` (static): default :func:`chunk_frames` of JAX's default
    backend."""
    return map_chunks(lambda *r: solve_rows(hand, *r, config, warm), (landmarks, weights, q0), _chunk(chunk))


def start_chunked(hand, landmarks, weights, q0, config, warm=False, chunk: int | None = None) -> Start:
    """:func:`start_rows` over the chunks of :func:`solve_chunked`."""
    return map_chunks(lambda *r: start_rows(hand, *r, config, warm), (landmarks, weights, q0), _chunk(chunk))


def fit_chunked(hand, landmarks, weights, q0, config, start: Start, chunk: int | None = None) -> dict:
    """:func:`fit_rows` over the chunks of :func:`solve_chunked`."""
    return map_chunks(lambda *r: fit_rows(hand, *r[:3], config, r[3]), (landmarks, weights, q0, start),
                      _chunk(chunk))


def default_inputs(hand, lm, weights, q0, xp):
    """``weights`` (all ones) and ``q0`` (the neutral pose) for ``lm (*batch, 21, 3)`` where ``None``."""
    batch = lm.shape[:-2]
    if weights is None:
        weights = xp.ones(batch + (21,), lm.dtype)
    if q0 is None:
        neutral = _neutral_numpy(hand) if xp is np else neutral_angles(hand)
        q0 = xp.broadcast_to(xp.asarray(neutral, lm.dtype), batch + (hand.num_joints,))
    return weights, q0


_MODELS: dict = {}  # id(hand) → (hand, the same without name and side, its neutral angles in numpy)


def _per_model(hand: HandModel) -> tuple:
    """What the eager path needs of a model, made once per model object (it is kept, so its id is
    not reused while the entry lives)."""
    got = _MODELS.get(id(hand))
    if got is None or got[0] is not hand:
        if len(_MODELS) > 32:
            _MODELS.clear()
        got = _MODELS[id(hand)] = (hand, hand.replace(name="", side=""), np.asarray(neutral_angles(hand)))
    return got


def _neutral_numpy(hand: HandModel) -> np.ndarray:
    return _per_model(hand)[2]


@functools.partial(jax.jit, static_argnames=("warm", "platform"))
def solve_batch(hand, lm, weights, q0, config, warm: bool = False, platform: str | None = None) -> IKResult:
    """:func:`solve_chunked` for any batch shape; defaults made inside the compiled call (a fresh
    host array costs a transfer per call). ``warm`` (static) selects one of two programs: without it
    the warm-start comparison is not compiled. ``platform`` (static): the platform the program is
    compiled for, where not JAX's default backend (its sums are written for it,
    :func:`wuji_jax.geometry.summing`)."""
    weights, q0 = default_inputs(hand, lm, weights, q0, jnp)
    batch = lm.shape[:-2]
    flat = math.prod(batch)
    with geo.summing(platform):
        out = solve_chunked(hand, lm.reshape(flat, 21, 3), weights.reshape(flat, 21),
                            q0.reshape(flat, hand.num_joints), config, warm)
    return IKResult(**{k: v.reshape(batch + v.shape[1:]) for k, v in out.items()})


@functools.lru_cache(maxsize=16)
def split_kernel(mesh, warm: bool = False, kernel=None, extra: int = 0):
    """The solver with every device solving its own rows (``shard_map``: no communication);
    ``warm`` as in :func:`solve_batch`. ``kernel``: another function of the same arguments
    ``(hand, landmarks, weights, q0, config, *more, chunk=)`` returning a dict of per-row arrays, split
    the same way (default :func:`solve_chunked`); ``extra``: how many arguments ``more`` (pytrees of
    per-row arrays, e.g. a :class:`Start`) follow the config. Each device solves chunks of
    :func:`chunk_frames` of the mesh's platform."""
    from jax.sharding import PartitionSpec as P

    rows = P(mesh.axis_names[0])
    platform = mesh.devices.flat[0].platform
    if kernel is None:
        kernel = functools.partial(solve_chunked, warm=bool(warm))

    def per_device(*args):
        with geo.summing(platform):
            return kernel(*args, chunk=chunk_frames(platform))

    in_specs = (P(), rows, rows, rows, P()) + (rows,) * extra
    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=rows, check_vma=False))


def start_cold(hand, landmarks, weights, q0, config, chunk: int | None = None) -> Start:
    """:func:`start_chunked` without a warm start (a program's first stage)."""
    return start_chunked(hand, landmarks, weights, q0, config, False, chunk)


def start_warm(hand, landmarks, weights, q0, config, chunk: int | None = None) -> Start:
    """:func:`start_chunked` with ``q0`` as a warm start (a program's first stage)."""
    return start_chunked(hand, landmarks, weights, q0, config, True, chunk)


def start_spec(hand: HandModel, landmarks, config: SolverConfig, sharding=None) -> Start:
    """The shapes of :func:`start_rows`'s result for ``landmarks (B, 21, 3)`` (``jax.ShapeDtypeStruct``
    with ``sharding``), without tracing it."""
    B, dtype = landmarks.shape[0], landmarks.dtype
    spec = lambda *shape: jax.ShapeDtypeStruct((B,) + shape, dtype, sharding=sharding)  # noqa: E731
    rot = spec(hand.mimic_lower.shape[0]) if config.coupling == "soft" else None
    return Start(q=spec(hand.num_joints), rot=rot, R=spec(3, 3), t=spec(3), logs=spec(), det=spec())


#: (function, program name, argument structure, shapes, options) → its compiled program
_STAGES: dict = {}


def _stage_key(fn, name: str, args: tuple, compiler_options) -> tuple:
    """A program's key in :data:`_STAGES`: its function and name, the arguments' structure (which
    holds the config's static fields), shapes, dtypes and shardings, and the compiler options. Arrays
    on the default device and numpy arrays share a program, as in :func:`cached_program`."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    shapes = tuple((x.shape, str(x.dtype), bool(getattr(x, "weak_type", False)), str(array_sharding(x)))
                   for x in leaves)
    return fn, name, str(tree), shapes, repr(sorted((compiler_options or {}).items()))


def staged_program(start, fit, name: str, args: tuple, compiler_options: dict | None = None, sharding=None):
    """The solver as its two stages, each a program of its own: ``start(*args) → Start`` and
    ``fit(*args, start) → outputs`` (:func:`cached_program` each, ``solve_start`` and ``name_fit``),
    compiled side by side on first use (:func:`wuji_jax.cache.compile_side_by_side`; the fit, the
    larger, first): XLA compiles a program on one core, so two cores compile the two stages in about
    the time of the larger. Each stage is compiled once per process for its arguments' shapes, and the
    start is named alike everywhere: where their batches match, :func:`solve` and the dataset runner
    share its program, in a process and in the compilation cache. ``sharding``: the rows' sharding of
    ``args``' landmarks (the start's outputs are split the same way). Returns a callable of arguments
    shaped like ``args``."""
    hand, landmarks, _, _, config = args
    spec = start_spec(hand, landmarks, config, sharding)
    stages = ((fit, name + "_fit", args + (spec,)), (start, "solve_start", args))
    keys = [_stage_key(fn, program, a[:5], compiler_options) for fn, program, a in stages]
    todo = [(key, stage) for key, stage in zip(keys, stages) if key not in _STAGES]
    if todo:  # the compiled programs, called directly (JAX's ahead-of-time API)
        made = compile_side_by_side(*((functools.partial(cached_program, fn, program, *a, compiler_options=compiler_options), a)
                                      for _, (fn, program, a) in todo))
        _STAGES.update((key, compiled) for (key, _), compiled in zip(todo, made))
    second, first = (_STAGES[key] for key in keys)

    def run(*a):
        return second(*a, first(*a))

    return run


@functools.lru_cache(maxsize=64)
def config_arrays(config: SolverConfig, dtype) -> SolverConfig:
    """:meth:`SolverConfig.as_arrays`, cached per config."""
    return config.as_arrays(dtype)


def check_solver_input(hand: HandModel, landmarks, weights=None, q0=None, check_units: bool = True):
    """Checked ``(landmarks, weights, q0)`` with matching batch shapes (``None`` stays ``None``).

    Concrete inputs get the full numpy checks (shape, finiteness, units, :func:`check_landmarks`);
    traced ones (inside ``jax.jit``/``grad``) only the static shape checks.
    """
    if is_traced(landmarks, weights, q0):
        lm = jnp.asarray(landmarks)
        if lm.ndim < 2 or lm.shape[-2:] != (21, 3):
            raise ValueError(f"landmarks must have shape (*batch, 21, 3); got {lm.shape}")
        xp = jnp
    else:
        lm = check_landmarks(landmarks, check_units=check_units)
        xp = np
    batch = lm.shape[:-2]
    if weights is not None:
        weights = xp.asarray(weights, lm.dtype)
        try:
            weights = xp.broadcast_to(weights, batch + (21,))
        except ValueError:
            raise ValueError(f"weights must have shape (*batch, 21) = {batch + (21,)}; got {weights.shape}") from None
    if q0 is not None:
        q0 = xp.asarray(q0, lm.dtype)
        try:
            q0 = xp.broadcast_to(q0, batch + (hand.num_joints,))
        except ValueError:
            raise ValueError(f"q0 must have shape (*batch, {hand.num_joints}); got {q0.shape}") from None
        if xp is np:
            check_start(hand, q0)
    return lm, weights, q0


#: radians a start pose ``q0`` may lie outside the joint limits (a rounded or filtered pose)
Q0_LIMIT_TOLERANCE = 0.5


def check_start(hand: HandModel, q0: np.ndarray) -> None:
    """A ``ValueError`` naming the first joint of ``q0`` that is not finite or lies more than
    :data:`Q0_LIMIT_TOLERANCE` outside its limits (degrees or garbage passed as a start pose)."""
    lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(q0) | (q0 < lo - Q0_LIMIT_TOLERANCE) | (q0 > hi + Q0_LIMIT_TOLERANCE)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        j = at[-1]
        raise ValueError(f"q0{list(at)} ({hand.joint_names[j]}) = {float(q0[at]):g} rad is not a start pose: it must "
                         f"be finite and within the joint's limits [{lo[j]:.3f}, {hi[j]:.3f}] ± {Q0_LIMIT_TOLERANCE} rad "
                         f"(radians, not degrees)")


def pick_side(hand: HandModel, lm: np.ndarray, side: str) -> HandModel:
    """The model for ``side`` (``"right"``, ``"left"`` or ``"auto"``: from the landmarks' chirality);
    warns where the given side contradicts the geometry."""
    from ..hand.model import load_hand

    if side not in ("right", "left", "auto"):
        raise ValueError(f"side must be 'right', 'left' or 'auto', got {side!r}")
    detected = detect_side(lm)
    if side == "auto":
        if detected is None:
            raise ValueError("side='auto': the landmarks' chirality is undecided (degenerate palms); pass side=")
        side = detected
    elif detected is not None and detected != side:
        warnings.warn(f"side={side!r} but the landmarks' geometry looks like a {detected} hand (mirrored images "
                      "swap MediaPipe's handedness label); solving as given", stacklevel=3)
    return hand if hand.side == side else load_hand(side)


def solve(hand: HandModel, landmarks, weights=None, config: SolverConfig | None = None, *, side: str | None = None,
          q0=None, check_units: bool = True, **overrides) -> IKResult:
    """Fit the hand to MediaPipe landmarks: angles within limits, wrist pose and scale.

    Args:
        hand: the model (``wj.load_hand("right")``); with ``side`` given, it is reloaded for that side.
        landmarks: ``(*batch, 21, 3)`` metres, in any frame (camera, world, wrist). NaN marks a
            missing landmark.
        weights: ``(*batch, 21)`` per-landmark confidence ≥ 0 (0 = ignore); default all ones.
        config: :class:`SolverConfig`; keyword ``overrides`` replace its fields
            (e.g. ``iterations=10, coupling="soft"``).
        side: ``"right"``, ``"left"`` or ``"auto"`` (decide from the landmarks' chirality); ``None``
            uses ``hand`` as given. A side contradicting the geometry issues a warning.
        q0: ``(*batch, 20)`` starting angles (warm start, kept where it fits better than the
            closed-form start) and the prior's centre; default :func:`neutral_angles`.
        check_units: raise if the hands look like pixels, normalised image coordinates or millimetres.

    Returns:
        :class:`IKResult` with the input's batch shape.

    Raises:
        ValueError: wrong shape, no finite landmark at all, or implausible units (the message says
            what was found and what to pass instead).

    For a live stream, one frame at a time, :class:`~wuji_jax.FrameSolver` computes the same fit with
    less overhead per call (numpy results).

    A JAX function: the first call for a batch size (padded, :mod:`wuji_jax.programs`) compiles its
    program and blocks; later calls run it. :func:`wuji_jax.enable_compilation_cache` keeps the
    programs across processes (``wuji-jax warmup`` fills it). Derivatives (``jax.grad``, ``jvp``,
    ``jacfwd``, ``vmap``) are the exact derivative of the fit (:mod:`wuji_jax.solver.adjoint`): where one
    is taken the fit is first converged further, and frames without an exact derivative are flagged
    ``FLAG_NO_DERIVATIVE``.
    """
    config = config or DEFAULT_CONFIG
    if overrides:
        config = dataclasses.replace(config, **overrides)
    lm, weights, q0a = check_solver_input(hand, landmarks, weights, q0, check_units)
    if side is not None:
        if is_traced(lm):
            raise ValueError("side= needs concrete landmarks; pick the hand model outside jit")
        hand = pick_side(hand, lm, side)
    return solve_checked(hand, lm, weights, q0a, config, warm=q0 is not None)


def solve_checked(hand, lm, weights, q0a, config: SolverConfig, warm: bool = False) -> IKResult:
    """:func:`solve` after the checks (used by :func:`~wuji_jax.solve_sequence` too)."""
    dtype = _F64 if (lm.dtype == _F64 and jax.config.jax_enable_x64) else _F32
    # a traced model or setting (a derivative in them) takes the traced path too
    traced = is_traced(lm, weights, q0a, *jax.tree_util.tree_leaves(hand), *jax.tree_util.tree_leaves(config))
    if traced:
        lm, weights, q0a = (None if a is None else jnp.asarray(a, dtype) for a in (lm, weights, q0a))
        cfg = config if is_traced(*jax.tree_util.tree_leaves(config)) else config_arrays(config, dtype)
        return solve_batch(hand, lm, weights, q0a, cfg, bool(warm))
    lm, weights, q0a = (None if a is None else np.asarray(a, dtype) for a in (lm, weights, q0a))
    return _solve_eager(_kernel_hand(hand), lm, weights, q0a, config_arrays(config, dtype), bool(warm))


def _kernel_hand(hand: HandModel) -> HandModel:
    """``hand`` without its name and side (static fields the kernel never reads: left and right share
    a program), made once per model object (:func:`_per_model`)."""
    return _per_model(hand)[1]


#: (static key) → the program that solves a padded batch (:func:`_solve_eager`)
_PROGRAMS: dict = {}


def clear_programs() -> int:
    """Forget the solver programs this module keeps: those :func:`solve` made for concrete inputs on
    one device (one per padded batch size, dtype and warm or cold start) and the stages of
    :func:`staged_program` (which the dataset runner shares). Returns how many were dropped (0 when
    none was kept). A batch split over several devices runs :func:`split_kernel`'s jitted functions,
    whose programs are JAX's.

    The next call for each shape makes its programs again, through
    :func:`~wuji_jax.cache.cached_program` and :func:`~wuji_jax.cache.compile_side_by_side`: for
    checking or timing what a first call does. What those keep is not touched, neither the compilation
    cache's folder (:func:`wuji_jax.enable_compilation_cache`) nor JAX's own caches
    (``jax.clear_caches``), so a program made again may come back from them at once. Call it while no
    other thread is solving: a program being made then is kept once it is made."""
    dropped = len(_PROGRAMS) + len(_STAGES)
    _PROGRAMS.clear()
    _STAGES.clear()
    return dropped


def _solve_eager(hand, lm, weights, q0, cfg, warm: bool) -> IKResult:
    """:func:`solve_batch` on concrete (numpy) inputs, by the rules of :mod:`wuji_jax.programs`: the
    batch padded to :func:`~wuji_jax.programs.padded_frames` (missing frames: invalid, not solved, and
    they do not keep the loop running), on one device, or split over the local devices
    (:func:`~wuji_jax.programs.split_sharding`) with each device's rows padded alike. One program per
    padded size, compiled on its first call (small CPU programs as two stages side by side:
    :func:`staged_program`; a single frame as one program of its own shape); the padding is dropped
    from the result."""
    batch = lm.shape[:-2]
    flat = math.prod(batch)
    if flat == 0:
        return _empty(hand, batch, lm.dtype)
    lm = lm.reshape(flat, 21, 3)
    weights, q0 = (None if a is None else a.reshape((flat,) + a.shape[len(batch):]) for a in (weights, q0))
    sharding = programs.split_sharding(flat)
    if sharding is not None:
        return _solve_split(hand, lm, weights, q0, cfg, sharding, warm, batch)
    platform = jax.default_backend()
    size = programs.padded_frames(flat, programs.chunk_frames(platform))
    options = programs.compile_options(size, platform)
    if size == 1:  # one frame: one program of the input's own shape (one dispatch, nothing to unpad)
        key = (batch, lm.dtype, weights is None, q0 is None, warm, jax.tree_util.tree_structure((hand, cfg)), platform)
        shaped = lambda a, tail: None if a is None else a.reshape(batch + tail)  # noqa: E731
        args = (hand, shaped(lm, (21, 3)), shaped(weights, (21,)), shaped(q0, (hand.num_joints,)), cfg)
        program = _PROGRAMS.get(key)
        if program is None:
            program = _PROGRAMS[key] = cached_program(_solve_warm if warm else _solve_cold, "solve_frame", *args,
                                                      compiler_options=options)
        return program(*args)
    staged = options is not None  # a quickly compiled program: two stages, compiled side by side
    if staged:  # the stages take every input (weights and start pose made here)
        weights, q0 = default_inputs(hand, lm, weights, q0, np)
    if size > flat:
        lm, weights, q0 = _pad(size - flat, lm, weights, q0)
    key = (size, lm.dtype, weights is None, q0 is None, warm, jax.tree_util.tree_structure((hand, cfg)), platform)
    program = _PROGRAMS.get(key)
    if program is None:
        args = (hand, lm, weights, q0, cfg)
        if staged:
            # named as the dataset runner's stages (runner.kernel.Kernel.staged): shared where shapes match
            program = staged_program(start_warm if warm else start_cold, fit_chunked, "solve_chunked", args, options)
        else:
            program = cached_program(_solve_warm if warm else _solve_cold, "solve_batch", *args)
        _PROGRAMS[key] = program
    out = program(hand, lm, weights, q0, cfg)
    if staged:
        out = IKResult(**out)
    return out if batch == (size,) else _unpad(out, flat, batch)


def _pad(pad: int, lm, weights, q0):
    """``pad`` missing frames (NaN landmarks, zero weights and start angles) after the inputs'."""
    fill = lambda a, v: None if a is None else np.concatenate([a, np.full((pad,) + a.shape[1:], v, a.dtype)])  # noqa: E731
    return fill(lm, np.nan), fill(weights, 0.0), fill(q0, 0.0)


def _empty(hand: HandModel, batch: tuple, dtype) -> IKResult:
    """The result of a batch without frames (shape ``batch``, one of its axes 0)."""
    n, m = hand.num_joints, len(hand.mimic_sources)
    z = lambda *tail, dt=dtype: jnp.zeros(batch + tail, dt)  # noqa: E731
    return IKResult(angles=z(n), coupled=z(m), rotation=z(3, 3), translation=z(3), scale=z(), keypoints=z(21, 3),
                    residual=z(), errors=z(21), valid=z(dt=bool), converged=z(dt=bool), iterations=z(dt=jnp.int32),
                    flags=z(dt=jnp.int32), cost=z())


def _solve_split(hand, lm, weights, q0, cfg, sharding, warm: bool, batch: tuple) -> IKResult:
    """The frames ``(B, 21, 3)`` split over the devices of ``sharding``: device ``d`` holds frames
    ``d·per`` to ``(d + 1)·per − 1`` (``per`` = the frames over the devices, rounded up) at the front of
    its rows, padded with missing frames to :func:`~wuji_jax.programs.padded_frames` (at most one chunk
    a device); each device solves its rows (:func:`split_kernel`)."""
    flat = lm.shape[0]
    D = sharding.mesh.size
    chunk = programs.chunk_frames(sharding.mesh.devices.flat[0].platform)
    per = -(-flat // D)
    rows = programs.padded_frames(per, chunk)
    weights, q0 = default_inputs(hand, lm, weights, q0, np)
    args = []
    for a, v in zip((lm, weights, q0), (np.nan, 0.0, 0.0)):
        buf = np.full((D, rows) + a.shape[1:], v, a.dtype)
        for d in range(D):
            part = a[d * per:(d + 1) * per]
            buf[d, :len(part)] = part
        args.append(buf.reshape((D * rows,) + a.shape[1:]))
    out = split_kernel(sharding.mesh, warm)(hand, *jax.device_put(args, sharding), cfg)
    if rows * D == flat:  # no padding
        return IKResult(**{k: v.reshape(batch + v.shape[1:]) for k, v in out.items()})
    return IKResult(**{k: _front_rows(v, D, per, flat).reshape(batch + v.shape[1:]) for k, v in out.items()})


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _front_rows(v, devices: int, per: int, flat: int):
    """The first ``per`` rows of each device's block of ``v``, the first ``flat`` of them."""
    return v.reshape((devices, -1) + v.shape[1:])[:, :per].reshape((devices * per,) + v.shape[1:])[:flat]


def _solve_cold(hand, lm, weights, q0, config) -> IKResult:
    return solve_batch(hand, lm, weights, q0, config, False)


def _solve_warm(hand, lm, weights, q0, config) -> IKResult:
    return solve_batch(hand, lm, weights, q0, config, True)


@functools.partial(jax.jit, static_argnames=("flat", "batch"))
def _unpad(out: IKResult, flat: int, batch: tuple) -> IKResult:
    return IKResult(*(v[:flat].reshape(batch + v.shape[1:]) for v in out))


DEFAULT_CONFIG = SolverConfig()


# ---------------------------------------------------------------------------------- the loss, optax


def landmark_loss(hand: HandModel, q, rotation, translation, log_scale, landmarks, weights=None,
                  config: SolverConfig | None = None, *, q_prior=None, coupled=None):
    """The solver's objective for one set of variables (differentiable; for optax or custom terms).

    The same function LM minimises (:func:`wuji_jax.solver.lm.cost`): Σ_k w_k·Huber(|fit_k − y_k|/1 cm)
    + ½·limit_weight·Σ limit violation² + ½·prior_weight·|q − q_prior|² (+ ½·coupling_weight·
    (coupled − law)² for ``config.coupling == "soft"``). One compiled program per shape, dtype and
    coupling (called eagerly, its first call compiles once instead of dispatching op by op).

    Args:
        q: ``(*batch, n)`` angles, radians; rotation ``(*batch, 3, 3)``; translation ``(*batch, 3)``
            metres; log_scale ``(*batch,)``; landmarks ``(*batch, 21, 3)`` metres (NaN: missing);
            weights ``(*batch, 21)``.
        q_prior: ``(*batch, n)`` the prior's centre; default :func:`neutral_angles` (as in :func:`solve`).
        coupled: ``(*batch, M)`` coupled angles under soft coupling; default the law at ``q``.

    Returns:
        ``(*batch,)`` cost.
    """
    config = config or DEFAULT_CONFIG
    q = check_angles(hand, q)
    if not is_traced(q, *jax.tree_util.tree_leaves(config)):
        config = config_arrays(config, q.dtype)
    return _landmark_loss(hand, q, rotation, translation, log_scale, landmarks, weights, config, q_prior,
                          coupled)


@jax.jit
def _landmark_loss(hand, q, rotation, translation, log_scale, landmarks, weights, config, q_prior, coupled):
    dtype = q.dtype
    soft = config.coupling == "soft"
    hand = hand.astype(dtype)
    ch = chains_of(hand, soft)
    batch = q.shape[:-1]
    flat = lambda a, tail: jnp.broadcast_to(jnp.asarray(a, dtype), batch + tail).reshape((-1,) + tail)  # noqa: E731
    lm = flat(landmarks, (21, 3))
    w = jnp.ones(lm.shape[:2], dtype) if weights is None else flat(weights, (21,))
    prior = flat(neutral_angles(hand) if q_prior is None else q_prior, (hand.num_joints,))
    rows = (flat(q, (hand.num_joints,)), flat(rotation, (3, 3)), flat(translation, (3,)), flat(log_scale, ()), lm, w,
            prior, None if coupled is None else flat(coupled, (len(hand.mimic_sources),)))
    params, st = chain_params(hand, ch), Structure(ch, soft)

    def cost_rows(q, rotation, translation, log_scale, lm, w, prior, coupled):  # flat rows -> (B,)
        finite = jnp.all(jnp.isfinite(lm), -1)
        y = jnp.transpose(jnp.where(finite[..., None], lm, 0.0), (2, 1, 0))
        prob = _problem(hand, ch, y, jnp.where(finite, w, 0.0).T, prior.T, soft)
        qT = q.T
        rot = coupled_rows(hand, qT) if coupled is None else coupled.T
        x = Variables(qT, rot if soft else jnp.zeros((0, qT.shape[1]), dtype), jnp.transpose(rotation, (1, 2, 0)),
                      translation.T, log_scale)
        return cost(hand, x, keypoints(hand, st, params, x), prob, config, soft)

    # in chunks of FK_CHUNK_FRAMES on a CPU, as forward_keypoints (wuji_jax.programs: an XLA:CPU fault
    # made gradients outside jax.jit wrong over larger programs)
    return map_chunks(cost_rows, rows, cpu_chunk(lm.shape[0], FK_CHUNK_FRAMES)).reshape(batch)


@functools.lru_cache(maxsize=1)
def _default_optimizer():
    """``optax.adam(0.02)``, one object per process: the compiled optax program is kept per optimizer."""
    import optax

    return optax.adam(0.02)


def solve_optax(hand: HandModel, landmarks, optimizer=None, steps: int = 300, weights=None,
                config: SolverConfig | None = None, extra_loss=None):
    """Minimise :func:`landmark_loss` (+ ``extra_loss(q)`` if given) with an optax optimizer.

    The wrist pose is initialised from the palm as in :func:`solve`; the rotation is parametrised by a
    rotation vector composed on the right. Default optimizer: ``optax.adam(0.02)``. Returns an
    :class:`IKResult` (``iterations`` = ``steps``; ``converged`` False: optax runs a fixed budget).

    The optimisation and its results are one compiled program, kept per optimizer object, ``steps``,
    ``extra_loss`` function, input shape and dtype: pass the same optimizer (and ``extra_loss``) objects
    again to solve without compiling (a new ``optax.adam(...)`` on each call compiles each time).
    """
    config = config or DEFAULT_CONFIG
    lm, weights, _ = check_solver_input(hand, landmarks, weights, None)
    steps = int(steps)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    lm = jnp.asarray(lm)
    weights, q0 = default_inputs(hand, lm, None if weights is None else jnp.asarray(weights), None, jnp)
    init = solve(hand, lm, weights, config, iterations=0, check_units=False)
    optimizer = optimizer or _default_optimizer()
    if not is_traced(lm, weights, *jax.tree_util.tree_leaves(config)):
        config = config_arrays(config, lm.dtype)
    fields = _optax_program(hand, lm, weights, q0, init.rotation, init.translation, init.scale, config,
                            optimizer=_Static(optimizer), steps=steps, extra_loss=_Static(extra_loss))
    return init._replace(**fields)


class _Static:
    """A static argument of a compiled program, compared by identity (an optax transformation is a
    NamedTuple of functions: hashable, but not always; the same object is the same program)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return id(self.value)

    def __eq__(self, other):
        return isinstance(other, _Static) and other.value is self.value


def _optax_fit(hand, lm, weights, q0, R0, t0, s0, config, *, optimizer, steps, extra_loss):
    """:func:`solve_optax`'s optimisation and results (the :class:`IKResult` fields it replaces)."""
    import optax

    from ..hand.kinematics import coupled_angles, forward_keypoints

    optimizer, extra_loss = optimizer.value, extra_loss.value
    batch = lm.shape[:-2]
    params = dict(q=q0, phi=jnp.zeros(batch + (3,), lm.dtype), t=t0, logs=jnp.log(s0))

    def rot(phi):
        R = geo.so3_exp(jnp.moveaxis(phi, -1, 0))  # (3, 3, *batch)
        return R0 @ jnp.moveaxis(R, (0, 1), (-2, -1))

    def loss(p):
        val = landmark_loss(hand, p["q"], rot(p["phi"]), p["t"], p["logs"], lm, weights, config)
        if extra_loss is not None:
            val = val + extra_loss(p["q"])
        return jnp.sum(val)

    def body(carry, _):
        p, s = carry
        val, g = jax.value_and_grad(loss)(p)
        upd, s = optimizer.update(g, s, p, value=val, grad=g, value_fn=loss)
        return (optax.apply_updates(p, upd), s), val

    (p, _), _ = jax.lax.scan(body, (params, optimizer.init(params)), None, length=steps)
    q = jnp.clip(p["q"], hand.lower, hand.upper)
    R, s = rot(p["phi"]), jnp.exp(p["logs"])
    kp = s[..., None, None] * jnp.einsum("...ij,...kj->...ki", R, forward_keypoints(hand, q)) + p["t"][..., None, :]
    used = jnp.all(jnp.isfinite(lm), -1) & (weights > 0)
    err = jnp.where(used, jnp.linalg.norm(kp - jnp.where(used[..., None], lm, 0.0), axis=-1), 0.0)
    resid = jnp.sqrt(jnp.sum(err**2, -1) / jnp.maximum(jnp.sum(used, -1), 1))
    c = landmark_loss(hand, q, R, p["t"], p["logs"], lm, weights, config)
    return dict(angles=q, coupled=coupled_angles(hand, q), rotation=R, translation=p["t"], scale=s,
                keypoints=kp, residual=resid, errors=err, iterations=jnp.full(batch, steps, jnp.int32),
                converged=jnp.zeros(batch, bool), cost=c)


_optax_program = jax.jit(_optax_fit, static_argnames=("optimizer", "steps", "extra_loss"))


def pose_from_palm(hand: HandModel, landmarks, weights=None, estimate_scale: bool = True):
    """Closed-form wrist similarity from the palm landmarks: ``(rotation, translation, scale)``."""
    r = solve(hand, landmarks, weights, iterations=0, estimate_scale=estimate_scale, check_units=False)
    return r.rotation, r.translation, r.scale
