"""``wuji-jax live [SOURCE]``: a camera, a video file or a stream → Inspire commands, frame by frame.

A thin layer over :class:`wuji_jax.live.Live` and :mod:`wuji_jax.live_outputs`; the verb is, in Python::

    outputs = [JsonlOutput("take.jsonl"), Rosbag2Output("take_bag"), UdpOutput("127.0.0.1", 9870)]
    summary = Live(0, side="auto", outputs=outputs).run()

Examples::

    wuji-jax live                                   # camera 0, counts and latencies only
    wuji-jax live 0 -o take.jsonl -o take_bag --format rosbag2 --udp 127.0.0.1:9870 --show
    wuji-jax live video.mp4 -o - --max-frames 100   # a file played at its frame rate, JSON lines on stdout
    wuji-jax live rtsp://camera.local/stream --side right --summary live.json

Outputs (more than one allowed): ``-o FILE.jsonl`` (or ``.ndjson``), ``-o -`` (stdout), ``-o DIR --format
rosbag2`` (a ROS 2 bag folder, MCAP storage); ``--udp HOST:PORT``. Files follow the one output rule
(:mod:`wuji_jax.outputs`): never an input, written under a temporary name and renamed when the stream ends.
A summary JSON (:meth:`wuji_jax.live.Live.summary`, plus ``first_command_after_process_start_seconds``) goes
to ``--summary PATH``, else beside the first file output as ``<stem>_summary.json``.

Ctrl-C ends the stream: the outputs are closed (the bag complete and readable), the summary is written, one
line says so, and the exit status is 130.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .cli_common import PROG, UsageError, add_command_map_option, add_smoothing_options, checked_output

__all__ = ["add_live_command", "run_live"]

_JSONL = {".jsonl": "jsonl", ".ndjson": "jsonl"}


def add_live_command(subparsers) -> argparse.ArgumentParser:
    """Add the ``live`` verb to an ``argparse`` subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "live",
        help="camera, video file or stream -> Inspire commands, frame by frame (JSONL, ROS 2 bag, UDP)",
        description=(
            "Run MediaPipe's hand landmarker on a camera (default 0), a video file (played at its own frame "
            "rate, as a camera delivers frames) or a stream URL; fit each frame with FrameSolver, warm-started "
            "from the last; turn it into the Inspire hand's six opening fractions, smoothed and limited to the "
            "motors' speed; and publish each command: JSON lines (-o FILE.jsonl, -o - for stdout), a ROS 2 bag "
            "(-o DIR --format rosbag2, MCAP storage, topic /inspire_hand/ctrl/<side>_hand, "
            "sensor_msgs/msg/JointState) and UDP datagrams (--udp HOST:PORT). Frames that arrive while the "
            "pipeline is busy are dropped (the latest wins); a lost hand holds the last command; frames the "
            "solver flags send nothing. At the end: frames read, dropped, sent, held back and lost, and each "
            "stage's latency (p50/p95), printed and written to a summary JSON. Python: wuji_jax.live.Live."),
    )
    p.add_argument("source", nargs="?", default="0", metavar="SOURCE",
                   help="camera index (default 0), video file, or stream URL (rtsp://, http://, ...)")
    p.add_argument("-o", "--output", action="append", default=[], metavar="OUT",
                   help="FILE.jsonl (one JSON object per command: stamp, topic, the JointState message, RH56 "
                        "0-1000 values), '-' for stdout, or DIR with --format rosbag2; repeat for several")
    p.add_argument("--format", choices=("jsonl", "rosbag2"), default=None,
                   help="format of the -o outputs without a suffix (rosbag2: a ROS 2 bag folder, MCAP storage)")
    p.add_argument("--udp", action="append", default=[], metavar="HOST:PORT",
                   help="send one JSON datagram per command to HOST:PORT (repeat for several)")
    p.add_argument("--side", choices=("auto", "left", "right"), default="auto",
                   help="hand model and topic (default auto: the first hand seen decides)")
    p.add_argument("--max-frames", type=int, default=None, metavar="N", help="stop after N frames read")
    p.add_argument("--as-fast-as-possible", action="store_true",
                   help="read a video file without waiting for its frame times (no frame dropped)")
    p.add_argument("--accept-flags", metavar="NAME,...", default="",
                   help="solver flags that do not hold a frame back (names as wuji-jax inspire --accept-flags: "
                        "wuji_jax.solver.FLAG_NAMES); other flagged frames send nothing")
    p.add_argument("--on-lost", choices=("hold", "skip", "open"), default="hold",
                   help="a frame without a hand: send the last command again (hold, default), nothing (skip), "
                        "or open the hand at the rate limit (open)")
    add_command_map_option(p, "joint angles -> commands: the task-space retarget where the library and an Inspire "
                        "model are found, else the joint map (auto, default)")
    p.add_argument("--speed-ratio", type=float, default=1.0, metavar="R",
                   help="motor speed ratio in (0, 1]; commands never ask for faster travel than 0.8 s / R per "
                        "full stroke (default 1)")
    add_smoothing_options(p, "exponential")
    p.add_argument("--names", choices=("ids", "words"), default="ids",
                   help="JointState name[]: motor IDs '1'..'6' (default) or little, ring, ... thumb_rotation")
    p.add_argument("--frame-id", default="", help="header frame_id of the messages (default empty)")
    p.add_argument("--start-time", type=float, default=None, metavar="S",
                   help="stamp = S + the frame's time (default: the wall-clock time of the first frame)")
    p.add_argument("--mirrored", action="store_true", help="the frames are mirror images (a selfie preview)")
    p.add_argument("--model", metavar="FILE.task", default=None,
                   help="MediaPipe hand_landmarker.task (default: the packaged one)")
    p.add_argument("--show", action="store_true",
                   help="a preview window: landmarks, the fit and the six channels (needs a display; q or Esc "
                        "ends the stream)")
    p.add_argument("--summary", metavar="PATH.json", default=None,
                   help="write the summary here (default: <stem>_summary.json beside the first file output)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=run_live)
    return p


def _since_process_start() -> float | None:
    """Seconds since this process started (Linux ``/proc``), None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _plan_outputs(args) -> tuple[list[tuple[str, str]], list]:
    """``[(format, out)]`` for ``-o`` and ``[(host, port)]`` for ``--udp``, checked before any work."""
    from ..pipeline.live_outputs import check_bag_output, parse_udp_address

    inputs = [args.source, args.model]
    plan = []
    for out in args.output:
        if out == "-":
            if args.format == "rosbag2" and len(args.output) == 1:
                raise UsageError("-o - is stdout (JSON lines); a ROS 2 bag needs a folder: -o DIR --format rosbag2")
            plan.append(("stdout", out))
            continue
        suffix = Path(out).suffix.lower()
        if not suffix and args.format == "rosbag2":
            check_bag_output(out, inputs)
            plan.append(("rosbag2", out))
        elif not suffix and args.format is None:
            raise UsageError(f"-o {out}: no suffix; end the name with .jsonl for JSON lines, or give --format "
                             "rosbag2 for a ROS 2 bag folder")
        else:
            checked_output(out, inputs, _JSONL, "the command stream", default="jsonl",
                           given="jsonl" if not suffix else None)
            plan.append(("jsonl", out))
    if sum(kind == "stdout" for kind, _ in plan) > 1:
        raise UsageError("-o - given twice")
    try:
        udp = [parse_udp_address(a) for a in args.udp]
    except ValueError as e:
        raise UsageError(str(e)) from None
    return plan, udp


def _summary_path(args, plan) -> Path | None:
    if args.summary:
        return Path(args.summary)
    for kind, out in plan:
        if kind in ("jsonl", "rosbag2"):
            p = Path(out)
            return p.with_name(f"{p.stem if kind == 'jsonl' else p.name}_summary.json")
    return None


def _check_display() -> None:
    """ValueError (one line) where no preview window can open."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise ValueError("--show: no display (DISPLAY and WAYLAND_DISPLAY are not set); run without --show, or "
                         "where a display exists")
    import cv2

    try:
        cv2.namedWindow("wuji-jax live", cv2.WINDOW_NORMAL)
    except cv2.error as e:
        raise ValueError(f"--show: OpenCV cannot open a window ({' '.join(str(e).split())[:160]})") from None


