"""The one output rule (``wuji_jax.data.outputs``) held by every verb, and the strict readers (issue 48).

Each verb is asked to write over one of its inputs under every spelling of the path (the same path,
relative and absolute, ``sub/../``, a symbolic link, a hard link, a glob written ``./g/*``): it must
refuse with one line on stderr, no traceback, exit status 1 (or 2 for a suffix of another format),
and every input's bytes unchanged. Writes go through a temporary name: a failure at the last moment
(a full disk at the flush) leaves the final name as it was. Readers refuse duplicated or ambiguous
columns naming the column. No test here runs the solver, except the SIGINT one (a subprocess).
"""

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import matplotlib  # noqa: E402  (the test extra installs it)
matplotlib.use("Agg")

import wuji_jax as wj  # noqa: E402
from wuji_jax import io as wio  # noqa: E402
from wuji_jax.data import outputs  # noqa: E402
from wuji_jax.cli import main  # noqa: E402
from wuji_jax.hand.poses import named_pose  # noqa: E402
from wuji_jax.pipeline.store import OutputLock  # noqa: E402
from wuji_jax.cli.tables import read_angles  # noqa: E402

HAND = wj.load_hand("right")


def _digest(*paths) -> dict:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


def _error(capsys, rc_expected: int, argv) -> str:
    """Run ``wuji-jax argv`` in-process: exit status ``rc_expected`` and one error line, no traceback."""
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [s for s in err.strip().splitlines() if not s.startswith("note: ")]
    assert rc == rc_expected, err
    assert len(lines) == 1 and lines[0].startswith("wuji-jax: error: ") and "Traceback" not in err, err
    return lines[0]


