from .model import HandModel, load_hand
from .kinematics import coupled_angles, forward_keypoints, forward_kinematics
