"""Live streams: one frame at a time, with the least overhead per call (camera → robot hand).

:func:`wuji_jax.solve` takes any batch, under any JAX transformation, and returns JAX arrays. For one
frame that generality has a price: the model, its link constants and the solver's weights travel as
26 arrays per call, and the twelve results come back as twelve device arrays (each ~3 µs to make,
wait for and free). :class:`FrameSolver` compiles one model and config into the kernel once, and
returns the results as one host buffer, split into numpy views: alternated in one process on 2 CPU
cores, 0.327 → 0.278 ms median per frame (``benchmarks/bench_latency.py``).

Then, for the remaining time of a call, on 2 CPU cores (each step alternated in one process with the
code before it, 60 rounds × 30 calls on the bundled recording; medians):

1. The LM loop is compiled as one function. XLA:CPU runs a program as a sequence of small kernels
   ("thunks"); at one frame the loop body is ~160 of them per iteration. A while loop whose buffers
   are small is emitted as a single function instead (``xla_cpu_small_while_loop_byte_threshold`` in
   ``xla_backend_extra_options``, default 1 KB); :func:`_compile_whole_loops` raises the threshold
   while this kernel compiles. Kernel alone: 264 → 207 µs. Not for batches: at batch 1024 the loop as
   one function ran at 52,000 frames/s against 72,000 as thunks.
2. Input checks after the kernel: numpy float inputs of the right shapes go straight to the kernel,
   which also returns the hand's extent and lowest x/y; the full checks (26 µs) run only where those
   look wrong. With step 1: 234.6 → 169.8 µs per call.
3. The kernel runs on the calling thread. JAX's CPU client hands every computation above ~1,000
   flops to a worker thread and wakes the caller when it is done; FrameSolver compiles for a CPU
   device of its own client, made with ``asynchronous=False`` (:func:`_inline_cpu_device`).
4. The whole frame is one function: :func:`_once` puts the kernel in a loop that runs once, so the
   ~140 small kernels before the LM loop (palm pose, closed-form angles, first forward pass) go into
   the same function. Steps 3 and 4: 178.6 → 162.0 → 128.8 µs per call (p10 134 → 88 → 74 µs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np

from .landmarks import _plainly_metres
from .model import HandModel
from .solver import (
    _DEFAULT_CONFIG,
    IKResult,
    SolverConfig,
    _is_traced,
    _params_of,
    _solve_any,
    _traced_config,
    _validate,
)

__all__ = ["FrameSolver"]


def _proto_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2): tag, length, payload."""
    def varint(n):
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


# CompileOptionsProto.executable_build_options (3) → ExecutableBuildOptionsProto.debug_options (3) →
# DebugOptions.xla_backend_extra_options (500, map<string, string>): one entry. Appended to serialized
# options it is merged into them (protobuf merges repeated occurrences of a message field).
_WHOLE_LOOPS = _proto_field(3, _proto_field(3, _proto_field(
    500, _proto_field(1, b"xla_cpu_small_while_loop_byte_threshold") + _proto_field(2, str(1 << 40).encode()))))
_COMPILE_LOCK = threading.Lock()


@contextlib.contextmanager
def _whole_loops():
    """While active, XLA:CPU compiles every while loop as one function (see the module docstring).

    JAX's ``compiler_options`` cannot set ``xla_backend_extra_options`` (a map), so this wraps
    ``jax._src.compiler.get_compile_options`` for the duration. A compilation by another thread in the
    meantime gets the same option: it changes how loops run, not what they compute.
    """
    from jax._src import compiler
    from jax._src.lib import xla_client

    make = compiler.get_compile_options

    def with_whole_loops(*args, **kwargs):
        options = make(*args, **kwargs)
        return xla_client.CompileOptions.ParseFromString(options.SerializeAsString() + _WHOLE_LOOPS)

    with _COMPILE_LOCK:
        compiler.get_compile_options = with_whole_loops
        try:
            yield
        finally:
            compiler.get_compile_options = make


def _compile_whole_loops(fn, *specs):
    """``fn`` compiled for ``specs`` (their shardings name the device), its while loops each one
    kernel where XLA:CPU can: ``(compiled, True)``; ``(compiled, False)`` off CPU or where this JAX's
    internals differ (the plain compile, the same results)."""
    platforms = {d.platform for s in specs if s.sharding is not None for d in s.sharding.device_set}
    # a new function object: JAX caches compilations per function, and one of ``fn`` made before
    # would be returned as it is
    jitted = jax.jit(lambda *args: fn(*args))
    if (platforms or {jax.default_backend()}) == {"cpu"}:
        try:
            with _whole_loops():
                compiled = jitted.lower(*specs).compile()
            return compiled, 'xla_cpu_small_call="true"' in compiled.as_text()
        except Exception:  # noqa: BLE001 — an internal API of another JAX version: fall back, same results
            pass
    return jitted.lower(*specs).compile(), False


