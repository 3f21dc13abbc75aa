"""``wuji-jax inspire``: joint angles (or landmarks, solved on the way) → a timestamped Inspire command stream.

A thin layer over :mod:`wuji_jax.inspire`; the whole verb is, in Python::

    cal = inspire.calibrate({...}) or inspire.default_calibration(hand)
    cmd = inspire.to_inspire(angles, cal, hand)                         # (T, 6)
    cmd, t = inspire.smooth(cmd, t, ...)                                # optional
    cmd, t = inspire.limit_rate(cmd, t, speed_ratio)
    inspire.write_command_stream(out, cmd, t, side, fmt)

Register it on the main parser with ``add_inspire_command(subparsers)`` (it sets ``run=``, as the
other verbs do). Examples::

    wuji-jax inspire --angles take.npz --side left -o take.jsonl --speed-ratio 0.5 --smooth one_euro
    wuji-jax inspire --angles glove.csv --degrees --fps 100 --format csv
    wuji-jax inspire --landmarks take.npy -o take.csv --reference open=open.npy --reference fist=fist.npy
    wuji-jax solve take.npy -o take_angles.parquet && wuji-jax inspire --angles take_angles.parquet

Both inputs are read by the readers every verb shares (:mod:`wuji_jax.tables`): ``--angles`` (and
``--reference``) by :func:`wuji_jax.tables.read_angles` (what ``wuji-jax solve`` writes: Parquet, npz,
CSV with a column per joint; or a plain ``(T, 20)`` / ``(20,)`` array in .npy/.npz/.csv/.txt/.json),
``--landmarks`` by :func:`wuji_jax.tables.read_landmarks`, i.e. :func:`wuji_jax.io.load_landmarks`, the
reader of ``wuji-jax solve`` (.npy, .npz with ``landmarks`` or ``world``, .csv, .jsonl, .parquet, .h5).
Without ``--side`` the hand is the table's ``side`` column's, else right.

Input checks (each failure is a one-line error naming the file and the frame; nothing is written).
The output has no per-frame "valid" column, and a robot command stream with a silently dropped or
guessed frame is worse than none, so bad frames stop the run instead of being flagged:

* angles (``--angles``, every ``--reference`` file, and the angles solved from ``--landmarks``) must
  be finite and within the hand model's joint limits widened by ``inspire.ANGLE_LIMIT_TOLERANCE``
  (0.5 rad). :func:`wuji_jax.inspire.to_inspire` clamps its commands, so a 100 rad angle, or degrees
  read as radians, would otherwise become a plausible "fully closed". Angles slightly outside the
  limits (solver or sensor overshoot) are accepted and clamped as before.
* timestamps (the file's, or ``--start-time + i/--fps``) must be finite, non-decreasing and fit a ROS
  stamp: ``0 <= t < 2**31`` s (ROS 2 ``builtin_interfaces/Time.sec`` is int32, ROS 1's is unsigned),
  for both output formats. The stamps written have ``0 <= nanosec < 1e9``. A ``wuji-jax solve`` table
  of an input without times (its ``timestamp`` column all NaN) counts as a file without timestamps.
* no command is sent from a frame the solver flagged (any bit of ``flags``/``fit_flags``, names in
  :data:`wuji_jax.solver.FLAG_NAMES`) or marked invalid (``valid`` False) in a ``wuji-jax solve``
  table or in the angles solved from ``--landmarks``, unless every flag it carries is named by
  ``--accept-flags`` (e.g. ``--accept-flags mirrored,high_residual``). Such frames stop the run unless
  ``--skip-invalid`` leaves them out (the summary counts them, by flag); the other frames keep their
  times (``i/--fps`` of their row ``i`` when the file has none), so a gap stays a gap.
* a table holding several recordings (a ``source`` column with several files: ``wuji-jax solve`` of a
  folder) needs ``--source FILE`` to choose one: one command stream is one take.

Frame numbers in the messages are row numbers of the file (0 = the first row).

The output follows the one output rule of every verb (:mod:`wuji_jax.outputs`): refused when it is,
or links to, one of the inputs (``--angles``, ``--landmarks``, ``--calibration``, ``--reference``);
its suffix names the format (``.jsonl``/``.ndjson`` or ``.csv``; another suffix is an error); written
to a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from .cli_common import UsageError, add_command_map_option, add_smoothing_options, checked_output

__all__ = ["add_inspire_command", "run_inspire", "main"]

_DEFAULT_FPS = 30.0
_STREAM_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}


def add_inspire_command(subparsers) -> argparse.ArgumentParser:
    """Add the ``inspire`` verb to an ``argparse`` subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "inspire",
        help="joint angles or landmarks -> Inspire hand command stream (JSONL/CSV)",
        description=(
            "Convert WG110v12 joint angles (or MediaPipe landmarks, solved with wuji_jax.solve) into the "
            "Inspire hand's six opening fractions (1 = open; motor order little, ring, middle, fore, "
            "thumb bend, thumb rotation), rate-limited to the motors' speed, with timestamps. JSONL lines "
            "carry the /inspire_hand/ctrl/<side>_hand JointState message and the RH56 0-1000 values. "
            "Refused with a one-line error naming the file and frame (nothing written): angles that are "
            "NaN/inf or beyond the joint limits by more than 0.5 rad (degrees read as radians, wrong joint "
            "order), frames the solver marked invalid (unless --skip-invalid), and timestamps that are not "
            "finite, go backwards, or do not fit a ROS stamp (0 <= t < 2^31 s). Angles slightly outside the "
            "limits are accepted and clamped. --angles reads the table `wuji-jax solve` writes (.parquet, "
            ".npz, .csv) as well as plain arrays; --landmarks reads what `wuji-jax solve` reads."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--angles", metavar="FILE",
                     help="joint angles: a table `wuji-jax solve` writes (.parquet, .npz, .csv: a column per "
                          "joint, with timestamp, valid, flags, side), or an array (T, 20) or (20,) in .npy, "
                          ".npz (key 'angles' or 'q', optional 'timestamps'), .csv/.txt (one frame per row), "
                          ".json; radians unless --degrees. Each must be finite and within the joint limits "
                          "+- 0.5 rad, else an error names the frame and joint")
    src.add_argument("--landmarks", metavar="FILE",
                     help="MediaPipe landmarks (T, 21, 3) or (21, 3) in metres, in any format `wuji-jax solve` "
                          "reads (.npy, .npz with 'landmarks' or 'world', .csv, .jsonl, .parquet, .h5); solved "
                          "to angles with wuji_jax.solve_sequence")
    p.add_argument("--degrees", action="store_true",
                   help="angles are in degrees (the glove's hand_joint_angles; converted without IK)")
    p.add_argument("--side", choices=("left", "right"), default=None,
                   help="which hand (default: the --angles table's side column, else right)")
    p.add_argument("--skip-invalid", action="store_true",
                   help="leave out the frames the solver flagged or marked invalid (valid False) instead of "
                        "stopping the run; the summary counts them. The other frames keep their times")
    p.add_argument("--accept-flags", metavar="NAME,...", default="",
                   help="solver flags that do not hold a frame back (comma-separated, e.g. "
                        "mirrored,high_residual; names: wuji_jax.solver.FLAG_NAMES). A frame carrying any "
                        "other flag, or marked invalid without flags, sends no command")
    p.add_argument("--source", metavar="FILE",
                   help="the recording to convert from a table of several (its 'source' column; the full "
                        "name, file name or stem)")
    p.add_argument("-o", "--output", default="-", metavar="FILE",
                   help="output file, .jsonl (or .ndjson) or .csv (default '-': stdout); never one of the inputs")
    p.add_argument("--format", choices=("jsonl", "csv"), default=None,
                   help="output format (default: from the output suffix, else jsonl); must agree with the suffix")
    p.add_argument("--speed-ratio", type=float, default=1.0, metavar="R",
                   help="motor speed ratio in (0, 1]; 1 = 0.8 s full travel. Commands never ask for faster "
                        "travel (default 1)")
    p.add_argument("--fps", type=float, default=None,
                   help=f"frame rate for timestamps t = start + i/fps; overrides the file's timestamps "
                        f"(default: the file's, else {_DEFAULT_FPS:g})")
    p.add_argument("--start-time", type=float, default=0.0, metavar="S",
                   help="seconds added to every timestamp (e.g. a ROS epoch time; default 0). Every "
                        "timestamp must fit a ROS stamp: 0 <= t < 2^31 s")
    add_smoothing_options(p)
    cal = p.add_mutually_exclusive_group()
    cal.add_argument("--calibration", metavar="FILE.json",
                     help="calibration saved from wuji_jax.inspire.calibration_to_dict")
    cal.add_argument("--reference", action="append", metavar="NAME=FILE",
                     help="reference pose angles for calibration, NAME one of open, fist, thumb_opposed "
                          "(repeat; open and fist required; same units as --degrees)")
    add_command_map_option(p, "joint angles -> commands: the task-space retarget (wuji_jax.inspire.retarget) where an "
                        "Inspire model is found (auto, the default; a one-line note when none is), the joint "
                        "map (wuji_jax.inspire.to_inspire), or the retarget only (an error without a model)")
    p.add_argument("--urdf", metavar="FILE", default=None,
                   help="the Inspire hand URDF for the retarget (default: the copy inside an installed dexi-rs)")
    p.add_argument("--names", choices=("ids", "words"), default="ids",
                   help="JointState name[]: motor IDs '1'..'6' (default) or little, ring, ... thumb_rotation")
    p.add_argument("--frame-id", default="", help="header frame_id of the JSONL messages (default empty)")
    p.set_defaults(run=run_inspire)
    return p


