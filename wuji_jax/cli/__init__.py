"""The ``wuji-jax`` command line: a thin layer over the library.

Every verb does what one library call does (``wuji-jax pose fist`` is
``wuji_jax.viz.draw_hand(hand, named_pose("fist"), path=...)``). Errors are one line on stderr,
``wuji-jax: error: ...``, with exit status 2 for a bad command line or bad input values and 1 for a
failure while running (a file that cannot be read or written, a missing optional dependency).

Adding a verb takes a function that adds its parser, decorated with :func:`verb`::

    @verb
    def _solve_parser(sub):
        p = sub.add_parser("solve", help="...", description="...")
        p.add_argument("inputs", nargs="*")
        p.set_defaults(run=_run_solve)      # _run_solve(args) -> int exit status

Raise :class:`UsageError` for a bad argument value found after parsing; import heavy modules
(jax, matplotlib) inside the ``_run_*`` function so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from .cli_common import PROG, UsageError, add_command_map_option, checked_output

__all__ = ["main", "run", "verb", "build_parser", "UsageError"]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str):  # argparse's hook; must not return
        if message.endswith("expected one argument"):
            message += " (a value that starts with '-' needs the form --option=VALUE)"
        raise UsageError(f"{message} (see {self.prog} --help)")


_VERBS: list[Callable[[argparse._SubParsersAction], None]] = []


def verb(add_parser: Callable[[argparse._SubParsersAction], None]):
    """Register a verb: ``add_parser(sub)`` calls ``sub.add_parser(...)`` and sets ``run=fn(args) -> int``."""
    _VERBS.append(add_parser)
    return add_parser


def build_parser() -> argparse.ArgumentParser:
    """The full ``wuji-jax`` parser with every registered verb."""
    parser = _Parser(
        prog=PROG,
        description="Wuji Glove WG110v12 hand model in JAX: pictures, IK, Inspire hand commands.",
        epilog="Compiled XLA programs are kept in a per-user cache folder (~/.cache/wuji_jax/xla on "
        "Linux, ~/Library/Caches/wuji_jax/xla on macOS, %LOCALAPPDATA%\\wuji_jax\\xla on Windows), so "
        "that only the first run of a command compiles the solver. --cache-dir DIR or "
        "WUJI_JAX_CACHE_DIR=DIR moves it; --no-cache or WUJI_JAX_NO_CACHE=1 turns it off. Deleting the "
        "folder is always safe. The cache options work before or after COMMAND.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    _add_cache_options(parser, None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for add in _VERBS:
        add(sub)
    for p in sub.choices.values():  # also after COMMAND: `wuji-jax solve --no-cache`
        _add_cache_options(p, argparse.SUPPRESS)
    return parser


def _add_cache_options(parser: argparse.ArgumentParser, default) -> None:
    # a verb's copy defaults to SUPPRESS, so that it leaves the value given before COMMAND alone
    g = parser.add_argument_group("compilation cache")
    g.add_argument("--cache-dir", metavar="DIR", default=default,
                   help="keep compiled XLA programs in DIR (default: $WUJI_JAX_CACHE_DIR, else the per-user "
                        "cache folder, ~/.cache/wuji_jax/xla on Linux)")
    g.add_argument("--no-cache", action="store_true", default=False if default is None else default,
                   help="do not read or write the compilation cache (also: WUJI_JAX_NO_CACHE=1)")


def _one_line(message) -> str:
    return " ".join(str(message).split()) or "unknown error"


def _fail(message, status: int) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``argv`` defaults to ``sys.argv[1:]``); returns the exit status."""
    return _main(argv)[0]


