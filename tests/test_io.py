"""wuji_jax.data.io: every input format round-trips, bad input gives one line naming the file, results
open in pandas. The catalogue of bad inputs (issue 5) is ``BAD_INPUTS`` below."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from wuji_jax import io
from wuji_jax.data.formats import skip_rows
from wuji_jax.data.formats.parquet import arrow_array

SAMPLES = Path(__file__).resolve().parents[1] / "assets" / "samples"
FORMATS = [".npy", ".npz", ".csv", ".jsonl", ".parquet", ".h5"]


def _hand(n: int = 7, seed: int = 0) -> np.ndarray:
    """A plausible right hand in metres: wrist at the origin, middle MCP ~9 cm away."""
    rng = np.random.default_rng(seed)
    base = np.zeros((21, 3))
    for f in range(5):
        for j in range(4):
            base[1 + 4 * f + j] = [(f - 2) * 0.02, 0.0, -0.04 - 0.025 * (j + 1)]
    base[9] = [0.0, 0.0, -0.09]
    return base + rng.normal(scale=0.002, size=(n, 21, 3))


def _assert_one_line(err: pytest.ExceptionInfo, path) -> None:
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert msg.startswith(str(path)), msg


# ------------------------------------------------------------------------------------------------
# Round trips
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", FORMATS)
def test_round_trip_every_format(tmp_path, ext):
    w = _hand(9)
    w[3] = np.nan  # a missing frame survives, flagged
    t = np.arange(9) / 30.0
    path = io.write_landmarks(tmp_path / f"rec{ext}", w, None if ext == ".npy" else t)
    rec = io.load_landmarks(path)
    assert len(rec) == 9
    np.testing.assert_array_equal(rec.world, w)  # full float64 precision in every format
    assert rec.detected.tolist() == [i != 3 for i in range(9)]
    if ext == ".npy":
        assert np.isnan(rec.timestamps).all()
    else:
        np.testing.assert_array_equal(rec.timestamps, t)
    assert rec.sources == (str(path),)
    assert rec.frame_index.tolist() == list(range(9))
    assert any("1 of 9 frames" in n for n in rec.notes)


@pytest.mark.parametrize("ext", FORMATS)
def test_reading_from_a_frame_on_equals_the_full_read(tmp_path, ext):
    """The dataset runners start a block's read at its frame (npy, npz, HDF5 and Parquet from the row
    group holding it; CSV and JSONL drop the frames before it): same chunks, starts and timestamps."""
    w = _hand(23)
    w[9] = np.nan
    path = io.write_landmarks(tmp_path / f"rec{ext}", w, np.arange(23) / 30.0)
    if ext == ".parquet":  # row groups of 5: the skip lands inside a group, the chunks span groups
        pq = pytest.importorskip("pyarrow.parquet")
        pq.write_table(pq.read_table(path), path, row_group_size=5)
    full = list(io.iter_chunks(path, chunk_size=4))
    for skip in (4, 8, 12, 20):
        got = list(io.source_chunks(path, 4, None, io.MAX_FRAMES, {}, skip))
        want = [c for c in full if c[0] >= skip]
        assert [g[0] for g in got] == [c[0] for c in want], skip
        for (_, a, ta), (_, b, tb) in zip(got, want):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(ta, tb)


def test_skip_rows_recuts_chunks_after_the_dropped_rows():
    chunks = [{"world": np.arange(n0, n1)[:, None, None] * np.ones((1, 21, 3)), "score": np.arange(n0, n1) * 1.0}
              for n0, n1 in ((0, 3), (3, 7), (7, 8), (8, 15))]
    got = list(skip_rows(iter(chunks), 5, 4))
    assert [g["score"].tolist() for g in got] == [[5, 6, 7, 8], [9, 10, 11, 12], [13, 14]]
    assert all(g["world"][:, 0, 0].tolist() == g["score"].tolist() for g in got)
    assert list(skip_rows(iter(chunks), 15, 4)) == []


@pytest.mark.parametrize("ext", [".npz", ".csv", ".jsonl", ".parquet"])
def test_round_trip_keeps_handedness_and_score(tmp_path, ext):
    w = _hand(4)
    hands = np.array(["Right", "Right", "", "Right"])
    score = np.array([0.9, 0.8, np.nan, 0.7])
    path = io.write_landmarks(tmp_path / f"rec{ext}", w, np.arange(4.0), handedness=hands, score=score)
    rec = io.load_landmarks(path)
    assert rec.handedness.tolist() == hands.tolist()
    np.testing.assert_array_equal(rec.score, score)


def test_recording_save_load_keeps_everything(tmp_path):
    rec = io.load_landmarks(SAMPLES / "human_hand_video_landmarks.npz")
    path = rec.save(tmp_path / "again.npz")
    back = io.load_landmarks(path)
    for k in ("world", "image", "timestamps", "detected", "handedness", "score", "frame_index"):
        np.testing.assert_array_equal(getattr(back, k), getattr(rec, k), err_msg=k)
    assert back.fps == rec.fps == 30.0


def test_bundled_sample():
    rec = io.load_landmarks(SAMPLES / "human_hand_video_landmarks.npz")
    assert len(rec) == 621 and rec.num_detected == 621
    assert set(rec.handedness.tolist()) == {"Right"}
    assert rec.image is not None and rec.image.shape == (621, 21, 3)
    np.testing.assert_allclose(np.diff(rec.timestamps), 1 / 30, atol=1e-6)
    size = np.linalg.norm(rec.world[:, 9] - rec.world[:, 0], axis=-1)
    assert 0.06 < size.min() and size.max() < 0.12
    assert io.check_units(rec.world) is None
    assert rec.notes == ()


@pytest.mark.parametrize("ext", FORMATS)
def test_iter_chunks_bounded_and_complete(tmp_path, ext):
    w = _hand(23)
    w[5, 2, 1] = np.inf
    path = io.write_landmarks(tmp_path / f"c{ext}", w, None if ext == ".npy" else np.arange(23.0))
    got = list(io.iter_chunks(path, chunk_size=5))
    assert [s for s, _, _ in got] == [0, 5, 10, 15, 20]
    assert all(len(lm) <= 5 and len(t) == len(lm) for _, lm, t in got)
    lm = np.concatenate([c for _, c, _ in got])
    expect = w.copy()
    expect[5, 2, 1] = np.nan  # inf is never a position: read as missing
    np.testing.assert_array_equal(lm, expect)


def test_iter_chunks_npy_is_memory_mapped(tmp_path, monkeypatch):
    path = io.write_landmarks(tmp_path / "big.npy", _hand(50))
    seen = {}
    real_load = np.load

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(io.np, "load", spy)
    chunks = list(io.iter_chunks(path, chunk_size=16))
    assert seen.get("mmap_mode") == "r"
    assert [len(c) for _, c, _ in chunks] == [16, 16, 16, 2]
    assert all(not isinstance(c, np.memmap) for _, c, _ in chunks)  # private copies


def test_iter_chunks_chains_files(tmp_path):
    a = io.write_landmarks(tmp_path / "a.npy", _hand(3))
    b = io.write_landmarks(tmp_path / "b.csv", _hand(4, seed=1), np.arange(4.0))
    starts = [(s, len(c)) for s, c, _ in io.iter_chunks([a, b], chunk_size=2)]
    assert starts == [(0, 2), (2, 1), (3, 2), (5, 2)]


def test_several_files_globs_and_folders(tmp_path):
    io.write_landmarks(tmp_path / "a.npy", _hand(3))
    io.write_landmarks(tmp_path / "b.csv", _hand(4, seed=1), np.arange(4.0))
    io.write_landmarks(tmp_path / "c.jsonl", _hand(2, seed=2), np.arange(2.0))
    (tmp_path / "notes.txt").write_text("not data")  # ignored inside folders
    folder = io.load_landmarks(tmp_path)
    assert len(folder) == 9
    assert [Path(s).name for s in folder.sources] == ["a.npy", "b.csv", "c.jsonl"]
    assert folder.source_index.tolist() == [0] * 3 + [1] * 4 + [2] * 2
    assert folder.frame_index.tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 1]
    assert [(Path(s).name, sl.start, sl.stop) for s, sl in folder.segments()] == [
        ("a.npy", 0, 3), ("b.csv", 3, 7), ("c.jsonl", 7, 9)]
    globbed = io.load_landmarks(str(tmp_path / "*.csv"))
    assert len(globbed) == 4 and globbed.sources == (str(tmp_path / "b.csv"),)
    listed = io.load_landmarks([tmp_path / "c.jsonl", tmp_path / "a.npy"])
    np.testing.assert_array_equal(listed.world, np.concatenate([_hand(2, seed=2), _hand(3)]))


def test_fps_gives_timestamps_to_sources_without_them(tmp_path):
    path = io.write_landmarks(tmp_path / "a.npy", _hand(4))
    rec = io.load_landmarks(path, fps=20.0)
    np.testing.assert_allclose(rec.timestamps, [0, 0.05, 0.1, 0.15])
    assert rec.fps == 20.0


def test_csv_layout(tmp_path):
    """The documented CSV: header, 63 landmark columns in any order, optional time and frame."""
    w = _hand(2)
    cols = ["frame", "timestamp"] + list(reversed(io.LANDMARK_COLUMNS))
    flat = dict(zip(io.LANDMARK_COLUMNS, w.reshape(2, 63).T))
    lines = [",".join(cols)]
    for i in range(2):
        lines.append(",".join([str(10 + i), str(0.5 * i)] + [repr(float(flat[c][i])) for c in cols[2:]]))
    lines.append(",".join(["12", "1.0"] + [""] * 63))  # a row with empty cells: a missing frame
    path = tmp_path / "wide.csv"
    path.write_text("\n".join(lines) + "\n")
    rec = io.load_landmarks(path)
    np.testing.assert_array_equal(rec.world[:2], w)
    assert rec.frame_index.tolist() == [10, 11, 12]
    assert rec.detected.tolist() == [True, True, False]
    np.testing.assert_array_equal(rec.timestamps, [0.0, 0.5, 1.0])


def test_landmark_columns_named_as_mediapipe_names_them(tmp_path):
    """CSV and Parquet columns may name a landmark by MediaPipe's name or its index, the axis before or
    after it, in any case and with any separator (``WRIST.x``, ``thumb_cmc_y``, ``Z Index Finger Dip``,
    ``x_5``, ``5-y``): read as the x0 ... z20 layout."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wuji_jax.hand.landmarks import LANDMARK_NAMES

    w = _hand(3)
    styles = [lambda n, i, a: f"{n}.{a}", lambda n, i, a: f"{n.lower()}_{a}",
              lambda n, i, a: f"{a.upper()} {n.replace('_', ' ').title()}", lambda n, i, a: f"{a}_{i}",
              lambda n, i, a: f"{i}-{a}"]
    names = {(i, a): styles[i % len(styles)](n, i, a) for i, n in enumerate(LANDMARK_NAMES) for a in "xyz"}
    assert names[(0, "x")] == "WRIST.x" and names[(7, "z")] == "Z Index Finger Dip" and names[(8, "z")] == "z_8"
    cols = {names[(i, a)]: w[:, i, j] for i in range(21) for j, a in enumerate("xyz")}
    csv_path = tmp_path / "named.csv"
    csv_path.write_text(",".join(["t", *cols]) + "\n" + "".join(
        ",".join([str(0.1 * r)] + [repr(float(v[r])) for v in cols.values()]) + "\n" for r in range(3)))
    pq_path = tmp_path / "named.parquet"
    pq.write_table(pa.table({"t": np.arange(3) * 0.1, **cols}), pq_path)
    for path in (csv_path, pq_path):
        rec = io.load_landmarks(path)
        np.testing.assert_array_equal(rec.world, w)
        np.testing.assert_allclose(rec.timestamps, [0.0, 0.1, 0.2])
    # x0 and another spelling of the same column: ambiguous (which is right?), refused naming both
    both = {**{f"{a}{i}": w[:, i, j] for i in range(21) for j, a in enumerate("xyz")}, "WRIST_x": np.full(3, 9.0)}
    pq.write_table(pa.table(both), tmp_path / "both.parquet")
    with pytest.raises(ValueError, match=r"both.parquet: columns 'x0', 'WRIST_x' name the same landmark coordinate"):
        io.load_landmarks(tmp_path / "both.parquet")


