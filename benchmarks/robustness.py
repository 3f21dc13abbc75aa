"""Data safety: hostile landmark frames through the solver, malformed files through the CLI.

Run from the repository root (the venv active):

    PYTHONPATH=. python benchmarks/robustness.py                 # 10^6 frames + the file catalogue
    PYTHONPATH=. python benchmarks/robustness.py --quick         # 10^5 frames + the catalogue (re-checks)
    PYTHONPATH=. python benchmarks/robustness.py --skip-files    # part 1 only (--skip-frames: part 2 only)

Options: ``--frames N`` (overrides the count), ``--chunk N`` (frames per ``wj.solve`` call, 65536),
``--only TEXT ...`` (part 2: only the cases whose name holds TEXT), ``--workdir DIR`` (the
catalogue's files, outputs and the compile cache its CLI runs share; default
``$TMPDIR/wuji_jax_robustness``), ``--timeout S`` (per CLI run, 120), ``--seed``.

Results: printed, and written to ``benchmarks/results/robustness_<device>.json`` (``--quick``:
``robustness-quick_<device>.json``; with ``--skip-*`` or ``--only``: ``...-partial_<device>.json``)
with the hardware, versions, date and git commit. Exit status 0 when every check passes, 1
otherwise. On 2 cores the full run takes ~15 minutes: part 1 ~4 min (~4,500 hostile frames/s),
part 2 ~10 min (79 CLI runs of 3-15 s each, plus 120 s for a case that hangs); ``--quick`` ~12 min.

Part 1 -- hostile frames through ``wj.solve`` (the library; default settings, float32,
``check_units=False``, in calls of ``--chunk`` frames, the last padded with missing frames so that
one compilation serves every call). The frames mix the kinds of :data:`KINDS`: real hands
(dexret-retargeting's recording, ``/work/shared/data`` or the bundled sample, randomly rotated,
moved and scaled) as a control, and NaN / inf landmarks (one, many, whole frames), huge coordinates
(1e6 ... 3e38, a 1e30 offset, one 1e30 outlier, float32's maximum), tiny ones (1e-9, 1e-30,
subnormal), zero extent (all landmarks at one point), collinear / planar / mirrored hands, noise,
millimetres, pixels, normalised image coordinates and frames with few landmarks. PASS means:

* 0 frames whose output (angles, rotation, translation, scale, residual) is not finite while
  ``valid`` is True;
* 0 valid frames with an angle outside the joint limits;
* 0 valid frames among the kinds that cannot hold a hand (:data:`MUST_BE_INVALID`: no or too few
  landmarks, zero extent, implausible scale).

Also reported: frames with any non-finite output field or any angle outside the limits (valid or
not), flag counts by ``wuji_jax.ik.FLAG_NAMES``, per-kind counts, wall time; and one call with
the default ``check_units=True`` on real frames with 5 % hostile ones mixed in (it may refuse the
batch with a ``ValueError``; if it solves, the same checks apply).

Part 2 -- a catalogue of malformed files (:func:`catalogue`), each through the CLI in a subprocess
``python -m wuji_jax solve FILE -o OUT --quiet --no-plot`` with ``WUJI_JAX_CACHE_DIR=<workdir>/cache``
(one warm-up run fills the cache first, so no run compiles) and an 8 GiB address-space limit (a
file that made the CLI allocate without bound fails with MemoryError instead of taking the machine).
A case PASSes when

* the exit status is not 0, stderr is exactly one line, starting ``wuji-jax: error:``, that names the
  file (or the offending path), with no ``Traceback`` anywhere, and not the CLI's catch-all
  ``unexpected <Exception>`` (which cli.py reserves for bugs); or
* the exit status is 0, and the case's file holds frames that are individually bad or good (NaN,
  wrong units, zero extent, ...): the written table has one row per frame, no valid row holds a
  non-finite number or an angle outside the limits, and every bad frame is not valid;

and the case's own check holds (an input given as ``-o`` is unchanged, a live run's lock is left
alone, a pickle is never loaded). FAIL: a traceback, a multi-line or unnamed error, exit 0 for a
file that must be refused or with a wrong table, or a run over ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util  # noqa: E402

import wuji_jax as wj  # noqa: E402
from wuji_jax.ik import FLAG_NAMES  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
F32_MAX = float(np.finfo(np.float32).max)

# ---------------------------------------------------------------------------------------- part 1

KINDS = (
    "real", "real_noisy", "gaussian", "all_equal", "all_zero", "near_equal", "collinear", "coplanar",
    "mirrored", "mirrored_scaled", "shuffled", "huge_1e6", "huge_1e19", "huge_1e25", "huge_1e30",
    "huge_3e38", "huge_offset_1e30", "outlier_1e30", "f32_max", "tiny_1e-9", "tiny_1e-30",
    "subnormal_1e-40", "nan_single", "nan_coordinate", "nan_laced", "all_nan_frame", "inf_single",
    "inf_laced", "all_inf_frame", "nan_inf_mixed", "millimetres", "pixels", "normalised_image",
    "one_landmark", "few_landmarks",
)

#: kinds whose frames cannot be a hand in metres: a valid frame among them is a failure
MUST_BE_INVALID = frozenset({
    "all_equal", "all_zero", "near_equal", "huge_1e6", "huge_1e19", "huge_1e25", "huge_1e30", "huge_3e38",
    "huge_offset_1e30", "tiny_1e-9", "tiny_1e-30", "subnormal_1e-40", "all_nan_frame", "all_inf_frame",
    "millimetres", "pixels", "one_landmark", "few_landmarks",
})

#: IKResult fields that must be finite in a valid frame (the others are reported for information)
CHECKED_FIELDS = ("angles", "rotation", "translation", "scale", "residual")
OTHER_FIELDS = ("coupled", "keypoints", "errors", "cost")


def real_frames() -> np.ndarray:
    """(T, 21, 3) float64 metres: dexret-retargeting's recording, else the bundled sample."""
    if _util.DEXRET_RECORDING.exists():
        y = np.load(_util.DEXRET_RECORDING)
    else:
        y = _util.load_recording(_util.bundled_recording())
    y = np.asarray(y, np.float64)
    return y[np.isfinite(y).all(axis=(1, 2))]


