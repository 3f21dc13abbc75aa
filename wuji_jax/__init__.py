"""wuji_jax — the Wuji Glove WG110v12 hand in JAX.

The map of the library. The modules stand on floors: a module imports only from its own floor or a
lower one (late imports inside functions included; ``tests/test_packaging.py`` reads this table and
holds it), so that a floor can be read, tested and replaced without the ones above it.

=====  ==============  =====================================================================================
floor  where           what
=====  ==============  =====================================================================================
0      runtime/        how programs run, nothing about the hand: ``programs`` (the one policy for padded
                       sizes, devices, compile options), ``cache`` (``enable_compilation_cache``: JAX's
                       persistent compilation cache), ``devices`` (``use_cpu_cores``)
0      _aliases.py     the modules' old names (``wuji_jax.io``, ``wuji_jax.solver.api``, ...) as the moved
                       modules themselves
1      hand/           the hand: ``model`` (``load_hand``, ``HandModel``: URDF → pytree, ``urdf_path``,
                       ``mirror_urdf``), ``geometry`` (rotations and vectors written once), ``chains`` (the
                       serial chains and the one forward kinematics with Jacobian), ``kinematics``
                       (``forward_keypoints``, ``forward_kinematics``, ``coupled_angles``, ``full_angles``),
                       ``landmarks`` (MediaPipe names/indices, ``check_landmarks``, ``detect_side``),
                       ``poses`` (``named_pose``, ``POSES``)
1      data/           data in and out, never the solver: ``recording`` (``LandmarkRecording``), ``io``
                       (datasets in and out; extra ``formats``), ``video`` (MediaPipe extraction; extra
                       ``video``), ``outputs`` (the one rule for every file a verb writes)
2      ik/             landmark-fitting IK: ``solve``, ``solve_optax``, ``landmark_loss``, ``SolverConfig``,
                       ``IKResult``, ``FLAG_*`` (``config``, ``start``, ``lm``, ``adjoint``, ``api``);
                       ``sequence`` (``solve_sequence``), ``calibration`` (``calibrate``), ``realtime``
                       (``FrameSolver``: one frame a call, the least overhead), ``filters`` (One-Euro)
3      retarget/       joint angles → robot-hand commands: ``target`` (the ``Target`` protocol the
                       pipelines take, and the registry of hands), ``inspire`` (``wj.inspire.to_inspire``,
                       the task-space ``retarget``, calibration, ROS-shaped payloads, RH56 units,
                       streams), ``inspire_hand`` (the Inspire hand read from its URDF at run time),
                       ``task_space``, ``inspire_target`` (the Inspire hand as a ``Target``)
4      pipeline/       a dataset into one resumable table: ``batch`` (``solve_dataset``), ``ray_cluster``
                       (``solve_dataset_ray``: the same table from a Ray cluster; extra ``ray``) and their
                       parts ``kernel``, ``reading``, ``store``, ``table``, ``interrupts``; ``live``
                       (``Live``: a camera, video or stream → robot commands frame by frame) and
                       ``live_outputs`` (JSON lines, ROS 2 bags, UDP; extras ``video``, ``live``)
4      viz/            pictures: the package itself (figures; extra ``viz``), ``overlay`` (``render_overlay``:
                       the video with the fit, as MP4), ``viewer`` (``write_viewer``: the interactive HTML
                       kinematic tree; its page is the package data ``viewer.html``)
5      cli/            the ``wuji-jax`` command line: the package itself (parser and verbs), ``inspire_cli``
                       (the ``inspire`` verb), ``live_cli`` (``live``), ``warmup``, ``tables`` (the verbs' angle and landmark
                       readers), ``cli_common``
5      __main__.py     ``python -m wuji_jax``
5      __init__.py     this map: ``wj.<name>`` below, imported on first use
=====  ==============  =====================================================================================

Below the map only ``wuji_jax.__version__`` may be imported from it. ``viz``, ``io``, ``video``,
``batch``, ``viewer``, ``overlay`` and ``live`` (optional extras) are imported on first use as ``wj.<name>``.
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
    "HandModel": "hand.model", "load_hand": "hand.model", "load_urdf": "hand.model", "mirror_urdf": "hand.model",
    "urdf_path": "hand.model",
    "POSES": "hand.poses", "named_pose": "hand.poses", "FrameSolver": "ik.realtime", "solve_sequence": "ik.sequence",
    "IKResult": "ik", "SolverConfig": "ik", "landmark_loss": "ik", "neutral_angles": "ik",
    "pose_from_palm": "ik", "solve": "ik", "solve_optax": "ik",
}
_MODULES = {"geometry": "hand.geometry", "inspire": "retarget.inspire", "landmarks": "hand.landmarks"}  # public modules in __all__
# optional extras (matplotlib, mediapipe, pyarrow): public modules imported on first use
_LAZY = {"viz": "viz", "io": "data.io", "video": "data.video", "batch": "pipeline.batch", "viewer": "viz.viewer", "overlay": "viz.overlay",
         "live": "pipeline.live"}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .hand import geometry, landmarks  # noqa: F401
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