def _once(fn):
    """``fn(x, *rest)`` (one array out) as the body of a while loop that runs once, and that XLA can
    neither drop nor hoist ``fn`` out of: compiled with :func:`_whole_loops`, the whole program is then
    one function on XLA:CPU instead of a sequence of ~140 small kernels before the LM loop.

    XLA removes a loop whose trip count it knows to be 1 and moves out of a loop what does not change
    in it, so the start and the input go through values its simplifier does not fold: ``x != x and
    x == x`` (false) and ``x + 0·i`` (``x``). The results are ``fn``'s, to float rounding.
    """
    def once(x, *rest):
        out = jax.eval_shape(fn, x, *rest)
        first = jnp.ravel(x)[0]
        start = ((first != first) & (first == first)).astype(jnp.int32)  # 0

        def body(carry):
            i, _ = carry
            return i + 1, fn(x + i.astype(x.dtype) * 0, *rest)

        return jax.lax.while_loop(lambda c: c[0] < 1, body, (start, jnp.zeros(out.shape, out.dtype)))[1]

    return once


_INLINE_CPU: list = []  # the one device of :func:`_inline_cpu_device`, made on first use
_INLINE_LOCK = threading.Lock()


def _inline_cpu_device():
    """``(device, inline)``: a CPU device whose computations run on the calling thread (``inline``),
    or JAX's first CPU device where this jaxlib cannot make one.

    JAX's CPU client hands each computation above ~1,000 flops to a worker thread and wakes the caller
    when it is done (``jax_cpu_enable_async_dispatch``, on by default for the whole process). For one
    frame that hand-off costs about as much as the call itself (186 → 95 µs median per call on 2 CPU
    cores, alternated in one process). A second PjRt CPU client made with
    ``asynchronous=False`` runs each call on the calling thread instead; JAX compiles for and transfers
    to its device like any other. It serves only :class:`FrameSolver` and leaves the process's setting
    alone.
    """
    with _INLINE_LOCK:
        if not _INLINE_CPU:
            try:
                from jax._src.lib import xla_client

                _INLINE_CPU.append((xla_client.make_cpu_client(asynchronous=False, num_devices=1)
                                    .local_devices()[0], True))
            except Exception:  # noqa: BLE001 — another jaxlib: JAX's own CPU device, same results
                _INLINE_CPU.append((jax.devices("cpu")[0], False))
        return _INLINE_CPU[0]


def _plain(x, shape) -> bool:
    """``x`` is a numpy float array of ``shape``."""
    return type(x) is np.ndarray and x.shape == shape and x.dtype.kind == "f"


