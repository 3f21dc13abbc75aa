"""Seed 000's joint table typed in by hand, and an independent numpy FK over it.

Nothing here uses wuji_jax: it is the reference the library is checked against.
"""

import numpy as np

# finger: (metacarpal xyz, metacarpal rpy, [(joint, origin z, axis)], tip z)
FINGERS = {
    "thumb": ((0.0329, 0.0355, -0.0241), (0, -0.4301, 0),
              [("flex", 0.0, "X"), ("abd", 0.0, "Y"), ("mcp", -0.0407, "X"), ("ip", -0.0346, "X")], -0.0332),
    "index": ((0.0322, 0, -0.0881), (0, 0, 0),
              [("flex", 0, "X"), ("abd", 0, "Y"), ("pip", -0.0387, "X"), ("dip", -0.026, "X")], -0.0241),
    "middle": ((0.0137, 0, -0.0947), (0, 0, 0),
               [("flex", 0, "X"), ("abd", 0, "Y"), ("pip", -0.0425, "X"), ("dip", -0.0286, "X")], -0.0259),
    "ring": ((-0.0067, 0, -0.0817), (0, 0, 0),
             [("flex", 0, "X"), ("abd", 0, "Y"), ("pip", -0.0407, "X"), ("dip", -0.0273, "X")], -0.0247),
    "pinky": ((-0.0232, 0, -0.0688), (0, 0, 0),
              [("flex", 0, "X"), ("abd", 0, "Y"), ("pip", -0.0321, "X"), ("dip", -0.0215, "X")], -0.0194),
}
LOWER = np.array([-0.349, -0.175, 0, 0] + [-0.175, -0.524, 0, 0] * 4)
UPPER = np.array([0.873, 0.698, 1.222, 1.396] + [1.571, 0.524, 1.745, 1.222] * 4)
ROT_YAW = 0.7854  # thumb_cmc_rot origin rpy (0, 0, 0.7854), axis Z, mimic 0.22 x flex


def rot(axis, a):
    c, s = np.cos(a), np.sin(a)
    if axis == "X":
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    if axis == "Y":
        return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def homog(R=np.eye(3), p=(0, 0, 0)):
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = p
    return T


def reference_keypoints(q, k_flex=0.22, k_abd=0.0, k_cross=0.0, mirror=False):
    """(20,) angles → (21, 3) keypoints by chained 4×4 transforms, straight from the table."""
    q = np.asarray(q, np.float64)
    kp = [np.zeros(3)]
    for f, (name, (xyz, rpy, joints, tip)) in enumerate(FINGERS.items()):
        qa = q[4 * f: 4 * f + 4]
        T = homog(rot("Z", rpy[2]) @ rot("Y", rpy[1]) @ rot("X", rpy[0]), xyz)
        kp.append(T[:3, 3].copy())  # CMC / MCP landmark
        if name == "thumb":
            th_rot = k_flex * qa[0] + k_abd * qa[1] + k_cross * qa[0] * qa[1]
            T = T @ homog(rot("Z", ROT_YAW)) @ homog(rot("Z", th_rot))
        for j, (_, z, axis) in enumerate(joints):
            T = T @ homog(p=(0, 0, z)) @ homog(rot(axis, qa[j]))
            if j >= 2:
                kp.append(T[:3, 3].copy())  # MCP/IP (thumb) or PIP/DIP
        T = T @ homog(p=(0, 0, tip))
        kp.append(T[:3, 3].copy())
    out = np.stack(kp)
    if mirror:
        out = out * np.array([1, -1, 1])
    return out
