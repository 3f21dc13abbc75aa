"""Inspire hand layer (wuji_jax.retarget.inspire): mapping, calibration, payloads, streams, CLI.

The closure measures are re-typed here from the documented formula (module docstring), as an
independent reference for the library's vectorised kernel.
"""

import csv
import io
import json
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wuji_jax as wj
from wuji_jax import inspire as wi
from wuji_jax.hand.poses import named_pose

FINGERS = {"little": (16, 18, 19), "ring": (12, 14, 15), "middle": (8, 10, 11), "fore": (4, 6, 7)}
FLEXION = [0, 2, 3, 4, 6, 7, 8, 10, 11, 12, 14, 15, 16, 18, 19]  # every joint but the four finger abductions + thumb abd
LITTLE, RING, MIDDLE, FORE, BEND, ROT = range(6)


def reference_measures(q, k_flex=0.22):
    """Closure measures typed from the module docstring: fingers .4/.4/.2, bend .2/.4/.4, rotation .5/.5."""
    q = np.asarray(q, np.float64)
    out = [0.4 * q[..., a] + 0.4 * q[..., b] + 0.2 * q[..., c] for a, b, c in FINGERS.values()]
    out.append(0.2 * q[..., 0] + 0.4 * q[..., 2] + 0.4 * q[..., 3])
    out.append(0.5 * q[..., 1] + 0.5 * k_flex * q[..., 0])
    return np.stack(out, -1)


def random_q(hand, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(np.asarray(hand.lower), np.asarray(hand.upper), size=(n, 20))


# ------------------------------------------------------------------------------------------ mapping


def test_closure_measures_match_documented_formula(right):
    q = random_q(right, 64)
    np.testing.assert_allclose(np.asarray(wi.closure_measures(q, right)), reference_measures(q, float(right.coupling[0, 0])),
                               atol=1e-12)


def test_default_calibration_values(right):
    cal = wi.default_calibration(right)
    up = np.asarray(right.upper, np.float64)
    q_closed = np.zeros(20)
    q_closed[:4] = 0.75 * up[:4]
    for a, b, c in FINGERS.values():
        q_closed[[a, b, c]] = 0.9 * up[[a, b, c]]
    np.testing.assert_allclose(np.asarray(cal.open)[:5], 0, atol=1e-7)
    # thumb rotation opens at the relaxed thumb (CMC flexion and abduction at their lower limits), not flat
    q_relaxed = np.zeros(20)
    q_relaxed[:2] = np.asarray(right.lower, np.float64)[:2]
    assert cal.open[5] == pytest.approx(reference_measures(q_relaxed)[5], rel=1e-6) and cal.open[5] < -0.1
    np.testing.assert_allclose(np.asarray(cal.closed), reference_measures(q_closed), rtol=1e-6)
    assert np.all(np.asarray(cal.closed) > np.asarray(cal.open) + 0.3)


def test_named_poses(right, left):
    cmd = {n: np.asarray(wi.to_inspire(named_pose(n))) for n in ("open", "fist", "point", "victory", "thumbs_up")}
    cal = wi.default_calibration(right)
    lo, hi = np.asarray(cal.open, np.float64), np.asarray(cal.closed, np.float64)
    np.testing.assert_allclose(cmd["open"][:5], 1.0, atol=1e-9)
    # the flat thumb lies past the relaxed one: thumb rotation partly closed
    assert cmd["open"][ROT] == pytest.approx(hi[5] / (hi[5] - lo[5]), rel=1e-6) and 0.6 < cmd["open"][ROT] < 0.8
    np.testing.assert_allclose(cmd["fist"][:4], 0.0, atol=0.02)
    np.testing.assert_allclose(cmd["point"][[LITTLE, RING, MIDDLE]], 0.0, atol=0.02)
    assert cmd["point"][FORE] == pytest.approx(1.0)
    np.testing.assert_allclose(cmd["victory"][[LITTLE, RING]], 0.0, atol=0.02)
    np.testing.assert_allclose(cmd["victory"][[MIDDLE, FORE]], 1.0, atol=1e-9)
    np.testing.assert_allclose(cmd["thumbs_up"][:4], 0.0, atol=0.02)
    assert cmd["thumbs_up"][BEND] == pytest.approx(1.0) and cmd["thumbs_up"][ROT] > cmd["open"][ROT]
    # the fist's thumb, from the formula: bend .2·.65 + .4·.9 + .4·.7 = .77 of .9164; rotation .2465 of .3338
    # above the relaxed thumb's -.1259
    m = reference_measures(named_pose("fist"))
    want = (hi[4:] - m[4:]) / (hi[4:] - lo[4:])
    np.testing.assert_allclose(cmd["fist"][4:], want, atol=1e-6)
    assert 0.1 < cmd["fist"][BEND] < 0.25 and 0.15 < cmd["fist"][ROT] < 0.25
    for n in ("fist", "point", "victory"):  # the same thumb in all three: the same thumb command
        np.testing.assert_allclose(cmd[n][4:], cmd["fist"][4:], atol=1e-12)
    # left and right map the same anatomy to the same command
    q = random_q(right, 16, seed=3)
    np.testing.assert_allclose(np.asarray(wi.to_inspire(q, hand=left)), np.asarray(wi.to_inspire(q, hand=right)),
                               atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_monotone_under_random_flexion(right, seed):
    rng = np.random.default_rng(seed)
    q1 = random_q(right, 256, seed)
    # start anywhere, including beyond the calibration's ends: hyperextended and past full closure
    step = np.zeros_like(q1)
    step[:, FLEXION] = rng.exponential(0.3, size=(256, len(FLEXION))) * (rng.random((256, len(FLEXION))) < 0.5)
    q2 = np.minimum(q1 + step, np.asarray(right.upper))
    c1, c2 = np.asarray(wi.to_inspire(q1)), np.asarray(wi.to_inspire(q2))
    assert np.all(c2 <= c1 + 1e-12)
    assert np.any(c2 < c1 - 0.05)  # and the test does exercise the mapping
    # thumb abduction towards the fingers only ever closes the rotation channel, and touches nothing else
    q3 = q1.copy()
    q3[:, 1] = np.minimum(q1[:, 1] + rng.uniform(0, 0.5, 256), np.asarray(right.upper)[1])
    c3 = np.asarray(wi.to_inspire(q3))
    assert np.all(c3[:, ROT] <= c1[:, ROT] + 1e-12)
    np.testing.assert_array_equal(c3[:, :5], c1[:, :5])
    # finger abduction is ignored
    q4 = q1.copy()
    q4[:, [5, 9, 13, 17]] = rng.uniform(-0.5, 0.5, (256, 4))
    np.testing.assert_array_equal(np.asarray(wi.to_inspire(q4)), c1)


def test_clamped_batched_jitted_and_dtype(right):
    q = random_q(right, 24).reshape(2, 3, 4, 20) * 1.5  # well past the limits on both sides
    c = np.asarray(wi.to_inspire(q))
    assert c.shape == (2, 3, 4, 6) and c.min() >= 0 and c.max() <= 1
    assert wi.to_inspire(np.zeros(20)).shape == (6,)
    np.testing.assert_allclose(np.asarray(jax.jit(wi.to_inspire)(q)), c, atol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.vmap(wi.to_inspire)(q.reshape(-1, 20))), c.reshape(-1, 6), atol=1e-12)
    assert wi.to_inspire(jnp.asarray(q, jnp.float32)).dtype == jnp.float32
    assert wi.to_inspire(q).dtype == jnp.float64
    assert wi.to_inspire(np.zeros((0, 20))).shape == (0, 6)


def test_no_recompile(right):
    q = jnp.asarray(random_q(right, 8))
    from compile_log import compiles

    wi.to_inspire(q)
    q2 = (q + 0.01).block_until_ready()
    with compiles() as log:
        wi.to_inspire(q2)
        wi.to_inspire(q, hand=None)
    assert not log, log


def test_gradients_finite_and_exact(right):
    cal = wi.default_calibration(right)
    q = jnp.asarray(named_pose("open")).at[4].set(0.3).at[6].set(0.3)  # index half-way: inside the range
    g = jax.grad(lambda x: wi.to_inspire(x, cal)[FORE])(q)
    span = float(cal.closed[FORE] - cal.open[FORE])
    np.testing.assert_allclose(np.asarray(g)[[4, 6, 7]], np.array([-0.4, -0.4, -0.2]) / span, rtol=1e-6)
    gc = jax.grad(lambda c: wi.to_inspire(q, c).sum())(cal)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in gc)
    # a degenerate calibration inside jit does not poison gradients with NaN
    bad = wi.InspireCalibration(jnp.zeros(6), jnp.zeros(6))
    gb = jax.jit(jax.grad(lambda c: wi.to_inspire(q, c).sum()))(bad)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in gb)