def _read_angles(path: str, hand, degrees: bool, prefix: str = ""):
    """:func:`wuji_jax.tables.read_angles`, its one-line ``ValueError`` as the CLI's usage error."""
    from .tables import read_angles

    try:
        return read_angles(path, hand, degrees=degrees)
    except ValueError as e:
        raise UsageError(f"{prefix}{e}") from None
    except OSError as e:
        raise OSError(f"{prefix}{e}") from None


def _one_source(table, wanted: str | None, option: str = "--source"):
    """The rows of one recording of a table of several (``wanted`` by full name, file name or stem)."""
    import numpy as np

    names = table.sources
    if wanted is None:
        if len(names) > 1:
            shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
            raise UsageError(f"{table.path}: holds the frames of {len(names)} recordings ({shown}); a command "
                             f"stream is one take: choose one with {option} FILE")
        return table
    if table.source is None:
        raise UsageError(f"{option} {wanted}: {table.path} has no 'source' column; drop {option}")
    hits = [n for n in names if wanted in (n, Path(n).name, Path(n).stem)]
    if len(hits) != 1:
        why = "matches none" if not hits else f"matches {len(hits)}"
        raise UsageError(f"{option} {wanted}: {why} of the recordings in {table.path} ({', '.join(names[:8])}); "
                         "give the full name")
    return table.rows(np.asarray(table.source) == hits[0])


