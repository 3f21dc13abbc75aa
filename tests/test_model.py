"""URDF loading: the bundled models, a small URDF written here, and each malformed case."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wuji_jax as wj
from wuji_jax.hand.model import mirror_urdf, parse_urdf, urdf_path
from seed_table import LOWER, UPPER

SEED_ORDER = (
    "thumb_cmc_flex", "thumb_cmc_abd", "thumb_mcp", "thumb_ip",
    *(f"{f}_{j}" for f in ("index_finger", "middle_finger", "ring_finger", "pinky")
      for j in ("mcp_flex", "mcp_abd", "pip", "dip")),
)


def test_wg110_joint_table(right):
    assert right.joint_names == SEED_ORDER
    np.testing.assert_allclose(np.asarray(right.lower), LOWER, atol=1e-7)
    np.testing.assert_allclose(np.asarray(right.upper), UPPER, atol=1e-7)
    assert right.mimic_names == ("thumb_cmc_rot",)
    np.testing.assert_allclose(np.asarray(right.coupling), [[0.22, 0.0, 0.0]], atol=1e-7)
    np.testing.assert_allclose(np.asarray(right.mimic_lower), [-0.175], atol=1e-7)
    np.testing.assert_allclose(np.asarray(right.mimic_upper), [0.873], atol=1e-7)
    # 5 metacarpals + 5 tips fixed, 21 revolute: 27 joints below the wrist... plus the 5 abd links
    assert right.num_links == 32
    assert sum(k == 0 for k in right.kinds[1:]) == 10
    assert right.side == "right" and wj.load_hand("left").side == "left"


def test_hand_is_a_pytree_with_static_topology(right):
    leaves, treedef = jax.tree_util.tree_flatten(right)
    assert len(leaves) == 9 and all(isinstance(x, jax.Array) for x in leaves)
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert again.joint_names == right.joint_names


def test_left_file_is_the_mirror_of_the_right():
    right_text = urdf_path("right").read_text()
    left = parse_urdf(urdf_path("left").read_text())
    mirrored = parse_urdf(mirror_urdf(right_text))
    for a, b in zip(jax.tree_util.tree_leaves(left), jax.tree_util.tree_leaves(mirrored)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-7)
    assert left.joint_names == SEED_ORDER


SMALL = """<robot name="arm">
  <link name="base"/><link name="l1"/><link name="l2"/><link name="tip"/><link name="follower"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>
    <origin xyz="0 0 0.1" rpy="0 0 0"/><axis xyz="0 0 1"/><limit lower="-1" upper="1"/></joint>
  <joint name="j2" type="continuous"><parent link="l1"/><child link="l2"/>
    <origin xyz="0.2 0 0" rpy="0 0 0"/><axis xyz="0 1 0"/></joint>
  <joint name="t" type="fixed"><parent link="l2"/><child link="tip"/><origin xyz="0.3 0 0"/></joint>
  <joint name="m" type="revolute"><parent link="l1"/><child link="follower"/>
    <origin xyz="0 0.1 0"/><axis xyz="1 0 0"/><limit lower="-2" upper="2"/>
    <mimic joint="j2" multiplier="-0.5" offset="0.1"/></joint>
</robot>"""


def test_other_urdf_loads_and_computes(tmp_path):
    p = tmp_path / "arm.urdf"
    p.write_text(SMALL)
    arm = wj.load_hand("right", urdf=p)
    assert arm.joint_names == ("j1", "j2") and arm.mimic_names == ("m",)
    assert np.isinf(float(arm.upper[1]))  # continuous
    frames = wj.forward_kinematics(arm, jnp.array([np.pi / 2, np.pi / 2]))
    # j1 turns 90° about z: l2 at (0, .2, .1); j2 pitches 90° about y, so tip = l2 + R·(.3,0,0) = (0,.2,.1) + (0,0,-.3)
    tip = np.asarray(frames.positions)[arm.link_index("tip")]
    np.testing.assert_allclose(tip, [0, 0.2, 0.1 - 0.3], atol=1e-12)
    np.testing.assert_allclose(np.asarray(wj.coupled_angles(arm, jnp.array([0.0, 1.0]))), [-0.4], atol=1e-12)
    with pytest.raises(ValueError, match="no MediaPipe keypoint map"):
        wj.forward_keypoints(arm, jnp.zeros(2))


def _bad(old, new):
    return SMALL.replace(old, new)


@pytest.mark.parametrize(
    "text, message",
    [
        (_bad('name="j2" type="continuous"', 'name="j2" type="prismatic"'), "joint 'j2': unsupported type 'prismatic'"),
        (_bad('name="t" type="fixed"', 'name="t" type="floating"'), "joint 't': unsupported type 'floating'"),
        (_bad('<parent link="l2"/><child link="tip"/>', '<parent link="nowhere"/><child link="tip"/>'),
         "joint 't': parent link 'nowhere' is not defined"),
        (_bad('lower="-1" upper="1"', 'lower="1" upper="-1"'), r"joint 'j1': limit lower 1.0 > upper -1.0"),
        (_bad('<mimic joint="j2"', '<mimic joint="ghost"'), "joint 'm': mimics unknown joint 'ghost'"),
        (_bad('<joint name="j1" type="revolute"><parent link="base"/>', '<joint name="j1" type="revolute"><parent link="tip"/>'),
         "cycle"),
        (_bad('<axis xyz="0 0 1"/>', '<axis xyz="0 0 0"/>'), "joint 'j1': axis has zero length"),
        (_bad('<origin xyz="0.3 0 0"/>', '<origin xyz="0.3 0"/>'), "joint 't' origin xyz: expected 3"),
        ("<robot><link", "not valid XML"),
        (_bad('<link name="follower"/>', '<link name="follower"/><link name="loose"/>'), "2 root links"),
    ],
)
def test_bad_urdfs_name_the_element(text, message):
    with pytest.raises(ValueError, match=message):
        parse_urdf(text)


def test_missing_file_and_bad_side(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        wj.load_hand("right", urdf=tmp_path / "nope.urdf")
    with pytest.raises(ValueError, match="side must be 'right' or 'left'"):
        wj.load_hand("middle")


def test_a_model_parsed_inside_a_trace_is_concrete():
    """load_hand caches its model, so one first built inside jax.jit must hold arrays, not tracers of
    that trace (the next eager use would fail)."""
    text = urdf_path("right").read_text()
    built = []

    @jax.jit
    def f(x):
        built.append(parse_urdf(text))
        return x + built[-1].lower.sum()

    f(jnp.ones(2))
    assert not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(built[0]))
