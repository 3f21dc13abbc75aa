"""The modules' old names (``wuji_jax.io``, ``wuji_jax.solver.api``, ...), kept for users' scripts after
the move into subpackages by floor (see :mod:`wuji_jax`).

An old name is the moved module itself, not a copy: ``import wuji_jax.batch`` gives the module
object that ``import wuji_jax.pipeline.batch`` gives, so that monkeypatching ``wuji_jax.batch.X``
patches what the code calls. :class:`AliasFinder` (on ``sys.meta_path``, installed by
``wuji_jax/__init__.py``) answers only the names in :data:`ALIASES` and the submodules of an aliased
package; its loader imports the real module and puts it in ``sys.modules`` under the old name (the
import system then returns that entry). Nothing is imported before an old name is asked for.

The package's own code, tests and docs use the real names (``tests/test_packaging.py`` checks it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# old name -> real name (a package alias covers its submodules: wuji_jax.solver.api -> wuji_jax.ik.api)
ALIASES = {
    "wuji_jax.programs": "wuji_jax.runtime.programs",
    "wuji_jax.cache": "wuji_jax.runtime.cache",
    "wuji_jax.devices": "wuji_jax.runtime.devices",
    "wuji_jax.geometry": "wuji_jax.hand.geometry",
    "wuji_jax.model": "wuji_jax.hand.model",
    "wuji_jax.chains": "wuji_jax.hand.chains",
    "wuji_jax.kinematics": "wuji_jax.hand.kinematics",
    "wuji_jax.landmarks": "wuji_jax.hand.landmarks",
    "wuji_jax.poses": "wuji_jax.hand.poses",
    "wuji_jax.recording": "wuji_jax.data.recording",
    "wuji_jax.io": "wuji_jax.data.io",
    "wuji_jax.video": "wuji_jax.data.video",
    "wuji_jax.outputs": "wuji_jax.data.outputs",
    "wuji_jax.solver": "wuji_jax.ik",
    "wuji_jax.realtime": "wuji_jax.ik.realtime",
    "wuji_jax.sequence": "wuji_jax.ik.sequence",
    "wuji_jax.calibration": "wuji_jax.ik.calibration",
    "wuji_jax.filters": "wuji_jax.ik.filters",
    "wuji_jax.inspire": "wuji_jax.retarget.inspire",
    "wuji_jax.batch": "wuji_jax.pipeline.batch",
    "wuji_jax.ray_cluster": "wuji_jax.pipeline.ray_cluster",
    "wuji_jax.runner": "wuji_jax.pipeline",
    "wuji_jax.overlay": "wuji_jax.viz.overlay",
    "wuji_jax.viewer": "wuji_jax.viz.viewer",
    "wuji_jax.cli_common": "wuji_jax.cli.cli_common",
    "wuji_jax.inspire_cli": "wuji_jax.cli.inspire_cli",
    "wuji_jax.warmup": "wuji_jax.cli.warmup",
    "wuji_jax.tables": "wuji_jax.cli.tables",
    "wuji_jax.live": "wuji_jax.pipeline.live",
    "wuji_jax.live_outputs": "wuji_jax.pipeline.live_outputs",
    "wuji_jax.live_cli": "wuji_jax.cli.live_cli",
}


def real_name(name: str) -> str | None:
    """The real module behind an old ``name`` (a key of :data:`ALIASES` or a submodule of one), or
    ``None`` where ``name`` is no old name."""
    if name in ALIASES:
        return ALIASES[name]
    head, dot, tail = name.rpartition(".")
    while dot:
        if head in ALIASES:
            return f"{ALIASES[head]}.{tail}"
        head, dot, rest = head.rpartition(".")
        tail = f"{rest}.{tail}"
    return None


class AliasLoader(importlib.abc.Loader):
    """Loads an old name as the real module: the real module replaces the placeholder in ``sys.modules``."""

    def create_module(self, spec):
        return None  # the default placeholder module; exec_module swaps it for the real one

    def exec_module(self, module):
        sys.modules[module.__name__] = importlib.import_module(real_name(module.__name__))


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of moved modules (first on ``sys.meta_path``, so that an aliased package's
    ``__path__`` never loads a second copy of a submodule)."""

    _loader = AliasLoader()

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("wuji_jax.") or real_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self._loader)


def install() -> None:
    """Put one :class:`AliasFinder` first on ``sys.meta_path`` (again after a reload: no duplicate)."""
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "AliasFinder"
                        or type(f).__module__ != __name__]
    sys.meta_path.insert(0, AliasFinder())