def _posed(rng, real, c):
    """c real hands, randomly rotated, moved (N(0, 0.3 m)) and scaled (0.8-1.2)."""
    y = real[rng.integers(0, len(real), c)]
    rot = _util.random_rotations(rng, c)
    return (rng.uniform(0.8, 1.2, (c, 1, 1)) * np.einsum("nij,nkj->nki", rot, y)
            + rng.normal(0, 0.3, (c, 1, 3)))


def _to_magnitude(y, f):
    """y rescaled so its largest coordinate is f."""
    return y / np.abs(y).max(axis=(1, 2), keepdims=True) * f


def _drop(rng, y, frac, value):
    m = rng.random(y.shape[:2]) < frac
    y[m] = value if np.ndim(value) == 0 else value[m]
    return y


def _kind(name, rng, real, c):
    """c frames of kind `name`, float64 (converted to float32 by the caller)."""
    h = _posed(rng, real, c)
    i = np.arange(c)
    if name == "real":
        return h
    if name == "real_noisy":
        return h + rng.normal(0, 0.01, h.shape)
    if name == "gaussian":
        return rng.normal(0, 0.05, h.shape)
    if name == "all_equal":
        return np.repeat(rng.normal(size=(c, 1, 3)), 21, axis=1)
    if name == "all_zero":
        return np.zeros_like(h)
    if name == "near_equal":  # spread 1e-8 m, below the solver's 1 um
        return np.repeat(rng.normal(size=(c, 1, 3)), 21, axis=1) + rng.normal(0, 1e-8, h.shape)
    if name == "collinear":
        return np.linspace(-1, 1, 21)[None, :, None] * rng.normal(0, 0.1, (c, 1, 3)) + rng.normal(0, 0.3, (c, 1, 3))
    if name == "coplanar":  # a real hand flattened onto a random plane
        n = rng.normal(size=(c, 1, 3))
        n /= np.linalg.norm(n, axis=-1, keepdims=True)
        return h - (h * n).sum(-1, keepdims=True) * n
    if name == "mirrored":
        return h * np.array([-1.0, 1.0, 1.0])
    if name == "mirrored_scaled":
        return h * np.array([1.0, -1.0, 1.0]) * rng.uniform(0.1, 10, (c, 1, 1))
    if name == "shuffled":  # landmarks in a random order
        return np.take_along_axis(h, np.argsort(rng.random((c, 21)), axis=1)[..., None], axis=1)
    if name == "huge_1e6":
        return rng.normal(0, 0.05, h.shape) * 1e6
    if name.startswith("huge_") and name[5:].replace("e", "").isdigit():
        return _to_magnitude(h, float(name[5:]))
    if name == "huge_offset_1e30":
        return h + np.sign(rng.normal(size=(c, 1, 3))) * 1e30
    if name == "outlier_1e30":
        h[i, rng.integers(0, 21, c)] = np.sign(rng.normal(size=(c, 3))) * 1e30
        return h
    if name == "f32_max":
        return _drop(rng, h, 0.2, np.sign(rng.normal(size=h.shape)) * F32_MAX)
    if name == "tiny_1e-9":
        return h * 1e-9
    if name == "tiny_1e-30":
        return _to_magnitude(h, 1e-30)
    if name == "subnormal_1e-40":
        return _to_magnitude(h, 1e-40)
    if name == "nan_single":
        h[i, rng.integers(0, 21, c)] = np.nan
        return h
    if name == "nan_coordinate":
        h[i, rng.integers(0, 21, c), rng.integers(0, 3, c)] = np.nan
        return h
    if name == "nan_laced":
        return _drop(rng, h, 0.4, np.nan)
    if name == "all_nan_frame":
        return np.full_like(h, np.nan)
    if name == "inf_single":
        h[i, rng.integers(0, 21, c)] = np.inf
        return h
    if name == "inf_laced":
        return _drop(rng, h, 0.2, np.sign(rng.normal(size=h.shape)) * np.inf)
    if name == "all_inf_frame":
        return np.sign(rng.normal(size=h.shape)) * np.inf
    if name == "nan_inf_mixed":
        return _drop(rng, _drop(rng, h, 0.3, np.nan), 0.3, np.inf)
    if name == "millimetres":
        return h * 1000.0
    if name == "pixels":  # ~3000 px per metre around the centre of a 1920x1080 image
        return h * 3000.0 + np.array([960.0, 540.0, 0.0])
    if name == "normalised_image":  # MediaPipe's image landmarks: x, y in [0, 1], z relative
        return normalised(h)
    if name == "one_landmark":
        out = np.full_like(h, np.nan)
        out[:, 0] = h[:, 0]
        return out
    if name == "few_landmarks":  # 2-7 landmarks (the solver needs 8)
        keep = np.argsort(rng.random((c, 21)), axis=1) < rng.integers(2, 8, (c, 1))
        return np.where(keep[..., None], h, np.nan)
    raise ValueError(name)


def normalised(y, flat_z=False):
    """MediaPipe-style normalised image coordinates of hands ``y`` (metres): x / image width and
    y / height (16:9) of a hand ~15 % of the width across, z on x's scale with the wrist at 0
    (``flat_z``: z squeezed tenfold, a hand facing the camera)."""
    s = 0.8
    out = np.empty_like(y)
    out[..., 0] = 0.5 + s * y[..., 0]
    out[..., 1] = 0.5 + s * 16 / 9 * y[..., 1]
    out[..., 2] = s * (y[..., 2] - y[..., :1, 2]) * (0.1 if flat_z else 1.0)
    return out