def _angle_csv(path: Path, n: int = 4) -> Path:
    q = np.stack([named_pose("open")] * (n // 2) + [named_pose("fist")] * (n - n // 2))
    header = ",".join(HAND.joint_names)
    path.write_text(header + "\n" + "\n".join(",".join(repr(float(v)) for v in row) for row in q) + "\n")
    return path


def _landmarks(n: int = 8) -> np.ndarray:
    from wuji_jax.pipeline.batch import sample_landmarks_path

    with np.load(sample_landmarks_path()) as z:
        return np.asarray(z["world"][:n], np.float64)


def _spellings(tmp_path: Path, src: Path, name: str):
    """Paths naming ``src`` (or a link to it) as an output called ``name`` (whose suffix the verb
    writes): returns ``(label, path)`` pairs; ``src`` itself is used where the suffix fits."""
    out = []
    sub = tmp_path / "sub"
    sub.mkdir(exist_ok=True)
    if src.suffix == Path(name).suffix:
        (src.parent / "sub").mkdir(exist_ok=True)
        out += [("same", src), ("relative", Path(os.path.relpath(src))),
                ("dotdot", src.parent / "sub" / ".." / src.name)]
    link = tmp_path / f"symlink_{name}"
    link.symlink_to(src)
    hard = tmp_path / f"hardlink_{name}"
    os.link(src, hard)
    out += [("symlink", link), ("hardlink", hard), ("dotdot_link", sub / ".." / link.name)]
    return out


# ---------------------------------------------------------------- 1. no verb writes over an input


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_inspire_refuses_every_spelling_of_each_input(in_tmp, capsys):
    angles = _angle_csv(in_tmp / "angles.csv")
    lm = in_tmp / "lm.csv"
    wio.write_landmarks(lm, _landmarks())
    cal = in_tmp / "cal.json"
    cal.write_text(json.dumps({"open": [0.0] * 6, "closed": [1.0] * 6}))
    ref = _angle_csv(in_tmp / "ref_open.csv", 1)
    fist = _angle_csv(in_tmp / "ref_fist.csv", 1)
    before = _digest(angles, lm, cal, ref, fist)
    cases = [(["--angles", angles], angles, "a.csv"), (["--landmarks", lm], lm, "l.csv"),
             (["--angles", angles, "--calibration", cal], cal, "c.jsonl"),
             (["--angles", angles, "--reference", f"open={ref}", "--reference", f"fist={fist}"], ref, "r.csv")]
    for args, src, name in cases:
        for label, out in _spellings(_fresh(in_tmp, name), src, name):
            msg = _error(capsys, 1, ["inspire", *args, "-o", out])
            assert "is both an input and an output" in msg, (label, msg)
    assert _digest(angles, lm, cal, ref, fist) == before


def _fresh(root: Path, name: str) -> Path:
    d = root / f"links_{name.replace('.', '_')}"
    d.mkdir()
    return d


def test_inspire_suffix_names_the_format(in_tmp, capsys):
    angles = _angle_csv(in_tmp / "angles.csv")
    for argv, needle in ((["-o", "x.npy"], "not '.npy'"), (["-o", "x.json"], "not '.json'"),
                         (["-o", "x.jsonl", "--format", "csv"], "disagree")):
        msg = _error(capsys, 2, ["inspire", "--angles", angles, *argv])
        assert needle in msg, msg
        assert not Path(argv[1]).exists()
    assert main(["inspire", "--angles", str(angles), "-o", "x.csv"]) == 0
    assert Path("x.csv").read_text().startswith("t,side,")
    assert main(["inspire", "--angles", str(angles), "-o", "noext", "--format", "csv"]) == 0
    assert Path("noext").read_text().startswith("t,side,")


def test_view_and_pose_refuse_their_angle_file(in_tmp, capsys):
    angles = _angle_csv(in_tmp / "q.csv")
    npy = in_tmp / "q.npy"
    np.save(npy, np.stack([named_pose("open")] * 2))
    before = _digest(angles, npy)
    assert "not '.npy'" in _error(capsys, 2, ["view", npy, "-o", npy])  # was: HTML written into q.npy
    for label, out in _spellings(_fresh(in_tmp, "v.html"), angles, "v.html"):
        assert "both an input and an output" in _error(capsys, 1, ["view", angles, "-o", out]), label
    for label, out in _spellings(_fresh(in_tmp, "p.png"), angles, "p.png"):
        assert "both an input and an output" in _error(capsys, 1, ["pose", "--angles-file", angles, "--frame", "0",
                                                                    "-o", out]), label
    assert _digest(angles, npy) == before
    assert "not '.png'" in _error(capsys, 2, ["view", "fist", "-o", "v.png"])


def test_overlay_refuses_its_video_before_any_work(in_tmp, capsys, monkeypatch):
    video = in_tmp / "v.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 4)
    before = _digest(video)

    def no_work(*a, **k):  # the refusal comes before the landmarks are extracted
        raise AssertionError("extract_landmarks called")

    monkeypatch.setattr("wuji_jax.data.video.extract_landmarks", no_work)
    for label, out in _spellings(_fresh(in_tmp, "o.mp4"), video, "o.mp4"):
        assert "both an input and an output" in _error(capsys, 1, ["overlay", video, "-o", out]), label
    assert "not '.avi'" in _error(capsys, 2, ["overlay", video, "-o", "o.avi"])
    assert _digest(video) == before
    from wuji_jax.viz.overlay import render_overlay

    with pytest.raises(ValueError, match="both an input and an output"):
        render_overlay(video, None, None, video)


def test_solve_refuses_links_dotdot_and_globs(in_tmp, capsys):
    g = in_tmp / "g"
    g.mkdir()
    src = g / "take.npz"
    wio.write_landmarks(src, _landmarks(20))
    before = _digest(src)
    opts = ["--quiet", "--no-plot", "--chunk-size", "64", "--iterations", "5"]
    for label, out in _spellings(_fresh(in_tmp, "o.npz"), src, "o.npz"):
        assert "both an input and an output" in _error(capsys, 1, ["solve", src, "-o", out, *opts]), label
    # an output that a glob of the inputs would read on the next run, however the glob is written
    for pattern in ("./g/*.npz", "g/*.npz", str(g / "*.npz"), "sub/../g/*.npz", "./g/../g/*.np?"):
        (in_tmp / "sub").mkdir(exist_ok=True)
        for out in ("g/angles.npz", str(g / "angles.npz"), "./g/angles.npz"):
            msg = _error(capsys, 1, ["solve", pattern, "-o", out, *opts])
            assert "matches the input pattern" in msg, (pattern, out, msg)
    assert not (g / "angles.npz").exists() and _digest(src) == before


def test_check_output_rule_directly(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("x\n")
    assert outputs.same_file(src, tmp_path / "sub" / ".." / "a.csv")
    os.link(src, tmp_path / "b.csv")
    assert outputs.same_file(src, tmp_path / "b.csv")
    assert not outputs.same_file(src, tmp_path / "c.csv")
    with pytest.raises(outputs.OutputError, match="is a folder"):
        outputs.check_output(tmp_path, [src])
    outputs.check_output(tmp_path / "c.csv", [src, 3, "-", None])  # other items are not paths: skipped
    with pytest.raises(outputs.OutputError, match=r"\(.*b\.csv\) of this run"):  # the run's other outputs too
        outputs.check_output(tmp_path / "o.csv", [src], outputs=[tmp_path / "summary.csv", tmp_path / "b.csv"])


# --------------------------------------------------------------------- 2. whole or absent


def _fsync_fails(monkeypatch, code: int):
    def fail(fd):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(os, "fsync", fail)


def _disk_full(monkeypatch):
    """The disk is full: ``os.fsync`` says so (``ENOSPC``), as a file system does that allocates blocks
    only when the written data goes out to disk."""
    _fsync_fails(monkeypatch, errno.ENOSPC)


def _no_temporaries(folder: Path):
    left = [p.name for p in folder.iterdir() if ".tmp" in p.name]
    assert not left, left


@pytest.mark.parametrize("verb", ["inspire", "view", "pose"])
def test_a_full_disk_leaves_the_previous_file(in_tmp, capsys, monkeypatch, verb):
    angles = _angle_csv(in_tmp / "q.csv")
    out = in_tmp / {"inspire": "c.jsonl", "view": "v.html", "pose": "p.png"}[verb]
    out.write_bytes(b"previous")
    _disk_full(monkeypatch)
    argv = {"inspire": ["inspire", "--angles", angles], "view": ["view", angles],
            "pose": ["pose", "--angles-file", angles, "--frame", "1"]}[verb]
    assert "No space left" in _error(capsys, 1, [*argv, "-o", out])
    assert out.read_bytes() == b"previous"
    _no_temporaries(in_tmp)
    monkeypatch.undo()
    monkeypatch.chdir(in_tmp)
    assert main([str(a) for a in [*argv, "-o", out]]) == 0 and out.read_bytes() != b"previous"
    _no_temporaries(in_tmp)


def test_fsync_errors_that_lose_data_are_raised_the_others_not(tmp_path, monkeypatch):
    """A file system without fsync (``EINVAL``): the file is still written whole. An I/O error (``EIO``):
    raised, the previous file kept, no temporary left. ``sync=False``: no fsync at all."""
    out = tmp_path / "o.json"
    out.write_text("previous")
    _fsync_fails(monkeypatch, errno.EINVAL)
    outputs.atomic_json(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    _fsync_fails(monkeypatch, errno.EIO)
    with pytest.raises(OSError, match=os.strerror(errno.EIO)):
        outputs.atomic_json(out, {"a": 2})
    assert json.loads(out.read_text()) == {"a": 1}
    outputs.atomic_json(out, {"a": 3}, sync=False)
    assert json.loads(out.read_text()) == {"a": 3}
    _no_temporaries(tmp_path)


def test_a_full_disk_while_the_plot_is_written_leaves_no_picture(tmp_path, monkeypatch):
    from wuji_jax.pipeline.table import plot_angles

    sample = [{"row": np.arange(5), "t": np.arange(5) / 10.0, "angles": np.zeros((5, 20)),
               "residual_mm": np.ones(5), "joint_names": HAND.joint_names}]
    _disk_full(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        plot_angles(tmp_path / "o_plot.png", sample, True)
    assert not (tmp_path / "o_plot.png").exists()
    _no_temporaries(tmp_path)


def test_replacing_keeps_the_old_file_on_any_failure(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text("old")
    with pytest.raises(RuntimeError):
        with outputs.open_replacing(out) as f:
            f.write("half a fi")
            raise RuntimeError("killed")
    assert out.read_text() == "old"
    _no_temporaries(tmp_path)
    with outputs.replacing(tmp_path / "x.npz") as tmp:
        assert tmp.suffix == ".npz" and tmp.parent == tmp_path and tmp.name.startswith(".x.npz.")
        np.savez(tmp, a=np.arange(3))  # numpy appends .npz unless the name ends with it
    assert np.load(tmp_path / "x.npz")["a"].tolist() == [0, 1, 2]
    _no_temporaries(tmp_path)


# ----------------------------------------------------------------------------- 3. strict readers


def test_duplicated_landmark_column_is_an_error_naming_it(in_tmp, capsys):
    lm = _landmarks(10)
    path = in_tmp / "lm.csv"
    wio.write_landmarks(path, lm)
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    k = header.index("x8")
    dup = [lines[0] + ",x8"] + [ln + "," + repr(float(ln.split(",")[k]) + 0.05) for ln in lines[1:]]
    path.write_text("\n".join(dup) + "\n")
    with pytest.raises(ValueError, match=r"lm.csv: column 'x8' appears 2 times"):
        wio.load_landmarks(path)
    msg = _error(capsys, 1, ["solve", path, "-o", "o.npz", "--quiet", "--no-plot"])
    assert "'x8' appears 2 times" in msg and str(path) in msg
    msg = _error(capsys, 2, ["inspire", "--landmarks", path, "-o", "c.jsonl"])
    assert "'x8' appears 2 times" in msg
    # two spellings of one coordinate, and two time columns
    for extra, needle in ((",wrist_x", r"'x0', 'wrist_x' name the same landmark coordinate \(x0\)"),
                          (",t", "name the same time")):
        text = [lines[0] + extra] + [ln + ",0.5" for ln in lines[1:]]
        if "timestamp" not in lines[0]:
            text = [text[0] + ",timestamp"] + [ln + ",0.5" for ln in text[1:]]
        path.write_text("\n".join(text) + "\n")
        with pytest.raises(ValueError, match=needle):
            wio.load_landmarks(path)


def test_duplicated_landmark_column_in_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    lm = _landmarks(4).reshape(4, 63)
    names = [f"{a}{i}" for i in range(21) for a in "xyz"]
    arrays = [pa.array(lm[:, j]) for j in range(63)] + [pa.array(lm[:, 0] + 1)]
    pq.write_table(pa.Table.from_arrays(arrays, names=names + ["x0"]), tmp_path / "lm.parquet")
    with pytest.raises(ValueError, match="column 'x0' appears 2 times"):
        wio.load_landmarks(tmp_path / "lm.parquet")


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl", "json"])
def test_duplicated_angle_column_is_an_error_naming_it(tmp_path, capsys, fmt):
    q = np.stack([named_pose("open")] * 3)
    names = list(HAND.joint_names)
    path = tmp_path / f"a.{fmt}"
    if fmt == "csv":
        path.write_text(",".join(names + ["index_finger_dip"]) + "\n"
                        + "\n".join(",".join(map(repr, [*r.tolist(), 1.0])) for r in q) + "\n")
    elif fmt == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        cols = [pa.array(q[:, j]) for j in range(20)] + [pa.array(q[:, 0] + 1.0)]
        pq.write_table(pa.Table.from_arrays(cols, names=names + ["index_finger_dip"]), path)
    else:
        recs = ['{' + ", ".join(f'"{n}": {v!r}' for n, v in zip(names, r.tolist())) + ', "index_finger_dip": 1.0}'
                for r in q]
        path.write_text("\n".join(recs) + "\n" if fmt == "jsonl" else "[" + ", ".join(recs) + "]")
    assert "index_finger_dip" in names  # the duplicated column below is one of the model's own
    with pytest.raises(ValueError) as e:
        read_angles(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "'index_finger_dip'" in msg and "\n" not in msg, msg
    msg = _error(capsys, 2, ["inspire", "--angles", path, "-o", tmp_path / "c.jsonl"])
    assert "'index_finger_dip'" in msg


def test_two_time_columns_of_an_angle_table_are_ambiguous(tmp_path):
    q = np.stack([named_pose("open")] * 2)
    path = tmp_path / "a.csv"
    path.write_text(",".join([*HAND.joint_names, "timestamp", "t"]) + "\n"
                    + "\n".join(",".join(map(repr, [*r.tolist(), float(i), 9.0])) for i, r in enumerate(q)) + "\n")
    with pytest.raises(ValueError, match="'timestamp', 't' name the same time"):
        read_angles(path)


def test_deeply_nested_calibration_is_one_line(tmp_path, capsys):
    angles = _angle_csv(tmp_path / "q.csv")
    cal = tmp_path / "cal.json"
    cal.write_text("[" * 100_000 + "]" * 100_000)
    msg = _error(capsys, 2, ["inspire", "--angles", angles, "--calibration", cal, "-o", tmp_path / "c.jsonl"])
    assert str(cal) in msg and "nested too deeply" in msg and "RecursionError" not in msg
    cal.write_text(json.dumps({"open": [0.0] * 6}))
    msg = _error(capsys, 2, ["inspire", "--angles", angles, "--calibration", cal, "-o", tmp_path / "c.jsonl"])
    assert str(cal) in msg and "'closed'" in msg
    cal.write_bytes(b"\xff\xfe{}")
    assert str(cal) in _error(capsys, 2, ["inspire", "--angles", angles, "--calibration", cal,
                                         "-o", tmp_path / "c.jsonl"])
    assert not (tmp_path / "c.jsonl").exists()


# -------------------------------------------------------------- 4. inspire sends no flagged frame


def _flagged_table(path: Path, flags, valid=None):
    from wuji_jax.ik import FLAG_NAMES  # noqa: F401 (the names the CLI takes)

    n = len(flags)
    q = np.stack([named_pose("open"), named_pose("fist")] * (n // 2 + 1))[:n]
    t = {"frame": np.arange(n), "timestamp": np.arange(n) / 10.0}
    for j, name in enumerate(HAND.joint_names):
        t[name] = q[:, j]
    t["residual_mm"] = np.full(n, 1.0)
    t["valid"] = np.ones(n, bool) if valid is None else np.asarray(valid)
    t["fit_flags"] = np.asarray(flags, np.int32)
    return wio.write_results(path, t)


def test_inspire_holds_back_flagged_frames_unless_accepted(tmp_path, capsys):
    from wuji_jax.ik import FLAG_HIGH_RESIDUAL, FLAG_MIRRORED

    path = _flagged_table(tmp_path / "t.csv", [0, 0, FLAG_HIGH_RESIDUAL, FLAG_MIRRORED, 0, FLAG_MIRRORED])
    out = tmp_path / "c.jsonl"
    msg = _error(capsys, 2, ["inspire", "--angles", path, "-o", out])
    assert "frame 2 is flagged by the solver (flags: high_residual)" in msg and "--accept-flags high_residual" in msg
    assert not out.exists()

    def times():
        return [json.loads(s)["t"] for s in out.read_text().splitlines()]

    assert main(["inspire", "--angles", str(path), "-o", str(out), "--skip-invalid"]) == 0
    err = capsys.readouterr().err
    assert times() == [0.0, 0.1, 0.4] and "held back 3 flagged or invalid frame(s) (1 high_residual, 2 mirrored)" in err
    assert main(["inspire", "--angles", str(path), "-o", str(out), "--skip-invalid",
                 "--accept-flags", "mirrored"]) == 0
    assert times() == [0.0, 0.1, 0.3, 0.4, 0.5] and "held back 1 " in capsys.readouterr().err
    assert main(["inspire", "--angles", str(path), "-o", str(out), "--accept-flags", "high_residual,mirrored"]) == 0
    assert len(times()) == 6
    capsys.readouterr()
    assert "unknown flag 'noise'" in _error(capsys, 2, ["inspire", "--angles", path, "-o", out,
                                                         "--accept-flags", "noise"])
    # every frame held back: nothing to send
    path = _flagged_table(tmp_path / "all.csv", [FLAG_MIRRORED] * 3)
    assert "every frame (3)" in _error(capsys, 2, ["inspire", "--angles", path, "-o", out, "--skip-invalid"])
    # invalid without flags (a table with only a valid column) is held back too
    path = _flagged_table(tmp_path / "v.csv", [0, 0, 0], valid=[True, False, True])
    assert "frame 1 is marked invalid" in _error(capsys, 2, ["inspire", "--angles", path, "-o", out])


# ------------------------------------------------------------------------------------ 5. the lock


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _stale_lock(out: Path):
    import socket

    Path(str(out) + ".lock").write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(),
                                                     "started": "long ago"}))


def test_stale_lock_takeover_races_leave_one_holder(tmp_path):
    """Threads racing for a stale lock: at most one holds it at a time (the old read-unlink-create
    takeover let two in, in 7 of 30 trials)."""
    out = tmp_path / "o.parquet"
    for trial in range(15):
        _stale_lock(out)
        holders, overlaps, wins = [], [], []
        start = threading.Barrier(6)

        def race():
            start.wait()
            try:
                with OutputLock(out):
                    holders.append(1)
                    if len(holders) > 1:
                        overlaps.append(trial)
                    wins.append(1)
                    time.sleep(0.02)
                    holders.pop()
            except ValueError as e:
                assert "another run" in str(e)

        threads = [threading.Thread(target=race) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not overlaps and wins, (trial, overlaps, wins)
        assert not Path(str(out) + ".lock").exists()


_RACER = """
import sys, time, os
from pathlib import Path
from wuji_jax.pipeline.store import OutputLock
out, log = Path(sys.argv[1]), sys.argv[2]
while time.time() < float(sys.argv[3]):
    time.sleep(0.001)
try:
    with OutputLock(out):
        with open(log, "a") as f:
            f.write(f"in {os.getpid()}\\n")
        time.sleep(0.3)
        with open(log, "a") as f:
            f.write(f"out {os.getpid()}\\n")
except ValueError:
    pass
"""


def test_stale_lock_takeover_races_between_processes(tmp_path):
    out = tmp_path / "o.parquet"
    _stale_lock(out)
    log = tmp_path / "log"
    go = time.time() + 4.0
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(out), str(log), str(go)]) for _ in range(4)]
    for p in procs:
        assert p.wait(60) == 0
    kinds = log.read_text().split()[0::2]
    assert kinds and kinds.count("in") == kinds.count("out")
    inside = 0
    for e in kinds:
        inside += 1 if e == "in" else -1
        assert inside <= 1, kinds
    assert not Path(str(out) + ".lock").exists()


# ------------------------------------------------------------------------------ 6. small cases


def test_fps_inf_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "take.npz"
    wio.write_landmarks(src, _landmarks(4))
    for v in ("inf", "-inf", "nan", "-3", "0"):
        msg = _error(capsys, 2, ["solve", src, "-o", tmp_path / "o.npz", f"--fps={v}", "--quiet"])
        assert "--fps must be a finite number > 0" in msg and "manifest" not in msg
        msg = _error(capsys, 2, ["inspire", "--angles", _angle_csv(tmp_path / "q.csv"), f"--fps={v}",
                                 "-o", tmp_path / "c.jsonl"])
        assert "--fps must be a finite number > 0" in msg
    from wuji_jax.pipeline.batch import solve_dataset

    with pytest.raises(ValueError, match="fps must be a finite number > 0"):
        solve_dataset(src, tmp_path / "o.npz", fps=float("inf"), progress=False)
    with pytest.raises(ValueError, match="fps must be a finite number > 0"):
        list(wio.iter_chunks(src, fps=float("inf")))


def test_a_cache_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    import jax

    from wuji_jax.runtime.cache import enable_compilation_cache

    monkeypatch.delenv("WUJI_JAX_NO_CACHE", raising=False)
    before = jax.config.jax_compilation_cache_dir
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert enable_compilation_cache(shared) is None
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o770)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert enable_compilation_cache(group) is None
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(theirs).st_uid + 1)
    with pytest.warns(RuntimeWarning, match="owned by another user"):
        assert enable_compilation_cache(theirs) is None
    assert jax.config.jax_compilation_cache_dir == before


def test_a_local_ray_cluster_listens_on_localhost_only():
    from wuji_jax.pipeline.ray_cluster import connect

    import types

    class FakeRay:
        def __init__(self):
            self.kwargs = None
            self._private = types.SimpleNamespace(ray_constants=types.SimpleNamespace(ENABLE_RAY_CLUSTER=True))

        def is_initialized(self):
            return False

        def init(self, address=None, **kwargs):
            # ray.init keeps a loopback node address only with ENABLE_RAY_CLUSTER off
            self.kwargs = dict(kwargs, address=address, cluster=self._private.ray_constants.ENABLE_RAY_CLUSTER)

    ray = FakeRay()
    assert connect(ray, "local", False)
    assert ray.kwargs["_node_ip_address"] == "127.0.0.1" and ray.kwargs["include_dashboard"] is False
    assert ray.kwargs["dashboard_host"] == "127.0.0.1" and ray.kwargs["cluster"] is False
    assert ray._private.ray_constants.ENABLE_RAY_CLUSTER is True  # restored
    ray = FakeRay()
    connect(ray, "10.0.0.1:6379", False)  # joining a cluster: its addresses are its own
    assert "_node_ip_address" not in ray.kwargs


# ------------------------------------------------------------------------------------- 7. SIGINT


def test_sigint_while_compiling_exits_130_and_the_rerun_finishes(tmp_path):
    """Ctrl-C while XLA compiles (a fresh, empty cache folder): exit status 130, one line saying a rerun
    resumes, no abort ("terminate called ... FATAL"); the same command then finishes."""
    src = tmp_path / "take.npz"
    wio.write_landmarks(src, _landmarks(40))
    cache = tmp_path / "cache"
    cmd = [sys.executable, "-m", "wuji_jax", "solve", str(src), "-o", str(tmp_path / "o.npz"), "--no-plot",
           "--chunk-size", "16", "--iterations", "3", "--cache-dir", str(cache)]
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = p.stderr.readline()  # "compiling the solver ..." once the first chunk waits for the program
    assert "compiling" in line, line
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, (p.returncode, err)
    lines = err.strip().splitlines()
    assert "terminate called" not in err and "FATAL" not in err and "Traceback" not in err, err
    assert lines[-1].startswith("wuji-jax: error: interrupted") and "resume" in lines[-1], err
    assert not (tmp_path / "o.npz").exists()
    done = subprocess.run(cmd + ["--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "o.npz")["valid"].shape == (40,)
