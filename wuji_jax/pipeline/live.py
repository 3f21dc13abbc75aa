"""Live: a camera, a video file or a stream → MediaPipe → :class:`~wuji_jax.FrameSolver` → Inspire commands.

The pipeline behind ``wuji-jax live``, as an iterator of commands, so that a ROS node or a learning loop
runs the same code::

    import wuji_jax.live as live

    with live.Live(0, side="auto") as stream:      # camera 0; a video file or a stream URL work too
        for cmd in stream:                         # one LiveCommand per frame that gives a command
            publish(cmd.message)                   # the /inspire_hand/ctrl/<side>_hand JointState dict
    print(stream.summary())                        # frames read, dropped, sent, ...; latency per stage

Per frame:

1. **capture**: a reader thread takes frames from the source as it delivers them. A video file is
   played at its own frame rate, as a camera would deliver it (``as_fast_as_possible=True`` reads it
   without waiting, in the pipeline's thread, and drops nothing). A frame that arrives while the
   pipeline is still busy replaces the one waiting (the latest wins); the replaced one is counted as
   dropped.
2. **mediapipe**: MediaPipe Tasks' hand landmarker in VIDEO mode (it tracks the hand from frame to
   frame; the latest-wins reader does what LIVE_STREAM mode would, synchronously, so the stage is timed
   on its own), with the packaged ``hand_landmarker.task`` (:func:`wuji_jax.video.resolve_model_path`).
   One hand; its world landmarks (metres) are fitted.
3. **solve**: :class:`~wuji_jax.FrameSolver`'s fit, warm-started from the last fitted frame, and the
   command map (:func:`command_map`: six opening fractions, smoothed and limited to the motors' speed as
   :class:`wuji_jax.inspire.InspireStream` does; seed 003: full travel takes ``0.8 s / speed_ratio``),
   in one compiled call a frame. One fit, the right hand's, serves both sides: a left hand's landmarks
   are mirrored (x → −x) and fitted as a right hand's, which gives the left model's angles (the left
   model is the right one mirrored; on the bundled sample's first 300 frames the two fits' angles
   differ by at most 4e-6 rad, float32 rounding).
4. **command**: the fit's checks (a flagged frame sends nothing), then the command's state is kept and
   its message made.
5. **publish**: the outputs given (:mod:`wuji_jax.live_outputs`: JSON lines, a ROS 2 bag, UDP).

A frame without a hand is *lost*: by default the last command is sent again (``on_lost="hold"``),
or nothing (``"skip"``), or the hand is opened at the rate limit (``"open"``). A frame the solver
flags (``valid`` False, or a :data:`wuji_jax.solver.FLAG_NAMES` flag not in ``accept_flags``) sends
nothing and is *held back* (the rule of ``wuji-jax inspire --accept-flags``).

Everything that compiles (one program a frame, the fit and the command map together, which serves
both sides: the side's hand, robot model and side are its arguments) is compiled before the first
frame is taken, or read from the compilation cache (:func:`wuji_jax.enable_compilation_cache`;
``wuji-jax warmup`` fills it), so the first frames run at full speed.

Stamps: ``stamp = start_time + t`` seconds, with ``t`` the frame's time in the stream (a file's own
times; a camera's time of capture) and ``start_time`` the wall-clock time (Unix seconds) when the
first frame was taken, unless given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

__all__ = ["Frame", "LiveCommand", "LiveStats", "CommandMap", "Live", "command_map", "compile_programs",
           "flag_bits",
           "open_capture", "STAGES", "ON_LOST"]

#: The timed stages, in pipeline order (``total``: from a frame's arrival to its command published;
#: ``compute``: solve + command + publish of one frame).
STAGES = ("capture", "queue", "mediapipe", "solve", "command", "publish", "compute", "total")
_MIRROR = np.asarray([-1.0, 1.0, 1.0], np.float32)  # x -> -x: a left hand's landmarks as a right hand's
#: What a frame without a hand sends: the last command again, nothing, or an opening hand.
ON_LOST = ("hold", "skip", "open")
_STAMP_LIMIT = 2**31 - 1  # ROS 2 stamps: int32 seconds


def flag_bits(names: str | Iterable[str] | int | None) -> int:
    """The bit set of solver flags named by ``names`` (comma-separated text, names, or a bit set as is).

    Names are :data:`wuji_jax.solver.FLAG_NAMES`' values (``mirrored``, ``high_residual``, ...), the
    names ``wuji-jax inspire --accept-flags`` takes. Raises ``ValueError`` naming an unknown one.
    """
    from ..ik.config import FLAG_NAMES

    if names is None:
        return 0
    if isinstance(names, (int, np.integer)):
        return int(names)
    items = names.split(",") if isinstance(names, str) else list(names)
    bits = {name: bit for bit, name in FLAG_NAMES.items()}
    out = 0
    for name in (str(n).strip() for n in items):
        if not name:
            continue
        if name not in bits:
            raise ValueError(f"unknown flag {name!r}; the solver's flags are {', '.join(bits)}")
        out |= bits[name]
    return out


# ------------------------------------------------------------------------------------------------
# Sources
# ------------------------------------------------------------------------------------------------


def _camera_index(source) -> int | None:
    if isinstance(source, bool):
        return None
    if isinstance(source, (int, np.integer)):
        return int(source)
    if isinstance(source, str) and source.strip().isdigit():
        return int(source.strip())
    return None


def open_capture(source: int | str | os.PathLike = 0):
    """Open ``source`` with OpenCV: ``(capture, label, live)``.

    Args:
        source: a camera index (``int``, or a string of digits), a stream URL (``scheme://...``), or a
            video file.

    Returns:
        the opened ``cv2.VideoCapture``, a label for messages (``"camera 0"``, the URL or the path), and
        whether the source delivers frames in real time by itself (a camera or a stream: True; a file:
        False, played at its frame rate by :class:`Live`).

    Raises:
        ValueError: one line, for a camera that cannot be opened, a URL that gives no stream, a missing
            or empty file, or a file OpenCV cannot decode.
        ImportError: OpenCV or mediapipe missing.
    """
    from ..data.video import QuietNative, import_mediapipe

    cv2 = import_mediapipe()[0]
    index = _camera_index(source)
    text = os.fspath(source) if index is None else ""
    url = index is None and "://" in text
    if index is not None:
        label = f"camera {index}"
    elif url:
        label = text
    else:
        label = text
        if os.path.isdir(text):
            raise ValueError(f"{text}: is a folder; give a camera index, a video file or a stream URL")
        if not os.path.isfile(text):
            raise ValueError(f"{text}: no such file (a camera is given by its index, a stream by its URL)")
        if os.path.getsize(text) == 0:
            raise ValueError(f"{text}: the file is empty (0 bytes)")
    with QuietNative():  # OpenCV's and FFmpeg's own lines for a source that will not open
        cap = cv2.VideoCapture(index if index is not None else text)
        ok = cap.isOpened()
    if not ok:
        cap.release()
        if index is not None:
            raise ValueError(f"camera {index}: cannot be opened; check the index and that no other program "
                             "holds the camera")
        if url:
            raise ValueError(f"{text}: cannot be opened as a stream; check the URL and that the stream is up")
        raise ValueError(f"{text}: cannot be opened as a video (OpenCV found no decoder); check that the file "
                         "plays, or convert it to H.264 .mp4")
    return cap, label, index is not None or url


@dataclasses.dataclass
class Frame:
    """One frame as the reader delivered it.

    Attributes:
        index: its number in the source, from 0 (dropped frames keep theirs: gaps show drops).
        image: ``(H, W, 3)`` uint8 BGR.
        t: seconds in the stream: the file's own time of the frame, or a live source's time of capture
            since its first frame.
        arrived: ``time.perf_counter()`` when the frame became available to the pipeline.
        capture: seconds the source took to deliver it (decoding, or waiting for the camera).
    """

    index: int
    image: np.ndarray
    t: float
    arrived: float
    capture: float


class _Capture:
    """Reads ``(image, t)`` from an opened capture; ``t`` as :attr:`Frame.t`."""

    def __init__(self, cv2, cap, live: bool):
        self.cv2, self.cap, self.live = cv2, cap, live
        native = cap.get(cv2.CAP_PROP_FPS)
        self.fps = float(native) if native and math.isfinite(native) and 0 < native < 1000 else 30.0
        self.last_t = -math.inf
        self.t0: float | None = None
        self.n = 0

    def read(self) -> tuple[np.ndarray, float] | None:
        ok, image = self.cap.read()
        if not ok or image is None:
            return None
        if self.live:
            now = time.perf_counter()
            self.t0 = now if self.t0 is None else self.t0
            t = now - self.t0
        else:  # the container's time where it has one that moves forward, else frame / fps
            pos = self.cap.get(self.cv2.CAP_PROP_POS_MSEC) / 1000.0
            if self.n == 0:
                t = pos if (math.isfinite(pos) and pos >= 0) else 0.0
            elif math.isfinite(pos) and pos > self.last_t:
                t = pos
            else:
                t = self.last_t + 1.0 / self.fps
        self.last_t = t
        self.n += 1
        return image, t


class _Reader:
    """Frames for the pipeline: from a thread that keeps only the latest (``threaded``), or read on
    demand. ``paced``: a file's frame becomes available at its own time after the first frame's."""

    def __init__(self, capture: _Capture, max_frames: int | None, threaded: bool, paced: bool):
        self.capture, self.max_frames, self.threaded, self.paced = capture, max_frames, threaded, paced
        self.read = self.dropped = 0
        self.capture_seconds: list[float] = []
        self._slot: Frame | None = None
        self._done = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: tuple[float, float] | None = None  # (perf_counter, t) of the first frame, when paced

    def start(self) -> None:
        if self.threaded:
            self._thread = threading.Thread(target=self._run, name="wuji-jax-live-reader", daemon=True)
            self._thread.start()

    def _next(self) -> Frame | None:
        if self.max_frames is not None and self.read >= self.max_frames:
            return None
        a = time.perf_counter()
        got = self.capture.read()
        b = time.perf_counter()
        if got is None:
            return None
        image, t = got
        if self.paced:
            if self._first is None:
                self._first = (b, t)
            due = self._first[0] + (t - self._first[1])
            if due > b:
                self._stop.wait(due - b)
        frame = Frame(self.read, image, t, time.perf_counter(), b - a)
        self.read += 1
        self.capture_seconds.append(b - a)
        return frame

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                frame = self._next()
                if frame is None:
                    break
                with self._cond:
                    if self._slot is not None:
                        self.dropped += 1
                    self._slot = frame
                    self._cond.notify()
        except BaseException as e:  # handed to the pipeline's thread by get()
            self._error = e
        finally:
            with self._cond:
                self._done = True
                self._cond.notify()

    def get(self, stop: Callable[[], bool] = lambda: False) -> Frame | None:
        """The next frame (the latest one delivered), or None at the end of the source or once ``stop()``."""
        if not self.threaded:
            return None if stop() else self._next()
        with self._cond:
            while self._slot is None and not self._done and not stop():
                self._cond.wait(0.05)  # a timeout: stop() is looked at while a camera is silent
            frame, self._slot = self._slot, None
        if frame is None and self._error is not None:
            raise self._error
        return frame

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self._thread is None or not self._thread.is_alive():  # never release under a running read
            self.capture.cap.release()


# ------------------------------------------------------------------------------------------------
# Command maps
# ------------------------------------------------------------------------------------------------


#: the command maps' compiled programs in this process, by name (both sides' maps share theirs)
_PROGRAMS: dict[str, Any] = {}
_PROGRAMS_LOCK = threading.Lock()


def _compiled(name: str, make: Callable[[], Any]):
    """The compiled program ``name``, made by ``make`` once per process (one thread makes it, the others
    wait for it)."""
    with _PROGRAMS_LOCK:
        if name not in _PROGRAMS:
            _PROGRAMS[name] = make()
        return _PROGRAMS[name]


def _rest_angles(hand) -> np.ndarray:
    """``(20,)`` float32 angles within the limits (zero, clipped) that a lost hand's step maps: its
    command is the target's rest command whatever they map to."""
    return np.clip(0.0, np.asarray(hand.lower, np.float32), np.asarray(hand.upper, np.float32))


class CommandMap:
    """A live stream's command map: a robot ``target``'s commands (:class:`~wuji_jax.retarget.target.Target`)
    from one frame's angles, smoothed and rate-limited as :class:`~wuji_jax.inspire.InspireStream` does,
    in one compiled program per frame. The settings are its constants; the side's human model, the
    target's model and the side are its arguments (on the device once), so that one program serves both
    sides: a stream that may see either hand reads one program from the cache, not two. With
    :meth:`compile`'s ``solver`` the frame's fit runs in the same program (:meth:`fit`): one call a frame
    from landmarks to command.

    The filter: exponential (``tau``) or one-euro (:func:`wuji_jax.filters.one_euro_step`) smoothing,
    then no channel moving faster than the target's ``max_rate(speed_ratio)`` allows. The target's
    ``commands`` get the last raw command as ``previous`` (a warm start; NaN on the first frame).

    Args:
        side: ``"left"`` or ``"right"``: the human model, the target's model and the topic.
        target: the robot hand and its method.
        speed_ratio, smoothing, tau, min_cutoff, beta, d_cutoff, names, frame_id: as
            :class:`~wuji_jax.inspire.InspireStream` (checked by the target's ``check_stream``).

    Attributes:
        name: the target's method (the live summary's ``command_map``).
        command: ``(C,)`` the last command sent; ``raw``: the same before smoothing and the rate limit.
    """

    def __init__(self, side: str, target, *, speed_ratio=1.0, smoothing: str | None = None, tau: float = 0.05,
                 min_cutoff: float = 1.0, beta: float = 0.5, names: Sequence[str] | None = None,
                 frame_id: str = "", d_cutoff: float = 1.0):
        import jax
        from jax.flatten_util import ravel_pytree

        from ..hand.model import load_hand

        target.check_stream(speed_ratio, smoothing, tau, min_cutoff, beta, d_cutoff, names)
        self.side, self.target, self.names, self.frame_id = side, target, names, frame_id
        self.name = target.method
        self.hand = load_hand(side)
        self.model = target.model(side)
        self.channels = len(target.channels)
        # the programs' side argument: the side's human model (its name and side blanked: static data,
        # the same for both sides), the target's model and the side as one flat array on the host CPU
        # device (one argument a call: each argument of a call costs a few microseconds), and the
        # function that gives (hand, model, left) back inside the program
        flat, self._unravel = ravel_pytree((self.hand.replace(name="", side=""), self.model,
                                            np.bool_(side == "left")))
        self._side = jax.device_put(flat, jax.devices("cpu")[0])
        self._settings = (tuple(np.broadcast_to(np.asarray(target.max_rate(speed_ratio), np.float64),
                                                (self.channels,))), smoothing,
                          float(tau), float(min_cutoff), float(beta), float(d_cutoff))
        self._program = None
        self._fused = None  # (solver, program): the fit and the command in one program
        self._rest_q = _rest_angles(self.hand)
        self._state: tuple | None = None  # (raw, y, dy, out) float32 (C,) each
        self._t: float | None = None
        self.command: np.ndarray | None = None
        self.raw: np.ndarray | None = None

    def _step(self):
        import jax.numpy as jnp

        from ..ik.filters import one_euro_step

        rate, smoothing, tau, min_cutoff, beta, d_cutoff = self._settings
        rate = np.asarray(rate, np.float32)
        rest = np.asarray(self.target.rest(), np.float32)
        target, unravel = self.target, self._unravel

        def step(side, q, raw, y, dy, out, dt, first, to_open):  # side, (20,), (C,) x4, (), (), () -> (4C,)
            hand, model, left = unravel(side)
            previous = jnp.where(first, jnp.full_like(raw, jnp.nan), raw)
            x = target.commands(hand, q, model, previous, left=left)
            x = jnp.where(to_open, rest, x)
            dt = jnp.maximum(dt, 0.0)
            if smoothing == "exponential":
                y1, dy1 = y + -jnp.expm1(-dt / tau) * (x - y), dy
            elif smoothing == "one_euro":
                y1, dy1 = one_euro_step(y, dy, x, dt, min_cutoff, beta, d_cutoff)
            else:
                y1, dy1 = x, dy
            y1, dy1 = jnp.where(first, x, y1), jnp.where(first, 0.0, dy1)
            s = rate * dt
            out1 = jnp.where(first, x, out + jnp.clip(y1 - out, -s, s))
            return jnp.concatenate([x, y1, dy1, jnp.clip(out1, 0.0, 1.0)])

        return step

    def _specs(self):
        import jax

        on = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])  # one frame: the host CPU, as FrameSolver
        c = (self.channels,)
        side = jax.ShapeDtypeStruct(self._side.shape, self._side.dtype, sharding=on)
        return [side] + [jax.ShapeDtypeStruct(shape, dtype, sharding=on) for shape, dtype in
                         [((20,), np.float32)] + [(c, np.float32)] * 4 + [((), np.float32), ((), bool), ((), bool)]]

    def _digest(self) -> str:
        """Names the programs: the target, its method, the settings and the side arguments' structure and
        shapes (not their values: both sides' maps name one program)."""
        import jax

        side = (self.hand.replace(name="", side=""), self.model)
        return hashlib.sha256(repr((self.target.name, self.name, self._settings, str(jax.tree_util.tree_structure(side)),
                                    [(a.shape, str(a.dtype)) for a in jax.tree_util.tree_leaves(side)])
                                   ).encode()).hexdigest()[:16]

    def compile(self, solver=None, push: bool = True) -> None:
        """Compile the per-frame programs (or read them from the compilation cache): with ``push`` the one
        of :meth:`push` and :meth:`open` (else it compiles on their first call); with ``solver`` (a
        :class:`~wuji_jax.FrameSolver`, warm-started frames) the one that fits a frame and maps it in one
        call (:meth:`fit`)."""
        push = push and self._program is None
        fuse = solver is not None and (self._fused is None or self._fused[0] is not solver)
        if not (push or fuse):  # (called on every frame: nothing to do once compiled)
            return
        from ..runtime.cache import cached_program
        from ..runtime.programs import compile_options

        step, specs, digest = self._step(), self._specs(), self._digest()
        tag = f"{self.target.name}_{self.name}_{digest}"
        if push:
            self._program = _compiled(f"live_{tag}", lambda: cached_program(
                step, f"live_{tag}", *specs, compiler_options=compile_options(1, "cpu")).lower(*specs).compile())
        if fuse:
            import jax.numpy as jnp

            fit, at = solver.function(q0=True), solver.angles_slice()

            def fused(lm, q0, side, *state):  # the fit's buffer, then the command step's
                flat = fit(lm, q0)
                return jnp.concatenate([flat, step(side, flat[at].astype(jnp.float32), *state)])

            all_specs = solver.input_specs(q0=True) + [specs[0]] + specs[2:]
            name = f"live_fit_{solver.digest()}_{tag}"
            self._fused = (solver, _compiled(name, lambda: cached_program(
                fused, name, *all_specs, compiler_options=compile_options(1, "cpu")).lower(*all_specs).compile()))

    def _inputs(self, stamp: float, to_open: bool) -> tuple:
        first = self._state is None
        if not first and stamp < self._t:
            raise ValueError(f"timestamps must not go backwards: {stamp} after {self._t}")
        zeros = np.zeros(self.channels, np.float32)
        raw, y, dy, out = (zeros,) * 4 if first else self._state
        dt = np.float32(0.0 if first else stamp - self._t)
        return raw, y, dy, out, dt, np.bool_(first), np.bool_(to_open)

    def _send(self, flat: np.ndarray, stamp: float) -> dict[str, Any]:
        c = self.channels
        self._state = (flat[:c], flat[c:2 * c], flat[2 * c:3 * c], flat[3 * c:])
        self._t = stamp
        self.command = flat[3 * c:].astype(np.float64)
        self.raw = flat[:c].astype(np.float64)  # before smoothing and the rate limit
        return self.message(stamp)

    def message(self, stamp: float) -> dict[str, Any]:
        """The message of the last command sent (:attr:`command`), stamped ``stamp``."""
        return self.target.message(self.command, self.side, stamp, self.frame_id, names=self.names)

    def _push(self, q: np.ndarray, stamp: float, to_open: bool) -> dict[str, Any]:
        self.compile()
        flat = np.asarray(self._program(self._side, np.asarray(q, np.float32), *self._inputs(stamp, to_open)))
        return self._send(flat, stamp)

    def push(self, result, stamp: float) -> dict[str, Any]:
        """The message of one fitted frame (``result``: an :class:`~wuji_jax.IKResult` of one frame,
        numpy fields), stamped ``stamp`` seconds (not before the previous push)."""
        return self._push(result.angles, stamp, False)

    def fit(self, solver, landmarks: np.ndarray, q0: np.ndarray, stamp: float, check_units: bool = False):
        """Fit one frame and map it in one compiled call: ``(IKResult, send)``, ``send()`` giving the
        message (call it only for a frame whose command is sent: until then the map's state is
        unchanged). ``landmarks (21, 3)`` float32 metres, ``q0 (20,)`` the warm start. Raises the
        solver's ``ValueError`` for an input it refuses."""
        self.compile(solver)
        inputs = self._inputs(stamp, False)
        flat = np.asarray(self._fused[1](landmarks, q0, self._side, *inputs))
        n = flat.shape[0] - 4 * self.channels
        res = solver.result(flat[:n], landmarks, None, q0, check_units)
        return res, lambda: self._send(flat[n:], stamp)

    def open(self, stamp: float) -> dict[str, Any]:
        """The message that moves the hand towards the target's rest command at the rate limit (the raw
        output of the last fitted frame kept)."""
        if self._state is None:
            return self._push(self._rest_q, stamp, True)
        raw = self._state[0]
        msg = self._push(self._rest_q, stamp, True)
        self._state = (raw,) + self._state[1:]
        return msg