def run(argv: Sequence[str] | None = None) -> None:
    """The ``wuji-jax`` program (and ``python -m wuji_jax``): :func:`main`, then exit.

    After a successful ``solve`` (its outputs written and closed, its threads joined) the process ends
    with ``os._exit`` once stdout, stderr and logging are flushed, skipping Python's teardown (freeing
    JAX's compiled programs at exit is a noticeable share of a short run: ``docs/performance.md``). A
    ``--ray`` run has left its cluster by then (:func:`~wuji_jax.ray_cluster.solve_dataset_ray` calls
    ``ray.shutdown()`` when it started Ray; a Ray still connected is shut down here first). Everything
    else exits the usual way."""
    code, quick = _main(argv)
    if quick:
        import logging
        import os

        if "ray" in sys.modules:
            import ray

            if ray.is_initialized():
                ray.shutdown()

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _main(argv) -> tuple[int, bool]:
    """:func:`main`'s exit status, and whether the process may end without Python's teardown."""
    args = None
    try:
        args = build_parser().parse_args(argv)
        _start_jax(args)
        code = int(args.run(args) or 0)
        return code, code == 0 and args.run is _run_solve
    except SystemExit as e:  # --help, --version
        return (e.code if isinstance(e.code, int) else (0 if e.code is None else _fail(e.code, 1))), False
    except UsageError as e:
        return _fail(e, 2), False
    except KeyboardInterrupt as e:
        if getattr(args, "run", None) is _run_solve:
            # finished chunks are kept (the message says where); exit without the teardown of running threads
            return _fail(str(e) or "interrupted; run the same command again to resume", 130), True
        return _fail("interrupted", 130), False
    except (ValueError, OSError, ImportError) as e:
        return _fail(e, 1), False
    except Exception as e:  # a bug: still one line, but say what it was
        return _fail(f"unexpected {type(e).__name__}: {e}", 1), False


class _SolverDefault:
    """A :class:`SolverConfig` default, read when a help text is printed (the solver imports JAX,
    which ``--version`` or ``pose --list`` need not wait for); used as ``%(solver_default)s``."""

    def __init__(self, field: str):
        self.field = field

    def __str__(self) -> str:
        from ..ik.config import SolverConfig

        return str(getattr(SolverConfig(), self.field))


def _start_jax(args) -> None:
    """JAX's settings for this run, before any JAX computation: the persistent compilation cache and
    one CPU device per core. ``main`` called from a running program whose JAX has started keeps that
    program's settings (an explicit ``--cache-dir`` still applies)."""
    from ..runtime.devices import jax_started

    if args.no_cache and args.cache_dir is not None:
        raise UsageError("give --cache-dir DIR or --no-cache, not both")
    if args.cache_dir is not None and not args.cache_dir.strip():
        raise UsageError("--cache-dir: empty folder name")
    started = jax_started()
    if not args.no_cache and (args.cache_dir is not None or not started):
        _enable_cache(args.cache_dir)
    if not started:
        _use_all_cores()


def _enable_cache(path: str | None) -> None:
    """:func:`wuji_jax.cache.enable_compilation_cache`, its warning (a folder it cannot use) as one line."""
    import warnings

    from ..runtime.cache import enable_compilation_cache

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enable_compilation_cache(path)
    for w in caught:
        text = _one_line(w.message).removeprefix("wuji_jax: ")
        text = text.replace("; set WUJI_JAX_CACHE_DIR", "; give --cache-dir DIR or set WUJI_JAX_CACHE_DIR")
        text = text.replace("or WUJI_JAX_NO_CACHE=1", "or --no-cache")
        print(f"{PROG}: warning: {text}", file=sys.stderr)


def _use_all_cores() -> None:
    """One JAX CPU device per core (big batches are split over them), unless JAX has started already
    (``main`` called from a running program) or ``JAX_NUM_CPU_DEVICES`` chooses the count."""
    import os

    from ..runtime.devices import jax_started, use_cpu_cores

    if not jax_started() and "JAX_NUM_CPU_DEVICES" not in os.environ:
        use_cpu_cores()


# --------------------------------------------------------------------------------------------- pose

_LIMIT_TOL = 1e-6  # rad: a limit typed back from a rounded printout still counts as inside


def _parse_angle_list(text: str) -> list[float]:
    import re

    items = [s for s in re.split(r"[,\s]+", text.strip()) if s != ""]
    out = []
    for i, s in enumerate(items):
        try:
            out.append(float(s))
        except ValueError:
            raise UsageError(f"--angles: value {i} ({s!r}) is not a number") from None
    return out