def test_input_errors(right):
    with pytest.raises(ValueError, match=r"shape \(\*batch, 20\)"):
        wi.to_inspire(np.zeros(19))
    with pytest.raises(ValueError, match=r"shape \(\*batch, 20\)"):
        wi.to_inspire(0.0)
    q = np.zeros((3, 20))
    q[1, 5] = np.nan
    q[2, 0] = np.inf
    with pytest.raises(ValueError, match="2 non-finite"):
        wi.to_inspire(q)
    with pytest.raises(ValueError, match="closed > open.*ring"):
        wi.to_inspire(np.zeros(20), wi.InspireCalibration(jnp.zeros(6), jnp.ones(6).at[1].set(0.0)))
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        wi.to_inspire(np.zeros(20), wi.InspireCalibration(jnp.zeros(5), jnp.ones(5)))
    with pytest.raises(ValueError, match="InspireCalibration"):
        wi.to_inspire(np.zeros(20), (np.zeros(6), np.ones(6)))
    with pytest.raises(ValueError, match="finger_rom"):
        wi.default_calibration(finger_rom=1.5)


def test_glove_native_path(right):
    q = random_q(right, 10, seed=7)
    want = np.asarray(wi.to_inspire(q))
    np.testing.assert_allclose(np.asarray(wi.from_glove_angles(q)), want, atol=1e-12)
    np.testing.assert_allclose(np.asarray(wi.from_glove_angles(np.rad2deg(q), degrees=True)), want, atol=1e-12)
    perm = np.random.default_rng(0).permutation(20)
    names = [right.joint_names[i] for i in perm]
    np.testing.assert_allclose(np.asarray(wi.from_glove_angles(q[:, perm], names=names)), want, atol=1e-12)
    with pytest.raises(ValueError, match="permutation"):
        wi.from_glove_angles(q, names=names[:-1] + ["wrist"])
    with pytest.raises(ValueError, match="hand_joint_angles"):
        wi.from_glove_angles(np.zeros(21))


# -------------------------------------------------------------------------------------- calibration


def test_calibrate_maps_user_range_onto_full_range(right):
    rng = np.random.default_rng(1)
    user_open = np.zeros(20)
    user_open[FLEXION] = 0.1  # this user's relaxed hand is slightly bent
    user_fist = 0.7 * np.asarray(named_pose("fist"))  # and their fist is weak
    user_fist[1] = 0.3
    opposed = user_open.copy()
    opposed[[0, 1]] = (0.6, 0.6)
    # recordings of the held poses: noisy frames, averaged
    rec = lambda q: q + rng.normal(0, 0.005, (50, 20))  # noqa: E731
    cal = wi.calibrate({"open": rec(user_open), "fist": rec(user_fist)}, right)
    np.testing.assert_allclose(np.asarray(wi.to_inspire(user_open, cal)), 1.0, atol=0.02)
    np.testing.assert_allclose(np.asarray(wi.to_inspire(user_fist, cal)), 0.0, atol=0.02)
    # the default calibration would leave this user's fist far from closed
    assert np.asarray(wi.to_inspire(user_fist))[:4].min() > 0.25
    # half-way in measure is half-way in command
    mid = np.asarray(wi.to_inspire((user_open + user_fist) / 2, cal))
    np.testing.assert_allclose(mid[:5], 0.5, atol=0.03)

    cal3 = wi.calibrate([user_open, user_fist, opposed], right)
    c = np.asarray(wi.to_inspire(opposed, cal3))
    assert c[ROT] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(np.asarray(cal3.closed)[:5], np.asarray(wi.calibrate([user_open, user_fist]).closed)[:5])
    d = wi.calibration_to_dict(cal3)
    assert d["motors"] == list(wi.MOTOR_NAMES)
    back = wi.calibration_from_dict(json.loads(json.dumps(d)))
    np.testing.assert_allclose(np.asarray(back.closed), np.asarray(cal3.closed))