class _Preview:
    """The ``--show`` window: each command's frame with the landmarks, the fit and the six bars."""

    def __init__(self):
        import cv2

        self.cv2 = cv2

    def show(self, cmd) -> bool:
        """Draw ``cmd``; False when the user closed the preview (q, Esc or the window's close button)."""
        from ..viz.overlay import project_keypoints, render_overlay_frame

        cv2 = self.cv2
        fit = None
        if cmd.result is not None and cmd.image_landmarks is not None:
            try:
                fit, _ = project_keypoints(cmd.world, cmd.image_landmarks, cmd.result.keypoints)
            except ValueError:
                fit = None
        text = f"frame {cmd.index}  t {cmd.t:.2f} s  {cmd.side}  {cmd.kind}"
        img = render_overlay_frame(cmd.frame.image, cmd.image_landmarks, fit, cmd.command, text=text)
        cv2.imshow("wuji-jax live", img)
        key = cv2.waitKey(1) & 0xFF
        visible = cv2.getWindowProperty("wuji-jax live", cv2.WND_PROP_VISIBLE) >= 1
        return key not in (ord("q"), 27) and visible

    def close(self) -> None:
        self.cv2.destroyAllWindows()


def _report(s: dict, where: Path | None) -> list[str]:
    f = s["frames"]
    share = f"{100 * s['commands_per_frame']:.1f} %" if s["commands_per_frame"] is not None else "-"
    held = ", ".join(f"{c} {k}" for k, c in s["held_back_flags"].items())
    lines = [f"live: {s['source']}, {s['side'] or 'no'} hand, {s['command_map'].replace('_', ' ')}: {f['read']} frames "
             f"read, {f['dropped']} dropped, {f['sent']} commands ({share} of the frames; {f['fitted']} fitted), "
             f"{f['lost']} lost, {f['held_back']} held back" + (f" ({held})" if held else "")]
    lat = s["latency_ms"]
    parts = [f"{k} {v['p50']:.2f}/{v['p95']:.2f}" for k, v in lat.items() if v["n"]]
    if parts:
        lines.append("live: latency ms p50/p95: " + ", ".join(parts))
    first = s.get("first_command_after_process_start_seconds")
    t = [f"compile {s['compile_seconds']:.2f} s" if s["compile_seconds"] is not None else None,
         f"first command {first:.2f} s after the process started" if first is not None else None,
         f"summary: {where}" if where else None]
    if any(t):
        lines.append("live: " + "; ".join(x for x in t if x))
    return lines


