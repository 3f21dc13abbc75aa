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