def _load_angle_file(path: str, side: str | None = None, degrees: bool = False, option: str = ""):
    """``(table, side)``: :func:`wuji_jax.tables.read_angles` of ``path`` (any angle file: what ``wuji-jax
    solve`` writes, or a plain array) and the hand side to draw it with (``side``, else the table's,
    else right). Problems with the content are :class:`UsageError`; ``option`` prefixes messages."""
    from .tables import read_angles, table_side

    prefix = f"{option} " if option else ""
    try:
        table = read_angles(path, side or "right", degrees=degrees)
        side, note = table_side(table, side)
    except ValueError as e:
        raise UsageError(f"{prefix}{e}") from None
    except OSError as e:
        raise OSError(f"{prefix}{e}") from None
    if note:
        print(f"note: {note}", file=sys.stderr)
    return table, side


def _is_angle_file(text: str) -> bool:
    """True when ``view``'s POSE argument names an angle file (by suffix, or an existing file)."""
    from .tables import ANGLE_SUFFIXES

    p = Path(text)
    return p.suffix.lower() in ANGLE_SUFFIXES or ("," not in text and p.is_file())


def _check_angles(hand, values, source: str = "angles", degrees: bool = False):
    """Validate one pose ``values`` (radians, or degrees if ``degrees``) for ``hand``; return ``(n,)`` radians.

    Raises :class:`UsageError` (a ``ValueError``) naming the problem: wrong count, non-finite value, or the
    first joint outside its limits.
    """
    import numpy as np

    q = np.asarray(values, dtype=np.float64)
    n = hand.num_joints
    if q.ndim == 2 and q.shape[0] == 1:
        q = q[0]
    if q.ndim != 1:
        raise UsageError(f"{source}: expected one pose of {n} values, got an array of shape {q.shape}")
    if q.shape[0] != n:
        raise UsageError(f"{source}: expected {n} values (order: wuji-jax pose --list), got {q.shape[0]}")
    bad = np.flatnonzero(~np.isfinite(q))
    if bad.size:
        i = int(bad[0])
        raise UsageError(f"{source}: value {i} ({hand.joint_names[i]}) is {q[i]}, not a finite number")
    unit = "deg" if degrees else "rad"
    if degrees:
        q = np.deg2rad(q)
    lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
    out = np.flatnonzero((q < lo - _LIMIT_TOL) | (q > hi + _LIMIT_TOL))
    if out.size:
        i = int(out[0])
        conv = np.rad2deg if degrees else (lambda x: x)
        more = f" (and {out.size - 1} more joint{'s' if out.size > 2 else ''})" if out.size > 1 else ""
        raise UsageError(
            f"{source}: joint {i} {hand.joint_names[i]} = {conv(q[i]):.4g} {unit} is outside its limits "
            f"[{conv(lo[i]):.4g}, {conv(hi[i]):.4g}] {unit}{more}"
        )
    return q


@verb
def _pose_parser(sub) -> None:
    p = sub.add_parser(
        "pose",
        help="draw the hand at a named pose or given joint angles",
        description="Draw the hand in three orthographic views (front X-Y, top X-Z, side Y-Z) at a named "
        "pose or at 20 joint angles (radians unless --degrees, order as --list prints).",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="named pose (default: open); see --list")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--angles", metavar="A0,...,A19",
                     help="20 comma-separated joint angles; write --angles=-0.1,... if the first is negative")
    src.add_argument("--angles-file", metavar="FILE",
                     help="joint angles from a file: 20 values (.npy, .txt, .csv, .json, .npz 'angles'), or a "
                          "table of frames such as `wuji-jax solve` writes (.parquet, .npz, .csv), with --frame")
    p.add_argument("--frame", type=int, default=None, metavar="I",
                   help="with --angles-file of several frames: draw row I (0 = the first; -1 = the last)")
    p.add_argument("--degrees", action="store_true", help="--angles / --angles-file are in degrees")
    p.add_argument("--side", choices=("right", "left"), default=None,
                   help="hand (default: the --angles-file table's side column, else right)")
    p.add_argument("-o", "--output", metavar="OUT.png",
                   help="picture to write (default: wuji_out/pose_<NAME>_<side>.png); .svg and .pdf work too")
    p.add_argument("--list", action="store_true", help="list the named poses and the joint order, then exit")
    p.set_defaults(run=_run_pose)