def _accepted_flags(text: str) -> int:
    """The bit set of the flag names in ``--accept-flags`` (comma-separated); a usage error names an
    unknown one."""
    from ..pipeline.live import flag_bits

    try:
        return flag_bits(text)
    except ValueError as e:
        raise UsageError(f"--accept-flags: {e}") from None


def _flag_list(bits: int) -> list[str]:
    from ..ik.config import FLAG_NAMES

    return [name for bit, name in FLAG_NAMES.items() if bits & bit]


def _invalid_rows(valid, flags, describe, source: str, skip: bool, accept: int = 0, index=None, held=None):
    """The frames to keep (a boolean mask), or None to keep all. A frame is held back when it carries a
    solver flag not in ``accept`` (a bit set), or is marked invalid (``valid`` False) without any flag;
    held-back frames are a usage error naming the first (``index``: row numbers in the file) unless
    ``skip`` leaves them out. ``held``, a dict, counts the frames left out by flag name (``invalid``:
    those without a flag)."""
    import numpy as np

    if valid is None and flags is None:
        return None
    n = len(valid) if valid is not None else len(flags)
    f = np.zeros(n, np.int64) if flags is None else np.asarray(flags, np.int64).reshape(n)
    v = np.ones(n, bool) if valid is None else np.asarray(valid, bool).reshape(n)
    bad = ((f & ~accept) != 0) | (~v & (f == 0))
    if not bad.any():
        return None
    first = np.flatnonzero(bad)
    i = int(first[0])
    row = i if index is None else int(index[i])
    names = describe(i)
    why = f" (flags: {names})" if names else ""
    what = "marked invalid" if not v[i] else "flagged"
    if not skip:
        more = f" ({first.size - 1} more such frame(s) in all)" if first.size > 1 else ""
        unaccepted = _flag_list(int(f[i]) & ~accept)
        accept_hint = f", --accept-flags {','.join(unaccepted)} to send such frames" if unaccepted else ""
        raise UsageError(
            f"{source}: frame {row} is {what} by the solver{why}{more}; the command stream has no "
            f"'valid' column, so flagged and invalid frames stop the run: pass --skip-invalid to leave them out "
            f"(the others keep their times){accept_hint}, or fix the recording"
        )
    if first.size == n:
        raise UsageError(f"{source}: every frame ({n}) is flagged or marked invalid by the solver{why}; nothing "
                         "to convert (--accept-flags names the flags to send anyway)")
    from ..ik.config import FLAG_NAMES

    counts = {name: int(np.count_nonzero(f[bad] & (bit & ~accept))) for bit, name in FLAG_NAMES.items()}
    counts = {k: c for k, c in counts.items() if c}
    plain = int(np.count_nonzero(bad & (f & ~accept == 0)))
    if plain:
        counts["invalid"] = plain
    if held is not None:
        for k, c in counts.items():
            held[k] = held.get(k, 0) + c
        held["frames"] = held.get("frames", 0) + int(first.size)
    by = ", ".join(f"{c} {k}" for k, c in counts.items())
    print(f"note: {source}: left out {first.size} frame(s) the solver flagged or marked invalid ({by}; "
          "--skip-invalid)", file=sys.stderr)
    return ~bad