class FrameSolver:
    """:func:`wuji_jax.solve` for one frame at a time, with the least overhead per call.

    Made once per model and config (``FrameSolver(hand)``), then called on each frame as it arrives
    (``solver(landmarks)``): for live streams, such as a camera driving a robot hand. The model's
    constants are compiled into the kernel, and the results come back as one host buffer.

    The fit is the one :func:`~wuji_jax.solve` computes (the same kernel and config): an
    :class:`~wuji_jax.IKResult` whose fields are **numpy arrays** without a batch axis
    (``angles (20,)``, ``keypoints (21, 3)``, ``residual ()`` …). The same input checks apply:
    a ``ValueError`` names the problem.

    It runs on the host CPU on every machine, GPU machines included (not measured there), on
    the calling thread (:attr:`inline`, on a :attr:`device` of its own client), with the whole frame
    compiled as one function (:attr:`whole_loop_kernels`, per compiled variant). The module docstring
    says why and what each step saved. Where this JAX version allows neither, the kernel is compiled as
    :func:`~wuji_jax.solve`'s is and runs on JAX's own CPU device, with the same results.

    Use :func:`~wuji_jax.solve` for batches, for JAX arrays, under ``jax.jit``/``grad``, and for
    ``side="auto"``. Each of the (at most four) variants compiles on first use: with or without
    ``weights``, with or without ``q0``. One function for the whole frame takes LLVM longer to
    optimise: a first call took 22.7 s on 2 CPU cores, against 13.9 s with the start as separate
    kernels (JAX's persistent compilation cache, where enabled, keeps it across processes).

    Args:
        hand: the model; its leaves are read once (a changed model needs a new solver).
        config: :class:`~wuji_jax.SolverConfig`; keyword ``overrides`` replace its fields.
        dtype: ``numpy.float32`` (default) or ``numpy.float64`` (needs ``jax_enable_x64``).

    Example::

        solver = wj.FrameSolver(wj.load_hand("right"))
        for landmarks in stream:                  # (21, 3) metres, one frame at a time
            res = solver(landmarks)               # res.angles: numpy (20,), radians
            command = wj.inspire.to_inspire(res.angles)
    """

    def __init__(self, hand: HandModel, config: SolverConfig | None = None, *, dtype=np.float32, **overrides):
        config = config or _DEFAULT_CONFIG
        if overrides:
            config = dataclasses.replace(config, **overrides)
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64; got {dtype}")
        if dtype == np.float64 and not jax.config.jax_enable_x64:
            raise ValueError("dtype float64 needs jax.config.update('jax_enable_x64', True) first")
        params = _params_of(hand, dtype)
        if params is None:
            raise ValueError("FrameSolver needs a concrete model; inside jax.jit use wj.solve")
        self.hand, self.config, self.dtype = hand, config, dtype
        # numpy copies: compiled into the kernel as constants (each ≤ 512 bytes as the kernel needs,
        # see solver._Params)
        to_np = lambda t: jax.tree_util.tree_map(np.asarray, t)  # noqa: E731
        self._consts = (to_np(hand.astype(jnp.dtype(dtype))), to_np(params), _traced_config(config, dtype))
        self._kernels = {}
        #: per compiled variant ``(has_weights, has_q0)``: whether the whole frame runs as one function
        self.whole_loop_kernels: dict[tuple[bool, bool], bool] = {}
        self._layout = None  # where each IKResult field lies in the kernel's one output
        #: the CPU device the kernels run on, and whether it runs them on the calling thread
        self.device, self.inline = _inline_cpu_device()

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
            # the common case: numpy float arrays of the right shapes. The kernel also returns the
            # hand's extent and lowest x/y, and the full checks run only where those look wrong
            # (the numpy checks before the call cost ~25 µs; the solver is safe on any input)
            args = [landmarks.astype(dtype, copy=False)] + [a.astype(dtype, copy=False) for a in (weights, q0)
                                                              if a is not None]
            flat = self._run(weights is not None, q0 is not None, args)
            extent, xy_min = float(flat[-2]), float(flat[-1])
            if not (_plainly_metres(extent, xy_min) or (not check_units and extent == extent)):
                _validate(self.hand, landmarks, weights, q0, check_units)  # raises, or the frame is fine
        else:
            if _is_traced(landmarks, weights, q0):
                raise ValueError("FrameSolver is eager (numpy results); inside jax.jit/grad use wj.solve")
            shape = np.shape(landmarks)
            if len(shape) != 2:
                raise ValueError(f"FrameSolver solves one frame of shape (21, 3); got shape {shape}"
                                 + (" (a batch: use wj.solve)" if len(shape) > 2 else ""))
            lm, weights, q0a = _validate(self.hand, landmarks, weights, q0, check_units)
            args = [np.asarray(a, dtype) for a in (lm, weights, q0a) if a is not None]
            flat = self._run(weights is not None, q0a is not None, args)
        return IKResult(*[flat[s].reshape(shape) if dt is None else flat[s].astype(dt).reshape(shape)
                          for s, shape, dt in self._layout])

    def _run(self, has_weights: bool, has_q0: bool, args) -> np.ndarray:
        """The variant's kernel on ``args`` (arrays of the solver's dtype) → its one host buffer."""
        kernel = self._kernels.get((has_weights, has_q0)) or self._compile(has_weights, has_q0)
        return np.asarray(kernel(*args))

    def _compile(self, has_weights: bool, has_q0: bool):
        hand, params, cfg = self._consts
        static, dtype = self.config._static(), self.dtype

        def pieces(lm, *rest):  # the IKResult of one frame (the defaults of solve where not given)
            rest = iter(rest)
            w = next(rest) if has_weights else None
            q0 = next(rest) if has_q0 else None
            return _solve_any(hand, lm, w, q0, static, cfg, warm=has_q0, params=params)

        def kernel(lm, *rest):  # one buffer out: each output of a compiled call costs ~3 µs on the host
            lo = jnp.min(lm, 0)
            span = jnp.max(lm, 0) - lo  # the checks of landmarks.unit_problem for one frame (NaN if any is)
            extent = jnp.sqrt(jnp.sum(span * span))
            return jnp.concatenate([jnp.ravel(x).astype(dtype) for x in pieces(lm, *rest)]
                                   + [extent[None], jnp.min(lo[:2])[None]])

        on = jax.sharding.SingleDeviceSharding(self.device)
        specs = [jax.ShapeDtypeStruct(shape, dtype, sharding=on)
                 for shape in [(21, 3)] + [(21,)] * has_weights + [(hand.num_joints,)] * has_q0]
        if self._layout is None:
            layout, at = [], 0  # per field: its slice of the buffer, shape, dtype if not the buffer's
            for s in jax.eval_shape(pieces, *specs):
                size = int(np.prod(s.shape))
                layout.append((slice(at, at + size), s.shape, None if s.dtype == dtype else np.dtype(s.dtype)))
                at += size
            self._layout = layout
        compiled, whole = _compile_whole_loops(_once(kernel), *specs)
        self._kernels[(has_weights, has_q0)] = compiled
        self.whole_loop_kernels[(has_weights, has_q0)] = whole
        return compiled
