"""Nothing lost, nothing wrong reported as right: the dataset runner against hostile situations.

Each test reproduces one case that once lost data or reported a wrong table as fine: an output that
is also the input, two runs on one output, non-finite fits, inputs rewritten in place, files whose
reading fails in unusual ways, damaged parts and leftovers of killed runs. Small chunks (64 frames)
and 5 iterations, as in ``test_batch.py``, so the solver compiles once.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import wuji_jax as wj
from wuji_jax import batch
from wuji_jax.cli import main
from wuji_jax.ik import FLAG_DEGENERATE, FLAG_NOT_FINITE

from test_batch import FAST, _Killed, _kill_after, _npy, world  # noqa: F401 (world: a fixture)


def _strict_json(path: Path) -> dict:
    def no_constants(name):
        raise AssertionError(f"{path}: {name} is not JSON")

    return json.loads(path.read_text(), parse_constant=no_constants)


# ----------------------------------------------------------------- 1. outputs never overwrite inputs


@pytest.mark.parametrize("ext", ["npz", "csv"])
def test_output_equal_to_input_is_refused_before_any_work(tmp_path, world, capsys, ext):
    src = tmp_path / f"small.{ext}"
    wj.io.write_landmarks(src, world[:20])
    before = src.read_bytes()
    assert main(["solve", str(src), "-o", str(src), "--quiet", "--no-plot"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "both an input and an output" in err and str(src) in err
    assert src.read_bytes() == before and not Path(str(src) + ".parts").exists()
    with pytest.raises(ValueError, match="both an input and an output"):
        batch.solve_dataset([str(src)], src, **FAST)


def test_output_inside_the_input_folder_or_pattern_is_refused(tmp_path, world):
    folder = tmp_path / "data"
    folder.mkdir()
    _npy(folder / "take.npy", world[:20])
    with pytest.raises(ValueError, match="lies in the input folder"):
        batch.solve_dataset(str(folder), folder / "angles.npz", **FAST)
    with pytest.raises(ValueError, match="matches the input pattern"):
        batch.solve_dataset(str(folder / "*"), folder / "angles.npz", **FAST)
    assert not (folder / "angles.npz").exists()
    # a sibling folder is fine, and a second run does not read its own output
    out = tmp_path / "out" / "angles.npz"
    for _ in range(2):
        assert batch.solve_dataset(str(folder), out, **FAST)["frames"] == 20


def test_output_naming_an_existing_folder(tmp_path, world, capsys):
    src = _npy(tmp_path / "take.npy", world[:20])
    folder = tmp_path / "results"
    folder.mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        batch.solve_dataset(src, folder, **FAST)  # before any solving
    assert main(["solve", src, "-o", str(folder), "--chunk-size", "64", "--iterations", "5", "--quiet",
                 "--no-plot"]) == 0
    assert (folder / "take_angles.parquet").is_file() and not (tmp_path / "results.parquet").exists()


# ------------------------------------------------------------------------------ 2. one run per output


_HOLD = "import sys, time; print('ready', flush=True); time.sleep(60)"


def test_second_run_on_a_locked_output_refuses_naming_the_first(tmp_path, world):
    src = _npy(tmp_path / "take.npy", world[:20])
    out = tmp_path / "o.parquet"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        lock = tmp_path / "o.parquet.lock"
        import socket

        lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "started": "earlier"}))
        with pytest.raises(ValueError, match=f"another run \\(PID {holder.pid} on "):
            batch.solve_dataset(src, out, **FAST)
        assert not out.exists() and not Path(str(out) + ".parts").exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    # the holder is gone: its lock is stale and taken over; the lock is released at the end
    assert batch.solve_dataset(src, out, **FAST)["frames"] == 20
    assert not (tmp_path / "o.parquet.lock").exists()


def test_a_part_from_another_run_is_not_used(tmp_path, world, monkeypatch):
    src = _npy(tmp_path / "take.npy", world[:200])
    ref = tmp_path / "ref.npz"
    batch.solve_dataset(src, ref, **FAST)
    out = tmp_path / "run.npz"
    _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(src, out, **FAST)
    monkeypatch.undo()
    # another run's part (a left hand on the same frames) put where this run's second part lies
    other = tmp_path / "other.npz"
    _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(src, other, side="left", **FAST)
    monkeypatch.undo()
    name = "chunk_000000000064.npz"
    os.replace(Path(str(other) + ".parts") / name, Path(str(out) + ".parts") / name)
    s = batch.solve_dataset(src, out, **FAST)
    assert s["resumed_frames"] == 64 and any("not from this run" in n for n in s["notes"])
    a, b = wj.io.read_results(ref), wj.io.read_results(out)
    assert set(b["side"]) == {"right"}
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ---------------------------------------------------------------------- 3. non-finite fits are flagged


def test_huge_coordinates_are_flagged_not_finite_and_the_summary_is_strict_json(tmp_path, world):
    a = world[:100].copy()
    a[5] *= 1e25
    a[50] = a[50] * 1e30 + 1e30
    a[70] = a[70, :1]  # every landmark at one point
    out = tmp_path / "o.parquet"
    s = batch.solve_dataset(_npy(tmp_path / "huge.npy", a), out, **FAST)
    df = pd.read_parquet(out)
    hand = wj.load_hand("right")
    angles = df[list(hand.joint_names)].to_numpy()
    for i in (5, 50, 70):
        assert df["fit_flags"][i] != 0, (i, df["fit_flags"][i])
    assert df["fit_flags"][70] & FLAG_DEGENERATE and not df["valid"][70]
    # nothing non-finite is reported as valid, and the valid rows are all finite
    numeric = df.drop(columns="timestamp").select_dtypes("number").to_numpy()  # no timestamps: NaN
    assert np.isfinite(numeric[df["valid"].to_numpy()]).all()
    assert np.isfinite(angles).all()
    summary = _strict_json(tmp_path / "o_summary.json")
    assert summary["flagged"] == int((df["fit_flags"] != 0).sum()) >= 3
    counts = summary["flag_counts"]
    assert set(counts) >= {"not_finite", "degenerate", "too_few_landmarks", "bad_scale", "high_residual"}
    assert counts["degenerate"] == int((df["fit_flags"] & FLAG_DEGENERATE != 0).sum()) == 1
    assert counts["not_finite"] == int((df["fit_flags"] & FLAG_NOT_FINITE != 0).sum())
    assert np.isfinite(summary["residual_mm_mean"]) and summary["residual_mm_mean"] < 30


def test_a_file_of_identical_frames_is_reported_not_solved(tmp_path, world):
    still = _npy(tmp_path / "still.npy", np.broadcast_to(world[:1], (300, 21, 3)))  # one hand, repeated
    flat = _npy(tmp_path / "flat.npy", np.broadcast_to(world[0, :1], (300, 21, 3)))  # one point per frame
    assert batch.solve_dataset(still, tmp_path / "a.npz", **FAST)["frames"] == 300  # a still hand is fine
    with pytest.raises(ValueError, match=r"flat\.npy: .*zero extent"):
        batch.solve_dataset(flat, tmp_path / "b.npz", **FAST)


# -------------------------------------------------------------------- 7. resume checks the content


def test_input_rewritten_in_place_with_same_size_and_time_starts_over(tmp_path, world, monkeypatch):
    src = tmp_path / "take.npy"
    _npy(src, world[:200])
    st = src.stat()
    out = tmp_path / "run.parquet"
    _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(str(src), out, **FAST)
    monkeypatch.undo()
    _npy(src, world[200:400])  # same shape: same size
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.stat().st_size == st.st_size and src.stat().st_mtime_ns == st.st_mtime_ns
    s = batch.solve_dataset(str(src), out, **FAST)
    assert s["resumed_frames"] == 0 and any("started over" in n for n in s["notes"])
    ref = tmp_path / "ref.parquet"
    batch.solve_dataset(str(src), ref, **FAST)
    assert out.read_bytes() == ref.read_bytes()


def test_resume_identity_holds_the_content_hash_and_device_count(tmp_path, world, monkeypatch):
    src = _npy(tmp_path / "take.npy", world[:100])
    out = tmp_path / "run.npz"
    _kill_after(monkeypatch, 1)
    with pytest.raises(_Killed):
        batch.solve_dataset(src, out, **FAST)
    monkeypatch.undo()
    ident = json.loads((Path(str(out) + ".parts") / "manifest.json").read_text())["identity"]
    import hashlib

    assert ident["inputs"][0]["sha256"] == hashlib.sha256(Path(src).read_bytes()).hexdigest()
    assert ident["devices"][1] == len(__import__("jax").local_devices())


# ------------------------------------------------------------------ 8. --on-error skip skips any file


def test_on_error_skip_skips_files_that_fail_in_unusual_ways(tmp_path, world, capsys):
    good = _npy(tmp_path / "good.npy", world[:70])
    cols = ",".join(wj.io.LANDMARK_COLUMNS)
    row = ",".join(repr(float(v)) for v in world[0].reshape(-1))
    big = tmp_path / "bigfield.csv"
    big.write_text(cols + "\n" + row + "\n" + "1" * 300_000 + "," + row.split(",", 1)[1] + "\n")
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    out = tmp_path / "o.parquet"
    rc = main(["solve", good, str(big), str(deep), "-o", str(out), "--chunk-size", "64", "--iterations", "5",
               "--quiet", "--no-plot", "--on-error", "skip"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 2, err
    assert str(big) in err[0] and str(deep) in err[1] and all("Traceback" not in e for e in err)
    df = pd.read_parquet(out)
    assert len(df) == 70 and set(df["source"]) == {good}
    summary = _strict_json(tmp_path / "o_summary.json")
    assert len(summary["errors"]) == 2


# ------------------------------------------------------- 9. leftovers of killed runs, damaged parts


def test_temporaries_of_a_killed_assembly_are_removed(tmp_path, world):
    src = _npy(tmp_path / "take.npy", world[:30])
    out = tmp_path / "o.parquet"
    left = [tmp_path / ".o.parquet.99999.tmp.parquet", tmp_path / "o_summary.json.99999.tmp"]
    for p in left:
        p.write_bytes(b"half")
    batch.solve_dataset(src, out, **FAST)
    assert not any(p.exists() for p in left)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.parquet", "o_summary.json", "take.npy"]


def test_a_truncated_part_is_solved_again(tmp_path, world, monkeypatch):
    src = _npy(tmp_path / "take.npy", world[:200])
    ref = tmp_path / "ref.csv"
    batch.solve_dataset(src, ref, **FAST)
    out = tmp_path / "run.csv"
    _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(src, out, **FAST)
    monkeypatch.undo()
    part = Path(str(out) + ".parts") / "chunk_000000000000.npz"
    part.write_bytes(part.read_bytes()[:300])
    s = batch.solve_dataset(src, out, **FAST)
    assert s["resumed_frames"] == 64 and any("damaged" in n for n in s["notes"])
    assert out.read_bytes() == ref.read_bytes()


# ---------------------------------------------------------------------- 5. bounded work per file


def test_max_frames_limits_each_file_at_the_cli(tmp_path, world, capsys):
    src = _npy(tmp_path / "long.npy", world[:30])
    out = tmp_path / "o.parquet"
    # the module's solver settings throughout: a run that fails still starts making its program (in a
    # thread, before it reads a frame), so that other settings would compile one no run here uses
    assert main(["solve", src, "-o", str(out), "--max-frames", "10", "--chunk-size", "64", "--iterations", "5",
                 "--quiet", "--no-plot"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "long.npy" in err and "--max-frames" in err
    assert not out.exists() and not Path(str(out) + ".parts").exists()
    assert main(["solve", src, "-o", str(out), "--max-frames", "0"]) == 2
    capsys.readouterr()
    assert main(["solve", src, "-o", str(out), "--max-frames", "30", "--chunk-size", "64", "--iterations", "5",
                 "--quiet", "--no-plot"]) == 0
    assert len(pd.read_parquet(out)) == 30


def test_unit_errors_name_an_option_that_exists(tmp_path, world, capsys):
    mm = _npy(tmp_path / "mm.npy", world[:20] * 1000)
    out = tmp_path / "o.parquet"
    assert main(["solve", mm, "-o", str(out), "--chunk-size", "64", "--iterations", "5", "--quiet",
                 "--no-plot"]) == 1  # the settings of the run below: no program made for nothing
    err = capsys.readouterr().err.strip()
    assert "millimetres" in err and "--no-unit-check" in err and err.count("\n") == 0
    assert main(["solve", mm, "-o", str(out), "--no-unit-check", "--chunk-size", "64", "--iterations", "5",
                 "--quiet", "--no-plot"]) == 0
    df = pd.read_parquet(out)
    assert len(df) == 20 and not df["valid"].any() and (df["fit_flags"] != 0).all()  # solved, flagged


# ------------------------------------------------------------ odd files found by benchmarks/robustness.py


def test_fifo_symlink_loop_and_foreign_jsonl_are_one_line_errors(tmp_path, capsys):
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)  # reading it would block for ever
    loop = tmp_path / "loop.npy"
    loop.symlink_to(loop)
    foreign = tmp_path / "other_schema.jsonl"
    foreign.write_text('{"time": 0.0, "points": [1, 2, 3]}\n')
    for path, words in ((fifo, "not a regular file"), (loop, "no such file"), (foreign, "no 'landmarks'")):
        assert main(["solve", str(path), "-o", str(tmp_path / "o.parquet"), "--chunk-size", "64", "--iterations",
                     "5", "--quiet", "--no-plot"]) == 1  # the module's solver settings (its one program)
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(path) in err and words in err, err


def test_normalised_image_coordinates_with_depth_are_named(world):
    from wuji_jax.hand.landmarks import unit_problem

    img = world[:50, :, :].copy()  # a hand-shaped cloud moved into [0, 1] with depth relative to the wrist
    img[..., :2] = 0.5 + img[..., :2]
    img[..., 2] = (img[..., 2] - img[:, :1, 2]) * 0.8
    assert "normalised image coordinates" in unit_problem(img)


def test_float64_beyond_float32_is_flagged_without_warnings(tmp_path, world):
    a = world[:20] * 1e300  # every warning is an error in this suite (pyproject filterwarnings)
    s = batch.solve_dataset(_npy(tmp_path / "e300.npy", a), tmp_path / "o.parquet", check_units=False, **FAST)
    assert s["frames"] == 20 and s["valid"] == 0