def test_mediapipe_world_landmark_names_are_read(tmp_path):
    """npz arrays, HDF5 datasets and JSONL keys named as MediaPipe names world landmarks
    (``world_landmarks``, ``hand_world_landmarks``), JSONL landmarks as ``{"x", "y", "z"}`` objects:
    read as ``landmarks``; their frames are counted ahead from the headers as ``landmarks``' are."""
    import h5py

    from wuji_jax.pipeline.batch import count_frames

    w = _hand(4)
    t = np.arange(4) / 30.0
    np.savez(tmp_path / "a.npz", world_landmarks=w, timestamps=t, other=np.zeros(3))
    with h5py.File(tmp_path / "b.h5", "w") as f:
        f["hand_world_landmarks"] = w
        f["timestamps"] = t
        f["notes"] = np.zeros(2)
    (tmp_path / "c.jsonl").write_text("".join(
        json.dumps({"timestamp": t[i], "world_landmarks": [{"x": x, "y": y, "z": z} for x, y, z in w[i].tolist()]})
        + "\n" for i in range(4)))
    for name in ("a.npz", "b.h5", "c.jsonl"):
        rec = io.load_landmarks(tmp_path / name)
        np.testing.assert_array_equal(rec.world, w)
        np.testing.assert_allclose(rec.timestamps, t)
    assert count_frames(tmp_path / "a.npz") == 4 and count_frames(tmp_path / "b.h5") == 4
    # MediaPipe's hand_landmarks are image coordinates, not these: asked for by name, and said so
    np.savez(tmp_path / "d.npz", hand_landmarks=w, timestamps=t)
    with pytest.raises(ValueError, match="none named 'landmarks' .or 'world', 'world_landmarks'.*normalised image"):
        io.load_landmarks(tmp_path / "d.npz")
    (tmp_path / "e.jsonl").write_text(json.dumps({"t": 0, "hand_landmarks": w[0].tolist()}) + "\n")
    with pytest.raises(ValueError, match="line 1 has no 'landmarks' .*'hand_landmarks' are MediaPipe's normalised"):
        io.load_landmarks(tmp_path / "e.jsonl")