def adversarial(n, seed=0, real=None):
    """``(landmarks (n, 21, 3) float32, kind (n,) int)``: frames of the :data:`KINDS`, mixed at random."""
    rng = np.random.default_rng(seed)
    real = real_frames() if real is None else real
    kind = rng.integers(0, len(KINDS), n)
    y = np.empty((n, 21, 3), np.float32)
    with np.errstate(all="ignore"):
        for k, name in enumerate(KINDS):
            m = kind == k
            if m.any():
                y[m] = _kind(name, rng, real, int(m.sum())).astype(np.float32)
    return y, kind


class Tally:
    """Counts over solved frames, overall and per kind."""

    def __init__(self):
        self.total = {}
        self.per_kind = {k: {} for k in KINDS}

    def _add(self, d, key, v):
        d[key] = d.get(key, 0) + int(v)

    def add(self, r, kind, lo, hi):
        valid = np.asarray(r.valid)
        flags = np.asarray(r.flags)
        n = len(valid)
        bad = {f: (~np.isfinite(np.asarray(getattr(r, f), np.float64))).reshape(n, -1).any(1)
               for f in CHECKED_FIELDS + OTHER_FIELDS}
        nonfinite = np.any([bad[f] for f in CHECKED_FIELDS], axis=0)
        nonfinite_any = np.any(list(bad.values()), axis=0)
        a = np.asarray(r.angles)
        outside = ((a < lo) | (a > hi)).any(1)
        rows = {
            "frames": np.ones(n, bool), "valid": valid, "converged": np.asarray(r.converged),
            "nonfinite_and_valid": nonfinite & valid, "outside_limits_and_valid": outside & valid,
            "nonfinite_output": nonfinite, "nonfinite_any_field": nonfinite_any, "outside_limits": outside,
            "flagged": flags != 0,
        }
        for bit, name in FLAG_NAMES.items():
            rows["flag_" + name] = (flags & bit) != 0
        for key, m in rows.items():
            self._add(self.total, key, m.sum())
            for k in np.unique(kind):
                self._add(self.per_kind[KINDS[k]], key, m[kind == k].sum())
        for f in CHECKED_FIELDS + OTHER_FIELDS:
            self._add(self.total, "nonfinite_field_" + f, bad[f].sum())


def solve_frames(hand, n, chunk, seed, real, check_units=False, hostile_fraction=None, tally=None):
    """n hostile frames through wj.solve in calls of `chunk` frames; returns (tally, seconds per call)."""
    lo = np.asarray(hand.lower, np.float32)[None]
    hi = np.asarray(hand.upper, np.float32)[None]
    tally = tally or Tally()
    times = []
    for c, s in enumerate(range(0, n, chunk)):
        m = min(chunk, n - s)
        y, kind = adversarial(m, seed=seed * 100_003 + c, real=real)
        if hostile_fraction is not None:  # real frames, hostile_fraction of them replaced
            rng = np.random.default_rng(seed * 100_003 + c + 7)
            keep = rng.random(m) >= hostile_fraction
            y[keep] = _posed(rng, real, int(keep.sum())).astype(np.float32)
            kind[keep] = KINDS.index("real")
        if m < chunk:  # missing frames as padding: the same compiled program for every call
            y = np.concatenate([y, np.full((chunk - m, 21, 3), np.nan, np.float32)])
        t0 = time.perf_counter()
        r = wj.solve(hand, y, check_units=check_units)
        r = type(r)(*(np.asarray(f)[:m] for f in r))
        times.append(time.perf_counter() - t0)
        tally.add(r, kind, lo, hi)
        print(f"  frames {s + m:>9,}/{n:,}: {times[-1]:6.1f} s", flush=True)
    return tally, times


def part_frames(args, real):
    hand = wj.load_hand("right")
    print(f"part 1: {args.frames:,} hostile frames through wj.solve, {len(KINDS)} kinds, calls of {args.chunk:,}")
    t0 = time.perf_counter()
    tally, times = solve_frames(hand, args.frames, args.chunk, args.seed, real)
    wall = time.perf_counter() - t0
    tot = tally.total
    must = sum(tally.per_kind[k].get("valid", 0) for k in MUST_BE_INVALID)
    checks = {
        "frames_nonfinite_output_but_valid": tot["nonfinite_and_valid"],
        "frames_valid_with_angles_outside_limits": tot["outside_limits_and_valid"],
        "frames_valid_of_kinds_that_must_be_invalid": must,
    }
    out = {
        "frames": args.frames, "chunk": args.chunk, "seed": args.seed, "dtype": "float32",
        "settings": "wj.solve defaults, check_units=False",
        "checks_must_be_0": checks, "pass": not any(checks.values()),
        "wall_seconds": round(wall, 2), "first_call_seconds_incl_compile": round(times[0], 2),
        "frames_per_second_after_first_call": (round((args.frames - min(args.chunk, args.frames)) / sum(times[1:]))
                                               if len(times) > 1 else None),
        "valid": tot["valid"], "flagged": tot["flagged"],
        "flag_counts": {name: tot["flag_" + name] for name in FLAG_NAMES.values()},
        # the old script's figures: any frame, valid or not
        "frames_with_nonfinite_output": tot["nonfinite_output"],
        "frames_with_nonfinite_in_any_field": tot["nonfinite_any_field"],
        "frames_with_angles_outside_limits": tot["outside_limits"],
        "frames_flagged": tot["flagged"],
        "nonfinite_frames_per_field": {f: tot["nonfinite_field_" + f] for f in CHECKED_FIELDS + OTHER_FIELDS},
        "must_be_invalid_kinds": sorted(MUST_BE_INVALID),
        "kinds": {k: {key: v for key, v in d.items()} for k, d in tally.per_kind.items()},
    }
    print(f"  {'kind':<18} {'frames':>7} {'valid':>7} {'nf&valid':>8} {'out&valid':>9}  flags")
    for k in KINDS:
        d = tally.per_kind[k]
        fl = ", ".join(f"{name} {d['flag_' + name]}" for name in FLAG_NAMES.values() if d.get("flag_" + name))
        mark = " <- must be invalid" if k in MUST_BE_INVALID and d.get("valid") else ""
        print(f"  {k:<18} {d.get('frames', 0):>7,} {d.get('valid', 0):>7,} {d.get('nonfinite_and_valid', 0):>8} "
              f"{d.get('outside_limits_and_valid', 0):>9}  {fl}{mark}")
    print(f"  wall {wall:.1f} s (first call {times[0]:.1f} s incl. compilation); valid {tot['valid']:,}, "
          f"flagged {tot['flagged']:,}: " + ", ".join(f"{k} {v:,}" for k, v in out["flag_counts"].items()))
    for k, v in checks.items():
        print(f"  {k}: {v}  (must be 0)")

    # the default check_units=True on real frames with 5 % hostile ones mixed in
    n_mix = min(args.chunk, args.frames)
    mixed = {"frames": n_mix, "hostile_fraction": 0.05, "settings": "wj.solve defaults (check_units=True)"}
    try:
        t = Tally()
        solve_frames(hand, n_mix, args.chunk, args.seed + 1, real, check_units=True, hostile_fraction=0.05, tally=t)
        mixed.update(outcome="solved", valid=t.total["valid"], nonfinite_and_valid=t.total["nonfinite_and_valid"],
                     outside_limits_and_valid=t.total["outside_limits_and_valid"],
                     valid_of_must_be_invalid_kinds=sum(t.per_kind[k].get("valid", 0) for k in MUST_BE_INVALID))
        mixed["pass"] = not (mixed["nonfinite_and_valid"] or mixed["outside_limits_and_valid"]
                             or mixed["valid_of_must_be_invalid_kinds"])
    except ValueError as e:
        mixed.update(outcome="ValueError", message=str(e), pass_=None)
        mixed["pass"] = "\n" not in str(e)
        mixed.pop("pass_")
    print(f"  check_units=True, {n_mix:,} real frames with 5 % hostile: "
          + ", ".join(f"{k}={v}" for k, v in mixed.items() if k not in ("frames", "settings")))
    out["mixed_into_real_check_units"] = mixed
    out["pass"] = out["pass"] and bool(mixed["pass"])
    return out


