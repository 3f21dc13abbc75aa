"""``wuji-jax pose``: pictures from the command line, and one-line errors for bad input."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import matplotlib  # noqa: E402  (the test extra installs it)
matplotlib.use("Agg")

from wuji_jax.cli import main  # noqa: E402
from wuji_jax.hand.poses import POSES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ZEROS = ",".join(["0"] * 20)


def _angles(**changes) -> str:
    a = ["0"] * 20
    for i, v in changes.items():
        a[int(i[1:])] = v
    return ",".join(a)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("wuji-jax: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_named_pose_writes_png(tmp_path, capsys):
    out = tmp_path / "fist.png"
    assert main(["pose", "fist", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 20_000
    assert str(out) in capsys.readouterr().out


def test_angles_degrees_and_left(tmp_path, capsys):
    out = tmp_path / "deg.png"
    assert main(["pose", "--angles", _angles(a4="60", a6="45"), "--degrees", "--side", "left", "-o", str(out)]) == 0
    assert out.exists()


def test_angles_file(tmp_path, capsys):
    f = tmp_path / "q.npy"
    np.save(f, POSES["point"])
    out = tmp_path / "q.png"
    assert main(["pose", "--angles-file", str(f), "-o", str(out)]) == 0
    assert out.exists()


def test_default_output_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["pose", "ok"]) == 0
    assert (tmp_path / "wuji_out" / "pose_ok_right.png").exists()  # where every verb writes


def test_list(capsys):
    assert main(["pose", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in POSES)
    assert "index_finger_mcp_flex" in out


@pytest.mark.parametrize(
    "argv, status, needle",
    [
        (["pose", "no_such_pose"], 2, "unknown pose 'no_such_pose'"),
        (["pose", "--angles", ",".join(["0"] * 19)], 2, "expected 20 values"),
        (["pose", "--angles", _angles(a8="nan")], 2, "value 8 (middle_finger_mcp_flex) is nan"),
        (["pose", "--angles", _angles(a4="2.0")], 2, "index_finger_mcp_flex = 2 rad is outside its limits"),
        (["pose", "--angles", _angles(a6="120"), "--degrees"], 2, "index_finger_pip = 120 deg is outside"),
        (["pose", "--angles", _angles(a3="x")], 2, "value 3 ('x') is not a number"),
        (["pose", "--side", "up"], 2, "invalid choice: 'up'"),
        (["pose", "open", "--angles", ZEROS], 2, "not both"),
        (["pose", "open", "--degrees"], 2, "--degrees applies only"),
        (["pose", "-o", "x.nope"], 2, "unknown picture format"),
        (["pose", "--angles", "-0.1,0"], 2, "--option=VALUE"),
        (["pose", "--angles-file", "/no/such/file.npy"], 1, "cannot read"),
        ([], 2, "required: COMMAND"),
        (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
        (["overlay", "--max-frames", "0"], 2, "--max-frames must be >= 1"),
        (["overlay", "--scale", "0"], 2, "--scale must be > 0"),
        (["overlay", "/no/such/video.mp4"], 1, "/no/such/video.mp4"),
    ],
)
def test_bad_input_is_one_line(argv, status, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == status
    assert needle in _one_line_error(capsys)
    assert not list(tmp_path.glob("*.png"))


def test_bad_angles_file_shape(tmp_path, capsys):
    f = tmp_path / "seq.npy"
    np.save(f, np.zeros((5, 20)))
    assert main(["pose", "--angles-file", str(f)]) == 2
    assert "shape (5, 20)" in _one_line_error(capsys)


def test_angles_file_frame(tmp_path, capsys):
    """A file of several poses (a plain array or a `wuji-jax solve` table, see tests/test_chain.py): --frame."""
    f = tmp_path / "seq.npy"
    np.save(f, np.stack([POSES["open"], POSES["point"], POSES["fist"]]))
    out = tmp_path / "q.png"
    assert main(["pose", "--angles-file", str(f), "--frame", "1", "-o", str(out)]) == 0
    assert out.exists()
    assert main(["pose", "--angles-file", str(f), "--frame", "3", "-o", str(out)]) == 2
    assert "has 3 frame(s); give 0 to 2" in _one_line_error(capsys)
    assert main(["pose", "fist", "--frame", "1"]) == 2
    assert "--frame applies only to --angles-file" in _one_line_error(capsys)
    np.save(f, np.zeros((2, 21, 3)))
    assert main(["pose", "--angles-file", str(f)]) == 2
    assert "look like hand landmarks" in _one_line_error(capsys)


def test_help_returns_zero(capsys):
    assert main(["pose", "--help"]) == 0
    assert "--angles" in capsys.readouterr().out


def test_python_m_list():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "wuji_jax", "pose", "--list"], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "fist" in r.stdout and "pinch" in r.stdout
    assert "Traceback" not in r.stderr

    r = subprocess.run([sys.executable, "-m", "wuji_jax", "pose", "nope"], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("wuji-jax: error: unknown pose") and "Traceback" not in r.stderr


def test_missing_matplotlib_is_one_line(monkeypatch, capsys, tmp_path):
    for mod in ("matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, mod, None)  # makes `import mod` raise ImportError
    assert main(["pose", "open", "-o", str(tmp_path / "x.png")]) == 1
    assert "install wuji-jax[viz]" in _one_line_error(capsys)


@pytest.mark.parametrize("name", ["pinch", "ok"])
def test_pinch_poses_bring_thumb_and_index_tips_together(name, right):
    import jax.numpy as jnp

    import wuji_jax as wj

    kp = np.asarray(wj.forward_keypoints(right, jnp.asarray(wj.named_pose(name))))
    assert np.linalg.norm(kp[4] - kp[8]) < 0.010  # metres: thumb tip to index tip
    q = wj.named_pose(name)
    assert ((q >= np.asarray(right.lower)) & (q <= np.asarray(right.upper))).all()