def test_json_list_of_frames(tmp_path):
    """A ``.json`` file: a list of JSONL-like objects, or ``{"frames": [...]}`` of bare landmark lists
    (``null``: no hand); read in chunks like the other formats."""
    w = _hand(5)
    (tmp_path / "a.json").write_text(json.dumps(
        [{"t": i / 30, "landmarks": w[i].tolist(), "handedness": "Right"} for i in range(5)]))
    rec = io.load_landmarks(tmp_path / "a.json")
    np.testing.assert_array_equal(rec.world, w)
    np.testing.assert_allclose(rec.timestamps, np.arange(5) / 30)
    assert rec.handedness.tolist() == ["Right"] * 5
    (tmp_path / "b.json").write_text(json.dumps({"frames": [w[0].tolist(), None, w[2].tolist()]}))
    rec = io.load_landmarks(tmp_path / "b.json")
    np.testing.assert_array_equal(rec.world[[0, 2]], w[[0, 2]])
    assert rec.detected.tolist() == [True, False, True] and np.isnan(rec.world[1]).all()
    chunks = [c for _, c, _ in io.iter_chunks(tmp_path / "a.json", chunk_size=2)]
    assert [len(c) for c in chunks] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate(chunks), w)


def test_a_folder_s_json_files_are_not_inputs(tmp_path):
    """In a folder, .json files are left out (run summaries, settings); named, they are read."""
    w = _hand(3)
    io.write_landmarks(tmp_path / "take.npy", w)
    (tmp_path / "take_summary.json").write_text(json.dumps({"frames": 3, "errors": []}))
    assert io.expand_sources(tmp_path) == [tmp_path / "take.npy"]
    np.testing.assert_array_equal(io.load_landmarks(tmp_path).world, w)
    with pytest.raises(ValueError, match="take_summary.json: "):
        io.load_landmarks(tmp_path / "take_summary.json")


