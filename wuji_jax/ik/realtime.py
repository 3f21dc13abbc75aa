"""Live streams: one frame at a time, with the least overhead per call (camera → robot hand).

:func:`wuji_jax.solve` takes any batch, under any JAX transformation, and returns JAX arrays. For one
frame that generality has a price: the model and settings travel as arguments on every call, the input
checks run in numpy, and each of the result's fields comes back as a device array of its own.
:class:`FrameSolver` compiles one model and config into the kernel once (ahead of time, with
``jax.jit(...).lower(...).compile()``), runs on the host CPU, and returns the results as one host
buffer split into numpy views; the numpy input checks run only where the kernel's own extent test
says the frame may be in the wrong units.
"""

from __future__ import annotations

import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime.cache import cached_program
from ..runtime.programs import compile_options
from ..hand.landmarks import plainly_metres
from ..hand.model import HandModel
from .api import DEFAULT_CONFIG, check_solver_input, check_start, config_arrays, is_traced, solve_batch
from .config import IKResult, SolverConfig

__all__ = ["FrameSolver"]


def _plain(x, shape) -> bool:
    return isinstance(x, np.ndarray) and x.shape == shape and x.dtype.kind == "f"


class FrameSolver:
    """Solve one frame at a time with the least overhead: the live-stream solver.

    The model and config are compiled into the kernel, and the results come back as one host buffer.
    The fit is the one :func:`~wuji_jax.solve` computes (the same kernel and config): an
    :class:`~wuji_jax.IKResult` whose fields are **numpy arrays** without a batch axis
    (``angles (20,)``, ``keypoints (21, 3)``, ``residual ()`` …). The same input checks apply: a
    ``ValueError`` names the problem.

    It runs on the host CPU on every machine (a frame is too small for an accelerator). Each of the
    (at most four) variants compiles on first use: with or without ``weights``, with or without
    ``q0``; its first frame compiles it and waits for it, as any JAX function's first call does;
    :func:`wuji_jax.enable_compilation_cache` keeps the compiled kernels across processes
    (``wuji-jax warmup`` fills it), and :meth:`compile` compiles them ahead of the first frame. They
    are compiled with the quick options of :func:`wuji_jax.programs.compile_options` (a one-frame
    program's compilation outweighs its run).

    Use :func:`~wuji_jax.solve` for batches, for JAX arrays, under ``jax.jit``/``grad``, and for
    ``side="auto"``.

    Args:
        hand: the model; its leaves are read once (a changed model needs a new solver).
        config: :class:`~wuji_jax.SolverConfig`; keyword ``overrides`` replace its fields.
        dtype: ``numpy.float32`` (default) or ``numpy.float64`` (needs ``jax_enable_x64``).

    Example::

        solver = wj.FrameSolver(wj.load_hand("right"))
        for landmarks in stream:                  # (21, 3) metres, one frame at a time
            res = solver(landmarks, q0=previous)  # res.angles: numpy (20,), radians
            command = wj.inspire.to_inspire(res.angles)
    """

    def __init__(self, hand: HandModel, config: SolverConfig | None = None, *, dtype=np.float32, **overrides):
        config = config or DEFAULT_CONFIG
        if overrides:
            config = dataclasses.replace(config, **overrides)
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64; got {dtype}")
        if dtype == np.float64 and not jax.config.jax_enable_x64:
            raise ValueError("dtype float64 needs jax.config.update('jax_enable_x64', True) first")
        if is_traced(*jax.tree_util.tree_leaves(hand)):
            raise ValueError("FrameSolver needs a concrete model; inside jax.jit use wj.solve")
        self.hand, self.config, self.dtype = hand, config, dtype
        #: the CPU device the kernels run on
        self.device = jax.devices("cpu")[0]
        self._consts = (jax.tree_util.tree_map(np.asarray, hand.astype(jnp.dtype(dtype))), config_arrays(config, dtype))
        self._kernels: dict[tuple[bool, bool], object] = {}
        self._layout = None  # per IKResult field: its slice of the kernel's one output, shape, dtype

    def __repr__(self):
        return f"FrameSolver({self.hand.name!r}, {self.config!r}, dtype={self.dtype.name})"

    def __call__(self, landmarks, weights=None, *, q0=None, check_units: bool = True) -> IKResult:
        """Fit one frame.

        Args:
            landmarks: ``(21, 3)`` metres, in any frame; NaN marks a missing landmark.
            weights: ``(21,)`` per-landmark confidence ≥ 0; default all ones.
            q0: ``(20,)`` starting angles, e.g. the previous frame's ``angles`` (a warm start, kept
                where it fits better than the closed-form start); default the neutral pose.
            check_units: raise if the hand looks like pixels, normalised coordinates or millimetres.

        Returns:
            :class:`~wuji_jax.IKResult` of numpy arrays (no batch axis).
        """
        dtype = self.dtype
        if _plain(landmarks, (21, 3)) and (weights is None or _plain(weights, (21,))) \
                and (q0 is None or _plain(q0, (self.hand.num_joints,))):
            # numpy float arrays of the right shapes go straight to the kernel, which also returns the
            # hand's extent and lowest x/y; the full checks run only where those look wrong
            if q0 is not None:
                check_start(self._consts[0], q0)  # (its leaves are numpy)
            args = [a.astype(dtype, copy=False) for a in (landmarks, weights, q0) if a is not None]
            flat = self._run(weights is not None, q0 is not None, args)
            return self.result(flat, landmarks, weights, q0, check_units)
        else:
            if is_traced(landmarks, weights, q0):
                raise ValueError("FrameSolver is eager (numpy results); inside jax.jit/grad use wj.solve")
            shape = np.shape(landmarks)
            if len(shape) != 2:
                raise ValueError(f"FrameSolver solves one frame of shape (21, 3); got shape {shape}"
                                 + (" (a batch: use wj.solve)" if len(shape) > 2 else ""))
            lm, weights, q0 = check_solver_input(self.hand, landmarks, weights, q0, check_units)
            args = [np.asarray(a, dtype) for a in (lm, weights, q0) if a is not None]
            flat = self._run(weights is not None, q0 is not None, args)
        return self.unpack(flat)

    def result(self, flat: np.ndarray, landmarks, weights=None, q0=None, check_units: bool = True) -> IKResult:
        """The :class:`~wuji_jax.IKResult` of a buffer of :meth:`function` for ``landmarks``, after the
        units test on the extent it carries (the full input checks run, and raise a ``ValueError``,
        only where the extent looks wrong)."""
        extent, xy_min = float(flat[-2]), float(flat[-1])
        if not (plainly_metres(extent, xy_min) or (not check_units and extent == extent)):
            check_solver_input(self.hand, landmarks, weights, q0, check_units)  # raises, or the frame is fine
        return self.unpack(flat)

    def unpack(self, flat: np.ndarray) -> IKResult:
        """A buffer of :meth:`function` as an :class:`~wuji_jax.IKResult` of numpy views (no checks)."""
        return IKResult(*[flat[s].reshape(shape) if dt is None else flat[s].astype(dt).reshape(shape)
                          for s, shape, dt in self._layout_of()])

    def angles_slice(self) -> slice:
        """Where the angles lie in a buffer of :meth:`function`."""
        return self._layout_of()[IKResult._fields.index("angles")][0]

    def _run(self, has_weights: bool, has_q0: bool, args) -> np.ndarray:
        kernel = self._kernels.get((has_weights, has_q0)) or self._compile(has_weights, has_q0)
        return np.asarray(kernel(*args))

    def function(self, weights: bool = False, q0: bool = True):
        """The pure function this solver compiles, for composing a frame's fit with what follows it in
        one program: ``(landmarks (21, 3)[, weights (21,)][, q0 (J,)]) → (F,)``, one buffer holding the
        :class:`~wuji_jax.IKResult` fields in order (:meth:`unpack`), then the hand's extent and its
        lowest x/y (metres, for the units test of :meth:`result`). The model and settings are its
        constants."""
        hand, cfg = self._consts
        dtype = self.dtype

        def fields(lm, *rest):  # the IKResult of one frame (solve's defaults where not given)
            rest = iter(rest)
            w = next(rest)[None] if weights else None
            start = next(rest)[None] if q0 else None
            return solve_batch(hand, lm[None], w, start, cfg, q0, platform="cpu")

        def kernel(lm, *rest):  # one buffer out: each output of a compiled call costs time on the host
            lo = jnp.min(lm, 0)
            span = jnp.max(lm, 0) - lo  # the checks of landmarks.unit_problem for one frame (NaN if any is)
            extent = jnp.sqrt(jnp.sum(span * span))
            return jnp.concatenate([jnp.ravel(x).astype(dtype) for x in fields(lm, *rest)]
                                   + [extent[None], jnp.min(lo[:2])[None]])

        return kernel

    def input_specs(self, weights: bool = False, q0: bool = True) -> list:
        """``jax.ShapeDtypeStruct`` of :meth:`function`'s arguments, on the host CPU."""
        on = jax.sharding.SingleDeviceSharding(self.device)
        return [jax.ShapeDtypeStruct(shape, self.dtype, sharding=on)
                for shape in [(21, 3)] + [(21,)] * weights + [(self.hand.num_joints,)] * q0]

    def _layout_of(self) -> list:
        if self._layout is None:  # the fields' shapes and dtypes are known without tracing the solver
            hand = self.hand
            n, m = hand.num_joints, len(hand.mimic_sources)
            shapes = dict(angles=(n,), coupled=(m,), rotation=(3, 3), translation=(3,), keypoints=(21, 3), errors=(21,))
            kinds = dict(valid=np.dtype(bool), converged=np.dtype(bool), iterations=np.dtype(np.int32),
                         flags=np.dtype(np.int32))
            layout, at = [], 0
            for name in IKResult._fields:
                shape = shapes.get(name, ())
                size = int(np.prod(shape, dtype=int))
                layout.append((slice(at, at + size), shape, kinds.get(name)))
                at += size
            self._layout = layout
        return self._layout

    def _compile(self, has_weights: bool, has_q0: bool):
        specs = self.input_specs(has_weights, has_q0)
        # the model and settings are constants of this program: they name it in the compilation cache
        program = cached_program(self.function(has_weights, has_q0), f"frame_solver_{self.digest()}", *specs,
                                 compiler_options=compile_options(1, "cpu"))
        made = program.lower(*specs).compile()
        self._kernels[(has_weights, has_q0)] = made
        return made

    def digest(self) -> str:
        """16 hex digits naming the model, settings and dtype compiled into the kernels."""
        h = hashlib.sha256(repr((self.config.static(), self.dtype.str, jax.tree_util.tree_structure(self._consts))).encode())
        for leaf in jax.tree_util.tree_leaves(self._consts):
            h.update(np.ascontiguousarray(leaf).tobytes())
        return h.hexdigest()[:16]

    def compile(self, weights: bool = False, q0: bool = True) -> "FrameSolver":
        """Compile the kernel of frames with or without ``weights`` and ``q0`` now (a live stream's
        first frame then runs compiled code at once); returns the solver."""
        if (weights, q0) not in self._kernels:
            self._compile(weights, q0)
        return self
