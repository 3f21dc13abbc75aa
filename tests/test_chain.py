"""The user's paths, end to end: every verb reads what the others write (``wuji_jax.cli.tables``).

``solve`` → ``inspire`` → ``view`` → ``pose`` on each output format of ``solve`` (Parquet, npz, CSV), and
``inspire --landmarks`` on the bundled sample, through ``wuji_jax.cli.main``; then the readers
themselves on the plain inputs the verbs always accepted and on synthetic solve tables.

Every ``solve`` call uses the same chunk size and iteration count, so the solver compiles once per
process.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest

import matplotlib  # noqa: E402  (the test extra installs it)
matplotlib.use("Agg")

import wuji_jax as wj  # noqa: E402
from wuji_jax import inspire as wi  # noqa: E402
from wuji_jax import io as wio  # noqa: E402
from wuji_jax.pipeline.batch import output_columns, sample_landmarks_path  # noqa: E402
from wuji_jax.cli import main  # noqa: E402
from wuji_jax.cli.tables import read_angles, read_landmarks  # noqa: E402

FORMATS = ("parquet", "npz", "csv")
SOLVE_OPTS = ["--chunk-size", "64", "--iterations", "5", "--quiet", "--no-plot", "--command-map", "joint_map"]
N_FRAMES = 30
ATOL = 1e-12  # angles: read exactly (float32 columns widened)
CMD_ATOL = 1e-6  # commands: the streams write 6 decimals


def _embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="wuji-data">(.*?)</script>', page, re.S)
    assert m, "no embedded wuji-data block"
    return json.loads(m.group(1))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(s) for s in Path(path).read_text().splitlines()]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [s for s in err.strip().splitlines() if not s.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("wuji-jax: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def landmarks30(tmp_path_factory) -> Path:
    """The bundled sample's first 30 frames as a plain ``(30, 21, 3)`` .npy (no timestamps)."""
    world = wio.load_landmarks(sample_landmarks_path()).world[:N_FRAMES]
    path = tmp_path_factory.mktemp("chain") / "take.npy"
    np.save(path, world)
    return path


@pytest.fixture
def draws(monkeypatch):
    """The angles ``pose`` draws (``viz.draw_hand`` still draws them)."""
    from wuji_jax import viz

    seen = []
    real = viz.draw_hand

    def spy(hand, q, *a, **k):
        seen.append((hand, np.asarray(q, np.float64).copy()))
        return real(hand, q, *a, **k)

    monkeypatch.setattr(viz, "draw_hand", spy)
    return seen


