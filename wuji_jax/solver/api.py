"""The public solver: :func:`solve`, :func:`landmark_loss`, :func:`solve_optax`, :func:`pose_from_palm`.

:func:`solve` checks its input (shape, finiteness, units), then runs the jit-compiled kernel:

1. the closed-form start (:mod:`.start`): wrist similarity from the palm, angles from the bones
   (:func:`start_rows`);
2. Levenberg–Marquardt (:mod:`.lm`) until every frame has converged, at most ``config.iterations``;
3. the fit, residuals and flags (2 and 3: :func:`fit_rows`).

The kernel is one program (:func:`solve_rows`), except where its compilation outweighs its run
(batches of up to 64 frames on the CPU, small ``wuji-jax solve`` jobs): there the start and the fit
are two programs compiled side by side on two cores (:func:`staged_program`), with the same results.

Smaller batches are padded to one of a few sizes (:data:`BUCKETS`), so few programs are compiled;
batches larger than :data:`CHUNK_FRAMES` are solved in chunks (each chunk's loop stops on its own),
and large batches are split over the local devices (:func:`wuji_jax.devices.split_over_devices`),
padded to a power-of-two number of chunks per device of which only those holding frames are solved
(:func:`split_kernel` with ``counted``): a few programs for any batch size. Everything is a pure
JAX function of ``(hand, landmarks, weights, q0, config)``: it runs under
``jax.jit``, ``vmap`` and ``grad`` (see :mod:`.lm` on derivatives).
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

from .. import geometry as geo
from ..cache import array_sharding, cached_program, compile_side_by_side, program_path, quick_compile_options
from ..chains import chain_params, chains_of, coupled_rows, cpu_chunk, fk, keypoints21, link_angles, map_chunks
from ..devices import split_over_devices
from ..kinematics import FK_CHUNK_FRAMES, check_angles
from ..landmarks import check_landmarks, detect_side
from ..model import HandModel
from ..tiered import Tiered
from ..tiered import enabled as tiered_enabled
from .config import (DEGENERATE_SPREAD, FLAG_BAD_SCALE, FLAG_DEGENERATE, FLAG_HIGH_RESIDUAL, FLAG_NO_DERIVATIVE, FLAG_MIRRORED, FLAG_NOT_FINITE, FLAG_TOO_FEW_LANDMARKS,
                     IKResult, SolverConfig)
from .adjoint import minimise
from .lm import Problem, Structure, Variables, cost, keypoints
from .start import analytic_angles, palm_similarity

__all__ = ["solve", "solve_rows", "solve_chunked", "Start", "start_rows", "fit_rows", "start_chunked", "fit_chunked",
           "start_cold", "start_warm", "start_spec", "staged_program", "map_chunks", "map_first_chunks", "solve_first_chunks", "solve_batch", "split_kernel", "default_inputs", "config_arrays", "is_traced", "DEFAULT_CONFIG", "landmark_loss", "solve_optax", "pose_from_palm", "neutral_angles",
           "check_solver_input", "pick_side", "solve_checked", "CHUNK_FRAMES", "ACCELERATOR_CHUNK_FRAMES",
           "chunk_frames", "BUCKETS"]

#: frames solved at a time on one device; bigger batches loop over chunks of this size: the LM state
#: of a chunk stays in the CPU's caches, and each chunk's loop stops when its own frames have converged.
#: 16,384 real frames on 2 CPU devices (``wj.solve`` + ``to_inspire``, 2-core AMD EPYC, medians of 9):
#: 137-142k frames/s with chunks of 128, 137k with 64, 127-132k with 256, 101k with 512, 65k with 1024
#: (the results are the same, bit for bit: a frame's fit does not depend on the frames beside it)
CHUNK_FRAMES = 128
#: frames solved at a time on one accelerator (GPU, TPU): large enough to fill the device. Measured on
#: an H200 at 2^20 real frames (``benchmarks/bench_gpu.py``): 4.24M frames/s with chunks of 65,536,
#: 4.21M with 32,768, 3.64M with 16,384, 3.71M with 131,072, 3.17M with the whole batch as one chunk.
ACCELERATOR_CHUNK_FRAMES = 65536


def chunk_frames(platform: str) -> int:
    """Frames solved at a time on one device of ``platform`` (``"cpu"``, ``"gpu"``, …):
    :data:`CHUNK_FRAMES` on CPU, :data:`ACCELERATOR_CHUNK_FRAMES` elsewhere."""
    return CHUNK_FRAMES if platform == "cpu" else ACCELERATOR_CHUNK_FRAMES

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
    flags = (jnp.where(enough, 0, FLAG_TOO_FEW_LANDMARKS)
             | jnp.where(degenerate, FLAG_DEGENERATE, 0)
             | jnp.where(bad_scale, FLAG_BAD_SCALE, 0)
             | jnp.where(resid > config.flag_residual, FLAG_HIGH_RESIDUAL, 0)
             | jnp.where(start.det < 0, FLAG_MIRRORED, 0)
             | jnp.where(finite_fit, 0, FLAG_NOT_FINITE)
             | jnp.where(exact | ~valid, 0, FLAG_NO_DERIVATIVE)).astype(jnp.int32)
    return dict(angles=q.T, coupled=rot.T, rotation=jnp.transpose(x.R, (2, 0, 1)), translation=x.t.T, scale=s,
                keypoints=jnp.transpose(fit, (2, 1, 0)), residual=resid, errors=errs.T, valid=valid & finite_fit & ~bad_scale,
                converged=converged & valid & finite_fit & ~bad_scale, iterations=iters, flags=flags, cost=c)


def solve_rows(hand: HandModel, landmarks, weights, q0, config: SolverConfig, warm=False) -> dict:
    """The solver on one flat batch: ``landmarks (B, 21, 3)`` (NaN: missing), ``weights (B, 21)``,
    ``q0 (B, n)`` → a dict of :class:`IKResult` fields with leading axis ``B``. ``warm`` (a bool,
    traced, or a Python bool): ``q0`` is a warm start, used where it fits better than the closed-form
    start; a Python ``False`` leaves the comparison out of the program.

    Two stages, :func:`start_rows` then :func:`fit_rows`: one program here; :func:`solve` on concrete
    inputs may compile them as two programs side by side (:func:`staged_program`)."""
    start = start_rows(hand, landmarks, weights, q0, config, warm)
    return fit_rows(hand, landmarks, weights, q0, config, start)


def map_first_chunks(fn, rows: tuple, chunk: int, count):
    """``fn(*rows)`` on the first ``count·chunk`` frames of ``rows`` (pytrees whose leaves have a leading
    frame axis, a multiple of ``chunk``), ``count`` chunks of ``chunk`` frames, chunk ``j`` holding
    frames ``j, j + count, j + 2·count, …`` (strided, as :func:`map_chunks`); ``count`` may be traced.
    The frames after them are padding: not solved, zeros in the result. One program for any count up
    to the rows' length over ``chunk``."""
    leaves, tree = jax.tree_util.tree_flatten(rows)
    R = leaves[0].shape[0]
    if R == chunk:
        return fn(*rows)
    take = jnp.arange(chunk) * count  # chunk j: frames j, j + count, j + 2·count, …
    piece = lambda ls, j: jax.tree_util.tree_unflatten(tree, [a[take + j] for a in ls])  # noqa: E731
    shapes = jax.eval_shape(lambda ls: fn(*piece(ls, 0)), leaves)
    out = jax.tree_util.tree_map(lambda v: jnp.zeros((R,) + v.shape[1:], v.dtype), shapes)

    def body(j, out):
        res = fn(*piece(leaves, j))
        return jax.tree_util.tree_map(lambda o, r: o.at[take + j].set(r), out, res)

    return jax.lax.fori_loop(0, count, body, out)


