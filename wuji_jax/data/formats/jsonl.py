"""JSON landmark files: ``.jsonl`` / ``.ndjson`` (one object a line, streamed) and ``.json`` (a list of
frames, parsed whole up to ``limits.max_json_bytes``).

A frame is ``{"t": seconds, "landmarks": [[x, y, z]] * 21}`` (``"landmarks": null``: no hand; the key
may be one of :data:`~.columns.LANDMARK_KEYS`; a landmark may be ``{"x": .., "y": .., "z": ..}``),
optionally ``"handedness"`` and ``"score"``. Python's ``json`` (its C scanner) parses each line: a
line's error names the line, and an object holding a key twice is refused
(:func:`~.columns.unique_keys`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterator

import numpy as np

from ...hand.landmarks import NUM_LANDMARKS
from ..limits import Limits, Lines, err, is_ours, too_many, why
from .columns import KEYS_SAID, LANDMARK_KEYS, hand_label, image_keys_hint, unique_keys

__all__ = ["read_jsonl", "read_json", "Records", "jsonl_record", "add_record"]


class Records:
    """Frames gathered from JSON records (:func:`_add_record`) until a chunk is full."""

    def __init__(self):
        self.world: list = []
        self.extra: dict[str, list] = {"timestamps": [], "handedness": [], "score": []}
        self.have: set = set()

    def __len__(self) -> int:
        return len(self.world)

    def flush(self) -> dict:
        out = {"world": np.asarray(self.world, np.float64).reshape(-1, NUM_LANDMARKS, 3)}
        for k in self.have:
            out[k] = np.asarray(self.extra[k], dtype=str if k == "handedness" else np.float64)
        for v in self.extra.values():
            v.clear()
        self.world.clear()
        return out


def read_jsonl(path: Path, chunk: int, limits: Limits) -> Iterator[dict]:
    frames = Records()
    total = 0

    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(Lines(f, path, limits.max_line_chars), 1):
            if not line.strip():
                continue
            total += 1
            if limits.max_frames is not None and total > limits.max_frames:
                raise too_many(path, limits.max_frames, f"line {line_no}")
            try:
                jsonl_record(path, line_no, line, frames)
            except ValueError as e:
                if is_ours(e, path):
                    raise
                raise err(path, f"line {line_no}: unreadable record ({why(e)})") from None
            except RecursionError:
                raise err(path, f"line {line_no}: JSON nested too deeply; each line must be one "
                                '{"t": seconds, "landmarks": [[x, y, z], ...21]} object') from None
            except Exception as e:  # TypeError, OverflowError, ... from odd values
                raise err(path, f"line {line_no}: unreadable record ({why(e)}); expected "
                                '{"t": seconds, "landmarks": [[x, y, z], ...21]}') from None
            if len(frames) >= chunk:
                yield frames.flush()
    if len(frames):
        yield frames.flush()


def read_json(path: Path, chunk: int, limits: Limits) -> Iterator[dict]:
    """A ``.json`` file, parsed whole (at most ``limits.max_json_bytes``): a list of frames, or an object
    whose ``"frames"`` is that list; a frame is a JSONL line's object, or just its landmarks
    (``[[x, y, z]] * 21``, ``null`` for no hand)."""
    size = path.stat().st_size
    if size > limits.max_json_bytes:
        raise err(path, f"{size / 2**20:,.0f} MB of JSON, which is read whole (at most "
                        f"{limits.max_json_bytes >> 20} MB: wuji_jax.io.MAX_JSON_BYTES); write one frame a line "
                        "instead (.jsonl), which is streamed")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f, object_pairs_hook=unique_keys(path))
    except json.JSONDecodeError as e:
        raise err(path, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); export it "
                        "again") from None
    except RecursionError:
        raise err(path, "JSON nested too deeply; expected a list of frames") from None
    what = '[{"t": seconds, "landmarks": [[x, y, z], ...21]}, ...] or {"frames": [...]}'
    if isinstance(doc, dict):
        if "frames" not in doc:
            keys = ", ".join(list(map(str, doc))[:6]) or "none"
            raise err(path, f"a JSON object without 'frames' (keys: {keys}); expected {what}")
        doc = doc["frames"]
    if not isinstance(doc, list):
        raise err(path, f"a JSON {type(doc).__name__}, expected {what}")
    if limits.max_frames is not None and len(doc) > limits.max_frames:
        raise too_many(path, limits.max_frames, "its list of frames")
    frames = Records()
    for i, rec in enumerate(doc):
        add_record(path, f"frame {i}", rec if isinstance(rec, dict) else {"landmarks": rec}, frames)
        if len(frames) >= chunk:
            yield frames.flush()
    if len(frames):
        yield frames.flush()


def jsonl_record(path: Path, line_no: int, line: str, frames: Records) -> None:
    """Parse one JSONL line and add its frame to ``frames``."""
    try:
        rec = json.loads(line, object_pairs_hook=unique_keys(path, f"line {line_no}"))
    except json.JSONDecodeError as e:
        last = not line.endswith("\n")
        hint = "the file looks truncated" if last else "each line must be one JSON object"
        raise err(path, f"line {line_no} is not valid JSON ({e.msg}); {hint}") from None
    if not isinstance(rec, dict):
        raise err(path, f"line {line_no} is a JSON {type(rec).__name__}, expected an object "
                        '{"t": seconds, "landmarks": [[x, y, z], ...21]}')
    add_record(path, f"line {line_no}", rec, frames)


def add_record(path: Path, where: str, rec: dict, frames: Records) -> None:
    """Add the frame of one JSON object (``where``: its line or frame, for errors) to ``frames``."""
    name = next((k for k in LANDMARK_KEYS if k in rec), None)
    if name is None:  # another schema, not a frame without a hand
        keys = ", ".join(list(map(str, rec))[:6]) or "none"
        raise err(path, f"{where} has no {KEYS_SAID} key (keys: {keys}){image_keys_hint(rec)}; expected "
                        '{"t": seconds, "landmarks": [[x, y, z], ...21]}, with "landmarks": null for no hand')
    lm = rec[name]
    if lm is None:
        a = np.full((NUM_LANDMARKS, 3), np.nan)
    else:
        if isinstance(lm, list) and lm and all(isinstance(p, dict) for p in lm):  # [{"x": .., "y": .., "z": ..}]
            lm = [[p.get("x"), p.get("y"), p.get("z")] for p in lm]
        try:
            a = np.asarray(lm, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            raise err(path, f"{where}: '{name}' is not a list of numbers; expected "
                            '21 [x, y, z] triples (or {"x": .., "y": .., "z": ..} objects)') from None
        if a.shape == (3 * NUM_LANDMARKS,):
            a = a.reshape(NUM_LANDMARKS, 3)
        if a.shape != (NUM_LANDMARKS, 3):
            raise err(path, f"{where}: '{name}' has shape {a.shape}, expected (21, 3)")
    t = rec.get("t", rec.get("timestamp"))
    try:
        t = math.nan if t is None else float(t)
    except (TypeError, ValueError, OverflowError):
        raise err(path, f"{where}: timestamp {str(t)[:20]!r} is not a number of "
                        "seconds") from None
    sc = rec.get("score")
    try:
        sc = math.nan if sc is None else float(sc)
    except (TypeError, ValueError, OverflowError):
        raise err(path, f"{where}: score {str(sc)[:20]!r} is not a number") from None
    # appended together, once the whole record is known to be good
    frames.world.append(a)
    if rec.get("t", rec.get("timestamp")) is not None:
        frames.have.add("timestamps")
    frames.extra["timestamps"].append(t)
    if "handedness" in rec:
        frames.have.add("handedness")
    frames.extra["handedness"].append(hand_label(rec.get("handedness")))
    if rec.get("score") is not None:
        frames.have.add("score")
    frames.extra["score"].append(sc)