# ---------------------------------------------------------------------------------------- part 2


class Case:
    """One CLI run: ``inputs`` (strings), ``out``; ``frames``: the rows a successful run must write
    (None: the run must fail); ``bad``: boolean mask (or True: all) of frames that must not be valid;
    ``names``: strings one of which the error must contain; ``post``: a function returning a failure
    text or None after the run; ``cleanup``: run at the end."""

    def __init__(self, name, what, inputs, out, frames=None, bad=None, names=None, post=None, cleanup=None,
                 extra=()):
        self.name, self.what, self.inputs, self.out = name, what, [str(i) for i in inputs], Path(out)
        self.frames, self.bad = frames, bad
        self.names = names if names is not None else [Path(i).name for i in self.inputs]
        self.post, self.cleanup, self.extra = post, cleanup, list(extra)


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _write_npz_bomb(path, frame, frames):
    """An .npz whose landmarks.npy holds `frames` copies of `frame` (float32), streamed through deflate."""
    block = np.ascontiguousarray(np.broadcast_to(frame.astype("<f4"), (100_000, 21, 3))).tobytes()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("landmarks.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_2_0(f, {"descr": "<f4", "fortran_order": False,
                                                     "shape": (frames, 21, 3)})
            for s in range(0, frames, 100_000):
                f.write(block[: min(100_000, frames - s) * 252])