def _chunk(chunk):
    return chunk_frames(jax.default_backend()) if chunk is None else int(chunk)


def solve_chunked(hand, landmarks, weights, q0, config, warm=False, chunk: int | None = None) -> dict:
    """:func:`solve_rows` over equal chunks of at most ``chunk`` frames (:func:`map_chunks`; each
    chunk's loop stops on its own). ``chunk`` (static): default :func:`chunk_frames` of JAX's default
    backend."""
    return map_chunks(lambda *r: solve_rows(hand, *r, config, warm), (landmarks, weights, q0), _chunk(chunk))


def solve_first_chunks(hand, landmarks, weights, q0, config, count, warm=False, chunk: int | None = None) -> dict:
    """:func:`solve_rows` on the first ``count`` chunks of ``chunk`` frames (:func:`map_first_chunks`;
    the rest is padding), ``chunk`` as in :func:`solve_chunked`."""
    return map_first_chunks(lambda *r: solve_rows(hand, *r, config, warm), (landmarks, weights, q0), _chunk(chunk),
                            count)


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
        q0 = xp.broadcast_to(xp.asarray(neutral_angles(hand), lm.dtype), batch + (hand.num_joints,))
    return weights, q0


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
def split_kernel(mesh, warm: bool = False, kernel=None, extra: int = 0, counted: bool = False):
    """The solver with every device solving its own rows (``shard_map``: no communication);
    ``warm`` as in :func:`solve_batch`. ``kernel``: another function of the same arguments
    ``(hand, landmarks, weights, q0, config, *more, chunk=)`` returning a dict of per-row arrays, split
    the same way (default :func:`solve_chunked`); ``extra``: how many arguments ``more`` (pytrees of
    per-row arrays, e.g. a :class:`Start`) follow the config. With ``counted`` the program takes one
    more argument, ``count`` (a traced int32, the same on every device), and each device solves only
    the first ``count`` chunks of its rows (default kernel :func:`solve_first_chunks`): one program for
    every batch of the same padded size (:func:`_solve_split`). Each device solves chunks of
    :func:`chunk_frames` of the mesh's platform."""
    from jax.sharding import PartitionSpec as P

    rows = P(mesh.axis_names[0])
    platform = mesh.devices.flat[0].platform
    if kernel is None:
        kernel = functools.partial(solve_first_chunks if counted else solve_chunked, warm=bool(warm))

    def per_device(*args):
        with geo.summing(platform):
            return kernel(*args, chunk=chunk_frames(platform))

    in_specs = (P(), rows, rows, rows, P()) + (rows,) * extra + (P(),) * counted
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