# ----------------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("fmt", FORMATS)
def test_solve_inspire_view_pose(fmt, landmarks30, tmp_path, capsys, draws, right):
    out = tmp_path / f"x.{fmt}"
    assert main(["solve", str(landmarks30), "-o", str(out), *SOLVE_OPTS]) == 0
    assert out.exists()
    capsys.readouterr()

    # the table as the shared reader sees it, against the raw columns solve wrote
    t = read_angles(out)
    raw = wio.read_results(out)
    want = np.stack([np.asarray(raw[j], np.float64) for j in right.joint_names], axis=1)
    assert t.angles.shape == (N_FRAMES, 20) and t.angles.dtype == np.float64
    np.testing.assert_array_equal(t.angles, want)
    assert t.kind == "table" and t.solved and t.side == "right"
    assert t.timestamps is None  # the .npy input has no times: solve wrote NaN
    assert t.valid is not None and t.valid.all() and t.flags is not None and not t.flags.any()
    np.testing.assert_array_equal(t.frame, np.arange(N_FRAMES))
    assert t.sources == [str(landmarks30)]
    assert set(output_columns()) <= set(raw)  # the table is solve's whole layout

    # inspire: 2 s between frames, so rate limiting changes nothing: commands = to_inspire(angles)
    cmd = tmp_path / "cmd.jsonl"
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(out), "-o", str(cmd), "--fps", "0.5"]) == 0
    lines = _jsonl(cmd)
    assert len(lines) == N_FRAMES and all(x["topic"] == "/inspire_hand/ctrl/right_hand" for x in lines)
    pos = np.array([x["msg"]["position"] for x in lines])
    np.testing.assert_allclose(pos, np.asarray(wi.to_inspire(t.angles, hand=right)), rtol=0, atol=CMD_ATOL)
    inspire_cols = np.stack([np.asarray(raw[f"inspire_{m}"], np.float64) for m in wi.MOTOR_NAMES], axis=1)
    np.testing.assert_allclose(pos, inspire_cols, rtol=0, atol=1e-5)  # solve's own columns (float32)
    np.testing.assert_allclose([x["t"] for x in lines], np.arange(N_FRAMES) * 2.0)

    # ... and with the default 30 fps and rate limit, as CSV
    cmd_csv = tmp_path / "cmd.csv"
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(out), "-o", str(cmd_csv)]) == 0
    rows = cmd_csv.read_text().splitlines()
    assert len(rows) == N_FRAMES + 1
    tt = np.arange(N_FRAMES) / 30.0
    limited, _ = wi.limit_rate(np.asarray(wi.to_inspire(t.angles, hand=right), np.float64), tt, 1.0)
    header = rows[0].split(",")
    got = np.array([[float(r.split(",")[header.index(m)]) for m in wi.MOTOR_NAMES] for r in rows[1:]])
    np.testing.assert_allclose(got, limited, rtol=0, atol=CMD_ATOL)

    # view: the page's frames are the table's angles
    page = tmp_path / "view.html"
    assert main(["view", str(out), "-o", str(page)]) == 0
    d = _embedded(page.read_text(encoding="utf-8"))
    assert d["side"] == "right" and d["title"] == f"WG110v12 right hand — angles from {out.name}"
    np.testing.assert_allclose(np.asarray(d["frames"]), t.angles, rtol=0, atol=ATOL)

    # pose: one frame of the table
    png = tmp_path / "pose.png"
    assert main(["pose", "--angles-file", str(out), "--frame", "7", "-o", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert len(draws) == 1 and draws[0][0].side == "right"
    np.testing.assert_allclose(draws[0][1], t.angles[7], rtol=0, atol=ATOL)
    assert main(["pose", "--angles-file", str(out), "--frame", "-1", "-o", str(png)]) == 0
    np.testing.assert_allclose(draws[1][1], t.angles[-1], rtol=0, atol=ATOL)
    capsys.readouterr()
    # without --frame a table of 30 frames is one line asking for it
    assert main(["pose", "--angles-file", str(out), "-o", str(png)]) == 2
    msg = _one_line_error(capsys)
    assert "--frame" in msg and "30 frames" in msg and str(out) in msg
    assert main(["pose", "--angles-file", str(out), "--frame", "30", "-o", str(png)]) == 2
    assert "0 to 29" in _one_line_error(capsys)
    # a solve table is radians
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(out), "--degrees", "-o", str(tmp_path / "d.jsonl")]) == 2
    assert "drop --degrees" in _one_line_error(capsys)


def test_inspire_landmarks_bundled_sample(tmp_path, right):
    """``inspire --landmarks`` reads the sample (key ``world``) with solve's reader, times and all."""
    sample = sample_landmarks_path()
    rec = wio.load_landmarks(sample)
    out = tmp_path / "sample.jsonl"
    assert main(["inspire", "--command-map", "joint_map", "--landmarks", str(sample), "-o", str(out)]) == 0
    lines = _jsonl(out)
    assert len(lines) == len(rec)
    t = np.array([x["t"] for x in lines])
    np.testing.assert_allclose(t, rec.timestamps)
    lm = read_landmarks(sample)
    assert lm.world.shape == (len(rec), 21, 3) and lm.timestamps is not None
    res = wj.solve_sequence(right, lm.world)
    assert np.asarray(res.valid).all()
    want, _ = wi.limit_rate(np.asarray(wi.to_inspire(res.angles, hand=right), np.float64), rec.timestamps, 1.0)
    np.testing.assert_allclose(np.array([x["msg"]["position"] for x in lines]), want, rtol=0, atol=CMD_ATOL)