def _run_pose(args) -> int:
    from ..hand.poses import POSES

    if args.list:
        print("poses: " + ", ".join(POSES))
        from ..hand.model import load_hand

        hand = load_hand(args.side or "right")
        print("joints (angle order, limits in rad):")
        for i, (n, lo, hi) in enumerate(zip(hand.joint_names, hand.lower, hand.upper)):
            print(f"  {i:2d} {n:24s} [{float(lo):+.3f}, {float(hi):+.3f}]")
        return 0

    given = args.angles is not None or args.angles_file is not None
    if args.name is not None and given:
        raise UsageError("give a pose NAME or --angles/--angles-file, not both")
    if args.degrees and not given:
        raise UsageError("--degrees applies only to --angles or --angles-file")
    if args.frame is not None and args.angles_file is None:
        raise UsageError("--frame applies only to --angles-file")
    if not given and args.name is not None and args.name not in POSES:
        raise UsageError(f"unknown pose {args.name!r}; choose one of: {', '.join(POSES)}")

    out = Path(args.output) if args.output else None
    if out is not None:
        if not out.suffix:
            out = out.with_suffix(".png")
        elif out.suffix.lower().lstrip(".") not in _image_formats():
            raise UsageError(f"-o {args.output}: unknown picture format {out.suffix!r}; use .png, .svg or .pdf")

    from .. import viz
    from ..hand.model import load_hand
    from ..hand.poses import named_pose

    side = args.side or "right"
    if args.angles_file is not None:
        import numpy as np

        path = args.angles_file
        table, side = _load_angle_file(path, args.side, args.degrees, "--angles-file")
        n = len(table)
        source = f"--angles-file {path}"
        if args.frame is None:
            if n > 1:
                raise UsageError(f"{source}: expected one pose of {table.angles.shape[1]} values, got an array of "
                                 f"shape {table.angles.shape} ({n} frames); choose one with --frame I (0 to {n - 1})")
            i = 0
        else:
            if not -n <= args.frame < n:
                raise UsageError(f"--frame {args.frame}: {path} has {n} frame(s); give 0 to {n - 1} (or -1 for the "
                                 "last)")
            i = args.frame % n
        if table.valid is not None and not table.valid[i]:
            flags = table.describe_flags(i)
            print(f"note: {path}: frame {i} is marked invalid by the solver{f' (flags: {flags})' if flags else ''}; "
                  "drawing its angles anyway", file=sys.stderr)
        row = table.angles[i]
        if args.frame is not None or n > 1:
            source = f"{source} frame {i}"
        # degrees: the message reports the values as read
        q_in = np.rad2deg(row) if args.degrees else row
    hand = load_hand(side)
    if given:
        if args.angles is not None:
            q = _check_angles(hand, _parse_angle_list(args.angles), "--angles", args.degrees)
            label, what = "angles", "given angles"
        else:
            q = _check_angles(hand, q_in, source, args.degrees)
            name = Path(args.angles_file)
            label, what = name.stem, f"angles from {name.name}"
            if args.frame is not None:
                label, what = f"{label}_{i}", f"{what}, frame {i}"
    else:
        label = args.name or "open"
        q, what = named_pose(label), f"pose '{label}'"
    if out is None:
        out = Path("wuji_out") / f"pose_{label}_{side}.png"  # the folder every verb writes to
    checked_output(out, [args.angles_file])

    viz.draw_hand(hand, q, path=out, title=f"WG110v12 {side} hand — {what}")
    print(f"wrote {out}")
    return 0


def _image_formats() -> set[str]:
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:  # reported properly when drawing
        return {"png", "svg", "pdf"}
    return set(FigureCanvasBase.get_supported_filetypes())


# -------------------------------------------------------------------------------------------- solve

_SOLVE_FORMATS = ("parquet", "npz", "csv")