def command_map(side: str, method: str = "auto", robot: str = "inspire", **stream):
    """The command map of a live stream (:class:`CommandMap`) for the robot hand ``robot``
    (:data:`wuji_jax.retarget.target.TARGETS`), and a one-line note on the choice (None when there is
    nothing to say).

    ``method``: ``"joint_map"``, ``"retarget"`` (a ``ValueError`` naming what is missing where no robot
    model is found), or ``"auto"``: the retarget where a model is found, else the joint map.
    ``stream``: the settings of :class:`CommandMap` (``speed_ratio``, ``smoothing``, ``tau``, ...).
    """
    from ..retarget.target import choose_target

    try:  # the target checks the method (a ValueError naming its own)
        target, note = choose_target(robot, method, None, (side,))
    except FileNotFoundError as e:  # the model the retarget needs
        raise ValueError(f"the task-space retarget is not available: {e}") from None
    return CommandMap(side, target, **stream), note


def compile_programs(sides: Sequence[str] = ("right", "left"), method: str = "auto") -> str:
    """Compile (into the compilation cache, where it is on) what :class:`Live` compiles before its first
    frame at its default settings: each side's program of a frame (the FrameSolver's fit and the command
    map in one), and the joint map's too where ``method`` picks another (it is the fallback). For
    ``wuji-jax warmup``; returns the command map's name."""
    import inspect

    from ..hand.model import load_hand
    from ..ik.realtime import FrameSolver

    keys = ("speed_ratio", "smoothing", "tau", "min_cutoff", "beta", "names", "frame_id")
    stream = {k: p.default for k, p in inspect.signature(Live).parameters.items() if k in keys}
    solver = FrameSolver(load_hand("right"))
    name = ""
    for side in sides:
        cmap = command_map(side, method, **stream)[0]
        cmap.compile(solver)
        if cmap.name != "joint_map":  # the fallback (and --command-map joint_map) starts at once too
            command_map(side, "joint_map", **stream)[0].compile(solver)
        name = cmap.name
    return name


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class LiveCommand:
    """One command of a live stream.

    Attributes:
        index: the frame's number in the source (:attr:`Frame.index`).
        t: the frame's time in the stream, seconds.
        stamp: ``start_time + t``, seconds (the message's ``header.stamp``).
        side: ``"left"`` or ``"right"``.
        command: ``(C,)`` the robot's command; the Inspire hand's: six opening fractions in ``[0, 1]``
            (1 = open), motor order little, ring, middle, fore, thumb bend, thumb rotation.
        rh56: ``(C,)`` int, the command in the robot's register units (the target's ``device_units``;
            Inspire: RH56 values, ``round(1000 · command)``).
        message: the envelope ``{"topic", "type", "msg"}`` of the target's ``message`` (Inspire:
            :func:`wuji_jax.inspire.ctrl_message`, ``sensor_msgs/msg/JointState`` as a dict).
        kind: ``"fit"`` (from this frame's fit), ``"hold"`` (the last command again: no hand) or ``"open"``
            (no hand: opening at the rate limit).
        raw: ``(C,)`` the command map's output for this frame before smoothing and the rate limit (a
            ``"fit"`` command), else None.
        result: the frame's :class:`~wuji_jax.IKResult` (numpy, no batch axis), or None without a hand.
            For a left hand: the right model's fit of the mirrored landmarks, with ``keypoints`` mirrored
            back into the landmarks' frame (``rotation`` and ``translation`` stay the mirrored fit's).
        world: ``(21, 3)`` MediaPipe world landmarks, metres, or None.
        image_landmarks: ``(21, 3)`` MediaPipe image landmarks (x/W, y/H, z), or None.
        frame: the :class:`Frame` itself (its image for a preview).
    """

    index: int
    t: float
    stamp: float
    side: str
    command: np.ndarray
    rh56: np.ndarray
    message: dict
    kind: str
    raw: np.ndarray | None = None
    result: Any = None
    world: np.ndarray | None = None
    image_landmarks: np.ndarray | None = None
    frame: Frame | None = None


