"""Inspire kinematics from the URDF inside dexi-rs, and task-space retargeting (wj.inspire.retarget).

References are independent of the package: a numpy forward kinematics written here from the URDF as
xml.etree parses it (mimic joints included), the URDF's own limits, and synthetic human poses."""

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wuji_jax as wj
from wuji_jax import inspire as wi
from wuji_jax import named_pose
from wuji_jax.retarget import (MOTOR_JOINTS, TIP_LINKS, InspireModelNotFound, find_inspire_urdf, inspire_link_frames,
                               inspire_tips, load_inspire_hand, openings_to_angles)

URDF = find_inspire_urdf()
needs_urdf = pytest.mark.skipif(URDF is None, reason="dexi-rs (with the Inspire URDF) is not installed")


# ----------------------------------------------------------------------------- numpy reference FK


def _rpy(r, p, y):
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _axis_angle(a, t):
    a = np.asarray(a, float) / np.linalg.norm(a)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(t) * K + (1 - np.cos(t)) * K @ K


def _nums(el, key, default):
    return np.array([float(v) for v in el.get(key, default).split()]) if el is not None else np.array(
        [float(v) for v in default.split()])


def reference_tips(urdf, active: dict) -> dict:
    """``{tip link: position}`` in the root frame for active joint angles ``{name: q}``."""
    joints = list(ET.parse(urdf).getroot().iter("joint"))
    by_child = {j.find("child").get("link"): j for j in joints}
    angle = dict(active)
    for j in joints:
        m = j.find("mimic")
        if m is not None:
            angle[j.get("name")] = float(m.get("multiplier", 1)) * active[m.get("joint")] + float(m.get("offset", 0))

    def pose(link):
        if link not in by_child:
            return np.eye(3), np.zeros(3)
        j = by_child[link]
        R0, p0 = pose(j.find("parent").get("link"))
        o = j.find("origin")
        R = _rpy(*_nums(o, "rpy", "0 0 0"))
        if j.get("type") != "fixed":
            R = R @ _axis_angle(_nums(j.find("axis"), "xyz", "1 0 0"), angle[j.get("name")])
        return R0 @ R, R0 @ _nums(o, "xyz", "0 0 0") + p0

    return {t: pose(t)[1] for t in TIP_LINKS}


def urdf_limits(urdf) -> dict:
    return {j.get("name"): (float(j.find("limit").get("lower")), float(j.find("limit").get("upper")))
            for j in ET.parse(urdf).getroot().iter("joint") if j.find("limit") is not None}


# ----------------------------------------------------------------------------------------- kinematics


@needs_urdf
def test_tips_match_a_numpy_fk_of_the_urdf():
    robot = load_inspire_hand()
    lim = urdf_limits(URDF)
    rng = np.random.default_rng(0)
    o = np.concatenate([np.eye(6)[:2], np.ones((1, 6)), np.zeros((1, 6)), rng.uniform(0, 1, (4, 6))])
    got = np.asarray(inspire_tips(robot, jnp.asarray(o, jnp.float32)))
    assert got.shape == (8, 5, 3)
    for row, tips in zip(o, got):
        active = {n: (1 - v) * lim[n][1] + v * lim[n][0] for n, v in zip(MOTOR_JOINTS, row)}
        want = reference_tips(URDF, active)
        np.testing.assert_allclose(tips, np.stack([want[t] for t in TIP_LINKS]), atol=2e-6)


