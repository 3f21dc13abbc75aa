"""The package's shape, held by tests: every subpackage is in the wheel (pyproject.toml lists the
packages by name, the asset folders as packages of their own), no module imports another's private
names, and no import circle (ARCHITECTURE's habits; farm-studio draws the same house)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    """A subpackage left off ``[tool.setuptools] packages`` is missing from the wheel: an installed
    ``wuji-jax`` fails on import while the tests, run from the source tree, pass."""
    text = (ROOT / "pyproject.toml").read_text()  # (tomllib is Python >= 3.11; the package supports 3.10)
    block = re.search(r"^\[tool\.setuptools\]\s*$(.*?)^\[", text, re.M | re.S).group(1)
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"^packages\s*=\s*\[(.*?)\]", block, re.M | re.S).group(1)))
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "wuji_jax").rglob("__init__.py")}
    assert on_disk, "no package found under wuji_jax/"
    assert on_disk <= listed, f"packages missing from pyproject.toml [tool.setuptools] packages: {sorted(on_disk - listed)}"


def _imports():
    """``{module: {(imported module, name or None), ...}}`` for every module of the package, from its
    ``import`` statements wherever they stand (a function's late import counts too)."""
    import ast

    pkg = ROOT / "wuji_jax"
    mods = {}
    for path in pkg.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = (path, parts[-1] == "__init__")
    out = {}
    for name, (path, is_pkg) in mods.items():
        here = name if is_pkg else name.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here if node.level else ""
                for _ in range(max(node.level - 1, 0)):
                    base = base.rsplit(".", 1)[0]
                target = ".".join(p for p in (base, node.module or "") if p)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add((sub, None) if sub in mods else (target, alias.name))
            elif isinstance(node, ast.Import):
                found.update((a.name, None) for a in node.names)
        out[name] = {(m, n) for m, n in found if m in mods}
    return out


def test_no_module_imports_another_modules_private_names():
    """A name that two modules need is not private (ARCHITECTURE's habits): no ``from .x import _y``."""
    bad = sorted(f"{m} imports {n} from {t}" for m, edges in _imports().items() for t, n in edges
                 if n and n.startswith("_") and not n.startswith("__") and t != m)
    assert not bad, bad


def test_the_modules_import_each_other_in_no_circle():
    """No import circle among the package's modules, late imports inside functions included (a circle
    is two rooms that each need the other: one of them holds what belongs to the other)."""
    graph = {m: {t for t, _ in edges if t != m} for m, edges in _imports().items()}
    # a subpackage's __init__ hands its modules' names on: an import of it is an import of what it
    # imports (the top package's __init__ loads its modules lazily, on first use, and stays out)
    faces = {m for m in graph if m != "wuji_jax" and (ROOT / Path(*m.split(".")) / "__init__.py").exists()}

    def through(ts, seen=()):
        return set().union(*[through(graph[t], seen + (t,)) if t in faces and t not in seen else {t}
                             for t in ts if t != "wuji_jax"]) - faces
    graph = {m: through(ts) for m, ts in graph.items() if m not in faces and m != "wuji_jax"}
    circles, state = [], {}

    def visit(m, stack):
        state[m] = "open"
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == "open":
                circles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not circles, [" -> ".join(c) for c in circles]


def _floors():
    """``{"wuji_jax.hand": 1, "wuji_jax._aliases": 0, ...}``: the floors table of ``wuji_jax/__init__.py``'s
    docstring (the map), one row a subpackage (``hand/``) or a top-level module (``_aliases.py``)."""
    doc = (ROOT / "wuji_jax" / "__init__.py").read_text().split('"""')[1]
    rows = re.findall(r"^(\d+)\s+(\w+)(/|\.py)\s", doc, re.M)
    assert rows, "no floors table in wuji_jax/__init__.py's docstring"
    return {"wuji_jax" if name == "__init__" else f"wuji_jax.{name}": int(floor) for floor, name, _ in rows}


def _floor_of(module, floors):
    """The floor of ``module`` (a module of a subpackage stands on its subpackage's floor), or None."""
    parts = module.split(".")
    return floors.get(".".join(parts[:2]), floors.get(module))


def _floor_violations(imports, floors):
    """``"a (floor 1) imports b (floor 2)"`` for every import of a higher floor. ``from wuji_jax import
    __version__`` is no import of the map (a constant: nothing is loaded)."""
    return sorted(f"{m} (floor {_floor_of(m, floors)}) imports {t} (floor {_floor_of(t, floors)})"
                  for m, edges in imports.items() for t, n in edges
                  if not (t == "wuji_jax" and n == "__version__")
                  and _floor_of(t, floors) > _floor_of(m, floors))


def test_every_module_stands_on_a_floor():
    """Each module of the package belongs to one row of the floors table (a new top-level module or
    subpackage gets a row, and with it a place in the layout)."""
    floors = _floors()
    homeless = sorted(m for m in _imports() if _floor_of(m, floors) is None)
    assert not homeless, f"modules on no floor of wuji_jax/__init__.py's table: {homeless}"
    assert set(floors.values()) == set(range(6)), floors


def test_no_module_imports_a_higher_floor():
    """A module imports only from its own floor or lower ones, late imports inside functions included:
    hand/ and data/ never reach the solver, the solver never reaches retargeting, pipelines or the CLI."""
    floors = _floors()
    assert not _floor_violations(_imports(), floors), _floor_violations(_imports(), floors)
    # the check itself catches a late import of ik/ in hand/ and of the CLI in the pipeline
    probe = {"wuji_jax.hand.model": {("wuji_jax.ik.api", None)},
             "wuji_jax.pipeline.batch": {("wuji_jax.cli", "main"), ("wuji_jax", "__version__")},
             "wuji_jax.data.io": {("wuji_jax", None)}}
    assert _floor_violations(probe, floors) == [
        "wuji_jax.data.io (floor 1) imports wuji_jax (floor 5)",
        "wuji_jax.hand.model (floor 1) imports wuji_jax.ik.api (floor 2)",
        "wuji_jax.pipeline.batch (floor 4) imports wuji_jax.cli (floor 5)"]


def _robot_imports(imports):
    """``"a imports b"`` for every import of a module of ``retarget/`` other than the target protocol
    (``wuji_jax.retarget.target``) by a module of ``pipeline/``."""
    return sorted(f"{m} imports {t}" for m, edges in imports.items() if m.startswith("wuji_jax.pipeline")
                  for t, _ in edges
                  if t.startswith("wuji_jax.retarget") and t != "wuji_jax.retarget.target")


def test_the_runners_take_targets_and_import_no_robot_hand():
    """The pipelines (batch, Ray, live) know a robot hand only through the target protocol
    (:mod:`wuji_jax.retarget.target`): a new hand is a new module under retarget/, not an edit of the
    runners."""
    assert not _robot_imports(_imports()), _robot_imports(_imports())
    probe = {"wuji_jax.pipeline.live": {("wuji_jax.retarget.inspire", "ctrl_message"),
                                        ("wuji_jax.retarget.target", "choose_target")}}
    assert _robot_imports(probe) == ["wuji_jax.pipeline.live imports wuji_jax.retarget.inspire"]


def test_the_package_imports_no_old_module_name():
    """The old module names (``wuji_jax.io``, ``wuji_jax.solver``, ...) are for users' scripts; the
    package's own imports name the real modules."""
    import ast

    from wuji_jax import _aliases

    bad = []
    for path in (ROOT / "wuji_jax").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        here = ".".join(parts[:-1])  # the package that a relative import starts from
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                base = here if node.level else ""
                for _ in range(max(node.level - 1, 0)):
                    base = base.rsplit(".", 1)[0]
                target = ".".join(p for p in (base, node.module or "") if p)
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if _aliases.real_name(n)]
    assert not bad, bad