def run_live(args) -> int:
    """Run the verb on parsed ``args``; returns the exit status (130 after Ctrl-C)."""
    import math

    if args.max_frames is not None and args.max_frames < 1:
        raise UsageError(f"--max-frames must be >= 1, got {args.max_frames}")
    if not 0 < args.speed_ratio <= 1:
        raise UsageError(f"--speed-ratio must be in (0, 1]; got {args.speed_ratio}")
    if args.start_time is not None and not (math.isfinite(args.start_time) and 0 <= args.start_time < 2**31):
        raise UsageError(f"--start-time must be seconds in [0, 2^31); got {args.start_time}")
    if args.summary and Path(args.summary).suffix.lower() != ".json":
        raise UsageError(f"--summary {args.summary}: the summary is JSON; end the name with .json")
    from ..pipeline.live import Live, flag_bits
    from ..pipeline.live_outputs import JsonlOutput, Rosbag2Output, UdpOutput
    from ..data.outputs import atomic_json, check_output

    try:
        accept = flag_bits(args.accept_flags)
    except ValueError as e:
        raise UsageError(f"--accept-flags: {e}") from None
    plan, udp = _plan_outputs(args)
    where = _summary_path(args, plan)
    if where is not None:
        check_output(where, [args.source, args.model], outputs=[o for k, o in plan if k != "stdout"],
                     option="--summary")
    if args.show:
        _check_display()
    quiet = args.quiet or not sys.stderr.isatty()

    def status(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    from ..retarget.inspire import MOTOR_NAMES

    interrupted = False
    stream = None
    outputs: list = []
    try:
        stream = Live(args.source, side=args.side, max_frames=args.max_frames,
                      as_fast_as_possible=args.as_fast_as_possible, accept_flags=accept, on_lost=args.on_lost,
                      method=args.command_map, speed_ratio=args.speed_ratio,
                      smoothing=None if args.smooth == "none" else args.smooth, tau=args.tau,
                      min_cutoff=args.min_cutoff, beta=args.beta,
                      names=MOTOR_NAMES if args.names == "words" else None, frame_id=args.frame_id,
                      start_time=args.start_time, mirrored=args.mirrored, model=args.model, status=status)
        for kind, out in plan:  # after the source opened: a bad camera leaves no output behind
            outputs.append(JsonlOutput(sys.stdout) if kind == "stdout" else
                           Rosbag2Output(out, [args.source, args.model]) if kind == "rosbag2" else JsonlOutput(out))
        outputs += [UdpOutput(h, port) for h, port in udp]
        stream.outputs = outputs
        if not outputs and not args.show:
            status("live: no output given (-o, --udp): the commands are counted and timed only")
        preview = _Preview() if args.show else None
        last = 0.0
        for cmd in stream:
            if preview is not None and not preview.show(cmd):
                break
            now = time.perf_counter()
            if not quiet and now - last > 0.5:
                last = now
                st = stream.stats
                sys.stderr.write(f"\rlive: {st.processed} frames, {st.sent} commands, {st.dropped} dropped, "
                                 f"{st.lost} lost, {st.held_back} held back")
                sys.stderr.flush()
        if not quiet and last:
            sys.stderr.write("\n")
        if preview is not None:
            preview.close()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if stream is None:  # the source did not open: close what was made
            for out in outputs:
                out.close()
        else:
            stream.close()
    if stream is None:
        print(f"{PROG}: interrupted before the first frame", file=sys.stderr)
        return 130
    s = stream.summary()
    since = _since_process_start()
    s["first_command_after_process_start_seconds"] = (
        None if stream.first_command_seconds is None or since is None
        else since - (time.perf_counter() - stream.created - stream.first_command_seconds))
    s["outputs"] = [{"format": k, "path": o} for k, o in plan] + [{"format": "udp", "address": f"{h}:{p}"}
                                                                  for h, p in udp]
    if where is not None:
        atomic_json(where, s)
    if interrupted:
        f = s["frames"]
        files = ", ".join(o for k, o in plan if k != "stdout")
        print(f"{PROG}: interrupted after {f['read']} frames: {f['sent']} commands sent"
              + (f", {files} closed and complete" if files else "") + (f"; summary: {where}" if where else ""),
              file=sys.stderr)
        return 130
    for line in _report(s, where):
        print(line, file=sys.stderr)
    return 0