def test_a_json_file_is_read_whole_up_to_a_limit(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text(json.dumps([_hand(1)[0].tolist()] * 3))
    monkeypatch.setattr(io, "MAX_JSON_BYTES", 100)
    with pytest.raises(ValueError, match=r"a\.json: .* read whole .*MAX_JSON_BYTES.*\.jsonl"):
        io.load_landmarks(tmp_path / "a.json")


def test_a_table_of_solved_angles_is_named_as_such(tmp_path):
    """``wuji-jax solve``'s own output given back to it as landmarks (it has ``wrist_x`` … columns,
    which also spell landmark 0): named, with the commands that read it."""
    from wuji_jax.pipeline.batch import output_columns

    cols = output_columns()
    (tmp_path / "angles.csv").write_text(",".join(cols) + "\n" + ",".join(["0"] * len(cols)) + "\n")
    with pytest.raises(ValueError, match="solved joint angles .*, not landmarks; give it to wuji-jax inspire"):
        io.load_landmarks(tmp_path / "angles.csv")


@pytest.mark.parametrize("sep, decimal, ext", [(";", ",", ".csv"), ("\t", ".", ".csv"), ("\t", ".", ".tsv")])
def test_csv_with_semicolons_or_tabs(tmp_path, sep, decimal, ext):
    """A CSV whose header has no comma: ``;`` (as spreadsheets write it where the decimal mark is a
    comma, read too) or tab separated fields; a ``.tsv`` file."""
    w = _hand(3)
    path = tmp_path / f"x{ext}"
    path.write_text(sep.join(["timestamp", *io.LANDMARK_COLUMNS]) + "\n" + "".join(
        sep.join(repr(float(v)).replace(".", decimal) for v in [0.5 * r, *w[r].ravel()]) + "\n" for r in range(3)))
    rec = io.load_landmarks(path)
    np.testing.assert_array_equal(rec.world, w)
    np.testing.assert_array_equal(rec.timestamps, [0.0, 0.5, 1.0])


def test_parquet_column_of_landmark_lists(tmp_path):
    """A Parquet column of lists (as list-valued datasets store it): each row 21 [x, y, z] or 63
    numbers, a null row a frame without a hand; read in chunks; a row of another length is refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    w = _hand(6)
    rows = [w[i].tolist() for i in range(6)]
    rows[3] = None
    pq.write_table(pa.table({"t": np.arange(6) / 30.0, "landmarks": pa.array(rows, pa.list_(pa.list_(pa.float64())))}),
                   tmp_path / "a.parquet", row_group_size=4)
    rec = io.load_landmarks(tmp_path / "a.parquet")
    np.testing.assert_array_equal(rec.world[[0, 1, 2, 4, 5]], w[[0, 1, 2, 4, 5]])
    assert rec.detected.tolist() == [True, True, True, False, True, True]
    np.testing.assert_allclose(rec.timestamps, np.arange(6) / 30.0)
    assert [len(c) for _, c, _ in io.iter_chunks(tmp_path / "a.parquet", chunk_size=4)] == [4, 2]
    flat = pa.array(w.reshape(6, 63).tolist(), pa.list_(pa.float32(), 63))
    pq.write_table(pa.table({"world_landmarks": flat}), tmp_path / "b.parquet")
    np.testing.assert_allclose(io.load_landmarks(tmp_path / "b.parquet").world, w, atol=1e-7)
    pq.write_table(pa.table({"landmarks": pa.array([w[0].tolist(), w[1].tolist()[:20]])}), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match="row 1: column 'landmarks' holds 20 landmarks, expected 21"):
        io.load_landmarks(tmp_path / "c.parquet")
    # a row of a million values (a few kB compressed) is refused from the metadata, before decoding it
    pq.write_table(pa.table({"landmarks": pa.array([np.zeros(10**6)], pa.list_(pa.float64()))}), tmp_path / "d.parquet")
    with pytest.raises(ValueError, match="declares 1,000,000 values for 1 rows, more than 21 × 3 a row"):
        io.load_landmarks(tmp_path / "d.parquet")


def test_jsonl_null_landmarks_is_a_missing_frame(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"t": 0.0, "landmarks": _hand(1)[0].tolist()}) + "\n"
                    + json.dumps({"t": 0.1, "landmarks": None}) + "\n\n")
    rec = io.load_landmarks(path)
    assert len(rec) == 2 and rec.detected.tolist() == [True, False]


def test_single_frame_array_is_one_frame(tmp_path):
    path = tmp_path / "one.npy"
    np.save(path, _hand(1)[0])
    assert len(io.load_landmarks(path)) == 1


def test_mixed_handedness_is_noted_not_fatal(tmp_path):
    a = io.write_landmarks(tmp_path / "a.npz", _hand(3), handedness=["Right", "Left", "Right"])
    b = io.write_landmarks(tmp_path / "b.npz", _hand(2), handedness=["Left", "Left"])
    rec = io.load_landmarks([a, b])
    assert len(rec) == 5 and rec.detected.all()
    assert any(n.startswith(str(a)) and "mixed handedness" in n for n in rec.notes)
    assert any(n.startswith("mixed handedness across sources") for n in rec.notes)


def test_nan_and_inf_frames_are_flagged_not_dropped(tmp_path):
    w = _hand(5)
    w[1, 4, 0] = np.nan
    w[3, 0, 2] = -np.inf
    rec = io.load_landmarks(io.write_landmarks(tmp_path / "x.npy", w))
    assert len(rec) == 5
    assert rec.detected.tolist() == [True, False, True, False, True]
    assert np.isfinite(rec.world[[0, 2, 4]]).all() and np.isnan(rec.world[3, 0, 2])
    assert any("2 of 5 frames" in n and "first at frame 1" in n for n in rec.notes)


# ------------------------------------------------------------------------------------------------
# Bad input: one line naming the file
# ------------------------------------------------------------------------------------------------


def _truncated_npy(p):
    np.save(p, _hand(10))
    p.write_bytes(p.read_bytes()[:-100])


def _truncated_npz(p):
    np.savez(p, landmarks=_hand(10))
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def _csv(text):
    return lambda p: p.write_text(text)


_HEADER = ",".join(io.LANDMARK_COLUMNS)
_ROW = ",".join(["0.01"] * 63)

#: (name, file name, writer, words the message must contain)
BAD_INPUTS = [
    ("empty npy", "x.npy", lambda p: p.write_bytes(b""), "empty"),
    ("empty csv", "x.csv", lambda p: p.write_bytes(b""), "empty"),
    ("empty parquet", "x.parquet", lambda p: p.write_bytes(b""), "empty"),
    ("csv header only", "x.csv", _csv(_HEADER + "\n"), "no frames"),
    ("jsonl blank lines", "x.jsonl", _csv("\n\n"), "no frames"),
    ("zero-frame npy", "x.npy", lambda p: np.save(p, np.zeros((0, 21, 3))), "no frames"),
    ("truncated npy", "x.npy", _truncated_npy, "truncated"),
    ("truncated npz", "x.npz", _truncated_npz, "truncated"),
    ("20 landmarks", "x.npy", lambda p: np.save(p, np.zeros((4, 20, 3))), "(4, 20, 3)"),
    ("flat 63", "x.npy", lambda p: np.save(p, np.zeros((4, 63))), "reshape(-1, 21, 3)"),
    ("json not json", "x.json", _csv("[1, 2"), "not valid JSON"),
    ("json object without frames", "x.json", _csv('{"fps": 30}'), "without 'frames' (keys: fps)"),
    ("json scalar", "x.json", _csv("3"), "a JSON int, expected"),
    ("json frame of wrong shape", "x.json", _csv(json.dumps([[[0, 0, 0]] * 20])), "frame 0: 'landmarks' has shape (20, 3)"),
    ("one row a landmark", "x.csv", _csv("frame,landmark_index,x,y,z\n0,0,0.01,0.02,0.03\n"),
     "pivot it to one row a frame"),
    ("one landmark spelled twice", "x.csv",
     _csv(_HEADER.replace("x0", "WRIST_x") + ",x_wrist\n" + _ROW + ",0.01\n"),
     "'WRIST_x', 'x_wrist' name the same landmark coordinate (x0)"),
    ("coordinates before landmarks", "x.npy", lambda p: np.save(p, np.zeros((4, 3, 21))), "transpose(0, 2, 1)"),
    ("2-D points", "x.npy", lambda p: np.save(p, np.zeros((4, 21, 2))), "expected (N, 21, 3)"),
    ("strings", "x.npy", lambda p: np.save(p, np.full((2, 21, 3), "a")), "not numbers"),
    ("pickled objects", "x.npy", lambda p: np.save(p, np.array([{"a": 1}], dtype=object)), "pickle"),
    ("npz without landmarks", "x.npz", lambda p: np.savez(p, a=np.zeros((2, 21, 3)), b=np.zeros(2)),
     "none named 'landmarks'"),
    ("npz timestamps mismatch", "x.npz",
     lambda p: np.savez(p, landmarks=np.zeros((3, 21, 3)), timestamps=np.zeros(2)), "'timestamps'"),
    ("csv non-numeric", "x.csv", _csv(_HEADER + "\n" + _ROW.replace("0.01", "abc", 1) + "\n"),
     "'abc' is not a number"),
    ("csv without header", "x.csv", _csv(_ROW + "\n" + _ROW + "\n"), "not a header"),
    ("csv missing columns", "x.csv", _csv("x0,y0,z0\n1,2,3\n"), "missing landmark columns"),
    ("csv short row", "x.csv", _csv(_HEADER + "\n" + _ROW + "\n" + "0.01,0.02\n"), "line 3"),
    ("jsonl bad line", "x.jsonl", _csv('{"t": 0, "landmarks": null}\n{"t": 1,\n'), "line 2"),
    ("jsonl truncated", "x.jsonl", _csv('{"t": 0, "landmarks": null}\n{"t": 1, "landm'), "truncated"),
    ("jsonl wrong shape", "x.jsonl", _csv(json.dumps({"t": 0, "landmarks": [[0, 0, 0]] * 20}) + "\n"),
     "(20, 3)"),
    ("jsonl not an object", "x.jsonl", _csv("[1, 2]\n"), "expected an object"),
    ("corrupt parquet", "x.parquet", lambda p: p.write_bytes(b"PAR1 this is not parquet"), "Parquet"),
    ("corrupt hdf5", "x.h5", lambda p: p.write_bytes(b"not hdf5 at all"), "HDF5"),
    ("unsupported extension", "x.xyz", _csv("whatever"), "unsupported extension '.xyz'"),
    ("no extension", "landmarks", _csv("whatever"), "unsupported extension"),
    ("csv timestamps backwards", "x.csv",
     _csv("timestamp," + _HEADER + "\n0.0," + _ROW + "\n0.2," + _ROW + "\n0.1," + _ROW + "\n"),
     "timestamps go backwards at frame 2"),
    ("jsonl timestamps backwards", "x.jsonl",
     _csv('{"t": 1.0, "landmarks": null}\n{"t": 0.5, "landmarks": null}\n'),
     "timestamps go backwards at frame 1"),
    ("npz timestamps backwards", "x.npz",
     lambda p: np.savez(p, landmarks=np.zeros((3, 21, 3)), timestamps=np.array([0.0, 1.0, 0.9])),
     "timestamps go backwards"),
]


@pytest.mark.parametrize("name,filename,make,words", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_one_line_naming_the_file(tmp_path, name, filename, make, words):
    path = tmp_path / filename
    make(path)
    with pytest.raises(ValueError) as err:
        io.load_landmarks(path)
    _assert_one_line(err, path)
    assert words in str(err.value)
    with pytest.raises(ValueError) as err2:  # the streaming reader says the same
        list(io.iter_chunks(path, chunk_size=2))
    assert str(err2.value) == str(err.value)


def test_backwards_time_across_chunks(tmp_path):
    path = io.write_landmarks(tmp_path / "t.csv", _hand(6), [0, 1, 2, 3, 2.5, 4])
    with pytest.raises(ValueError, match="backwards at frame 4"):
        list(io.iter_chunks(path, chunk_size=3))


def test_missing_paths(tmp_path):
    with pytest.raises(ValueError) as err:
        io.load_landmarks(tmp_path / "nope.npy")
    _assert_one_line(err, tmp_path / "nope.npy")
    pattern = str(tmp_path / "*.npy")
    with pytest.raises(ValueError, match="matches no files") as err:
        io.load_landmarks(pattern)
    _assert_one_line(err, pattern)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no landmark files") as err:
        io.load_landmarks(tmp_path / "empty")
    _assert_one_line(err, tmp_path / "empty")


def test_skip_bad_files_and_go_on(tmp_path):
    good = io.write_landmarks(tmp_path / "a.npy", _hand(3))
    bad = tmp_path / "b.npy"
    np.save(bad, np.zeros((3, 20, 3)))
    rec = io.load_landmarks([good, bad], on_error="skip")
    assert len(rec) == 3 and rec.sources == (str(good),)
    assert any(n.startswith(f"skipped {bad}:") and "(3, 20, 3)" in n for n in rec.notes)
    with pytest.raises(ValueError, match="nothing loaded"):
        io.load_landmarks([bad], on_error="skip")


def test_missing_optional_dependency_says_how_to_install(tmp_path, monkeypatch):
    path = io.write_landmarks(tmp_path / "x.parquet", _hand(2))
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ValueError, match=r"wuji-jax\[formats\]") as err:
        io.load_landmarks(path)
    _assert_one_line(err, path)
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ValueError, match=r"wuji-jax\[formats\]"):
        io.write_landmarks(tmp_path / "x.h5", _hand(2))


# ------------------------------------------------------------------------------------------------
# Units
# ------------------------------------------------------------------------------------------------


def test_check_units():
    w = _hand(10)
    assert io.check_units(w) is None
    assert io.check_units(w[0]) is None
    assert "millimetres" in io.check_units(w * 1000)
    assert "centimetres" in io.check_units(w * 100)
    px = w * 4000 + 600
    assert "pixels" in io.check_units(px)
    norm = w.copy()
    norm[..., :2] = 0.5 + norm[..., :2]  # x, y in [0, 1]
    norm[..., 2] -= norm[:, :1, 2]  # wrist z = 0, as in MediaPipe's image landmarks
    assert "normalised image coordinates" in io.check_units(norm)
    assert "check the units" in io.check_units(w / 100)
    assert io.check_units(np.full((3, 21, 3), np.nan)) is None
    scrambled = w.copy()
    scrambled[:, 20] += 1.0
    assert "extent" in io.check_units(scrambled)


def test_units_problem_is_noted_on_load(tmp_path):
    rec = io.load_landmarks(io.write_landmarks(tmp_path / "mm.npy", _hand(4) * 1000))
    assert any(n.startswith(str(tmp_path / "mm.npy")) and "millimetres" in n for n in rec.notes)


# ------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------


def _results(n=5):
    rng = np.random.default_rng(3)
    return {
        "timestamp": np.arange(n) / 30.0,
        "angles": rng.normal(size=(n, 20)),
        "wrist_pose": rng.normal(size=(n, 4, 4)),
        "residual": rng.uniform(size=n),
        "ok": np.array([True, False, True, True, True][:n]),
        "handedness": np.array(["Right"] * n),
        "inspire": rng.uniform(size=(n, 6)),
    }


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_results_open_in_pandas(tmp_path, ext):
    import pandas as pd
    table = _results()
    motors = ["little", "ring", "middle", "index", "thumb_bend", "thumb_rotation"]
    path = io.write_results(tmp_path / f"r{ext}", table, names={"inspire": motors})
    df = pd.read_parquet(path) if ext == ".parquet" else pd.read_csv(path)
    assert len(df) == 5
    assert list(df.columns[:3]) == ["timestamp", "angles_0", "angles_1"]
    assert "angles_19" in df and "wrist_pose_3_3" in df and "thumb_rotation" in df
    np.testing.assert_array_equal(df[[f"angles_{i}" for i in range(20)]].to_numpy(), table["angles"])
    np.testing.assert_array_equal(df["residual"].to_numpy(), table["residual"])
    np.testing.assert_array_equal(df[motors].to_numpy(), table["inspire"])
    assert df["ok"].dtype == bool and df["ok"].tolist() == table["ok"].tolist()
    assert df["handedness"].tolist() == ["Right"] * 5


@pytest.mark.parametrize("ext", [".parquet", ".npz", ".csv"])
def test_results_round_trip(tmp_path, ext):
    table = _results()
    back = io.read_results(io.write_results(tmp_path / f"r{ext}", table))
    for k, v in table.items():
        np.testing.assert_array_equal(back[k], v, err_msg=k)
    assert list(back) == list(table)


def test_results_errors(tmp_path):
    with pytest.raises(ValueError, match="unsupported extension") as err:
        io.write_results(tmp_path / "r.xlsx", {"a": np.zeros(3)})
    _assert_one_line(err, tmp_path / "r.xlsx")
    with pytest.raises(ValueError, match="3 rows, the others 2"):
        io.write_results(tmp_path / "r.csv", {"a": np.zeros(2), "b": np.zeros(3)})
    with pytest.raises(ValueError, match="2 names for 'a'"):
        io.write_results(tmp_path / "r.csv", {"a": np.zeros((2, 3))}, names={"a": ["p", "q"]})


# ------------------------------------------------------------------------------------------------
# Hostile input (the data-safety issue): tiny files that declare huge data, files that point at
# other files, failures that must reach the caller as the one-line ValueError, degenerate frames
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", FORMATS)
def test_max_frames_caps_every_format(tmp_path, ext):
    t = None if ext == ".npy" else np.arange(30.0)
    path = io.write_landmarks(tmp_path / f"x{ext}", _hand(30), t)
    with pytest.raises(ValueError, match=r"limit of 20\b.*max_frames=") as err:
        io.load_landmarks(path, max_frames=20)
    _assert_one_line(err, path)
    with pytest.raises(ValueError, match=r"limit of 20\b.*max_frames=") as err:
        list(io.iter_chunks(path, chunk_size=8, max_frames=20))
    _assert_one_line(err, path)
    if ext not in (".csv", ".jsonl"):  # the count is declared: refused before any frame is read
        assert "declares 30 frames" in str(err.value)
    assert len(io.load_landmarks(path, max_frames=30)) == 30
    assert sum(len(c) for _, c, _ in io.iter_chunks(path, chunk_size=8, max_frames=30)) == 30
    assert io.MAX_FRAMES == 10_000_000  # the default


def test_sparse_hdf5_declaring_huge_counts_is_refused_at_once(tmp_path):
    h5py = pytest.importorskip("h5py")
    billion = tmp_path / "billion.h5"  # 1.4 KB on disk, 504 GB declared, no chunk ever written
    with h5py.File(billion, "w") as f:
        f.create_dataset("landmarks", shape=(10**9, 21, 3), dtype="f8", chunks=(1024, 21, 3))
    assert billion.stat().st_size < 10_000
    with pytest.raises(ValueError, match="1,000,000,000 frames") as err:
        next(io.iter_chunks(billion))
    _assert_one_line(err, billion)
    with pytest.raises(ValueError, match="1,000,000,000 frames"):
        io.load_landmarks(billion)
    fewer = tmp_path / "fewer.h5"  # under MAX_FRAMES, but 100 MB declared over 0 bytes stored
    with h5py.File(fewer, "w") as f:
        f.create_dataset("landmarks", shape=(200_000, 21, 3), dtype="f8", chunks=(1024, 21, 3))
    with pytest.raises(ValueError, match=r"200,000 frames .*stores 0 B") as err:
        next(io.iter_chunks(fewer))
    _assert_one_line(err, fewer)


def test_npz_bomb_is_refused(tmp_path):
    path = tmp_path / "bomb.npz"  # one frame repeated 200,000 times: 100 MB of landmarks in 0.4 MB
    np.savez_compressed(path, landmarks=np.broadcast_to(_hand(1)[0], (200_000, 21, 3)))
    assert path.stat().st_size < 1_000_000
    with pytest.raises(ValueError, match=r"200,000 frames .*-fold") as err:
        next(io.iter_chunks(path))
    _assert_one_line(err, path)


def test_parquet_bomb_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    one = pa.array(np.full(200_000, 0.05))  # run-length encoded: 200,000 rows in a few KB
    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({c: one for c in io.LANDMARK_COLUMNS}), path)
    with pytest.raises(ValueError, match=r"200,000 frames .*-fold") as err:
        next(io.iter_chunks(path))
    _assert_one_line(err, path)


def _h5_external_storage(path):
    import h5py
    raw = path.with_name("elsewhere.bin")
    raw.write_bytes(_hand(4).tobytes())
    with h5py.File(path, "w") as f:
        f.create_dataset("landmarks", shape=(4, 21, 3), dtype="f8", external=[(str(raw), 0, 4 * 63 * 8)])


def _h5_other_file(path):
    import h5py
    other = path.with_name("other.h5")
    with h5py.File(other, "w") as f:
        f["x"] = _hand(4)
    return h5py, other


def _h5_virtual(path):
    h5py, other = _h5_other_file(path)
    layout = h5py.VirtualLayout(shape=(4, 21, 3), dtype="f8")
    layout[:] = h5py.VirtualSource(str(other), "x", shape=(4, 21, 3))
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("landmarks", layout)


def _h5_external_link(path):
    h5py, other = _h5_other_file(path)
    with h5py.File(path, "w") as f:
        f["landmarks"] = h5py.ExternalLink(str(other), "x")


@pytest.mark.parametrize("make,words", [(_h5_external_storage, "external storage"),
                                        (_h5_virtual, "virtual dataset"),
                                        (_h5_external_link, "external link")],
                         ids=["external storage", "virtual", "external link"])
def test_hdf5_data_in_other_files_is_refused(tmp_path, make, words):
    pytest.importorskip("h5py")
    path = tmp_path / "x.h5"
    make(path)
    with pytest.raises(ValueError) as err:
        io.load_landmarks(path)
    _assert_one_line(err, path)
    assert words in str(err.value) and "'landmarks'" in str(err.value)


def test_parquet_is_streamed_by_batches_without_prebuffering(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    w = _hand(30)
    table = {"timestamp": np.arange(30) / 30.0, "comment": ["x" * 100] * 30}
    table.update(zip(io.LANDMARK_COLUMNS, w.reshape(30, 63).T))
    path = tmp_path / "rg.parquet"
    pq.write_table(pa.table(table), path, row_group_size=7)  # 5 row groups
    opened, read = [], []
    real = pq.ParquetFile

    class Spy(real):
        def __init__(self, *args, **kwargs):
            opened.append(kwargs)
            super().__init__(*args, **kwargs)

        def iter_batches(self, *args, **kwargs):
            read.append(kwargs)
            return super().iter_batches(*args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", Spy)
    got = list(io.iter_chunks(path, chunk_size=4))
    assert [s for s, _, _ in got] == list(range(0, 30, 4))
    np.testing.assert_array_equal(np.concatenate([c for _, c, _ in got]), w)
    np.testing.assert_array_equal(np.concatenate([t for _, _, t in got]), table["timestamp"])
    assert opened and all(k.get("pre_buffer") is False and k.get("memory_map") is False for k in opened)
    assert [k["batch_size"] for k in read] == [4]
    assert "comment" not in read[0]["columns"] and len(read[0]["columns"]) == 64


def test_parquet_streaming_reads_values_without_pandas(tmp_path):
    """The streaming reader converts columns from their buffers: ``Array.to_numpy`` imports pandas
    (~50 MiB of RSS). Sliced batches, nulls (NaN), integer columns and dictionary handedness."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    w = _hand(10)
    cols = dict(zip(io.LANDMARK_COLUMNS, w.reshape(10, 63).T))
    cols["x0"] = pa.array([None if i == 3 else v for i, v in enumerate(w[:, 0, 0])], pa.float64())
    cols["y0"] = pa.array(np.arange(10) - 4, pa.int16())
    cols["timestamp"] = np.arange(10) / 30.0
    cols["handedness"] = pa.array(["Right", "Left", None, "Right", "Right"] * 2).dictionary_encode()
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=4)
    code = ("import sys, json, numpy as np\n"
            "from wuji_jax import io\n"
            "rec = io.load_landmarks(sys.argv[1])\n"
            "chunks = list(io.iter_chunks(sys.argv[1], chunk_size=3))\n"
            "print(json.dumps({'pandas': 'pandas' in sys.modules, 'hands': list(map(str, rec.handedness)),\n"
            "  'x0': [None if np.isnan(v) else v for v in rec.world[:, 0, 0].tolist()],\n"
            "  'y0': rec.world[:, 0, 1].tolist(), 'z20': np.concatenate([c[:, 20, 2] for _, c, _ in chunks]).tolist()}))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["pandas"] is False
    assert got["x0"] == [None if i == 3 else float(v) for i, v in enumerate(w[:, 0, 0])]
    assert got["y0"] == [float(i - 4) for i in range(10)]
    assert got["z20"] == w[:, 20, 2].tolist()
    assert got["hands"] == ["Right", "Left", "", "Right", "Right"] * 2


def _long_csv_field(n):
    return lambda p: p.write_text(_HEADER + "\n" + "1" * n + _ROW[4:] + "\n")


def _bad_deflate_npz(p):
    np.savez_compressed(p, landmarks=np.zeros((50, 21, 3)))
    b = bytearray(p.read_bytes())
    name_len, extra_len = int.from_bytes(b[26:28], "little"), int.from_bytes(b[28:30], "little")
    start = 30 + name_len + extra_len  # the first member's deflate stream
    b[start:start + 8] = b"\xff" * 8  # block type 3: invalid
    p.write_bytes(bytes(b))


def _h5_string_timestamps(p):
    import h5py
    with h5py.File(p, "w") as f:
        f["landmarks"] = _hand(3)
        f["timestamps"] = np.array([b"a", b"b", b"c"])


#: content that used to escape as another exception type (csv.Error, RecursionError, zlib.error,
#: UnicodeDecodeError without the path, TypeError, OverflowError, ...)
ESCAPING = [
    ("csv 200 KB field", "x.csv", _long_csv_field(200_000), "line 2"),
    ("csv 2 MB line", "x.csv", _long_csv_field(2_000_000), "line 2 is longer than"),
    ("csv not utf-8", "x.csv", lambda p: p.write_bytes(_HEADER.encode() + b"\n\xff\xfe\x00bad\n"),
     "UTF-8"),
    ("jsonl deep nesting", "x.jsonl",
     _csv('{"t": 0, "landmarks": null}\n{"t": 1, "landmarks": ' + "[" * 10**5 + "]" * 10**5 + "}\n"),
     "line 2"),
    ("jsonl 2 MB line", "x.jsonl", _csv('{"t": 0, "pad": "' + "x" * 2_000_000 + '"}\n'),
     "line 1 is longer than"),
    ("jsonl score object", "x.jsonl", _csv('{"t": 0, "landmarks": null, "score": {}}\n'), "line 1"),
    ("jsonl huge integer", "x.jsonl", _csv(json.dumps({"landmarks": [[10 ** 400, 0, 0]] * 21}) + "\n"),
     "line 1"),
    ("jsonl not utf-8", "x.jsonl", lambda p: p.write_bytes(b'{"t": 0}\n\xff\xfe\n'), "UTF-8"),
    ("npz bad deflate stream", "x.npz", _bad_deflate_npz, "corrupt"),
    ("npz string timestamps", "x.npz",
     lambda p: np.savez(p, landmarks=_hand(2), timestamps=np.array(["a", "b"])), "'timestamps'"),
    ("npz not npy members", "x.npz", lambda p: __import__("zipfile").ZipFile(p, "w").close() or
     __import__("zipfile").ZipFile(p, "w").writestr("readme.txt", "hello"), "readme.txt"),
    ("hdf5 string timestamps", "x.h5", _h5_string_timestamps, "'timestamps'"),
]


@pytest.mark.parametrize("name,filename,make,words", ESCAPING, ids=[b[0] for b in ESCAPING])
def test_malformed_content_is_the_one_line_value_error(tmp_path, name, filename, make, words):
    if filename.endswith(".h5"):
        pytest.importorskip("h5py")
    path = tmp_path / filename
    make(path)
    with pytest.raises(ValueError) as err:
        io.load_landmarks(path)
    _assert_one_line(err, path)
    assert words in str(err.value) and len(str(err.value)) < 500, str(err.value)
    with pytest.raises(ValueError) as err2:
        list(io.iter_chunks(path, chunk_size=2))
    assert str(err2.value) == str(err.value)
    good = io.write_landmarks(tmp_path / "good.npy", _hand(2))
    rec = io.load_landmarks([path, good], on_error="skip")  # the caller can skip the file
    assert len(rec) == 2 and rec.notes[0].startswith(f"skipped {path}:")


def test_degenerate_frames():
    w = _hand(5)
    w[1] = w[1, 0]  # all 21 points at the wrist
    w[2] = 0.0
    w[3, 4] = np.nan  # not finite: flagged elsewhere, not degenerate
    w[4] = w[4] * 1e-3  # a tiny hand still has extent
    assert io.degenerate_frames(w).tolist() == [False, True, True, False, False]
    assert io.degenerate_frames(w[1]).shape == () and io.degenerate_frames(w[1])
    assert io.degenerate_frames(w[:, None]).shape == (5, 1)
    with pytest.raises(ValueError, match="expected"):
        io.degenerate_frames(np.zeros((4, 20, 3)))


def test_check_units_does_not_pass_collapsed_frames():
    w = _hand(10)
    mixed = np.concatenate([w, np.broadcast_to(w[:1, :1], (3, 21, 3))])
    msg = io.check_units(mixed)  # the median of the good frames looks fine: not enough
    assert msg is not None and "3 of 13" in msg and "one point" in msg
    assert "one point" in io.check_units(np.zeros((4, 21, 3)))
    assert "millimetres" in io.check_units(np.concatenate([w * 1000, np.zeros((1, 21, 3))]))
    assert io.check_units(w) is None


def test_degenerate_frames_are_flagged_on_load(tmp_path):
    w = _hand(6)
    w[2] = 0.0
    path = io.write_landmarks(tmp_path / "x.npy", w)
    rec = io.load_landmarks(path)
    assert len(rec) == 6 and rec.detected.tolist() == [True, True, False, True, True, True]
    np.testing.assert_array_equal(rec.world, w)  # kept as they are
    assert any(n.startswith(str(path)) and "one point" in n for n in rec.notes)


def test_max_frames_still_reaches_video_extraction(tmp_path, monkeypatch):
    from wuji_jax import video
    seen = []

    def fake(source, **kwargs):
        seen.append(kwargs)
        n = kwargs.get("max_frames") or 12
        return io.LandmarkRecording(world=_hand(n), timestamps=np.arange(n) / 30.0,
                                    detected=np.ones(n, bool), handedness=np.full(n, "Right"),
                                    score=np.ones(n), fps=30.0)

    monkeypatch.setattr(video, "extract_landmarks", fake)
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"not decoded: extract_landmarks is faked")
    assert len(io.load_landmarks(clip, max_frames=5, progress=False)) == 5  # stops there, as before
    assert seen[-1] == {"max_frames": 5, "progress": False}
    assert len(io.load_landmarks(clip)) == 12 and "max_frames" not in seen[-1]  # cache keys unchanged
    with pytest.raises(ValueError, match="max_frames must be a positive integer"):
        io.load_landmarks(clip, max_frames=0)


