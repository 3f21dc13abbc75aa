"""MediaPipe's 21 hand landmarks: names, indices, finger chains, and the WG110v12 keypoint map."""

from __future__ import annotations

__all__ = [
    "LANDMARK_NAMES",
    "NUM_LANDMARKS",
    "FINGER_NAMES",
    "FINGER_LANDMARKS",
    "PALM_LANDMARKS",
    "KEYPOINT_LINKS",
    "HAND_CONNECTIONS",
]

NUM_LANDMARKS = 21

#: MediaPipe hand landmark names, index order 0..20.
LANDMARK_NAMES: tuple[str, ...] = (
    "WRIST",
    "THUMB_CMC", "THUMB_MCP", "THUMB_IP", "THUMB_TIP",
    "INDEX_FINGER_MCP", "INDEX_FINGER_PIP", "INDEX_FINGER_DIP", "INDEX_FINGER_TIP",
    "MIDDLE_FINGER_MCP", "MIDDLE_FINGER_PIP", "MIDDLE_FINGER_DIP", "MIDDLE_FINGER_TIP",
    "RING_FINGER_MCP", "RING_FINGER_PIP", "RING_FINGER_DIP", "RING_FINGER_TIP",
    "PINKY_MCP", "PINKY_PIP", "PINKY_DIP", "PINKY_TIP",
)

FINGER_NAMES: tuple[str, ...] = ("thumb", "index", "middle", "ring", "pinky")

#: Landmark indices of each finger's 4 points, base to tip; ``FINGER_LANDMARKS[f]`` for finger ``f``.
FINGER_LANDMARKS: tuple[tuple[int, int, int, int], ...] = tuple(
    (1 + 4 * f, 2 + 4 * f, 3 + 4 * f, 4 + 4 * f) for f in range(5)
)

#: Landmarks fixed to the palm in the WG110v12 model (wrist, thumb CMC, the four finger MCPs).
PALM_LANDMARKS: tuple[int, ...] = (0, 1, 5, 9, 13, 17)

#: WG110v12 link whose origin is each MediaPipe keypoint (DESIGN.md's keypoint map).
KEYPOINT_LINKS: tuple[str, ...] = (
    "wrist",
    "thumb_metacarpal", "thumb_middle", "thumb_distal", "thumb_tip",
    "index_finger_metacarpal", "index_finger_middle", "index_finger_distal", "index_finger_tip",
    "middle_finger_metacarpal", "middle_finger_middle", "middle_finger_distal", "middle_finger_tip",
    "ring_finger_metacarpal", "ring_finger_middle", "ring_finger_distal", "ring_finger_tip",
    "pinky_metacarpal", "pinky_middle", "pinky_distal", "pinky_tip",
)

#: Skeleton edges between landmarks (as MediaPipe draws them).
HAND_CONNECTIONS: tuple[tuple[int, int], ...] = (
    (0, 1), (1, 2), (2, 3), (3, 4),
    (0, 5), (5, 6), (6, 7), (7, 8),
    (5, 9), (9, 10), (10, 11), (11, 12),
    (9, 13), (13, 14), (14, 15), (15, 16),
    (13, 17), (0, 17), (17, 18), (18, 19), (19, 20),
)