@verb
def _solve_parser(sub) -> None:
    p = sub.add_parser(
        "solve",
        help="solve landmark recordings into a table of joint angles (resumable)",
        description="Fit the WG110v12 hand to every frame of MediaPipe landmark files (metres): joint "
        "angles, wrist pose, scale, residual, flags and Inspire commands, one row a frame, plus a plot "
        "and a summary next to the table. Large inputs are streamed in chunks; an interrupted run "
        "started again with the same arguments continues where it stopped. With no INPUT it solves the "
        "bundled sample recording. Python: wuji_jax.batch.solve_dataset(inputs, out, ...).",
    )
    p.add_argument("inputs", nargs="*", metavar="INPUT",
                   help="landmark files, globs or folders (.npy .npz .csv .tsv .jsonl .json .parquet .h5, videos); "
                        "default: the bundled sample")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="table to write (.parquet, .npz or .csv), or an existing folder to write "
                        "<input>_angles.parquet into (default: wuji_out/<input>_angles.parquet)")
    p.add_argument("--side", choices=("right", "left", "auto"), default="right",
                   help="hand model (default: right; auto decides per file from the landmarks)")
    p.add_argument("--chunk-size", type=int, default=4096, metavar="N",
                   help="frames per chunk, the unit of memory use and of resumption (default: 4096)")
    p.add_argument("--no-resume", action="store_true", help="start over instead of reusing finished chunks")
    p.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="most Levenberg-Marquardt iterations per frame; a frame stops earlier once converged "
                        "(default: the solver's, %(solver_default)s)").solver_default = _SolverDefault("iterations")
    p.add_argument("--format", choices=_SOLVE_FORMATS, default=None,
                   help="output format when -o has no extension (default: parquet, npz without pyarrow)")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="a bad file stops the run (raise, default) or is reported and skipped (skip; "
                        "exit status 1 after writing the rest)")
    p.add_argument("--fps", type=float, default=None, help="frame rate for files without timestamps")
    p.add_argument("--max-frames", type=int, default=None, metavar="N",
                   help="most frames one file may hold (default: 10,000,000); a file declaring more is "
                        "refused before reading, so a tiny hostile file cannot start unbounded work")
    p.add_argument("--no-unit-check", action="store_true",
                   help="solve files whose landmarks do not look like metres (hand-sized, 5-40 cm) anyway")
    p.add_argument("--no-plot", action="store_true", help="do not draw the angles over time")
    add_command_map_option(p, "how the inspire_* columns are made from the angles: the task-space retarget "
                        "(wuji_jax.inspire.retarget) where an Inspire model is found (auto, the default; a "
                        "one-line note on stderr when none is), the joint map (wuji_jax.inspire.to_inspire), "
                        "or the retarget only (an error without a model). The summary's command_map says which")
    p.add_argument("--urdf", metavar="FILE", default=None,
                   help="the Inspire hand URDF for the retarget (default: the copies inside an installed dexi-rs)")
    p.add_argument("--quiet", action="store_true", help="no progress line; print only where outputs went")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="solve on a Ray cluster (pip install 'wuji-jax[ray]'; inputs readable at the same path "
                        "on every node): no ADDRESS starts a local one, 'auto' or HOST:PORT joins one. Bad files "
                        "are always reported and skipped. Write it after the inputs or as --ray=ADDRESS. "
                        "Python: wuji_jax.ray_cluster.solve_dataset_ray")
    p.add_argument("--cpus-per-worker", type=int, default=None, metavar="N",
                   help="with --ray: CPUs (JAX CPU devices) each Ray worker holds (default: those of the "
                        "cluster's smallest node, one worker per node)")
    p.set_defaults(run=_run_solve)


def _solve_output(args) -> Path:
    import importlib.util

    fmt = args.format
    if args.output and not Path(args.output).is_dir():
        out = Path(args.output)
        ext = out.suffix.lower().lstrip(".")
        if not ext:
            return out.with_suffix("." + (fmt or "parquet"))
        ext = {"pq": "parquet"}.get(ext, ext)
        if ext not in _SOLVE_FORMATS:
            raise UsageError(f"-o {args.output}: unknown table format {out.suffix!r}; use .parquet, .npz or .csv")
        if fmt and fmt != ext:
            raise UsageError(f"-o {args.output} and --format {fmt} disagree; give one of them")
        return out
    if fmt is None:
        fmt = "parquet" if importlib.util.find_spec("pyarrow") is not None else "npz"
    if not args.inputs:
        stem = "sample"
    elif len(args.inputs) == 1 and not any(c in args.inputs[0] for c in "*?[") and not Path(args.inputs[0]).is_dir():
        stem = Path(args.inputs[0]).stem
    else:
        stem = "dataset"
    # an existing folder given as -o: the default name inside it
    return Path(args.output or "wuji_out") / f"{stem}_angles.{fmt}"