def _check_angle_frames(q, hand, source: str, degrees: bool = False, index=None) -> None:
    """Usage error naming ``source``, the first bad frame and joint, unless every angle is usable.

    ``q`` is ``(T, 20)`` radians; ``degrees`` says the file held degrees (the value is reported as read);
    ``index`` maps rows of ``q`` to the file's row numbers (frames left out before).
    """
    import numpy as np

    from ..retarget import inspire

    bad = inspire.joint_limit_violations(q, hand)
    if not bad.any():
        return
    frames = np.flatnonzero(bad.any(-1))
    i = int(frames[0])
    j = int(np.argmax(bad[i]))
    row = i if index is None else int(index[i])
    name = hand.joint_names[j]
    v = float(q[i, j])
    lo, hi = float(np.asarray(hand.lower)[j]), float(np.asarray(hand.upper)[j])
    read = f"{np.rad2deg(v):.6g} deg" if degrees else f"{v:.6g} rad"
    more = int(bad.sum()) - 1
    also = f" ({more} more bad angle(s) in {len(frames)} frame(s) in all)" if more else ""
    if not np.isfinite(v):
        raise UsageError(
            f"{source}: frame {row}, joint {name}: angle is {read}{also}; remove or interpolate the frames "
            "without a valid measurement before converting"
        )
    raise UsageError(
        f"{source}: frame {row}, joint {name}: angle {read} is beyond the joint limits [{lo:.4g}, {hi:.4g}] rad "
        f"by more than {inspire.ANGLE_LIMIT_TOLERANCE:g} rad{also}; check the units (radians unless --degrees) "
        "and the joint order (seed ID order), or fix the frame"
    )


def _check_timestamps(t, source: str, from_file: bool, start_time: float = 0.0, index=None) -> None:
    """Usage error naming ``source`` and the first frame whose timestamp is unusable (``index``: rows of
    ``t`` → the file's row numbers)."""
    import numpy as np

    from ..retarget import inspire

    where = "the file's timestamp" if from_file else "--start-time + frame/fps"
    if from_file and start_time:
        where += " + --start-time"
    lim = inspire.MAX_STAMP_SECONDS + 1
    row = (lambda i: i) if index is None else (lambda i: int(index[i]))  # noqa: E731
    with np.errstate(invalid="ignore"):
        nonfinite = ~np.isfinite(t)
        neg = t < 0
        late = t >= lim
    for mask, what, fix in (
        (nonfinite, "is not finite", "fix or drop that frame's timestamp"),
        (neg, "is negative; ROS stamps are >= 0 (ROS 1 time is unsigned)", "shift with --start-time"),
        (late, f"is not before 2**31 = {lim} s, so it does not fit ROS 2's int32 sec (2038-01-19T03:14:08Z)",
         "timestamps must be seconds, not ms/us/ns; rescale, or shift with --start-time"),
    ):
        if mask.any():
            i = int(np.argmax(mask))
            raise UsageError(f"{source}: frame {row(i)}: timestamp {float(t[i])!r} s ({where}) {what}; {fix}")
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise UsageError(
            f"{source}: frame {row(i)}: timestamp {float(t[i])!r} s is before frame {row(i - 1)}'s "
            f"{float(t[i - 1])!r} s; "
            "timestamps must be non-decreasing (sort the frames, or pass --fps)"
        )