#: (function, program name, argument structure, shapes, options) → its compiled program, or a
#: :class:`~wuji_jax.tiered.Tiered` one (answered in numpy until compiled)
_STAGES: dict = {}
_EXPORTED: set = set()  # keys of _STAGES' form whose programs were found exported (_tiered)


def _stage_key(fn, name: str, args: tuple, compiler_options) -> tuple:
    """A program's key in :data:`_STAGES`: its function and name, the arguments' structure (which
    holds the config's static fields), shapes, dtypes and shardings, and the compiler options. Arrays
    on the default device and numpy arrays share a program, as in :func:`cached_program`."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    shapes = tuple((x.shape, str(x.dtype), bool(getattr(x, "weak_type", False)), str(array_sharding(x)))
                   for x in leaves)
    return fn, name, str(tree), shapes, repr(sorted((compiler_options or {}).items()))


def _tiered(fn, name: str, args: tuple, compiler_options, key: tuple | None = None):
    """``fn`` for arguments shaped like ``args`` as a :class:`~wuji_jax.tiered.Tiered` program (answered
    in numpy while it compiles), made once per process (:data:`_STAGES`, under ``key``, default
    :func:`_stage_key`); None where the numpy tier is off or the program is kept exported
    (:func:`cached_program` reads it back without tracing: that is quicker)."""
    key = key or _stage_key(fn, name, args, compiler_options)
    if key in _STAGES:
        return _STAGES[key]
    if key in _EXPORTED or not tiered_enabled():
        return None
    path = program_path(fn, name, *args)
    if path is not None and path.is_file():
        _EXPORTED.add(key)  # (not asked again on every call: its path is a hash of the program's identity)
        return None
    _STAGES[key] = made = Tiered(fn, *args, compiler_options=compiler_options)
    return made


def staged_program(start, fit, name: str, args: tuple, compiler_options: dict | None = None, sharding=None,
                   tiered: bool = False):
    """The solver as its two stages, each a program of its own: ``start(*args) → Start`` and
    ``fit(*args, start) → outputs`` (:func:`cached_program` each, ``solve_start`` and ``name_fit``),
    compiled side by side on first use (:func:`wuji_jax.cache.compile_side_by_side`; the fit, the
    larger, first). For programs whose compilation outweighs their run (``quick_compile_options``):
    on a 2-core CPU the 64-frame solver took 6.0 s from the call to the answer this way against 7.5 s
    as one program; the run costs one more dispatch. Each stage is compiled once per process for its
    arguments' shapes, whatever it is paired with, and the start is named alike everywhere: where their
    batches match, :func:`solve` and the dataset runner share its program (and, with the same fit,
    both), in a process and in the compilation cache. ``sharding``: the rows' sharding of ``args``'
    landmarks (the start's outputs are split the same way). Returns a callable of arguments shaped
    like ``args``.

    With ``tiered`` (:func:`solve`), a stage not yet kept as an exported program
    (:func:`wuji_jax.cache.program_path`) is a :class:`wuji_jax.tiered.Tiered`: traced once, compiled
    in a thread of its own, and answered in numpy until then (the first ``wj.solve`` of 64 frames in
    a fresh process: 3.9 s → 1.3 s to the answer on a 2-core CPU). The callable then returns numpy
    arrays for those calls."""
    hand, landmarks, _, _, config = args
    spec = start_spec(hand, landmarks, config, sharding)
    stages = ((fit, name + "_fit", args + (spec,)), (start, "solve_start", args))
    keys = [_stage_key(fn, program, a[:5], compiler_options) for fn, program, a in stages]
    todo = [(key, stage) for key, stage in zip(keys, stages) if key not in _STAGES]
    if tiered:  # traced here, compiled in threads, answered in numpy meanwhile
        todo = [(key, (fn, program, a)) for key, (fn, program, a) in todo
                if _tiered(fn, program, a, compiler_options, key) is None]
    if todo:  # the compiled programs, called directly (JAX's ahead-of-time API)
        made = compile_side_by_side(*((functools.partial(cached_program, fn, program, *a, compiler_options=compiler_options), a)
                                      for _, (fn, program, a) in todo))
        _STAGES.update((key, compiled) for (key, _), compiled in zip(todo, made))
    second, first = (_STAGES[key] for key in keys)

    def run(*a):
        return second(*a, first(*a))

    return run


def _solve_split(hand, lm, weights, q0, config, sharding, warm) -> IKResult:
    """The frames split over the devices of ``sharding`` (numpy inputs): device ``d`` holds frames
    ``d·per`` to ``(d + 1)·per − 1`` (``per`` = the frames over the devices, rounded up) at the front of
    its rows, which are padded with missing frames to a power-of-two number of chunks
    (:func:`chunk_frames`); each device solves only the chunks holding its frames
    (:func:`split_kernel` with ``counted``). Batches whose chunks per device round up alike share one program
    (before, every batch size compiled its own: 600 and 621 frames on 2 CPU devices, 16 s each), and
    the padding costs a transfer, not a solve."""
    batch = lm.shape[:-2]
    flat = math.prod(batch)
    D = sharding.mesh.size
    chunk = chunk_frames(sharding.mesh.devices.flat[0].platform)
    per = -(-flat // D)
    count = -(-per // chunk)
    rows = (1 << (count - 1).bit_length()) * chunk
    fill = (np.nan, 0.0, 0.0)  # missing landmarks, zero weights, zero start angles
    args = []
    for a, v in zip((lm, weights, q0), fill):
        a = a.reshape((flat,) + a.shape[len(batch):])
        buf = np.full((D, rows) + a.shape[1:], v, a.dtype)
        for d in range(D):
            part = a[d * per:(d + 1) * per]
            buf[d, :len(part)] = part
        args.append(buf.reshape((D * rows,) + a.shape[1:]))
    kernel = split_kernel(sharding.mesh, bool(warm), counted=True)
    call = (hand, *jax.device_put(args, sharding), config, np.int32(count))
    # the first calls answered in numpy while it compiles (wuji_jax.tiered)
    program = _tiered(kernel, "solve_split", call, None) if flat <= TIERED_FRAMES else None
    out = (program or kernel)(*call)
    if isinstance(out["angles"], np.ndarray):  # answered in numpy: its padding dropped here
        front = lambda v: v.reshape((D, -1) + v.shape[1:])[:, :per].reshape((D * per,) + v.shape[1:])[:flat]  # noqa: E731
        return jax.device_put(IKResult(**{k: front(v).reshape(batch + v.shape[1:]) for k, v in out.items()}))
    if rows * D == flat:  # no padding
        return IKResult(**{k: v.reshape(batch + v.shape[1:]) for k, v in out.items()})
    return IKResult(**{k: _front_rows(v, D, per, flat).reshape(batch + v.shape[1:]) for k, v in out.items()})


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _front_rows(v, devices: int, per: int, flat: int):
    """The first ``per`` rows of each device's block of ``v``, the first ``flat`` of them."""
    return v.reshape((devices, -1) + v.shape[1:])[:, :per].reshape((devices * per,) + v.shape[1:])[:flat]


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
    return lm, weights, q0


def pick_side(hand: HandModel, lm: np.ndarray, side: str) -> HandModel:
    """The model for ``side`` (``"right"``, ``"left"`` or ``"auto"``: from the landmarks' chirality);
    warns where the given side contradicts the geometry."""
    from ..model import load_hand

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

    The first call for a batch of up to :data:`TIERED_FRAMES` (1024) frames in a process answers
    without waiting for XLA: the solver's programs compile in threads of their own, and until they are
    ready its calls are answered by the programs' jaxprs evaluated in numpy (:mod:`wuji_jax.tiered`; the same fit to
    float32 rounding: angles within 5e-6 rad on dex-retargeting's recording). ``WUJI_JAX_TIERED=0`` makes
    every call wait for the compiled programs instead.
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


DEFAULT_CONFIG = SolverConfig()


def solve_checked(hand, lm, weights, q0a, config: SolverConfig, warm: bool = False) -> IKResult:
    """:func:`solve` after the checks (used by :func:`~wuji_jax.solve_sequence` too)."""
    dtype = _F64 if (lm.dtype == _F64 and jax.config.jax_enable_x64) else _F32
    # a traced model or setting (a derivative in them) takes the traced path too
    traced = is_traced(lm, weights, q0a, *jax.tree_util.tree_leaves(hand), *jax.tree_util.tree_leaves(config))
    xp = jnp if traced else np
    lm, weights, q0a = (None if a is None else xp.asarray(a, dtype) for a in (lm, weights, q0a))
    cfg = config if is_traced(*jax.tree_util.tree_leaves(config)) else config_arrays(config, dtype)
    hand = hand.replace(name="", side="")  # static fields the kernel never reads: left and right share a compile
    sharding = None if traced else split_over_devices(math.prod(lm.shape[:-2]))
    if sharding is not None:
        weights, q0a = default_inputs(hand, lm, weights, q0a, np)
        return _solve_split(hand, lm, weights, q0a, cfg, sharding, warm)
    if traced:
        return solve_batch(hand, lm, weights, q0a, cfg, bool(warm))
    return _solve_bucketed(hand, lm, weights, q0a, cfg, warm)


#: the batch sizes :func:`solve` compiles for below :data:`CHUNK_FRAMES`: a batch is padded to the first
#: that holds it, a larger one to a multiple of :data:`CHUNK_FRAMES` solved a chunk per call. Few sizes
#: mean few compilations (seconds each, once per process without the cache); the price is at most 4×
#: the work of the batch itself. The buckets' programs are compiled with
#: :func:`wuji_jax.cache.quick_compile_options` (the 64-frame program: 6.4 s instead of 9.6 s on a
#: 2-core CPU, running 6.7 ms instead of 5.9 ms), as two programs side by side on the CPU
#: (:func:`staged_program`: 6.0 s instead of 7.5 s from the call to the answer).
BUCKETS = (64,)
#: batches of up to this many frames (padded) that :func:`solve` cannot answer with a program already
#: compiled are answered in numpy while it compiles (:mod:`wuji_jax.tiered`), on one device or split
#: over several (its ``shard_map`` run device by device): up to 8 chunks, about 0.3 s in numpy against
#: 5–10 s of compilation on a 2-core CPU. Larger batches wait for XLA.
TIERED_FRAMES = 1024


def _bucket(frames: int, chunk: int) -> int:
    """The batch size a flat batch of ``frames`` is padded to: the first of :data:`BUCKETS` that holds
    it, else a multiple of the ``chunk`` (:func:`chunk_frames`; solved as that many calls of one
    program). Where the chunk is larger than :data:`CHUNK_FRAMES` (accelerators), a batch smaller
    than one chunk is padded to a power of two: a few programs for any size, at most 2× the work."""
    for b in BUCKETS:
        if frames <= b < chunk:
            return b
    if frames < chunk and chunk > CHUNK_FRAMES:
        return max(CHUNK_FRAMES, 1 << (frames - 1).bit_length())
    return -(-frames // chunk) * chunk


def _solve_bucketed(hand, lm, weights, q0a, cfg, warm, platform: str | None = None, chunk: int | None = None) -> IKResult:
    """:func:`solve_batch` on numpy inputs padded to :func:`_bucket`'s size with missing frames (which
    are invalid and do not keep the solver's loop running); the padding is dropped from the result.
    Batches beyond a chunk (:func:`chunk_frames`) are solved a chunk per call (one program for any
    size). On the CPU, weights and start pose are made here when not given, so one compilation serves
    every call. On an accelerator the batch crosses to the device once and is sliced there, and
    missing weights and start pose are made inside the program (none crosses from the host). At 2²⁰
    frames on an H200 the call took 0.39 s: the input checks on the host 0.041 s, the transfer
    0.036 s, the 16 chunk calls 0.305 s (one program over all chunks: 0.245 s, but a compilation per
    batch size). ``platform``: default JAX's default backend; ``chunk``: default :func:`chunk_frames`
    of the platform."""
    platform = platform or jax.default_backend()
    on_host = platform == "cpu"
    if on_host:
        weights, q0a = default_inputs(hand, lm, weights, q0a, np)
    batch = lm.shape[:-2]
    flat = math.prod(batch)
    chunk = chunk or chunk_frames(platform)
    size = _bucket(flat, chunk)
    pad = size - flat
    lm, weights, q0a = (None if a is None else a.reshape((flat,) + a.shape[len(batch):]) for a in (lm, weights, q0a))
    if pad:
        lm = np.concatenate([lm, np.full((pad, 21, 3), np.nan, lm.dtype)])
        weights, q0a = (None if a is None else np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)])
                        for a in (weights, q0a))
    piece = min(size, chunk)
    if on_host:
        part = lambda a, i: None if a is None else a[i:i + piece]  # noqa: E731
    else:
        lm, weights, q0a = (None if a is None else jax.device_put(a) for a in (lm, weights, q0a))
        part = lambda a, i: a if a is None or piece == size else jax.lax.dynamic_slice_in_dim(a, i, piece)  # noqa: E731
    pieces = [(hand, part(lm, i), part(weights, i), part(q0a, i), cfg) for i in range(0, size, piece)]
    # one program for the equal pieces, kept with the compilation cache when that is on; a batch of a
    # bucket's size is compiled quickly (its compilation outweighs its run, wuji_jax.cache), as two
    # programs side by side (staged_program)
    quick = quick_compile_options(platform) if size <= max(BUCKETS) else None
    if quick:  # named as the dataset runner's stages (runner.kernel.Kernel.staged): the same programs where shapes match
        staged = staged_program(start_warm if warm else start_cold, fit_chunked, "solve_chunked", pieces[0], quick,
                                tiered=True)
        program = lambda *a: IKResult(**staged(*a))  # noqa: E731
    else:
        fn = _solve_warm if warm else _solve_cold
        # the first calls answered in numpy while it compiles (wuji_jax.tiered)
        program = (_tiered(fn, "solve_batch", pieces[0], None) if size <= TIERED_FRAMES else None) \
            or cached_program(fn, "solve_batch", *pieces[0])
    return _join(tuple(program(*args) for args in pieces), flat, batch)