# ------------------------------------------------------------------------- the readers themselves


def _solve_like(hand, n=6, *, sources=("a.npy",), sides=None, valid=None, times=True, flag_col="flags"):
    """A table in ``wuji-jax solve``'s layout (values made up, within the joint limits)."""
    rng = np.random.default_rng(0)
    lo, hi = np.asarray(hand.lower), np.asarray(hand.upper)
    q = lo + (hi - lo) * rng.uniform(0.1, 0.9, (n, 20))
    src = np.asarray([sources[i * len(sources) // n] for i in range(n)])
    frame = np.concatenate([np.arange(np.count_nonzero(src == s)) for s in dict.fromkeys(src)])
    t = {"frame": frame, "timestamp": frame / 10.0 if times else np.full(n, np.nan), "source": src,
         "side": np.asarray(sides if sides is not None else ["right"] * n)}
    for j, name in enumerate(hand.joint_names):
        t[name] = q[:, j].astype(np.float32)
    t["residual_mm"] = np.full(n, 1.5, np.float32)
    v = np.ones(n, bool) if valid is None else np.asarray(valid)
    t["valid"] = v
    t[flag_col] = np.where(v, 0, 2).astype(np.int32)
    return t, q.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("flag_col", ["flags", "fit_flags"])
def test_read_solve_layout(fmt, flag_col, tmp_path, right):
    table, q = _solve_like(right, valid=[True, False, True, True, True, True], flag_col=flag_col)
    path = wio.write_results(tmp_path / f"t.{fmt}", table)
    t = read_angles(path)
    np.testing.assert_array_equal(t.angles, q)
    np.testing.assert_allclose(t.timestamps, np.arange(6) / 10)
    assert t.valid.tolist() == [True, False, True, True, True, True]
    assert t.flags.tolist() == [0, 2, 0, 0, 0, 0] and t.describe_flags(1) == "bad_scale"
    assert t.side == "right" and t.solved and t.sources == ["a.npy"]
    # columns in any order, extra columns ignored
    shuffled = {k: table[k] for k in reversed(list(table))}
    shuffled["comment"] = np.asarray(["x"] * 6)
    np.testing.assert_array_equal(read_angles(wio.write_results(tmp_path / f"s.{fmt}", shuffled)).angles, q)
    # a missing joint column: one line naming the file and the column
    del table["pinky_dip"]
    bad = wio.write_results(tmp_path / f"m.{fmt}", table)
    with pytest.raises(ValueError) as e:
        read_angles(bad)
    msg = str(e.value)
    assert msg.startswith(f"{bad}: no column 'pinky_dip'") and "19 of the 20" in msg and "\n" not in msg


def test_plain_inputs_still_read(tmp_path, right):
    """Every input the CLI accepted before the shared reader: npy, npz 'angles' (+ 'timestamps' / 't'),
    numeric csv / txt, one pose flat or as a column; plus npz 'q', json and jsonl."""
    q = np.stack([wj.named_pose("open"), wj.named_pose("fist"), wj.named_pose("point")])
    np.save(tmp_path / "a.npy", q)
    np.save(tmp_path / "one.npy", q[1])
    np.savez(tmp_path / "a.npz", angles=q, timestamps=[0.0, 0.5, 1.0])
    np.savez(tmp_path / "t.npz", angles=q, t=[0.0, 0.5, 1.0])
    np.savez(tmp_path / "q.npz", q=q)
    np.savez(tmp_path / "only.npz", q)
    np.savetxt(tmp_path / "a.csv", q, delimiter=",")
    np.savetxt(tmp_path / "a.txt", q)
    np.savetxt(tmp_path / "col.txt", q[1])  # 20 lines of one value: one pose
    (tmp_path / "a.json").write_text(json.dumps(q.tolist()))
    (tmp_path / "d.json").write_text(json.dumps({"angles": q.tolist(), "timestamps": [0, 0.5, 1]}))
    recs = [dict(zip(right.joint_names, r), t=0.5 * i) for i, r in enumerate(q.tolist())]
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    for name in ("a.npy", "a.npz", "t.npz", "q.npz", "only.npz", "a.csv", "a.txt", "a.json", "d.json", "r.jsonl"):
        t = read_angles(tmp_path / name)
        np.testing.assert_allclose(t.angles, q, rtol=0, atol=1e-15, err_msg=name)
        assert t.valid is None and t.flags is None and t.side is None
        if name in ("a.npz", "t.npz", "d.json", "r.jsonl"):
            np.testing.assert_allclose(t.timestamps, [0, 0.5, 1], err_msg=name)
        else:
            assert t.timestamps is None, name
    for name in ("one.npy", "col.txt"):
        t = read_angles(tmp_path / name)
        assert t.angles.shape == (1, 20) and t.ndim == 1
        np.testing.assert_allclose(t.angles[0], q[1])
    np.testing.assert_allclose(read_angles(tmp_path / "a.npy", degrees=True).angles, np.deg2rad(q))


@pytest.mark.parametrize("make, needle", [
    (lambda p: np.save(p / "x.npy", np.zeros((4, 19))), "expected joint angles of shape (T, 20) or (20,)"),
    (lambda p: np.save(p / "x.npy", np.zeros((4, 21, 3))), "look like hand landmarks"),
    (lambda p: np.save(p / "x.npy", np.array(["a"] * 20)), "not a numeric array"),
    (lambda p: np.savez(p / "x.npz", world=np.zeros((2, 21, 3)), timestamps=[0, 1]), "holds hand landmarks"),
    (lambda p: np.savez(p / "x.npz", a=np.zeros(20), b=np.zeros(20)), "or an array named 'angles' or 'q'"),
    (lambda p: np.save(p / "x.npy", np.zeros((0, 20))), "holds no frames"),
    (lambda p: (p / "x.csv").write_text("a,b\n1,2\n"), "no joint angles"),
    (lambda p: (p / "x.csv").write_text("thumb_cmc_flex\n0.1\n"), "no column 'thumb_cmc_abd' and 18 more"),
    (lambda p: (p / "x.json").write_text("{not json"), "not JSON"),
    (lambda p: (p / "x.npz").write_bytes(b"PK\x03\x04garbage"), "corrupt .npz"),
    (lambda p: (p / "x.parquet").write_bytes(b"not parquet"), "not a readable Parquet file"),
])
def test_reader_errors_are_one_line(make, needle, tmp_path):
    make(tmp_path)
    path = next(tmp_path.iterdir())
    with pytest.raises(ValueError) as e:
        read_angles(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and needle in msg and "\n" not in msg, msg
    with pytest.raises(OSError, match="cannot read"):
        read_angles(tmp_path / "missing.npy")


def test_csv_bad_cell_names_row_and_column(tmp_path, right):
    table, _ = _solve_like(right)
    path = wio.write_results(tmp_path / "t.csv", table)
    text = path.read_text().splitlines()
    header = text[0].split(",")
    cells = text[3].split(",")
    cells[header.index("index_finger_pip")] = "oops"
    text[3] = ",".join(cells)
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match=r"t.csv: data row 3, column 'index_finger_pip': 'oops' is not a number"):
        read_angles(path)


def test_cli_invalid_frames_sources_and_sides(tmp_path, capsys, draws, right):
    """Invalid frames stop ``inspire`` unless --skip-invalid (times kept); ``view`` leaves them out; a table
    of several recordings needs --source; the hand is the table's side unless --side says otherwise."""
    table, q = _solve_like(right, valid=[True, True, False, True, True, True])
    path = wio.write_results(tmp_path / "t.parquet", table)
    out = tmp_path / "c.jsonl"
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out)]) == 2
    msg = _one_line_error(capsys)
    assert f"{path}: frame 2 is marked invalid by the solver (flags: bad_scale)" in msg and "--skip-invalid" in msg
    assert not out.exists()
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out), "--skip-invalid", "--speed-ratio", "1"]) == 0
    assert "left out 1 frame(s)" in capsys.readouterr().err
    lines = _jsonl(out)
    np.testing.assert_allclose([x["t"] for x in lines], [0.0, 0.1, 0.3, 0.4, 0.5])  # the file's times
    assert main(["view", str(path), "-o", str(tmp_path / "v.html")]) == 0
    frames = np.asarray(_embedded((tmp_path / "v.html").read_text(encoding="utf-8"))["frames"])
    np.testing.assert_allclose(frames, q[[0, 1, 3, 4, 5]], rtol=0, atol=ATOL)
    assert "left out 1 of 6 frames" in capsys.readouterr().err

    # no times in the table: --skip-invalid keeps each frame's place (i / fps)
    table, _ = _solve_like(right, valid=[True, True, False, True, True, True], times=False)
    path = wio.write_results(tmp_path / "nt.npz", table)
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out), "--skip-invalid", "--fps", "10"]) == 0
    np.testing.assert_allclose([x["t"] for x in _jsonl(out)], [0.0, 0.1, 0.3, 0.4, 0.5])

    # two recordings: --source chooses one (by full name, file name or stem)
    table, q = _solve_like(right, sources=("takes/a.npy", "takes/b.npy"))
    path = wio.write_results(tmp_path / "two.csv", table)
    capsys.readouterr()
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out)]) == 2
    msg = _one_line_error(capsys)
    assert "2 recordings (takes/a.npy, takes/b.npy)" in msg and "--source" in msg
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out), "--source", "b", "--fps", "0.5"]) == 0
    pos = np.array([x["msg"]["position"] for x in _jsonl(out)])
    np.testing.assert_allclose(pos, np.asarray(wi.to_inspire(q[3:], hand=right)), rtol=0, atol=CMD_ATOL)
    capsys.readouterr()
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out), "--source", "c"]) == 2
    assert "matches none" in _one_line_error(capsys)

    # the side column chooses the hand; an explicit --side wins, with a note
    left = wj.load_hand("left")
    table, q = _solve_like(left, sides=["left"] * 6)
    path = wio.write_results(tmp_path / "left.npz", table)
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out)]) == 0
    assert _jsonl(out)[0]["topic"] == "/inspire_hand/ctrl/left_hand"
    assert main(["view", str(path), "-o", str(tmp_path / "l.html")]) == 0
    assert _embedded((tmp_path / "l.html").read_text(encoding="utf-8"))["side"] == "left"
    assert main(["pose", "--angles-file", str(path), "--frame", "2", "-o", str(tmp_path / "l.png")]) == 0
    assert draws[-1][0].side == "left"
    np.testing.assert_allclose(draws[-1][1], q[2], rtol=0, atol=ATOL)
    capsys.readouterr()
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(path), "-o", str(out), "--side", "right"]) == 0
    assert "left-hand frames; using them as right-hand angles" in capsys.readouterr().err
    assert _jsonl(out)[0]["topic"] == "/inspire_hand/ctrl/right_hand"
    # both hands in one table and no --side: one line
    table, _ = _solve_like(right, sides=["right"] * 3 + ["left"] * 3)
    path = wio.write_results(tmp_path / "both.npz", table)
    capsys.readouterr()
    assert main(["view", str(path), "-o", str(tmp_path / "b.html")]) == 2
    assert "both hands" in _one_line_error(capsys)


def test_cli_landmark_file_given_as_angles(tmp_path, capsys):
    """The old confusion, now an error that says what to do."""
    sample = sample_landmarks_path()
    assert main(["inspire", "--command-map", "joint_map", "--angles", str(sample), "-o", str(tmp_path / "x.jsonl")]) == 2
    msg = _one_line_error(capsys)
    assert msg.startswith(f"wuji-jax: error: {sample}: ") and "inspire --landmarks" in msg
