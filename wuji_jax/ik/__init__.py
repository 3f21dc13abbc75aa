"""Landmark-fitting IK: 21 MediaPipe landmarks → 20 joint angles, wrist pose and hand scale.

* :mod:`.config`: :class:`SolverConfig` (documented settings), :class:`IKResult`, the ``FLAG_*`` bits;
* :mod:`.start`: the closed-form start (palm similarity, angles from the bone directions);
* :mod:`.lm`: Levenberg–Marquardt as named pieces (problem, state, cost, normal equations, step, loop);
* :mod:`.api`: :func:`solve`, :func:`landmark_loss`, :func:`solve_optax`, :func:`pose_from_palm`; the
  kernel on one flat batch, :func:`solve_rows`, and its two stages :func:`start_rows` (→ :class:`Start`)
  and :func:`fit_rows`.
"""

from .api import ACCELERATOR_CHUNK_FRAMES as ACCELERATOR_CHUNK_FRAMES
from .api import CHUNK_FRAMES as CHUNK_FRAMES
from .api import chunk_frames as chunk_frames
from .api import check_solver_input as check_solver_input
from .api import landmark_loss as landmark_loss
from .api import neutral_angles as neutral_angles
from .api import pick_side as pick_side
from .api import pose_from_palm as pose_from_palm
from .api import solve as solve
from .api import solve_checked as solve_checked
from .api import solve_optax as solve_optax
from .api import solve_chunked as solve_chunked
from .api import solve_rows as solve_rows
from .api import Start as Start
from .api import start_rows as start_rows
from .api import fit_rows as fit_rows
from .api import split_kernel as split_kernel
from .config import DEGENERATE_SPREAD as DEGENERATE_SPREAD
from .config import FLAG_BAD_SCALE as FLAG_BAD_SCALE
from .config import FLAG_DEGENERATE as FLAG_DEGENERATE
from .config import FLAG_HIGH_RESIDUAL as FLAG_HIGH_RESIDUAL
from .config import FLAG_MIRRORED as FLAG_MIRRORED
from .config import FLAG_NAMES as FLAG_NAMES
from .config import FLAG_NO_DERIVATIVE as FLAG_NO_DERIVATIVE
from .config import FLAG_UNSEEN_FINGER as FLAG_UNSEEN_FINGER
from .config import FLAG_NOT_FINITE as FLAG_NOT_FINITE
from .config import FLAG_TOO_FEW_LANDMARKS as FLAG_TOO_FEW_LANDMARKS
from .config import IKResult as IKResult
from .config import SolverConfig as SolverConfig

__all__ = [
    "SolverConfig", "IKResult", "solve", "solve_rows", "Start", "start_rows", "fit_rows", "solve_chunked", "split_kernel", "solve_checked", "landmark_loss", "solve_optax",
    "pose_from_palm", "neutral_angles", "check_solver_input", "pick_side", "CHUNK_FRAMES", "ACCELERATOR_CHUNK_FRAMES", "chunk_frames",
    "FLAG_TOO_FEW_LANDMARKS", "FLAG_BAD_SCALE", "FLAG_HIGH_RESIDUAL", "FLAG_MIRRORED", "FLAG_NOT_FINITE", "FLAG_NO_DERIVATIVE", "FLAG_UNSEEN_FINGER",
    "FLAG_DEGENERATE", "DEGENERATE_SPREAD", "FLAG_NAMES",
]
