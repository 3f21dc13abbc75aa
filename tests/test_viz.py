"""Pictures: files are written, non-trivial, and have the three seed-000 views."""

import subprocess
import sys

import numpy as np
import pytest

import matplotlib  # noqa: E402  (the test extra installs it)
matplotlib.use("Agg")

import wuji_jax as wj  # noqa: E402
from wuji_jax import viz  # noqa: E402
from wuji_jax.hand.poses import named_pose  # noqa: E402

VIEW_TITLES = {"Front (X-Y)", "Top (X-Z)", "Side (Y-Z)"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _keypoints(hand, q):
    return np.asarray(wj.forward_keypoints(hand, q))


def _titles(fig):
    return {ax.get_title() for ax in fig.axes}


def _check_png(path, min_bytes=20_000, max_bytes=400_000):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert min_bytes < len(data) < max_bytes


_COUNT_COMPILES = """
import logging, sys, jax, matplotlib
matplotlib.use("Agg")
import wuji_jax as wj
hand = wj.load_hand("right")
q = wj.named_pose("fist")
names = []
h = logging.Handler()
h.emit = lambda r: names.append(r.getMessage().split()[1]) if r.getMessage().startswith("Compiling") else None
logging.getLogger("jax").addHandler(h)
with jax.log_compiles():
    wj.viz.draw_hand(hand, q, path=sys.argv[1])
print(" ".join(names))
"""


def test_draw_hand_compiles_one_program(tmp_path):
    """In a fresh process, draw_hand compiles the FK as one program (op by op under jax.disable_jit it
    compiled ~140 one-operation programs: 5.6 s on a 2-core machine)."""
    p = subprocess.run([sys.executable, "-c", _COUNT_COMPILES, str(tmp_path / "fist.png")], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["jit(forward_kinematics)"], p.stdout[:500]
    _check_png(tmp_path / "fist.png")


@pytest.mark.parametrize("side", ["right", "left"])
def test_draw_hand_writes_png_with_three_views(tmp_path, side):
    hand = wj.load_hand(side)
    path = tmp_path / "sub" / "fist.png"
    fig = viz.draw_hand(hand, named_pose("fist"), path=path, title=f"{side} fist")
    _check_png(path)
    assert VIEW_TITLES <= _titles(fig)
    assert fig._suptitle.get_text() == f"{side} fist"
    labels = {ax.get_xlabel() for ax in fig.axes} | {ax.get_ylabel() for ax in fig.axes}
    assert {"X radial (mm)", "Z proximal (mm)"} <= labels
    assert ("Y palmar (mm)" if side == "right" else "Y dorsal (mm)") in labels
    for ax in fig.axes:
        if ax.get_title() in VIEW_TITLES:
            assert ax.get_aspect() == 1.0


def test_draw_hand_labels_joints_and_keypoints():
    hand = wj.load_hand("right")
    fig = viz.draw_hand(hand, named_pose("open"))
    top = next(ax for ax in fig.axes if ax.get_title() == "Top (X-Z)")
    texts = {t.get_text() for t in top.texts}
    assert {str(k) for k in range(21)} <= texts  # MediaPipe numbers
    assert {"T.cmc rot/flex/abd", "T.mcp", "T.ip", "I.mcp flex/abd", "I.pip", "P.dip"} <= texts
    # default title names the model and the side
    assert "right hand" in fig._suptitle.get_text()


def test_draw_hand_overlays_landmarks(tmp_path):
    hand = wj.load_hand("right")
    q = named_pose("point")
    obs = _keypoints(hand, q) + 0.003
    fig = viz.draw_hand(hand, q, path=tmp_path / "o.png", landmarks=obs)
    legend_texts = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()}
    assert "landmarks" in legend_texts
    _check_png(tmp_path / "o.png")


def test_draw_hand_rejects_bad_input():
    hand = wj.load_hand("right")
    with pytest.raises(ValueError, match=r"shape \(20,\)"):
        viz.draw_hand(hand, np.zeros(19))
    with pytest.raises(ValueError, match="NaN"):
        viz.draw_hand(hand, np.full(20, np.nan))
    with pytest.raises(ValueError, match=r"landmarks must have shape \(21, 3\)"):
        viz.draw_hand(hand, np.zeros(20), landmarks=np.zeros((20, 3)))


def test_plot_landmarks_vs_fit(tmp_path):
    hand = wj.load_hand("right")
    fit = _keypoints(hand, named_pose("victory"))
    obs = fit + np.random.default_rng(0).normal(0, 0.002, fit.shape)
    fig = viz.plot_landmarks_vs_fit(obs, fit, path=tmp_path / "fit.png")
    _check_png(tmp_path / "fit.png")
    assert VIEW_TITLES <= _titles(fig)
    rms = np.sqrt(np.mean(np.sum((obs - fit) ** 2, -1))) * 1000
    assert f"RMS {rms:.1f} mm" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match="fitted keypoints"):
        viz.plot_landmarks_vs_fit(obs, fit[:20])


def test_plot_timeseries(tmp_path):
    t = np.linspace(0.0, 2.0, 50)
    values = np.sin(t[:, None] * np.arange(1, 21))
    labels = [f"j{i}" for i in range(20)]
    fig = viz.plot_timeseries(t, values, labels, path=tmp_path / "ts.png", title="angles", ylabel="rad")
    _check_png(tmp_path / "ts.png", min_bytes=10_000, max_bytes=600_000)
    (ax,) = fig.axes
    assert ax.get_title() == "angles" and ax.get_ylabel() == "rad"
    assert len(ax.get_lines()) == 20
    viz.plot_timeseries(t, values[:, 0], ["one"])  # a single channel as (T,)
    with pytest.raises(ValueError, match="labels"):
        viz.plot_timeseries(t, values, labels[:3])
    with pytest.raises(ValueError, match=r"\(T, C\)"):
        viz.plot_timeseries(t[:10], values, labels)
