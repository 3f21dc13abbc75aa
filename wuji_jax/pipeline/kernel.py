"""The dataset runner's solver: the jitted kernel on fixed ``(batch, 21, 3)`` shapes, inputs split over
devices, compiled once per configuration and process (:class:`Kernel`), and how a job's size sets its
batch and compile options (:func:`quick_job`, :func:`default_batch`, :func:`kernel_compile_options`).
Used by :func:`wuji_jax.batch.solve_dataset` and by :mod:`wuji_jax.ray_cluster`'s workers."""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from ..runtime.cache import cached_program, quick_compile_options
from ..hand.geometry import matrix_to_quaternion
from ..runtime.programs import QUICK_JOB_FRAMES  # the rule lives in wuji_jax.programs

__all__ = ["Kernel", "QUICK_JOB_FRAMES", "quick_job", "default_batch", "kernel_compile_options"]


def quick_job(frames: int | None) -> bool:
    """Whether a job of at most ``frames`` frames (:func:`~wuji_jax.runner.reading.most_frames`, before
    the start; None: unbounded) is small enough to compile quickly (:data:`QUICK_JOB_FRAMES`)."""
    return frames is not None and frames <= QUICK_JOB_FRAMES


def kernel_compile_options(platform: str, quick: bool) -> dict | None:
    """The dataset kernel's compile options on ``platform``: a small job's
    (:func:`wuji_jax.cache.quick_compile_options`, see :func:`quick_job`), else XLA's defaults (None).
    Also part of a run's identity (they change float rounding)."""
    return quick_compile_options(platform) if quick else None


def default_batch(chunk_size: int, platform: str, devices: int, frames: int | None = None) -> int:
    """Rows per kernel call when not given: the whole chunk of ``chunk_size`` frames, except for a
    small job on CPU (``frames``, bounded before the start, at most :data:`QUICK_JOB_FRAMES`): one
    solver chunk (``chunk_frames("cpu")``) per device, so that its kernel is the solver on one chunk
    per device, without the loop over chunks, which compiles sooner (see :mod:`wuji_jax.batch`). On a
    big job the loop costs less than the calls it saves (``docs/performance.md``)."""
    from ..ik import chunk_frames

    return min(chunk_size, chunk_frames("cpu") * devices) if platform == "cpu" and quick_job(frames) else chunk_size


_USED: set = set()  # kernels run in this process (see Kernel.first_use)


@functools.lru_cache(maxsize=None)
def _with_commands(target, has_model: bool, stage: bool = False):
    """The solver and ``target``'s commands of its angles (output ``"commands"``), in one function:
    :func:`wuji_jax.ik.solve_chunked`, or with ``stage`` :func:`wuji_jax.ik.api.fit_chunked` (the second
    stage of :func:`wuji_jax.ik.api.staged_program`). With ``has_model`` the target's model and whether
    the hand is a left one are the last two positional arguments (arguments, not constants: one program
    serves both sides). The function is named for the target and method: the name names its program in
    the cache. One function per arguments (``target`` is hashable), so that the caches keyed by function
    (:func:`~wuji_jax.ik.api.split_kernel`, the solver's stages) find it again."""
    from ..ik import solve_chunked
    from ..ik.api import fit_chunked

    solver = fit_chunked if stage else solve_chunked

    def run(hand, *args, chunk: int | None = None):
        model, left = args[-2:] if has_model else (None, False)
        out = solver(hand, *(args[:-2] if has_model else args), chunk=chunk)
        return {**out, "commands": target.commands(hand, out["angles"], model, left=left)}

    run.__name__ = run.__qualname__ = f"{'fit' if stage else 'solve'}_{target.name}_{target.method}"
    return run


