from .model import HandModel, load_hand
from .kinematics import forward_keypoints, forward_kinematics
