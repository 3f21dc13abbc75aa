"""Floor 3: joint angles → robot-hand commands; robot models are read at run time (none ships here).

* target:       the :class:`~wuji_jax.retarget.target.Target` protocol the pipelines take (batch, Ray,
  live), and :data:`~wuji_jax.retarget.target.TARGETS`: a new robot hand is a new module here and one
  line there
* inspire_target: the Inspire hand as a target (joint map or task-space retarget)
* inspire:      the Inspire RH56 hand's commands (``wj.inspire``): the joint map ``to_inspire``, the
  task-space ``retarget``, calibration, RH56 units, ROS payloads, streams
* inspire_hand: the Inspire hand from a URDF (a path, or the copy inside ``dexi-rs``): openings ↔
  joint angles, fingertip forward kinematics, the palm frame
* task_space:   the task-space optimiser behind ``wuji_jax.inspire.retarget`` (``RetargetConfig``)
"""

from .inspire_hand import FINGER_BASE_LINKS as FINGER_BASE_LINKS
from .inspire_hand import MOTOR_JOINTS as MOTOR_JOINTS
from .inspire_hand import TIP_LINKS as TIP_LINKS
from .inspire_hand import InspireHand as InspireHand
from .inspire_hand import InspireModelNotFound as InspireModelNotFound
from .inspire_hand import angles_to_openings as angles_to_openings
from .inspire_hand import find_inspire_urdf as find_inspire_urdf
from .inspire_hand import inspire_link_frames as inspire_link_frames
from .inspire_hand import inspire_model_hint as inspire_model_hint
from .inspire_hand import inspire_points as inspire_points
from .inspire_hand import inspire_tips as inspire_tips
from .inspire_hand import load_inspire_hand as load_inspire_hand
from .inspire_hand import openings_to_angles as openings_to_angles
from .inspire_hand import palm_frame as palm_frame
from .task_space import RetargetConfig as RetargetConfig
from .task_space import retarget_rows as retarget_rows

__all__ = [
    "FINGER_BASE_LINKS", "MOTOR_JOINTS", "TIP_LINKS", "InspireHand", "InspireModelNotFound", "angles_to_openings",
    "find_inspire_urdf", "inspire_link_frames", "inspire_model_hint", "inspire_points", "inspire_tips",
    "load_inspire_hand", "openings_to_angles", "palm_frame", "RetargetConfig", "retarget_rows",
]
