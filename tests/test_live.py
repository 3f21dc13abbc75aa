"""wuji_jax.live and ``wuji-jax live``: the bundled video standing in for a camera, into JSON lines, a ROS 2
bag (read back with rosbags), UDP on 127.0.0.1; Ctrl-C mid-stream; sources and displays that are not there.

One in-process stream (the joint map: the retarget's program is its own module's to test) serves the output
checks; one CLI subprocess plays the video at its frame rate and is interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mediapipe")
pytest.importorskip("rosbags")

from wuji_jax import live  # noqa: E402
from wuji_jax.pipeline.live_outputs import JsonlOutput, Rosbag2Output, UdpOutput  # noqa: E402

VIDEO = Path(__file__).resolve().parents[1] / "assets" / "samples" / "human_hand_video.mp4"
TOPIC = "/inspire_hand/ctrl/right_hand"
FRAMES = 16


def _read_bag(path: Path):
    from rosbags.highlevel import AnyReader

    with AnyReader([path]) as reader:
        assert [(c.topic, c.msgtype) for c in reader.connections] == [(TOPIC, "sensor_msgs/msg/JointState")]
        return [(t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()]


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """The first FRAMES frames of the bundled video, read as fast as possible, into all three outputs."""
    tmp = tmp_path_factory.mktemp("live")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5.0)
    outputs = [JsonlOutput(tmp / "take.jsonl"), Rosbag2Output(tmp / "bag", [VIDEO]),
               UdpOutput("127.0.0.1", rx.getsockname()[1])]
    s = live.Live(VIDEO, side="auto", max_frames=FRAMES, as_fast_as_possible=True, method="joint_map",
                  start_time=100.0, outputs=outputs)
    cmds = list(s)
    datagrams = []
    try:
        for _ in cmds:
            datagrams.append(json.loads(rx.recv(65536)))
    except socket.timeout:
        pass
    rx.close()
    return tmp, s, cmds, datagrams


def test_commands_and_summary(stream):
    _, s, cmds, _ = stream
    summary = s.summary()
    f = summary["frames"]
    assert f["read"] == FRAMES and f["dropped"] == 0 and f["sent"] == len(cmds) == FRAMES  # a hand in every frame
    assert summary["side"] == "right" and summary["command_map"] == "joint_map"
    assert [c.index for c in cmds] == list(range(FRAMES))
    for c in cmds:
        assert c.command.shape == (6,) and np.all((0 <= c.command) & (c.command <= 1))
        assert np.array_equal(c.rh56, np.round(c.command * 1000).astype(int))
        assert c.message["topic"] == TOPIC and c.kind == "fit"
    stamps = [c.stamp for c in cmds]
    assert stamps[0] == pytest.approx(100.0) and np.all(np.diff(stamps) == pytest.approx(1 / 30, rel=1e-3))
    for stage in ("mediapipe", "solve", "command", "publish", "compute", "total"):
        lat = summary["latency_ms"][stage]
        assert lat["n"] >= FRAMES - 1 and 0 <= lat["p50"] <= lat["p95"]
    json.dumps(summary)  # JSON-ready


def test_bag_reads_back(stream):
    tmp, _, cmds, _ = stream
    assert sorted(p.name for p in (tmp / "bag").iterdir()) == ["bag.mcap", "metadata.yaml"]
    msgs = _read_bag(tmp / "bag")
    assert len(msgs) == len(cmds)
    times = [t for t, _ in msgs]
    stamps = [m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for _, m in msgs]
    assert np.all(np.diff(times) > 0) and np.all(np.diff(stamps) > 0)
    assert times[0] == 100 * 10**9 and stamps == pytest.approx([c.stamp for c in cmds], abs=1e-9)
    for (_, m), c in zip(msgs, cmds):
        assert list(m.name) == ["1", "2", "3", "4", "5", "6"]
        assert np.all((0 <= m.position) & (m.position <= 1)) and np.allclose(m.position, c.command)
    assert not [p for p in tmp.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_json_lines_and_udp(stream):
    tmp, _, cmds, datagrams = stream
    lines = [json.loads(x) for x in (tmp / "take.jsonl").read_text().splitlines()]
    assert len(lines) == len(cmds)
    for rec, c in zip(lines, cmds):
        assert rec["topic"] == TOPIC and rec["type"] == "sensor_msgs/msg/JointState" and rec["kind"] == "fit"
        assert rec["t"] == pytest.approx(c.stamp) and rec["frame"] == c.index
        assert rec["msg"]["header"]["stamp"] == c.message["msg"]["header"]["stamp"]
        assert rec["msg"]["name"] == ["1", "2", "3", "4", "5", "6"]
        assert rec["rh56"] == [int(v) for v in c.rh56] and all(0 <= v <= 1000 for v in rec["rh56"])
        assert np.allclose(rec["msg"]["position"], c.command, atol=1e-6)
    assert datagrams == lines  # one datagram per command, the same object (127.0.0.1 loses none)


def test_flag_names():
    assert live.flag_bits("mirrored, high_residual") == 8 | 4
    assert live.flag_bits(None) == 0
    with pytest.raises(ValueError, match="unknown flag 'nope'"):
        live.flag_bits("nope")


def _cli(*argv, **kw):
    return subprocess.run([sys.executable, "-m", "wuji_jax", "live", *argv], capture_output=True, text=True,
                          timeout=120, **kw)


def test_unopenable_camera_and_bad_outputs(tmp_path):
    r = _cli("99", "-o", str(tmp_path / "x.jsonl"))
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "camera 99: cannot be opened" in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())  # nothing written
    r = _cli(str(tmp_path / "missing.mp4"))
    assert r.returncode == 1 and "no such file" in r.stderr and r.stderr.count("\n") == 1
    r = _cli(str(VIDEO), "-o", str(tmp_path / "x.csv"))
    assert r.returncode == 2 and ".csv" in r.stderr and r.stderr.count("\n") == 1
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "v.mp4").write_bytes(b"x")
    r = _cli(str(tmp_path / "in" / "v.mp4"), "-o", str(tmp_path / "in"), "--format", "rosbag2")
    assert r.returncode == 1 and "lies in the bag folder" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == ["v.mp4"]
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    r = _cli(str(VIDEO), "--show", env=env)
    assert r.returncode == 1 and "--show: no display" in r.stderr and r.stderr.count("\n") == 1


def test_ctrl_c_mid_stream_leaves_a_readable_bag(tmp_path):
    """The video at its own 30 fps, as a camera: interrupted once commands flow; rc 130, one line, the bag
    complete with every command sent, the summary written."""
    bag, summary = tmp_path / "bag", tmp_path / "s.json"
    p = subprocess.Popen([sys.executable, "-m", "wuji_jax", "live", str(VIDEO), "--side", "right",
                          "--command-map", "joint_map", "-o", "-", "-o", str(bag), "--format", "rosbag2",
                          "--summary", str(summary)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline() for _ in range(10)]  # ten commands: the stream runs
        assert all(lines), p.stderr.read() if p.poll() is not None else lines
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("wuji-jax: interrupted after") and "bag" in err
    sent = len(lines) + len(out.splitlines())
    msgs = _read_bag(bag)
    assert len(msgs) == sent and np.all(np.diff([t for t, _ in msgs]) > 0)
    s = json.loads(summary.read_text())
    assert s["interrupted"] and s["frames"]["sent"] == sent and s["mode"] == "real_time"
    assert s["frames"]["read"] < 621 and s["frames"]["read"] >= s["frames"]["processed"] + s["frames"]["dropped"]


def test_one_program_serves_both_sides():
    """The retarget's command maps of the two sides share one compiled program (the side's hand, robot
    model and side are its arguments): making the left map's program after the right one's compiles
    nothing. The left map's first command is the public retarget of the left hand's angles (a mirrored
    frame fitted as a right hand gives them), warm-started as the stream does, not the right hand's."""
    import wuji_jax as wj
    from wuji_jax import inspire as wi

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compile_log import compiles

    solver = wj.FrameSolver(wj.load_hand("right"))
    right, left = live.command_map("right", "retarget")[0], live.command_map("left", "retarget")[0]
    right.compile(solver, push=False)
    with compiles() as log:
        left.compile(solver, push=False)
    assert not log, log
    # a right hand's frame: the landmarks a stream fits for the left hand that is its mirror image
    world = np.load(VIDEO.with_name("human_hand_video_landmarks.npz"))["world"][100].astype(np.float32)
    res, send = left.fit(solver, world, np.zeros(20, np.float32), 0.0)
    send()
    hand = wj.load_hand("left")
    angles = res.angles[None]
    want = wi.retarget(angles, wi.find_inspire_urdf(side="left"), hand=hand, q0=wi.to_inspire(angles, hand=hand))
    np.testing.assert_allclose(left.raw, np.asarray(want)[0], atol=2e-3)
    wrong = wi.retarget(angles, wi.find_inspire_urdf(side="right"), q0=wi.to_inspire(angles))
    assert np.abs(left.raw - np.asarray(wrong)[0]).max() > 0.02  # the sides differ on this frame