@dataclasses.dataclass
class LiveStats:
    """Counts and per-stage seconds of a live stream (:meth:`Live.summary` reports them).

    Frames: ``read`` from the source; ``dropped`` (replaced by a later frame while the pipeline was
    busy); ``processed``; ``lost`` (no hand); ``held_back`` (flagged by the solver; by flag name in
    ``held_back_flags``, ``invalid`` for a frame marked invalid without a flag); ``sent`` commands, of
    which ``fitted`` came from a frame's fit (the rest re-sent or opened while the hand was lost).
    """

    read: int = 0
    dropped: int = 0
    processed: int = 0
    lost: int = 0
    held_back: int = 0
    sent: int = 0
    fitted: int = 0
    held_back_flags: dict = dataclasses.field(default_factory=dict)
    seconds: dict = dataclasses.field(default_factory=lambda: {s: [] for s in STAGES})

    def latency_ms(self) -> dict[str, dict[str, float | int | None]]:
        """Per stage: ``{"p50", "p95", "max", "n"}`` in milliseconds (None without samples)."""
        out = {}
        for stage in STAGES:
            v = np.asarray(self.seconds[stage], np.float64) * 1e3
            if v.size:
                p50, p95 = np.percentile(v, [50, 95])
                out[stage] = {"p50": float(p50), "p95": float(p95), "max": float(v.max()), "n": int(v.size)}
            else:
                out[stage] = {"p50": None, "p95": None, "max": None, "n": 0}
        return out