def _run_solve(args) -> int:
    import math

    if args.chunk_size < 1:
        raise UsageError(f"--chunk-size must be >= 1, got {args.chunk_size}")
    if args.iterations is not None and args.iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {args.iterations}")
    if args.fps is not None and not (math.isfinite(args.fps) and args.fps > 0):
        raise UsageError(f"--fps must be a finite number > 0, got {args.fps}")
    if args.max_frames is not None and args.max_frames < 1:
        raise UsageError(f"--max-frames must be >= 1, got {args.max_frames}")
    if args.cpus_per_worker is not None and (args.ray is None or args.cpus_per_worker < 1):
        raise UsageError(f"--cpus-per-worker {args.cpus_per_worker}: "
                         + ("must be >= 1" if args.ray is not None else "only with --ray (a Ray cluster's workers)"))
    if getattr(args, "ray", None) is not None:  # on a Ray cluster
        if args.command_map == "retarget" or args.urdf:
            raise UsageError("--command-map retarget / --urdf: not with --ray (its workers use the joint map)")
        if args.command_map == "auto":
            print("note: --ray: the inspire_* columns come from the joint map (wuji_jax.inspire.to_inspire)",
                  file=sys.stderr)
        return _run_solve_ray(args)
    out = _solve_output(args)

    from ..data import io as wio
    from ..pipeline.batch import solve_dataset
    from ..retarget.inspire import InspireModelNotFound

    try:
        s = solve_dataset(_solve_inputs(args), out, side=args.side, chunk_size=args.chunk_size,
                          resume=not args.no_resume, progress=not args.quiet, iterations=args.iterations,
                          on_error=args.on_error, fps=args.fps, plot=not args.no_plot,
                          check_units=not args.no_unit_check,
                          max_frames=wio.MAX_FRAMES if args.max_frames is None else args.max_frames,
                          command_map=args.command_map, inspire_urdf=args.urdf)
    except InspireModelNotFound as e:
        raise UsageError(f"--command-map {args.command_map}: {e}") from None
    if s["command_map_note"]:
        print(f"note: {_one_line(s['command_map_note'])}", file=sys.stderr)
    return _report_solve(args, s, "", "compilation")


def _run_solve_ray(args) -> int:
    """``wuji-jax solve ... --ray [ADDRESS]``: :func:`wuji_jax.ray_cluster.solve_dataset_ray` with the
    verb's arguments (after the option checks of :func:`_run_solve`) and the same report."""
    import os

    from ..data import io as wio
    from ..pipeline.ray_cluster import require_ray, solve_dataset_ray

    address = args.ray.strip()
    if not address:
        raise UsageError("--ray: empty address (give none for a local cluster, 'auto', or HOST:PORT)")
    if address not in ("local", "auto") and (Path(address).suffix.lower() in wio.DATA_EXTENSIONS
                                             + wio.VIDEO_EXTENSIONS or os.path.exists(address)):
        # `--ray IN.npy`: argparse gave the first input to --ray's optional ADDRESS
        raise UsageError(f"--ray {address}: looks like an input file, not a cluster address; put --ray "
                         "after the inputs, or write --ray=ADDRESS")
    require_ray()
    out = _solve_output(args)
    s = solve_dataset_ray(_solve_inputs(args), out, side=args.side, chunk_size=args.chunk_size,
                          resume=not args.no_resume, progress=not args.quiet, iterations=args.iterations,
                          address=address, cpus_per_worker=args.cpus_per_worker, on_error="skip", fps=args.fps,
                          plot=not args.no_plot, check_units=not args.no_unit_check,
                          max_frames=wio.MAX_FRAMES if args.max_frames is None else args.max_frames,
                          compilation_cache=getattr(args, "cache_dir", None)
                          or (False if getattr(args, "no_cache", False) else None))
    r = s["ray"]
    where = (f" on {r['workers']} Ray worker{'s' if r['workers'] != 1 else ''} ({r['nodes']} node"
             f"{'s' if r['nodes'] != 1 else ''})")
    return _report_solve(args, s, where, "start-up")