def test_arrow_strings_and_parquet_dictionaries(tmp_path):
    """String columns become Arrow strings equal to the input (one value, several, empty); a results
    Parquet file dictionary-encodes its strings and flags only, not its float columns."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    for v in (np.full(5, "take_01.npy"), np.array(["b", "a", "b", "ünï", "a"]), np.zeros(0, "<U1")):
        assert arrow_array(v, pa).to_pylist() == v.tolist()
    n = 1000
    rng = np.random.default_rng(0)
    table = {"source": np.full(n, "a.npy"), "side": np.where(np.arange(n) < 500, "right", "left"),
             "angle": rng.normal(size=n).astype(np.float32), "fit_flags": np.zeros(n, np.int32)}
    io.write_results(tmp_path / "r.parquet", table)
    meta = pq.ParquetFile(tmp_path / "r.parquet").metadata.row_group(0)
    enc = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert any("DICTIONARY" in e for e in enc["source"]) and any("DICTIONARY" in e for e in enc["fit_flags"])
    assert not any("DICTIONARY" in e for e in enc["angle"]), enc["angle"]
    back = pq.read_table(tmp_path / "r.parquet")
    assert back.column("side").to_pylist() == table["side"].tolist()
    np.testing.assert_array_equal(back.column("angle").to_numpy(), table["angle"])