def _solve_cold(hand, lm, weights, q0, config) -> IKResult:
    return solve_batch(hand, lm, weights, q0, config, False)


def _solve_warm(hand, lm, weights, q0, config) -> IKResult:
    return solve_batch(hand, lm, weights, q0, config, True)


def _join(outs: tuple, flat: int, batch: tuple) -> IKResult:
    """The pieces' results (equal sizes) as one, without the padding. The pieces are written into one
    buffer a piece at a time: three small programs whatever the number of pieces (a concatenation of
    256 pieces compiled for 3 s). Pieces answered in numpy (:mod:`wuji_jax.tiered`) are joined in numpy."""
    if isinstance(outs[0].angles, np.ndarray):
        return jax.device_put(IKResult(*(np.concatenate(f)[:flat].reshape(batch + f[0].shape[1:]) for f in zip(*outs))))
    out = outs[0]
    if len(outs) > 1:
        out = _first(out, len(outs))
        for i, piece in enumerate(outs[1:], 1):
            out = _place(out, piece, i * piece.angles.shape[0])
    return _unpad(out, flat, batch)


@functools.partial(jax.jit, static_argnames=("count",))
def _first(piece: IKResult, count: int) -> IKResult:
    """A buffer for ``count`` pieces holding the first (on the piece's device, as the others)."""
    return IKResult(*(jnp.zeros((count * v.shape[0],) + v.shape[1:], v.dtype).at[:v.shape[0]].set(v) for v in piece))


@functools.partial(jax.jit, donate_argnums=0)
def _place(out: IKResult, piece: IKResult, start) -> IKResult:
    return IKResult(*(jax.lax.dynamic_update_slice_in_dim(o, p, start, 0) for o, p in zip(out, piece)))


@functools.partial(jax.jit, static_argnames=("flat", "batch"))
def _unpad(out: IKResult, flat: int, batch: tuple) -> IKResult:
    return IKResult(*(v[:flat].reshape(batch + v.shape[1:]) for v in out))



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

    # in chunks of FK_CHUNK_FRAMES on a CPU: a program over more frames had wrong gradients outside
    # jax.jit with jaxlib 0.10.2's XLA:CPU (3,000 float32 frames: as large as the gradient itself;
    # right at 2,048), as forward_keypoints' (smaller chunks made calibrate's steps 3.6x slower)
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

    from ..kinematics import coupled_angles, forward_keypoints

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