def test_calibrate_errors(right):
    o, f = named_pose("open"), named_pose("fist")
    with pytest.raises(ValueError, match="'open' and 'fist'"):
        wi.calibrate({"open": o})
    with pytest.raises(ValueError, match="'open' and 'fist'"):
        wi.calibrate([o])
    with pytest.raises(ValueError, match="'open' and 'fist'"):
        wi.calibrate({"open": o, "thumb_opposed": f})
    with pytest.raises(ValueError, match="unknown reference"):
        wi.calibrate({"open": o, "fist": f, "claw": f})
    with pytest.raises(ValueError, match="at most 3"):
        wi.calibrate([o, f, f, f])
    with pytest.raises(ValueError, match=r"'fist' must have shape \(20,\)"):
        wi.calibrate({"open": o, "fist": f[:19]})
    with pytest.raises(ValueError, match="non-finite"):
        wi.calibrate({"open": o, "fist": np.full(20, np.nan)})
    with pytest.raises(ValueError, match="degenerate.*little.*fore.*thumb_bend"):
        wi.calibrate({"open": o, "fist": o})
    only_fingers = f.copy()
    only_fingers[:4] = 0
    with pytest.raises(ValueError, match="too narrow: thumb_bend .*thumb_rotation.*thumb_opposed"):
        wi.calibrate({"open": o, "fist": only_fingers})
    with pytest.raises(ValueError, match="calibration dict"):
        wi.calibration_from_dict({"open": [0] * 6})


# ------------------------------------------------------------------------------------ RH56, payloads


def test_rh56_scale():
    c = np.array([0.0, 1.0, 0.5, 0.1234, 0.9996, 0.0004])
    np.testing.assert_array_equal(np.asarray(wi.to_rh56(c)), [0, 1000, 500, 123, 1000, 0])
    assert wi.to_rh56(c).dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(wi.to_rh56(np.array([-0.2, 1.3, 0, 0, 0, 0]))), [0, 1000, 0, 0, 0, 0])
    np.testing.assert_allclose(np.asarray(wi.from_rh56(wi.to_rh56(c))), [0, 1, 0.5, 0.123, 1, 0])
    cmds = np.asarray(wi.to_inspire(np.stack([named_pose("open"), named_pose("fist")])))
    rh = np.asarray(wi.to_rh56(cmds))
    np.testing.assert_array_equal(rh[0, :5], 1000)  # the flat thumb is past the relaxed one: rotation 726
    np.testing.assert_array_equal(rh[1, :4], 0)
    with pytest.raises(ValueError, match="6"):
        wi.to_rh56(np.zeros(5))


def test_motor_order():
    assert wi.MOTOR_IDS == (1, 2, 3, 4, 5, 6)
    assert wi.MOTOR_NAMES == ("little", "ring", "middle", "fore", "thumb_bend", "thumb_rotation")


@pytest.mark.parametrize("side", ["left", "right"])
def test_payload_schemas_and_names(side):
    cmd = np.asarray(wi.to_inspire(named_pose("point")))
    assert wi.ctrl_topic(side) == f"/inspire_hand/ctrl/{side}_hand"
    assert wi.state_topic(side) == f"/inspire_hand/state/{side}_hand"
    for s in ("set_angle_flexible", "set_force", "set_speed", "set_clear_error"):
        assert wi.service_name(s, side) == f"/inspire_hand/{s}/{side}_hand"

    m = wi.ctrl_message(cmd, side, 12.25, frame_id="base")
    assert m["topic"] == f"/inspire_hand/ctrl/{side}_hand" and m["type"] == "sensor_msgs/msg/JointState"
    assert m["msg"]["header"] == {"stamp": {"sec": 12, "nanosec": 250_000_000}, "frame_id": "base"}
    assert m["msg"]["name"] == ["1", "2", "3", "4", "5", "6"]
    np.testing.assert_allclose(m["msg"]["position"], cmd)
    assert set(m["msg"]) == {"header", "name", "position"}
    assert json.loads(json.dumps(m)) == m  # plain JSON
    assert wi.ctrl_message(cmd, side, (3, 7))["msg"]["header"]["stamp"] == {"sec": 3, "nanosec": 7}
    assert wi.ctrl_message(cmd, side, 1.9999999999)["msg"]["header"]["stamp"] == {"sec": 2, "nanosec": 0}
    named = wi.ctrl_message(cmd, side, 0, names=wi.MOTOR_NAMES)
    assert named["msg"]["name"] == list(wi.MOTOR_NAMES)

    a = wi.set_angle_flexible_request(cmd, side)
    assert a["service"] == f"/inspire_hand/set_angle_flexible/{side}_hand"
    assert a["type"] == "bodyctrl_msgs/srv/set_angle_flexible"
    assert list(a["request"]) == ["name", "angle_ratio"]
    np.testing.assert_allclose(a["request"]["angle_ratio"], cmd)

    sp = wi.set_speed_request([1, 0.5, 0.25, 1, 1, 0.8], side)
    assert sp["service"] == f"/inspire_hand/set_speed/{side}_hand" and sp["type"] == "bodyctrl_msgs/srv/set_speed"
    assert sp["request"] == {"speed0_Ratio": 1.0, "speed1_Ratio": 0.5, "speed2_Ratio": 0.25, "speed3_Ratio": 1.0,
                             "speed4_Ratio": 1.0, "speed5_Ratio": 0.8}
    assert wi.set_speed_request(0.5, side)["request"]["speed5_Ratio"] == 0.5

    f = wi.set_force_request(500, side, unit="grams")
    assert f["service"] == f"/inspire_hand/set_force/{side}_hand" and f["type"] == "bodyctrl_msgs/srv/set_force"
    assert f["request"] == {f"force{i}_Ratio": 0.5 for i in range(6)}
    assert wi.set_force_request([0, 0.1, 0.2, 0.3, 0.4, 1], side)["request"]["force5_Ratio"] == 1.0
    assert wi.clear_error_request(side) == {"service": f"/inspire_hand/set_clear_error/{side}_hand",
                                            "type": "bodyctrl_msgs/srv/set_clear_error", "request": {}}