@needs_urdf
def test_opening_convention_and_mimic_law():
    robot = load_inspire_hand()
    lim = urdf_limits(URDF)
    names = robot.model.joint_names
    for o, end in ((1.0, 0), (0.0, 1)):  # opening 1 = the lower limit (open), 0 = the upper (closed)
        q = np.asarray(openings_to_angles(robot, jnp.full(6, o)))
        np.testing.assert_allclose(q, [lim[n][end] for n in names], atol=1e-6)
    # round trip
    o = jnp.asarray([0.1, 0.3, 0.5, 0.7, 0.2, 0.9])
    assert wi.load_inspire_hand is load_inspire_hand
    from wuji_jax.retarget import angles_to_openings
    np.testing.assert_allclose(np.asarray(angles_to_openings(robot, openings_to_angles(robot, o))), o, atol=1e-6)
    # mimic: the intermediate link turns about its axis by multiplier * leader + offset relative to its parent
    frames = inspire_link_frames(robot, o)
    m = robot.model
    for j in ET.parse(URDF).getroot().iter("joint"):
        mim = j.find("mimic")
        if mim is None:
            continue
        child, parent = j.find("child").get("link"), j.find("parent").get("link")
        Rc, Rp = np.asarray(frames.rotations[m.link_index(child)]), np.asarray(frames.rotations[m.link_index(parent)])
        origin = _rpy(*_nums(j.find("origin"), "rpy", "0 0 0"))
        rel = origin.T @ Rp.T @ Rc  # rotation about the joint axis
        leader = float(np.asarray(openings_to_angles(robot, o))[names.index(mim.get("joint"))])
        want = float(mim.get("multiplier")) * leader + float(mim.get("offset", 0))
        np.testing.assert_allclose(rel, _axis_angle(_nums(j.find("axis"), "xyz", "1 0 0"), want), atol=1e-5)
    # the convention holds in the geometry too: closing brings every tip nearer the palm
    tips = np.asarray(inspire_tips(robot, jnp.asarray([[1.0] * 6, [0.0] * 6])))
    assert np.all(np.linalg.norm(tips[0] - tips[1], axis=-1) > 0.03)


def test_missing_model_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "dexi_rs" else real(n, *a))
    assert find_inspire_urdf() is None
    with pytest.raises(InspireModelNotFound, match=r'pip install "wuji-jax\[inspire\]".*urdf=') as e:
        wi.retarget(np.zeros(20))
    assert "\n" not in str(e.value)
    with pytest.raises(InspireModelNotFound, match="does not exist"):
        load_inspire_hand("/nonexistent/inspire.urdf")


# ----------------------------------------------------------------------------------------- retarget


def _tip_gap(robot, cmd):
    tips = np.asarray(inspire_tips(robot, jnp.asarray(cmd)))
    return np.linalg.norm(tips[..., 0, :] - tips[..., 1, :], axis=-1)


@needs_urdf
def test_retarget_on_named_poses():
    robot = load_inspire_hand()
    q = np.stack([named_pose(n) for n in ("open", "fist", "pinch", "point")]).astype(np.float32)
    cmd = np.asarray(wi.retarget(q, robot))
    assert cmd.shape == (4, 6) and cmd.dtype == np.float32 and cmd.min() >= 0 and cmd.max() <= 1
    op, fist, pinch, point = cmd
    assert np.all(op[:4] > 0.9) and op[4] > 0.5 and op[5] > 0.5  # open: fingers open, the thumb mostly
    assert np.all(fist[:4] < 0.15)  # fist: the fingers close
    assert point[3] > 0.9 and np.all(point[:3] < 0.15)  # point: index open, the rest closed
    gaps = _tip_gap(robot, cmd)
    assert gaps[2] <= 0.015, gaps  # pinch: the robot's thumb and index tips meet
    assert gaps[0] > 0.05 and _tip_gap(robot, np.asarray(wi.to_inspire(q)))[2] > 0.03  # the joint map misses it


