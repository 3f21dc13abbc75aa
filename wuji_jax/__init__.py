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
* retarget:   the Inspire hand read from its URDF at run time, and the task-space retarget behind
              ``wj.inspire.retarget`` (``RetargetConfig``)
* poses:      ``named_pose``, ``POSES``
* cache:      ``enable_compilation_cache``: JAX's persistent compilation cache in one call
* programs:   the one policy for the solver's programs: padded sizes, devices, compile options
* devices:    ``use_cpu_cores``: one JAX CPU device per core; big batches are split over the devices
* io / video: datasets in and out, MediaPipe extraction (extras ``formats`` / ``video``; lazy), both
              into ``recording``'s ``LandmarkRecording``
* batch:      ``solve_dataset``: landmark files in, one resumable table of angles out (lazy)
* live:       ``Live``: a camera, video or stream → Inspire commands frame by frame (``wuji-jax live``;
              ``live_outputs``: JSON lines, ROS 2 bags, UDP; extras ``video``, ``live``; lazy)
* ray_cluster: ``solve_dataset_ray``: the same table from a Ray cluster's workers (extra ``ray``)
* cli:        the ``wuji-jax`` command line (``inspire_cli``: its ``inspire`` verb; ``cli_common``: what both use)
* viz:        pictures (extra ``viz``; lazy)
* overlay:    ``render_overlay``: the input video with landmarks, the fit and Inspire bars, as MP4 (lazy)
* viewer:     ``write_viewer``: interactive, self-contained HTML view of the kinematic tree (lazy)
"""

from typing import TYPE_CHECKING

from . import _aliases

_aliases.install()  # the modules' old names (wuji_jax.io, wuji_jax.solver.api, ...) as the moved modules

# public name → the module that defines it. Nothing is imported until a name is first used, so
# ``import wuji_jax.io`` (and ``wuji-jax --version``) run without loading JAX.
_EXPORTS = {
    "enable_compilation_cache": "runtime.cache", "calibrate": "ik.calibration", "use_cpu_cores": "runtime.devices",
    "LinkFrames": "hand.kinematics", "coupled_angles": "hand.kinematics", "forward_keypoints": "hand.kinematics",
    "forward_kinematics": "hand.kinematics", "full_angles": "hand.kinematics",
    "LANDMARK_NAMES": "hand.landmarks", "check_landmarks": "hand.landmarks", "detect_side": "hand.landmarks",
    "HandModel": "hand.model", "load_hand": "hand.model", "load_urdf": "hand.model", "mirror_urdf": "hand.model", "urdf_path": "hand.model",
    "POSES": "hand.poses", "named_pose": "hand.poses", "FrameSolver": "ik.realtime", "solve_sequence": "ik.sequence",
    "IKResult": "ik", "SolverConfig": "ik", "landmark_loss": "ik", "neutral_angles": "ik",
    "pose_from_palm": "ik", "solve": "ik", "solve_optax": "ik",
}
_MODULES = {"geometry": "hand.geometry", "inspire": "retarget.inspire", "landmarks": "hand.landmarks"}  # public modules in __all__
# optional extras (matplotlib, mediapipe, pyarrow): public modules imported on first use
_LAZY = {"viz": "viz", "io": "data.io", "video": "data.video", "batch": "pipeline.batch", "viewer": "viz.viewer", "overlay": "viz.overlay",
         "live": "pipeline.live"}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .hand import geometry, landmarks
    from .retarget import inspire  # noqa: F401
    from .runtime.cache import enable_compilation_cache  # noqa: F401
    from .ik.calibration import calibrate  # noqa: F401
    from .runtime.devices import use_cpu_cores  # noqa: F401
    from .hand.kinematics import LinkFrames, coupled_angles, forward_keypoints, forward_kinematics, full_angles  # noqa: F401
    from .hand.landmarks import LANDMARK_NAMES, check_landmarks, detect_side  # noqa: F401
    from .hand.model import HandModel, load_hand, load_urdf, mirror_urdf, urdf_path  # noqa: F401
    from .hand.poses import POSES, named_pose  # noqa: F401
    from .ik.realtime import FrameSolver  # noqa: F401
    from .ik.sequence import solve_sequence  # noqa: F401
    from .ik import (IKResult, SolverConfig, landmark_loss, neutral_angles, pose_from_palm, solve,  # noqa: F401
                         solve_optax)

__version__ = "0.2.0"

__all__ = [
    "geometry", "inspire", "landmarks", "enable_compilation_cache", "calibrate", "use_cpu_cores", "LinkFrames",
    "coupled_angles", "forward_keypoints", "forward_kinematics", "full_angles", "LANDMARK_NAMES",
    "check_landmarks", "detect_side", "HandModel", "load_hand", "load_urdf", "mirror_urdf", "urdf_path", "POSES",
    "named_pose", "FrameSolver", "solve_sequence", "IKResult", "SolverConfig", "landmark_loss", "neutral_angles",
    "pose_from_palm", "solve", "solve_optax", "__version__",
]  # and, imported on first use: viz, io, video, batch, viewer, overlay, live


def __getattr__(name):
    import importlib

    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _MODULES or name in _LAZY:
        value = importlib.import_module(f".{_MODULES.get(name) or _LAZY[name]}", __name__)
    elif f"{__name__}.{name}" in _aliases.ALIASES:  # an old module name: wj.solver, wj.cache, ...
        value = importlib.import_module(_aliases.ALIASES[f"{__name__}.{name}"])
    else:
        raise AttributeError(f"module 'wuji_jax' has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_LAZY))