def test_payload_errors():
    ok = np.full(6, 0.5)
    with pytest.raises(ValueError, match="side"):
        wi.ctrl_topic("both")
    with pytest.raises(ValueError, match="side"):
        wi.ctrl_message(ok, "Right", 0.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        wi.ctrl_message(np.full(6, 1.2), "right", 0.0)
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        wi.ctrl_message(np.full((2, 6), 0.5), "right", 0.0)
    with pytest.raises(ValueError, match="stamp"):
        wi.ctrl_message(ok, "right", -1.0)
    with pytest.raises(ValueError, match="6 motors"):
        wi.ctrl_message(ok, "right", 0.0, names=["a"])
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        wi.set_speed_request(0.0, "right")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        wi.set_speed_request(1.5, "right")
    with pytest.raises(ValueError, match=r"\[0, 1000\] g"):
        wi.set_force_request(1200, "left", unit="grams")
    with pytest.raises(ValueError, match="unit"):
        wi.set_force_request(0.5, "left", unit="newton")
    with pytest.raises(ValueError, match="unknown Inspire service"):
        wi.service_name("set_angle", "left")


def test_speed_ratio_seconds():
    assert wi.speed_ratio_to_full_travel_seconds(1) == pytest.approx(0.8)
    assert wi.speed_ratio_to_full_travel_seconds(0.5) == pytest.approx(1.6)
    assert wi.speed_ratio_to_full_travel_seconds(0.25) == pytest.approx(3.2)
    np.testing.assert_allclose(wi.speed_ratio_to_full_travel_seconds(np.array([1, 0.5])), [0.8, 1.6])
    assert wi.full_travel_seconds_to_speed_ratio(1.6) == pytest.approx(0.5)
    np.testing.assert_allclose(wi.max_rate(0.5), 0.625)
    with pytest.raises(ValueError):
        wi.speed_ratio_to_full_travel_seconds(0)
    with pytest.raises(ValueError):
        wi.full_travel_seconds_to_speed_ratio(0.5)


def test_publisher_without_and_with_ros(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("rclpy") is None:
        with pytest.raises(ImportError, match="ROS 2.*ctrl_message"):
            wi.publisher("right")

    # a stand-in for rclpy/sensor_msgs, to check what the publisher sends
    sent = []

    class Stamp:
        sec = 0
        nanosec = 0

    class Header:
        def __init__(self):
            self.stamp, self.frame_id = Stamp(), ""

    class JointState:
        def __init__(self):
            self.header, self.name, self.position = Header(), [], []

    class Node:
        def create_publisher(self, msg_type, topic, depth):
            assert msg_type is JointState and depth == 10
            self.topic = topic
            return types.SimpleNamespace(publish=sent.append)

    rclpy = types.ModuleType("rclpy")
    rclpy.ok = lambda: False
    rclpy.init = lambda: None
    rclpy.create_node = lambda name: Node()
    msgs = types.ModuleType("sensor_msgs.msg")
    msgs.JointState = JointState
    monkeypatch.setitem(sys.modules, "rclpy", rclpy)
    monkeypatch.setitem(sys.modules, "sensor_msgs", types.ModuleType("sensor_msgs"))
    monkeypatch.setitem(sys.modules, "sensor_msgs.msg", msgs)
    pub = wi.publisher("left", frame_id="l_hand")
    assert pub.node.topic == "/inspire_hand/ctrl/left_hand"
    pub.publish(np.array([0, 0.2, 0.4, 0.6, 0.8, 1.0]), stamp=5.5)
    (m,) = sent
    assert (m.header.stamp.sec, m.header.stamp.nanosec, m.header.frame_id) == (5, 500_000_000, "l_hand")
    assert m.name == ["1", "2", "3", "4", "5", "6"] and m.position == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])


# ------------------------------------------------------------------------------------------ streams


def _jumps(n, seed):
    rng = np.random.default_rng(seed)
    cmds = rng.choice([0.0, 1.0], size=(n, 6)) * (rng.random((n, 6)) < 0.7) + rng.random((n, 6)) * 0.3
    t = np.cumsum(np.concatenate([[0.0], rng.exponential(0.03, n - 1) * (rng.random(n - 1) < 0.9)]))
    return np.clip(cmds, 0, 1), t + 100.0


@pytest.mark.parametrize("ratio", [1.0, 0.5, 0.25, [1.0, 0.5, 0.25, 0.1, 0.8, 0.3]])
def test_rate_limit_never_exceeded(ratio):
    cmds, t = _jumps(400, seed=int(np.sum(ratio) * 100))
    out, ts = wi.limit_rate(cmds, t, ratio)
    out, ts = np.asarray(out), np.asarray(ts)
    np.testing.assert_array_equal(ts, t)  # timestamps carried through
    rate = np.broadcast_to(np.asarray(ratio, np.float64) / 0.8, (6,))
    step = np.abs(np.diff(out, axis=0))
    assert np.all(step <= rate * np.diff(t)[:, None] + 1e-12)
    assert np.any(step > 0.5 * rate * np.diff(t)[:, None])  # the limit is binding somewhere
    assert out.min() >= 0 and out.max() <= 1
    np.testing.assert_array_equal(out[0], cmds[0])


def test_rate_limit_reaches_target_and_initial():
    t = np.arange(0, 1.01, 0.1)
    cmds = np.zeros((len(t), 6))
    out = np.asarray(wi.limit_rate(cmds, t, 0.5, initial=np.ones(6)).commands)
    np.testing.assert_allclose(out[:, 0], np.clip(1 - t / 1.6, 0, 1), atol=1e-12)  # full travel 1.6 s at 0.5
    out = np.asarray(wi.limit_rate(cmds, t, 1.0, initial=np.ones(6)).commands)
    np.testing.assert_allclose(out[-3:], 0.0, atol=1e-12)  # 0.8 s is enough at full speed
    same_t = wi.limit_rate([[1.0] * 6, [0.0] * 6], [2.0, 2.0]).commands  # no time, no motion
    np.testing.assert_array_equal(np.asarray(same_t)[1], 1.0)
    with pytest.raises(ValueError, match="non-decreasing"):
        wi.limit_rate(cmds, t[::-1])
    with pytest.raises(ValueError, match="match cmds"):
        wi.limit_rate(cmds, t[:-1])
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        wi.limit_rate(cmds, t, 2.0)
    with pytest.raises(ValueError, match="T >= 1"):
        wi.limit_rate(np.zeros((0, 6)), np.zeros(0))