def _solve_inputs(args) -> list[str]:
    """``solve``'s inputs, or the bundled sample (said so) when none is given."""
    from ..pipeline.batch import sample_landmarks_path

    inputs = list(args.inputs)
    if not inputs:
        inputs = [str(sample_landmarks_path())]
        if not args.quiet:
            print(f"no INPUT given: solving the bundled sample {inputs[0]}")
    return inputs


def _report_solve(args, s: dict, where: str, including: str) -> int:
    """Print a dataset run's summary ``s`` (skipped files on stderr; ``where``: e.g. " on 2 Ray
    workers"; ``including``: what the frames/s include); returns the exit status."""
    for e in s["errors"]:
        print(f"{PROG}: error: {_one_line(e)} (skipped)", file=sys.stderr)
    if not args.quiet:
        for n in s["notes"]:
            print(f"note: {_one_line(n)}")
        resumed = f", {s['resumed_frames']:,} resumed from an interrupted run" if s["resumed_frames"] else ""
        res = ("" if s["residual_mm_mean"] is None else
               f"; residual mean {s['residual_mm_mean']:.2f} mm, median {s['residual_mm_median']:.2f} mm")
        print(f"solved {s['frames']:,} frames from {s['files']} file{'s' if s['files'] != 1 else ''}{where} in "
              f"{s['wall_seconds']:.1f} s ({s['frames_per_second']:,.0f} frames/s incl. {including}{resumed}): "
              f"{s['valid']:,} valid, {s['flagged']:,} flagged{res}")
    print(f"angles:  {s['output']}")
    if s["plot"]:
        print(f"plot:    {s['plot']}")
    print(f"summary: {s['summary']}")
    return 1 if s["errors"] else 0


# ------------------------------------------------------------------------------------------ overlay


