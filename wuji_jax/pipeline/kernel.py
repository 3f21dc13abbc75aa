"""The dataset runner's solver: the jitted kernel on fixed ``(batch, 21, 3)`` shapes, inputs split over
devices, compiled once per configuration and process (:class:`Kernel`), and how a job's size sets its
batch and compile options (:func:`quick_job`, :func:`default_batch`, :func:`kernel_compile_options`).
Used by :func:`wuji_jax.batch.solve_dataset` and by :mod:`wuji_jax.ray_cluster`'s workers."""

from __future__ import annotations

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


def _solve_with_inspire(hand, landmarks, weights, q0, config, chunk: int | None = None) -> dict:
    """:func:`wuji_jax.solver.solve_chunked` and the Inspire commands of its angles, in one program:
    a second call, on the solver's outputs split over several devices, waited for the solver before
    it returned, where one device's call returns at once."""
    from ..ik import solve_chunked

    return _with_inspire(hand, solve_chunked(hand, landmarks, weights, q0, config, chunk=chunk))


def _fit_with_inspire(hand, landmarks, weights, q0, config, start, chunk: int | None = None) -> dict:
    """:func:`_solve_with_inspire`'s second stage (:func:`wuji_jax.solver.api.staged_program`)."""
    from ..ik.api import fit_chunked

    return _with_inspire(hand, fit_chunked(hand, landmarks, weights, q0, config, start, chunk=chunk))


def _with_inspire(hand, out: dict) -> dict:
    """The solver's outputs with the Inspire commands of their angles."""
    from ..retarget.inspire import to_inspire_kernel

    return {**out, "inspire": to_inspire_kernel(hand, out["angles"], None)}


def _solve_with_retarget(hand, landmarks, weights, q0, config, robot, chunk: int | None = None,
                         left: bool = False) -> dict:
    """:func:`wuji_jax.solver.solve_chunked` and the task-space Inspire commands of its angles
    (:func:`wuji_jax.inspire.retarget_kernel`, default settings) in one program; ``robot`` the
    :class:`~wuji_jax.inspire.InspireHand`, an argument (its values are not constants of the program);
    ``left`` mirrors a left hand's keypoints for the robot (static: the kernel's hand has no side)."""
    from ..retarget.inspire import RetargetConfig, retarget_kernel
    from ..ik import solve_chunked

    out = solve_chunked(hand, landmarks, weights, q0, config, chunk=chunk)
    return {**out, "inspire": retarget_kernel(hand, robot, out["angles"], None, None, RetargetConfig(), left=left)}


def _solve_right_retarget(hand, landmarks, weights, q0, config, robot, chunk: int | None = None) -> dict:
    """:func:`_solve_with_retarget` for a right hand (a function of its own: it names its program)."""
    return _solve_with_retarget(hand, landmarks, weights, q0, config, robot, chunk, False)


def _solve_left_retarget(hand, landmarks, weights, q0, config, robot, chunk: int | None = None) -> dict:
    """:func:`_solve_with_retarget` for a left hand."""
    return _solve_with_retarget(hand, landmarks, weights, q0, config, robot, chunk, True)


def _split_with_robot(mesh, kernel):
    """``kernel(hand, landmarks, weights, q0, config, robot, chunk=)`` with every device solving its own
    rows, as :func:`wuji_jax.solver.split_kernel`, the robot replicated like the hand."""
    import jax
    from jax.sharding import PartitionSpec as P

    from ..hand.geometry import summing
    from ..ik import chunk_frames

    rows = P(mesh.axis_names[0])
    platform = mesh.devices.flat[0].platform

    def per_device(*args):
        with summing(platform):
            return kernel(*args, chunk=chunk_frames(platform))

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(), rows, rows, rows, P(), P()), out_specs=rows,
                                 check_vma=False))


_PROGRAMS: dict[tuple, Any] = {}  # the dataset runner's compiled solver programs, per configuration (Kernel.program)


#: one lock per program key: a run that asks for a program another thread of this process is still
#: making (a failed run's preload, which goes on after the run stopped) waits for it instead of making it too
_MAKING: dict[tuple, threading.Lock] = {}