def test_smoothing():
    t = np.arange(0, 0.5, 0.01)
    step = np.zeros((len(t), 6))
    step[1:] = 1.0
    ema = np.asarray(wi.smooth(step, t, "exponential", tau=0.1).commands)
    np.testing.assert_allclose(ema[1:, 0], 1 - np.exp(-t[1:] / 0.1), atol=1e-12)  # exact for any dt
    ts_irregular = np.sort(np.random.default_rng(0).uniform(0, 0.5, len(t)))
    ema2 = np.asarray(wi.smooth(step, ts_irregular, tau=0.1).commands)
    np.testing.assert_allclose(ema2[1:, 0], 1 - np.exp(-(ts_irregular[1:] - ts_irregular[0]) / 0.1), atol=1e-12)
    cmds, tj = _jumps(200, 5)
    one = wi.smooth(cmds, tj, "one_euro", min_cutoff=1.0, beta=0.5)
    c = np.asarray(one.commands)
    np.testing.assert_array_equal(np.asarray(one.timestamps), tj)
    assert c.min() >= 0 and c.max() <= 1 and np.all(np.isfinite(c))
    assert np.abs(np.diff(c, axis=0)).mean() < np.abs(np.diff(cmds, axis=0)).mean()
    with pytest.raises(ValueError, match="method"):
        wi.smooth(cmds, tj, "kalman")
    with pytest.raises(ValueError, match="tau"):
        wi.smooth(cmds, tj, tau=0)


@pytest.mark.parametrize("smoothing", [None, "exponential", "one_euro"])
def test_stream_equals_batch_pipeline(right, smoothing):
    rng = np.random.default_rng(4)
    q = np.cumsum(rng.normal(0, 0.15, (60, 20)), 0) + 0.5
    q = np.clip(q, np.asarray(right.lower), np.asarray(right.upper))
    t = 10 + np.cumsum(rng.uniform(0, 0.04, 60))
    stream = wi.InspireStream("left", speed_ratio=0.5, smoothing=smoothing, tau=0.08, frame_id="f")
    msgs = [stream.push(qi, ti) for qi, ti in zip(q, t)]
    got = np.array([m["msg"]["position"] for m in msgs])
    cmd = np.asarray(wi.to_inspire(q))
    if smoothing:
        cmd = np.asarray(wi.smooth(cmd, t, smoothing, tau=0.08).commands)
    want = np.asarray(wi.limit_rate(cmd, t, 0.5).commands)
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert msgs[0]["topic"] == "/inspire_hand/ctrl/left_hand"
    assert msgs[-1]["msg"]["header"]["stamp"]["sec"] == int(t[-1])
    assert np.all(np.abs(np.diff(got, axis=0)) <= 0.5 / 0.8 * np.diff(t)[:, None] + 1e-9)
    with pytest.raises(ValueError, match="backwards"):
        stream.push(q[0], t[-1] - 1)
    stream.reset()
    stream.push(q[0], 0.0)  # a new stream may start anywhere
    with pytest.raises(ValueError, match="one frame"):
        stream.push(q[:2], 1.0)


def test_stream_degrees_and_initial(right):
    s = wi.InspireStream("right", degrees=True, initial=np.ones(6), speed_ratio=1.0)
    m0 = s.push(np.rad2deg(named_pose("fist")), 0.0)
    np.testing.assert_allclose(m0["msg"]["position"], 1.0)  # the hand is open at t=0 and cannot jump
    s.push(np.rad2deg(named_pose("fist")), 0.4)
    np.testing.assert_allclose(s.command[:4], 0.5, atol=1e-9)  # half travel in 0.4 s
    s.push(np.rad2deg(named_pose("fist")), 1.0)
    np.testing.assert_allclose(s.command, np.asarray(wi.to_inspire(named_pose("fist"))), atol=1e-9)


# ------------------------------------------------------------------------------------ files and CLI