@verb
def _overlay_parser(sub) -> None:
    p = sub.add_parser(
        "overlay",
        help="render a video with MediaPipe's landmarks, the fitted hand and the Inspire channels (MP4)",
        description="Extract MediaPipe hand landmarks from VIDEO, solve them, and write the video with the "
        "landmarks, the fitted skeleton (reprojected by a per-frame affine map) and the six Inspire "
        "channels as bars, as MP4. Python: wuji_jax.overlay.render_overlay.",
    )
    p.add_argument("video", nargs="?", help="input video (default: the bundled sample video)")
    p.add_argument("-o", "--output", metavar="OUT.mp4", help="default: wuji_out/<video>_overlay.mp4")
    p.add_argument("--side", choices=("right", "left", "auto"), default="auto",
                   help="hand model (default: auto, from the landmarks' chirality)")
    p.add_argument("--max-frames", type=int, default=None, metavar="N", help="stop after N frames")
    p.add_argument("--scale", type=float, default=1.0, help="output size relative to the input (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=_run_overlay)


def _run_overlay(args) -> int:
    if args.max_frames is not None and args.max_frames < 1:
        raise UsageError(f"--max-frames must be >= 1, got {args.max_frames}")
    if not args.scale > 0:
        raise UsageError(f"--scale must be > 0, got {args.scale}")
    import numpy as np

    from ..hand.model import asset_path, load_hand
    from ..viz.overlay import render_overlay
    from ..ik import solve
    from ..data.video import extract_landmarks

    video = Path(args.video) if args.video else asset_path("samples", "human_hand_video.mp4")
    out = Path(args.output) if args.output else Path("wuji_out") / f"{video.stem}_overlay.mp4"
    checked_output(out, [video], {".mp4": "mp4"}, "the overlay")  # before the landmarks are extracted
    rec = extract_landmarks(video, max_frames=args.max_frames, progress=not args.quiet)
    if not rec.detected.any():
        raise UsageError(f"{video}: MediaPipe found no hand in {len(rec.detected)} frames; nothing to overlay")
    res = solve(load_hand("right"), rec.world, side=args.side)
    path = render_overlay(video, rec, res, out, progress=not args.quiet, scale=args.scale)
    print(f"{int(rec.detected.sum())}/{len(rec.detected)} frames with a hand; median residual "
          f"{1e3 * float(np.nanmedian(np.where(rec.detected, np.asarray(res.residual), np.nan))):.2f} mm")
    print(f"overlay: {path}")
    return 0


# --------------------------------------------------------------------------------------------- view


@verb
def _view_parser(sub) -> None:
    p = sub.add_parser(
        "view",
        help="write an interactive HTML view of the kinematic tree",
        description="Write one self-contained HTML page (no network needed) of the hand's kinematic tree at a "
        "named pose, at 20 comma-separated joint angles (radians, order as 'wuji-jax pose --list' prints; "
        "if the first is negative, options first, then '-- -0.1,...') or at the angles in a file: the "
        "table `wuji-jax solve` writes (.parquet, .npz, .csv; frames the solver marked invalid are left "
        "out), or an array in .npy/.npz/.csv/.txt/.json (one pose, or T poses animated by a time slider). "
        "In the page: drag to rotate, wheel to zoom, click a joint for its axis, limits and angle, sliders "
        "to re-pose. Python: wuji_jax.viewer.write_viewer.",
    )
    p.add_argument("pose", nargs="?", default="open", metavar="POSE|ANGLES",
                   help="named pose (default: open), 20 comma-separated angles, or an angle file")
    p.add_argument("--side", choices=("right", "left"), default=None,
                   help="hand (default: an angle table's side column, else right)")
    p.add_argument("-o", "--output", metavar="OUT.html", default=str(Path("wuji_out", "hand_view.html")),
                   help="page to write (default: wuji_out/hand_view.html)")
    p.set_defaults(run=_run_view)


def _run_view(args) -> int:
    import numpy as np

    from ..hand.model import load_hand
    from ..hand.poses import POSES, named_pose
    from ..viz.viewer import write_viewer

    side = args.side or "right"
    text = args.pose
    out = Path(args.output)
    if not out.suffix:
        out = out.with_suffix(".html")
    reads = text not in POSES and _is_angle_file(text)
    checked_output(out, [text] if reads else [], {".html": "html", ".htm": "html"}, "the view")
    if text in POSES:
        hand = load_hand(side)
        q, what = named_pose(text), f"pose '{text}'"
    elif _is_angle_file(text):
        table, side = _load_angle_file(text, args.side)
        hand = load_hand(side)
        bad = table.invalid()
        if bad.all():
            i = int(table.row[0])
            flags = table.describe_flags(0)
            raise UsageError(f"{text}: every frame ({len(table)}) is marked invalid by the solver"
                             f"{f' (frame {i}: {flags})' if flags else ''}; nothing to show")
        if bad.any():
            print(f"note: {text}: left out {int(bad.sum())} of {len(table)} frames marked invalid by the solver",
                  file=sys.stderr)
            table = table.rows(~bad)
        q = np.stack([_check_angles(hand, r, f"{text} row {int(t)}") for t, r in zip(table.row, table.angles)])
        what = f"angles from {Path(text).name}"
    else:
        hand = load_hand(side)
        try:
            values = _parse_angle_list(text)
        except UsageError:
            raise UsageError(f"unknown pose {text!r}; give one of {', '.join(POSES)}, "
                             f"{hand.num_joints} comma-separated angles or a .npy/.csv/.txt file") from None
        q, what = _check_angles(hand, values, "angles"), "given angles"
    write_viewer(hand, q, out, title=f"WG110v12 {side} hand — {what}")
    print(f"wrote {out}")
    return 0


# Registered here so that ``wuji-jax inspire`` sits next to the other verbs.
from .inspire_cli import add_inspire_command  # noqa: E402

verb(add_inspire_command)

from .warmup import add_warmup_command  # noqa: E402

verb(add_warmup_command)

from .live_cli import add_live_command  # noqa: E402

verb(add_live_command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