def catalogue(d: Path, real: np.ndarray):
    """Write the malformed files under ``d/files`` and return the :class:`Case` list."""
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = d / "files"
    o = d / "out"
    for p in (f, o):
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir(parents=True)
    rng = np.random.default_rng(1)
    good = real[:200].astype(np.float32)  # 200 real frames, metres
    n = len(good)
    cases = []

    def add(name, what, inputs=None, **kw):
        cases.append(Case(name, what, [f / name] if inputs is None else inputs,
                          kw.pop("out", o / name / "x.parquet"), **kw))

    def write(name, data):
        p = f / name
        p.write_bytes(data) if isinstance(data, bytes) else p.write_text(data)
        return p

    # -------------------------------------------------------------- empty and truncated containers
    for ext in ("csv", "jsonl", "npy", "npz", "parquet", "h5"):
        write(f"empty.{ext}", b"")
        add(f"empty.{ext}", f"zero-byte .{ext}")
    np.save(f / "full.npy", good)
    for ext in ("npy", "npz", "parquet", "h5"):
        wj.io.write_landmarks(f / f"full.{ext}", good)
        raw = (f / f"full.{ext}").read_bytes()
        write(f"truncated.{ext}", raw[: len(raw) // 2])
        add(f"truncated.{ext}", f".{ext} cut at half its bytes")
    with open(f / "lying_header.npy", "wb") as fh:  # declares 10^10 frames, holds one
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (10 ** 10, 21, 3)})
        fh.write(good[0].tobytes())
    add("lying_header.npy", ".npy header declaring more frames than it holds")

    # -------------------------------------------------------------- shapes and dtypes
    np.save(f / "shape_N_20_3.npy", good[:, :20])
    add("shape_N_20_3.npy", "(N, 20, 3)")
    np.save(f / "shape_N_63.npy", good.reshape(n, 63))
    add("shape_N_63.npy", "(N, 63)")
    np.save(f / "shape_21_3.npy", good[0])
    add("shape_21_3.npy", "(21, 3): one frame", frames=1, bad=np.zeros(1, bool))
    np.save(f / "shape_1d.npy", good.reshape(-1))
    add("shape_1d.npy", "1-D array")
    np.save(f / "shape_4d.npy", good[None])
    add("shape_4d.npy", "(1, N, 21, 3)")
    np.save(f / "shape_N_21_0.npy", np.zeros((n, 21, 0), np.float32))
    add("shape_N_21_0.npy", "(N, 21, 0): no coordinates")
    np.save(f / "shape_0_21_3.npy", np.zeros((0, 21, 3), np.float32))
    add("shape_0_21_3.npy", "(0, 21, 3): no frames")
    marker = d / "PICKLE_WAS_LOADED"
    marker.unlink(missing_ok=True)

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    obj = np.empty(3, dtype=object)
    obj[:] = [Evil(), Evil(), Evil()]
    np.save(f / "pickled.npy", obj, allow_pickle=True)
    add("pickled.npy", "object array (pickle that would touch a marker file)",
        post=lambda: "the pickle was loaded (marker file written)" if marker.exists() else None)
    np.savez(f / "pickled.npz", landmarks=obj)
    add("pickled.npz", "npz holding an object array (pickle)",
        post=lambda: "the pickle was loaded (marker file written)" if marker.exists() else None)
    np.save(f / "strings.npy", good.astype(str))
    add("strings.npy", "string dtype (N, 21, 3)")
    np.save(f / "complex.npy", good.astype(np.complex64))
    add("complex.npy", "complex dtype")
    np.save(f / "bool.npy", good > 0)
    add("bool.npy", "bool dtype")
    np.save(f / "structured.npy", np.zeros((n, 21, 3), dtype=[("a", "f4"), ("b", "i4")]))
    add("structured.npy", "structured dtype")
    np.save(f / "big_endian.npy", good.astype(">f8"))
    add("big_endian.npy", "big-endian float64 real frames (a good file)", frames=n, bad=np.zeros(n, bool))
    np.save(f / "float16.npy", good.astype(np.float16))
    add("float16.npy", "float16 real frames (a good file)", frames=n, bad=np.zeros(n, bool))

    # -------------------------------------------------------------- values: NaN, inf, units, extent
    np.save(f / "nan_only.npy", np.full((n, 21, 3), np.nan, np.float32))
    add("nan_only.npy", "every value NaN", frames=n, bad=True)
    np.save(f / "inf_only.npy", np.sign(rng.normal(size=(n, 21, 3))).astype(np.float32) * np.inf)
    add("inf_only.npy", "every value +-inf", frames=n, bad=True)
    np.save(f / "f64_1e300.npy", good.astype(np.float64) * 1e300)
    add("f64_1e300.npy", "float64 values ~1e299 (inf in float32)", frames=n, bad=True)
    np.save(f / "huge_3e38.npy", _to_magnitude(good.astype(np.float64), 3e38).astype(np.float32))
    add("huge_3e38.npy", "coordinates up to 3e38", frames=n, bad=True)
    np.save(f / "tiny_1e-30.npy", _to_magnitude(good.astype(np.float64), 1e-30).astype(np.float32))
    add("tiny_1e-30.npy", "coordinates up to 1e-30", frames=n, bad=True)
    np.save(f / "millimetres.npy", good * 1000)
    add("millimetres.npy", "millimetres", frames=n, bad=True)
    px = good.astype(np.float64) * 3000 + np.array([960, 540, 0])
    np.save(f / "pixels.npy", px.astype(np.float32))
    add("pixels.npy", "pixel coordinates (float)", frames=n, bad=True)
    np.save(f / "pixels_int.npy", px.astype(np.int16))
    add("pixels_int.npy", "pixel coordinates (int16)", frames=n, bad=True)
    np.save(f / "normalised.npy", normalised(good.astype(np.float64)).astype(np.float32))
    add("normalised.npy", "normalised image coordinates (x, y in [0, 1], z with depth, wrist z 0)", frames=n, bad=True)
    np.save(f / "normalised_flat_z.npy", normalised(good.astype(np.float64), flat_z=True).astype(np.float32))
    add("normalised_flat_z.npy", "normalised image coordinates, flat z (hand facing the camera)", frames=n, bad=True)
    np.save(f / "zero_extent.npy", np.repeat(good[:, :1], 21, axis=1))
    add("zero_extent.npy", "every frame's 21 landmarks at one point", frames=n, bad=True)
    np.save(f / "all_zero.npy", np.zeros((n, 21, 3), np.float32))
    add("all_zero.npy", "all zeros", frames=n, bad=True)
    np.save(f / "same_frame.npy", np.repeat(good[:1], 1000, axis=0))
    add("same_frame.npy", "one real frame repeated 1000 times (a good file)", frames=1000, bad=np.zeros(1000, bool))
    mix = good.astype(np.float64).copy()
    bad = np.zeros(n, bool)
    i = np.arange(n)
    sel = {7: "nan", 11: "huge", 13: "equal", 17: "inf", 19: "few"}
    for step, what in sel.items():
        m = (i % step == 3) & ~bad
        bad |= m
        if what == "nan":
            mix[m] = np.nan
        elif what == "huge":
            mix[m] = _to_magnitude(mix[m], 1e30)
        elif what == "equal":
            mix[m] = mix[m][:, :1]
        elif what == "inf":
            mix[m] = np.inf
        else:
            mix[np.ix_(m, np.arange(4, 21))] = np.nan
    np.save(f / "mixed_bad_frames.npy", mix.astype(np.float32))
    add("mixed_bad_frames.npy", f"real frames with {bad.sum()} bad ones (NaN, 1e30, zero extent, inf, 4 landmarks)",
        frames=n, bad=bad)

    # -------------------------------------------------------------- npz / HDF5 bombs and links
    _write_npz_bomb(f / "bomb.npz", good[0], 5_000_000)
    add("bomb.npz", f"npz bomb: 5,000,000 identical frames ({(f / 'bomb.npz').stat().st_size / 1e6:.1f} MB)")
    np.savez(f / "no_arrays.npz")
    add("no_arrays.npz", "npz with no arrays")
    with zipfile.ZipFile(f / "not_npy_member.npz", "w") as z:
        z.writestr("landmarks.npy", b"this is not an npy member")
    add("not_npy_member.npz", "npz whose member is not .npy")
    with h5py.File(f / "sparse_1e9.h5", "w") as h:
        h.create_dataset("landmarks", shape=(10 ** 9, 21, 3), dtype="f4", chunks=(4096, 21, 3))
    add("sparse_1e9.h5", "HDF5 declaring 10^9 frames, never written (sparse)")
    with h5py.File(f / "sparse_5e6.h5", "w") as h:
        h.create_dataset("landmarks", shape=(5_000_000, 21, 3), dtype="f4", chunks=(4096, 21, 3))
    add("sparse_5e6.h5", "HDF5 declaring 5,000,000 frames, never written (under the frame limit)")
    (f / "external.bin").write_bytes(good.tobytes())
    with h5py.File(f / "external.h5", "w") as h:
        h.create_dataset("landmarks", shape=good.shape, dtype="f4", external=[("external.bin", 0, good.nbytes)])
    add("external.h5", "HDF5 with external storage (raw data in another file)")
    wj.io.write_landmarks(f / "target.h5", good)
    with h5py.File(f / "external_link.h5", "w") as h:
        h["landmarks"] = h5py.ExternalLink("target.h5", "/landmarks")
    add("external_link.h5", "HDF5 external link to another file")
    with h5py.File(f / "virtual.h5", "w") as h:
        lay = h5py.VirtualLayout(shape=good.shape, dtype="f4")
        lay[:] = h5py.VirtualSource("target.h5", "landmarks", shape=good.shape)
        h.create_virtual_dataset("landmarks", lay)
    add("virtual.h5", "HDF5 virtual dataset")
    with h5py.File(f / "strings.h5", "w") as h:
        h.create_dataset("landmarks", data=np.array([["a"] * 3] * 21 * 4, dtype="S1").reshape(4, 21, 3))
    add("strings.h5", "HDF5 dataset of strings")

    # -------------------------------------------------------------- CSV
    wj.io.write_landmarks(f / "good.csv", good)
    text = (f / "good.csv").read_text().splitlines()
    header, rows = text[0], text[1:]
    cols = header.split(",")
    write("csv_2mb_field.csv", header + "\n" + "1" * 2_000_000 + "," + ",".join(["0"] * (len(cols) - 1)) + "\n")
    add("csv_2mb_field.csv", "CSV with a 2 MB field")
    write("csv_bad_header.csv", "a,b,c\n" + "\n".join(rows) + "\n")
    add("csv_bad_header.csv", "CSV whose header is a,b,c")
    write("csv_text_cells.csv", header + "\n" + "\n".join(
        ",".join("hello" if j % 5 == 0 else v for j, v in enumerate(r.split(","))) for r in rows) + "\n")
    add("csv_text_cells.csv", "CSV with text cells")
    keep = [j for j, c in enumerate(cols) if c not in ("x5", "y5", "z5")]
    write("csv_missing_columns.csv", "\n".join(",".join(line.split(",")[j] for j in keep) for line in text) + "\n")
    add("csv_missing_columns.csv", "CSV without landmark 5's columns")
    write("csv_ragged.csv", header + "\n" + "\n".join(r.rsplit(",", 7)[0] for r in rows) + "\n")
    add("csv_ragged.csv", "CSV rows shorter than the header")
    write("csv_header_only.csv", header + "\n")
    add("csv_header_only.csv", "CSV with a header and no rows")
    write("csv_binary.csv", bytes(rng.integers(0, 256, 100_000, dtype=np.uint8)))
    add("csv_binary.csv", "random bytes named .csv")
    lines = rows[:3]
    nan_row = ",".join(["nan"] * len(cols))
    ovf_row = ",".join(["1e400"] * len(cols))
    ninf_row = ",".join(["-inf"] * len(cols))
    write("csv_nan_inf_rows.csv", "\n".join([header, nan_row, ovf_row, ninf_row, *lines]) + "\n")
    add("csv_nan_inf_rows.csv", "CSV with rows of nan, 1e400, -inf, then 3 real rows", frames=6,
        bad=np.array([1, 1, 1, 0, 0, 0], bool))

    # -------------------------------------------------------------- JSONL
    write("jsonl_deep.jsonl", "[" * 200_000 + "]" * 200_000 + "\n")
    add("jsonl_deep.jsonl", "JSONL line nested 200,000 deep")
    write("jsonl_not_json.jsonl", "this is not json\n{also not}\n")
    add("jsonl_not_json.jsonl", "JSONL that is not JSON")
    # no line has 'landmarks' / 'world': a file of another schema, not frames without a hand
    def jsonl(name, recs):
        write(name, "".join(json.dumps(r) + "\n" for r in recs))

    jsonl("jsonl_wrong_keys.jsonl", ({"time": k, "points": good[k].tolist()} for k in range(5)))
    add("jsonl_wrong_keys.jsonl", "JSONL objects without 'landmarks'")
    jsonl("jsonl_20_points.jsonl", ({"t": k, "landmarks": good[k, :20].tolist()} for k in range(5)))
    add("jsonl_20_points.jsonl", "JSONL with 20 landmarks a frame")
    jsonl("jsonl_strings.jsonl", ({"t": k, "landmarks": [["a", "b", "c"]] * 21} for k in range(5)))
    add("jsonl_strings.jsonl", "JSONL with strings as coordinates")
    write("jsonl_null_frames.jsonl", "\n".join(json.dumps({"t": k, "landmarks": None if k % 2 else good[k].tolist()})
                                               for k in range(6)) + "\n")
    add("jsonl_null_frames.jsonl", "JSONL with landmarks null in every other frame (no hand)", frames=6,
        bad=np.arange(6) % 2 == 1)

    # -------------------------------------------------------------- Parquet
    pq.write_table(pa.table({"a": np.arange(n), "b": np.ones(n)}), f / "parquet_wrong_schema.parquet")
    add("parquet_wrong_schema.parquet", "Parquet with columns a, b")
    pq.write_table(pa.table({c: pa.array(["x"] * n) for c in cols}), f / "parquet_strings.parquet")
    add("parquet_strings.parquet", "Parquet whose landmark columns hold strings")
    flat = good.reshape(n, 63).astype(np.float64)
    nulls = np.arange(n) % 5 == 0
    pq.write_table(pa.table({c: pa.array(np.where(nulls, np.nan, flat[:, j]), mask=nulls)
                             for j, c in enumerate(cols)}), f / "parquet_null_rows.parquet")
    add("parquet_null_rows.parquet", "Parquet with every fifth row null", frames=n, bad=nulls)

    # -------------------------------------------------------------- paths
    (f / "empty_dir").mkdir()
    add("empty_dir", "an empty folder", inputs=[f / "empty_dir"])
    (f / "text_dir").mkdir()
    (f / "text_dir" / "readme.txt").write_text("no data here\n")
    add("text_dir", "a folder holding only a .txt file", inputs=[f / "text_dir"])
    add("nonexistent.npy", "a path that does not exist", inputs=[f / "does_not_exist.npy"])
    add("glob_nothing", "a glob matching nothing", inputs=[str(f / "nothing_*.npy")],
        names=["nothing_*.npy"])
    write("unknown_ext.txt", "1,2,3\n")
    add("unknown_ext.txt", "a .txt file")
    os.symlink("loop.npy", f / "loop.npy")
    add("loop.npy", "a symlink to itself")
    os.symlink("/dev/zero", f / "dev_zero.csv")
    add("dev_zero.csv", "a symlink to /dev/zero named .csv (endless input)")
    os.mkfifo(f / "fifo.npy")
    add("fifo.npy", "a FIFO named .npy (no writer: reading blocks)")
    write("not_a_video.mp4", bytes(rng.integers(0, 256, 200_000, dtype=np.uint8)))
    add("not_a_video.mp4", "random bytes named .mp4")

    # -------------------------------------------------------------- outputs
    wj.io.write_landmarks(f / "o_is_input.csv", good)
    before = _sha(f / "o_is_input.csv")
    add("o_is_input.csv", "-o equal to the input", out=f / "o_is_input.csv",
        post=lambda: None if _sha(f / "o_is_input.csv") == before else "the input was modified")
    (f / "in_dir").mkdir()
    np.save(f / "in_dir" / "a.npy", good)
    add("o_inside_input_dir", "-o inside the input folder", inputs=[f / "in_dir"], out=f / "in_dir" / "x.parquet",
        names=["in_dir"], post=lambda: "output written into the input folder"
        if (f / "in_dir" / "x.parquet").exists() else None)
    (f / "glob_dir").mkdir()
    np.save(f / "glob_dir" / "a.npy", good)
    add("o_matches_glob", "-o matching the input glob", inputs=[str(f / "glob_dir" / "*")],
        out=f / "glob_dir" / "x.parquet", names=["x.parquet", "glob_dir"])
    np.save(f / "locked.npy", good)
    lock_out = o / "locked" / "x.parquet"
    lock_out.parent.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "1800"])
    lock = lock_out.with_name(lock_out.name + ".lock")
    lock_text = json.dumps({"pid": sleeper.pid, "host": socket.gethostname(),
                            "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    lock.write_text(lock_text)

    def lock_post():
        if not lock.exists() or lock.read_text() != lock_text:
            return "the live run's lock was removed or replaced"
        if lock_out.exists():
            return "the locked output was written"
        return None

    def lock_cleanup():
        sleeper.kill()
        sleeper.wait()

    add("locked_output", "output locked by a live process (sleep)", inputs=[f / "locked.npy"], out=lock_out,
        names=["x.parquet"], post=lock_post, cleanup=lock_cleanup)
    return cases


def run_cli(args_list, env, timeout, cwd, mem_bytes):
    """The CLI in its own session (killed as a group after ``timeout``), its address space limited by
    util-linux's ``prlimit`` where installed (a ``preexec_fn`` would fork this multithreaded process)."""
    cmd = [sys.executable, "-m", "wuji_jax", "solve", *args_list, "--quiet", "--no-plot"]
    if mem_bytes and shutil.which("prlimit"):
        cmd = ["prlimit", f"--as={mem_bytes}", "--", *cmd]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace", start_new_session=True)
    try:
        so, se = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        so, se = p.communicate()
        timed_out = True
    return p.returncode, so, se, time.perf_counter() - t0, timed_out


def judge_table(case, hand):
    """(None when the written table is right for the case, else what is wrong; a one-line summary)."""
    import pyarrow.parquet as pq

    if not case.out.exists():
        return f"exit 0 but no table at {case.out}", "exit 0, no table"
    t = pq.read_table(case.out).to_pandas()
    valid = t["valid"].to_numpy(bool)
    summary = f"exit 0: {len(t)} rows, {int(valid.sum())} valid"
    return _table_problem(case, hand, t, valid), summary


def _table_problem(case, hand, t, valid):
    if case.frames is None:
        return "exit 0 for a file that must be refused"
    if len(t) != case.frames:
        return f"exit 0 with {len(t)} rows for {case.frames} frames"
    num = [c for c in t.columns if c not in ("frame", "timestamp", "source", "side", "valid", "converged", "flags")]
    vals = t[num].to_numpy(np.float64)
    if (~np.isfinite(vals[valid])).any():
        return f"{int((~np.isfinite(vals[valid])).any(1).sum())} valid rows hold non-finite numbers"
    a = t[list(hand.joint_names)].to_numpy(np.float64)
    lo, hi = np.asarray(hand.lower, np.float64), np.asarray(hand.upper, np.float64)
    out = ((a < lo - 1e-6) | (a > hi + 1e-6)).any(1) & valid
    if out.any():
        return f"{int(out.sum())} valid rows with angles outside the limits"
    bad = np.ones(len(t), bool) if case.bad is True else np.asarray(case.bad, bool)
    if (valid & bad).any():
        return f"{int((valid & bad).sum())} of {int(bad.sum())} bad frames are valid"
    return None


def judge(case, rc, so, se, timed_out, timeout, hand):
    """(verdict, why, message): the message is the error line, or the table's summary for exit 0."""
    lines = [ln for ln in se.splitlines() if ln.strip()]
    msg = lines[0] if len(lines) == 1 else " | ".join(lines[-3:]) if lines else so.strip().replace("\n", " | ")
    if timed_out:
        return "FAIL", f"ran over {timeout:g} s (killed)", msg
    if "Traceback" in se or "Traceback" in so:
        return "FAIL", "traceback", msg
    if rc != 0:
        if len(lines) != 1:
            return "FAIL", f"{len(lines)} lines on stderr", msg
        if not lines[0].startswith("wuji-jax: error:"):
            return "FAIL", "stderr does not start 'wuji-jax: error:'", msg
        if "wuji-jax: error: unexpected " in lines[0]:
            return "FAIL", "the CLI's catch-all for bugs ('unexpected <Exception>')", msg
        if not any(nm in lines[0] for nm in case.names):
            return "FAIL", f"the error does not name {' or '.join(case.names)}", msg
        return "PASS", "refused", msg
    why, summary = judge_table(case, hand)
    if lines:
        summary += f" (stderr: {len(lines)} lines: {' | '.join(lines[-2:])})"
    return ("FAIL", why, summary) if why else ("PASS", "solved; bad frames not valid", summary)


def part_files(args, real):
    hand = wj.load_hand("right")
    d = Path(args.workdir).resolve()
    d.mkdir(parents=True, exist_ok=True)
    cache = d / "cache"
    env = {**os.environ, "WUJI_JAX_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("WUJI_JAX_NO_CACHE", None)
    mem = 8 << 30
    print(f"part 2: malformed files through the CLI (workdir {d})")
    t0 = time.perf_counter()
    cases = catalogue(d, real)
    if args.only:
        for c in cases:
            if c.cleanup and not any(t in c.name for t in args.only):
                c.cleanup()
        cases = [c for c in cases if any(t in c.name for t in args.only)]
    build = time.perf_counter() - t0
    # warm-up: a good file fills the compile cache (not judged, longer limit)
    warm_out = d / "out" / "_warmup" / "x.parquet"
    rc, so, se, secs, to = run_cli([str(d / "files" / "full.npy"), "-o", str(warm_out)], env, 900, d, mem)
    print(f"  warm-up (good file, fills the compile cache): rc {rc}, {secs:.1f} s")
    results = []
    t1 = time.perf_counter()
    try:
        for c in cases:
            rc, so, se, secs, timed_out = run_cli([*c.inputs, "-o", str(c.out), *c.extra], env, args.timeout, d, mem)
            verdict, why, msg = judge(c, rc, so, se, timed_out, args.timeout, hand)
            if c.post:
                extra = c.post()
                if extra:
                    verdict, why = "FAIL", extra + ("" if verdict == "PASS" else f"; {why}")
            lines = [ln for ln in se.splitlines() if ln.strip()]
            results.append({"case": c.name, "what": c.what, "rc": rc, "seconds": round(secs, 1),
                            "verdict": verdict, "why": why, "message": msg[:2000], "stderr_lines": len(lines)})
            print(f"  {c.name:<28} rc {str(rc):>4} {secs:5.1f}s {verdict:<4} {msg[:100]}"
                  + ("" if verdict == "PASS" else f"  <- {why}"), flush=True)
    finally:
        for c in cases:
            if c.cleanup:
                c.cleanup()
    n_fail = sum(r["verdict"] != "PASS" for r in results)
    print(f"  {len(results)} cases: {len(results) - n_fail} PASS, {n_fail} FAIL "
          f"({time.perf_counter() - t1:.0f} s, files built in {build:.0f} s)")
    for r in results:
        if r["verdict"] != "PASS":
            print(f"  FAIL {r['case']} ({r['what']}): {r['why']}; rc {r['rc']}: {r['message'][:300]}")
    return {"cases": len(results), "pass": len(results) - n_fail, "fail": n_fail,
            "timeout_seconds": args.timeout, "address_space_limit_bytes": mem,
            "warmup": {"rc": rc, "seconds": round(secs, 1)}, "wall_seconds": round(time.perf_counter() - t1, 1),
            "results": results}


def git_info():
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    dirty = git("status", "--porcelain", "--", "wuji_jax")
    return {"commit": git("rev-parse", "HEAD"),
            "package_files_modified_vs_commit": [ln[3:] for ln in dirty.splitlines()] if dirty else []}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^5 frames (instead of 10^6) and the catalogue")
    ap.add_argument("--frames", type=int, default=None, help="hostile frames (default 10^6, --quick 10^5)")
    ap.add_argument("--chunk", type=int, default=65536, help="frames per wj.solve call")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "wuji_jax_robustness"))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per CLI run")
    ap.add_argument("--skip-frames", action="store_true", help="skip part 1")
    ap.add_argument("--skip-files", action="store_true", help="skip part 2")
    ap.add_argument("--only", nargs="+", metavar="TEXT", help="part 2: only the cases whose name holds one of these")
    args = ap.parse_args(argv)
    if args.frames is None:
        args.frames = 100_000 if args.quick else 1_000_000
    from wuji_jax.runtime.cache import enable_compilation_cache

    enable_compilation_cache(str(Path(args.workdir).resolve() / "cache"))
    real = real_frames()
    out = {"benchmark": "robustness (data safety)", "quick": args.quick,
           "real_frames_source": str(_util.DEXRET_RECORDING if _util.DEXRET_RECORDING.exists()
                                     else _util.bundled_recording()),
           "git": git_info(), "hardware": _util.hardware_info()}
    t0 = time.perf_counter()
    ok = True
    if not args.skip_frames:
        out["solver"] = part_frames(args, real)
        ok &= out["solver"]["pass"]
    if not args.skip_files:
        out["cli_files"] = part_files(args, real)
        ok &= out["cli_files"]["fail"] == 0
    out["total_wall_seconds"] = round(time.perf_counter() - t0, 1)
    out["pass"] = bool(ok)
    out["date"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    print("PASS" if ok else "FAIL")
    name = "robustness" + ("-quick" if args.quick else "") + ("-partial" if args.only or args.skip_frames
                                                                or args.skip_files else "")
    print("written", _util.write_json(name, out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