def _solve(hand, landmarks):
    import numpy as np

    import wuji_jax

    lm = np.asarray(landmarks, np.float64)
    if lm.shape[-2:] != (21, 3) or lm.ndim not in (2, 3):
        raise UsageError(f"--landmarks: expected shape (T, 21, 3) or (21, 3) in metres; got {lm.shape}")
    solve_sequence = getattr(wuji_jax, "solve_sequence", None)
    solve = getattr(wuji_jax, "solve", None)
    if lm.ndim == 3 and lm.shape[0] > 1 and solve_sequence is not None:
        res = solve_sequence(hand, lm)
    elif solve is not None:
        res = solve(hand, lm)
    else:
        raise ImportError("--landmarks needs wuji_jax.solve, which this version lacks; pass --angles instead")
    q = np.asarray(res.angles, np.float64).reshape(-1, hand.num_joints)
    valid = getattr(res, "valid", None)
    flags = getattr(res, "flags", None)
    return (q, None if valid is None else np.asarray(valid, bool).reshape(-1),
            None if flags is None else np.asarray(flags).reshape(-1))


def _flag_names(flags):
    """``describe(i)``: the solver flag names of frame ``i`` of the bit sets ``flags``."""
    def describe(i: int) -> str:
        if flags is None:
            return ""
        from ..ik.config import FLAG_NAMES

        f = int(flags[i])
        return ", ".join(name for bit, name in FLAG_NAMES.items() if f & bit)
    return describe


def _calibration(args, hand, held: dict | None = None):
    from ..retarget import inspire

    if args.calibration:
        where = f"--calibration {args.calibration}"
        try:
            with open(args.calibration, encoding="utf-8") as f:
                d = json.load(f)
        except OSError as e:
            raise OSError(f"{where}: cannot read ({e.strerror or e})") from None
        except RecursionError:
            raise UsageError(f"{where}: nested too deeply to be a calibration; expected "
                             "{'open': [6 numbers], 'closed': [6 numbers]}") from None
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise UsageError(f"{where}: not JSON ({e})") from None
        try:
            return inspire.calibration_from_dict(d)
        except (ValueError, TypeError, RecursionError) as e:
            raise UsageError(f"{where}: not a calibration ({type(e).__name__ if isinstance(e, RecursionError) else e})"
                             ) from None
    if args.reference:
        refs = {}
        for item in args.reference:
            name, sep, path = item.partition("=")
            if not sep or not path:
                raise UsageError(f"--reference {item!r}: expected NAME=FILE")
            source = f"--reference {name}={path}"
            tab = _read_angles(path, hand, args.degrees, prefix=f"--reference {name}=")
            keep = _invalid_rows(tab.valid, tab.flags, tab.describe_flags, source, args.skip_invalid,
                                 _accepted_flags(args.accept_flags), tab.row, held)
            if keep is not None:
                tab = tab.rows(keep)
            _check_angle_frames(tab.angles, hand, source, args.degrees, tab.row)
            refs[name] = tab.angles[0] if tab.ndim == 1 else tab.angles
        return inspire.calibrate(refs, hand)
    return None


