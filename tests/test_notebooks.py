"""The notebooks in ``notebooks/`` run top to bottom and compute what they show.

Each notebook is read (never rewritten), executed in memory by an ipykernel in ``notebooks/`` and its
executed copy saved under ``tmp_path``. Every notebook ends by setting a ``summary`` dict; the test
appends one cell printing it as JSON, with the kernel's ``sys.prefix`` and ``wuji_jax`` file, and checks
the numbers. ``python tests/test_notebooks.py`` refreshes the committed outputs instead.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from traitlets import default

import wuji_jax

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PACKAGE_ROOT = Path(wuji_jax.__file__).resolve().parents[1]  # the wuji_jax the other tests import

PROBE = ("import json, sys\n"
         "print(json.dumps({'prefix': sys.prefix, 'wuji_jax': wj.__file__, 'summary': summary}))")

CHECKS = {
    "01_quickstart.ipynb": lambda s: (s["max_joint_error_clean_deg"] < 0.01
                                      and s["residual_clean_mm"] < 0.01 and 0.5 < s["residual_noisy_mm"] < 2.5),
    "02_dataset.ipynb": lambda s: (s["frames"] == 90 and s["detected"] >= 85 and s["median_residual_mm"] < 15
                                   and 0.0 <= s["command_range"][0] <= s["command_range"][1] <= 1.0),
    "03_learning.ipynb": lambda s: (s["final_loss"] < s["first_loss"] / 10 and s["max_gain_error"] < 0.01
                                    and s["max_length_error_percent"] < 1.0 and s["grad_rel_error"] < 0.3),  # Gauss–Newton derivative on a real frame (16 %)
}


class ThisPythonKernel(AsyncKernelManager):
    """A kernel manager whose ``python3`` kernel is always this interpreter.

    ``kernel_dirs=[]`` hides every installed kernelspec (a user's ``~/.local/share/jupyter/kernels/python3``
    may name another Python), so ``python3`` resolves to ipykernel's built-in spec,
    ``[sys.executable, "-m", "ipykernel_launcher", ...]``: the venv running pytest (CI's fresh venv
    included), with no kernelspec installed or written at test time.
    """

    @default("kernel_spec_manager")
    def _kernel_spec_manager_default(self):
        return KernelSpecManager(kernel_dirs=[])


def execute(nb, timeout: int = 300):
    """Run ``nb`` in place with a ``python3`` kernel of this interpreter, in ``notebooks/``.

    ``PYTHONPATH`` gives the kernel the same ``wuji_jax`` as the tests (a checkout need not be
    installed); ``MPLBACKEND=Agg`` keeps matplotlib headless (the notebooks switch to the inline backend).
    The client owns its kernel manager, so it shuts the kernel down and closes its sockets.
    """
    path = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    client = NotebookClient(nb, kernel_name="python3", kernel_manager_class=ThisPythonKernel, timeout=timeout,
                            record_timing=False, resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute(env={**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": path})
    return nb


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_notebook_runs_and_computes_what_it_shows(name, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and 'pip install ".[notebooks' in nb.cells[0].source
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    execute(nb)  # raises CellExecutionError naming the cell on any error
    nbformat.write(nb, tmp_path / name)
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    probe = json.loads(out.strip().splitlines()[-1])
    assert probe["prefix"] == sys.prefix, "the kernel runs another Python environment"
    assert Path(probe["wuji_jax"]).resolve() == Path(wuji_jax.__file__).resolve()
    assert CHECKS[name](probe["summary"]), probe["summary"]


if __name__ == "__main__":  # refresh the committed outputs: python tests/test_notebooks.py [names]
    for name in sys.argv[1:] or sorted(CHECKS):
        nb = execute(nbformat.read(NOTEBOOKS / name, as_version=4))
        nbformat.write(nb, NOTEBOOKS / name)
        print("executed", name)
