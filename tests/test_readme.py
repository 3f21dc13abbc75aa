"""The README is a front door: at most 200 lines, and every python block in it runs, on bundled data,
as a user would paste it (a fresh process in the repository's folder)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_is_short_and_links_resolve():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(((?!https?:)[^)#]+)\)", text)
    assert links and all((ROOT / link).exists() for link in links), [link for link in links if not (ROOT / link).exists()]
    assert _blocks()


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(_blocks())))
def test_readme_python_blocks_run(i):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", _blocks()[i]], cwd=ROOT, capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