def test_old_module_names_are_the_moved_modules():
    """Every old name imports as the real module object (monkeypatching ``wuji_jax.batch.X`` patches
    what the code calls), in a fresh process, without importing JAX before a JAX module is asked for."""
    import subprocess
    import sys

    from wuji_jax import _aliases

    code = "\n".join([
        "import importlib, sys",
        "import wuji_jax as wj",
        "assert 'jax' not in sys.modules",
        "import wuji_jax.io, wuji_jax.tables",  # readers: still no JAX
        "assert 'jax' not in sys.modules",
        "from wuji_jax import _aliases",
        "for old, new in _aliases.ALIASES.items():",
        "    assert importlib.import_module(old) is importlib.import_module(new), old",
        "    assert getattr(wj, old.split('.')[1]) is importlib.import_module(new), old",
        "from wuji_jax.solver import api, FLAG_NAMES",
        "import wuji_jax.solver.api, wuji_jax.runner.kernel",
        "assert api is wuji_jax.solver.api is importlib.import_module('wuji_jax.ik.api')",
        "assert wuji_jax.runner.kernel is importlib.import_module('wuji_jax.pipeline.kernel')",
        "assert FLAG_NAMES is wj.solver.FLAG_NAMES",
        "assert wj.batch.solve_dataset is importlib.import_module('wuji_jax.pipeline.batch').solve_dataset",
        "assert len([f for f in sys.meta_path if type(f).__name__ == 'AliasFinder']) == 1",
        "print('ok')",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
    for old, new in _aliases.ALIASES.items():  # an alias never shadows a real module
        path = ROOT / Path(*old.split("."))
        assert not path.with_suffix(".py").exists() and not (path / "__init__.py").exists(), old