def test_write_command_stream(tmp_path):
    cmds = np.asarray(wi.to_inspire(np.stack([named_pose(n) for n in ("open", "point", "fist")])))
    t = np.array([0.0, 0.5, 1.25])
    assert wi.write_command_stream(tmp_path / "a.jsonl", cmds, t, "left") == 3
    lines = [json.loads(s) for s in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [x["t"] for x in lines] == [0.0, 0.5, 1.25]
    assert all(x["topic"] == "/inspire_hand/ctrl/left_hand" and x["side"] == "left" for x in lines)
    assert lines[2]["msg"]["header"]["stamp"] == {"sec": 1, "nanosec": 250_000_000}
    assert lines[1]["rh56"][3] == 1000 and lines[1]["rh56"][0] == 0
    np.testing.assert_allclose([x["msg"]["position"] for x in lines], cmds, atol=1e-6)

    buf = io.StringIO()
    wi.write_command_stream(buf, cmds, t, "right", "csv")
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert list(rows[0]) == ["t", "side", *wi.MOTOR_NAMES, *(f"rh56_{n}" for n in wi.MOTOR_NAMES)]
    assert rows[1]["side"] == "right" and float(rows[1]["fore"]) == pytest.approx(1.0)
    assert int(rows[2]["rh56_little"]) == 0 and float(rows[2]["t"]) == 1.25
    with pytest.raises(ValueError, match="fmt"):
        wi.write_command_stream(buf, cmds, t, "right", "xml")


@pytest.mark.parametrize("side", ["left", "right"])
def test_cli_angles_to_stream(tmp_path, side, capsys):
    from wuji_jax.cli import inspire_cli

    q = np.stack([named_pose("open")] * 3 + [named_pose("fist")] * 30)
    np.savez(tmp_path / "take.npz", angles=q, timestamps=np.arange(33) / 100)
    out = tmp_path / "take.jsonl"
    rc = inspire_cli.main(["inspire", "--command-map", "joint_map", "--angles", str(tmp_path / "take.npz"), "--side", side, "-o", str(out),
                           "--speed-ratio", "0.5", "--smooth", "exponential"])
    assert rc == 0
    lines = [json.loads(s) for s in out.read_text().splitlines()]
    assert len(lines) == 33 and all(x["topic"] == f"/inspire_hand/ctrl/{side}_hand" for x in lines)
    pos = np.array([x["msg"]["position"] for x in lines])
    t = np.array([x["t"] for x in lines])
    np.testing.assert_allclose(t, np.arange(33) / 100)
    assert np.all(np.abs(np.diff(pos, axis=0)) <= 0.5 / 0.8 * np.diff(t)[:, None] + 2e-6)
    np.testing.assert_allclose(pos[:3, :5], 1.0)  # the flat thumb is past the relaxed one: rotation 0.73
    assert pos[-1, 0] == pytest.approx(1 - 0.30 * 0.5 / 0.8, abs=2e-6)  # 0.3 s of closing at 0.625 per s

    np.save(tmp_path / "deg.npy", np.rad2deg(q))
    rc = inspire_cli.main(["inspire", "--command-map", "joint_map", "--angles", str(tmp_path / "deg.npy"), "--degrees", "--fps", "10",
                           "--format", "csv", "--side", side])
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 33 and float(rows[-1]["t"]) == pytest.approx(3.2)
    assert float(rows[-1]["little"]) == pytest.approx(0.0) and rows[0]["side"] == side


def test_cli_reference_calibration_and_errors(tmp_path, capsys):
    from wuji_jax.cli import inspire_cli

    user_open = np.full(20, 0.1)
    user_fist = 0.7 * named_pose("fist")
    np.save(tmp_path / "open.npy", user_open)
    np.save(tmp_path / "fist.npy", np.stack([user_fist] * 5))
    np.save(tmp_path / "take.npy", np.stack([user_open, user_fist]))
    rc = inspire_cli.main(["inspire", "--command-map", "joint_map", "--angles", str(tmp_path / "take.npy"), "--fps", "0.5", "--names", "words",
                           "--reference", f"open={tmp_path / 'open.npy'}", "--reference",
                           f"fist={tmp_path / 'fist.npy'}"])
    assert rc == 0
    lines = [json.loads(s) for s in capsys.readouterr().out.splitlines()]
    assert lines[0]["msg"]["name"] == list(wi.MOTOR_NAMES)
    np.testing.assert_allclose(lines[0]["msg"]["position"], 1.0, atol=1e-6)
    np.testing.assert_allclose(lines[1]["msg"]["position"], 0.0, atol=1e-6)  # 2 s apart: no rate limit
    np.save(tmp_path / "bad.npy", np.zeros((4, 19)))
    with pytest.raises(ValueError, match=r"\(T, 20\)"):
        inspire_cli.main(["inspire", "--command-map", "joint_map", "--angles", str(tmp_path / "bad.npy")])
    with pytest.raises(ValueError, match="speed-ratio"):
        inspire_cli.main(["inspire", "--command-map", "joint_map", "--angles", str(tmp_path / "take.npy"), "--speed-ratio", "3"])


def _solved_commands(hand, pose_names, seed=0):
    """Poses → FK → random similarity + 1 mm noise → IK → Inspire commands (issue 4's round trip)."""
    rng = np.random.default_rng(seed)
    q = np.stack([named_pose(n) for n in pose_names])
    kp = np.asarray(wj.forward_keypoints(hand, jnp.asarray(q)))
    A = rng.normal(size=(len(q), 3, 3))
    R, _ = np.linalg.qr(A)
    R *= np.sign(np.linalg.det(R))[:, None, None]
    y = 1.1 * np.einsum("bij,bkj->bki", R, kp) + rng.normal(0, 0.2, (len(q), 1, 3))
    y = y + rng.normal(0, 0.001, y.shape)
    res = wj.solve(hand, y)
    return np.asarray(wi.to_inspire(res.angles, hand=hand))


@pytest.mark.parametrize("side", ["right", "left"])
def test_poses_solved_back_from_landmarks(side):
    hand = wj.load_hand(side)
    names = ["open", "fist", "point", "victory", "thumbs_up"]
    c = dict(zip(names, _solved_commands(hand, names)))
    # motor order: little, ring, middle, fore, thumb bend, thumb rotation
    assert np.all(c["open"][:5] > 0.9) and c["open"][5] > 0.6  # the flat thumb: rotation 0.73
    assert np.all(c["fist"][:4] < 0.1)
    assert c["point"][3] > 0.9 and np.all(c["point"][:3] < 0.1)
    assert np.all(c["victory"][2:4] > 0.9) and np.all(c["victory"][:2] < 0.1)
    assert c["thumbs_up"][4] > 0.9 and np.all(c["thumbs_up"][:4] < 0.1)


def test_cli_solves_landmarks_on_the_way(tmp_path, right, capsys):
    from wuji_jax.cli import inspire_cli

    q = np.stack([named_pose("open"), named_pose("fist")])
    np.save(tmp_path / "lm.npy", np.asarray(wj.forward_keypoints(right, jnp.asarray(q))))
    out = tmp_path / "cmd.jsonl"
    assert inspire_cli.main(["inspire", "--command-map", "joint_map", "--landmarks", str(tmp_path / "lm.npy"), "-o", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["topic"] == "/inspire_hand/ctrl/right_hand"
    first = np.asarray(lines[0]["msg"]["position"])
    assert np.all(first[:5] > 0.9) and first[5] > 0.6  # the flat thumb: rotation 0.73


# ------------------------------------------------------------------------- data safety (issue case 9)


def _cli_error(argv) -> str:
    """The CLI's error for ``argv``: a ValueError (the main CLI's UsageError, exit 2) of one line."""
    from wuji_jax.cli import inspire_cli

    with pytest.raises(ValueError) as e:
        inspire_cli.main(argv)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_joint_limit_violations(right):
    lo, up = np.asarray(right.lower), np.asarray(right.upper)
    q = np.zeros((4, 20))
    q[0] = up + 0.49  # overshoot within the tolerance: fine
    q[1] = lo - 0.49
    q[2, 6] = 100.0
    q[2, 1] = lo[1] - 0.51
    q[3, 0], q[3, 19] = np.nan, -np.inf
    bad = wi.joint_limit_violations(q, right)
    assert bad.shape == (4, 20) and bad.dtype == bool
    assert not bad[:2].any()
    assert sorted(np.flatnonzero(bad[2])) == [1, 6] and sorted(np.flatnonzero(bad[3])) == [0, 19]
    assert wi.joint_limit_violations(q[0], right, tolerance=0.1).all()
    assert not wi.joint_limit_violations(np.zeros(20)).any()
    assert wi.ANGLE_LIMIT_TOLERANCE == 0.5
    with pytest.raises(ValueError, match="tolerance"):
        wi.joint_limit_violations(q, right, tolerance=-1)
    with pytest.raises(ValueError, match=r"shape \(\*batch, 20\)"):
        wi.joint_limit_violations(np.zeros(19))
    # the library itself still clamps (solver output is within the limits anyway): documented, not refused
    np.testing.assert_array_equal(np.asarray(wi.to_inspire(q[2]))[FORE], 0.0)


def test_cli_refuses_angles_far_outside_joint_limits(tmp_path, right):
    q = np.stack([named_pose("open")] * 3 + [named_pose("fist")] * 3)
    lo, up = np.asarray(right.lower), np.asarray(right.upper)
    ok = q.copy()
    ok[1] = np.clip(ok[1] + 0.3, None, up + 0.3)  # slightly beyond the upper limits: accepted, clamped
    ok[2] = lo - 0.3
    np.save(tmp_path / "ok.npy", ok)
    out = tmp_path / "ok.jsonl"
    from wuji_jax.cli import inspire_cli

    assert inspire_cli.main(["inspire", "--command-map", "joint_map", "--angles", str(tmp_path / "ok.npy"), "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 6

    far = q.copy()
    far[4, 6] = 100.0  # frame 4, index_finger_pip
    np.save(tmp_path / "far.npy", far)
    out = tmp_path / "far.jsonl"
    msg = _cli_error(["inspire", "--angles", str(tmp_path / "far.npy"), "-o", str(out)])
    assert str(tmp_path / "far.npy") in msg and "frame 4" in msg and "index_finger_pip" in msg
    assert "100 rad" in msg and "0.5 rad" in msg and "--degrees" in msg
    assert not out.exists()  # nothing written

    # degrees read as radians: every bent joint is far out; the first is named, the rest counted
    np.savetxt(tmp_path / "deg.csv", np.rad2deg(q), delimiter=",")
    msg = _cli_error(["inspire", "--angles", str(tmp_path / "deg.csv"), "--format", "csv"])
    assert "deg.csv: frame 3, joint thumb_cmc_flex" in msg and "more bad angle(s) in 3 frame(s)" in msg
    # ... and with --degrees the value is reported as read
    bad_deg = np.rad2deg(far)
    msg = _cli_error(["inspire", "--angles", str(_save(tmp_path / "far_deg.npy", bad_deg)), "--degrees"])
    assert "frame 4, joint index_finger_pip" in msg and f"{np.rad2deg(100.0):.6g} deg" in msg

    nan = q.copy()
    nan[2, 17] = np.nan
    np.savez(tmp_path / "nan.npz", angles=nan, timestamps=np.arange(6) * 0.1)
    msg = _cli_error(["inspire", "--angles", str(tmp_path / "nan.npz")])
    assert "nan.npz: frame 2, joint pinky_mcp_abd" in msg and "nan" in msg

    # reference poses are angles too
    np.save(tmp_path / "open.npy", named_pose("open"))
    np.save(tmp_path / "fist.npy", np.stack([named_pose("fist"), far[4]]))
    msg = _cli_error(["inspire", "--angles", str(tmp_path / "ok.npy"), "--reference", f"open={tmp_path / 'open.npy'}",
                      "--reference", f"fist={tmp_path / 'fist.npy'}"])
    assert f"--reference fist={tmp_path / 'fist.npy'}: frame 1, joint index_finger_pip" in msg


def _save(path, arr):
    np.save(path, arr)
    return path


def test_cli_timestamps_fit_ros_stamps(tmp_path, capsys):
    from wuji_jax.cli import inspire_cli

    q = np.stack([named_pose("open")] * 4)
    take = str(_save(tmp_path / "take.npy", q))
    for fmt in ("jsonl", "csv"):
        msg = _cli_error(["inspire", "--angles", take, "--format", fmt, "--start-time", "-0.05", "--fps", "10"])
        assert f"{take}: frame 0: timestamp -0.05 s" in msg and "negative" in msg
    # 2**31 - 1 + 0.5 s is the last frame that fits; the next one (2**31) does not
    msg = _cli_error(["inspire", "--angles", take, "--start-time", str(2**31 - 1), "--fps", "2"])
    assert f"{take}: frame 2: timestamp 2147483648.0 s" in msg and "int32" in msg
    msg = _cli_error(["inspire", "--angles", take, "--start-time", "nan"])
    assert "frame 0" in msg and "not finite" in msg

    np.savez(tmp_path / "ns.npz", angles=q, timestamps=1.7e18 + np.arange(4) * 1e7)  # nanoseconds, not seconds
    msg = _cli_error(["inspire", "--angles", str(tmp_path / "ns.npz")])
    assert "ns.npz: frame 0" in msg and "not ms/us/ns" in msg
    np.savez(tmp_path / "gap.npz", angles=q, timestamps=[0.0, 0.1, np.inf, 0.3])
    assert "gap.npz: frame 2" in _cli_error(["inspire", "--angles", str(tmp_path / "gap.npz")])
    np.savez(tmp_path / "back.npz", angles=q, timestamps=[0.0, 0.2, 0.1, 0.3])
    msg = _cli_error(["inspire", "--angles", str(tmp_path / "back.npz")])
    assert "back.npz: frame 2" in msg and "non-decreasing" in msg

    # at the edge: stamps fit, nanosec in [0, 1e9)
    capsys.readouterr()
    assert inspire_cli.main(["inspire", "--command-map", "joint_map", "--angles", take, "--start-time", str(2**31 - 3 + 0.9999999999),
                             "--fps", "2"]) == 0
    stamps = [json.loads(s)["msg"]["header"]["stamp"] for s in capsys.readouterr().out.splitlines()]
    assert stamps == [{"sec": 2**31 - 2, "nanosec": 0}, {"sec": 2**31 - 2, "nanosec": 500_000_000},
                      {"sec": 2**31 - 1, "nanosec": 0}, {"sec": 2**31 - 1, "nanosec": 500_000_000}]


def test_stamps_fit_ros_time():
    ok = np.full(6, 0.5)
    stamp = lambda t: wi.ctrl_message(ok, "right", t)["msg"]["header"]["stamp"]  # noqa: E731
    assert stamp(1.9999999999) == {"sec": 2, "nanosec": 0}
    assert stamp(2**31 - 0.5) == {"sec": 2**31 - 1, "nanosec": 500_000_000}
    assert stamp((2**31 - 1, 999_999_999)) == {"sec": 2**31 - 1, "nanosec": 999_999_999}
    assert stamp({"sec": np.int64(4), "nanosec": 5.0}) == {"sec": 4, "nanosec": 5}
    rng = np.random.default_rng(0)
    for t in np.concatenate([rng.uniform(0, 2**31, 2000), rng.integers(0, 2**31, 200) - 1e-10,
                             np.nextafter(np.float64(2**31), 0)[None]]):
        s = stamp(float(t))
        assert 0 <= s["sec"] <= wi.MAX_STAMP_SECONDS and 0 <= s["nanosec"] < 1_000_000_000
        assert abs(s["sec"] + s["nanosec"] * 1e-9 - t) <= 1e-6
    for bad in (2.0**31, 1e300, -1e-9, float("nan"), float("inf"), (2**31, 0), (-1, 0), (1, 10**9), (1, -1),
                (1.5, 0), {"sec": 1, "nanosec": 0.5}):
        with pytest.raises(ValueError, match="stamp"):
            stamp(bad)
    cmds = np.full((3, 6), 0.5)
    for fmt in ("jsonl", "csv"):
        with pytest.raises(ValueError, match=r"timestamps\[0\] = -1.0 s does not fit a ROS time stamp"):
            wi.write_command_stream(io.StringIO(), cmds, [-1.0, 0.0, 1.0], "left", fmt)
        with pytest.raises(ValueError, match=r"timestamps\[2\] = 2147483648.0 s"):
            wi.write_command_stream(io.StringIO(), cmds, [0.0, 1.0, 2.0**31], "left", fmt)
    s = wi.InspireStream("right")
    with pytest.raises(ValueError, match="stamp"):
        s.push(np.zeros(20), 2.0**31)
    assert s.command is None  # the failed push left no state behind
    s.push(np.zeros(20), 1.0)


def test_nan_angles_never_look_like_commands(right):
    q = np.stack([named_pose("fist")] * 3)
    q[0, 6] = np.nan  # fore pip
    q[1, 0] = np.inf  # thumb cmc flex: bend and rotation
    q[2, 12] = -np.inf  # ring mcp flex
    with pytest.raises(ValueError, match="3 non-finite"):
        wi.to_inspire(q)
    for f in (jax.jit(wi.to_inspire), jax.vmap(wi.to_inspire)):
        c = np.asarray(f(jnp.asarray(q)))
        assert np.flatnonzero(np.isnan(c[0])).tolist() == [FORE]
        assert np.flatnonzero(np.isnan(c[1])).tolist() == [BEND, ROT]
        assert np.flatnonzero(np.isnan(c[2])).tolist() == [RING]  # not a plausible "fully open"
        good = ~np.isnan(c)
        want = np.broadcast_to(np.asarray(wi.to_inspire(named_pose("fist"))), c.shape)
        np.testing.assert_allclose(c[good], want[good])
    # and NaN commands do not become RH56 registers or messages
    nan_cmd = np.asarray(jax.jit(wi.to_inspire)(jnp.asarray(q)))[0]
    with pytest.raises(ValueError, match="non-finite"):
        wi.to_rh56(nan_cmd)
    np.testing.assert_array_equal(np.asarray(jax.jit(wi.to_rh56)(nan_cmd))[FORE], -1)
    with pytest.raises(ValueError, match="non-finite"):
        wi.ctrl_message(nan_cmd, "right", 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        wi.write_command_stream(io.StringIO(), nan_cmd[None], [0.0], "right")


def test_default_hand_first_built_under_jit():
    """The cached default model must not be built (and cached) as tracers by a first call inside jit:
    in a fresh process, the first to_inspire (and so the first load_hand) is traced inside jax.jit, and
    the eager call after it must still work and agree."""
    import subprocess
    import sys

    code = ("import jax, jax.numpy as jnp, numpy as np, wuji_jax as wj\n"
            "c = jax.jit(lambda x: wj.inspire.to_inspire(x))(jnp.asarray(wj.named_pose('open')))\n"
            "np.testing.assert_allclose(np.asarray(c)[:5], 1.0)\n"
            "np.testing.assert_allclose(np.asarray(wj.inspire.to_inspire(wj.named_pose('open'))), np.asarray(c),"
            " atol=1e-6)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


def test_cli_command_map(tmp_path, capsys, monkeypatch):
    """``inspire`` uses the retarget where a model is found, else the joint map with a one-line note."""
    import importlib.util

    from wuji_jax import inspire_cli

    q = np.stack([named_pose(n) for n in ("open", "fist", "pinch", "point")]).astype(np.float32)
    np.save(tmp_path / "take.npy", q)
    out = tmp_path / "c.jsonl"
    argv = ["inspire", "--command-map", "auto", "--angles", str(tmp_path / "take.npy"), "-o", str(out), "--fps", "0.5"]

    def positions():
        return np.array([json.loads(x)["msg"]["position"] for x in out.read_text().splitlines()])

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "dexi_rs" else real(n, *a))
    assert inspire_cli.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    notes = [x for x in err if x.startswith("note: ")]
    assert len(notes) == 1 and 'wuji-jax[inspire]' in notes[0] and "joint map" in notes[0], err
    assert "joint_map" in err[-1]
    np.testing.assert_allclose(positions(), np.asarray(wi.to_inspire(q)), atol=1e-6)
    with pytest.raises(ValueError, match="--command-map retarget"):
        inspire_cli.main(argv + ["--command-map", "retarget"])
    monkeypatch.undo()

    assert wi.find_inspire_urdf() is not None, "the test extra installs dexi-rs, whose wheel holds the Inspire URDF"
    assert inspire_cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "note:" not in err and "retarget" in err
    np.testing.assert_allclose(positions(), np.asarray(wi.retarget(q)), atol=5e-3)  # float32 LM: rounding
