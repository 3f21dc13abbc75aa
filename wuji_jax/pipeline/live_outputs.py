"""Where a live stream's commands go (:class:`wuji_jax.live.Live`'s ``outputs``): JSON lines, a ROS 2 bag, UDP.

Each output has ``write(cmd)`` (a :class:`wuji_jax.live.LiveCommand`) and ``close()``. Files follow the one
output rule of every verb (:mod:`wuji_jax.outputs`): written under a temporary name in the output's folder
and renamed into place by ``close()``, so the final name holds a complete file (an interrupted stream's
commands up to the interruption, once closed) or the previous one.

* :class:`JsonlOutput`: one JSON object a line (:func:`command_record`), to a file or a text stream
  (stdout; flushed every line).
* :class:`Rosbag2Output`: a ROS 2 bag folder, MCAP storage, written by the ``rosbags`` library (pure Python;
  ``pip install 'wuji-jax[live]'``): topic ``/inspire_hand/ctrl/<side>_hand``, type
  ``sensor_msgs/msg/JointState``, ``header.stamp`` the frame's stamp, ``name`` the motor ids, ``position``
  the opening fractions; each message recorded at its stamp, so ``ros2 bag play`` replays the frames'
  timing.
* :class:`UdpOutput`: one datagram a command, the JSON object of :func:`command_record` (UTF-8, no newline),
  for a robot-side bridge.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import IO, Any

from ..data.outputs import OutputError, check_output, real_path, temporary_name

__all__ = ["command_record", "JsonlOutput", "Rosbag2Output", "UdpOutput", "parse_udp_address", "check_bag_output",
           "BAG_VERSION"]

#: rosbag2 metadata version written: 8, the oldest ``rosbags`` writes (read by ROS 2 Iron and later).
BAG_VERSION = 8
_DIGITS = 6  # 1e-6 ≪ the RH56's 1e-3 resolution: what wuji_jax.inspire.write_command_stream writes


def command_record(cmd) -> dict[str, Any]:
    """The JSON object of one command: ``{"t": stamp, "frame", "kind", "side", "topic", "type", "msg",
    "rh56"}``: ``msg`` the ``sensor_msgs/msg/JointState`` dict of :func:`wuji_jax.inspire.ctrl_message`
    (``position`` rounded to 6 digits), ``rh56`` the six register values 0–1000, ``kind`` ``"fit"``,
    ``"hold"`` or ``"open"`` (:class:`wuji_jax.live.LiveCommand`). The keys of
    :func:`wuji_jax.inspire.write_command_stream`'s lines, and ``frame``, ``kind``, ``type``."""
    m = cmd.message
    msg = dict(m["msg"])
    msg["position"] = [round(float(v), _DIGITS) for v in msg["position"]]
    return {"t": float(cmd.stamp), "frame": int(cmd.index), "kind": cmd.kind, "side": cmd.side,
            "topic": m["topic"], "type": m["type"], "msg": msg, "rh56": [int(v) for v in cmd.rh56]}


def _line(cmd) -> str:
    return json.dumps(command_record(cmd), separators=(",", ":"), allow_nan=False)