def run_inspire(args) -> int:
    """Run the verb on parsed ``args``; returns the exit status.

    Raises the main CLI's ``UsageError`` (a ``ValueError``; exit status 2, one line naming the file and
    frame) for angles that are non-finite or beyond the joint limits by more than
    ``inspire.ANGLE_LIMIT_TOLERANCE``, and for timestamps that are non-finite, decreasing or outside
    ``[0, 2**31)`` s (what a ROS stamp holds); see the module docstring.
    """
    import numpy as np

    from ..retarget import inspire
    from ..hand.model import load_hand

    if not 0 < args.speed_ratio <= 1:
        raise UsageError(f"--speed-ratio must be in (0, 1]; got {args.speed_ratio}")
    if args.fps is not None and not (np.isfinite(args.fps) and args.fps > 0):
        raise UsageError(f"--fps must be a finite number > 0; got {args.fps}")
    accept = _accepted_flags(args.accept_flags)
    fmt = args.format or "jsonl"
    if args.output != "-":  # the one output rule, before any work
        inputs = [args.angles, args.landmarks, args.calibration,
                  *(item.partition("=")[2] for item in args.reference or ())]
        fmt = checked_output(args.output, [f for f in inputs if f], _STREAM_FORMATS, "the command stream",
                             default="jsonl", given=args.format)

    if args.angles:
        tab = _read_angles(args.angles, args.side or "right", args.degrees)
        tab = _one_source(tab, args.source)
        try:
            from .tables import table_side

            side, note = table_side(tab, args.side)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if note:
            print(f"note: {note}", file=sys.stderr)
        hand = load_hand(side)
        q, ts, valid, flags, describe = tab.angles, tab.timestamps, tab.valid, tab.flags, tab.describe_flags
        rows = tab.row  # the frames' row numbers in the file (a --source selection keeps them)
        source = args.angles
    else:
        if args.source is not None:
            raise UsageError("--source applies only to --angles (a table of several recordings)")
        from .tables import read_landmarks

        try:
            lm = read_landmarks(args.landmarks)
        except ValueError as e:
            raise UsageError(str(e)) from None
        side = args.side or "right"
        hand = load_hand(side)
        q, valid, flags = _solve(hand, lm.world)
        ts, describe = lm.timestamps, _flag_names(flags)
        rows = np.arange(q.shape[0])
        source = f"{args.landmarks} (solved angles)"
    n = q.shape[0]
    if n == 0:
        raise UsageError("no frames in the input")
    pos = np.arange(n)  # each frame's place in the input: its time without file timestamps
    held: dict[str, int] = {}
    keep = _invalid_rows(valid, flags, describe, source, args.skip_invalid, accept, rows, held)
    if keep is not None:
        q, pos = q[keep], pos[keep]
        ts = None if ts is None else np.asarray(ts)[keep]
    index = np.asarray(rows)[pos]
    _check_angle_frames(q, hand, source, args.degrees and bool(args.angles), index)
    from_file = not (args.fps is not None or ts is None)
    if not from_file:
        t = pos / (args.fps or _DEFAULT_FPS)
    else:
        t = np.asarray(ts, np.float64).reshape(-1)
        if t.shape != (q.shape[0],):
            raise UsageError(f"timestamps: expected {q.shape[0]} values to match the frames; got {t.shape[0]}")
    t = t + args.start_time
    _check_timestamps(t, args.angles or args.landmarks, from_file, args.start_time, index)
    n = q.shape[0]

    cal = _calibration(args, hand, held)
    try:
        method, urdf, note = inspire.choose_command_map(args.command_map, args.urdf, side)
    except (inspire.InspireModelNotFound, ValueError) as e:
        raise UsageError(f"--command-map {args.command_map}: {e}") from None
    if note:
        print(f"note: {note}", file=sys.stderr)
    if method == "retarget":
        cmd = np.asarray(inspire.retarget(q, urdf, calibration=cal, hand=hand), np.float64)
    else:
        cmd = np.asarray(inspire.to_inspire(q, cal, hand), np.float64)
    if args.smooth != "none":
        cmd, t = inspire.smooth(cmd, t, args.smooth, tau=args.tau, min_cutoff=args.min_cutoff, beta=args.beta)
    cmd, t = inspire.limit_rate(cmd, t, args.speed_ratio)
    names = inspire.MOTOR_NAMES if args.names == "words" else None
    if args.output == "-":
        inspire.write_command_stream(sys.stdout, cmd, t, side, fmt, frame_id=args.frame_id, names=names)
    else:
        inspire.write_command_stream(Path(args.output), cmd, t, side, fmt, frame_id=args.frame_id,
                                     names=names)
    back = ""
    if held.get("frames"):
        by = ", ".join(f"{c} {k}" for k, c in held.items() if k != "frames")
        back = f"; held back {held['frames']} flagged or invalid frame(s) ({by})"
    if args.output != "-" or back:
        print(f"wrote {n} {side}-hand commands ({fmt}, {method}) to "
              f"{args.output if args.output != '-' else 'stdout'}{back}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m wuji_jax.inspire_cli ...``), for use before the main CLI registers it."""
    parser = argparse.ArgumentParser(prog="wuji-jax")
    add_inspire_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