@needs_urdf
def test_the_inspire_target_makes_the_public_commands():
    """The Inspire hand as the pipelines' target (the protocol of wuji_jax.retarget.target): its
    commands are wj.inspire's (joint map, retarget), its model an argument, its identity the URDF's
    bytes."""
    import hashlib

    from wuji_jax.retarget.target import LiveTarget, Target, choose_target

    hand = wj.load_hand("right")
    q = np.stack([named_pose(n) for n in ("open", "fist", "pinch", "point")]).astype(np.float32)
    joint, note = choose_target("inspire", "joint_map")
    assert isinstance(joint, Target) and isinstance(joint, LiveTarget) and note is None
    assert joint.model("right") is None and joint.channels == wi.MOTOR_NAMES
    np.testing.assert_allclose(joint.commands(hand, q, None), wi.to_inspire(q), atol=1e-7)
    target, note = choose_target("inspire", "auto", URDF, ("right",))
    assert target.method == "retarget" and note is None
    model = target.model("right")
    want = np.asarray(wi.retarget(q, URDF))
    np.testing.assert_allclose(target.commands(hand, q, model), want, atol=1e-6)
    assert target.identity()["inspire_urdf"]["right"]["sha256"] == hashlib.sha256(URDF.read_bytes()).hexdigest()
    assert target.device_units(np.array([0, 0.5, 1, 0.25, 0.75, 1.0])).tolist() == [0, 500, 1000, 250, 750, 1000]
    with pytest.raises(ValueError, match="unknown robot hand 'shadow'"):
        choose_target("shadow")
    with pytest.raises(ValueError, match="no Inspire URDF for a left hand"):
        target.model("left")


@pytest.mark.slow  # two retarget programs on the 621 frames of the bundled sample
@needs_urdf
def test_retarget_converges_on_real_frames():
    """At the default settings the openings are those of a fit run to convergence (40 iterations):
    within 2e-3 on 95 % of the bundled sample's frames and 1e-2 on the worst. Without the projected
    step (clipping only) the frames with a motor at a limit crept: 8.9e-3 at p95, 0.029 at most."""
    world = np.load(Path(__file__).resolve().parents[1] / "assets" / "samples" / "human_hand_video_landmarks.npz")["world"]
    q = wj.solve(wj.load_hand("right"), world.astype(np.float32)).angles
    robot = load_inspire_hand()
    default = np.asarray(wi.retarget(q, robot))
    converged = np.asarray(wi.retarget(q, robot, config=wi.RetargetConfig(iterations=40)))
    gap = np.abs(default - converged).max(-1)
    assert np.percentile(gap, 95) <= 2e-3 and gap.max() <= 1e-2, (np.percentile(gap, 95), gap.max())


@pytest.mark.slow  # compiles the kernel, its vmap and its reverse-mode derivative in one program
@needs_urdf
def test_retarget_batched_jit_vmap_grad_and_warm_start():
    robot = load_inspire_hand()
    q = jnp.asarray(np.stack([named_pose(n) for n in ("open", "fist", "pinch", "point")]), jnp.float32)
    eager = np.asarray(wi.retarget(q, robot))  # the same program as test_retarget_on_named_poses

    @jax.jit  # one compilation for jit, vmap, grad and the warm start
    def together(x):
        f = lambda y: wi.retarget(y, robot)  # noqa: E731
        return (jax.vmap(f)(x), jax.grad(lambda y: f(y)[..., 3].sum())(x), wi.retarget(x, robot, q0=f(x)))

    mapped, g, warm = together(q)
    np.testing.assert_allclose(np.asarray(mapped), eager, atol=5e-3)  # float32 LM steps: rounding only
    assert g.shape == q.shape and np.all(np.isfinite(np.asarray(g)))
    # the derivative of the solver's steps, against central differences of the same steps in float64
    # (float32 differences are noise: the steps' rounding moves the answer by ~1e-4)
    d = np.random.default_rng(0).normal(size=q.shape)
    q64 = np.asarray(q, np.float64)
    loss = lambda y: float(np.asarray(wi.retarget(jnp.asarray(y, jnp.float64), robot))[..., 3].sum())  # noqa: E731
    fd = (loss(q64 + 1e-6 * d) - loss(q64 - 1e-6 * d)) / 2e-6
    gd = float(jnp.sum(g * jnp.asarray(d, g.dtype)))
    assert abs(gd - fd) <= 2e-3 * max(1.0, abs(fd)), (gd, fd)  # measured 5e-5 relative
    np.testing.assert_allclose(np.asarray(warm), eager, atol=0.02)  # from its own answer: stays there
    with pytest.raises(ValueError, match="q0"):
        wi.retarget(q, robot, q0=np.zeros(6))
    with pytest.raises(ValueError, match="model"):
        wi.retarget(q, 3)