class JsonlOutput:
    """JSON lines (:func:`command_record`) to ``path`` (whole when closed) or to an open text stream
    (``sys.stdout``; each line flushed as written; a closed pipe ends the output quietly)."""

    def __init__(self, path: str | os.PathLike | IO[str]):
        if hasattr(path, "write"):
            self.path, self._file, self._tmp = None, path, None
        else:
            self.path = Path(path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._tmp = temporary_name(self.path)
            self._file = open(self._tmp, "w", encoding="utf-8", newline="\n")
        self.count = 0
        self._broken = False

    def write(self, cmd) -> None:
        if self._broken:
            return
        try:
            self._file.write(_line(cmd) + "\n")
            if self.path is None:
                self._file.flush()
        except BrokenPipeError:  # `wuji-jax live -o - | head`: the reader left
            self._broken = True
            return
        self.count += 1

    def abort(self) -> None:
        """Discard the file written so far (the final name keeps what it held)."""
        if self._tmp is not None:
            tmp, self._tmp = self._tmp, None
            self._file.close()
            tmp.unlink(missing_ok=True)

    def close(self) -> None:
        """Make the file whole under its final name (stdout: nothing to do)."""
        if self._tmp is None:
            return
        tmp, self._tmp = self._tmp, None
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def parse_udp_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6addr]:PORT`` for IPv6) → ``(host, port)``; ``ValueError`` (one line) otherwise."""
    host, sep, port = str(text).strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--udp {text}: expected HOST:PORT with a port in 1-65535 (e.g. 127.0.0.1:9870)")
    return host, int(port)


class UdpOutput:
    """One UDP datagram a command to ``host:port``: the UTF-8 JSON of :func:`command_record`.

    Raises ``ValueError`` (one line) for a host that does not resolve. Sending never blocks the stream: a
    datagram the network refuses (no listener: ``ECONNREFUSED`` on some systems) is counted in ``failed``.
    """

    def __init__(self, host: str, port: int):
        try:
            family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        except (socket.gaierror, UnicodeError) as e:
            raise ValueError(f"--udp {host}:{port}: cannot resolve the host ({e})") from None
        self.address = addr
        self._sock = socket.socket(family, kind, proto)
        self._sock.setblocking(False)
        self.count = self.failed = 0

    def write(self, cmd) -> None:
        try:
            self._sock.sendto(_line(cmd).encode(), self.address)
            self.count += 1
        except OSError:
            self.failed += 1

    def close(self) -> None:
        self._sock.close()


_BAG_SUFFIXES = (".mcap", ".db3", ".yaml", ".zstd")


def _is_bag(folder: Path) -> bool:
    """A folder ``rosbags`` (or ``ros2 bag record``) wrote: ``metadata.yaml`` and storage files only."""
    files = list(folder.iterdir())
    return any(f.name == "metadata.yaml" for f in files) and all(
        f.is_file() and any(f.name.endswith(s) for s in _BAG_SUFFIXES) for f in files)


def check_bag_output(out: str | os.PathLike, inputs=()) -> Path:
    """The bag folder ``out`` under the output rule, before any work: refused (:class:`OutputError`) where
    it is an input or holds one, or exists as anything but an empty folder or an earlier bag (which
    :class:`Rosbag2Output` replaces once the new one is complete)."""
    out = Path(out)
    if out.suffix.lower() in (".jsonl", ".ndjson", ".json", ".mcap", ".db3"):
        raise OutputError(f"-o {out} --format rosbag2: a ROS 2 bag is a folder; name it without a file suffix")
    check_output(out / "metadata.yaml", inputs, option="-o")
    for f in inputs:
        if isinstance(f, (str, os.PathLike)) and os.fspath(f) not in ("", "-"):
            p = real_path(f)
            if p == real_path(out) or real_path(out) in p.parents:
                raise OutputError(f"{f}: lies in the bag folder {out}, which this run replaces; write the bag "
                                  "elsewhere (-o)")
    if out.exists():
        if not out.is_dir():
            raise OutputError(f"-o {out}: exists and is not a folder; a ROS 2 bag is a folder: name a new one")
        if any(out.iterdir()) and not _is_bag(out):
            raise OutputError(f"-o {out}: the folder exists and is not a ROS 2 bag (metadata.yaml and .mcap "
                              "files); name a new folder")
    return out


class Rosbag2Output:
    """A ROS 2 bag folder with MCAP storage (module docstring), complete when :meth:`close` returns.

    Written to ``.<name>.<pid>.<token>.tmp/<name>/`` beside ``out`` and moved into place when closed (an
    earlier bag at ``out`` is replaced then, not before). Needs ``rosbags`` (extra ``live``).

    Args:
        out: the bag folder (checked by :func:`check_bag_output` with ``inputs``).
        side: ``"left"`` or ``"right"``: the topic (default: the first command's side).
    """

    def __init__(self, out: str | os.PathLike, inputs=(), side: str | None = None):
        try:
            from rosbags.rosbag2 import StoragePlugin, Writer
            from rosbags.typesys import Stores, get_typestore
        except ImportError as e:
            raise ImportError(f"--format rosbag2 needs the rosbags package ({e}); install it with "
                              "pip install 'wuji-jax[live]'") from None
        self.path = check_bag_output(out, inputs)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._store = get_typestore(Stores.ROS2_JAZZY)
        types = self._store.types
        self._JointState = types["sensor_msgs/msg/JointState"]
        self._Header = types["std_msgs/msg/Header"]
        self._Time = types["builtin_interfaces/msg/Time"]
        self._tmp = temporary_name(self.path)
        self._tmp.mkdir()
        self._writer = Writer(self._tmp / self.path.name, version=BAG_VERSION, storage_plugin=StoragePlugin.MCAP)
        self._writer.set_custom_data("writer", "wuji_jax.live")
        self._writer.open()
        self._connection = None
        self.side = side
        self.count = 0

    def write(self, cmd) -> None:
        import numpy as np

        if self._connection is None:  # the first command's topic is the bag's (one stream, one side)
            if cmd.message["type"] != "sensor_msgs/msg/JointState":
                raise ValueError(f"{self.path}: a bag holds sensor_msgs/msg/JointState commands; got "
                                 f"{cmd.message['type']}")
            self.side = self.side or cmd.side
            self._connection = self._writer.add_connection(cmd.message["topic"], "sensor_msgs/msg/JointState",
                                                           typestore=self._store)
        m = cmd.message["msg"]
        stamp = m["header"]["stamp"]
        msg = self._JointState(
            header=self._Header(stamp=self._Time(sec=stamp["sec"], nanosec=stamp["nanosec"]),
                                frame_id=m["header"]["frame_id"]),
            name=list(m["name"]), position=np.asarray(m["position"], np.float64),
            velocity=np.zeros(0, np.float64), effort=np.zeros(0, np.float64))
        data = self._store.serialize_cdr(msg, "sensor_msgs/msg/JointState")
        self._writer.write(self._connection, stamp["sec"] * 1_000_000_000 + stamp["nanosec"], data)
        self.count += 1

    def abort(self) -> None:
        """Discard the bag written so far (an earlier bag at the path stays)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            finally:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def close(self) -> None:
        """Finish the bag (metadata.yaml, the MCAP summary) and move it into place; idempotent."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        try:
            writer.close()
            done = self._tmp / self.path.name
            if self.path.exists():  # an earlier bag (check_bag_output) or an empty folder: out of the way
                old = temporary_name(self.path)
                os.replace(self.path, old)
                os.replace(done, self.path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(done, self.path)
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)


def stdout_output() -> JsonlOutput:
    """:class:`JsonlOutput` on ``sys.stdout`` (``-o -``)."""
    return JsonlOutput(sys.stdout)