def _split_with_model(mesh, kernel):
    """``kernel(hand, landmarks, weights, q0, config, model, left, chunk=)`` with every device solving its
    own rows, as :func:`wuji_jax.solver.split_kernel`, the robot's model and side replicated like the hand."""
    import jax
    from jax.sharding import PartitionSpec as P

    from ..hand.geometry import summing
    from ..ik import chunk_frames

    rows = P(mesh.axis_names[0])
    platform = mesh.devices.flat[0].platform

    def per_device(*args):
        with summing(platform):
            return kernel(*args, chunk=chunk_frames(platform))

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), rows, rows, rows, P(), P(), P()), out_specs=rows,
                                 check_vma=False))


_PROGRAMS: dict[tuple, Any] = {}  # the dataset runner's compiled solver programs, per configuration (Kernel.program)


#: one lock per program key: a run that asks for a program another thread of this process is still
#: making (a failed run's preload, which goes on after the run stopped) waits for it instead of making it too
_MAKING: dict[tuple, threading.Lock] = {}


_MAKING_LOCK = threading.Lock()


class Kernel:
    """The jitted solver on fixed ``(batch, 21, 3)`` shapes, inputs sharded over ``devices``.

    ``target``: the robot hand (:class:`~wuji_jax.retarget.target.Target`) whose commands a call with
    ``commands=True`` computes in the same program; its model of a side (where it has one) is an
    argument of the program."""

    def __init__(self, config, devices, batch_size: int, dtype, quick: bool = False,
                 target=None):
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        self.jax = jax
        self.config = config
        self.devices = list(devices)
        self.batch = batch_size
        self.dtype = np.dtype(dtype)
        platforms = {d.platform for d in self.devices}
        # a small job: compiled quickly (its compilation outweighs its run, QUICK_JOB_FRAMES)
        self.options = kernel_compile_options(platforms.pop(), quick) if len(platforms) == 1 else None
        if self.devices == [jax.devices()[0]]:
            # the default device: uncommitted arrays, exactly as wj.solve passes them (same jit cache)
            self.rows = self.same = None
        else:
            mesh = Mesh(np.asarray(self.devices), ("frames",))
            self.rows = NamedSharding(mesh, PartitionSpec("frames"))
            self.same = NamedSharding(mesh, PartitionSpec())
        self.cfg = self.put(config.as_arrays(self.dtype), self.same)
        self.ones = self.put(np.ones((batch_size, 21), self.dtype), self.rows)
        self.target = target
        self._models: dict[str, Any] = {}
        self._hands: dict[str, tuple] = {}
        self._loading: tuple | None = None  # the thread making the program (preload) and its errors

    def _shape_key(self) -> tuple:
        """What the compiled program depends on besides the hand's values: rows, dtype, devices, the
        config's static fields and the compile options."""
        return (self.batch, self.dtype.name, tuple(self.devices), self.config.static(), repr(self.options),
                self.target)

    def first_use(self, side: str) -> bool:
        """Whether this process has not run the kernel for ``side`` at this shape yet (then the call
        compiles it, or loads it from the persistent cache)."""
        key = (side,) + self._shape_key()
        fresh = key not in _USED
        _USED.add(key)
        return fresh

    def put(self, x, sharding):
        if sharding is None:
            return self.jax.tree_util.tree_map(self.jax.numpy.asarray, x)
        return self.jax.device_put(x, sharding)

    def hand(self, side: str):
        if side not in self._hands:
            from ..hand.model import load_hand
            from ..ik import neutral_angles

            hand = load_hand(side)
            q0 = np.broadcast_to(np.asarray(neutral_angles(hand), self.dtype), (self.batch, hand.num_joints))
            # the kernel's copy without the static fields it never reads (as wj.solve): one program
            # for both sides
            kernel_hand = hand.replace(name="", side="")
            self._hands[side] = (hand, kernel_hand if self.same is None else self.put(kernel_hand, self.same),
                                 self.put(np.ascontiguousarray(q0), self.rows))
        return self._hands[side]

    def model(self, side: str):
        """The target's model of ``side`` (None where it has none), placed as the hand is."""
        if side not in self._models:
            model = self.target.model(side, self.dtype)
            self._models[side] = None if model is None else self.put(model, self.same)
        return self._models[side]

    def _has_model(self, commands: bool, side: str) -> bool:
        return commands and self.model(side) is not None

    def _args(self, side: str, hand, xs, q0, commands: bool) -> tuple:
        args = (hand, xs, self.ones, q0, self.cfg)
        if not self._has_model(commands, side):
            return args
        return args + (self.model(side), self.put(np.bool_(side == "left"), self.same))

    def kernel(self, commands: bool, side: str = "right"):
        """The solver as :func:`wuji_jax.solve` runs it: on one device :func:`~wuji_jax.solver.solve_chunked`
        (chunks of ``CHUNK_FRAMES`` frames, each chunk's loop stopping on its own), on several the same
        per device (``shard_map``: every device solves its own rows, no communication). A frame's
        result does not depend on the frames solved beside it. (``jit`` of the plain rows over sharded
        inputs runs one loop over all devices' rows, waiting for the slowest frame of the batch.) With ``commands`` the
        target's commands are computed in the same program (:func:`_with_commands`; the model of ``side``
        and the side, where the target has a model, the sixth and seventh arguments)."""
        from ..ik import solve_chunked, split_kernel

        if self._has_model(commands, side):
            fn = _with_commands(self.target, True)
            return fn if self.rows is None else _split_with_model(self.rows.mesh, fn)
        fn = _with_commands(self.target, False) if commands else solve_chunked
        if self.rows is None:
            return fn
        return split_kernel(self.rows.mesh, kernel=fn)

    def staged(self, commands: bool, name: str, args: tuple):
        """A quick job's solver (``self.options``): :meth:`kernel`'s program as its two stages, compiled
        side by side (:func:`wuji_jax.solver.api.staged_program`)."""
        from ..ik.api import fit_chunked, split_kernel, staged_program, start_cold

        first, second = start_cold, (_with_commands(self.target, False, stage=True) if commands else fit_chunked)
        if self.rows is not None:  # every device its own rows, as kernel()
            mesh = self.rows.mesh
            first, second = split_kernel(mesh, kernel=first), split_kernel(mesh, kernel=second, extra=1)
        return staged_program(first, second, name, args, self.options, self.rows)

    def program(self, commands: bool, args: tuple, lowered_hook=None, side: str = "right"):
        """The compiled solver for arguments shaped like ``args`` (the batch's shapes never change: made
        once per process and configuration), compiled or read from the persistent compilation cache.
        ``lowered_hook`` is called once its Python part (tracing, lowering) is done. ``side`` says
        whether the target has a model (then the model and the side are arguments: one program for both
        sides)."""
        key = (commands,) + self._shape_key()
        program = _PROGRAMS.get(key)
        if program is None:
            with _MAKING_LOCK:
                making = _MAKING.setdefault(key, threading.Lock())
            with making:  # made once per process, however many runs ask for it at the same time
                program = _PROGRAMS.get(key)
                if program is None:
                    program = _PROGRAMS[key] = self._make(commands, args, lowered_hook, side)
                    return program
        if lowered_hook is not None:
            lowered_hook()
        return program

    def _make(self, commands: bool, args: tuple, lowered_hook, side: str = "right"):
        """:meth:`program`'s compilation (or reading from the cache), done once per key. A target with a
        model makes one program (with the quick options on a small job), not the solver's two stages:
        their arguments have no place for the model."""
        if self._has_model(commands, side):
            name = _with_commands(self.target, True).__name__
            lowered = cached_program(self.kernel(commands, side), name, *args,
                                     compiler_options=self.options).lower(*args)
            if lowered_hook is not None:
                lowered_hook()
            return lowered.compile()
        name = _with_commands(self.target, False).__name__ if commands else "solve_chunked"
        if self.options:  # a quick job: its two stages, each lowered and compiled in threads of their own
            if lowered_hook is not None:
                lowered_hook()
            return self.staged(commands, name, args)
        lowered = cached_program(self.kernel(commands), name, *args).lower(*args)
        if lowered_hook is not None:
            lowered_hook()
        return lowered.compile()

    def preload(self, commands: bool, lowered_hook=None, side: str = "right") -> None:
        """Start making :meth:`program` in a thread of its own, so that its compilation, or its
        reading from the compilation cache, overlaps the inputs' hashing and first reads; :meth:`dispatch`
        waits for it. ``lowered_hook`` is called in that thread once the program is lowered: the
        writers' imports start then, so that their Python does not hold up the lowering's. The solver's
        program is the same for both hands (their models differ in array values only); ``side`` (the first
        side the job solves) is the one whose target model the program is made with."""
        if self._loading is not None:
            return
        _, hand, q0 = self.hand(side)
        xs = self.put(np.zeros((self.batch, 21, 3), self.dtype), self.rows)
        args = self._args(side, hand, xs, q0, commands)
        errors: list = []

        def make():
            try:
                self.program(commands, args, lowered_hook, side)
            except BaseException as e:  # raised by dispatch, in the caller's thread
                errors.append(e)

        # joined by wait() or settle() before the run answers; not a daemon either (a daemon thread stopped
        # inside C++ by the interpreter's teardown aborted the process: "FATAL: exception not rethrown")
        thread = threading.Thread(target=make, name="wuji_jax-program")
        thread.start()
        self._loading = (thread, errors)

    def wait(self) -> None:
        """Wait for the program :meth:`preload` is making; raises its error, if any."""
        if self._loading is not None:
            (thread, errors), self._loading = self._loading, None
            thread.join()
            if errors:
                raise errors[0]

    def settle(self) -> None:
        """Wait for the program :meth:`preload` is making, keeping its error (the run is ending: a run
        that dispatched nothing, or failed, still answers only once the thread has ended)."""
        if self._loading is not None:
            (thread, _), self._loading = self._loading, None
            thread.join()

    def dispatch(self, side: str, world: np.ndarray, commands: bool) -> list:
        """Start solving ``world (n, 21, 3)`` (with ``commands``: and the target's commands); returns the
        outputs, still being computed.

        Everything here is queued on the devices without waiting (the commands' kernel included: a
        public wrapper would wait to check the angles), so the caller writes the previous chunk while
        this one is solved.
        """
        self.wait()
        plain, hand, q0 = self.hand(side)
        n = world.shape[0]
        padded = -(-n // self.batch) * self.batch
        x = np.full((padded, 21, 3), np.nan, self.dtype)
        with np.errstate(over="ignore"):  # beyond float32: inf, a missing landmark to the solver
            x[:n] = world
        outs = []
        for s in range(0, padded, self.batch):
            xs = self.put(x[s:s + self.batch], self.rows)
            args = self._args(side, hand, xs, q0, commands)
            outs.append(self.program(commands, args, side=side)(*args))
        return outs

    def collect(self, outs: list, n: int) -> dict[str, np.ndarray]:
        """Wait for ``outs`` and return the first ``n`` rows (padding dropped), output-ready."""
        with np.errstate(over="ignore", invalid="ignore"):  # frames of huge coordinates: flagged, not warned
            return self._collect(outs, n)

    def _collect(self, outs: list, n: int) -> dict[str, np.ndarray]:
        keys = ("angles", "coupled", "rotation", "translation", "scale", "residual", "valid",
                "converged", "flags") + (("commands",) if "commands" in outs[0] else ())
        got = {k: np.concatenate([np.asarray(o[k]) for o in outs])[:n] for k in keys}
        res = {"angles": got["angles"], "coupled": got["coupled"],
               "quaternion": matrix_to_quaternion(got["rotation"]).astype(got["angles"].dtype),
               "translation": got["translation"], "scale": got["scale"],
               "residual_mm": got["residual"] * 1000.0, "valid": got["valid"],
               "converged": got["converged"], "flags": got["flags"].astype(np.int32)}
        if "commands" in got:
            res["commands"] = got["commands"].astype(got["angles"].dtype)
        return res