# ------------------------------------------------------------------------------------------------
# The pipeline
# ------------------------------------------------------------------------------------------------


class Live:
    """A live stream of Inspire commands from a camera, a video file or a stream URL (module docstring).

    Iterating runs the pipeline once: it compiles (or reads the compilation cache), starts the source,
    and yields a :class:`LiveCommand` for each frame that gives a command; the outputs given are
    written before each yield (the ``publish`` stage). Leaving the loop early (``break``, an exception,
    Ctrl-C) stops the source and closes the outputs; so does the end of the source or ``max_frames``.
    :meth:`summary` reports what happened.

    Args:
        source: camera index (default 0), video file, or stream URL (``scheme://...``); opened here, so a
            camera that cannot be opened is a ``ValueError`` before anything compiles.
        side: ``"right"``, ``"left"``, or ``"auto"``: the first hand seen decides (its palm's chirality,
            else MediaPipe's label) and stays for the stream (one topic).
        max_frames: stop after this many frames read from the source (None: until it ends; a camera
            runs until interrupted).
        as_fast_as_possible: read a file without waiting for its frame times (no frame is dropped); a
            live source is read as it delivers either way.
        accept_flags: solver flags that do not hold a frame back (names, comma-separated text, or bits;
            :func:`flag_bits`).
        on_lost: ``"hold"`` (send the last command again), ``"skip"`` (send nothing) or ``"open"`` (move
            towards fully open at the rate limit) for a frame without a hand.
        method: the command map, ``"auto"``, ``"joint_map"`` or ``"retarget"`` (:func:`command_map`).
        speed_ratio, smoothing, tau, min_cutoff, beta: :class:`wuji_jax.inspire.InspireStream`'s; the rate
            limit follows ``speed_ratio`` (full travel ``0.8 s / speed_ratio``).
        names: six strings for the message's ``name`` (default the motor ids ``"1".."6"``).
        frame_id: the message header's ``frame_id``.
        start_time: seconds added to the frames' times for the stamps (default: the wall-clock time, Unix
            seconds, when the first frame is taken); ``0 <= start_time`` and the stamps below ``2**31``.
        mirrored: the frames are mirror images (a selfie preview); flipped back before detection.
        model: MediaPipe's ``hand_landmarker.task`` (default: :func:`wuji_jax.video.resolve_model_path`).
        min_confidence: MediaPipe's detection, presence and tracking thresholds, in ``[0, 1]``.
        outputs: objects with ``write(LiveCommand)`` and ``close()`` (:mod:`wuji_jax.live_outputs`),
            closed when the stream ends.
        status: called with one-line messages (the compilation before the first frame, the choice of the
            command map); default: none.
        robot: the robot hand whose commands are sent (:data:`wuji_jax.retarget.target.TARGETS`).

    Raises:
        ValueError: bad arguments, or a source that cannot be opened (one line).
    """

    def __init__(self, source: int | str | os.PathLike = 0, *, side: str = "auto", max_frames: int | None = None,
                 as_fast_as_possible: bool = False, accept_flags: str | Iterable[str] | int | None = None,
                 on_lost: str = "hold", method: str = "auto", speed_ratio: float = 1.0,
                 smoothing: str | None = "exponential", tau: float = 0.05, min_cutoff: float = 1.0,
                 beta: float = 0.5, names: Sequence[str] | None = None, frame_id: str = "",
                 start_time: float | None = None, mirrored: bool = False, model: str | os.PathLike | None = None,
                 min_confidence: float = 0.5, outputs: Sequence[Any] = (),
                 status: Callable[[str], None] | None = None, robot: str = "inspire"):
        if side not in ("auto", "left", "right"):
            raise ValueError(f"side must be 'auto', 'left' or 'right'; got {side!r}")
        if max_frames is not None and max_frames < 1:
            raise ValueError(f"max_frames must be >= 1; got {max_frames}")
        if on_lost not in ON_LOST:
            raise ValueError(f"on_lost must be one of {', '.join(ON_LOST)}; got {on_lost!r}")
        if not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1]; got {min_confidence}")
        if start_time is not None and not (math.isfinite(start_time) and 0 <= start_time < _STAMP_LIMIT):
            raise ValueError(f"start_time must be finite seconds in [0, 2**31); got {start_time}")
        self.accept = flag_bits(accept_flags)
        self._stream_options = dict(speed_ratio=speed_ratio, smoothing=smoothing, tau=tau, min_cutoff=min_cutoff,
                                    beta=beta, names=names, frame_id=frame_id)
        first = "right" if side == "auto" else side
        self.robot = robot
        # the map's checks of the stream settings come here, before the source opens
        self._map, self.map_note = command_map(first, method, robot, **self._stream_options)
        self._maps = {first: self._map}  # side -> command map; the other side's made before the first frame
        self.method = self._map.name
        self.side_option, self.side = side, (None if side == "auto" else side)
        self.max_frames, self.as_fast_as_possible = max_frames, bool(as_fast_as_possible)
        self.on_lost, self.start_time, self.mirrored = on_lost, start_time, bool(mirrored)
        self.min_confidence = float(min_confidence)
        self.outputs = list(outputs)
        self.status = status or (lambda line: None)
        self.names, self.frame_id = names, frame_id
        from ..data.video import import_mediapipe, resolve_model_path

        self.model_path = resolve_model_path(model)
        self._cv = import_mediapipe()
        self.cap, self.label, self.live = open_capture(source)
        self.source = source
        self.stats = LiveStats()
        self.created = time.perf_counter()
        self.compile_seconds: float | None = None
        self.first_command_seconds: float | None = None
        self.wall_seconds: float | None = None
        self.interrupted = False
        self.fps: float | None = None
        self._solver = self._q = None  # the FrameSolver and the last fitted angles (its warm start)
        self._started = False
        self._closed = False

    # -- setup ---------------------------------------------------------------------------------

    def _prepare(self):
        """Compile (or read the cache) and create the landmarker, before the first frame is taken."""
        import jax

        from ..hand.model import load_hand
        from ..ik.realtime import FrameSolver
        from ..ik import neutral_angles

        cv2, mp, BaseOptions, vision = self._cv
        sides = ("right", "left") if self.side is None else (self.side,)
        self.status(f"live: compiling the FrameSolver and the {self.method.replace('_', ' ')} before the first "
                    "frame (once: the compilation cache keeps them)")
        if self.map_note:
            self.status(f"live: note: {self.map_note}")
        t0 = time.perf_counter()
        hand = load_hand("right")  # a left hand is fitted mirrored (Live's docstring): one kernel for both
        self._solver = FrameSolver(hand)  # compiled into each side's command program (one call a frame)
        self._q = np.asarray(jax.device_get(neutral_angles(hand)), np.float32)
        for s in sides:
            if s not in self._maps:
                self._maps[s] = command_map(s, self.method, self.robot, **self._stream_options)[0]

        def ready(s):  # push: only to open a lost hand
            self._maps[s].compile(self._solver, push=self.on_lost == "open")

        for s in sides:  # one program for both sides: the second finds it made
            ready(s)
        self.compile_seconds = time.perf_counter() - t0
        from ..data.video import QuietNative

        opts = vision.HandLandmarkerOptions(
            base_options=BaseOptions(model_asset_path=str(self.model_path)),
            running_mode=vision.RunningMode.VIDEO, num_hands=1,
            min_hand_detection_confidence=self.min_confidence, min_hand_presence_confidence=self.min_confidence,
            min_tracking_confidence=self.min_confidence)
        with QuietNative():
            return vision.HandLandmarker.create_from_options(opts)

    def _pick_side(self, world: np.ndarray, label: str) -> str:
        from ..hand.landmarks import detect_side

        side = detect_side(world) or (label.lower() if label.lower() in ("left", "right") else "right")
        self._map = self._maps[side]
        return side

    # -- the loop ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[LiveCommand]:
        if self._started:
            raise RuntimeError("a Live stream runs once; make a new one")
        self._started = True
        try:
            landmarker = self._prepare()
        except BaseException:
            self.close(abort=True)  # nothing was sent: no output is left behind
            raise
        cv2 = self._cv[0]
        capture = _Capture(cv2, self.cap, self.live)
        self.fps = None if self.live else capture.fps
        reader = _Reader(capture, self.max_frames, threaded=not self.as_fast_as_possible or self.live,
                         paced=not (self.live or self.as_fast_as_possible))
        t_start = time.perf_counter()
        if self.start_time is None:
            self.start_time = time.time()
        self._reader = reader
        # Ctrl-C between frames only: a KeyboardInterrupt inside a bag's write would leave a broken record
        import signal

        sigint = [False]
        main = threading.current_thread() is threading.main_thread()
        handler = signal.getsignal(signal.SIGINT) if main else None
        if main and handler is signal.default_int_handler:
            signal.signal(signal.SIGINT, lambda *_: sigint.__setitem__(0, True))
        reader.start()
        try:
            while True:
                frame = reader.get(lambda: sigint[0])
                if sigint[0]:
                    raise KeyboardInterrupt
                if frame is None:
                    break
                cmd = self._step(frame, landmarker)
                if cmd is not None:
                    yield cmd
        except KeyboardInterrupt:
            self.interrupted = True
            raise
        finally:
            if main and handler is signal.default_int_handler:
                signal.signal(signal.SIGINT, handler)
            self.wall_seconds = time.perf_counter() - t_start
            reader.stop()
            self.stats.read, self.stats.dropped = reader.read, reader.dropped
            self.stats.seconds["capture"] = reader.capture_seconds
            from ..data.video import QuietNative

            with QuietNative():
                landmarker.close()
            self.close()

    def _step(self, frame: Frame, landmarker) -> LiveCommand | None:
        cv2, mp = self._cv[0], self._cv[1]
        from ..data.video import QuietNative

        stats, sec = self.stats, self.stats.seconds
        stats.read, stats.dropped = self._reader.read, self._reader.dropped
        t0 = time.perf_counter()
        sec["queue"].append(t0 - frame.arrived)
        stats.processed += 1
        image = cv2.flip(frame.image, 1) if self.mirrored else frame.image
        rgb = np.ascontiguousarray(cv2.cvtColor(image, cv2.COLOR_BGR2RGB))
        ms = max(getattr(self, "_last_ms", -1) + 1, round(frame.t * 1000.0))  # VIDEO mode: increasing ms
        self._last_ms = ms
        with QuietNative():
            found = landmarker.detect_for_video(mp.Image(image_format=mp.ImageFormat.SRGB, data=rgb), ms)
        t1 = time.perf_counter()
        sec["mediapipe"].append(t1 - t0)
        stamp = self.start_time + frame.t
        if not found.hand_world_landmarks:
            stats.lost += 1
            return self._lost(frame, stamp)
        world = np.asarray([(p.x, p.y, p.z) for p in found.hand_world_landmarks[0]], np.float32)
        image_lm = np.asarray([(p.x, p.y, p.z) for p in found.hand_landmarks[0]], np.float64)
        if self.side is None:
            self.side = self._pick_side(world, found.handedness[0][0].category_name if found.handedness else "")
        t2 = time.perf_counter()
        try:  # the fit and the command map in one compiled call; the command is sent only if the fit passes
            res, send = self._map.fit(self._solver, world * _MIRROR if self.side == "left" else world, self._q, stamp)
            if self.side == "left":
                res = res._replace(keypoints=res.keypoints * _MIRROR)
        except ValueError:  # an input the solver refuses (non-finite landmarks): held back, as a flagged frame
            res = None
        t3 = time.perf_counter()
        sec["solve"].append(t3 - t2)
        flags = -1 if res is None else int(res.flags)
        if res is None or (flags & ~self.accept) or (not bool(res.valid) and flags == 0):
            self._held_back(flags)
            return None
        self._q = res.angles
        cmd = self._command(frame, stamp, send(), "fit", res, world, image_lm)
        sec["command"].append(self._published - t3)
        sec["compute"].append(time.perf_counter() - t2)  # solve + command + publish of this frame
        stats.fitted += 1
        return cmd

    def _held_back(self, flags: int) -> None:
        from ..ik.config import FLAG_NAMES

        self.stats.held_back += 1
        names = ["invalid"] if flags <= 0 else [n for b, n in FLAG_NAMES.items() if flags & b & ~self.accept]
        for n in names or ["invalid"]:
            self.stats.held_back_flags[n] = self.stats.held_back_flags.get(n, 0) + 1

    def _lost(self, frame: Frame, stamp: float) -> LiveCommand | None:
        if self.on_lost == "skip" or self._map.command is None:
            return None
        if self.on_lost == "open":
            message = self._map.open(stamp)
        else:
            message = self._map.message(stamp)
        return self._command(frame, stamp, message, self.on_lost, None, None, None)

    def _command(self, frame, stamp, message, kind, res, world, image_lm) -> LiveCommand:
        command = self._map.command
        raw = None if res is None else np.asarray(self._map.raw, np.float64)
        cmd = LiveCommand(frame.index, frame.t, stamp, self.side, command, self._map.target.device_units(command), message,
                          kind, raw, res, world, image_lm, frame)
        p0 = self._published = time.perf_counter()
        for out in self.outputs:
            out.write(cmd)
        p1 = time.perf_counter()
        self.stats.seconds["publish"].append(p1 - p0)
        self.stats.seconds["total"].append(p1 - frame.arrived)
        self.stats.sent += 1
        if self.first_command_seconds is None:
            self.first_command_seconds = p1 - self.created
        return cmd

    # -- the end -------------------------------------------------------------------------------

    def close(self, abort: bool = False) -> None:
        """Close the outputs (a bag becomes complete and readable) and release the source; idempotent.
        Ctrl-C is ignored while the outputs close, so that a second one cannot leave a bag half written.
        ``abort``: discard the outputs' files instead (their ``abort()``), leaving earlier ones as they were."""
        if self._closed:
            return
        self._closed = True
        import signal

        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            errors = []
            for out in self.outputs:
                try:
                    out.abort() if abort and hasattr(out, "abort") else out.close()
                except Exception as e:  # close the others; report the first
                    errors.append(e)
            if not self._started:
                self.cap.release()
            if errors:
                raise errors[0]
        finally:
            if main:
                signal.signal(signal.SIGINT, old)

    def __enter__(self) -> "Live":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def run(self) -> dict[str, Any]:
        """Run the stream to its end (the outputs take every command); returns :meth:`summary`."""
        for _ in self:
            pass
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """What the stream did: ``source``, ``side``, ``command_map`` (``"joint_map"`` or ``"retarget"``)
        and its ``command_map_note``, ``frames`` (the :class:`LiveStats` counts), ``held_back_flags``,
        ``latency_ms`` (per stage of :data:`STAGES`: p50, p95, max, n), ``fps`` (a file's; None for a live
        source), ``compile_seconds``, ``first_command_seconds`` (from this object's creation),
        ``wall_seconds``, ``interrupted``, and ``commands_per_frame`` (sent / read)."""
        s = self.stats
        return {
            "source": self.label, "side": self.side, "side_option": self.side_option,
            "command_map": self.method, "command_map_note": self.map_note,
            "mode": "as_fast_as_possible" if self.as_fast_as_possible and not self.live else
                    ("live" if self.live else "real_time"),
            "fps": self.fps, "on_lost": self.on_lost, "accept_flags": self.accept,
            "frames": {"read": s.read, "dropped": s.dropped, "processed": s.processed, "lost": s.lost,
                       "held_back": s.held_back, "sent": s.sent, "fitted": s.fitted},
            "held_back_flags": dict(s.held_back_flags),
            "commands_per_frame": (s.sent / s.read) if s.read else None,
            "latency_ms": s.latency_ms(),
            "compile_seconds": self.compile_seconds, "first_command_seconds": self.first_command_seconds,
            "wall_seconds": self.wall_seconds, "interrupted": self.interrupted,
            "start_time": self.start_time,
        }
