"""The installed package holds every subpackage of the source tree: pyproject.toml lists its packages
by name (the asset folders are packages of their own), so a new subpackage left off that list would be
missing from the wheel, and ``wuji-jax`` would fail on import wherever it is installed."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "wuji_jax").rglob("__init__.py")}
    assert on_disk, "no package found under wuji_jax/"
    assert on_disk <= listed, f"packages missing from pyproject.toml [tool.setuptools] packages: {sorted(on_disk - listed)}"