_MAKING_LOCK = threading.Lock()


class Kernel:
    """The jitted solver on fixed ``(batch, 21, 3)`` shapes, inputs sharded over ``devices``.

    ``retarget``: ``{side: Inspire URDF path}``: the Inspire commands (``inspire=True``) by the task-space
    retarget with the model read from that file, an argument of the program; None: by the joint map
    (``to_inspire``)."""

    def __init__(self, config, devices, batch_size: int, dtype, quick: bool = False,
                 retarget: dict | None = None):
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
        self.retarget = dict(retarget) if retarget else None
        self._robots: dict[str, Any] = {}
        self._hands: dict[str, tuple] = {}
        self._loading: tuple | None = None  # the thread making the program (preload) and its errors

    def _shape_key(self) -> tuple:
        """What the compiled program depends on besides the hand's values: rows, dtype, devices, the
        config's static fields and the compile options."""
        return (self.batch, self.dtype.name, tuple(self.devices), self.config.static(), repr(self.options),
                None if self.retarget is None else tuple(sorted((k, str(v)) for k, v in self.retarget.items())))

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

    def robot(self, side: str):
        """The Inspire hand of ``side``'s URDF (``self.retarget``), placed as the hand is."""
        if side not in self._robots:
            from ..retarget.inspire import load_inspire_hand

            robot = load_inspire_hand(self.retarget[side], side).astype(self.dtype)
            self._robots[side] = self.put(robot, self.same)
        return self._robots[side]

    def _args(self, side: str, hand, xs, q0, inspire: bool) -> tuple:
        args = (hand, xs, self.ones, q0, self.cfg)
        return args + (self.robot(side),) if inspire and self.retarget else args

    def kernel(self, inspire: bool, side: str = "right"):
        """The solver as :func:`wuji_jax.solve` runs it: on one device :func:`~wuji_jax.solver.solve_chunked`
        (chunks of ``CHUNK_FRAMES`` frames, each chunk's loop stopping on its own), on several the same
        per device (``shard_map``: every device solves its own rows, no communication). A frame's
        result does not depend on the frames solved beside it. (``jit`` of the plain rows over sharded
        inputs runs one loop over all devices' rows, waiting for the slowest frame of the batch.) With ``inspire`` the Inspire
        commands are computed in the same program (:func:`_solve_with_inspire`; with :attr:`retarget`,
        :func:`_solve_with_retarget` of ``side``, the robot the sixth argument)."""
        from ..ik import solve_chunked, split_kernel

        if inspire and self.retarget:
            fn = _solve_left_retarget if side == "left" else _solve_right_retarget
            return fn if self.rows is None else _split_with_robot(self.rows.mesh, fn)
        fn = _solve_with_inspire if inspire else solve_chunked
        if self.rows is None:
            return fn
        return split_kernel(self.rows.mesh, kernel=fn)

    def staged(self, inspire: bool, name: str, args: tuple):
        """A quick job's solver (``self.options``): :meth:`kernel`'s program as its two stages, compiled
        side by side (:func:`wuji_jax.solver.api.staged_program`)."""
        from ..ik.api import fit_chunked, split_kernel, staged_program, start_cold

        first, second = start_cold, (_fit_with_inspire if inspire else fit_chunked)
        if self.rows is not None:  # every device its own rows, as kernel()
            mesh = self.rows.mesh
            first, second = split_kernel(mesh, kernel=first), split_kernel(mesh, kernel=second, extra=1)
        return staged_program(first, second, name, args, self.options, self.rows)

    def program(self, inspire: bool, args: tuple, lowered_hook=None, side: str = "right"):
        """The compiled solver for arguments shaped like ``args`` (the batch's shapes never change: made
        once per process and configuration), compiled or read from the persistent compilation cache.
        ``lowered_hook`` is called once its Python part (tracing, lowering) is done. ``side`` matters only
        to the retarget (a left hand's keypoints are mirrored)."""
        key = (inspire, side if inspire and self.retarget else None) + self._shape_key()
        program = _PROGRAMS.get(key)
        if program is None:
            with _MAKING_LOCK:
                making = _MAKING.setdefault(key, threading.Lock())
            with making:  # made once per process, however many runs ask for it at the same time
                program = _PROGRAMS.get(key)
                if program is None:
                    program = _PROGRAMS[key] = self._make(inspire, args, lowered_hook, side)
                    return program
        if lowered_hook is not None:
            lowered_hook()
        return program

    def _make(self, inspire: bool, args: tuple, lowered_hook, side: str = "right"):
        """:meth:`program`'s compilation (or reading from the cache), done once per key. The retarget's
        program is one program (with the quick options on a small job), not the solver's two stages:
        their arguments have no place for the robot."""
        if inspire and self.retarget:
            name = f"solve_retarget_{side}"
            lowered = cached_program(self.kernel(inspire, side), name, *args,
                                     compiler_options=self.options).lower(*args)
            if lowered_hook is not None:
                lowered_hook()
            return lowered.compile()
        name = "solve_inspire" if inspire else "solve_chunked"
        if self.options:  # a quick job: its two stages, each lowered and compiled in threads of their own
            if lowered_hook is not None:
                lowered_hook()
            return self.staged(inspire, name, args)
        lowered = cached_program(self.kernel(inspire), name, *args).lower(*args)
        if lowered_hook is not None:
            lowered_hook()
        return lowered.compile()

    def preload(self, inspire: bool, lowered_hook=None) -> None:
        """Start making :meth:`program` in a thread of its own, so that its compilation, or its
        reading from the compilation cache, overlaps the inputs' hashing and first reads; :meth:`dispatch`
        waits for it. ``lowered_hook`` is called in that thread once the program is lowered: the
        writers' imports start then, so that their Python does not hold up the lowering's. The program is the same for both hands (their models
        differ in array values only), so the right hand's shapes stand for either."""
        if self._loading is not None:
            return
        side = "right" if not self.retarget or "right" in self.retarget else next(iter(self.retarget))
        _, hand, q0 = self.hand(side)
        xs = self.put(np.zeros((self.batch, 21, 3), self.dtype), self.rows)
        args = self._args(side, hand, xs, q0, inspire)
        errors: list = []

        def make():
            try:
                self.program(inspire, args, lowered_hook, side)
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

    def dispatch(self, side: str, world: np.ndarray, inspire: bool) -> list:
        """Start solving ``world (n, 21, 3)``; returns the outputs, still being computed.

        Everything here is queued on the devices without waiting (``to_inspire``'s kernel included:
        its public wrapper would wait to check the angles), so the caller writes the previous chunk
        while this one is solved.
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
            args = self._args(side, hand, xs, q0, inspire)
            outs.append(self.program(inspire, args, side=side)(*args))
        return outs

    def collect(self, outs: list, n: int) -> dict[str, np.ndarray]:
        """Wait for ``outs`` and return the first ``n`` rows (padding dropped), output-ready."""
        with np.errstate(over="ignore", invalid="ignore"):  # frames of huge coordinates: flagged, not warned
            return self._collect(outs, n)

    def _collect(self, outs: list, n: int) -> dict[str, np.ndarray]:
        keys = ("angles", "coupled", "rotation", "translation", "scale", "residual", "valid",
                "converged", "flags") + (("inspire",) if "inspire" in outs[0] else ())
        got = {k: np.concatenate([np.asarray(o[k]) for o in outs])[:n] for k in keys}
        res = {"angles": got["angles"], "coupled": got["coupled"],
               "quaternion": matrix_to_quaternion(got["rotation"]).astype(got["angles"].dtype),
               "translation": got["translation"], "scale": got["scale"],
               "residual_mm": got["residual"] * 1000.0, "valid": got["valid"],
               "converged": got["converged"], "flags": got["flags"].astype(np.int32)}
        if "inspire" in got:
            res["inspire"] = got["inspire"].astype(got["angles"].dtype)
        return res
