"""wuji_jax — the Wuji Glove WG110v12 hand in JAX.

The map of the library (everything below is public):

* model:      ``load_hand``, ``HandModel`` (URDF → pytree), ``urdf_path``, ``mirror_urdf``
* geometry:   rotations and vectors written once (SO(3) exp, Rodrigues, rpy, quaternions, fast trig)
* chains:     the hand as serial chains and the one forward kinematics with Jacobian
* kinematics: ``forward_keypoints``, ``forward_kinematics``, ``coupled_angles``, ``full_angles``
* landmarks:  MediaPipe names/indices, ``check_landmarks``, ``detect_side``
* solver:     ``solve``, ``solve_optax``, ``landmark_loss``, ``SolverConfig``, ``IKResult``
              (``solver.config``, ``solver.start``, ``solver.lm``, ``solver.api``)
* sequence / calibration: ``solve_sequence``, ``calibrate``
* realtime:   ``FrameSolver``: one frame at a time with the least overhead (live streams; numpy out)
* inspire:    ``wj.inspire.to_inspire`` and ROS-shaped payloads (seed 003)
* poses:      ``named_pose``, ``POSES``
* cache:      ``enable_compilation_cache``: JAX's persistent compilation cache in one call
* devices:    ``use_cpu_cores``: one JAX CPU device per core; big batches are split over the devices
* io / video: datasets in and out, MediaPipe extraction (extras ``formats`` / ``video``; lazy)
* viz:        pictures (extra ``viz``; lazy)
* overlay:    ``render_overlay``: the input video with landmarks, the fit and Inspire bars, as MP4 (lazy)
* viewer:     ``write_viewer``: interactive, self-contained HTML view of the kinematic tree (lazy)
"""

from . import geometry as geometry
from . import inspire as inspire
from . import landmarks as landmarks
from .cache import enable_compilation_cache as enable_compilation_cache
from .calibration import calibrate as calibrate
from .devices import use_cpu_cores as use_cpu_cores
from .kinematics import LinkFrames as LinkFrames
from .kinematics import coupled_angles as coupled_angles
from .kinematics import forward_keypoints as forward_keypoints
from .kinematics import forward_kinematics as forward_kinematics
from .kinematics import full_angles as full_angles
from .landmarks import LANDMARK_NAMES as LANDMARK_NAMES
from .landmarks import check_landmarks as check_landmarks
from .landmarks import detect_side as detect_side
from .model import HandModel as HandModel
from .model import load_hand as load_hand
from .model import load_urdf as load_urdf
from .model import mirror_urdf as mirror_urdf
from .model import urdf_path as urdf_path
from .poses import POSES as POSES
from .poses import named_pose as named_pose
from .realtime import FrameSolver as FrameSolver
from .sequence import solve_sequence as solve_sequence
from .solver import IKResult as IKResult
from .solver import SolverConfig as SolverConfig
from .solver import landmark_loss as landmark_loss
from .solver import neutral_angles as neutral_angles
from .solver import pose_from_palm as pose_from_palm
from .solver import solve as solve
from .solver import solve_optax as solve_optax

__version__ = "0.2.0"

__all__ = [
    "geometry", "inspire", "landmarks", "enable_compilation_cache", "calibrate", "use_cpu_cores", "LinkFrames",
    "coupled_angles", "forward_keypoints", "forward_kinematics", "full_angles", "LANDMARK_NAMES",
    "check_landmarks", "detect_side", "HandModel", "load_hand", "load_urdf", "mirror_urdf", "urdf_path", "POSES",
    "named_pose", "FrameSolver", "solve_sequence", "IKResult", "SolverConfig", "landmark_loss", "neutral_angles",
    "pose_from_palm", "solve", "solve_optax", "__version__",
]  # and, imported on first use: viz, io, video, batch, viewer, overlay

_LAZY = ("viz", "io", "video", "batch", "viewer", "overlay")


def __getattr__(name):  # optional modules: matplotlib / mediapipe / pyarrow load on first use
    import importlib

    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'wuji_jax' has no attribute {name!r}")
